//! Loom models of the sleeping locks: the OSQ with unqueueing, the adaptive mutex (hand-off,
//! sleepers woken, time-outs) and the condvar (notify, requeue, time-out against notify).

use super::*;

/// OSQ heads are exclusive; spinners whose budget runs out unqueue (steps A-C) without breaking the
/// queue: later heads are still handed over and nobody hangs.
#[test]
fn osq_with_unqueue() {
    model(|| {
        let nodes: &'static [OsqNode] = Vec::leak((0..2).map(|_| OsqNode::new()).collect());
        for n in nodes {
            n.register();
        }
        let s = Arc::new((Osq::new(), Guarded::new(), AtomicUsize::new(0)));
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let s = s.clone();
                thread::spawn(move || {
                    let mut budget = crate::clock::SpinBudget::new(0);
                    if unsafe { s.0.lock(&nodes[i], &mut budget) } {
                        s.1.critical();
                        s.2.fetch_add(1, Ordering::Relaxed);
                        unsafe { s.0.unlock(&nodes[i]) };
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(
            s.2.load(Ordering::Relaxed) >= 1,
            "the first spinner is head at once"
        );
        // The queue is empty again: a new spinner is head immediately.
        let mut budget = crate::clock::SpinBudget::new(0);
        assert!(unsafe { s.0.lock(&nodes[0], &mut budget) });
        unsafe { s.0.unlock(&nodes[0]) };
    });
}

/// Spawns `n` threads that each take the mutex once (with `lock`) around a critical section.
fn spawn_mutex_lockers(s: &Arc<(RawMutex, Guarded)>, n: usize) -> Vec<thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let s = s.clone();
            thread::spawn(move || {
                let t = s.0.lock();
                s.1.critical();
                unsafe { s.0.unlock(t) };
            })
        })
        .collect()
}

/// Joins the lockers; `sections` critical sections ran in all, and the word ends at 0 (no flag left
/// behind: WAKING, SPUN, WAITERS, HANDOFF).
fn join_and_check(s: &Arc<(RawMutex, Guarded)>, hs: Vec<thread::JoinHandle<()>>, sections: usize) {
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(s.1.get(), sections);
    assert_eq!(s.0.state_word(), 0, "a flag left behind");
}

/// Mutex: spinning (budget runs out quickly under loom), sleeping, waking, and hand-off (a waiter is
/// "old" from its second look, so it requests hand-off) between three threads.
#[test]
fn mutex_lock_unlock_handoff() {
    model(|| {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let hs = spawn_mutex_lockers(&s, 2);
        let t = s.0.lock();
        s.1.critical();
        unsafe { s.0.unlock_fair(t) };
        join_and_check(&s, hs, 3);
    });
}

/// Mutex: every waiter that queued to sleep (its `fetch_or(WAITERS)` the last look) is woken by a
/// later unlock, though unlocks skip the wake-up when the lock is held again (invariant 4), and woken
/// waiters close the fast path with WAKING while they compete (invariant 7: every waiter's WAKING is
/// withdrawn, so the word ends at 0). Two waiters queue behind the main thread. Preemption bound 2.
#[test]
fn mutex_sleepers_are_woken() {
    mutex_two_sleepers(false)
}

/// As [`mutex_sleepers_are_woken`], the main thread handing the lock over with `unlock_fair`.
#[test]
fn mutex_sleepers_are_woken_after_hand_off() {
    mutex_two_sleepers(true)
}

fn mutex_two_sleepers(fair: bool) {
    model_with_preemptions(2, move || {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let t = s.0.lock();
        let hs = spawn_mutex_lockers(&s, 2);
        s.1.critical();
        if fair {
            unsafe { s.0.unlock_fair(t) };
        } else {
            unsafe { s.0.unlock(t) };
        }
        join_and_check(&s, hs, 3);
    });
}

