//! CSV: one column per scalar, nested names joined with `_` (lab.md).

use crate::engine::metrics::ResultRow;

/// The header line's columns, in order.
pub const COLUMNS: [&str; 44] = [
    "workload",
    "lock",
    "threads",
    "cs_ns",
    "think_ns",
    "read_pct",
    "duration_ms",
    "repeats",
    "ops_per_sec_median",
    "ops_per_sec_min",
    "ops_per_sec_max",
    "ns_per_op",
    "scaling",
    "per_thread_ops_min",
    "per_thread_ops_max",
    "jain_fairness",
    "cpu_util_pct",
    "idle_pct",
    "ctx_switches_voluntary",
    "ctx_switches_involuntary",
    "acquire_ns_p50",
    "acquire_ns_p99",
    "acquire_ns_p999",
    "acquire_ns_max",
    "limit_basis",
    "limit_ns_per_op",
    "limit_ratio",
    "noise_others_cpu_pct",
    "noise_steal_pct",
    "noise_busy",
    "lock_ns",
    "handover_basis",
    "handover_ns_per_op",
    "handover_ratio",
    "handover_rate",
    "rss_kb",
    "reads_per_sec",
    "updates_per_sec",
    "writers",
    "grace_periods",
    "sync_calls",
    "slots",
    "notify",
    "wakeups_per_msg",
];

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The whole CSV document.
pub fn render(rows: &[ResultRow]) -> String {
    let mut out = COLUMNS.join(",") + "\n";
    for r in rows {
        let cells: Vec<String> = vec![
            r.workload.clone(),
            r.lock.clone(),
            r.threads.to_string(),
            r.cs_ns.to_string(),
            r.think_ns.to_string(),
            r.read_pct.map(|p| p.to_string()).unwrap_or_default(),
            r.duration_ms.to_string(),
            r.repeats.to_string(),
            format!("{:.1}", r.ops_per_sec.median),
            format!("{:.1}", r.ops_per_sec.min),
            format!("{:.1}", r.ops_per_sec.max),
            format!("{:.3}", r.ns_per_op),
            r.scaling.map(|s| format!("{s:.3}")).unwrap_or_default(),
            r.per_thread_ops.min.to_string(),
            r.per_thread_ops.max.to_string(),
            format!("{:.4}", r.jain_fairness),
            format!("{:.1}", r.cpu_util_pct),
            format!("{:.1}", r.idle_pct),
            format!("{:.1}", r.ctx_switches.voluntary),
            format!("{:.1}", r.ctx_switches.involuntary),
            r.acquire_ns.p50.to_string(),
            r.acquire_ns.p99.to_string(),
            r.acquire_ns.p999.to_string(),
            r.acquire_ns.max.to_string(),
            r.limit.basis.clone(),
            format!("{:.3}", r.limit.ns_per_op),
            format!("{:.4}", r.limit.ratio),
            format!("{:.1}", r.noise.others_cpu_pct),
            format!("{:.1}", r.noise.steal_pct),
            r.noise.busy.to_string(),
            r.lock_ns.map(|v| format!("{v:.3}")).unwrap_or_default(),
            r.handover
                .as_ref()
                .map(|h| h.basis.clone())
                .unwrap_or_default(),
            r.handover
                .as_ref()
                .map(|h| format!("{:.3}", h.ns_per_op))
                .unwrap_or_default(),
            r.handover
                .as_ref()
                .map(|h| format!("{:.4}", h.ratio))
                .unwrap_or_default(),
            r.handover_rate
                .map(|v| format!("{v:.4}"))
                .unwrap_or_default(),
            r.rss_kb.map(|v| v.to_string()).unwrap_or_default(),
            r.reads_per_sec
                .map(|v| format!("{v:.1}"))
                .unwrap_or_default(),
            r.updates_per_sec
                .map(|v| format!("{v:.1}"))
                .unwrap_or_default(),
            r.writers.map(|v| v.to_string()).unwrap_or_default(),
            r.grace_periods.map(|v| v.to_string()).unwrap_or_default(),
            r.sync_calls.map(|v| v.to_string()).unwrap_or_default(),
            r.slots.map(|v| v.to_string()).unwrap_or_default(),
            r.notify.clone().unwrap_or_default(),
            r.wakeups_per_msg
                .map(|v| format!("{v:.3}"))
                .unwrap_or_default(),
        ];
        out += &cells.iter().map(|c| quote(c)).collect::<Vec<_>>().join(",");
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_lab_md_and_rows_have_every_column() {
        let doc = render(&[ResultRow {
            workload: "rw".into(),
            lock: "a,b".into(),
            read_pct: Some(90),
            ..Default::default()
        }]);
        let mut lines = doc.lines();
        let header = lines.next().unwrap();
        assert!(header.starts_with(
            "workload,lock,threads,cs_ns,think_ns,read_pct,duration_ms,repeats,ops_per_sec_median,"
        ));
        assert!(
            header.contains("acquire_ns_p99")
                && header.contains("ctx_switches_voluntary")
                && header.contains("limit_ratio")
        );
        let row = lines.next().unwrap();
        assert!(row.starts_with("rw,\"a,b\",0,0,0,90,"), "{row}");
        // 27 columns: the quoted comma does not count
        assert_eq!(
            row.replace("\"a,b\"", "ab").split(',').count(),
            COLUMNS.len()
        );
    }
}
