//! Locks used from thread-local destructors that run after the thread's slot was returned (issue 8,
//! defects 5 and 6): the thread then has no queue nodes and no private reader counter, and every lock
//! must still be correct. `late` arranges it: a thread-local registered before the thread's first lock
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

thread_local! {
    static LATE: Late = const { Late(RefCell::new(None)) };
}

/// Runs `early` on a new thread (which registers its slot), then `at_exit` from a thread-local
/// destructor after the slot is gone. Returns the thread's handle.
pub(crate) fn late(
    early: impl FnOnce() + Send + 'static,
    at_exit: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // Registered before anything takes a slot, so it is destroyed after the slot's releaser.
        LATE.with(|l| *l.0.borrow_mut() = Some(Box::new(at_exit)));
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
    let l: &'static crate::QueuedSpinLock<()> = Box::leak(Box::new(crate::QueuedSpinLock::new(())));
    exclusion_with_slotless_threads(move |f| {
        let _g = l.lock();
        f()
    });
}

#[test]
fn mutex_from_late_destructors() {
    let l: &'static crate::Mutex<()> = Box::leak(Box::new(crate::Mutex::new(())));
    exclusion_with_slotless_threads(move |f| {
        let _g = l.lock();
        f()
    });
}

#[test]
fn rwsem_from_late_destructors() {
    let l: &'static crate::RwSem<()> = Box::leak(Box::new(crate::RwSem::new(())));
    exclusion_with_slotless_threads(move |f| {
        let _g = l.write();
        f()
    });
}

#[test]
fn mcs_from_late_destructors() {
    let l: &'static crate::McsLock<()> = Box::leak(Box::new(crate::McsLock::new(())));
    exclusion_with_slotless_threads(move |f| {
        let _g = l.lock();
        f()
    });
}
