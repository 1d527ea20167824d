//! locklab's own primitives, as the lab runs them.

use super::{Kind, LockInfo, Queue, RefCountUnderTest, condvar, lock, refcount};
use crate::engine::workload::Shared;
use crate::{condvar_adapter, count_under_lock, mutex_adapter, rwlock_adapter};
use std::sync::atomic::{AtomicI64, Ordering};

mutex_adapter!(Tas, locklab::TasLock<Shared>);
mutex_adapter!(Ticket, locklab::TicketLock<Shared>);
mutex_adapter!(Mcs, locklab::McsLock<Shared>);
mutex_adapter!(QSpin, locklab::QueuedSpinLock<Shared>);
mutex_adapter!(Mutex, locklab::Mutex<Shared>);
count_under_lock!(SpinlockCount, locklab::SpinLock<i64>);
rwlock_adapter!(RwSpin, locklab::RwSpinLock<Shared>);
rwlock_adapter!(RwSem, locklab::RwSem<Shared>);
rwlock_adapter!(PercpuRwSem, locklab::PercpuRwSem<Shared>);

// `RwSem<Shared>` with the reader bias.
rwlock_adapter!(
    RwSemBiased,
    locklab::RwSem<Shared>,
    locklab::RwSem::from_raw(
        locklab::raw::RawRwSem::with_reader_bias(),
        Shared::default()
    )
);
rwlock_adapter!(RecursiveRwSem, locklab::RecursiveRwSem<Shared>);
rwlock_adapter!(Br, locklab::BrLock<Shared>);

/// `SeqLock<Shared>`: reads are lockless copies (retried on overlap), writes go through the write guard.
pub struct Seq(locklab::SeqLock<Shared>);

impl super::LockUnderTest for Seq {
    const HAS_SHARED_MODE: bool = true;
    fn new() -> Self {
        Seq(locklab::SeqLock::new(Shared::default()))
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        f(&mut self.0.write())
    }
    #[inline(always)]
    fn shared<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        f(&self.0.read())
    }
}

/// `LockRef`: get is one lockless CAS, put is `put_not_zero` (lockless unless it is the last).
pub struct LockRefCount(locklab::LockRef);

impl RefCountUnderTest for LockRefCount {
    fn new() -> Self {
        LockRefCount(locklab::LockRef::new(1))
    }
    #[inline(always)]
    fn get(&self) {
        self.0.get();
    }
    #[inline(always)]
    fn put(&self) {
        // The object's own reference keeps the count >= 1, so this always drops ours.
        let dropped = self.0.put_not_zero();
        debug_assert!(dropped);
    }
}

/// The lock-free baseline: `fetch_add` / `fetch_sub` on one counter.
pub struct AtomicCount(AtomicI64);

impl RefCountUnderTest for AtomicCount {
    fn new() -> Self {
        AtomicCount(AtomicI64::new(1))
    }
    #[inline(always)]
    fn get(&self) {
        // Relaxed: a reference count publishes nothing on get.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    #[inline(always)]
    fn put(&self) {
        // Release, as `Arc`'s drop: prior uses of the object happen-before the last put.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

condvar_adapter!(
    OurCondvar,
    locklab::Mutex<Queue>,
    locklab::Condvar,
    lock(m) => m.lock(),
    wait(cv, g) => {
        let mut g = g;
        cv.wait(&mut g);
        g
    }
);

/// Registry entries.
pub fn entries() -> Vec<LockInfo> {
    vec![
        condvar::<OurCondvar>(
            "condvar",
            Kind::Ours,
            "locklab Mutex + Condvar (notify moves a watching waiter with no wake-up, requeues sleepers onto the mutex; no herd)",
        ),
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
        lock::<RwSpin>(
            "rwspinlock",
            Kind::Ours,
            "queued reader-writer spinlock (the kernel's qrwlock): readers pay an RMW to lock and unlock",
        ),
        lock::<RwSem>(
            "rwsem",
            Kind::Ours,
            "the kernel's rwsem: writer spinning (also on readers, bounded), reader stealing, hand-off",
        ),
        lock::<RwSemBiased>(
            "rwsem-biased",
            Kind::Ours,
            "the rwsem with the reader bias (BRAVO): readers publish in a global table, writers revoke",
        ),
        lock::<PercpuRwSem>(
            "percpu-rwsem",
            Kind::Ours,
            "percpu rw-semaphore: per-thread reader counters, no locked op to read; writers membarrier",
        ),
        lock::<RecursiveRwSem>(
            "recursive-rwsem",
            Kind::Ours,
            "reader-preferring sleeping rwlock (glibc's default pthread_rwlock): a read never waits behind a waiting writer",
        ),
        lock::<Br>(
            "brlock",
            Kind::Ours,
            "big-reader lock (lglock): a spinlock per CPU; writers take them all",
        ),
        lock::<Seq>(
            "seqlock",
            Kind::Ours,
            "sequence lock: lockless retrying readers, spinlock-serialised writers",
        ),
        refcount::<LockRefCount>(
            "lockref",
            Kind::Ours,
            "the kernel's lockref: spinlock + count in one word, get/put in one cmpxchg",
        ),
        refcount::<SpinlockCount>(
            "spinlock-count",
            Kind::Ours,
            "a count under our spinlock (refcount baseline)",
        ),
        refcount::<AtomicCount>(
            "atomic-count",
            Kind::Baseline,
            "an atomic fetch_add/fetch_sub count (refcount baseline)",
        ),
    ]
}
