//! `call_rcu` for every flavour: callbacks that run after a grace period, appended to per-thread
//! logs and run by one grace-period thread per domain.
//!
//! # Algorithm (the kernel's rcu_segcblist, per thread instead of per CPU, with a wait-free append)
//! Each domain has an [`Engine`]: a pool of callback records (one per thread that queued on the
//! domain) and the state of the domain's grace-period thread. A record has two sides:
//!
//! - the **log** ([`CbLog`], `protocol.rs`): a single-producer list of chunks of 64 callbacks that
//!   only the record's holder appends to, and a `tail` count of callbacks published;
//! - the **segments** ([`Segs`]), under a small spinlock that only the consumers take (the
//!   grace-period thread once per pass, the holder once every [`POLL`] calls): the grace periods of
//!   the log's callbacks, as index ranges, and the consumers' read position `head`:
//!
//! ```text
//!   [head, done_end)  [.., wait.end)   [.., ready.end)      [assigned, tail)
//!   DONE: ready       WAIT (gp a)      NEXT_READY (gp b)    NEXT: no grace period assigned yet
//! ```
//!
//! - **`call_rcu`** appends to the caller's own log: write the slot, store `tail + 1` (Release). No
//!   lock, no read-modify-write, no fence, no shared counter: that is seed 004's point, carried to
//!   its end (the kernel's `call_rcu` disables interrupts instead; a thread cannot). At a chunk
//!   boundary (one call in 64) it takes a chunk the consumers emptied (a free stack: consumers
//!   push one at a time, the producer takes all at once, so no ABA; allocation only when the backlog
//!   grows). The only shared accesses are plain loads: the thread-started flag and the grace-period
//!   thread's `state` (to wake it from idle: once per idle spell, never per call).
//! - **Poll** (every [`POLL`] calls, the holder, with `try_lock` so never waiting for a pass):
//!   advance its segments, run the trivial drops now ready (below), wake a pacing grace-period
//!   thread if its list passed half of [`HIGH_WATER`] (once per batch), apply flood control (also
//!   at any call that finds its list at [`LIMIT`]).
//! - **Accelerate** (grace-period thread, holding the domain's grace-period lock, so no grace period
//!   is running): NEXT, up to the `tail` it loads (Acquire), gets the target `completed + 1`, the
//!   next grace period, which starts after that load and so after those callbacks were queued.
//! - **Advance**: a segment whose target is `<= completed` moves to DONE.
//! - The grace-period thread loops: holding the grace-period lock, for every record: lock, advance,
//!   take DONE (if ours to run, below), accelerate, unlock; then, with no lock held (a callback may
//!   call `synchronize`), invoke the callbacks taken, in queue order; run a grace period if any list
//!   waits for one or a polled grace period was requested, pass again, and pause [`GP_INTERVAL`]
//!   (cut short by a long list). With nothing pending it pauses once more before sleeping idle
//!   (10 ms, or until a `call_rcu` wakes it), so a stream of callbacks does not wake it per call.
//!
//! # Who runs callbacks
//! The grace-period thread runs every callback, except trivial drops: `defer_drop` of a type with no
//! drop glue is only a deallocation, which the queueing thread runs itself at its next poll once
//! the grace period is over, under its list's lock (frees on the thread that allocated: the
//! allocator's thread cache stays warm). The grace-period thread takes such drops only from a
//! thread that is gone, or that left them ready across a pause (a stale DONE). Closures and drops
//! with drop glue never run on a `call_rcu` caller's thread (they could take a lock the caller
//! holds).
//!
//! # Flood control, and call_rcu inside a reader
//! A `call_rcu` wakes the grace-period thread if it sleeps idle. At [`LIMIT`] callbacks on one
//! list, a thread that may wait for a grace period waits until its list drains below
//! [`HIGH_WATER`]. A thread that may not (inside a read-side section of the domain, an online QSBR
//! thread of it, or the grace-period thread itself, in a callback) never waits: it kicks the
//! grace-period thread and its list grows past the mark, as the kernel's does. So one thread's list
//! holds at most [`LIMIT`] callbacks plus those it queues without a quiescent state in between (inside
//! one read-side section, or in one batch of callbacks).
//!
//! # Panics
//! A panicking callback is caught and reported (the others still run), including one whose panic
//! payload panics again when dropped; the grace-period thread also survives a panic of its own loop.
//!
//! # fork()
//! A fork's prepare handler ([`Engine::prepare_fork`]) waits until the grace-period thread holds no
//! batch of callbacks (it stops taking them while a fork is pending), then takes the pool's lock and
//! every list's lock, so the child's copy is consistent: no callback is in flight, no list half
//! updated. The child has no grace-period thread: the next `call_rcu`, barrier or polled request
//! starts one, and it runs the callbacks that were pending at the fork (in the child, on the child's
//! copy of the memory, as the parent runs them on its own). Lists of threads that do not exist in the
//! child go back to the pool. Appends are not locked: a thread caught by the fork in the middle
//! of one leaves the child's log consistent, because each step of an append is one word (link a
//! chunk, move to it, write the slot, publish `tail`) and the next holder redoes what is missing
//! (it reuses a chunk already linked and rewrites an unpublished slot). A callback that forks (itself, or through `std::process::Command`)
//! is the exception: the prepare handler cannot wait for the batch it is part of, so that batch
//! stays in flight in both processes, each finished by its copy of the grace-period thread (in the
//! child, the only thread). Nor can another thread's fork wait for a pass that waits for it (a
//! callback forking at the same time, which glibc makes wait for the other fork's handlers; a
//! callback waiting for a lock the forking thread holds): after [`FORK_PATIENCE`] the fork goes
//! on, and the batches that pass holds run in the parent only (the child counts them as run, from
//! `taken`, so its barriers do not wait for them).
//!
//! # Invariants
//! 1. Per list, one invoker at a time (the `invoking` flag, held from taking a batch to the end of
//!    running it), batches taken in queue order: callbacks run in queue order, and `invoked` counts
//!    them (barriers rely on both).
//! 2. A callback moves NEXT -> (WAIT | NEXT_READY) -> DONE only forwards, and to DONE only once the
//!    grace period it was assigned, which started after it was queued, has completed.
//! 3. Records are never freed: a thread that exits leaves its callbacks to the grace-period thread,
//!    which scans every record, in use or not. Nothing is lost or run early.
//! 4. One producer per log at a time: the record's holder (claim Acquire, release Release, so a
//!    thread that adopts a record continues the log where the last holder stopped). Consumers read
//!    only below a `tail` they loaded (Acquire), so every slot they read is written, and free or
//!    recycle a chunk only once `tail` is past it (the producer is done with it).
//!
//! # Memory orderings
//! `tail`: the producer's Release store pairs with the consumers' Acquire load (slot contents and
//! chunk links). The free stack: the consumers' Release CAS pairs with the producer's Acquire swap
//! (their reads of the slots come before the producer rewrites them). `invoked`: Release after each
//! batch, Acquire in barriers. `completed`: Acquire (the grace period's waits happen-before the
//! callbacks it releases). `state`: Relaxed (a missed wake costs at most the idle sleep).

