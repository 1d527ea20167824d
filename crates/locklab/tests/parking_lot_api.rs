//! A program written against parking_lot 0.13's API with only the names changed to locklab's: every
//! call below is parking_lot's (`RwLock` -> `RwSem`, `RwLockUpgradableReadGuard` -> lock_api's), and
//! each test checks the behaviour parking_lot documents. Features: `arc_lock`, `serde` and
//! `send_guard` parts run when those features are on (CI runs this file with all of them).
#![cfg(not(loom))]

use locklab::{BrLock, FairMutex, Mutex, RecursiveRwSem, ReentrantMutex, RwSem, RwSpinLock};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

type UpgradableGuard<'a, T> = lock_api::RwLockUpgradableReadGuard<'a, locklab::raw::RawRwSem, T>;
type WriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, locklab::raw::RawRwSem, T>;

const SHORT: Duration = Duration::from_millis(30);

#[test]
fn upgradable_readers_share_with_readers_and_exclude_each_other_and_writers() {
    let l = RwSem::new(1);
    let u = l.upgradable_read();
    let r = l
        .try_read()
        .expect("a reader shares with the upgradable reader");
    assert!(
        l.try_upgradable_read().is_none(),
        "one upgradable reader at a time"
    );
    assert!(l.try_write().is_none(), "no writer beside it");
    assert!(l.try_write_for(SHORT).is_none());
    assert!(l.try_upgradable_read_for(SHORT).is_none());
    drop(r);
    let mut w = UpgradableGuard::upgrade(u);
    *w += 1;
    assert!(l.try_read().is_none(), "upgraded: a writer now");
    let u = WriteGuard::downgrade_to_upgradable(w);
    assert_eq!(*u, 2);
    assert!(l.try_read().is_some(), "readers again");
    let r = UpgradableGuard::downgrade(u);
    assert!(
        l.try_upgradable_read().is_some(),
        "the bit is free after downgrade"
    );
    drop(r);
    let u = l.upgradable_read();
    let u = match UpgradableGuard::try_upgrade(u) {
        Ok(w) => WriteGuard::downgrade_to_upgradable(w),
        Err(_) => panic!("alone: try_upgrade succeeds"),
    };
    let r = l.read();
    let u = UpgradableGuard::try_upgrade(u).expect_err("another reader: try_upgrade fails");
    let u = UpgradableGuard::try_upgrade_for(u, SHORT).expect_err("it stays for the time-out");
    drop(r);
    let w = UpgradableGuard::try_upgrade_for(u, SHORT).expect("alone again");
    drop(w);
    assert_eq!(*l.read(), 2);
}

/// An upgrade waits for the other readers, no writer gets in between, and no update is lost:
/// threads read-check-upgrade-increment under contention from readers and writers.
#[test]
fn upgrades_are_atomic_against_readers_writers_and_other_upgraders() {
    const ROUNDS: usize = if cfg!(miri) { 20 } else { 3_000 };
    let l = Arc::new(RwSem::new((0u64, 0u64)));
    let hs: Vec<_> = (0..8)
        .map(|t| {
            let l = l.clone();
            thread::spawn(move || {
                let mut mine = 0;
                for i in 0..ROUNDS {
                    match (t + i) % 4 {
                        0 => {
                            let u = l.upgradable_read();
                            let seen = u.0;
                            assert_eq!(u.0, u.1);
                            let mut w = UpgradableGuard::upgrade(u);
                            // Nobody wrote between our read and our write.
                            assert_eq!(w.0, seen, "a writer came between read and upgrade");
                            w.0 += 1;
                            w.1 += 1;
                            mine += 1;
                        }
                        1 => {
                            let mut w = l.write();
                            w.0 += 1;
                            w.1 += 1;
                            mine += 1;
                        }
                        2 => {
                            let u = l.upgradable_read();
                            assert_eq!(u.0, u.1);
                        }
                        _ => {
                            let r = l.read();
                            assert_eq!(r.0, r.1, "a reader saw a half-done write");
                        }
                    }
                }
                mine
            })
        })
        .collect();
    let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(l.read().0, total, "no lost update");
}

