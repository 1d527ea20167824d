//! Runs a [`Plan`]: calibrates, runs the trials (repeats interleaved across locks), summarises rows,
//! writes exports after every row, prints the tables and the "who wins where" summary.

use crate::engine::calibrated_work::WorkCalibration;
use crate::engine::limits as calibrate;
use crate::engine::metrics::{RowSpec, fill_limits, fill_peak, fill_scaling, summarize};
use crate::engine::output::{Report, table};
use crate::engine::plan::Plan;
use crate::engine::runner::{Clock, TrialSpec, allowed_cpus};
use crate::locks::Kind;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};

/// Where the table goes: stdout, or stderr when an export claims stdout.
fn table_out(plan: &Plan) -> Box<dyn Write> {
    if plan.exporters.iter().any(|e| e.path.is_none()) {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    }
}

/// Runs the plan and returns the report.
pub fn run(plan: &Plan, clock: &dyn Clock) -> anyhow::Result<Report> {
    run_to(plan, clock, &mut table_out(plan))
}

/// The machine and its limits, two lines: `locklab V on CPU (N logical CPUs, kernel K)` and the
/// calibrated `limits:` line.
pub fn header(report: &Report) -> String {
    let c = &report.calibration;
    format!(
        "locklab {} on {} ({} logical CPUs, kernel {})\nlimits: atomic RMW {:.1} ns, CAS {:.1} ns, line transfer {:.0} ns{}, futex wake {:.0} ns",
        report.locklab_version,
        report.machine.cpu_model,
        report.machine.logical_cpus,
        report.machine.kernel,
        c.atomic_rmw_ns,
        c.cas_ns,
        c.line_transfer_ns,
        if c.line_transfer_pinned || report.machine.logical_cpus < 2 {
            ""
        } else {
            " (threads NOT pinned apart)"
        },
        c.futex_wake_ns
    )
}

/// [`run`], its machine header, tables and summary written to `out` (the progress bar, on a terminal,
/// still goes to stderr).
pub fn run_to(plan: &Plan, clock: &dyn Clock, out: &mut dyn Write) -> anyhow::Result<Report> {
    let cpus = allowed_cpus();
    let work = WorkCalibration::measure();
    let mut report = Report {
        locklab_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: calibrate::machine(),
        calibration: calibrate::calibrate(),
        results: vec![],
    };
    if !plan.quiet {
        writeln!(out, "{}\n", header(&report))?;
    }
    let total: usize = plan.workloads.iter().map(|(_, l)| l.len()).sum::<usize>()
        * plan.threads.len()
        * plan.repeats;
    let bar = progress_bar(plan, total);
    // The default job (with the summary) prints the answer first and the tables after it; `bench` prints
    // each workload's table as soon as it is measured.
    let mut tables = String::new();
    for (workload, locks) in &plan.workloads {
        let first_row = report.results.len();
        for &threads in &plan.threads {
            let spec = TrialSpec {
                threads,
                cs_loops: work.loops_for(plan.cs_ns),
                think_loops: work.loops_for(plan.think_ns),
                read_pct: if *workload == crate::engine::workload::Workload::Rw {
                    plan.read_pct
                } else {
                    0
                },
                // More updaters than threads: every thread updates.
                writers: plan.writers.min(threads),
                condvar: plan.condvar,
                warmup_ns: plan.warmup_ms * 1_000_000,
                duration_ns: plan.duration_ms * 1_000_000,
                cpus: if plan.pin { cpus.clone() } else { vec![] },
                lock_count: plan.lock_count,
            };
            let mut trials = vec![vec![]; locks.len()];
            for _ in 0..plan.repeats {
                for (i, lock) in locks.iter().enumerate() {
                    bar.set_message(format!("{workload} {} x{threads}", lock.name));
                    let run = lock
                        .runner(*workload)
                        .expect("the plan only holds locks that run the workload");
                    trials[i].push(run(&spec, clock));
                    bar.inc(1);
                }
            }
            for (lock, trials) in locks.iter().zip(&trials) {
                let rs = RowSpec {
                    workload: *workload,
                    lock: lock.name.to_string(),
                    threads,
                    cs_ns: plan.cs_ns,
                    think_ns: plan.think_ns,
                    read_pct: plan.read_pct,
                    writers: spec.writers,
                    condvar: plan.condvar,
                    duration_ms: plan.duration_ms,
                    cpus: cpus.len(),
                    lock_count: plan.lock_count,
                };
                report
                    .results
                    .push(summarize(&rs, trials, &report.calibration));
                fill_scaling(&mut report.results, cpus.len().max(1));
                fill_peak(&mut report.results);
                fill_limits(&mut report.results);
                for e in &plan.exporters {
                    e.checkpoint(&report)?;
                }
            }
        }
        if !plan.quiet {
            let rows: Vec<_> = report.results[first_row..].iter().collect();
            let mut block = table::render_block(&report, &rows);
            if plan.summary {
                // The default job runs every lock: say which ones this build cannot run.
                if let Some(note) = unavailable_note(*workload) {
                    block += &note;
                }
                tables += &block;
                tables.push('\n');
            } else {
                bar.suspend(|| -> anyhow::Result<()> {
                    writeln!(out, "{block}")?;
                    Ok(())
                })?;
            }
        }
    }
    bar.finish_and_clear();
    if plan.summary && !plan.quiet {
        write!(out, "{}\n{tables}", summary(&report))?;
    }
    if let (false, Some(w)) = (plan.quiet, busy_warning(&report)) {
        // On stderr (stdout may hold an export). With --quiet the exports still carry `noise.busy`.
        let _ = writeln!(std::io::stderr(), "{w}");
    }
    for e in &plan.exporters {
        e.finish(&report)?;
    }
    Ok(report)
}

