//! `locklab bench`: every workload, the exports, the limits, bad input, end to end.

mod common;
use common::*;

#[test]
fn bench_json_to_stdout_matches_the_schema() {
    let (code, out, err) = run(&[
        "bench",
        "--workload",
        "mutex",
        "--locks",
        "mutex,parking-lot-mutex",
        "--threads",
        "1,2",
        "--duration-ms",
        "20",
        "--warmup-ms",
        "5",
        "--repeats",
        "2",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    assert_eq!(v["locklab_version"], env!("CARGO_PKG_VERSION"));
    for k in ["cpu_model", "logical_cpus", "kernel", "rustc"] {
        assert!(!v["machine"][k].is_null(), "machine.{k}");
    }
    for k in [
        "atomic_rmw_ns",
        "cas_ns",
        "line_transfer_ns",
        "futex_wake_ns",
    ] {
        assert!(v["calibration"][k].is_number(), "calibration.{k}");
    }
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "the none baseline is always measured, first");
    assert_eq!(rows[0]["lock"], "none");
    for r in rows {
        for k in [
            "workload",
            "lock",
            "threads",
            "cs_ns",
            "think_ns",
            "read_pct",
            "duration_ms",
            "repeats",
            "ns_per_op",
            "scaling",
            "jain_fairness",
            "cpu_util_pct",
            "idle_pct",
        ] {
            assert!(r.get(k).is_some(), "{k} missing");
        }
        for (k, subs) in [
            ("ops_per_sec", &["median", "min", "max"][..]),
            ("per_thread_ops", &["min", "max"]),
            ("ctx_switches", &["voluntary", "involuntary"]),
            ("acquire_ns", &["p50", "p99", "p999", "max"]),
            ("limit", &["basis", "ns_per_op", "ratio"]),
            ("noise", &["others_cpu_pct", "steal_pct", "busy"]),
        ] {
            for s in subs {
                assert!(r[k].get(*s).is_some(), "{k}.{s} missing");
            }
        }
        assert!(r["ops_per_sec"]["median"].as_f64().unwrap() > 0.0);
        assert!(r["read_pct"].is_null());
        assert_eq!(r["repeats"], 2);
        let scaling = r["scaling"]
            .as_f64()
            .expect("every row has a 1-thread row here");
        if r["threads"] == 1 {
            assert_eq!(scaling, 1.0);
            assert!(r["handover"].is_null(), "no model with one thread");
        } else if r["lock"] != "none" {
            // The model: writes (all, here) x (hand-over rate x one line transfer + cs 0). The rate
            // may be 0 (on a busy machine one thread can run a whole window alone), never negative.
            let rate = r["handover_rate"].as_f64().unwrap_or(1.0);
            let transfer = v["calibration"]["line_transfer_ns"].as_f64().unwrap();
            let model = r["handover"]["ns_per_op"].as_f64().unwrap();
            assert!(transfer > 0.0 && model >= 0.0);
            assert!(
                (model - rate * transfer).abs() <= 1e-9 * (1.0 + rate * transfer),
                "{model} vs {rate} x {transfer}"
            );
        }
        // lock_ns: this row minus the none row of its thread count.
        let none = rows
            .iter()
            .find(|n| n["lock"] == "none" && n["threads"] == r["threads"])
            .unwrap();
        let lock_ns = r["lock_ns"].as_f64().unwrap();
        let want = r["ns_per_op"].as_f64().unwrap() - none["ns_per_op"].as_f64().unwrap();
        assert!((lock_ns - want).abs() < 1e-9, "{lock_ns} vs {want}");
        // The hand-over rate is a fraction; one thread never hands over to another.
        let rate = r["handover_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{rate}");
        if r["threads"] == 1 || r["lock"] == "none" {
            assert_eq!(rate, 0.0, "{r}");
        }
    }
    // The JSON round-trips through the documented Rust type.
    let back: locklab_bench::engine::output::Report = serde_json::from_str(&out).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), v);
    // The table went to stderr, since stdout carries the JSON.
    assert!(err.contains("mutex  cs=0ns think=0ns"), "{err}");
}

