//! The subjects: every primitive (and every deliberately broken one) as the operations the workers
//! run, each doing its own checks, with the paths it counts.

use super::*;
use locklab::{Condvar, LockRef, LockRefArc, Mutex, SeqCount, SeqLock};
use std::cell::RefCell;

/// A subject with one exclusive operation and `forget` (the rest unset).
pub(super) fn exclusive_subject(name: &'static str, write: OpFn, forget: CheckFn) -> Subject {
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

/// The scratch lock at `raw` is dropped while held (its guards forgotten on purpose): with lockdep,
/// the validator is told, as the kernel's is when held memory is freed, so that the next scratch
/// lock at that address is a new lock, not a relock.
fn gone_while_held(raw: usize) {
    #[cfg(feature = "lockdep")]
    locklab::lockdep::hooks::destroy_done(raw);
    #[cfg(not(feature = "lockdep"))]
    let _ = raw;
}

/// `forget` for a mutex type: a forgotten guard keeps a scratch lock of the same type locked.
pub(super) fn mutex_forget<R: lock_api::RawMutex>() -> Result<(), String> {
    let s = lock_api::Mutex::<R, ()>::new(());
    std::mem::forget(s.lock());
    let r = if s.try_lock().is_some() {
        Err("try_lock succeeded on a lock whose guard was forgotten".into())
    } else {
        Ok(())
    };
    // SAFETY: only the raw lock's address is taken.
    gone_while_held(unsafe { s.raw() } as *const R as usize);
    r
}

/// `forget` for a reader-writer type: forgotten read guards keep writers out of a scratch lock.
pub(super) fn rw_forget<R: lock_api::RawRwLock>() -> Result<(), String> {
    let s = lock_api::RwLock::<R, ()>::new(());
    std::mem::forget(s.read());
    // The others by try_read: a blocking read by a thread that already reads a writer-preferring
    // lock is the recursive read lockdep rightly reports (a writer queued between them would wait
    // for the first while blocking the second).
    for _ in 1..64 {
        match s.try_read() {
            Some(g) => std::mem::forget(g),
            None => return Err("try_read failed on a lock only read-held".into()),
        }
    }
    let r = if s.try_write().is_some() {
        Err("a writer got in beside 64 forgotten read guards".into())
    } else {
        Ok(())
    };
    // SAFETY: only the raw lock's address is taken.
    gone_while_held(unsafe { s.raw() } as *const R as usize);
    r
}

/// A reader's section, held for `op.hold` first when the long-holds stressor asks.
pub(super) fn read_held(d: &Data, op: Op) -> Result<(), String> {
    if let Some(t) = op.hold {
        std::thread::sleep(t);
    }
    read_section(d)
}

pub(super) fn mutex_subject<R: lock_api::RawMutex + Send + Sync + 'static>(
    name: &'static str,
) -> Subject
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

pub(super) fn timed_mutex_subject<
    R: lock_api::RawMutexTimed<Duration = Duration> + Send + Sync + 'static,
