//! The simulated machine (`locklab predict`, `reproduce --predict`, the validation): the lab's table
//! computed on a modelled machine.
//!
//! The runner (`locklab-sim`, locklab's lock code built with `--cfg locklab_sim`, which the lab's
//! build script makes in `target/sim/`) runs one lock x thread count per process: a job as JSON on
//! its standard input (a machine description and the workload), the run as JSON on its standard
//! output. This module reads machine descriptions (shipped, a user's file, or `this`: measured now),
//! runs the jobs (one per host CPU at a time, each child pinned to its own CPU), and turns each run
//! into the lab's row, marked `predicted`.

use crate::engine::limits as calibrate;
use crate::engine::metrics::{self, Latency, MinMax, ResultRow, Spread};
use crate::engine::plan::{UsageError, usage};
pub use locklab::sim::Machine;
use locklab::sim::job::Job;
pub use locklab::sim::job::LOCKS;
pub use locklab::sim::job::{JobOut, JobSpec, JobThread};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The shipped descriptions: name and file.
pub const SHIPPED: [(&str, &str); 4] = [
    ("opteron-48", include_str!("../../machines/opteron-48.toml")),
    (
        "opteron-8x6",
        include_str!("../../machines/opteron-8x6.toml"),
    ),
    (
        "opteron-2s8c",
        include_str!("../../machines/opteron-2s8c.toml"),
    ),
    ("xeon-2s", include_str!("../../machines/xeon-2s.toml")),
];

/// Parses a description; errors name the file and the key.
pub fn parse_machine(origin: &str, text: &str) -> Result<Machine, UsageError> {
    let m: Machine = toml::from_str(text).map_err(|e| {
        let msg = e.message().to_string();
        let at = e
            .span()
            .map(|s| format!(" (line {})", text[..s.start].lines().count().max(1)))
            .unwrap_or_default();
        UsageError(format!("machine description {origin}{at}: {msg}"))
    })?;
    m.validate()
        .map_err(|e| UsageError(format!("machine description {origin}: {e}")))?;
    Ok(m)
}

/// `--machine`: `this` (measured now), a shipped name, or a description file.
pub fn machine(arg: &str) -> Result<Machine, UsageError> {
    if arg == "this" {
        return Ok(describe_this());
    }
    if let Some((_, text)) = SHIPPED.iter().find(|(n, _)| *n == arg) {
        return parse_machine(arg, text);
    }
    if std::path::Path::new(arg).is_file() {
        let text = std::fs::read_to_string(arg)
            .map_err(|e| UsageError(format!("--machine: cannot read {arg}: {e}")))?;
        return parse_machine(arg, &text);
    }
    usage(format!(
        "--machine: '{arg}' is neither a machine (this, {}) nor a description file",
        SHIPPED.map(|(n, _)| n).join(", ")
    ))
}

