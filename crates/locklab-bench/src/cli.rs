//! The command line (lab.md), parsed and validated into a [`Plan`]. Every bad value gets one clear line
//! naming it and the valid choices, and exit status 2.

use crate::locks::{self, LockInfo};
use crate::output::{Exporter, Format};
pub use crate::plan::plan_default;
use crate::plan::{
    MAX_DURATION_MS, MAX_LOCKS, MAX_REPEATS, MAX_SLOTS, MAX_THREADS, MAX_WORK_NS, Plan, UsageError,
    default_threads, number, thread_list, usage,
};
use crate::runner::CondvarSpec;
use crate::torture::TorturePlan;
use crate::workload::Workload;
use clap::{Args, Parser, Subcommand};

/// locklab: the kernel's locks in userspace Rust, measured against every peer and the machine's limits.
#[derive(Parser, Debug)]
#[command(name = "locklab", version, about, long_about = None)]
pub struct Cli {
    /// What to do; with none, the default suite: every workload, every lock, 1, 2 and 2 x CPUs threads.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// With no command (the default job): print every table (each seed's, each workload's) before
    /// the one-screen summary.
    #[arg(long)]
    pub tables: bool,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Every lock and workload, one a line: name, kind (ours|peer), summary.
    List,
    /// Measure the machine's physical limits.
    Calibrate {
        /// Also write them as JSON to this file (`-`: standard output).
        #[arg(long, value_name = "F")]
        json: Option<String>,
        /// Also write this machine's description for `predict --machine F` (TOML) to this file.
        #[arg(long, value_name = "F")]
        describe: Option<String>,
    },
    /// The lab's table computed on a simulated machine (locklab's real lock code on a modelled
    /// memory system and scheduler), every row marked predicted. Machines: this (calibrated now),
    /// opteron-48 (4 sockets x 2 dies x 6 cores), opteron-8x6 (8 chips x 6 cores), opteron-2s8c
    /// (2 x 2 x 4), xeon-2s (2 x 10), or a
    /// description file (see `calibrate --describe`).
    Predict {
        /// this, opteron-48, opteron-8x6, opteron-2s8c, xeon-2s, or a description file. Default:
        /// opteron-48.
        #[arg(long, value_name = "M")]
        machine: Option<String>,
        /// mutex or rw. Default: mutex.
        #[arg(long, value_name = "W")]
        workload: Option<String>,
        /// Locks: tas, ticket, mcs, qspinlock, mutex, fair-mutex, rwspinlock, rwsem. Default:
        /// ticket, mcs, qspinlock, mutex, rwsem.
        #[arg(long, value_name = "LIST")]
        locks: Option<String>,
        /// Thread counts (list or start:end:step). Default: 1, 2, 4, ... up to the machine's cores.
        #[arg(long, value_name = "LIST")]
        threads: Option<String>,
        /// Critical section, ns (default 100).
        #[arg(long, value_name = "NS")]
        cs_ns: Option<String>,
        /// Private work between operations, ns (default 100).
        #[arg(long, value_name = "NS")]
        think_ns: Option<String>,
        /// `rw`: percent of operations that read (default 90).
        #[arg(long, value_name = "PCT")]
        read_pct: Option<String>,
        /// Virtual time per run, ms (default 20).
        #[arg(long, value_name = "MS")]
        duration_ms: Option<String>,
        /// The threads' start order (default 1); the same seed and inputs give the same figures.
        #[arg(long, value_name = "N")]
        seed: Option<String>,
        /// Compare the simulator with this machine: calibrate, then measure and predict ticket,
        /// mcs, qspinlock, mutex and rwsem at 1 and 2 threads (mutex and rw workloads).
        #[arg(long)]
        self_check: bool,
        /// Compare the simulator with published many-core measurements (Boyd-Wickizer et al. 2012,
        /// Figs 8-9: ticket-lock collapse on 48 cores), on opteron-8x6 unless --machine says
        /// otherwise; prints measured and predicted side by side and which targets are met.
        #[arg(long, conflicts_with = "self_check")]
        validate: bool,
        /// Also write the rows (and the machine description) as JSON here (`-`: standard output).
        #[arg(long, value_name = "F")]
        json: Option<String>,
    },
    /// Run one workload over chosen locks and thread counts.
    Bench(Box<BenchArgs>),
    /// locktorture for every primitive: invariants checked under stressors; exit 1 on any failure.
    Torture(TortureArgs),
    /// Compare two `--json` runs row by row: ratio of medians and a noise-aware verdict.
    Compare {
        /// The earlier run's JSON.
        #[arg(value_name = "OLD.json")]
        old: String,
        /// The later run's JSON.
        #[arg(value_name = "NEW.json")]
        new: String,
        /// Exit 1 if a row is slower (beyond noise) by more than this percent.
        #[arg(long, value_name = "PCT", allow_hyphen_values = true)]
        fail_if_slower: Option<String>,
    },
    /// A seed's experiment on this machine: the seed's table with its figures beside ours, and a
    /// verdict.
    Reproduce {
        /// 000, 001, 002, 003, 004 or all.
        #[arg(value_name = "SEED", default_value = "all")]
        seed: String,
        /// Short windows (about 10 s a seed).
        #[arg(long)]
        quick: bool,
        /// Predict instead of measuring: the seed's experiment on a simulated machine of the seed's
        /// own size (001: 4 threads on xeon-2s; 003: every core of xeon-2s and 4x as many threads;
        /// 004: 1-8 threads on the 2-socket 8-core opteron-2s8c), beside the seed's figures.
        #[arg(long)]
        predict: bool,
        /// Also write the reproductions and their lab rows as JSON here (`-`: standard output).
        #[arg(long, value_name = "F")]
        json: Option<String>,
    },
    /// Which lock wins where on this machine: the `rw` workload over a grid of threads x critical
    /// section (think time equal to it) x read share, every lock and peer; the map and rules of thumb.
    /// With `--from STAT.json`: the map's choice for each hot lock of a program, and the process-wide
    /// choice they add up to.
    Advise {
        /// A small, short grid (15-30 s): threads 1 and max(2, CPUs); cs 0,200; reads 0,90.
        #[arg(long)]
        quick: bool,
        /// A program's lock statistics (`locklab run --stat-out F.json`): per hot lock (wait share,
        /// hold time, contention, read share) the map's choice among the preload's locks.
        #[arg(long, value_name = "STAT.json")]
        from: Option<String>,
        /// With --from: the map to read (an `advise --json` file) instead of a quick grid of the
        /// preload's choices measured now (~10 s; ~40 s with rwlocks).
        #[arg(long, value_name = "ADVICE.json", requires = "from")]
        map: Option<String>,
        /// Thread counts (default 1,2,2xCPUs); with --from, the program's threads (default: the most
        /// that took locks at once, from the statistics).
        #[arg(long, value_name = "LIST")]
        threads: Option<String>,
        /// Critical sections, ns (default 0,200,1000).
        #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
        cs_ns: Option<String>,
        /// Read shares, % (default 0,50,90).
        #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
        read_pct: Option<String>,
        /// Also write the map, the rules and every row as JSON here (`-`: standard output only).
        #[arg(long, value_name = "F")]
        json: Option<String>,
    },
    /// Run an unmodified program on locklab's locks: `liblocklab_pthread.so` preloaded, the choices
    /// set, its exit status passed through.
    Run {
        /// The algorithm for pthread mutexes and C11 mtx: mutex, mcs, ticket, qspinlock, tas, glibc, glibc-adaptive (every normal mutex on glibc's adaptive kind).
        #[arg(long, value_name = "X")]
        mutex: Option<String>,
        /// The algorithm for pthread rwlocks: rwsem, rwspinlock, glibc.
        #[arg(long, value_name = "Y")]
        rwlock: Option<String>,
        /// The algorithm for pthread spinlocks: qspinlock, ticket, tas, glibc.
        #[arg(long, value_name = "Z")]
        spin: Option<String>,
        /// Count every lock the program takes (per lock and call site: acquisitions, contentions,
        /// wait and hold times) and print lock_stat-style tables when it ends.
        #[arg(long)]
        stat: bool,
        /// Also write the statistics of every process as JSON here (`-`: standard output); implies
        /// --stat.
        #[arg(long, value_name = "F.json")]
        stat_out: Option<String>,
        /// Check every lock order the program uses for potential deadlocks (lockdep): `report`
        /// (the default) prints each problem on stderr when first seen and goes on; `abort` stops
        /// the program at the first.
        #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "report", require_equals = true)]
        lockdep: Option<String>,
        /// Also write every lockdep report of every process as JSON here (`-`: standard output);
        /// implies --lockdep.
        #[arg(long, value_name = "F.json")]
        lockdep_out: Option<String>,
        /// The program and its arguments, after `--`.
        #[arg(
            value_name = "CMD",
            trailing_var_arg = true,
            required = true,
            allow_hyphen_values = true
        )]
        cmd: Vec<String>,
    },
    /// Would another lock make YOUR program faster? Runs CMD under glibc and each choice, repeats
    /// interleaved, every run verified against glibc's (exit status; with --same-output, stdout);
    /// median, spread, speed-up, verdict, top contended sites, the prediction from the program's lock
    /// statistics, and what to set.
    Try {
        /// Mutex choices (LOCKLAB_MUTEX values; glibc, meaning no preload, always runs first).
        /// Default: glibc-adaptive, mutex, mcs, qspinlock.
        #[arg(long, value_name = "LIST")]
        locks: Option<String>,
        /// Rwlock choices (LOCKLAB_RWLOCK values, each with glibc's mutexes). Default: rwsem,
        /// rwspinlock, run only if the program takes an rwlock; an empty list runs none.
        #[arg(long, value_name = "LIST")]
        rwlocks: Option<String>,
        /// Interleaved repeats (default 5; verdicts need 3).
        #[arg(long, value_name = "N", allow_hyphen_values = true)]
        repeats: Option<String>,
        /// Throughput from the program's output instead of the wall clock: a regular expression
        /// whose first group is the rate (its last match in stdout, else stderr), e.g.
        /// 'ops/s: ([0-9.]+)'.
        #[arg(long, value_name = "REGEX")]
        rate: Option<String>,
        /// Every run's standard output must be identical to glibc's first run's.
        #[arg(long)]
        same_output: bool,
        /// A shell command run before each run (e.g. `rm -f test.db`).
        #[arg(long, value_name = "CMD")]
        setup: Option<String>,
        /// How long one --setup may run, in seconds (1-3600, default 300); one that does not finish
        /// by then stops `try` with an error.
        #[arg(long, value_name = "S", allow_hyphen_values = true)]
        setup_timeout: Option<String>,
        /// Also write one row per choice as JSON here, in `apps`' schema (`-`: standard output).
        #[arg(long, value_name = "F")]
        json: Option<String>,
        /// The program and its arguments, after `--`.
        #[arg(
            value_name = "CMD",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        cmd: Vec<String>,
    },
    /// Real programs (Tokyo Cabinet, Kyoto Cabinet, memcached, sysbench, pigz) under glibc's locks and
    /// ours, repeats interleaved, every run verified; median, spread, ratio to glibc and a verdict.
    Apps {
        /// Short runs, threads = CPUs, one repeat (every app still verified under every lock).
        #[arg(long)]
        quick: bool,
        /// Apps: tokyo-hash, tokyo-btree, kyoto-order, kyoto-wicked, memcached, sysbench-threads, pigz
        /// (or the names in --spec files).
        #[arg(long, value_name = "LIST")]
        apps: Option<String>,
        /// Run the apps of these spec files (TOML, the shipped ones in crates/locklab-bench/apps/ are
        /// examples) instead of the built-in ones.
        #[arg(long, value_name = "FILE", num_args = 1..)]
        spec: Vec<String>,
        /// Lock choices (LOCKLAB_MUTEX values; glibc, meaning no preload, is always run first). Default:
        /// glibc, glibc-adaptive, mutex, mcs, qspinlock.
        #[arg(long, value_name = "LIST")]
        locks: Option<String>,
        /// Thread counts given to each program (default: CPUs and 2 x CPUs).
        #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
        threads: Option<String>,
        /// Interleaved repeats (default 5; --quick 1).
        #[arg(long, value_name = "N", allow_hyphen_values = true)]
        repeats: Option<String>,
        /// Also write the rows as JSON here (`-`: standard output).
        #[arg(long, value_name = "F")]
        json: Option<String>,
    },
    /// One self-contained HTML page (inline SVG plots) of runs the lab wrote as JSON. Without
    /// `--from`, runs the default job first and reports it.
    Report {
        /// A `--json` file of `bench`, `reproduce` or the default job; repeat for several runs.
        #[arg(long, value_name = "RUN.json")]
        from: Vec<String>,
        /// Where to write the page.
        #[arg(long, value_name = "F", default_value = "locklab-report.html")]
        out: String,
    },
}

