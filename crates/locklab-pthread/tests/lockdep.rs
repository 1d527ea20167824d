//! Lockdep in the preload library (`LOCKLAB_LOCKDEP`): programs written to deadlock only sometimes
//! (each run here does not: the threads never overlap) must be reported, with the chains in the
//! JSON; consistent orders, trylock-only inversions, reader-preferring reads and many instances of
//! one class taken one at a time must not. Under our locks and glibc's. Then real programs, which
//! must run clean and verify themselves, and the abort mode.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn program() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| compile_with("lockdep.c", "lockdep_c", &["-rdynamic"]))
        .clone()
}

/// Runs `exe args` with lockdep on under `mutex`; its output and the reports' kinds (every process's
/// JSON file).
fn run(exe: &Path, args: &[&str], mutex: &str, tag: &str) -> (std::process::Output, Vec<Value>) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockdep-{tag}-{mutex}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join("r-%p.json");
    let mut cmd = command(
        exe,
        true,
        &[
            ("LOCKLAB_MUTEX", mutex),
            ("LOCKLAB_LOCKDEP", "1"),
            ("LOCKLAB_LOCKDEP_OUT", out_path.to_str().unwrap()),
        ],
    );
    cmd.current_dir(&dir).args(args);
    let out = run_limited(cmd, Duration::from_secs(300));
    let mut reports = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_str().unwrap().starts_with("r-") {
            let text = std::fs::read_to_string(&p).unwrap();
            if text.is_empty() {
                // A process that ended without writing (a fork child's `_exit`).
                continue;
            }
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}\n{text}", p.display()));
            reports.extend(v.as_array().unwrap().iter().cloned());
        }
    }
    (out, reports)
}

fn kinds(reports: &[Value]) -> Vec<String> {
    reports
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect()
}

const EXPECTED: [(&str, &[&str]); 23] = [
    ("abba", &["circular-dependency"]),
    ("cycle3", &["circular-dependency"]),
    ("philosophers", &["same-class-order"]),
    ("rw_abba", &["circular-dependency"]),
    ("recursive_read", &["recursive-read"]),
    ("signal", &["signal-unsafe"]),
    ("cond_holding", &["cond-wait-holding"]),
    (
        "misuse",
        &["unlock-not-held", "destroy-held", "exit-holding"],
    ),
    ("c11", &["circular-dependency"]),
    ("spin", &["circular-dependency"]),
    ("consistent", &[]),
    ("trylock", &[]),
    ("instances", &[]),
    ("rw_readers", &[]),
    ("recursive_read_ok", &[]),
    ("signal_blocked", &[]),
    ("semaphore", &[]),
    // Never-initialised objects of one kind (zeroed, static initializers) nested in a consistent
    // order, each first locked by whichever code came first: no class of "first locked at" sites.
    ("zeroed_accounts", &[]),
    ("static_buckets", &[]),
    ("zeroed_coupling", &[]),
    // ... while an inversion between two such objects is still one.
    ("zeroed_accounts_abba", &["circular-dependency"]),
    ("static_abba_helper", &["circular-dependency"]),
    ("mixed_cycle", &["circular-dependency"]),
];

#[test]
fn potential_deadlocks_are_reported_and_good_orders_are_not() {
    let exe = program();
    for mutex in ["mutex", "mcs", "glibc"] {
        for (scenario, want) in EXPECTED {
            // The program is right under glibc alone (nothing deadlocks in these runs).
            let mut c = command(&exe, false, &[]);
            c.arg(scenario);
            let plain = run_limited(c, Duration::from_secs(60));
            assert_ok(&plain, &format!("{scenario} under glibc alone"));
            let (out, reports) = run(&exe, &[scenario], mutex, scenario);
            assert_ok(&out, &format!("{scenario} under {mutex} with lockdep"));
            assert_eq!(
                kinds(&reports),
                want,
                "{scenario} under {mutex}: {reports:#?}"
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                stderr.matches("==== locklab lockdep:").count(),
                want.len(),
                "{scenario}: one printed report per problem:\n{stderr}"
            );
        }
    }
}

