//! The default job (`cargo run --release`, `locklab` with no command): the story in one run. The
//! five seeds' experiments (quick), then every workload over every lock and peer, and
//! `locklab-report.html` (the page of all of it: the seeds' tables, the who-wins summary, every
//! workload's plots) written where asked.
//!
//! The terminal gets one screen ([`screen`]): the machine and its limits, a line per seed (reproduced
//! or not, its key figure), who wins where (per workload and thread count, our best lock against the
//! best peer), how many rows the tables mark, and what to run next; the report's path last. Every
//! table (the seeds' and each workload's, as `reproduce` and `bench` print them) comes first with
//! `--tables`. While it runs, a progress bar on stderr when stderr is a terminal, else one line per
//! phase.
//!
//! It runs the other commands only whole, through their documented entry points: `reproduce`'s
//! [`reproduce::run`] over its [`SEEDS`], and `report`'s [`report::render`] and [`report::write`] of
//! a [`RunDoc`].

use crate::commands::report::{self, RunDoc};
use crate::commands::reproduce::{self, SEEDS};
use crate::engine::output::Report;
use crate::engine::output::reproduction::Reproduction;
use crate::engine::plan::plan_default;
use crate::engine::runner::{Clock, allowed_cpus};
use std::io::{IsTerminal, Write};

/// The most lines [`screen`] takes on an 80-column terminal (long lines counted as they wrap).
pub const MAX_SCREEN_LINES: usize = 45;