/// `locklab torture` options.
#[derive(Args, Debug, Clone)]
pub struct TortureArgs {
    /// Comma-separated lock names, `all` (every primitive) or `busted` (the deliberately broken locks).
    #[arg(long, value_name = "a,b|all|busted", default_value = "all")]
    pub lock: String,
    /// Seconds per lock.
    #[arg(
        long,
        value_name = "S",
        default_value = "10",
        allow_hyphen_values = true
    )]
    pub duration: String,
    /// Worker threads per lock (default: 4 x CPUs, so the machine is oversubscribed).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub threads: Option<String>,
    /// Write the results as JSON here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
}

/// Longest torture per lock, seconds.
pub const MAX_TORTURE_S: u64 = 3600;

/// Validates `torture` options.
pub fn plan_torture(a: &TortureArgs, cpus: usize) -> Result<TorturePlan, UsageError> {
    let locks = crate::torture::lock_names(&a.lock).map_err(UsageError)?;
    let threads = match &a.threads {
        Some(t) => number("threads", t, 2, MAX_THREADS as u64)? as usize,
        None => 4 * cpus.max(1),
    };
    if matches!(&a.json, Some(f) if f.is_empty()) {
        return usage("--json: the file name is empty (use - for standard output)");
    }
    Ok(TorturePlan {
        locks,
        settings: crate::torture::Settings {
            duration: std::time::Duration::from_secs(number(
                "duration",
                &a.duration,
                1,
                MAX_TORTURE_S,
            )?),
            threads,
        },
        json: a.json.clone(),
    })
}

/// `locklab bench` options.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// mutex, rw or refcount.
    #[arg(long, value_name = "W")]
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
