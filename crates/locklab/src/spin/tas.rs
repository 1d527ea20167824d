//! Test-and-test-and-set spinlock with bounded exponential backoff: the baseline every other lock is
//! measured against.
//!
//! # Algorithm
//! Lock: `swap(true)`; if it was already true, spin on plain loads (the *test* before the
//! *test-and-set*, so waiters share the line read-only instead of bouncing it with writes) with an
//! exponentially growing number of `pause`s between looks, capped at `MAX_BACKOFF`, and yielding the CPU
//! once `SpinWait::SPINS` steps have passed. Unlock: release store of `false`.
//!
//! # Properties
//! Unfair: whoever's swap lands first after the unlock wins; a waiter can starve in theory. One byte.
//!
//! # State
//! | `locked` | meaning  |
//! |----------|----------|
//! | false    | free     |
//! | true     | held     |
//!
//! # Memory orderings
//! The winning `swap` is Acquire and pairs with the Release store in `unlock`: the critical section of
//! the previous holder happens-before ours.

use crate::primitive::{AtomicBool, Ordering, SpinWait, spin_loop};

/// Largest number of `pause`s between two looks at the lock word (1 under loom, where every `pause` is
/// a scheduling point and backoff only multiplies the schedules to explore).
const MAX_BACKOFF: u32 = if cfg!(loom) { 1 } else { 64 };

/// A test-and-test-and-set spinlock. See the [module documentation](self).
///
/// ```
/// let l = locklab::raw::RawTasLock::new();
/// assert!(l.try_lock());
/// unsafe { l.unlock() };
/// ```
pub struct RawTasLock {
    locked: AtomicBool,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

impl RawTasLock {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked lock.
        ///
        /// ```
        /// let l = locklab::raw::RawTasLock::new();
        /// assert!(!l.is_locked());
        /// ```
        pub fn new() -> Self {
            RawTasLock {
                dep: crate::dep::Dep::new(),
                locked: AtomicBool::new(false),
            }
        }
    }

    /// One test-and-set: `true` if it took the lock. Acquire pairs with the Release store in
    /// `unlock`.
    ///
    /// Under loom the test-and-set is a compare-exchange: loom 0.7 models a `swap` that keeps
    /// writing `true` on a held lock so that the holder's later `store(false)` can stay invisible to
    /// every following `swap` (a two-thread swap spinlock with `yield_now` exceeds its branch limit
    /// at preemption bound 1, where the same lock built on compare-exchange passes). A failed
    /// compare-exchange writes nothing. On hardware both are one locked instruction; `xchg` stays.
    #[inline(always)]
    fn test_and_set(&self) -> bool {
        if cfg!(loom) {
            self.locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        } else {
            !self.locked.swap(true, Ordering::Acquire)
        }
    }

    /// Tries once to take the lock.
    ///
    /// ```
    /// let l = locklab::raw::RawTasLock::new();
    /// assert!(l.try_lock());
    /// assert!(!l.try_lock()); // held: the second try fails
    /// // SAFETY: the `try_lock` above took the lock.
    /// unsafe { l.unlock() };
    /// ```
    #[inline]
    pub fn try_lock(&self) -> bool {
        !self.locked.load(Ordering::Relaxed) && self.test_and_set()
    }

    /// Takes the lock, spinning with backoff while it is held.
    ///
    /// ```
    /// let l = locklab::raw::RawTasLock::new();
    /// l.lock();
    /// assert!(l.is_locked());
    /// // SAFETY: the `lock` above took the lock.
    /// unsafe { l.unlock() };
    /// ```
    #[inline]
    pub fn lock(&self) {
        if !self.test_and_set() {
            self.lock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        self.spin_then_yield(SpinWait::new());
    }

    #[cold]
    #[inline(never)]
    fn spin_then_yield(&self, mut wait: SpinWait) {
        let mut backoff = 1;
        loop {
            // Under loom the plain-load test is skipped: loom may let a load in a loop read the same
            // stale value forever (no eventual visibility), while an RMW always reads the latest.
            while !cfg!(loom) && self.locked.load(Ordering::Relaxed) {
                for _ in 0..backoff {
                    spin_loop();
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait.wait();
            }
            if self.test_and_set() {
                return;
            }
            if cfg!(loom) {
                wait.wait();
            }
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The caller holds the lock.
    ///
    /// ```
    /// let l = locklab::raw::RawTasLock::new();
    /// l.lock();
    /// // SAFETY: this thread holds the lock (the `lock` above).
    /// unsafe { l.unlock() };
    /// assert!(l.try_lock());
    /// // SAFETY: the `try_lock` above took the lock.
    /// unsafe { l.unlock() };
    /// ```
    #[inline]
    pub unsafe fn unlock(&self) {
        // Release pairs with the Acquire swap in `lock`/`try_lock`: publishes the critical section.
        self.locked.store(false, Ordering::Release);
    }

    /// Whether the lock is held (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawTasLock::new();
    /// assert!(!l.is_locked());
    /// l.lock();
    /// assert!(l.is_locked());
    /// // SAFETY: the `lock` above took the lock.
    /// unsafe { l.unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }
}

#[cfg(not(loom))]
// SAFETY: `lock`/`try_lock` give mutual exclusion with Acquire on success, `unlock` is Release (see the
// memory orderings above); the guard carries no state, and the lock has no thread affinity, so a guard
// may be sent to and released from another thread.
crate::dep::spin_raw_mutex!(unsafe impl RawMutex for RawTasLock);
