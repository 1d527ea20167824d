//! What every command's end-to-end tests share: the binary, and a lock that lets one test have the
//! whole machine (the busy-machine test) while the others share it.
#![allow(dead_code)]

use assert_cmd::Command;

pub fn locklab() -> Command {
    Command::cargo_bin("locklab").expect("the locklab binary builds")
}

/// Tests run in parallel threads. Most may share the machine, but two may not: the limit test times
/// the `none` loop against every lock (a run disturbed by another test's threads can make a lock
/// "beat" the loop without a lock), and the busy-machine test starts a busy loop on every CPU. They
/// take this lock exclusively; every other `run` takes it shared.
pub static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub fn shared_machine() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn whole_machine() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Runs with args and returns (status code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let _machine = shared_machine();
    run_alone(args)
}

/// `bench ARGS --quiet --json -` through `runner` (`run` or `run_alone`): exit 0, and the rows.
pub fn bench_rows(
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
pub fn run_alone(args: &[&str]) -> (i32, String, String) {
    let out = locklab().args(args).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Compiles a C program (`-O2 -pthread`) into the test's scratch directory; `None` without a C
/// compiler (never on CI, which installs one).
pub fn compile_c(name: &str, src: &str) -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let c = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&c, src).unwrap();
    let ok = std::process::Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&c)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI has a C compiler"
        );
        return None;
    }
    Some(exe)
}
