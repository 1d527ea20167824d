//! Queued spinlock (the kernel's qspinlock): four bytes, MCS local spinning under contention, and an
//! unlock that is a plain store.
//!
//! # Algorithm
//! - Fast path: lock word all zero: `cas(locked: 0 -> 1)`.
//! - Pending path (the second contender): if nobody is pending or queued, set PENDING, spin until the
//!   holder leaves, take `locked`, clear PENDING. It never touches a queue node.
//! - Queue path (everyone else): an MCS queue of per-thread nodes (`crate::thread_slot`) whose tail is
//!   encoded in the word. Each waiter spins on its own node; the queue head spins on the lock word until
//!   both the holder and the pending waiter are gone, takes `locked`, and either empties the queue (it was
//!   the last) or passes queue-headship to its successor.
//! - Unlock: Release store of 0 to the locked byte: one `mov`, no locked instruction.
//!
//! # State
//! The kernel's 32-bit word, as a locked byte and a 16-bit tail word (`pending` is the tail word's low
//! bit). They are separate atomics because Rust's memory model forbids racing accesses of different
//! sizes to the same bytes, which the kernel's byte store into a word that others CAS would be.
//!
//! | bytes | bits (of `tail`) | field                                             |
//! |-------|------------------|---------------------------------------------------|
//! | 0     |                  | `locked`: 1 = held                                |
//! | 2-3   | 0                | PENDING: the second contender waits on the word   |
//! | 2-3   | 1                | tail node's nesting level in its thread's slot    |
//! | 2-3   | 2-15             | tail thread slot + 1 (0: queue empty)             |
//!
//! Transitions, as (tail, pending, locked):
//! - fast path:   `0,0,0 -> 0,0,1`
//! - pending:     `0,0,1 -> 0,1,1 -> (holder unlocks) 0,1,0 -> 0,1,1 -> 0,0,1`
//! - queue:       `n,p,l -> t,p,l` (tail swapped in); head: `t,0,0 -> t,0,1`, then `t,p,1 -> 0,p,1` if it
//!   was last (a transient `p` stays for its setter to clear), else `locked` stays and the successor
//!   becomes head.
//! - unlock:      `*,*,1 -> *,*,0`
//!
//! # Invariants
//! 1. PENDING is set only by a `fetch_or` that saw the tail word 0; one that saw anything else clears it
//!    again (if it set it) and queues. So with a non-empty queue any PENDING is transient, and its setter
//!    is about to queue behind the current tail.
//! 2. Only the holder stores to `locked` with a plain store; everyone else takes it with a CAS, so two
//!    takers can never both succeed.
//! 3. The queue head waits for PENDING to clear: the pending waiter, which came first, goes first.
//!
//! # Properties
//! FIFO among queued waiters, the pending waiter ahead of them. A thread whose fast-path check saw an
//! empty tail can still take a just-released lock ahead of a just-queued head (a one-time race, as in
//! the kernel between fast path and queueing). Waiters yield the CPU after `SpinWait::SPINS` steps but
//! keep their place. A thread with no slot (over `thread_slot::MAX_SLOTS` threads, or exiting) spins on
//! `locked` without queueing: correct, not FIFO.
//!
//! # Memory orderings
//! - Every successful take of `locked` (CAS) is Acquire and pairs with the Release store in `unlock`.
//! - The tail CAS that queues a node is AcqRel: Release publishes the node's initialisation to the
//!   successor that will link into it; Acquire sees the predecessor's node initialised.
//! - `prev.next` and `next.locked` stores (Release) pair with the Acquire loads in
//!   `McsNode::wait_next` / `McsNode::wait_locked`.
//! - PENDING updates are Relaxed: the pending bit orders no data; who takes `locked` is decided by the
//!   `locked` CAS itself (invariant 2), which always reads the latest value.

use super::node::McsNode;
use crate::primitive::{AtomicU8, AtomicU16, Ordering, SpinWait};

#[cfg(not(loom))]
use crate::thread_slot::{self, QNODE_LEVELS};

const PENDING: u16 = 1 << 0;
const TAIL_MASK: u16 = !PENDING;
const TAIL_IDX_SHIFT: u16 = 1;
const TAIL_SLOT_SHIFT: u16 = 2;

