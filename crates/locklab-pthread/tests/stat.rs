//! The lock statistics (`LOCKLAB_STAT`): each figure of a program with known locking checked from the
//! JSON the library writes, under several algorithms and glibc's own locks; across fork, exec, a
//! SIGUSR1 snapshot, a program that closes every descriptor, and a privilege drop; and the program's
//! output and exit status unchanged.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const N: u64 = 20_000;
const THREADS: u64 = 4;

/// The program, compiled once for all tests (a test writing it while another runs it would fail).
fn program() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    // -rdynamic: the call sites' functions are in the dynamic symbol table, so dladdr names them.
    EXE.get_or_init(|| compile_with("stat.c", "stat_c", &["-rdynamic"]))
        .clone()
}

/// Runs the program with statistics into a fresh directory; the files it wrote, parsed.
fn run(exe: &Path, mutex: &str, args: &[&str], tag: &str) -> (std::process::Output, Vec<Value>) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("stat-{tag}-{mutex}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("s-%p.json");
    let mut cmd = command(
        exe,
        true,
        &[
            ("LOCKLAB_MUTEX", mutex),
            ("LOCKLAB_STAT", template.to_str().unwrap()),
        ],
    );
    cmd.args(args);
    let out = run_limited(cmd, Duration::from_secs(60));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let docs = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", f.display()))
        })
        .collect();
    (out, docs)
}

fn records<'a>(doc: &'a Value, site: &str) -> Vec<&'a Value> {
    doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["site"]
                .as_str()
                .is_some_and(|s| s.starts_with(&format!("{site}+")))
        })
        .collect()
}

