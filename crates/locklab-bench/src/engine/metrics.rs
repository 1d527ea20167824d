//! The result row of lab.md, and how trials become one.

use crate::engine::runner::TrialOutcome;
use crate::engine::workload::Workload;
use serde::{Deserialize, Serialize};

/// The machine's physical limits (`locklab calibrate`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    /// One uncontended `fetch_add` on a hot line, single thread.
    pub atomic_rmw_ns: f64,
    /// One uncontended compare-exchange.
    pub cas_ns: f64,
    /// Half the round trip of a cache line ping-ponged between two pinned threads (0 with one CPU):
    /// the best of `calibrate::LINE_ROUNDS` rounds (a limit is the best the machine can do).
    pub line_transfer_ns: f64,
    /// The median of those rounds: far above the best means the machine was disturbed meanwhile.
    #[serde(default)]
    pub line_transfer_median_ns: f64,
    /// Whether the two probe threads were pinned to different CPUs (else the figure is not a transfer
    /// between CPUs).
    #[serde(default)]
    pub line_transfer_pinned: bool,
    /// From `FUTEX_WAKE` in one thread to the woken thread running (median).
    pub futex_wake_ns: f64,
}

/// Machine description for the JSON header.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs this process may use.
    pub logical_cpus: usize,
    /// `uname -r`.
    pub kernel: String,
    /// The compiler that built the lab.
    pub rustc: String,
}

/// median / min / max of the repeats' throughput.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    /// Median
    pub median: f64,
    /// lowest
    pub min: f64,
    /// highest
    pub max: f64,
}

/// Per-thread operation counts in the median repeat.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MinMax {
    /// fewest ops by one thread
    pub min: u64,
    /// most ops by one thread
    pub max: u64,
}

/// Context switches per second of the window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CtxSwitches {
    /// voluntary (sleeps)
    pub voluntary: f64,
    /// involuntary (preemptions)
    pub involuntary: f64,
}

/// Sampled acquisition latency percentiles (ns).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median
    pub p50: u64,
    /// 99th percentile
    pub p99: u64,
    /// 99.9th percentile
    pub p999: u64,
    /// largest sample
    pub max: u64,
    /// The sampled distribution as `[value_ns, count]` pairs, one per non-empty HDR bucket (3
    /// significant digits), ascending: enough to draw a CDF. Empty in reports from before it existed.
    #[serde(default)]
    pub histogram: Vec<(u64, u64)>,
}

/// A model of the row's cost, and how close the lock came: [`ResultRow::limit`] (a bound) and
/// [`ResultRow::handover`] (the line-transfer model).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Limit {
    /// What the figure is made of.
    pub basis: String,
    /// Aggregate ns per operation at the figure.
    #[serde(deserialize_with = "infinite_if_null")]
    pub ns_per_op: f64,
    /// figure / measured ns per op: 1.0 = at the figure.
    #[serde(deserialize_with = "infinite_if_null")]
    pub ratio: f64,
}

impl Limit {
    fn new(basis: String, ns_per_op: f64, measured_ns: f64) -> Limit {
        Limit {
            basis,
            ns_per_op,
            ratio: if measured_ns.is_finite() && measured_ns > 0.0 {
                ns_per_op / measured_ns
            } else {
                0.0
            },
        }
    }
}

/// How busy the machine was while the row was measured (lab.md's `noise`): the largest over its repeats.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Noise {
    /// CPU time other processes used, % of all online CPUs over the window.
    pub others_cpu_pct: f64,
    /// Hypervisor steal time, % of all online CPUs over the window.
    pub steal_pct: f64,
    /// Measured on a busy machine: others above [`BUSY_OTHERS_PCT`] or steal above [`BUSY_STEAL_PCT`].
    pub busy: bool,
}

/// Other processes' CPU share above which a row counts as measured on a busy machine, %.
pub const BUSY_OTHERS_PCT: f64 = 10.0;
/// Steal above which a row counts as measured on a busy machine, %.
pub const BUSY_STEAL_PCT: f64 = 5.0;

/// The noise of a set of trials on a machine with `online_cpus` CPUs: the worst trial's.
pub fn noise(trials: &[TrialOutcome], online_cpus: usize) -> Noise {
    let mut n = Noise::default();
    for t in trials {
        let avail = t.wall_ns.max(1) as f64 * online_cpus.max(1) as f64;
        let others = 100.0 * t.others_cpu_ns.unwrap_or(0) as f64 / avail;
        let steal = 100.0 * t.steal_ns as f64 / avail;
        n.others_cpu_pct = n.others_cpu_pct.max(others);
        n.steal_pct = n.steal_pct.max(steal);
    }
    n.busy = n.others_cpu_pct > BUSY_OTHERS_PCT || n.steal_pct > BUSY_STEAL_PCT;
    n
}

