//! Locks used from thread-local destructors that run after the thread's slot was returned: the
//! thread then has no queue nodes and no private reader counter, and every lock must still be
//! correct. `late` arranges it: a thread-local registered before the thread's first lock
//! use has its destructor run after the slot's releaser (destructors run in reverse order of
//! registration), and each test asserts that the slot really is gone there.

use crate::thread_slot;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

type Job = Box<dyn FnOnce()>;

struct Late(RefCell<Option<Job>>);

impl Drop for Late {
    fn drop(&mut self) {
        assert!(
            thread_slot::current().is_none(),
            "the late destructor runs after the slot was returned"
        );
        if let Some(job) = self.0.borrow_mut().take() {
            job();
        }
    }
}

/// Where the late job waits for thread exit: a POSIX key created after the slots' exit key, so its
/// destructor runs after the slot was returned (glibc runs key destructors in key order, after every
/// Rust thread-local destructor).
#[cfg(all(unix, not(miri)))]
fn set_late(job: Job) {
    use std::sync::OnceLock;
    extern "C" fn run(p: *mut libc::c_void) {
        // SAFETY: `p` is the `Box<Late>` leaked below, handed to this destructor once.
        drop(unsafe { Box::from_raw(p.cast::<Late>()) });
    }
    static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
    let key = *KEY.get_or_init(|| {
        thread_slot::prepare();
        let mut key = 0;
        // SAFETY: a valid out-pointer and a destructor that takes the value set below.
        assert_eq!(unsafe { libc::pthread_key_create(&mut key, Some(run)) }, 0);
        key
    });
    let late = Box::into_raw(Box::new(Late(RefCell::new(Some(job)))));
    // SAFETY: our key; the value is a leaked box the destructor takes back.
    assert_eq!(unsafe { libc::pthread_setspecific(key, late.cast()) }, 0);
}

/// Where the late job waits for thread exit: a thread-local registered before the slot's releaser,
/// so destroyed after it (destructors run in reverse order of registration).
#[cfg(not(all(unix, not(miri))))]
fn set_late(job: Job) {
    thread_local! {
        static LATE: Late = const { Late(RefCell::new(None)) };
    }
    LATE.with(|l| *l.0.borrow_mut() = Some(job));
}

/// Runs `early` on a new thread (which registers its slot), then `at_exit` from a thread-exit
/// destructor after the slot is gone. Returns the thread's handle.
pub(crate) fn late(
    early: impl FnOnce() + Send + 'static,
    at_exit: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        set_late(Box::new(at_exit));
        assert!(thread_slot::current().is_some());
        early();
    })
}

/// Mutual exclusion from threads with slots and from late destructors at once: `with_lock(f)` runs
/// `f` holding the lock under test.
fn exclusion_with_slotless_threads(with_lock: impl Fn(&dyn Fn()) + Send + Sync + 'static) {
    let n = if cfg!(miri) { 10 } else { 2_000 };
    let threads = if cfg!(miri) { 2 } else { 6 };
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let section = {
        let (inside, done) = (inside.clone(), done.clone());
        Arc::new(move || {
            for _ in 0..n {
                with_lock(&|| {
                    assert_eq!(
                        inside.fetch_add(1, Ordering::Relaxed),
                        0,
                        "two threads inside"
                    );
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::Relaxed);
                });
            }
            done.fetch_add(1, Ordering::Relaxed);
        })
    };
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (a, b) = (section.clone(), section.clone());
            late(move || a(), move || b())
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(
        done.load(Ordering::Relaxed),
        2 * threads,
        "every section ran, with and without a slot"
    );
}

#[test]
fn qspinlock_from_late_destructors() {
    static L: crate::QueuedSpinLock<()> = crate::QueuedSpinLock::new(());
    let l = &L;
    exclusion_with_slotless_threads(move |f| {
        let _g = l.lock();
        f()
    });
}

