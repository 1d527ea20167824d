//! What the three flavours share: a type-stable pool of per-thread records, and the writer's wait for
//! the records that hold a grace period up (spin, then sleep on a futex, with stall warnings).
//!
//! Records are leaked boxes, never freed (a thread's guard or the grace-period scan may look at a
//! record at any time); a thread that is done with one marks it free, and the next `claim` reuses it.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A record kept in a [`Registry`].
pub(super) trait Pooled: Sync + 'static {
    /// Whether a thread holds it.
    fn in_use(&self) -> &AtomicBool;
}

/// Every record of one domain, ever made.
pub(super) struct Registry<R: 'static> {
    /// A spinlock (held for a scan or a push), not std's mutex: a `fork()` prepare handler holds it
    /// across the fork and releases it in both processes (`lock_for_fork`).
    records: crate::TasLock<Vec<&'static R>>,
}

impl<R: Pooled> Registry<R> {
    pub(super) const fn new() -> Self {
        Registry {
            records: crate::TasLock::new(Vec::new()),
        }
    }

    /// A free record, now held by the caller; else a new one made by `make` (which must start held).
    pub(super) fn claim(&self, make: impl FnOnce() -> R) -> &'static R {
        let mut recs = self.records.lock();
        for &r in recs.iter() {
            // Acquire pairs with the Release `in_use = false` of the record's last holder.
            if r.in_use()
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return r;
            }
        }
        let r: &'static R = Box::leak(Box::new(make()));
        debug_assert!(r.in_use().load(Ordering::Relaxed), "made held");
        recs.push(r);
        r
    }

    /// The records now (held or free).
    pub(super) fn snapshot(&self) -> Vec<&'static R> {
        self.records.lock().clone()
    }

    /// Before `fork()`: the lock, to be held across the fork (`fork::park`).
    pub(super) fn lock_for_fork(&'static self) -> crate::TasLockGuard<'static, Vec<&'static R>> {
        self.records.lock()
    }

    /// The records, while the calling thread holds the lock from [`lock_for_fork`](Self::lock_for_fork).
    ///
    /// # Safety
    /// The calling thread (or, in a `fork()` child, the thread it is a copy of) holds the lock.
    pub(super) unsafe fn held_snapshot(&self) -> Vec<&'static R> {
        // SAFETY: the caller holds the lock: nobody writes the vector meanwhile.
        unsafe { (*self.records.data_ptr()).clone() }
    }
}

/// How a writer waits for records.
pub(super) struct Wait<'a, R> {
    /// Whether the record still holds the grace period up.
    pub(super) blocks: &'a dyn Fn(&R) -> bool,
    /// The futex word a writer sleeps on (1 while one sleeps; readers wake it).
    pub(super) waiting: &'a AtomicU32,
    /// The writer's side of the fence between "I sleep" and the re-check.
    pub(super) fence: &'a dyn Fn(),
    /// Stall warning threshold, ms (0: never).
    pub(super) stall_ms: &'a AtomicU64,
    /// The holder's thread id, for the warning.
    pub(super) tid: &'a dyn Fn(&R) -> u32,
    /// What the blocking threads fail to do, for the warning.
    pub(super) what: &'a str,
}

/// Spins a little, then sleeps on `w.waiting` until no record of `records` blocks; warns once per
/// stall period naming the threads that hold it up.
pub(super) fn wait_for_records<R>(records: Vec<&'static R>, w: Wait<'_, R>) {
    let mut pending: Vec<&'static R> = records.into_iter().filter(|r| (w.blocks)(r)).collect();
    let start = Instant::now();
    let mut warned_at = Duration::ZERO;
    let mut spins = 0u32;
    while !pending.is_empty() {
        pending.retain(|r| (w.blocks)(r));
        if pending.is_empty() {
            break;
        }
        if spins < 100 {
            spins += 1;
            core::hint::spin_loop();
            std::thread::yield_now();
            continue;
        }
        // Announce the sleep, fence, re-check, sleep: the fence pairs with the readers' fence between
        // their releasing store and their `waiting` load, so either we see their store in the
        // re-check or they see `waiting == 1` and wake us.
        w.waiting.store(1, Ordering::Relaxed);
        (w.fence)();
        pending.retain(|r| (w.blocks)(r));
        if !pending.is_empty() {
            crate::sys::futex_wait(w.waiting, 1, Some(Duration::from_millis(100)));
        }
        w.waiting.store(0, Ordering::Relaxed);
        let stall = Duration::from_millis(w.stall_ms.load(Ordering::Relaxed));
        let blocked = start.elapsed();
        if !stall.is_zero() && blocked >= warned_at + stall && !pending.is_empty() {
            warned_at = blocked;
            let tids: Vec<u32> = pending.iter().map(|r| (w.tid)(r)).collect();
            // Not `eprintln!`: it panics when stderr is closed, in the middle of a grace period.
            super::protocol::warn(format_args!(
                "locklab::rcu: stall warning: a grace period has waited {:.1} s for thread(s) {tids:?} to {}",
                blocked.as_secs_f64(),
                w.what
            ));
        }
    }
}
