//! `locklab compare OLD.json NEW.json [--fail-if-slower PCT]`: per matching row, the ratio of the
//! median throughputs and a noise-aware verdict, as `critcmp` does for criterion.
//!
//! Rows match on (workload, lock, threads, cs, think, read %). The verdict uses each side's min-max
//! spread over its repeats: `faster` when the new run's slowest repeat beat the old run's fastest,
//! `slower` when the new run's fastest repeat was below the old run's slowest, otherwise `within noise`
//! (the ranges overlap: the difference is not shown by these measurements). `--fail-if-slower PCT` exits 1
//! when a row is `slower` by more than PCT percent of the old median.

use crate::engine::metrics::ResultRow;
use crate::engine::output::Report;
pub use crate::engine::verdict::Verdict;
use clap::Args;

/// A row's identity (public through [`Compared::key`]): workload, lock, threads, cs, think, read %, and the workload's own settings
/// (`rcu-update` writers, `condvar` slots and notify mode).
pub type Key = (
    String,
    String,
    usize,
    u64,
    u64,
    Option<u32>,
    (Option<usize>, Option<usize>, Option<String>),
);

fn key(r: &ResultRow) -> Key {
    (
        r.workload.clone(),
        r.lock.clone(),
        r.threads,
        r.cs_ns,
        r.think_ns,
        r.read_pct,
        (r.writers, r.slots, r.notify.clone()),
    )
}

/// One matched row.
#[derive(Clone, Debug)]
pub struct Compared {
    /// workload, lock, threads, cs, think, read %, (writers, slots, notify)
    pub key: Key,
    /// old median ops/s
    pub old: f64,
    /// new median ops/s
    pub new: f64,
    /// new / old (above 1: faster)
    pub ratio: f64,
    /// the noise-aware verdict
    pub verdict: Verdict,
}

/// Compares two reports: matched rows in the new report's order, then the keys found on one side only.
pub fn compare(old: &Report, new: &Report) -> (Vec<Compared>, Vec<String>) {
    let mut out = vec![];
    let mut unmatched = vec![];
    for n in &new.results {
        let Some(o) = old.results.iter().find(|o| key(o) == key(n)) else {
            unmatched.push(format!("only in NEW: {}", describe(&key(n))));
            continue;
        };
        let (os, ns) = (&o.ops_per_sec, &n.ops_per_sec);
        let verdict = Verdict::of((ns.min, ns.max), (os.min, os.max));
        out.push(Compared {
            key: key(n),
            old: os.median,
            new: ns.median,
            ratio: ns.median / os.median.max(1e-9),
            verdict,
        });
    }
    for o in &old.results {
        if !new.results.iter().any(|n| key(n) == key(o)) {
            unmatched.push(format!("only in OLD: {}", describe(&key(o))));
        }
    }
    (out, unmatched)
}

fn describe(k: &Key) -> String {
    let rp = k.5.map(|p| format!(" read={p}%")).unwrap_or_default();
    format!(
        "{} {} {} thr cs={}ns think={}ns{rp}",
        k.0, k.1, k.2, k.3, k.4
    )
}

/// The rows that fail `--fail-if-slower pct`: `slower` by more than `pct` percent.
pub fn regressions(rows: &[Compared], pct: f64) -> Vec<&Compared> {
    rows.iter()
        .filter(|c| c.verdict == Verdict::Slower && c.ratio < 1.0 - pct / 100.0)
        .collect()
}

/// The printed comparison.
pub fn render(rows: &[Compared], unmatched: &[String]) -> String {
    let mut s = format!(
        "{:<10}{:<26}{:>4} {:>16} {:>16} {:>8}  verdict\n",
        "workload", "lock", "thr", "old ops/s", "new ops/s", "new/old"
    );
    for c in rows {
        s += &format!(
            "{:<10}{:<26}{:>4} {:>16} {:>16} {:>7.3}x  {}\n",
            c.key.0,
            c.key.1,
            c.key.2,
            crate::engine::output::table::group(c.old),
            crate::engine::output::table::group(c.new),
            c.ratio,
            c.verdict.name()
        );
    }
    for u in unmatched {
        s += u;
        s += "\n";
    }
    s
}

/// Reads a `--json` report.
pub fn load(path: &str) -> anyhow::Result<Report> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{path} is not a locklab --json report: {e}"))
}

