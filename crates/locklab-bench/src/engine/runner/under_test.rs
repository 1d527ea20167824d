//! What the runner drives: a lock, a reference count, a condvar queue or an RCU scheme under test.
//! The adapters (`crate::locks`) implement these; the runner is generic over them, so every lock's
//! loop is compiled for that lock, with no dynamic dispatch in the measured path.

use crate::engine::workload::Shared;

/// A lock protecting a [`Shared`].
pub trait LockUnderTest: Send + Sync + 'static {
    /// Whether [`shared`](Self::shared) really shares (for the listing only).
    const HAS_SHARED_MODE: bool = false;

    /// A new, unlocked lock.
    fn new() -> Self;

    /// Locks exclusively, runs `f` on the data, unlocks.
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R;

    /// Locks in shared mode, runs `f` on the data, unlocks. Exclusive locks take the exclusive mode.
    #[inline(always)]
    fn shared<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        self.exclusive(|s| f(s))
    }
}

/// A reference count on a shared object.
pub trait RefCountUnderTest: Send + Sync + 'static {
    /// A count of 1 (the object's own reference).
    fn new() -> Self;
    /// Takes a reference.
    fn get(&self);
    /// Drops a reference.
    fn put(&self);
}

/// A bounded queue on one mutex and two condvars (not full / not empty): the `condvar` workload.
pub trait CondvarUnderTest: Send + Sync + 'static {
    /// An empty, open queue of `slots` messages.
    fn new(slots: usize) -> Self;
    /// Waits for room, pushes `msg`, and notifies the consumers (one or all). `false` once closed.
    fn produce(&self, msg: u64, notify_all: bool) -> bool;
    /// Waits for a message, pops it, and notifies the producers (one or all). `None` once closed.
    fn consume(&self, notify_all: bool) -> Option<u64>;
    /// Closes the queue and wakes every waiter (the end of a trial).
    fn close(&self);
}

/// An RCU (or RCU-like) scheme: a published object that readers dereference, and per-thread slots
/// whose old objects are retired after readers are done. Runs `rcu-read` and `call-rcu`.
pub trait RcuUnderTest: Send + Sync + 'static {
    /// A scheme with a published object and `threads` retire slots.
    fn new(threads: usize) -> Self;
    /// Read-side lock, dereference of the published object, `f` on it, unlock: read `i` of worker
    /// `t` (QSBR uses them to announce a quiescent state now and then).
    fn read<R>(&self, t: usize, i: u64, f: impl FnOnce(&crate::engine::workload::Shared) -> R)
    -> R;
    /// Publishes a new object (`v` in its first word) in slot `t` and retires the old one.
    fn retire(&self, t: usize, v: u64);
    /// Worker `t` (one of the updaters) replaces the published object that [`read`](Self::read)
    /// dereferences with a new one (`v` in its first word) and retires the old one, while readers run
    /// (`rcu-update`; several updaters may call it at once).
    fn update(&self, t: usize, v: u64);
    /// One blocking grace period (`rcu-sync`; only schemes registered with a `rcu_sync` runner).
    fn synchronize(&self) {
        unreachable!("this scheme has no synchronize")
    }
    /// (grace periods, synchronize calls) its domain has counted so far, if it counts them.
    fn sync_counts(&self) -> Option<(u64, u64)> {
        None
    }
    /// Waits until every retired object has been freed (after the trial; not timed).
    fn drain(&self) {}
}
