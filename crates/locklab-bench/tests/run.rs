//! `locklab run -- CMD`: the program runs with the preload library and the choices, its exit status
//! passed through; bad flags and missing programs get one clear line and the usual status.

mod common;
use common::*;
use std::path::Path;

/// The library beside the test's `locklab` binary: built by `cargo test --workspace` (and by CI);
/// a bare `cargo test -p locklab-bench` may not have built it, and then only the error is checked.
fn library_built() -> bool {
    let exe = assert_cmd::cargo::cargo_bin("locklab");
    let built = locklab_bench::external::preload::find_library(&exe).is_ok();
    if !built {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI builds the whole workspace: the preload library must be there"
        );
    }
    built
}

#[test]
fn runs_the_program_on_the_library_with_its_exit_status() {
    if !library_built() {
        let (code, _, err) = run(&["run", "--", "true"]);
        assert_eq!(code, 1);
        assert!(
            err.contains("cargo build --release -p locklab-pthread"),
            "{err}"
        );
        return;
    }
    let (code, out, _) = run(&[
        "run",
        "--mutex",
        "mcs",
        "--rwlock",
        "rwspinlock",
        "--",
        "sh",
        "-c",
        "echo $LOCKLAB_MUTEX $LOCKLAB_RWLOCK; grep -c liblocklab_pthread /proc/self/maps; exit 7",
    ]);
    assert_eq!(code, 7, "the program's own exit status");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("mcs rwspinlock"));
    let mapped: u32 = lines.next().unwrap().trim().parse().unwrap();
    assert!(mapped >= 1, "the library is mapped into the program: {out}");
}

#[test]
fn keeps_what_was_already_preloaded_first() {
    let lib = Path::new("/x/liblocklab_pthread.so");
    let v = locklab_bench::external::preload::preload_value(lib, Some("libother.so".into()));
    assert_eq!(v, "libother.so:/x/liblocklab_pthread.so");
    assert_eq!(
        locklab_bench::external::preload::preload_value(lib, Some("".into())),
        "/x/liblocklab_pthread.so"
    );
    // Separated by spaces or colons; the library itself (a nested `locklab run`) is not repeated.
    assert_eq!(
        locklab_bench::external::preload::preload_value(
            lib,
            Some(" a.so  /x/liblocklab_pthread.so:b.so: ".into())
        ),
        "a.so:b.so:/x/liblocklab_pthread.so"
    );
}

/// A user's own interposer of `pthread_mutex_lock` in `LD_PRELOAD` still sees the program's calls
/// under `locklab run`, and its next definition is the library's.
#[test]
fn a_preloaded_interposer_wraps_the_library() {
    if !library_built() {
        return;
    }
    let counter = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
static long calls;
static const char *next_name = "?";
int pthread_mutex_lock(pthread_mutex_t *m) {
  static int (*next)(pthread_mutex_t *);
  if (!next) {
    Dl_info info;
    next = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (dladdr((void *)next, &info) && info.dli_fname) next_name = strstr(info.dli_fname, "locklab") ? "locklab" : "other";
  }
  __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  return next(m);
}
__attribute__((destructor)) static void report(void) { fprintf(stderr, "counted %ld, next %s\n", calls, next_name); }
"#;
    let program = r#"
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
int main(void) { for (int i = 0; i < 1000; i++) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); } return 0; }
"#;
    let Some(exe) = compile_c("run_interposed", program) else {
        return;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (c, so) = (dir.join("counter.c"), dir.join("libcounter.so"));
    std::fs::write(&c, counter).unwrap();
    let built = std::process::Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(built.success());
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("locklab"))
        .args(["run", "--", exe.to_str().unwrap()])
        .env("LD_PRELOAD", &so)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let counted: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("counted "))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {err}"));
    assert!(counted >= 1000, "the interposer saw {counted} calls: {err}");
    assert!(err.contains("next locklab"), "{err}");
}

