//! Runs one trial: N threads on one lock, a start barrier, a warm-up, a fixed measurement window, a
//! stop flag. Produces raw counts; the metrics layer turns trials into result rows.
//!
//! Timing comes from a [`Clock`], so the runner can be tested with a deterministic mock clock.

mod ops;
mod system;
mod under_test;
use crate::engine::calibrated_work::spin_work;
use crate::engine::workload::Shared;
use hdrhistogram::Histogram;
#[cfg(test)]
use ops::is_read;
pub use ops::*;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};
pub use system::*;
pub use under_test::{CondvarUnderTest, LockUnderTest, RcuUnderTest, RefCountUnderTest};

/// Every this-many-th acquisition is timed when the warm-up gives no rate to size the period by (see
/// [`sample_period`]).
pub const SAMPLE_EVERY: u64 = 64;

/// How often to time an acquisition, given the warm-up's ns per op per thread: often enough for
/// thousands of samples, rarely enough that the two clock reads of a sample (~40-100 ns on a VM) cost
/// under about 1% of the loop (for a 4 ns op, one op in 4,096; for a 10 us op, one in 16). A power of
/// two from [`PUBLISH_EVERY`] (the first op of a batch) to 4,096.
pub fn sample_period(ns_per_op_per_thread: Option<f64>) -> u64 {
    match ns_per_op_per_thread {
        Some(ns) if ns.is_finite() && ns > 0.0 => {
            let want = (10_000.0 / ns).clamp(PUBLISH_EVERY as f64, 4096.0) as u64;
            want.next_power_of_two().min(4096)
        }
        _ => SAMPLE_EVERY,
    }
}
/// Each worker publishes its op count every this many ops.
pub const PUBLISH_EVERY: u64 = 16;

/// Time as the runner sees it.
pub trait Clock: Sync {
    /// Nanoseconds since some fixed point.
    fn now_ns(&self) -> u64;
    /// Waits for `ns` nanoseconds (the measurement window and warm-up).
    fn sleep_ns(&self, ns: u64);
}

/// The monotonic clock.
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
    fn sleep_ns(&self, ns: u64) {
        std::thread::sleep(Duration::from_nanos(ns));
    }
}

/// What one trial runs.
#[derive(Clone, Debug)]
pub struct TrialSpec {
    /// Worker threads.
    pub threads: usize,
    /// Critical-section work, in calibrated loops.
    pub cs_loops: u64,
    /// Private work between operations, in calibrated loops.
    pub think_loops: u64,
    /// Percent of operations that take the shared mode (`rw` only; 0 otherwise).
    pub read_pct: u32,
    /// `rcu-update`: threads `0..writers` update, the others read (ignored by other workloads).
    pub writers: usize,
    /// `condvar`: the queue's shape (ignored by other workloads).
    pub condvar: CondvarSpec,
    /// Warm-up before the window.
    pub warmup_ns: u64,
    /// The measurement window.
    pub duration_ns: u64,
    /// CPUs to pin worker i to `cpus[i % len]`; empty: no pinning.
    pub cpus: Vec<usize>,
    /// `mutex`/`rw`: instances of the lock; each op takes one chosen pseudo-randomly (1: one lock,
    /// the usual case; more: parking_lot #418's lock-bench shape).
    pub lock_count: usize,
}

/// The `condvar` workload's queue: its capacity and how waiters are notified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CondvarSpec {
    /// Messages the queue holds (`--slots`).
    pub slots: usize,
    /// `notify_all` instead of `notify_one` (`--notify all`).
    pub notify_all: bool,
}

impl Default for CondvarSpec {
    fn default() -> Self {
        CondvarSpec {
            slots: 1,
            notify_all: false,
        }
    }
}

