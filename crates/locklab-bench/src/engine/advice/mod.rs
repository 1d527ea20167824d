//! The advice map (`locklab advise`, and the prediction `try` prints): which lock wins where on this
//! machine. Runs the `rw` workload (exclusive locks
//! take their exclusive mode for reads, so every lock runs it) over a grid of threads x critical
//! section x read share, for every lock and peer (baselines apart), and prints the crossover map: per
//! cell the winner, its margin over the runner-up and, when ours wins, over the best peer (or when a
//! peer wins, ours' deficit), then rules of thumb read off the map: for each lock that wins, the
//! cells it wins, as ranges.
//!
//! `--json F` writes `{machine, calibration, grid, cells: [Cell], rules: [Rule], results: [rows]}`;
//! `locklab report` draws its cells as a heat map.

use crate::engine::metrics::ResultRow;
use crate::engine::output::Report;
use crate::engine::plan::Plan;
use crate::engine::runner::{Clock, CondvarSpec};
use crate::engine::workload::Workload;
use crate::locks::{self, Kind};
use serde::{Deserialize, Serialize};

/// The grid.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Grid {
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Critical sections, ns.
    pub cs_ns: Vec<u64>,
    /// Read shares, %.
    pub read_pct: Vec<u32>,
}

/// One cell of the map.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    /// Threads.
    pub threads: usize,
    /// Critical section, ns.
    pub cs_ns: u64,
    /// Read share, %.
    pub read_pct: u32,
    /// The fastest lock (median ops/s).
    pub winner: String,
    /// `ours` or `peer`.
    pub winner_kind: String,
    /// The second fastest.
    pub runner_up: String,
    /// winner / runner-up.
    pub margin: f64,
    /// Our fastest lock.
    pub best_ours: String,
    /// The fastest peer.
    pub best_peer: String,
    /// Our fastest / the fastest peer (above 1: ours wins).
    pub ours_vs_peer: f64,
    /// A row of the cell was measured on a busy machine.
    pub busy: bool,
}

/// A rule of thumb: a lock and the cells it wins.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Rule {
    /// The lock.
    pub lock: String,
    /// Cells it wins, of the grid's.
    pub wins: usize,
    /// The grid's cells.
    pub of: usize,
    /// The line printed.
    pub text: String,
}

/// What `--json` writes.
#[derive(Debug, Serialize, Deserialize)]
pub struct Advice {
    /// Machine, limits and every row measured.
    #[serde(flatten)]
    pub lab: Report,
    /// The grid.
    pub grid: Grid,
    /// The map.
    pub cells: Vec<Cell>,
    /// Rules of thumb.
    pub rules: Vec<Rule>,
    /// The locks that collapse somewhere in the grid: below half their own peak throughput at some
    /// thread count (same read share and critical section), one line each.
    #[serde(default)]
    pub collapses: Vec<String>,
}

/// The collapse lines of every (read share, critical section) group of `rows`.
pub fn collapses(rows: &[ResultRow], grid: &Grid) -> Vec<String> {
    let mut out = vec![];
    for &read in &grid.read_pct {
        for &cs in &grid.cs_ns {
            let group: Vec<&ResultRow> = rows
                .iter()
                .filter(|r| r.read_pct.unwrap_or(0) == read && r.cs_ns == cs)
                .collect();
            for line in crate::engine::metrics::collapse_lines(&group) {
                out.push(format!("{line} ({read}% reads, cs {cs} ns)"));
            }
        }
    }
    out
}

