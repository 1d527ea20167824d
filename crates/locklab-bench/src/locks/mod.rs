//! Everything the lab can measure, as adapters to the traits the runner drives (`runner::under_test`),
//! and the registry of names.
//!
//! - [`LockUnderTest`]: a lock around [`Shared`](crate::engine::workload::Shared), with an exclusive mode (and a shared mode if it has
//!   one; exclusive locks run shared sections exclusively). Runs `mutex` and `rw`.
//! - [`RefCountUnderTest`]: a reference count: `get` and `put`. Runs `refcount`.
//!
//! Each adapter is a few lines in [`ours`] or [`peers`]; [`registry`] lists them by name. The runner is
//! generic over the trait, so every lock's loop is compiled for that lock, with no dynamic dispatch in
//! the measured path.

pub mod cpeers;
pub mod liburcu;
pub mod ours;
pub mod peers;
pub mod preload;
pub mod rcu;

use crate::engine::runner::{
    Clock, TrialOutcome, TrialSpec, run_call_rcu, run_condvar, run_lock, run_rcu_read,
    run_rcu_sync, run_rcu_update, run_refcount,
};
pub use crate::engine::runner::{CondvarUnderTest, LockUnderTest, RcuUnderTest, RefCountUnderTest};
pub use crate::engine::workload::NONE;
use crate::engine::workload::Workload;

/// The queue state every [`CondvarUnderTest`] adapter keeps under its mutex.
#[derive(Default)]
pub struct Queue {
    /// The messages, oldest first.
    pub items: std::collections::VecDeque<u64>,
    /// Capacity.
    pub slots: usize,
    /// Closed: every wait returns.
    pub closed: bool,
}

/// An adapter for a mutex + condvar pair: `lock(m) => expr` locks mutex `m` and gives the guard,
/// `wait(cv, g) => expr` waits on `cv` with guard `g` and gives the guard back (so one body serves
/// std's by-value `wait` and parking_lot's `&mut` one).
#[macro_export]
macro_rules! condvar_adapter {
    (
        $adapter:ident,
        $m:ty,
        $cv:ty,
        lock($lm:ident) => $lock:expr,
        wait($wcv:ident, $wg:ident) => $wait:expr $(,)?
    ) => {
        /// Adapter (see the registry for its summary).
        pub struct $adapter {
            queue: $m,
            not_full: $cv,
            not_empty: $cv,
        }
        impl $crate::locks::CondvarUnderTest for $adapter {
            fn new(slots: usize) -> Self {
                $adapter {
                    queue: <$m>::new($crate::locks::Queue {
                        slots,
                        ..Default::default()
                    }),
                    not_full: <$cv>::new(),
                    not_empty: <$cv>::new(),
                }
            }
            fn produce(&self, msg: u64, notify_all: bool) -> bool {
                let mut q = {
                    let $lm = &self.queue;
                    $lock
                };
                while q.items.len() >= q.slots && !q.closed {
                    q = {
                        let ($wcv, $wg) = (&self.not_full, q);
                        $wait
                    };
                }
                if q.closed {
                    return false;
                }
                q.items.push_back(msg);
                drop(q);
                if notify_all {
                    self.not_empty.notify_all();
                } else {
                    self.not_empty.notify_one();
                }
                true
            }
            fn consume(&self, notify_all: bool) -> Option<u64> {
                let mut q = {
                    let $lm = &self.queue;
                    $lock
                };
                while q.items.is_empty() && !q.closed {
                    q = {
                        let ($wcv, $wg) = (&self.not_empty, q);
                        $wait
                    };
                }
                let m = q.items.pop_front()?;
                drop(q);
                if notify_all {
                    self.not_full.notify_all();
                } else {
                    self.not_full.notify_one();
                }
                Some(m)
            }
            fn close(&self) {
                {
                    let $lm = &self.queue;
                    $lock
                }
                .closed = true;
                self.not_full.notify_all();
                self.not_empty.notify_all();
            }
        }
    };
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
    /// Runner for `condvar`, if it is a mutex + condvar pair.
    pub condvar: Option<TrialFn>,
    /// Runner for `rcu-read`, if it is an RCU scheme.
    pub rcu_read: Option<TrialFn>,
    /// Runner for `call-rcu`, if it is an RCU scheme that retires objects.
    pub call_rcu: Option<TrialFn>,
    /// Runner for `rcu-update`, if it is an RCU scheme that can replace the object readers read.
    pub rcu_update: Option<TrialFn>,
    /// Runner for `rcu-sync`, if it is an RCU scheme with a blocking `synchronize`.
    pub rcu_sync: Option<TrialFn>,
    /// Whether it has a real shared mode.
    pub shared_mode: bool,
    /// Why it cannot run in this build (a peer whose library was not found when the lab was built),
    /// and which workloads it would run; its runners are then all `None`.
    pub unavailable: Option<Unavailable>,
}

/// A lock the lab knows but cannot run in this build.
#[derive(Clone, Copy, Debug)]
pub struct Unavailable {
    /// One line: what is missing and how to get it.
    pub why: &'static str,
    /// The workloads it runs when available.
    pub workloads: &'static [Workload],
}

/// A registry entry that runs nothing yet: the constructors below fill in its runners.
fn runs_nothing(name: &'static str, kind: Kind, summary: &'static str) -> LockInfo {
    LockInfo {
        name,
        kind,
        summary,
        lock: None,
        refcount: None,
        condvar: None,
        rcu_read: None,
        call_rcu: None,
        rcu_update: None,
        rcu_sync: None,
        shared_mode: false,
        unavailable: None,
    }
}

/// Registry entry for a peer missing from this build: listed, never run.
pub fn unavailable(name: &'static str, summary: &'static str, u: Unavailable) -> LockInfo {
    LockInfo {
        shared_mode: true,
        unavailable: Some(u),
        ..runs_nothing(name, Kind::Peer, summary)
    }
}