/// Raw results of one trial.
#[derive(Clone, Debug)]
pub struct TrialOutcome {
    /// Operations each thread completed inside the window.
    pub per_thread_ops: Vec<u64>,
    /// Window length as measured.
    pub wall_ns: u64,
    /// User + system CPU time of the process during the window.
    pub cpu_ns: u64,
    /// Voluntary context switches during the window.
    pub voluntary_cs: u64,
    /// Involuntary context switches during the window.
    pub involuntary_cs: u64,
    /// Sampled acquisition latencies (ns) inside the window.
    pub acquire_ns: Histogram<u64>,
    /// CPU time other processes used during the window (system busy time minus ours), ns; `None`
    /// without `/proc/stat`.
    pub others_cpu_ns: Option<u64>,
    /// Hypervisor steal time during the window, ns (all CPUs).
    pub steal_ns: u64,
    /// Exclusive (write) operations in the window (`mutex`/`rw`; 0 for `refcount`).
    pub exclusive_ops: u64,
    /// Of those, the ones whose previous exclusive holder was another thread.
    pub handovers: u64,
    /// The process's resident memory at the window's end, KiB (`None` without `/proc/self/status`).
    pub rss_kb: Option<u64>,
    /// `rcu-sync`: (grace periods, synchronize calls) the scheme's domain counted over the trial
    /// (warm-up included), if it counts them.
    pub sync_counts: Option<(u64, u64)>,
}

impl TrialOutcome {
    /// All threads' operations.
    pub fn total_ops(&self) -> u64 {
        self.per_thread_ops.iter().sum()
    }

    /// Aggregate throughput.
    pub fn ops_per_sec(&self) -> f64 {
        self.total_ops() as f64 * 1e9 / self.wall_ns.max(1) as f64
    }

    /// The hand-over rate: the share of exclusive operations whose holder differs from the previous
    /// holder (`None` without exclusive operations).
    pub fn handover_rate(&self) -> Option<f64> {
        (self.exclusive_ops > 0).then(|| self.handovers as f64 / self.exclusive_ops as f64)
    }
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;
/// After the window, before STOP: the workers keep running (the CPU and /proc reads still see a busy
/// process) but no longer count exclusive operations or sample, so those counts cover the window.
const DRAIN: u8 = 3;

#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// A worker's own tally of its exclusive operations (plain locals after inlining: no shared writes).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Exclusive (write) operations.
    pub exclusive: u64,
    /// Exclusive operations whose previous exclusive holder was another thread.
    pub handovers: u64,
    /// What the shared sections read, folded together: consumed once a batch (`black_box`), so the
    /// reads cannot be optimised away, without a store to the stack on every op (a per-op store can
    /// 4K-alias a lock's hot word: measured 4.9 -> 7-9 ns per percpu-rwsem read, depending on which
    /// counter slot the thread got).
    pub sink: u64,
}

impl Tally {
    /// Adds `other`'s counts (and folds its reads) into this one.
    #[inline(always)]
    fn add(&mut self, other: &Tally) {
        self.exclusive += other.exclusive;
        self.handovers += other.handovers;
        self.sink ^= other.sink;
    }
}

/// One operation of a workload, compiled for one lock. `SAMPLE` is a constant, so the unsampled ops
/// (all but one in [`sample_period`]) carry no clock code at all.
pub(crate) trait Op: Sync {
    /// Runs op `i` of thread `t`; with `SAMPLE`, returns its acquisition latency in ns (else 0).
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64;

    /// Called once the window is over and every worker has been told to stop, before they are joined:
    /// an op that can block on another thread (a consumer waiting for a producer that has stopped)
    /// releases its waiters here.
    fn stop(&self) {}

    /// Runs ops `i..i + n` unsampled, counting into a local tally (see [`lock_batch`]).
    #[inline(always)]
    fn batch(&self, t: usize, i: u64, n: u64, tally: &mut Tally) {
        let mut local = Tally::default();
        for k in 0..n {
            self.run::<false>(t, i + k, &mut local);
        }
        tally.add(&local);
    }
}

impl<T: Op> Op for &T {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
        (**self).run::<SAMPLE>(t, i, tally)
    }
    #[inline(always)]
    fn batch(&self, t: usize, i: u64, n: u64, tally: &mut Tally) {
        (**self).batch(t, i, n, tally)
    }
    fn stop(&self) {
        (**self).stop()
    }
}

/// What one worker brings back.
struct WorkerResult {
    hist: Histogram<u64>,
    exclusive_ops: u64,
    handovers: u64,
}

