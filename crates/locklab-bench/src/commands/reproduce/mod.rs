//! `locklab reproduce`: a seed's experiment on this machine, printed in the seed's own table shape with
//! the seed's published figures beside ours, and a verdict computed from the two.
//!
//! The experiments: [`rwlock_unlock_cost`] (Morton 2003, the one-byte write path: UP vs SMP builds, rwlock vs
//! spinlock), [`adaptive_spinning`] (Mason 2011, a B-tree with a lock per node: mutex-based rwlock vs rwsem),
//! [`lockref`] (Torvalds 2013, a stat()-like path lookup: mount lock and dentry reference), [`rwsem_reader_spinning`]
//! (Chen 2016, a directory's lock under lookups and creates/unlinks: idle CPUs) and [`call_rcu_scaling`]
//! (McKenney/Piggin 2009, call_rcu scalability). [`model`] holds what they share.
//!
//! The entry points other commands may use (the default job does): [`SEEDS`] and [`run`].

pub mod adaptive_spinning;
pub mod call_rcu_scaling;
pub mod lockref;
pub mod model;
pub mod predicted;
pub mod rwlock_unlock_cost;
pub mod rwsem_reader_spinning;

use crate::engine::output::Report;
pub use crate::engine::output::reproduction::Reproduction;
use crate::engine::plan::UsageError;
use crate::engine::runner::{Clock, TrialSpec};
use clap::Args;
use serde::Serialize;
use std::io::IsTerminal;

/// The seeds `reproduce` knows (summarised in `docs/seeds.md`), in order.
pub const SEEDS: [&str; 5] = ["000", "001", "002", "003", "004"];

/// What `--json` writes.
#[derive(Debug, Serialize)]
pub struct ReproduceReport {
    /// The run's machine, limits and the lab rows measured for the reproductions (seed 004's).
    #[serde(flatten)]
    pub lab: Report,
    /// One entry per seed run.
    pub reproductions: Vec<Reproduction>,
}

/// A model's trial: `threads` running its own op (no calibrated cs or think: the models carry their
/// own work), 20 ms of warm-up and a window of `window_ms`, pinned round-robin to `cpus`.
pub fn model_spec(threads: usize, window_ms: u64, cpus: Vec<usize>) -> TrialSpec {
    TrialSpec {
        threads,
        cs_loops: 0,
        think_loops: 0,
        read_pct: 0,
        writers: 0,
        condvar: Default::default(),
        warmup_ns: 20_000_000,
        duration_ns: window_ms * 1_000_000,
        cpus,
        lock_count: 1,
    }
}

/// Parses the seed argument: one seed or `all`.
pub fn seeds(arg: &str) -> Result<Vec<&'static str>, UsageError> {
    if arg == "all" {
        return Ok(SEEDS.to_vec());
    }
    match SEEDS.iter().find(|s| **s == arg) {
        Some(s) => Ok(vec![s]),
        None => Err(UsageError(format!(
            "reproduce: unknown seed '{arg}' (valid: {}, all)",
            SEEDS.join(", ")
        ))),
    }
}

/// Runs the asked seeds; prints each table and verdict (unless `quiet`); returns them with the lab
/// rows.
pub fn run(
    which: &[&str],
    quick: bool,
    quiet: bool,
    clock: &dyn Clock,
) -> anyhow::Result<ReproduceReport> {
    let mut lab = Report {
        locklab_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: crate::engine::limits::machine(),
        calibration: Default::default(),
        results: vec![],
    };
    let mut out = vec![];
    // A bar on a terminal only (stderr), suspended while a table prints.
    let bar = if !quiet && std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(which.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "reproduce {pos}/{len} [{bar:30}] seed {msg} {elapsed}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    for seed in which {
        bar.set_message(seed.to_string());
        let r = match *seed {
            "000" => rwlock_unlock_cost::run(quick, clock),
            "001" => adaptive_spinning::run(quick, clock),
            "002" => lockref::run(quick, clock),
            "003" => rwsem_reader_spinning::run(quick, clock),
            "004" => {
                let (report, r) = call_rcu_scaling::run(quick, clock)?;
                lab.calibration = report.calibration;
                lab.results.extend(report.results);
                r
            }
            s => unreachable!("seed {s} passed `seeds` but has no experiment"),
        };
        bar.inc(1);
        if !quiet {
            bar.suspend(|| {
                print!("{}", r.table);
                println!("verdict: {}\n", r.verdict);
            });
        }
        out.push(r);
    }
    bar.finish_and_clear();
    Ok(ReproduceReport {
        lab,
        reproductions: out,
    })
}

/// `locklab reproduce` options.
#[derive(Args, Debug, Clone)]
pub struct ReproduceArgs {
    /// 000, 001, 002, 003, 004 or all.
    #[arg(value_name = "SEED", default_value = "all")]
    pub seed: String,
    /// Short windows (about 10 s a seed).
    #[arg(long)]
    pub quick: bool,
    /// Predict instead of measuring: the seed's experiment on a simulated machine of the seed's
    /// own size (001: 4 threads on xeon-2s; 003: every core of xeon-2s and 4x as many threads;
    /// 004: 1-8 threads on the 2-socket 8-core opteron-2s8c), beside the seed's figures.
    #[arg(long)]
    pub predict: bool,
    /// Also write the reproductions and their lab rows as JSON here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
}

/// Runs `reproduce` on its arguments.
pub fn command(a: &ReproduceArgs) -> anyhow::Result<()> {
    reproduce(&a.seed, a.quick, a.predict, a.json.as_deref())
}

/// `locklab reproduce SEED [--quick] [--json F]`: runs the seeds' experiments, prints each, and writes
/// the JSON.
fn reproduce(seed: &str, quick: bool, predict: bool, json: Option<&str>) -> anyhow::Result<()> {
    let seeds = seeds(seed)?;
    if predict {
        return predicted::command(&seeds, quick, json);
    }
    let to_stdout = json == Some("-");
    let r = run(
        &seeds,
        quick,
        to_stdout,
        &crate::engine::runner::SystemClock::default(),
    )?;
    let text = serde_json::to_string_pretty(&r)? + "\n";
    match json {
        Some("-") => print!("{text}"),
        Some(f) => std::fs::write(f, text).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?,
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_arguments() {
        assert_eq!(seeds("004").unwrap(), vec!["004"]);
        assert_eq!(
            seeds("all").unwrap(),
            vec!["000", "001", "002", "003", "004"]
        );
        assert!(seeds("9").unwrap_err().0.contains("unknown seed '9'"));
    }
}
