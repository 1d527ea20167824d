//! The `lock_api` traits for [`RawRwSem`]: plain, fair, downgradable, timed and upgradable, each
//! calling lockdep (with the `lockdep` feature) before it takes or releases the lock.

use super::*;
use crate::dep::{LockdepHooks as _, M};

#[cfg(not(loom))]
// SAFETY: invariants 1-2 give reader/writer exclusion for holds in the count, and 7-9 ("Reader bias":
// every write hold revokes and waits for the table readers before it returns) for holds in a slot;
// every acquisition is Acquire and every release Release (module docs). Tokens are per-acquisition
// and not Send; a shared token names its slot, if any, which its unlock clears. A timed-out attempt
// holds nothing.
unsafe impl lock_api::RawRwLock for RawRwSem {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type SharedGuard = RwSemToken;
    type ExclusiveGuard = RwSemToken;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) -> RwSemToken {
        self.lockdep_before_lock(M::Read);
        self.read_biased()
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> Option<RwSemToken> {
        self.lockdep_after_trylock(M::Read, self.try_read_biased())
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self, g: RwSemToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves a shared hold (in the count or in its slot).
        unsafe { self.read_unlock_biased(&g) }
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) -> RwSemToken {
        self.lockdep_before_lock(M::Write);
        self.write()
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> Option<RwSemToken> {
        self.lockdep_after_trylock(M::Write, self.try_write())
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self, _g: RwSemToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves an exclusive hold.
        unsafe { self.write_unlock() }
    }
    fn is_locked(&self) -> bool {
        RawRwSem::is_locked(self)
    }
    fn is_locked_exclusive(&self) -> bool {
        RawRwSem::is_locked_exclusive(self)
    }
}

#[cfg(not(loom))]
// SAFETY: a fair exclusive unlock either releases as `write_unlock` does or passes the lock to a queued
// waiter with a Release store it acquires; a shared unlock is the ordinary one (below).
unsafe impl lock_api::RawRwLockFair for RawRwSem {
    /// A reader cannot hand the lock over while other readers hold it, and the last reader out already
    /// wakes the front waiter (who then has priority over stealers through HANDOFF once it has waited
    /// [`HANDOFF_NS`]): the fair shared unlock is the ordinary one.
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared_fair(&self, g: RwSemToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves a shared hold (in the count or in its slot).
        unsafe { self.read_unlock_biased(&g) }
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive_fair(&self, g: RwSemToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves an exclusive hold.
        unsafe { self.write_unlock_fair(&g) }
    }
}

#[cfg(not(loom))]
// SAFETY: `downgrade` turns the writer bit into one reader bias atomically: no writer can enter between.
unsafe impl lock_api::RawRwLockDowngrade for RawRwSem {
    unsafe fn downgrade(&self, g: RwSemToken) -> RwSemToken {
        // SAFETY: the token proves an exclusive hold.
        unsafe { RawRwSem::downgrade(self, &g) };
        g
    }
}

#[cfg(not(loom))]
// SAFETY: timed attempts either acquire (as above) or leave the wait list holding nothing.
unsafe impl lock_api::RawRwLockTimed for RawRwSem {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_for(&self, timeout: Self::Duration) -> Option<RwSemToken> {
        self.lockdep_timed_for(
            M::Read,
            timeout,
            |d| self.read_biased_until(d),
            || Some(self.read_biased()),
        )
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_until(&self, timeout: Self::Instant) -> Option<RwSemToken> {
        self.lockdep_timed(M::Read, || self.read_biased_until(&timeout))
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_for(&self, timeout: Self::Duration) -> Option<RwSemToken> {
        self.lockdep_timed_for(
            M::Write,
            timeout,
            |d| self.write_until(d),
            || Some(self.write()),
        )
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_until(&self, timeout: Self::Instant) -> Option<RwSemToken> {
        self.lockdep_timed(M::Write, || self.write_until(&timeout))
    }
}

#[cfg(not(loom))]
// SAFETY: an upgradable hold is a read hold plus UPGRADABLE, which one thread holds at a time
// (invariant 6); `upgrade` converts it to WRITER_LOCKED in one CAS once it is the only reader, so no
// writer enters between (module docs, "Upgradable reads"). Acquisitions Acquire, releases Release.
unsafe impl lock_api::RawRwLockUpgrade for RawRwSem {
    type UpgradableGuard = RwSemToken;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_upgradable(&self) -> RwSemToken {
        self.lockdep_before_lock(M::Write);
        self.read_upgradable()
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_upgradable(&self) -> Option<RwSemToken> {
        self.lockdep_after_trylock(M::Write, self.try_read_upgradable())
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_upgradable(&self, _g: RwSemToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves an upgradable hold.
        unsafe { self.upgradable_unlock() }
    }
    unsafe fn upgrade(&self, g: RwSemToken) -> RwSemToken {
        // SAFETY: the token proves an upgradable hold.
        unsafe { RawRwSem::upgrade(self, g) }
    }
    unsafe fn try_upgrade(&self, g: RwSemToken) -> Result<RwSemToken, RwSemToken> {
        // SAFETY: the token proves an upgradable hold.
        if unsafe { RawRwSem::try_upgrade(self, &g) } {
            Ok(g)
        } else {
            Err(g)
        }
    }
}

#[cfg(not(loom))]
// SAFETY: as `RawRwLockUpgrade`; the fair upgradable unlock is the ordinary one (as for readers).
unsafe impl lock_api::RawRwLockUpgradeFair for RawRwSem {
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_upgradable_fair(&self, _g: RwSemToken) {
        self.lockdep_before_unlock();
        // SAFETY: the token proves an upgradable hold.
        unsafe { self.upgradable_unlock() }
    }
}

#[cfg(not(loom))]
// SAFETY: both downgrades are single atomic operations that keep a read hold throughout.
unsafe impl lock_api::RawRwLockUpgradeDowngrade for RawRwSem {
    unsafe fn downgrade_upgradable(&self, g: RwSemToken) -> RwSemToken {
        // SAFETY: the token proves an upgradable hold.
        unsafe { RawRwSem::downgrade_upgradable(self) };
        g
    }
    unsafe fn downgrade_to_upgradable(&self, g: RwSemToken) -> RwSemToken {
        // SAFETY: the token proves an exclusive hold.
        unsafe { RawRwSem::downgrade_to_upgradable(self, &g) };
        g
    }
}

#[cfg(not(loom))]
// SAFETY: a timed attempt either acquires as above or gives up holding what it held before.
unsafe impl lock_api::RawRwLockUpgradeTimed for RawRwSem {
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_upgradable_for(&self, timeout: std::time::Duration) -> Option<RwSemToken> {
        self.lockdep_timed_for(
            M::Write,
            timeout,
            |d| self.read_upgradable_until(Some(d)),
            || Some(self.read_upgradable()),
        )
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_upgradable_until(&self, timeout: std::time::Instant) -> Option<RwSemToken> {
        self.lockdep_timed(M::Write, || self.read_upgradable_until(Some(&timeout)))
    }
    unsafe fn try_upgrade_for(
        &self,
        g: RwSemToken,
        timeout: std::time::Duration,
    ) -> Result<RwSemToken, RwSemToken> {
        let ok = match std::time::Instant::now().checked_add(timeout) {
            Some(d) => self.upgrade_until(&g, Some(&d)),
            None => self.upgrade_until(&g, None),
        };
        if ok { Ok(g) } else { Err(g) }
    }
    unsafe fn try_upgrade_until(
        &self,
        g: RwSemToken,
        timeout: std::time::Instant,
    ) -> Result<RwSemToken, RwSemToken> {
        if self.upgrade_until(&g, Some(&timeout)) {
            Ok(g)
        } else {
            Err(g)
        }
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawRwSem, RwLock);