/// The skeleton shared by every workload: spawns the threads, runs `op.run(thread, i)` in a loop,
/// and times the window. `op` returns the acquisition latency in ns when sampled (else 0), and counts its
/// exclusive operations and hand-overs in the tally it is given.
///
/// The loop runs in batches of [`PUBLISH_EVERY`] ops: the stop flag is read and the op count published
/// once per batch, and only a batch's first op can be sampled, so the other ops of a batch run `op` with
/// a constant `false` (after inlining: no clock code, no branch on it). This keeps the harness's own
/// cost to about a nanosecond per op (4-6 ns of harness in every op hid and inverted the
/// differences between the cheapest read locks; the `none` row measures what is left).
pub(crate) fn run_trial(spec: &TrialSpec, clock: &dyn Clock, op: impl Op) -> TrialOutcome {
    assert!(spec.threads > 0, "a trial needs at least one thread");
    let shared = TrialShared {
        phase: AtomicU8::new(WARMUP),
        period: AtomicU64::new(SAMPLE_EVERY),
        counters: (0..spec.threads)
            .map(|_| PaddedCounter::default())
            .collect(),
        barrier: Barrier::new(spec.threads + 1),
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (shared, op) = (&shared, &op);
                scope.spawn(move || shared.worker(spec, t, op))
            })
            .collect();
        shared.barrier.wait();
        let mut outcome = shared.window(spec, clock, &op);
        for w in workers {
            let r = w.join().expect("a worker thread panicked");
            outcome
                .acquire_ns
                .add(&r.hist)
                .expect("same-precision histograms");
            outcome.exclusive_ops += r.exclusive_ops;
            outcome.handovers += r.handovers;
        }
        outcome
    })
}

/// What a trial's workers and its timer share.
struct TrialShared {
    /// `WARMUP`, `MEASURE`, `DRAIN` or `STOP`.
    phase: AtomicU8,
    /// Set before `phase` turns MEASURE; workers read it once a batch.
    period: AtomicU64,
    /// Each worker's ops so far, published once a batch.
    counters: Vec<PaddedCounter>,
    /// The workers and the timer start together.
    barrier: Barrier,
}

impl TrialShared {
    /// Worker `t`: runs `op` in batches until the phase is `STOP`, sampling and tallying while it is
    /// `MEASURE`.
    fn worker(&self, spec: &TrialSpec, t: usize, op: &impl Op) -> WorkerResult {
        if !spec.cpus.is_empty() {
            pin_to(spec.cpus[t % spec.cpus.len()]);
        }
        // Auto-resizing: `record` grows it to any value (nanoseconds to minutes). Not
        // `saturating_record`, which never resizes and clamped every sample past the initial
        // range (~2 us) to 2 ns.
        let mut hist = Histogram::<u64>::new(3).expect("3 significant figures is valid");
        let (mut exclusive_ops, mut handovers) = (0u64, 0u64);
        self.barrier.wait();
        let mut i = 0u64;
        loop {
            // Relaxed: a flag polled once a batch (a read-shared line, cheap); seeing it late
            // costs at most one batch.
            let p = self.phase.load(Ordering::Relaxed);
            if p == STOP {
                break;
            }
            let measuring = p == MEASURE;
            let mut tally = Tally::default();
            // Relaxed: stored before `phase` turned MEASURE; a stale period only changes
            // which op is timed.
            let sample = measuring && i.is_multiple_of(self.period.load(Ordering::Relaxed));
            if sample {
                let ns = op.run::<true>(t, i, &mut tally);
                hist.record(ns.max(1))
                    .expect("an auto-resizing histogram records any u64");
            } else {
                op.run::<false>(t, i, &mut tally);
            }
            op.batch(t, i + 1, PUBLISH_EVERY - 1, &mut tally);
            std::hint::black_box(tally.sink);
            if measuring {
                exclusive_ops += tally.exclusive;
                handovers += tally.handovers;
            }
            i += PUBLISH_EVERY;
            // Relaxed: a private counter read by the timer thread. Published once a batch, so
            // exactness at the window edges is within one batch per thread: a store on every
            // op would be the harness's own per-op cost, and one that can 4K-alias a lock's
            // hot word (a store and a later load at the same address modulo 4096 stall the
            // load; measured: 2.0 -> 4.0 ns per read lock).
            self.counters[t].0.store(i, Ordering::Relaxed);
        }
        WorkerResult {
            hist,
            exclusive_ops,
            handovers,
        }
    }

