//! Everything the lab can measure, behind two traits, and the registry of names.
//!
//! - [`LockUnderTest`]: a lock around [`Shared`], with an exclusive mode (and a shared mode if it has
//!   one; exclusive locks run shared sections exclusively). Runs `mutex` and `rw`.
//! - [`RefCountUnderTest`]: a reference count: `get` and `put`. Runs `refcount`.
//!
//! Each adapter is a few lines in [`ours`] or [`peers`]; [`registry`] lists them by name. The runner is
//! generic over the trait, so every lock's loop is compiled for that lock, with no dynamic dispatch in
//! the measured path.

pub mod ours;
pub mod peers;

use crate::runner::{Clock, TrialOutcome, TrialSpec, run_lock, run_refcount};
use crate::workload::{Shared, Workload};

/// A lock protecting a [`Shared`].
pub trait LockUnderTest: Send + Sync + 'static {
    /// Whether [`shared`](Self::shared) really shares (for the listing only).
    const HAS_SHARED_MODE: bool = false;

    /// A new, unlocked lock.
    fn new() -> Self;

    /// Locks exclusively, runs `f` on the data, unlocks.
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R;

    /// Locks in shared mode, runs `f` on the data, unlocks. Exclusive locks take the exclusive mode.
    #[inline]
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

/// Whose lock it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// locklab's.
    Ours,
    /// Another crate's, or the platform's.
    Peer,
    /// Not a lock: a reference point (e.g. `atomic-count`), shown beside the locks but never a winner.
    Baseline,
}

impl Kind {
    /// `ours`, `peer` or `baseline`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::Peer => "peer",
            Kind::Baseline => "baseline",
        }
    }
}

/// Runs one trial of one workload.
pub type TrialFn = fn(&TrialSpec, &dyn Clock) -> TrialOutcome;

/// One lock the lab knows.
#[derive(Clone)]
pub struct LockInfo {
    /// Command-line name (lab.md).
    pub name: &'static str,
    /// Ours or a peer.
    pub kind: Kind,
    /// One line for `locklab list`.
    pub summary: &'static str,
    /// Runner for the `mutex` and `rw` workloads, if it is a lock.
    pub lock: Option<TrialFn>,
    /// Runner for the `refcount` workload, if it counts references.
    pub refcount: Option<TrialFn>,
    /// Whether it has a real shared mode.
    pub shared_mode: bool,
}

impl LockInfo {
    /// The trial runner for `w`, if this lock supports it.
    pub fn runner(&self, w: Workload) -> Option<TrialFn> {
        match w {
            Workload::Mutex | Workload::Rw => self.lock,
            Workload::Refcount => self.refcount,
        }
    }

    /// Whether it runs `w`.
    pub fn supports(&self, w: Workload) -> bool {
        self.runner(w).is_some()
    }
}

/// Registry entry for a [`LockUnderTest`].
pub fn lock<L: LockUnderTest>(name: &'static str, kind: Kind, summary: &'static str) -> LockInfo {
    LockInfo {
        name,
        kind,
        summary,
        lock: Some(run_lock::<L>),
        refcount: None,
        shared_mode: L::HAS_SHARED_MODE,
    }
}

/// Registry entry for a [`RefCountUnderTest`].
pub fn refcount<R: RefCountUnderTest>(
    name: &'static str,
    kind: Kind,
    summary: &'static str,
) -> LockInfo {
    LockInfo {
        name,
        kind,
        summary,
        lock: None,
        refcount: Some(run_refcount::<R>),
        shared_mode: false,
    }
}

/// Every lock the lab knows: ours first, then the peers, in `locklab list` order.
pub fn registry() -> Vec<LockInfo> {
    let mut v = ours::entries();
    v.extend(peers::entries());
    v
}

/// Looks a lock up by name.
pub fn find(name: &str) -> Option<LockInfo> {
    registry().into_iter().find(|l| l.name == name)
}

/// An adapter for any `lock_api`-style mutex type `$m<Shared>` with `lock()` returning a guard.
#[macro_export]
macro_rules! mutex_adapter {
    ($adapter:ident, $m:ty) => {
        /// Adapter (see the registry for its summary).
        pub struct $adapter($m);
        impl $crate::locks::LockUnderTest for $adapter {
            fn new() -> Self {
                $adapter(<$m>::new(Default::default()))
            }
            #[inline]
            fn exclusive<R>(&self, f: impl FnOnce(&mut $crate::workload::Shared) -> R) -> R {
                let mut g = self.0.lock();
                f(&mut g)
            }
        }
    };
}

/// An adapter for any `lock_api`-style rwlock type `$m<Shared>` with `read()` / `write()`.
#[macro_export]
macro_rules! rwlock_adapter {
    ($adapter:ident, $m:ty) => {
        /// Adapter (see the registry for its summary).
        pub struct $adapter($m);
        impl $crate::locks::LockUnderTest for $adapter {
            const HAS_SHARED_MODE: bool = true;
            fn new() -> Self {
                $adapter(<$m>::new(Default::default()))
            }
            #[inline]
            fn exclusive<R>(&self, f: impl FnOnce(&mut $crate::workload::Shared) -> R) -> R {
                let mut g = self.0.write();
                f(&mut g)
            }
            #[inline]
            fn shared<R>(&self, f: impl FnOnce(&$crate::workload::Shared) -> R) -> R {
                let g = self.0.read();
                f(&g)
            }
        }
    };
}

/// A reference count kept under a mutex-like lock: the "count under a lock" baseline.
#[macro_export]
macro_rules! count_under_lock {
    ($adapter:ident, $m:ty) => {
        /// Adapter (see the registry for its summary).
        pub struct $adapter($m);
        impl $crate::locks::RefCountUnderTest for $adapter {
            fn new() -> Self {
                $adapter(<$m>::new(1))
            }
            #[inline]
            fn get(&self) {
                *self.0.lock() += 1;
            }
            #[inline]
            fn put(&self) {
                *self.0.lock() -= 1;
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_match_lab_md() {
        let reg = registry();
        let names: HashSet<_> = reg.iter().map(|l| l.name).collect();
        assert_eq!(names.len(), reg.len(), "duplicate lock names");
        for n in [
            "tas",
            "ticket",
            "mcs",
            "qspinlock",
            "mutex",
            "spinlock-count",
            "atomic-count",
            "std-mutex",
            "std-rwlock",
            "parking-lot-mutex",
            "parking-lot-fair-mutex",
            "parking-lot-rwlock",
            "spin-mutex",
            "spin-ticket",
            "pthread-mutex",
            "pthread-rwlock",
            "crossbeam-sharded",
        ] {
            assert!(names.contains(n), "{n} missing from the registry");
        }
        for l in &reg {
            assert!(
                l.lock.is_some() || l.refcount.is_some(),
                "{} runs nothing",
                l.name
            );
            let peer = l.kind == Kind::Peer;
            let prefixed = ["std-", "parking-lot-", "spin-", "pthread-", "crossbeam-"]
                .iter()
                .any(|p| l.name.starts_with(p));
            assert_eq!(
                peer, prefixed,
                "{}: peers are prefixed with their crate, ours are bare",
                l.name
            );
        }
    }
}