/// The map from the rows of one run: one cell per grid point with rows of ours and of peers.
pub fn cells(rows: &[ResultRow], grid: &Grid) -> Vec<Cell> {
    let mut out = vec![];
    for &read in &grid.read_pct {
        for &cs in &grid.cs_ns {
            for &t in &grid.threads {
                let mut here: Vec<(&ResultRow, Kind)> = rows
                    .iter()
                    .filter(|r| r.threads == t && r.cs_ns == cs && r.read_pct == Some(read))
                    // A superlinear row measured something else than the lock: no advice rests on it.
                    .filter(|r| !r.superlinear)
                    .filter_map(|r| {
                        let k = locks::find(&r.lock)?.kind;
                        (k != Kind::Baseline).then_some((r, k))
                    })
                    .collect();
                here.sort_by(|a, b| b.0.ops_per_sec.median.total_cmp(&a.0.ops_per_sec.median));
                let best = |k: Kind| here.iter().find(|x| x.1 == k).map(|x| x.0);
                let (Some(ours), Some(peer)) = (best(Kind::Ours), best(Kind::Peer)) else {
                    continue;
                };
                let (win, kind) = here[0];
                let runner = here.get(1).map_or(win, |x| x.0);
                out.push(Cell {
                    threads: t,
                    cs_ns: cs,
                    read_pct: read,
                    winner: win.lock.clone(),
                    winner_kind: kind.name().into(),
                    runner_up: runner.lock.clone(),
                    margin: win.ops_per_sec.median / runner.ops_per_sec.median.max(1e-9),
                    best_ours: ours.lock.clone(),
                    best_peer: peer.lock.clone(),
                    ours_vs_peer: ours.ops_per_sec.median / peer.ops_per_sec.median.max(1e-9),
                    busy: here.iter().any(|x| x.0.noise.busy),
                });
            }
        }
    }
    out
}

