//! `locklab try -- CMD`: a user's program under glibc and each choice, every run verified against
//! glibc's; bad input gets one line and exit status 2 (127 for a program not found).

mod common;
use common::*;

fn one_line_error(args: &[&str], code: i32, want: &str) {
    let (c, out, err) = run(args);
    assert_eq!(c, code, "{args:?}: {err}");
    assert_eq!(out, "", "{args:?}: nothing runs");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
}

#[test]
fn bad_input_is_one_line_and_exit_2_or_127() {
    one_line_error(&["try"], 2, "needs a command");
    one_line_error(&["try", "--"], 2, "needs a command");
    one_line_error(
        &["try", "--locks", "mcs,bogus", "--", "true"],
        2,
        "unknown lock `bogus`",
    );
    one_line_error(
        &["try", "--rwlocks", "nope", "--", "true"],
        2,
        "unknown rwlock `nope`",
    );
    one_line_error(
        &["try", "--rate", "ops [0-9]+", "--", "true"],
        2,
        "has no group",
    );
    one_line_error(
        &["try", "--rate", "ops ([0-9]+", "--", "true"],
        2,
        "not a regular expression",
    );
    one_line_error(&["try", "--repeats", "0", "--", "true"], 2, "--repeats");
    one_line_error(
        &["try", "--", "no-such-program-anywhere"],
        127,
        "command not found",
    );
    one_line_error(&["try", "--", "/no/such/program"], 127, "command not found");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    use std::os::unix::fs::PermissionsExt;
    let plain = dir.join("try_not_executable");
    std::fs::write(&plain, "not a program\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    one_line_error(
        &["try", "--", plain.to_str().unwrap()],
        126,
        "not an executable",
    );
    let garbage = dir.join("try_garbage_executable");
    std::fs::write(&garbage, [0x7fu8, b'E', b'L', b'F', 0, 0, 0]).unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o755)).unwrap();
    one_line_error(&["try", "--", garbage.to_str().unwrap()], 126, "cannot run");
    one_line_error(
        &["advise", "--from", "/no/such/stat.json"],
        2,
        "--from /no/such/stat.json",
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let bad = dir.join("try_bad_stat.json");
    std::fs::write(&bad, "{\"nope\": 1}").unwrap();
    one_line_error(
        &["advise", "--from", bad.to_str().unwrap()],
        2,
        "not the lock statistics",
    );
}

#[test]
fn a_spec_with_a_mistake_is_one_line_naming_file_and_key() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let spec = dir.join("try_spec_missing.toml");
    std::fs::write(
        &spec,
        "name = \"x\"\nwhat = \"x\"\nprograms = [\"true\"]\npackages = [\"coreutils\"]\n[rate]\nkind = \"bytes\"\nbytes = 10\n",
    )
    .unwrap();
    let s = spec.to_str().unwrap();
    one_line_error(
        &["apps", "--spec", s],
        2,
        &format!("spec {s}: `run`: missing section"),
    );
    std::fs::write(
        &spec,
        "name = \"x\"\nwhat = \"x\"\nprograms = [\"true\"]\npackages = [\"coreutils\"]\n[run]\ncommand = \"true\"\n[rate]\nkind = \"bytes\"\n",
    )
    .unwrap();
    one_line_error(&["apps", "--spec", s], 2, "`rate.bytes`: missing");
}

