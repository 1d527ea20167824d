//! Loom models of the reader-writer family: RwSem (exclusion, fair unlock, downgrade, upgrades,
//! time-outs), RwSpinLock, RecursiveRwSem, PercpuRwSem, LockRef and SeqCount.

use super::*;

/// RwSem: a writer excludes a reader and another writer; the reader's data is never half-written; the
/// rwsem ends free (no waiter stranded).
#[test]
fn rwsem_reader_writer_exclusion() {
    model(|| {
        let s = Arc::new((crate::rw::rwsem::RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let _t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock() };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let _t = s3.0.read();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock() };
        });
        let _t = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSpinLock: same exclusion property.
#[test]
fn rwspinlock_reader_writer_exclusion() {
    model(|| {
        let s = Arc::new((crate::rw::rwspinlock::RawRwSpinLock::new(), Guarded::new()));
        let s2 = s.clone();
        let r = thread::spawn(move || {
            s2.0.read();
            let _ = s2.1.get();
            unsafe { s2.0.read_unlock() };
        });
        s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        r.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// RwSpinLock's recursive read (the kernel's interrupt-context reader): a thread that reads takes a
/// second read while a writer waits, without deadlocking; the writer gets in once both are released;
/// the writer never overlaps a reader.
#[test]
fn rwspinlock_recursive_read_with_a_waiting_writer() {
    model(|| {
        let s = Arc::new((crate::rw::rwspinlock::RawRwSpinLock::new(), Guarded::new()));
        s.0.read();
        let s2 = s.clone();
        let w = thread::spawn(move || {
            s2.0.write();
            s2.1.critical();
            // SAFETY: held exclusively.
            unsafe { s2.0.write_unlock() };
        });
        s.0.read_recursive();
        let _ = s.1.get();
        // SAFETY: two read holds of this thread.
        unsafe {
            s.0.read_unlock();
            s.0.read_unlock();
        }
        w.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// LockRef: a lockless get racing with a lock holder: the holder sees a frozen count, and no update is
/// lost.
#[test]
fn lockref_frozen_under_lock_no_lost_update() {
    model(|| {
        let l = Arc::new(crate::spin::lockref::LockRef::new(1));
        let l2 = l.clone();
        let h = thread::spawn(move || {
            l2.get();
            assert!(l2.put_not_zero());
        });
        l.lock();
        let c = l.count();
        assert_eq!(l.count(), c, "the count changed while the lock was held");
        unsafe { l.unlock() };
        l.get();
        h.join().unwrap();
        assert_eq!(l.count(), 2);
    });
}

/// SeqCount: a reader never accepts a torn pair written by a concurrent writer.
#[test]
fn seqcount_reader_never_torn() {
    use loom::sync::atomic::AtomicU64;
    model(|| {
        let s = Arc::new((
            crate::rw::seqlock::SeqCount::new(),
            AtomicU64::new(0),
            AtomicU64::new(0),
        ));
        let s2 = s.clone();
        let w = thread::spawn(move || unsafe {
            s2.0.write_begin();
            s2.1.store(1, Ordering::Relaxed);
            s2.2.store(1, Ordering::Relaxed);
            s2.0.write_end();
        });
        loop {
            let start = s.0.read_begin();
            let (a, b) = (s.1.load(Ordering::Relaxed), s.2.load(Ordering::Relaxed));
            if !s.0.read_retry(start) {
                assert_eq!(a, b, "torn read accepted");
                break;
            }
        }
        w.join().unwrap();
    });
}

/// PercpuRwSem: a writer excludes readers on two private counters (the asymmetric fence is SeqCst
/// fences here); loom's race detector checks that each reader's view of the data is ordered after or
/// before the write, and the lock ends free.
#[test]
fn percpu_rwsem_reader_writer_exclusion() {
    use crate::rw::percpu_rwsem::RawPercpuRwSem;
    model(|| {
        let s = Arc::new((RawPercpuRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock(t) };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let t = s3.0.read_at(Some(0), None).unwrap();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock(t) };
        });
        let t = s.0.read_at(Some(3), None).unwrap();
        let _ = s.1.get();
        unsafe { s.0.read_unlock(t) };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// PercpuRwSem downgrade: the downgraded writer stays counted as a reader, so a second writer cannot get
/// in before it unlocks, and a reader sees the write.
#[test]
fn percpu_rwsem_downgrade() {
    use crate::rw::percpu_rwsem::RawPercpuRwSem;
    model(|| {
        let s = Arc::new((RawPercpuRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock(t) };
        });
        let t = s.0.write();
        s.1.critical();
        let r = s.0.downgrade_at(Some(1), t);
        let seen = s.1.get();
        assert!(seen >= 1);
        unsafe { s.0.read_unlock(r) };
        w.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// PercpuRwSem timeouts: a writer that gives up waiting for a reader reopens the lock (the reader's
/// second read gets in), and a reader that gives up behind a writer holds nothing.
#[test]
fn percpu_rwsem_timeouts() {
    use crate::rw::percpu_rwsem::RawPercpuRwSem;
    model(|| {
        let s = Arc::new((RawPercpuRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if let Some(t) = s2.0.write_until(&d) {
                s2.1.critical();
                unsafe { s2.0.write_unlock(t) };
            }
        });
        let t = s.0.read_at(Some(0), None).unwrap();
        let _ = s.1.get();
        unsafe { s.0.read_unlock(t) };
        let d = Deadline::after_polls(1);
        if let Some(t) = s.0.read_at(Some(0), Some(&d)) {
            let _ = s.1.get();
            unsafe { s.0.read_unlock(t) };
        }
        w.join().unwrap();
        assert!(!s.0.is_locked());
        let t = s.0.try_write().expect("free after everyone left");
        unsafe { s.0.write_unlock(t) };
    });
}

/// RwSem fair unlock, writer waiting: the lock passes to the queued writer without ever being free, so
/// the releaser's next write lock comes after the waiter's (loom's race detector checks the two
/// critical sections are ordered); the rwsem ends free.
#[test]
fn rwsem_fair_unlock_hands_to_writer() {
    rwsem_fair_unlock_with(false);
}

/// RwSem fair unlock, reader waiting: the reader is granted through the downgrade path.
#[test]
fn rwsem_fair_unlock_grants_reader() {
    rwsem_fair_unlock_with(true);
}

fn rwsem_fair_unlock_with(reader: bool) {
    use crate::rw::rwsem::RawRwSem;
    model(move || {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let t = s.0.write();
        let s2 = s.clone();
        let h = thread::spawn(move || {
            if reader {
                let _t = s2.0.read();
                let _ = s2.1.get();
                unsafe { s2.0.read_unlock() };
            } else {
                let _t = s2.0.write();
                s2.1.critical();
                unsafe { s2.0.write_unlock() };
            }
        });
        // Hold the lock until the other thread has queued, so the fair unlock has someone to hand to.
        while !s.0.has_waiters() {
            thread::yield_now();
        }
        s.1.critical();
        unsafe { s.0.write_unlock_fair(&t) };
        let _t = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        h.join().unwrap();
        assert_eq!(s.1.get(), if reader { 2 } else { 3 });
        assert!(!s.0.is_locked());
    });
}

/// RwSem downgrade: the downgraded holder reads its own write, a competing writer is excluded until the
/// read hold ends, a queued reader may be granted alongside; the rwsem ends free.
#[test]
fn rwsem_downgrade() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let _t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock() };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let _t = s3.0.read();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock() };
        });
        let t = s.0.write();
        s.1.critical();
        unsafe { s.0.downgrade(&t) };
        assert!(s.1.get() >= 1);
        assert!(!s.0.is_locked_exclusive());
        unsafe { s.0.read_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSem upgrade against a reader and a writer: the upgradable holder reads, then (after the reader
/// leaves, while the writer waits or has gone) upgrades and writes with nobody inside; no writer
/// comes between its read and its write (the value it read is still there); the rwsem ends free.
#[test]
fn rwsem_upgrade_against_a_reader_and_a_writer() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let _t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock() };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let _t = s3.0.read();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock() };
        });
        let t = s.0.read_upgradable();
        let seen = s.1.get();
        let t = unsafe { s.0.upgrade(t) };
        assert_eq!(
            s.1.get(),
            seen,
            "a writer came between the read and the upgrade"
        );
        s.1.critical();
        unsafe { s.0.downgrade_to_upgradable(&t) };
        unsafe { s.0.upgradable_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSem: an upgrade that sleeps until the last other reader leaves is woken by that reader's
/// unlock (nothing else would wake it: a lost wake-up is a deadlock loom reports).
#[test]
fn rwsem_upgrade_is_woken_by_the_last_reader() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let _r = s.0.read();
        let s2 = s.clone();
        let up = thread::spawn(move || {
            let t = s2.0.read_upgradable();
            let t = unsafe { s2.0.upgrade(t) };
            s2.1.critical();
            let _ = t;
            unsafe { s2.0.write_unlock() };
        });
        let _ = s.1.get();
        unsafe { s.0.read_unlock() };
        up.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// RwSem: two upgradable readers. The second waits (its read hold given back) until the first has
/// upgraded, written and unlocked; each upgrade writes alone; the rwsem ends free.
#[test]
fn rwsem_two_upgraders() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let other = thread::spawn(move || {
            let t = s2.0.read_upgradable();
            let t = unsafe { s2.0.upgrade(t) };
            s2.1.critical();
            let _ = t;
            unsafe { s2.0.write_unlock() };
        });
        let t = s.0.read_upgradable();
        let t = unsafe { s.0.upgrade(t) };
        s.1.critical();
        let _ = t;
        unsafe { s.0.write_unlock() };
        other.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSem: an upgrade that must wait for a reader, with a late reader that queues behind the upgrade
/// (or gets in before it), and a timed upgrade that gives up: the held-back reader still gets in.
#[test]
fn rwsem_upgrade_holds_back_new_readers_and_gives_up_cleanly() {
    use crate::clock::Deadline;
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let first = s.0.read();
        let s2 = s.clone();
        let late = thread::spawn(move || {
            let _t = s2.0.read();
            let _ = s2.1.get();
            unsafe { s2.0.read_unlock() };
        });
        let s3 = s.clone();
        let up = thread::spawn(move || {
            let t = s3.0.read_upgradable();
            // Gives up after a few polls (our first read may still be in), still upgradable.
            if s3.0.upgrade_until(&t, Some(&Deadline::after_polls(1))) {
                s3.1.critical();
                unsafe { s3.0.write_unlock() };
            } else {
                unsafe { s3.0.upgradable_unlock() };
            }
        });
        let _ = first;
        unsafe { s.0.read_unlock() };
        late.join().unwrap();
        up.join().unwrap();
        assert!(!s.0.is_locked());
    });
}

/// RwSem timeouts: a writer and a reader whose deadlines pass leave the wait list holding nothing (or
/// got the lock first); the rwsem ends free and usable.
#[test]
fn rwsem_timeout_removal() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if s2.0.write_until(&d).is_some() {
                s2.1.critical();
                unsafe { s2.0.write_unlock() };
            }
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if s3.0.read_until(&d).is_some() {
                let _ = s3.1.get();
                unsafe { s3.0.read_unlock() };
            }
        });
        let _t = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert!(!s.0.is_locked());
        let _t = s.0.try_write().expect("free after everyone left");
        unsafe { s.0.write_unlock() };
    });
}