/// Runs the default job and writes its report to `out`; with `tables`, prints every table before the
/// screen.
pub fn default_job(out: &str, tables: bool, clock: &dyn Clock) -> anyhow::Result<()> {
    let tty = std::io::stderr().is_terminal();
    let mut stdout = std::io::stdout();
    phase(
        tty,
        &format!(
            "the seeds' experiments on this machine ({} seeds, quick)",
            SEEDS.len()
        ),
    );
    let bar = if tty {
        let b = indicatif::ProgressBar::new(SEEDS.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "seeds {pos}/{len} [{bar:30}] seed {msg} {elapsed}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut reproductions = vec![];
    for seed in SEEDS {
        bar.set_message(seed);
        reproductions.extend(reproduce::run(&[seed], true, true, clock)?.reproductions);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if tables {
        for r in &reproductions {
            write!(stdout, "{}verdict: {}\n\n", r.table, r.verdict)?;
        }
    }
    let plan = plan_default(allowed_cpus().len());
    let trials: usize = plan.workloads.iter().map(|(_, l)| l.len()).sum::<usize>()
        * plan.threads.len()
        * plan.repeats;
    phase(
        tty,
        &format!("every workload over every lock and peer ({trials} trials)"),
    );
    // The suite's own text (the machine, the who-wins summary and every table) is kept for
    // `--tables`; its progress bar shows on a terminal.
    let mut full = vec![];
    let report = crate::engine::suite::run_to(&plan, clock, &mut full)?;
    if tables {
        stdout.write_all(&full)?;
        writeln!(stdout)?;
    }
    let doc = RunDoc {
        report,
        reproductions,
        grid: None,
        cells: vec![],
        rules: vec![],
        apps: vec![],
        source: "the default job".into(),
        predicted: false,
    };
    report::write(out, &report::render(std::slice::from_ref(&doc))?)?;
    let path = std::fs::canonicalize(out).unwrap_or_else(|_| out.into());
    write!(
        stdout,
        "{}",
        screen(&doc.report, &doc.reproductions, &path.display().to_string())
    )?;
    Ok(())
}

/// One line on stderr saying which phase starts, when stderr is not a terminal (a terminal gets the
/// bars). A closed stderr is ignored.
fn phase(tty: bool, what: &str) {
    if !tty {
        let _ = writeln!(std::io::stderr(), "locklab: {what} ...");
    }
}

/// The default job's screen: the machine and its limits, the seeds' verdicts, who wins where, the
/// rows the tables mark, what to run next, and `report: PATH` last. At most [`MAX_SCREEN_LINES`]
/// lines on an 80-column terminal, whatever the machine and the run.
///
/// ```
/// use locklab_bench::engine::output::Report;
/// let s = locklab_bench::commands::default_job::screen(&Report::default(), &[], "/tmp/locklab-report.html");
/// assert!(s.contains("limits:"));
/// assert_eq!(s.lines().last(), Some("report: /tmp/locklab-report.html"));
/// ```
pub fn screen(report: &Report, reproductions: &[Reproduction], path: &str) -> String {
    let mut s = crate::engine::suite::header(report) + "\n\n";
    s += "the seeds on this machine (quick; `locklab reproduce SEED` for one in full):\n";
    for r in reproductions {
        // The first author and the year: `McKenney/Piggin 2009` -> `McKenney 2009`.
        let who = r.title.split(':').next().unwrap_or_default();
        let who = match (who.split_once('/'), who.rsplit_once(' ')) {
            (Some((first, _)), Some((_, year))) => format!("{first} {year}"),
            _ => who.to_string(),
        };
        let word = if r.reproduced {
            "reproduced"
        } else {
            "NOT reproduced"
        };
        s += &fit(format!(
            "  {} {:<13} {word:<14} {}",
            r.seed,
            clip(&who, 13),
            key_figure(r)
        ));
    }
    if reproductions.is_empty() {
        s += "  (none ran)\n";
    }
    s += "\n";
    s += &who_wins(report);
    let flagged = report.results.iter().filter(|r| r.flagged()).count();
    let collapsed = report.results.iter().filter(|r| r.collapsed).count();
    let busy = report.results.iter().filter(|r| r.noise.busy).count();
    s += &fit(format!(
        "rows: {}; {flagged} marked ??? (unfair, or beyond the CPUs), {collapsed} COLLAPSED{}",
        report.results.len(),
        if busy > 0 {
            format!(", {busy} busy")
        } else {
            String::new()
        }
    ));
    // Where to look next: the workload where a peer won most, the first seed not reproduced.
    let workload = crate::engine::suite::wins(report)
        .into_iter()
        .filter_map(|(w, cells)| {
            let worst = cells
                .iter()
                .filter(|c| !c.ours)
                .map(|c| c.ratio)
                .fold(0.0, f64::max);
            (worst > 0.0).then_some((w, worst))
        })
        .fold(None::<(String, f64)>, |best, c| match best {
            Some(b) if b.1 >= c.1 => Some(b),
            _ => Some(c),
        })
        .map_or_else(|| "mutex".to_string(), |(w, _)| w);
    let seed = reproductions
        .iter()
        .find(|r| !r.reproduced)
        .map_or(SEEDS[0], |r| r.seed.as_str());
    let next = [
        ("locklab --tables".to_string(), "every table of this run"),
        (
            format!("locklab reproduce {seed}"),
            "the seed's table in full",
        ),
        (
            format!("locklab bench --workload {workload} --json a.json"),
            "one workload in depth",
        ),
        (
            "locklab report --from a.json".to_string(),
            "that run as a page",
        ),
        (
            "locklab compare a.json b.json".to_string(),
            "two runs, row by row",
        ),
    ];
    s += "\nnext (in a checkout, `cargo run --release --` for `locklab`):\n";
    let w = next.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    for (cmd, what) in next {
        s += &fit(format!("  {cmd:<w$}  {what}"));
    }
    s += &format!("report: {path}\n");
    s
}

/// The who-wins table: a row per workload, a column per thread count, each cell `ours|peer LOCK xR`
/// (R = winner / loser, medians), from [`crate::engine::suite::wins`]; without the lock names when a row would
/// not fit 100 columns.
fn who_wins(report: &Report) -> String {
    let wins = crate::engine::suite::wins(report);
    let mut workloads: Vec<&str> = vec![];
    for r in &report.results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let mut s = String::from(
        "who wins where: our best lock vs the best peer (median ops/s; xR = winner / loser)\n",
    );
    if wins.is_empty() {
        return s + "  (no workload ran both one of ours and a peer)\n";
    }
    let mut threads: Vec<usize> = wins
        .iter()
        .flat_map(|(_, c)| c.iter().map(|c| c.threads))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let cells = || wins.iter().flat_map(|(_, c)| c.iter());
    let any_busy = cells().any(|c| c.busy);
    // Every cell busy: said once below, not in every cell.
    let all_busy = cells().all(|c| c.busy);
    let render = |named: bool| {
        let cell = |c: &crate::engine::suite::Win| {
            format!(
                "{}{} x{:.2}{}",
                if c.ours { "ours" } else { "peer" },
                if named {
                    format!(" {}", c.winner)
                } else {
                    String::new()
                },
                c.ratio,
                if c.busy && !all_busy { "*" } else { "" }
            )
        };
        let grid: Vec<Vec<String>> = wins
            .iter()
            .map(|(_, cells)| {
                threads
                    .iter()
                    .map(|t| {
                        cells
                            .iter()
                            .find(|c| c.threads == *t)
                            .map_or_else(|| "-".to_string(), cell)
                    })
                    .collect()
            })
            .collect();
        let heads: Vec<String> = threads
            .iter()
            .map(|t| format!("{t} thread{}", if *t == 1 { "" } else { "s" }))
            .collect();
        let widths: Vec<usize> = (0..threads.len())
            .map(|i| {
                grid.iter()
                    .map(|row| row[i].len())
                    .chain([heads[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |first: &str, cols: &[String]| {
            let mut l = format!("  {first:<11}");
            for (c, w) in cols.iter().zip(&widths) {
                l += &format!("  {c:<w$}");
            }
            l.trim_end().to_string() + "\n"
        };
        let mut t = line("workload", &heads);
        let mut rows = wins.iter().zip(&grid).peekable();
        for w in &workloads {
            match rows.peek() {
                Some(((name, _), row)) if name == w => {
                    t += &line(w, row);
                    rows.next();
                }
                _ => t += &line(w, &["(no peer ran here)".to_string()]),
            }
        }
        t
    };
    let named = render(true);
    if named.lines().all(|l| l.len() <= 100) {
        s += &named;
    } else {
        s += &render(false);
        s += "  (the winners' names: locklab --tables, or the report)\n";
    }
    if all_busy {
        s += "  (every row measured on a busy machine: the figures are not trustworthy)\n";
    } else if any_busy {
        s += "  * measured on a busy machine: not trustworthy\n";
    }
    s
}

/// The seed's key figure, from its verdict line: ours beside the seed's own. Falls back to the
/// verdict's first clause.
fn key_figure(r: &Reproduction) -> String {
    let v = r.verdict.as_str();
    let caps = |re: &str| {
        regex::Regex::new(re)
            .expect("a valid pattern")
            .captures(v)
            .map(|c| {
                c.iter()
                    .skip(1)
                    .map(|m| m.map_or("", |m| m.as_str()).to_string())
                    .collect::<Vec<_>>()
            })
    };
    let found = match r.seed.as_str() {
        "000" => caps(r"([\d.]+)x UP's time per write \(seed ([\d.]+)x")
            .map(|c| format!("SMP/UP time per write x{} (seed x{})", c[0], c[1])),
        "001" => caps(r"mutex-based lock ([\d.]+)x the non-spinning rwsem \(seed (\d+)x")
            .map(|c| format!("dbench Mason/rwsem x{} (seed x{})", c[0], c[1])),
        "002" => caps(
            r"lockref get\+put ([\d.]+)% at 1 thread -> ([\d.]+)% at 2 threads \(seed: (\d+)% -> (\d+)%",
        )
        .map(|c| {
            format!(
                "lockref share {}% -> {}% (seed {}% -> {}%)",
                c[0], c[1], c[2], c[3]
            )
        }),
        "003" => caps(r"left (\d+)% of the CPUs idle vs the mutex's (\d+)% \(seed: (\d+)%")
            .map(|c| format!("idle: rwsem {}% vs mutex {}% (seed {}%)", c[0], c[1], c[2])),
        "004" => caps(r"(\d+) procs: rcu scales x([\d.]+)( \?\?\?)?, base x([\d.]+)( \?\?\?)?")
            .map(|c| {
                format!(
                    "{} procs: rcu x{}{}, base x{}{}",
                    c[0], c[1], c[2], c[3], c[4]
                )
            })
            .or_else(|| {
                caps(r"rcu/base x([\d.]+) \(seed x([\d.]+)")
                    .map(|c| format!("rcu/base x{} (seed x{})", c[0], c[1]))
            }),
        _ => None,
    };
    found.unwrap_or_else(|| {
        let rest = v.split_once(": ").map_or(v, |(_, r)| r);
        rest.split(" (").next().unwrap_or(rest).to_string()
    })
}

/// `line` clipped to 80 columns, with a newline.
fn fit(line: String) -> String {
    clip(&line, 80) + "\n"
}

/// `s` cut to `n` characters, the last one `~` when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "~"
    }
}

/// Lines `s` takes on a terminal `cols` wide (each line at least one, long lines wrapped).
pub fn terminal_lines(s: &str, cols: usize) -> usize {
    s.lines()
        .map(|l| l.chars().count().div_ceil(cols.max(1)).max(1))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::reproduce::{
        call_rcu_scaling as s004, rwlock_unlock_cost as s000, rwsem_reader_spinning as s003,
    };
    use crate::engine::metrics::ResultRow;

    fn repro(seed: &str, title: &str, verdict: (bool, String)) -> Reproduction {
        Reproduction {
            seed: seed.into(),
            title: title.into(),
            figures: serde_json::Value::Null,
            table: String::new(),
            reproduced: verdict.0,
            verdict: verdict.1,
        }
    }

    /// The key figures come from the seeds' own verdict lines.
    #[test]
    fn key_figures_come_from_the_verdicts() {
        let r = repro(
            "000",
            "Morton 2003: x",
            s000::verdict(&[10.0, 30.0, 28.0, 26.0]),
        );
        let k = key_figure(&r);
        assert!(k.starts_with("SMP/UP time per write x3.00 (seed x"), "{k}");
        let rows = vec![
            s004::SeedRow {
                procs: 1,
                ours: vec![("base".into(), 10.0), ("rcu".into(), 9.0)],
                spread: vec![],
                seed: None,
            },
            s004::SeedRow {
                procs: 4,
                ours: vec![("base".into(), 20.0), ("rcu".into(), 27.0)],
                spread: vec![],
                seed: None,
            },
        ];
        let k = key_figure(&repro("004", "McKenney", s004::verdict_004(&rows, 16)));
        assert_eq!(k, "4 procs: rcu x3.00, base x2.00", "{k}");
        let k = key_figure(&repro(
            "003",
            "Chen",
            s003::verdict(&[]), // a required arm missing: the verdict's own words
        ));
        assert_eq!(k, "a required arm did not run", "{k}");
    }

    fn row(workload: &str, lock: &str, threads: usize, ops: f64) -> ResultRow {
        let mut r = ResultRow {
            workload: workload.into(),
            lock: lock.into(),
            threads,
            ..Default::default()
        };
        r.ops_per_sec.median = ops;
        r
    }

    /// A run's screen: every workload and thread count of the run, long names, many CPUs.
    fn run(workloads: usize, threads: &[usize], peer: &str, cpu: &str) -> String {
        let mut rep = Report::default();
        rep.machine.cpu_model = cpu.into();
        let names = crate::engine::workload::Workload::ALL;
        for w in names.iter().cycle().take(workloads) {
            for &t in threads {
                rep.results
                    .push(row(w.name(), "ticket", t, 10e6 * t as f64));
                rep.results.push(row(w.name(), peer, t, 20e6 / t as f64));
                rep.results.push(row(w.name(), "none", t, 90e6));
            }
        }
        let title = "Someone 2003: ".to_string() + &"a long title ".repeat(20);
        let seeds: Vec<_> = SEEDS
            .iter()
            .map(|s| repro(s, &title, (false, "not reproduced: ".to_string() + &title)))
            .collect();
        screen(
            &rep,
            &seeds,
            &format!("/{}/locklab-report.html", "deep/".repeat(10)),
        )
    }

    /// Whatever the run (workloads, thread counts, lock names, the CPU's name), the screen fits
    /// [`MAX_SCREEN_LINES`] lines of 80 columns, no line wider than 100, the report's path last.
    #[test]
    fn the_screen_fits_one_screen() {
        for workloads in [0, 1, 8] {
            for threads in [&[1][..], &[1, 2, 4], &[1, 2, 256]] {
                for peer in [
                    "std-mutex",
                    "tbb-queuing-rw-mutex",
                    "parking-lot-mutex-count",
                ] {
                    for cpu in ["", &"Intel(R) Xeon(R) Platinum 8480+ ".repeat(4)] {
                        let s = run(workloads, threads, peer, cpu);
                        let n = terminal_lines(&s, 80);
                        assert!(n <= MAX_SCREEN_LINES, "{n} lines:\n{s}");
                        let lines: Vec<&str> = s.lines().collect();
                        // Past the machine's lines and before the report's path, 100 columns.
                        assert!(
                            lines[2..lines.len() - 1]
                                .iter()
                                .all(|l| l.chars().count() <= 100),
                            "{s}"
                        );
                        assert!(s.lines().last().unwrap().starts_with("report: /"), "{s}");
                    }
                }
            }
        }
    }

    /// The who-wins table is the suite's `wins`: each workload's winner at each thread count, whoever
    /// it is, by how much.
    #[test]
    fn who_wins_names_the_winner_per_thread_count() {
        let s = run(2, &[1, 2, 4], "parking-lot-mutex", "cpu");
        let mutex = s
            .lines()
            .find(|l| l.trim_start().starts_with("mutex"))
            .unwrap();
        assert!(mutex.contains("peer parking-lot-mutex x2.00"), "{s}");
        assert!(mutex.contains("ours ticket x2.00"), "{s}");
        assert!(mutex.contains("ours ticket x8.00"), "{s}");
        assert!(s.contains("1 thread  ") && s.contains("4 threads"), "{s}");
        assert!(!s.contains("none"), "baselines never win: {s}");
        assert!(
            s.contains("locklab bench --workload mutex --json a.json"),
            "{s}"
        );
        assert!(s.contains("locklab reproduce 000"), "{s}");
    }

    /// A workload where no peer ran keeps its row, saying so; a busy run is said once.
    #[test]
    fn a_workload_without_peers_keeps_its_row() {
        let mut rep = Report {
            results: vec![
                row("mutex", "ticket", 1, 2e6),
                row("mutex", "std-mutex", 1, 1e6),
                row("rcu-sync", "rcu-memb", 1, 1e6),
            ],
            ..Default::default()
        };
        for r in &mut rep.results {
            r.noise.busy = true;
        }
        let s = who_wins(&rep);
        assert!(s.contains("ours ticket x2.00\n"), "{s}");
        assert!(s.contains("rcu-sync     (no peer ran here)"), "{s}");
        assert!(s.contains("every row measured on a busy machine"), "{s}");
        let r = repro(
            "004",
            "McKenney/Piggin 2009: x",
            (true, "reproduced: y".into()),
        );
        let s = screen(&rep, &[r], "/r.html");
        assert!(s.contains("  004 McKenney 2009 reproduced     y\n"), "{s}");
    }
}
