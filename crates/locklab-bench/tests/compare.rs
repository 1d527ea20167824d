//! `locklab compare`, end to end.

mod common;
use common::*;

/// `compare`: two runs of the same rows; a row made slower beyond noise fails `--fail-if-slower`.
#[test]
fn compare_reports_ratios_verdicts_and_fails_on_regressions() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.json");
    let (code, _, err) = run(&[
        "bench",
        "--workload",
        "mutex",
        "--locks",
        "mutex,ticket",
        "--threads",
        "1",
        "--duration-ms",
        "20",
        "--warmup-ms",
        "1",
        "--repeats",
        "2",
        "--quiet",
        "--json",
        old.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // The new run: the same rows, with ticket made 50% slower and mutex twice as fast, ranges apart.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&old).unwrap()).unwrap();
    for r in v["results"].as_array_mut().unwrap() {
        let f = if r["lock"] == "ticket" { 0.5 } else { 2.0 };
        let s = &mut r["ops_per_sec"];
        let (lo, hi) = (s["min"].as_f64().unwrap(), s["max"].as_f64().unwrap());
        let spread = (hi - lo).max(1.0);
        // Move the whole range beyond the old one.
        let nm = if f < 1.0 {
            (lo - spread) * f
        } else {
            (hi + spread) * f
        };
        s["median"] = nm.into();
        s["min"] = (nm - spread * 0.01).into();
        s["max"] = (nm + spread * 0.01).into();
    }
    let new = dir.path().join("new.json");
    std::fs::write(&new, serde_json::to_string(&v).unwrap()).unwrap();
    let (o, n) = (old.to_str().unwrap(), new.to_str().unwrap());
    let (code, out, err) = run(&["compare", o, n]);
    assert_eq!(code, 0, "{err}");
    let ticket = out.lines().find(|l| l.contains("ticket")).unwrap();
    assert!(ticket.contains("slower"), "{out}");
    let mutex = out
        .lines()
        .find(|l| l.contains(" mutex ") || l.starts_with("mutex     mutex"))
        .unwrap();
    assert!(mutex.contains("faster"), "{out}");
    let (code, _, err) = run(&["compare", o, n, "--fail-if-slower", "10"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("slower than the old run by more than 10%"),
        "{err}"
    );
    // Same file twice: everything within noise, exit 0 even with a zero budget.
    let (code, out, _) = run(&["compare", o, o, "--fail-if-slower", "0"]);
    assert_eq!(code, 0);
    assert!(
        out.lines().skip(1).all(|l| l.contains("within noise")),
        "{out}"
    );
    // Bad input: one line, exit 2 or 1.
    let (code, _, err) = run(&["compare", o, n, "--fail-if-slower", "-3"]);
    assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
    let (code, _, err) = run(&["compare", o, "/nonexistent.json"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read /nonexistent.json"), "{err}");
}
