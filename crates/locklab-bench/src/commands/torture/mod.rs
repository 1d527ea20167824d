//! `locklab torture`: the kernel's locktorture and rcutorture for every primitive locklab ships.
//!
//! # What it checks
//! Inside every critical section (the protected data is atomics, so even a broken lock is only wrong,
//! never undefined behaviour):
//! - a writer sees no other holder: it swaps its id into `owner` (must find 0) and out again (must find
//!   itself), and no reader is counted in; the `a == b` canary is intact and moves by one per write;
//! - a reader sees no writer (`owner == 0` on entry and exit) and consistent data (`a == b`);
//! - `SeqLock` readers never accept a torn value (every word of a read equal);
//! - `LockRef` counts balance at the end (every successful get and put counted once), and a
//!   `LockRefArc` value is dropped exactly once, after its last handle;
//! - `Condvar`: every notified waiter returns (the notify counts, which are exact for ours, equal the
//!   notified returns: a lost wake-up shows as a difference, or as a thread that never finishes), and
//!   timed waits return within [`TIMED_WAIT_SLACK`] of their timeout.
//!
//! - RCU (`rcu` for memb, `srcu`; rcutorture's checks): readers record the age, in grace periods, of
//!   the object they saw (the pipe histogram); an object more than 2 grace periods old, one already
//!   "freed" (its grace period over), or one freed and reused as another (its id changed) seen inside
//!   a read-side section is a failure; after the barrier every retired object must have been freed
//!   (no lost callbacks). Freed objects are reused only several grace periods later, so a reader that
//!   holds one sees it dead. `busted-rcu`'s grace periods do not wait; `busted-rcu-early`'s end after a
//!   short fixed wait, which readers that hold their sections longer now and then must catch.
//!
//! Every subject counts how often each of its paths ran (`try` and `timed` acquisitions, `notify_one`,
//! `notify_all`, requeues and timeouts of the condvar, each RCU grace-period and callback path); a
//! path that never ran fails the run, as the torture did not test it.
//!
//! A run that does not finish within its duration plus [`HANG_GRACE`] is a failure too (a deadlock or a
//! lost wake-up): the report is printed and the process exits non-zero without joining.
//!
//! # Stressors (all on, in rotation: one is active in each [`PHASE`])
//! - `stutter`: every thread pauses together, then all restart at once;
//! - `shuffle`: threads re-pin themselves to random CPUs;
//! - `long-holds`: an occasional critical section of a few milliseconds;
//! - `timeouts`: acquisitions by `try_lock_for`/`try_write_for` with random timeouts (timed locks);
//! - `forget`: guards `mem::forget`-ed on a scratch lock of the same type, which must then refuse a
//!   writer (and, at the reader bound, a reader);
//! - `churn`: threads exit and are replaced; each exiting thread runs one more operation from a
//!   thread-local destructor that runs after its thread slot was returned;
//! - oversubscription is always on: by default 4 threads per CPU.
//!
//! # Output
//! One line per lock in locktorture's shape, `Writes: Total: N Max/Min: a/b Fail: 0` (and `Reads:` for
//! locks with a shared mode), `???` when max > 2 x min, `!!!` on any failure; `--json` writes the same
//! as JSON. Exit status 1 when any invariant failed. `busted-*` locks are broken on purpose: `--lock
//! busted` must fail, which proves the checks can see what they claim to.

mod checks;
mod rcu_subject;
mod report;
mod stressors;
mod subjects;

pub use checks::{Data, read_section, write_section};
use checks::{SEQ_WORDS, torn, work};
use rcu_subject::*;
pub use report::{Counts, LockResult, Report};
use stressors::worker;
pub use subjects::{BUSTED, OURS, subject};

use crate::engine::plan::{MAX_THREADS, UsageError, number, usage};
use crate::engine::runner::allowed_cpus;
use clap::Args;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

/// Length of one stressor phase.
pub const PHASE: Duration = Duration::from_millis(250);
/// How long past its duration a run may take before it counts as hung.
pub const HANG_GRACE: Duration = Duration::from_secs(30);
/// How late a timed wait may return (the machine may be oversubscribed 4x, and a woken thread must be
/// scheduled) before that counts as a failure.
pub const TIMED_WAIT_SLACK: Duration = Duration::from_secs(2);
/// Failure messages kept per lock (the count is exact).
const KEEP_FAILURES: usize = 8;

