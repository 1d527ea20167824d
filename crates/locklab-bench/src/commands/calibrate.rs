//! `locklab calibrate`: the machine's physical limits ([`crate::engine::limits`]) printed and, on
//! request, written as JSON, and this machine's description for `predict --machine`.

use crate::engine::limits::{LINE_ROUNDS, calibrate, machine};
use clap::Args;

/// `locklab calibrate` options.
#[derive(Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// Also write them as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
    /// Also write this machine's description for `predict --machine F` (TOML) to this file.
    #[arg(long, value_name = "F")]
    pub describe: Option<String>,
}

/// Runs `calibrate`: the limits, then the description if `--describe` asks for one.
pub fn command(a: &CalibrateArgs) -> anyhow::Result<()> {
    print_limits(a.json.as_deref())?;
    if let Some(f) = &a.describe {
        let m = crate::engine::sim::describe_this();
        std::fs::write(f, m.to_toml()).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?;
        println!("machine description written to {f} (predict --machine {f})");
    }
    Ok(())
}

/// `locklab calibrate [--json F]`: prints the machine and its limits (and writes them as JSON).
fn print_limits(json: Option<&str>) -> anyhow::Result<()> {
    let report = crate::engine::output::Report {
        locklab_version: env!("CARGO_PKG_VERSION").into(),
        machine: machine(),
        calibration: calibrate(),
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
        LINE_ROUNDS,
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
    match json {
        Some("-") => println!("{}", serde_json::to_string_pretty(&report)?),
        Some(f) => {
            print!("{text}");
            std::fs::write(f, serde_json::to_string_pretty(&report)? + "\n")
                .map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?;
        }
        None => print!("{text}"),
    }
    Ok(())
}
