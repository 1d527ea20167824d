//! RCU regressions from what users do: floods inside and outside readers, panics inside grace
//! periods and callbacks, a closed stderr, a refused membarrier, fork in a loop, late thread-local
//! destructors, and the misuses that must panic rather than deadlock.

use super::tests::Obj;
use super::*;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// Runs this test binary again as a child, running only test `name` (in this module) with
/// `LOCKLAB_RCU_CHILD` set to it: for tests that change process-wide state (stderr, the fence mode).
#[cfg(not(miri))]
fn run_child(name: &str) -> std::process::Output {
    let path = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, rest)| rest);
    std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            &format!("{path}::{name}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LOCKLAB_RCU_CHILD", name)
        .output()
        .expect("run the test binary as a child")
}

/// Whether this process is the child running test `name` (`run_child`).
#[cfg(not(miri))]
fn in_child(name: &str) -> bool {
    std::env::var("LOCKLAB_RCU_CHILD").as_deref() == Ok(name)
}

/// Runs `f` on a thread and fails (instead of hanging the suite) if it does not return in `limit`.
pub(super) fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what}: still blocked after {limit:?} (deadlock)"))
}

/// call_rcu (and store_deferred) past the flood limit inside a read-side section: it must not wait
/// for a grace period (which would wait for the caller's own section, and wedge every writer of the
/// domain). Other threads' grace periods go on meanwhile; everything runs once the section ends.
#[test]
#[cfg_attr(miri, ignore)] // LIMIT callbacks
fn call_rcu_floods_inside_a_reader_without_deadlock() {
    static D: RcuDomain = RcuDomain::new();
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let n = within(
        Duration::from_secs(60),
        "call_rcu flood in a reader",
        || {
            let cell = RcuCell::with_domain(0usize, &D);
            let g = D.read_lock();
            for _ in 0..=LIMIT {
                D.call_rcu(|| {
                    RAN.fetch_add(1, Ordering::Relaxed);
                });
            }
            for i in 0..100 {
                cell.store_deferred(i); // the documented never-waiting writer
            }
            let pending = D.pending_callbacks();
            // Another thread's grace period does not wait for the flood (only for our section).
            let other = std::thread::spawn(|| {
                D.call_rcu(|| {});
            });
            other.join().unwrap();
            drop(g);
            D.rcu_barrier();
            pending
        },
    );
    assert!(
        n > LIMIT,
        "the list grew past the mark inside the section ({n} pending)"
    );
    assert_eq!(RAN.load(Ordering::Relaxed), LIMIT + 1);
    assert_eq!(D.pending_callbacks(), 0);
}

/// Outside a reader the flood still waits (memory stays bounded by LIMIT per thread): checked by
/// `a_flood_stays_bounded`; here, one thread alone, the list never passes LIMIT.
#[test]
#[cfg_attr(miri, ignore)]
fn call_rcu_floods_outside_a_reader_wait() {
    static D: RcuDomain = RcuDomain::new();
    let mut peak = 0;
    for _ in 0..2 * LIMIT {
        D.call_rcu(|| {});
        peak = peak.max(D.engine.my_record_len());
    }
    assert!(peak <= LIMIT, "peak {peak} on one list");
    D.rcu_barrier();
}

/// A grace period whose protocol unwinds (a panic anywhere in it) does not wedge the sequence: the
/// next grace period runs, and callers waiting meanwhile are woken.
#[test]
fn a_panic_inside_a_grace_period_does_not_wedge_it() {
    static G: GpSeq = GpSeq::new();
    let g = &G;
    let entered = Arc::new(AtomicBool::new(false));
    let e2 = entered.clone();
    let panicker = std::thread::spawn(move || {
        std::panic::catch_unwind(|| {
            g.synchronize(|| {
                e2.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
                panic!("inside a grace period (expected by the test)");
            })
        })
        .is_err()
    });
    while !entered.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // A caller that arrives while the doomed grace period runs waits for the next one.
    let waiter = std::thread::spawn(move || g.synchronize(|| {}));
    assert!(panicker.join().unwrap(), "the grace period panicked");
    within(
        Duration::from_secs(30),
        "a grace period after a panic",
        move || {
            waiter.join().unwrap();
            g.synchronize(|| {});
        },
    );
    assert!(g.completed() >= 1);
}