/// `RecursiveRwSem`: a writer against two readers of which one reads twice (the second read while the
/// writer may be waiting): the write section excludes both readers (loom reports a race on the cell
/// otherwise), the nested read never deadlocks behind the waiting writer, and every sleeper is woken
/// (a lost wake-up is a deadlock loom reports).
#[test]
fn recursive_rwsem_excludes_and_reads_recursively() {
    use crate::rw::recursive_rwsem::RawRecursiveRwSem;
    model(|| {
        let l = Arc::new(RawRecursiveRwSem::new());
        let cell = Arc::new(UnsafeCell::new(0usize));
        let w = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                assert!(l.write_until(None));
                // SAFETY: the write hold; loom checks no reader overlaps.
                cell.with_mut(|v| unsafe { *v += 1 });
                l.write_unlock();
            })
        };
        let r = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                assert!(l.read_until(None));
                // SAFETY: a read hold.
                let v1 = cell.with(|v| unsafe { *v });
                // May run while the writer waits: must not block behind it.
                assert!(l.read_until(None));
                // SAFETY: a read hold.
                let v2 = cell.with(|v| unsafe { *v });
                assert_eq!(v1, v2, "a write inside a read section");
                l.read_unlock();
                l.read_unlock();
            })
        };
        w.join().unwrap();
        r.join().unwrap();
        // SAFETY: every thread is joined.
        assert_eq!(cell.with(|v| unsafe { *v }), 1);
    });
}

