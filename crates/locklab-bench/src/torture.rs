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

use crate::runner::{allowed_cpus, pin_to, unpin};
use locklab::{Condvar, LockRef, LockRefArc, Mutex, SeqCount, SeqLock};
use serde::Serialize;
use std::cell::RefCell;
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

/// The protected data of every exclusive/shared lock under test.
#[derive(Default)]
pub struct Data {
    owner: AtomicUsize,
    readers: AtomicUsize,
    a: AtomicU64,
    b: AtomicU64,
}

/// A busy loop of about `n` spin hints (the critical section's work).
fn work(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// The writer's checks, around a write of the canary (see the module docs).
pub fn write_section(d: &Data, me: usize, hold: Option<Duration>) -> Result<(), String> {
    let prev = d.owner.swap(me, Relaxed);
    if prev != 0 {
        return Err(format!("writer {me} entered while {prev} was inside"));
    }
    let r = d.readers.load(Relaxed);
    if r != 0 {
        d.owner.store(0, Relaxed);
        return Err(format!("writer {me} entered beside {r} reader(s)"));
    }
    let a = d.a.load(Relaxed);
    let b = d.b.load(Relaxed);
    if a != b {
        d.owner.store(0, Relaxed);
        return Err(format!("writer {me} found a torn canary {a}/{b}"));
    }
    d.a.store(a + 1, Relaxed);
    match hold {
        Some(t) => std::thread::sleep(t),
        None => work(20),
    }
    d.b.store(a + 1, Relaxed);
    let now = d.owner.swap(0, Relaxed);
    if now != me {
        return Err(format!("writer {me}: {now} took over mid-section"));
    }
    Ok(())
}

/// The reader's checks (see the module docs).
pub fn read_section(d: &Data) -> Result<(), String> {
    d.readers.fetch_add(1, Relaxed);
    let o = d.owner.load(Relaxed);
    let (a, b) = (d.a.load(Relaxed), d.b.load(Relaxed));
    work(10);
    let o2 = d.owner.load(Relaxed);
    d.readers.fetch_sub(1, Relaxed);
    if o != 0 || o2 != 0 {
        return Err(format!("reader beside writer {}", o.max(o2)));
    }
    if a != b {
        return Err(format!("reader saw a torn canary {a}/{b}"));
    }
    Ok(())
}

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

/// A subject with one exclusive operation and `forget` (the rest unset).
fn exclusive_subject(name: &'static str, write: OpFn, forget: CheckFn) -> Subject {
    Subject {
        name,
        write,
        read: None,
        forget: Some(forget),
        finish: None,
        stop: None,
        pipe: None,
        paths: None,
    }
}

/// `forget` for a mutex type: a forgotten guard keeps a scratch lock of the same type locked.
fn mutex_forget<R: lock_api::RawMutex>() -> Result<(), String> {
    let s = lock_api::Mutex::<R, ()>::new(());
    std::mem::forget(s.lock());
    if s.try_lock().is_some() {
        return Err("try_lock succeeded on a lock whose guard was forgotten".into());
    }
    Ok(())
}

/// `forget` for a reader-writer type: forgotten read guards keep writers out of a scratch lock.
fn rw_forget<R: lock_api::RawRwLock>() -> Result<(), String> {
    let s = lock_api::RwLock::<R, ()>::new(());
    for _ in 0..64 {
        std::mem::forget(s.read());
    }
    if s.try_write().is_some() {
        return Err("a writer got in beside 64 forgotten read guards".into());
    }
    Ok(())
}

/// A reader's section, held for `op.hold` first when the long-holds stressor asks.
fn read_held(d: &Data, op: Op) -> Result<(), String> {
    if let Some(t) = op.hold {
        std::thread::sleep(t);
    }
    read_section(d)
}

fn mutex_subject<R: lock_api::RawMutex + Send + Sync + 'static>(name: &'static str) -> Subject
where
    R::Guard: 'static,
{
    let l: Arc<lock_api::Mutex<R, Data>> = Arc::new(lock_api::Mutex::new(Data::default()));
    let paths = Paths::new(&["lock", "try"]);
    let p = paths.clone();
    let write = Box::new(move |op: Op| {
        if op.try_only {
            p.hit("try");
            return l
                .try_lock()
                .map_or(Ok(()), |g| write_section(&g, op.me, op.hold));
        }
        p.hit("lock");
        write_section(&l.lock(), op.me, op.hold)
    });
    let mut s = exclusive_subject(name, write, Box::new(mutex_forget::<R>));
    s.paths = Some(paths);
    s
}

fn timed_mutex_subject<R: lock_api::RawMutexTimed<Duration = Duration> + Send + Sync + 'static>(
    name: &'static str,
) -> Subject {
    let l: Arc<lock_api::Mutex<R, Data>> = Arc::new(lock_api::Mutex::new(Data::default()));
    let paths = Paths::new(&["lock", "try", "timed"]);
    let p = paths.clone();
    let write = Box::new(move |op: Op| match (op.timeout, op.try_only) {
        (Some(t), _) => {
            p.hit("timed");
            l.try_lock_for(t)
                .map_or(Ok(()), |g| write_section(&g, op.me, op.hold))
        }
        (None, true) => {
            p.hit("try");
            l.try_lock()
                .map_or(Ok(()), |g| write_section(&g, op.me, op.hold))
        }
        (None, false) => {
            p.hit("lock");
            write_section(&l.lock(), op.me, op.hold)
        }
    });
    let mut s = exclusive_subject(name, write, Box::new(mutex_forget::<R>));
    s.paths = Some(paths);
    s
}

