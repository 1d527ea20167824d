//! Real programs on the preload library, under every mutex choice: Tokyo Cabinet's and Kyoto
//! Cabinet's multi-threaded tests (which verify their own databases and print "ok") and CPython
//! running a threaded script (the GIL is a pthread mutex and condvar). Each must exit 0 with its own
//! verification. Threads outnumber the CI machine's CPUs in some, so the pure spinlocks are tested
//! oversubscribed too (slowly, as documented).
//!
//! A program that is not installed is skipped with a note, except under `CI=true`, where `.ci/run`
//! installs them and a missing one fails.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

fn installed(program: &str) -> bool {
    let found = Path::new("/usr/bin").join(program).exists();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} is not installed (CI installs tokyocabinet-bin, kyotocabinet-utils, python3)"
        );
        eprintln!("skipped: {program} is not installed");
    }
    found
}

/// Runs `args` under each mutex choice (and glibc alone): exit 0 and "ok" on a line of its own.
fn under_every_choice(program: &str, args: &[&str], setup: impl Fn(&Path)) {
    if !installed(program) {
        return;
    }
    for (preload, choice) in
        std::iter::once((false, "none")).chain(MUTEXES.iter().map(|m| (true, *m)))
    {
        let dir = tempdir(&format!("{program}-{}", args[0].replace('/', "_")), choice);
        setup(&dir);
        let exe = Path::new("/usr/bin").join(program);
        let mut cmd = command(&exe, preload, &[("LOCKLAB_MUTEX", choice)]);
        if !preload {
            cmd.env_remove("LOCKLAB_MUTEX");
        }
        cmd.current_dir(&dir).args(args);
        let out = run_limited(cmd, Duration::from_secs(300));
        assert_ok(&out, &format!("{program} {args:?} under {choice}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines().any(|l| l.trim() == "ok"),
            "{program} under {choice} did not verify:\n{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn tempdir(program: &str, choice: &str) -> std::path::PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("real-{program}-{choice}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn tokyo_cabinet_hash_writers() {
    under_every_choice(
        "tchmttest",
        &["write", "-rnd", "a.tch", "4", "10000"],
        |_| {},
    );
}

#[test]
fn tokyo_cabinet_hash_wicked() {
    under_every_choice("tchmttest", &["wicked", "b.tch", "2", "5000"], |_| {});
}

#[test]
fn tokyo_cabinet_btree_typical() {
    under_every_choice("tcumttest", &["typical", "4", "20000"], |_| {});
}

#[test]
fn kyoto_cabinet_order() {
    under_every_choice(
        "kccachetest",
        &["order", "-th", "4", "-rnd", "20000"],
        |_| {},
    );
}

#[test]
fn kyoto_cabinet_wicked() {
    under_every_choice(
        "kccachetest",
        &["wicked", "-th", "2", "-it", "1", "5000"],
        |_| {},
    );
}

#[test]
fn python_threads() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/threads.py");
    if !installed("python3") {
        return;
    }
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join("threads.py");
    std::fs::copy(&script, &copy).unwrap();
    under_every_choice("python3", &[copy.to_str().unwrap()], |_| {});
}
