//! Helpers of the preload library's tests: find the built library, compile C and C++ programs with
//! the `cc` crate's compiler, and run a program with a time limit, with or without the library.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `liblocklab_pthread.so` cargo built for this test run (beside the test binary's `deps/`).
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let p = dir.join("liblocklab_pthread.so");
        if p.exists() {
            return p;
        }
    }
    panic!("liblocklab_pthread.so not found near {}", deps.display());
}

/// The C sources' directory.
pub fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Compiles `src` (C, or C++ if it ends in `.cpp`) into an executable named `name` in the test
/// scratch directory, with the compiler the `cc` crate picks for this target.
pub fn compile(src: &str, name: &str) -> PathBuf {
    compile_with(src, name, &[])
}

/// [`compile`] with more compiler arguments.
pub fn compile_with(src: &str, name: &str, extra: &[&str]) -> PathBuf {
    let cpp = src.ends_with(".cpp");
    let target = target_triple();
    let compiler = cc::Build::new()
        .cpp(cpp)
        .target(&target)
        .host(&target)
        .opt_level(2)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut cmd = compiler.to_command();
    cmd.arg("-pthread")
        .arg("-o")
        .arg(&out)
        .arg(c_dir().join(src));
    if cpp {
        cmd.arg("-std=c++17");
    }
    cmd.arg("-ldl").args(extra);
    let st = cmd.status().expect("run the C compiler");
    assert!(st.success(), "compiling {src} failed");
    out
}

fn target_triple() -> String {
    let arch = std::env::consts::ARCH;
    format!("{arch}-unknown-linux-gnu")
}

/// Runs `cmd` to completion or kills it after `limit` (a hang is a failure, not a stuck test).
pub fn run_limited(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{:?} did not finish in {:?} (a hang)\nstdout:\n{}\nstderr:\n{}",
                cmd,
                limit,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A command for `program` with the library preloaded and `env` set (`None`: glibc alone).
pub fn command(program: &Path, preload: bool, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("LD_PRELOAD")
        .env_remove("LOCKLAB_MUTEX")
        .env_remove("LOCKLAB_RWLOCK")
        .env_remove("LOCKLAB_SPIN")
        .env_remove("LOCKLAB_EXPECT_PRELOAD");
    if preload {
        cmd.env("LD_PRELOAD", library())
            .env("LOCKLAB_EXPECT_PRELOAD", "1");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Asserts a run exited 0, showing its output otherwise.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The mutex choices, `glibc` included.
pub const MUTEXES: [&str; 7] = [
    "adaptive",
    "mcs",
    "ticket",
    "qspinlock",
    "tas",
    "glibc",
    "glibc-adaptive",
];

/// Runs the C program `src` under glibc alone (so it tests the contract, not our implementation),
/// then with the library under each environment of `choices`, each run within `limit`: every run
/// must exit 0, and with the library print "0 failure(s)".
pub fn matrix(src: &str, name: &str, choices: &[Vec<(&str, &str)>], limit: Duration) {
    let exe = compile(src, name);
    let out = run_limited(command(&exe, false, &[]), limit);
    assert_ok(&out, &format!("{name} under glibc alone"));
    for env in choices {
        let out = run_limited(command(&exe, true, env), limit);
        assert_ok(&out, &format!("{name} with the library, {env:?}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("0 failure(s)"), "{name} {env:?}: {text}");
    }
}

/// Every mutex choice as an environment, `glibc` included.
pub fn mutex_choices() -> Vec<Vec<(&'static str, &'static str)>> {
    MUTEXES
        .iter()
        .map(|m| vec![("LOCKLAB_MUTEX", *m)])
        .collect()
}
