//! `locklab advise`: which lock wins where on this machine (the map of [`crate::engine::advice`]
//! measured over a grid), or, with `--from STAT.json`, the map's choice for each hot lock of a
//! program.

use crate::engine::advice::{Advice, Grid, from_processes, run};
use crate::engine::plan::{UsageError, number_list, thread_list};
use clap::Args;
use serde::Deserialize;

/// `locklab advise` options.
#[derive(Args, Debug, Clone)]
pub struct AdviseArgs {
    /// A small, short grid (15-30 s): threads 1 and max(2, CPUs); cs 0,200; reads 0,90.
    #[arg(long)]
    pub quick: bool,
    /// A program's lock statistics (`locklab run --stat-out F.json`): per hot lock (wait share,
    /// hold time, contention, read share) the map's choice among the preload's locks.
    #[arg(long, value_name = "STAT.json")]
    pub from: Option<String>,
    /// With --from: the map to read (an `advise --json` file) instead of a quick grid of the
    /// preload's choices measured now (~10 s; ~40 s with rwlocks).
    #[arg(long, value_name = "ADVICE.json", requires = "from")]
    pub map: Option<String>,
    /// Thread counts (default 1,2,2xCPUs); with --from, the program's threads (default: the most
    /// that took locks at once, from the statistics).
    #[arg(long, value_name = "LIST")]
    pub threads: Option<String>,
    /// Critical sections, ns (default 0,200,1000).
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub cs_ns: Option<String>,
    /// Read shares, % (default 0,50,90).
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub read_pct: Option<String>,
    /// Also write the map, the rules and every row as JSON here (`-`: standard output only).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
}

/// Runs `advise`: the map over the grid, or with `--from` the choices for a program's hot locks.
pub fn command(a: &AdviseArgs, cpus: usize) -> anyhow::Result<()> {
    match &a.from {
        Some(from) => from_command(
            from,
            a.map.as_deref(),
            a.threads.as_deref(),
            a.json.as_deref(),
        ),
        None => map_command(a, cpus),
    }
}

/// The grid from the flags (each `None`: the default; `quick` shrinks the defaults).
fn grid(a: &AdviseArgs, cpus: usize) -> Result<Grid, UsageError> {
    let (threads, cs, read, quick) = (
        a.threads.as_deref(),
        a.cs_ns.as_deref(),
        a.read_pct.as_deref(),
        a.quick,
    );
    Ok(Grid {
        threads: match threads {
            Some(t) => thread_list(t)?,
            None if quick => vec![1, 2.max(cpus)],
            None => crate::engine::plan::default_threads(cpus),
        },
        cs_ns: match cs {
            Some(c) => number_list("cs-ns", c, 0, crate::engine::plan::MAX_WORK_NS)?,
            None if quick => vec![0, 200],
            None => vec![0, 200, 1000],
        },
        read_pct: match read {
            Some(r) => number_list("read-pct", r, 0, 100)?
                .into_iter()
                .map(|v| v as u32)
                .collect(),
            None if quick => vec![0, 90],
            None => vec![0, 50, 90],
        },
    })
}

/// `locklab advise` without `--from`: runs the grid, prints the map and the rules, and writes the JSON.
fn map_command(a: &AdviseArgs, cpus: usize) -> anyhow::Result<()> {
    let grid = grid(a, cpus)?;
    let (quick, json) = (a.quick, a.json.as_deref());
    let to_stdout = json == Some("-");
    let a = run(
        &grid,
        quick,
        to_stdout,
        &crate::engine::runner::SystemClock::default(),
    )?;
    let text = serde_json::to_string_pretty(&a)? + "\n";
    match json {
        Some("-") => print!("{text}"),
        Some(f) => std::fs::write(f, text).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?,
        None => {}
    }
    Ok(())
}

/// `locklab advise --from STAT.json`: reads a program's statistics (`run --stat-out`), prints each
/// hot lock's shape and the map's choice for it, and the process-wide choice they add up to.
fn from_command(
    stat: &str,
    map: Option<&str>,
    threads: Option<&str>,
    json: Option<&str>,
) -> anyhow::Result<()> {
    let bad = |m: String| -> anyhow::Error { UsageError(m).into() };
    let text = std::fs::read_to_string(stat).map_err(|e| bad(format!("--from {stat}: {e}")))?;
    #[derive(Deserialize)]
    struct StatFile {
        processes: Vec<crate::external::lockstat::ProcessStat>,
    }
    let file: StatFile = serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "--from {stat}: not the lock statistics of `locklab run --stat-out` ({e})"
        ))
    })?;
    let advice: Option<Advice> = match map {
        None => None,
        Some(m) => {
            let t = std::fs::read_to_string(m).map_err(|e| bad(format!("--map {m}: {e}")))?;
            Some(serde_json::from_str(&t).map_err(|e| {
                bad(format!(
                    "--map {m}: not the JSON of `locklab advise --json` ({e})"
                ))
            })?)
        }
    };
    let threads = match threads {
        None => None,
        Some(t) => match t.parse::<usize>() {
            Ok(n) if (1..=1024).contains(&n) => Some(n),
            _ => {
                return Err(bad(format!(
                    "--threads: `{t}` is not a thread count (1-1024)"
                )));
            }
        },
    };
    let mut processes = file.processes;
    for p in &processes {
        p.check().map_err(|e| bad(format!("--from {stat}: {e}")))?;
    }
    crate::external::lockstat::symbolise(&mut processes);
    let p = from_processes(
        &processes,
        advice
            .as_ref()
            .map(|a| (a, map.unwrap_or_default().to_string())),
        threads,
        json == Some("-"),
    )?;
    match json {
        Some("-") => println!("{}", serde_json::to_string_pretty(&p)?),
        Some(f) => {
            print!("{}", p.render());
            std::fs::write(f, serde_json::to_string_pretty(&p)? + "\n")
                .map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?
        }
        None => print!("{}", p.render()),
    }
    Ok(())
}
