//! `call_rcu`: callbacks that run after a grace period, queued on per-thread segmented lists.
//!
//! # Algorithm (the kernel's rcu_segcblist, per thread instead of per CPU)
//! Each reader record (one per thread and domain) owns a [`SegList`] under a small spinlock that only
//! its thread and the domain's grace-period thread ever take:
//!
//! ```text
//!   DONE        WAIT (gp a)      NEXT_READY (gp b)     NEXT
//!   ready       after gp a       after gp b            no grace period assigned yet
//! ```
//!
//! - `call_rcu` appends to NEXT: it locks the caller's own list (a locked instruction on the caller's
//!   own cache line; the grace-period thread takes it once per pass) and bumps the list's length. No
//!   shared counter, no shared queue, no fence: that is seed 004's point. The only shared accesses are
//!   plain loads: the grace-period thread's `state` (to wake it if it sleeps) and the domain's
//!   completed grace-period count (to advance the list).
//! - **Accelerate** (grace-period thread, holding the domain's `gp_lock`, so no grace period is
//!   running): NEXT gets the target `completed + 1`, the next grace period, which starts after now. It
//!   joins WAIT or NEXT_READY if one has that target, else takes the first free segment.
//! - **Advance**: a segment whose target is `<= completed` moves to DONE.
//! - The grace-period thread (one per domain, started by the first `call_rcu`) loops: holding
//!   `gp_lock`, for every record: lock, advance, take DONE, accelerate, unlock; then, with no lock
//!   held (a callback may call `synchronize`), invoke the callbacks taken, in queue order; run a grace
//!   period if any list waits for one, else sleep until kicked (or 10 ms).
//!
//! # Who runs callbacks
//! The grace-period thread runs every callback, except trivial drops: `defer_drop` of a type with no
//! drop glue is only a deallocation, which the queueing thread runs itself at its next `call_rcu` once
//! the grace period is over (as the kernel runs callbacks on the CPU that queued them): the memory goes
//! back to the allocator that gave it, from a hot cache, and the grace-period thread does not compete
//! for the CPUs. If the owner does not come back within one pass of the grace-period thread (or has
//! exited), the grace-period thread runs them. Either way one invoker at a time per list (the
//! record's `invoking` flag), in queue order. Closures and drops with drop glue never run on a
//! `call_rcu` caller's thread (they could take a lock the caller holds).
//!
//! # Flood control
//! Every `call_rcu` wakes the grace-period thread if it sleeps idle; at [`LIMIT`] callbacks on one list
//! its thread waits until the list drains below [`HIGH_WATER`]. Memory is bounded by threads x
//! [`LIMIT`] callbacks.
//!
//! # Invariants
//! 1. Per list, one invoker at a time (the `invoking` flag, held from taking a batch to the end of
//!    running it), batches taken in queue order: callbacks run in queue order, and `invoked` counts
//!    them (`rcu_barrier` relies on both).
//! 2. A callback moves NEXT -> (WAIT | NEXT_READY) -> DONE only forwards, and to DONE only once the
//!    grace period it was assigned, which started after it was queued, has completed.
//! 3. Lists belong to records, which are never freed: a thread that exits leaves its callbacks to the
//!    grace-period thread, which scans every record, in use or not. Nothing is lost or run early.

use super::protocol::{Callback, drop_box, segments_pass};
use super::{RcuDomain, Record};
use core::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Length of one thread's list down to which a flooding thread waits (see [`LIMIT`]).
pub const HIGH_WATER: usize = 10_000;
/// Length of one thread's list at which `call_rcu` waits for it to drain below [`HIGH_WATER`].
pub const LIMIT: usize = 4 * HIGH_WATER;

/// How long the idle grace-period thread sleeps between looks (a missed wake costs at most this).
const IDLE_SLEEP: Duration = Duration::from_millis(10);
/// The pause between two grace periods while callbacks keep coming: a grace period `membarrier`s every
/// running thread of the process twice (an interrupt each), so back-to-back grace periods would
/// interrupt the `call_rcu` callers thousands of times a second. A list past half of [`HIGH_WATER`]
/// cuts the pause short.
const GP_INTERVAL: Duration = Duration::from_millis(1);

/// `GpThread::state`: running a pass or a grace period.
const RUNNING: u32 = 0;
/// Sleeping with nothing to do: any `call_rcu` wakes it.
const IDLE: u32 = 1;
/// Pausing between grace periods: only a list past half of [`HIGH_WATER`] wakes it.
const PACING: u32 = 2;