    /// Every worker's op count, now.
    fn ops(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .collect()
    }

    /// The timer: the warm-up (which sizes the sampling period), the measured window, then the
    /// workers stopped. The outcome's histogram and tallies are the workers' to add.
    fn window(&self, spec: &TrialSpec, clock: &dyn Clock, op: &impl Op) -> TrialOutcome {
        let w0 = clock.now_ns();
        clock.sleep_ns(spec.warmup_ns);
        // The warm-up's rate sizes the sampling period.
        let warm_ops: u64 = self.ops().iter().sum();
        let warm_ns = clock.now_ns().saturating_sub(w0);
        let per_op = (warm_ops > 0 && spec.warmup_ns > 0)
            .then(|| warm_ns as f64 * spec.threads as f64 / warm_ops as f64);
        self.period.store(sample_period(per_op), Ordering::Relaxed);
        // The slow reads (/proc/stat, getrusage) first, so the op counts and the clock bracket the
        // window tightly.
        let u0 = usage();
        let s0 = system_cpu();
        let c0 = self.ops();
        let t0 = clock.now_ns();
        self.phase.store(MEASURE, Ordering::Relaxed);
        clock.sleep_ns(spec.duration_ns);
        let c1 = self.ops();
        let t1 = clock.now_ns();
        self.phase.store(DRAIN, Ordering::Relaxed);
        let rss_kb = rss_kb();
        let u1 = usage();
        let s1 = system_cpu();
        let cpu_ns = u1.cpu_ns.saturating_sub(u0.cpu_ns);
        let (others_cpu_ns, steal_ns) = match (s0, s1) {
            (Some(a), Some(b)) => (
                Some(b.busy_ns.saturating_sub(a.busy_ns).saturating_sub(cpu_ns)),
                b.steal_ns.saturating_sub(a.steal_ns),
            ),
            _ => (None, 0),
        };
        self.phase.store(STOP, Ordering::Relaxed);
        op.stop();
        TrialOutcome {
            per_thread_ops: c1.iter().zip(&c0).map(|(a, b)| a - b).collect(),
            wall_ns: t1.saturating_sub(t0).max(1),
            cpu_ns,
            voluntary_cs: u1.voluntary.saturating_sub(u0.voluntary),
            involuntary_cs: u1.involuntary.saturating_sub(u0.involuntary),
            acquire_ns: Histogram::<u64>::new(3).expect("valid"),
            others_cpu_ns,
            steal_ns,
            exclusive_ops: 0,
            handovers: 0,
            rss_kb,
            sync_counts: None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::workload::Shared;
    use std::sync::atomic::AtomicUsize;

    /// A clock that advances by a fixed step at every read, and by exactly the asked time on sleep
    /// (after letting the workers run a little, so they complete operations inside the window).
    pub struct StepClock {
        now: AtomicU64,
        step: u64,
    }

    impl StepClock {
        pub fn new(step: u64) -> Self {
            StepClock {
                now: AtomicU64::new(0),
                step,
            }
        }
    }

    impl Clock for StepClock {
        fn now_ns(&self) -> u64 {
            self.now.fetch_add(self.step, Ordering::SeqCst) + self.step
        }
        fn sleep_ns(&self, ns: u64) {
            std::thread::sleep(Duration::from_millis(20));
            self.now.fetch_add(ns, Ordering::SeqCst);
        }
    }

    /// A mock lock: a std mutex that also checks exclusion and counts operations.
    pub struct MockLock {
        m: std::sync::Mutex<Shared>,
        inside: AtomicUsize,
        pub ops: AtomicU64,
    }

    impl LockUnderTest for MockLock {
        fn new() -> Self {
            MockLock {
                m: Default::default(),
                inside: AtomicUsize::new(0),
                ops: AtomicU64::new(0),
            }
        }
        fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
            let mut g = self.m.lock().unwrap();
            assert_eq!(self.inside.fetch_add(1, Ordering::SeqCst), 0);
            self.ops.fetch_add(1, Ordering::Relaxed);
            let r = f(&mut g);
            self.inside.fetch_sub(1, Ordering::SeqCst);
            r
        }
    }

    fn spec(threads: usize) -> TrialSpec {
        TrialSpec {
            threads,
            cs_loops: 10,
            think_loops: 10,
            read_pct: 0,
            writers: 1,
            condvar: Default::default(),
            warmup_ns: 1_000,
            duration_ns: 1_000_000_000,
            cpus: vec![],
            lock_count: 1,
        }
    }

    /// Every condvar adapter delivers every message exactly once (none lost, none twice) through a
    /// queue of 1 and of 3 slots, with `notify_one` and `notify_all`; `close` releases a waiter.
    fn queue_delivers<C: CondvarUnderTest>() {
        for (slots, all) in [(1, false), (1, true), (3, false), (3, true)] {
            let q = C::new(slots);
            let got = std::sync::Mutex::new(vec![]);
            std::thread::scope(|s| {
                for p in 0..2u64 {
                    let q = &q;
                    s.spawn(move || {
                        for i in 0..500u64 {
                            assert!(q.produce(p << 32 | i, all));
                        }
                    });
                }
                for _ in 0..2 {
                    let (q, got) = (&q, &got);
                    s.spawn(move || {
                        for _ in 0..500 {
                            let m = q.consume(all).expect("open");
                            got.lock().unwrap().push(m);
                        }
                    });
                }
            });
            let got = got.into_inner().unwrap();
            assert_eq!(got.len(), 1000);
            for p in 0..2u64 {
                let mut mine: Vec<u64> = got
                    .iter()
                    .filter(|m| *m >> 32 == p)
                    .map(|m| m & 0xffff_ffff)
                    .collect();
                mine.sort_unstable();
                assert_eq!(
                    mine,
                    (0..500).collect::<Vec<_>>(),
                    "producer {p}, slots {slots}, all {all}"
                );
            }
            // A consumer waiting on the empty queue is released by `close`.
            std::thread::scope(|s| {
                let h = s.spawn(|| q.consume(all));
                std::thread::sleep(std::time::Duration::from_millis(5));
                q.close();
                assert_eq!(h.join().unwrap(), None);
            });
            assert!(!q.produce(1, all), "closed");
        }
    }

    #[test]
    fn every_condvar_adapter_is_a_queue() {
        queue_delivers::<crate::locks::ours::OurCondvar>();
        queue_delivers::<crate::locks::peers::StdCondvar>();
        queue_delivers::<crate::locks::peers::PlCondvar>();
    }

    /// The `condvar` trial ends (its consumers blocked on an empty queue are released by `stop`) and
    /// counts only the consumers' messages.
    #[test]
    fn a_condvar_trial_counts_messages_and_ends() {
        let clock = SystemClock::default();
        let mut sp = spec(4);
        sp.duration_ns = 200_000_000;
        sp.warmup_ns = 5_000_000;
        sp.cs_loops = 0;
        sp.think_loops = 0;
        let out = run_condvar::<crate::locks::ours::OurCondvar>(&sp, &clock);
        assert_eq!(out.per_thread_ops.len(), 2, "two consumers");
        assert!(out.total_ops() > 0);
        assert_eq!(condvar_producers(1), 0);
        assert_eq!(condvar_producers(5), 2);
    }

    #[test]
    fn window_and_latency_come_from_the_clock() {
        // Each sampled op reads the clock twice (ask, hold) with a 7 ns step in between: with no other
        // reader in the window except the timer's own two reads, every latency sample is 7 ns unless a
        // timer read lands in between (at most two samples can be 14 ns).
        let clock = StepClock::new(7);
        let out = run_lock::<MockLock>(&spec(1), &clock);
        assert_eq!(out.per_thread_ops.len(), 1);
        assert!(out.total_ops() > 0, "the worker ran inside the window");
        // The window: duration plus the clock step of the final read.
        assert!(
            out.wall_ns >= 1_000_000_000 && out.wall_ns < 1_000_000_000 + 10_000_000,
            "{}",
            out.wall_ns
        );
        let h = &out.acquire_ns;
        assert!(!h.is_empty(), "samples were recorded in the window");
        assert_eq!(h.value_at_quantile(0.5), 7);
        assert!(
            h.max() <= 14 + 7 * (h.len() + 4),
            "latency samples are clock steps: {}",
            h.max()
        );
        assert!(
            (out.ops_per_sec() - out.total_ops() as f64 * 1e9 / out.wall_ns as f64).abs() < 1e-6
        );
    }

    /// Latencies far past the histogram's initial range are recorded at their true value (they
    /// were clamped to 2 ns). The mock clock steps 2,500 ns (just past the initial ~2,047) and 3 s.
    #[test]
    fn latency_is_recorded_at_its_true_value_across_the_range() {
        for step in [2_500u64, 3_000_000_000] {
            let clock = StepClock::new(step);
            let out = run_lock::<MockLock>(&spec(1), &clock);
            let h = &out.acquire_ns;
            assert!(!h.is_empty());
            let p50 = h.value_at_quantile(0.5);
            assert!(
                p50.abs_diff(step) * 1000 <= step,
                "step {step}: p50 {p50} (3 significant digits)"
            );
            assert!(
                h.max() >= step - step / 1000,
                "step {step}: max {}",
                h.max()
            );
        }
    }

    /// The same with the real clock: a lock whose acquisition takes ~2 ms shows milliseconds, not ns.
    #[test]
    fn real_clock_millisecond_acquisitions() {
        struct Slow(std::sync::Mutex<Shared>);
        impl LockUnderTest for Slow {
            fn new() -> Self {
                Slow(Default::default())
            }
            fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
                let mut g = self.0.lock().unwrap();
                std::thread::sleep(Duration::from_millis(2)); // a slow acquisition
                f(&mut g)
            }
        }
        let s = TrialSpec {
            duration_ns: 400_000_000,
            warmup_ns: 0,
            ..spec(1)
        };
        // ~200 ops of 2 ms: every 64th is sampled, so two or three samples.
        let out = run_lock::<Slow>(&s, &SystemClock::default());
        let h = &out.acquire_ns;
        assert!(!h.is_empty());
        assert!(
            h.min() >= 2_000_000 && h.max() < 1_000_000_000,
            "acquisitions of ~2 ms: min {} max {}",
            h.min(),
            h.max()
        );
    }

