//! What the seeds' models share: a reader-writer lock over any data ([`RwModel`], implemented by our
//! locks, the peers' and two historical designs the seeds measured), and one measurement of a model
//! under the lab's runner ([`Measured`]: throughput, CPU time, idle share).

use crate::engine::runner::{Clock, Op, TrialSpec, run_trial};
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A reader-writer lock around a `T`, as a model takes it: guards, so a model can couple locks hand
/// over hand (take the child's, then drop the parent's). Exclusive locks take the exclusive mode for
/// reads too.
pub trait RwModel<T: 'static>: Send + Sync + 'static {
    /// The lock's name in tables (the lab's name where it has one).
    const NAME: &'static str;
    /// A shared hold.
    type Read<'a>: Deref<Target = T>
    where
        Self: 'a;
    /// An exclusive hold.
    type Write<'a>: DerefMut<Target = T>
    where
        Self: 'a;
    /// A new, unlocked lock around `v`.
    fn new(v: T) -> Self;
    /// Takes the shared mode.
    fn read_guard(&self) -> Self::Read<'_>;
    /// Takes the exclusive mode.
    fn write_guard(&self) -> Self::Write<'_>;
    /// Runs `f` under the shared mode.
    #[inline]
    fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.read_guard())
    }
    /// Runs `f` under the exclusive mode.
    #[inline]
    fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.write_guard())
    }
}

impl<T: Send + Sync + 'static> RwModel<T> for locklab::Mutex<T> {
    const NAME: &'static str = "mutex";
    type Read<'a> = locklab::MutexGuard<'a, T>;
    type Write<'a> = locklab::MutexGuard<'a, T>;
    fn new(v: T) -> Self {
        locklab::Mutex::new(v)
    }
    #[inline]
    fn read_guard(&self) -> Self::Read<'_> {
        self.lock()
    }
    #[inline]
    fn write_guard(&self) -> Self::Write<'_> {
        self.lock()
    }
}

type SemRead<'a, T> = lock_api::RwLockReadGuard<'a, locklab::raw::RawRwSem, T>;
type SemWrite<'a, T> = lock_api::RwLockWriteGuard<'a, locklab::raw::RawRwSem, T>;

impl<T: Send + Sync + 'static> RwModel<T> for locklab::RwSem<T> {
    const NAME: &'static str = "rwsem";
    type Read<'a> = SemRead<'a, T>;
    type Write<'a> = SemWrite<'a, T>;
    fn new(v: T) -> Self {
        locklab::RwSem::new(v)
    }
    #[inline]
    fn read_guard(&self) -> Self::Read<'_> {
        self.read()
    }
    #[inline]
    fn write_guard(&self) -> Self::Write<'_> {
        self.write()
    }
}

/// An `RwSem` built with one of `RawRwSem`'s historical constructors, as a model lock.
macro_rules! old_rwsem {
    ($(#[$doc:meta])* $name:ident, $label:literal, $ctor:ident) => {
        $(#[$doc])*
        pub struct $name<T>(locklab::RwSem<T>);

        impl<T: Send + Sync + 'static> RwModel<T> for $name<T> {
            const NAME: &'static str = $label;
            type Read<'a> = SemRead<'a, T>;
            type Write<'a> = SemWrite<'a, T>;
            fn new(v: T) -> Self {
                $name(locklab::RwSem::from_raw(locklab::raw::RawRwSem::$ctor(), v))
            }
            #[inline]
            fn read_guard(&self) -> Self::Read<'_> {
                self.0.read()
            }
            #[inline]
            fn write_guard(&self) -> Self::Write<'_> {
                self.0.write()
            }
        }
    };
}

old_rwsem!(
    /// Our `RwSem` with writer spinning on reader-owned locks turned off: the kernel's rwsem of
    /// v3.16-v5.2 ([`locklab::raw::RawRwSem::without_reader_spinning`]), the one seed 003 measured.
    OldRwSem,
    "rwsem-no-reader-spin",
    without_reader_spinning
);

