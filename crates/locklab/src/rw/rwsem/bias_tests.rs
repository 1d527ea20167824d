//! Unit tests of the reader bias: the table paths, revocation (waiting, giving up, inhibit), leaked
//! slots (forgotten tokens, exited threads, a later lock at the same address), a read from a signal
//! handler over a table read, fork, and a mixed stress with an exclusion check.

use super::*;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// A read hold through the table. The table is shared by every test in the process, so our slot may be
/// taken for a moment: retry (a count hold in between is released at once).
fn table_read(s: &RawRwSem) -> RwSemToken {
    for _ in 0..10_000 {
        let t = s.read_biased();
        if t.slot != NO_SLOT {
            return t;
        }
        // SAFETY: the hold just taken.
        unsafe { s.read_unlock_biased(&t) };
        std::thread::yield_now();
    }
    panic!("never got a table slot");
}

/// Turns the bias on (a count read past the inhibit period enables it; a thread looks at the clock
/// once every CLOCK_POLL_EVERY such reads) and checks it is on.
fn enable(s: &RawRwSem) {
    // Relaxed: a test's own lock.
    s.bias.inhibit_until.store(0, Ordering::Relaxed);
    for _ in 0..CLOCK_POLL_EVERY {
        let t = s.read_biased();
        // SAFETY: the hold just taken.
        unsafe { s.read_unlock_biased(&t) };
    }
    assert!(s.bias.word.load(Ordering::Relaxed) & ENABLED != 0);
}

fn id(s: &RawRwSem) -> u64 {
    s.bias.word.load(Ordering::Relaxed) >> 1
}

/// Test clean-up of a slot a test leaked on purpose (so the other tests do not meet it).
fn free_slot(t: &RwSemToken) {
    slot(t.slot as usize).store(0, Ordering::Relaxed);
}

#[test]
fn table_readers_share_and_a_writer_revokes() {
    let s = RawRwSem::with_reader_bias();
    assert!(!s.is_locked());
    let first = s.read_biased();
    assert_eq!(
        first.slot, NO_SLOT,
        "the bias starts off: the first read is in the count"
    );
    enable(&s);
    let t = table_read(&s);
    assert_eq!(slot(t.slot as usize).load(Ordering::Relaxed), id(&s));
    assert!(s.is_locked() && !s.is_locked_exclusive());
    // SAFETY: the count hold.
    unsafe { s.read_unlock_biased(&first) };
    assert!(s.is_locked(), "the table reader still holds it");
    assert!(s.try_write().is_none(), "a table reader keeps writers out");
    assert!(
        s.bias.word.load(Ordering::Relaxed) & ENABLED != 0,
        "a revocation given up is undone (the next writer must scan again)"
    );
    assert_eq!(
        s.count.load(Ordering::Relaxed),
        0,
        "the failed try gave WRITER_LOCKED back"
    );
    let r = s.read_biased();
    // SAFETY: both holds taken above.
    unsafe {
        s.read_unlock_biased(&r);
        s.read_unlock_biased(&t);
    }
    assert!(!s.is_locked());
    let w = s.try_write().expect("free");
    // SAFETY: held exclusively.
    unsafe { s.write_unlock_fair(&w) };
}

/// A writer waits for the table readers to leave, and readers that come meanwhile wait for it.
#[test]
fn a_writer_waits_for_table_readers() {
    let s = Arc::new(RawRwSem::with_reader_bias());
    enable(&s);
    let inside = Arc::new(AtomicUsize::new(0));
    let t = table_read(&s);
    inside.fetch_add(1, Ordering::SeqCst);
    let (s2, in2) = (s.clone(), inside.clone());
    let w = std::thread::spawn(move || {
        let _w = s2.write();
        let seen = in2.load(Ordering::SeqCst);
        // SAFETY: held exclusively.
        unsafe { s2.write_unlock() };
        seen
    });
    while s.bias.word.load(Ordering::Relaxed) & ENABLED != 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(!w.is_finished(), "the writer waits for the table reader");
    inside.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: the table hold.
    unsafe { s.read_unlock_biased(&t) };
    assert_eq!(w.join().unwrap(), 0, "no reader inside the write section");
    assert_eq!(s.count.load(Ordering::Relaxed), 0);
}

