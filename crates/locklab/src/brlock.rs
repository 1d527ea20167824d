//! `BrLock`: the big-reader lock built from the kernel's late `lglock` ("local/global lock"): one
//! spinlock per CPU shard. A reader locks its current CPU's shard; a writer locks every shard, in
//! order. Reads scale (each reader touches only its own shard's line) but every read still pays a
//! locked RMW: seed 002 measured exactly that `lock` instruction at 6.4% of a single-threaded profile,
//! which is why the kernel replaced it with the percpu rwsem ([`crate::percpu_rwsem`]). It is here as the
//! contrast.
//!
//! # Algorithm
//! - Read lock: pick the shard of `sched_getcpu()` (a hint: the thread may migrate, which is harmless:
//!   the guard remembers which shard it locked) and lock that shard's spinlock.
//! - Write lock: lock shards 0..N in ascending order (so two writers cannot deadlock).
//! - Shards are cache-line padded queued spinlocks ([`RawQueuedSpinLock`]).
//!
//! # Caveat: not reentrant, and same-CPU readers serialise
//! In the kernel a local lock runs with preemption disabled, so one CPU has one reader at a time. In
//! userspace two threads on the same CPU take the same shard and serialise, and a thread that takes the
//! read lock twice can deadlock on its own shard. Do not nest read locks of one `BrLock`.
//!
//! # Invariants
//! 1. A writer holds every shard; a reader holds one: they exclude each other, readers on different
//!    shards do not.
//! 2. Writers take shards in ascending order, readers take one: no lock-order cycle.

use crate::spin::qspinlock::RawQueuedSpinLock;

/// Shards: enough for the CPUs of most machines; CPUs beyond wrap around (correct, less scalable).
pub const SHARDS: usize = 64;

#[repr(align(128))]
struct Shard(RawQueuedSpinLock);

/// A big-reader lock. See the [module documentation](self).
pub struct RawBrLock {
    shards: [Shard; SHARDS],
}

/// Guard state of a read hold: which shard it locked. Not `Send`-restricted: a shard lock has no thread
/// affinity.
pub struct BrReadGuard {
    shard: usize,
}

#[cfg(not(loom))]
impl RawBrLock {
    /// A new, unlocked lock.
    pub const fn new() -> Self {
        RawBrLock {
            shards: [const { Shard(RawQueuedSpinLock::new()) }; SHARDS],
        }
    }

    /// Locks this CPU's shard; returns which.
    #[inline]
    pub fn read(&self) -> BrReadGuard {
        let shard = crate::sys::current_cpu().unwrap_or(0) % SHARDS;
        self.shards[shard].0.lock();
        BrReadGuard { shard }
    }

    /// Releases a read hold.
    ///
    /// # Safety
    /// `g` is a read hold of this lock.
    #[inline]
    pub unsafe fn read_unlock(&self, g: BrReadGuard) {
        // SAFETY: the guard says we locked this shard.
        unsafe { self.shards[g.shard].0.unlock() };
    }

    /// Locks every shard, in order.
    pub fn write(&self) {
        for s in &self.shards {
            s.0.lock();
        }
    }

    /// Releases a write hold.
    ///
    /// # Safety
    /// The caller holds the write lock.
    pub unsafe fn write_unlock(&self) {
        for s in self.shards.iter().rev() {
            // SAFETY: the writer holds every shard.
            unsafe { s.0.unlock() };
        }
    }
}

#[cfg(not(loom))]
impl Default for RawBrLock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: invariant 1 (exclusion), Acquire/Release through the shard spinlocks.
unsafe impl lock_api::RawRwLock for RawBrLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type SharedGuard = BrReadGuard;
    type ExclusiveGuard = lock_api::GuardSend;

    #[inline]
    fn lock_shared(&self) -> BrReadGuard {
        self.read()
    }
    fn try_lock_shared(&self) -> Option<BrReadGuard> {
        let shard = crate::sys::current_cpu().unwrap_or(0) % SHARDS;
        self.shards[shard]
            .0
            .try_lock()
            .then_some(BrReadGuard { shard })
    }
    #[inline]
    unsafe fn unlock_shared(&self, g: BrReadGuard) {
        // SAFETY: forwarded.
        unsafe { self.read_unlock(g) }
    }
    fn lock_exclusive(&self) -> lock_api::GuardSend {
        self.write();
        lock_api::GuardSend::new()
    }
    fn try_lock_exclusive(&self) -> Option<lock_api::GuardSend> {
        for (i, s) in self.shards.iter().enumerate() {
            if !s.0.try_lock() {
                for t in self.shards[..i].iter().rev() {
                    // SAFETY: we locked shards 0..i just now.
                    unsafe { t.0.unlock() };
                }
                return None;
            }
        }
        Some(lock_api::GuardSend::new())
    }
    unsafe fn unlock_exclusive(&self, _g: lock_api::GuardSend) {
        // SAFETY: forwarded.
        unsafe { self.write_unlock() }
    }
    fn is_locked(&self) -> bool {
        self.shards.iter().any(|s| s.0.is_locked())
    }
    fn is_locked_exclusive(&self) -> bool {
        self.shards.iter().all(|s| s.0.is_locked())
    }
}
