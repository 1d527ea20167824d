//! Markdown: one table per workload, for reports and issue notes.

use super::Report;
use super::table::group;
use std::fmt::Write;

/// The whole Markdown document.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let m = &report.machine;
    let c = &report.calibration;
    let _ = writeln!(out, "# locklab {}\n", report.locklab_version);
    let _ = writeln!(
        out,
        "{} ({} logical CPUs), kernel {}, {}. Atomic RMW {:.1} ns, CAS {:.1} ns, line transfer {:.0} ns, futex wake {:.0} ns.\n",
        m.cpu_model,
        m.logical_cpus,
        m.kernel,
        m.rustc,
        c.atomic_rmw_ns,
        c.cas_ns,
        c.line_transfer_ns,
        c.futex_wake_ns
    );
    let mut workloads: Vec<&str> = vec![];
    for r in &report.results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    for w in workloads {
        let rows: Vec<_> = report.results.iter().filter(|r| r.workload == w).collect();
        let f = rows[0];
        let read = f
            .read_pct
            .map(|p| format!(", read {p}%"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "## {w} (cs {} ns, think {} ns{read})\n",
            f.cs_ns, f.think_ns
        );
        let _ = writeln!(
            out,
            "| lock | threads | ops/s | scaling | idle % | p50 acq ns | p99 acq ns | fairness | limit ratio |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.0} | {} | {} | {:.2}{} | {:.2} |",
                r.lock,
                r.threads,
                group(r.ops_per_sec.median),
                r.scaling.map(|s| format!("x{s:.2}")).unwrap_or_default(),
                r.idle_pct,
                r.acquire_ns.p50,
                r.acquire_ns.p99,
                r.jain_fairness,
                if r.flagged() { " ???" } else { "" },
                r.limit.ratio
            );
        }
        out.push('\n');
    }
    out
}