/// A plugin's static lock is forgotten at `dlclose`: another plugin loaded at the same addresses,
/// taking its own lock in the other order, is not joined with the closed one's orders.
#[test]
fn a_plugin_loaded_where_a_closed_one_was_gets_classes_of_its_own() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lockdep-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let a = compile_with(
        "lockdep_plugin.c",
        "lockdep-plugins/libldplug_a.so",
        &["-shared", "-fPIC"],
    );
    let b = compile_with(
        "lockdep_plugin.c",
        "lockdep-plugins/libldplug_b.so",
        &["-shared", "-fPIC", "-DHOST_FIRST"],
    );
    let args = ["plugin_reload", a.to_str().unwrap(), b.to_str().unwrap()];
    let mut c = command(&program(), false, &[]);
    c.args(args);
    assert_ok(
        &run_limited(c, Duration::from_secs(60)),
        "plugin_reload under glibc alone",
    );
    for mutex in ["mutex", "glibc"] {
        let (out, reports) = run(&program(), &args, mutex, "plugin-reload");
        assert_ok(&out, &format!("plugin_reload under {mutex} with lockdep"));
        assert!(reports.is_empty(), "{mutex}: {reports:#?}");
    }
}

#[test]
fn a_cycle_report_names_both_chains_with_sites() {
    let (_, reports) = run(&program(), &["cycle3"], "mutex", "chains");
    let chain = reports[0]["chain"].as_array().unwrap();
    assert_eq!(chain.len(), 3, "a 3-lock cycle has three steps: {chain:#?}");
    for step in chain {
        for end in ["held", "acquired"] {
            let site = step[end]["site"].as_str().unwrap();
            // -rdynamic: the program's functions are named.
            assert!(
                site.starts_with("lock_") || site.contains("lockdep_c"),
                "a symbolised site: {site}"
            );
        }
    }
    assert_eq!(reports[0]["classes"].as_array().unwrap().len(), 3);
}

#[test]
fn abort_mode_stops_the_program_at_the_first_report() {
    let exe = program();
    let mut c = command(&exe, true, &[("LOCKLAB_LOCKDEP", "abort")]);
    c.arg("abba");
    let out = run_limited(c, Duration::from_secs(60));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("possible circular locking dependency") && stderr.contains("aborting"));
}

#[test]
fn a_bad_value_is_one_line_and_lockdep_stays_off() {
    let mut c = command(&program(), true, &[("LOCKLAB_LOCKDEP", "sometimes")]);
    c.arg("abba");
    let out = run_limited(c, Duration::from_secs(60));
    assert_ok(&out, "a bad LOCKLAB_LOCKDEP");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("LOCKLAB_LOCKDEP"));
}

/// Real programs under lockdep: clean, and still verifying themselves.
#[test]
fn real_programs_run_clean() {
    let cases: [(&str, &[&str]); 4] = [
        ("tchmttest", &["write", "-rnd", "a.tch", "4", "5000"]),
        ("tcumttest", &["typical", "4", "10000"]),
        ("kccachetest", &["order", "-th", "4", "-rnd", "10000"]),
        ("kccachetest", &["wicked", "-th", "2", "-it", "1", "3000"]),
    ];
    for (program, args) in cases {
        let exe = Path::new("/usr/bin").join(program);
        if !exe.exists() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{program} missing"
            );
            eprintln!("skipped: {program} is not installed");
            continue;
        }
        for mutex in ["mutex", "glibc"] {
            let (out, reports) = run(&exe, args, mutex, &format!("{program}-{}", args[0]));
            assert_ok(
                &out,
                &format!("{program} {args:?} under {mutex} with lockdep"),
            );
            assert!(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .any(|l| l.trim() == "ok"),
                "{program} did not verify"
            );
            assert!(reports.is_empty(), "{program} {args:?}: {reports:#?}");
        }
    }
}

