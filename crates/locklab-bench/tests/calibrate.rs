//! `locklab calibrate`, end to end.

mod common;
use common::*;

#[test]
fn calibrate_prints_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cal.json");
    let (code, out, _) = run(&["calibrate", "--json", f.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("line_transfer_ns") && out.contains("atomic_rmw_ns"),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert!(v["calibration"]["atomic_rmw_ns"].as_f64().unwrap() > 0.0);
    assert!(v["machine"]["logical_cpus"].as_u64().unwrap() >= 1);
}