/// Measures this machine: the lab's calibration (atomic RMW, line transfer, futex wake-up) and a few
/// more probes; what cannot be measured with few CPUs (the serialisation of one line's transfers,
/// memory latency, the time slice) keeps a typical figure, said in `source`.
pub fn describe_this() -> Machine {
    use std::hint::black_box;
    let cpus = crate::engine::runner::allowed_cpus().len().clamp(1, 128);
    // Three probes, the best round of all: see `transfer` below.
    let probes: Vec<calibrate::LineTransfer> = (0..3).map(|_| calibrate::line_transfer()).collect();
    let line = probes
        .iter()
        .copied()
        .min_by(|a, b| a.best_ns.total_cmp(&b.best_ns))
        .expect("three probes");
    let per = |iters: u64, mut f: Box<dyn FnMut()>| -> f64 {
        (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..iters {
                    f();
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    let pause_ns = per(200_000, Box::new(std::hint::spin_loop));
    let fence_ns = per(
        1_000_000,
        Box::new(|| std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst)),
    );
    let clock_ns = per(
        200_000,
        Box::new(|| {
            black_box(std::time::Instant::now());
        }),
    );
    let yield_ns = per(20_000, Box::new(locklab::sys::sched_yield));
    let word = std::sync::atomic::AtomicU32::new(0);
    let syscall_ns = per(
        50_000,
        Box::new(move || {
            black_box(locklab::sys::futex_wake(&word, 1));
        }),
    );
    let (waker_ns, switch_ns) = futex_pingpong();
    // The best round, as the lab's own calibration reports it: on a VM whose virtual CPUs the
    // hypervisor moves, rounds spread widely (two modes on the VM this was written on: ~35 ns and
    // ~100-190 ns, the slow one for whole probes at a time), and the lab's runs mostly see the fast
    // one.
    let transfer = if line.best_ns > 0.0 {
        line.best_ns
    } else {
        60.0
    };
    Machine {
        name: "this".into(),
        what: format!(
            "this machine: {} ({} CPUs), measured now",
            calibrate::machine().cpu_model,
            cpus
        ),
        source: "measured: rmw, fence, pause, line transfer (best round of the lab's probe), syscall, futex wake (waker and wake-up), context switch, yield, clock; typical, not measured: hit_ns, memory_ns, slice_ns; occupancy 1 and a probe filter (one node: no probes to send) by the protocol; one node".into(),
        sockets: 1,
        nodes_per_socket: 1,
        cores_per_node: cpus,
        hit_ns: 1.0,
        rmw_ns: calibrate::atomic_rmw_ns(),
        fence_ns,
        pause_ns: pause_ns.max(0.1),
        line_node_ns: transfer,
        line_socket_ns: transfer,
        line_remote_ns: transfer,
        line_farthest_ns: transfer,
        memory_ns: 90.0,
        occupancy: 1.0,
        probe_filter: true,
        syscall_ns,
        futex_wake_ns: waker_ns,
        wakeup_ns: calibrate::futex_wake_ns(),
        ctx_switch_ns: switch_ns,
        yield_ns,
        clock_ns,
        slice_ns: 3_000_000.0,
    }
}

/// Two threads pinned to one CPU hand a futex word back and forth: the waker's cost of a wake that
/// wakes someone, and half a round trip (a wake, a wait and a context switch each way).
fn futex_pingpong() -> (f64, f64) {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    let cpus = crate::engine::runner::allowed_cpus();
    let Some(&cpu) = cpus.first() else {
        return (1500.0, 2000.0);
    };
    const N: u32 = 2000;
    let word = AtomicU32::new(0);
    let wake_ns = AtomicU64::new(0);
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            crate::engine::runner::pin_to(cpu);
            for i in 0..N {
                // Acquire pairs with the other thread's Release store (its turn is over).
                while word.load(Ordering::Acquire) != 2 * i + 1 {
                    locklab::sys::futex_wait(&word, 2 * i, None);
                }
                word.store(2 * i + 2, Ordering::Release);
                let t = std::time::Instant::now();
                locklab::sys::futex_wake(&word, 1);
                wake_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        });
        crate::engine::runner::pin_to(cpu);
        for i in 0..N {
            // Release/Acquire: the ping-pong's hand-over, as above.
            word.store(2 * i + 1, Ordering::Release);
            locklab::sys::futex_wake(&word, 1);
            while word.load(Ordering::Acquire) != 2 * i + 2 {
                locklab::sys::futex_wait(&word, 2 * i + 1, None);
            }
        }
    });
    let total = start.elapsed().as_nanos() as f64;
    crate::engine::runner::unpin(&cpus);
    (
        wake_ns.load(Ordering::Relaxed) as f64 / N as f64,
        total / (2 * N) as f64,
    )
}

/// Where the runner is: `LOCKLAB_SIM`, else the one the lab's build made.
pub fn runner() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("LOCKLAB_SIM") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        anyhow::bail!("LOCKLAB_SIM={}: no such file", p.display());
    }
    match option_env!("LOCKLAB_SIM_BUILT").map(PathBuf::from) {
        Some(p) if p.is_file() => Ok(p),
        _ => anyhow::bail!(
            "the simulator is not built (the lab's build makes it in target/sim/ unless LOCKLAB_NO_SIM_BUILD is set; or build it: RUSTFLAGS=\"--cfg locklab_sim\" cargo build --release -p locklab-sim --target-dir target/sim, and set LOCKLAB_SIM to target/sim/release/locklab-sim)"
        ),
    }
}

