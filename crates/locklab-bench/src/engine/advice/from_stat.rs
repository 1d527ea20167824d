//! `advise --from STAT.json` (and `try`'s prediction): the crossover map's choice for a program's
//! own hot locks, read from its lock statistics, and the process-wide choice they add up to.

use super::{Advice, Grid, run_of};
use crate::engine::metrics::ResultRow;
use serde::Serialize;

/// The preload library's mutex choices as the lab's locks, `(lab lock, LOCKLAB_MUTEX value)`: its
/// `adaptive` is the lab's `preload-mutex` row (the library's default, called as C calls it; not
/// `locklab::Mutex`, the lab's `mutex`).
pub const PRELOAD_MUTEXES: [(&str, &str); 7] = [
    ("preload-mutex", "adaptive"),
    ("mcs", "mcs"),
    ("ticket", "ticket"),
    ("qspinlock", "qspinlock"),
    ("tas", "tas"),
    ("pthread-mutex", "glibc"),
    ("pthread-adaptive-mutex", "glibc-adaptive"),
];
/// The preload library's rwlock choices as the lab's locks, `(lab lock, LOCKLAB_RWLOCK value)`: its
/// `rwsem` for a default rwlock is the reader-preferring one (POSIX's default), the lab's
/// `recursive-rwsem`.
pub const PRELOAD_RWLOCKS: [(&str, &str); 3] = [
    ("recursive-rwsem", "rwsem"),
    ("rwspinlock", "rwspinlock"),
    ("pthread-rwlock", "glibc"),
];

/// One hot lock of a program and the map's choice for its shape.
#[derive(Debug, Clone, Serialize)]
pub struct HotLock {
    /// The lock (its global's name, or its address) and its busiest call site.
    pub lock: String,
    /// The call site with the most wait.
    pub site: String,
    /// `mutex` (any pthread mutex kind) or `rwlock`.
    pub kind: String,
    /// Its share of the program's total lock wait, %.
    pub wait_pct: f64,
    /// Mean hold time, ns.
    pub hold_ns: u64,
    /// Contended acquisitions over all acquisitions, %.
    pub contended_pct: f64,
    /// Read acquisitions over all, %.
    pub read_pct: f64,
    /// The map's cell this shape falls in: threads (the first thread cell), critical section (ns),
    /// reads (%).
    pub cell: (usize, u64, u32),
    /// The fastest preload choice in that cell (`mcs`, or `rwlock:rwspinlock`; `glibc`).
    pub choice: String,
    /// Its margin over the next preload choice (in the worse thread cell).
    pub margin: f64,
    /// Whether the fastest choice is ahead beyond the map's own spread: its slowest run above every
    /// other choice's fastest (else the choice is `glibc`: nothing is shown better).
    pub clear: bool,
    /// The choices within the spread of the fastest (itself first), when there is no clear winner.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub within_spread: Vec<String>,
}

/// The preload's spinlock choices: advised only if they hold up with twice as many threads as CPUs.
pub const SPINLOCKS: [&str; 5] = ["mcs", "ticket", "qspinlock", "tas", "rwspinlock"];

impl HotLock {
    /// The choice and its margin, or that there is no clear winner and which choices are within
    /// the spread.
    pub fn choice_text(&self) -> String {
        if self.clear {
            format!("{} ({:.2}x)", self.choice, self.margin)
        } else {
            format!(
                "{} (no clear winner: {} within the map's spread)",
                self.choice,
                self.within_spread.join(", ")
            )
        }
    }
}

/// What `advise --from` finds.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// The hot locks, most waited first.
    pub hot: Vec<HotLock>,
    /// The choice the hot locks add up to (by their wait): a `try` row label (`glibc` when nothing
    /// waits, or glibc wins the cells).
    pub process_choice: String,
    /// Its share of the hot locks' wait, %.
    pub process_share: f64,
    /// Where the map came from (`measured now (quick grid)`, or a file).
    pub map: String,
    /// The thread count the map was read at, and where it came from.
    pub threads: String,
}

