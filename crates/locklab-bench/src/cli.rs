//! The command line: the top-level parser and the subcommands, each holding its command's own
//! arguments (`commands::X::XArgs`, where each is turned into its plan). Every bad value gets one
//! clear line naming it and the valid choices, and exit status 2.

use crate::commands::advise::AdviseArgs;
use crate::commands::apps::AppsArgs;
use crate::commands::bench::BenchArgs;
use crate::commands::calibrate::CalibrateArgs;
use crate::commands::compare::CompareArgs;
use crate::commands::predict::PredictArgs;
use crate::commands::report::ReportArgs;
use crate::commands::reproduce::ReproduceArgs;
use crate::commands::run::RunArgs;
use crate::commands::torture::TortureArgs;
use crate::commands::try_::TryArgs;
use clap::{Parser, Subcommand};

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
    /// Every lock and workload, one a line: name, kind (ours|peer|baseline|load), summary.
    List,
    /// Measure the machine's physical limits.
    Calibrate(CalibrateArgs),
    /// The lab's table computed on a simulated machine (locklab's real lock code on a modelled
    /// memory system and scheduler), every row marked predicted. Machines: this (calibrated now),
    /// opteron-48 (4 sockets x 2 dies x 6 cores), opteron-8x6 (8 chips x 6 cores), opteron-2s8c
    /// (2 x 2 x 4), xeon-2s (2 x 10), or a
    /// description file (see `calibrate --describe`).
    Predict(Box<PredictArgs>),
    /// Run one workload over chosen locks and thread counts.
    Bench(Box<BenchArgs>),
    /// locktorture for every primitive: invariants checked under stressors; exit 1 on any failure.
    Torture(TortureArgs),
    /// Compare two `--json` runs row by row: ratio of medians and a noise-aware verdict.
    Compare(CompareArgs),
    /// A seed's experiment on this machine: the seed's table with its figures beside ours, and a
    /// verdict.
    Reproduce(ReproduceArgs),
    /// Which lock wins where on this machine: the `rw` workload over a grid of threads x critical
    /// section (think time equal to it) x read share, every lock and peer; the map and rules of thumb.
    /// With `--from STAT.json`: the map's choice for each hot lock of a program, and the process-wide
    /// choice they add up to.
    Advise(AdviseArgs),
    /// Run an unmodified program on locklab's locks: `liblocklab_pthread.so` preloaded, the choices
    /// set, its exit status passed through.
    Run(RunArgs),
    /// Would another lock make YOUR program faster? Runs CMD under glibc and each choice, repeats
    /// interleaved, every run verified against glibc's (exit status; with --same-output, stdout);
    /// median, spread, speed-up, verdict, top contended sites, the prediction from the program's lock
    /// statistics, and what to set.
    Try(TryArgs),
    /// Real programs (Tokyo Cabinet, Kyoto Cabinet, memcached, sysbench, pigz) under glibc's locks and
    /// ours, repeats interleaved, every run verified; median, spread, ratio to glibc and a verdict.
    Apps(AppsArgs),
    /// One self-contained HTML page (inline SVG plots) of runs the lab wrote as JSON (`--from`,
    /// required: `bench --json`, `reproduce --json`, ...).
    Report(ReportArgs),
}
