//! Other crates' and the platform's locks, each in a few lines.

use super::{Kind, LockInfo, LockUnderTest, Queue, condvar, lock, refcount};
use crate::engine::workload::Shared;
use crate::{condvar_adapter, count_under_lock, mutex_adapter, rwlock_adapter};
use std::cell::UnsafeCell;

/// std's `Mutex`, poisoning unwrapped (no test panics inside).
pub struct StdMutex(std::sync::Mutex<Shared>);
impl LockUnderTest for StdMutex {
    fn new() -> Self {
        StdMutex(Default::default())
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }
}

/// std's `RwLock`.
pub struct StdRwLock(std::sync::RwLock<Shared>);
impl LockUnderTest for StdRwLock {
    const HAS_SHARED_MODE: bool = true;
    fn new() -> Self {
        StdRwLock(Default::default())
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        f(&mut self.0.write().unwrap())
    }
    #[inline(always)]
    fn shared<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        f(&self.0.read().unwrap())
    }
}

/// A count under std's mutex.
pub struct StdMutexCount(std::sync::Mutex<i64>);
impl super::RefCountUnderTest for StdMutexCount {
    fn new() -> Self {
        StdMutexCount(std::sync::Mutex::new(1))
    }
    #[inline(always)]
    fn get(&self) {
        *self.0.lock().unwrap() += 1;
    }
    #[inline(always)]
    fn put(&self) {
        *self.0.lock().unwrap() -= 1;
    }
}

mutex_adapter!(PlMutex, parking_lot::Mutex<Shared>);
mutex_adapter!(PlFairMutex, parking_lot::FairMutex<Shared>);
rwlock_adapter!(PlRwLock, parking_lot::RwLock<Shared>);
count_under_lock!(PlMutexCount, parking_lot::Mutex<i64>);
mutex_adapter!(SpinMutex, spin::mutex::SpinMutex<Shared>);
mutex_adapter!(SpinTicket, spin::mutex::TicketMutex<Shared>);

/// crossbeam's `ShardedLock` (per-shard reader locks, the brlock idea).
pub struct CrossbeamSharded(crossbeam_utils::sync::ShardedLock<Shared>);
impl LockUnderTest for CrossbeamSharded {
    const HAS_SHARED_MODE: bool = true;
    fn new() -> Self {
        CrossbeamSharded(Default::default())
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        f(&mut self.0.write().unwrap())
    }
    #[inline(always)]
    fn shared<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        f(&self.0.read().unwrap())
    }
}

/// glibc's `pthread_mutex_t` of type `TYPE` (0: default attributes; 3:
/// `PTHREAD_MUTEX_ADAPTIVE_NP`, glibc's spinning mutex). Boxed: a pthread mutex must not move once
/// used.
pub struct PthreadMutexOf<const TYPE: i32> {
    m: Box<UnsafeCell<libc::pthread_mutex_t>>,
    data: UnsafeCell<Shared>,
}

/// glibc's default mutex.
pub type PthreadMutex = PthreadMutexOf<0>;
/// glibc's adaptive mutex (`PTHREAD_MUTEX_ADAPTIVE_NP`).
pub type PthreadAdaptiveMutex = PthreadMutexOf<3>;

// SAFETY: `data` is accessed only with `m` held; the pthread mutex is made for sharing between threads.
unsafe impl<const TYPE: i32> Sync for PthreadMutexOf<TYPE> {}
// SAFETY: as above; the mutex is not held when the adapter moves.
unsafe impl<const TYPE: i32> Send for PthreadMutexOf<TYPE> {}