use super::gp::GpSeq;
use super::protocol::{Callback, CbLog, Segs, drop_box, segments_pass, warn};
use super::registry::{Pooled, Registry};
use core::cell::{Cell, RefCell};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Length of one thread's list down to which a flooding thread waits (see [`LIMIT`]).
///
/// ```
/// use locklab::rcu::{HIGH_WATER, LIMIT};
/// // A flooding thread waits at `LIMIT` queued callbacks until its list is back under `HIGH_WATER`.
/// assert!(HIGH_WATER < LIMIT);
/// ```
pub const HIGH_WATER: usize = 10_000;
/// Length of one thread's list at which `call_rcu` waits for it to drain below [`HIGH_WATER`] (unless
/// the caller may not wait: module docs of `locklab::rcu`, "Flood control").
///
/// ```
/// use locklab::rcu::{HIGH_WATER, LIMIT};
/// assert_eq!(LIMIT, 4 * HIGH_WATER);
/// ```
pub const LIMIT: usize = 4 * HIGH_WATER;

// A list under flood control's mark recycles its chunks without allocating (see `KEEP_FREE`).
const _: () = assert!(super::protocol::KEEP_FREE as usize * super::protocol::CHUNK >= LIMIT);

/// How long the idle grace-period thread sleeps between looks (a missed wake costs at most this).
const IDLE_SLEEP: Duration = Duration::from_millis(10);
/// The pause between two grace periods while callbacks keep coming: a memb grace period
/// `membarrier`s every running thread of the process twice (an interrupt each), so back-to-back
/// grace periods would interrupt the `call_rcu` callers thousands of times a second. A list past half
/// of [`HIGH_WATER`] cuts the pause short.
const GP_INTERVAL: Duration = Duration::from_millis(1);
fn gpi() -> Duration {
    static K: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *K.get_or_init(|| {
        std::env::var("LL_GPI_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(GP_INTERVAL)
    })
}

/// How long a fork's prepare handler waits for the grace-period thread's pass to end (see
/// `Engine::prepare_fork`).
const FORK_PATIENCE: Duration = Duration::from_secs(1);

/// `Engine::state`: running a pass or a grace period.
const RUNNING: u32 = 0;
/// Sleeping with nothing to do: any `call_rcu` wakes it.
const IDLE: u32 = 1;
/// Pausing between grace periods: only a list past half of [`HIGH_WATER`] wakes it.
const PACING: u32 = 2;

/// `Engine::thread`: no grace-period thread (never started, or a fork child).
const NO_THREAD: u32 = 0;
/// One is being spawned.
const STARTING: u32 = 1;
/// It runs.
const STARTED: u32 = 2;

/// One thread's callback list in one domain. Cache-line aligned: lists of different threads never
/// share a line.
#[repr(align(128))]
pub(super) struct CbRecord {
    /// The holder's log: it appends with plain stores (module docs).
    log: CbLog,
    /// The consumers' side: the grace periods of the log's callbacks, and what was taken.
    list: crate::TasLock<Segs>,
    /// `list`'s reader position, mirrored for lock-free looks (flood control, `pending`): written
    /// under the list's lock after each take. Relaxed: an estimate (a stale value is older, so larger
    /// lengths: a flooding thread waits a little longer; the idle check passes once more).
    head: AtomicU64,
    /// Callbacks of this list invoked so far (in queue order; barriers).
    invoked: AtomicU64,
    /// Callbacks of this list taken to be invoked so far (under the list's lock): `taken - invoked`
    /// are in flight, which a fork child whose grace-period thread was running them counts as done
    /// (they run in the parent only).
    taken: AtomicU64,
    /// Someone is running a batch of this list's callbacks (invariant 1).
    invoking: AtomicBool,
    /// A thread holds this record.
    in_use: AtomicBool,
}

impl CbRecord {
    fn new() -> Self {
        let (log, reader) = CbLog::new();
        CbRecord {
            log,
            list: crate::TasLock::new(Segs::new(reader)),
            head: AtomicU64::new(0),
            invoked: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            invoking: AtomicBool::new(false),
            in_use: AtomicBool::new(true),
        }
    }

    /// Callbacks queued and not yet taken (an estimate: see `head`).
    fn len(&self) -> usize {
        // Relaxed: see `head`; `tail` is ours when the caller is the holder.
        let h = self.head.load(Ordering::Relaxed);
        self.log.published().saturating_sub(h) as usize
    }

    /// Counts `n` callbacks taken to be invoked (the caller holds the list's lock, which orders the
    /// takers of one list).
    fn count_taken(&self, n: usize) {
        // Relaxed: written under the list's lock; read by a fork child only.
        let t = self.taken.load(Ordering::Relaxed);
        self.taken.store(t + n as u64, Ordering::Relaxed);
    }
}

impl Pooled for CbRecord {
    fn in_use(&self) -> &AtomicBool {
        &self.in_use
    }
}

/// A domain's side of the engine: its grace periods and its rules on who may wait.
pub(super) trait Host: Sync + 'static {
    /// The domain's engine.
    fn engine(&self) -> &Engine;
    /// The domain's grace-period sequence.
    fn gp(&self) -> &GpSeq;
    /// One grace period of the flavour's protocol (run under the sequence's lock).
    fn grace_period_body(&'static self);
    /// Whether the calling thread may wait for a grace period of this domain (not inside one of its
    /// read-side sections, not as an online QSBR thread of it).
    fn may_wait(&'static self) -> bool;
    /// Registers the domain's `fork()` handlers (once).
    fn fork_hooks(&'static self);
    /// The flavour's names for `call_rcu` and the barrier, for messages.
    fn names(&self) -> (&'static str, &'static str);
    /// A shared grace period that ends after the one named by `cookie`.
    fn run_gp_until(&'static self, cookie: u64) {
        self.gp().run_until(cookie, || self.grace_period_body());
    }
    /// A shared grace period that starts after the call.
    fn run_gp(&'static self) {
        self.gp().synchronize(|| self.grace_period_body());
    }
}

/// Per domain: the callback records and the grace-period thread's state.
pub(super) struct Engine {
    recs: Registry<CbRecord>,
    /// [`RUNNING`], [`IDLE`] or [`PACING`]; `call_rcu` wakes it (a plain load on the common path).
    state: AtomicU32,
    /// [`NO_THREAD`], [`STARTING`] or [`STARTED`]. Relaxed throughout: it only decides which caller
    /// spawns the thread; what the thread reads is published by the spawn itself.
    thread: AtomicU32,
    /// The latest polled cookie whose grace period was requested (`start_poll_synchronize`).
    requested: AtomicU64,
    /// 1 while a fork is being prepared: the grace-period thread takes no batch.
    fork_pending: AtomicU32,
    /// 1 while a pass may hold batches (from before its check of `fork_pending` to their end).
    in_pass: AtomicU32,
    /// The grace-period thread's last round had work: it paces once more before sleeping idle, so
    /// that callers streaming callbacks do not wake it from idle over and over. Relaxed: that
    /// thread's own (an atomic only because the engine is shared).
    had_work: AtomicBool,
}

std::thread_local! {
    /// The callback records this thread holds, by engine address.
    static HELD: Held = const { Held(RefCell::new(Vec::new())) };
    /// The last (engine, record) used: `call_rcu`'s fast path. No destructor.
    static LAST: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// The engine whose callback this thread is running now (0: none). No destructor.
    static IN_CALLBACK: Cell<usize> = const { Cell::new(0) };
    /// This thread is a grace-period thread. No destructor.
    static ON_GP_THREAD: Cell<bool> = const { Cell::new(false) };
}

struct Held(RefCell<Vec<(usize, &'static CbRecord)>>);

impl Drop for Held {
    fn drop(&mut self) {
        LAST.set((0, 0));
        for (_, r) in self.0.borrow().iter() {
            // Release: the next holder's Acquire claim sees our last list updates (the list's lock
            // orders those too). The callbacks stay: the grace-period thread scans every record.
            r.in_use.store(false, Ordering::Release);
        }
    }
}

/// Drops a panic payload whose own `Drop` may panic: that second payload is leaked, not dropped.
fn swallow(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)))
    {
        core::mem::forget(again);
    }
}

impl Engine {
    pub(super) const fn new() -> Self {
        Engine {
            recs: Registry::new(),
            state: AtomicU32::new(RUNNING),
            thread: AtomicU32::new(NO_THREAD),
            requested: AtomicU64::new(0),
            fork_pending: AtomicU32::new(0),
            in_pass: AtomicU32::new(0),
            had_work: AtomicBool::new(false),
        }
    }

    /// Callbacks queued and not yet invoked, over every thread's list.
    pub(super) fn pending(&self) -> usize {
        self.recs
            .snapshot()
            .iter()
            .map(|r| {
                let l = r.list.lock();
                (r.log.published() - l.reader.head) as usize
            })
            .sum()
    }

    /// Callbacks invoked so far (the sum over the lists: no shared counter on the callers' path).
    pub(super) fn invoked(&self) -> u64 {
        // Acquire: pairs with the Release increment after each batch.
        self.recs
            .snapshot()
            .iter()
            .map(|r| r.invoked.load(Ordering::Acquire))
            .sum()
    }

    /// Tests: the length of the calling thread's list.
    #[cfg(test)]
    pub(super) fn my_record_len(&'static self) -> usize {
        self.my_record().0.len()
    }

    /// This thread's record, and whether it is a one-off (thread-local storage gone).
    fn my_record(&'static self) -> (&'static CbRecord, bool) {
        let me = self as *const Engine as usize;
        let (e, r) = LAST.get();
        if e == me {
            // SAFETY: stored below from a `&'static CbRecord` this thread holds (records are never
            // freed); `Held`'s destructor clears the cache before the thread gives its records back.
            return (unsafe { &*(r as *const CbRecord) }, false);
        }
        let claim = || self.recs.claim(CbRecord::new);
        let found = HELD.try_with(|h| {
            if let Some(&(_, r)) = h.0.borrow().iter().find(|(e, _)| *e == me) {
                return r;
            }
            let r = claim();
            h.0.borrow_mut().push((me, r));
            r
        });
        match found {
            Ok(r) => {
                LAST.set((me, r as *const CbRecord as usize));
                (r, false)
            }
            // In a thread-local destructor after ours ran: a record for this call alone.
            Err(_) => (claim(), true),
        }
    }

    /// Wakes the thread if it sleeps idle, or pauses between grace periods while `len` (the caller's
    /// list) is past half of [`HIGH_WATER`].
    fn kick(&self, len: usize) {
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

    /// Whether any list holds callbacks (work for an idle thread).
    fn any_pending(&self) -> bool {
        self.recs.snapshot().iter().any(|r| r.len() > 0)
    }

    /// Runs a batch taken from `r`'s list while holding `r.invoking`, then lets go of it.
    fn invoke(&self, r: &CbRecord, batch: Vec<Callback>, names: (&str, &str)) {
        let n = batch.len() as u64;
        let outer = IN_CALLBACK.replace(self as *const Engine as usize);
        for cb in batch {
            if cb.trivial() {
                cb.invoke(); // a deallocation: cannot unwind
            } else if let Err(p) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb.invoke()))
            {
                warn(format_args!(
                    "locklab::rcu: a {} callback panicked (the others still run)",
                    names.0
                ));
                swallow(p);
            }
        }
        IN_CALLBACK.set(outer);
        // Once per batch, after all of it ran: barriers wait for `invoked >= queued` and see the
        // callbacks' effects (Release pairs with their Acquire load).
        r.invoked.fetch_add(n, Ordering::Release);
        // Release: the next invoker of this list (Acquire CAS) runs after this batch.
        r.invoking.store(false, Ordering::Release);
    }

    // ----- fork (unused where there is no fork) -----------------------------------------------------

    /// Before `fork()`: no batch in flight, the pool and every list locked, their guards parked
    /// (module docs).
    #[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
    pub(super) fn prepare_fork(&'static self) {
        // SeqCst (and on `in_pass` below): Dekker's pattern with the pass, which sets `in_pass` and
        // then reads `fork_pending`: either it sees the fork pending and takes nothing, or we see it
        // in its pass and wait for the end.
        self.fork_pending.store(1, Ordering::SeqCst);
        // A callback of ours that forks (directly, or through `std::process::Command`) is that pass:
        // waiting for it would never end. Its batches stay in flight, in both processes, on the
        // thread that runs them (the child is a copy of it: `child_after_fork`). A pass that does
        // not end within `FORK_PATIENCE` may be waiting for this very fork (a callback forking on
        // the grace-period thread while this thread forks: glibc runs one fork's handlers at a
        // time): the fork goes on, and the batches that pass holds run in the parent only.
        let since = std::time::Instant::now();
        while !self.forking_in_own_callback()
            && self.in_pass.load(Ordering::SeqCst) != 0
            && since.elapsed() < FORK_PATIENCE
        {
            crate::sys::futex_wait(&self.in_pass, 1, Some(Duration::from_millis(1)));
        }
        let pool = self.recs.lock_for_fork();
        let recs = pool.clone();
        super::fork::park(Box::new(pool));
        for r in recs {
            super::fork::park(Box::new(r.list.lock()));
        }
    }

    /// After `fork()`, in the parent (locks still held, released after): the thread goes on.
    #[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
    pub(super) fn parent_after_fork(&self) {
        // SeqCst: see `prepare_fork`.
        self.fork_pending.store(0, Ordering::SeqCst);
        crate::sys::futex_wake(&self.fork_pending, u32::MAX);
    }

    /// After `fork()`, in the child (locks still held, released after): lists of vanished threads
    /// returned to the pool (their callbacks stay, to run here); no grace-period thread, unless this
    /// thread is it (a callback forked).
    #[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
    pub(super) fn child_after_fork(&self) {
        // Relaxed (all the stores below): the child runs on this one thread until it spawns another,
        // and the spawn orders these stores before anything that thread does.
        self.fork_pending.store(0, Ordering::Relaxed);
        self.release_vanished_records();
        if self.forking_in_own_callback() {
            // This thread is the domain's grace-period thread, in a callback: it goes on as the
            // child's grace-period thread, finishing its batches (whose `invoking` flags stay
            // set), as its original does in the parent.
            return;
        }
        // SAFETY: `prepare_fork` took the pool's lock on the thread this one is a copy of.
        for r in unsafe { self.recs.held_snapshot() } {
            // A batch in flight at the fork (prepare ran out of patience) belonged to the
            // grace-period thread, which does not exist here: it runs in the parent only. Counted
            // as run, so that barriers here do not wait for it; nobody invokes here now.
            r.invoked
                .store(r.taken.load(Ordering::Relaxed), Ordering::Relaxed);
            r.invoking.store(false, Ordering::Relaxed);
        }
        self.thread.store(NO_THREAD, Ordering::Relaxed);
        self.state.store(RUNNING, Ordering::Relaxed);
        self.in_pass.store(0, Ordering::Relaxed);
    }

    /// Whether the calling thread is running one of this engine's callbacks (on its grace-period
    /// thread: the others run only trivial drops, which cannot fork).
    #[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
    fn forking_in_own_callback(&self) -> bool {
        IN_CALLBACK.get() == self as *const Engine as usize
    }

    /// In a fork child: the lists of threads that do not exist here go back to the pool (their
    /// callbacks stay, to run here).
    #[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
    fn release_vanished_records(&self) {
        let mine: Vec<usize> = HELD
            .try_with(|h| {
                h.0.borrow()
                    .iter()
                    .map(|(_, r)| *r as *const CbRecord as usize)
                    .collect()
            })
            .unwrap_or_default();
        // SAFETY: `prepare_fork` took the pool's lock on the thread this one is a copy of.
        for r in unsafe { self.recs.held_snapshot() } {
            if !mine.contains(&(r as *const CbRecord as usize)) {
                // Relaxed: see `child_after_fork`.
                r.in_use.store(false, Ordering::Relaxed);
            }
        }
    }
}

/// Starts `h`'s grace-period thread unless it runs. Not under Miri, which rejects a process that exits
/// with a thread still running: there the waiters (barriers, a flooding `call_rcu`) run the passes
/// themselves ([`help`]).
fn ensure_thread<H: Host>(h: &'static H) {
    let e = h.engine();
    // Relaxed: see `Engine::thread`.
    if e.thread.load(Ordering::Relaxed) == STARTED || cfg!(miri) {
        return;
    }
    start_thread(h);
}

#[cold]
#[inline(never)]
fn start_thread<H: Host>(h: &'static H) {
    let e = h.engine();
    // Relaxed: see `Engine::thread` (the CAS alone decides who spawns).
    if e.thread
        .compare_exchange(NO_THREAD, STARTING, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return; // another thread starts it
    }
    h.fork_hooks();
    let spawned = std::thread::Builder::new()
        .name("locklab-rcu-gp".into())
        .spawn(move || {
            ON_GP_THREAD.set(true);
            // Not the affinity of the thread whose `call_rcu` spawned us (it may be pinned: we would
            // compete with it for its CPU).
            crate::sys::use_process_affinity();
            loop {
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(h))) {
                    warn(format_args!(
                        "locklab::rcu: the grace-period thread caught a panic and goes on"
                    ));
                    swallow(p);
                }
            }
        });
    // Relaxed: see `Engine::thread`.
    match spawned {
        Ok(_) => e.thread.store(STARTED, Ordering::Relaxed),
        Err(err) => {
            e.thread.store(NO_THREAD, Ordering::Relaxed);
            panic!("locklab::rcu: cannot spawn the grace-period thread: {err}");
        }
    }
}