/// A C++ lock wrapper whose constructor calls `pthread_mutex_init`: its locks are told apart by
/// where the wrapper is constructed (the init call's callers), so a consistent order through a
/// third lock is not a cycle, while real inversions between wrapped locks still are, whether they
/// were made at two places or by one loop.
#[test]
fn locks_made_by_a_wrapper_constructor_are_classed_by_where_it_is_constructed() {
    let exe = compile_with("lockdep_wrapper.cpp", "lockdep_wrapper_cpp", &["-rdynamic"]);
    for mutex in ["mutex", "glibc"] {
        for (scenario, want) in [
            ("wrapped", &[][..]),
            ("wrapped_abba", &["circular-dependency"][..]),
            ("array_abba", &["same-class-order"][..]),
        ] {
            let mut c = command(&exe, false, &[]);
            c.arg(scenario);
            assert_ok(
                &run_limited(c, Duration::from_secs(60)),
                &format!("{scenario} under glibc alone"),
            );
            let (out, reports) = run(&exe, &[scenario], mutex, &format!("wrapper-{scenario}"));
            assert_ok(&out, &format!("{scenario} under {mutex} with lockdep"));
            assert_eq!(
                kinds(&reports),
                want,
                "{scenario} under {mutex}: {reports:#?}"
            );
        }
    }
    // The report names where each wrapper was constructed: the init site, then its callers.
    let (_, reports) = run(&exe, &["wrapped_abba"], "mutex", "wrapper-names");
    let classes: Vec<&str> = reports[0]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(classes.len(), 2, "{classes:?}");
    assert!(
        classes.iter().all(|c| c.contains(" from main+")),
        "the classes name their constructors' callers: {classes:?}"
    );
}

/// Lock memory reused without `*_destroy` (a pool's memset, a freed list rebuilt at the same
/// addresses, rwlocks too) starts a new life: the dead lock's orders never meet the new one's; a
/// real inversion within the new life is still reported. Under every choice that has the spare
/// bytes for lockdep's life mark (not `mcs`).
#[test]
fn memory_reused_without_destroy_starts_a_new_life() {
    let exe = compile("lockdep_reuse.c", "lockdep_reuse_c");
    for mutex in ["mutex", "ticket", "glibc"] {
        for (scenario, want) in [
            ("pool", &[][..]),
            ("rwpool", &[][..]),
            ("list", &[][..]),
            ("reused_abba", &["circular-dependency"][..]),
        ] {
            let mut c = command(&exe, false, &[]);
            c.arg(scenario);
            let plain = run_limited(c, Duration::from_secs(60));
            assert_ok(&plain, &format!("{scenario} under glibc alone"));
            if scenario == "list" {
                // The scenario needs the allocator to hand the blocks back.
                assert!(
                    String::from_utf8_lossy(&plain.stdout).contains("6 of 6 addresses reused"),
                    "{}",
                    String::from_utf8_lossy(&plain.stdout)
                );
            }
            let (out, reports) = run(&exe, &[scenario], mutex, &format!("reuse-{scenario}"));
            assert_ok(&out, &format!("{scenario} under {mutex} with lockdep"));
            assert_eq!(
                kinds(&reports),
                want,
                "{scenario} under {mutex}: {reports:#?}"
            );
        }
    }
}

/// `lockdep_more.c`: programs whose behaviour lockdep must keep and whose locking it must judge
/// right (robust-mutex recovery, double unlocks, recursive reads without a writer, signal
/// semantics, a small alternate signal stack, the signal rule over every hold).
fn program_more() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        compile_with(
            "lockdep_more.c",
            "lockdep_more_c",
            &["-rdynamic", "-Wno-deprecated-declarations"],
        )
    })
    .clone()
}

