//! The lock paths' calls into the lockdep validator ([`crate::lockdep`]): with the `lockdep` feature
//! each lock type carries a [`Dep`] (its class: given with [`crate::lockdep::set_class`], else a
//! class of the lock's own made at its first acquisition and named by that source location) and
//! calls it from its `lock_api` lock, trylock and unlock through [`LockdepHooks`] (one line each,
//! the kind given once by [`lockdep_hooks!`]); without the feature [`Dep`] is a zero-sized type
//! whose methods are empty, so the lock paths contain no code for it.

/// The kind of lock (the validator's [`crate::lockdep::hooks::Kind`], available under loom too).
#[derive(Clone, Copy)]
#[allow(dead_code)]
pub(crate) enum K {
    Mutex,
    Spin,
    RwLock,
    Rcu,
}

/// How a lock is taken (the validator's [`crate::lockdep::hooks::Mode`]).
#[derive(Clone, Copy)]
#[allow(dead_code)]
pub(crate) enum M {
    Write,
    /// A reader that waits behind queued writers.
    Read,
    /// A reader that never waits for a queued writer.
    RecRead,
}

#[cfg(all(feature = "lockdep", not(loom)))]
mod on {
    use super::{K, M};
    use crate::lockdep::hooks::{self as ld, Flags, Kind, Mode, Origin, Site};
    use core::sync::atomic::{AtomicU32, Ordering};

    /// A lock's lockdep class (0 until its first acquisition).
    pub(crate) struct Dep {
        class: AtomicU32,
    }

    fn kind(k: K) -> Kind {
        match k {
            K::Mutex => Kind::Mutex,
            K::Spin => Kind::SpinLock,
            K::RwLock => Kind::RwLock,
            K::Rcu => Kind::Rcu,
        }
    }

    fn mode(m: M) -> Mode {
        match m {
            M::Write => Mode::Write,
            M::Read => Mode::Read,
            M::RecRead => Mode::RecursiveRead,
        }
    }

    impl Dep {
        pub(crate) const fn new() -> Self {
            Self {
                class: AtomicU32::new(0),
            }
        }

        /// This lock's class, made from the caller's location on first use.
        #[track_caller]
        #[inline]
        fn class(&self, k: K) -> u32 {
            // (The thread's subclass, if inside `with_subclass`, is applied by the validator.)
            let c = self.class.load(Ordering::Relaxed);
            if c == 0 { self.first(k) } else { c }
        }

        #[track_caller]
        #[cold]
        fn first(&self, k: K) -> u32 {
            let l = core::panic::Location::caller();
            // A class of this lock's own: two locks of one type taken in a consistent order are
            // never a cycle, whichever code took each first.
            let c = ld::instance_class(kind(k), Site::location(l));
            // Relaxed: a racing first acquisition makes a class of its own; the first stored is
            // this lock's class from now on (the other is never used).
            let _ = self
                .class
                .compare_exchange(0, c, Ordering::Relaxed, Ordering::Relaxed);
            self.class.load(Ordering::Relaxed)
        }

        /// Before a blocking (or timed) acquisition of the lock at `obj`.
        #[track_caller]
        #[inline]
        pub(crate) fn lock(&self, obj: *const (), k: K, m: M) {
            if crate::lockdep::enabled() {
                ld::acquire(
                    obj as usize,
                    self.class(k),
                    mode(m),
                    Site::caller(),
                    Flags::NONE,
                );
            }
        }

        /// Before a timed acquisition: checked as a blocking one, but taking a lock the thread
        /// holds is not reported (it times out rather than deadlocks).
        #[track_caller]
        #[inline]
        fn lock_timed(&self, obj: *const (), k: K, m: M) {
            if crate::lockdep::enabled() {
                ld::acquire(
                    obj as usize,
                    self.class(k),
                    mode(m),
                    Site::caller(),
                    Flags::TIMED,
                );
            }
        }

        /// A trylock's result `r`: recorded if it succeeded.
        #[track_caller]
        #[inline]
        pub(crate) fn tried<G>(&self, obj: *const (), k: K, m: M, r: Option<G>) -> Option<G> {
            if r.is_some() && crate::lockdep::enabled() {
                ld::acquire(
                    obj as usize,
                    self.class(k),
                    mode(m),
                    Site::caller(),
                    Flags::TRY,
                );
            }
            r
        }

        /// A timed acquisition `f`: checked before it waits, forgotten if it times out.
        #[track_caller]
        #[inline]
        pub(crate) fn timed<G>(
            &self,
            obj: *const (),
            k: K,
            m: M,
            f: impl FnOnce() -> Option<G>,
        ) -> Option<G> {
            self.lock_timed(obj, k, m);
            let r = f();
            if r.is_none() {
                ld::forget(obj as usize);
            }
            r
        }

