//! The operations each workload family runs in a trial (locks, refcounts, condvars, RCU), and the
//! `run_*` entry points that run a trial of one.

use super::*;
use crossbeam_utils::CachePadded;

/// A small per-operation pseudo-random choice (read or write) that costs a multiply.
#[inline]
pub(super) fn is_read(thread: usize, i: u64, read_pct: u32) -> bool {
    match read_pct {
        0 => false,
        100 => true,
        _ => {
            let x = (i ^ ((thread as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 32) % 100) < read_pct as u64
        }
    }
}

/// One `mutex`/`rw` operation of thread `t` on `lock`: shared (read) or exclusive (write the data and
/// the owner word), then think. Returns the acquisition latency if `sample` (else 0). The exclusive
/// section records who held the lock last in the data itself (`words[2]`, thread index + 1), so a change
/// of owner is counted exactly, under the lock.
#[inline(always)]
fn lock_op<L: LockUnderTest, const SAMPLE: bool, const MODE: u8>(
    lock: &L,
    clock: &dyn Clock,
    t: usize,
    i: u64,
    work: Work,
    tally: &mut Tally,
) -> u64 {
    let start = if SAMPLE { clock.now_ns() } else { 0 };
    let read = match MODE {
        ALL_READ => true,
        ALL_WRITE => false,
        _ => is_read(t, i, work.read_pct),
    };
    let latency = if read {
        lock.shared(|d| {
            let held = if SAMPLE { clock.now_ns() - start } else { 0 };
            tally.sink ^= d.read(work.cs_loops);
            held
        })
    } else {
        lock.exclusive(|d| {
            let held = if SAMPLE { clock.now_ns() - start } else { 0 };
            let me = t as u64 + 1;
            tally.exclusive += 1;
            tally.handovers += (d.words[2] != me) as u64;
            d.words[2] = me;
            d.write(work.cs_loops);
            held
        })
    };
    if work.think_loops > 0 {
        tally.sink ^= spin_work(work.think_loops, i);
    }
    latency
}

/// [`lock_op`]'s `MODE`: choose per op by `read_pct`.
const MIXED: u8 = 0;
/// Every op shared (`read_pct` 100): no per-op choice at all.
const ALL_READ: u8 = 1;
/// Every op exclusive (`read_pct` 0).
const ALL_WRITE: u8 = 2;

/// Runs `n` unsampled ops of `lock` with the read/write choice made once for the batch where it is
/// the same for every op (the per-op choice would otherwise cost a branch and a multiply per op).
#[inline(always)]
fn lock_batch<L: LockUnderTest>(
    lock: &L,
    clock: &dyn Clock,
    t: usize,
    i: u64,
    n: u64,
    work: Work,
    tally: &mut Tally,
) {
    // A fresh local whose address never escapes: after inlining its fields are registers. The
    // caller's tally may live in memory, and a lock's compiler barrier (an `asm!` without `nomem`, a
    // compiler fence) makes every op store and reload it there, a per-op store that can 4K-alias the
    // lock's hot word (measured, AMD EPYC: percpu-rwsem read 3.69 -> 3.46 ns per op).
    let mut local = Tally::default();
    match work.read_pct {
        100 => {
            for k in 0..n {
                lock_op::<L, false, ALL_READ>(lock, clock, t, i + k, work, &mut local);
            }
        }
        0 => {
            for k in 0..n {
                lock_op::<L, false, ALL_WRITE>(lock, clock, t, i + k, work, &mut local);
            }
        }
        _ => {
            for k in 0..n {
                lock_op::<L, false, MIXED>(lock, clock, t, i + k, work, &mut local);
            }
        }
    }
    tally.add(&local);
}

/// The per-op settings, copied out of the [`TrialSpec`] into the loop (by value: a lock's compiler
/// barrier would otherwise make every op reload them through the spec's reference).
#[derive(Clone, Copy)]
struct Work {
    cs_loops: u64,
    think_loops: u64,
    read_pct: u32,
    writers: usize,
}

impl Work {
    fn of(spec: &TrialSpec) -> Work {
        Work {
            cs_loops: spec.cs_loops,
            think_loops: spec.think_loops,
            read_pct: spec.read_pct,
            writers: spec.writers,
        }
    }
}

/// The `mutex`/`rw` operation on one lock.
struct LockOp<'a, L> {
    lock: Box<L>,
    clock: &'a dyn Clock,
    work: Work,
}

