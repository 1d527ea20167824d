//! Runs one trial: N threads on one lock, a start barrier, a warm-up, a fixed measurement window, a
//! stop flag. Produces raw counts; [`crate::metrics`] turns trials into result rows.
//!
//! Timing comes from a [`Clock`], so the runner can be tested with a deterministic mock clock.

use crate::locks::{LockUnderTest, RefCountUnderTest};
use crate::work::spin_work;
use hdrhistogram::Histogram;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every this-many-th acquisition is timed, so the cost of reading the clock stays out of throughput.
pub const SAMPLE_EVERY: u64 = 64;
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
    /// Warm-up before the window.
    pub warmup_ns: u64,
    /// The measurement window.
    pub duration_ns: u64,
    /// CPUs to pin worker i to `cpus[i % len]`; empty: no pinning.
    pub cpus: Vec<usize>,
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
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// Process CPU time and context switches (`getrusage(RUSAGE_SELF)`).
#[derive(Clone, Copy, Default, Debug)]
pub struct Usage {
    /// user + system, ns
    pub cpu_ns: u64,
    /// voluntary context switches
    pub voluntary: u64,
    /// involuntary context switches
    pub involuntary: u64,
}

/// Reads this process's resource usage.
pub fn usage() -> Usage {
    // SAFETY: `ru` is a valid out-pointer; getrusage fills it and cannot fail for RUSAGE_SELF.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Usage {
        cpu_ns: tv(ru.ru_utime) + tv(ru.ru_stime),
        voluntary: ru.ru_nvcsw as u64,
        involuntary: ru.ru_nivcsw as u64,
    }
}

/// The whole machine's CPU time from `/proc/stat` (all CPUs, nanoseconds): busy (user, nice, system,
/// irq, softirq) and stolen by the hypervisor. `None` where `/proc/stat` is unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SystemCpu {
    /// Busy time of every process, ns.
    pub busy_ns: u64,
    /// Steal time, ns.
    pub steal_ns: u64,
}

/// Parses `/proc/stat`'s first line (`cpu user nice system idle iowait irq softirq steal ...`), in
/// clock ticks of `tick_ns`.
pub fn parse_proc_stat(text: &str, tick_ns: u64) -> Option<SystemCpu> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(SystemCpu {
        busy_ns: (at(0) + at(1) + at(2) + at(5) + at(6)) * tick_ns,
        steal_ns: at(7) * tick_ns,
    })
}

/// Online CPUs of the machine (what `/proc/stat`'s totals cover).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// The machine's CPU time now (see [`SystemCpu`]).
pub fn system_cpu() -> Option<SystemCpu> {
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tick_ns = 1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0)?;
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?, tick_ns)
}