fn rw_subject<R: lock_api::RawRwLock + Send + Sync + 'static>(name: &'static str) -> Subject {
    let l: Arc<lock_api::RwLock<R, Data>> = Arc::new(lock_api::RwLock::new(Data::default()));
    let l2 = l.clone();
    let paths = Paths::new(&["write", "read", "try-write", "try-read"]);
    let (p, p2) = (paths.clone(), paths.clone());
    let write = Box::new(move |op: Op| {
        if op.try_only {
            p.hit("try-write");
            return l
                .try_write()
                .map_or(Ok(()), |g| write_section(&g, op.me, op.hold));
        }
        p.hit("write");
        write_section(&l.write(), op.me, op.hold)
    });
    let mut s = exclusive_subject(name, write, Box::new(rw_forget::<R>));
    s.read = Some(Box::new(move |op| {
        if op.try_only {
            p2.hit("try-read");
            return l2.try_read().map_or(Ok(()), |g| read_held(&g, op));
        }
        p2.hit("read");
        read_held(&l2.read(), op)
    }));
    s.paths = Some(paths);
    s
}

fn timed_rw_subject<R>(name: &'static str) -> Subject
where
    R: lock_api::RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let l: Arc<lock_api::RwLock<R, Data>> = Arc::new(lock_api::RwLock::new(Data::default()));
    let l2 = l.clone();
    let paths = Paths::new(&[
        "write",
        "read",
        "try-write",
        "try-read",
        "timed-write",
        "timed-read",
    ]);
    let (p, p2) = (paths.clone(), paths.clone());
    let write = Box::new(move |op: Op| match (op.timeout, op.try_only) {
        (Some(t), _) => {
            p.hit("timed-write");
            l.try_write_for(t)
                .map_or(Ok(()), |g| write_section(&g, op.me, op.hold))
        }
        (None, true) => {
            p.hit("try-write");
            l.try_write()
                .map_or(Ok(()), |g| write_section(&g, op.me, op.hold))
        }
        (None, false) => {
            p.hit("write");
            write_section(&l.write(), op.me, op.hold)
        }
    });
    let mut s = exclusive_subject(name, write, Box::new(rw_forget::<R>));
    s.read = Some(Box::new(move |op| match (op.timeout, op.try_only) {
        (Some(t), _) => {
            p2.hit("timed-read");
            l2.try_read_for(t).map_or(Ok(()), |g| read_held(&g, op))
        }
        (None, true) => {
            p2.hit("try-read");
            l2.try_read().map_or(Ok(()), |g| read_held(&g, op))
        }
        (None, false) => {
            p2.hit("read");
            read_held(&l2.read(), op)
        }
    }));
    s.paths = Some(paths);
    s
}

const SEQ_WORDS: usize = 4;

fn torn(v: &[u64; SEQ_WORDS]) -> Result<(), String> {
    if v.iter().all(|&x| x == v[0]) {
        Ok(())
    } else {
        Err(format!("seqlock reader accepted a torn value {v:?}"))
    }
}

fn seqlock_subject() -> Subject {
    let l = Arc::new(SeqLock::new([0u64; SEQ_WORDS]));
    let l2 = l.clone();
    Subject {
        name: "seqlock",
        write: Box::new(move |op| {
            let mut g = l.write();
            torn(&g)?;
            let v = g[0] + 1;
            for (i, w) in g.iter_mut().enumerate() {
                *w = v;
                if let (1, Some(t)) = (i, op.hold) {
                    std::thread::sleep(t);
                }
            }
            Ok(())
        }),
        read: Some(Box::new(move |_| torn(&l2.read()))),
        forget: None,
        finish: None,
        stop: None,
        pipe: None,
        paths: None,
    }
}

/// Counts drops of `LockRefArc` values.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

thread_local! {
    /// Each thread's `LockRefArc` handles (dropped when the thread exits, late or not).
    static HANDLES: RefCell<Vec<LockRefArc<Counted>>> = const { RefCell::new(Vec::new()) };
}