impl Prediction {
    /// One line: the process-wide choice and why.
    pub fn summary(&self) -> String {
        if self.hot.is_empty() {
            return format!("{} (no lock waited)", self.process_choice);
        }
        let top = &self.hot[0];
        format!(
            "{} ({:.0}% of the wait; hottest lock {} at {}: hold {} ns, {:.1}% contended, {:.0}% reads -> {})",
            self.process_choice,
            self.process_share,
            top.lock,
            top.site,
            top.hold_ns,
            top.contended_pct,
            top.read_pct,
            top.choice_text()
        )
    }

    /// The table `advise --from` prints.
    pub fn render(&self) -> String {
        let mut s = format!("crossover map: {}\nthreads: {}\n", self.map, self.threads);
        if self.hot.is_empty() {
            s += "no lock waited: nothing to gain from another lock (keep glibc)\n";
            return s;
        }
        s += &format!(
            "{:>6} {:>9} {:>10} {:>6}  {:<22} {:<18} lock / site\n",
            "wait", "hold", "contended", "reads", "cell (thr, cs, reads)", "choice (margin)"
        );
        for h in &self.hot {
            s += &format!(
                "{:>5.1}% {:>6} ns {:>9.1}% {:>5.0}%  {:<22} {:<18} {} at {}\n",
                h.wait_pct,
                h.hold_ns,
                h.contended_pct,
                h.read_pct,
                format!("{}, {} ns, {}%", h.cell.0, h.cell.1, h.cell.2),
                h.choice_text(),
                h.lock,
                h.site
            );
        }
        s += &format!(
            "process-wide: {} ({:.0}% of the hot locks' wait)\n",
            match self.process_choice.strip_prefix("rwlock:") {
                Some(r) => format!("LOCKLAB_RWLOCK={r}"),
                None if self.process_choice == "glibc" => "glibc (no preload)".into(),
                None => format!("LOCKLAB_MUTEX={}", self.process_choice),
            },
            self.process_share
        );
        s
    }
}

/// The map's cell value nearest `v` among `grid` (by ratio: 150 ns is nearer 200 than 0).
fn nearest(v: f64, grid: &[u64]) -> u64 {
    *grid
        .iter()
        .min_by(|a, b| {
            let d = |g: u64| ((v + 10.0) / (g as f64 + 10.0)).ln().abs();
            d(**a).total_cmp(&d(**b))
        })
        .expect("a grid axis is never empty")
}

/// The prediction for `processes` (a program's lock statistics) from `map` (an `advise --json`),
/// or from a quick grid over the preload's choices measured now (three 60 ms runs a cell; ~10 s,
/// ~40 s when an rwlock is hot) at `threads` threads
/// (default: the CPUs, at least 2).
pub fn from_processes(
    processes: &[crate::external::lockstat::ProcessStat],
    map: Option<(&Advice, String)>,
    threads: Option<usize>,
    quiet: bool,
) -> anyhow::Result<Prediction> {
    let cpus = crate::engine::runner::allowed_cpus().len().max(2);
    from_processes_on(processes, map, threads, quiet, cpus)
}

/// [`from_processes`] on a machine of `cpus` CPUs (at least 2).
fn from_processes_on(
    processes: &[crate::external::lockstat::ProcessStat],
    map: Option<(&Advice, String)>,
    threads: Option<usize>,
    quiet: bool,
    cpus: usize,
) -> anyhow::Result<Prediction> {
    let (hot, total_wait) = hot_locks(processes);
    if hot.is_empty() {
        return Ok(Prediction {
            hot: vec![],
            process_choice: "glibc".into(),
            process_share: 100.0,
            map: "not needed".into(),
            threads: "not needed".into(),
        });
    }
    let (wanted, threads_text) = wanted_threads(processes, threads, cpus);
    let measured;
    let (advice, source): (&Advice, String) = match map {
        Some((a, name)) => (a, name),
        None => {
            measured = measure_quick_map(&hot, &wanted, cpus, quiet)?;
            let t = wanted
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(",");
            (&measured, format!("measured now (quick grid, {t} threads)"))
        }
    };
    let judge = Judge::new(advice, &wanted, cpus, total_wait)?;
    let out = hot
        .iter()
        .map(|l| judge.hot_lock(l))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (process_choice, process_share) = process_choice(&out);
    Ok(Prediction {
        hot: out,
        process_choice,
        process_share,
        map: source,
        threads: threads_text,
    })
}

