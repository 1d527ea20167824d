use super::*;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::AtomicUsize;

/// An object whose retirement readers can detect without touching freed memory: writers keep the
/// replaced objects alive and mark them dead once `replace` returned (the grace period is over).
struct Obj {
    id: u64,
    dead: AtomicBool,
}

/// rcutorture's core check: no reader ever holds an object whose grace period has ended. Readers mark
/// the object they loaded, writers replace it in a loop; a reader that finds its object dead before its
/// section ended would have been reading freed memory. More threads than CPUs.
#[test]
fn no_reader_outlives_its_grace_period() {
    static D: RcuDomain = RcuDomain::new();
    let cell = RcuCell::with_domain(
        Obj {
            id: 0,
            dead: AtomicBool::new(false),
        },
        &D,
    );
    let stop = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    let graveyard = StdMutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..if cfg!(miri) { 2 } else { 6 } {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let g = D.read_lock();
                    let o = cell.load(&g);
                    let id = o.id;
                    for _ in 0..50 {
                        core::hint::spin_loop();
                    }
                    assert!(
                        !o.dead.load(Ordering::SeqCst),
                        "object {id} retired under a reader"
                    );
                    drop(g);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for w in 0..2u64 {
            let (cell, graveyard) = (&cell, &graveyard);
            s.spawn(move || {
                for i in 1..=REPLACES {
                    let old = cell.replace(Obj {
                        id: w << 32 | i,
                        dead: AtomicBool::new(false),
                    });
                    old.dead.store(true, Ordering::SeqCst);
                    graveyard.lock().unwrap().push(old);
                }
            });
        }
        while graveyard.lock().unwrap().len() < 2 * REPLACES as usize {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert!(D.grace_periods() >= 1 && D.grace_periods() <= 2 * REPLACES);
}

const REPLACES: u64 = if cfg!(miri) { 5 } else { 300 };

/// A grace period waits for a reader that began before it, however long it takes.
#[test]
fn synchronize_waits_for_an_earlier_reader() {
    static D: RcuDomain = RcuDomain::new();
    let inside = AtomicBool::new(false);
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let g = D.read_lock();
            inside.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(150)); // past the writer's spin: it sleeps
            released.store(true, Ordering::SeqCst);
            drop(g);
        });
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        D.synchronize();
        assert!(
            released.load(Ordering::SeqCst),
            "the grace period ended under the reader"
        );
    });
}

/// Readers that start after the grace period began do not hold it up (a reader that never stops
/// re-entering cannot starve a writer).
#[test]
fn later_readers_do_not_block_a_grace_period() {
    static D: RcuDomain = RcuDomain::new();
    const SYNCS: u64 = if cfg!(miri) { 3 } else { 50 };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _g = D.read_lock();
                    core::hint::spin_loop();
                }
            });
        }
        for _ in 0..SYNCS {
            D.synchronize();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(D.grace_periods(), SYNCS);
}

/// Concurrent callers share grace periods. A reader holds the first grace period
/// for 100 ms while 8 threads call `synchronize`: the first runs it, the rest queue and are all served
/// by at most one or two more, not seven.
#[test]
fn concurrent_synchronize_calls_share_grace_periods() {
    static D: RcuDomain = RcuDomain::new();
    const T: u64 = if cfg!(miri) { 3 } else { 8 };
    let go = std::sync::Barrier::new(T as usize + 1);
    std::thread::scope(|s| {
        let g = D.read_lock();
        for _ in 0..T {
            s.spawn(|| {
                go.wait();
                D.synchronize();
            });
        }
        go.wait();
        std::thread::sleep(Duration::from_millis(if cfg!(miri) { 10 } else { 100 }));
        drop(g); // every caller is queued by now
    });
    let (calls, gps) = (D.synchronize_calls(), D.grace_periods());
    assert_eq!(calls, T);
    assert!(gps <= 3, "{gps} grace periods for {calls} concurrent calls");
}

