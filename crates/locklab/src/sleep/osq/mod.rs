//! OSQ, the optimistic spin queue: an MCS queue of *spinners*, so that only its head spins on a
//! contended lock's word while the others spin on their own nodes. Used by [`crate::raw::RawMutex`]
//! (and the rwsem) for their optimistic-spinning phase.
//!
//! # Algorithm (after the kernel's `osq_lock.c`)
//! The queue is `tail`, the *id* of the last node (0: empty), a 32-bit word as the kernel's
//! `optimistic_spin_queue` (which names a CPU): each thread has one node ([`ThreadSlot::osq`]), whose id is
//! its slot's index plus one, so the whole queue costs its lock four bytes. That is what lets the
//! adaptive mutex fit in glibc's `pthread_mutex_t` beside the fields glibc's users read.
//! - Lock: initialise my node, `swap` it into `tail`. Old tail null: I am the head. Else record `prev`,
//!   link `prev.next = me`, spin on my `locked` until my predecessor hands me headship.
//! - Unqueue, when my spin budget runs out before I became head, in three labelled steps:
//!   - **Step A**: unlink from my predecessor: `cas(prev.next: me -> null)`. If that fails I raced with my
//!     predecessor handing over (it took `prev.next` to give me `locked`): if `locked` is set I am head
//!     after all. Else re-read `prev` (the predecessor may have unqueued itself and rewritten my `prev`)
//!     and retry.
//!   - **Step B**: pin my successor: if I am the tail, move `tail` back to `prev` and I am done; else wait
//!     for `me.next` to be set and take it (`swap(me.next, null)`), so nobody else will write it.
//!   - **Step C**: splice: `next.prev = prev; prev.next = next`.
//! - Unlock: `cas(tail: me -> null)` if I am last; else take my successor (as step B, with no `prev`) and
//!   set its `locked`.
//!
//! # Node lifetime
//! A racing unqueue can read a neighbour's node after that neighbour has left the queue (as the kernel
//! does with per-CPU nodes). Nodes therefore live in type-stable memory: thread slots are never freed.
//! A stale read sees a valid node whose fields make the CAS in step A fail, and the retry re-reads.
//!
//! # Invariants
//! 1. `prev.next == me` only while I am queued behind `prev`; whoever `swap`s/`cas`es it away owns the
//!    next action on me (the predecessor's hand-over, or my step A).
//! 2. After step B, my successor (if any) cannot be handed `locked` by me or reached through me.
//!
//! # Memory orderings
//! - `tail.swap` / `tail.cas` in unqueue are AcqRel: Release publishes my node's initialisation to the
//!   successor that reads it via `tail`; Acquire makes my predecessor's initialisation visible to me.
//! - Stores of `prev.next` (Release) pair with the Acquire `swap`/loads of `next`.
//! - `next.locked = true` (Release) pairs with the Acquire load of `locked` by the new head.
//!   The OSQ protects no data: the lock it guards has its own Acquire/Release; these orderings only keep
//!   node fields consistent between neighbours.

use crate::clock::SpinBudget;
use crate::primitive::{AtomicU32, Ordering, SpinWait, spin_loop};

/// `pause` steps a queued spinner takes before it starts yielding the CPU between looks.
const OSQ_SPINS: u32 = 128;
use core::ptr;

pub(crate) mod node;
#[cfg(loom)]
use node::LOOM_NODES;
pub use node::OsqNode;

/// The node named by a nonzero `id`.
#[cfg(not(loom))]
#[inline]
fn node_of(id: u32) -> *mut OsqNode {
    match crate::thread_slot::slot(id as usize - 1) {
        Some(slot) => slot.osq.as_ptr(),
        // A queued id always names a published slot (it was read from a node that was queued).
        None => unreachable!("OSQ id {id} names no thread slot"),
    }
}

/// The node named by a nonzero `id` (loom).
#[cfg(loom)]
fn node_of(id: u32) -> *mut OsqNode {
    LOOM_NODES.lock().unwrap()[id as usize - 1] as *mut OsqNode
}

/// The id of `node`, or 0 for null.
#[inline]
fn id_of(node: *mut OsqNode) -> u32 {
    if node.is_null() {
        0
    } else {
        // SAFETY: non-null nodes handed around by the queue are type-stable.
        unsafe { (*node).id() }
    }
}

#[cfg(not(loom))]
impl Default for OsqNode {
    fn default() -> Self {
        Self::new()
    }
}

/// An optimistic spin queue. See the [module documentation](self).
pub struct Osq {
    tail: AtomicU32,
}

