//! `fork()` while the sleeping locks have waiters: the child has only the forking thread, so every
//! waiter in an inherited wait list is a ghost. The child must drop those lists (the fork epoch,
//! `sys::fork_epoch`) instead of handing the lock to a ghost while its own threads sleep behind them.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `body` as the child of a fork and exits: 0 if it returns, 1 if it panics.
fn child_exits(body: impl FnOnce()) -> ! {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_ok();
    // SAFETY: ends the child without running the parent's exit handlers.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// Runs `body` in a child of `fork` whose alarm kills it after `alarm_secs`, and returns the child's
/// wait status: exited 0 if `body` returned `true`, 3 if `false`, 1 if it panicked; killed by
/// SIGALRM if it hung. For tests anywhere in the crate.
pub(crate) fn status_of_child(alarm_secs: u32, body: impl FnOnce() -> bool) -> libc::c_int {
    // SAFETY: the child runs `body` only and `_exit`s; the alarm kills it if it hangs.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: async-signal-safe system calls.
        unsafe { libc::alarm(alarm_secs) };
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(true) => 0,
            Ok(false) => 3,
            Err(_) => 1,
        };
        // SAFETY: ends the child without running the parent's exit handlers or test harness.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: our own child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

/// Whether a wait status is "exited 0".
pub(crate) fn exited_0(status: libc::c_int) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Waits up to 30 s for the child `pid`; fails on a hang or a non-zero status.
fn child_succeeds(pid: libc::pid_t) {
    assert!(pid > 0, "fork failed");
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our child's pid and a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child failed: status {status}"
            );
            return;
        }
        if start.elapsed() > Duration::from_secs(30) {
            // SAFETY: our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child hung: its threads wait behind its parent's (gone) waiters");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The parent forks while holding a `Mutex` with two sleepers queued. In the child (which holds the
/// mutex too: the forking thread's copy), the unlock and two new threads' contention must never wait
/// behind the ghosts.
#[test]
fn mutex_waiters_do_not_survive_fork() {
    let m = Arc::new(crate::Mutex::new(0u64));
    let held = m.lock();
    let sleepers: Vec<_> = (0..2)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || *m.lock() += 1)
        })
        .collect();
    // Long enough for both to give up spinning and sleep in the list (spinning is capped well below).
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: the child runs `child_exits`' body only.
    match unsafe { libc::fork() } {
        0 => child_exits(|| {
            // SAFETY: the flag is read only.
            assert!(
                unsafe { m.raw() }.has_waiters(),
                "the parent's sleepers are queued"
            );
            drop(held);
            // The unlock found the list from before the fork and dropped it: nobody to wake, and no
            // waiter flag left for the child's own lockers to queue behind.
            // SAFETY: as above.
            assert!(
                !unsafe { m.raw() }.has_waiters(),
                "the parent's waiters are gone"
            );
            let m2 = m.clone();
            let t = std::thread::spawn(move || {
                for _ in 0..2000 {
                    *m2.lock() += 1;
                }
            });
            for _ in 0..2000 {
                *m.lock() += 1;
            }
            t.join().unwrap();
            assert_eq!(*m.lock(), 4000);
        }),
        pid => {
            drop(held);
            child_succeeds(pid);
        }
    }
    for s in sleepers {
        s.join().unwrap();
    }
    assert_eq!(*m.lock(), 2);
}

/// The same for `RwSem`: a writer forks while two writers sleep behind it.
#[test]
fn rwsem_waiters_do_not_survive_fork() {
    let l = Arc::new(crate::RwSem::new(0u64));
    let held = l.write();
    let sleepers: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || *l.write() += 1)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: the child runs `child_exits`' body only.
    match unsafe { libc::fork() } {
        0 => child_exits(|| {
            drop(held);
            let l2 = l.clone();
            let t = std::thread::spawn(move || {
                for _ in 0..2000 {
                    *l2.write() += 1;
                }
            });
            for _ in 0..2000 {
                *l.write() += 1;
            }
            t.join().unwrap();
            assert_eq!(*l.read(), 4000);
        }),
        pid => {
            drop(held);
            child_succeeds(pid);
        }
    }
    for s in sleepers {
        s.join().unwrap();
    }
    assert_eq!(*l.read(), 2);
}