/// The progress bar (on a terminal, unless `--quiet`).
fn progress_bar(plan: &Plan, total: usize) -> ProgressBar {
    if !plan.quiet && std::io::stderr().is_terminal() {
        let b = ProgressBar::new(total as u64);
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} trials, {eta} left  {msg}")
                .expect("a valid template"),
        );
        b
    } else {
        ProgressBar::hidden()
    }
}

/// The locks of `workload` this build cannot run, and why: one line, or `None`.
fn unavailable_note(workload: crate::engine::workload::Workload) -> Option<String> {
    let missing: Vec<_> = crate::locks::registry()
        .into_iter()
        .filter_map(|l| l.unavailable.map(|u| (l.name, u)))
        .filter(|(_, u)| u.workloads.contains(&workload))
        .collect();
    let (_, u) = missing.first()?;
    let names: Vec<_> = missing.iter().map(|(n, _)| *n).collect();
    Some(format!(
        "unavailable here: {} ({})\n",
        names.join(", "),
        u.why
    ))
}

/// One line when rows were measured on a busy machine (lab.md's `noise.busy`), else `None`.
pub fn busy_warning(report: &Report) -> Option<String> {
    let busy: Vec<_> = report.results.iter().filter(|r| r.noise.busy).collect();
    let worst = busy
        .iter()
        .map(|r| r.noise.others_cpu_pct.max(r.noise.steal_pct))
        .fold(0.0, f64::max);
    (!busy.is_empty()).then(|| {
        format!(
            "locklab: warning: {} of {} rows were measured on a busy machine (other processes or steal \
             took up to {worst:.0}% of the CPUs; marked busy); their figures are not trustworthy",
            busy.len(),
            report.results.len()
        )
    })
}

/// One cell of "who wins where": at one thread count of one workload, our best lock against the best
/// peer (median ops/s).
#[derive(Clone, Debug, PartialEq)]
pub struct Win {
    /// The thread count.
    pub threads: usize,
    /// `true` when our lock won.
    pub ours: bool,
    /// The winning lock.
    pub winner: String,
    /// The other side's best lock.
    pub loser: String,
    /// Winner's median / loser's median (at least 1).
    pub ratio: f64,
    /// Either row was measured on a busy machine.
    pub busy: bool,
}

