//! `BrLock`: the big-reader lock built from the kernel's late `lglock` ("local/global lock"): one
//! spinlock per CPU shard. A reader locks its current CPU's shard; a writer locks every shard, in
//! order. Reads scale (each reader touches only its own shard's line) but every read still pays a
//! locked RMW: seed 002 measured exactly that `lock` instruction at 6.4% of a single-threaded profile,
//! which is why the kernel replaced it with the percpu rwsem ([`crate::rw::percpu_rwsem`]). It is here as the
//! contrast.
//!
//! # Algorithm
//! - Read lock: pick the shard of `sched_getcpu()` (a hint: the thread may migrate, which is harmless:
//!   the guard remembers which shard it locked) and take that shard's reader-writer spinlock *shared*.
//! - Write lock: take every shard's lock *exclusively*, in ascending order (so two writers cannot
//!   deadlock). Write unlock releases them in reverse.
//! - Shards are cache-line padded [`RawRwSpinLock`]s (the kernel's queued rwlock): a reader's lock and
//!   unlock are one locked RMW each on its own shard's line.
//!
//! # Shared means shared
//! In the kernel a local lock runs with preemption disabled, so one CPU has one reader at a time and a
//! per-CPU *spinlock* is enough. In userspace two threads on the same CPU, or one thread read-locking
//! twice, land on the same shard; with spinlock shards they excluded each other, and a program holding
//! a read lock while it waited for another reader deadlocked. With reader-writer shards, while no
//! writer holds or waits for the lock every reader gets in, whatever shard it lands on and whoever
//! else reads. As with std's `RwLock`, a writer that has started taking shards turns new readers of
//! those shards away until it is done, so a thread that holds a read lock and read-locks again while a
//! writer waits can deadlock (the writer waits for the first hold, the second waits behind the writer).
//!
//! # Invariants
//! 1. A writer holds every shard exclusively; a reader holds one shard shared: writers exclude
//!    everyone, readers exclude no reader.
//! 2. Writers take shards in ascending order, readers take one: no lock-order cycle.
//! 3. Reader counts are bounded per shard by [`RawRwSpinLock`]'s check (forgotten guards panic at the
//!    bound instead of wrapping).

#[cfg(not(loom))]
use crate::dep::{LockdepHooks as _, M};
use crate::rw::rwspinlock::RawRwSpinLock;

/// Shards: enough for the CPUs of most machines; CPUs beyond wrap around (correct, less scalable).
///
/// ```
/// use locklab::rw::brlock::SHARDS;
/// assert!(SHARDS.is_power_of_two());
/// ```
pub const SHARDS: usize = 64;

#[repr(align(128))]
struct Shard(RawRwSpinLock);

/// A big-reader lock. See the [module documentation](self).
///
/// ```
/// use locklab::BrLock;
/// let l = BrLock::new(vec![1, 2]);
/// let (a, b) = (l.read(), l.read()); // readers share, even on one CPU and one thread
/// assert_eq!(a.len() + b.len(), 4);
/// drop((a, b));
/// l.write().push(3); // a writer takes every shard
/// assert_eq!(l.read().len(), 3);
/// ```
pub struct RawBrLock {
    shards: [Shard; SHARDS],
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

/// Guard state of a read hold: which shard it locked. Not `Send`-restricted: a shard lock has no thread
/// affinity.
///
/// ```
/// use locklab::raw::RawBrLock;
/// let l = RawBrLock::new();
/// let g = l.read();
/// unsafe { l.read_unlock(g) }; // the guard names the shard, wherever the thread runs now
/// ```
pub struct BrReadGuard {
    shard: usize,
}

#[cfg(not(loom))]
impl RawBrLock {
    /// A new, unlocked lock.
    ///
    /// ```
    /// static L: locklab::raw::RawBrLock = locklab::raw::RawBrLock::new();
    /// assert!(L.try_write());
    /// // SAFETY: the `try_write` above took the write lock.
    /// unsafe { L.write_unlock() };
    /// ```
    pub const fn new() -> Self {
        RawBrLock {
            dep: crate::dep::Dep::new(),
            shards: [const { Shard(RawRwSpinLock::new()) }; SHARDS],
        }
    }

    /// This CPU's shard.
    #[inline]
    fn my_shard() -> usize {
        crate::sys::current_cpu().unwrap_or(0) % SHARDS
    }