        /// Before an unlock.
        #[track_caller]
        #[inline]
        pub(crate) fn unlock(&self, obj: *const ()) {
            if crate::lockdep::enabled() {
                ld::release(obj as usize, Site::caller());
            }
        }

        /// Gives the lock a named class.
        pub(crate) fn set(&self, c: &'static crate::lockdep::LockClass) {
            self.class.store(c.id(), Ordering::Relaxed);
        }
    }

    /// An RCU domain at `obj` taken at the caller's location: readers are recursive readers of the
    /// domain's class, `synchronize` and `barrier` take it for writing (and release it at once).
    #[track_caller]
    pub(crate) fn rcu(obj: *const (), m: M, release_now: bool) {
        if !crate::lockdep::enabled() {
            return;
        }
        let obj = rcu_id(obj);
        let c = ld::class_for(obj, Kind::Rcu, Origin::Object, Site::UNKNOWN, 0);
        ld::acquire(obj, c, mode(m), Site::caller(), Flags::NONE);
        if release_now {
            ld::release(obj, Site::caller());
        }
    }

    /// The end of an RCU read section of the domain at `obj`.
    #[track_caller]
    pub(crate) fn rcu_end(obj: *const ()) {
        if crate::lockdep::enabled() {
            ld::release(rcu_id(obj), Site::caller());
        }
    }

    /// The validator's name of an RCU domain: its address with the top bit set, so that it is not
    /// the name of a lock at the same address (a domain's first field may be a lock).
    fn rcu_id(obj: *const ()) -> usize {
        obj as usize ^ (1 << (usize::BITS - 1))
    }

    /// A condvar wait on `cond` that releases the mutex at `mutex` for its duration.
    #[track_caller]
    pub(crate) fn cond_wait(cond: *const (), mutex: *const ()) {
        if crate::lockdep::enabled() {
            ld::cond_wait(cond as usize, mutex as usize, Site::caller());
        }
    }
}

#[cfg(not(all(feature = "lockdep", not(loom))))]
#[allow(dead_code)]
mod on {
    use super::{K, M};

    /// Without the `lockdep` feature: nothing.
    pub(crate) struct Dep;

    impl Dep {
        pub(crate) const fn new() -> Self {
            Self
        }
        #[inline(always)]
        pub(crate) fn lock(&self, _: *const (), _: K, _: M) {}
        #[inline(always)]
        pub(crate) fn tried<G>(&self, _: *const (), _: K, _: M, r: Option<G>) -> Option<G> {
            r
        }
        #[inline(always)]
        pub(crate) fn timed<G>(
            &self,
            _: *const (),
            _: K,
            _: M,
            f: impl FnOnce() -> Option<G>,
        ) -> Option<G> {
            f()
        }
        #[inline(always)]
        pub(crate) fn unlock(&self, _: *const ()) {}
        #[cfg(not(loom))]
        pub(crate) fn set(&self, _: &'static crate::lockdep::LockClass) {}
    }

    #[inline(always)]
    pub(crate) fn rcu(_: *const (), _: M, _: bool) {}
    #[inline(always)]
    pub(crate) fn rcu_end(_: *const ()) {}
    #[inline(always)]
    pub(crate) fn cond_wait(_: *const (), _: *const ()) {}
}

pub(crate) use on::*;

/// The lockdep calls of a `lock_api` impl, one line each: the lock's [`Dep`] and [`K`]ind come from
/// [`lockdep_hooks!`], the object is the lock's address, and the site is the caller's (through
/// `#[track_caller]`, with the `lockdep` feature). Without the feature each call is empty.
#[cfg(not(loom))]
pub(crate) trait LockdepHooks: Sized {
    /// The kind of lock the validator names in its reports.
    const KIND: K;

    /// The lock's class.
    fn lockdep(&self) -> &Dep;

    /// Before a blocking acquisition in mode `m`: checked (and reported) before it can deadlock.
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[inline(always)]
    fn lockdep_before_lock(&self, m: M) {
        self.lockdep()
            .lock(self as *const Self as *const (), Self::KIND, m);
    }

    /// After a trylock in mode `m` whose result is `r`: recorded if it took the lock.
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[inline(always)]
    fn lockdep_after_trylock<G>(&self, m: M, r: Option<G>) -> Option<G> {
        self.lockdep()
            .tried(self as *const Self as *const (), Self::KIND, m, r)
    }

    /// Around a timed acquisition `f` in mode `m`: checked before it waits, forgotten if it times
    /// out.
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[inline(always)]
    fn lockdep_timed<G>(&self, m: M, f: impl FnOnce() -> Option<G>) -> Option<G> {
        self.lockdep()
            .timed(self as *const Self as *const (), Self::KIND, m, f)
    }

