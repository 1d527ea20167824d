//! The `lock_api` traits for [`RawMutex`] (plain, fair, timed), each calling lockdep (with the
//! `lockdep` feature) before it takes or releases the lock.

use super::*;
use crate::dep::{LockdepHooks as _, M};

#[cfg(not(loom))]
// SAFETY: mutual exclusion: the lock is taken only by a CAS from a state without LOCKED, or given by a
// hand-off while held (invariant 3). Acquire/Release as documented. The token is this acquisition's
// state; a forgotten token leaves the mutex locked, which is safe. No operation unwinds while holding
// internal state (`wait_lock` is released by a drop guard).
unsafe impl lock_api::RawMutex for RawMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = MutexToken;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock(&self) -> MutexToken {
        self.lockdep_before_lock(M::Write);
        RawMutex::lock(self)
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock(&self) -> Option<MutexToken> {
        self.lockdep_after_trylock(M::Write, RawMutex::try_lock(self))
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock(&self, guard: MutexToken) {
        self.lockdep_before_unlock();
        // SAFETY: forwarded from the caller.
        unsafe { RawMutex::unlock(self, guard) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawMutex::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: `unlock_fair` hands the lock to the first waiter without freeing it (same exclusion argument).
unsafe impl lock_api::RawMutexFair for RawMutex {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self, guard: MutexToken) {
        self.lockdep_before_unlock();
        // SAFETY: forwarded from the caller.
        unsafe { RawMutex::unlock_fair(self, guard) }
    }
}

#[cfg(not(loom))]
// SAFETY: a timed-out attempt leaves the wait list and returns `None` holding nothing (or returns the
// lock if a hand-off reached it first).
unsafe impl lock_api::RawMutexTimed for RawMutex {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_for(&self, timeout: std::time::Duration) -> Option<MutexToken> {
        self.lockdep_timed_for(
            M::Write,
            timeout,
            |d| self.lock_until(d),
            || Some(self.lock()),
        )
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_until(&self, deadline: std::time::Instant) -> Option<MutexToken> {
        self.lockdep_timed(M::Write, || self.lock_until(&deadline))
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawMutex, Mutex);
