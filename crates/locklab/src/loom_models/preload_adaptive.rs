//! Loom model of the preload library's `adaptive` mutex (`crates/locklab-pthread/src/adaptive.rs`,
//! included here unchanged): its lock word (`LOCKED` and the `SLEEPERS` mark, glibc's protocol), its
//! sleep on the marked word, the unlock that clears the mark and wakes one, and the woken thread that
//! puts the mark back.
//!
//! The file is compiled beside the `sys` below instead of the library's: loom's atomics, and a model
//! futex with the kernel's semantics where they matter here: a wait compares the word and sleeps
//! atomically, a wake wakes at most `n` threads that are asleep at that moment (oldest first) and
//! says how many. A model that deadlocks is a lost wake-up; a timed lock's wait times out at once
//! (the time-out path, leaving the mark its swap wrote, is what is explored). Spins take one look
//! (`sys::MODEL`).
//!
//! Every model below fails when any one step the protocol needs is removed from `adaptive.rs`: the
//! unlock's wake-up of a marked word; the mark in the sleeper's swap (a swap to `LOCKED`, and a sleep
//! on `LOCKED`); the swap after a sleep (a woken thread that first tries a plain CAS on a free word
//! takes the lock without the mark, and the other sleepers' wake-up went to it: a deadlock); the
//! sleeper's Acquire or the unlock's Release (a data race on the guarded value).

#![allow(dead_code)] // the parts of the included file the models do not call

#[path = "../../../locklab-pthread/src/adaptive.rs"]
mod adaptive;

mod sys {
    pub mod atomic {
        pub use core::sync::atomic::Ordering;
        pub use loom::sync::atomic::{AtomicI32, AtomicU16, AtomicU32};
    }

    /// Spins take one look, read no clock.
    pub const MODEL: bool = true;

    use atomic::AtomicU32;
    use loom::sync::{Condvar, Mutex};

    /// The model futex: sleepers in arrival order, and those a wake has picked.
    #[derive(Default)]
    struct Queue {
        next: usize,
        asleep: Vec<usize>,
        woken: Vec<usize>,
    }

    loom::lazy_static! {
        static ref FUTEX: (Mutex<Queue>, Condvar) = (Mutex::new(Queue::default()), Condvar::new());
    }

    fn wait(word: &AtomicU32, expected: u32) {
        let mut q = FUTEX.0.lock().unwrap();
        // Relaxed: the model mutex orders this check against a waker's store and wake.
        if word.load(atomic::Ordering::Relaxed) != expected {
            return;
        }
        let me = q.next;
        q.next += 1;
        q.asleep.push(me);
        loop {
            q = FUTEX.1.wait(q).unwrap();
            if let Some(i) = q.woken.iter().position(|&w| w == me) {
                q.woken.swap_remove(i);
                return;
            }
        }
    }

    fn futex_wake_count(_word: *const AtomicU32, n: i32, _shared: bool) -> i64 {
        let mut q = FUTEX.0.lock().unwrap();
        let k = (n.max(0) as usize).min(q.asleep.len());
        let picked: Vec<usize> = q.asleep.drain(..k).collect();
        q.woken.extend(picked);
        FUTEX.1.notify_all();
        k as i64
    }

    pub fn futex_wake(word: *const AtomicU32, n: i32, shared: bool) {
        let _ = futex_wake_count(word, n, shared);
    }

    /// A timed wait times out at once (`false`); without a deadline, a plain wait.
    pub fn futex_wait_until(
        word: &AtomicU32,
        expected: u32,
        until: Option<(libc::clockid_t, &libc::timespec)>,
    ) -> bool {
        if until.is_some() {
            loom::thread::yield_now();
            return false;
        }
        wait(word, expected);
        true
    }

    pub use crate::loom_models::preload_owed::{
        errno, owed_word, set_errno, set_owed_word, set_owed_word_ptr,
    };
}

use super::*;
use adaptive::Adaptive;

/// A fresh mutex for one model execution (leaked: `Adaptive` holds `'static` references).
fn mutex() -> Adaptive {
    Adaptive {
        word: Box::leak(Box::new(sys::atomic::AtomicU32::new(0))),
        owner: Box::leak(Box::new(sys::atomic::AtomicI32::new(0))),
        spins: Box::leak(Box::new(sys::atomic::AtomicU16::new(0))),
    }
}