/// The stressors, in rotation order.
pub const STRESSORS: [&str; 6] = [
    "stutter",
    "shuffle",
    "long-holds",
    "timeouts",
    "forget",
    "churn",
];

/// What one operation may do.
#[derive(Clone, Copy)]
pub struct Op {
    /// The worker's id (never 0).
    pub me: usize,
    /// Hold the lock this long instead of a few hundred ns (`long-holds`).
    pub hold: Option<Duration>,
    /// Acquire with this timeout (`timeouts`, and now and then otherwise), if the lock has a timed
    /// mode.
    pub timeout: Option<Duration>,
    /// Acquire with `try_lock` (`timeouts`, and now and then otherwise).
    pub try_only: bool,
    /// A random number for the subject's own choices (which path an operation takes).
    pub roll: u64,
}

/// How often each path of a subject ran: a run in which one ran zero times fails (the torture did
/// not test it).
pub struct Paths(Vec<(&'static str, AtomicU64)>);

impl Paths {
    /// Paths with these names, none run yet.
    pub fn new(names: &[&'static str]) -> Arc<Self> {
        Arc::new(Paths(
            names.iter().map(|n| (*n, AtomicU64::new(0))).collect(),
        ))
    }

    /// Path `name` ran once.
    pub fn hit(&self, name: &str) {
        match self.0.iter().find(|(n, _)| *n == name) {
            Some((_, c)) => {
                c.fetch_add(1, Relaxed);
            }
            None => panic!("torture: unknown path {name}"),
        }
    }

    fn snapshot(&self) -> Vec<PathCount> {
        self.0
            .iter()
            .map(|(n, c)| PathCount {
                path: (*n).to_string(),
                runs: c.load(Relaxed),
            })
            .collect()
    }
}

/// One path's count in a result.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct PathCount {
    /// The path's name (e.g. `synchronize`, `notify_all`, `try`).
    pub path: String,
    /// How many times it ran.
    pub runs: u64,
}

type OpFn = Box<dyn Fn(Op) -> Result<(), String> + Send + Sync>;
type CheckFn = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A lock under torture: its operations, each doing its own checks.
pub struct Subject {
    /// The lock's name (lab.md).
    pub name: &'static str,
    /// One exclusive operation.
    write: OpFn,
    /// One shared operation, if the lock has a shared mode.
    read: Option<OpFn>,
    /// `forget` on a scratch lock of the same type.
    forget: Option<CheckFn>,
    /// Checks after every thread has finished.
    finish: Option<CheckFn>,
    /// The run is over: wake whatever waits (condvar).
    stop: Option<CheckFn>,
    /// RCU: readers' ages (in grace periods) of the objects they saw, 0, 1, 2, 3 or more.
    pipe: Option<Arc<[AtomicU64; 4]>>,
    /// The subject's paths and how often each ran.
    paths: Option<Arc<Paths>>,
}

/// Run settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seconds per lock.
    pub duration: Duration,
    /// Worker threads per lock.
    pub threads: usize,
}

struct Shared {
    subject: Subject,
    stop: AtomicBool,
    stutter: AtomicBool,
    phase: AtomicUsize,
    writes: Vec<AtomicU64>,
    reads: Vec<AtomicU64>,
    write_fail: AtomicU64,
    read_fail: AtomicU64,
    other_fail: AtomicU64,
    late_ops: AtomicU64,
    failures: StdMutex<Vec<String>>,
    cpus: Vec<usize>,
}

impl Shared {
    fn fail(&self, counter: &AtomicU64, msg: String) {
        counter.fetch_add(1, Relaxed);
        let mut f = self.failures.lock().unwrap();
        if f.len() < KEEP_FAILURES {
            f.push(msg);
        }
    }

    fn stressor(&self) -> &'static str {
        STRESSORS[self.phase.load(Relaxed) % STRESSORS.len()]
    }
}

/// Joins `h` (its thread-local destructors included) by `deadline`: `Some(true)` joined, `Some(false)`
/// it panicked, `None` still running (left behind: the run is reported hung).
fn join_by(h: std::thread::JoinHandle<()>, deadline: Instant) -> Option<bool> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join().is_ok());
    });
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .ok()
}

