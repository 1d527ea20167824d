//! Condvar tests: notification, timeouts, no lost or spurious wake-ups, and requeue behaviour.
#![cfg(not(loom))]

use locklab::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn notify_one_wakes_a_waiter() {
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let p2 = pair.clone();
    let t = thread::spawn(move || {
        let (m, cv) = &*p2;
        let mut ready = m.lock();
        while !*ready {
            cv.wait(&mut ready);
        }
    });
    thread::sleep(Duration::from_millis(10));
    let (m, cv) = &*pair;
    *m.lock() = true;
    cv.notify_one();
    t.join().unwrap();
}

#[test]
fn notify_without_waiters_reports_none() {
    let cv = Condvar::new();
    assert!(!cv.notify_one());
    assert_eq!(cv.notify_all(), 0);
}

#[test]
fn wait_while_and_notify_all_count() {
    const N: usize = 6;
    let pair = Arc::new((Mutex::new(0usize), Condvar::new()));
    let waiting = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..N)
        .map(|_| {
            let (p, waiting) = (pair.clone(), waiting.clone());
            thread::spawn(move || {
                let (m, cv) = &*p;
                let mut g = m.lock();
                waiting.fetch_add(1, Ordering::SeqCst);
                cv.wait_while(&mut g, |v| *v == 0);
                *g += 1;
            })
        })
        .collect();
    while waiting.load(Ordering::SeqCst) < N {
        thread::yield_now();
    }
    let (m, cv) = &*pair;
    let notified = {
        let mut g = m.lock();
        *g = 1;
        // No spurious wake-ups: every one of the N is on the condvar now (each registered before
        // releasing the mutex, which we hold), so notify_all reports exactly N.
        cv.notify_all()
    };
    assert_eq!(notified, N);
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*m.lock(), 1 + N);
}

#[test]
fn wait_for_times_out() {
    let m = Mutex::new(());
    let cv = Condvar::new();
    let mut g = m.lock();
    let t = Instant::now();
    let r = cv.wait_for(&mut g, Duration::from_millis(25));
    assert!(r.timed_out());
    assert!(t.elapsed() >= Duration::from_millis(25));
    // the mutex is held again after a timeout
    assert!(m.is_locked());
    drop(g);
    assert!(!m.is_locked());
    // and a timed-out waiter left the condvar's list
    assert!(!cv.notify_one());
}

#[test]
fn wait_until_notified_before_deadline() {
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let p2 = pair.clone();
    let t = thread::spawn(move || {
        let (m, cv) = &*p2;
        let mut g = m.lock();
        let r = cv.wait_while_for(&mut g, |ready| !*ready, Duration::from_secs(20));
        (r.timed_out(), *g)
    });
    thread::sleep(Duration::from_millis(10));
    {
        let (m, cv) = &*pair;
        *m.lock() = true;
        cv.notify_all();
    }
    assert_eq!(t.join().unwrap(), (false, true));
}

