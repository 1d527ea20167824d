//! The `lock_api` traits for [`RawPercpuRwSem`]: plain, downgradable and timed, each calling
//! lockdep (with the `lockdep` feature) before it takes or releases the lock.

use super::*;
use crate::dep::{LockdepHooks as _, M};

#[cfg(not(loom))]
impl Default for RawPercpuRwSem {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: invariant 3 gives reader/writer exclusion and `gate` writer/writer exclusion; acquisitions are
// Acquire and releases Release (module docs). Read tokens are not Send, so each read hold is released by
// the thread whose counter it incremented.
unsafe impl lock_api::RawRwLock for RawPercpuRwSem {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type SharedGuard = PercpuReadToken;
    type ExclusiveGuard = PercpuWriteToken;

    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) -> PercpuReadToken {
        self.lockdep_before_lock(M::Read);
        self.read()
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> Option<PercpuReadToken> {
        self.lockdep_after_trylock(M::Read, self.try_read())
    }
    #[inline(always)]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self, g: PercpuReadToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves a shared hold by this thread.
        unsafe { self.read_unlock(g) }
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) -> PercpuWriteToken {
        self.lockdep_before_lock(M::Write);
        self.write()
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> Option<PercpuWriteToken> {
        self.lockdep_after_trylock(M::Write, self.try_write())
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self, g: PercpuWriteToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves an exclusive hold.
        unsafe { self.write_unlock(g) }
    }
    fn is_locked(&self) -> bool {
        RawPercpuRwSem::is_locked(self)
    }
    fn is_locked_exclusive(&self) -> bool {
        RawPercpuRwSem::is_locked_exclusive(self)
    }
}

#[cfg(not(loom))]
// SAFETY: `downgrade` counts us as a reader before it lets readers or writers in.
unsafe impl lock_api::RawRwLockDowngrade for RawPercpuRwSem {
    unsafe fn downgrade(&self, g: PercpuWriteToken) -> PercpuReadToken {
        // SAFETY: the token proves an exclusive hold; guards are not Send, so this is its thread.
        unsafe { RawPercpuRwSem::downgrade(self, g) }
    }
}

#[cfg(not(loom))]
// SAFETY: timed attempts either acquire as above or hold nothing when they give up.
unsafe impl lock_api::RawRwLockTimed for RawPercpuRwSem {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_for(&self, timeout: Self::Duration) -> Option<PercpuReadToken> {
        self.lockdep_timed_for(
            M::Read,
            timeout,
            |d| self.read_at(my_index(), Some(d)),
            || Some(self.read()),
        )
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_until(&self, timeout: Self::Instant) -> Option<PercpuReadToken> {
        self.lockdep_timed(M::Read, || self.read_at(my_index(), Some(&timeout)))
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_for(&self, timeout: Self::Duration) -> Option<PercpuWriteToken> {
        self.lockdep_timed_for(
            M::Write,
            timeout,
            |d| self.write_until(d),
            || Some(self.write()),
        )
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_until(&self, timeout: Self::Instant) -> Option<PercpuWriteToken> {
        self.lockdep_timed(M::Write, || self.write_until(&timeout))
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawPercpuRwSem, RwLock);