/// A forgotten table read leaks the hold (as a forgotten count read does); a new lock built at the same
/// address has a new id, so the leaked slot is not taken for one of its readers.
#[test]
fn a_forgotten_table_read_does_not_hold_a_new_lock_at_the_same_address() {
    let mut s = Box::new(RawRwSem::with_reader_bias());
    enable(&s);
    let leaked = table_read(&s);
    let old = id(&s);
    assert!(
        s.try_write().is_none(),
        "leaked: writers stay out, as for a leaked count read"
    );
    let at = &*s as *const RawRwSem;
    *s = RawRwSem::with_reader_bias();
    assert_eq!(&*s as *const RawRwSem, at);
    assert!(!s.is_locked());
    enable(&s);
    assert_ne!(id(&s), old, "ids are never reused");
    let _w = s.try_write().expect("the old slot is not this lock's");
    // SAFETY: held exclusively.
    unsafe { s.write_unlock() };
    free_slot(&leaked);
}

/// A thread that exits holding a table read leaves the lock read-held (as with a count read): a timed
/// writer gives up, leaves the lock consistent, and readers still get in.
#[test]
fn a_thread_exiting_with_a_table_read_leaves_it_held() {
    let s = Arc::new(RawRwSem::with_reader_bias());
    enable(&s);
    let s2 = s.clone();
    let leaked = std::thread::spawn(move || table_read(&s2).slot)
        .join()
        .unwrap();
    assert_eq!(slot(leaked as usize).load(Ordering::Relaxed), id(&s));
    assert!(s.is_locked());
    let t0 = Instant::now();
    assert!(s.write_until(&(t0 + Duration::from_millis(30))).is_none());
    assert!(t0.elapsed() >= Duration::from_millis(30));
    assert_eq!(
        s.count.load(Ordering::Relaxed),
        0,
        "the timed writer left nothing behind"
    );
    let r = s.read_biased();
    // SAFETY: the hold just taken.
    unsafe { s.read_unlock_biased(&r) };
    slot(leaked as usize).store(0, Ordering::Relaxed);
    assert!(s.try_write().is_some());
}

/// A timed writer whose deadline passes mid-revocation gives the lock back: a reader that queued behind
/// it gets in, and so does a writer after the table reader leaves.
#[test]
fn a_timed_writer_gives_up_mid_revocation() {
    let s = Arc::new(RawRwSem::with_reader_bias());
    enable(&s);
    let t = table_read(&s);
    let s2 = s.clone();
    let w = std::thread::spawn(move || {
        s2.write_until(&(Instant::now() + Duration::from_millis(200)))
            .is_some()
    });
    while !s.is_locked_exclusive() {
        std::thread::yield_now();
    }
    // A count reader now waits behind the revoking writer (spins, then queues).
    let s3 = s.clone();
    let r = std::thread::spawn(move || {
        let _t = s3.read();
        // SAFETY: the hold just taken.
        unsafe { s3.read_unlock() };
    });
    assert!(
        !w.join().unwrap(),
        "the table reader outlasted the deadline"
    );
    r.join().unwrap();
    assert!(!s.is_locked_exclusive());
    // SAFETY: the table hold.
    unsafe { s.read_unlock_biased(&t) };
    let w = s.write();
    // SAFETY: held exclusively.
    unsafe { s.write_unlock_fair(&w) };
    assert_eq!(s.count.load(Ordering::Relaxed), 0);
}

/// A timed upgrade that gives up mid-revocation is upgradable again; once the table reader leaves it
/// upgrades.
#[test]
fn a_timed_upgrade_gives_up_mid_revocation() {
    let s = RawRwSem::with_reader_bias();
    enable(&s);
    let t = table_read(&s);
    let u = s.read_upgradable();
    assert!(!s.upgrade_until(&u, Some(&(Instant::now() + Duration::from_millis(10)))));
    assert_eq!(s.count.load(Ordering::Relaxed), READER_BIAS | UPGRADABLE);
    // SAFETY: `u` is upgradable (the failed upgrade restored it).
    assert!(
        !unsafe { s.try_upgrade(&u) },
        "the table reader is still in"
    );
    // SAFETY: the table hold.
    unsafe { s.read_unlock_biased(&t) };
    // SAFETY: `u` is upgradable and our only hold.
    assert!(unsafe { s.try_upgrade(&u) });
    // SAFETY: held exclusively.
    unsafe { s.write_unlock() };
    assert!(!s.is_locked());
}