#[test]
fn bad_input_gets_one_line() {
    let (code, _, err) = run(&["run", "--mutex", "mcss", "--", "true"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown --mutex `mcss` (valid: adaptive, mcs, ticket, qspinlock, tas, glibc, glibc-adaptive; mutex for adaptive)"),
        "{err}"
    );
    let (code, _, err) = run(&["run", "--spin", "x", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = run(&["run"]);
    assert_eq!(code, 2, "a command is required");
    if library_built() {
        let (code, _, err) = run(&["run", "--", "/nonexistent/program"]);
        assert_eq!(code, 127);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("cannot run `/nonexistent/program`"), "{err}");
    }
}

/// A C program with a known lock pattern, compiled without exported symbols (so the lab, not
/// `dladdr`, names its call sites from the symbol table); `None` without a C compiler outside CI.
fn contended_program() -> Option<std::path::PathBuf> {
    let src = r#"
#include <pthread.h>
#include <unistd.h>
static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) static void slow_path(void) { pthread_mutex_lock(&hot); usleep(20000); pthread_mutex_unlock(&hot); }
static void *worker(void *a) { (void)a; for (int i = 0; i < 5; i++) slow_path(); return 0; }
int main(void) {
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, 0);
  for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
  return 9;
}
"#;
    compile_c("run_stat", src)
}