/// Encodes (thread slot, nesting level) as a tail value; never 0.
#[inline]
pub(crate) const fn encode_tail(slot: u32, level: u32) -> u16 {
    (((slot + 1) << TAIL_SLOT_SHIFT) | (level << TAIL_IDX_SHIFT)) as u16
}

/// Decodes a non-zero tail value into (thread slot, nesting level).
#[inline]
pub(crate) const fn decode_tail(tail: u16) -> (u32, u32) {
    (
        ((tail >> TAIL_SLOT_SHIFT) as u32) - 1,
        ((tail >> TAIL_IDX_SHIFT) & 1) as u32,
    )
}

/// A queued spinlock. See the [module documentation](self).
///
/// ```
/// let l = locklab::raw::RawQueuedSpinLock::new();
/// l.lock();
/// assert!(!l.try_lock());
/// unsafe { l.unlock() }; // one plain byte store
/// ```
#[repr(C, align(4))]
pub struct RawQueuedSpinLock {
    locked: AtomicU8,
    tail: AtomicU16,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

impl RawQueuedSpinLock {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked lock.
        ///
        /// ```
        /// let l = locklab::raw::RawQueuedSpinLock::new();
        /// assert!(!l.is_locked());
        /// ```
        pub fn new() -> Self {
            RawQueuedSpinLock {
                dep: crate::dep::Dep::new(),
                locked: AtomicU8::new(0),
                tail: AtomicU16::new(0),
            }
        }
    }

    /// `0,0,0 -> 0,0,1` if nobody is pending or queued.
    ///
    /// ```
    /// let l = locklab::raw::RawQueuedSpinLock::new();
    /// assert!(l.try_lock());
    /// assert!(!l.try_lock()); // held
    /// // SAFETY: the `try_lock` above took the lock.
    /// unsafe { l.unlock() };
    /// ```
    #[inline]
    pub fn try_lock(&self) -> bool {
        // Acquire pairs with the Release store in `unlock`.
        self.tail.load(Ordering::Relaxed) == 0
            && self
                .locked
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Takes `locked` if it is free, whoever is queued (used by waiters whose turn it is).
    #[inline]
    fn take_locked(&self) -> bool {
        // Acquire pairs with the Release store in `unlock`.
        self.locked.load(Ordering::Relaxed) == 0
            && self
                .locked
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Releases the lock: `*,*,1 -> *,*,0`.
    ///
    /// # Safety
    /// The caller holds the lock.
    ///
    /// ```
    /// let l = locklab::raw::RawQueuedSpinLock::new();
    /// l.lock();
    /// // SAFETY: this thread holds the lock (the `lock` above).
    /// unsafe { l.unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub unsafe fn unlock(&self) {
        // Release pairs with the Acquire CAS of whoever takes `locked` next. A plain `mov` on x86.
        self.locked.store(0, Ordering::Release);
    }

    /// Whether the lock is held (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawQueuedSpinLock::new();
    /// assert!(!l.is_locked());
    /// assert!(l.try_lock());
    /// assert!(l.is_locked());
    /// // SAFETY: the `try_lock` above took the lock.
    /// unsafe { l.unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed) != 0
    }

    /// The pending path. Returns `true` with the lock held, `false` if the caller must queue.
    #[inline]
    fn lock_pending(&self) -> bool {
        if self.tail.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // Relaxed: see "Memory orderings"; `0,0,* -> 0,1,*`.
        let old = self.tail.fetch_or(PENDING, Ordering::Relaxed);
        if old != 0 {
            // Someone was pending or queued. Undo our PENDING if we set it (invariant 1), then queue.
            if old & PENDING == 0 {
                self.tail.fetch_and(!PENDING, Ordering::Relaxed);
            }
            return false;
        }
        // We are the pending waiter: wait for the holder to go, then `0,1,0 -> 0,1,1`.
        let mut wait = SpinWait::new();
        while !self.take_locked() {
            wait.wait();
        }
        // `0,1,1 -> 0,0,1` (or `t,1,1 -> t,0,1` if waiters queued meanwhile).
        self.tail.fetch_and(!PENDING, Ordering::Relaxed);
        true
    }