impl LockInfo {
    /// The trial runner for `w`, if this lock supports it.
    pub fn runner(&self, w: Workload) -> Option<TrialFn> {
        match w {
            Workload::Mutex | Workload::Rw => self.lock,
            Workload::Refcount => self.refcount,
            Workload::Condvar => self.condvar,
            Workload::RcuRead => self.rcu_read,
            Workload::CallRcu => self.call_rcu,
            Workload::RcuUpdate => self.rcu_update,
            Workload::RcuSync => self.rcu_sync,
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
        lock: Some(run_lock::<L>),
        shared_mode: L::HAS_SHARED_MODE,
        ..runs_nothing(name, kind, summary)
    }
}

/// Registry entry for a [`CondvarUnderTest`].
pub fn condvar<C: CondvarUnderTest>(
    name: &'static str,
    kind: Kind,
    summary: &'static str,
) -> LockInfo {
    LockInfo {
        condvar: Some(run_condvar::<C>),
        ..runs_nothing(name, kind, summary)
    }
}

/// Registry entry for a [`RefCountUnderTest`].
pub fn refcount<R: RefCountUnderTest>(
    name: &'static str,
    kind: Kind,
    summary: &'static str,
) -> LockInfo {
    LockInfo {
        refcount: Some(run_refcount::<R>),
        ..runs_nothing(name, kind, summary)
    }
}

/// The `none` baseline: runs every workload with no lock at all (each thread on its own copy of the
/// data; the refcount loop with no count), so it measures the harness's own cost. Every run measures it
/// (the limits and `lock_ns` are built on it).
pub fn none() -> LockInfo {
    LockInfo {
        name: NONE,
        kind: Kind::Baseline,
        summary: "no lock: the same loop on per-thread data (the harness's own cost; every run has it)",
        lock: Some(crate::engine::runner::run_unlocked),
        refcount: Some(run_refcount::<crate::engine::runner::NoCount>),
        condvar: None,
        rcu_read: Some(run_rcu_read::<rcu::Unprotected>),
        call_rcu: Some(run_call_rcu::<rcu::Unprotected>),
        rcu_update: Some(run_rcu_update::<rcu::Unprotected>),
        rcu_sync: Some(run_rcu_sync::<rcu::Unprotected>),
        shared_mode: true,
        unavailable: None,
    }
}

/// Registry entry for an [`RcuUnderTest`].
pub fn rcu<R: RcuUnderTest>(name: &'static str, kind: Kind, summary: &'static str) -> LockInfo {
    LockInfo {
        rcu_read: Some(run_rcu_read::<R>),
        call_rcu: Some(run_call_rcu::<R>),
        rcu_update: Some(run_rcu_update::<R>),
        shared_mode: true,
        ..runs_nothing(name, kind, summary)
    }
}

/// Every lock the lab knows: the `none` baseline, ours, then the peers, in `locklab list` order.
pub fn registry() -> Vec<LockInfo> {
    let mut v = vec![none()];
    v.extend(ours::entries());
    v.extend(rcu::ours());
    v.extend(preload::entries());
    v.extend(peers::entries());
    v.extend(rcu::peers());
    v.extend(liburcu::peers());
    v.extend(cpeers::peers());
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
            #[inline(always)]
            fn exclusive<R>(
                &self,
                f: impl FnOnce(&mut $crate::engine::workload::Shared) -> R,
            ) -> R {
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
        $crate::rwlock_adapter!($adapter, $m, <$m>::new(Default::default()));
    };
    // `$new`: how to build the lock, when it is not `new` (a constructor with options).
    ($adapter:ident, $m:ty, $new:expr) => {
        /// Adapter (see the registry for its summary).
        pub struct $adapter($m);
        impl $crate::locks::LockUnderTest for $adapter {
            const HAS_SHARED_MODE: bool = true;
            fn new() -> Self {
                $adapter($new)
            }
            #[inline(always)]
            fn exclusive<R>(
                &self,
                f: impl FnOnce(&mut $crate::engine::workload::Shared) -> R,
            ) -> R {
                let mut g = self.0.write();
                f(&mut g)
            }
            #[inline(always)]
            fn shared<R>(&self, f: impl FnOnce(&$crate::engine::workload::Shared) -> R) -> R {
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
            #[inline(always)]
            fn get(&self) {
                *self.0.lock() += 1;
            }
            #[inline(always)]
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
            "pthread-adaptive-mutex",
            "ck-mcs",
            "ck-clh",
            "ck-ticket",
            "ck-tas",
            "ck-rwlock",
            "ck-brlock",
            "ck-epoch",
            "tbb-spin-mutex",
            "tbb-queuing-mutex",
            "tbb-spin-rw-mutex",
            "tbb-queuing-rw-mutex",
            "absl-mutex",
            "absl-rwlock",
            "crossbeam-sharded",
            "condvar",
            "std-condvar",
            "parking-lot-condvar",
        ] {
            assert!(names.contains(n), "{n} missing from the registry");
        }
        for l in &reg {
            assert!(
                l.lock.is_some()
                    || l.refcount.is_some()
                    || l.condvar.is_some()
                    || l.rcu_read.is_some()
                    || l.call_rcu.is_some()
                    || l.rcu_update.is_some()
                    || l.rcu_sync.is_some()
                    || l.unavailable.is_some(),
                "{} runs nothing",
                l.name
            );
            let peer = l.kind == Kind::Peer;
            let prefixed = [
                "std-",
                "parking-lot-",
                "spin-",
                "pthread-",
                "crossbeam-",
                "arc-swap",
                "liburcu-",
                "ck-",
                "tbb-",
                "absl-",
            ]
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