    /// A timed acquisition in mode `m` for `timeout` from now, checked as [`lockdep_timed`] does:
    /// `until` the deadline, or `forever` where now plus `timeout` is past what an `Instant` holds
    /// (no deadline, as `lock_api`'s `_for` calls mean it).
    ///
    /// [`lockdep_timed`]: Self::lockdep_timed
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[inline(always)]
    fn lockdep_timed_for<G>(
        &self,
        m: M,
        timeout: std::time::Duration,
        until: impl FnOnce(&std::time::Instant) -> Option<G>,
        forever: impl FnOnce() -> Option<G>,
    ) -> Option<G> {
        self.lockdep_timed(m, || match crate::primitive::deadline_after(timeout) {
            Some(d) => until(&d),
            None => forever(),
        })
    }

    /// Before any unlock (shared or exclusive, fair or not).
    #[cfg_attr(feature = "lockdep", track_caller)]
    #[inline(always)]
    fn lockdep_before_unlock(&self) {
        self.lockdep().unlock(self as *const Self as *const ());
    }
}

/// [`LockdepHooks`] and [`Classed`](crate::lockdep::Classed) (so `lock_api`'s wrappers take a
/// [`LockClass`](crate::lockdep::LockClass)) for a raw lock of kind `$kind` whose [`Dep`] is its
/// `dep` field (or the one `$dep` returns).
#[cfg(not(loom))]
macro_rules! lockdep_hooks {
    ($raw:ty, $kind:ident) => {
        crate::dep::lockdep_hooks!($raw, $kind, |l| &l.dep);
    };
    ($raw:ty, $kind:ident, |$l:ident| $dep:expr) => {
        impl crate::dep::LockdepHooks for $raw {
            const KIND: crate::dep::K = crate::dep::K::$kind;
            #[inline(always)]
            fn lockdep(&self) -> &crate::dep::Dep {
                let $l = self;
                $dep
            }
        }
        impl crate::lockdep::Classed for $raw {
            fn set_lockdep_class(&self, class: &'static crate::lockdep::LockClass) {
                crate::dep::LockdepHooks::lockdep(self).set(class);
            }
        }
    };
}
#[cfg(not(loom))]
pub(crate) use lockdep_hooks;

/// `Default`, `lock_api::RawMutex` (with the lockdep calls of [`LockdepHooks`]) and
/// [`lockdep_hooks!`] for a simple spinlock `$raw` of kind `Spin`: one whose stateless guard
/// ([`lock_api::GuardSend`]) may be sent, and whose inherent `const fn new()`, `lock(&self)`,
/// `try_lock(&self) -> bool`, `unsafe fn unlock(&self)` and `is_locked(&self) -> bool` are the whole
/// lock.
///
/// The call is written `spin_raw_mutex!(unsafe impl RawMutex for $raw)`: it makes an
/// `unsafe impl`, so the caller owes `lock_api::RawMutex`'s contract, and a `// SAFETY:` comment
/// above the call argues it (mutual exclusion with Acquire on taking and Release on unlock, and no
/// thread affinity, so the guard may be sent and released from another thread).
#[cfg(not(loom))]
macro_rules! spin_raw_mutex {
    (unsafe impl RawMutex for $raw:ident) => {
        impl Default for $raw {
            fn default() -> Self {
                Self::new()
            }
        }

        // SAFETY: the caller's, at the macro's call site (see `spin_raw_mutex!`).
        unsafe impl lock_api::RawMutex for $raw {
            #[allow(clippy::declare_interior_mutable_const)]
            const INIT: Self = Self::new();
            type Guard = lock_api::GuardSend;

            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn lock(&self) -> Self::Guard {
                crate::dep::LockdepHooks::lockdep_before_lock(self, crate::dep::M::Write);
                $raw::lock(self);
                lock_api::GuardSend::new()
            }

            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            fn try_lock(&self) -> Option<Self::Guard> {
                crate::dep::LockdepHooks::lockdep_after_trylock(
                    self,
                    crate::dep::M::Write,
                    $raw::try_lock(self).then(lock_api::GuardSend::new),
                )
            }

            #[inline]
            #[cfg_attr(feature = "lockdep", track_caller)]
            unsafe fn unlock(&self, _guard: Self::Guard) {
                crate::dep::LockdepHooks::lockdep_before_unlock(self);
                // SAFETY: the guard proves the caller holds the lock.
                unsafe { $raw::unlock(self) }
            }

            #[inline]
            fn is_locked(&self) -> bool {
                $raw::is_locked(self)
            }
        }

        crate::dep::lockdep_hooks!($raw, Spin);
    };
}
#[cfg(not(loom))]
pub(crate) use spin_raw_mutex;