/// The hot locks of every process (mutexes and rwlocks with at least 5% of the wait, at most 8,
/// most waited first) and the total wait of all their locks.
fn hot_locks(
    processes: &[crate::external::lockstat::ProcessStat],
) -> (Vec<crate::external::lockstat::LockSummary>, u64) {
    let mut locks: Vec<crate::external::lockstat::LockSummary> = processes
        .iter()
        .flat_map(|p| p.locks())
        .filter(|l| l.kind.starts_with("mutex") || l.kind == "rwlock")
        .collect();
    locks.sort_by_key(|l| std::cmp::Reverse(l.total.wait_total()));
    let total_wait: u64 = locks.iter().map(|l| l.total.wait_total()).sum();
    let hot: Vec<_> = locks
        .into_iter()
        .filter(|l| total_wait > 0 && l.total.wait_total() * 20 >= total_wait)
        .take(8)
        .collect();
    (hot, total_wait)
}

/// The thread counts the map is read at, and the text saying where they came from.
///
/// The thread count: --threads, else the most threads that took locks at once (the library
/// records it), else unknown (an older file): the map's cells at the CPUs and at twice the CPUs,
/// and the choice that does best in the worse of the two (a spinlock that wins on dedicated CPUs
/// and collapses when threads outnumber them is no advice).
fn wanted_threads(
    processes: &[crate::external::lockstat::ProcessStat],
    threads: Option<usize>,
    cpus: usize,
) -> (Vec<usize>, String) {
    let peak = processes.iter().map(|p| p.threads_peak).max().unwrap_or(0) as usize;
    let wanted: Vec<usize> = match threads {
        Some(t) => vec![t],
        None if peak > 0 => vec![peak.clamp(2, 256)],
        None => vec![cpus, 2 * cpus],
    };
    let threads_text = match threads {
        Some(t) => format!("{t} (--threads)"),
        None if peak > 0 => format!(
            "{} (the most threads that had taken a lock alive at once: {peak})",
            wanted[0]
        ),
        None => format!(
            "unknown (statistics without a thread count): the worse of {cpus} and {}",
            2 * cpus
        ),
    };
    (wanted, threads_text)
}

/// A quick crossover map of the preload's choices measured now, at the `wanted` thread counts and
/// the spinlocks' worst case (the CPUs and twice the CPUs); the rwlocks too when one is hot.
fn measure_quick_map(
    hot: &[crate::external::lockstat::LockSummary],
    wanted: &[usize],
    cpus: usize,
    quiet: bool,
) -> anyhow::Result<Advice> {
    let rw = hot.iter().any(|l| l.kind == "rwlock");
    let names: Vec<&str> = PRELOAD_MUTEXES
        .iter()
        .chain(if rw { &PRELOAD_RWLOCKS[..] } else { &[] })
        .map(|(l, _)| *l)
        .collect();
    // The spinlocks' worst case too: the CPUs and twice the CPUs.
    let mut measured_threads = wanted.to_vec();
    for t in [cpus, 2 * cpus] {
        if !measured_threads.contains(&t) {
            measured_threads.push(t);
        }
    }
    measured_threads.sort_unstable();
    let grid = Grid {
        threads: measured_threads,
        cs_ns: vec![0, 200, 1000],
        read_pct: {
            let mut r = vec![0u32];
            if hot.iter().any(|l| l.kind == "rwlock") {
                r.extend([50, 90]);
            }
            r
        },
    };
    if !quiet {
        eprintln!(
            "advise: measuring the crossover map of the preload's choices ({} threads, ~{} s) ...",
            wanted
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" and "),
            (grid.cs_ns.len() * grid.read_pct.len() * grid.threads.len() * names.len()) * 21 / 100
        );
    }
    // Short cells, but three of each: one 60 ms run can crown a lock by noise alone.
    run_of(
        &grid,
        60,
        3,
        true,
        &crate::engine::runner::SystemClock::default(),
        Some(&names),
    )
}

