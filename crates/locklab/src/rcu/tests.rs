use super::*;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::AtomicUsize;

/// An object whose retirement readers can detect without touching freed memory: writers keep the
/// replaced objects alive and mark them dead once `replace` returned (the grace period is over).
pub(super) struct Obj {
    pub(super) id: u64,
    pub(super) dead: AtomicBool,
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