/// One round of the grace-period thread.
fn step<H: Host>(h: &'static H) {
    let e = h.engine();
    // SeqCst: see `Engine::prepare_fork`.
    while e.fork_pending.load(Ordering::SeqCst) != 0 {
        crate::sys::futex_wait(&e.fork_pending, 1, Some(Duration::from_millis(1)));
    }
    // Acquire: pairs with the AcqRel `fetch_max` of the request.
    let requested = e.requested.load(Ordering::Acquire);
    if pass(h, true) || !h.gp().done(requested) {
        e.had_work.store(true, Ordering::Relaxed);
        h.run_gp();
        // Pass once more at once (run what this grace period released, except the owners' trivial
        // drops: they get the pause to run them themselves), then pace.
        if pass(h, false) {
            e.sleep(PACING, gpi());
        }
    } else if !e.any_pending() {
        if e.had_work.swap(false, Ordering::Relaxed) {
            // One paced look more before idling: callers that stream callbacks find us pacing
            // (no wake needed) rather than idle (a wake from their next call).
            e.sleep(PACING, gpi());
        } else {
            e.sleep(IDLE, IDLE_SLEEP);
        }
    } else {
        // Only ready callbacks left to their owners (trivial drops, which they run at their next
        // poll, or the next pass takes): not a busy loop on their lists' locks.
        e.sleep(PACING, gpi());
    }
}