/// A reader blocked behind an upgrade in progress gets in once the upgrade's write ends, and an
/// upgrade that times out lets the readers it held back in.
#[test]
fn readers_held_back_by_an_upgrade_get_in_after_it() {
    let l = Arc::new(RwSem::new(0));
    let r = l.read();
    let l2 = l.clone();
    let upgrader = thread::spawn(move || {
        let u = l2.upgradable_read();
        // Times out (the main thread's read stays), then upgrades for real once it is gone.
        let u = UpgradableGuard::try_upgrade_for(u, Duration::from_millis(50)).expect_err("held");
        let mut w = UpgradableGuard::upgrade(u);
        *w += 1;
    });
    thread::sleep(Duration::from_millis(10));
    // The upgrade is in progress: a new reader waits behind it (no writer starvation).
    let l3 = l.clone();
    let late = thread::spawn(move || *l3.read());
    thread::sleep(Duration::from_millis(100));
    drop(r);
    upgrader.join().unwrap();
    let seen = late.join().unwrap();
    assert!(seen <= 1);
    assert_eq!(*l.read(), 1);
}

#[test]
fn a_recursive_rwsem_reads_again_while_a_writer_waits() {
    let l = Arc::new(RecursiveRwSem::new(0));
    let first = l.read();
    let l2 = l.clone();
    let writer = thread::spawn(move || *l2.write() += 1);
    // Wait until the writer is queued (it cannot get in while we read).
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(50) {
        thread::yield_now();
    }
    let second = l.read();
    assert_eq!(*second, 0, "a second read succeeds while the writer waits");
    drop((first, second));
    writer.join().unwrap();
    assert_eq!(*l.read(), 1);
}

#[test]
fn reentrant_mutex_locks_again_and_excludes_others() {
    let m = Arc::new(ReentrantMutex::new(std::cell::Cell::new(0)));
    let a = m.lock();
    let b = m.lock();
    b.set(b.get() + 1);
    let m2 = m.clone();
    assert!(
        thread::spawn(move || m2.try_lock().is_none())
            .join()
            .unwrap(),
        "another thread waits"
    );
    drop(b);
    let m3 = m.clone();
    assert!(
        thread::spawn(move || m3.try_lock_for(SHORT).is_none())
            .join()
            .unwrap(),
        "until every level is released"
    );
    drop(a);
    let m4 = m.clone();
    assert_eq!(thread::spawn(move || m4.lock().get()).join().unwrap(), 1);
}

#[test]
// Orders the waiters by 20 ms sleeps, which Miri's interpreted threads outlast.
#[cfg_attr(miri, ignore)]
fn fair_mutex_hands_over_in_order() {
    let m = Arc::new(FairMutex::new(Vec::new()));
    let g = m.lock();
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let m = m.clone();
            let h = thread::spawn(move || m.lock().push(i));
            thread::sleep(Duration::from_millis(20)); // queue them in order
            h
        })
        .collect();
    drop(g);
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(
        *m.lock(),
        vec![0, 1, 2, 3],
        "every unlock hands over in arrival order"
    );
    // parking_lot's guard API: unlocked / unlock_fair / bump.
    let mut g = m.lock();
    locklab::FairMutexGuard::bump(&mut g);
    locklab::FairMutexGuard::unlocked(&mut g, || assert!(m.try_lock().is_some()));
    locklab::FairMutexGuard::unlock_fair(g);
}

#[test]
fn timed_locks_across_the_rw_family() {
    fn check<R: lock_api::RawRwLockTimed<Duration = Duration, Instant = Instant>>(
        l: &lock_api::RwLock<R, u32>,
        name: &str,
    ) {
        let w = l.write();
        let t = Instant::now();
        assert!(l.try_read_for(SHORT).is_none(), "{name}: read times out");
        assert!(l.try_write_for(SHORT).is_none(), "{name}: write times out");
        assert!(
            l.try_read_until(Instant::now() + SHORT).is_none(),
            "{name}: read_until"
        );
        assert!(t.elapsed() >= SHORT * 3, "{name}: each waited its time");
        drop(w);
        let r = l.try_read_for(SHORT).expect("free: at once");
        assert!(
            l.try_write_for(SHORT).is_none(),
            "{name}: a reader holds it"
        );
        drop(r);
        *l.try_write_until(Instant::now() + SHORT).expect("free") += 1;
    }
    check(&RwSem::new(0), "RwSem");
    check(&RwSpinLock::new(0), "RwSpinLock");
    check(&BrLock::new(0), "BrLock");
    check(&RecursiveRwSem::new(0), "RecursiveRwSem");
    check(&locklab::PercpuRwSem::new(0), "PercpuRwSem");
}

