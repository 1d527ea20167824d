//! `locklab apps`: a real program under glibc and our locks, verified; bad flags get one line.

mod common;
use common::*;

fn installed(program: &str) -> bool {
    let found = locklab_bench::external::programs::on_path(program);
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} is not installed (CI installs it)"
        );
    }
    found
}

#[test]
fn a_real_program_verifies_under_glibc_and_our_lock() {
    if !installed("tcumttest") {
        return;
    }
    let exe = assert_cmd::cargo::cargo_bin("locklab");
    if locklab_bench::external::preload::find_library(&exe).is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"));
        return;
    }
    let dir = std::env::temp_dir().join(format!("locklab-apps-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("apps.json");
    let (code, out, err) = run(&[
        "apps",
        "--quick",
        "--apps",
        "tokyo-btree",
        "--locks",
        "mutex",
        "--repeats",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["apps"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "glibc and mutex: {v}");
    assert_eq!(rows[0]["lock"], "glibc");
    assert_eq!(rows[1]["lock"], "mutex");
    for r in rows {
        assert_eq!(r["verified"], true);
        assert_eq!(r["runs"].as_array().unwrap().len(), 3);
        let (min, med, max) = (
            r["min"].as_f64().unwrap(),
            r["median"].as_f64().unwrap(),
            r["max"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= med && med <= max, "{r}");
        // The statistics run: tcumttest takes its B+ tree's locks at least once per record.
        let top = r["top_locks"].as_array().unwrap();
        assert!(!top.is_empty(), "top_locks from the --stat run: {r}");
        assert!(top.len() <= 5);
        for t in top {
            assert!(
                t["site"].as_str().unwrap().contains("libtokyocabinet"),
                "{t}"
            );
            assert!(t["acquisitions"].as_u64().unwrap() >= t["contentions"].as_u64().unwrap());
        }
        let waits: Vec<u64> = top
            .iter()
            .map(|t| t["wait_ns_total"].as_u64().unwrap())
            .collect();
        assert!(
            waits.windows(2).all(|w| w[0] >= w[1]),
            "most waited first: {waits:?}"
        );
    }
    let ratio = rows[1]["ratio_vs_glibc"].as_f64().unwrap();
    let want = rows[1]["median"].as_f64().unwrap() / rows[0]["median"].as_f64().unwrap();
    assert!(
        (ratio - want).abs() < 1e-9,
        "the ratio is the medians' ratio"
    );
    assert!(v["machine"]["logical_cpus"].as_u64().unwrap() >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_get_one_line() {
    let (code, _, err) = run(&["apps", "--apps", "nope"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown app `nope`"), "{err}");
    let (code, _, err) = run(&["apps", "--locks", "mutexx"]);
    assert_eq!(code, 2, "{err}");
}

/// A spec in `dir` named `name.toml`: `input` (a `[input]` section's lines, or none) and `run`
/// (the `[run]` section's lines); the rate is the `ops: N` the run prints, verified by its `ok`.
fn spec(name: &str, input: Option<&str>, run: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let f = dir.join(format!("{name}.toml"));
    let input = input.map_or(String::new(), |i| format!("[input]\n{i}\n"));
    std::fs::write(
        &f,
        format!(
            "name = \"{name}\"\nwhat = \"x\"\nprograms = [\"sh\"]\npackages = [\"dash\"]\n{input}[run]\n{run}\n[rate]\nkind = \"regex\"\nregex = \"ops: ([0-9]+)\"\n[verify]\nok_line = \"ok\"\n"
        ),
    )
    .unwrap();
    f
}

fn apps_once(spec: &std::path::Path) -> (i32, String, String) {
    run(&[
        "apps",
        "--spec",
        spec.to_str().unwrap(),
        "--locks",
        "mutex",
        "--threads",
        "1",
        "--repeats",
        "1",
    ])
}

/// What a spec may ask for is bounded: one line naming the key (a 10^14-byte input would fill the
/// disk).
#[test]
fn a_spec_asks_for_bounded_resources_only() {
    let ok_run = "command = \"sh -c echo{_}ops:{_}5;echo{_}ok\"";
    for (input, run, want) in [
        (
            Some("words_bytes = 100000000000000"),
            ok_run,
            "`input.words_bytes`: expected an integer from 1 to 1073741824 (1 GiB), found 100000000000000",
        ),
        (
            Some("command = \"true\"\ntimeout_s = 0"),
            ok_run,
            "`input.timeout_s`: expected seconds from 1 to 3600, found 0",
        ),
        (
            Some("words_bytes = 10\ntimeout_s = 5"),
            ok_run,
            "`input.timeout_s`: bounds the input command: there is none",
        ),
        (
            None,
            "command = \"true\"\ntimeout_s = 100000",
            "`run.timeout_s`: expected seconds from 1 to 3600, found 100000",
        ),
        (
            None,
            "command = \"true\"\nrecords = 10000000000",
            "`run.records`: expected an integer from 1 to 1000000000",
        ),
    ] {
        let f = spec("bounded", input, run);
        let (code, out, err) = apps_once(&f);
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("spec {}: {want}", f.display())),
            "want {want:?} in {err}"
        );
    }
}

/// Every step is bounded: an input command or a run that hangs is stopped at its `timeout_s`, and
/// said, naming the step; nothing it started is left running.
#[test]
fn a_step_that_hangs_is_stopped_and_named() {
    let s = unique_sleep(10);
    let f = spec(
        "hanging-input",
        Some(&format!("command = \"sleep {s}\"\ntimeout_s = 1")),
        "command = \"true\"",
    );
    let start = std::time::Instant::now();
    let (code, _, err) = apps_once(&f);
    let left = processes_running(&["sleep", &s]);
    kill_all(&left);
    assert_eq!(code, 1, "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    assert!(
        err.contains("the input command (input.timeout_s = 1) did not finish in 1 s: stopped"),
        "{err}"
    );
    assert!(left.is_empty());
    let f = spec(
        "hanging-run",
        None,
        &format!("command = \"sleep {s}\"\ntimeout_s = 1"),
    );
    let (code, out, err) = apps_once(&f);
    let left = processes_running(&["sleep", &s]);
    kill_all(&left);
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains("NOT VERIFIED: the run (run.timeout_s = 1) did not finish in 1 s: stopped"),
        "{out}"
    );
    assert!(left.is_empty());
}

/// A daemon a run starts (fork, setsid, fork), still holding the run's output open, neither hangs
/// `apps` nor outlives it.
#[test]
fn a_daemon_a_run_starts_does_not_outlive_it_nor_hang_apps() {
    let s = unique_sleep(11);
    let f = spec(
        "daemon",
        None,
        &format!(
            "command = \"sh -c setsid{{_}}sh{{_}}-c{{_}}'sleep{{_}}{s}{{_}}&'{{_}}&{{_}}wait;echo{{_}}ops:{{_}}5;echo{{_}}ok\""
        ),
    );
    let (code, out, err) = apps_once(&f);
    let left = processes_running(&["sleep", &s]);
    kill_all(&left);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(left.is_empty(), "{} daemons outlived apps", left.len());
}

/// A signal to `apps` ends the run in progress, its scratch directory and every process it started.
#[test]
fn a_signal_leaves_no_process_and_no_scratch_directory() {
    use std::os::unix::process::ExitStatusExt;
    let s = unique_sleep(12);
    let f = spec(
        "signalled",
        Some("command = \"sh -c echo{_}x{_}>{_}input\""),
        &format!("command = \"sleep {s}\""),
    );
    let (status, pid) = signal_midway(
        &["apps", "--spec", f.to_str().unwrap(), "--locks", "mutex"],
        |pid| !processes_running(&["sleep", &s]).is_empty() && !scratch_dirs(pid).is_empty(),
        libc::SIGINT,
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    let left = processes_running(&["sleep", &s]);
    kill_all(&left);
    let dirs = scratch_dirs(pid);
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    assert!(left.is_empty(), "{} left running", left.len());
    assert!(dirs.is_empty(), "{dirs:?} left");
}
