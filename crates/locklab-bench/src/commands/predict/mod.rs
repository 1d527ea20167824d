//! `locklab predict`: the lab's table computed on a simulated machine ([`crate::engine::sim`]),
//! `--self-check` against this machine and `--validate` against published measurements
//! ([`validation`]).

use crate::engine::limits as calibrate;
use crate::engine::metrics::Spread;
use crate::engine::plan::{UsageError, number, number_list, usage};
use crate::engine::sim::Machine;
use crate::engine::sim::{
    DEFAULT_LOCKS, LOCKS, MAX_VIRTUAL_MS, PredictPlan, PredictReport, check_budget,
    default_threads, describe_this, machine, predict, render,
};
use clap::Args;
use serde::{Deserialize, Serialize};

pub mod validation;

/// `locklab predict` options (each `None`: its default).
#[derive(Args, Debug, Clone, Default)]
pub struct PredictArgs {
    /// this, opteron-48, opteron-8x6, opteron-2s8c, xeon-2s, or a description file. Default:
    /// opteron-48.
    #[arg(long, value_name = "M")]
    pub machine: Option<String>,
    /// mutex or rw. Default: mutex.
    #[arg(long, value_name = "W")]
    pub workload: Option<String>,
    /// Locks: tas, ticket, mcs, qspinlock, mutex, fair-mutex, rwspinlock, rwsem. Default:
    /// ticket, mcs, qspinlock, mutex, rwsem.
    #[arg(long, value_name = "LIST")]
    pub locks: Option<String>,
    /// Thread counts (list or start:end:step). Default: 1, 2, 4, ... up to the machine's cores.
    #[arg(long, value_name = "LIST")]
    pub threads: Option<String>,
    /// Critical section, ns (default 100).
    #[arg(long, value_name = "NS")]
    pub cs_ns: Option<String>,
    /// Private work between operations, ns (default 100).
    #[arg(long, value_name = "NS")]
    pub think_ns: Option<String>,
    /// `rw`: percent of operations that read (default 90).
    #[arg(long, value_name = "PCT")]
    pub read_pct: Option<String>,
    /// Virtual time per run, ms (default 20).
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<String>,
    /// The threads' start order (default 1); the same seed and inputs give the same figures.
    #[arg(long, value_name = "N")]
    pub seed: Option<String>,
    /// Compare the simulator with this machine: calibrate, then measure and predict ticket,
    /// mcs, qspinlock, mutex and rwsem at 1 and 2 threads (mutex and rw workloads).
    #[arg(long)]
    pub self_check: bool,
    /// Compare the simulator with published many-core measurements (Boyd-Wickizer et al. 2012,
    /// Figs 8-9: ticket-lock collapse on 48 cores), on opteron-8x6 unless --machine says
    /// otherwise; prints measured and predicted side by side and which targets are met.
    #[arg(long, conflicts_with = "self_check")]
    pub validate: bool,
    /// Also write the rows (and the machine description) as JSON here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
}