impl Osq {
    /// Whether some spinner is queued (a relaxed look: a hint for callers deciding whether to join).
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.tail.load(Ordering::Relaxed) != 0
    }

    crate::primitive::const_unless_loom! {
        /// An empty queue.
        pub fn new() -> Self {
            Osq {
                tail: AtomicU32::new(0),
            }
        }
    }

    /// Joins the queue and waits to become its head. Returns `true` as head (call [`unlock`]
    /// afterwards), `false` if `budget` ran out first (the node has been unqueued).
    ///
    /// # Safety
    /// - `node` lives forever at a fixed address (type-stable memory), has a nonzero id that names it
    ///   (a thread slot's node, or a registered loom node), and is in no queue;
    /// - every node ever queued on this `Osq` does too.
    ///
    /// [`unlock`]: Osq::unlock
    pub unsafe fn lock(&self, node: &OsqNode, budget: &mut SpinBudget) -> bool {
        let me = node.as_ptr();
        node.next.store(ptr::null_mut(), Ordering::Relaxed);
        node.locked.store(false, Ordering::Relaxed);
        // AcqRel: see "Memory orderings".
        let prev = self.tail.swap(node.id(), Ordering::AcqRel);
        if prev == 0 {
            return true;
        }
        let prev = node_of(prev);
        node.prev.store(prev, Ordering::Relaxed);
        // SAFETY: nodes are type-stable (contract).
        unsafe { (*prev).next.store(me, Ordering::Release) };

        let mut wait = SpinWait::with_spins(OSQ_SPINS);
        loop {
            // Acquire pairs with the Release store of `locked` in `unlock`.
            if node.locked.load(Ordering::Acquire) {
                return true;
            }
            if budget.expired() {
                break;
            }
            // Pause a little, then yield: a queued spinner must not keep the CPU from the lock holder
            // (or from its predecessors) on an oversubscribed machine.
            wait.wait();
        }

        // Step A: unlink from prev.
        let mut prev = node.prev.load(Ordering::Relaxed);
        loop {
            // SAFETY: nodes are type-stable (contract).
            let prev_next = unsafe { &(*prev).next };
            if prev_next.load(Ordering::Relaxed) == me
                && prev_next
                    .compare_exchange(me, ptr::null_mut(), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
            // We lost the race to our predecessor's hand-over, or it unqueued and rewrote our `prev`.
            // Acquire pairs with the Release store of `locked` in `unlock`.
            if node.locked.load(Ordering::Acquire) {
                return true;
            }
            spin_loop();
            prev = node.prev.load(Ordering::Relaxed);
        }

        // Step B: pin our successor, or move the tail back to prev if there is none.
        // SAFETY: nodes are type-stable (contract).
        let Some(next) = (unsafe { self.wait_next(node, prev) }) else {
            return false;
        };

        // Step C: splice prev <-> next.
        // SAFETY: nodes are type-stable (contract).
        unsafe {
            (*next).prev.store(prev, Ordering::Relaxed);
            // Release pairs with the Acquire swap/loads of `prev.next`.
            (*prev).next.store(next, Ordering::Release);
        }
        false
    }

    /// Step B (and the unlock's successor lookup): returns our successor, which from now on can reach us
    /// no more, or `None` after moving `tail` from us back to `prev` (null to empty the queue).
    ///
    /// # Safety
    /// As [`lock`](Osq::lock); `node` is queued on this `Osq`.
    unsafe fn wait_next(&self, node: &OsqNode, prev: *mut OsqNode) -> Option<*mut OsqNode> {
        loop {
            // AcqRel: Release hands the tail's publication duty for `prev` back; Acquire for symmetry
            // with the swap in `lock`.
            let (me_id, prev_id) = (node.id(), id_of(prev));
            if self.tail.load(Ordering::Relaxed) == me_id
                && self
                    .tail
                    .compare_exchange(me_id, prev_id, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return None;
            }
            // A successor exists (the tail moved on): wait for it to link, and take the link so nobody
            // else acts on it (invariant 1).
            if !node.next.load(Ordering::Relaxed).is_null() {
                // Acquire pairs with the successor's Release store of `me.next`.
                let next = node.next.swap(ptr::null_mut(), Ordering::Acquire);
                if !next.is_null() {
                    return Some(next);
                }
            }
            spin_loop();
        }
    }

    /// Leaves the head of the queue, making the next spinner head.
    ///
    /// # Safety
    /// `node` is this queue's head (a `lock` with it returned `true`).
    pub unsafe fn unlock(&self, node: &OsqNode) {
        // Release: publishes nothing but keeps the tail's history ordered for the next swap (Acquire).
        if self
            .tail
            .compare_exchange(node.id(), 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        // Acquire pairs with the successor's Release store of `me.next`.
        let mut next = node.next.swap(ptr::null_mut(), Ordering::Acquire);
        if next.is_null() {
            // SAFETY: forwarded contract.
            match unsafe { self.wait_next(node, ptr::null_mut()) } {
                Some(n) => next = n,
                None => return,
            }
        }
        // SAFETY: nodes are type-stable (contract). Release pairs with the Acquire load of `locked`.
        unsafe { (*next).locked.store(true, Ordering::Release) };
    }
}

#[cfg(not(loom))]
impl Default for Osq {
    fn default() -> Self {
        Self::new()
    }
}