/// Clears `in_pass` and wakes a fork's prepare handler, however the pass ends.
struct PassEnd<'a>(&'a AtomicU32);

impl Drop for PassEnd<'_> {
    fn drop(&mut self) {
        // SeqCst: see `Engine::prepare_fork`.
        self.0.store(0, Ordering::SeqCst);
        crate::sys::futex_wake(self.0, 1);
    }
}

/// One pass over every list: advance, take what is ready, accelerate; invoke. Returns whether a
/// grace period is needed. Ready trivial drops of a live owner are taken only if `take_stale` and
/// they were already ready at an earlier pass (the owner had a pause to run them).
fn pass<H: Host>(h: &'static H, take_stale: bool) -> bool {
    let e = h.engine();
    let mut waiting = false;
    let mut batches = vec![];
    let _end;
    {
        // No grace period runs while we hold it: the next one starts after our accelerate.
        let _g = h.gp().lock();
        // SeqCst: see `Engine::prepare_fork`.
        e.in_pass.store(1, Ordering::SeqCst);
        _end = PassEnd(&e.in_pass);
        let forking = e.fork_pending.load(Ordering::SeqCst) != 0;
        // Acquire (in `completed`): the grace period's waits happen-before the callbacks it releases.
        let completed = h.gp().completed();
        for r in e.recs.snapshot() {
            let mut l = r.list.lock();
            // Acquire (in `published`): the callbacks below it are written; their callers'
            // unpublishing happened before, hence before the next grace period (which starts after
            // we let go of the grace-period lock).
            let tail = r.log.published();
            waiting |= segments_pass(&mut l, completed, tail);
            if l.ready() == 0 || forking {
                continue;
            }
            // SAFETY: we hold the list's lock; `head < done_end <= tail`.
            let trivial = unsafe { r.log.peek(&mut l.reader) }.trivial();
            // Ours to run: the owner is gone, or had a poll to do it, or cannot (not trivial).
            // Relaxed `in_use`: a stale `true` only delays this to the next pass.
            let ours =
                (take_stale && l.done_stale) || !r.in_use.load(Ordering::Relaxed) || !trivial;
            // Acquire pairs with the Release that ended the last invoker's batch (FIFO per list).
            if ours
                && r.invoking
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                let mut batch = Vec::with_capacity(l.ready() as usize);
                // SAFETY: we hold the list's lock of `r.log`.
                let n = unsafe { l.take_done(&r.log, |_| true, |cb| batch.push(cb)) };
                r.count_taken(n as usize);
                // Relaxed: see `CbRecord::head`.
                r.head.store(l.reader.head, Ordering::Relaxed);
                batches.push((r, batch));
            } else {
                l.done_stale = true;
            }
        }
    }
    for (r, ready) in batches {
        e.invoke(r, ready, h.names());
    }
    waiting
}