fn one<'a>(doc: &'a Value, site: &str) -> &'a Value {
    let r = records(doc, site);
    assert_eq!(r.len(), 1, "records at {site}: {r:#?}");
    r[0]
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn assert_exits_3(out: &std::process::Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(3),
        "{what}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every figure of the main run.
fn check_main(doc: &Value, mutex: &str) {
    assert_eq!(doc["reason"], "exit");
    // The file writes the name files have always had: `mutex` for the adaptive mutex.
    let mutex = if mutex == "adaptive" { "mutex" } else { mutex };
    assert_eq!(doc["mutex"], mutex);
    let algo = mutex;

    let c = one(doc, "counted_site");
    assert_eq!(n(c, "acquisitions"), THREADS * N);
    assert_eq!(n(c, "holds"), THREADS * N);
    assert!(n(c, "contentions") <= THREADS * N);
    assert_eq!(c["kind"], "mutex");
    assert_eq!(c["algorithm"], algo);
    assert!(c["object"].as_str().unwrap().ends_with("stat_c"), "{c}");
    assert_eq!(c["lock_name"], "counted", "a global is named by its symbol");

    // The waiter blocked >= 50 ms: one contention, its wait at least that long.
    let w = one(doc, "waiting_site");
    assert_eq!((n(w, "acquisitions"), n(w, "contentions")), (1, 1));
    assert!(n(w, "wait_ns_max") >= 40_000_000, "{w}");
    assert_eq!(n(w, "wait_ns_total"), n(w, "wait_ns_max"));
    assert_eq!(n(w, "wait_ns_min"), n(w, "wait_ns_max"));

    // Held 30 ms around a sleep.
    let h = one(doc, "hold_site");
    assert_eq!((n(h, "acquisitions"), n(h, "holds")), (1, 1));
    assert!(n(h, "hold_ns_max") >= 25_000_000, "{h}");
    assert!(n(h, "hold_ns_max") < 5_000_000_000, "{h}");

    // Reads: 100 at read_site, the first behind a writer for >= 50 ms.
    let r = one(doc, "read_site");
    assert_eq!(n(r, "read_acquisitions"), 100);
    assert_eq!(n(r, "read_contentions"), 1);
    assert!(n(r, "read_wait_ns_max") >= 40_000_000, "{r}");
    assert_eq!(
        (n(r, "acquisitions"), n(r, "holds")),
        (0, 0),
        "reads are no exclusive holds"
    );
    assert_eq!(r["kind"], "rwlock");
    let wr = one(doc, "write_site");
    assert_eq!((n(wr, "acquisitions"), n(wr, "holds")), (10, 10));

    // A recursive mutex: two acquisitions (at two call sites of one function), one hold.
    let rec = records(doc, "recursive_site");
    assert_eq!(rec.len(), 2, "{rec:#?}");
    assert_eq!(rec.iter().map(|r| n(r, "acquisitions")).sum::<u64>(), 2);
    assert_eq!(rec.iter().map(|r| n(r, "holds")).sum::<u64>(), 1);
    assert!(rec.iter().all(|r| r["kind"] == "mutex-recursive"));

    // The condvar: one wait that timed out after ~20 ms, one signal, one broadcast; the mutex's
    // reacquisition counts at the wait's site.
    let cv: Vec<_> = records(doc, "cond_site")
        .into_iter()
        .filter(|r| r["kind"] == "condvar")
        .collect();
    assert_eq!(cv.iter().map(|r| n(r, "cond_waits")).sum::<u64>(), 1);
    assert_eq!(cv.iter().map(|r| n(r, "cond_timeouts")).sum::<u64>(), 1);
    assert!(cv.iter().map(|r| n(r, "cond_wait_ns_total")).sum::<u64>() >= 15_000_000);
    assert_eq!(cv.iter().map(|r| n(r, "signals")).sum::<u64>(), 1);
    assert_eq!(cv.iter().map(|r| n(r, "broadcasts")).sum::<u64>(), 1);
    let cm: Vec<_> = records(doc, "cond_site")
        .into_iter()
        .filter(|r| r["kind"] == "mutex")
        .collect();
    assert_eq!(
        cm.iter().map(|r| n(r, "acquisitions")).sum::<u64>(),
        2,
        "{cm:#?}"
    );
    assert_eq!(cm.iter().map(|r| n(r, "holds")).sum::<u64>(), 2, "{cm:#?}");

    let s = one(doc, "spin_site");
    assert_eq!((n(s, "acquisitions"), n(s, "holds")), (1000, 1000));
    assert_eq!(s["kind"], "spinlock");

    // main's own lock of `counted` and the failed trylock on another thread: only the lock counts.
    let total_main: u64 = records(doc, "main")
        .iter()
        .map(|r| n(r, "acquisitions"))
        .sum();
    // waited (1), rw write (1), counted (1).
    assert_eq!(total_main, 3, "{:#?}", records(doc, "main"));
    assert!(n(doc, "locks_used") >= 5);
    assert!(n(doc, "locks_contended") >= 2);
    assert_eq!((n(doc, "dropped"), n(doc, "uncounted")), (0, 0));
}

#[test]
fn every_figure_under_ours_and_glibcs_locks() {
    let exe = program();
    let plain = run_limited(command(&exe, true, &[]), Duration::from_secs(60));
    assert_exits_3(&plain, "without statistics");
    for mutex in ["adaptive", "mutex", "mcs", "glibc"] {
        let (out, docs) = run(&exe, mutex, &[], "main");
        assert_exits_3(&out, mutex);
        assert_eq!(
            out.stdout, plain.stdout,
            "the program's output is unchanged"
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(docs.len(), 1);
        check_main(&docs[0], mutex);
    }
}

#[test]
fn a_forked_child_writes_its_own_table() {
    let exe = program();
    let (out, docs) = run(&exe, "mutex", &["fork"], "fork");
    assert_exits_3(&out, "fork");
    assert_eq!(docs.len(), 2, "{docs:#?}");
    let (parent, child): (Vec<&Value>, Vec<&Value>) = docs
        .iter()
        .partition(|d| n(d, "pid") != n(&docs[0], "ppid") && records(d, "main").len() > 1);
    let (parent, child) = (parent[0], child[0]);
    assert_eq!(n(child, "ppid"), n(parent, "pid"));
    check_main(parent, "mutex");
    // The child counts only its own 7 acquisitions.
    assert_eq!(n(one(child, "counted_site"), "acquisitions"), 7);
    assert!(records(child, "waiting_site").is_empty());
}

#[test]
fn exec_writes_the_table_of_the_image_it_replaces() {
    let exe = program();
    let (out, docs) = run(&exe, "mutex", &["exec"], "exec");
    assert!(out.status.success(), "exec'd /bin/true exits 0");
    assert_eq!(docs.len(), 2, "{docs:#?}");
    let before = docs
        .iter()
        .find(|d| d["reason"] == "exec")
        .expect("a table before exec");
    check_main_reason_exec(before);
    let after = docs.iter().find(|d| d["reason"] == "exit").unwrap();
    assert_eq!(n(after, "pid"), n(before, "pid"));
    assert!(after["exe"].as_str().unwrap().ends_with("/true"));
}

fn check_main_reason_exec(doc: &Value) {
    let mut d = doc.clone();
    d["reason"] = "exit".into();
    check_main(&d, "mutex");
}

#[test]
fn sigusr1_writes_a_snapshot_and_exit_the_final_table() {
    let exe = program();
    let (out, docs) = run(&exe, "mutex", &["signal"], "signal");
    assert_exits_3(&out, "signal");
    assert_eq!(docs.len(), 1);
    // The snapshot was overwritten at exit by the final table, which has the extra acquisition.
    assert_eq!(
        n(one(&docs[0], "counted_site"), "acquisitions"),
        THREADS * N + 1
    );
}

#[test]
fn a_program_that_closes_every_descriptor_keeps_its_files() {
    let exe = program();
    let mine = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stat-closefds-own.txt");
    let (out, docs) = run(
        &exe,
        "mutex",
        &["closefds", mine.to_str().unwrap()],
        "closefds",
    );
    assert_exits_3(&out, "closefds");
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine\n");
    assert_eq!(docs.len(), 1);
    check_main(&docs[0], "mutex");
}

#[test]
fn a_server_that_drops_privileges_still_writes_its_table() {
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to drop privileges");
        return;
    }
    let exe = program();
    // The directory is root's and not writable by the user the program becomes: only the file
    // opened at start can be written.
    let (out, docs) = run(&exe, "mutex", &["setuid"], "setuid");
    assert_exits_3(&out, "setuid");
    assert_eq!(docs.len(), 1);
    check_main(&docs[0], "mutex");
}

/// 70,000 (lock, site) pairs in one thread: every one recorded (none dropped), the table written
/// at exit with all of them, and the lookups past the first per-thread table bounded in the slots
/// they examine (counted, not timed).
#[test]
fn many_pairs_in_one_thread_are_all_recorded() {
    let exe = compile("stat_many.c", "stat_many_c");
    let t0 = std::time::Instant::now();
    let (out, docs) = run(&exe, "mutex", &[], "many");
    let took = t0.elapsed();
    assert_ok(&out, "stat_many");
    assert_eq!(docs.len(), 1);
    let doc = &docs[0];
    assert_eq!(doc["dropped"].as_u64(), Some(0), "dropped records");
    let mine = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["acquisitions"].as_u64() == Some(3) && r["kind"] == "mutex")
        .count();
    assert_eq!(mine, 70_000);
    assert_eq!(doc["locks_used"].as_u64(), Some(70_000));
    // The cost past the first table is bounded, whatever the number of pairs: a lookup examines a
    // few slots there (one index probe sequence at load at most 1/2, and the entry it names), not
    // a few in each of a chain of tables (which was 4 per table, over 20 on average here).
    let lookups = doc["overflow_lookups"].as_u64().unwrap();
    let probes = doc["overflow_probes"].as_u64().unwrap();
    assert!(
        lookups >= 3 * 60_000,
        "{lookups} lookups past the first table"
    );
    assert!(
        probes <= 4 * lookups,
        "{probes} slots examined in {lookups} lookups past the first table"
    );
    println!(
        "{} ({took:?} in all, table included)",
        String::from_utf8_lossy(&out.stdout).trim()
    );
}

/// The table goes through a symbolic link the user made: written into the file it names, and the
/// link stays a link (the dump's temporary-file-and-rename is only for the library's own regular file).
#[test]
fn a_table_through_a_symbolic_link_keeps_the_link() {
    let exe = program();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stat-symlink");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("real.json");
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let cmd = command(
        &exe,
        true,
        &[
            ("LOCKLAB_MUTEX", "mutex"),
            ("LOCKLAB_STAT", link.to_str().unwrap()),
        ],
    );
    let out = run_limited(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "the program's own status");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    let text = std::fs::read_to_string(&target).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert!(!doc["records"].as_array().unwrap().is_empty());
}