fn span<T: Copy + Ord + std::fmt::Display>(v: &[T], unit: &str, all: &[T]) -> Option<String> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    if v.len() == all.len() {
        return None; // every value: not a condition
    }
    let (lo, hi) = (v[0], v[v.len() - 1]);
    Some(if lo == hi {
        format!("{lo}{unit}")
    } else {
        let contiguous = all
            .iter()
            .filter(|x| **x >= lo && **x <= hi)
            .all(|x| v.contains(x));
        if contiguous {
            format!("{lo}-{hi}{unit}")
        } else {
            v.iter()
                .map(|x| format!("{x}{unit}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    })
}

/// Rules of thumb: for each winning lock (most wins first), the cells it wins as ranges of threads,
/// cs and read share (a dimension it wins at every value of is left out), and its margins there.
pub fn rules(cells: &[Cell], grid: &Grid) -> Vec<Rule> {
    let mut winners: Vec<&str> = vec![];
    for c in cells {
        if !winners.contains(&c.winner.as_str()) {
            winners.push(&c.winner);
        }
    }
    let mut out: Vec<Rule> = winners
        .into_iter()
        .map(|w| {
            let mine: Vec<&Cell> = cells.iter().filter(|c| c.winner == w).collect();
            let t: Vec<usize> = mine.iter().map(|c| c.threads).collect();
            let cs: Vec<u64> = mine.iter().map(|c| c.cs_ns).collect();
            let rd: Vec<u32> = mine.iter().map(|c| c.read_pct).collect();
            let conds: Vec<String> = [
                span(&t, " thr", &grid.threads),
                span(&cs, " ns cs", &grid.cs_ns),
                span(&rd, "% reads", &grid.read_pct),
            ]
            .into_iter()
            .flatten()
            .collect();
            let (lo, hi) = mine.iter().fold((f64::MAX, 0f64), |(lo, hi), c| {
                (lo.min(c.margin), hi.max(c.margin))
            });
            let kind = &mine[0].winner_kind;
            let margins = if (hi - lo).abs() < 0.005 {
                format!("x{lo:.2}")
            } else {
                format!("x{lo:.2}-{hi:.2}")
            };
            let text = format!(
                "{w} ({kind}): wins {} of {} cells{} ({margins} over the runner-up)",
                mine.len(),
                cells.len(),
                if conds.is_empty() {
                    ": everywhere".to_string()
                } else {
                    format!(" at {}", conds.join(", "))
                },
            );
            Rule {
                lock: w.to_string(),
                wins: mine.len(),
                of: cells.len(),
                text,
            }
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.wins));
    out
}

/// The printed map: one line per cell, then the rules, then the collapses.
pub fn render(cells: &[Cell], rules: &[Rule], collapses: &[String]) -> String {
    let mut s = format!(
        "{:>6}{:>8}{:>7}  {:<24}{:>8}  {:<24}{:>11}\n",
        "reads", "cs ns", "thr", "winner", "margin", "runner-up", "ours/peer"
    );
    for c in cells {
        s += &format!(
            "{:>5}%{:>8}{:>7}  {:<24}{:>7.2}x  {:<24}{:>10.2}x{}\n",
            c.read_pct,
            c.cs_ns,
            c.threads,
            c.winner,
            c.margin,
            c.runner_up,
            c.ours_vs_peer,
            if c.busy { "  (busy)" } else { "" }
        );
    }
    let ours = cells.iter().filter(|c| c.ours_vs_peer >= 1.0).count();
    s += &format!(
        "\nours beat the best peer in {ours} of {} cells (ours/peer = our fastest lock / the fastest peer)\nrules of thumb on this machine:\n",
        cells.len()
    );
    for r in rules {
        s += &format!("  {}\n", r.text);
    }
    if collapses.is_empty() {
        s += "no lock collapsed (fell below half its own peak) over these thread counts\n";
    } else {
        s += "collapses (throughput below half the lock's own peak; avoid these locks there):\n";
        for c in collapses {
            s += &format!("  {c}\n");
        }
    }
    s
}

/// Runs the grid and returns the advice (printing the map unless `quiet`).
pub fn run(grid: &Grid, quick: bool, quiet: bool, clock: &dyn Clock) -> anyhow::Result<Advice> {
    let (duration_ms, repeats) = if quick { (60, 1) } else { (200, 3) };
    run_of(grid, duration_ms, repeats, quiet, clock, None)
}

/// [`run`] over the named locks only (`None`: every lock and peer).
fn run_of(
    grid: &Grid,
    duration_ms: u64,
    repeats: usize,
    quiet: bool,
    clock: &dyn Clock,
    only: Option<&[&str]>,
) -> anyhow::Result<Advice> {
    let registry = locks::registry();
    let chosen: Vec<_> = registry
        .iter()
        .filter(|l| l.kind != Kind::Baseline && l.supports(Workload::Rw))
        .filter(|l| only.is_none_or(|o| o.contains(&l.name)))
        .cloned()
        .collect();
    let mut lab: Option<Report> = None;
    for &read in &grid.read_pct {
        for &cs in &grid.cs_ns {
            let plan = Plan {
                workloads: vec![(Workload::Rw, chosen.clone())],
                threads: grid.threads.clone(),
                cs_ns: cs,
                think_ns: cs,
                read_pct: read,
                writers: 1,
                condvar: CondvarSpec::default(),
                duration_ms,
                warmup_ms: if duration_ms < 100 { 10 } else { 30 },
                repeats,
                pin: true,
                quiet: true,
                exporters: vec![],
                summary: false,
                lock_count: 1,
            };
            if !quiet {
                eprintln!("advise: {read}% reads, cs {cs} ns ...");
            }
            let r = crate::engine::suite::run(&plan, clock)?;
            match &mut lab {
                None => lab = Some(r),
                Some(l) => l.results.extend(r.results),
            }
        }
    }
    let lab = lab.expect("the grid has at least one cell");
    let cells = cells(&lab.results, grid);
    let rules = rules(&cells, grid);
    let collapses = collapses(&lab.results, grid);
    if !quiet {
        print!("{}", render(&cells, &rules, &collapses));
    }
    Ok(Advice {
        lab,
        grid: grid.clone(),
        cells,
        rules,
        collapses,
    })
}

mod from_stat;
pub use from_stat::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::metrics::Spread;

    pub(super) fn row(lock: &str, t: usize, cs: u64, read: u32, ops: f64) -> ResultRow {
        ResultRow {
            workload: "rw".into(),
            lock: lock.into(),
            threads: t,
            cs_ns: cs,
            read_pct: Some(read),
            ops_per_sec: Spread {
                median: ops,
                min: ops,
                max: ops,
            },
            ..Default::default()
        }
    }

    fn grid() -> Grid {
        Grid {
            threads: vec![1, 2],
            cs_ns: vec![0],
            read_pct: vec![0, 90],
        }
    }

    /// A superlinear row never wins a cell (nor counts as the best of its kind).
    #[test]
    fn a_superlinear_row_wins_nothing() {
        let mut fast = row("mutex", 2, 0, 0, 100.0);
        fast.superlinear = true;
        let rows = vec![
            row("mutex", 1, 0, 0, 10.0),
            row("parking-lot-mutex", 1, 0, 0, 8.0),
            fast,
            row("rwsem", 2, 0, 0, 6.0),
            row("parking-lot-mutex", 2, 0, 0, 9.0),
        ];
        let c = cells(&rows, &grid());
        let two = c.iter().find(|c| c.threads == 2).unwrap();
        assert_eq!(
            (two.winner.as_str(), two.best_ours.as_str()),
            ("parking-lot-mutex", "rwsem")
        );
    }

    #[test]
    fn each_cell_names_its_winner_margin_and_ours_vs_the_best_peer() {
        let rows = vec![
            row("mutex", 1, 0, 0, 10.0),
            row("parking-lot-mutex", 1, 0, 0, 8.0),
            row("atomic-count", 1, 0, 0, 99.0), // a baseline never wins
            row("mutex", 2, 0, 0, 6.0),
            row("parking-lot-mutex", 2, 0, 0, 9.0),
            row("percpu-rwsem", 1, 0, 90, 30.0),
            row("std-rwlock", 1, 0, 90, 10.0),
            row("percpu-rwsem", 2, 0, 90, 50.0),
            row("std-rwlock", 2, 0, 90, 20.0),
            row("none", 2, 0, 90, 500.0),
        ];
        let c = cells(&rows, &grid());
        assert_eq!(c.len(), 4);
        assert_eq!((c[0].winner.as_str(), c[0].margin), ("mutex", 1.25));
        assert_eq!(c[0].winner_kind, "ours");
        assert_eq!(c[1].winner, "parking-lot-mutex");
        assert!((c[1].ours_vs_peer - 6.0 / 9.0).abs() < 1e-12);
        assert_eq!((c[3].winner.as_str(), c[3].margin), ("percpu-rwsem", 2.5));
        let r = rules(&c, &grid());
        assert_eq!(r[0].lock, "percpu-rwsem");
        assert_eq!(r[0].wins, 2);
        assert!(r[0].text.contains("at 90% reads"), "{}", r[0].text);
        assert!(
            r.iter()
                .any(|x| x.lock == "mutex" && x.text.contains("at 1 thr, 0% reads")),
            "{r:?}"
        );
        let text = render(&c, &r, &[]);
        assert!(
            text.contains("ours beat the best peer in 3 of 4 cells"),
            "{text}"
        );
        assert!(text.contains("no lock collapsed"), "{text}");
    }

    #[test]
    fn a_lock_below_half_its_peak_is_named_with_its_cell() {
        let g = Grid {
            threads: vec![1, 2, 64],
            cs_ns: vec![0],
            read_pct: vec![90],
        };
        let mut rows = vec![
            row("ticket", 1, 0, 90, 10e6),
            row("ticket", 2, 0, 90, 12e6),
            row("ticket", 64, 0, 90, 0.5e6),
            row("mutex", 1, 0, 90, 10e6),
            row("mutex", 2, 0, 90, 9e6),
            row("mutex", 64, 0, 90, 8e6),
        ];
        crate::engine::metrics::fill_peak(&mut rows);
        let c = collapses(&rows, &g);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(
            c[0].starts_with(
                "ticket collapses: below half its peak (2 threads) at 64 (x0.04) threads"
            ) && c[0].ends_with("(90% reads, cs 0 ns)"),
            "{c:?}"
        );
        let text = render(&cells(&rows, &g), &[], &c);
        assert!(text.contains("collapses (throughput below half"), "{text}");
    }
}