#[test]
fn bench_writes_csv_and_markdown_files_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let (csv, md) = (dir.path().join("r.csv"), dir.path().join("r.md"));
    let (code, out, err) = run(&[
        "bench",
        "--workload",
        "rw",
        "--locks",
        "rwspinlock-placeholder-is-not-a-lock",
        "--threads",
        "1",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    let (code, out, err) = run(&[
        "bench",
        "--workload",
        "rw",
        "--read-pct",
        "50",
        "--locks",
        "std-rwlock,mutex",
        "--threads",
        "1:2:1",
        "--duration-ms",
        "20",
        "--warmup-ms",
        "0",
        "--repeats",
        "1",
        "--csv",
        csv.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rw  cs=0ns think=0ns read=50%"), "{out}");
    assert!(
        out.contains("std-rwlock") && out.contains("(x1.00)"),
        "{out}"
    );
    let csv = std::fs::read_to_string(csv).unwrap();
    let mut lines = csv.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("workload,lock,threads,cs_ns,think_ns,read_pct,")
    );
    assert_eq!(lines.count(), 6, "two rows each of none, std-rwlock, mutex");
    assert!(csv.contains("rw,std-rwlock,1,0,0,50,20,1,"), "{csv}");
    let md = std::fs::read_to_string(md).unwrap();
    assert!(
        md.contains("| lock | threads | ops/s |") && md.contains("## rw"),
        "{md}"
    );
}

/// The limit is a bound: no row of any lock in any workload beats it (ratio <= 1). A
/// quick run of every lock, with the machine to itself; the only slack allowed is 5% for a 30 ms
/// window's noise. A bound built on the `none` row's best repeat can only be beaten by a row measured
/// while `none` was disturbed (another process took the CPU for all its repeats), so a workload whose
/// run breaks the bound is run once more: a transient disturbance passes the second time, a limit that
/// is not a limit fails both.
#[test]
fn no_row_beats_its_limit() {
    let _machine = whole_machine();
    for w in ["mutex", "rw", "refcount"] {
        let first = rows_beating_their_limit(w);
        if first.is_empty() {
            continue;
        }
        let second = rows_beating_their_limit(w);
        assert!(
            second.is_empty(),
            "{w}: rows beat their limit in two runs:\n{}\n--\n{}",
            first.join("\n"),
            second.join("\n")
        );
    }
}

/// One quick run of every lock in workload `w`; the rows whose limit ratio is above 1.05 or 0 (0 only
/// for a row with no operation in its window: a spinning lock whose holder was preempted for all of
/// 30 ms on a loaded machine; no measurement, nothing to bound).
fn rows_beating_their_limit(w: &str) -> Vec<String> {
    let rows = bench_rows(
        run_alone,
        &[
            "--workload",
            w,
            "--threads",
            "1,2",
            "--duration-ms",
            "30",
            "--warmup-ms",
            "5",
            "--repeats",
            "3",
        ],
    );
    assert!(rows.len() > 10, "{w}: every lock ran");
    rows.iter()
        .filter_map(|r| {
            let ratio = r["limit"]["ratio"].as_f64().unwrap();
            let ops = r["ops_per_sec"]["median"].as_f64().unwrap();
            let ok = (ratio > 0.0 || ops == 0.0) && ratio <= 1.05;
            (!ok).then(|| {
                format!(
                    "{w} {} x{}: limit ratio {ratio} ({})",
                    r["lock"], r["threads"], r["limit"]["basis"]
                )
            })
        })
        .collect()
}

#[test]
fn refcount_runs_the_counts() {
    let (code, out, err) = run(&[
        "bench",
        "--workload",
        "refcount",
        "--locks",
        "atomic-count,spinlock-count",
        "--threads",
        "2",
        "--duration-ms",
        "20",
        "--warmup-ms",
        "0",
        "--repeats",
        "1",
        "--quiet",
        "--csv",
        "-",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4, "header, none, two counts: {out}");
    assert!(err.is_empty(), "--quiet prints nothing else: {err}");
}

#[test]
fn every_bad_input_is_one_clear_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "--workload", "nope"],
            "unknown workload 'nope' (valid: mutex, rw, refcount, condvar, rcu-read, call-rcu, rcu-update, rcu-sync)",
        ),
        (
            &["bench", "--workload", "mutex", "--locks", "nolock"],
            "unknown lock 'nolock'",
        ),
        (
            &["bench", "--workload", "mutex", "--threads", "0"],
            "--threads: 0 is out of range",
        ),
        (
            &["bench", "--workload", "mutex", "--threads", "5000"],
            "--threads: 5000 is out of range",
        ),
        (
            &["bench", "--workload", "mutex", "--threads", "8:1:1"],
            "runs backwards",
        ),
        (
            &["bench", "--workload", "mutex", "--cs-ns", "-5"],
            "--cs-ns: -5 is out of range",
        ),
        (
            &["bench", "--workload", "mutex", "--think-ns", "abc"],
            "--think-ns: 'abc' is not a whole number",
        ),
        (
            &["bench", "--workload", "mutex", "--cs-ns", "99999999999"],
            "--cs-ns: 99999999999 is out of range",
        ),
        (
            &["bench", "--workload", "mutex", "--duration-ms", "0"],
            "--duration-ms: 0 is out of range",
        ),
        (
            &["bench", "--workload", "mutex", "--repeats", "0"],
            "--repeats: 0 is out of range",
        ),
        (
            &["bench", "--workload", "rw", "--read-pct", "101"],
            "--read-pct: 101 is out of range",
        ),
        (
            &["bench", "--workload", "rcu-update", "--writers", "0"],
            "--writers: 0 is out of range",
        ),
        (
            &["bench", "--workload", "mutex", "--writers", "2"],
            "--writers applies only to --workload rcu-update, not mutex",
        ),
        (
            &["bench", "--workload", "mutex", "--read-pct", "50"],
            "--read-pct applies only to --workload rw",
        ),
        (
            &["bench", "--workload", "refcount", "--locks", "mutex"],
            "'mutex' does not run the refcount workload",
        ),
        (
            &["bench", "--workload", "mutex", "--locks", "atomic-count"],
            "'atomic-count' does not run the mutex workload",
        ),
        (
            &["bench", "--workload", "mutex", "--json", "-", "--csv", "-"],
            "only one of --json, --csv and --markdown",
        ),
    ];
    for (args, expect) in cases {
        let (code, out, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} printed to stdout: {out}");
        assert!(
            err.contains(expect),
            "{args:?}: expected '{expect}' in: {err}"
        );
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // clap's own usage errors exit 2 too
    let (code, _, err) = run(&["bench"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn an_unwritable_output_is_an_error_not_a_panic() {
    let (code, _, err) = run(&[
        "bench",
        "--workload",
        "mutex",
        "--locks",
        "tas",
        "--threads",
        "1",
        "--duration-ms",
        "5",
        "--repeats",
        "1",
        "--quiet",
        "--json",
        "/nonexistent-dir/x.json",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot write") && !err.contains("panicked"),
        "{err}"
    );
}

/// A run while other processes load every CPU says so (a JSON field, a table mark and
/// one warning line).
#[test]
fn a_run_on_a_busy_machine_says_so() {
    let _machine = whole_machine();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut hogs: Vec<_> = (0..cpus)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("a busy loop")
        })
        .collect();
    let (code, out, err) = run_alone(&[
        "bench",
        "--workload",
        "mutex",
        "--locks",
        "mutex",
        "--threads",
        "1",
        "--duration-ms",
        "300",
        "--warmup-ms",
        "10",
        "--repeats",
        "1",
        "--json",
        "-",
    ]);
    for h in &mut hogs {
        let _ = h.kill();
        let _ = h.wait();
    }
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let n = &v["results"][0]["noise"];
    assert_eq!(n["busy"], true, "{n}");
    assert!(n["others_cpu_pct"].as_f64().unwrap() > 25.0, "{n}");
    assert!(err.contains("measured on a busy machine"), "{err}");
    assert!(err.contains("busy("), "the table marks the row: {err}");
}