/// Mutex: a holder that re-locks at once against a spinner, which marks the holds it looks at
/// (SPUN), sees a re-lock between two looks and goes to yielding (every look is "quick" under loom;
/// the way back is the next model's). Exclusion holds, and the word ends at 0: no mark outlives the
/// unlocks and takes that clear it (invariant 8).
#[test]
fn mutex_spinner_against_a_relocking_holder() {
    model(|| {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let hs = spawn_mutex_lockers(&s, 1);
        for _ in 0..2 {
            let t = s.0.lock();
            s.1.critical();
            unsafe { s.0.unlock(t) };
        }
        join_and_check(&s, hs, 3);
    });
}

/// Mutex: a spinner that starts yielding (its hint names the mutex) against a holder that may keep
/// the lock across the spinner's pair of looks (the hold lasts: back to quick looks) or release it
/// (taken at once). Exclusion holds and the word ends at 0.
#[test]
fn mutex_yielding_spinner_against_a_lasting_hold() {
    model(|| {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let t = s.0.lock();
        let s2 = s.clone();
        let h = thread::spawn(move || {
            let me = &s2.0 as *const RawMutex as usize;
            crate::sleep::mutex::loom_relocking::HINT.with(|r| r.set(me));
            let t = s2.0.lock();
            s2.1.critical();
            unsafe { s2.0.unlock(t) };
        });
        s.1.critical();
        // A hold that lasts while the spinner looks (each yield lets it take a step).
        for _ in 0..3 {
            thread::yield_now();
        }
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
    });
}

/// Timed lock: a waiter whose deadline passes leaves the wait list; it either got the lock or holds
/// nothing, and the lock still works afterwards.
#[test]
fn mutex_timeout_removal() {
    model(|| {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let s2 = s.clone();
        let h = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if let Some(t) = s2.0.lock_until(&d) {
                s2.1.critical();
                unsafe { s2.0.unlock(t) };
            }
        });
        let t = s.0.lock();
        s.1.critical();
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
        let t = s.0.try_lock().expect("free after everyone left");
        unsafe { s.0.unlock(t) };
    });
}

/// Condvar: a waiter and a notifier that sets a flag under the mutex and notifies, holding the mutex
/// (`under_mutex`: the waiter is requeued) or after unlocking it (the `condvar` workload's pattern: the
/// waiter is woken directly, `NOTIFIED` and in no list, when the mutex is free). The waiter never misses
/// the flag (the wait registers before releasing the mutex) and the mutex ends free.
/// `watchers`: how many waiters may watch (0: the waiter sleeps at once, so the notification must
/// wake it with a futex wake; 1: it watches, and the notifier's compare-and-swap races its own).
fn condvar_flag(under_mutex: bool, watchers: u32) {
    model(move || {
        let mut cv = RawCondvar::new();
        cv.max_watchers = watchers;
        let s = Arc::new((RawMutex::new(), cv, UnsafeCell::new(false)));
        let s2 = s.clone();
        let h = thread::spawn(move || {
            let t = s2.0.lock();
            s2.2.with_mut(|f| unsafe { *f = true });
            if under_mutex {
                s2.1.notify_one();
            }
            // SAFETY: this thread holds the mutex with `t`.
            unsafe { s2.0.unlock(t) };
            if !under_mutex {
                s2.1.notify_one();
            }
        });
        let mut t = s.0.lock();
        while !s.2.with(|f| unsafe { *f }) {
            // SAFETY: `t` is this thread's acquisition of `s.0`.
            unsafe { s.1.wait_until_impl(&s.0, &mut t, None) };
        }
        // SAFETY: `t` is this thread's acquisition.
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert!(!s.0.is_locked());
    });
}

#[test]
fn condvar_notify() {
    condvar_flag(true, 1);
}

#[test]
fn condvar_notify_after_unlock() {
    condvar_flag(false, 1);
}

/// As [`condvar_notify`], the waiter asleep: requeued onto the mutex, woken by its unlock.
#[test]
fn condvar_notify_sleeper() {
    condvar_flag(true, 0);
}