#[test]
fn sections_nest_and_are_tracked() {
    static D: RcuDomain = RcuDomain::new();
    assert!(!D.in_read_section());
    let a = D.read_lock();
    let b = D.read_lock();
    assert!(D.in_read_section());
    drop(a);
    assert!(D.in_read_section(), "b is still open");
    drop(b);
    assert!(!D.in_read_section());
    D.synchronize();
}

#[test]
#[should_panic(expected = "would wait for itself")]
fn synchronize_inside_a_section_panics() {
    static D: RcuDomain = RcuDomain::new();
    let _g = D.read_lock();
    D.synchronize();
}

#[test]
#[should_panic(expected = "another domain")]
fn load_with_a_guard_of_another_domain_panics() {
    static D: RcuDomain = RcuDomain::new();
    let c = RcuCell::with_domain(1, &D);
    let g = read_lock();
    let _ = c.load(&g);
}

/// Records are pooled: a thread that exits returns its record, and the next thread reuses it.
#[test]
fn exited_threads_return_their_records() {
    static D: RcuDomain = RcuDomain::new();
    for _ in 0..if cfg!(miri) { 3 } else { 20 } {
        std::thread::spawn(|| drop(D.read_lock())).join().unwrap();
    }
    let n = D.records.snapshot().len();
    assert!(n <= 2, "{n} records for 20 threads one after another");
    D.synchronize();
}

/// A read lock in a thread-local destructor that runs after this module's own (the thread's record is
/// gone): it gets a record of its own (orphaned: returned at its last unlock), holds off grace
/// periods, and returns it.
#[test]
fn read_lock_in_a_late_thread_local_destructor() {
    static D: RcuDomain = RcuDomain::new();
    static LATE_ONE_OFF: AtomicBool = AtomicBool::new(false);
    struct Late;
    impl Drop for Late {
        fn drop(&mut self) {
            let g = D.read_lock();
            LATE_ONE_OFF.store(g.rec.orphan.load(Ordering::SeqCst), Ordering::SeqCst);
            drop(g);
        }
    }
    std::thread_local!(static L: Late = const { Late });
    std::thread::spawn(|| {
        // `L` is registered first, so its destructor runs after `HELD`'s (reverse order).
        L.with(|_| {});
        drop(D.read_lock());
    })
    .join()
    .unwrap();
    assert!(
        LATE_ONE_OFF.load(Ordering::SeqCst),
        "the late guard ran on a record of its own, returned at its unlock (orphan path)"
    );
    D.synchronize();
    let busy = D
        .records
        .snapshot()
        .iter()
        .filter(|r| r.in_use.load(Ordering::SeqCst))
        .count();
    assert_eq!(busy, 0, "every record went back to the pool");
}

/// A forgotten guard keeps its domain's grace periods waiting (documented), and only that domain's.
#[test]
#[cfg_attr(miri, ignore)] // leaves a thread blocked forever, which Miri reports at exit
fn a_forgotten_guard_stalls_only_its_domain() {
    static STUCK: RcuDomain = RcuDomain::new();
    static OTHER: RcuDomain = RcuDomain::new();
    STUCK.set_stall_timeout(Duration::from_millis(100));
    std::thread::spawn(|| core::mem::forget(STUCK.read_lock()))
        .join()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        STUCK.synchronize();
        d2.store(true, Ordering::SeqCst);
    });
    OTHER.synchronize();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !done.load(Ordering::SeqCst),
        "a grace period ended under a forgotten reader"
    );
    // The waiter stays blocked for the rest of the test run: no more warnings from it.
    STUCK.set_stall_timeout(Duration::ZERO);
}

// ----- call_rcu ---------------------------------------------------------------------------------

/// A callback never runs while a reader that started before `call_rcu` is still inside.
#[test]
fn a_callback_waits_for_earlier_readers() {
    static D: RcuDomain = RcuDomain::new();
    static RAN: AtomicBool = AtomicBool::new(false);
    let inside = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let reader = {
        let (inside, release) = (inside.clone(), release.clone());
        std::thread::spawn(move || {
            let g = D.read_lock();
            inside.store(true, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                !RAN.load(Ordering::SeqCst),
                "the callback ran inside the reader's section"
            );
            drop(g);
        })
    };
    while !inside.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    D.call_rcu(|| RAN.store(true, Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 100 }));
    assert!(!RAN.load(Ordering::SeqCst), "ran before the grace period");
    release.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    D.rcu_barrier();
    assert!(RAN.load(Ordering::SeqCst));
}

