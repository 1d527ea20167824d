//! `locklab`: parses the command line and dispatches to the command's module (README, docs/lab.md).

use clap::Parser;
use locklab_bench::cli::{Cli, Command};
use locklab_bench::commands::{
    advise, apps, bench, calibrate, compare, default_job, list, predict, report, reproduce, run,
    torture, try_,
};
use locklab_bench::engine::runner::{SystemClock, allowed_cpus};
use locklab_bench::usage::UsageError;
use std::process::ExitCode;

fn run(cli: Cli) -> anyhow::Result<()> {
    let cpus = allowed_cpus().len();
    match cli.command {
        None => {
            default_job::default_job("locklab-report.html", cli.tables, &SystemClock::default())
        }
        Some(Command::List) => {
            list::command();
            Ok(())
        }
        Some(Command::Calibrate(a)) => calibrate::command(&a),
        Some(Command::Predict(a)) => predict::command(&a),
        Some(Command::Bench(a)) => bench::command(&a, cpus),
        Some(Command::Torture(a)) => torture::command(&a, cpus),
        Some(Command::Compare(a)) => compare::command(&a),
        Some(Command::Reproduce(a)) => reproduce::command(&a),
        Some(Command::Advise(a)) => advise::command(&a, cpus),
        Some(Command::Run(a)) => run::command(a),
        Some(Command::Try(a)) => try_::command(&try_::TryPlan::try_from(a)?),
        Some(Command::Apps(a)) => apps::command(&a.plan(cpus)?),
        Some(Command::Report(a)) => report::command(&a),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("locklab: error: {e}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
