//! The default job (`cargo run --release`, `locklab` with no command): the story in one run. The
//! five seeds' experiments (quick) with their verdicts, then every workload over every lock and peer
//! (the who-wins summary and the tables), a recap of the verdicts, and `locklab-report.html` (the
//! page of all of it) written where asked, its path printed last.

use crate::commands::report::{self, RunDoc};
use crate::commands::reproduce::{self, SEEDS};
use crate::engine::plan::plan_default;
use crate::engine::runner::{Clock, allowed_cpus};

/// Runs the default job and writes its report to `out`.
pub fn default_job(out: &str, clock: &dyn Clock) -> anyhow::Result<()> {
    println!(
        "locklab: the seeds' experiments on this machine (quick), then every workload over every lock and peer.\n"
    );
    let repro = reproduce::run(&SEEDS, true, false, clock)?;
    let report = crate::engine::suite::run(&plan_default(allowed_cpus().len()), clock)?;
    println!("\nthe seeds on this machine:");
    for r in &repro.reproductions {
        let word = if r.reproduced {
            "reproduced"
        } else {
            "not reproduced"
        };
        println!("  seed {}: {word:<15} {}", r.seed, r.title);
    }
    let doc = RunDoc {
        report,
        reproductions: repro.reproductions,
        grid: None,
        cells: vec![],
        rules: vec![],
        apps: vec![],
        source: "the default job".into(),
        predicted: false,
    };
    report::write(out, &report::render(&[doc])?)?;
    let path = std::fs::canonicalize(out).unwrap_or_else(|_| out.into());
    println!("\nreport: {}", path.display());
    Ok(())
}
