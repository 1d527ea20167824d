//! `locklab bench`: one plan (workloads x locks x thread counts) run side by side, with the table, the
//! summary and the exports (the shared `suite` runs it).

use crate::engine::output::{Exporter, Format};
use crate::engine::plan::{
    MAX_DURATION_MS, MAX_LOCKS, MAX_REPEATS, MAX_SLOTS, MAX_THREADS, MAX_WORK_NS, Plan, UsageError,
    default_threads, number, thread_list, usage,
};
use crate::engine::runner::{CondvarSpec, SystemClock};
use crate::engine::workload::Workload;
use crate::locks::{self, LockInfo};
use clap::Args;

/// Runs `bench`: the plan of the arguments, on the system clock.
pub fn command(a: &BenchArgs, cpus: usize) -> anyhow::Result<()> {
    crate::engine::suite::run(&plan_bench(a, cpus)?, &SystemClock::default())?;
    Ok(())
}

/// `locklab bench` options.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The workload (the help lists every one, from [`Workload::ALL`]).
    #[arg(long, value_name = "W", help = Workload::names_help())]
    pub workload: String,
    /// Comma-separated lock names, or `all` (every lock that runs the workload). The `none` baseline
    /// (the loop with no lock) is always measured too: the limits and `lock_ns` are built on it.
    #[arg(long, value_name = "a,b,c", default_value = "all")]
    pub locks: String,
    /// Thread counts: a list (`1,2,4`) and/or ranges `start:end:step` (`1:8:1`), or `many`
    /// (1,2,4,8,16,32,64: the many-thread regime). Default: 1, 2, 2 x CPUs.
    #[arg(long, value_name = "LIST")]
    pub threads: Option<String>,
    /// Critical-section work, ns.
    #[arg(
        long,
        value_name = "N",
        default_value = "0",
        allow_hyphen_values = true
    )]
    pub cs_ns: String,
    /// Private work between operations, ns.
    #[arg(
        long,
        value_name = "N",
        default_value = "0",
        allow_hyphen_values = true
    )]
    pub think_ns: String,
    /// Percent of operations in shared mode (`rw` only; default 90).
    #[arg(long, value_name = "P", allow_hyphen_values = true)]
    pub read_pct: Option<String>,
    /// Updater threads (`rcu-update` only; default 1): threads 0..N update, the rest read.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub writers: Option<String>,
    /// Instances of the lock (`mutex` and `rw` only; default 1): each operation takes one, chosen
    /// pseudo-randomly (parking_lot #418's lock-bench: `--lock-count 2`).
    #[arg(long, value_name = "K", allow_hyphen_values = true)]
    pub lock_count: Option<String>,
    /// Queue capacity in messages (`condvar` only; default 1).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub slots: Option<String>,
    /// `one` or `all`: how a producer or consumer notifies the other side (`condvar` only; default
    /// one).
    #[arg(long, value_name = "one|all")]
    pub notify: Option<String>,
    /// Measurement window per repeat, ms.
    #[arg(
        long,
        value_name = "D",
        default_value = "500",
        allow_hyphen_values = true
    )]
    pub duration_ms: String,
    /// Repeats per row (interleaved across locks).
    #[arg(
        long,
        value_name = "R",
        default_value = "3",
        allow_hyphen_values = true
    )]
    pub repeats: String,
    /// Warm-up before each window, ms.
    #[arg(
        long,
        value_name = "MS",
        default_value = "50",
        allow_hyphen_values = true
    )]
    pub warmup_ms: String,
    /// Write JSON here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
    /// Write CSV here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub csv: Option<String>,
    /// Write Markdown here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub markdown: Option<String>,
    /// Do not pin threads to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// No progress bar and no table (exports still written).
    #[arg(long)]
    pub quiet: bool,
}

fn exporters(
    json: &Option<String>,
    csv: &Option<String>,
    md: &Option<String>,
) -> Result<Vec<Exporter>, UsageError> {
    let mut v = vec![];
    for (f, target) in [
        (Format::Json, json),
        (Format::Csv, csv),
        (Format::Markdown, md),
    ] {
        if let Some(t) = target {
            if t.is_empty() {
                return usage("an output file name is empty (use - for standard output)");
            }
            v.push(Exporter::new(f, t));
        }
    }
    if v.iter().filter(|e| e.path.is_none()).count() > 1 {
        return usage("only one of --json, --csv and --markdown can go to standard output (-)");
    }
    Ok(v)
}

