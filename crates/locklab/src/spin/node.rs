//! The queue node shared by the MCS lock, the queued spinlock and the queued rwlock: one per waiting
//! thread (kept in the thread's slot, `crate::thread_slot`, or on the heap). Its own module, so that
//! the thread slots (which hold nodes) and the locks (which find nodes through the slots) do not
//! import each other.

use crate::primitive::{AtomicBool, AtomicPtr, Ordering, SpinWait};
use core::ptr;

/// A queue node, in a thread's slot (or the heap): a contended acquisition of an MCS lock, or a
/// waiter of the queued spinlock.
#[repr(align(64))]
pub(crate) struct McsNode {
    pub(crate) next: AtomicPtr<McsNode>,
    pub(crate) locked: AtomicBool,
}

impl McsNode {
    crate::primitive::const_unless_loom! {
        /// A fresh node.
        pub(crate) fn new() -> Self {
            McsNode {
                next: AtomicPtr::new(ptr::null_mut()),
                locked: AtomicBool::new(false),
            }
        }
    }

    /// Resets the node before it is queued (Relaxed: published by the queueing swap).
    #[inline]
    pub(crate) fn reset(&self) {
        self.next.store(ptr::null_mut(), Ordering::Relaxed);
        self.locked.store(false, Ordering::Relaxed);
    }

    /// Spins until a predecessor hands us the lock.
    #[inline]
    pub(crate) fn wait_locked(&self) {
        let mut wait = SpinWait::new();
        // Acquire pairs with the Release store of `locked` by the predecessor.
        while !self.locked.load(Ordering::Acquire) {
            wait.wait();
        }
    }

    /// Waits for a successor that is linking in, and returns it.
    #[inline]
    pub(crate) fn wait_next(&self) -> &McsNode {
        // SAFETY: the successor's node stays queued (so alive) until we set its `locked` flag
        // (invariant 3).
        unsafe { &*wait_link(&self.next) }
    }
}

/// Waits until the successor that swapped the tail away from us has stored its link in `link` (a
/// node's `next`, or the lock's own for a `HELD` holder), and returns it.
#[cold]
pub(crate) fn wait_link(link: &AtomicPtr<McsNode>) -> *mut McsNode {
    let mut wait = SpinWait::new();
    loop {
        // Acquire pairs with the linker's Release store (its node's initialisation comes with it).
        let next = link.load(Ordering::Acquire);
        if !next.is_null() {
            return next;
        }
        wait.wait();
    }
}