/// Tortures one lock. If it hung (`hung` in the result), its threads are still running.
pub fn run_one(subject: Subject, s: &Settings) -> LockResult {
    let n = s.threads;
    let sh = Arc::new(Shared {
        subject,
        stop: AtomicBool::new(false),
        stutter: AtomicBool::new(false),
        phase: AtomicUsize::new(0),
        writes: (0..n).map(|_| AtomicU64::new(0)).collect(),
        reads: (0..n).map(|_| AtomicU64::new(0)).collect(),
        write_fail: AtomicU64::new(0),
        read_fail: AtomicU64::new(0),
        other_fail: AtomicU64::new(0),
        late_ops: AtomicU64::new(0),
        failures: StdMutex::new(vec![]),
        cpus: allowed_cpus(),
    });
    let spawn = |w: usize, generation: u64| {
        let sh = sh.clone();
        let seed =
            (w as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d) ^ generation.wrapping_mul(0x9e37);
        std::thread::Builder::new()
            .name(format!("torture-{w}"))
            .spawn(move || worker(sh, w, seed))
            .expect("spawn a torture worker")
    };
    let mut handles: Vec<_> = (0..n).map(|w| spawn(w, 0)).collect();
    let mut retired = vec![];
    let start = Instant::now();
    let mut replaced = 0u64;
    let mut next_phase = start + PHASE;
    while start.elapsed() < s.duration {
        std::thread::sleep(Duration::from_millis(5));
        if Instant::now() >= next_phase {
            next_phase += PHASE;
            sh.phase.fetch_add(1, Relaxed);
            if sh.stressor() == "stutter" {
                sh.stutter.store(true, Relaxed);
                std::thread::sleep(Duration::from_millis(30));
                sh.stutter.store(false, Relaxed);
            }
        }
        // Churn: replace the workers that exited. The old handle is joined at the end, not here: a
        // worker counts as finished once its body returns, but its late operation (a thread-local
        // destructor) may still be running, e.g. a condvar consumer waiting for a producer that only
        // this loop would respawn (joining it here hung a CI run).
        for (w, h) in handles.iter_mut().enumerate() {
            if h.is_finished() && !sh.stop.load(Relaxed) {
                retired.push((w, std::mem::replace(h, spawn(w, replaced + 1))));
                replaced += 1;
            }
        }
    }
    sh.stop.store(true, Relaxed);
    if let Some(stop) = &sh.subject.stop {
        let _ = stop();
    }
    let deadline = Instant::now() + HANG_GRACE;
    let mut hung = false;
    for (w, h) in retired.into_iter().chain(handles.into_iter().enumerate()) {
        match join_by(h, deadline) {
            Some(true) => {}
            Some(false) => sh.fail(&sh.other_fail, format!("worker {w} panicked")),
            None => {
                hung = true;
                sh.fail(
                    &sh.other_fail,
                    format!("worker {w} did not finish within {HANG_GRACE:?} of the end (deadlock or lost wake-up)"),
                );
            }
        }
    }
    if let (false, Some(finish)) = (hung, &sh.subject.finish)
        && let Err(m) = finish()
    {
        sh.fail(&sh.other_fail, m);
    }
    let paths = sh.subject.paths.as_ref().map(|p| p.snapshot());
    for p in paths.iter().flatten().filter(|p| p.runs == 0) {
        sh.fail(
            &sh.other_fail,
            format!("path '{}' never ran: the run did not test it", p.path),
        );
    }
    let counts = |v: &[AtomicU64], fail: &AtomicU64, only: Option<bool>| {
        let per: Vec<u64> = v
            .iter()
            .enumerate()
            .filter(|(w, _)| only.is_none_or(|even| (w % 2 == 0) == even))
            .map(|(_, c)| c.load(Relaxed))
            .collect();
        Counts {
            total: per.iter().sum(),
            max: per.iter().copied().max().unwrap_or(0),
            min: per.iter().copied().min().unwrap_or(0),
            fail: fail.load(Relaxed),
        }
    };
    let has_reads = sh.subject.read.is_some();
    let writes = counts(&sh.writes, &sh.write_fail, has_reads.then_some(false));
    let reads = has_reads.then(|| counts(&sh.reads, &sh.read_fail, Some(true)));
    let other = sh.other_fail.load(Relaxed);
    let ok = writes.fail == 0 && reads.as_ref().is_none_or(|r| r.fail == 0) && other == 0;
    LockResult {
        lock: sh.subject.name.to_string(),
        writes,
        reads,
        other_failures: other,
        failures: sh.failures.lock().unwrap().clone(),
        threads_replaced: replaced,
        late_ops: sh.late_ops.load(Relaxed),
        hung,
        pipe: sh
            .subject
            .pipe
            .as_ref()
            .map(|p| std::array::from_fn(|i| p[i].load(Relaxed))),
        paths,
        ok,
    }
}