>(
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

pub(super) fn timed_rw_subject<R>(name: &'static str) -> Subject
where
    R: lock_api::RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    timed_rw_subject_on::<R>(name, Arc::new(lock_api::RwLock::new(Data::default())), &[]).0
}

/// [`timed_rw_subject`] over a given lock, with `extra` paths for the caller's own operations; the
/// subject and its paths.
pub(super) fn timed_rw_subject_on<R>(
    name: &'static str,
    l: Arc<lock_api::RwLock<R, Data>>,
    extra: &[&'static str],
) -> (Subject, Arc<Paths>)
where
    R: lock_api::RawRwLockTimed<Duration = Duration> + Send + Sync + 'static,
{
    let l2 = l.clone();
    let mut names = vec![
        "write",
        "read",
        "try-write",
        "try-read",
        "timed-write",
        "timed-read",
    ];
    names.extend_from_slice(extra);
    let paths = Paths::new(&names);
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
    s.paths = Some(paths.clone());
    (s, paths)
}

/// `RwSem`: the timed subject's paths, and a third of the writes through an upgradable read (plain,
/// try or timed), its upgrade (plain or timed) and a downgrade back to upgradable; checks that no
/// writer came between the upgradable read and the upgrade. `biased`: the lock has the reader bias
/// ([`RawRwSem::with_reader_bias`](locklab::raw::RawRwSem::with_reader_bias)).
pub(super) fn upgradable_rwsem_subject(name: &'static str, biased: bool) -> Subject {
    use lock_api::{RwLockUpgradableReadGuard as U, RwLockWriteGuard as W};
    use std::sync::atomic::Ordering::Relaxed;
    type R = locklab::raw::RawRwSem;
    let raw = if biased {
        R::with_reader_bias()
    } else {
        R::new()
    };
    let l: Arc<lock_api::RwLock<R, Data>> =
        Arc::new(lock_api::RwLock::from_raw(raw, Data::default()));
    let (mut s, p) = timed_rw_subject_on::<R>(
        name,
        l.clone(),
        &[
            "upgradable",
            "try-upgradable",
            "timed-upgradable",
            "upgrade",
            "timed-upgrade",
            "downgrade-to-upgradable",
        ],
    );
    let plain = std::mem::replace(&mut s.write, Box::new(|_| Ok(())));
    s.write = Box::new(move |op: Op| {
        if !op.roll.is_multiple_of(3) {
            return plain(op);
        }
        let u = match (op.timeout, op.try_only) {
            (Some(t), _) => {
                p.hit("timed-upgradable");
                match l.try_upgradable_read_for(t) {
                    Some(u) => u,
                    None => return Ok(()),
                }
            }
            (None, true) => {
                p.hit("try-upgradable");
                match l.try_upgradable_read() {
                    Some(u) => u,
                    None => return Ok(()),
                }
            }
            (None, false) => {
                p.hit("upgradable");
                l.upgradable_read()
            }
        };
        read_held(&u, op)?;
        let seen = u.a.load(Relaxed);
        let w = match op.timeout {
            Some(t) => {
                p.hit("timed-upgrade");
                match U::try_upgrade_for(u, t) {
                    Ok(w) => w,
                    Err(u) => return read_held(&u, op),
                }
            }
            None => {
                p.hit("upgrade");
                U::upgrade(u)
            }
        };
        let now = w.a.load(Relaxed);
        if now != seen {
            return Err(format!(
                "a writer came between an upgradable read ({seen}) and its upgrade ({now})"
            ));
        }
        write_section(&w, op.me, op.hold)?;
        p.hit("downgrade-to-upgradable");
        let u = W::downgrade_to_upgradable(w);
        read_held(&u, Op { hold: None, ..op })
    });
    s
}

pub(super) fn seqlock_subject() -> Subject {
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
pub(super) struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

thread_local! {
    /// Each thread's `LockRefArc` handles (dropped when the thread exits, late or not).
    static HANDLES: RefCell<Vec<LockRefArc<Counted>>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn lockref_subject(busted: bool) -> Subject {
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
pub(super) struct CvState {
    slot: Option<u64>,
    stop: bool,
}

pub(super) fn condvar_subject(busted: bool) -> Subject {
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

/// A spinlock whose unlock releases before the critical section ends (locktorture's `lock_busted`).
pub(super) fn busted_unlock_early() -> Subject {
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
pub(super) fn busted_rw() -> Subject {
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
pub(super) fn busted_seqlock() -> Subject {
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
        "rwspinlock" => timed_rw_subject::<RawRwSpinLock>("rwspinlock"),
        "rwsem" => upgradable_rwsem_subject("rwsem", false),
        "rwsem-biased" => upgradable_rwsem_subject("rwsem-biased", true),
        "percpu-rwsem" => timed_rw_subject::<RawPercpuRwSem>("percpu-rwsem"),
        "recursive-rwsem" => timed_rw_subject::<RawRecursiveRwSem>("recursive-rwsem"),
        "brlock" => timed_rw_subject::<RawBrLock>("brlock"),
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
pub const OURS: [&str; 16] = [
    "tas",
    "ticket",
    "mcs",
    "qspinlock",
    "mutex",
    "rwspinlock",
    "rwsem",
    "rwsem-biased",
    "percpu-rwsem",
    "recursive-rwsem",
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