impl<const TYPE: i32> LockUnderTest for PthreadMutexOf<TYPE> {
    fn new() -> Self {
        let m = Box::new(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
        if TYPE != 0 {
            // SAFETY: a fresh attribute object and a fresh, unused, pinned (boxed) mutex.
            unsafe {
                let mut a: libc::pthread_mutexattr_t = std::mem::zeroed();
                libc::pthread_mutexattr_init(&mut a);
                let ok = libc::pthread_mutexattr_settype(&mut a, TYPE) == 0
                    && libc::pthread_mutex_init(m.get(), &a) == 0;
                libc::pthread_mutexattr_destroy(&mut a);
                assert!(ok, "glibc refused mutex type {TYPE}");
            }
        }
        PthreadMutexOf {
            m,
            data: Default::default(),
        }
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        // SAFETY: `m` is an initialised, pinned (boxed) mutex; `data` is only touched between lock and
        // unlock, so the `&mut` is unique.
        unsafe {
            libc::pthread_mutex_lock(self.m.get());
            let r = f(&mut *self.data.get());
            libc::pthread_mutex_unlock(self.m.get());
            r
        }
    }
}

impl<const TYPE: i32> Drop for PthreadMutexOf<TYPE> {
    fn drop(&mut self) {
        // SAFETY: unlocked (no guard outlives `exclusive`), and never used again.
        unsafe { libc::pthread_mutex_destroy(self.m.get()) };
    }
}

/// glibc's `pthread_rwlock_t` with default attributes (reader-preferring). Boxed, as the mutex.
pub struct PthreadRwLock {
    l: Box<UnsafeCell<libc::pthread_rwlock_t>>,
    data: UnsafeCell<Shared>,
}

// SAFETY: `data` is written only with `l` held exclusively and read with it held shared.
unsafe impl Sync for PthreadRwLock {}
// SAFETY: as above; not held when the adapter moves.
unsafe impl Send for PthreadRwLock {}

impl LockUnderTest for PthreadRwLock {
    const HAS_SHARED_MODE: bool = true;
    fn new() -> Self {
        PthreadRwLock {
            l: Box::new(UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER)),
            data: Default::default(),
        }
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        // SAFETY: initialised, pinned rwlock; exclusive mode makes the `&mut` unique.
        unsafe {
            libc::pthread_rwlock_wrlock(self.l.get());
            let r = f(&mut *self.data.get());
            libc::pthread_rwlock_unlock(self.l.get());
            r
        }
    }
    #[inline(always)]
    fn shared<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        // SAFETY: initialised, pinned rwlock; shared mode excludes writers while we read.
        unsafe {
            libc::pthread_rwlock_rdlock(self.l.get());
            let r = f(&*self.data.get());
            libc::pthread_rwlock_unlock(self.l.get());
            r
        }
    }
}

impl Drop for PthreadRwLock {
    fn drop(&mut self) {
        // SAFETY: unlocked, and never used again.
        unsafe { libc::pthread_rwlock_destroy(self.l.get()) };
    }
}

condvar_adapter!(
    PlCondvar,
    parking_lot::Mutex<Queue>,
    parking_lot::Condvar,
    lock(m) => m.lock(),
    wait(cv, g) => {
        let mut g = g;
        cv.wait(&mut g);
        g
    }
);

condvar_adapter!(
    StdCondvar,
    std::sync::Mutex<Queue>,
    std::sync::Condvar,
    lock(m) => m.lock().unwrap_or_else(|e| e.into_inner()),
    wait(cv, g) => cv.wait(g).unwrap_or_else(|e| e.into_inner()),
);

/// Registry entries.
pub fn entries() -> Vec<LockInfo> {
    vec![
        condvar::<StdCondvar>(
            "std-condvar",
            Kind::Peer,
            "std::sync::Mutex + Condvar (futex; notify wakes, waiters re-take the mutex)",
        ),
        condvar::<PlCondvar>(
            "parking-lot-condvar",
            Kind::Peer,
            "parking_lot Mutex + Condvar (requeues waiters onto the mutex)",
        ),
        lock::<StdMutex>(
            "std-mutex",
            Kind::Peer,
            "std::sync::Mutex (futex, spins 100 loads, then sleeps)",
        ),
        lock::<StdRwLock>("std-rwlock", Kind::Peer, "std::sync::RwLock (futex)"),
        lock::<PlMutex>(
            "parking-lot-mutex",
            Kind::Peer,
            "parking_lot::Mutex (1 byte, spin-then-park, eventual fairness)",
        ),
        lock::<PlFairMutex>(
            "parking-lot-fair-mutex",
            Kind::Peer,
            "parking_lot::FairMutex (always hands off)",
        ),
        lock::<PlRwLock>("parking-lot-rwlock", Kind::Peer, "parking_lot::RwLock"),
        lock::<SpinMutex>(
            "spin-mutex",
            Kind::Peer,
            "spin::mutex::SpinMutex (test-and-set spinlock)",
        ),
        lock::<SpinTicket>(
            "spin-ticket",
            Kind::Peer,
            "spin::mutex::TicketMutex (ticket spinlock)",
        ),
        lock::<PthreadMutex>(
            "pthread-mutex",
            Kind::Peer,
            "glibc pthread_mutex_t, default attributes",
        ),
        lock::<PthreadAdaptiveMutex>(
            "pthread-adaptive-mutex",
            Kind::Peer,
            "glibc pthread_mutex_t, PTHREAD_MUTEX_ADAPTIVE_NP: bounded spin with exponential backoff, then futex",
        ),
        lock::<PthreadRwLock>(
            "pthread-rwlock",
            Kind::Peer,
            "glibc pthread_rwlock_t, default attributes",
        ),
        lock::<CrossbeamSharded>(
            "crossbeam-sharded",
            Kind::Peer,
            "crossbeam_utils::sync::ShardedLock (per-shard reader locks)",
        ),
        refcount::<StdMutexCount>(
            "std-mutex-count",
            Kind::Peer,
            "a count under std::sync::Mutex (refcount peer)",
        ),
        refcount::<PlMutexCount>(
            "parking-lot-mutex-count",
            Kind::Peer,
            "a count under parking_lot::Mutex (refcount peer)",
        ),
    ]
}