    /// The queue path, with an explicit node: `my_tail` names `node`, and `node_of` maps any queued
    /// tail value to its node.
    ///
    /// A tail that names no node here (`node_of` answers `None`: a lock in memory shared with another
    /// process, whose waiters' tails name its threads) cannot be linked behind: the waiter then acts
    /// as the queue head at once. Mutual exclusion still holds (the locked byte alone decides who
    /// owns the lock); only the order, and the other process's waiter, are lost. Never a panic.
    ///
    /// # Safety
    /// - `node` is in no other queue and stays alive until this returns;
    /// - `node_of(t)` returns, for every tail value `t` that a queued waiter of this lock published in
    ///   this process, that waiter's node, alive for as long as the waiter is queued.
    pub(crate) unsafe fn lock_queued<'n>(
        &self,
        node: &McsNode,
        my_tail: u16,
        node_of: impl Fn(u16) -> Option<&'n McsNode>,
    ) {
        node.reset();
        // Swap our tail in, keeping PENDING: `n,p,l -> t,p,l`. AcqRel: see "Memory orderings".
        let mut old = self.tail.load(Ordering::Relaxed);
        while let Err(now) = self.tail.compare_exchange_weak(
            old,
            (old & PENDING) | my_tail,
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            old = now;
        }
        if old & TAIL_MASK != 0
            && let Some(prev) = node_of(old & TAIL_MASK)
        {
            // Release pairs with the Acquire load in the predecessor's `wait_next`.
            prev.next
                .store(node as *const McsNode as *mut McsNode, Ordering::Release);
            node.wait_locked();
        }
        // Queue head: wait for `t,0,0`, then `t,0,0 -> t,0,1` (invariant 3).
        let mut wait = SpinWait::new();
        while self.tail.load(Ordering::Relaxed) & PENDING != 0 || !self.take_locked() {
            wait.wait();
        }
        if self.release_tail(my_tail) {
            return;
        }
        // Release pairs with the Acquire load in the successor's `wait_locked`.
        node.wait_next().locked.store(true, Ordering::Release);
    }

    /// The queue head, holding the lock: if it is still the tail, empties the queue, `t,p,1 -> 0,p,1`,
    /// and returns `true`; if another tail was swapped in, returns `false` (a successor is linking in).
    ///
    /// A PENDING bit seen here is transient (invariant 1): its setter saw our tail and is about to clear
    /// it again. It is left alone and does not stop us emptying the queue: the kernel may treat it as
    /// "a successor is coming", because its pending setter then always queues; ours may be a thread with
    /// no queue node, which never links in, and waiting for it stalled the head
    /// while the node-less thread waited for the head.
    fn release_tail(&self, my_tail: u16) -> bool {
        let mut t = self.tail.load(Ordering::Relaxed);
        while t & TAIL_MASK == my_tail {
            // Relaxed: the queue protects no data; the lock is held and released by `locked`.
            match self.tail.compare_exchange_weak(
                t,
                t & PENDING,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => t = now,
            }
        }
        false
    }
}

#[cfg(loom)]
impl RawQueuedSpinLock {
    /// `lock` with an explicit queue node, as the loom models run it (same paths as `lock`/`lock_slow`).
    ///
    /// # Safety
    /// As [`lock_queued`](Self::lock_queued).
    pub(crate) unsafe fn lock_model<'n>(
        &self,
        node: &McsNode,
        my_tail: u16,
        node_of: impl Fn(u16) -> &'n McsNode,
    ) {
        if self.try_lock() || self.lock_pending() {
            return;
        }
        // SAFETY: forwarded contract.
        unsafe { self.lock_queued(node, my_tail, |t| Some(node_of(t))) }
    }

    /// `lock` as a thread with no queue node runs it (same paths as `lock_slow` without a slot).
    pub(crate) fn lock_model_unqueued(&self) {
        if self.try_lock() || self.lock_pending() {
            return;
        }
        self.lock_unqueued();
    }
}

