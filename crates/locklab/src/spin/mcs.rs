//! MCS queue lock (Mellor-Crummey and Scott, 1991): FIFO, and each waiter spins on its own cache line.
//!
//! # Algorithm
//! The lock is a pointer to the *last* node of a queue of waiters; the holder's node is at the head.
//! - Lock: initialise my node, `swap` it into `tail`. Old tail null: the lock is mine. Else link myself
//!   behind the old tail (`prev.next = me`) and spin on my own `locked` flag.
//! - Unlock: if I have no successor, `cas(tail: me -> null)` frees the lock. If that fails a successor is
//!   linking in: wait for `me.next`, then `next.locked = true` hands the lock over.
//!
//! `lock_api`'s `lock()` takes no node, so nodes come from the calling thread's slot
//! ([`crate::thread_slot`]): [`MCS_LEVELS`] of them, so one thread can hold several MCS locks at once and
//! release them in any order (the guard remembers its node). Deeper nesting, or a thread with no slot,
//! uses a heap node for that acquisition.
//!
//! # Properties
//! Strict FIFO. One cache-line transfer per hand-over (the successor's flag), unlike the ticket lock where
//! every waiter's copy is invalidated. A preempted waiter stalls its successors; waiters yield the CPU
//! after [`SpinWait::SPINS`] steps (never their place in the queue).
//!
//! # State
//! | `tail`        | meaning                                    |
//! |---------------|--------------------------------------------|
//! | null          | free                                       |
//! | node N        | held; N is the last waiter (or the holder) |
//!
//! # Invariants
//! 1. A node is in at most one queue, from its `lock_with` until its `unlock_with` returns.
//! 2. Once `next.locked` is set, the predecessor never touches its node again, nor the successor the
//!    predecessor's: after `unlock_with` returns, the node is free for reuse.
//!
//! # Memory orderings
//! - `tail.swap` is AcqRel: Release publishes my node's initialisation to the successor that will write
//!   `me.next` (so my `next = null` cannot land after its link); Acquire sees my predecessor's node
//!   initialised before I write `prev.next`, and pairs with the Release CAS of the last unlock.
//! - `prev.next` store (Release) pairs with the Acquire load of `next` in `unlock_with`.
//! - `next.locked = true` (Release) pairs with the waiter's Acquire load of `locked`: the critical section
//!   is handed over with the lock.

use crate::primitive::{AtomicBool, AtomicPtr, Ordering, SpinWait};
use core::ptr;

#[cfg(not(loom))]
use crate::thread_slot::{self, MCS_LEVELS};

/// A queue node for [`RawMcsLock`] and for the queued spinlock.
///
/// ```
/// use locklab::raw::{McsNode, RawMcsLock};
/// let (l, node) = (RawMcsLock::new(), McsNode::new());
/// unsafe {
///     l.lock_with(&node); // the caller provides the node and keeps it alive until unlock
///     l.unlock_with(&node);
/// }
/// ```
#[repr(align(64))]
pub struct McsNode {
    pub(crate) next: AtomicPtr<McsNode>,
    pub(crate) locked: AtomicBool,
}

impl McsNode {
    /// A fresh node.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        McsNode {
            next: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
        }
    }

    /// A fresh node (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        McsNode {
            next: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
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
        let mut wait = SpinWait::new();
        loop {
            // Acquire pairs with the Release store of `prev.next` by the successor.
            let next = self.next.load(Ordering::Acquire);
            // SAFETY: a non-null `next` was stored by a successor whose node stays queued (so alive)
            // until we set its `locked` flag (invariant 2).
            if let Some(next) = unsafe { next.as_ref() } {
                return next;
            }
            wait.wait();
        }
    }
}

#[cfg(not(loom))]
impl Default for McsNode {
    fn default() -> Self {
        Self::new()
    }
}

/// An MCS queue lock. See the [module documentation](self).
///
/// ```
/// use lock_api::RawMutex as _;
/// let l = locklab::raw::RawMcsLock::new();
/// let g = l.lock(); // a node from this thread's slot
/// unsafe { l.unlock(g) };
/// ```
pub struct RawMcsLock {
    tail: AtomicPtr<McsNode>,
}

impl RawMcsLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawMcsLock {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// A new, unlocked lock (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawMcsLock {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Takes the lock, queueing `node`.
    ///
    /// # Safety
    /// - `node` is not in any queue, and stays alive and unmoved until `unlock_with(node)` returns;
    /// - the same `node` is passed to the matching `unlock_with`.
    #[inline]
    pub unsafe fn lock_with(&self, node: &McsNode) {
        node.reset();
        let me = node as *const McsNode as *mut McsNode;
        // AcqRel: see "Memory orderings" in the module documentation.
        let prev = self.tail.swap(me, Ordering::AcqRel);
        // SAFETY: a non-null old tail is a queued node, alive until it hands the lock to us (invariant 2).
        if let Some(prev) = unsafe { prev.as_ref() } {
            // Release pairs with the Acquire load of `next` in the predecessor's `unlock_with`.
            prev.next.store(me, Ordering::Release);
            node.wait_locked();
        }
    }