#[test]
fn mutex_from_late_destructors() {
    static L: crate::Mutex<()> = crate::Mutex::new(());
    let l = &L;
    exclusion_with_slotless_threads(move |f| {
        let _g = l.lock();
        f()
    });
}

#[test]
fn rwsem_from_late_destructors() {
    static L: crate::RwSem<()> = crate::RwSem::new(());
    let l = &L;
    exclusion_with_slotless_threads(move |f| {
        let _g = l.write();
        f()
    });
}

#[test]
fn mcs_from_late_destructors() {
    static L: crate::McsLock<()> = crate::McsLock::new(());
    let l = &L;
    exclusion_with_slotless_threads(move |f| {
        let _g = l.lock();
        f()
    });
}

/// Installs `handler` for `sig` (process-wide, `SA_RESTART`). For the signal-handler tests.
#[cfg(not(miri))]
pub(crate) fn install_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: `sa` is a zeroed, then filled `sigaction`; `handler` is an `extern "C" fn(c_int)`, the
    // shape `sa_sigaction` takes without SA_SIGINFO; the old action is not asked for.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, core::ptr::null_mut()), 0);
    }
}

/// A thread's OSQ node is claimed for one spin; a second claim on the same thread
/// (a signal handler locking a `Mutex` or `RwSem` while its thread spins in an OSQ) gets none and so
/// skips spinning instead of linking the node into a second queue.
#[test]
fn osq_node_is_claimed_once_per_thread() {
    let first = crate::sleep::mutex::osq_node().expect("a slot");
    assert!(
        crate::sleep::mutex::osq_node().is_none(),
        "the node is in use"
    );
    drop(first);
    assert!(crate::sleep::mutex::osq_node().is_some(), "given back");
}

/// With real signals: a handler takes a contended `Mutex` while the interrupted
/// thread itself is spinning (or sleeping) on another contended `Mutex`. Both locks stay exclusive and
/// nothing hangs.
#[test]
#[cfg(not(miri))]
fn mutex_in_a_signal_handler_while_spinning() {
    use std::sync::atomic::AtomicBool;
    static A: crate::Mutex<u64> = crate::Mutex::new(0);
    static B: crate::Mutex<u64> = crate::Mutex::new(0);
    static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn handler(_: libc::c_int) {
        // A handler must leave errno as it found it (the futex calls below may set it).
        // SAFETY: `__errno_location` returns this thread's errno slot.
        let errno = unsafe { *libc::__errno_location() };
        // The victim never holds B, and nobody holds B while waiting for A: this cannot wait for the
        // section it interrupted. It may spin in B's OSQ while its thread is in A's.
        *B.lock() += 1;
        IN_HANDLER.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
    install_handler(libc::SIGUSR1, handler);
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let contenders: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    *A.lock() += 1;
                    *B.lock() += 1;
                    n += 2;
                }
                n
            })
        })
        .collect();
    let victim = std::thread::spawn(move || {
        // A thread's first slow-path lock use registers its slot (which allocates): never from a
        // handler (documented). Register it before the signals start.
        assert!(thread_slot::current().is_some());
        *A.lock() += 1;
        let me = unsafe { libc::pthread_self() } as usize;
        let kicker = std::thread::spawn(move || {
            // Sleep, not yield, between signals: on a loaded machine a yield hands the CPU to every
            // other runnable thread (20,000 yields took 40 s under CI load).
            for _ in 0..5_000 {
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR1) };
                std::thread::sleep(std::time::Duration::from_micros(10));
            }
        });
        let mut n = 1u64;
        while !kicker.is_finished() {
            *A.lock() += 1;
            n += 1;
        }
        kicker.join().unwrap();
        n
    });
    let mine = victim.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let theirs: u64 = contenders.into_iter().map(|h| h.join().unwrap()).sum();
    let handled = IN_HANDLER.load(Ordering::Relaxed) as u64;
    assert!(handled > 0);
    // Every increment of A and B is accounted for: no two holders ever raced on them.
    assert_eq!(*A.lock() + *B.lock(), mine + theirs + handled);
}
