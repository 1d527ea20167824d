//! The command line, end to end: every command and every error path of lab.md.

use assert_cmd::Command;

fn locklab() -> Command {
    Command::cargo_bin("locklab").expect("the locklab binary builds")
}

/// Tests run in parallel threads. Most may share the machine, but two may not: the limit test times
/// the `none` loop against every lock (a run disturbed by another test's threads can make a lock
/// "beat" the loop without a lock), and the busy-machine test starts a busy loop on every CPU. They
/// take this lock exclusively; every other `run` takes it shared.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared_machine() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

fn whole_machine() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Runs with args and returns (status code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let _machine = shared_machine();
    run_alone(args)
}

/// `bench ARGS --quiet --json -` through `runner` (`run` or `run_alone`): exit 0, and the rows.
fn bench_rows(
    runner: fn(&[&str]) -> (i32, String, String),
    args: &[&str],
) -> Vec<serde_json::Value> {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--quiet", "--json", "-"]);
    let (code, out, err) = runner(&all);
    assert_eq!(code, 0, "{all:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["results"].as_array().unwrap().clone()
}

/// `run` for a caller that already holds the machine exclusively.
fn run_alone(args: &[&str]) -> (i32, String, String) {
    let out = locklab().args(args).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

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
            assert!(r["handover"]["ns_per_op"].as_f64().unwrap() > 0.0);
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
    let back: locklab_bench::output::Report = serde_json::from_str(&out).unwrap();
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

/// The RCU workloads run ours, the shared-queue arm and the peers, with the `none` floor, and report
/// memory for `call-rcu`.
#[test]
fn rcu_workloads_run_every_scheme() {
    // liburcu's rows run where the build found liburcu (CI installs it); elsewhere they must say
    // they are unavailable.
    let (_, list, _) = run(&["list"]);
    let liburcu = !list
        .lines()
        .any(|l| l.starts_with("liburcu-memb") && l.contains("unavailable"));
    for w in ["rcu-read", "call-rcu", "rcu-update"] {
        let rows = bench_rows(
            run,
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
                "1",
            ],
        );
        let locks: Vec<&str> = rows.iter().map(|r| r["lock"].as_str().unwrap()).collect();
        let mut expect = vec![
            "none",
            "rcu-memb",
            "call-rcu-shared",
            "crossbeam-epoch",
            "arc-swap",
        ];
        if liburcu {
            expect.push("liburcu-memb");
        }
        if liburcu && w == "rcu-read" {
            expect.push("liburcu-qsbr");
        }
        if w == "rcu-read" {
            expect.extend(["rcu-qsbr", "srcu"]);
        }
        for l in expect {
            assert_eq!(
                locks.iter().filter(|x| **x == l).count(),
                2,
                "{w}: {l} at 1 and 2 threads"
            );
        }
        for r in &rows {
            let ops = r["ops_per_sec"]["median"].as_f64().unwrap();
            assert!(ops > 0.0, "{r}");
            assert!(r["rss_kb"].as_u64().unwrap() > 0, "{r}");
            assert!(
                r["handover"].is_null(),
                "no line-transfer model for RCU: {r}"
            );
            if w == "rcu-update" {
                // Thread 0 updates, the others read: the split adds up to the total, and there are
                // reads only with a second thread.
                let reads = r["reads_per_sec"].as_f64().unwrap();
                let updates = r["updates_per_sec"].as_f64().unwrap();
                assert!(updates > 0.0, "{r}");
                assert!(((reads + updates) / ops - 1.0).abs() < 1e-6, "{r}");
                assert_eq!(reads > 0.0, r["threads"] == 2, "{r}");
            } else {
                assert!(r["reads_per_sec"].is_null(), "{r}");
            }
        }
    }
    // Two updaters at 3 threads: updates/s is threads 0 and 1, reads/s thread 2.
    for r in bench_rows(
        run,
        &[
            "--workload",
            "rcu-update",
            "--locks",
            "rcu-memb",
            "--writers",
            "2",
            "--threads",
            "1,3",
            "--duration-ms",
            "30",
            "--repeats",
            "1",
        ],
    ) {
        let three = r["threads"] == 3;
        assert_eq!(
            r["writers"],
            if three { 2 } else { 1 },
            "capped at threads: {r}"
        );
        assert_eq!(r["reads_per_sec"].as_f64().unwrap() > 0.0, three, "{r}");
        assert!(r["scaling"].is_null(), "no scaling for rcu-update: {r}");
    }
    // rcu-sync: concurrent callers share grace periods; ours counts both, and the counts are real.
    let rows = bench_rows(
        run,
        &[
            "--workload",
            "rcu-sync",
            "--threads",
            "1,2",
            "--duration-ms",
            "50",
            "--repeats",
            "1",
        ],
    );
    let memb: Vec<_> = rows.iter().filter(|r| r["lock"] == "rcu-memb").collect();
    assert_eq!(memb.len(), 2, "{rows:?}");
    for r in &memb {
        let (g, c) = (
            r["grace_periods"].as_u64().unwrap(),
            r["sync_calls"].as_u64().unwrap(),
        );
        // Never more grace periods than calls (callers share them); a lone caller runs its own.
        assert!(g >= 1 && g <= c, "{r}");
        if r["threads"] == 1 {
            assert_eq!(g, c, "a lone caller runs its own grace periods: {r}");
        }
    }
    assert_eq!(
        rows.iter().any(|r| r["lock"] == "liburcu-memb"),
        liburcu,
        "liburcu runs rcu-sync where it is built"
    );
    if !liburcu {
        let (code, _, err) = run(&["bench", "--workload", "rcu-read", "--locks", "liburcu-memb"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("unavailable"), "{err}");
    }
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

/// `reproduce 004` prints the seed's table with its figures beside ours and a verdict
/// computed from them, and writes it all as JSON; a seed not built yet is one clear line.
#[test]
fn reproduce_004_prints_the_seeds_table_and_a_verdict() {
    let (code, out, err) = run(&["reproduce", "004", "--quick", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["reproductions"][0];
    assert_eq!(r["seed"], "004");
    let rows = r["figures"]["rows"].as_array().unwrap();
    assert_eq!(rows[0]["procs"], 1);
    assert_eq!(
        rows[0]["seed"][0], 595238.0,
        "the seed's tput-base at 1 proc"
    );
    for row in rows {
        let arms: Vec<&str> = row["ours"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a[0].as_str().unwrap())
            .collect();
        assert!(arms.starts_with(&["base", "rcu"]), "{row}");
        for a in row["ours"].as_array().unwrap() {
            assert!(a[1].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    let verdict = r["verdict"].as_str().unwrap();
    assert_eq!(
        verdict.starts_with("reproduced"),
        r["reproduced"].as_bool().unwrap(),
        "{verdict}"
    );
    assert!(verdict.contains("rcu/base x"), "{verdict}");
    assert!(
        v["results"].as_array().unwrap().len() >= 4,
        "the lab rows behind it"
    );

    let (code, out, _) = run(&["reproduce", "004", "--quick"]);
    assert_eq!(code, 0);
    assert!(out.contains("procs") && out.contains("tput-base") && out.contains("tput-rcu"));
    assert!(out.contains("595,238 (x1.00)"), "the seed's figures: {out}");
    assert!(out.contains("verdict: "), "{out}");

    let (code, _, err) = run(&["reproduce", "005"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown seed '005'"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Runs `reproduce SEED --quick --json -` and checks what every reproduction carries: the seed, a
/// table, and a verdict that agrees with its `reproduced` flag and names the seed's figures.
fn reproduce_json(seed: &str) -> serde_json::Value {
    let (code, out, err) = run(&["reproduce", seed, "--quick", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = v["reproductions"][0].clone();
    assert_eq!(r["seed"], seed);
    let verdict = r["verdict"].as_str().unwrap();
    assert_eq!(
        verdict.starts_with("reproduced"),
        r["reproduced"].as_bool().unwrap(),
        "{verdict}"
    );
    assert!(
        r["table"]
            .as_str()
            .unwrap()
            .starts_with(&format!("seed {seed}: "))
    );
    r
}

/// Seed 000: four builds of the write path, UP the cheapest (it has no locked instruction:
/// a model whose UP arm were not cheaper would be measuring something else), and the dd reference.
#[test]
fn reproduce_000_times_the_write_path_builds() {
    let r = reproduce_json("000");
    let arms = r["figures"]["arms"].as_array().unwrap();
    let ns: Vec<f64> = arms
        .iter()
        .map(|a| a["ns_per_write"].as_f64().unwrap())
        .collect();
    assert_eq!(ns.len(), 4);
    assert_eq!(arms[0]["arm"], "UP");
    assert!(ns[0] > 0.1 && ns.iter().all(|&n| n >= ns[0]), "{ns:?}");
    assert_eq!(r["figures"]["seed"]["smp_rwlock"][2], 2.445);
    let dd = &r["figures"]["dd"];
    assert_eq!(dd["count"], 256 * 1024, "{dd}");
    assert!(dd["total_s"].as_f64().unwrap() > 0.0, "{dd}");
    assert!(
        r["verdict"]
            .as_str()
            .unwrap()
            .contains("rwlock -> spinlock")
    );
}

/// Seed 001: three workloads x six node locks; MB/s-equivalent is ops x 4 KiB; the
/// non-spinning rwsem's writers sleep, the others' do not all.
#[test]
fn reproduce_001_runs_the_btree_workloads() {
    let r = reproduce_json("001");
    let rows = r["figures"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 18);
    for w in ["dbench", "creates", "stat-hammer"] {
        assert_eq!(rows.iter().filter(|x| x["workload"] == w).count(), 6, "{w}");
    }
    for x in rows {
        let ops = x["ops_per_sec"].as_f64().unwrap();
        assert!(ops > 0.0, "{x}");
        assert!(
            (x["mb_per_sec"].as_f64().unwrap() - ops * 4096.0 / 1e6).abs() < 1e-6 * ops,
            "{x}"
        );
        assert!(x["cpu_s_per_mop"].as_f64().unwrap() > 0.0, "{x}");
    }
    assert_eq!(r["figures"]["seed"]["dbench_mb_s"]["rwsem"], 200.0);
}

/// Seed 003: the directory model at the CPU count and four times it; idle shares are
/// percentages, and the seed's 90% / 15-20% are beside ours.
#[test]
fn reproduce_003_reports_idle_beside_throughput() {
    let r = reproduce_json("003");
    let rows = r["figures"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    let counts: std::collections::BTreeSet<u64> = rows
        .iter()
        .map(|x| x["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(counts.len(), 2);
    let (lo, hi) = (*counts.first().unwrap(), *counts.last().unwrap());
    assert_eq!(hi, 4 * lo);
    for x in rows {
        let idle = x["idle_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&idle), "{x}");
        assert!(x["ops_per_sec"].as_f64().unwrap() > 0.0, "{x}");
    }
    assert_eq!(r["figures"]["seed"]["rwsem_idle_pct"], 90.0);
    let table = r["table"].as_str().unwrap();
    assert!(
        table.contains("rwsem-no-reader-spin") && table.contains("15-20"),
        "{table}"
    );
}

/// `reproduce 002` measures five arms at 1 and 2 threads and derives each lock's share of a
/// stat() from them; the JSON's shares are the subtractions of its own arms.
#[test]
fn reproduce_002_measures_shares_by_subtraction() {
    let (code, out, err) = run(&["reproduce", "002", "--quick", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v["reproductions"][0];
    assert_eq!(r["seed"], "002");
    let arms = r["figures"]["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 5);
    let ns = |i: usize, t: usize| arms[i]["ns_per_op"][t].as_f64().unwrap();
    for a in arms {
        for t in 0..2 {
            let v = a["ns_per_op"][t].as_f64().unwrap();
            assert!(v > 1.0 && v < 100_000.0, "{a}");
        }
    }
    let sh = &r["figures"]["shares"];
    let brlock_1 = 100.0 * (ns(1, 0) - ns(3, 0)) / ns(1, 0);
    assert!(
        (sh["brlock_1"].as_f64().unwrap() - brlock_1).abs() < 1e-6,
        "{sh}"
    );
    let lockref_2 = 100.0 * (ns(1, 1) - ns(4, 1)) / ns(1, 1);
    assert!(
        (sh["lockref_2"].as_f64().unwrap() - lockref_2).abs() < 1e-6,
        "{sh}"
    );
    assert_eq!(
        r["verdict"].as_str().unwrap().starts_with("reproduced"),
        r["reproduced"].as_bool().unwrap()
    );
    assert!(r["table"].as_str().unwrap().contains("brlock + lockref"));
}

/// `report --from` draws a page from any JSON the lab wrote: a bench run and a reproduce
/// run together; four plots per workload configuration (scaling, latency CDF, idle, hand-over), the
/// reproduction's table and verdict; bad input is one clear line.
#[test]
fn report_draws_any_runs_into_one_page() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench.json");
    let repro = dir.path().join("repro.json");
    let page = dir.path().join("page.html");
    let (code, _, err) = run(&[
        "bench",
        "--workload",
        "rw",
        "--locks",
        "rwsem,std-rwlock",
        "--threads",
        "1,2",
        "--duration-ms",
        "40",
        "--repeats",
        "1",
        "--quiet",
        "--json",
        bench.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&[
        "reproduce",
        "000",
        "--quick",
        "--json",
        repro.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&[
        "report",
        "--from",
        bench.to_str().unwrap(),
        "--from",
        repro.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.trim_end().ends_with("page.html"),
        "the path is printed last: {out}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("<figure data-plot=").count(),
        4,
        "one rw configuration: 4 plots"
    );
    assert!(html.contains("<p data-plots=\"4\">"));
    for id in ["scaling", "latency", "idle", "handover"] {
        assert!(html.contains(&format!("-{id}\"")), "{id}");
    }
    assert!(html.contains("data-seed=\"000\"") && html.contains("SMP, files_lock rwlock"));
    assert_eq!(
        html.matches("<h2 id=\"run").count(),
        2,
        "one section per run"
    );

    let (code, _, err) = run(&["report", "--from", "/nonexistent/run.json"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read /nonexistent/run.json"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    std::fs::write(dir.path().join("bad.json"), "{\"x\": 1}").unwrap();
    let bad = dir.path().join("bad.json");
    let (code, _, err) = run(&["report", "--from", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("is not a locklab --json report"), "{err}");
}

/// Lab.md: the `condvar` workload: our Condvar and std's and parking_lot's on one bounded
/// queue; rows carry the queue's shape and the wake-ups per message; only condvar pairs run it (no
/// `none` row); its flags are refused elsewhere and bad values are one clear line.
#[test]
fn condvar_workload_delivers_messages_with_wakeups_counted() {
    let rows = bench_rows(
        run,
        &[
            "--workload",
            "condvar",
            "--threads",
            "1,4",
            "--slots",
            "8",
            "--notify",
            "all",
            "--duration-ms",
            "60",
            "--repeats",
            "1",
        ],
    );
    let locks: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["lock"].as_str().unwrap()).collect();
    assert_eq!(
        locks.into_iter().collect::<Vec<_>>(),
        ["condvar", "parking-lot-condvar", "std-condvar"]
    );
    for r in &rows {
        assert_eq!(r["slots"], 8, "{r}");
        assert_eq!(r["notify"], "all", "{r}");
        assert!(r["ops_per_sec"]["median"].as_f64().unwrap() > 0.0, "{r}");
        let w = r["wakeups_per_msg"].as_f64().unwrap();
        assert!((0.0..1000.0).contains(&w), "{r}");
        if r["threads"] == 1 {
            // Alone, a thread pushes then pops: it never waits, so it never sleeps.
            assert!(w < 0.01, "{r}");
        }
    }
    for (args, msg) in [
        (vec!["--slots", "0"], "slots"),
        (vec!["--notify", "some"], "not one of: one, all"),
    ] {
        let mut all = vec!["bench", "--workload", "condvar"];
        all.extend(args);
        let (code, _, err) = run(&all);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(msg), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let (code, _, err) = run(&["bench", "--workload", "mutex", "--slots", "4"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--slots applies only to --workload condvar"),
        "{err}"
    );
}

/// lab.md's `advise`: a small grid gives one cell per (threads, cs, read %) with the winner being the
/// fastest non-baseline row of that cell in the JSON's own rows, rules of thumb, and a heat map per
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