/// A callback that panics with a payload whose own `Drop` panics: the grace-period thread survives,
/// later callbacks run, `rcu_barrier` returns.
#[test]
#[cfg_attr(miri, ignore)] // the second payload is leaked on purpose, which Miri reports
fn a_callback_panic_whose_payload_panics_on_drop_is_survived() {
    static D: RcuDomain = RcuDomain::new();
    static AFTER: AtomicUsize = AtomicUsize::new(0);
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("the panic payload's drop (expected by the test)");
        }
    }
    D.call_rcu(|| std::panic::panic_any(Bomb));
    D.call_rcu(|| {
        AFTER.fetch_add(1, Ordering::SeqCst);
    });
    within(Duration::from_secs(30), "rcu_barrier after a bomb", || {
        D.rcu_barrier()
    });
    D.call_rcu(|| {
        AFTER.fetch_add(1, Ordering::SeqCst);
    });
    within(Duration::from_secs(30), "a second rcu_barrier", || {
        D.rcu_barrier()
    });
    assert_eq!(AFTER.load(Ordering::SeqCst), 2);
}

/// The stall warning is written to a closed stderr (`prog 2>&1 | head`): it must not panic inside
/// the grace period. The child's stderr is a pipe whose read end is closed.
#[test]
#[cfg(not(miri))]
fn a_stall_warning_into_a_closed_stderr_does_not_wedge_the_domain() {
    const NAME: &str = "a_stall_warning_into_a_closed_stderr_does_not_wedge_the_domain";
    static D: RcuDomain = RcuDomain::new();
    if in_child(NAME) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors; dup2 and close take plain integers.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            libc::close(fds[0]);
            assert_eq!(libc::dup2(fds[1], 2), 2);
        }
        D.set_stall_timeout(Duration::from_millis(1));
        let reader = std::thread::spawn(|| {
            let g = D.read_lock();
            std::thread::sleep(Duration::from_millis(400));
            drop(g);
        });
        std::thread::sleep(Duration::from_millis(20));
        D.synchronize(); // stalls for ~400 ms: warns into the closed pipe
        reader.join().unwrap();
        D.synchronize();
        D.call_rcu(|| {});
        D.rcu_barrier();
        return;
    }
    let out = run_child(NAME);
    assert!(
        out.status.success(),
        "the child failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran the test"
    );
}

/// `membarrier` refused on the writer's thread (a per-thread seccomp filter) after readers ran on
/// the fence-free path: grace periods still complete and still wait for readers; readers switch to
/// fences. In a child: the switch is for the whole process.
#[test]
#[cfg(not(miri))]
fn a_refused_membarrier_falls_back_to_fences() {
    const NAME: &str = "a_refused_membarrier_falls_back_to_fences";
    static D: RcuDomain = RcuDomain::new();
    if in_child(NAME) {
        if !crate::rw::percpu_rwsem::fast_readers() {
            println!("membarrier unavailable here: the fallback is the only mode");
            return;
        }
        let cell = Arc::new(RcuCell::with_domain(
            Obj {
                id: 0,
                dead: AtomicBool::new(false),
            },
            &D,
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (cell, stop) = (cell.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let g = D.read_lock();
                        let o = cell.load(&g);
                        for _ in 0..50 {
                            core::hint::spin_loop();
                        }
                        assert!(
                            !o.dead.load(Ordering::SeqCst),
                            "object {} retired under a reader",
                            o.id
                        );
                    }
                })
            })
            .collect();
        crate::sys::FAIL_MEMBARRIER.with(|f| f.set(true));
        let mut graveyard = vec![];
        for i in 1..200 {
            let old = cell.replace(Obj {
                id: i,
                dead: AtomicBool::new(false),
            });
            old.dead.store(true, Ordering::SeqCst);
            graveyard.push(old);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert!(
            !crate::rw::percpu_rwsem::fast_readers(),
            "readers switched to fences"
        );
        return;
    }
    let out = run_child(NAME);
    assert!(
        out.status.success(),
        "the child failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// fork() in a loop while other threads run grace periods, call_rcu and read-side sections (one of
/// them held across the fork): every child can run grace periods, callbacks and barriers in all three
/// flavours, and exits within its alarm.
#[test]
#[cfg(not(miri))]
fn fork_in_a_loop_while_grace_periods_and_callbacks_run() {
    static D: RcuDomain = RcuDomain::new();
    static Q: QsbrDomain = QsbrDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let mut workers = vec![];
    for k in 0..4 {
        let (stop, held) = (stop.clone(), held.clone());
        workers.push(std::thread::spawn(move || {
            let mut me = Q.register();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                match k {
                    0 => D.synchronize(),
                    1 => {
                        D.call_rcu(|| {});
                        S.call_srcu(|| {});
                        Q.call_rcu(|| {});
                    }
                    2 => {
                        // A reader that holds its sections (memb, SRCU, QSBR) across forks.
                        let g = D.read_lock();
                        let s = S.read_lock();
                        let q = me.read_lock();
                        held.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(3));
                        drop((g, s, q));
                    }
                    _ => {
                        me.synchronize();
                        S.synchronize();
                    }
                }
                if n.is_multiple_of(8) {
                    me.quiescent_state();
                }
            }
        }));
    }
    while !held.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let mut failed = vec![];
    for round in 0..20 {
        let status = crate::fork_tests::status_of_child(20, || {
            static RAN: AtomicUsize = AtomicUsize::new(0);
            D.synchronize();
            D.call_rcu(|| {
                RAN.fetch_add(1, Ordering::SeqCst);
            });
            D.rcu_barrier();
            S.synchronize();
            S.call_srcu(|| {
                RAN.fetch_add(1, Ordering::SeqCst);
            });
            S.srcu_barrier();
            Q.synchronize();
            Q.call_rcu(|| {
                RAN.fetch_add(1, Ordering::SeqCst);
            });
            Q.rcu_barrier();
            RAN.load(Ordering::SeqCst) == 3
        });
        if !crate::fork_tests::exited_0(status) {
            failed.push((round, status));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        failed.is_empty(),
        "children that hung or failed (round, wait status): {failed:?}"
    );
}