/// A producer/consumer ring with a bounded buffer and two condvars: no message lost or duplicated,
/// with more threads than cores, notifying sometimes with and sometimes without the mutex held.
#[test]
fn producer_consumer_stress() {
    const PRODUCERS: usize = 4;
    const CONSUMERS: usize = 4;
    const PER: usize = if cfg!(miri) { 10 } else { 5_000 };
    struct Q {
        buf: Mutex<std::collections::VecDeque<usize>>,
        not_empty: Condvar,
        not_full: Condvar,
    }
    let q = Arc::new(Q {
        buf: Mutex::new(Default::default()),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
    });
    let sum = Arc::new(AtomicUsize::new(0));
    let mut hs = vec![];
    for p in 0..PRODUCERS {
        let q = q.clone();
        hs.push(thread::spawn(move || {
            for i in 0..PER {
                let mut b = q.buf.lock();
                q.not_full.wait_while(&mut b, |b| b.len() >= 8);
                b.push_back(p * PER + i);
                if i % 2 == 0 {
                    q.not_empty.notify_one();
                } else {
                    drop(b);
                    q.not_empty.notify_one();
                }
            }
        }));
    }
    for _ in 0..CONSUMERS {
        let (q, sum) = (q.clone(), sum.clone());
        hs.push(thread::spawn(move || {
            for _ in 0..PER {
                let mut b = q.buf.lock();
                loop {
                    if let Some(v) = b.pop_front() {
                        sum.fetch_add(v, Ordering::Relaxed);
                        break;
                    }
                    // timed waits mixed in: a timeout must not lose a notification for someone else
                    q.not_empty.wait_for(&mut b, Duration::from_micros(200));
                }
                q.not_full.notify_one();
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    let n = PRODUCERS * PER;
    assert_eq!(sum.load(Ordering::Relaxed), n * (n - 1) / 2);
}

#[test]
fn waiting_with_two_mutexes_panics() {
    let cv = Arc::new(Condvar::new());
    let m1 = Arc::new(Mutex::new(()));
    let (cv2, m1b) = (cv.clone(), m1.clone());
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started2 = started.clone();
    let t = thread::spawn(move || {
        let mut g = m1b.lock();
        started2.store(true, Ordering::SeqCst);
        // Long enough to be still waiting when the main thread misuses the condvar even under Miri on
        // a loaded machine; the notify_all below ends it at once.
        cv2.wait_for(&mut g, Duration::from_secs(20));
    });
    while !started.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    // The helper registers on the condvar before it releases m1; once we can lock m1, it is waiting.
    drop(m1.lock());
    let m2 = Mutex::new(());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut g = m2.lock();
        cv.wait_for(&mut g, Duration::from_millis(1));
    }));
    let msg = r.expect_err("waiting with a second mutex must panic");
    let msg = msg
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| msg.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(msg.contains("two different mutexes"), "{msg}");
    // The misuse left the condvar and both mutexes usable.
    cv.notify_all();
    t.join().unwrap();
    assert!(!m2.is_locked() && !m1.is_locked());
}

/// parking_lot's `webkit_queue_test` shape on our types: producers and consumers on one `Mutex` and two
/// `Condvar`s with `notify_all`, a one-slot queue. A liveness bound, not a speed target: before the
/// condvar fix it moved ~200 messages/s (the woken waiter spun on the wait lock its waker held).
#[test]
fn webkit_queue_one_slot_notify_all() {
    use std::collections::VecDeque;
    const PRODUCERS: usize = 10;
    const CONSUMERS: usize = 10;
    let total: usize = if cfg!(miri) { 200 } else { 100_000 };
    let per_producer = total / PRODUCERS;
    struct Q {
        items: Mutex<(VecDeque<usize>, usize)>, // (queue, producers still running)
        not_empty: Condvar,
        not_full: Condvar,
    }
    let q = Arc::new(Q {
        items: Mutex::new((VecDeque::new(), PRODUCERS)),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
    });
    let t0 = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || {
                for i in 0..per_producer {
                    let mut g = q.items.lock();
                    while !g.0.is_empty() {
                        q.not_full.wait(&mut g);
                    }
                    g.0.push_back(i);
                    q.not_empty.notify_all();
                }
                let mut g = q.items.lock();
                g.1 -= 1;
                q.not_empty.notify_all();
            })
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || {
                let mut got = 0usize;
                let mut g = q.items.lock();
                loop {
                    if g.0.pop_front().is_some() {
                        got += 1;
                        q.not_full.notify_all();
                    } else if g.1 == 0 {
                        return got;
                    } else {
                        q.not_empty.wait(&mut g);
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let received: usize = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(
        received,
        per_producer * PRODUCERS,
        "every message consumed once"
    );
    if !cfg!(miri) {
        // A liveness bound: 60 s, or `LOCKLAB_STRESS_BOUND_S` (the ThreadSanitizer run sets 600).
        let bound = std::env::var("LOCKLAB_STRESS_BOUND_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60);
        assert!(
            t0.elapsed() < Duration::from_secs(bound),
            "100,000 messages took {:?} (liveness bound: {bound} s)",
            t0.elapsed()
        );
    }
}

/// The calling thread's CPU time (ns).
#[cfg(all(target_os = "linux", not(miri)))]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread to `cpu` (`None`: every CPU of the first two).
#[cfg(all(target_os = "linux", not(miri), not(feature = "lockdep")))]
fn pin_to(cpu: Option<usize>) {
    // SAFETY: a zeroed set is valid; the set outlives the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        match cpu {
            Some(c) => libc::CPU_SET(c, &mut set),
            None => (0..2).for_each(|c| libc::CPU_SET(c, &mut set)),
        }
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A waiter notified every 3 ms (a worker waiting for rare jobs): its watch before sleeping may be
/// renewed only shortly after the condvar was busy, not for the whole 1 ms cap, so each wait costs
/// it well under a millisecond of CPU (the cap renewed on every fast yield cost ~750 us a wait).
#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn an_idle_waiter_does_not_spin_out_the_renewal_cap() {
    const ROUNDS: usize = 60;
    let state = Arc::new((Mutex::new(0usize), Condvar::new()));
    let s = state.clone();
    let waiter = thread::spawn(move || {
        let (m, cv) = &*s;
        let cpu0 = thread_cpu_ns();
        let mut g = m.lock();
        for i in 1..=ROUNDS {
            while *g < i {
                cv.wait(&mut g);
            }
        }
        drop(g);
        thread_cpu_ns() - cpu0
    });
    let (m, cv) = &*state;
    for i in 1..=ROUNDS {
        thread::sleep(Duration::from_millis(3));
        *m.lock() = i;
        cv.notify_one();
    }
    let per_wait_us = waiter.join().unwrap() / ROUNDS as u64 / 1000;
    assert!(
        per_wait_us < 250,
        "each idle wait spent {per_wait_us} us of CPU watching"
    );
}

/// A real-time (SCHED_FIFO) waiter and an ordinary notifier on one CPU: the waiter's yields return
/// at once although the notifier waits for that CPU, so its watch must not be renewed (it would
/// keep the notifier off the CPU for up to 1 ms a round). Skipped without the privilege. Not with
/// the lockdep feature: its longer critical sections let the real-time thread preempt the notifier
/// while it holds the mutex, and the real-time thread's spin for that mutex (the Mutex's, not the
/// condvar's) then sets the round's time.
#[cfg(all(target_os = "linux", not(miri), not(feature = "lockdep")))]
#[test]
fn a_real_time_waiter_does_not_keep_its_notifier_off_the_cpu() {
    use std::sync::atomic::AtomicBool;
    const ROUNDS: usize = 100;
    let state = Arc::new((Mutex::new(0usize), Condvar::new()));
    let allowed = Arc::new(AtomicBool::new(true));
    let (s, a) = (state.clone(), allowed.clone());
    let rt = thread::spawn(move || {
        pin_to(Some(0));
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: a valid parameter block; 0 is this thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
            a.store(false, Ordering::Relaxed);
            return;
        }
        let (m, cv) = &*s;
        let mut g = m.lock();
        for i in 0..ROUNDS {
            while *g != 2 * i + 1 {
                cv.wait(&mut g);
            }
            *g += 1;
            cv.notify_one();
        }
    });
    pin_to(Some(0));
    let (m, cv) = &*state;
    let start = Instant::now();
    let mut g = m.lock();
    for i in 0..ROUNDS {
        if !allowed.load(Ordering::Relaxed) {
            break;
        }
        *g = 2 * i + 1;
        cv.notify_one();
        while *g != 2 * i + 2 && allowed.load(Ordering::Relaxed) && !rt.is_finished() {
            cv.wait_for(&mut g, Duration::from_millis(10));
        }
    }
    drop(g);
    let elapsed = start.elapsed();
    pin_to(None);
    rt.join().unwrap();
    if !allowed.load(Ordering::Relaxed) {
        eprintln!("skipped: no permission for SCHED_FIFO");
        return;
    }
    let per_round_us = elapsed.as_micros() / ROUNDS as u128;
    assert!(
        per_round_us < 400,
        "{per_round_us} us a round: the real-time waiter's watch kept the notifier off its CPU"
    );
}
