//! MCS queue lock (Mellor-Crummey and Scott, 1991), in the variant that needs no queue node outside
//! `lock()` (Auslander et al.'s, from IBM's K42 kernel; Scott, *Shared-Memory Synchronization*, 4.3.2):
//! FIFO, each waiter spins on its own cache line, and neither the holder nor the uncontended path touches
//! a node.
//!
//! # Algorithm
//! The lock is a `tail` pointer to the last waiter and a `next` pointer to the holder's successor. The
//! holder stands in the queue as the lock itself: `tail == HELD` (a sentinel, not an address) means "held,
//! nobody waiting", and a waiter that finds `HELD` at the tail links itself into the lock's own `next`.
//! - Lock, fast path: `cas(tail: null -> HELD)`.
//! - Lock, slow path: `swap` a node on this call's stack into `tail`. Old tail null: the lock is ours.
//!   `HELD`: link into `self.next`; a node: link into its `next`; then spin on the node's own `locked`
//!   flag until the predecessor hands over. Holding the lock, move our place back into the lock before
//!   returning (the stack node dies with this call): with no successor, `self.next = null` then
//!   `cas(tail: me -> HELD)`; if that fails, or if a successor had already linked, wait for it and copy
//!   it into `self.next`.
//! - Unlock: `self.next` null: `cas(tail: HELD -> null)` frees the lock; if that fails a waiter is linking
//!   in, so wait for `self.next`. Then `next.locked = true` hands the lock over.
//!
//! The classic MCS lock keeps the holder's node queued until unlock, so `lock_api`'s `lock()` had to
//! fetch a node from per-thread storage and the guard had to carry it (7.2 ns uncontended here against
//! 4.5 ns for the bare protocol, one AMD EPYC core). This variant pays for its stack node only on the
//! contended path, and the guard carries nothing.
//!
//! # Properties
//! Strict FIFO. One cache-line transfer per hand-over (the successor's flag), unlike the ticket lock where
//! every waiter's copy is invalidated. Uncontended, two locked instructions (the CAS to lock, the CAS to
//! unlock) where the ticket lock has one and a plain store: that is MCS's price for the queue. A preempted
//! waiter stalls its successors; waiters yield the CPU after [`SpinWait::SPINS`] steps (never their place
//! in the queue). 16 bytes.
//!
//! # State
//! | `tail`       | `next`        | meaning                                                   |
//! |--------------|---------------|-----------------------------------------------------------|
//! | null         | null          | free                                                      |
//! | `HELD`       | null          | held, nobody waiting                                      |
//! | node N       | any           | held; N is the last waiter; `next` is the holder's successor once linked (transiently stale while a new holder moves in) |
//!
//! Transitions: fast lock `null -> HELD`; queueing `t -> N` (swap); a new holder with no successor
//! `N -> HELD`; unlock with no successor `HELD -> null`.
//!
//! # Invariants
//! 1. `tail == null` implies `next == null`: unlock frees the lock only by the CAS `HELD -> null` after
//!    seeing `next` null, and with `tail == HELD` nobody can have linked (linking starts by swapping the
//!    tail away from `HELD`).
//! 2. Only a thread that swapped `HELD` out of `tail` writes `self.next` other than the holder, and it
//!    does so once. The holder writes `self.next` only while `tail` is not `HELD` (so no linker can
//!    race it) or before its CAS that makes it `HELD`.
//! 3. A stack node is referenced only while it is in the queue: by its predecessor's hand-over, by its
//!    successor's link, and by `tail`. Before `lock()` returns the node has left `tail` (the CAS to `HELD`
//!    or a successor's swap) and its successor (if any) has linked and been copied to `self.next`, so
//!    nothing refers to it. When nobody borrows the lock, `tail` is null or `HELD`: moving or forgetting
//!    a held lock leaves no pointer to a dead node.
//!
//! # Memory orderings
//! - The fast-path CAS is Acquire, pairing with unlock's Release CAS.
//! - The queueing `swap` is AcqRel: Release publishes my node's initialisation to the successor that will
//!   write `me.next` (so my `next = null` cannot land after its link); Acquire pairs with the Release CAS
//!   of the last unlock when the old tail is null.
//! - Link stores (`prev.next` or `self.next`, Release) pair with the Acquire loads of `next` by the node's
//!   owner (in `lock` while moving in, in `unlock`).
//! - `next.locked = true` (Release) pairs with the waiter's Acquire load of `locked`: the critical section
//!   is handed over with the lock.
//! - The new holder's CAS `me -> HELD` is Release, so its `self.next = null` happens before any later
//!   linker's store to `self.next` (the linker's swap reads `HELD` with Acquire).