    /// Takes the lock with `node` if it is free.
    ///
    /// # Safety
    /// As [`lock_with`](Self::lock_with), for the case where this returns `true`.
    #[inline]
    pub unsafe fn try_lock_with(&self, node: &McsNode) -> bool {
        node.reset();
        let me = node as *const McsNode as *mut McsNode;
        // AcqRel as for the swap in `lock_with`; the Acquire pairs with the last unlock's Release CAS.
        self.tail
            .compare_exchange(ptr::null_mut(), me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the lock held with `node`, handing it to the next waiter if there is one.
    ///
    /// # Safety
    /// The caller holds the lock, taken with this `node`.
    #[inline]
    pub unsafe fn unlock_with(&self, node: &McsNode) {
        // Acquire pairs with the successor's Release store of `me.next`.
        let mut next = node.next.load(Ordering::Acquire);
        if next.is_null() {
            let me = node as *const McsNode as *mut McsNode;
            // Release publishes the critical section to the next locker, whose tail swap is Acquire.
            if self
                .tail
                .compare_exchange(me, ptr::null_mut(), Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            next = node.wait_next() as *const McsNode as *mut McsNode;
        }
        // SAFETY: `next` is queued behind us and waits for this very store, so it is alive.
        // Release pairs with the Acquire load in `wait_locked`: hands over the critical section.
        unsafe { (*next).locked.store(true, Ordering::Release) };
    }

    /// Whether the lock is held (a snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}

#[cfg(not(loom))]
impl Default for RawMcsLock {
    fn default() -> Self {
        Self::new()
    }
}

/// Guard state of [`RawMcsLock`]: the node this acquisition queued. Not `Send`: the node belongs to the
/// locking thread's slot, whose bookkeeping only that thread touches.
///
/// ```
/// use lock_api::RawMutex as _;
/// let l = locklab::raw::RawMcsLock::new();
/// let g: locklab::raw::McsGuard = l.lock();
/// assert!(l.try_lock().is_none());
/// unsafe { l.unlock(g) };
/// ```
pub struct McsGuard {
    node: ptr::NonNull<McsNode>,
    /// The slot and level the node came from, or `None` for a heap node.
    #[cfg(not(loom))]
    home: Option<(&'static thread_slot::ThreadSlot, u8)>,
}

// SAFETY: a shared `&McsGuard` exposes nothing (no methods read the node through it).
unsafe impl Sync for McsGuard {}

#[cfg(not(loom))]
impl RawMcsLock {
    /// Picks a node for a new acquisition: a free level in this thread's slot, or a heap node.
    #[inline]
    fn acquire_node() -> McsGuard {
        if let Some(slot) = thread_slot::current() {
            let busy = slot.mcs_busy.get();
            let level = busy.trailing_ones() as usize;
            if level < MCS_LEVELS {
                slot.mcs_busy.set(busy | (1 << level));
                // The level is ours before any store to its node, as a signal handler sees it.
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                return McsGuard {
                    node: ptr::NonNull::from(&slot.mcs[level]),
                    home: Some((slot, level as u8)),
                };
            }
        }
        McsGuard {
            node: ptr::NonNull::from(Box::leak(Box::new(McsNode::new()))),
            home: None,
        }
    }

    /// Gives the node of a finished (or failed) acquisition back.
    #[inline]
    fn release_node(guard: McsGuard) {
        match guard.home {
            // The guard is not Send, so this is the slot's own thread.
            Some((slot, level)) => {
                // Every use of the node is done before the level is given back (the signal-handler
                // ordering of the claim above).
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                slot.mcs_busy.set(slot.mcs_busy.get() & !(1 << level))
            }
            // SAFETY: heap nodes are leaked boxes owned by exactly this guard, out of every queue now.
            None => drop(unsafe { Box::from_raw(guard.node.as_ptr()) }),
        }
    }
}

#[cfg(not(loom))]
// SAFETY: mutual exclusion, Acquire and Release as documented above. Each guard owns a node that no other
// acquisition uses until the guard is unlocked; a forgotten guard keeps its node queued forever, which is
// safe because slot nodes are never freed (and a forgotten heap node is leaked). The guard is not Send.
unsafe impl lock_api::RawMutex for RawMcsLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = McsGuard;

    #[inline]
    fn lock(&self) -> Self::Guard {
        let guard = Self::acquire_node();
        // SAFETY: the node is reserved for this acquisition until `unlock`, and slot/heap nodes never move.
        unsafe { self.lock_with(guard.node.as_ref()) };
        guard
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let guard = Self::acquire_node();
        // SAFETY: as in `lock`.
        if unsafe { self.try_lock_with(guard.node.as_ref()) } {
            Some(guard)
        } else {
            Self::release_node(guard);
            None
        }
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        // SAFETY: the guard proves we hold the lock with this node.
        unsafe { self.unlock_with(guard.node.as_ref()) };
        Self::release_node(guard);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawMcsLock::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: every unlock hands the lock to the queue head, in FIFO order: unlocks are already fair.
unsafe impl lock_api::RawMutexFair for RawMcsLock {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        // SAFETY: forwarded from the caller.
        unsafe { <Self as lock_api::RawMutex>::unlock(self, guard) }
    }
}