    /// Takes this CPU's shard shared; returns which.
    ///
    /// ```
    /// let l = locklab::raw::RawBrLock::new();
    /// let (a, b) = (l.read(), l.read()); // readers share a shard
    /// assert!(!l.try_write());
    /// // SAFETY: `a` and `b` are read holds of `l`, each released once.
    /// unsafe { l.read_unlock(a) };
    /// // SAFETY: as above.
    /// unsafe { l.read_unlock(b) };
    /// ```
    #[inline]
    pub fn read(&self) -> BrReadGuard {
        let shard = Self::my_shard();
        self.shards[shard].0.read();
        BrReadGuard { shard }
    }

    /// Takes this CPU's shard shared if no writer holds or waits for it.
    ///
    /// ```
    /// let l = locklab::raw::RawBrLock::new();
    /// let g = l.try_read().expect("no writer");
    /// // SAFETY: `g` is a read hold of `l`.
    /// unsafe { l.read_unlock(g) };
    /// l.write();
    /// assert!(l.try_read().is_none()); // a writer holds every shard
    /// // SAFETY: the `write` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn try_read(&self) -> Option<BrReadGuard> {
        let shard = Self::my_shard();
        self.shards[shard]
            .0
            .try_read()
            .then_some(BrReadGuard { shard })
    }