fn lockref_subject(busted: bool) -> Subject {
    let count = Arc::new(LockRef::new(1));
    let net = Arc::new(AtomicU64::new(0)); // wrapping sum of every counted get (+1) and put (-1)
    let drops = Arc::new(AtomicUsize::new(0));
    let base = Arc::new(StdMutex::new(Some(LockRefArc::new(Counted(drops.clone())))));
    let (c1, n1, b2, d2) = (count.clone(), net.clone(), base.clone(), drops.clone());
    let add = move |n: &AtomicU64, d: i64| n.fetch_add(d as u64, Relaxed);
    Subject {
        name: if busted { "busted-lockref" } else { "lockref" },
        write: Box::new(move |op| {
            if busted {
                // Broken on purpose: a put whose failure is ignored. `put_return` changes nothing
                // while the lock is held (every fourth operation holds it), but the put is counted.
                c1.get();
                add(&n1, 1);
                if op.me % 4 == 0 {
                    c1.lock();
                    work(50);
                    // SAFETY: taken just above; this LockRef guards no memory.
                    unsafe { c1.unlock() };
                }
                let _ = c1.put_return();
                add(&n1, -1);
                return Ok(());
            }
            c1.get();
            add(&n1, 1);
            if op.me % 3 == 0 && c1.put_return() >= 0 {
                add(&n1, -1);
            }
            if c1.put_or_lock() {
                // The last reference: the count is frozen while we hold the lock.
                let c = c1.count();
                work(20);
                if c1.count() != c {
                    // SAFETY: taken by put_or_lock.
                    unsafe { c1.unlock() };
                    return Err("the count changed while the lockref was locked".into());
                }
                // SAFETY: taken by put_or_lock.
                unsafe { c1.unlock() };
            } else {
                add(&n1, -1);
            }
            Ok(())
        }),
        read: Some(Box::new(move |op| {
            let guard = b2.lock().unwrap();
            let Some(a) = guard.as_ref() else {
                return Ok(());
            };
            let h = a.clone();
            drop(guard);
            if d2.load(Relaxed) != 0 {
                return Err("a LockRefArc value was dropped while handles were alive".into());
            }
            // `try_with`: in a late destructor the thread's handle list may already be gone; then
            // the handle is dropped here.
            let _ = HANDLES.try_with(|v| {
                let mut v = v.borrow_mut();
                if op.me.is_multiple_of(2) || v.len() > 32 {
                    v.clear();
                }
                v.push(h);
            });
            Ok(())
        })),
        forget: Some(Box::new(|| {
            let a = LockRefArc::new(0u8);
            for _ in 0..16 {
                std::mem::forget(a.clone());
            }
            if LockRefArc::count(&a) != 17 {
                return Err("forgotten LockRefArc clones miscounted".into());
            }
            Ok(())
        })),
        finish: Some(Box::new(move || {
            let expect = 1i64.wrapping_add(net.load(Relaxed) as i64);
            if count.count() as i64 != expect {
                return Err(format!(
                    "LockRef counts do not balance: count {} but gets - puts = {}",
                    count.count(),
                    expect
                ));
            }
            if count.is_locked() {
                return Err("the LockRef's embedded lock was left held".into());
            }
            let a = base.lock().unwrap().take().expect("the base handle");
            if LockRefArc::count(&a) != 1 {
                return Err(format!(
                    "{} LockRefArc handles outlive every thread",
                    LockRefArc::count(&a) - 1
                ));
            }
            drop(a);
            match drops.load(Relaxed) {
                1 => Ok(()),
                n => Err(format!("the LockRefArc value was dropped {n} times")),
            }
        })),
        stop: None,
        pipe: None,
        paths: None,
    }
}

/// The condvar torture: a one-slot queue on one `Mutex` and two `Condvar`s; odd workers produce, even
/// workers consume; waits are timed at random, notifications `notify_one` or `notify_all` at random.
struct CvState {
    slot: Option<u64>,
    stop: bool,
}

fn condvar_subject(busted: bool) -> Subject {
    struct Shared {
        m: Mutex<CvState>,
        not_empty: Condvar,
        not_full: Condvar,
        notified: AtomicU64,
        woken: AtomicU64,
    }
    let s = Arc::new(Shared {
        m: Mutex::new(CvState {
            slot: None,
            stop: false,
        }),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
        notified: AtomicU64::new(0),
        woken: AtomicU64::new(0),
    });
    let paths = Paths::new(&["notify_one", "notify_all", "requeue", "timeout"]);
    let (pn, pw1, pw2) = (paths.clone(), paths.clone(), paths.clone());
    let notify = move |cv: &Condvar, s: &Shared, all: bool| {
        let n = if all {
            pn.hit("notify_all");
            let n = cv.notify_all() as u64;
            if n >= 2 {
                // Several waiters moved onto the mutex's wait list at once.
                pn.hit("requeue");
            }
            n
        } else {
            pn.hit("notify_one");
            cv.notify_one() as u64
        };
        // Busted: one notification in 64 is counted but never sent (a lost wake-up, as seen by the
        // accounting).
        let extra = (busted && s.notified.load(Relaxed) % 64 == 63) as u64;
        s.notified.fetch_add(n + extra, Relaxed);
    };
    fn wait(
        cv: &Condvar,
        woken: &AtomicU64,
        g: &mut locklab::MutexGuard<'_, CvState>,
        timeout: Option<Duration>,
        paths: &Paths,
    ) -> Result<(), String> {
        match timeout {
            Some(t) => {
                let t0 = Instant::now();
                let r = cv.wait_for(g, t);
                let took = t0.elapsed();
                if !r.timed_out() {
                    woken.fetch_add(1, Relaxed);
                } else {
                    paths.hit("timeout");
                }
                if r.timed_out() && took > t + TIMED_WAIT_SLACK {
                    return Err(format!("a timed wait of {t:?} returned after {took:?}"));
                }
            }
            None => {
                cv.wait(g);
                woken.fetch_add(1, Relaxed);
            }
        }
        Ok(())
    }
    let (s1, s2, s3) = (s.clone(), s.clone(), s.clone());
    let (notify1, notify2, notify3) = (notify.clone(), notify.clone(), notify);
    Subject {
        name: if busted { "busted-condvar" } else { "condvar" },
        // Producers.
        write: Box::new(move |op| {
            let s = &*s1;
            let mut g = s.m.lock();
            while g.slot.is_some() && !g.stop {
                wait(&s.not_full, &s.woken, &mut g, op.timeout, &pw1)?;
            }
            if g.stop {
                return Ok(());
            }
            g.slot = Some(op.me as u64);
            notify1(&s.not_empty, s, op.roll.is_multiple_of(4));
            Ok(())
        }),
        // Consumers.
        read: Some(Box::new(move |op| {
            let s = &*s2;
            let mut g = s.m.lock();
            while g.slot.is_none() && !g.stop {
                wait(&s.not_empty, &s.woken, &mut g, op.timeout, &pw2)?;
            }
            if g.slot.take().is_some() {
                notify2(&s.not_full, s, op.roll % 4 == 1);
            }
            Ok(())
        })),
        forget: None,
        finish: Some(Box::new(move || {
            let (n, w) = (s3.notified.load(Relaxed), s3.woken.load(Relaxed));
            if n != w {
                return Err(format!(
                    "{n} waiters were notified but {w} returned notified (lost or spurious wake-ups)"
                ));
            }
            Ok(())
        })),
        stop: Some(Box::new(move || {
            s.m.lock().stop = true;
            notify3(&s.not_empty, &s, true);
            notify3(&s.not_full, &s, true);
            Ok(())
        })),
        pipe: None,
        paths: (!busted).then_some(paths),
    }
}

