//! `locklab bench` end to end on the workload families with their own counts: every RCU scheme
//! (read, call_rcu, synchronize, update) and the condvar workload's messages and wake-ups.

mod common;
use common::*;

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