impl<L: LockUnderTest> Op for LockOp<'_, L> {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
        lock_op::<L, SAMPLE, MIXED>(&self.lock, self.clock, t, i, self.work, tally)
    }
    #[inline(always)]
    fn batch(&self, t: usize, i: u64, n: u64, tally: &mut Tally) {
        lock_batch(&*self.lock, self.clock, t, i, n, self.work, tally)
    }
}

/// Which of `k` locks op `i` of thread `t` takes: a multiply, independent of [`is_read`]'s choice.
#[inline(always)]
fn pick(t: usize, i: u64, k: usize) -> usize {
    let x = (i ^ ((t as u64) << 40)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    ((x >> 32) % k as u64) as usize
}

/// The `mutex`/`rw` operation over several instances of the lock (`--lock-count`): each op takes
/// one chosen pseudo-randomly.
struct MultiLockOp<'a, L> {
    locks: Box<[L]>,
    clock: &'a dyn Clock,
    work: Work,
}

impl<L: LockUnderTest> Op for MultiLockOp<'_, L> {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
        let l = &self.locks[pick(t, i, self.locks.len())];
        lock_op::<L, SAMPLE, MIXED>(l, self.clock, t, i, self.work, tally)
    }
    #[inline(always)]
    fn batch(&self, t: usize, i: u64, n: u64, tally: &mut Tally) {
        let mut local = Tally::default();
        for k in 0..n {
            let l = &self.locks[pick(t, i + k, self.locks.len())];
            lock_op::<L, false, MIXED>(l, self.clock, t, i + k, self.work, &mut local);
        }
        tally.add(&local);
    }
}

/// A trial of the `mutex` or `rw` workload on lock `L` (on `spec.lock_count` instances of it).
pub fn run_lock<L: LockUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    if spec.lock_count > 1 {
        let op = MultiLockOp {
            locks: (0..spec.lock_count).map(|_| L::new()).collect(),
            clock,
            work: Work::of(spec),
        };
        return run_trial(spec, clock, op);
    }
    let op = LockOp {
        lock: Box::new(L::new()),
        clock,
        work: Work::of(spec),
    };
    run_trial(spec, clock, op)
}

/// The `none` baseline's "lock": each thread's own copy of the data, no lock at all. Private to the
/// runner, which gives every thread its own (see [`run_unlocked`]).
#[repr(align(128))]
struct OwnData(std::cell::UnsafeCell<Shared>);

// SAFETY: `run_unlocked` is the only user: worker `t` only ever touches `slots[t]`, so no two threads
// access one `OwnData`. The type is private, so nothing else can share one.
unsafe impl Sync for OwnData {}

impl LockUnderTest for OwnData {
    fn new() -> Self {
        OwnData(Default::default())
    }
    #[inline]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        // SAFETY: only the one worker that owns this slot calls this (see the `Sync` impl), and never
        // re-entrantly, so this is the only reference to the data.
        f(unsafe { &mut *self.0.get() })
    }
}

/// A trial of the `mutex` or `rw` workload with no lock: the same loop and operation as [`run_lock`],
/// each thread on its own copy of the data. What the harness itself costs (the `none` row).
pub fn run_unlocked(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    struct UnlockedOp<'a> {
        slots: Vec<OwnData>,
        clock: &'a dyn Clock,
        work: Work,
    }
    impl Op for UnlockedOp<'_> {
        #[inline(always)]
        fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
            lock_op::<OwnData, SAMPLE, MIXED>(&self.slots[t], self.clock, t, i, self.work, tally)
        }
        #[inline(always)]
        fn batch(&self, t: usize, i: u64, n: u64, tally: &mut Tally) {
            lock_batch(&self.slots[t], self.clock, t, i, n, self.work, tally)
        }
    }
    let op = UnlockedOp {
        slots: (0..spec.threads).map(|_| OwnData::new()).collect(),
        clock,
        work: Work::of(spec),
    };
    run_trial(spec, clock, op)
}

