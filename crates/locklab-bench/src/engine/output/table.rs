//! The terminal table of lab.md: one block per workload, rows grouped by lock.

use super::Report;
use crate::engine::metrics::ResultRow;
use std::fmt::Write;

/// Thousands separators: 52100000 -> 52,100,000.
pub fn group(n: f64) -> String {
    let s = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency for a table cell: ns, us from 10 us, ms from 10 ms.
pub fn ns(v: u64) -> String {
    if v >= 10_000_000 {
        format!("{} ms", v / 1_000_000)
    } else if v >= 10_000 {
        format!("{} us", v / 1_000)
    } else {
        format!("{v} ns")
    }
}

/// Renders the blocks for every workload in the report, in the order they first appear.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let mut workloads: Vec<&str> = vec![];
    for r in &report.results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    for w in workloads {
        let rows: Vec<&ResultRow> = report.results.iter().filter(|r| r.workload == w).collect();
        out += &render_block(report, &rows);
        out.push('\n');
    }
    out
}

/// One workload's block.
pub fn render_block(report: &Report, rows: &[&ResultRow]) -> String {
    let mut out = String::new();
    let Some(first) = rows.first() else {
        return out;
    };
    let cal = &report.calibration;
    let mut read = first
        .read_pct
        .map(|p| format!(" read={p}%"))
        .unwrap_or_default();
    if let Some(k) = first.lock_count {
        read += &format!(" locks={k}");
    }
    let _ = writeln!(
        out,
        "{}  cs={}ns think={}ns{}  ({} logical CPUs, line transfer {:.0} ns, atomic RMW {:.1} ns)",
        first.workload,
        first.cs_ns,
        first.think_ns,
        read,
        report.machine.logical_cpus,
        cal.line_transfer_ns,
        cal.atomic_rmw_ns
    );
    let _ = writeln!(
        out,
        "{:<24}{:>8}{:>15} {:>8}{:>5}{:>9}{:>7}{:>10}{:>7}{:>7}{:>7}",
        "lock",
        "threads",
        "ops/s",
        "(xN)",
        "lin",
        "lock ns",
        "idle%",
        "p99 acq",
        "fair",
        "hand%",
        "limit"
    );
    let cpus = report.machine.logical_cpus.max(1);
    let mut locks: Vec<&str> = vec![];
    for r in rows {
        if !locks.contains(&r.lock.as_str()) {
            locks.push(&r.lock);
        }
    }
    for l in locks {
        let mut mine: Vec<&&ResultRow> = rows.iter().filter(|r| r.lock == l).collect();
        mine.sort_by_key(|r| r.threads);
        for r in mine {
            let scaling = r.scaling.map(|s| format!("(x{s:.2})")).unwrap_or_default();
            let mut mark = if r.flagged() { " ???" } else { "" }.to_string();
            if r.noise.busy {
                mark += &format!(
                    " busy({:.0}%)",
                    r.noise.others_cpu_pct.max(r.noise.steal_pct)
                );
            }
            if r.collapsed {
                mark += &format!(" COLLAPSED(x{:.2} of peak)", r.of_peak.unwrap_or(0.0));
            }
            if let (Some(g), Some(c)) = (r.grace_periods, r.sync_calls) {
                mark += &format!("  {c} calls / {g} grace periods");
            }
            if let Some(w) = r.wakeups_per_msg {
                mark += &format!("  wake/msg {w:.2}");
            }
            if let (Some(rd), Some(up)) = (r.reads_per_sec, r.updates_per_sec) {
                mark += &format!("  reads {} upd {}", group(rd), group(up));
            }
            let lock_ns = r.lock_ns.map(|v| format!("{v:.1}")).unwrap_or_default();
            let hand = r
                .handover_rate
                .map(|v| format!("{:.0}%", 100.0 * v))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{:<24}{:>8}{:>15} {:>8}{:>5}{:>9}{:>6.0}%{:>10}{:>7.2}{:>7}{:>7.2}{}",
                r.lock,
                r.threads,
                group(r.ops_per_sec.median),
                scaling,
                r.threads.min(cpus),
                lock_ns,
                r.idle_pct,
                ns(r.acquire_ns.p99),
                r.jain_fairness,
                hand,
                r.limit.ratio,
                mark
            );
        }
    }
    for line in crate::engine::metrics::collapse_lines(rows) {
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(group(0.0), "0");
        assert_eq!(group(999.0), "999");
        assert_eq!(group(1000.0), "1,000");
        assert_eq!(group(52_100_000.4), "52,100,000");
    }

    #[test]
    fn block_has_header_rows_and_unfair_mark() {
        let mut r = ResultRow {
            workload: "mutex".into(),
            lock: "mutex".into(),
            threads: 2,
            ..Default::default()
        };
        r.ops_per_sec.median = 14_300_000.0;
        r.scaling = Some(0.27);
        r.per_thread_ops.min = 1;
        r.per_thread_ops.max = 3;
        let rep = Report {
            results: vec![r],
            ..Default::default()
        };
        let s = render(&rep);
        assert!(s.starts_with("mutex  cs=0ns think=0ns"), "{s}");
        assert!(s.contains("14,300,000"), "{s}");
        assert!(s.contains("(x0.27)"), "{s}");
        assert!(s.contains("???"), "{s}");
    }

    #[test]
    fn a_collapse_is_marked_and_named() {
        let row = |threads, ops| {
            let mut r = ResultRow {
                workload: "mutex".into(),
                lock: "spin".into(),
                threads,
                ..Default::default()
            };
            r.ops_per_sec.median = ops;
            r
        };
        let mut rows = vec![row(1, 10e6), row(2, 12e6), row(8, 7e6), row(64, 1e6)];
        crate::engine::metrics::fill_peak(&mut rows);
        assert_eq!(rows[1].of_peak, Some(1.0));
        assert!(!rows[2].collapsed, "0.58 of the peak is not a collapse");
        assert!(rows[3].collapsed);
        let s = render(&Report {
            results: rows,
            ..Default::default()
        });
        assert!(s.contains("COLLAPSED(x0.08 of peak)"), "{s}");
        assert!(
            s.contains("spin collapses: below half its peak (2 threads) at 64 (x0.08) threads"),
            "{s}"
        );
        // One thread count: no peak to fall from.
        let mut one = vec![row(4, 1.0)];
        crate::engine::metrics::fill_peak(&mut one);
        assert_eq!(one[0].of_peak, None);
        assert!(!one[0].collapsed);
    }

    #[test]
    fn rows_before_the_peak_are_never_collapsed() {
        let row = |threads, ops| {
            let mut r = ResultRow {
                workload: "mutex".into(),
                lock: "ticket".into(),
                threads,
                ..Default::default()
            };
            r.ops_per_sec.median = ops;
            r
        };
        // Rising to a peak at 12 threads, then falling: the ramp-up rows below half the peak say
        // nothing; the rows after the peak below half of it are collapses.
        let mut rows = vec![
            row(1, 1e6),
            row(4, 3e6),
            row(8, 7e6),
            row(12, 11.7e6),
            row(16, 3.3e6),
            row(24, 2.1e6),
            row(48, 1e6),
        ];
        crate::engine::metrics::fill_peak(&mut rows);
        let collapsed: Vec<usize> = rows
            .iter()
            .filter(|r| r.collapsed)
            .map(|r| r.threads)
            .collect();
        assert_eq!(collapsed, [16, 24, 48]);
        assert!(
            rows[0].of_peak.is_some_and(|p| p < 0.1),
            "the share is still given"
        );
        let s = render(&Report {
            results: rows,
            ..Default::default()
        });
        assert_eq!(s.matches("COLLAPSED").count(), 3, "{s}");
        assert!(
            s.contains("ticket collapses: below half its peak (12 threads) at 16 (x0.28), 24 (x0.18), 48 (x0.09) threads"),
            "{s}"
        );
        // A 2-thread row below half the 1-thread row: a collapse when 1 thread is the peak, not
        // when the peak comes later (a dip on the way up).
        let mut two = vec![row(1, 10e6), row(2, 4e6)];
        crate::engine::metrics::fill_peak(&mut two);
        assert!(two[1].collapsed, "after the peak");
        let mut dip = vec![row(1, 10e6), row(2, 4e6), row(4, 12e6)];
        crate::engine::metrics::fill_peak(&mut dip);
        assert!(!dip[1].collapsed, "before the peak");
    }

    #[test]
    fn a_superlinear_row_is_marked() {
        let mut r = ResultRow {
            workload: "mutex".into(),
            lock: "mutex".into(),
            threads: 2,
            ..Default::default()
        };
        r.per_thread_ops.min = 5;
        r.per_thread_ops.max = 5;
        r.scaling = Some(2.83);
        let fair = render(&Report {
            results: vec![r.clone()],
            ..Default::default()
        });
        assert!(!fair.contains("???"), "{fair}");
        r.superlinear = true;
        let s = render(&Report {
            results: vec![r],
            ..Default::default()
        });
        assert!(s.contains("(x2.83)") && s.contains("???"), "{s}");
    }
}