/// The domains RCU torture runs in (its own: no other reader holds up their grace periods).
static TORTURE_RCU: locklab::rcu::RcuDomain = locklab::rcu::RcuDomain::new();
static TORTURE_SRCU: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();

/// How long `busted-rcu-early`'s grace period lasts: a fixed wait, long enough to cover most
/// sections (a few hundred ns), too short for the readers that hold theirs (`RCU_LONG_READ`).
const EARLY_GP: Duration = Duration::from_micros(50);
/// A reader holds its section this long one time in [`RCU_LONG_EVERY`], so that sections span grace
/// periods (the pipe's 1 and 2 buckets) and an early end is seen.
const RCU_LONG_READ: Duration = Duration::from_micros(300);
const RCU_LONG_EVERY: u64 = 32;
/// Grace periods a dead object waits in the pool before it is reused (a freed object recycled at
/// once would look live again to a reader that holds it: delaying reuse lets the reader see it dead).
const REUSE_AFTER_GPS: u64 = 4;

/// An object published under RCU torture. Never freed (leaked: a broken RCU must not make the check
/// itself undefined behaviour); "freed" is the `dead` mark, set where a real free would happen, and a
/// dead object goes back to a pool that writers reuse (what an allocator would do), after
/// [`REUSE_AFTER_GPS`] grace periods, so memory stays bounded.
struct RcuObj {
    id: AtomicU64,
    /// Completed grace periods when it was unpublished (`u64::MAX` while published).
    retired_at: AtomicU64,
    /// Its grace period is over: a real RCU user would have freed it now.
    dead: AtomicBool,
}

/// Which RCU `rcu_subject` tortures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RcuFlavour {
    /// Ours, memb flavour (`rcu`).
    Memb,
    /// Ours, SRCU (`srcu`): readers may sleep inside their sections.
    Srcu,
    /// Grace periods that do not wait at all (`busted-rcu`).
    BustedNoWait,
    /// Grace periods that end after a short fixed wait (`busted-rcu-early`).
    BustedEarly,
}

/// Frees (marks dead) an object when dropped: the `defer_drop` path's payload.
struct Killer(Option<Box<dyn FnOnce() + Send>>);

impl Drop for Killer {
    fn drop(&mut self) {
        if let Some(k) = self.0.take() {
            k();
        }
    }
}

