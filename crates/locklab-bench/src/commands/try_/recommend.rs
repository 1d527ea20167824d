//! The recommendation: what to set, or why glibc stays.

use super::*;

/// The recommendation: the fastest choice that is faster beyond noise, or why glibc stays.
pub(super) fn recommend(r: &Runner, choices: &[Choice], rows: &[AppRow]) -> String {
    let plan = r.plan;
    let best = rows
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, row)| row.verified && row.verdict == "faster")
        .max_by(|a, b| a.1.ratio_vs_glibc.total_cmp(&b.1.ratio_vs_glibc));
    match best {
        Some((i, row)) => {
            let vars: Vec<String> = choices[i]
                .env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "set LD_PRELOAD={} {} ({:.2}x glibc, faster beyond noise): {}",
                r.lib.display(),
                vars.join(" "),
                row.ratio_vs_glibc,
                format_args!(
                    "locklab run --{} {} -- {}",
                    if choices[i].label.starts_with("rwlock:") {
                        "rwlock"
                    } else {
                        "mutex"
                    },
                    choices[i].label.trim_start_matches("rwlock:"),
                    shell_words(&plan.cmd)
                )
            )
        }
        None => {
            let near = rows
                .iter()
                .skip(1)
                .filter(|row| row.verified && row.ratio_vs_glibc > 0.0)
                .max_by(|a, b| a.ratio_vs_glibc.total_cmp(&b.ratio_vs_glibc));
            match near {
                Some(row) => format!(
                    "keep glibc: no choice is faster beyond noise here (best: {} at {:.2}x, {})",
                    row.lock, row.ratio_vs_glibc, row.verdict
                ),
                None => "keep glibc: no choice ran verified".into(),
            }
        }
    }
}