/// Pins the calling thread to `cpu`; returns whether the kernel accepted it. Callers that can run
/// unpinned ignore a failure (the run is then unpinned, not wrong).
pub fn pin_to(cpu: usize) -> bool {
    // SAFETY: `set` is a zeroed cpu_set_t, filled with CPU_SET and passed with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Lets the calling thread run on all of `cpus` again.
pub fn unpin(cpus: &[usize]) {
    // SAFETY: as in `pin_to`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a valid out-buffer of the size we pass.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set we own.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The skeleton shared by every workload: spawns the threads, runs `op(thread, i, sample)` in a loop,
/// and times the window. `op` returns the acquisition latency when `sample` is true.
fn run_trial<F>(spec: &TrialSpec, clock: &dyn Clock, op: F) -> TrialOutcome
where
    F: Fn(usize, u64, bool) -> Option<u64> + Sync,
{
    assert!(spec.threads > 0, "a trial needs at least one thread");
    let phase = AtomicU8::new(WARMUP);
    let counters: Vec<PaddedCounter> = (0..spec.threads)
        .map(|_| PaddedCounter::default())
        .collect();
    let barrier = Barrier::new(spec.threads + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (phase, counters, barrier, op) = (&phase, &counters, &barrier, &op);
                scope.spawn(move || {
                    if !spec.cpus.is_empty() {
                        pin_to(spec.cpus[t % spec.cpus.len()]);
                    }
                    // Auto-resizing: `record` grows it to any value (nanoseconds to minutes). Not
                    // `saturating_record`, which never resizes and clamped every sample past the initial
                    // range (~2 us) to 2 ns (issue 9).
                    let mut hist =
                        Histogram::<u64>::new(3).expect("3 significant figures is valid");
                    barrier.wait();
                    let mut i = 0u64;
                    loop {
                        // Relaxed: a flag polled every op (a read-shared line, cheap); seeing it late
                        // costs at most one op.
                        let p = phase.load(Ordering::Relaxed);
                        if p == STOP {
                            break;
                        }
                        if let Some(ns) = op(t, i, i.is_multiple_of(SAMPLE_EVERY) && p == MEASURE) {
                            hist.record(ns.max(1))
                                .expect("an auto-resizing histogram records any u64");
                        }
                        i += 1;
                        // Relaxed: a private counter read by the timer thread. Published every
                        // PUBLISH_EVERY ops, so exactness at the window edges is within that many ops per
                        // thread: a store on every op would be the harness's own per-op cost, and one
                        // that can 4K-alias a lock's hot word (a store and a later load at the same
                        // address modulo 4096 stall the load; measured: 2.0 -> 4.0 ns per read lock).
                        if i.is_multiple_of(PUBLISH_EVERY) {
                            counters[t].0.store(i, Ordering::Relaxed);
                        }
                    }
                    hist
                })
            })
            .collect();
        barrier.wait();
        clock.sleep_ns(spec.warmup_ns);
        let c0: Vec<u64> = counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .collect();
        let u0 = usage();
        let s0 = system_cpu();
        let t0 = clock.now_ns();
        phase.store(MEASURE, Ordering::Relaxed);
        clock.sleep_ns(spec.duration_ns);
        let c1: Vec<u64> = counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .collect();
        let t1 = clock.now_ns();
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
        phase.store(STOP, Ordering::Relaxed);
        let mut acquire_ns = Histogram::<u64>::new(3).expect("valid");
        for w in workers {
            let h = w.join().expect("a worker thread panicked");
            acquire_ns.add(&h).expect("same-precision histograms");
        }
        TrialOutcome {
            per_thread_ops: c1.iter().zip(&c0).map(|(a, b)| a - b).collect(),
            wall_ns: t1.saturating_sub(t0).max(1),
            cpu_ns,
            voluntary_cs: u1.voluntary.saturating_sub(u0.voluntary),
            involuntary_cs: u1.involuntary.saturating_sub(u0.involuntary),
            acquire_ns,
            others_cpu_ns,
            steal_ns,
        }
    })
}

/// A small per-operation pseudo-random choice (read or write) that costs a multiply.
#[inline]
fn is_read(thread: usize, i: u64, read_pct: u32) -> bool {
    if read_pct == 0 {
        return false;
    }
    let x = (i ^ ((thread as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 32) % 100) < read_pct as u64
}

/// A trial of the `mutex` or `rw` workload on lock `L`.
pub fn run_lock<L: LockUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    let lock = L::new();
    let (cs, think, read_pct) = (spec.cs_loops, spec.think_loops, spec.read_pct);
    run_trial(spec, clock, |t, i, sample| {
        let start = if sample { clock.now_ns() } else { 0 };
        let latency = if is_read(t, i, read_pct) {
            lock.shared(|d| {
                let held = if sample {
                    Some(clock.now_ns() - start)
                } else {
                    None
                };
                std::hint::black_box(d.read(cs));
                held
            })
        } else {
            lock.exclusive(|d| {
                let held = if sample {
                    Some(clock.now_ns() - start)
                } else {
                    None
                };
                d.write(cs);
                held
            })
        };
        if think > 0 {
            std::hint::black_box(spin_work(think, i));
        }
        latency
    })
}

/// A trial of the `refcount` workload on count `R`: get, hold for cs, put, think.
pub fn run_refcount<R: RefCountUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> TrialOutcome {
    let count = R::new();
    let (cs, think) = (spec.cs_loops, spec.think_loops);
    run_trial(spec, clock, |_, i, sample| {
        let start = if sample { clock.now_ns() } else { 0 };
        count.get();
        let latency = if sample {
            Some(clock.now_ns() - start)
        } else {
            None
        };
        if cs > 0 {
            std::hint::black_box(spin_work(cs, i));
        }
        count.put();
        if think > 0 {
            std::hint::black_box(spin_work(think, i));
        }
        latency
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workload::Shared;
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
            warmup_ns: 1_000,
            duration_ns: 1_000_000_000,
            cpus: vec![],
        }
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

    /// Latencies far past the histogram's initial range are recorded at their true value (issue 9: they
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
        let out = run_lock::<MockLock>(&s, &clock);
        assert_eq!(out.per_thread_ops.len(), 4);
        assert!(
            out.per_thread_ops.iter().all(|&n| n > 0),
            "{:?}",
            out.per_thread_ops
        );
        assert!(out.cpu_ns > 0);
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