/// `rcu_barrier` waits for every callback queued before it, from every thread, including threads that
/// have exited since (their lists stay with the domain); per thread, callbacks run in queue order.
#[test]
fn rcu_barrier_sees_every_callback_in_order() {
    static D: RcuDomain = RcuDomain::new();
    const T: usize = if cfg!(miri) { 2 } else { 4 };
    const N: usize = if cfg!(miri) { 20 } else { 2_000 };
    let logs: Arc<Vec<StdMutex<Vec<usize>>>> =
        Arc::new((0..T).map(|_| StdMutex::new(vec![])).collect());
    let handles: Vec<_> = (0..T)
        .map(|t| {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    let logs = logs.clone();
                    D.call_rcu(move || logs[t].lock().unwrap().push(i));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap(); // the threads exit with callbacks still queued
    }
    D.rcu_barrier();
    for log in logs.iter() {
        let log = log.lock().unwrap();
        assert_eq!(*log, (0..N).collect::<Vec<_>>(), "all ran, in queue order");
    }
    assert_eq!(D.pending_callbacks(), 0);
    assert_eq!(D.callbacks_invoked(), (T * N) as u64);
}

/// rcutorture with call_rcu: writers publish a new object and retire the old one with call_rcu (which
/// marks it dead and keeps it, instead of freeing it); no reader may see its object dead.
#[test]
fn call_rcu_never_retires_an_object_under_a_reader() {
    static D: RcuDomain = RcuDomain::new();
    const UPDATES: u64 = if cfg!(miri) { 10 } else { 3_000 };
    let cell = Arc::new(core::sync::atomic::AtomicPtr::new(Box::into_raw(Box::new(
        Obj {
            id: 0,
            dead: AtomicBool::new(false),
        },
    ))));
    let stop = Arc::new(AtomicBool::new(false));
    let mut retired = vec![];
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (cell, stop) = (cell.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let g = D.read_lock();
                    // SAFETY: objects are freed only at the end of the test; the check is that none
                    // is marked dead while a reader that saw it published is inside.
                    let o = unsafe { &*cell.load(Ordering::Acquire) };
                    for _ in 0..20 {
                        core::hint::spin_loop();
                    }
                    assert!(
                        !o.dead.load(Ordering::SeqCst),
                        "object {} retired under a reader",
                        o.id
                    );
                    drop(g);
                }
            })
        })
        .collect();
    for i in 1..=UPDATES {
        let new = Box::into_raw(Box::new(Obj {
            id: i,
            dead: AtomicBool::new(false),
        }));
        let old = cell.swap(new, Ordering::AcqRel) as usize;
        retired.push(old);
        D.call_rcu(move || {
            // SAFETY: freed only at the end of the test, after every reader and callback.
            unsafe { &*(old as *const Obj) }
                .dead
                .store(true, Ordering::SeqCst);
        });
    }
    D.rcu_barrier();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    retired.push(cell.load(Ordering::Relaxed) as usize);
    for p in retired {
        // SAFETY: each came from `Box::into_raw` once; readers have exited and the callbacks have run.
        drop(unsafe { Box::from_raw(p as *mut Obj) });
    }
    assert_eq!(D.callbacks_invoked(), UPDATES);
    assert!(D.grace_periods() < UPDATES, "callbacks share grace periods");
}