/// Waiting for callbacks: wakes the grace-period thread, or under Miri (no such thread) does its
/// work: a pass, and a grace period if one is needed.
fn help<H: Host>(h: &'static H) {
    if cfg!(miri) {
        if pass(h, true) {
            h.run_gp();
        }
    } else {
        h.engine().kick(LIMIT);
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// How many of its own `call_rcu`s a thread makes between two polls of its list (module docs).
const POLL: u64 = 64;

/// Queues `cb` on the calling thread's list of `h` (module docs).
#[inline]
pub(super) fn enqueue<H: Host>(h: &'static H, cb: Callback) {
    ensure_thread(h);
    let e = h.engine();
    let (rec, one_off) = e.my_record();
    // SAFETY: this thread holds `rec` (from `my_record`, until `Held`'s destructor or the one-off
    // release below), so it is the log's only producer; `call_rcu` is not called from signal
    // handlers (it may allocate).
    let tail = unsafe { rec.log.push(cb) };
    if one_off {
        // A late thread-local destructor: the record goes back to the pool with its callbacks, which
        // the grace-period thread still scans (invariant 3).
        // Release: the next holder's Acquire claim sees the record idle (and our pushes).
        rec.in_use.store(false, Ordering::Release);
        e.kick(rec.len());
        return;
    }
    // Relaxed: a plain load of a line the grace-period thread writes only when it sleeps or wakes
    // (see `kick`); the wake happens once per idle spell, not per call.
    if e.state.load(Ordering::Relaxed) == IDLE {
        e.kick(0);
    }
    // `len`: two plain loads of the record's own line (flood control is exact, not once a poll).
    if tail % POLL == 0 || rec.len() >= LIMIT {
        poll(h, rec);
    }
}

/// Every [`POLL`] calls: runs the trivial drops of the caller's list whose grace period is over (on
/// this thread, as the kernel runs callbacks on the CPU that queued them), wakes a pacing
/// grace-period thread for a long list, and applies flood control.
#[cold]
#[inline(never)]
fn poll<H: Host>(h: &'static H, rec: &'static CbRecord) {
    let e = h.engine();
    // `try_lock`: the grace-period thread's pass holds it briefly, and does the work itself then.
    if let Some(mut l) = rec.list.try_lock() {
        // Acquire (in `completed`): the grace period's waits happen-before the callbacks it releases.
        l.advance(h.gp().completed());
        // SAFETY (peek): we hold the list's lock; `head < done_end <= tail`.
        if l.ready() > 0
            && unsafe { rec.log.peek(&mut l.reader) }.trivial()
            && rec
                .invoking
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // Under the list's lock, so a fork never finds such a batch in flight. Deallocations
            // only: they cannot unwind or call back into RCU.
            // SAFETY: we hold the list's lock of `rec.log`.
            let n = unsafe { l.take_done(&rec.log, Callback::trivial, Callback::invoke) };
            rec.count_taken(n as usize);
            // Release: barriers' Acquire loads see the drops done (as `Engine::invoke`).
            rec.invoked.fetch_add(n, Ordering::Release);
            // Release: the next invoker of this list (Acquire CAS) runs after this batch.
            rec.invoking.store(false, Ordering::Release);
            // Relaxed: see `CbRecord::head`.
            rec.head.store(l.reader.head, Ordering::Relaxed);
        }
    }
    let len = rec.len();
    e.kick(len);
    if len >= LIMIT && !ON_GP_THREAD.get() && h.may_wait() {
        wait_for_drain(h, rec);
    }
}

/// Flood control: waits until `rec`'s list is below [`HIGH_WATER`].
#[cold]
fn wait_for_drain<H: Host>(h: &'static H, rec: &'static CbRecord) {
    while rec.len() >= HIGH_WATER {
        help(h);
    }
}

/// `defer_drop`'s callback: drops `value` after a grace period.
pub(super) fn drop_callback<T: Send + 'static>(value: Box<T>) -> Callback {
    Callback::Drop {
        drop: drop_box::<T>,
        ptr: Box::into_raw(value) as *mut (),
        trivial: !std::mem::needs_drop::<T>(),
    }
}