/// One candidate's worst share of its cell's best over its thread cells: `(median share, name,
/// slowest run's share, fastest run's share)`.
type Share<'n> = (f64, &'n str, f64, f64);

/// The map and the cells a hot lock's choice is read from.
struct Judge<'a> {
    /// The crossover map.
    advice: &'a Advice,
    /// The map's thread cells nearest the program's thread counts.
    t_cells: Vec<usize>,
    /// Those and the cells nearest the CPUs and twice the CPUs, where a spinlock is judged.
    spin_cells: Vec<usize>,
    /// The total wait of the program's locks.
    total_wait: u64,
}

impl<'a> Judge<'a> {
    /// The cells of `advice` for the `wanted` thread counts on `cpus` CPUs.
    fn new(
        advice: &'a Advice,
        wanted: &[usize],
        cpus: usize,
        total_wait: u64,
    ) -> anyhow::Result<Self> {
        let grid = &advice.grid;
        let nearest_cells = |want: &[usize]| -> anyhow::Result<Vec<usize>> {
            let mut cells: Vec<usize> = Vec::new();
            for t in want {
                let c = *grid
                    .threads
                    .iter()
                    .min_by_key(|g| g.abs_diff(*t))
                    .ok_or_else(|| anyhow::anyhow!("the map has no thread counts"))?;
                if !cells.contains(&c) {
                    cells.push(c);
                }
            }
            Ok(cells)
        };
        let t_cells = nearest_cells(wanted)?;
        // A spinlock is judged at the program's thread count and at the CPUs and twice the CPUs
        // whatever that count is: one that wins on dedicated CPUs and collapses when threads
        // outnumber them is no advice (the program's threads are not all its machine runs).
        let mut spin_cells = t_cells.clone();
        for c in nearest_cells(&[cpus, 2 * cpus])? {
            if !spin_cells.contains(&c) {
                spin_cells.push(c);
            }
        }
        Ok(Judge {
            advice,
            t_cells,
            spin_cells,
            total_wait,
        })
    }

    /// The map's choice for one hot lock.
    fn hot_lock(&self, l: &crate::external::lockstat::LockSummary) -> anyhow::Result<HotLock> {
        let grid = &self.advice.grid;
        let acq = l.total.acquisitions + l.total.read_acquisitions;
        let hold = l
            .total
            .hold_ns_total
            .checked_div(l.total.holds)
            .unwrap_or(0);
        let read_pct = if acq > 0 {
            100.0 * l.total.read_acquisitions as f64 / acq as f64
        } else {
            0.0
        };
        let rw = l.kind == "rwlock";
        let cs = nearest(hold as f64, &grid.cs_ns);
        let reads: Vec<u64> = grid.read_pct.iter().map(|&r| u64::from(r)).collect();
        let read = if rw {
            nearest(read_pct, &reads) as u32
        } else {
            0
        };
        let read = if grid.read_pct.contains(&read) {
            read
        } else {
            grid.read_pct[0]
        };
        let candidates: &[(&str, &str)] = if rw {
            &PRELOAD_RWLOCKS
        } else {
            &PRELOAD_MUTEXES
        };
        let here = self.shares(candidates, cs, read);
        let t_cell = self.t_cells[0];
        let Some(&(best, name, best_lo, _)) = here.first() else {
            anyhow::bail!(
                "the map has no row of the preload's choices at {t_cell} threads, cs {cs} ns, {read}% reads"
            );
        };
        let margin = here.get(1).map_or(1.0, |x| best / x.0.max(1e-9));
        // A winner by more than the map's spread: its slowest run above every other choice's
        // fastest. Else the choices within the spread are named and nothing is advised.
        let within: Vec<&str> = here
            .iter()
            .filter(|x| x.1 == name || x.3 >= best_lo)
            .map(|x| x.1)
            .collect();
        let clear = within.len() == 1;
        let label = |n: &str| match (rw, n) {
            (_, "glibc") => "glibc".to_string(),
            (true, n) => format!("rwlock:{n}"),
            (false, n) => n.to_string(),
        };
        let within_spread: Vec<String> = if clear {
            vec![]
        } else {
            within.iter().map(|n| label(n)).collect()
        };
        let name = if clear { name } else { "glibc" };
        let site = l.sites.first().map(|s| s.site_name()).unwrap_or_default();
        Ok(HotLock {
            lock: l.name.clone().unwrap_or_else(|| l.lock.clone()),
            site,
            kind: if rw { "rwlock" } else { "mutex" }.into(),
            wait_pct: 100.0 * l.total.wait_total() as f64 / self.total_wait as f64,
            hold_ns: hold,
            contended_pct: if acq > 0 {
                100.0 * l.total.contended() as f64 / acq as f64
            } else {
                0.0
            },
            read_pct,
            cell: (t_cell, cs, read),
            choice: label(name),
            margin,
            clear,
            within_spread,
        })
    }

