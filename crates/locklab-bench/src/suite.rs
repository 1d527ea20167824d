//! Runs a [`Plan`]: calibrates, runs the trials (repeats interleaved across locks), summarises rows,
//! writes exports after every row, prints the tables and the "who wins where" summary.

use crate::calibrate;
use crate::cli::Plan;
use crate::locks::Kind;
use crate::metrics::{RowSpec, fill_scaling, summarize};
use crate::report::{Report, table};
use crate::runner::{Clock, TrialSpec, allowed_cpus};
use crate::work::WorkCalibration;
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
    let cpus = allowed_cpus();
    let work = WorkCalibration::measure();
    let mut report = Report {
        locklab_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: calibrate::machine(),
        calibration: calibrate::calibrate(),
        results: vec![],
    };
    let mut out = table_out(plan);
    if !plan.quiet {
        let c = &report.calibration;
        writeln!(
            out,
            "locklab {} on {} ({} logical CPUs): atomic RMW {:.1} ns, CAS {:.1} ns, line transfer {:.0} ns, futex wake {:.0} ns\n",
            report.locklab_version,
            report.machine.cpu_model,
            report.machine.logical_cpus,
            c.atomic_rmw_ns,
            c.cas_ns,
            c.line_transfer_ns,
            c.futex_wake_ns
        )?;
    }
    let total: usize = plan.workloads.iter().map(|(_, l)| l.len()).sum::<usize>()
        * plan.threads.len()
        * plan.repeats;
    let bar = if !plan.quiet && std::io::stderr().is_terminal() {
        let b = ProgressBar::new(total as u64);
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} trials, {eta} left  {msg}")
                .expect("a valid template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    for (workload, locks) in &plan.workloads {
        let first_row = report.results.len();
        for &threads in &plan.threads {
            let spec = TrialSpec {
                threads,
                cs_loops: work.loops_for(plan.cs_ns),
                think_loops: work.loops_for(plan.think_ns),
                read_pct: if *workload == crate::workload::Workload::Rw {
                    plan.read_pct
                } else {
                    0
                },
                warmup_ns: plan.warmup_ms * 1_000_000,
                duration_ns: plan.duration_ms * 1_000_000,
                cpus: if plan.pin { cpus.clone() } else { vec![] },
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
                    duration_ms: plan.duration_ms,
                    cpus: cpus.len(),
                };
                report
                    .results
                    .push(summarize(&rs, trials, &report.calibration));
                fill_scaling(&mut report.results);
                for e in &plan.exporters {
                    e.checkpoint(&report)?;
                }
            }
        }
        if !plan.quiet {
            let rows: Vec<_> = report.results[first_row..].iter().collect();
            bar.suspend(|| -> anyhow::Result<()> {
                writeln!(out, "{}", table::render_block(&report, &rows))?;
                Ok(())
            })?;
        }
    }
    bar.finish_and_clear();
    if let (false, Some(w)) = (plan.quiet, busy_warning(&report)) {
        // On stderr (stdout may hold an export). With --quiet the exports still carry `noise.busy`.
        eprintln!("{w}");
    }
    if plan.summary && !plan.quiet {
        write!(out, "{}", summary(&report))?;
    }
    for e in &plan.exporters {
        e.finish(&report)?;
    }
    Ok(report)
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

/// "Who wins where": per workload and thread count, our best lock against the best peer. Baselines
/// (`atomic-count`: no lock at all) are in the tables but never win here.
pub fn summary(report: &Report) -> String {
    let mut s = String::from("who wins where (median ops/s; ratio = our best / best peer)\n");
    let mut keys: Vec<(String, usize)> = vec![];
    for r in &report.results {
        let k = (r.workload.clone(), r.threads);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (w, t) in keys {
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
            let ratio = o.ops_per_sec.median / p.ops_per_sec.median.max(1e-9);
            let verdict = if ratio >= 1.0 { "ours" } else { "peer" };
            s += &format!(
                "  {w:<9}{t:>3} threads: {verdict:<5} {:<15}{:>14} vs {:<24}{:>14}  x{ratio:.2}\n",
                o.lock,
                table::group(o.ops_per_sec.median),
                p.lock,
                table::group(p.ops_per_sec.median)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ResultRow;

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

    /// Issue 9 item 6: `atomic-count` (no lock) is shown but never wins the summary.
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
        assert!(line.contains("ours") && line.contains("lockref"), "{line}");
        assert!(!line.contains("atomic-count"), "{line}");
        assert!(line.contains("x1.50"), "{line}");
    }
}