/// Runs `predict`: the self-check, the validation, or the table of a plan.
pub fn command(a: &PredictArgs) -> anyhow::Result<()> {
    if a.self_check {
        self_check(a.json.as_deref())
    } else if a.validate {
        let given = [
            ("--workload", a.workload.is_some()),
            ("--locks", a.locks.is_some()),
            ("--threads", a.threads.is_some()),
            ("--cs-ns", a.cs_ns.is_some()),
            ("--think-ns", a.think_ns.is_some()),
            ("--read-pct", a.read_pct.is_some()),
            ("--duration-ms", a.duration_ms.is_some()),
            ("--seed", a.seed.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            return Err(UsageError(format!(
                "{flag}: --validate runs the published workloads (only --machine and --json apply)"
            ))
            .into());
        }
        validation::command(a.machine.as_deref(), a.json.as_deref())
    } else {
        predict_command(&PredictPlan::try_from(a)?)
    }
}

impl TryFrom<&PredictArgs> for PredictPlan {
    type Error = UsageError;

    /// Validates the flags (one line, exit 2, for each mistake).
    fn try_from(a: &PredictArgs) -> Result<PredictPlan, UsageError> {
        let (workload, locks, threads) = (
            a.workload.as_deref(),
            a.locks.as_deref(),
            a.threads.as_deref(),
        );
        let (cs_ns, think_ns, read_pct) = (
            a.cs_ns.as_deref(),
            a.think_ns.as_deref(),
            a.read_pct.as_deref(),
        );
        let (duration_ms, seed) = (a.duration_ms.as_deref(), a.seed.as_deref());
        let (machine, json) = (a.machine.clone(), a.json.clone());
        let machine = machine.unwrap_or_else(|| "opteron-48".into());
        let workload = workload.unwrap_or("mutex").to_string();
        if !matches!(workload.as_str(), "mutex" | "rw") {
            return usage(format!(
                "--workload: '{workload}' cannot be predicted (mutex, rw)"
            ));
        }
        let locks: Vec<String> = locks
            .unwrap_or(DEFAULT_LOCKS)
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        for l in &locks {
            if !LOCKS.contains(&l.as_str()) {
                return usage(format!(
                    "--locks: '{l}' is not simulated (choices: {})",
                    LOCKS.join(", ")
                ));
            }
        }
        let threads: Vec<usize> = match threads {
            Some(t) => number_list("threads", t, 1, 512)?
                .into_iter()
                .map(|n| n as usize)
                .collect(),
            None => Vec::new(), // filled from the machine: 1, 2, 4, ... cores
        };
        let cs_ns = number("cs-ns", cs_ns.unwrap_or("100"), 0, 10_000_000)?;
        let think_ns = number("think-ns", think_ns.unwrap_or("100"), 0, 10_000_000)?;
        let read_pct = number("read-pct", read_pct.unwrap_or("90"), 0, 100)? as u32;
        let duration_ms = number(
            "duration-ms",
            duration_ms.unwrap_or("20"),
            1,
            MAX_VIRTUAL_MS,
        )?;
        let seed = number("seed", seed.unwrap_or("1"), 0, u64::MAX / 2)?;
        Ok(PredictPlan {
            machine,
            workload,
            locks,
            threads,
            cs_ns,
            think_ns,
            read_pct,
            duration_ms,
            seed,
            json,
        })
    }
}

/// Writes `text` to `--json`'s target (`-`: standard output).
fn write_json(target: &str, text: &str) -> anyhow::Result<()> {
    if target == "-" {
        println!("{text}");
        Ok(())
    } else {
        std::fs::write(target, format!("{text}\n"))
            .map_err(|e| anyhow::anyhow!("cannot write {target}: {e}"))
    }
}

/// `locklab predict` on a plan: the table, and the JSON.
pub fn predict_command(plan: &PredictPlan) -> anyhow::Result<()> {
    let m = machine(&plan.machine)?;
    let most = plan
        .threads
        .iter()
        .copied()
        .max()
        .unwrap_or_else(|| default_threads(m.cores()).into_iter().max().unwrap_or(1));
    check_budget(plan.duration_ms, most)?;
    let stdout_json = plan.json.as_deref() == Some("-");
    let (rows, cost) = predict(&m, plan, false)?;
    let text = render(&m, &rows);
    if stdout_json {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    let note = format!(
        "simulator: {} events, {} host switches, {:.1} host s",
        cost.events, cost.host_switches, cost.host_s
    );
    if stdout_json {
        eprintln!("{note}");
    } else {
        println!("{note}");
    }
    if let Some(target) = &plan.json {
        let report = PredictReport {
            locklab_version: env!("CARGO_PKG_VERSION").into(),
            predicted: true,
            machine: m,
            host: calibrate::machine(),
            simulator: cost,
            results: rows,
        };
        write_json(target, &serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// The self-check's locks.
pub const CHECK_LOCKS: [&str; 5] = ["ticket", "mcs", "qspinlock", "mutex", "rwsem"];

/// One cell of the self-check: a lock at a thread count, measured and predicted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckRow {
    /// Workload.
    pub workload: String,
    /// Lock.
    pub lock: String,
    /// Threads.
    pub threads: usize,
    /// Measured ops/s: median, min, max of the repeats.
    pub measured: Spread,
    /// Predicted ops/s.
    pub predicted: f64,
    /// predicted / measured median.
    pub ratio: f64,
    /// Within 25% of the measured median.
    pub within_25pct: bool,
}

/// Whether the prediction orders the locks of one (workload, threads) cell as the measurement does:
/// every pair whose measured ranges (min..max) do not overlap must be in the same order. Returns the
/// pairs checked and those in the wrong order.
pub fn ranking(cell: &[&CheckRow]) -> (usize, Vec<(String, String)>) {
    let mut checked = 0;
    let mut wrong = vec![];
    for (i, a) in cell.iter().enumerate() {
        for b in &cell[i + 1..] {
            let (lo, hi) = if a.measured.median < b.measured.median {
                (a, b)
            } else {
                (b, a)
            };
            if lo.measured.max >= hi.measured.min {
                continue; // within each other's spread: no order to keep
            }
            checked += 1;
            if lo.predicted >= hi.predicted {
                wrong.push((lo.lock.clone(), hi.lock.clone()));
            }
        }
    }
    (checked, wrong)
}

/// `predict --self-check`: this machine calibrated, then the check locks measured (5 repeats of
/// 200 ms, each after a line-transfer probe) and predicted (20 ms virtual, the probes' median as the
/// transfer) at 1 and 2 threads under `mutex` and `rw` (90% reads), cs and think 100 ns (given to the
/// simulator as long as the `none` row says they took here); each cell's ratio and the rankings.
pub fn self_check(json: Option<&str>) -> anyhow::Result<()> {
    use crate::engine::workload::Workload;
    let m = describe_this();
    let say = |s: String| {
        if json == Some("-") {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    };
    say(format!(
        "self-check on {}\n  calibrated: rmw {:.1} ns, line transfer {:.0} ns, pause {:.1} ns, wake-up {:.0} ns, context switch {:.0} ns",
        m.what, m.rmw_ns, m.line_node_ns, m.pause_ns, m.wakeup_ns, m.ctx_switch_ns
    ));
    let mut rows = vec![];
    for (workload, read_pct) in [(Workload::Mutex, 0u32), (Workload::Rw, 90)] {
        rows.extend(check_workload(&m, workload, read_pct, &say)?);
    }
    let (table, within) = check_table(&rows);
    let (rankings, cells_same, cells) = check_rankings(&rows);
    say(table + &rankings);
    if let Some(target) = json {
        #[derive(Serialize)]
        struct CheckReport<'a> {
            locklab_version: &'a str,
            machine: &'a Machine,
            host: crate::engine::metrics::Machine,
            cells: &'a [CheckRow],
            within_25pct: usize,
            rankings_same: usize,
            ranking_cells: usize,
        }
        let r = CheckReport {
            locklab_version: env!("CARGO_PKG_VERSION"),
            machine: &m,
            host: calibrate::machine(),
            cells: &rows,
            within_25pct: within,
            rankings_same: cells_same,
            ranking_cells: cells,
        };
        write_json(target, &serde_json::to_string_pretty(&r)?)?;
    }
    Ok(())
}

/// The thread counts `predict --self-check` measures and predicts.
const CHECK_THREADS: [usize; 2] = [1, 2];

/// One workload of the self-check: the check locks measured here and predicted on `m`, a row per
/// (lock, threads) cell; `say` prints how long the work took here.
fn check_workload(
    m: &Machine,
    workload: crate::engine::workload::Workload,
    read_pct: u32,
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<CheckRow>> {
    use crate::engine::plan::Plan;
    let threads = CHECK_THREADS.to_vec();
    // The `none` row (the loop without a lock) is measured too: what the calibrated work really took
    // here, which the prediction is given (`docs/design/predict.md`: the simulator
    // charges work as given; this machine's work loop runs faster or slower than its calibration
    // inside the lab's loop).
    let chosen: Vec<_> = crate::locks::registry()
        .into_iter()
        .filter(|l| CHECK_LOCKS.contains(&l.name) || l.name == crate::engine::workload::NONE)
        .collect();
    // The repeats are run one at a time, each after a line-transfer probe, and the prediction uses
    // the median of those probes: on a VM the transfer has modes (the hypervisor moves the virtual
    // CPUs) that last seconds, and a figure probed once, before, is not what the measurement saw.
    let plan = Plan {
        workloads: vec![(workload, chosen)],
        threads: threads.clone(),
        cs_ns: 100,
        think_ns: 100,
        read_pct,
        writers: 1,
        condvar: crate::engine::runner::CondvarSpec::default(),
        duration_ms: 200,
        warmup_ms: 30,
        repeats: 1,
        pin: true,
        quiet: true,
        exporters: vec![],
        summary: false,
        lock_count: 1,
    };
    let mut probes = vec![];
    let mut samples: Vec<(String, usize, Vec<f64>)> = vec![];
    let mut none_ns = vec![];
    for _ in 0..CHECK_REPEATS {
        let probe = calibrate::line_transfer().best_ns;
        if probe > 0.0 {
            probes.push(probe);
        }
        let run = crate::engine::suite::run(&plan, &crate::engine::runner::SystemClock::default())?;
        for r in &run.results {
            if r.lock == crate::engine::workload::NONE {
                if r.threads == 1 {
                    none_ns.push(r.ns_per_op);
                }
                continue;
            }
            match samples
                .iter_mut()
                .find(|(l, t, _)| *l == r.lock && *t == r.threads)
            {
                Some((_, _, v)) => v.push(r.ops_per_sec.median),
                None => samples.push((r.lock.clone(), r.threads, vec![r.ops_per_sec.median])),
            }
        }
    }
    let mut m = m.clone();
    let probed = spread_of(&probes);
    if let Some(t) = &probed {
        m.line_node_ns = t.median;
        m.line_socket_ns = t.median;
        m.line_remote_ns = t.median;
        m.line_farthest_ns = t.median;
    }
    let scale = spread_of(&none_ns).map_or(1.0, |ns| (ns.median / 200.0).clamp(0.25, 4.0));
    say(format!(
        "  {}: line transfer {:.0} ns (median of {} probes between the repeats, {:.0}-{:.0}); 100 ns of cs and 100 of think took {:.0} ns together here (the none row): predicted with {:.0} and {:.0}",
        workload.name(),
        m.line_node_ns,
        probes.len(),
        probed.as_ref().map_or(0.0, |p| p.min),
        probed.as_ref().map_or(0.0, |p| p.max),
        200.0 * scale,
        100.0 * scale,
        100.0 * scale
    ));
    let pplan = PredictPlan {
        machine: "this".into(),
        workload: workload.name().into(),
        locks: CHECK_LOCKS.map(String::from).to_vec(),
        threads,
        cs_ns: (100.0 * scale).round() as u64,
        think_ns: (100.0 * scale).round() as u64,
        read_pct,
        duration_ms: 20,
        seed: 1,
        json: None,
    };
    let (predicted, _) = predict(&m, &pplan, true)?;
    let mut rows = vec![];
    for p in &predicted {
        let Some(measured) = samples
            .iter()
            .find(|(l, t, _)| *l == p.lock && *t == p.threads)
            .and_then(|(_, _, ops)| spread_of(ops))
        else {
            continue;
        };
        let ratio = p.ops_per_sec.median / measured.median;
        rows.push(CheckRow {
            workload: workload.name().into(),
            lock: p.lock.clone(),
            threads: p.threads,
            measured,
            predicted: p.ops_per_sec.median,
            ratio,
            within_25pct: (0.75..=1.25).contains(&ratio),
        });
    }
    Ok(rows)
}

/// Repeats of each self-check cell, each after its own line-transfer probe.
const CHECK_REPEATS: usize = 5;

/// The median (the lab's: [`crate::engine::verdict::median`]), lowest and highest of `v`; `None`
/// when empty.
fn spread_of(v: &[f64]) -> Option<Spread> {
    (!v.is_empty()).then(|| Spread {
        median: crate::engine::verdict::median(v),
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// The self-check's table of cells and how many are within 25% of the measured median.
fn check_table(rows: &[CheckRow]) -> (String, usize) {
    let mut text = format!(
        "{:<8}{:<12}{:>8}{:>16}{:>16}{:>8}\n",
        "workload", "lock", "threads", "measured ops/s", "predicted ops/s", "ratio"
    );
    for r in rows {
        text += &format!(
            "{:<8}{:<12}{:>8}{:>16}{:>16}{:>8.2}{}\n",
            r.workload,
            r.lock,
            r.threads,
            crate::engine::output::table::group(r.measured.median),
            crate::engine::output::table::group(r.predicted),
            r.ratio,
            if r.within_25pct { "" } else { "  beyond 25%" }
        );
    }
    let within = rows.iter().filter(|r| r.within_25pct).count();
    text += &format!(
        "within 25% of the measured median: {within} of {} cells\n",
        rows.len()
    );
    (text, within)
}

/// The self-check's rankings, one line per (workload, threads) cell, and in how many of how many
/// cells the prediction keeps the measured order.
fn check_rankings(rows: &[CheckRow]) -> (String, usize, usize) {
    let mut text = String::new();
    let mut cells_same = 0;
    let mut cells = 0;
    for w in ["mutex", "rw"] {
        for &t in &CHECK_THREADS {
            let cell: Vec<&CheckRow> = rows
                .iter()
                .filter(|r| r.workload == w && r.threads == t)
                .collect();
            let (checked, wrong) = ranking(&cell);
            cells += 1;
            if wrong.is_empty() {
                cells_same += 1;
            }
            let detail = if wrong.is_empty() {
                "same order".to_string()
            } else {
                let pairs: Vec<String> = wrong
                    .iter()
                    .map(|(lo, hi)| format!("{hi} > {lo} measured, not predicted"))
                    .collect();
                pairs.join("; ")
            };
            text += &format!(
                "ranking, {w} at {t} thread{}: {checked} pairs apart beyond their spread, {detail}\n",
                if t == 1 { "" } else { "s" }
            );
        }
    }
    text += &format!("rankings the same in {cells_same} of {cells} cells\n");
    (text, cells_same, cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked() {
        let p = |w: Option<&str>, l: Option<&str>, t: Option<&str>| {
            PredictPlan::try_from(&PredictArgs {
                workload: w.map(Into::into),
                locks: l.map(Into::into),
                threads: t.map(Into::into),
                ..PredictArgs::default()
            })
        };
        assert!(p(None, None, None).is_ok());
        assert!(
            p(Some("condvar"), None, None)
                .unwrap_err()
                .0
                .contains("mutex, rw")
        );
        assert!(
            p(None, Some("ticket,pthread"), None)
                .unwrap_err()
                .0
                .contains("pthread")
        );
        assert!(p(None, None, Some("0")).is_err());
        assert_eq!(
            p(None, None, Some("1:4:1")).unwrap().threads,
            vec![1, 2, 3, 4]
        );
        assert_eq!(default_threads(48), vec![1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(default_threads(1), vec![1]);
    }

    #[test]
    fn ranking_ignores_pairs_within_their_spread() {
        let c = |lock: &str, min: f64, med: f64, max: f64, predicted: f64| CheckRow {
            workload: "mutex".into(),
            lock: lock.into(),
            threads: 2,
            measured: Spread {
                median: med,
                min,
                max,
            },
            predicted,
            ratio: predicted / med,
            within_25pct: true,
        };
        let a = c("a", 90.0, 100.0, 110.0, 50.0);
        let b = c("b", 105.0, 120.0, 130.0, 40.0); // overlaps a: not checked
        let d = c("d", 200.0, 210.0, 220.0, 45.0); // above both, predicted below a: wrong
        let (checked, wrong) = ranking(&[&a, &b, &d]);
        assert_eq!(checked, 2);
        assert_eq!(wrong, vec![("a".to_string(), "d".to_string())]);
        let d_ok = c("d", 200.0, 210.0, 220.0, 60.0);
        let (_, wrong) = ranking(&[&a, &b, &d_ok]);
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}