/// The domain's grace-period thread state.
pub(super) struct GpThread {
    /// [`RUNNING`], [`IDLE`] or [`PACING`]; `call_rcu` wakes it (a plain load on the common path).
    pub(super) state: AtomicU32,
    /// Callbacks invoked (all lists).
    pub(super) invoked: core::sync::atomic::AtomicU64,
    /// Passes of the loop (statistics).
    pub(super) passes: core::sync::atomic::AtomicU64,
}

impl GpThread {
    pub(super) const fn new() -> Self {
        GpThread {
            state: AtomicU32::new(RUNNING),
            invoked: core::sync::atomic::AtomicU64::new(0),
            passes: core::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Wakes the thread if it sleeps idle, or pauses between grace periods while `len` (the caller's
    /// list) is past half of [`HIGH_WATER`].
    pub(super) fn kick(&self, len: usize) {
        // Relaxed: a missed wake costs at most IDLE_SLEEP (the thread re-checks on its own).
        let s = self.state.load(Ordering::Relaxed);
        if s == IDLE || (s == PACING && len >= HIGH_WATER / 2) {
            self.state.store(RUNNING, Ordering::Relaxed);
            crate::sys::futex_wake(&self.state, 1);
        }
    }

    /// Sleeps in `state` until kicked or `t` passes.
    fn sleep(&self, state: u32, t: Duration) {
        // Relaxed: see `kick`.
        self.state.store(state, Ordering::Relaxed);
        crate::sys::futex_wait(&self.state, state, Some(t));
        self.state.store(RUNNING, Ordering::Relaxed);
    }
}

impl RcuDomain {
    /// Starts the grace-period thread once. Not under Miri, which rejects a process that exits with a
    /// thread still running: there the waiters (`rcu_barrier`, a flooding `call_rcu`) run the passes
    /// themselves ([`help`](Self::help)).
    fn ensure_gp_thread(&'static self) {
        #[cfg(miri)]
        return;
        #[cfg(not(miri))]
        self.gp_thread_started.call_once(|| {
            std::thread::Builder::new()
                .name("locklab-rcu-gp".into())
                .spawn(move || {
                    // Not the affinity of the thread whose `call_rcu` spawned us (it may be pinned:
                    // we would compete with it for its CPU).
                    crate::sys::use_process_affinity();
                    self.gp_thread_loop()
                })
                .expect("locklab::rcu: cannot spawn the grace-period thread");
        });
    }

    fn gp_thread_loop(&'static self) -> ! {
        loop {
            if self.gp_pass() {
                self.synchronize_inner();
                // Pass once more at once (run what this grace period released), then pace.
                if self.gp_pass() {
                    self.gpt.sleep(PACING, GP_INTERVAL);
                }
            } else if !self.any_pending_next() {
                self.gpt.sleep(IDLE, IDLE_SLEEP);
            }
        }
    }

    /// Waiting for callbacks: wakes the grace-period thread, or under Miri (no such thread) does its
    /// work: a pass, and a grace period if one is needed.
    fn help(&'static self) {
        if cfg!(miri) {
            if self.gp_pass() {
                self.synchronize_inner();
            }
        } else {
            self.gpt.kick(LIMIT);
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Whether any list holds callbacks with no grace period assigned (new work while idle).
    fn any_pending_next(&self) -> bool {
        self.snapshot_records().iter().any(|r| r.cbs.lock().len > 0)
    }

    /// One pass over every list: advance, take what is ready, accelerate; invoke. Returns whether a
    /// grace period is needed.
    pub(super) fn gp_pass(&'static self) -> bool {
        self.gpt.passes.fetch_add(1, Ordering::Relaxed);
        let mut waiting = false;
        let mut batches = vec![];
        {
            // No grace period runs while we hold it: the next one starts after our accelerate.
            let _g = self.gp_lock.lock().unwrap_or_else(|e| e.into_inner());
            // Acquire pairs with the Release increment of `completed` in `synchronize`: the grace
            // period's waits happen-before the callbacks it releases.
            let completed = self.completed.load(Ordering::Acquire);
            for r in self.snapshot_records() {
                let mut l = r.cbs.lock();
                waiting |= segments_pass(&mut l, completed);
                if l.done.is_empty() {
                    continue;
                }
                // Ours to run: the owner is gone, or had a pass to do it, or cannot (not trivial).
                // Relaxed `in_use`: a stale `true` only delays this to the next pass.
                let ours =
                    l.done_stale || !r.in_use.load(Ordering::Relaxed) || !l.done[0].trivial();
                // Acquire pairs with the Release that ended the last invoker's batch (FIFO per list).
                if ours
                    && r.invoking
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    batches.push((r, l.take_done()));
                } else {
                    l.done_stale = true;
                }
            }
        }
        for (r, ready) in batches {
            self.invoke(r, ready);
        }
        waiting
    }

    /// Runs a batch taken from `r`'s list while holding `r.invoking`, then lets go of it.
    fn invoke(&self, r: &Record, batch: Vec<Callback>) {
        let n = batch.len() as u64;
        for cb in batch {
            if cb.trivial() {
                cb.invoke(); // a deallocation: cannot unwind
            } else if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb.invoke()))
                .is_err()
            {
                eprintln!("locklab::rcu: a call_rcu callback panicked (the others still run)");
            }
        }
        // Once per batch, after all of it ran: `rcu_barrier` waits for `invoked >= queued` and sees
        // the callbacks' effects (Release pairs with its Acquire load).
        r.invoked.fetch_add(n, Ordering::Release);
        self.gpt.invoked.fetch_add(n, Ordering::Relaxed);
        // Release: the next invoker of this list (Acquire CAS) runs after this batch.
        r.invoking.store(false, Ordering::Release);
    }

    fn snapshot_records(&self) -> Vec<&'static Record> {
        self.records.snapshot()
    }

    /// Queues `f` to run after a grace period of this domain, on the domain's grace-period thread.
    ///
    /// The common path touches only the calling thread's own list (module docs): it scales with
    /// threads. Past [`LIMIT`] pending callbacks on this thread it waits for them to drain.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use locklab::rcu::RcuDomain;
    /// static D: RcuDomain = RcuDomain::new();
    /// static RAN: AtomicBool = AtomicBool::new(false);
    /// D.call_rcu(|| RAN.store(true, Ordering::SeqCst));
    /// D.rcu_barrier();
    /// assert!(RAN.load(Ordering::SeqCst));
    /// ```
    pub fn call_rcu(&'static self, f: impl FnOnce() + Send + 'static) {
        self.enqueue(Callback::Closure(Box::new(f)));
    }

    /// Drops `value` after a grace period of this domain (the kernel's `kfree_rcu`): like
    /// `call_rcu(move || drop(value))` without allocating the callback.
    ///
    /// ```
    /// use locklab::rcu::RcuDomain;
    /// static D: RcuDomain = RcuDomain::new();
    /// D.defer_drop(Box::new(vec![1, 2, 3]));
    /// D.rcu_barrier();
    /// assert_eq!(D.pending_callbacks(), 0);
    /// ```
    pub fn defer_drop<T: Send + 'static>(&'static self, value: Box<T>) {
        self.enqueue(Callback::Drop {
            drop: drop_box::<T>,
            ptr: Box::into_raw(value) as *mut (),
            trivial: !std::mem::needs_drop::<T>(),
        });
    }

