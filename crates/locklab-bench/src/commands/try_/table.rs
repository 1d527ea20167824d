//! The table: per choice the median, spread, speed-up over glibc and verdict, and its top
//! contended call site.

use super::*;

/// Prints the table (and each row's top contended site); the rows, and the choices that failed.
pub(super) fn table(plan: &TryPlan, m: &Measured) -> (Vec<AppRow>, Vec<String>) {
    let unit = if plan.uses_rate() { "rate" } else { "s" };
    let higher = plan.uses_rate();
    let fmt = |v: f64| {
        if higher {
            crate::engine::output::human_rate(v)
        } else {
            format!("{v:.3} s")
        }
    };
    let g = spread(&m.arms[0].values);
    println!(
        "\n{:<18} {:>12}  {:>25}  {:>9}  verdict",
        "lock", "median", "spread", "speed-up"
    );
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (i, choice) in m.choices.iter().enumerate() {
        let arm = &m.arms[i];
        let s = spread(&arm.values);
        let ratio = match (higher, g.0 > 0.0 && s.0 > 0.0) {
            (_, false) => 0.0,
            (true, true) => s.0 / g.0,
            (false, true) => g.0 / s.0,
        };
        let v = if i == 0 {
            "reference".to_string()
        } else {
            let runs = arm.values.len().min(m.arms[0].values.len());
            // Time: lower is better, so the spreads are compared as speeds.
            let (ours, base) = if higher {
                ((s.1, s.2), (g.1, g.2))
            } else {
                ((-s.2, -s.1), (-g.2, -g.1))
            };
            verdict(ours, base, runs).to_string()
        };
        if arm.failure.is_some() {
            failed.push(choice.label.clone());
        }
        let (median, range, speedup) = if arm.values.is_empty() {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            (
                fmt(s.0),
                format!("[{} - {}]", fmt(s.1), fmt(s.2)),
                format!("{ratio:.2}x"),
            )
        };
        println!(
            "{:<18} {:>12}  {:>25}  {:>9}  {}",
            choice.label,
            median,
            range,
            speedup,
            match &arm.failure {
                None => v.clone(),
                Some(f) => format!("FAILED: {f}"),
            }
        );
        if let Some(top) = arm
            .top
            .first()
            .filter(|t| t["contentions"].as_u64() > Some(0))
        {
            println!(
                "{:<18} top lock: {} contentions, {} waiting, at {}",
                "",
                top["contentions"],
                crate::external::lockstat::ns_text(top["wait_ns_total"].as_u64().unwrap_or(0)),
                top["site"].as_str().unwrap_or("?")
            );
        }
        rows.push(AppRow {
            app: plan.cmd[0].clone(),
            lock: choice.label.clone(),
            threads: 0,
            unit: unit.into(),
            higher_is_better: higher,
            runs: arm.values.clone(),
            median: s.0,
            min: s.1,
            max: s.2,
            ratio_vs_glibc: ratio,
            verdict: if arm.failure.is_some() {
                "failed".into()
            } else {
                v
            },
            verified: arm.failure.is_none(),
            failure: arm.failure.clone(),
            top_locks: arm.top.clone(),
        });
    }
    if !plan.rwlocks_explicit && !m.takes_rwlocks {
        println!("(no rwlock rows: the program took no pthread rwlock under glibc)");
    }
    (rows, failed)
}