/// One row: lock x workload x thread count (lab.md's schema).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ResultRow {
    /// workload name
    pub workload: String,
    /// lock name
    pub lock: String,
    /// worker threads
    pub threads: usize,
    /// critical section, ns
    pub cs_ns: u64,
    /// think time, ns
    pub think_ns: u64,
    /// percent shared-mode ops (`rw` only)
    pub read_pct: Option<u32>,
    /// updater threads (`rcu-update` only; the other threads read)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writers: Option<usize>,
    /// window per repeat, ms
    pub duration_ms: u64,
    /// repeats
    pub repeats: usize,
    /// aggregate throughput over the repeats
    pub ops_per_sec: Spread,
    /// 1e9 / median ops_per_sec (infinite for a row that made no operation, written as JSON `null`)
    #[serde(deserialize_with = "infinite_if_null")]
    pub ns_per_op: f64,
    /// this row's median / the same lock's 1-thread median in this run
    pub scaling: Option<f64>,
    /// `scaling` above min(threads, CPUs) by more than [`SUPERLINEAR_TOLERANCE`]: no lock can do that,
    /// so the row (or its 1-thread row) measured something else (frequency, placement); flagged `???`
    /// in tables, and no verdict rests on it.
    #[serde(default)]
    pub superlinear: bool,
    /// instances of the lock, each op taking one (`--lock-count`); absent for one lock
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_count: Option<usize>,
    /// this row's median / the best median of the same lock and settings over the run's thread
    /// counts (absent with one thread count)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_peak: Option<f64>,
    /// `of_peak` below [`COLLAPSE`]: the lock has collapsed at this thread count
    #[serde(default)]
    pub collapsed: bool,
    /// per-thread ops in the median repeat
    pub per_thread_ops: MinMax,
    /// Jain's fairness index of the per-thread ops, in [0, 1]
    pub jain_fairness: f64,
    /// CPU time used / CPU time available (threads capped at the CPUs), %
    pub cpu_util_pct: f64,
    /// 100 - cpu_util_pct, floored at 0
    pub idle_pct: f64,
    /// context switches per second
    pub ctx_switches: CtxSwitches,
    /// sampled acquisition latency
    pub acquire_ns: Latency,
    /// The bound no correct measurement can beat (`ratio <= 1`): the `none` row's best repeat at these
    /// threads (the loop itself), or the exclusive sections run back to back, whichever is slower. See
    /// [`fill_limits`].
    pub limit: Limit,
    /// `ns_per_op` minus the `none` row's at the same threads, cs, think and read share: the lock's own
    /// aggregate cost per op (`None` without a `none` row; may dip below 0 within noise).
    #[serde(default)]
    pub lock_ns: Option<f64>,
    /// The line-transfer model (more than one thread, locks only): one cache-line transfer per change of
    /// owner plus the critical section, for the writes. A ratio above 1 means the lock changed owner
    /// less often than it would have to with fair hand-off.
    #[serde(default)]
    pub handover: Option<Limit>,
    /// Of the exclusive operations in the median repeat, the share whose holder differs from the
    /// previous holder (counted under the lock in the protected data). 1/threads or more for a fair
    /// lock, near 0 for one thread hogging. `None` for `refcount`.
    #[serde(default)]
    pub handover_rate: Option<f64>,
    /// The process's resident memory at the end of the median repeat's window, KiB: for `call-rcu`,
    /// what the retired objects waiting for their grace period cost.
    #[serde(default)]
    pub rss_kb: Option<u64>,
    /// `rcu-sync` only: grace periods the scheme's domain ran in the median repeat (warm-up
    /// included), if it counts them; compare with `sync_calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_periods: Option<u64>,
    /// `rcu-sync` only: `synchronize` calls in the same span (the grace periods served them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_calls: Option<u64>,
    /// `condvar` only: the queue's capacity (`--slots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<usize>,
    /// `condvar` only: `one` or `all` (`--notify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<String>,
    /// `condvar` only: voluntary context switches of the process per message delivered in the median
    /// repeat: each sleep on a condvar or the mutex ends in one wake-up, so this counts the wake-ups a
    /// message cost (0 when nobody ever sleeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakeups_per_msg: Option<f64>,
    /// `rcu-update` only: the readers' throughput (threads `writers..`) in the median repeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads_per_sec: Option<f64>,
    /// `rcu-update` only: the updaters' throughput (threads `0..writers`) in the median repeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updates_per_sec: Option<f64>,
    /// How busy the machine was (absent in reports from before it existed).
    #[serde(default)]
    pub noise: Noise,
    /// Computed on a simulated machine by `locklab predict`, not measured (absent: measured).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub predicted: bool,
}