    fn enqueue(&'static self, cb: Callback) {
        self.ensure_gp_thread();
        let (rec, one_off) = self.record();
        let (len, mine) = {
            let mut l = rec.cbs.lock();
            l.push(cb);
            // Acquire pairs with the Release increment of `completed`: the grace period's waits
            // happen-before the callbacks it releases.
            l.advance(self.completed.load(Ordering::Acquire));
            // Trivial drops that are ready run here, on the thread that queued them (module docs).
            let mine = (!l.done.is_empty()
                && l.done[0].trivial()
                && rec
                    .invoking
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok())
            .then(|| l.take_trivial_done());
            (l.len, mine)
        };
        if let Some(batch) = mine {
            self.invoke(rec, batch);
        }
        if one_off {
            // A late thread-local destructor: the record goes back to the pool with its callbacks,
            // which the grace-period thread still scans (invariant 3).
            // Release: the next holder's Acquire claim sees the record idle.
            rec.in_use.store(false, Ordering::Release);
        }
        // Wakes the grace-period thread only if it sleeps (a plain load otherwise).
        self.gpt.kick(len);
        if len >= LIMIT {
            self.wait_for_drain(rec);
        }
    }

    /// Flood control: waits until `rec`'s list is below [`HIGH_WATER`].
    #[cold]
    fn wait_for_drain(&'static self, rec: &'static Record) {
        while rec.cbs.lock().len >= HIGH_WATER {
            self.help();
        }
    }