/// The `none` baseline's reference count: nothing at all (the `refcount` loop's own cost).
pub struct NoCount;

impl RefCountUnderTest for NoCount {
    fn new() -> Self {
        NoCount
    }
    #[inline]
    fn get(&self) {}
    #[inline]
    fn put(&self) {}
}

/// The `refcount` operation on one count: get, hold for cs, put, think.
struct CountOp<'a, R> {
    count: R,
    clock: &'a dyn Clock,
    work: Work,
}

impl<R: RefCountUnderTest> Op for CountOp<'_, R> {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, _: usize, i: u64, tally: &mut Tally) -> u64 {
        let start = if SAMPLE { self.clock.now_ns() } else { 0 };
        self.count.get();
        let latency = if SAMPLE {
            self.clock.now_ns() - start
        } else {
            0
        };
        if self.work.cs_loops > 0 {
            tally.sink ^= spin_work(self.work.cs_loops, i);
        }
        self.count.put();
        if self.work.think_loops > 0 {
            tally.sink ^= spin_work(self.work.think_loops, i);
        }
        latency
    }
}

/// A trial of the `refcount` workload on count `R`: get, hold for cs, put, think.
pub fn run_refcount<R: RefCountUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    let op = CountOp {
        count: R::new(),
        clock,
        work: Work::of(spec),
    };
    run_trial(spec, clock, op)
}

/// The `condvar` operation: threads `0..producers` push one message each op, the others pop one
/// (waiting on the queue's condvars); alone, one thread pushes and pops (it never waits). The latency
/// is the whole push or pop, waits included. `cs` of work is done on each message under nothing (the
/// consumer's handling), `think` between ops.
struct CondvarOp<'a, C> {
    /// On the heap, on cache lines of its own, as the lock workloads' lock is. Kept inline in the
    /// operation, the queue lived on the timer thread's stack, and where it landed there moved one
    /// thread's rate by a third (our condvar at 1 thread: 70-79 M messages/s inline, 97-104 M here,
    /// parking_lot's 91-108 M either way).
    queue: Box<CachePadded<C>>,
    producers: usize,
    notify_all: bool,
    clock: &'a dyn Clock,
    work: Work,
}

impl<C: CondvarUnderTest> Op for CondvarOp<'_, C> {
    #[inline]
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
        let start = if SAMPLE { self.clock.now_ns() } else { 0 };
        if self.producers == 0 {
            // One thread: produce and consume in one op.
            if self.queue.produce(i, self.notify_all) {
                tally.sink ^= self.queue.consume(self.notify_all).unwrap_or(0);
            }
        } else if t < self.producers {
            self.queue.produce(i, self.notify_all);
        } else if let Some(m) = self.queue.consume(self.notify_all) {
            tally.sink ^= m;
            if self.work.cs_loops > 0 {
                tally.sink ^= spin_work(self.work.cs_loops, m);
            }
        }
        let latency = if SAMPLE {
            self.clock.now_ns() - start
        } else {
            0
        };
        if self.work.think_loops > 0 {
            tally.sink ^= spin_work(self.work.think_loops, i);
        }
        latency
    }
    fn stop(&self) {
        self.queue.close();
    }
}

/// A trial of the `condvar` workload on queue `C`. The outcome counts messages delivered: only the
/// consumers' op counts are kept (`per_thread_ops` has one entry per consumer; alone, the one thread
/// both produces and consumes).
pub fn run_condvar<C: CondvarUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    let producers = condvar_producers(spec.threads);
    let op = CondvarOp {
        queue: Box::new(CachePadded::new(C::new(spec.condvar.slots.max(1)))),
        producers,
        notify_all: spec.condvar.notify_all,
        clock,
        work: Work::of(spec),
    };
    let mut out = run_trial(spec, clock, op);
    out.per_thread_ops.drain(..producers);
    out
}