/// Waits until every callback queued on `h` (on any thread) before the call has run. Panics where it
/// would wait for itself: where the caller may not wait for a grace period, or inside one of `h`'s
/// own callbacks.
pub(super) fn barrier<H: Host>(h: &'static H) {
    let e = h.engine();
    let (call, name) = h.names();
    assert!(
        h.may_wait(),
        "locklab::rcu: {name} inside a read-side section (or, for QSBR, on an online thread) of the \
         same domain would wait for itself"
    );
    assert!(
        IN_CALLBACK.get() != e as *const Engine as usize,
        "locklab::rcu: {name} inside a {call} callback of the same domain would wait for itself"
    );
    let targets: Vec<(&'static CbRecord, u64)> = e
        .recs
        .snapshot()
        .into_iter()
        .map(|r| (r, r.log.published()))
        .collect();
    if targets
        .iter()
        .all(|(r, q)| r.invoked.load(Ordering::Acquire) >= *q)
    {
        return;
    }
    ensure_thread(h);
    // Per list, callbacks run in queue order (invariant 1): `invoked >= queued-at-snapshot` means
    // every callback queued before the snapshot has run.
    for (r, q) in targets {
        // Acquire pairs with the Release increment after each batch.
        while r.invoked.load(Ordering::Acquire) < q {
            help(h);
        }
    }
}

/// `start_poll_synchronize`: asks the grace-period thread for the grace period named by `cookie`.
pub(super) fn request<H: Host>(h: &'static H, cookie: u64) {
    // AcqRel: pairs with the thread's Acquire load.
    h.engine().requested.fetch_max(cookie, Ordering::AcqRel);
    if cfg!(miri) {
        return; // no thread: `poll` stays false until someone runs a grace period
    }
    ensure_thread(h);
    h.engine().kick(LIMIT);
}

#[cfg(test)]
mod tests {
    use crate::rcu::protocol::{CHUNK, Callback, CbLog, Segs};

    fn cb(log: &std::sync::Arc<std::sync::Mutex<Vec<u32>>>, v: u32) -> Callback {
        let log = log.clone();
        Callback::Closure(Box::new(move || log.lock().unwrap().push(v)))
    }

    /// Runs the ready callbacks of `s`.
    fn run(l: &CbLog, s: &mut Segs) -> u64 {
        // SAFETY: one thread: producer and consumer by turns.
        unsafe { s.take_done(l, |_| true, Callback::invoke) }
    }

    /// The segment transitions, step by step: nothing runs before its grace period has completed,
    /// and queue order is kept.
    #[test]
    fn segments_advance_only_after_their_grace_period() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let (l, r) = CbLog::new();
        let mut s = Segs::new(r);
        // SAFETY (each push): this thread is the only producer.
        unsafe { l.push(cb(&log, 1)) };
        s.accelerate(7, l.published());
        assert_eq!(s.wait, Some((7, 1)));
        unsafe { l.push(cb(&log, 2)) };
        s.accelerate(8, l.published()); // NEXT_READY
        assert_eq!(s.next_ready, Some((8, 2)));
        unsafe { l.push(cb(&log, 3)) };
        s.accelerate(8, l.published()); // the same target: joins NEXT_READY
        unsafe { l.push(cb(&log, 4)) };
        s.accelerate(9, l.published()); // both taken: merged into NEXT_READY with the later target
        assert_eq!(s.next_ready, Some((9, 4)));
        s.advance(6);
        assert_eq!(run(&l, &mut s), 0, "grace period 7 has not completed");
        s.advance(7);
        assert_eq!(run(&l, &mut s), 1);
        assert_eq!(*log.lock().unwrap(), [1]);
        assert_eq!(s.wait, Some((9, 4)), "NEXT_READY moved up");
        s.advance(8);
        assert_eq!(run(&l, &mut s), 0, "3 and 4 need grace period 9");
        s.advance(9);
        assert_eq!(run(&l, &mut s), 3);
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 4]);
        assert_eq!((s.reader.head, l.published()), (4, 4));
        assert!(!s.waiting());
        // SAFETY: nobody else uses the log.
        unsafe { l.destroy(&mut s.reader) };
    }

    /// The log across many chunks, consumed in bursts between pushes: every callback runs once, in
    /// queue order (chunks are recycled through the spare).
    #[test]
    fn log_keeps_order_across_chunks() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let (l, r) = CbLog::new();
        let mut s = Segs::new(r);
        let total = 5 * CHUNK as u32 + 3;
        let mut gp = 0;
        for v in 0..total {
            // SAFETY: this thread is the only producer.
            unsafe { l.push(cb(&log, v)) };
            if v % 7 == 0 {
                gp += 1;
                s.accelerate(gp, l.published());
                s.advance(gp - 1);
                run(&l, &mut s);
            }
        }
        s.accelerate(gp + 1, l.published());
        s.advance(gp + 1);
        run(&l, &mut s);
        assert_eq!(*log.lock().unwrap(), (0..total).collect::<Vec<_>>());
        // SAFETY: nobody else uses the log.
        unsafe { l.destroy(&mut s.reader) };
    }

    /// Emptied chunks come back to the producer: a second round of the same backlog allocates no
    /// chunk.
    #[test]
    fn emptied_chunks_are_reused() {
        let (l, r) = CbLog::new();
        let mut s = Segs::new(r);
        let nothing = || Callback::Closure(Box::new(|| {}));
        let mut made = 0;
        for round in 1..=3u64 {
            for _ in 0..20 * CHUNK {
                // SAFETY: this thread is the only producer.
                unsafe { l.push(nothing()) };
            }
            s.accelerate(round, l.published());
            s.advance(round);
            run(&l, &mut s);
            let now = l.made.load(core::sync::atomic::Ordering::Relaxed);
            if round == 2 {
                made = now;
            }
            if round == 3 {
                assert_eq!(now, made, "round 3 allocated chunks");
            }
        }
        // SAFETY: nobody else uses the log.
        unsafe { l.destroy(&mut s.reader) };
    }
}
