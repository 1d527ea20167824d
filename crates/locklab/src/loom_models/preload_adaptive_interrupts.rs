//! Loom models of the preload library's `adaptive` mutex (`crates/locklab-pthread/src/adaptive.rs`,
//! included unchanged) with its sleeps interrupted, which `preload_adaptive`'s model futex never does:
//! 1. a timed locker that really sleeps, its time-out (a timer thread) racing the unlocks' wake-ups;
//! 2. a locker whose thread takes a signal: the signal ends its sleep (`EINTR`) or arrives as it comes
//!    back from a wake-up, and the handler takes the same mutex before the interrupted lock looks
//!    again.
//!
//! 3. a locker woken by an unlock that leaves its wait for good instead of looking again (its
//!    signal handler `siglongjmp`s out), after the library's handler wrapper passed its wake-up on
//!    (`pass_on_owed`).
//!
//! The first two deadlock (a lost wake-up) if a timed-out locker clears the mark, or if a woken
//! thread tries a plain `0 -> LOCKED` take before its swap; the third if the wrapper's pass-on is
//! removed (the sleeper behind the leaver stays asleep on a free word).
#![allow(dead_code)]

#[path = "../../../locklab-pthread/src/adaptive.rs"]
mod adaptive;

mod sys {
    pub mod atomic {
        pub use core::sync::atomic::Ordering;
        pub use loom::sync::atomic::{AtomicI32, AtomicU16, AtomicU32};
    }
    pub const MODEL: bool = true;
    use atomic::AtomicU32;
    use loom::sync::{Condvar, Mutex};
    use std::cell::{Cell, RefCell};

    #[derive(Default)]
    pub struct Queue {
        next: usize,
        asleep: Vec<usize>,
        woken: Vec<usize>,
        /// The special thread's sleep id while it sleeps.
        special_asleep: Option<usize>,
        /// The interruption (time-out or signal) has happened.
        fired: bool,
        /// Fired while the special thread was not asleep: ends its next sleep at once (once).
        pending: bool,
        /// Sleep ids ended by the interruption.
        interrupted: Vec<usize>,
    }
    loom::lazy_static! {
        pub static ref FUTEX: (Mutex<Queue>, Condvar) = (Mutex::new(Queue::default()), Condvar::new());
    }
    loom::thread_local! {
        pub static SPECIAL: Cell<bool> = Cell::new(false);
        pub static HANDLER: RefCell<Option<Box<dyn Fn()>>> = RefCell::new(None);
        pub static HANDLED: Cell<bool> = Cell::new(false);
        /// This thread leaves its wait for good once woken (model 3).
        pub static LEAVER: Cell<bool> = Cell::new(false);
    }

    pub use crate::loom_models::preload_owed::{
        errno, owed_word, set_errno, set_owed_word, set_owed_word_ptr,
    };

    /// The interruption: ends the special thread's sleep if it sleeps (unless a wake-up got it).
    pub fn fire() {
        let mut q = FUTEX.0.lock().unwrap();
        q.fired = true;
        if let Some(id) = q.special_asleep.take() {
            if let Some(i) = q.asleep.iter().position(|&w| w == id) {
                q.asleep.remove(i);
                q.interrupted.push(id);
            }
        } else {
            q.pending = true;
        }
        FUTEX.1.notify_all();
    }

    /// 0 woken / word changed, 1 interrupted.
    fn wait(word: &AtomicU32, expected: u32) -> u8 {
        let special = SPECIAL.with(|s| s.get());
        let mut q = FUTEX.0.lock().unwrap();
        if word.load(atomic::Ordering::Relaxed) != expected {
            return 0;
        }
        let me = q.next;
        q.next += 1;
        q.asleep.push(me);
        if special {
            if q.pending {
                q.pending = false;
                // Already fired: a sleep that would end at once by the interruption; still
                // queued (a pending signal: EINTR at once) -- treat as interrupted.
                q.asleep.pop();
                return 1;
            }
            q.special_asleep = Some(me);
        }
        loop {
            q = FUTEX.1.wait(q).unwrap();
            if let Some(i) = q.woken.iter().position(|&w| w == me) {
                q.woken.swap_remove(i);
                if special {
                    q.special_asleep = None;
                }
                return 0;
            }
            if let Some(i) = q.interrupted.iter().position(|&w| w == me) {
                q.interrupted.swap_remove(i);
                return 1;
            }
        }
    }

    fn futex_wake_count(_word: *const AtomicU32, n: i32, _shared: bool) -> i64 {
        let mut q = FUTEX.0.lock().unwrap();
        let k = (n.max(0) as usize).min(q.asleep.len());
        let picked: Vec<usize> = q.asleep.drain(..k).collect();
        if let Some(s) = q.special_asleep {
            if picked.contains(&s) {
                q.special_asleep = None;
            }
        }
        q.woken.extend(picked);
        FUTEX.1.notify_all();
        k as i64
    }
    pub fn futex_wake(word: *const AtomicU32, n: i32, shared: bool) {
        let _ = futex_wake_count(word, n, shared);
    }