const MORE: [(&str, &[&str]); 9] = [
    // EOWNERDEAD (from lock, trylock and timedlock) is a hold: its unlock is the owner's;
    // ENOTRECOVERABLE is none (the thread exits holding nothing).
    ("robust", &[]),
    // A normal mutex unlocked twice: the second unlock frees a lock nobody holds.
    ("double_unlock", &["unlock-not-held"]),
    // A binary semaphore: another thread's unlock of a held normal mutex is legal.
    ("semaphore", &[]),
    // Reported without a writer in this run: the writer may come in another.
    ("rr_no_writer", &["recursive-read"]),
    // siginterrupt() then signal(): the read returns EINTR (a hang if SA_RESTART were forced).
    ("siginterrupt", &[]),
    // SA_NODEFER, sa_mask, SA_SIGINFO, SA_RESETHAND, the old handlers, sysv_signal, sigset.
    ("semantics", &[]),
    // Reports composed in a handler on a small alternate stack: no crash.
    (
        "altstack",
        &["circular-dependency", "signal-unsafe", "signal-unsafe"],
    ),
    // Held with the signal blocked first, unblocked later: reported.
    ("sig_later_unblocked", &["signal-unsafe"]),
    // Held unblocked only before the handler existed, blocked since: not reported.
    ("sig_unblocked_before_handler", &[]),
];

#[test]
fn behaviour_is_kept_and_misuse_judged_right() {
    let exe = program_more();
    for (scenario, want) in MORE {
        // Right under glibc alone, and under the library without lockdep.
        let mut c = command(&exe, false, &[]);
        c.arg(scenario);
        assert_ok(
            &run_limited(c, Duration::from_secs(60)),
            &format!("{scenario} under glibc alone"),
        );
        let mut c = command(&exe, true, &[]);
        c.arg(scenario);
        assert_ok(
            &run_limited(c, Duration::from_secs(60)),
            &format!("{scenario} under the library"),
        );
        for mutex in ["mutex", "glibc"] {
            let (out, reports) = run(&exe, &[scenario], mutex, &format!("more-{scenario}"));
            assert_ok(&out, &format!("{scenario} under {mutex} with lockdep"));
            let mut got = kinds(&reports);
            got.sort();
            assert_eq!(got, want, "{scenario} under {mutex}: {reports:#?}");
        }
    }
}

/// `LOCKLAB_LOCKDEP=abort` with `LOCKLAB_LOCKDEP_OUT`: the report that stopped the program is in
/// the file (written before the abort), also when found in a signal handler.
#[test]
fn abort_mode_writes_the_report_before_aborting() {
    use std::os::unix::process::ExitStatusExt;
    for (exe, scenario, kind) in [
        (program(), "abba", "circular-dependency"),
        (program_more(), "sig_later_unblocked", "signal-unsafe"),
    ] {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lockdep-abort-{scenario}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out_path = dir.join("r.json");
        let mut c = command(
            &exe,
            true,
            &[
                ("LOCKLAB_LOCKDEP", "abort"),
                ("LOCKLAB_LOCKDEP_OUT", out_path.to_str().unwrap()),
            ],
        );
        c.arg(scenario);
        let out = run_limited(c, Duration::from_secs(60));
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
        let text = std::fs::read_to_string(&out_path).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert_eq!(kinds(v.as_array().unwrap()), [kind], "{v:#}");
    }
}

/// A correct C++ program whose locks live in objects and are never initialised (`std::mutex`,
/// `std::shared_mutex`): accounts locked in index order and with `std::scoped_lock`, per-bucket
/// locks, lock coupling down a list whose nodes are freed and reallocated, objects freed and
/// rebuilt as another kind at the same addresses, a worker pool. No report under any choice that
/// carries the life mark.
#[test]
fn a_cpp_program_of_locks_in_objects_runs_clean() {
    let exe = compile("lockdep_objects.cpp", "lockdep_objects_cpp");
    let plain = run_limited(command(&exe, false, &[]), Duration::from_secs(60));
    assert_ok(&plain, "lockdep_objects under glibc alone");
    for mutex in ["mutex", "ticket", "glibc"] {
        let (out, reports) = run(&exe, &["500"], mutex, "objects");
        assert_ok(&out, &format!("lockdep_objects under {mutex} with lockdep"));
        assert!(reports.is_empty(), "under {mutex}: {reports:#?}");
    }
}