    #[test]
    fn proc_stat_parses_busy_and_steal() {
        let text = "cpu  100 5 20 9000 7 3 2 11 0 0\ncpu0 50 2 10 4500 3 1 1 5 0 0\n";
        let s = parse_proc_stat(text, 10_000_000).unwrap();
        assert_eq!(s.busy_ns, (100 + 5 + 20 + 3 + 2) * 10_000_000);
        assert_eq!(s.steal_ns, 11 * 10_000_000);
        assert!(parse_proc_stat("intr 1 2\n", 1).is_none());
        assert!(system_cpu().is_some(), "this machine has /proc/stat");
    }

    #[test]
    fn every_thread_counts_and_excludes() {
        let clock = SystemClock::default();
        let s = TrialSpec {
            duration_ns: 50_000_000,
            warmup_ns: 5_000_000,
            ..spec(4)
        };
        // Exclusion: MockLock asserts it inside every section.
        let out = run_lock::<MockLock>(&s, &clock);
        assert_eq!(out.per_thread_ops.len(), 4);
        assert!(out.total_ops() > 0 && out.cpu_ns > 0);
        // Counting: with no lock (no unfair lock starving a thread for the whole window, as std's
        // mutex can on a loaded machine), every thread's ops are counted.
        let out = run_unlocked(
            &TrialSpec {
                duration_ns: 200_000_000,
                ..s
            },
            &clock,
        );
        assert!(
            out.per_thread_ops.iter().all(|&n| n > 0),
            "{:?}",
            out.per_thread_ops
        );
    }

