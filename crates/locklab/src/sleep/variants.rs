//! Two variants of the [`mutex`](super::mutex) that parking_lot users reach for: a mutex whose every
//! unlock is fair ([`RawFairMutex`], behind `FairMutex<T>`), and the thread identity lock_api's
//! `ReentrantMutex` needs ([`RawThreadId`], behind `ReentrantMutex<T>`).
//!
//! # FairMutex
//! The same lock as `Mutex` (its algorithm, state word and invariants are the mutex module's); only
//! the unlock differs: every unlock is the mutex's `unlock_fair`, which hands the lock to the first
//! queued sleeper (HANDED) instead of releasing it for whoever comes first. No thread can take the
//! lock twice in a row while another sleeps on it: FIFO among sleepers, at the cost of a wake-up and
//! a context switch per hand-over (the mutex's own hand-off bounds unfairness only after 1 ms).
//!
//! # ReentrantMutex
//! lock_api's reentrant wrapper over our `RawMutex`: the owner's thread id and a count beside the lock,
//! so the owning thread may lock again without waiting. The id is the address of a thread-local of
//! this module (no destructor: valid for the thread's whole life, thread-local destructors included),
//! unique among live threads, and never 0.

use super::mutex::{MutexToken, RawMutex};
#[cfg(not(loom))]
use crate::dep::{LockdepHooks as _, M};
use core::num::NonZeroUsize;

/// A [`RawMutex`] whose every unlock hands the lock to a waiter, if one sleeps (module docs).
///
/// ```
/// use lock_api::RawMutex as _;
/// let m = locklab::raw::RawFairMutex::INIT;
/// let t = m.lock();
/// unsafe { m.unlock(t) }; // a fair unlock: nobody waits, so it simply releases
/// assert!(!m.is_locked());
/// ```
pub struct RawFairMutex(RawMutex);

impl RawFairMutex {
    /// A new, unlocked fair mutex.
    ///
    /// ```
    /// static M: locklab::raw::RawFairMutex = locklab::raw::RawFairMutex::new();
    /// ```
    pub const fn new() -> Self {
        RawFairMutex(RawMutex::new())
    }
}

impl Default for RawFairMutex {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the inner `RawMutex` provides mutual exclusion; every unlock is its `unlock_fair`, which
// releases (or hands over) exactly the hold its token names.
unsafe impl lock_api::RawMutex for RawFairMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = MutexToken;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock(&self) -> MutexToken {
        self.lockdep_before_lock(M::Write);
        self.0.lock()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> Option<MutexToken> {
        self.lockdep_after_trylock(M::Write, self.0.try_lock())
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self, guard: MutexToken) {
        self.lockdep_before_unlock();
        // SAFETY: forwarded from the caller (the lock is held, `guard` is its token).
        unsafe { self.0.unlock_fair(guard) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.0.is_locked()
    }
}

// SAFETY: as above; a fair unlock is the only unlock.
unsafe impl lock_api::RawMutexFair for RawFairMutex {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self, guard: MutexToken) {
        self.lockdep_before_unlock();
        // SAFETY: forwarded from the caller.
        unsafe { self.0.unlock_fair(guard) }
    }
}

// SAFETY: the inner mutex's timed acquisition: a timed-out attempt holds nothing.
unsafe impl lock_api::RawMutexTimed for RawFairMutex {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_for(&self, timeout: std::time::Duration) -> Option<MutexToken> {
        self.lockdep_timed(M::Write, || {
            lock_api::RawMutexTimed::try_lock_for(&self.0, timeout)
        })
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_until(&self, deadline: std::time::Instant) -> Option<MutexToken> {
        self.lockdep_timed(M::Write, || {
            lock_api::RawMutexTimed::try_lock_until(&self.0, deadline)
        })
    }
}

/// The calling thread's identity for `ReentrantMutex` (module docs).
///
/// ```
/// use lock_api::GetThreadId as _;
/// let me = locklab::raw::RawThreadId.nonzero_thread_id();
/// let other = std::thread::spawn(|| locklab::raw::RawThreadId.nonzero_thread_id()).join().unwrap();
/// assert_ne!(me, other);
/// ```
pub struct RawThreadId;

std::thread_local! {
    /// Its address is the thread's id. No destructor, so it stays valid in thread-local destructors.
    static ID: u8 = const { 0 };
}

// SAFETY: the address of a thread-local is unique among live threads (each has its own block), the
// same for every call on one thread, and never null.
unsafe impl lock_api::GetThreadId for RawThreadId {
    const INIT: Self = RawThreadId;

    #[inline]
    fn nonzero_thread_id(&self) -> NonZeroUsize {
        ID.with(|id| {
            NonZeroUsize::new(id as *const u8 as usize)
                .expect("a thread-local's address is not null")
        })
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawFairMutex, Mutex, |l| &l.0.dep);