old_rwsem!(
    /// Our `RwSem` with all writer spinning turned off: the kernel's rwsem before v3.16
    /// ([`locklab::raw::RawRwSem::without_spinning`]), the one seed 001 measured.
    NoSpinRwSem,
    "rwsem-no-spin",
    without_spinning
);

impl<T: Send + Sync + 'static> RwModel<T> for parking_lot::RwLock<T> {
    const NAME: &'static str = "parking-lot-rwlock";
    type Read<'a> = parking_lot::RwLockReadGuard<'a, T>;
    type Write<'a> = parking_lot::RwLockWriteGuard<'a, T>;
    fn new(v: T) -> Self {
        parking_lot::RwLock::new(v)
    }
    #[inline]
    fn read_guard(&self) -> Self::Read<'_> {
        self.read()
    }
    #[inline]
    fn write_guard(&self) -> Self::Write<'_> {
        self.write()
    }
}

impl<T: Send + Sync + 'static> RwModel<T> for std::sync::RwLock<T> {
    const NAME: &'static str = "std-rwlock";
    type Read<'a> = std::sync::RwLockReadGuard<'a, T>;
    type Write<'a> = std::sync::RwLockWriteGuard<'a, T>;
    fn new(v: T) -> Self {
        std::sync::RwLock::new(v)
    }
    #[inline]
    fn read_guard(&self) -> Self::Read<'_> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }
    #[inline]
    fn write_guard(&self) -> Self::Write<'_> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Mason's 2011 btrfs tree lock, as the seed describes it: a reader-writer lock "based on mutexes so
/// that we still take advantage of the mutex adaptive spins for write locks". A reader takes the
/// mutex just long enough to count itself in; a writer takes the mutex (adaptive spinning against
/// other writers), which keeps new readers out, and waits for the readers inside to leave.
///
/// Orderings: a reader's count increment is made under the mutex, so a writer that takes the mutex
/// afterwards sees it; the reader's Release decrement pairs with the writer's Acquire load of zero
/// (the reader's reads happen before the writer's writes); a reader takes the mutex after the last
/// writer released it (its Acquire), so it sees that writer's data.
pub struct MutexRw<T> {
    mutex: locklab::Mutex<()>,
    readers: AtomicUsize,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is read only by counted readers while no writer can be past its wait (a writer holds
// the mutex, so no reader can count itself in, and waits for the count to reach zero), and written
// only by the one writer that holds the mutex after the count reached zero: the usual RwLock bounds.
unsafe impl<T: Send + Sync> Sync for MutexRw<T> {}

/// A shared hold of a [`MutexRw`]: counted in; dropping it counts out.
pub struct MutexRwRead<'a, T>(&'a MutexRw<T>);

impl<T> Deref for MutexRwRead<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: counted in (see the `Sync` impl): no writer writes until we leave.
        unsafe { &*self.0.data.get() }
    }
}

impl<T> Drop for MutexRwRead<'_, T> {
    fn drop(&mut self) {
        // Release pairs with the waiting writer's Acquire load.
        self.0.readers.fetch_sub(1, Ordering::Release);
    }
}

/// An exclusive hold of a [`MutexRw`]: the mutex, with no reader in.
pub struct MutexRwWrite<'a, T> {
    lock: &'a MutexRw<T>,
    _held: locklab::MutexGuard<'a, ()>,
}