/// A woken waiter caught by the fork between its wake-up and its take: WAKING is on the free word,
/// and the thread that would take it off is not in the child. The child's first slow lock must
/// clear it, or every later lock there fails its fast path (the OSQ head's take keeps WAKING).
#[test]
fn a_woken_waiters_mark_does_not_survive_fork() {
    let m = Arc::new(crate::Mutex::new(0u64));
    // SAFETY: the word's flags are set and read only, as a woken waiter would.
    let raw = unsafe { m.raw() };
    // The parent's list was in use in the parent's epoch (a waiter queued and was woken).
    let _ = raw.list_lock().lock();
    // SAFETY: taken just above.
    unsafe { raw.list_lock().unlock() };
    raw.mark_waking();
    let status = crate::fork_tests::status_of_child(30, || {
        *m.lock() += 1; // the slow way: WAKING fails the fast path
        if raw.word() != 0 {
            return false; // the parent's WAKING is still there
        }
        // The unlock leaves WAKING alone: a free word of 0 means the lock cleared it.
        *m.lock() == 1 && raw.word() == 0
    });
    assert!(
        exited_0(status),
        "the child kept the parent's WAKING: status {status}"
    );
}

/// The same with real waiters: forks made while three threads contend for a mutex (sleeping,
/// woken, spinning at the fork). In each child where no vanished thread holds it, one lock and
/// unlock must leave the word free of every parent's flag.
#[test]
fn no_parents_flag_survives_a_contended_fork() {
    let m = Arc::new(crate::Mutex::new(0u64));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (m, stop) = (m.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut g = m.lock();
                    *g += 1;
                    if *g % 8 == 0 {
                        // Long enough now and then for the others to fall asleep.
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    drop(g);
                    // Free most of the time, so most forks find it so.
                    for _ in 0..2000 {
                        std::hint::spin_loop();
                    }
                }
            })
        })
        .collect();
    // SAFETY: the flags are read only.
    let raw = unsafe { m.raw() };
    let mut checked = 0;
    for _ in 0..400 {
        let status = crate::fork_tests::status_of_child(30, || {
            // Held by a thread the child does not have: nothing to check (it stays held).
            let Some(g) = m.try_lock_for(Duration::from_millis(5)) else {
                // SAFETY: ends the child at once, as `status_of_child` does.
                unsafe { libc::_exit(4) };
            };
            drop(g);
            let _ = *m.lock();
            raw.word() == 0
        });
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 4 {
            continue;
        }
        assert!(
            exited_0(status),
            "a parent's flag stayed in the child: status {status}"
        );
        checked += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        checked >= 40,
        "only {checked} children found the mutex free"
    );
}

/// A thread that waits on `state`'s condvar until its flag is set.
fn spawn_flag_waiter(
    state: &Arc<(crate::Mutex<bool>, crate::Condvar)>,
) -> std::thread::JoinHandle<()> {
    let s = state.clone();
    std::thread::spawn(move || {
        let (m, cv) = &*s;
        let mut go = m.lock();
        while !*go {
            cv.wait(&mut go);
        }
    })
}

/// A condvar with a waiter, and its internal lock held by another thread, at the fork: in the child
/// neither exists. The child's notifications must count none of the parent's waiters, must not spin
/// on the vanished holder's lock, and the condvar must work for the child's own threads.
#[test]
fn condvar_waiters_do_not_survive_fork() {
    let state = Arc::new((crate::Mutex::new(false), crate::Condvar::new()));
    let waiter = spawn_flag_waiter(&state);
    // Long enough for the waiter to queue and give up watching.
    std::thread::sleep(Duration::from_millis(100));
    let (m, cv) = &*state;
    let raw = cv.raw();
    let _ = raw.list_lock().lock();
    let status = crate::fork_tests::status_of_child(30, || {
        if cv.notify_all() != 0 {
            return false; // the parent's waiter was counted
        }
        let t = spawn_flag_waiter(&state);
        loop {
            *m.lock() = true;
            if cv.notify_all() == 1 || t.is_finished() {
                break;
            }
            std::thread::yield_now();
        }
        t.join().is_ok()
    });
    // SAFETY: taken above by this thread.
    unsafe { raw.list_lock().unlock() };
    assert!(
        exited_0(status),
        "the child saw the parent's waiter: status {status}"
    );
    *m.lock() = true;
    cv.notify_all();
    waiter.join().unwrap();
}