    /// Hand-overs are counted under the lock, in the window: one thread never hands
    /// over to another; several threads on one lock do, at a rate in (0, 1]; reads are not counted.
    #[test]
    fn handovers_are_counted_under_the_lock() {
        let clock = SystemClock::default();
        let s = TrialSpec {
            duration_ns: 50_000_000,
            warmup_ns: 5_000_000,
            ..spec(1)
        };
        let one = run_lock::<MockLock>(&s, &clock);
        assert!(one.exclusive_ops > 0);
        assert!(
            one.handovers <= 1,
            "only the very first op, if not in the warm-up"
        );
        assert!(one.handover_rate().unwrap() < 1e-4);
        // std's unfair mutex under a loaded machine can leave one thread holding it for a whole
        // window (the others descheduled or asleep): a rate of 0 is then the truth; try again, up to
        // three windows, before calling it a counting bug.
        let mut four = None;
        for _ in 0..3 {
            let t = run_lock::<MockLock>(
                &TrialSpec {
                    threads: 4,
                    ..s.clone()
                },
                &clock,
            );
            let rate = t.handover_rate().unwrap();
            assert!((0.0..=1.0).contains(&rate), "{rate}");
            let done = rate > 0.0;
            four = Some(t);
            if done {
                break;
            }
        }
        let four = four.expect("three trials ran");
        let rate = four.handover_rate().unwrap();
        assert!(rate > 0.0 && rate <= 1.0, "{rate}");
        // Exclusive ops are every op of the window (within 1%: they are counted until the stop flag, a
        // few /proc reads after the window's end).
        let slack = 2 * PUBLISH_EVERY * 4 + four.total_ops() / 100;
        assert!(
            four.exclusive_ops.abs_diff(four.total_ops()) <= slack,
            "{} vs {}",
            four.exclusive_ops,
            four.total_ops()
        );
        let reads = run_lock::<MockLock>(
            &TrialSpec {
                read_pct: 100,
                ..s.clone()
            },
            &clock,
        );
        assert_eq!((reads.exclusive_ops, reads.handover_rate()), (0, None));
        // `none`: each thread on its own data, so it never changes owner.
        let none = run_unlocked(&TrialSpec { threads: 4, ..s }, &clock);
        assert!(none.exclusive_ops > 0);
        assert!(
            none.handovers <= 4,
            "at most each thread's first op (if it did not run in the warm-up): {}",
            none.handovers
        );
    }