#[test]
fn a_user_spec_runs_like_a_built_in_app() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let spec = dir.join("try_spec_good.toml");
    std::fs::write(
        &spec,
        r#"name = "echo-rate"
what = "prints a rate"
programs = ["sh"]
packages = ["dash"]
[input]
command = "sh -c echo{_}hello{_}>{_}input"
[run]
command = "sh -c test{_}-s{_}{DIR}/input{_}&&{_}echo{_}ops:{_}{T}000{_}&&{_}echo{_}ok"
[rate]
kind = "regex"
regex = "ops: ([0-9]+)"
[verify]
ok_line = "ok"
"#,
    )
    .unwrap();
    let (code, out, err) = run(&[
        "apps",
        "--spec",
        spec.to_str().unwrap(),
        "--locks",
        "mutex",
        "--threads",
        "3",
        "--repeats",
        "1",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    let json = &out[out.find("{\n").expect("the JSON")..];
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    let rows = doc["apps"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "glibc and mutex: {rows:?}");
    for r in rows {
        assert_eq!(r["app"], "echo-rate");
        assert_eq!(
            r["median"], 3000.0,
            "the rate the program printed for {{T}} = 3"
        );
        assert_eq!(r["verified"], true);
    }
}

#[test]
fn a_choice_the_program_fails_under_fails_the_command_with_its_stderr() {
    // Fails (status 3, a line on stderr) only when LOCKLAB_MUTEX says mcs.
    let script = r#"if [ "$LOCKLAB_MUTEX" = mcs ]; then echo "broken under mcs" >&2; exit 3; fi; echo ops/s: 42"#;
    let (code, out, err) = run(&[
        "try",
        "--locks",
        "mutex,mcs",
        "--repeats",
        "3",
        "--rate",
        "ops/s: ([0-9.]+)",
        "--json",
        "-",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, 1, "{err}\n{out}");
    assert!(err.contains("failed under mcs"), "{err}");
    let mcs = out
        .lines()
        .find(|l| l.starts_with("mcs "))
        .expect("an mcs row");
    assert!(
        mcs.contains("FAILED: exit status 3 (glibc: exit status 0)"),
        "{mcs}"
    );
    assert!(mcs.contains("broken under mcs"), "its stderr tail: {mcs}");
    let json = &out[out.find("{\n").expect("the JSON")..];
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    let rows = doc["apps"].as_array().unwrap();
    let labels: Vec<&str> = rows.iter().map(|r| r["lock"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        ["glibc", "mutex", "mcs"],
        "no rwlock rows: sh takes no rwlock"
    );
    assert_eq!(rows[0]["verdict"], "reference");
    assert_eq!(rows[1]["median"], 42.0);
    assert_eq!(rows[1]["ratio_vs_glibc"], 1.0);
    assert_eq!(rows[1]["verdict"], "within noise", "equal spreads overlap");
    assert_eq!(rows[1]["unit"], "rate");
    assert_eq!(rows[2]["verified"], false);
    assert_eq!(rows[2]["verdict"], "failed");
    assert!(out.contains("recommendation: keep glibc"), "{out}");
    assert!(!out.contains("warning:"), "{out}");
    // A program that fails under glibc itself: nothing to compare with, one error, and no run
    // after glibc's (the statistics run and the first measured one).
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let log = dir.join("try_fails_under_glibc.log");
    let _ = std::fs::remove_file(&log);
    let script = format!("echo run >> {}; echo nope >&2; exit 5", log.display());
    let (code, out, err) = run(&["try", "--locks", "mutex,mcs", "--", "sh", "-c", &script]);
    assert_eq!(code, 1, "{err}\n{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(
            "the program fails under glibc itself (exit status 5; stderr: nope): nothing to compare the locks with"
        ),
        "{err}"
    );
    let runs = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(runs, 2, "stopped after glibc's first measured run");
}

/// A program's stderr in a message is its last lines, cut, with what was cut counted: never
/// megabytes on one line.
#[test]
fn a_failures_stderr_is_cut_and_counted() {
    let script = r#"if [ "$LOCKLAB_MUTEX" = mcs ]; then head -c 5000000 /dev/zero | tr '\0' x >&2; echo >&2; echo last words >&2; exit 3; fi"#;
    let (code, out, err) = run(&[
        "try",
        "--locks",
        "mcs",
        "--repeats",
        "1",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, 1, "{err}");
    let mcs = out
        .lines()
        .find(|l| l.starts_with("mcs "))
        .expect("an mcs row");
    assert!(mcs.len() < 800, "{} bytes: {}", mcs.len(), &mcs[..200]);
    assert!(mcs.contains("last words"), "{mcs}");
    assert!(
        mcs.contains("[stderr cut: ") && mcs.contains("of its 5000012 bytes not shown]"),
        "{mcs}"
    );
    assert!(out.len() < 10_000, "{} bytes of output", out.len());
}

/// lab.md: nothing a run starts outlives it, daemons included (fork, setsid, fork: out of the
/// run's process group and session).
#[test]
fn a_daemon_a_run_starts_does_not_outlive_it() {
    let s = unique_sleep(1);
    let script = format!("setsid sh -c 'sleep {s} >/dev/null 2>&1 &' & wait");
    let (code, out, err) = run(&[
        "try",
        "--locks",
        "mutex",
        "--repeats",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let left = processes_running(&["sleep", &s]);
    kill_all(&left);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(left.is_empty(), "{} daemons outlived try", left.len());
}

/// A signal to the lab ends the run in progress, its scratch directory and every process it
/// started, and the lab ends by that signal.
#[test]
fn a_signal_leaves_no_process_and_no_scratch_directory() {
    use std::os::unix::process::ExitStatusExt;
    for (n, signal) in [(2, libc::SIGTERM), (3, libc::SIGINT)] {
        let s = unique_sleep(n);
        let script = format!("setsid sh -c 'sleep {s} & sleep {s}' & wait");
        let (status, pid) = signal_midway(
            &["try", "--locks", "mutex", "--", "sh", "-c", &script],
            |pid| processes_running(&["sleep", &s]).len() == 2 && !scratch_dirs(pid).is_empty(),
            signal,
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        let left = processes_running(&["sleep", &s]);
        kill_all(&left);
        let dirs = scratch_dirs(pid);
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        assert_eq!(status.signal(), Some(signal), "{status:?}");
        assert!(
            left.is_empty(),
            "signal {signal}: {} left running",
            left.len()
        );
        assert!(dirs.is_empty(), "signal {signal}: {dirs:?} left");
    }
}

#[test]
fn setup_runs_before_each_run() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let flag = dir.join("try_setup_flag");
    let _ = std::fs::remove_file(&flag);
    let f = flag.to_str().unwrap();
    // The program consumes the file the setup makes: without a setup before every run, the second
    // run would fail.
    let (code, out, err) = run(&[
        "try",
        "--locks",
        "mutex",
        "--repeats",
        "2",
        "--setup",
        &format!("touch {f}"),
        "--",
        "rm",
        f,
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.contains("2 repeats interleaved over 2 choices; wall time"),
        "{out}"
    );
    let (code, _, err) = run(&[
        "try",
        "--locks",
        "mutex",
        "--repeats",
        "1",
        "--setup",
        "exit 4",
        "--",
        "true",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--setup `exit 4` failed (exit status 4)"),
        "{err}"
    );
    // A setup that hangs is bounded (--setup-timeout), said while it runs, and killed.
    let s = unique_sleep(4);
    let setup = format!("sleep {s}");
    let start = std::time::Instant::now();
    let (code, _, err) = run(&[
        "try",
        "--setup-timeout",
        "2",
        "--setup",
        &setup,
        "--",
        "true",
    ]);
    let left = processes_running(&["sleep", &s]);
    kill_all(&left);
    assert_eq!(code, 1, "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    assert!(
        err.contains(&format!(
            "--setup `{setup}` still running after 1 s (stopped at 2 s)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "--setup `{setup}` did not finish in 2 s (--setup-timeout): stopped"
        )),
        "{err}"
    );
    assert!(left.is_empty());
    one_line_error(
        &["try", "--setup-timeout", "0", "--", "true"],
        2,
        "--setup-timeout: `0` is not 1-3600 seconds",
    );
    let (code, out, err) = run(&[
        "try",
        "--repeats",
        "1",
        "--json",
        "/no/such/dir/t.json",
        "--",
        "true",
    ]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("cannot write /no/such/dir/t.json"),
        "before any run: {err}"
    );
}

/// A program whose output depends on the lock's insides: glibc's private `__nusers` field of a
/// held mutex (1 under glibc; our mutexes keep their state elsewhere).
#[test]
fn same_output_catches_a_program_that_reads_glibcs_insides() {
    let src = r#"
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
int main(void) {
  pthread_mutex_lock(&m);
  printf("held: __nusers=%u\n", m.__data.__nusers);
  pthread_mutex_unlock(&m);
  return 0;
}
"#;
    let Some(exe) = compile_c("try_nusers", src) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let (code, out, err) = run(&[
        "try",
        "--locks",
        "glibc-adaptive,mutex",
        "--repeats",
        "3",
        "--same-output",
        "--",
        exe,
    ]);
    assert_eq!(code, 1, "{err}\n{out}");
    assert!(err.contains("failed under mutex"), "{err}");
    let row = |l: &str| out.lines().find(|x| x.starts_with(l)).unwrap().to_string();
    assert!(
        row("mutex ").contains("standard output differs from glibc's, line 1: `held: __nusers=0` (glibc: `held: __nusers=1`)"),
        "{out}"
    );
    assert!(
        !row("glibc-adaptive ").contains("FAILED"),
        "glibc's own adaptive mutex keeps the field: {out}"
    );
    // Without --same-output the same program passes under every choice.
    let (code, out, err) = run(&["try", "--locks", "mutex", "--repeats", "1", "--", exe]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.contains("not decided"),
        "one repeat decides nothing: {out}"
    );
}