/// fork() while other threads run the read-side and grace-period paths in tight loops, so that the
/// fork often catches one between two of its steps (counting a reader in and marking it open, taking
/// the grace-period lock and saying who holds it): every child's grace periods, in every flavour,
/// still end.
#[test]
#[cfg(not(miri))]
fn fork_catches_readers_and_grace_periods_between_steps() {
    static D: RcuDomain = RcuDomain::new();
    static Q: QsbrDomain = QsbrDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = vec![];
    for k in 0..5 {
        let stop = stop.clone();
        workers.push(std::thread::spawn(move || {
            let mut me = Q.register();
            while !stop.load(Ordering::Relaxed) {
                match k {
                    0 => drop(S.read_lock()),
                    1 => S.synchronize(),
                    2 => drop(D.read_lock()),
                    3 => D.synchronize(),
                    _ => {
                        drop(me.read_lock());
                        me.quiescent_state();
                        me.synchronize();
                    }
                }
            }
        }));
    }
    // The step each child is at, in memory shared with it (for the failure message).
    // SAFETY: a fresh anonymous shared mapping of one page; checked below.
    let step = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(step, libc::MAP_FAILED, "mmap");
    // SAFETY: the mapping is page-aligned, a page long, and shared with every child.
    let step = unsafe { &*(step as *const AtomicUsize) };
    let mut failed = vec![];
    for round in 0..200 {
        let status = crate::fork_tests::status_of_child(10, || {
            step.store(1, Ordering::SeqCst);
            S.synchronize();
            step.store(2, Ordering::SeqCst);
            D.synchronize();
            step.store(3, Ordering::SeqCst);
            Q.synchronize();
            step.store(4, Ordering::SeqCst);
            S.synchronize();
            true
        });
        if !crate::fork_tests::exited_0(status) {
            failed.push((round, status, step.load(Ordering::SeqCst)));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        failed.is_empty(),
        "children that hung or failed (round, wait status, step 1-4: srcu, memb, qsbr, srcu): {failed:?}"
    );
}

/// A callback that forks (as `std::process::Command` may): the fork's prepare handler cannot wait
/// for the batch the callback is part of. The parent's barrier returns, and the child, a copy of
/// the grace-period thread inside the callback, runs grace periods and exits.
#[test]
#[cfg(not(miri))]
fn a_callback_that_forks() {
    static D: RcuDomain = RcuDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    static STATUS: [AtomicUsize; 2] = [AtomicUsize::new(usize::MAX), AtomicUsize::new(usize::MAX)];
    fn fork_and_wait(k: usize, grace_period: fn()) {
        let status = crate::fork_tests::status_of_child(10, || {
            grace_period();
            grace_period();
            true
        });
        STATUS[k].store(status as usize, Ordering::SeqCst);
    }
    D.call_rcu(|| fork_and_wait(0, || D.synchronize()));
    S.call_srcu(|| fork_and_wait(1, || S.synchronize()));
    within(
        Duration::from_secs(30),
        "rcu_barrier after a forking callback",
        || {
            D.rcu_barrier();
            S.srcu_barrier();
        },
    );
    for (k, name) in ["memb", "srcu"].iter().enumerate() {
        assert_eq!(
            STATUS[k].load(Ordering::SeqCst),
            0,
            "{name}: the child did not exit 0 (wait status; usize::MAX: fork failed)"
        );
    }
    // The domains go on in the parent.
    within(Duration::from_secs(30), "grace periods after", || {
        D.synchronize();
        S.synchronize();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        D.call_rcu(move || r.store(true, Ordering::SeqCst));
        D.rcu_barrier();
        assert!(ran.load(Ordering::SeqCst));
    });
}

/// A fork while a callback waits for a lock the forking thread holds: the fork's prepare handler
/// cannot wait for that batch to end (it never would), so after its patience the fork goes on. The
/// child counts the batch as run (it runs in the parent only): its barrier returns; the parent's
/// callback runs once the lock is free.
#[test]
#[cfg(not(miri))]
fn a_fork_while_a_callback_waits_for_the_forking_thread() {
    static D: RcuDomain = RcuDomain::new();
    static M: std::sync::Mutex<()> = std::sync::Mutex::new(());
    static STARTED: AtomicBool = AtomicBool::new(false);
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let status = within(
        Duration::from_secs(30),
        "a fork beside a blocked callback",
        || {
            let held = M.lock().unwrap();
            D.call_rcu(|| {
                STARTED.store(true, Ordering::SeqCst);
                drop(M.lock());
                RAN.fetch_add(1, Ordering::SeqCst);
            });
            while !STARTED.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let status = crate::fork_tests::status_of_child(10, || {
                D.rcu_barrier();
                D.synchronize();
                RAN.load(Ordering::SeqCst) == 0
            });
            drop(held);
            D.rcu_barrier();
            status
        },
    );
    assert!(
        crate::fork_tests::exited_0(status),
        "the child's barrier waited for a callback that runs in the parent only (wait status {status})"
    );
    assert_eq!(RAN.load(Ordering::SeqCst), 1, "the parent ran it, once");
}

/// A guard kept in a thread-local that is destroyed after this module's own (initialised before the
/// thread's first read lock): the record goes back at the guard's unlock, not never. Inside that
/// destructor the thread is still seen inside its section, so `synchronize` there panics rather than
/// deadlocking.
#[test]
fn a_guard_in_a_late_thread_local_returns_its_record() {
    static D: RcuDomain = RcuDomain::new();
    static INSIDE_SEEN: AtomicUsize = AtomicUsize::new(0);
    static SYNC_REFUSED: AtomicUsize = AtomicUsize::new(0);
    struct Keep(std::cell::RefCell<Option<RcuReadGuard>>);
    impl Drop for Keep {
        fn drop(&mut self) {
            if D.in_read_section() {
                INSIDE_SEEN.fetch_add(1, Ordering::SeqCst);
            }
            if std::panic::catch_unwind(|| D.synchronize()).is_err() {
                SYNC_REFUSED.fetch_add(1, Ordering::SeqCst);
            }
            drop(self.0.borrow_mut().take());
            assert!(!D.in_read_section());
        }
    }
    std::thread_local!(static K: Keep = const { Keep(std::cell::RefCell::new(None)) });
    let threads = if cfg!(miri) { 3 } else { 200 };
    for _ in 0..threads {
        std::thread::spawn(|| {
            K.with(|_| {}); // registered before HELD: destroyed after it
            let g = D.read_lock();
            K.with(|k| *k.0.borrow_mut() = Some(g));
        })
        .join()
        .unwrap();
    }
    assert_eq!(INSIDE_SEEN.load(Ordering::SeqCst), threads);
    assert_eq!(SYNC_REFUSED.load(Ordering::SeqCst), threads);
    let recs = D.records.snapshot();
    assert!(
        recs.len() <= 2,
        "{} records for {threads} threads",
        recs.len()
    );
    assert!(
        recs.iter().all(|r| !r.in_use.load(Ordering::SeqCst)),
        "every record went back"
    );
    within(
        Duration::from_secs(30),
        "synchronize after the threads",
        || D.synchronize(),
    );
}

/// An SRCU guard kept in a thread-local destroyed after the domain's own: inside that destructor the
/// thread is still seen inside its section (so `synchronize` there panics rather than waiting for
/// itself); the unlock lands on the record it was counted on (kept for it), which then goes back; a
/// section taken after that works too. No record is left held or unbalanced, and grace periods go
/// on.
#[test]
fn an_srcu_guard_in_a_late_thread_local_returns_its_record() {
    static S: SrcuDomain = SrcuDomain::new();
    static INSIDE_SEEN: AtomicUsize = AtomicUsize::new(0);
    static SYNC_REFUSED: AtomicUsize = AtomicUsize::new(0);
    struct Keep(std::cell::RefCell<Option<srcu::SrcuReadGuard>>);
    impl Drop for Keep {
        fn drop(&mut self) {
            if S.in_read_section() {
                INSIDE_SEEN.fetch_add(1, Ordering::SeqCst);
            }
            if std::panic::catch_unwind(|| S.synchronize()).is_err() {
                SYNC_REFUSED.fetch_add(1, Ordering::SeqCst);
            }
            drop(S.read_lock()); // nested, on the kept record
            drop(self.0.borrow_mut().take());
            assert!(!S.in_read_section());
            // A section of its own, taken and ended after the thread's records went back.
            drop(S.read_lock());
        }
    }
    std::thread_local!(static K: Keep = const { Keep(std::cell::RefCell::new(None)) });
    let threads = if cfg!(miri) { 3 } else { 100 };
    for _ in 0..threads {
        std::thread::spawn(|| {
            K.with(|_| {}); // registered before the domain's: destroyed after it
            let g = S.read_lock();
            K.with(|k| *k.0.borrow_mut() = Some(g));
        })
        .join()
        .unwrap();
    }
    assert_eq!(INSIDE_SEEN.load(Ordering::SeqCst), threads);
    assert_eq!(SYNC_REFUSED.load(Ordering::SeqCst), threads);
    assert_eq!(S.held_records(), 0, "every record went back");
    std::thread::spawn(|| {
        assert!(
            !S.in_read_section(),
            "a reused record looks inside a section"
        );
        S.synchronize();
    })
    .join()
    .unwrap();
    within(
        Duration::from_secs(30),
        "synchronize after the threads",
        || S.synchronize(),
    );
}

/// `rcu_barrier` inside a callback of the same domain would wait for itself: it panics (caught and
/// reported by the grace-period thread), and the domain goes on.
#[test]
fn rcu_barrier_inside_a_callback_panics() {
    static D: RcuDomain = RcuDomain::new();
    static REFUSED: AtomicBool = AtomicBool::new(false);
    D.call_rcu(|| {
        let r = std::panic::catch_unwind(|| D.rcu_barrier());
        REFUSED.store(r.is_err(), Ordering::SeqCst);
    });
    within(Duration::from_secs(30), "rcu_barrier", || D.rcu_barrier());
    assert!(REFUSED.load(Ordering::SeqCst));
}

#[test]
#[should_panic(expected = "would wait for itself")]
fn rcu_barrier_inside_a_section_panics() {
    static D: RcuDomain = RcuDomain::new();
    D.call_rcu(|| {});
    let _g = D.read_lock();
    D.rcu_barrier();
}

#[test]
#[should_panic(expected = "would wait for itself")]
fn srcu_synchronize_inside_a_section_panics() {
    static S: SrcuDomain = SrcuDomain::new();
    let _g = S.read_lock();
    S.synchronize();
}

#[test]
#[should_panic(expected = "would wait for itself")]
fn srcu_barrier_inside_a_section_panics() {
    static S: SrcuDomain = SrcuDomain::new();
    S.call_srcu(|| {});
    let _g = S.read_lock();
    S.srcu_barrier();
}

#[test]
#[should_panic(expected = "would wait for itself")]
fn qsbr_domain_synchronize_on_an_online_thread_panics() {
    static Q: QsbrDomain = QsbrDomain::new();
    let _me = Q.register();
    Q.synchronize();
}

/// A down_read section may end on another thread; it is not counted as the thread's own section.
#[test]
fn srcu_down_read_ends_elsewhere() {
    static S: SrcuDomain = SrcuDomain::new();
    let g = S.down_read();
    assert!(!S.in_read_section());
    std::thread::spawn(move || drop(g)).join().unwrap();
    S.synchronize();
}