/// `RecursiveRwSem`'s refused read add: two writers and a reader, so the reader's `fetch_add` can
/// land while a writer holds and the other writer sleeps on the count or on WRITER. The undo must
/// neither let a writer in beside the reader nor lose the sleeping writer's wake-up (a deadlock loom
/// reports).
#[test]
fn recursive_rwsem_refused_read_add_with_two_writers() {
    use crate::rw::recursive_rwsem::RawRecursiveRwSem;
    model(|| {
        let l = Arc::new(RawRecursiveRwSem::new());
        let cell = Arc::new(UnsafeCell::new(0usize));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (l, cell) = (l.clone(), cell.clone());
                thread::spawn(move || {
                    assert!(l.write_until(None));
                    // SAFETY: the write hold; loom checks no reader or writer overlaps.
                    cell.with_mut(|v| unsafe { *v += 1 });
                    l.write_unlock();
                })
            })
            .collect();
        assert!(l.read_until(None));
        // SAFETY: a read hold.
        let v = cell.with(|v| unsafe { *v });
        assert!(v <= 2);
        l.read_unlock();
        for w in writers {
            w.join().unwrap();
        }
        // SAFETY: every thread is joined.
        assert_eq!(cell.with(|v| unsafe { *v }), 2);
        assert!(l.try_write(), "a count or the writer bit left behind");
        l.write_unlock();
    });
}