use crate::primitive::{AtomicBool, AtomicPtr, Ordering, SpinWait};
use core::ptr;

/// A queue node: a waiter of [`RawMcsLock`] (on its stack) or of the queued spinlock (in its thread slot).
#[repr(align(64))]
pub(crate) struct McsNode {
    pub(crate) next: AtomicPtr<McsNode>,
    pub(crate) locked: AtomicBool,
}

impl McsNode {
    /// A fresh node.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        McsNode {
            next: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
        }
    }

    /// A fresh node (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
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

/// The tail value that means "held by the holder standing in as the lock itself; nobody waiting": the
/// dangling address 64, which no live node has. Never dereferenced.
#[inline(always)]
fn held() -> *mut McsNode {
    ptr::dangling_mut::<McsNode>()
}

/// An MCS queue lock. See the [module documentation](self).
///
/// ```
/// use lock_api::RawMutex as _;
/// let l = locklab::raw::RawMcsLock::new();
/// let g = l.lock();
/// assert!(l.try_lock().is_none());
/// unsafe { l.unlock(g) };
/// ```
pub struct RawMcsLock {
    /// The last waiter, `HELD`, or null (free).
    tail: AtomicPtr<McsNode>,
    /// The holder's successor, once it has linked (the lock is the holder's queue node).
    next: AtomicPtr<McsNode>,
}