    #[test]
    fn sample_period_keeps_the_clock_under_one_percent() {
        assert_eq!(sample_period(None), SAMPLE_EVERY);
        assert_eq!(sample_period(Some(0.0)), SAMPLE_EVERY);
        assert_eq!(sample_period(Some(2.5)), 4096, "fast ops: the cap");
        assert_eq!(sample_period(Some(20.0)), 512, "500 -> 512");
        assert_eq!(
            sample_period(Some(10_000.0)),
            PUBLISH_EVERY,
            "slow ops: every batch"
        );
        for ns in [1.0, 3.0, 7.0, 50.0, 300.0, 1e4, 1e7] {
            let p = sample_period(Some(ns));
            assert!(p.is_power_of_two() && (PUBLISH_EVERY..=4096).contains(&p));
            assert!(p.is_multiple_of(PUBLISH_EVERY), "a batch's first op");
        }
    }

    #[test]
    fn rss_is_read_and_grows_with_memory() {
        let before = rss_kb().expect("this machine has /proc/self/status");
        let mut v = vec![0u8; 64 << 20];
        for b in v.iter_mut().step_by(4096) {
            *b = 1; // touch every page
        }
        std::hint::black_box(&mut v);
        let after = rss_kb().unwrap();
        assert!(after >= before + 60 * 1024, "{before} -> {after} KiB");
        drop(v);
    }

    #[test]
    fn read_share_is_close_to_read_pct() {
        for pct in [0u32, 10, 50, 90, 100] {
            let reads = (0..10_000u64).filter(|&i| is_read(3, i, pct)).count();
            assert!(
                (reads as i64 - pct as i64 * 100).abs() < 300,
                "{pct}%: {reads} reads in 10000"
            );
        }
    }
}
