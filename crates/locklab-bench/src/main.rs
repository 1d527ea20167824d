//! `locklab`: see the README and lab.md.

use clap::Parser;
use locklab_bench::cli::{Cli, Command, UsageError, plan_bench, plan_torture};
use locklab_bench::runner::{SystemClock, allowed_cpus};
use locklab_bench::{calibrate, locks, suite, workload::Workload};
use std::process::ExitCode;

fn run(cli: Cli) -> anyhow::Result<()> {
    let cpus = allowed_cpus().len();
    match cli.command {
        None => locklab_bench::story::default_job("locklab-report.html", &SystemClock::default())?,
        Some(Command::Report { from, out }) => {
            if from.is_empty() {
                locklab_bench::story::default_job(&out, &SystemClock::default())?;
            } else {
                let docs = from
                    .iter()
                    .map(|f| locklab_bench::report::html::load(f))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                locklab_bench::report::html::write(
                    &out,
                    &locklab_bench::report::html::render(&docs)?,
                )?;
                let path = std::fs::canonicalize(&out).unwrap_or_else(|_| out.clone().into());
                println!("report: {}", path.display());
            }
        }
        Some(Command::List) => {
            for l in locks::registry() {
                let mut runs: Vec<&str> = Workload::ALL
                    .iter()
                    .filter(|w| l.supports(**w))
                    .map(|w| w.name())
                    .collect();
                runs.sort_unstable();
                let runs = match l.unavailable {
                    Some(u) => format!("unavailable: {}", u.why),
                    None => runs.join(","),
                };
                println!("{:<26}{:<10}{}  [{runs}]", l.name, l.kind.name(), l.summary);
            }
            for w in Workload::ALL {
                println!("{:<26}{:<10}{}", w.name(), "load", w.summary());
            }
        }
        Some(Command::Calibrate { json }) => {
            let report = locklab_bench::report::Report {
                locklab_version: env!("CARGO_PKG_VERSION").into(),
                machine: calibrate::machine(),
                calibration: calibrate::calibrate(),
                results: vec![],
            };
            let (m, c) = (&report.machine, &report.calibration);
            let text = format!(
                "cpu_model         {}\nlogical_cpus      {}\nkernel            {}\nrustc             {}\natomic_rmw_ns     {:.2}\ncas_ns            {:.2}\nline_transfer_ns  {:.1} (best of {} rounds; median {:.1}; {})\nfutex_wake_ns     {:.0}\n",
                m.cpu_model,
                m.logical_cpus,
                m.kernel,
                m.rustc,
                c.atomic_rmw_ns,
                c.cas_ns,
                c.line_transfer_ns,
                locklab_bench::calibrate::LINE_ROUNDS,
                c.line_transfer_median_ns,
                if c.line_transfer_pinned {
                    "threads pinned to two CPUs"
                } else {
                    "NOT pinned to two CPUs: not a transfer between CPUs"
                },
                c.futex_wake_ns
            );
            if c.line_transfer_median_ns > 2.0 * c.line_transfer_ns {
                eprintln!(
                    "locklab: warning: line-transfer rounds spread {:.0}..{:.0} ns: the machine was busy",
                    c.line_transfer_ns, c.line_transfer_median_ns
                );
            }
            match json.as_deref() {
                Some("-") => println!("{}", serde_json::to_string_pretty(&report)?),
                Some(f) => {
                    print!("{text}");
                    std::fs::write(f, serde_json::to_string_pretty(&report)? + "\n")
                        .map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?;
                }
                None => print!("{text}"),
            }
        }
        Some(Command::Bench(args)) => {
            let plan = plan_bench(&args, cpus)?;
            suite::run(&plan, &SystemClock::default())?;
        }
        Some(Command::Compare {
            old,
            new,
            fail_if_slower,
        }) => {
            let budget = match fail_if_slower {
                Some(p) => Some(locklab_bench::cli::number("fail-if-slower", &p, 0, 100)? as f64),
                None => None,
            };
            let (old, new) = (
                locklab_bench::compare::load(&old)?,
                locklab_bench::compare::load(&new)?,
            );
            let (rows, unmatched) = locklab_bench::compare::compare(&old, &new);
            print!("{}", locklab_bench::compare::render(&rows, &unmatched));
            if let Some(pct) = budget {
                let bad = locklab_bench::compare::regressions(&rows, pct);
                if !bad.is_empty() {
                    return Err(anyhow::anyhow!(
                        "{} row(s) slower than the old run by more than {pct}% (beyond noise)",
                        bad.len()
                    ));
                }
            }
        }
        Some(Command::Reproduce { seed, quick, json }) => {
            let seeds = locklab_bench::reproduce::seeds(&seed)?;
            let to_stdout = json.as_deref() == Some("-");
            let r =
                locklab_bench::reproduce::run(&seeds, quick, to_stdout, &SystemClock::default())?;
            let text = serde_json::to_string_pretty(&r)? + "\n";
            match json.as_deref() {
                Some("-") => print!("{text}"),
                Some(f) => {
                    std::fs::write(f, text).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?
                }
                None => {}
            }
        }
        Some(Command::Advise {
            quick,
            threads,
            cs_ns,
            read_pct,
            json,
        }) => {
            let grid = locklab_bench::advise::grid(
                threads.as_deref(),
                cs_ns.as_deref(),
                read_pct.as_deref(),
                quick,
                cpus,
            )?;
            let to_stdout = json.as_deref() == Some("-");
            let a = locklab_bench::advise::run(&grid, quick, to_stdout, &SystemClock::default())?;
            let text = serde_json::to_string_pretty(&a)? + "\n";
            match json.as_deref() {
                Some("-") => print!("{text}"),
                Some(f) => {
                    std::fs::write(f, text).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?
                }
                None => {}
            }
        }
        Some(Command::Torture(args)) => {
            let plan = plan_torture(&args, cpus)?;
            if !locklab_bench::torture::run(&plan)? {
                return Err(anyhow::anyhow!(
                    "torture: invariants failed (lines marked !!!)"
                ));
            }
        }
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
