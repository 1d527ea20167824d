//! `locklab torture`, end to end.

mod common;
use common::*;

/// `torture --lock busted` must fail: the tester sees what it claims to check (locktorture's
/// `lock_busted`). Every busted lock fails its own check, and the exit status is non-zero.
#[test]
fn torture_catches_every_busted_lock() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.json");
    let (code, out, err) = run(&[
        "torture",
        "--lock",
        "busted",
        "--duration",
        "1",
        "--json",
        f.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "busted locks must fail the run: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(v["ok"], false);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 7);
    for r in results {
        assert_eq!(r["ok"], false, "{} was not caught: {r}", r["lock"]);
        assert!(!r["failures"].as_array().unwrap().is_empty(), "{r}");
        let line = out
            .lines()
            .find(|l| l.starts_with(r["lock"].as_str().unwrap()))
            .unwrap();
        assert!(line.contains("!!!"), "{line}");
    }
}

/// Our locks pass a short torture with every stressor, and the output has locktorture's shape.
#[test]
fn torture_passes_our_locks() {
    let (code, out, err) = run(&[
        "torture",
        "--lock",
        "mutex,rwsem,percpu-rwsem,seqlock,lockref,condvar,rcu",
        "--duration",
        "2",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["writes"]["total"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["writes"]["fail"], 0);
        assert!(r["writes"]["min"].as_u64() <= r["writes"]["max"].as_u64());
    }
    let rwsem = &v["results"][1];
    assert!(rwsem["reads"]["total"].as_u64().unwrap() > 0);
    // rcutorture's pipe: readers saw objects 0 or 1 grace periods old (2 tolerated), never more.
    let rcu = &v["results"][6];
    let pipe: Vec<u64> = rcu["pipe"]
        .as_array()
        .expect("the rcu result has a pipe")
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(pipe.len(), 4);
    assert!(pipe[0] > 0 && pipe[3] == 0, "{pipe:?}");
    assert_eq!(
        pipe.iter().sum::<u64>(),
        rcu["reads"]["total"].as_u64().unwrap() + rcu["reads"]["fail"].as_u64().unwrap(),
        "every read is in the pipe"
    );
    // The human lines went to stderr (stdout holds the JSON).
    let line = err.lines().find(|l| l.starts_with("rwsem")).unwrap();
    assert!(
        line.contains("Writes: Total: ") && line.contains("Max/Min: ") && line.contains("Fail: 0"),
        "{line}"
    );
    // Churn replaced threads and late destructors ran operations.
    let replaced: u64 = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["threads_replaced"].as_u64().unwrap())
        .sum();
    assert!(replaced > 0, "the churn stressor never replaced a thread");
}

#[test]
fn torture_rejects_bad_input_with_one_line() {
    for (args, needle) in [
        (&["torture", "--lock", "nope"][..], "unknown lock 'nope'"),
        (&["torture", "--duration", "0"][..], "--duration"),
        (&["torture", "--duration", "x"][..], "not a whole number"),
        (&["torture", "--threads", "1"][..], "--threads"),
        (&["torture", "--json", ""][..], "empty"),
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