/// The inhibit period: after a revocation, count reads do not turn the bias back on until it is over
/// (the multiplier starts at 9 and doubles while revocations follow each other closely).
#[test]
fn the_bias_stays_off_for_the_inhibit_period() {
    let s = RawRwSem::with_reader_bias();
    enable(&s);
    let _w = s.write();
    // SAFETY: held exclusively.
    unsafe { s.write_unlock() };
    let until = s.bias.inhibit_until.load(Ordering::Relaxed);
    assert!(until > 0);
    assert_eq!(s.bias.mult.load(Ordering::Relaxed), INHIBIT_MULT_MIN);
    // Far in the future: every read stays in the count.
    s.bias.inhibit_until.store(u64::MAX, Ordering::Relaxed);
    for _ in 0..3 * CLOCK_POLL_EVERY {
        let r = s.read_biased();
        assert_eq!(r.slot, NO_SLOT);
        // SAFETY: the hold just taken.
        unsafe { s.read_unlock_biased(&r) };
    }
    assert_eq!(s.bias.word.load(Ordering::Relaxed) & ENABLED, 0);
    // Back-to-back revocations: the multiplier grows, capped.
    for _ in 0..20 {
        enable(&s);
        s.bias.period.store(u64::MAX, Ordering::Relaxed);
        let _w = s.write();
        // SAFETY: held exclusively.
        unsafe { s.write_unlock() };
    }
    assert_eq!(s.bias.mult.load(Ordering::Relaxed), INHIBIT_MULT_MAX);
}

/// A signal handler that read-locks while its thread holds a table read of the same lock: the slot is
/// taken (same thread, same hash), so the handler's read falls back to the count.
#[test]
#[cfg(not(miri))]
fn a_signal_handler_reads_over_a_table_read() {
    static L: RawRwSem = RawRwSem::with_reader_bias();
    static SLOT_IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn handler(_: libc::c_int) {
        let t = L.read_biased();
        SLOT_IN_HANDLER.store(t.slot as usize + 1, Ordering::SeqCst);
        // SAFETY: the hold just taken.
        unsafe { L.read_unlock_biased(&t) };
    }
    crate::exit_tests::install_handler(libc::SIGURG, handler);
    enable(&L);
    let t = table_read(&L);
    // SAFETY: delivered to this thread before `raise` returns.
    unsafe { libc::raise(libc::SIGURG) };
    let got = SLOT_IN_HANDLER.load(Ordering::SeqCst);
    assert_ne!(got, 0, "the handler ran and got the lock");
    assert_ne!(got - 1, t.slot as usize, "not through our own slot");
    assert_eq!(slot(t.slot as usize).load(Ordering::Relaxed), id(&L));
    // SAFETY: the table hold.
    unsafe { L.read_unlock_biased(&t) };
    assert!(!L.is_locked());
}

/// fork while this thread holds a table read and another thread holds one too: in the child ours is
/// still ours to release; the other thread's is leaked (as a count read of a thread the child lacks),
/// so a timed writer gives up there and readers still get in.
#[test]
#[cfg(all(unix, not(miri)))]
fn fork_with_table_reads_held() {
    let s = Arc::new(RawRwSem::with_reader_bias());
    enable(&s);
    let mine = table_read(&s);
    let (s2, go) = (s.clone(), Arc::new(AtomicUsize::new(0)));
    let go2 = go.clone();
    let other = std::thread::spawn(move || {
        let t = table_read(&s2);
        go2.store(1, Ordering::SeqCst);
        while go2.load(Ordering::SeqCst) != 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: the table hold.
        unsafe { s2.read_unlock_biased(&t) };
    });
    while go.load(Ordering::SeqCst) != 1 {
        std::thread::yield_now();
    }
    let status = crate::fork_tests::status_of_child(20, || {
        // SAFETY: our hold, inherited.
        unsafe { s.read_unlock_biased(&mine) };
        let gave_up = s
            .write_until(&(Instant::now() + Duration::from_millis(20)))
            .is_none();
        let r = s.read_biased();
        // SAFETY: the hold just taken.
        unsafe { s.read_unlock_biased(&r) };
        gave_up && s.count.load(Ordering::Relaxed) == 0
    });
    assert!(crate::fork_tests::exited_0(status), "child status {status}");
    go.store(2, Ordering::SeqCst);
    other.join().unwrap();
    // SAFETY: our table hold (the parent's copy).
    unsafe { s.read_unlock_biased(&mine) };
    let _w = s.try_write().expect("both table readers left");
    // SAFETY: held exclusively.
    unsafe { s.write_unlock() };
}