#[cfg(not(loom))]
impl RawQueuedSpinLock {
    /// Takes the lock, by the fast, pending or queue path.
    ///
    /// ```
    /// let l = std::sync::Arc::new(locklab::raw::RawQueuedSpinLock::new());
    /// l.lock();
    /// let l2 = l.clone();
    /// let t = std::thread::spawn(move || {
    ///     l2.lock(); // waits (pending, then queued) until the main thread unlocks
    ///     // SAFETY: this thread took the lock just above.
    ///     unsafe { l2.unlock() };
    /// });
    /// // SAFETY: the `lock` above took the lock.
    /// unsafe { l.unlock() };
    /// t.join().unwrap();
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn lock(&self) {
        if !self.try_lock() {
            self.lock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        if self.lock_pending() {
            return;
        }
        let Some(slot) = thread_slot::current().filter(|s| s.qdepth.get() < QNODE_LEVELS) else {
            return self.lock_unqueued();
        };
        let level = slot.qdepth.get();
        slot.qdepth.set(level + 1);
        // The level is ours before any store to its node, as a signal handler on this thread sees it.
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        let my_tail = encode_tail(slot.index, level as u32);
        // SAFETY:
        // - `slot.qnodes[level]` is reserved for this wait by `qdepth` and never freed;
        // - every published tail names a registered slot's node, which is never freed (thread_slot).
        unsafe {
            self.lock_queued(&slot.qnodes[level], my_tail, |t| {
                let (s, l) = decode_tail(t);
                thread_slot::slot(s as usize).map(|slot| &slot.qnodes[l as usize])
            })
        };
        // The node's last use is done before the level is given back (as the claim above).
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        slot.qdepth.set(level);
    }
}

impl RawQueuedSpinLock {
    /// For threads without a free node: spin on `locked` alone (correct, not FIFO).
    #[cold]
    fn lock_unqueued(&self) {
        let mut wait = SpinWait::new();
        while !self.take_locked() {
            wait.wait();
        }
    }
}

#[cfg(not(loom))]
// SAFETY: mutual exclusion by the `locked` CAS (invariant 2), Acquire on taking and Release on unlock.
// The guard carries no state and the lock has no thread affinity (queue nodes are used only while
// waiting), so the guard may be sent.
crate::dep::spin_raw_mutex!(unsafe impl RawMutex for RawQueuedSpinLock);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A tail that names no thread slot of this process (the lock is in memory another process
    /// queues on): the waiter cannot link behind it, so it acts as the queue head instead of
    /// panicking, and takes the lock once it is free.
    #[cfg(not(loom))]
    #[test]
    fn a_foreign_tail_is_no_panic() {
        let l = std::sync::Arc::new(RawQueuedSpinLock::new());
        l.locked.store(1, Ordering::Relaxed);
        // Slot 16000: beyond any slot this test process registers.
        l.tail.store(encode_tail(16_000, 0), Ordering::Relaxed);
        let l2 = l.clone();
        let waiter = std::thread::spawn(move || {
            l2.lock();
            // SAFETY: taken just above.
            unsafe { l2.unlock() };
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        // SAFETY: held (set above).
        unsafe { l.unlock() };
        waiter.join().unwrap();
        assert!(!l.is_locked());
    }

    /// The step that stalled: a lone queue head holding the lock finds a transient
    /// PENDING (set by a thread that has no queue node and will never link in). It must still empty
    /// the queue rather than wait for a successor.
    #[test]
    fn head_empties_the_queue_despite_a_transient_pending() {
        let l = RawQueuedSpinLock::new();
        let me = encode_tail(3, 0);
        l.locked.store(1, Ordering::Relaxed);
        l.tail.store(me | PENDING, Ordering::Relaxed);
        assert!(l.release_tail(me), "no successor: the queue is emptied");
        assert_eq!(
            l.tail.load(Ordering::Relaxed),
            PENDING,
            "the setter clears its own bit"
        );
        // With a successor's tail swapped in, the head hands over instead.
        l.tail.store(encode_tail(4, 0), Ordering::Relaxed);
        assert!(!l.release_tail(me));
    }

    #[test]
    fn tail_encoding_round_trips() {
        for slot in [0u32, 1, 77, (1 << 14) - 2] {
            for level in 0..2 {
                let t = encode_tail(slot, level);
                assert_ne!(t, 0);
                assert_eq!(t & PENDING, 0);
                assert_eq!(decode_tail(t), (slot, level));
            }
        }
    }
}