/// A timed write on the BrLock that times out mid-way releases the shards it took: readers get in.
#[test]
fn a_timed_out_brlock_writer_holds_nothing() {
    let l = Arc::new(BrLock::new(0));
    let r = l.read();
    assert!(l.try_write_for(SHORT).is_none());
    drop(r);
    let ok = Arc::new(AtomicBool::new(false));
    let (l2, ok2) = (l.clone(), ok.clone());
    thread::spawn(move || {
        let _g = l2.read();
        ok2.store(true, Ordering::SeqCst);
    })
    .join()
    .unwrap();
    assert!(ok.load(Ordering::SeqCst));
    assert!(l.try_write().is_some());
}

#[test]
fn mutex_and_condvar_as_parking_lot() {
    let pair = Arc::new((Mutex::new(false), locklab::Condvar::new()));
    let p2 = pair.clone();
    let h = thread::spawn(move || {
        *p2.0.lock() = true;
        p2.1.notify_one();
    });
    let mut g = pair.0.lock();
    while !*g {
        pair.1.wait(&mut g);
    }
    drop(g);
    h.join().unwrap();
    let m = Mutex::new(5);
    assert_eq!(*m.try_lock_for(SHORT).unwrap(), 5);
    assert_eq!(m.into_inner(), 5);
    let counter = AtomicUsize::new(0);
    let mut m = Mutex::new(1);
    *m.get_mut() += 1;
    counter.fetch_add(*m.lock(), Ordering::Relaxed);
    assert_eq!(counter.load(Ordering::Relaxed), 2);
}

#[cfg(feature = "arc_lock")]
#[test]
fn lock_arc_guards_own_their_lock() {
    let m = Arc::new(Mutex::new(1));
    let g: locklab::ArcMutexGuard<i32> = m.lock_arc();
    let moved = thread::spawn(move || drop(m)); // the guard keeps the mutex alive
    moved.join().unwrap();
    assert_eq!(*g, 1);
    let l = Arc::new(RwSem::new(2));
    let r = l.read_arc();
    let u = l.try_upgradable_read_arc();
    assert!(u.is_some());
    assert_eq!(*r, 2);
}

#[cfg(feature = "serde")]
#[test]
fn serde_round_trip() {
    let m = Mutex::new(vec![1, 2, 3]);
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(text, "[1,2,3]");
    let back: Mutex<Vec<i32>> = serde_json::from_str(&text).unwrap();
    assert_eq!(*back.lock(), vec![1, 2, 3]);
    let l: RwSem<String> = serde_json::from_str("\"x\"").unwrap();
    assert_eq!(serde_json::to_string(&l).unwrap(), "\"x\"");
}

#[cfg(feature = "send_guard")]
#[test]
fn a_send_guard_is_dropped_on_another_thread() {
    let m = Arc::new(Mutex::new(0));
    let l = Arc::new(RwSem::new(0));
    {
        let g = m.lock();
        let w = l.write();
        thread::scope(|s| {
            s.spawn(move || {
                drop(g); // unlocked here, not where it was locked
                drop(w);
            });
        });
    }
    assert!(m.try_lock().is_some());
    assert!(l.try_write().is_some());
    // Repeatedly, under contention, so a broken hand-off would show.
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            thread::spawn(move || {
                for _ in 0..1000 {
                    let g = m.lock();
                    thread::scope(|s| {
                        s.spawn(move || drop(g));
                    });
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(m.try_lock().is_some());
}