/// 12 threads mixing table and count reads, writes, tries, timed operations and upgrades on one biased
/// lock (with the inhibit period cut short so the bias flips often): no writer ever overlaps another
/// holder, and the lock ends free.
#[test]
fn stress_mixed_with_exclusion_check() {
    const READERS: usize = 1 << 20;
    let s = Arc::new(RawRwSem::with_reader_bias());
    // Holders inside: readers add 1, writers READERS.
    let inside = Arc::new(AtomicUsize::new(0));
    let iters = if cfg!(miri) { 30 } else { 3000 };
    let hs: Vec<_> = (0..12)
        .map(|k| {
            let (s, inside) = (s.clone(), inside.clone());
            std::thread::spawn(move || {
                let read_in = || {
                    let prev = inside.fetch_add(1, Ordering::SeqCst);
                    assert!(prev < READERS, "a reader overlapped a writer");
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::SeqCst);
                };
                let write_in = || {
                    let prev = inside.fetch_add(READERS, Ordering::SeqCst);
                    assert_eq!(prev, 0, "a writer overlapped a holder");
                    std::hint::spin_loop();
                    inside.fetch_sub(READERS, Ordering::SeqCst);
                };
                for i in 0..iters {
                    if i % 64 == 0 {
                        // Cut the inhibit period short. Relaxed: a heuristic's input.
                        s.bias.inhibit_until.store(0, Ordering::Relaxed);
                    }
                    let soon = Instant::now() + Duration::from_micros(200);
                    match (k, i % 4) {
                        (0..=4, _) | (_, 0) => {
                            let t = s.read_biased();
                            read_in();
                            // SAFETY: the hold just taken.
                            unsafe { s.read_unlock_biased(&t) };
                        }
                        (5..=6, _) => {
                            let _t = s.write();
                            write_in();
                            // SAFETY: held exclusively.
                            unsafe { s.write_unlock() };
                        }
                        (7, _) => {
                            if let Some(t) = s.try_read_biased() {
                                read_in();
                                // SAFETY: the hold just taken.
                                unsafe { s.read_unlock_biased(&t) };
                            }
                            if s.try_write().is_some() {
                                write_in();
                                // SAFETY: held exclusively.
                                unsafe { s.write_unlock() };
                            }
                        }
                        (8..=9, _) => {
                            if let Some(t) = s.read_biased_until(&soon) {
                                read_in();
                                // SAFETY: the hold just taken.
                                unsafe { s.read_unlock_biased(&t) };
                            }
                            if let Some(t) = s.write_until(&soon) {
                                write_in();
                                // SAFETY: held exclusively.
                                unsafe { s.write_unlock_fair(&t) };
                            }
                        }
                        _ => {
                            let u = s.read_upgradable();
                            read_in();
                            // SAFETY: `u` is our upgradable hold, our only hold.
                            let up = if i % 2 == 0 {
                                unsafe { s.try_upgrade(&u) }
                            } else {
                                s.upgrade_until(&u, Some(&soon))
                            };
                            if up {
                                write_in();
                                // SAFETY: held exclusively.
                                unsafe {
                                    s.downgrade(&u);
                                    s.read_unlock();
                                }
                            } else {
                                // SAFETY: still upgradable.
                                unsafe { s.upgradable_unlock() };
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(!s.is_locked());
    assert_eq!(s.count.load(Ordering::Relaxed) & !(WAITERS | HANDOFF), 0);
    let _w = s.try_write().expect("free at the end");
    // SAFETY: held exclusively.
    unsafe { s.write_unlock() };
}