impl<T> Deref for MutexRwWrite<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mutex is held and the reader count was zero: ours alone.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for MutexRwWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: Send + Sync + 'static> RwModel<T> for MutexRw<T> {
    const NAME: &'static str = "mutex-rw";
    type Read<'a> = MutexRwRead<'a, T>;
    type Write<'a> = MutexRwWrite<'a, T>;
    fn new(v: T) -> Self {
        MutexRw {
            mutex: locklab::Mutex::new(()),
            readers: AtomicUsize::new(0),
            data: UnsafeCell::new(v),
        }
    }
    #[inline]
    fn read_guard(&self) -> Self::Read<'_> {
        let _m = self.mutex.lock();
        // Relaxed: made under the mutex, which orders it before any later writer's wait.
        self.readers.fetch_add(1, Ordering::Relaxed);
        MutexRwRead(self)
    }
    #[inline]
    fn write_guard(&self) -> Self::Write<'_> {
        let m = self.mutex.lock();
        let mut spins = 0u32;
        // Acquire pairs with the readers' Release decrements.
        while self.readers.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        MutexRwWrite {
            lock: self,
            _held: m,
        }
    }
}

/// A pseudo-random word for thread `t`'s op `i` (splitmix64's finaliser: every output bit depends
/// on every input bit): which operation it is and which key it uses, the same sequence every run.
#[inline]
pub fn mix(t: usize, i: u64) -> u64 {
    let mut x = i ^ ((t as u64) << 40);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// One model run: throughput and CPU.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Measured {
    /// Operations per second, all threads.
    pub ops_per_sec: f64,
    /// The process's CPU seconds per million operations.
    pub cpu_s_per_mop: f64,
    /// Share of the CPUs the threads could run on that the process left idle, %.
    pub idle_pct: f64,
}

/// Runs `op` once under `spec` and measures it.
pub(crate) fn measure(spec: &TrialSpec, clock: &dyn Clock, op: impl Op) -> Measured {
    let out = run_trial(spec, clock, op);
    let ops = out.total_ops().max(1) as f64;
    let util = crate::engine::metrics::cpu_util_pct(
        out.cpu_ns,
        out.wall_ns,
        spec.threads.min(spec.cpus.len()),
    );
    Measured {
        ops_per_sec: out.ops_per_sec(),
        cpu_s_per_mop: out.cpu_ns as f64 / 1e9 / ops * 1e6,
        idle_pct: (100.0 - util).max(0.0),
    }
}

/// The median of `xs` (the upper middle one for an even count).
pub fn median_f64(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty());
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The median (by throughput) of `runs`.
pub fn median(mut runs: Vec<Measured>) -> Measured {
    assert!(!runs.is_empty());
    runs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    runs[runs.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Every model lock excludes writers from readers and writers: a writer leaves the pair unequal
    /// while it holds the lock; a reader must never see that.
    fn excludes<L: RwModel<(u64, u64)>>() {
        let l = L::new((0, 0));
        let torn = AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (l, torn) = (&l, &torn);
                s.spawn(move || {
                    for i in 0..5_000 {
                        if (i + t) % 3 == 0 {
                            l.write(|p| {
                                p.0 += 1;
                                std::hint::spin_loop();
                                p.1 += 1;
                            });
                        } else if l.read(|p| p.0 != p.1) {
                            torn.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert!(
            !torn.load(Ordering::Relaxed),
            "{}: a reader saw a half-done write",
            L::NAME
        );
        let (a, b) = l.read(|p| *p);
        assert_eq!(a, b);
        assert_eq!(
            a,
            (0..4u64)
                .map(|t| (0..5_000u64).filter(|i| (i + t) % 3 == 0).count() as u64)
                .sum::<u64>()
        );
    }

    #[test]
    fn every_model_lock_is_a_lock() {
        excludes::<locklab::Mutex<(u64, u64)>>();
        excludes::<locklab::RwSem<(u64, u64)>>();
        excludes::<OldRwSem<(u64, u64)>>();
        excludes::<NoSpinRwSem<(u64, u64)>>();
        excludes::<MutexRw<(u64, u64)>>();
        excludes::<parking_lot::RwLock<(u64, u64)>>();
        excludes::<std::sync::RwLock<(u64, u64)>>();
    }

    #[test]
    fn mutex_rw_readers_share() {
        let l = MutexRw::new(1u32);
        // A reader inside lets another reader in (a writer would wait for it).
        l.read(|a| l.read(|b| assert_eq!(a + b, 2)));
    }
}
