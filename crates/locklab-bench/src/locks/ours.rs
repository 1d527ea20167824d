//! locklab's own primitives, as the lab runs them.

use super::{Kind, LockInfo, RefCountUnderTest, lock, refcount};
use crate::workload::Shared;
use crate::{count_under_lock, mutex_adapter};
use std::sync::atomic::{AtomicI64, Ordering};

mutex_adapter!(Tas, locklab::TasLock<Shared>);
mutex_adapter!(Ticket, locklab::TicketLock<Shared>);
mutex_adapter!(Mcs, locklab::McsLock<Shared>);
mutex_adapter!(QSpin, locklab::QueuedSpinLock<Shared>);
mutex_adapter!(Mutex, locklab::Mutex<Shared>);
count_under_lock!(SpinlockCount, locklab::SpinLock<i64>);

/// The lock-free baseline: `fetch_add` / `fetch_sub` on one counter.
pub struct AtomicCount(AtomicI64);

impl RefCountUnderTest for AtomicCount {
    fn new() -> Self {
        AtomicCount(AtomicI64::new(1))
    }
    #[inline]
    fn get(&self) {
        // Relaxed: a reference count publishes nothing on get.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    #[inline]
    fn put(&self) {
        // Release, as `Arc`'s drop: prior uses of the object happen-before the last put.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// Registry entries.
pub fn entries() -> Vec<LockInfo> {
    vec![
        lock::<Tas>(
            "tas",
            Kind::Ours,
            "test-and-test-and-set spinlock with exponential backoff (baseline)",
        ),
        lock::<Ticket>(
            "ticket",
            Kind::Ours,
            "FIFO ticket spinlock; unlock is a plain store",
        ),
        lock::<Mcs>(
            "mcs",
            Kind::Ours,
            "MCS queue spinlock; each waiter spins on its own line",
        ),
        lock::<QSpin>(
            "qspinlock",
            Kind::Ours,
            "the kernel's queued spinlock: 4 bytes, pending + MCS queue, store unlock",
        ),
        lock::<Mutex>(
            "mutex",
            Kind::Ours,
            "adaptive futex mutex: OSQ optimistic spinning, FIFO sleepers, hand-off",
        ),
        refcount::<SpinlockCount>(
            "spinlock-count",
            Kind::Ours,
            "a count under our spinlock (refcount baseline)",
        ),
        refcount::<AtomicCount>(
            "atomic-count",
            Kind::Ours,
            "an atomic fetch_add/fetch_sub count (refcount baseline)",
        ),
    ]
}