/// `n` threads that each take `m` `rounds` times around `data`'s critical section.
fn lockers(
    m: Adaptive,
    data: &Arc<Guarded>,
    n: usize,
    rounds: usize,
) -> Vec<thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let data = data.clone();
            thread::spawn(move || {
                for _ in 0..rounds {
                    m.lock();
                    data.critical();
                    m.unlock();
                }
            })
        })
        .collect()
}

/// Three lockers, each sleeping when it finds the lock held: mutual exclusion, nobody left asleep
/// (a lost wake-up is a deadlock loom reports), and a clean word at the end (no hold, no mark).
#[test]
fn three_lockers_no_lost_wake_up() {
    model_with_preemptions(2, || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        for h in lockers(m, &data, 3, 1) {
            h.join().unwrap();
        }
        assert_eq!(m.word.load(Ordering::Relaxed), 0, "word left dirty");
    });
}

/// Two lockers taking it twice each (and the main thread once): an unlock's wake-up in flight, the
/// mark cleared, while the woken thread has not looked yet must not cost the other sleeper its
/// wake-up.
#[test]
fn two_lockers_twice_each() {
    model_with_preemptions(2, || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        let hs = lockers(m, &data, 2, 2);
        m.lock();
        data.critical();
        m.unlock();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(m.word.load(Ordering::Relaxed), 0, "word left dirty");
    });
}

/// `special` (one locker's protocol, given the mutex and the guarded data) in a thread of its own,
/// racing two plain lockers; at the end the word is clean (no hold, no mark).
fn against_two_plain_lockers(special: fn(Adaptive, &Guarded)) {
    model_with_preemptions(2, move || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        let special = {
            let data = data.clone();
            thread::spawn(move || special(m, &data))
        };
        let plain = lockers(m, &data, 2, 1);
        special.join().unwrap();
        for h in plain {
            h.join().unwrap();
        }
        assert_eq!(m.word.load(Ordering::Relaxed), 0, "word left dirty");
    });
}

/// A timed locker that gives up (leaving the mark its swap wrote, which the holder's unlock clears
/// with a spare wake-up) racing two plain lockers: the plain ones still get in.
#[test]
fn a_timed_out_locker_costs_the_others_nothing() {
    against_two_plain_lockers(|m, data| {
        let far = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        if m.lock_until(libc::CLOCK_MONOTONIC, &far) {
            data.critical();
            m.unlock();
        }
    });
}

/// The library's contended path: a `try_lock` (a load, and a CAS only on a free word), then
/// `lock_contended` straight into the spin and the sleep, racing two plain lockers: mutual
/// exclusion, no lost wake-up, a clean word.
#[test]
fn a_contended_entry_without_the_fast_cas() {
    against_two_plain_lockers(|m, data| {
        if !m.try_lock() {
            m.lock_contended();
        }
        data.critical();
        m.unlock();
    });
}

/// The exported calls as the library's entry runs them, in all three threads: the lock's CAS
/// 0 -> `LOCKED` (`try_lock_fast`), else a look and a CAS on a free word (`try_lock`), else the
/// spin and the sleep; the unlock's CAS `LOCKED` -> 0 (`unlock_quiet`), else the general unlock.
/// Mutual exclusion, no lost wake-up (a quiet release never leaves a marked sleeper asleep: it
/// needs the word exactly `LOCKED`), a clean word.
#[test]
fn the_entry_fast_paths_in_every_thread() {
    fn entry_lock(m: Adaptive) {
        if !m.try_lock_fast() && !m.try_lock() {
            m.lock_contended();
        }
    }
    fn entry_unlock(m: Adaptive) {
        if !m.unlock_quiet() {
            m.unlock();
        }
    }
    model_with_preemptions(2, || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let data = data.clone();
                thread::spawn(move || {
                    entry_lock(m);
                    data.critical();
                    entry_unlock(m);
                })
            })
            .collect();
        entry_lock(m);
        data.critical();
        entry_unlock(m);
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(m.word.load(Ordering::Relaxed), 0, "word left dirty");
    });
}
