//! `locklab list`, end to end.

mod common;
use common::*;

#[test]
fn list_names_every_lock_with_its_kind() {
    let (code, out, _) = run(&["list"]);
    assert_eq!(code, 0);
    for (name, kind) in [
        ("mutex", "ours"),
        ("qspinlock", "ours"),
        ("parking-lot-mutex", "peer"),
        ("std-rwlock", "peer"),
        ("atomic-count", "baseline"),
    ] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(line.split_whitespace().nth(1), Some(kind), "{line}");
    }
    for w in ["mutex", "rw", "refcount"] {
        assert!(
            out.lines().any(|l| l.starts_with(w) && l.contains("load")),
            "workload {w} missing"
        );
    }
}