/// `locklab compare` options.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// The earlier run's JSON.
    #[arg(value_name = "OLD.json")]
    pub old: String,
    /// The later run's JSON.
    #[arg(value_name = "NEW.json")]
    pub new: String,
    /// Exit 1 if a row is slower (beyond noise) by more than this percent.
    #[arg(long, value_name = "PCT", allow_hyphen_values = true)]
    pub fail_if_slower: Option<String>,
}

/// Runs `compare` on its arguments.
pub fn command(a: &CompareArgs) -> anyhow::Result<()> {
    compare_files(&a.old, &a.new, a.fail_if_slower.as_deref())
}

/// `locklab compare OLD NEW [--fail-if-slower PCT]`: prints the comparison; an error when a row is
/// slower beyond noise by more than the budget.
fn compare_files(old: &str, new: &str, fail_if_slower: Option<&str>) -> anyhow::Result<()> {
    let budget = match fail_if_slower {
        Some(p) => Some(crate::engine::plan::number("fail-if-slower", p, 0, 100)? as f64),
        None => None,
    };
    let (old, new) = (load(old)?, load(new)?);
    let (rows, unmatched) = compare(&old, &new);
    print!("{}", render(&rows, &unmatched));
    if let Some(pct) = budget {
        let bad = regressions(&rows, pct);
        if !bad.is_empty() {
            return Err(anyhow::anyhow!(
                "{} row(s) slower than the old run by more than {pct}% (beyond noise)",
                bad.len()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(lock: &str, threads: usize, min: f64, median: f64, max: f64) -> ResultRow {
        let mut r = ResultRow {
            workload: "mutex".into(),
            lock: lock.into(),
            threads,
            ..Default::default()
        };
        r.ops_per_sec.min = min;
        r.ops_per_sec.median = median;
        r.ops_per_sec.max = max;
        r
    }

    fn report(rows: Vec<ResultRow>) -> Report {
        Report {
            results: rows,
            ..Default::default()
        }
    }

    #[test]
    fn verdicts_use_both_spreads() {
        let old = report(vec![
            row("a", 1, 90.0, 100.0, 110.0),
            row("b", 1, 90.0, 100.0, 110.0),
            row("c", 1, 90.0, 100.0, 110.0),
            row("gone", 1, 1.0, 1.0, 1.0),
        ]);
        let new = report(vec![
            row("a", 1, 115.0, 120.0, 125.0), // entirely above: faster
            row("b", 1, 70.0, 80.0, 85.0),    // entirely below: slower
            row("c", 1, 100.0, 105.0, 130.0), // overlaps: within noise
            row("new", 1, 1.0, 1.0, 1.0),
        ]);
        let (rows, unmatched) = compare(&old, &new);
        let v: Vec<_> = rows.iter().map(|c| (c.key.1.as_str(), c.verdict)).collect();
        assert_eq!(
            v,
            [
                ("a", Verdict::Faster),
                ("b", Verdict::Slower),
                ("c", Verdict::WithinNoise)
            ]
        );
        assert!((rows[0].ratio - 1.2).abs() < 1e-12 && (rows[1].ratio - 0.8).abs() < 1e-12);
        assert_eq!(unmatched.len(), 2);
        assert!(unmatched[0].starts_with("only in NEW: mutex new 1 thr"));
        assert!(unmatched[1].starts_with("only in OLD: mutex gone"));
        // b is 20% slower: fails a 10% budget, passes a 25% one; c never fails (noise).
        assert_eq!(regressions(&rows, 10.0).len(), 1);
        assert!(regressions(&rows, 25.0).is_empty());
        let text = render(&rows, &unmatched);
        assert!(
            text.contains("0.800x  slower") && text.contains("within noise"),
            "{text}"
        );
    }

    #[test]
    fn rows_match_on_threads_too() {
        let old = report(vec![row("a", 1, 1.0, 1.0, 1.0), row("a", 2, 1.0, 1.0, 1.0)]);
        let new = report(vec![row("a", 2, 2.0, 2.0, 2.0)]);
        let (rows, unmatched) = compare(&old, &new);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].key.2, 2);
        assert_eq!(unmatched, ["only in OLD: mutex a 1 thr cs=0ns think=0ns"]);
    }
}