/// "Who wins where" as data: per workload (in the order the rows ran), a [`Win`] per thread count
/// where both one of ours and a peer ran. Baselines (`none`, `atomic-count`) never win. Workloads
/// without such a thread count are left out.
pub fn wins(report: &Report) -> Vec<(String, Vec<Win>)> {
    let mut workloads: Vec<&str> = vec![];
    for r in &report.results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let mut out = vec![];
    for w in workloads {
        let mut threads: Vec<usize> = report
            .results
            .iter()
            .filter(|r| r.workload == w)
            .map(|r| r.threads)
            .collect();
        threads.sort_unstable();
        threads.dedup();
        let mut cells = vec![];
        for t in threads {
            let rows = report
                .results
                .iter()
                .filter(|r| r.workload == w && r.threads == t);
            let best = |kind: Kind| {
                rows.clone()
                    .filter(|r| crate::locks::find(&r.lock).is_some_and(|l| l.kind == kind))
                    .max_by(|a, b| a.ops_per_sec.median.total_cmp(&b.ops_per_sec.median))
            };
            if let (Some(o), Some(p)) = (best(Kind::Ours), best(Kind::Peer)) {
                let ours = o.ops_per_sec.median >= p.ops_per_sec.median;
                let (win, lose) = if ours { (o, p) } else { (p, o) };
                cells.push(Win {
                    threads: t,
                    ours,
                    winner: win.lock.clone(),
                    loser: lose.lock.clone(),
                    ratio: win.ops_per_sec.median / lose.ops_per_sec.median.max(1e-9),
                    busy: win.noise.busy || lose.noise.busy,
                });
            }
        }
        if !cells.is_empty() {
            out.push((w.to_string(), cells));
        }
    }
    out
}

/// "Who wins where", one line per workload: at each thread count, the winner between our best lock and
/// the best peer (median ops/s), and by how much (winner / loser). Baselines (`none`, `atomic-count`)
/// are in the tables but never win here; the harness's own floor (`none`) is named once.
pub fn summary(report: &Report) -> String {
    let mut s = String::from(
        "who wins where: at each thread count, our best lock vs the best peer (median ops/s; xR = winner / loser)\n",
    );
    for (w, cells) in wins(report) {
        let cells: Vec<String> = cells
            .iter()
            .map(|c| {
                format!(
                    "{} thr: {} {} x{:.2} over {}{}",
                    c.threads,
                    if c.ours { "ours" } else { "peer" },
                    c.winner,
                    c.ratio,
                    c.loser,
                    if c.busy { " (busy)" } else { "" }
                )
            })
            .collect();
        s += &format!("  {w:<11}{}\n", cells.join("  |  "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::metrics::ResultRow;

    fn row(lock: &str, ops: f64) -> ResultRow {
        let mut r = ResultRow {
            workload: "refcount".into(),
            lock: lock.into(),
            threads: 2,
            ..Default::default()
        };
        r.ops_per_sec.median = ops;
        r
    }

    /// `atomic-count` (no lock) is shown but never wins the summary.
    #[test]
    fn baselines_never_win_the_summary() {
        let rep = Report {
            results: vec![
                row("atomic-count", 90e6),
                row("lockref", 30e6),
                row("std-mutex-count", 20e6),
            ],
            ..Default::default()
        };
        let s = summary(&rep);
        let line = s
            .lines()
            .find(|l| l.contains("refcount"))
            .expect("a refcount line");
        assert!(
            line.contains("2 thr: ours lockref x1.50 over std-mutex-count"),
            "{line}"
        );
        assert!(!line.contains("atomic-count"), "{line}");
    }

    /// One line per workload, a cell per thread count naming the winner and by how
    /// much, whichever side wins.
    #[test]
    fn one_line_per_workload_names_each_winner() {
        let mut rows = vec![];
        for (lock, t, ops) in [
            ("ticket", 1, 200e6),
            ("spin-ticket", 1, 100e6),
            ("ticket", 2, 10e6),
            ("parking-lot-mutex", 2, 40e6),
        ] {
            let mut r = row(lock, ops);
            r.workload = "mutex".into();
            r.threads = t;
            rows.push(r);
        }
        let s = summary(&Report {
            results: rows,
            ..Default::default()
        });
        let lines: Vec<&str> = s.lines().filter(|l| l.contains("mutex")).collect();
        assert_eq!(lines.len(), 1, "{s}");
        assert!(
            lines[0].contains("1 thr: ours ticket x2.00 over spin-ticket")
                && lines[0].contains("2 thr: peer parking-lot-mutex x4.00 over ticket"),
            "{s}"
        );
    }
}