/// How far above min(threads, CPUs) a scaling may go, as a fraction, before it is flagged
/// `superlinear` (the spread of repeated 1-thread runs on a quiet machine stays within it).
pub const SUPERLINEAR_TOLERANCE: f64 = 0.10;

/// Whether `scaling` at `threads` threads on `cpus` CPUs is more than any lock can do (beyond
/// [`SUPERLINEAR_TOLERANCE`]).
pub fn superlinear(scaling: f64, threads: usize, cpus: usize) -> bool {
    scaling > threads.min(cpus).max(1) as f64 * (1.0 + SUPERLINEAR_TOLERANCE)
}

/// Reads back a float that JSON could not carry: serde_json writes an infinite or NaN `f64` as `null`
/// (a row that made no operation has an infinite `ns_per_op`); it comes back infinite, so that every
/// file the lab writes can be read again (`report`, `compare`).
fn infinite_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

impl ResultRow {
    /// Whether the row is marked `???` in tables: unfair, or superlinear.
    pub fn flagged(&self) -> bool {
        self.unfair() || self.superlinear
    }

    /// locktorture's mark: the busiest thread did more than twice the work of the idlest.
    /// Not for `rcu-update`, whose updater and readers do different operations.
    pub fn unfair(&self) -> bool {
        self.workload != Workload::RcuUpdate.name()
            && self.per_thread_ops.max > 2 * self.per_thread_ops.min
    }
}

/// Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 when all equal, 1/n when one thread did all.
pub fn jain(xs: &[u64]) -> f64 {
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let sq: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if sq == 0.0 { 1.0 } else { sum * sum / (n * sq) }
}

/// What a row was run with.
#[derive(Clone, Debug)]
pub struct RowSpec {
    /// workload
    pub workload: Workload,
    /// lock name
    pub lock: String,
    /// Threads
    pub threads: usize,
    /// cs, ns
    pub cs_ns: u64,
    /// think, ns
    pub think_ns: u64,
    /// read percent (rw)
    pub read_pct: u32,
    /// updater threads (rcu-update)
    pub writers: usize,
    /// queue shape (condvar)
    pub condvar: crate::engine::runner::CondvarSpec,
    /// window, ms
    pub duration_ms: u64,
    /// logical CPUs available
    pub cpus: usize,
    /// instances of the lock (`--lock-count`)
    pub lock_count: usize,
}

/// The share of operations that are exclusive (writes): 1 for `mutex`, 1 - read share for `rw`, 0 for
/// `refcount` (no exclusive section).
fn write_share(workload: &str, read_pct: Option<u32>) -> f64 {
    match workload {
        "mutex" => 1.0,
        "rw" => 1.0 - read_pct.unwrap_or(0) as f64 / 100.0,
        _ => 0.0,
    }
}

/// The line-transfer model of a row with more than one thread (`None` with one): each change of owner
/// costs one cache-line transfer, each write its critical section, serialised; `refcount` moves the
/// counter's line on every operation.
pub fn handover_model(
    spec: &RowSpec,
    handover_rate: Option<f64>,
    cal: &Calibration,
) -> Option<(String, f64)> {
    if spec.threads < 2
        || matches!(
            spec.workload,
            Workload::RcuRead
                | Workload::CallRcu
                | Workload::RcuUpdate
                | Workload::RcuSync
                | Workload::Condvar
        )
    {
        return None;
    }
    let read = (spec.workload == Workload::Rw).then_some(spec.read_pct);
    let w = write_share(spec.workload.name(), read);
    Some(match (spec.workload, handover_rate) {
        (Workload::Refcount, _) => (
            "1 line transfer per op (the count's line)".into(),
            cal.line_transfer_ns,
        ),
        (_, rate) => {
            let rate = rate.unwrap_or(1.0);
            (
                format!("writes x (hand-over rate {rate:.2} x 1 line transfer + cs), serialised"),
                w * (rate * cal.line_transfer_ns + spec.cs_ns as f64),
            )
        }
    })
}

/// CPU time as a share of what `busy_cpus` CPUs (at least one) could give over `wall_ns`, % (lab.md's
/// `cpu_util_pct`; `idle_pct` is 100 minus it, floored at 0).
pub fn cpu_util_pct(cpu_ns: u64, wall_ns: u64, busy_cpus: usize) -> f64 {
    100.0 * cpu_ns as f64 / (wall_ns.max(1) as f64 * busy_cpus.max(1) as f64)
}