    /// Timed (special thread only): a time-out that has fired makes it `false` without a sleep (the
    /// real code's `time_left` check), an interrupted sleep is a time-out. Signals: after any return,
    /// if the interruption fired, the handler runs once (as the kernel delivers it on the way out).
    /// A leaver, back from its sleep, runs what the handler wrapper runs and then leaves the lock
    /// call without looking again (`false`: the loop ends without a swap, as a jump out would).
    pub fn futex_wait_until(
        word: &AtomicU32,
        expected: u32,
        until: Option<(libc::clockid_t, &libc::timespec)>,
    ) -> bool {
        let special = SPECIAL.with(|s| s.get());
        if until.is_some() && special && FUTEX.0.lock().unwrap().fired {
            return false;
        }
        let r = wait(word, expected);
        if LEAVER.with(|l| l.get()) {
            super::adaptive::pass_on_owed();
            return false;
        }
        if until.is_some() && r == 1 {
            return false;
        }
        if special && FUTEX.0.lock().unwrap().fired && !HANDLED.with(|h| h.get()) {
            HANDLED.with(|h| h.set(true));
            let h = HANDLER.with(|h| h.borrow_mut().take());
            if let Some(h) = h {
                h();
            }
        }
        true
    }
}

use super::*;
use adaptive::Adaptive;

fn mutex() -> Adaptive {
    Adaptive {
        word: Box::leak(Box::new(sys::atomic::AtomicU32::new(0))),
        owner: Box::leak(Box::new(sys::atomic::AtomicI32::new(0))),
        spins: Box::leak(Box::new(sys::atomic::AtomicU16::new(0))),
    }
}

fn plain(m: Adaptive, data: &Arc<Guarded>) -> thread::JoinHandle<()> {
    let data = data.clone();
    thread::spawn(move || {
        m.lock();
        data.critical();
        m.unlock();
    })
}

/// A timed locker that sleeps, its time-out racing the unlocks' wake-ups, among two plain lockers.
#[test]
fn a_sleeping_timed_locker_racing_its_time_out() {
    model_with_preemptions(2, || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        m.lock(); // held at first, so the others sleep
        let t = {
            let data = data.clone();
            thread::spawn(move || {
                sys::SPECIAL.with(|s| s.set(true));
                let far = libc::timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                };
                if m.lock_until(libc::CLOCK_MONOTONIC, &far) {
                    data.critical();
                    m.unlock();
                }
            })
        };
        let p = plain(m, &data);
        let timer = thread::spawn(sys::fire);
        m.unlock();
        t.join().unwrap();
        p.join().unwrap();
        timer.join().unwrap();
        // A spare mark may stay behind (a timed-out locker's); a hold may not.
        assert_eq!(m.word.load(Ordering::Relaxed) & 1, 0, "left held");
    });
}

/// A locker whose thread takes a signal while it sleeps or as it comes back from a wake-up; the
/// handler takes the same mutex; a plain locker beside it.
#[test]
fn a_signal_handler_takes_the_lock_its_thread_waits_for() {
    model_with_preemptions(2, || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        m.lock();
        let t = {
            let data = data.clone();
            thread::spawn(move || {
                sys::SPECIAL.with(|s| s.set(true));
                let d2 = data.clone();
                sys::HANDLER.with(|h| {
                    *h.borrow_mut() = Some(Box::new(move || {
                        m.lock();
                        d2.critical();
                        m.unlock();
                    }))
                });
                m.lock();
                data.critical();
                m.unlock();
            })
        };
        let p = plain(m, &data);
        let sig = thread::spawn(sys::fire);
        m.unlock();
        t.join().unwrap();
        p.join().unwrap();
        sig.join().unwrap();
        assert_eq!(m.word.load(Ordering::Relaxed) & 1, 0, "left held");
    });
}

/// A locker woken by the unlock that leaves its wait for good (its handler jumps out) after the
/// wrapper's pass-on, with a plain locker asleep behind it: the plain one still gets the lock.
#[test]
fn a_woken_locker_that_leaves_its_wait_passes_its_wake_up_on() {
    model_with_preemptions(2, || {
        let m = mutex();
        let data = Arc::new(Guarded::new());
        m.lock();
        let leaver = thread::spawn(move || {
            sys::LEAVER.with(|l| l.set(true));
            let far = libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            // Taken only if the word was free at a swap; never after a sleep.
            if m.lock_until(libc::CLOCK_MONOTONIC, &far) {
                m.unlock();
            }
        });
        let p = plain(m, &data);
        m.unlock();
        leaver.join().unwrap();
        p.join().unwrap();
        assert_eq!(m.word.load(Ordering::Relaxed) & 1, 0, "left held");
    });
}