    /// Waits until every callback queued (on any thread) before the call has run.
    ///
    /// Panics inside a read-side section of this domain (the grace periods would wait for it).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// static N: AtomicUsize = AtomicUsize::new(0);
    /// let d = locklab::rcu::RcuDomain::global();
    /// for _ in 0..10 {
    ///     d.call_rcu(|| { N.fetch_add(1, Ordering::SeqCst); });
    /// }
    /// d.rcu_barrier();
    /// assert_eq!(N.load(Ordering::SeqCst), 10);
    /// ```
    pub fn rcu_barrier(&'static self) {
        assert!(
            !self.in_read_section(),
            "locklab::rcu: rcu_barrier inside a read-side section would wait for itself"
        );
        let targets: Vec<(&'static Record, u64)> = self
            .snapshot_records()
            .into_iter()
            .map(|r| (r, r.cbs.lock().queued))
            .collect();
        if targets
            .iter()
            .all(|(r, q)| r.invoked.load(Ordering::Acquire) >= *q)
        {
            return;
        }
        self.ensure_gp_thread();
        // Per list, callbacks run in queue order (invariant 1): `invoked >= queued-at-snapshot`
        // means every callback queued before the snapshot has run.
        for (r, q) in targets {
            // Acquire pairs with the Release increment after each callback.
            while r.invoked.load(Ordering::Acquire) < q {
                self.help();
            }
        }
    }

    /// Callbacks queued and not yet invoked, over every thread's list.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// d.rcu_barrier();
    /// let _ = d.pending_callbacks();
    /// ```
    pub fn pending_callbacks(&self) -> usize {
        self.snapshot_records()
            .iter()
            .map(|r| r.cbs.lock().len)
            .sum()
    }

    /// Callbacks invoked so far.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// d.call_rcu(|| {});
    /// d.rcu_barrier();
    /// assert!(d.callbacks_invoked() >= 1);
    /// ```
    pub fn callbacks_invoked(&self) -> u64 {
        self.gpt.invoked.load(Ordering::Relaxed)
    }
}

/// Queues `f` on the global domain (see [`RcuDomain::call_rcu`]).
///
/// ```
/// locklab::rcu::call_rcu(|| println!("after a grace period"));
/// locklab::rcu::rcu_barrier();
/// ```
pub fn call_rcu(f: impl FnOnce() + Send + 'static) {
    RcuDomain::global().call_rcu(f)
}

/// [`RcuDomain::rcu_barrier`] on the global domain.
///
/// ```
/// locklab::rcu::rcu_barrier();
/// ```
pub fn rcu_barrier() {
    RcuDomain::global().rcu_barrier()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rcu::protocol::SegList;

    fn cb(log: &std::sync::Arc<std::sync::Mutex<Vec<u32>>>, v: u32) -> Callback {
        let log = log.clone();
        Callback::Closure(Box::new(move || log.lock().unwrap().push(v)))
    }

    /// The segment transitions, step by step: nothing runs before its grace period has completed,
    /// and queue order is kept.
    #[test]
    fn segments_advance_only_after_their_grace_period() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let mut l = SegList::default();
        l.push(cb(&log, 1));
        l.accelerate(7);
        assert_eq!(l.wait.as_ref().map(|w| w.0), Some(7));
        l.push(cb(&log, 2));
        l.accelerate(8); // NEXT_READY
        assert_eq!(l.next_ready.as_ref().map(|w| w.0), Some(8));
        l.push(cb(&log, 3));
        l.accelerate(8); // the same target: joins NEXT_READY
        l.push(cb(&log, 4));
        l.accelerate(9); // both taken: merged into NEXT_READY with the later target
        assert_eq!(
            l.next_ready.as_ref().map(|w| (w.0, w.1.len())),
            Some((9, 3))
        );
        l.advance(6);
        assert!(l.take_done().is_empty(), "grace period 7 has not completed");
        l.advance(7);
        for f in l.take_done() {
            f.invoke();
        }
        assert_eq!(*log.lock().unwrap(), [1]);
        assert_eq!(l.wait.as_ref().map(|w| w.0), Some(9), "NEXT_READY moved up");
        l.advance(8);
        assert!(l.take_done().is_empty(), "3 and 4 need grace period 9");
        l.advance(9);
        for f in l.take_done() {
            f.invoke();
        }
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 4]);
        assert_eq!((l.len, l.queued), (0, 4));
        assert!(!l.waiting());
    }
}