    /// Each candidate's worst share of its cell's best (median; and its slowest and fastest runs,
    /// the map's spread), over its thread cells, by median share; ties (equal figures) by name, so
    /// the same map always gives the same order.
    fn shares<'n>(&self, candidates: &[(&str, &'n str)], cs: u64, read: u32) -> Vec<Share<'n>> {
        let mut here: Vec<Share<'n>> = Vec::new();
        for (lab, name) in candidates {
            let cells_of = if SPINLOCKS.contains(name) {
                &self.spin_cells
            } else {
                &self.t_cells
            };
            if let Some((w, lo, hi)) = self.worst_share(candidates, lab, cells_of, cs, read) {
                here.push((w, name, lo, hi));
            }
        }
        here.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        here
    }

    /// `lab`'s worst `(median, slowest, fastest)` share of its cell's best among `candidates` over
    /// the thread cells `cells_of` (`None` if a cell has no row of it).
    fn worst_share(
        &self,
        candidates: &[(&str, &str)],
        lab: &str,
        cells_of: &[usize],
        cs: u64,
        read: u32,
    ) -> Option<(f64, f64, f64)> {
        let mut worst: Option<(f64, f64, f64)> = None;
        for &t in cells_of {
            let cell: Vec<&ResultRow> = self
                .advice
                .lab
                .results
                .iter()
                .filter(|r| r.threads == t && r.cs_ns == cs && r.read_pct.unwrap_or(0) == read)
                .filter(|r| candidates.iter().any(|(l, _)| *l == r.lock))
                .collect();
            let best = cell
                .iter()
                .map(|r| r.ops_per_sec.median)
                .fold(0.0, f64::max);
            let r = cell.iter().find(|r| r.lock == lab)?;
            let b = best.max(1e-9);
            let share = (
                r.ops_per_sec.median / b,
                r.ops_per_sec.min.min(r.ops_per_sec.median) / b,
                r.ops_per_sec.max.max(r.ops_per_sec.median) / b,
            );
            worst = Some(worst.map_or(
                share,
                |w: (f64, f64, f64)| {
                    if share.0 < w.0 { share } else { w }
                },
            ));
        }
        worst
    }
}

