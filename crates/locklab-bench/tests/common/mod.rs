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

/// The processes whose command line is exactly `words` (e.g. `["sleep", "4321.5"]`).
pub fn processes_running(words: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        // A zombie waiting for its reaper is not running.
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .collect()
}

/// Kills what a failed test left running (so that a failure does not leave daemons behind).
pub fn kill_all(pids: &[i32]) {
    for &p in pids {
        let _ = std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status();
    }
}

/// A `sleep` duration unique to this test process and `n`: its command line finds the sleeper.
pub fn unique_sleep(n: u32) -> String {
    format!("{}.{}", 100_000 + n, std::process::id())
}

/// The scratch directories of the lab process `pid` in the temporary directory (`locklab-try-PID-*`,
/// `locklab-apps-PID`).
pub fn scratch_dirs(pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&format!("locklab-try-{pid}-")) || n == format!("locklab-apps-{pid}")
        })
        .map(|e| e.path())
        .collect()
}

/// Starts the lab with `args` in the background (its output discarded), waits until `ready` holds
/// (at most 30 s), sends it `signal`, and returns how it ended and its pid.
pub fn signal_midway(
    args: &[&str],
    ready: impl Fn(u32) -> bool,
    signal: i32,
) -> (std::process::ExitStatus, u32) {
    let _machine = shared_machine();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("locklab"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    while !ready(pid) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the lab never got ready"
        );
        assert!(child.try_wait().unwrap().is_none(), "the lab ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st, pid);
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the lab did not end on signal {signal}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
