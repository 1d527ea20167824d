//! `locklab reproduce`: a seed's experiment on this machine, printed in the seed's own table shape with
//! the seed's published figures beside ours, and a verdict computed from the two.
//!
//! The experiments: [`s000`] (Morton 2003, the one-byte write path: UP vs SMP builds, rwlock vs
//! spinlock), [`s001`] (Mason 2011, a B-tree with a lock per node: mutex-based rwlock vs rwsem),
//! [`s002`] (Torvalds 2013, a stat()-like path lookup: mount lock and dentry reference), [`s003`]
//! (Chen 2016, a directory's lock under lookups and creates/unlinks: idle CPUs) and [`s004`]
//! (McKenney/Piggin 2009, call_rcu scalability). [`model`] holds what they share.

pub mod model;
pub mod predicted;
pub mod s000;
pub mod s001;
pub mod s002;
pub mod s003;
pub mod s004;

use crate::output::Report;
use crate::plan::UsageError;
use crate::runner::{Clock, TrialSpec};
use serde::{Deserialize, Serialize};
use std::io::IsTerminal;

/// The seeds `reproduce` knows (`../shared/seeds/` of the repository's parent), in order.
pub const SEEDS: [&str; 5] = ["000", "001", "002", "003", "004"];

/// One reproduction's result (the `reproductions` entries of `--json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Reproduction {
    /// `004`
    pub seed: String,
    /// What the seed measured.
    pub title: String,
    /// The seed's figures and ours, in the seed's shape (see each seed's module).
    pub figures: serde_json::Value,
    /// The table as printed.
    pub table: String,
    /// `true` when every claim of the seed held here.
    pub reproduced: bool,
    /// One line: the seed's claims, our figures for each, and what differs.
    pub verdict: String,
}

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
        machine: crate::calibrate::machine(),
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
            "000" => s000::run(quick, clock),
            "001" => s001::run(quick, clock),
            "002" => s002::run(quick, clock),
            "003" => s003::run(quick, clock),
            "004" => {
                let (report, r) = s004::run(quick, clock)?;
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

/// `locklab reproduce SEED [--quick] [--json F]`: runs the seeds' experiments, prints each, and writes
/// the JSON.
pub fn command(seed: &str, quick: bool, predict: bool, json: Option<&str>) -> anyhow::Result<()> {
    let seeds = seeds(seed)?;
    if predict {
        return predicted::command(&seeds, quick, json);
    }
    let to_stdout = json == Some("-");
    let r = run(
        &seeds,
        quick,
        to_stdout,
        &crate::runner::SystemClock::default(),
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
