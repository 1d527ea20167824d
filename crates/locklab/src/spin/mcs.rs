//! MCS queue lock (Mellor-Crummey and Scott, 1991): FIFO, each waiter spins on its own cache line; and
//! an uncontended acquisition uses no node at all (the idea of IBM K42's MCS variant, Auslander et al.;
//! Scott, *Shared-Memory Synchronization*, 4.3.2: the lock itself stands in for the holder's node).
//!
//! # Algorithm
//! The lock is a `tail` pointer to the last queued node and a `next` pointer used when the holder has no
//! node. `tail == HELD` (a sentinel, not an address) means "held by a node-less holder".
//! - Lock, fast path: `cas(tail: null -> HELD)`: no node.
//! - Lock, queued (the CAS failed): initialise a node, `swap` it into `tail`. Old tail null: the lock is
//!   ours. `HELD`: link into `self.next`; a node: link into its `next`; then spin on my own `locked`.
//!   The node stays the holder's place in the queue until unlock (classic MCS).
//! - Unlock, node-less holder: `self.next` null: `cas(tail: HELD -> null)` frees the lock; if that fails a
//!   waiter is linking in, so wait for `self.next`. Then `self.next = null` and `next.locked = true`.
//! - Unlock, node holder: the same with `node.next` and `cas(tail: node -> null)`.
//!
//! **Detached** acquisitions (`lock_detached`, for callers that cannot carry a guard from lock to
//! unlock, such as a `pthread_mutex_t` unlocked by another thread): a contended locker queues a node on
//! its own stack and, once it holds the lock, hands its place in the queue to the lock (K42's move):
//! with nobody behind it, `cas(tail: node -> HELD)`; else it waits for its successor's link and stores
//! it in `self.next`. Either way it is now a node-less holder, its node is out of every queue and dies
//! with the call, and any thread may release it with `unlock_detached` (`unlock_held`). Invariant 1
//! holds: `self.next` was null (we hold the lock), and only an arrival that swapped `HELD` out writes
//! it, which needs our CAS to have succeeded, in which case we write nothing.
//!
//! `lock_api`'s `lock()` takes no node, so a contended acquisition takes one from the calling thread's
//! slot (`crate::thread_slot`): `MCS_LEVELS` of them, so one thread can hold several MCS locks at
//! once and release them in any order (the guard remembers its node). Deeper nesting, or a thread with no
//! slot, uses a heap node for that acquisition. Fetching a node costs ~2.5 ns (thread-local lookup and
//! level bitmap, on the chain to the `swap`), so the fast path skips it: uncontended lock+unlock went
//! from 7.9 to 4.9 ns (criterion, AMD EPYC), where the ticket lock takes 2.1.
//!
//! # Properties
//! Strict FIFO. One cache-line transfer per hand-over (the successor's flag), unlike the ticket lock where
//! every waiter's copy is invalidated. Uncontended, two locked instructions (the CAS to lock, the CAS to
//! unlock) where the ticket lock has one and a plain store: MCS's price for its queue (the bare pair is
//! 4.5 ns here). A preempted waiter stalls its successors; waiters yield the CPU after `SpinWait::SPINS`
//! steps (never their place in the queue). 16 bytes.
//!
//! # State
//! | `tail`   | `next`          | meaning                                                          |
//! |----------|-----------------|------------------------------------------------------------------|
//! | null     | null            | free                                                             |
//! | `HELD`   | null            | held by a node-less holder, nobody waiting                       |
//! | node N   | null or S       | held; N is the last waiter (or the holder); S: a node-less holder's linked successor |
//!
//! # Invariants
//! 1. `self.next` is non-null only from a successor's link into a node-less holder until that holder's
//!    hand-over, which clears it first. So a new node-less holder finds it null.
//! 2. Only a thread whose `swap` returned `HELD` writes a link into `self.next`, once; only the node-less
//!    holder clears it, when `tail` is a node (so no linker races it).
//! 3. A node is in at most one queue, from its `lock_queued` until its `unlock_queued` returns; once
//!    `next.locked` is set, the predecessor never touches its node again, nor the successor the
//!    predecessor's. `tail` names `HELD` or a node that is never freed while named (slot nodes never are;
//!    a forgotten guard's heap node leaks), so a held lock may be moved or forgotten.
//!
//! # Memory orderings
//! - The fast-path CAS is Acquire, pairing with the Release CAS (or hand-over) of the last unlock.
//! - The queueing `swap` is AcqRel: Release publishes my node's initialisation to the successor that will
//!   write `me.next` (so my `next = null` cannot land after its link); Acquire pairs with the Release CAS
//!   of the last unlock when the old tail is null.
//! - Link stores (`prev.next` or `self.next`, Release) pair with the Acquire loads of `next` in unlock.
//! - `next.locked = true` (Release) pairs with the waiter's Acquire load of `locked`: the critical section
//!   (and the clearing of `self.next`) is handed over with the lock.

