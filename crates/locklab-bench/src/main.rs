//! `locklab`: parses the command line and dispatches to the command's module (README, docs/lab.md).

use clap::Parser;
use locklab_bench::cli::{Cli, Command, plan_bench, plan_torture};
use locklab_bench::plan::UsageError;
use locklab_bench::runner::{SystemClock, allowed_cpus};
use locklab_bench::{
    advise, apps, bench, calibrate, compare, list, predict, preload, report, reproduce, story,
    torture, try_cmd,
};
use std::process::ExitCode;

fn run(cli: Cli) -> anyhow::Result<()> {
    let cpus = allowed_cpus().len();
    match cli.command {
        None => story::default_job("locklab-report.html", cli.tables, &SystemClock::default())?,
        Some(Command::Report { from, out }) if from.is_empty() => {
            story::default_job(&out, cli.tables, &SystemClock::default())?
        }
        Some(Command::Report { from, out }) => report::command(&from, &out)?,
        Some(Command::List) => list::command(),
        Some(Command::Calibrate { json, describe }) => {
            calibrate::command(json.as_deref())?;
            if let Some(f) = describe {
                let m = predict::describe_this();
                std::fs::write(&f, m.to_toml())
                    .map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?;
                println!("machine description written to {f} (predict --machine {f})");
            }
        }
        Some(Command::Predict {
            machine,
            workload,
            locks,
            threads,
            cs_ns,
            read_pct,
            think_ns,
            duration_ms,
            seed,
            self_check,
            validate,
            json,
        }) => {
            if self_check {
                predict::self_check(json.as_deref())?
            } else if validate {
                let given = [
                    ("--workload", workload.is_some()),
                    ("--locks", locks.is_some()),
                    ("--threads", threads.is_some()),
                    ("--cs-ns", cs_ns.is_some()),
                    ("--think-ns", think_ns.is_some()),
                    ("--read-pct", read_pct.is_some()),
                    ("--duration-ms", duration_ms.is_some()),
                    ("--seed", seed.is_some()),
                ];
                if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                    return Err(UsageError(format!(
                        "{flag}: --validate runs the published workloads (only --machine and --json apply)"
                    ))
                    .into());
                }
                locklab_bench::predict_validation::command(machine.as_deref(), json.as_deref())?
            } else {
                predict::command(&predict::PredictPlan::parse(
                    machine,
                    workload.as_deref(),
                    locks.as_deref(),
                    threads.as_deref(),
                    cs_ns.as_deref(),
                    think_ns.as_deref(),
                    read_pct.as_deref(),
                    duration_ms.as_deref(),
                    seed.as_deref(),
                    json,
                )?)?
            }
        }
        Some(Command::Bench(args)) => bench::command(&plan_bench(&args, cpus)?)?,
        Some(Command::Compare {
            old,
            new,
            fail_if_slower,
        }) => compare::command(&old, &new, fail_if_slower.as_deref())?,
        Some(Command::Reproduce {
            seed,
            quick,
            predict,
            json,
        }) => reproduce::command(&seed, quick, predict, json.as_deref())?,
        Some(Command::Advise {
            from: Some(from),
            map,
            threads,
            quick: _,
            cs_ns: _,
            read_pct: _,
            json,
        }) => advise::from_command(&from, map.as_deref(), threads.as_deref(), json.as_deref())?,
        Some(Command::Advise {
            quick,
            threads,
            cs_ns,
            read_pct,
            json,
            ..
        }) => advise::command(
            quick,
            threads.as_deref(),
            cs_ns.as_deref(),
            read_pct.as_deref(),
            json.as_deref(),
            cpus,
        )?,
        Some(Command::Torture(args)) => torture::command(&plan_torture(&args, cpus)?)?,
        Some(Command::Run {
            mutex,
            rwlock,
            spin,
            stat,
            stat_out,
            lockdep,
            lockdep_out,
            cmd,
        }) => {
            let choices = preload::Choices::parse(mutex, rwlock, spin)?;
            let lockdep = preload::Lockdep::parse(lockdep, lockdep_out)?;
            let stat = stat || stat_out.is_some();
            if stat || lockdep.is_some() {
                preload::run_supervised(
                    &choices,
                    stat,
                    stat_out.as_deref(),
                    lockdep.as_ref(),
                    &cmd,
                )?
            } else {
                preload::run(&choices, &cmd)?
            }
        }
        Some(Command::Try {
            locks,
            rwlocks,
            repeats,
            rate,
            same_output,
            setup,
            setup_timeout,
            json,
            cmd,
        }) => try_cmd::command(&try_cmd::TryPlan::parse(
            locks.as_deref(),
            rwlocks.as_deref(),
            repeats.as_deref(),
            rate.as_deref(),
            same_output,
            setup,
            setup_timeout.as_deref(),
            json,
            cmd,
        )?)?,
        Some(Command::Apps {
            quick,
            spec,
            apps: list,
            locks,
            threads,
            repeats,
            json,
        }) => apps::command(&apps::AppsPlan::parse(
            quick,
            &spec,
            list.as_deref(),
            locks.as_deref(),
            threads.as_deref(),
            repeats.as_deref(),
            json,
            cpus,
        )?)?,
    }
    Ok(())
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