/// RwSem reader bias: a reader publishing itself in the table races a writer revoking the bias. Either
/// the writer's scan sees the reader's slot (and waits for it) or the reader's re-check sees the bias
/// off (and it takes the count, behind the writer): the cell's race detector fails otherwise (without
/// the SeqCst fences here, or without the reader's re-check).
#[test]
fn rwsem_bias_reader_publish_races_revoke() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::with_reader_bias(), Guarded::new()));
        // A count read turns the bias on (under loom the inhibit period is skipped).
        let t = s.0.read_biased();
        unsafe { s.0.read_unlock_biased(&t) };
        let s2 = s.clone();
        let r = thread::spawn(move || {
            let t = s2.0.read_biased();
            let _ = s2.1.get();
            unsafe { s2.0.read_unlock_biased(&t) };
        });
        let _w = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        r.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// RwSem reader bias: a writer's revocation races a reader turning the bias back on (count reads
/// re-enable it; under loom at once), with a second reader that may come in through the table before
/// or after: the writer never overlaps either reader.
#[test]
fn rwsem_bias_revoke_races_reenable() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::with_reader_bias(), Guarded::new()));
        let t = s.0.read_biased();
        unsafe { s.0.read_unlock_biased(&t) };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let s2 = s.clone();
                thread::spawn(move || {
                    let t = s2.0.read_biased();
                    let _ = s2.1.get();
                    unsafe { s2.0.read_unlock_biased(&t) };
                })
            })
            .collect();
        let _w = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// RwSem reader bias: a timed writer gives up while a table reader is in; the revocation must be
/// undone (the bias back on), or a second writer that finds the bias off skips the scan and writes
/// under the reader (the cell's race detector fails). Queued waiters are not stranded.
#[test]
fn rwsem_bias_timed_writer_gives_up() {
    use crate::rw::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::with_reader_bias(), Guarded::new()));
        let t = s.0.read_biased();
        unsafe { s.0.read_unlock_biased(&t) };
        let s2 = s.clone();
        let r = thread::spawn(move || {
            let t = s2.0.read_biased();
            let _ = s2.1.get();
            thread::yield_now();
            let _ = s2.1.get();
            unsafe { s2.0.read_unlock_biased(&t) };
        });
        let s3 = s.clone();
        let timed = thread::spawn(move || {
            if let Some(t) = s3.0.write_until(&Deadline::after_polls(1)) {
                s3.1.critical();
                unsafe { s3.0.write_unlock_fair(&t) };
            }
        });
        timed.join().unwrap();
        let _w = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        r.join().unwrap();
        assert!(!s.0.is_locked());
    });
}