pub(crate) use super::node::McsNode;
use super::node::wait_link;
#[cfg(not(loom))]
use crate::dep::{LockdepHooks as _, M};
use crate::primitive::{AtomicPtr, Ordering, SpinWait};
use core::ptr;

#[cfg(not(loom))]
use crate::thread_slot::{self, MCS_LEVELS};

/// Hands the lock to the queued waiter `next`.
///
/// # Safety
/// `next` is the caller's successor in the queue, waiting in `wait_locked` (so alive until this store,
/// the last access to it: invariant 3).
#[inline]
unsafe fn hand_over(next: *mut McsNode) {
    // SAFETY: the caller's contract.
    // Release pairs with the Acquire load in `wait_locked`: hands over the critical section.
    unsafe { (*next).locked.store(true, Ordering::Release) };
}

/// The tail value that means "held by a holder that took the free lock with one CAS and has no node;
/// nobody waiting": the dangling address 64, which no live node has. Never dereferenced.
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
    /// The last waiter's node, the holder's node, `HELD`, or null (free).
    tail: AtomicPtr<McsNode>,
    /// The successor of a `HELD` holder, once it has linked (the lock is that holder's queue node).
    pub(crate) next: AtomicPtr<McsNode>,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

impl RawMcsLock {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked lock.
        ///
        /// ```
        /// let l = locklab::raw::RawMcsLock::new();
        /// assert!(!l.is_locked());
        /// ```
        pub fn new() -> Self {
            RawMcsLock {
                dep: crate::dep::Dep::new(),
                tail: AtomicPtr::new(ptr::null_mut()),
                next: AtomicPtr::new(ptr::null_mut()),
            }
        }
    }

    /// Takes the lock without a node if it is free: `null -> HELD`. Release with
    /// [`unlock_held`](Self::unlock_held).
    #[inline]
    pub(crate) fn try_lock_held(&self) -> bool {
        // Acquire pairs with the Release CAS of the unlock that freed the lock.
        self.tail
            .compare_exchange(
                ptr::null_mut(),
                held(),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Takes the lock by queueing `node` (classic MCS). Release with [`unlock_queued`](Self::unlock_queued).
    ///
    /// # Safety
    /// `node` is in no queue and stays alive and unmoved until `unlock_queued(node)` returns, and for
    /// ever if that never happens (a forgotten guard: `tail` may keep naming it).
    #[inline]
    pub(crate) unsafe fn lock_queued(&self, node: &McsNode) {
        node.reset();
        let me = node as *const McsNode as *mut McsNode;
        // AcqRel: see "Memory orderings" in the module documentation.
        let prev = self.tail.swap(me, Ordering::AcqRel);
        if prev.is_null() {
            return;
        }
        let link = if prev == held() {
            &self.next
        } else {
            // SAFETY: a queued node stays alive until it hands over to us (contract, invariant 3).
            unsafe { &(*prev).next }
        };
        // Release pairs with the Acquire load of the predecessor's `next` in its unlock.
        link.store(me, Ordering::Release);
        node.wait_locked();
    }

    /// Takes the lock and leaves no node of the caller in the queue: the lock can then be released by
    /// any thread with [`unlock_detached`](Self::unlock_detached), and the caller keeps nothing.
    /// Costs one more CAS (or a wait for the successor's link) on a contended acquisition.
    ///
    /// ```
    /// let l = std::sync::Arc::new(locklab::raw::RawMcsLock::new());
    /// l.lock_detached();
    /// let l2 = l.clone();
    /// std::thread::spawn(move || unsafe { l2.unlock_detached() }).join().unwrap();
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn lock_detached(&self) {
        if !self.try_lock_held() {
            self.lock_detached_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_detached_slow(&self) {
        let node = McsNode::new();
        // SAFETY: the node lives on this frame until `detach` returns, by which time no queue names it
        // and no neighbour will touch it again (module docs, "Detached").
        unsafe {
            self.lock_queued(&node);
            self.detach(&node);
        }
    }

    /// Turns a holder queued as `node` into a node-less (`HELD`) holder.
    ///
    /// # Safety
    /// The caller holds the lock, taken with `lock_queued(node)`.
    #[inline]
    unsafe fn detach(&self, node: &McsNode) {
        let me = node as *const McsNode as *mut McsNode;
        // Acquire pairs with the successor's Release link store.
        let mut next = node.next.load(Ordering::Acquire);
        if next.is_null() {
            // Nobody behind: the lock itself becomes our place. Relaxed: publishes nothing (the
            // arrival that swaps HELD out gets the critical section from our later unlock).
            if self
                .tail
                .compare_exchange(me, held(), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // A successor swapped the tail away from us and is linking into our node.
            next = wait_link(&node.next);
        }
        // Invariant 1: `self.next` is null (we hold the lock) and nobody else writes it now (the tail
        // is a node). Release pairs with the Acquire load of `self.next` in `unlock_held`, which may
        // run on another thread.
        self.next.store(next, Ordering::Release);
    }

    /// Takes the lock if it is free, as a detached holder (see [`lock_detached`](Self::lock_detached)).
    ///
    /// ```
    /// let l = locklab::raw::RawMcsLock::new();
    /// assert!(l.try_lock_detached());
    /// assert!(!l.try_lock_detached());
    /// unsafe { l.unlock_detached() };
    /// ```
    #[inline]
    pub fn try_lock_detached(&self) -> bool {
        self.try_lock_held()
    }

    /// Releases a detached acquisition, from any thread.
    ///
    /// # Safety
    /// The lock is held by a [`lock_detached`](Self::lock_detached) or
    /// [`try_lock_detached`](Self::try_lock_detached) acquisition that is not released otherwise.
    ///
    /// ```
    /// let l = std::sync::Arc::new(locklab::raw::RawMcsLock::new());
    /// l.lock_detached();
    /// let l2 = l.clone();
    /// // A detached holder may be released by another thread.
    /// // SAFETY: the `lock_detached` above took the lock and nothing else releases it.
    /// std::thread::spawn(move || unsafe { l2.unlock_detached() })
    ///     .join()
    ///     .unwrap();
    /// assert!(l.try_lock_detached());
    /// // SAFETY: the `try_lock_detached` above took the lock.
    /// unsafe { l.unlock_detached() };
    /// ```
    #[inline]
    pub unsafe fn unlock_detached(&self) {
        // A detached release may come from any thread at any moment of the holder's `lock_detached`
        // (a `pthread_mutex_t` used as a binary semaphore): the lock may still be a node holder's
        // that has not yet moved its place to the lock (tail is its node, `next` still null). So
        // unlike `unlock_held`, which trusts a failed CAS to mean "a successor is linking", this
        // loops until either the successor is linked or the tail is HELD again; a lock found free
        // (released twice) is left alone.
        let mut wait = SpinWait::new();
        loop {
            // Acquire pairs with the successor's (or the detaching holder's) Release link store.
            let next = self.next.load(Ordering::Acquire);
            if !next.is_null() {
                // Invariant 1, as in `unlock_held`.
                self.next.store(ptr::null_mut(), Ordering::Relaxed);
                // SAFETY: `next` is queued behind the holder, waiting for the hand-over.
                unsafe { hand_over(next) };
                return;
            }
            // Release publishes the critical section to the next locker (its Acquire CAS or swap).
            match self.tail.compare_exchange(
                held(),
                ptr::null_mut(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(t) if t.is_null() => return,
                // A successor is linking into `next`, or the holder is still detaching.
                Err(_) => wait.wait(),
            }
        }
    }

    /// Releases the lock taken by [`try_lock_held`](Self::try_lock_held).
    ///
    /// # Safety
    /// The caller holds the lock as `HELD`.
    #[inline]
    pub(crate) unsafe fn unlock_held(&self) {
        if let Some(next) = self.successor(&self.next, held()) {
            // Invariant 1. Relaxed: ordered before the next holder by the Release hand-over below;
            // nobody else writes `next` now (the tail is a node, not HELD).
            self.next.store(ptr::null_mut(), Ordering::Relaxed);
            // SAFETY: `next` is queued behind us, waiting for the hand-over.
            unsafe { hand_over(next) };
        }
    }

    /// Releases the lock taken by [`lock_queued`](Self::lock_queued) with `node`.
    ///
    /// # Safety
    /// The caller holds the lock, taken with `lock_queued(node)`.
    #[inline]
    pub(crate) unsafe fn unlock_queued(&self, node: &McsNode) {
        let me = node as *const McsNode as *mut McsNode;
        if let Some(next) = self.successor(&node.next, me) {
            // SAFETY: `next` is queued behind us, waiting for the hand-over.
            unsafe { hand_over(next) };
        }
    }

    /// The unlock's first half, for a holder standing in the queue as `me` (a node, or `HELD`) whose
    /// successor links into `link`: with nobody behind, frees the lock (`cas(tail: me -> null)`) and
    /// returns `None`; else returns the successor, once it has linked.
    #[inline]
    fn successor(&self, link: &AtomicPtr<McsNode>, me: *mut McsNode) -> Option<*mut McsNode> {
        // Acquire pairs with the successor's Release link store.
        let next = link.load(Ordering::Acquire);
        if !next.is_null() {
            return Some(next);
        }
        // Release publishes the critical section to the next locker (its Acquire CAS or swap).
        match self
            .tail
            .compare_exchange(me, ptr::null_mut(), Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => None,
            // Someone swapped the tail away from us and is about to link.
            Err(_) => Some(wait_link(link)),
        }
    }

    /// Whether the lock is held (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawMcsLock::new();
    /// assert!(!l.is_locked());
    /// assert!(l.try_lock_detached());
    /// assert!(l.is_locked());
    /// // SAFETY: the `try_lock_detached` above took the lock.
    /// unsafe { l.unlock_detached() };
    /// assert!(!l.is_locked());
    /// ```
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

/// Guard state of [`RawMcsLock`]: the node a contended acquisition queued, if any. Not `Send`: the
/// node belongs to the locking thread's slot, whose bookkeeping only that thread touches.
///
/// ```
/// use lock_api::RawMutex as _;
/// let l = locklab::raw::RawMcsLock::new();
/// let g: locklab::raw::McsGuard = l.lock();
/// assert!(l.try_lock().is_none());
/// unsafe { l.unlock(g) };
/// ```
pub struct McsGuard {
    /// `None`: taken uncontended, as `HELD`.
    #[cfg(not(loom))]
    node: Option<QueuedNode>,
}

/// A node lent to one contended acquisition: from a level of this thread's slot, or the heap.
#[cfg(not(loom))]
struct QueuedNode {
    node: ptr::NonNull<McsNode>,
    /// The slot and level the node came from, or `None` for a heap node.
    home: Option<(&'static thread_slot::ThreadSlot, u8)>,
}

// SAFETY: a shared `&McsGuard` exposes nothing (no methods read the node through it).
unsafe impl Sync for McsGuard {}

#[cfg(not(loom))]
impl RawMcsLock {
    /// Picks a node for a contended acquisition: a free level in this thread's slot, or a heap node.
    #[cold]
    fn acquire_node() -> QueuedNode {
        if let Some(slot) = thread_slot::current() {
            let busy = slot.mcs_busy.get();
            let level = busy.trailing_ones() as usize;
            if level < MCS_LEVELS {
                slot.mcs_busy.set(busy | (1 << level));
                // The level is ours before any store to its node, as a signal handler sees it.
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                return QueuedNode {
                    node: ptr::NonNull::from(&slot.mcs[level]),
                    home: Some((slot, level as u8)),
                };
            }
        }
        QueuedNode {
            node: ptr::NonNull::from(Box::leak(Box::new(McsNode::new()))),
            home: None,
        }
    }

    /// Gives the node of a finished acquisition back.
    #[inline]
    fn release_node(q: QueuedNode) {
        match q.home {
            // The guard is not Send, so this is the slot's own thread.
            Some((slot, level)) => {
                // Every use of the node is done before the level is given back (the signal-handler
                // ordering of the claim above).
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                slot.mcs_busy.set(slot.mcs_busy.get() & !(1 << level))
            }
            // SAFETY: heap nodes are leaked boxes owned by exactly this guard, out of every queue now.
            None => drop(unsafe { Box::from_raw(q.node.as_ptr()) }),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> McsGuard {
        let q = Self::acquire_node();
        // SAFETY: the node is reserved for this acquisition until `unlock`, and slot and heap nodes never
        // move or die while a queue may name them (slots are never freed; a forgotten heap node leaks).
        unsafe { self.lock_queued(q.node.as_ref()) };
        McsGuard { node: Some(q) }
    }
}

#[cfg(not(loom))]
// SAFETY: mutual exclusion, Acquire and Release as documented above. An uncontended acquisition leaves
// `HELD`, which names no memory; a contended one queues a node that no other acquisition uses until the
// guard is unlocked. A forgotten guard keeps the lock held: `tail` then names `HELD`, a slot node (never
// freed) or a leaked heap node, so moving or dropping the held lock is safe. The guard is not Send.
unsafe impl lock_api::RawMutex for RawMcsLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = McsGuard;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock(&self) -> Self::Guard {
        self.lockdep_before_lock(M::Write);
        if self.try_lock_held() {
            McsGuard { node: None }
        } else {
            self.lock_slow()
        }
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.lockdep_after_trylock(
            M::Write,
            self.try_lock_held().then_some(McsGuard { node: None }),
        )
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self, guard: Self::Guard) {
        self.lockdep_before_unlock();
        match guard.node {
            // SAFETY: the guard proves we hold the lock as HELD.
            None => unsafe { self.unlock_held() },
            Some(q) => {
                // SAFETY: the guard proves we hold the lock with this node.
                unsafe { self.unlock_queued(q.node.as_ref()) };
                Self::release_node(q);
            }
        }
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
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        // SAFETY: forwarded from the caller (the checked unlock).
        unsafe { <Self as lock_api::RawMutex>::unlock(self, guard) }
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawMcsLock, Spin);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use lock_api::RawMutex as _;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// A held lock may be moved while a forgotten guard holds it (lock_api's contract): `tail` names
    /// `HELD` (no address) or a slot node (never freed), and the next waiter links into the moved lock.
    #[test]
    fn moved_while_held_by_a_forgotten_guard() {
        let l = RawMcsLock::new();
        let _never_unlocked = l.lock(); // uncontended: HELD; as a forgotten lock_api guard leaves it
        let l = Arc::new(l); // moved while held
        assert!(l.is_locked() && l.try_lock().is_none());
        let done = Arc::new(AtomicUsize::new(0));
        let (l2, done2) = (l.clone(), done.clone());
        let t = std::thread::spawn(move || {
            // Queues behind the forgotten holder, linking into `l2.next`; never unlocked (a forgotten
            // guard), so the tail keeps naming this thread's slot node after the thread exits.
            let _never_unlocked = l2.lock();
            done2.fetch_add(1, Ordering::Relaxed);
        });
        while l.tail.load(Ordering::Relaxed) == held() {
            std::thread::yield_now();
        }
        // SAFETY: the forgotten HELD acquisition is ours to end (nobody else holds it as HELD).
        unsafe { l.unlock_held() }; // hands over to the queued waiter
        t.join().unwrap();
        assert_eq!(done.load(Ordering::Relaxed), 1);
        let l = Arc::into_inner(l).unwrap();
        let moved = Box::new(l); // moved again, held by the exited thread's forgotten guard
        assert!(moved.is_locked() && moved.try_lock().is_none());
        assert!(
            moved.next.load(Ordering::Relaxed).is_null(),
            "invariant 1: next cleared at hand-over"
        );
    }

    /// Waiters queued behind a `HELD` holder and behind each other all get in, one at a time, and the
    /// lock ends free with both words null.
    #[test]
    fn queue_of_three_drains_and_leaves_the_lock_clean() {
        let l = Arc::new(RawMcsLock::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let g = l.lock();
        let ts: Vec<_> = (0..3)
            .map(|_| {
                let (l, inside) = (l.clone(), inside.clone());
                std::thread::spawn(move || {
                    let g = l.lock();
                    assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0, "two inside");
                    inside.fetch_sub(1, Ordering::Relaxed);
                    // SAFETY: `g` is this thread's acquisition.
                    unsafe { l.unlock(g) };
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) {
            1
        } else {
            20
        }));
        // SAFETY: `g` is this thread's acquisition.
        unsafe { l.unlock(g) };
        for t in ts {
            t.join().unwrap();
        }
        assert!(
            l.tail.load(Ordering::Relaxed).is_null() && l.next.load(Ordering::Relaxed).is_null()
        );
    }
}