/// Runs one job on the runner (pinned to host CPU `cpu` if given).
pub fn simulate(
    runner: &std::path::Path,
    m: &Machine,
    job: &JobSpec,
    cpu: Option<usize>,
) -> anyhow::Result<JobOut> {
    let j = Job {
        machine: m.clone(),
        spec: job.clone(),
    };
    let mut c = Command::new(runner);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cpu) = cpu {
        c.env("LOCKLAB_SIM_CPU", cpu.to_string());
    }
    let mut child = c
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run the simulator {}: {e}", runner.display()))?;
    let input = serde_json::to_vec(&j)?;
    if let Some(mut si) = child.stdin.take() {
        si.write_all(&input)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!(
            "the simulator failed on {} x {} threads ({}): {}",
            job.lock,
            job.threads,
            out.status,
            err.trim()
        );
    }
    serde_json::from_slice(&out.stdout).map_err(|e| anyhow::anyhow!("the simulator's output: {e}"))
}

/// Runs every job, as many at once as this machine has CPUs (each child on its own CPU); results in
/// the jobs' order. `progress(done, total)` after each.
pub fn simulate_all(
    m: &Machine,
    jobs: &[JobSpec],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> anyhow::Result<Vec<JobOut>> {
    let runner = runner()?;
    let cpus = crate::engine::runner::allowed_cpus();
    let lanes = cpus.len().clamp(1, jobs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<anyhow::Result<JobOut>>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for lane in 0..lanes {
            let (runner, next, done, results, cpus) = (&runner, &next, &done, &results, &cpus);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let r = simulate(runner, m, job, cpus.get(lane).copied());
                    let failed = r.is_err();
                    *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    progress(d, jobs.len());
                    if failed {
                        next.store(usize::MAX / 2, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err(anyhow::anyhow!("not run (an earlier job failed)")))
        })
        .collect()
}

/// The lab's row for a run (the workers only: a seed-004 arm's extra worker thread is left out).
pub fn row(job: &JobSpec, out: &JobOut, cores: usize) -> ResultRow {
    let workers = &out.threads[..job.threads.min(out.threads.len())];
    let ops: Vec<u64> = workers.iter().map(|t| t.ops).collect();
    let total: u64 = ops.iter().sum();
    let secs = out.virtual_ns / 1e9;
    let rate = total as f64 / secs;
    // The cores' busy time (threads running, spinning included, and context switches) over the
    // cores the threads could use; a seed-004 arm's worker has a core of its own, left out.
    let busy: f64 = out.core_busy_ns.iter().take(job.threads.min(cores)).sum();
    let util = 100.0 * busy / (out.virtual_ns * job.threads.min(cores) as f64);
    let exclusive: u64 = workers.iter().map(|t| t.exclusive).sum();
    let handovers: u64 = workers.iter().map(|t| t.handovers).sum();
    let is_lock = matches!(job.workload.as_str(), "mutex" | "rw");
    ResultRow {
        workload: job.workload.clone(),
        lock: job.lock.clone(),
        threads: job.threads,
        cs_ns: job.cs_ns as u64,
        think_ns: job.think_ns as u64,
        read_pct: (job.workload == "rw").then_some(job.read_pct),
        duration_ms: job.duration_ms.ceil() as u64,
        repeats: 1,
        ops_per_sec: Spread {
            median: rate,
            min: rate,
            max: rate,
        },
        ns_per_op: if total > 0 { 1e9 / rate } else { f64::INFINITY },
        per_thread_ops: MinMax {
            min: ops.iter().copied().min().unwrap_or(0),
            max: ops.iter().copied().max().unwrap_or(0),
        },
        jain_fairness: metrics::jain(&ops),
        cpu_util_pct: util.min(100.0),
        idle_pct: (100.0 - util).max(0.0),
        acquire_ns: Latency {
            p50: out.acquire_ns[0] as u64,
            p99: out.acquire_ns[1] as u64,
            p999: out.acquire_ns[1] as u64,
            max: out.acquire_ns[2] as u64,
            histogram: vec![],
        },
        handover_rate: (is_lock && exclusive > 0).then(|| handovers as f64 / exclusive as f64),
        predicted: true,
        ..Default::default()
    }
}

/// What `predict` runs.
#[derive(Clone, Debug)]
pub struct PredictPlan {
    /// `--machine`.
    pub machine: String,
    /// `mutex` or `rw`.
    pub workload: String,
    /// Locks.
    pub locks: Vec<String>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// ns.
    pub cs_ns: u64,
    /// ns.
    pub think_ns: u64,
    /// %.
    pub read_pct: u32,
    /// Virtual ms.
    pub duration_ms: u64,
    /// Start-order seed.
    pub seed: u64,
    /// `--json`.
    pub json: Option<String>,
}

/// The default `--locks`.
pub const DEFAULT_LOCKS: &str = "ticket,mcs,qspinlock,mutex,rwsem";

/// The most virtual ms a run may ask for (one thread: ~7 s of host time on a 2-CPU machine).
pub const MAX_VIRTUAL_MS: u64 = 10_000;
/// The most virtual ms x threads a run of two threads or more may ask for: every hand-over between
/// virtual threads is one between host threads (~4 us each, tens of thousands a virtual ms), so a
/// run costs about 20 ms of host time per virtual thread-ms: 2,000 is under a minute on a 2-CPU
/// machine.
pub const MAX_THREAD_MS: u64 = 2_000;

/// Whether a run of `threads` threads (the most of the plan's) for `duration_ms` is within
/// [`MAX_THREAD_MS`]; one usage line if not.
///
/// ```
/// use locklab_bench::engine::sim::check_budget;
/// assert!(check_budget(10_000, 1).is_ok());
/// assert!(check_budget(20, 48).is_ok());
/// let e = check_budget(2_000, 8).unwrap_err().0;
/// assert!(e.contains("at most 250 ms at 8 threads"), "{e}");
/// ```
pub fn check_budget(duration_ms: u64, threads: usize) -> Result<(), UsageError> {
    let threads = threads.max(1) as u64;
    if threads < 2 || duration_ms.saturating_mul(threads) <= MAX_THREAD_MS {
        return Ok(());
    }
    usage(format!(
        "--duration-ms: {duration_ms} ms at {threads} threads is beyond what the simulator runs in reasonable time (virtual ms x threads at most {MAX_THREAD_MS}: at most {} ms at {threads} threads)",
        MAX_THREAD_MS / threads
    ))
}

/// 1, 2, 4, ... up to the cores, and the cores.
pub fn default_threads(cores: usize) -> Vec<usize> {
    let mut v = vec![];
    let mut t = 1;
    while t < cores {
        v.push(t);
        t *= 2;
    }
    v.push(cores);
    v
}

/// `predict`'s JSON.
#[derive(Serialize, Deserialize)]
pub struct PredictReport {
    /// The lab's version.
    pub locklab_version: String,
    /// Always true: nothing here was measured.
    pub predicted: bool,
    /// The simulated machine.
    pub machine: Machine,
    /// The host the simulation ran on.
    pub host: crate::engine::metrics::Machine,
    /// The simulator's own cost: events, host switches, host seconds.
    pub simulator: SimCost,
    /// The lab's rows, each `predicted`.
    pub results: Vec<ResultRow>,
}

/// What the simulation cost the host.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SimCost {
    /// Operations ordered.
    pub events: u64,
    /// Host hand-overs.
    pub host_switches: u64,
    /// Polling iterations not stepped.
    pub elided_iterations: u64,
    /// Host seconds (summed over the runs).
    pub host_s: f64,
}

/// Runs the plan's jobs on `m`: the rows (scaling and peak filled), and the simulator's cost.
pub fn predict(
    m: &Machine,
    plan: &PredictPlan,
    quiet: bool,
) -> anyhow::Result<(Vec<ResultRow>, SimCost)> {
    let threads = if plan.threads.is_empty() {
        default_threads(m.cores())
    } else {
        plan.threads.clone()
    };
    let mut jobs = vec![];
    for l in &plan.locks {
        for &t in &threads {
            jobs.push(JobSpec {
                workload: plan.workload.clone(),
                lock: l.clone(),
                threads: t,
                cs_ns: plan.cs_ns as f64,
                think_ns: plan.think_ns as f64,
                read_pct: if plan.workload == "rw" {
                    plan.read_pct
                } else {
                    0
                },
                write_cs_ns: None,
                duration_ms: plan.duration_ms as f64,
                seed: plan.seed,
            });
        }
    }
    let tty = !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let outs = simulate_all(m, &jobs, &|d, n| {
        if tty {
            eprint!("\rpredict: {d} of {n} simulated runs");
            if d == n {
                eprint!("\r\x1b[K");
            }
        }
    })?;
    let mut cost = SimCost::default();
    let mut rows = vec![];
    for (j, o) in jobs.iter().zip(&outs) {
        cost.events += o.events;
        cost.host_switches += o.host_switches;
        cost.elided_iterations += o.elided_iterations;
        cost.host_s += o.wall_ms / 1e3;
        rows.push(row(j, o, m.cores()));
    }
    metrics::fill_scaling(&mut rows, m.cores());
    metrics::fill_peak(&mut rows);
    Ok((rows, cost))
}

/// One line under a prediction's title: what has been checked against published measurements, and
/// what has not (see `predict --validate` and `docs/design/predict.md`).
pub fn what_it_cannot_say(m: &Machine) -> String {
    if m.name == "opteron-8x6" {
        "checked: the ticket lock's collapse against Boyd-Wickizer 2012 (predict --validate); unvalidated: every other lock and workload (no published figure)".into()
    } else {
        "unvalidated: no published figure for this machine (predict --validate checks opteron-8x6's ticket-lock collapse); sleeping and rw locks nowhere".into()
    }
}

/// The predicted table.
pub fn render(m: &Machine, rows: &[ResultRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let Some(first) = rows.first() else {
        return out;
    };
    let read = first
        .read_pct
        .map(|p| format!(" read={p}%"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "PREDICTED (simulated, not measured) on {}: {}",
        m.name, m.what
    );
    let _ = writeln!(out, "{}", what_it_cannot_say(m));
    let _ = writeln!(
        out,
        "{}  cs={}ns think={}ns{}  ({} cores, line transfer {:.0}/{:.0}/{:.0} ns node/socket/remote, {} ms virtual)",
        first.workload,
        first.cs_ns,
        first.think_ns,
        read,
        m.cores(),
        m.line_node_ns,
        m.line_socket_ns,
        m.line_remote_ns,
        first.duration_ms
    );
    let _ = writeln!(
        out,
        "{:<12}{:>8}{:>15} {:>9}{:>9}{:>7}{:>10}{:>7}{:>7}",
        "lock", "threads", "ops/s", "(xN)", "of peak", "idle%", "p99 acq", "fair", "hand%"
    );
    let mut locks: Vec<&str> = vec![];
    for r in rows {
        if !locks.contains(&r.lock.as_str()) {
            locks.push(&r.lock);
        }
    }
    for l in locks {
        for r in rows.iter().filter(|r| r.lock == l) {
            let scaling = r.scaling.map(|s| format!("(x{s:.2})")).unwrap_or_default();
            let peak = r.of_peak.map(|p| format!("{p:.2}")).unwrap_or_default();
            let hand = r
                .handover_rate
                .map(|v| format!("{:.0}%", 100.0 * v))
                .unwrap_or_default();
            let mark = if r.collapsed { " COLLAPSED" } else { "" };
            let _ = writeln!(
                out,
                "{:<12}{:>8}{:>15} {:>9}{:>9}{:>6.0}%{:>10}{:>7.2}{:>7}  predicted{}",
                r.lock,
                r.threads,
                crate::engine::output::table::group(r.ops_per_sec.median),
                scaling,
                peak,
                r.idle_pct,
                crate::engine::output::table::ns(r.acquire_ns.p99),
                r.jain_fairness,
                hand,
                mark
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_descriptions_parse() {
        for (name, text) in SHIPPED {
            let m = parse_machine(name, text).unwrap();
            assert_eq!(m.name, name);
            assert!(m.cores() >= 16, "{name}: {}", m.cores());
            // The file round-trips through the writer `calibrate --describe` uses.
            assert_eq!(
                parse_machine("again", &m.to_toml()).unwrap().cores(),
                m.cores()
            );
        }
        assert_eq!(machine("opteron-48").unwrap().cores(), 48);
        assert_eq!(machine("opteron-2s8c").unwrap().cores(), 16);
    }

    #[test]
    fn bad_descriptions_are_one_line_naming_the_key() {
        let (_, good) = SHIPPED[0];
        let typo = good.replace("rmw_ns", "rmw_nss");
        let e = parse_machine("f.toml", &typo).unwrap_err().0;
        assert!(e.contains("f.toml") && e.contains("rmw_nss"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let negative = good.replace("pause_ns = 3.0", "pause_ns = -3.0");
        let e = parse_machine("f.toml", &negative).unwrap_err().0;
        assert!(e.contains("pause_ns"), "{e}");
        let huge = good.replace("cores_per_node = 6", "cores_per_node = 600");
        let e = parse_machine("f.toml", &huge).unwrap_err().0;
        assert!(e.contains("1 to 128"), "{e}");
        // A value no machine has: one line naming the key (it once reached the simulator, whose
        // figures became infinite and its output unreadable).
        let absurd = good.replace("wakeup_ns = 6000.0", "wakeup_ns = 1e300");
        let e = parse_machine("f.toml", &absurd).unwrap_err().0;
        assert!(
            e.starts_with("machine description f.toml: `wakeup_ns` must be a number from 0 to 1e7"),
            "{e}"
        );
        let absurd = good.replace("slice_ns = 4000000.0", "slice_ns = 1e12");
        let e = parse_machine("f.toml", &absurd).unwrap_err().0;
        assert!(
            e.contains("`slice_ns` must be a number from 0 to 1e9"),
            "{e}"
        );
        let wraps = good.replace("sockets = 4", "sockets = 4611686018427387904");
        let e = parse_machine("f.toml", &wraps).unwrap_err().0;
        assert!(e.contains("1 to 128 are supported"), "{e}");
        let missing = good.replace("occupancy = 1.0\n", "");
        let e = parse_machine("f.toml", &missing).unwrap_err().0;
        assert!(e.contains("occupancy"), "{e}");
        let e = machine("no-such-machine").unwrap_err().0;
        assert!(e.contains("opteron-48"), "{e}");
    }

    #[test]
    fn a_run_becomes_a_row() {
        let job = JobSpec {
            workload: "mutex".into(),
            lock: "ticket".into(),
            threads: 2,
            cs_ns: 100.0,
            think_ns: 100.0,
            read_pct: 0,
            write_cs_ns: None,
            duration_ms: 1.0,
            seed: 1,
        };
        let t = |ops, cpu_ns| JobThread {
            ops,
            exclusive: ops,
            handovers: ops / 2,
            cpu_ns,
            core: 0,
        };
        let out = JobOut {
            threads: vec![t(3000, 1e6), t(1000, 0.5e6)],
            core_busy_ns: vec![1e6, 0.5e6, 0.0, 0.0],
            virtual_ns: 1e6,
            acquire_ns: [100.0, 900.0, 5000.0],
            events: 1,
            host_switches: 1,
            elided_iterations: 0,
            wall_ms: 1.0,
        };
        let r = row(&job, &out, 4);
        assert!(r.predicted);
        assert_eq!(r.ops_per_sec.median, 4_000_000.0);
        assert_eq!(r.per_thread_ops.min, 1000);
        assert_eq!(r.per_thread_ops.max, 3000);
        assert!((r.jain_fairness - 0.8).abs() < 1e-9, "{}", r.jain_fairness);
        assert!((r.idle_pct - 25.0).abs() < 1e-9, "{}", r.idle_pct);
        assert_eq!(r.handover_rate, Some(0.5));
        assert_eq!(r.acquire_ns.p99, 900);
    }
}
