//! `locklab advise`, end to end.

mod common;
use common::*;

/// lab.md's `advise`: a small grid gives one cell per (threads, cs, read %) with the winner being the
/// fastest non-baseline, not superlinear row of that cell in the JSON's own rows, rules of thumb, and a heat map per
/// read share in `report`; bad lists are one clear line.
#[test]
fn advise_maps_the_winner_of_every_cell() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("advise.json");
    let (code, out, err) = run(&[
        "advise",
        "--quick",
        "--threads",
        "1,2",
        "--cs-ns",
        "0",
        "--read-pct",
        "0,90",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rules of thumb on this machine:"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    let rows = v["results"].as_array().unwrap();
    for c in cells {
        let best = rows
            .iter()
            .filter(|r| {
                r["threads"] == c["threads"]
                    && r["cs_ns"] == c["cs_ns"]
                    && r["read_pct"] == c["read_pct"]
                    && !["none", "atomic-count"].contains(&r["lock"].as_str().unwrap())
                    // A superlinear row (a busy machine) is no evidence: advise leaves it out.
                    && r["superlinear"] != true
            })
            .max_by(|a, b| {
                a["ops_per_sec"]["median"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["ops_per_sec"]["median"].as_f64().unwrap())
            })
            .unwrap();
        assert_eq!(c["winner"], best["lock"], "{c}");
        assert!(c["margin"].as_f64().unwrap() >= 1.0, "{c}");
    }
    let wins: u64 = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["wins"].as_u64().unwrap())
        .sum();
    assert_eq!(wins, 4, "every cell is in exactly one rule");
    let page = dir.path().join("a.html");
    let (code, _, err) = run(&[
        "report",
        "--from",
        json.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("data-plot=\"run0-advise-0\"")
            && html.contains("data-plot=\"run0-advise-90\"")
    );

    let (code, _, err) = run(&["advise", "--read-pct", "0,101"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("read-pct") && err.lines().count() == 1,
        "{err}"
    );
}

/// Statistics no run can write (more contentions than acquisitions: "contended 1e14%") are one
/// line naming the record and the field, exit 2, never a figure.
#[test]
fn impossible_statistics_are_one_line_naming_record_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("stat.json");
    for (record, want) in [
        (
            r#"{"lock": "0x10", "kind": "mutex", "site_addr": "0x1", "acquisitions": 1, "contentions": 100000000000000, "wait_ns_total": 5, "holds": 1, "hold_ns_total": 10}"#,
            "process 42, record 1 (lock 0x10 at 0x1): `contentions` 100000000000000 is more than its `acquisitions` (1)",
        ),
        (
            r#"{"lock": "0x20", "kind": "mutex", "site_addr": "0x2", "acquisitions": 10, "contentions": 1, "wait_ns_total": 5, "wait_ns_max": 9, "holds": 10, "hold_ns_total": 10}"#,
            "`wait_ns_max` 9 is more than its `wait_ns_total` (5)",
        ),
        (
            r#"{"lock": "0x30", "kind": "mutex", "site_addr": "0x3", "acquisitions": 18446744073709551615, "contentions": 1, "wait_ns_total": 18446744073709551615, "holds": 1, "hold_ns_total": 10}"#,
            "process 42: its records' totals are beyond any run's",
        ),
    ] {
        std::fs::write(
            &f,
            format!(r#"{{"processes": [{{"pid": 42, "records": [{record}]}}]}}"#),
        )
        .unwrap();
        let (code, out, err) = run(&["advise", "--from", f.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "want {want:?} in {err}");
    }
}