    /// Releases a read hold.
    ///
    /// # Safety
    /// `g` is a read hold of this lock.
    ///
    /// ```
    /// let l = locklab::raw::RawBrLock::new();
    /// let g = l.read();
    /// // SAFETY: `g` is a read hold of `l`, released once.
    /// unsafe { l.read_unlock(g) };
    /// assert!(l.try_write()); // nothing held any more
    /// // SAFETY: the `try_write` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub unsafe fn read_unlock(&self, g: BrReadGuard) {
        // SAFETY: the guard says we hold this shard shared.
        unsafe { self.shards[g.shard].0.read_unlock() };
    }

    /// Takes every shard exclusively, in order.
    ///
    /// ```
    /// let l = locklab::raw::RawBrLock::new();
    /// l.write();
    /// assert!(l.try_read().is_none());
    /// // SAFETY: the `write` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// ```
    pub fn write(&self) {
        for s in &self.shards {
            s.0.write();
        }
    }

    /// Takes every shard exclusively if none is held; holds nothing on failure.
    ///
    /// ```
    /// let l = locklab::raw::RawBrLock::new();
    /// let g = l.read();
    /// assert!(!l.try_write()); // a reader holds a shard: nothing is kept
    /// // SAFETY: `g` is a read hold of `l`.
    /// unsafe { l.read_unlock(g) };
    /// assert!(l.try_write());
    /// // SAFETY: the `try_write` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// ```
    pub fn try_write(&self) -> bool {
        for (i, s) in self.shards.iter().enumerate() {
            if !s.0.try_write() {
                for t in self.shards[..i].iter().rev() {
                    // SAFETY: we took shards 0..i exclusively just now.
                    unsafe { t.0.write_unlock() };
                }
                return false;
            }
        }
        true
    }

    /// Takes this CPU's shard shared, polling until `deadline` (a spinlock has no sleeping path).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let l = locklab::raw::RawBrLock::new();
    /// l.write();
    /// assert!(l.try_read_until(Instant::now() + Duration::from_millis(1)).is_none());
    /// // SAFETY: the `write` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// let g = l.try_read_until(Instant::now()).expect("free");
    /// // SAFETY: `g` is a read hold of `l`.
    /// unsafe { l.read_unlock(g) };
    /// ```
    pub fn try_read_until(&self, deadline: std::time::Instant) -> Option<BrReadGuard> {
        let shard = Self::my_shard();
        crate::primitive::spin_until(deadline, || self.shards[shard].0.try_read())
            .then_some(BrReadGuard { shard })
    }

    /// Takes every shard exclusively, in order, polling each until `deadline`; on time-out releases
    /// the shards taken so far and holds nothing.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let l = locklab::raw::RawBrLock::new();
    /// let g = l.read();
    /// assert!(!l.try_write_until(Instant::now() + Duration::from_millis(1)));
    /// // SAFETY: `g` is a read hold of `l`.
    /// unsafe { l.read_unlock(g) };
    /// assert!(l.try_write_until(Instant::now()));
    /// // SAFETY: the `try_write_until` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// ```
    pub fn try_write_until(&self, deadline: std::time::Instant) -> bool {
        for (i, s) in self.shards.iter().enumerate() {
            if !crate::primitive::spin_until(deadline, || s.0.try_write()) {
                for t in self.shards[..i].iter().rev() {
                    // SAFETY: we took shards 0..i exclusively just now.
                    unsafe { t.0.write_unlock() };
                }
                return false;
            }
        }
        true
    }

    /// Releases a write hold.
    ///
    /// # Safety
    /// The caller holds the write lock.
    ///
    /// ```
    /// let l = locklab::raw::RawBrLock::new();
    /// l.write();
    /// // SAFETY: the `write` above took the write lock.
    /// unsafe { l.write_unlock() };
    /// assert!(l.try_read().is_some_and(|g| {
    ///     // SAFETY: `g` is a read hold of `l`.
    ///     unsafe { l.read_unlock(g) };
    ///     true
    /// }));
    /// ```
    pub unsafe fn write_unlock(&self) {
        for s in self.shards.iter().rev() {
            // SAFETY: the writer holds every shard exclusively.
            unsafe { s.0.write_unlock() };
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
// SAFETY: invariant 1 (exclusion), Acquire/Release through the shard locks. Read guards name their
// shard and may be released from any thread (the shard lock has no thread affinity).
unsafe impl lock_api::RawRwLock for RawBrLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type SharedGuard = BrReadGuard;
    type ExclusiveGuard = lock_api::GuardSend;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) -> BrReadGuard {
        self.lockdep_before_lock(M::Read);
        self.read()
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> Option<BrReadGuard> {
        self.lockdep_after_trylock(M::Read, self.try_read())
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self, g: BrReadGuard) {
        self.lockdep_before_unlock();
        // SAFETY: forwarded.
        unsafe { self.read_unlock(g) }
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) -> lock_api::GuardSend {
        self.lockdep_before_lock(M::Write);
        self.write();
        lock_api::GuardSend::new()
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> Option<lock_api::GuardSend> {
        self.lockdep_after_trylock(M::Write, self.try_write().then(lock_api::GuardSend::new))
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self, _g: lock_api::GuardSend) {
        self.lockdep_before_unlock();
        // SAFETY: forwarded.
        unsafe { self.write_unlock() }
    }
    fn is_locked(&self) -> bool {
        self.shards.iter().any(|s| s.0.is_locked())
    }
    fn is_locked_exclusive(&self) -> bool {
        self.shards.iter().all(|s| s.0.is_locked_exclusive())
    }
}

#[cfg(not(loom))]
// SAFETY: timed attempts acquire as `read`/`write` do or hold nothing (`try_write_until` releases
// the shards it took).
unsafe impl lock_api::RawRwLockTimed for RawBrLock {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_for(&self, timeout: Self::Duration) -> Option<BrReadGuard> {
        self.lockdep_timed_for(
            M::Read,
            timeout,
            |d| self.try_read_until(*d),
            || Some(self.read()),
        )
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_until(&self, deadline: Self::Instant) -> Option<BrReadGuard> {
        self.lockdep_timed(M::Read, || self.try_read_until(deadline))
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_for(&self, timeout: Self::Duration) -> Option<lock_api::GuardSend> {
        // Through the (checked) `_until` or blocking call: checked once, there.
        match crate::primitive::deadline_after(timeout) {
            Some(d) => self.try_lock_exclusive_until(d),
            None => Some(lock_api::RawRwLock::lock_exclusive(self)),
        }
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_until(&self, deadline: Self::Instant) -> Option<lock_api::GuardSend> {
        self.lockdep_timed(M::Write, || {
            self.try_write_until(deadline)
                .then(lock_api::GuardSend::new)
        })
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawBrLock, RwLock);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Readers on one shard share. Two read holds from one thread (one shard), and a
    /// reader that waits for another reader while holding its own, both get in.
    #[test]
    fn readers_on_one_shard_share() {
        static L: RawBrLock = RawBrLock::new();
        let l = &L;
        let a = l.read();
        let b = l
            .try_read()
            .expect("a second reader on the same shard gets in");
        assert!(!l.try_write(), "a writer waits for both");
        // A reader pinned to our CPU (any thread: its shard may equal ours) gets in while we hold ours.
        let other = std::thread::spawn(move || {
            let g = l.read();
            unsafe { l.read_unlock(g) };
        });
        other.join().unwrap();
        unsafe {
            l.read_unlock(a);
            l.read_unlock(b);
        }
        assert!(l.try_write());
        assert!(l.try_read().is_none());
        unsafe { l.write_unlock() };
    }
}