/// As [`condvar_notify_after_unlock`], the waiter asleep: woken directly with the mutex free.
#[test]
fn condvar_notify_sleeper_after_unlock() {
    condvar_flag(false, 0);
}

/// A mutex, a condvar and a flag it guards, as the `notify_all` models share them.
type Flagged = Arc<(RawMutex, RawCondvar, UnsafeCell<u32>)>;

/// `n` waiters that each lock `s.0`, wait on `s.1` until the flag `s.2` is set, add one to it and
/// unlock. The flag is read and written only with `s.0` held.
fn flag_waiters(s: &Flagged, n: usize) -> Vec<thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let s = s.clone();
            thread::spawn(move || {
                let mut t = s.0.lock();
                // SAFETY (the flag, here and below): `t` holds `s.0`.
                while s.2.with(|f| unsafe { *f }) == 0 {
                    // SAFETY: `t` is this thread's acquisition of `s.0`.
                    unsafe { s.1.wait_until_impl(&s.0, &mut t, None) };
                }
                s.2.with_mut(|f| unsafe { *f += 1 });
                // SAFETY: this thread's acquisition.
                unsafe { s.0.unlock(t) };
            })
        })
        .collect()
}

/// Condvar `notify_all` under the mutex with two waiters (the herd in miniature): both are requeued onto
/// the mutex's sleepers-only list at once, woken one per unlock, and compete with WAKING set. Both see
/// the flag, each exactly once, and the mutex ends with its word at 0 (no WAITERS or WAKING left).
#[test]
fn condvar_notify_all_requeues_two() {
    model(|| {
        // SAFETY (every access to the flag `s.2` below): it is read and written only with `s.0` held.
        let s = Arc::new((RawMutex::new(), RawCondvar::new(), UnsafeCell::new(0u32)));
        let waiters = flag_waiters(&s, 2);
        let t = s.0.lock();
        s.2.with_mut(|f| unsafe { *f = 1 });
        s.1.notify_all();
        // SAFETY: this thread's acquisition.
        unsafe { s.0.unlock(t) };
        for h in waiters {
            h.join().unwrap();
        }
        assert_eq!(s.2.with(|f| unsafe { *f }), 3);
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
    });
}

/// Condvar timeout racing with a notification: the waiter either times out (and is off the condvar's
/// list) or is moved to the mutex and re-locks; the mutex ends free either way.
#[test]
fn condvar_timeout_vs_notify() {
    model(|| {
        let s = Arc::new((RawMutex::new(), RawCondvar::new()));
        let s2 = s.clone();
        let h = thread::spawn(move || {
            s2.1.notify_all();
        });
        let mut t = s.0.lock();
        let d = Deadline::after_polls(1);
        unsafe { s.1.wait_until_impl(&s.0, &mut t, Some(&d)) };
        assert!(s.0.is_locked());
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert!(!s.0.is_locked());
        assert_eq!(s.1.notify_all(), 0);
    });
}

/// A consumer of `s.2` (tokens, under `s.0`): waits until a token is there and takes it. `timed`:
/// the first wait has a deadline (a sleeper from the start: timed waits do not watch), and may time
/// out; later waits have none.
fn condvar_take_token(s: &(RawMutex, RawCondvar, UnsafeCell<u32>), timed: Option<u32>) {
    let mut t = s.0.lock();
    let mut deadline = timed.map(Deadline::after_polls);
    while s.2.with(|n| unsafe { *n }) == 0 {
        // SAFETY: `t` is this thread's acquisition of `s.0`.
        unsafe { s.1.wait_until_impl(&s.0, &mut t, deadline.take().as_ref()) };
        assert!(s.0.is_locked(), "a wait returns with the mutex re-locked");
    }
    s.2.with_mut(|n| unsafe { *n -= 1 });
    // SAFETY: this thread's acquisition.
    unsafe { s.0.unlock(t) };
}