impl RawMcsLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawMcsLock {
            tail: AtomicPtr::new(ptr::null_mut()),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// A new, unlocked lock (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawMcsLock {
            tail: AtomicPtr::new(ptr::null_mut()),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Takes the lock, waiting in the queue if it is held.
    #[inline]
    pub(crate) fn lock_raw(&self) {
        // Acquire pairs with unlock's Release CAS.
        if self
            .tail
            .compare_exchange(
                ptr::null_mut(),
                held(),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        let node = McsNode::new();
        let me = &node as *const McsNode as *mut McsNode;
        // AcqRel: see "Memory orderings" in the module documentation.
        let prev = self.tail.swap(me, Ordering::AcqRel);
        if !prev.is_null() {
            let link = if prev == held() {
                &self.next
            } else {
                // SAFETY: a queued node other than `HELD` stays alive until its owner has seen our link
                // (invariant 3: it waits for its successor before leaving `lock`).
                unsafe { &(*prev).next }
            };
            // Release pairs with the Acquire load of the predecessor's `next` (its `lock` or `unlock`).
            link.store(me, Ordering::Release);
            node.wait_locked();
        }
        // We hold the lock; move our place in the queue from `node` to the lock itself.
        // Acquire pairs with the successor's Release link store.
        let mut succ = node.next.load(Ordering::Acquire);
        if succ.is_null() {
            // Relaxed: ordered before any later linker's store by the Release CAS below (invariant 2).
            self.next.store(ptr::null_mut(), Ordering::Relaxed);
            // Release: see "Memory orderings". Relaxed on failure: `wait_next` does the Acquire.
            if self
                .tail
                .compare_exchange(me, held(), Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            succ = node.wait_next() as *const McsNode as *mut McsNode;
        }
        // Relaxed: only this thread reads `self.next` until it unlocks (tail is not HELD: nobody links).
        self.next.store(succ, Ordering::Relaxed);
    }

    /// Takes the lock if it is free.
    #[inline]
    pub(crate) fn try_lock_raw(&self) -> bool {
        // Acquire pairs with unlock's Release CAS.
        self.tail
            .compare_exchange(
                ptr::null_mut(),
                held(),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Releases the lock, handing it to the next waiter if there is one.
    ///
    /// # Safety
    /// The caller holds the lock.
    #[inline]
    pub(crate) unsafe fn unlock_raw(&self) {
        // Acquire pairs with a linker's Release store (its node's initialisation comes with it).
        let mut next = self.next.load(Ordering::Acquire);
        if next.is_null() {
            // Release publishes the critical section to the next locker (fast-path CAS or swap, Acquire).
            if self
                .tail
                .compare_exchange(
                    held(),
                    ptr::null_mut(),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return;
            }
            next = self.wait_next();
        }
        // SAFETY: `next` is queued behind us and waits for this very store, so it is alive.
        // Release pairs with the Acquire load in `wait_locked`: hands over the critical section.
        unsafe { (*next).locked.store(true, Ordering::Release) };
    }

    /// Waits for the successor that swapped the tail away from `HELD` to link into `self.next`.
    #[cold]
    fn wait_next(&self) -> *mut McsNode {
        let mut wait = SpinWait::new();
        loop {
            // Acquire pairs with the linker's Release store.
            let next = self.next.load(Ordering::Acquire);
            if !next.is_null() {
                return next;
            }
            wait.wait();
        }
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

#[cfg(not(loom))]
// SAFETY: mutual exclusion, Acquire and Release as documented above. No acquisition leaves state outside
// the lock (invariant 3), so a forgotten guard only keeps the lock held, and the lock may be moved or
// dropped while held. The lock has no thread affinity: the stateless guard may be sent.
unsafe impl lock_api::RawMutex for RawMcsLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        self.lock_raw();
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.try_lock_raw().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // SAFETY: the guard proves the caller holds the lock.
        unsafe { self.unlock_raw() }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// Invariant 3: a held lock names no node, so it may be moved while a forgotten guard holds it; the
    /// next waiter links into the lock itself (a stale address would be a use-after-free under Miri).
    #[test]
    fn moved_while_held_by_a_forgotten_guard() {
        let m = crate::McsLock::new(1u32);
        core::mem::forget(m.lock());
        let moved = Box::new(m.into_inner()); // the data moves out of a held lock: allowed
        assert_eq!(*moved, 1);
        let l = RawMcsLock::new();
        l.lock_raw();
        let l = Arc::new(l); // moved while held
        assert!(l.is_locked() && !l.try_lock_raw());
        let done = Arc::new(AtomicUsize::new(0));
        let (l2, done2) = (l.clone(), done.clone());
        let t = std::thread::spawn(move || {
            l2.lock_raw(); // queues behind the moved holder
            done2.fetch_add(1, Ordering::Relaxed);
            // SAFETY: this thread holds the lock.
            unsafe { l2.unlock_raw() };
        });
        while l.tail.load(Ordering::Relaxed) == held() {
            std::thread::yield_now();
        }
        // SAFETY: the holder is this thread (it locked before the move).
        unsafe { l.unlock_raw() }; // hands over to the queued waiter
        t.join().unwrap();
        assert_eq!(done.load(Ordering::Relaxed), 1);
        assert!(
            l.tail.load(Ordering::Relaxed).is_null() && l.next.load(Ordering::Relaxed).is_null()
        );
    }

    /// The slow path's move-in: waiters queued behind a holder each take the lock, copy their successor
    /// into `next` or make the tail `HELD`; the lock ends free with both words null.
    #[test]
    fn queue_of_three_drains_and_leaves_the_lock_clean() {
        let l = Arc::new(RawMcsLock::new());
        let inside = Arc::new(AtomicUsize::new(0));
        l.lock_raw();
        let ts: Vec<_> = (0..3)
            .map(|_| {
                let (l, inside) = (l.clone(), inside.clone());
                std::thread::spawn(move || {
                    l.lock_raw();
                    assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0, "two inside");
                    inside.fetch_sub(1, Ordering::Relaxed);
                    // SAFETY: this thread holds the lock.
                    unsafe { l.unlock_raw() };
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) {
            1
        } else {
            20
        }));
        // SAFETY: this thread holds the lock.
        unsafe { l.unlock_raw() };
        for t in ts {
            t.join().unwrap();
        }
        assert!(
            l.tail.load(Ordering::Relaxed).is_null() && l.next.load(Ordering::Relaxed).is_null()
        );
    }
}