/// Summarises the repeats of one row. The median repeat (by throughput) supplies the per-thread,
/// CPU, context-switch and latency figures.
pub fn summarize(spec: &RowSpec, trials: &[TrialOutcome], cal: &Calibration) -> ResultRow {
    assert!(!trials.is_empty(), "a row needs at least one trial");
    let mut order: Vec<usize> = (0..trials.len()).collect();
    order.sort_by(|&a, &b| trials[a].ops_per_sec().total_cmp(&trials[b].ops_per_sec()));
    let med = &trials[order[order.len() / 2]];
    let ops: Vec<f64> = order.iter().map(|&i| trials[i].ops_per_sec()).collect();
    let median = ops[ops.len() / 2];
    let wall_s = med.wall_ns as f64 / 1e9;
    let util = cpu_util_pct(med.cpu_ns, med.wall_ns, spec.threads.min(spec.cpus));
    let ns_per_op = if median > 0.0 {
        1e9 / median
    } else {
        f64::INFINITY
    };
    let handover_rate = med.handover_rate();
    let h = &med.acquire_ns;
    let q = |x: f64| {
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(x)
        }
    };
    ResultRow {
        workload: spec.workload.name().to_string(),
        lock: spec.lock.clone(),
        threads: spec.threads,
        cs_ns: spec.cs_ns,
        think_ns: spec.think_ns,
        read_pct: (spec.workload == Workload::Rw).then_some(spec.read_pct),
        writers: (spec.workload == Workload::RcuUpdate).then_some(spec.writers),
        duration_ms: spec.duration_ms,
        repeats: trials.len(),
        ops_per_sec: Spread {
            median,
            min: ops[0],
            max: ops[ops.len() - 1],
        },
        ns_per_op,
        scaling: None,
        superlinear: false,
        lock_count: (spec.lock_count > 1).then_some(spec.lock_count),
        of_peak: None,
        collapsed: false,
        per_thread_ops: MinMax {
            min: med.per_thread_ops.iter().copied().min().unwrap_or(0),
            max: med.per_thread_ops.iter().copied().max().unwrap_or(0),
        },
        jain_fairness: jain(&med.per_thread_ops),
        cpu_util_pct: util,
        idle_pct: (100.0 - util).max(0.0),
        ctx_switches: CtxSwitches {
            voluntary: med.voluntary_cs as f64 / wall_s,
            involuntary: med.involuntary_cs as f64 / wall_s,
        },
        acquire_ns: Latency {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max: if h.is_empty() { 0 } else { h.max() },
            histogram: h
                .iter_recorded()
                .map(|v| {
                    (
                        h.highest_equivalent(v.value_iterated_to()),
                        v.count_at_value(),
                    )
                })
                .collect(),
        },
        noise: noise(trials, crate::engine::runner::online_cpus()),
        predicted: false,
        // Filled in by `fill_limits` once the row's `none` row exists.
        limit: Limit::default(),
        lock_ns: None,
        handover: handover_model(spec, handover_rate, cal)
            .filter(|_| spec.lock != crate::engine::workload::NONE)
            .map(|(basis, ns)| Limit::new(basis, ns, ns_per_op)),
        handover_rate,
        rss_kb: med.rss_kb,
        grace_periods: med.sync_counts.map(|c| c.0),
        sync_calls: med.sync_counts.map(|c| c.1),
        slots: (spec.workload == Workload::Condvar).then_some(spec.condvar.slots),
        notify: (spec.workload == Workload::Condvar).then(|| {
            if spec.condvar.notify_all {
                "all"
            } else {
                "one"
            }
            .to_string()
        }),
        wakeups_per_msg: (spec.workload == Workload::Condvar).then(|| {
            let msgs: u64 = med.per_thread_ops.iter().sum();
            med.voluntary_cs as f64 / msgs.max(1) as f64
        }),
        reads_per_sec: (spec.workload == Workload::RcuUpdate).then(|| {
            let reads: u64 = med.per_thread_ops.iter().skip(spec.writers).sum();
            reads as f64 / wall_s
        }),
        updates_per_sec: (spec.workload == Workload::RcuUpdate).then(|| {
            let updates: u64 = med.per_thread_ops.iter().take(spec.writers).sum();
            updates as f64 / wall_s
        }),
    }
}