/// How many of `threads` produce in the `condvar` workload: half (rounded down), none alone.
pub fn condvar_producers(threads: usize) -> usize {
    if threads < 2 { 0 } else { threads / 2 }
}

/// [`RcuOp`]'s `MODE`: every op a read-side section (`rcu-read`).
const RCU_READ: u8 = 0;
/// Every op a retire of the thread's own slot (`call-rcu`).
const RCU_RETIRE: u8 = 1;
/// Threads `0..writers` update the published object, the others read it (`rcu-update`).
const RCU_UPDATE: u8 = 2;
/// Every op a `synchronize` (`rcu-sync`).
const RCU_SYNC: u8 = 3;

/// An RCU workload's operation on scheme `R`: `rcu-read` (read lock, dereference the published object
/// with `cs` of work on it, unlock; the latency is the time to get into the read side with the object
/// in hand), `call-rcu` (publish a new object in the thread's own slot and retire the old one; the
/// latency is the whole retire call), `rcu-update` (threads `0..writers` replace the published
/// object and retire the old one, timed as a retire; the others read as in `rcu-read`) or `rcu-sync`
/// (a blocking grace period, timed whole). Then think.
struct RcuOp<'a, R, const MODE: u8> {
    rcu: Box<R>,
    clock: &'a dyn Clock,
    work: Work,
}

impl<R: RcuUnderTest, const MODE: u8> Op for RcuOp<'_, R, MODE> {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
        let start = if SAMPLE { self.clock.now_ns() } else { 0 };
        let since = || {
            if SAMPLE {
                self.clock.now_ns() - start
            } else {
                0
            }
        };
        let latency = if MODE == RCU_SYNC {
            self.rcu.synchronize();
            since()
        } else if MODE == RCU_RETIRE {
            self.rcu.retire(t, i);
            since()
        } else if MODE == RCU_UPDATE && t < self.work.writers {
            self.rcu.update(t, i);
            since()
        } else {
            self.rcu.read(t, i, |d| {
                let held = since();
                tally.sink ^= d.read(self.work.cs_loops);
                held
            })
        };
        if self.work.think_loops > 0 {
            tally.sink ^= spin_work(self.work.think_loops, i);
        }
        latency
    }
}

/// A trial of an RCU workload on scheme `R`. After the window the scheme frees what it retired
/// (untimed), so trials do not inherit each other's backlog.
fn run_rcu<R: RcuUnderTest, const MODE: u8>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    let op = RcuOp::<R, MODE> {
        rcu: Box::new(R::new(spec.threads)),
        clock,
        work: Work::of(spec),
    };
    let before = if MODE == RCU_SYNC {
        op.rcu.sync_counts()
    } else {
        None
    };
    let mut out = run_trial(spec, clock, &op);
    op.rcu.drain();
    if let (Some((g0, c0)), Some((g1, c1))) = (before, op.rcu.sync_counts()) {
        out.sync_counts = Some((g1 - g0, c1 - c0));
    }
    out
}

/// A trial of `rcu-read` on scheme `R`.
pub fn run_rcu_read<R: RcuUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    run_rcu::<R, RCU_READ>(spec, clock)
}

/// A trial of `call-rcu` on scheme `R`.
pub fn run_call_rcu<R: RcuUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    run_rcu::<R, RCU_RETIRE>(spec, clock)
}

/// A trial of `rcu-sync` on scheme `R`: every op a `synchronize`.
pub fn run_rcu_sync<R: RcuUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    run_rcu::<R, RCU_SYNC>(spec, clock)
}

/// A trial of `rcu-update` on scheme `R`: threads `0..writers` update, the others read.
pub fn run_rcu_update<R: RcuUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    run_rcu::<R, RCU_UPDATE>(spec, clock)
}