/// `locklab torture`: runs the plan of its arguments; an error when an invariant failed (exit status 1).
pub fn command(a: &TortureArgs, cpus: usize) -> anyhow::Result<()> {
    run_plan(&plan_torture(a, cpus)?)
}

fn run_plan(plan: &TorturePlan) -> anyhow::Result<()> {
    if !run(plan)? {
        return Err(anyhow::anyhow!(
            "torture: invariants failed (lines marked !!!)"
        ));
    }
    Ok(())
}

/// Expands `--lock` into names: `all` (ours), `busted` (every busted lock), or a list.
pub fn lock_names(arg: &str) -> Result<Vec<&'static str>, String> {
    let mut out: Vec<&'static str> = vec![];
    for item in arg.split(',').map(str::trim) {
        let names: Vec<&'static str> = match item {
            "all" => OURS.to_vec(),
            "busted" => BUSTED.to_vec(),
            _ => match OURS.iter().chain(BUSTED.iter()).find(|n| **n == item) {
                Some(n) => vec![*n],
                None => {
                    return Err(format!(
                        "--lock: unknown lock '{item}' (valid: all, busted, {}, {})",
                        OURS.join(", "),
                        BUSTED.join(", ")
                    ));
                }
            },
        };
        for n in names {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

/// A validated torture run.
#[derive(Clone, Debug)]
pub struct TorturePlan {
    /// The locks, in order.
    pub locks: Vec<&'static str>,
    /// Settings for each.
    pub settings: Settings,
    /// JSON target (`-`: standard output).
    pub json: Option<String>,
}

/// Runs a torture plan: prints one line per lock as it finishes, writes the JSON, and returns whether
/// every lock passed. A hung lock ends the process (status 1) after printing what it has.
pub fn run(plan: &TorturePlan) -> anyhow::Result<bool> {
    let to_stdout = plan.json.as_deref() == Some("-");
    let say = |line: &str| {
        if to_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    say(&format!(
        "locklab torture: {} lock(s), {} s each, {} threads, stressors in rotation every {} ms: {}",
        plan.locks.len(),
        plan.settings.duration.as_secs(),
        plan.settings.threads,
        PHASE.as_millis(),
        STRESSORS.join(", ")
    ));
    let mut report = Report {
        locklab_version: env!("CARGO_PKG_VERSION").into(),
        machine: crate::engine::limits::machine(),
        duration_s: plan.settings.duration.as_secs(),
        threads: plan.settings.threads,
        stressors: STRESSORS.iter().map(|s| s.to_string()).collect(),
        results: vec![],
        ok: true,
    };
    let write_json = |report: &Report| -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(report)? + "\n";
        match plan.json.as_deref() {
            None => Ok(()),
            Some("-") => {
                print!("{text}");
                Ok(())
            }
            Some(f) => {
                std::fs::write(f, text).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))
            }
        }
    };
    for name in &plan.locks {
        let subject = subject(name).expect("validated lock name");
        let result = run_one(subject, &plan.settings);
        let hung = result.hung;
        say(&result.line());
        for f in &result.failures {
            say(&format!("    {f}"));
        }
        report.ok &= result.ok;
        report.results.push(result);
        if hung {
            write_json(&report)?;
            say("locklab torture: a lock hung; exiting without waiting for its threads");
            std::process::exit(1);
        }
    }
    write_json(&report)?;
    Ok(report.ok)
}

#[cfg(test)]
mod tests {
    use super::subjects::exclusive_subject;
    use super::*;

    #[test]
    fn writer_checks_see_another_holder_readers_and_a_torn_canary() {
        let d = Data::default();
        assert!(write_section(&d, 1, None).is_ok());
        assert_eq!((d.a.load(Relaxed), d.b.load(Relaxed)), (1, 1));
        d.owner.store(7, Relaxed);
        assert!(
            write_section(&d, 1, None)
                .unwrap_err()
                .contains("while 7 was inside")
        );
        d.owner.store(0, Relaxed);
        d.readers.store(2, Relaxed);
        assert!(
            write_section(&d, 1, None)
                .unwrap_err()
                .contains("beside 2 reader")
        );
        d.readers.store(0, Relaxed);
        d.a.store(5, Relaxed);
        assert!(
            write_section(&d, 1, None)
                .unwrap_err()
                .contains("torn canary 5/1")
        );
    }

