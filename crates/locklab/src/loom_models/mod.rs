//! Loom models of every protocol in the crate, and of the preload library's adaptive mutex (its
//! source included unchanged, `preload_adaptive`). Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=1 cargo test -p locklab --release --lib loom_models`
//! (`.ci/run` does; the run time is noted there).
//!
//! Loom 0.7 and test-and-set: a `swap(true)` spin on a held lock makes loom keep reading the
//! spinner's own `true` after the holder's `store(false)` (a two-thread swap spinlock with
//! `yield_now` exceeds the branch limit at preemption bound 1; the same lock on compare-exchange
//! passes). Our spinlocks (`RawTasLock`) therefore use a compare-exchange under loom (one
//! locked instruction either way on hardware, where it keeps `xchg`); that made the condvar-timeout
//! and RwSem fair-unlock models run, which had stayed ignored as "spinning on a list lock loom never
//! shows released". Futex sleeps are modelled by a loom `Mutex`/`Condvar` pair (`sys`), so loom sees
//! a sleeper as blocked rather than spinning. `LOOM_MAX_BRANCHES` overrides the branch limit.
//!
//! Protected data lives in `loom::cell::UnsafeCell`, so loom reports any access that the lock's
//! Acquire/Release edges fail to order, besides the explicit "two inside" checks. Spin budgets, waiter
//! ages and deadlines are countdowns under loom (see `clock.rs`), so the give-up paths (OSQ unqueue,
//! hand-off request, timeout removal) are explored, not just the happy path.

use crate::clock::Deadline;
use crate::sleep::condvar::RawCondvar;
use crate::sleep::mutex::RawMutex;
use crate::sleep::osq::{Osq, OsqNode};
use crate::spin::mcs::{McsNode, RawMcsLock};
use crate::spin::qspinlock::{RawQueuedSpinLock, encode_tail};
use crate::spin::ticket::RawTicketLock;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_with_preemptions(1, f)
}

/// `model` with at least `bound` preemptions (for the models whose bug needs more than one).
fn model_with_preemptions(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.unwrap_or(1).max(bound));
    // Spin-waits are yields under loom, and each is a branch: allow long waits.
    b.max_branches = std::env::var("LOOM_MAX_BRANCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    b.check(f);
}

/// Data under a lock, with an overlap detector on top of loom's own race detection.
struct Guarded {
    value: UnsafeCell<usize>,
    inside: AtomicUsize,
}

impl Guarded {
    fn new() -> Self {
        Guarded {
            value: UnsafeCell::new(0),
            inside: AtomicUsize::new(0),
        }
    }
    fn critical(&self) {
        assert_eq!(
            self.inside.fetch_add(1, Ordering::Relaxed),
            0,
            "two threads inside"
        );
        self.value.with_mut(|v| unsafe { *v += 1 });
        self.inside.fetch_sub(1, Ordering::Relaxed);
    }
    fn get(&self) -> usize {
        self.value.with(|v| unsafe { *v })
    }
}

/// A spinlock with `lock`/`try_lock`/`unlock`/`is_locked`: mutual exclusion between two lockers and
/// a trier; the lock ends free.
macro_rules! spin_exclusion_model {
    ($($(#[$doc:meta])* $name:ident: $lock:ty;)*) => {$(
        $(#[$doc])*
        #[test]
        fn $name() {
            model(|| {
                let s = Arc::new((<$lock>::new(), Guarded::new()));
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        let s = s.clone();
                        thread::spawn(move || {
                            s.0.lock();
                            s.1.critical();
                            unsafe { s.0.unlock() };
                        })
                    })
                    .collect();
                if s.0.try_lock() {
                    s.1.critical();
                    unsafe { s.0.unlock() };
                }
                for h in hs {
                    h.join().unwrap();
                }
                assert!(s.1.get() >= 2);
                assert!(!s.0.is_locked());
            });
        }
    )*};
}

spin_exclusion_model! {
    /// The ticket lock.
    ticket_mutual_exclusion: RawTicketLock;
    /// Test-and-set.
    tas_mutual_exclusion: crate::spin::tas::RawTasLock;
}

#[cfg(unix)]
mod preload_adaptive;
#[cfg(unix)]
mod preload_adaptive_interrupts;
#[cfg(unix)]
mod preload_owed;
mod rcu;
mod rw;
mod sleep;
mod spin;