/// rcutorture for our RCU (`rcu`: memb; `srcu`), or for a busted one (`busted-rcu`: grace periods
/// that do not wait; `busted-rcu-early`: grace periods that end after a short fixed wait), which the
/// checks must catch.
///
/// Readers (even workers) take a read-side section, load the published object and its id, work (or
/// hold the section for [`RCU_LONG_READ`] now and then, or sleep under `long-holds`), and check,
/// still inside: the object is not dead, it is still the object loaded (same id: not freed and
/// reused), and at most 2 grace periods completed since it was unpublished (a reader's section can
/// span only the grace period in progress when it began: ages 0 and 1 are normal, 2 is
/// rcutorture's tolerance, more is a failure). Ages go into the pipe histogram. Writers (odd
/// workers) publish a new object and retire the old one by one of the flavour's paths, chosen at
/// random: `synchronize` then marking it dead, the expedited form, `call_rcu` of the marking,
/// `defer_drop` of a value whose drop marks it, a polled grace period (`start_poll_synchronize` then
/// polling), `get_state_synchronize` then `cond_synchronize`, or `call_rcu` then the barrier. At the
/// end the barrier must have run every callback: every retired object is dead. Every path must have
/// run.
fn rcu_subject(flavour: RcuFlavour) -> Subject {
    use std::collections::VecDeque;
    use std::sync::atomic::Ordering::SeqCst;
    struct State {
        cur: std::sync::atomic::AtomicPtr<RcuObj>,
        next_id: AtomicU64,
        retired: AtomicU64,
        killed: Arc<AtomicU64>,
        /// The busted RCUs' fake grace-period count.
        fake_gp: Arc<AtomicU64>,
        /// Dead objects, with the grace-period count at their death, ready for reuse later.
        pool: Arc<StdMutex<VecDeque<(u64, &'static RcuObj)>>>,
    }
    let busted = matches!(flavour, RcuFlavour::BustedNoWait | RcuFlavour::BustedEarly);
    let d = &TORTURE_RCU;
    let sd = &TORTURE_SRCU;
    let gps_of = move |fake: &AtomicU64| match flavour {
        RcuFlavour::Memb => d.grace_periods(),
        RcuFlavour::Srcu => sd.grace_periods(),
        _ => fake.load(SeqCst),
    };
    fn leak(id: u64) -> *mut RcuObj {
        Box::into_raw(Box::new(RcuObj {
            id: AtomicU64::new(id),
            retired_at: AtomicU64::new(u64::MAX),
            dead: AtomicBool::new(false),
        }))
    }
    let fresh = move |st: &State| -> *mut RcuObj {
        let id = st.next_id.fetch_add(1, Relaxed);
        let now = gps_of(&st.fake_gp);
        let mut pool = st.pool.lock().unwrap();
        match pool.front() {
            Some(&(died, o)) if now >= died + REUSE_AFTER_GPS => {
                pool.pop_front();
                o.id.store(id, SeqCst);
                o.retired_at.store(u64::MAX, SeqCst);
                o.dead.store(false, SeqCst);
                o as *const RcuObj as *mut RcuObj
            }
            _ => leak(id),
        }
    };
    let st = Arc::new(State {
        cur: std::sync::atomic::AtomicPtr::new(leak(0)),
        next_id: AtomicU64::new(1),
        retired: AtomicU64::new(0),
        killed: Arc::new(AtomicU64::new(0)),
        fake_gp: Arc::new(AtomicU64::new(0)),
        pool: Arc::new(StdMutex::new(VecDeque::new())),
    });
    let names: &[&'static str] = match flavour {
        RcuFlavour::Memb => &[
            "synchronize",
            "expedited",
            "call_rcu",
            "defer_drop",
            "polled",
            "cond",
            "barrier",
        ],
        RcuFlavour::Srcu => &[
            "synchronize",
            "call_srcu",
            "defer_drop",
            "polled",
            "cond",
            "barrier",
            "down_read",
        ],
        _ => &["early"],
    };
    let paths = Paths::new(names);
    let pipe: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let (st1, st2, st3, pipe2, pw, pr) = (
        st.clone(),
        st.clone(),
        st.clone(),
        pipe.clone(),
        paths.clone(),
        paths.clone(),
    );
    Subject {
        name: match flavour {
            RcuFlavour::Memb => "rcu",
            RcuFlavour::Srcu => "srcu",
            RcuFlavour::BustedNoWait => "busted-rcu",
            RcuFlavour::BustedEarly => "busted-rcu-early",
        },
        write: Box::new(move |op| {
            let st = &*st1;
            let new = fresh(st);
            // SAFETY (of the deref below): objects are leaked, never freed.
            let old = unsafe { &*st.cur.swap(new, std::sync::atomic::Ordering::AcqRel) };
            old.retired_at.store(gps_of(&st.fake_gp), SeqCst);
            st.retired.fetch_add(1, Relaxed);
            let (killed, pool, fake) = (st.killed.clone(), st.pool.clone(), st.fake_gp.clone());
            let kill = move || {
                old.dead.store(true, SeqCst);
                killed.fetch_add(1, Relaxed);
                let died = match flavour {
                    RcuFlavour::Memb => d.grace_periods(),
                    RcuFlavour::Srcu => sd.grace_periods(),
                    _ => fake.load(SeqCst),
                };
                pool.lock().unwrap().push_back((died, old));
            };
            let poll = |done: &dyn Fn() -> bool| {
                while !done() {
                    std::thread::sleep(Duration::from_micros(50));
                }
            };
            match flavour {
                RcuFlavour::BustedNoWait | RcuFlavour::BustedEarly => {
                    if flavour == RcuFlavour::BustedEarly {
                        std::thread::sleep(EARLY_GP);
                    }
                    st.fake_gp.fetch_add(1, SeqCst);
                    pw.hit("early");
                    kill();
                }
                RcuFlavour::Memb => match op.roll % 8 {
                    0 => {
                        pw.hit("synchronize");
                        d.synchronize();
                        kill();
                    }
                    1 => {
                        pw.hit("expedited");
                        d.synchronize_expedited();
                        kill();
                    }
                    2 => {
                        pw.hit("defer_drop");
                        d.defer_drop(Box::new(Killer(Some(Box::new(kill)))));
                    }
                    3 => {
                        pw.hit("polled");
                        let c = d.start_poll_synchronize();
                        poll(&|| d.poll_state_synchronize(c));
                        kill();
                    }
                    4 => {
                        pw.hit("cond");
                        let c = d.get_state_synchronize();
                        d.cond_synchronize(c);
                        kill();
                    }
                    5 if op.roll % 64 == 5 => {
                        pw.hit("barrier");
                        d.call_rcu(kill);
                        d.rcu_barrier();
                    }
                    _ => {
                        pw.hit("call_rcu");
                        d.call_rcu(kill);
                    }
                },
                RcuFlavour::Srcu => match op.roll % 8 {
                    0 | 1 => {
                        pw.hit("synchronize");
                        sd.synchronize();
                        kill();
                    }
                    2 => {
                        pw.hit("defer_drop");
                        sd.defer_drop(Box::new(Killer(Some(Box::new(kill)))));
                    }
                    3 => {
                        pw.hit("polled");
                        let c = sd.start_poll_synchronize();
                        poll(&|| sd.poll_state_synchronize(c));
                        kill();
                    }
                    4 => {
                        pw.hit("cond");
                        let c = sd.get_state_synchronize();
                        sd.cond_synchronize(c);
                        kill();
                    }
                    5 if op.roll % 64 == 5 => {
                        pw.hit("barrier");
                        sd.call_srcu(kill);
                        sd.srcu_barrier();
                    }
                    _ => {
                        pw.hit("call_srcu");
                        sd.call_srcu(kill);
                    }
                },
            }
            Ok(())
        }),
        read: Some(Box::new(move |op| {
            let st = &*st2;
            // The section: memb, or SRCU (sometimes a `down_read` section).
            enum G {
                Memb(#[allow(dead_code)] locklab::rcu::RcuReadGuard),
                Srcu(#[allow(dead_code)] locklab::rcu::SrcuReadGuard),
                Down(#[allow(dead_code)] locklab::rcu::SrcuDownGuard),
            }
            let g = match flavour {
                RcuFlavour::Srcu if op.roll % 8 == 7 => {
                    pr.hit("down_read");
                    G::Down(sd.down_read())
                }
                RcuFlavour::Srcu => G::Srcu(sd.read_lock()),
                _ => G::Memb(d.read_lock()),
            };
            // SAFETY: objects are leaked, never freed.
            let o = unsafe { &*st.cur.load(std::sync::atomic::Ordering::Acquire) };
            let id = o.id.load(SeqCst);
            match op.hold {
                Some(t) => std::thread::sleep(t),
                None if op.roll % RCU_LONG_EVERY == 3 => std::thread::sleep(RCU_LONG_READ),
                None => work(20),
            }
            let dead = o.dead.load(SeqCst);
            let id_now = o.id.load(SeqCst);
            let retired = o.retired_at.load(SeqCst);
            let now = gps_of(&st.fake_gp);
            drop(g);
            let age = if retired == u64::MAX {
                0
            } else {
                now.saturating_sub(retired)
            };
            pipe2[age.min(3) as usize].fetch_add(1, Relaxed);
            if dead {
                return Err(format!(
                    "reader saw object {id} freed under it (its grace period ended early)"
                ));
            }
            if id_now != id {
                return Err(format!(
                    "reader's object {id} was freed and reused as {id_now} under it"
                ));
            }
            if age > 2 {
                return Err(format!(
                    "reader held object {id} across {age} grace periods"
                ));
            }
            Ok(())
        })),
        forget: None,
        finish: Some(Box::new(move || {
            match flavour {
                RcuFlavour::Memb => d.rcu_barrier(),
                RcuFlavour::Srcu => sd.srcu_barrier(),
                _ => {}
            }
            let (r, k) = (st3.retired.load(Relaxed), st3.killed.load(Relaxed));
            if r != k {
                return Err(format!(
                    "{r} objects retired but {k} freed after the barrier (lost callbacks)"
                ));
            }
            Ok(())
        })),
        stop: None,
        pipe: Some(pipe),
        paths: (!busted).then_some(paths),
    }
}

/// A spinlock whose unlock releases before the critical section ends (locktorture's `lock_busted`).
fn busted_unlock_early() -> Subject {
    let l = Arc::new(locklab::SpinLock::new(()));
    let d = Arc::new(Data::default());
    Subject {
        name: "busted-unlock-early",
        write: Box::new(move |op| {
            drop(l.lock());
            write_section(&d, op.me, op.hold)
        }),
        read: None,
        forget: None,
        finish: None,
        stop: None,
        pipe: None,
        paths: None,
    }
}

/// A reader-writer lock whose writers take the shared mode: a writer beside readers (and writers).
fn busted_rw() -> Subject {
    let l = Arc::new(locklab::RwSpinLock::new(Data::default()));
    let l2 = l.clone();
    Subject {
        name: "busted-rw",
        write: Box::new(move |op| write_section(&l.read(), op.me, op.hold)),
        read: Some(Box::new(move |_| read_section(&l2.read()))),
        forget: None,
        finish: None,
        stop: None,
        pipe: None,
        paths: None,
    }
}

/// A seqlock whose writers never make the sequence odd: readers accept values mid-write.
fn busted_seqlock() -> Subject {
    struct S {
        seq: SeqCount,
        writer: locklab::SpinLock<()>,
        words: [AtomicU64; SEQ_WORDS],
    }
    let s = Arc::new(S {
        seq: SeqCount::new(),
        writer: locklab::SpinLock::new(()),
        words: Default::default(),
    });
    let s2 = s.clone();
    Subject {
        name: "busted-seqlock",
        write: Box::new(move |_| {
            let _w = s.writer.lock();
            let v = s.words[0].load(Relaxed) + 1;
            for w in &s.words {
                w.store(v, Relaxed);
                work(50);
            }
            Ok(())
        }),
        read: Some(Box::new(move |_| {
            loop {
                let start = s2.seq.read_begin();
                let v: [u64; SEQ_WORDS] = std::array::from_fn(|i| s2.words[i].load(Relaxed));
                if !s2.seq.read_retry(start) {
                    return torn(&v);
                }
            }
        })),
        forget: None,
        finish: None,
        stop: None,
        pipe: None,
        paths: None,
    }
}

/// Every lock `torture` knows, by name (ours, then the busted ones).
pub fn subject(name: &str) -> Option<Subject> {
    use locklab::raw::*;
    Some(match name {
        "tas" => mutex_subject::<RawTasLock>("tas"),
        "ticket" => mutex_subject::<RawTicketLock>("ticket"),
        "mcs" => mutex_subject::<RawMcsLock>("mcs"),
        "qspinlock" => mutex_subject::<RawQueuedSpinLock>("qspinlock"),
        "mutex" => timed_mutex_subject::<RawMutex>("mutex"),
        "rwspinlock" => rw_subject::<RawRwSpinLock>("rwspinlock"),
        "rwsem" => timed_rw_subject::<RawRwSem>("rwsem"),
        "percpu-rwsem" => timed_rw_subject::<RawPercpuRwSem>("percpu-rwsem"),
        "brlock" => rw_subject::<RawBrLock>("brlock"),
        "seqlock" => seqlock_subject(),
        "lockref" => lockref_subject(false),
        "condvar" => condvar_subject(false),
        "busted-unlock-early" => busted_unlock_early(),
        "busted-rw" => busted_rw(),
        "busted-seqlock" => busted_seqlock(),
        "busted-lockref" => lockref_subject(true),
        "busted-condvar" => condvar_subject(true),
        "rcu" => rcu_subject(RcuFlavour::Memb),
        "srcu" => rcu_subject(RcuFlavour::Srcu),
        "busted-rcu" => rcu_subject(RcuFlavour::BustedNoWait),
        "busted-rcu-early" => rcu_subject(RcuFlavour::BustedEarly),
        _ => return None,
    })
}

/// Our primitives, as `--lock all` runs them.
pub const OURS: [&str; 14] = [
    "tas",
    "ticket",
    "mcs",
    "qspinlock",
    "mutex",
    "rwspinlock",
    "rwsem",
    "percpu-rwsem",
    "brlock",
    "seqlock",
    "lockref",
    "condvar",
    "rcu",
    "srcu",
];
/// The deliberately broken locks, as `--lock busted` runs them.
pub const BUSTED: [&str; 7] = [
    "busted-unlock-early",
    "busted-rw",
    "busted-seqlock",
    "busted-lockref",
    "busted-condvar",
    "busted-rcu",
    "busted-rcu-early",
];

/// One kind of operation's counts.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Counts {
    /// Operations done, all workers.
    pub total: u64,
    /// Most done by one worker.
    pub max: u64,
    /// Fewest done by one worker.
    pub min: u64,
    /// Operations whose checks failed.
    pub fail: u64,
}

/// One lock's result.
#[derive(Serialize, Clone, Debug)]
pub struct LockResult {
    /// The lock's name.
    pub lock: String,
    /// Exclusive operations (producers, for `condvar`).
    pub writes: Counts,
    /// Shared operations (consumers for `condvar`, `LockRefArc` clones for `lockref`), if any.
    pub reads: Option<Counts>,
    /// Failed end-of-run and stressor checks (forget, balance, hang).
    pub other_failures: u64,
    /// The first few failure messages.
    pub failures: Vec<String>,
    /// Threads replaced by `churn`.
    pub threads_replaced: u64,
    /// Operations run from thread-local destructors after the thread's slot was returned.
    pub late_ops: u64,
    /// Some thread never finished (deadlock or lost wake-up); the run stopped here.
    pub hung: bool,
    /// RCU: how many reads saw an object aged 0, 1, 2, and 3 or more grace periods since it was
    /// unpublished (rcutorture's pipe; more than 2 is a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe: Option<[u64; 4]>,
    /// How many times each path of the subject ran (`try`, `timed`, `notify_all`, `synchronize`,
    /// ...); a path that never ran fails the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<PathCount>>,
    /// `true` when nothing failed.
    pub ok: bool,
}

impl LockResult {
    /// The locktorture-shaped line.
    pub fn line(&self) -> String {
        fn part(label: &str, c: &Counts) -> String {
            let mark = if c.fail > 0 {
                " !!!"
            } else if c.max > 2 * c.min {
                " ???"
            } else {
                ""
            };
            format!(
                "{label}: Total: {} Max/Min: {}/{}{mark} Fail: {}",
                c.total, c.max, c.min, c.fail
            )
        }
        let mut s = format!("{:<22}{}", self.lock, part("Writes", &self.writes));
        if let Some(r) = &self.reads {
            s += "  ";
            s += &part("Reads", r);
        }
        if let Some(p) = &self.pipe {
            s += &format!("  Pipe: {} {} {} {}", p[0], p[1], p[2], p[3]);
        }
        if let Some(paths) = &self.paths {
            s += "  Paths:";
            for p in paths {
                s += &format!(
                    " {}={}{}",
                    p.path,
                    p.runs,
                    if p.runs == 0 { " !!!" } else { "" }
                );
            }
        }
        if self.other_failures > 0 {
            s += &format!("  Other: {} !!!", self.other_failures);
        }
        s
    }
}

/// The JSON report.
#[derive(Serialize, Debug)]
pub struct Report {
    /// locklab's version.
    pub locklab_version: String,
    /// The machine.
    pub machine: crate::metrics::Machine,
    /// Seconds per lock.
    pub duration_s: u64,
    /// Worker threads per lock.
    pub threads: usize,
    /// The stressors in rotation.
    pub stressors: Vec<String>,
    /// One per lock.
    pub results: Vec<LockResult>,
    /// `true` when every lock passed.
    pub ok: bool,
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

/// A small xorshift generator (per thread; no dependency needed for this).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One operation by worker `w`, with the active stressor applied.
fn one_op(sh: &Shared, w: usize, rng: &mut Rng) {
    let stressor = sh.stressor();
    let me = w + 1;
    // Under `timeouts` half the acquisitions are timed and a quarter are `try`; otherwise one in
    // 64 of each, so that a short run still reaches those paths.
    let mode = if stressor == "timeouts" {
        rng.below(4)
    } else {
        rng.below(64)
    };
    let op = Op {
        me,
        hold: (stressor == "long-holds" && rng.below(2000) == 0)
            .then(|| Duration::from_micros(1000 + rng.below(4000))),
        timeout: (mode < 2 && (stressor == "timeouts" || mode < 1))
            .then(|| Duration::from_micros(rng.below(2000))),
        try_only: mode == 2,
        roll: rng.next(),
    };
    let read = sh.subject.read.is_some() && w.is_multiple_of(2);
    let r = match (&sh.subject.read, read) {
        (Some(f), true) => f(op),
        _ => (sh.subject.write)(op),
    };
    match r {
        Ok(()) => {
            if read {
                sh.reads[w].fetch_add(1, Relaxed);
            } else {
                sh.writes[w].fetch_add(1, Relaxed);
            }
        }
        Err(m) => sh.fail(if read { &sh.read_fail } else { &sh.write_fail }, m),
    }
    if let (true, Some(f)) = (
        stressor == "forget" && rng.below(512) == 0,
        &sh.subject.forget,
    ) && let Err(m) = f()
    {
        sh.fail(&sh.other_fail, m);
    }
}

/// An operation run from a thread-local destructor.
struct LateOp(RefCell<Option<Box<dyn FnOnce()>>>);

impl Drop for LateOp {
    fn drop(&mut self) {
        if let Some(f) = self.0.borrow_mut().take() {
            f();
        }
    }
}

thread_local! {
    /// Set first in every worker, so its destructor runs after the thread's slot was returned
    /// (destructors run in reverse order of registration).
    static LATE: LateOp = const { LateOp(RefCell::new(None)) };
}

/// One worker thread's life: until the run stops, or (churn) a random lifetime ends.
fn worker(sh: Arc<Shared>, w: usize, seed: u64) {
    // Register the late operation's destructor before anything takes a thread slot.
    let late = sh.clone();
    LATE.with(|l| {
        *l.0.borrow_mut() = Some(Box::new(move || {
            let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
            if !late.stop.load(Relaxed) || late.subject.stop.is_none() {
                one_op(&late, w, &mut rng);
                late.late_ops.fetch_add(1, Relaxed);
            }
        }))
    });
    let mut rng = Rng(seed | 1);
    let born = Instant::now();
    let lifetime = Duration::from_millis(50 + rng.below(400));
    let mut shuffle_seen = usize::MAX;
    while !sh.stop.load(Relaxed) {
        if sh.stutter.load(Relaxed) {
            while sh.stutter.load(Relaxed) && !sh.stop.load(Relaxed) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let phase = sh.phase.load(Relaxed);
        if sh.stressor() == "shuffle" && phase != shuffle_seen {
            shuffle_seen = phase;
            pin_to(sh.cpus[rng.below(sh.cpus.len() as u64) as usize]);
        } else if shuffle_seen != usize::MAX && sh.stressor() != "shuffle" {
            shuffle_seen = usize::MAX;
            unpin(&sh.cpus);
        }
        one_op(&sh, w, &mut rng);
        if sh.stressor() == "churn" && born.elapsed() > lifetime {
            return;
        }
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

/// `locklab torture`: runs the plan; an error when an invariant failed (exit status 1).
pub fn command(plan: &TorturePlan) -> anyhow::Result<()> {
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
        machine: crate::calibrate::machine(),
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