    #[test]
    fn reader_checks_see_a_writer_and_a_torn_canary() {
        let d = Data::default();
        assert!(read_section(&d).is_ok());
        d.owner.store(3, Relaxed);
        assert!(read_section(&d).unwrap_err().contains("beside writer 3"));
        d.owner.store(0, Relaxed);
        d.b.store(9, Relaxed);
        assert!(read_section(&d).unwrap_err().contains("torn"));
        assert_eq!(d.readers.load(Relaxed), 0, "the reader count is restored");
        assert!(torn(&[1, 1, 2, 1]).is_err() && torn(&[4; SEQ_WORDS]).is_ok());
    }

    #[test]
    fn lines_mark_imbalance_and_failure() {
        let mut r = LockResult {
            lock: "x".into(),
            writes: Counts {
                total: 30,
                max: 20,
                min: 10,
                fail: 0,
            },
            reads: None,
            other_failures: 0,
            failures: vec![],
            threads_replaced: 0,
            late_ops: 0,
            hung: false,
            pipe: None,
            paths: None,
            ok: true,
        };
        assert!(
            r.line()
                .contains("Writes: Total: 30 Max/Min: 20/10 Fail: 0")
        );
        r.writes.max = 21;
        assert!(r.line().contains("21/10 ??? Fail: 0"));
        r.writes.fail = 1;
        assert!(r.line().contains("!!! Fail: 1"));
        r.other_failures = 2;
        assert!(r.line().ends_with("Other: 2 !!!"));
    }

    /// A subject with a path that never runs fails the run, and the line marks the path.
    #[test]
    fn a_path_that_never_ran_fails() {
        let paths = Paths::new(&["used", "never"]);
        let p = paths.clone();
        let mut s = exclusive_subject(
            "x",
            Box::new(move |_| {
                p.hit("used");
                Ok(())
            }),
            Box::new(|| Ok(())),
        );
        s.paths = Some(paths);
        let r = run_one(
            s,
            &Settings {
                duration: Duration::from_millis(100),
                threads: 2,
            },
        );
        assert!(!r.ok);
        let paths = r.paths.as_ref().unwrap();
        assert!(paths[0].runs > 0 && paths[1].runs == 0);
        assert!(r.failures.iter().any(|f| f.contains("'never' never ran")));
        assert!(r.line().contains("never=0 !!!"), "{}", r.line());
    }

    #[test]
    fn lock_names_expand_and_reject() {
        assert_eq!(lock_names("all").unwrap(), OURS.to_vec());
        assert_eq!(lock_names("busted").unwrap(), BUSTED.to_vec());
        assert_eq!(
            lock_names("mutex, mutex,busted-rw").unwrap(),
            ["mutex", "busted-rw"]
        );
        assert!(
            lock_names("mutex,zzz")
                .unwrap_err()
                .contains("unknown lock 'zzz'")
        );
        for n in OURS.iter().chain(BUSTED.iter()) {
            assert_eq!(subject(n).unwrap().name, *n);
        }
    }
}

/// `locklab torture` options.
#[derive(Args, Debug, Clone)]
pub struct TortureArgs {
    /// Comma-separated lock names, `all` (every primitive) or `busted` (the deliberately broken locks).
    #[arg(long, value_name = "a,b|all|busted", default_value = "all")]
    pub lock: String,
    /// Seconds per lock.
    #[arg(
        long,
        value_name = "S",
        default_value = "10",
        allow_hyphen_values = true
    )]
    pub duration: String,
    /// Worker threads per lock (default: 4 x CPUs, so the machine is oversubscribed).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub threads: Option<String>,
    /// Write the results as JSON here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
}

/// Longest torture per lock, seconds.
pub const MAX_TORTURE_S: u64 = 3600;

/// Validates `torture` options.
pub fn plan_torture(a: &TortureArgs, cpus: usize) -> Result<TorturePlan, UsageError> {
    let locks = lock_names(&a.lock).map_err(UsageError)?;
    let threads = match &a.threads {
        Some(t) => number("threads", t, 2, MAX_THREADS as u64)? as usize,
        None => 4 * cpus.max(1),
    };
    if matches!(&a.json, Some(f) if f.is_empty()) {
        return usage("--json: the file name is empty (use - for standard output)");
    }
    Ok(TorturePlan {
        locks,
        settings: Settings {
            duration: std::time::Duration::from_secs(number(
                "duration",
                &a.duration,
                1,
                MAX_TORTURE_S,
            )?),
            threads,
        },
        json: a.json.clone(),
    })
}