/// Condvar `notify_one` with a sleeper and a watcher (one watcher at most): two tokens posted one at
/// a time, each followed by a `notify_one` after the unlock (the `condvar` workload's pattern). With
/// the sleeper in front, the first notification prefers the watcher (the front sleeper is young), its
/// compare-and-swap racing the watcher's own WATCHING -> SLEEPING; the timed waiter's deadline races
/// the notifications. Every
/// token is taken (no lost wake-up: loom reports a waiter left blocked as a deadlock), the mutex
/// and the condvar end empty, and the watcher's place is given back exactly once (by the notifier
/// that wins its word, or by the watcher whose watch ended unnotified).
#[test]
fn condvar_notify_one_prefers_watcher() {
    condvar_two_consumers(None);
}

/// As [`condvar_notify_one_prefers_watcher`], the first consumer's first wait timed (a deadline of one
/// poll): its time-out races each notification (taken off the condvar's list by itself, or moved by
/// the notifier first and then counted as notified), and it waits again untimed.
#[test]
fn condvar_timeout_vs_notify_one() {
    condvar_two_consumers(Some(1));
}

fn condvar_two_consumers(timed: Option<u32>) {
    // Preemption bound 2: at bound 1 no execution has a notifier win the watcher's word after the
    // watcher queued, and a notifier that kept the watcher's place passed every model.
    model_with_preemptions(2, move || {
        // One watcher at most, so that the second untimed wait sleeps at once.
        let mut cv = RawCondvar::new();
        cv.max_watchers = 1;
        let s = Arc::new((RawMutex::new(), cv, UnsafeCell::new(0u32)));
        let sleeper = {
            let s = s.clone();
            thread::spawn(move || condvar_take_token(&s, timed))
        };
        let watcher = {
            let s = s.clone();
            thread::spawn(move || condvar_take_token(&s, None))
        };
        for _ in 0..2 {
            let t = s.0.lock();
            s.2.with_mut(|n| unsafe { *n += 1 });
            // SAFETY: this thread's acquisition.
            unsafe { s.0.unlock(t) };
            s.1.notify_one();
        }
        sleeper.join().unwrap();
        watcher.join().unwrap();
        assert_eq!(s.2.with(|n| unsafe { *n }), 0);
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
        assert_eq!(s.1.notify_all(), 0, "a waiter left on the condvar");
        // Each watch's place was given back once, by the notifier or by the watcher.
        assert_eq!(s.1.watcher_places(), 0, "a watcher place not given back");
    });
}

/// Condvar `notify_all` after the unlock with three waiters: two watch (the cap is the CPU count, 2
/// under loom), the third sleeps; the notification gives the watchers NOTIFIED (no wake-up), wakes a
/// sleeper directly if the mutex is free and requeues any other onto the mutex. All three see the
/// flag and leave; the mutex word ends at 0. Each waiter may also see the flag before waiting
/// (notify before wait: nothing to miss, as the flag is read under the mutex).
#[test]
fn condvar_notify_all_three_waiters() {
    model(|| {
        let s = Arc::new((RawMutex::new(), RawCondvar::new(), UnsafeCell::new(0u32)));
        // SAFETY (every access to the flag `s.2` below): it is read and written only with `s.0` held.
        let waiters = flag_waiters(&s, 3);
        let t = s.0.lock();
        s.2.with_mut(|f| unsafe { *f = 1 });
        // SAFETY: this thread's acquisition.
        unsafe { s.0.unlock(t) };
        s.1.notify_all();
        for h in waiters {
            h.join().unwrap();
        }
        assert_eq!(
            s.2.with(|f| unsafe { *f }),
            4,
            "each waiter saw the flag once"
        );
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
        assert_eq!(s.1.notify_all(), 0, "a waiter left on the condvar");
        assert_eq!(s.1.watcher_places(), 0, "a watcher place not given back");
    });
}