/// What makes two rows the same loop: workload, cs, think and read share (threads apart).
fn setting(r: &ResultRow) -> (&str, u64, u64, Option<u32>) {
    (&r.workload, r.cs_ns, r.think_ns, r.read_pct)
}

/// Fills in `limit` and `lock_ns` for every row from the `none` rows measured in the same run.
///
/// The limit is a bound, not a model: no correct measurement can beat it, so `ratio <= 1`.
/// - Every lock runs the `none` row's loop plus its own work, so a row cannot be faster than the best
///   repeat of the `none` row at the same threads and settings (the loop run with no lock at all).
/// - With more than one thread, exclusive sections do not overlap: the writes' share of the ops costs
///   at least its critical section, back to back. (Not the lock's own uncontended cost on top, as
///   lab.md suggests: that is itself a measurement, and a 1-thread row disturbed by another process
///   inflated it past what the 2-thread row then did, a ratio of 1.45; it is the 1-thread row's
///   `lock_ns` instead.)
///
/// Rows without a `none` row at their settings keep a zero limit (`basis` says why).
pub fn fill_limits(rows: &mut [ResultRow]) {
    // (lock, threads, setting) -> (median, min, max ops/s): what the rows are compared with.
    type Key = (String, usize, (String, u64, u64, Option<u32>));
    let key = |lock: &str, threads: usize, r: &ResultRow| -> Key {
        let (w, cs, think, read) = setting(r);
        (lock.to_string(), threads, (w.to_string(), cs, think, read))
    };
    let table: std::collections::HashMap<Key, (f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            let o = &r.ops_per_sec;
            (key(&r.lock, r.threads, r), (o.median, o.min, o.max))
        })
        .collect();
    let none_of =
        |r: &ResultRow, threads: usize| table.get(&key(crate::engine::workload::NONE, threads, r));
    let ns = |ops: f64| if ops > 0.0 { 1e9 / ops } else { f64::INFINITY };
    for r in rows.iter_mut() {
        let Some(none) = none_of(r, r.threads) else {
            r.limit = Limit::new(
                "no `none` row at these settings in this run".into(),
                0.0,
                r.ns_per_op,
            );
            r.lock_ns = None;
            continue;
        };
        let (none_median, _, none_max) = *none;
        r.lock_ns = Some(r.ns_per_op - ns(none_median));
        let floor = ns(none_max);
        let w = write_share(&r.workload, r.read_pct);
        let mut basis = format!("the loop with no lock (none's best repeat, {floor:.2} ns)");
        let mut limit = floor;
        // `none` has no lock: its sections run in parallel.
        if r.threads > 1 && w > 0.0 && r.lock != crate::engine::workload::NONE {
            let serial = w * r.cs_ns as f64;
            if serial > limit {
                limit = serial;
                basis = format!("writes back to back: {w:.2} x cs {} ns", r.cs_ns);
            }
        }
        r.limit = Limit::new(basis, limit, r.ns_per_op);
    }
}

/// A row below this share of its lock's own peak throughput (same settings, any thread count), at
/// more threads than the peak's, has collapsed.
pub const COLLAPSE: f64 = 0.5;

/// Fills in `of_peak` and `collapsed` for every row whose lock ran at more than one thread count
/// with the same workload and settings. A collapse is a fall *after* the peak as threads are added:
/// rows at or below the peak's thread count (the ramp up to it, a 2-thread row under the 1-thread
/// one) have their share of the peak but are never `collapsed`.
pub fn fill_peak(rows: &mut [ResultRow]) {
    type Key = (String, String, u64, u64, Option<u32>, Option<usize>);
    fn key(r: &ResultRow) -> Key {
        (
            r.workload.clone(),
            r.lock.clone(),
            r.cs_ns,
            r.think_ns,
            r.read_pct,
            r.lock_count,
        )
    }
    // Per key: the best rate, the thread count it was reached at, and the rows counted.
    let mut peaks: Vec<(Key, f64, usize, usize)> = vec![];
    for r in rows.iter() {
        let k = key(r);
        let rate = r.ops_per_sec.median;
        match peaks.iter_mut().find(|(pk, ..)| *pk == k) {
            Some((_, best, at, n)) => {
                if rate > *best {
                    *best = rate;
                    *at = r.threads;
                }
                *n += 1;
            }
            None => peaks.push((k, rate, r.threads, 1)),
        }
    }
    for r in rows.iter_mut() {
        let k = key(r);
        let (_, best, at, n) = peaks
            .iter()
            .find(|(pk, ..)| *pk == k)
            .expect("every row's key was collected");
        r.of_peak = (*n > 1 && *best > 0.0).then(|| r.ops_per_sec.median / best);
        r.collapsed = r.threads > *at && r.of_peak.is_some_and(|p| p < COLLAPSE);
    }
}

