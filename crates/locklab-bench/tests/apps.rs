//! `locklab apps`: a real program under glibc and our locks, verified; bad flags get one line.

mod common;
use common::*;

fn installed(program: &str) -> bool {
    let found = locklab_bench::apps::on_path(program);
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} is not installed (CI installs it)"
        );
    }
    found
}

#[test]
fn a_real_program_verifies_under_glibc_and_our_lock() {
    if !installed("tcumttest") {
        return;
    }
    let exe = assert_cmd::cargo::cargo_bin("locklab");
    if locklab_bench::preload::find_library(&exe).is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"));
        return;
    }
    let dir = std::env::temp_dir().join(format!("locklab-apps-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("apps.json");
    let (code, out, err) = run(&[
        "apps",
        "--quick",
        "--apps",
        "tokyo-btree",
        "--locks",
        "mutex",
        "--repeats",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["apps"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "glibc and mutex: {v}");
    assert_eq!(rows[0]["lock"], "glibc");
    assert_eq!(rows[1]["lock"], "mutex");
    for r in rows {
        assert_eq!(r["verified"], true);
        assert_eq!(r["runs"].as_array().unwrap().len(), 3);
        let (min, med, max) = (
            r["min"].as_f64().unwrap(),
            r["median"].as_f64().unwrap(),
            r["max"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= med && med <= max, "{r}");
        // The statistics run: tcumttest takes its B+ tree's locks at least once per record.
        let top = r["top_locks"].as_array().unwrap();
        assert!(!top.is_empty(), "top_locks from the --stat run: {r}");
        assert!(top.len() <= 5);
        for t in top {
            assert!(
                t["site"].as_str().unwrap().contains("libtokyocabinet"),
                "{t}"
            );
            assert!(t["acquisitions"].as_u64().unwrap() >= t["contentions"].as_u64().unwrap());
        }
        let waits: Vec<u64> = top
            .iter()
            .map(|t| t["wait_ns_total"].as_u64().unwrap())
            .collect();
        assert!(
            waits.windows(2).all(|w| w[0] >= w[1]),
            "most waited first: {waits:?}"
        );
    }
    let ratio = rows[1]["ratio_vs_glibc"].as_f64().unwrap();
    let want = rows[1]["median"].as_f64().unwrap() / rows[0]["median"].as_f64().unwrap();
    assert!(
        (ratio - want).abs() < 1e-9,
        "the ratio is the medians' ratio"
    );
    assert!(v["machine"]["logical_cpus"].as_u64().unwrap() >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_get_one_line() {
    let (code, _, err) = run(&["apps", "--apps", "nope"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown app `nope`"), "{err}");
    let (code, _, err) = run(&["apps", "--locks", "mutexx"]);
    assert_eq!(code, 2, "{err}");
}