/// The process-wide choice: the one with the most of the hot locks' wait behind it, and its share
/// of that wait, %.
fn process_choice(out: &[HotLock]) -> (String, f64) {
    let mut by: Vec<(String, f64)> = Vec::new();
    for h in out {
        match by.iter_mut().find(|(c, _)| *c == h.choice) {
            Some(e) => e.1 += h.wait_pct,
            None => by.push((h.choice.clone(), h.wait_pct)),
        }
    }
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    let hot_total: f64 = out.iter().map(|h| h.wait_pct).sum();
    (by[0].0.clone(), 100.0 * by[0].1 / hot_total.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::advice::tests::row;
    use crate::engine::metrics::Spread;
    use crate::engine::output::Report;

    fn stat(
        records: &[(&str, &str, u64, u64, u64, u64, u64)],
    ) -> crate::external::lockstat::ProcessStat {
        // (lock, kind, acquisitions, read acquisitions, contentions, wait ns, hold ns total)
        crate::external::lockstat::ProcessStat {
            records: records
                .iter()
                .map(|&(lock, kind, acq, reads, con, wait, hold)| {
                    crate::external::lockstat::Record {
                        lock: lock.into(),
                        kind: kind.into(),
                        site: Some(format!("{lock}_site")),
                        acquisitions: acq,
                        read_acquisitions: reads,
                        contentions: con,
                        wait_ns_total: wait,
                        holds: acq,
                        hold_ns_total: hold,
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        }
    }

    fn map(rows: Vec<ResultRow>) -> Advice {
        Advice {
            lab: Report {
                locklab_version: String::new(),
                machine: Default::default(),
                calibration: Default::default(),
                results: rows,
            },
            grid: Grid {
                threads: vec![2, 4],
                cs_ns: vec![0, 200, 1000],
                read_pct: vec![0, 90],
            },
            cells: vec![],
            rules: vec![],
            collapses: vec![],
        }
    }

    #[test]
    fn from_statistics_each_hot_lock_gets_its_cells_choice_by_the_worse_thread_count() {
        let mut rows = vec![];
        for (t, cs) in [(2, 0), (2, 200), (2, 1000), (4, 0), (4, 200), (4, 1000)] {
            // mcs wins with dedicated CPUs and collapses at 4 threads; mutex is second at 2 and
            // first at 4; glibc is steady but behind.
            rows.push(row("mcs", t, cs, 0, if t == 2 { 10.0 } else { 1.0 }));
            rows.push(row(
                "preload-mutex",
                t,
                cs,
                0,
                if t == 2 { 9.0 } else { 8.0 },
            ));
            rows.push(row("pthread-mutex", t, cs, 0, 5.0));
            // rwlocks at 90% reads: rwspinlock ahead at both thread counts.
            rows.push(row("recursive-rwsem", t, cs, 90, 4.0));
            rows.push(row("rwspinlock", t, cs, 90, 6.0));
            rows.push(row("pthread-rwlock", t, cs, 90, 3.0));
        }
        let m = map(rows);
        // A mutex with 70% of the wait (hold 180 ns: the 200 ns column), an rwlock with 25% (90%
        // reads), and a lock below 5% that is not hot.
        let p = stat(&[
            ("m", "mutex", 1000, 0, 100, 70_000, 180_000),
            ("rw", "rwlock", 100, 900, 50, 25_000, 1_000),
            ("cold", "mutex", 10, 0, 1, 4_000, 10),
        ]);
        let pred = from_processes_on(&[p], Some((&m, "test map".into())), None, true, 2).unwrap();
        assert_eq!(pred.hot.len(), 2, "{pred:?}");
        let h = &pred.hot[0];
        assert_eq!((h.lock.as_str(), h.site.as_str()), ("m", "m_site"));
        assert_eq!(h.cell, (2, 200, 0));
        assert_eq!(h.choice, "adaptive", "mcs collapses at 4 threads: {h:?}");
        assert!(
            (h.wait_pct - 7_000_000.0 / 99_000.0).abs() < 1e-9,
            "of all the wait"
        );
        assert_eq!(h.hold_ns, 180);
        assert!((h.contended_pct - 10.0).abs() < 1e-9);
        let r = &pred.hot[1];
        assert_eq!(r.choice, "rwlock:rwspinlock");
        assert_eq!(r.cell, (2, 0, 90), "1 ns hold: the 0 column; 90% reads");
        assert_eq!(pred.process_choice, "adaptive");
        assert!((pred.process_share - 70.0 / 95.0 * 100.0).abs() < 1e-6);
        assert!(
            pred.render()
                .contains("process-wide: LOCKLAB_MUTEX=adaptive")
        );
        assert!(
            pred.render().contains("threads: unknown"),
            "{}",
            pred.render()
        );
        // The thread count from the statistics: at 2 (the CPUs), mcs wins its cell, but a spinlock
        // is judged at twice the CPUs too, where it collapses.
        let mut p = stat(&[("m", "mutex", 1000, 0, 100, 70_000, 180_000)]);
        p.threads_peak = 2;
        let pred =
            from_processes_on(&[p.clone()], Some((&m, "test map".into())), None, true, 2).unwrap();
        assert_eq!(pred.process_choice, "adaptive", "mcs collapses at 2 x CPUs");
        assert!(
            pred.threads.starts_with("2 (the most threads"),
            "{}",
            pred.threads
        );
        p.threads_peak = 5;
        let pred = from_processes_on(&[p], Some((&m, "test map".into())), None, true, 2).unwrap();
        assert_eq!(
            pred.process_choice, "adaptive",
            "5 threads read at the map's nearest, 4"
        );
        // With the thread count given (2): still the worse of 2 and 4 for a spinlock.
        let p = stat(&[("m", "mutex", 1000, 0, 100, 70_000, 180_000)]);
        let pred =
            from_processes_on(&[p], Some((&m, "test map".into())), Some(2), true, 2).unwrap();
        assert_eq!(pred.process_choice, "adaptive");
        // Nothing waited: keep glibc, no map needed.
        let p = stat(&[("m", "mutex", 1000, 0, 0, 0, 10)]);
        let pred = from_processes(&[p], None, None, true).unwrap();
        assert_eq!(pred.process_choice, "glibc");
        assert!(pred.hot.is_empty());
    }

    /// A choice ahead by less than the map's own spread is no choice: "no clear winner", the
    /// choices within the spread named, glibc kept; a spinlock that holds up at twice the CPUs
    /// and wins beyond the spread is advised.
    #[test]
    fn a_winner_within_the_maps_spread_is_no_clear_winner() {
        let spread = |lock: &str, t: usize, cs: u64, min: f64, med: f64, max: f64| {
            let mut r = row(lock, t, cs, 0, med);
            r.ops_per_sec = Spread {
                median: med,
                min,
                max,
            };
            r
        };
        let mut rows = vec![];
        for (t, cs) in [(2, 0), (2, 200), (2, 1000), (4, 0), (4, 200), (4, 1000)] {
            rows.push(spread("mcs", t, cs, 9.0, 10.3, 10.6));
            rows.push(spread("preload-mutex", t, cs, 9.5, 10.0, 10.4));
            rows.push(spread("pthread-mutex", t, cs, 9.0, 9.8, 10.1));
            rows.push(spread("ticket", t, cs, 1.0, 2.0, 3.0));
        }
        let m = map(rows.clone());
        let mut p = stat(&[("m", "mutex", 1000, 0, 100, 70_000, 180_000)]);
        p.threads_peak = 2;
        let pred =
            from_processes_on(&[p.clone()], Some((&m, "test map".into())), None, true, 2).unwrap();
        let h = &pred.hot[0];
        assert!(!h.clear, "{h:?}");
        assert_eq!(h.choice, "glibc");
        assert_eq!(h.within_spread, ["mcs", "adaptive", "glibc"]);
        assert_eq!(pred.process_choice, "glibc");
        assert!(
            pred.render()
                .contains("no clear winner: mcs, adaptive, glibc within the map's spread"),
            "{}",
            pred.render()
        );
        // The same map, the same advice (nothing is measured with a map given).
        let again =
            from_processes_on(&[p.clone()], Some((&m, "test map".into())), None, true, 2).unwrap();
        assert_eq!(again.hot[0].within_spread, h.within_spread);
        // mcs ahead beyond every other spread at 2 and 4 threads: advised.
        for r in rows.iter_mut().filter(|r| r.lock == "mcs") {
            r.ops_per_sec = Spread {
                median: 14.0,
                min: 13.0,
                max: 15.0,
            };
        }
        let pred = from_processes_on(&[p], Some((&map(rows), "m".into())), None, true, 2).unwrap();
        assert!(pred.hot[0].clear);
        assert_eq!(pred.process_choice, "mcs");
    }
}