#[test]
fn stat_prints_lock_stat_tables_and_writes_json() {
    if !library_built() {
        return;
    }
    let Some(exe) = contended_program() else {
        return;
    };
    let json = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run_stat.json");
    let (code, out, err) = run(&[
        "run",
        "--stat-out",
        json.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert_eq!(code, 9, "the program's exit status: {err}");
    assert_eq!(out, "", "the program's stdout is its own");
    // 15 holds of 20 ms on one mutex by 3 threads: the waits are certain.
    assert!(err.contains("class name (kind/algorithm)"), "{err}");
    assert!(err.contains("1 locks used, 1 contended"), "{err}");
    assert!(
        err.contains("acquisitions at slow_path+0x"),
        "named from the symbol table: {err}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let procs = doc["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1);
    let recs = procs[0]["records"].as_array().unwrap();
    let hot: Vec<_> = recs
        .iter()
        .filter(|r| r["site"].as_str().unwrap_or("").starts_with("slow_path+"))
        .collect();
    assert_eq!(hot.len(), 1, "{recs:#?}");
    assert_eq!(hot[0]["acquisitions"], 15);
    assert_eq!(hot[0]["holds"], 15);
    let contentions = hot[0]["contentions"].as_u64().unwrap();
    assert!((1..=15).contains(&contentions), "{}", hot[0]);
    // Each contended wait is at least part of a 20 ms hold; each hold at least 20 ms.
    assert!(
        hot[0]["hold_ns_min"].as_u64().unwrap() >= 15_000_000,
        "{}",
        hot[0]
    );
    assert!(
        hot[0]["wait_ns_total"].as_u64().unwrap() >= 15_000_000,
        "{}",
        hot[0]
    );
}

/// The file the library writes (`LOCKLAB_STAT`, no lab in between) has every field of its schema
/// (`stat/schema.rs`) and nothing else, and the lab's reader parses it to consistent figures.
#[test]
fn the_librarys_stat_file_matches_its_schema_and_the_reader() {
    use locklab_bench::external::lockstat::ProcessStat;
    use locklab_bench::external::{choices, stat_schema as schema};
    use std::collections::BTreeSet;
    if !library_built() {
        return;
    }
    let Some(exe) = contended_program() else {
        return;
    };
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("schema_stat.json");
    let _ = std::fs::remove_file(&file);
    let out = locklab()
        .args(["run", "--mutex", "adaptive", "--", exe.to_str().unwrap()])
        .env("LOCKLAB_STAT", &file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9), "{out:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys = |v: &serde_json::Value| -> BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    };
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
    assert_eq!(keys(&raw), set(&schema::PROCESS_FIELDS), "{text}");
    let mut record_fields = schema::RECORD_FIELDS.to_vec();
    record_fields.extend(schema::RECORD_COUNTERS);
    let records = raw[schema::RECORDS].as_array().unwrap();
    assert!(!records.is_empty(), "{text}");
    for r in records {
        assert_eq!(keys(r), set(&record_fields), "{r}");
        for c in schema::RECORD_COUNTERS {
            assert!(r[c].is_u64(), "{c} in {r}");
        }
    }
    // The lab's reader: every figure it reads is the file's, and they hold together.
    let p: ProcessStat = serde_json::from_str(&text).unwrap();
    p.check().unwrap();
    assert_eq!(Some(u64::from(p.pid)), raw[schema::PID].as_u64());
    assert_eq!(
        p.mutex,
        choices::MUTEX_STAT_NAMES[0],
        "adaptive, by its file name"
    );
    assert_eq!(p.records.len(), records.len());
    let back = serde_json::to_value(&p.records).unwrap();
    for (r, b) in records.iter().zip(back.as_array().unwrap()) {
        assert_eq!(r, b, "the reader keeps every field of a record");
    }
    let locks = p.locks();
    assert_eq!(p.locks_used, locks.len() as u64);
    let contended = locks.iter().filter(|l| l.total.contended() > 0).count();
    assert_eq!(p.locks_contended, contended as u64);
    assert_eq!(p.locks_used, 1, "{text}");
    assert_eq!(locks[0].total.acquisitions, 15);
    assert_eq!(locks[0].algorithm, "mutex");
}

#[test]
fn stat_ends_as_the_program_did() {
    if !library_built() {
        return;
    }
    // Killed by a signal: the lab prints what it has, then ends by the same signal.
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("locklab"))
        .args(["run", "--stat", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{out:?}");
    let (code, _, err) = run(&["run", "--stat-out", "", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["run", "--stat", "--", "/nonexistent/program"]);
    assert_eq!(code, 127);
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Runs `locklab run --stat -- CMD`, sends the lab `SIGUSR1` once CMD has printed `running` (its
/// first line), and returns how the lab ended.
fn sigusr1_once_running(cmd: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("locklab"))
        .args(["run", "--stat", "--"])
        .args(cmd)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "running\n");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    child.wait_with_output().unwrap()
}

/// `SIGUSR1` to the lab is passed to the program, which writes a snapshot at its next lock
/// operation; the lab prints its table while the program runs on, then the final one at its end.
#[test]
fn stat_prints_a_snapshot_on_sigusr1() {
    if !library_built() || !locklab_bench::external::programs::on_path("python3") {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI has python3"
        );
        return;
    }
    // Two Python threads share the GIL (a pthread mutex and condvar) for 3 s, and say so once they
    // run: `python3` may be a shell script that execs the interpreter after many other processes
    // (pyenv), and a signal before the interpreter runs is lost with the shell's image.
    let script = "import threading, time\nend = time.time() + 3\ndef spin():\n    while time.time() < end:\n        pass\nts = [threading.Thread(target=spin) for _ in range(2)]\nfor t in ts: t.start()\nprint('running', flush=True)\nfor t in ts: t.join()\n";
    let out = sigusr1_once_running(&["python3", "-c", script]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let snap = err
        .find(", snapshot)")
        .unwrap_or_else(|| panic!("no snapshot table: {err}"));
    let fin = err.rfind("lock statistics: pid").unwrap();
    assert!(
        snap < fin,
        "the snapshot comes before the final table: {err}"
    );
    assert!(err[fin..].contains("locks used"), "{err}");
}

/// A `SIGUSR1` to a program that takes no lock afterwards gets one line, not a table, and the
/// program runs on to its end.
#[test]
fn stat_says_when_no_snapshot_came() {
    if !library_built() {
        return;
    }
    let out = sigusr1_once_running(&["sh", "-c", "echo running; sleep 6; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("locklab: no snapshot: the program took no lock in the 5 s after SIGUSR1"),
        "{err}"
    );
    assert!(!err.contains(", snapshot)"), "{err}");
}

/// `run --lockdep`: an AB-BA between two threads that never overlap is reported by the program as
/// it happens, summed up by the lab, written to `--lockdep-out`; the program's status is kept, and
/// `--stat` beside it still finds every statistics file.
#[test]
fn lockdep_reports_an_inversion_that_did_not_deadlock() {
    if !library_built() {
        return;
    }
    let src = r#"
#include <pthread.h>
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static void *ab(void *x) { pthread_mutex_lock(&a); pthread_mutex_lock(&b); pthread_mutex_unlock(&b); pthread_mutex_unlock(&a); return x; }
static void *ba(void *x) { pthread_mutex_lock(&b); pthread_mutex_lock(&a); pthread_mutex_unlock(&a); pthread_mutex_unlock(&b); return x; }
int main(void) {
  pthread_t t;
  pthread_create(&t, 0, ab, 0); pthread_join(t, 0);
  pthread_create(&t, 0, ba, 0); pthread_join(t, 0);
  return 5;
}
"#;
    let Some(exe) = compile_c("run_lockdep", src) else {
        return;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let json = dir.join("run_lockdep.json");
    let (code, out, err) = run(&[
        "run",
        "--stat",
        "--lockdep",
        "--lockdep-out",
        json.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert_eq!(code, 5, "the program's exit status: {err}");
    assert_eq!(out, "");
    assert_eq!(
        err.matches("possible circular locking dependency").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("lockdep: 1 report (1 circular-dependency)"),
        "{err}"
    );
    assert!(err.contains("2 locks used"), "the statistics too: {err}");
    assert!(!err.contains("ended without writing"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["processes"], 1);
    let reports = doc["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0]["kind"], "circular-dependency");
    assert_eq!(reports[0]["chain"].as_array().unwrap().len(), 2);
    // Consistent orders: nothing, and one summary line.
    let (code, _, err) = run(&["run", "--lockdep", "--", "true"]);
    assert_eq!(code, 0);
    assert!(err.contains("no potential deadlock"), "{err}");
    // Bad input: one line, status 2.
    let (code, _, err) = run(&["run", "--lockdep=sometimes", "--", "true"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, _, err) = run(&["run", "--lockdep-out", "", "--", "true"]);
    assert_eq!(code, 2, "{err}");
}

/// `run --lockdep=abort --lockdep-out F`: the report that aborted the program is in F (written
/// before the abort), the summary names the signal, and the lab ends by it; a process killed before
/// writing its reports (here a forked child) is never summed up as a clean run.
#[test]
fn lockdep_abort_and_killed_processes_are_not_a_clean_run() {
    if !library_built() {
        return;
    }
    let src = r#"
#include <pthread.h>
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static void *ab(void *x) { pthread_mutex_lock(&a); pthread_mutex_lock(&b); pthread_mutex_unlock(&b); pthread_mutex_unlock(&a); return x; }
static void *ba(void *x) { pthread_mutex_lock(&b); pthread_mutex_lock(&a); pthread_mutex_unlock(&a); pthread_mutex_unlock(&b); return x; }
int main(void) {
  pthread_t t;
  pthread_create(&t, 0, ab, 0); pthread_join(t, 0);
  pthread_create(&t, 0, ba, 0); pthread_join(t, 0);
  return 0;
}
"#;
    let Some(exe) = compile_c("run_lockdep_abort", src) else {
        return;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let json = dir.join("run_lockdep_abort.json");
    let _ = std::fs::remove_file(&json);
    let out = locklab()
        .args(["run", "--lockdep=abort", "--lockdep-out"])
        .arg(&json)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lockdep: 1 report (1 circular-dependency)"),
        "{err}"
    );
    assert!(err.contains("killed by SIGABRT"), "{err}");
    assert!(!err.contains("no potential deadlock"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["reports"].as_array().unwrap().len(), 1, "{doc:#}");
    assert_eq!(doc["reports"][0]["kind"], "circular-dependency");
    assert_eq!(doc["signal"], libc::SIGABRT);
    assert_eq!(doc["complete"], false);

    // A child killed before it could write: the parent exits 0, the run is not called clean (a
    // child that ends by `_exit` writes its reports: it is not counted as unfinished).
    let src = r#"
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER;
int main(void) {
  int st;
  pid_t q = fork(); /* ends by _exit: it writes its reports first */
  if (q == 0) { pthread_mutex_lock(&a); pthread_mutex_unlock(&a); _exit(0); }
  waitpid(q, &st, 0);
  pid_t p = fork();
  if (p == 0) { pthread_mutex_lock(&a); pthread_mutex_unlock(&a); raise(SIGKILL); }
  waitpid(p, &st, 0);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : 1;
}
"#;
    let Some(exe) = compile_c("run_lockdep_killed_child", src) else {
        return;
    };
    let (code, _, err) = run(&[
        "run",
        "--lockdep-out",
        json.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no potential deadlock"), "{err}");
    assert!(
        err.contains("1 process ended without writing its reports"),
        "{err}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["processes"], 3, "{doc:#}");
    assert_eq!(doc["unfinished_processes"], 1, "{doc:#}");
    assert_eq!(doc["complete"], false);
}