/// A thread caught holding a mutex's internal list lock at the fork (an unlock waking a waiter, a
/// waiter queueing): the child has no such thread, and must take the list lock over instead of
/// spinning on it forever once its own threads contend.
#[test]
fn a_list_lock_held_at_fork_is_taken_over() {
    let m = Arc::new(crate::Mutex::new(0u64));
    // SAFETY: only the list lock is touched, as an unlock's wake-up would.
    let raw = unsafe { m.raw() };
    let _ = raw.list_lock().lock();
    // SAFETY: the child runs `child_exits`' body only.
    match unsafe { libc::fork() } {
        0 => child_exits(|| {
            let m2 = m.clone();
            let t = std::thread::spawn(move || {
                for _ in 0..20_000 {
                    *m2.lock() += 1;
                }
            });
            for _ in 0..20_000 {
                let mut g = m.lock();
                *g += 1;
                // Hold it a little, so the other thread must sleep (and take the list lock).
                std::thread::yield_now();
                drop(g);
            }
            t.join().unwrap();
            assert_eq!(*m.lock(), 40_000);
        }),
        pid => {
            // SAFETY: taken above by this thread.
            unsafe { raw.list_lock().unlock() };
            child_succeeds(pid);
        }
    }
}

/// The parent's pid, and the child the signal handler below forked.
static PARENT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static FORKED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn fork_in_handler(_: libc::c_int) {
    // SAFETY: fork is async-signal-safe; the child returns into the interrupted wait.
    let pid = unsafe { libc::fork() };
    if pid > 0 {
        FORKED.store(pid, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A thread in a timed condvar wait forks from a signal handler: in the child it is the one thread,
/// but its node was in the parent's list, which the child drops. Its wait must time out there without
/// touching that list (whose other nodes are the parent's threads' frames) and re-lock the mutex.
#[test]
fn a_wait_forked_from_its_signal_handler_times_out_in_the_child() {
    // SAFETY: getpid has no preconditions.
    PARENT.store(
        unsafe { libc::getpid() },
        std::sync::atomic::Ordering::SeqCst,
    );
    let state = Arc::new((crate::Mutex::new(0u32), crate::Condvar::new()));
    // Another waiter, so the list has a node of a thread the child does not have.
    let s = state.clone();
    let other = std::thread::spawn(move || {
        let (m, cv) = &*s;
        let mut g = m.lock();
        while *g == 0 {
            cv.wait(&mut g);
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    let s = state.clone();
    let waiter = std::thread::spawn(move || {
        let (m, cv) = &*s;
        let mut g = m.lock();
        let timed_out = cv.wait_for(&mut g, Duration::from_millis(400)).timed_out();
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != PARENT.load(std::sync::atomic::Ordering::SeqCst) {
            // The child: the wait must have timed out, with the mutex held again.
            drop(g);
            let relocked = m.try_lock().is_some();
            // And the condvar works for the child's own waiter (a removal from the dropped list
            // would have left the list's tail at a parent's node, and this waiter unreachable).
            let s2 = s.clone();
            let t = std::thread::spawn(move || {
                let (m, cv) = &*s2;
                let mut g = m.lock();
                while *g != 7 {
                    cv.wait(&mut g);
                }
            });
            *m.lock() = 7;
            let start = Instant::now();
            while !t.is_finished() && start.elapsed() < Duration::from_secs(2) {
                cv.notify_all();
                std::thread::yield_now();
            }
            let served = t.is_finished();
            // SAFETY: ends the child at once.
            unsafe {
                libc::_exit(if timed_out && relocked && served {
                    0
                } else {
                    5
                })
            };
        }
        timed_out
    });
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: a handler that only forks and stores; installed before the signal is sent.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = fork_in_handler as *const () as usize;
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
        libc::pthread_kill(
            std::os::unix::thread::JoinHandleExt::as_pthread_t(&waiter),
            libc::SIGUSR2,
        );
    }
    let start = Instant::now();
    while FORKED.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the handler did not fork"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child_succeeds(FORKED.load(std::sync::atomic::Ordering::SeqCst));
    assert!(waiter.join().unwrap(), "the parent's wait times out too");
    let (m, cv) = &*state;
    *m.lock() = 1;
    cv.notify_all();
    other.join().unwrap();
}