/// The collapses among `rows`, one line per lock (its settings' rows): the thread counts where it fell
/// below half its own peak, and where the peak was. Empty if none collapsed.
pub fn collapse_lines(rows: &[&ResultRow]) -> Vec<String> {
    let mut out = vec![];
    let mut seen: Vec<&str> = vec![];
    for r in rows {
        if !r.collapsed || seen.contains(&r.lock.as_str()) {
            continue;
        }
        seen.push(&r.lock);
        let mine: Vec<&&ResultRow> = rows.iter().filter(|x| x.lock == r.lock).collect();
        let peak = mine
            .iter()
            .max_by(|a, b| a.ops_per_sec.median.total_cmp(&b.ops_per_sec.median))
            .expect("r is among them");
        let mut at: Vec<String> = mine
            .iter()
            .filter(|x| x.collapsed)
            .map(|x| format!("{} (x{:.2})", x.threads, x.of_peak.unwrap_or(0.0)))
            .collect();
        at.dedup();
        out.push(format!(
            "{} collapses: below half its peak ({} threads) at {} threads",
            r.lock,
            peak.threads,
            at.join(", ")
        ));
    }
    out
}

/// Fills in `scaling` for every row that has a 1-thread row of the same lock, workload and settings,
/// and flags the rows whose scaling no lock can reach on `cpus` CPUs (`superlinear`).
pub fn fill_scaling(rows: &mut [ResultRow], cpus: usize) {
    let base: Vec<(String, String, f64)> = rows
        .iter()
        .filter(|r| r.threads == 1)
        .map(|r| (r.workload.clone(), r.lock.clone(), r.ops_per_sec.median))
        .collect();
    for r in rows.iter_mut() {
        // `rcu-update` changes what the threads do with their number (1 thread: the updater alone;
        // more: readers beside it), so a ratio to 1 thread is not a scaling.
        if r.workload == Workload::RcuUpdate.name() {
            r.scaling = None;
            continue;
        }
        r.scaling = base
            .iter()
            .find(|(w, l, _)| *w == r.workload && *l == r.lock)
            .filter(|(_, _, b)| *b > 0.0)
            .map(|(_, _, b)| r.ops_per_sec.median / b);
        r.superlinear = r.scaling.is_some_and(|s| superlinear(s, r.threads, cpus));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    fn trial(ops: Vec<u64>, wall_ns: u64, cpu_ns: u64, lat: &[u64]) -> TrialOutcome {
        let mut h = Histogram::new(3).unwrap();
        for &l in lat {
            h.record(l).unwrap();
        }
        TrialOutcome {
            per_thread_ops: ops,
            wall_ns,
            cpu_ns,
            voluntary_cs: 10,
            involuntary_cs: 4,
            acquire_ns: h,
            others_cpu_ns: Some(0),
            steal_ns: 0,
            exclusive_ops: 0,
            handovers: 0,
            rss_kb: None,
            sync_counts: None,
        }
    }

    /// Other processes' CPU and steal, as a share of the machine, worst trial wins.
    #[test]
    fn noise_is_the_worst_trials_share_of_the_machine() {
        let mut quiet = trial(vec![1], 1_000_000_000, 0, &[]);
        quiet.others_cpu_ns = Some(50_000_000); // 0.05 CPU-s of 2 CPU-s: 2.5%
        let mut busy = trial(vec![1], 1_000_000_000, 0, &[]);
        busy.others_cpu_ns = Some(1_200_000_000); // 60%
        busy.steal_ns = 20_000_000; // 1%
        let n = noise(std::slice::from_ref(&quiet), 2);
        assert!((n.others_cpu_pct - 2.5).abs() < 1e-9 && !n.busy, "{n:?}");
        let n = noise(&[quiet.clone(), busy], 2);
        assert!((n.others_cpu_pct - 60.0).abs() < 1e-9 && (n.steal_pct - 1.0).abs() < 1e-9);
        assert!(n.busy);
        let mut stolen = quiet;
        stolen.steal_ns = 200_000_000; // 10%
        assert!(noise(&[stolen], 2).busy, "steal alone marks a row busy");
    }

    fn spec(threads: usize) -> RowSpec {
        RowSpec {
            workload: Workload::Mutex,
            lock: "x".into(),
            threads,
            cs_ns: 0,
            think_ns: 0,
            read_pct: 0,
            writers: 1,
            condvar: Default::default(),
            duration_ms: 500,
            cpus: 2,
            lock_count: 1,
        }
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5, 5, 5, 5]), 1.0);
        assert!((jain(&[1, 0, 0, 0]) - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[0, 0]), 1.0);
    }

    #[test]
    fn summarize_picks_the_median_repeat_and_computes_every_metric() {
        let cal = Calibration {
            atomic_rmw_ns: 5.0,
            cas_ns: 6.0,
            line_transfer_ns: 50.0,
            futex_wake_ns: 0.0,
            ..Default::default()
        };
        let trials = vec![
            trial(vec![100, 100], 1_000_000_000, 2_000_000_000, &[10; 4]), // 200 ops/s
            trial(
                vec![300, 100],
                1_000_000_000,
                1_000_000_000,
                &[20, 20, 20, 1000],
            ), // 400 ops/s, median
            trial(vec![500, 500], 1_000_000_000, 2_000_000_000, &[30; 4]), // 1000 ops/s
        ];
        let r = summarize(&spec(2), &trials, &cal);
        assert_eq!(
            r.ops_per_sec,
            Spread {
                median: 400.0,
                min: 200.0,
                max: 1000.0
            }
        );
        assert_eq!(r.ns_per_op, 2_500_000.0);
        assert_eq!(r.per_thread_ops, MinMax { min: 100, max: 300 });
        assert!(r.unfair(), "300 > 2 x 100");
        assert!((r.jain_fairness - 0.8).abs() < 1e-12);
        assert!((r.cpu_util_pct - 50.0).abs() < 1e-9);
        assert!((r.idle_pct - 50.0).abs() < 1e-9);
        assert_eq!(
            r.ctx_switches,
            CtxSwitches {
                voluntary: 10.0,
                involuntary: 4.0
            }
        );
        assert_eq!(r.acquire_ns.p50, 20);
        assert_eq!(r.acquire_ns.max, 1000);
        assert_eq!(
            r.acquire_ns.histogram,
            [(20, 3), (1000, 1)],
            "the median repeat's samples, value and count"
        );
        assert_eq!(r.read_pct, None);
    }

    #[test]
    fn idle_is_floored_and_scaling_uses_the_one_thread_row() {
        let cal = Calibration::default();
        let busy = vec![trial(vec![10], 1_000_000_000, 1_500_000_000, &[])];
        let mut rows = vec![
            summarize(&spec(1), &busy, &cal),
            summarize(
                &spec(2),
                &[trial(vec![10, 20], 1_000_000_000, 0, &[])],
                &cal,
            ),
        ];
        assert_eq!(rows[0].idle_pct, 0.0);
        fill_scaling(&mut rows, 8);
        assert_eq!(rows[0].scaling, Some(1.0));
        assert_eq!(rows[1].scaling, Some(3.0));
        // x3 at 2 threads: more than two threads can do; flagged.
        assert!(!rows[0].superlinear && rows[1].superlinear);
    }

    /// A row that made no operation (an oversubscribed spinlock can starve for a whole window) has an
    /// infinite `ns_per_op`, which JSON writes as null: the lab reads its own file back.
    #[test]
    fn a_row_with_no_operation_round_trips_through_json() {
        let mut r = row("spin-ticket", "mutex", 4, 0, (0.0, 0.0, 0.0));
        r.ns_per_op = f64::INFINITY;
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"ns_per_op\":null"), "{text}");
        let back: ResultRow = serde_json::from_str(&text).unwrap();
        assert!(back.ns_per_op.is_infinite());
    }

    /// Superlinear scaling is flagged on synthetic rows (at min(threads, CPUs) plus the tolerance),
    /// marked `???` in the table, and serialised on every row.
    #[test]
    fn superlinear_rows_are_flagged() {
        let mk = |threads: usize, ops: f64| {
            let mut r = row("l", "mutex", threads, 0, (ops, ops, ops));
            r.per_thread_ops = MinMax { min: 10, max: 10 };
            r
        };
        let mut rows = vec![mk(1, 1e6), mk(2, 2.05e6), mk(4, 2.9e6)];
        fill_scaling(&mut rows, 2);
        assert!(
            !rows[1].superlinear,
            "x2.05 at 2 threads on 2 CPUs is within noise"
        );
        assert!(rows[2].superlinear, "x2.9 at 4 threads on 2 CPUs");
        let mut rows = vec![mk(1, 1e6), mk(2, 2.83e6)];
        fill_scaling(&mut rows, 2);
        assert!(rows[1].superlinear && rows[1].flagged());
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(json[0]["superlinear"], false);
        assert_eq!(json[1]["superlinear"], true);
        assert!(superlinear(2.3, 4, 2) && !superlinear(2.2, 4, 2) && !superlinear(1.1, 1, 8));
    }

    fn row(lock: &str, workload: &str, threads: usize, cs: u64, ops: (f64, f64, f64)) -> ResultRow {
        let mut r = ResultRow {
            workload: workload.into(),
            lock: lock.into(),
            threads,
            cs_ns: cs,
            read_pct: (workload == "rw").then_some(50),
            ..Default::default()
        };
        r.ops_per_sec = Spread {
            median: ops.0,
            min: ops.1,
            max: ops.2,
        };
        r.ns_per_op = 1e9 / ops.0;
        r
    }

    /// The limit is the `none` row's best repeat at the same threads, or the writes back
    /// to back (cs + the lock's own cost alone), whichever is slower; `lock_ns` subtracts `none`.
    #[test]
    fn limits_come_from_the_none_row_and_serial_writes() {
        // none: 1 thread 4 ns (best 3.2 ns = 312.5M/s); 2 threads 2 ns (best 1.6 ns).
        let mut rows = vec![
            row("none", "mutex", 1, 0, (250e6, 200e6, 312.5e6)),
            row("none", "mutex", 2, 0, (500e6, 400e6, 625e6)),
            row("x", "mutex", 1, 0, (100e6, 90e6, 125e6)),
            row("x", "mutex", 2, 0, (20e6, 19e6, 21e6)),
            row("y", "rw", 2, 0, (20e6, 19e6, 21e6)), // no none row for rw
        ];
        fill_limits(&mut rows);
        let x1 = &rows[2];
        assert_eq!(x1.limit.ns_per_op, 3.2, "1 thread: none's best");
        assert!((x1.limit.ratio - 3.2 / 10.0).abs() < 1e-12);
        assert!(
            (x1.lock_ns.unwrap() - 6.0).abs() < 1e-9,
            "10 ns - none's median 4 ns"
        );
        let x2 = &rows[3];
        assert_eq!(x2.limit.ns_per_op, 1.6, "2 threads, cs 0: none's best");
        assert!((x2.lock_ns.unwrap() - 48.0).abs() < 1e-9);
        assert_eq!(rows[1].lock_ns, Some(0.0), "none's own lock_ns");
        assert!(
            rows[1].limit.ratio <= 1.0,
            "none against its own best repeat"
        );
        assert_eq!(rows[4].lock_ns, None);
        assert_eq!(rows[4].limit.ns_per_op, 0.0);
        assert!(rows[4].limit.basis.contains("no `none` row"));
        // A critical section dominates: 2 threads of cs 100 ns can do no better than 100 ns per op.
        let mut rows = vec![
            row("none", "mutex", 2, 100, (19e6, 18e6, 20e6)),
            row("x", "mutex", 2, 100, (9e6, 8e6, 9.5e6)),
        ];
        fill_limits(&mut rows);
        assert_eq!(rows[1].limit.ns_per_op, 100.0);
        assert!(
            rows[1].limit.basis.contains("back to back"),
            "{}",
            rows[1].limit.basis
        );
        assert!(rows.iter().all(|r| r.limit.ratio <= 1.0));
    }

    /// The hand-over rate comes from the median repeat's counts, and the line-transfer
    /// model uses it.
    #[test]
    fn handover_rate_and_model() {
        let cal = Calibration {
            line_transfer_ns: 50.0,
            ..Default::default()
        };
        let mut t = trial(vec![500, 500], 1_000_000_000, 0, &[]);
        t.exclusive_ops = 1000;
        t.handovers = 250;
        let r = summarize(&spec(2), &[t], &cal);
        assert_eq!(r.handover_rate, Some(0.25));
        let h = r.handover.expect("2 threads have a model");
        assert_eq!(h.ns_per_op, 0.25 * 50.0);
        assert!((h.ratio - 12.5 / 1e6).abs() < 1e-15);
        assert!(
            summarize(&spec(1), &[trial(vec![5], 1_000_000_000, 0, &[])], &cal)
                .handover
                .is_none()
        );
        let mut rw = spec(2);
        rw.workload = Workload::Rw;
        rw.read_pct = 90;
        rw.cs_ns = 100;
        let (_, ns) = handover_model(&rw, Some(1.0), &cal).unwrap();
        assert!((ns - 0.1 * 150.0).abs() < 1e-9, "{ns}");
        assert_eq!(
            trial(vec![1], 1, 0, &[]).handover_rate(),
            None,
            "no exclusive ops"
        );
    }
}