/// Flood control: four threads queue callbacks as fast as they can; pending callbacks stay bounded by
/// threads x LIMIT, and every callback runs.
#[test]
#[cfg_attr(miri, ignore)] // hundreds of thousands of callbacks
fn a_flood_stays_bounded() {
    static D: RcuDomain = RcuDomain::new();
    static RUN: AtomicUsize = AtomicUsize::new(0);
    const T: usize = 4;
    const N: usize = 3 * super::LIMIT;
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(D.pending_callbacks());
                std::thread::sleep(Duration::from_millis(1));
            }
            peak
        })
    };
    std::thread::scope(|s| {
        for _ in 0..T {
            s.spawn(|| {
                for _ in 0..N {
                    D.call_rcu(|| {
                        RUN.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    D.rcu_barrier();
    done.store(true, Ordering::Relaxed);
    let peak = monitor.join().unwrap();
    assert_eq!(RUN.load(Ordering::Relaxed), T * N);
    assert!(
        peak <= T * super::LIMIT + T,
        "peak {peak} pending callbacks"
    );
}

/// A panicking callback is reported and the others still run.
#[test]
fn a_panicking_callback_does_not_stop_the_others() {
    static D: RcuDomain = RcuDomain::new();
    static AFTER: AtomicBool = AtomicBool::new(false);
    D.call_rcu(|| panic!("callback panic (expected by the test)"));
    D.call_rcu(|| AFTER.store(true, Ordering::SeqCst));
    D.rcu_barrier();
    assert!(AFTER.load(Ordering::SeqCst));
}

/// `call_rcu` in a thread-local destructor that runs after this module's own: the callback is kept
/// and runs.
#[test]
fn call_rcu_in_a_late_thread_local_destructor() {
    static D: RcuDomain = RcuDomain::new();
    static RAN: AtomicBool = AtomicBool::new(false);
    struct Late;
    impl Drop for Late {
        fn drop(&mut self) {
            D.call_rcu(|| RAN.store(true, Ordering::SeqCst));
        }
    }
    std::thread_local!(static L: Late = const { Late });
    std::thread::spawn(|| {
        L.with(|_| {}); // destroyed after HELD
        drop(D.read_lock());
    })
    .join()
    .unwrap();
    D.rcu_barrier();
    assert!(RAN.load(Ordering::SeqCst));
}

/// `defer_drop` of a type without drop glue runs on the queueing thread once its grace period is
/// over (the trivial path), and drops with drop glue run on the grace-period thread; both after a
/// grace period, and `rcu_barrier` sees both.
#[test]
fn deferred_drops_run_after_a_grace_period_on_the_right_thread() {
    static D: RcuDomain = RcuDomain::new();
    static DROPPED_ON: StdMutex<Vec<std::thread::ThreadId>> = StdMutex::new(Vec::new());
    struct Noisy;
    impl Drop for Noisy {
        fn drop(&mut self) {
            DROPPED_ON.lock().unwrap().push(std::thread::current().id());
        }
    }
    let me = std::thread::current().id();
    for _ in 0..if cfg!(miri) { 3 } else { 100 } {
        D.defer_drop(Box::new(Noisy));
        D.defer_drop(Box::new([0u64; 8])); // trivial
    }
    D.rcu_barrier();
    let on = DROPPED_ON.lock().unwrap();
    assert_eq!(on.len(), if cfg!(miri) { 3 } else { 100 });
    if !cfg!(miri) {
        // (Under Miri there is no grace-period thread: rcu_barrier runs the passes itself.)
        assert!(
            on.iter().all(|t| *t != me),
            "drop glue never runs on the caller's thread"
        );
    }
    assert_eq!(D.pending_callbacks(), 0);
    // RcuCell::store_deferred goes the same way.
    let c = RcuCell::with_domain(1u64, &D);
    c.store_deferred(2);
    assert_eq!(*c.load(&D.read_lock()), 2);
    D.rcu_barrier();
    assert_eq!(D.pending_callbacks(), 0);
}

// ----- what users do: regressions -------------------------------------------------------------------

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
fn within<T: Send + 'static>(
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
        if !crate::percpu_rwsem::fast_readers() {
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
            !crate::percpu_rwsem::fast_readers(),
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
        // SAFETY: the child only runs locklab's code and `_exit`s; the alarm kills it if it hangs.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: alarm and _exit are async-signal-safe system calls.
            unsafe { libc::alarm(20) };
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
            let code = if RAN.load(Ordering::SeqCst) == 3 {
                0
            } else {
                3
            };
            // SAFETY: ends the child without running the parent's atexit handlers or test harness.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
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

// ----- polled grace periods ------------------------------------------------------------------------

/// The polled calls on all three flavours: a cookie is not done before a grace period that started
/// after it ended, is after, and `cond_synchronize` waits only when needed.
#[test]
fn polled_grace_periods_in_every_flavour() {
    static D: RcuDomain = RcuDomain::new();
    static Q: QsbrDomain = QsbrDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    let c = D.get_state_synchronize();
    assert!(!D.poll_state_synchronize(c));
    D.synchronize();
    assert!(D.poll_state_synchronize(c));
    let before = D.grace_periods();
    D.cond_synchronize(c);
    assert_eq!(
        D.grace_periods(),
        before,
        "no grace period for a done cookie"
    );
    let c = D.get_state_synchronize();
    D.cond_synchronize(c);
    assert!(D.poll_state_synchronize(c));

    let c = Q.get_state_synchronize();
    assert!(!Q.poll_state_synchronize(c));
    Q.cond_synchronize(c);
    assert!(Q.poll_state_synchronize(c));

    let c = S.get_state_synchronize();
    assert!(!S.poll_state_synchronize(c));
    S.cond_synchronize(c);
    assert!(S.poll_state_synchronize(c));
}

/// A polled grace period does not end while a reader that began before the cookie is inside, and
/// `start_poll_synchronize` ends it without anyone calling `synchronize`.
#[test]
#[cfg_attr(miri, ignore)] // no grace-period thread under Miri
fn start_poll_waits_for_earlier_readers_and_completes_alone() {
    static D: RcuDomain = RcuDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let (tx2, rx2) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let g = D.read_lock();
        let s = S.read_lock();
        tx.send(()).unwrap();
        rx2.recv().unwrap();
        drop((g, s));
    });
    rx.recv().unwrap();
    let c = D.start_poll_synchronize();
    let cs = S.start_poll_synchronize();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !D.poll_state_synchronize(c),
        "ended under an earlier reader"
    );
    assert!(
        !S.poll_state_synchronize(cs),
        "ended under an earlier reader"
    );
    tx2.send(()).unwrap();
    reader.join().unwrap();
    within(
        Duration::from_secs(30),
        "a started polled grace period",
        move || {
            while !D.poll_state_synchronize(c) || !S.poll_state_synchronize(cs) {
                std::thread::sleep(Duration::from_millis(1));
            }
        },
    );
}

#[test]
#[should_panic(expected = "another domain")]
fn a_cookie_of_another_domain_panics() {
    static A: RcuDomain = RcuDomain::new();
    static B: RcuDomain = RcuDomain::new();
    let c = A.get_state_synchronize();
    let _ = B.poll_state_synchronize(c);
}

/// call_srcu waits for a sleeping SRCU reader; QSBR call_rcu for an online thread's quiescent state.
#[test]
fn call_srcu_and_qsbr_call_rcu_wait_for_their_readers() {
    static S: SrcuDomain = SrcuDomain::new();
    static Q: QsbrDomain = QsbrDomain::new();
    static RAN_S: AtomicBool = AtomicBool::new(false);
    static RAN_Q: AtomicBool = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let (tx2, rx2) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut me = Q.register();
        let g = S.read_lock();
        tx.send(()).unwrap();
        rx2.recv().unwrap();
        assert!(
            !RAN_S.load(Ordering::SeqCst),
            "call_srcu ran under a reader"
        );
        assert!(
            !RAN_Q.load(Ordering::SeqCst),
            "call_rcu ran before our quiescent state"
        );
        drop(g);
        me.quiescent_state();
        drop(me);
    });
    rx.recv().unwrap();
    S.call_srcu(|| RAN_S.store(true, Ordering::SeqCst));
    Q.call_rcu(|| RAN_Q.store(true, Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
    tx2.send(()).unwrap();
    reader.join().unwrap();
    S.srcu_barrier();
    Q.rcu_barrier();
    assert!(RAN_S.load(Ordering::SeqCst) && RAN_Q.load(Ordering::SeqCst));
}