/// Validates `bench` options against the registry.
pub fn plan_bench(a: &BenchArgs, cpus: usize) -> Result<Plan, UsageError> {
    let Some(workload) = Workload::parse(&a.workload) else {
        let valid: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
        return usage(format!(
            "--workload: unknown workload '{}' (valid: {})",
            a.workload,
            valid.join(", ")
        ));
    };
    let registry = locks::registry();
    let supporting: Vec<&str> = registry
        .iter()
        .filter(|l| l.supports(workload))
        .map(|l| l.name)
        .collect();
    let mut chosen = vec![];
    if a.locks.trim() == "all" {
        chosen = registry
            .iter()
            .filter(|l| l.supports(workload))
            .cloned()
            .collect();
    } else {
        for name in a.locks.split(',').map(str::trim) {
            let Some(l) = registry.iter().find(|l| l.name == name) else {
                let all: Vec<_> = registry.iter().map(|l| l.name).collect();
                return usage(format!(
                    "--locks: unknown lock '{name}' (valid: {})",
                    all.join(", ")
                ));
            };
            if let Some(u) = l.unavailable {
                return usage(format!("--locks: '{name}' is unavailable: {}", u.why));
            }
            if !l.supports(workload) {
                return usage(format!(
                    "--locks: '{name}' does not run the {workload} workload (locks that do: {})",
                    supporting.join(", ")
                ));
            }
            if !chosen.iter().any(|c: &LockInfo| c.name == name) {
                chosen.push(l.clone());
            }
        }
    }
    // Every run measures the `none` baseline first where it has one: the limits and `lock_ns` are
    // built on it (`condvar` has none: a queue without a lock is not a baseline of anything).
    if !chosen.iter().any(|c| c.name == locks::NONE) && locks::none().supports(workload) {
        chosen.insert(0, locks::none());
    }
    let threads = match &a.threads {
        Some(t) => thread_list(t)?,
        None => default_threads(cpus),
    };
    let read_pct = match (&a.read_pct, workload) {
        (Some(p), Workload::Rw) => number("read-pct", p, 0, 100)? as u32,
        (None, Workload::Rw) => 90,
        (Some(_), w) => return usage(format!("--read-pct applies only to --workload rw, not {w}")),
        (None, _) => 0,
    };
    let writers = match (&a.writers, workload) {
        (Some(n), Workload::RcuUpdate) => number("writers", n, 1, MAX_THREADS as u64)? as usize,
        (None, _) => 1,
        (Some(_), w) => {
            return usage(format!(
                "--writers applies only to --workload rcu-update, not {w}"
            ));
        }
    };
    let lock_count = match (&a.lock_count, workload) {
        (Some(n), Workload::Mutex | Workload::Rw) => {
            number("lock-count", n, 1, MAX_LOCKS)? as usize
        }
        (None, _) => 1,
        (Some(_), w) => {
            return usage(format!(
                "--lock-count applies only to --workload mutex or rw, not {w}"
            ));
        }
    };
    let slots = match (&a.slots, workload) {
        (Some(n), Workload::Condvar) => number("slots", n, 1, MAX_SLOTS)? as usize,
        (None, _) => 1,
        (Some(_), w) => {
            return usage(format!(
                "--slots applies only to --workload condvar, not {w}"
            ));
        }
    };
    let notify_all = match (a.notify.as_deref(), workload) {
        (None, _) => false,
        (Some(_), w) if w != Workload::Condvar => {
            return usage(format!(
                "--notify applies only to --workload condvar, not {w}"
            ));
        }
        (Some("one"), _) => false,
        (Some("all"), _) => true,
        (Some(n), _) => return usage(format!("--notify: '{n}' is not one of: one, all")),
    };
    Ok(Plan {
        workloads: vec![(workload, chosen)],
        threads,
        cs_ns: number("cs-ns", &a.cs_ns, 0, MAX_WORK_NS)?,
        think_ns: number("think-ns", &a.think_ns, 0, MAX_WORK_NS)?,
        read_pct,
        writers,
        condvar: CondvarSpec { slots, notify_all },
        duration_ms: number("duration-ms", &a.duration_ms, 1, MAX_DURATION_MS)?,
        warmup_ms: number("warmup-ms", &a.warmup_ms, 0, MAX_DURATION_MS)?,
        repeats: number("repeats", &a.repeats, 1, MAX_REPEATS as u64)? as usize,
        pin: !a.no_pin,
        quiet: a.quiet,
        exporters: exporters(&a.json, &a.csv, &a.markdown)?,
        summary: false,
        lock_count,
    })
}
