//! Per thread: the stack of held locks, and the acquisitions and releases that push and pop it
//! (each acquisition checked against the graph through `graph.rs`), with the misuse checks of
//! unlocks, destruction, condvar waits and thread exit.

use super::*;

/// How a lock is taken.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Flags, Mode, Site}};
/// static C: lockdep::LockClass = lockdep::LockClass::new("mode-doc");
/// lockdep::hooks::acquire(0x18, C.id(), Mode::Read, Site::caller(), Flags::NONE);
/// assert!(lockdep::hooks::holds(0x18));
/// assert!(lockdep::hooks::release(0x18, Site::caller()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Exclusively: a mutex, a spinlock, a write lock, `synchronize`.
    Write = 0,
    /// A reader that waits behind a queued writer (a writer-preferring rwlock: `RwSem`, glibc's
    /// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`).
    Read = 1,
    /// A reader that never waits for a queued writer (glibc's default rwlock, `RecursiveRwSem`, an
    /// RCU read section).
    RecursiveRead = 2,
}

impl Mode {
    pub(super) fn from_u8(v: u8) -> Self {
        match v {
            1 => Mode::Read,
            2 => Mode::RecursiveRead,
            _ => Mode::Write,
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::Read => "read",
            Mode::RecursiveRead => "recursive read",
        }
    }
}

/// Properties of one acquisition.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::hooks::Flags;
/// let timed_try = Flags::TRY.with(Flags::TIMED);
/// assert!(timed_try.has(Flags::TIMED) && !timed_try.has(Flags::RECURSIVE));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags(pub(super) u8);

impl Flags {
    /// A blocking acquisition of a lock without special rules.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Flags;
    /// assert_eq!(Flags::NONE.with(Flags::TRY), Flags::TRY);
    /// ```
    pub const NONE: Flags = Flags(0);
    /// A trylock that succeeded: pushed, adds no dependency.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::{self, hooks::{Flags, Mode, Site}};
    /// static C: lockdep::LockClass = lockdep::LockClass::new("try-doc");
    /// // After a trylock succeeded: recorded as held, no dependency added.
    /// lockdep::hooks::acquire(0x28, C.id(), Mode::Write, Site::caller(), Flags::TRY);
    /// assert!(lockdep::hooks::holds(0x28));
    /// assert!(lockdep::hooks::release(0x28, Site::caller()));
    /// ```
    pub const TRY: Flags = Flags(1);
    /// The kind allows the holder to take it again (a recursive mutex).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Flags;
    /// let recursive_mutex = Flags::NONE.with(Flags::RECURSIVE);
    /// assert!(recursive_mutex.has(Flags::RECURSIVE));
    /// ```
    pub const RECURSIVE: Flags = Flags(2);
    /// Taking again what the thread holds for writing returns an error instead of deadlocking (an
    /// error-checking mutex, a pthread rwlock): the caller will [`forget`] it.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Flags;
    /// let error_checking = Flags::RELOCK_ERRORS;
    /// assert!(!error_checking.has(Flags::RECURSIVE));
    /// ```
    pub const RELOCK_ERRORS: Flags = Flags(4);
    /// A timed acquisition: it adds dependencies as a blocking one, but taking a lock the thread
    /// holds is not reported (it times out; the caller [`forget`]s it).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Flags;
    /// let timed = Flags::TIMED;
    /// assert!(timed.has(Flags::NONE) && !timed.has(Flags::TRY));
    /// ```
    pub const TIMED: Flags = Flags(8);
    /// Any thread may unlock it (glibc's normal mutexes, which programs use as binary semaphores):
    /// its holder taking it again waits for another thread's unlock, not for ever, and is not
    /// reported.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Flags;
    /// let normal_pthread_mutex = Flags::OWNERLESS;
    /// assert!(normal_pthread_mutex.with(Flags::TRY).has(Flags::OWNERLESS));
    /// ```
    pub const OWNERLESS: Flags = Flags(16);

    /// Both sets of flags.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Flags;
    /// assert!(Flags::TRY.with(Flags::RECURSIVE).has(Flags::TRY));
    /// ```
    pub const fn with(self, o: Flags) -> Flags {
        Flags(self.0 | o.0)
    }
    /// These flags without those of `o`.
    ///
    /// ```
    /// use locklab::lockdep::hooks::Flags;
    /// assert!(!Flags::TRY.with(Flags::TIMED).without(Flags::TRY).has(Flags::TRY));
    /// ```
    pub const fn without(self, o: Flags) -> Flags {
        Flags(self.0 & !o.0)
    }
    /// Whether every flag of `o` is set.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert!(!locklab::lockdep::hooks::Flags::NONE.has(locklab::lockdep::hooks::Flags::TRY));
    /// ```
    pub const fn has(self, o: Flags) -> bool {
        self.0 & o.0 == o.0
    }
}

#[derive(Clone, Copy)]
pub(super) struct Held {
    pub(super) obj: usize,
    pub(super) site: usize,
    /// [`ELSEWHERE_GEN`] when acquired.
    pub(super) epoch: u64,
    pub(super) class: u32,
    pub(super) depth: u32,
    pub(super) mode: u8,
    pub(super) flags: u8,
}

pub(super) const EMPTY: Held = Held {
    obj: 0,
    site: 0,
    epoch: 0,
    class: 0,
    depth: 0,
    mode: 0,
    flags: 0,
};

/// Locks one thread may hold at once and still be checked (the kernel's MAX_LOCK_DEPTH is 48).
pub(super) const MAX_HELD: usize = 48;

pub(super) struct ThreadState {
    pub(super) held: [Held; MAX_HELD],
    pub(super) n: usize,
    /// Acquisitions that did not fit in `held` (their releases are not looked for).
    pub(super) lost: usize,
    /// The exit check is armed for this thread.
    pub(super) exit_armed: bool,
    /// `acquire_object`'s cache of (object, class, NOTED_* facts of the class), valid for
    /// `cache_epoch`.
    pub(super) cache: [(usize, u32, u8); CACHE],
    pub(super) cache_epoch: u64,
}

/// Entries of the per-thread object cache.
pub(super) const CACHE: usize = 16;
/// The class is known to be written ([`FLAG_WRITTEN`]).
pub(super) const NOTED_WRITE: u8 = 1;
/// The class is known to be held outside a signal handler ([`FLAG_SIG_OUT`]).
pub(super) const NOTED_SIG: u8 = 2;

/// A thread's validator state: the part only validator calls touch (behind `busy`), and the part
/// that code running on top of a validator call (a signal handler) may change, in atomics (Relaxed:
/// one thread; `compiler_fence`s order them against the interrupted code).
pub(super) struct Tls {
    pub(super) state: UnsafeCell<ThreadState>,
    /// A validator call is running on this thread (a signal handler that locks meanwhile is not
    /// validated; a handler left by `siglongjmp` out of a validator call leaves the thread
    /// unchecked from then on, never inconsistent).
    pub(super) busy: AtomicBool,
    /// The subclass of this thread's acquisitions inside [`with_subclass`].
    pub(super) subclass: AtomicU8,
    /// Inside [`without_dependencies`]: acquisitions are recorded as held but add no dependency.
    pub(super) no_deps: AtomicU32,
    /// Signal handler nesting (the preload library's wrapped handlers, [`signal_handler`]).
    pub(super) sig: AtomicU32,
    /// The signal of the innermost handler, and the stack pointer at its entry.
    pub(super) sig_no: AtomicI32,
    pub(super) sig_sp: AtomicUsize,
    /// This thread's blocked signals as last read, valid while `mask_known` (see
    /// [`signal_mask_changed`]).
    pub(super) mask: AtomicU64,
    pub(super) mask_known: AtomicBool,
}

std::thread_local! {
    // No destructor: usable in every thread-local destructor, and no registration on first use.
    pub(super) static THREAD: Tls = const { Tls {
        state: UnsafeCell::new(ThreadState {
            held: [EMPTY; MAX_HELD],
            n: 0,
            lost: 0,
            exit_armed: false,
            cache: [(0, 0, 0); CACHE],
            cache_epoch: 0,
        }),
        busy: AtomicBool::new(false),
        subclass: AtomicU8::new(0),
        no_deps: AtomicU32::new(0),
        sig: AtomicU32::new(0),
        sig_no: AtomicI32::new(0),
        sig_sp: AtomicUsize::new(0),
        mask: AtomicU64::new(0),
        mask_known: AtomicBool::new(false),
    } };
}

/// Runs `f` on this thread's state unless the validator is already running on this thread.
#[inline]
pub(super) fn with_thread<R>(f: impl FnOnce(&mut ThreadState, &Tls) -> R) -> Option<R> {
    THREAD
        .try_with(|x| {
            if x.busy.load(Ordering::Relaxed) {
                return None;
            }
            x.busy.store(true, Ordering::Relaxed);
            // A signal handler that interrupts what follows sees `busy` set.
            compiler_fence(Ordering::SeqCst);
            // SAFETY: the state is this thread's, and `busy` keeps every nested call (a signal
            // handler that interrupts this one) from making a second reference to it.
            let t = unsafe { &mut *x.state.get() };
            let r = f(t, x);
            compiler_fence(Ordering::SeqCst);
            x.busy.store(false, Ordering::Relaxed);
            Some(r)
        })
        .ok()
        .flatten()
}

/// Called once per thread on its first acquisition (to arm a thread-exit check), if set.
pub(super) static EXIT_HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the function called on a thread's first checked acquisition (the preload library sets a
/// pthread key there, whose destructor calls [`thread_exit`]).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// fn arm() {}
/// locklab::lockdep::hooks::set_exit_hook(arm);
/// ```
pub fn set_exit_hook(f: fn()) {
    EXIT_HOOK.store(f as *mut (), Ordering::Release);
}

/// Released-elsewhere bookkeeping: a release of a lock the releasing thread does not hold (a guard
/// sent to another thread, a normal pthread mutex unlocked by another thread) is recorded here, so
/// that the acquiring thread's stack does not keep it as held.
pub(super) static ELSEWHERE_GEN: AtomicU64 = AtomicU64::new(0);
pub(super) const RING: usize = 256;
pub(super) static ELSEWHERE: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];
pub(super) static ELSEWHERE_AT: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];

#[cold]
#[inline(never)]
pub(super) fn released_elsewhere(obj: usize) {
    // AcqRel: a generation per release elsewhere; its ring slot is published below (Release on
    // ELSEWHERE_AT), this only numbers it.
    let g = ELSEWHERE_GEN.fetch_add(1, Ordering::AcqRel) + 1;
    let i = g as usize % RING;
    ELSEWHERE[i].store(obj as u64, Ordering::Relaxed);
    // Release pairs with the Acquire in `stale`: the object is written before its generation.
    ELSEWHERE_AT[i].store(g, Ordering::Release);
}

/// Whether `h` was released by another thread since it was taken.
pub(super) fn stale(h: &Held) -> bool {
    let now = ELSEWHERE_GEN.load(Ordering::Acquire);
    if now == h.epoch {
        return false;
    }
    if now - h.epoch >= RING as u64 {
        // More releases elsewhere than the ring keeps: this one may be among the lost. Taken as
        // released (a missed dependency at worst, never a false report).
        return true;
    }
    let first = h.epoch.max(now.saturating_sub(RING as u64 - 1)) + 1;
    (first..=now).any(|e| {
        let i = e as usize % RING;
        // Acquire pairs with the Release store in `released_elsewhere`: the object is written.
        ELSEWHERE_AT[i].load(Ordering::Acquire) == e
            && ELSEWHERE[i].load(Ordering::Relaxed) == h.obj as u64
    })
}

#[cold]
#[inline(never)]
pub(super) fn drop_stale(t: &mut ThreadState) {
    // The count is read once and bounded by the stack's length, so no slice below can be out of
    // range even if the state was left inconsistent (a raw `clone` sharing this thread's TLS).
    let mut n = t.n.min(t.held.len());
    let mut i = 0;
    while i < n {
        if stale(&t.held[i]) {
            t.held.copy_within(i + 1..n, i);
            n -= 1;
        } else {
            i += 1;
        }
    }
    t.n = n;
}

/// Runs `f` with this thread's acquisitions in subclass `sub` (the kernel's `*_nested` calls), for
/// locks of one class taken in a fixed order.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let (parent, child) = (locklab::Mutex::new(()), locklab::Mutex::new(()));
/// let _p = parent.lock();
/// let _c = locklab::lockdep::with_subclass(1, || child.lock());
/// ```
pub fn with_subclass<R>(sub: u8, f: impl FnOnce() -> R) -> R {
    let old = THREAD
        .try_with(|x| x.subclass.swap(sub, Ordering::Relaxed))
        .unwrap_or(0);
    struct Restore(u8);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = THREAD.try_with(|x| x.subclass.store(self.0, Ordering::Relaxed));
        }
    }
    let _r = Restore(old);
    f()
}

/// Runs `f` with this thread's acquisitions recorded as held but making no dependency: for code
/// that takes a whole set of locks in one global order, which classes cannot express (the kernel's
/// `lockdep_off` around such code; locklab's RCU domains park all their locks this way before a
/// `fork`). Locks taken after `f` returns still depend on the ones it left held.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let locks: Vec<locklab::Mutex<()>> = (0..3).map(|_| locklab::Mutex::new(())).collect();
/// let guards = locklab::lockdep::without_dependencies(|| {
///     locks.iter().map(|l| l.lock()).collect::<Vec<_>>()
/// });
/// drop(guards);
/// ```
pub fn without_dependencies<R>(f: impl FnOnce() -> R) -> R {
    let set = |d: i32| {
        let _ = THREAD.try_with(|x| {
            let n = x.no_deps.load(Ordering::Relaxed);
            x.no_deps
                .store(n.saturating_add_signed(d), Ordering::Relaxed);
        });
    };
    struct Restore<F: Fn(i32)>(F);
    impl<F: Fn(i32)> Drop for Restore<F> {
        fn drop(&mut self) {
            (self.0)(-1);
        }
    }
    set(1);
    let _r = Restore(set);
    f()
}

/// The subclass set by [`with_subclass`] on this thread (0 outside it).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{current_subclass, with_subclass};
/// assert_eq!(current_subclass(), 0);
/// assert_eq!(with_subclass(2, current_subclass), 2);
/// assert_eq!(current_subclass(), 0);
/// ```
#[inline]
pub fn current_subclass() -> u8 {
    THREAD
        .try_with(|x| x.subclass.load(Ordering::Relaxed))
        .unwrap_or(0)
}

// --- the checks --------------------------------------------------------------------------------------------

/// Records that this thread takes (or, with [`Flags::TRY`], has taken) the lock at `obj` of class
/// `class` in `mode` at `site`, after checking the acquisition against everything seen before.
/// Call it before a blocking acquisition blocks (a deadlock is reported before it happens), and
/// after a trylock succeeds. A class of 0 (the validator could not classify) is not checked.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Flags, Mode, Site}};
/// static C: lockdep::LockClass = lockdep::LockClass::new("acquire-doc");
/// lockdep::hooks::acquire(0x10, C.id(), Mode::Write, Site::caller(), Flags::NONE);
/// assert!(lockdep::hooks::holds(0x10));
/// assert!(lockdep::hooks::release(0x10, Site::caller()));
/// ```
#[inline]
pub fn acquire(obj: usize, class: u32, mode: Mode, site: Site, flags: Flags) {
    if class == 0 || !enabled() {
        return;
    }
    let first = with_thread(|t, x| {
        if t.n == 0
            && t.exit_armed
            && x.sig.load(Ordering::Relaxed) == 0
            && x.subclass.load(Ordering::Relaxed) == 0
        {
            // The steady state of a lock taken alone (see `acquire_object`): the class's
            // once-only facts already recorded.
            let need = if mode == Mode::Write {
                FLAG_WRITTEN | FLAG_SIG_OUT
            } else {
                FLAG_SIG_OUT
            };
            // Acquire pairs with the Release in `create_graph`.
            let g = GRAPH.load(Ordering::Acquire);
            // SAFETY: published once, never freed (see `graph`).
            if let Some(g) = unsafe { g.as_ref() }
                && g.class(class).flags.load(Ordering::Relaxed) & need == need
            {
                t.held[0] = Held {
                    obj,
                    site: site.0,
                    epoch: ELSEWHERE_GEN.load(Ordering::Relaxed),
                    class,
                    depth: 1,
                    mode: mode as u8,
                    flags: flags.0,
                };
                t.n = 1;
                return false;
            }
        }
        acquire_slow(t, x, obj, class, mode, site, flags)
    });
    if first == Some(true) {
        run_exit_hook();
    }
}

#[inline(never)]
pub(super) fn acquire_slow(
    t: &mut ThreadState,
    x: &Tls,
    obj: usize,
    class: u32,
    mode: Mode,
    site: Site,
    flags: Flags,
) -> bool {
    let class = match x.subclass.load(Ordering::Relaxed) {
        0 => class,
        s => subclass_of(class, s),
    };
    let first = !t.exit_armed;
    t.exit_armed = true;
    acquire_in(t, x, obj, class, mode, site.0, flags);
    first
}

pub(super) fn acquire_in(
    t: &mut ThreadState,
    x: &Tls,
    obj: usize,
    class: u32,
    mode: Mode,
    site: usize,
    flags: Flags,
) {
    let Some(g) = graph() else { return };
    // Taken again?
    if let Some(i) = (0..t.n).rev().find(|&i| t.held[i].obj == obj) {
        let h = t.held[i];
        if stale(&h) {
            // Released by another thread since (a guard sent away): not held, a new acquisition.
            drop_stale(t);
            return acquire_in(t, x, obj, class, mode, site, flags);
        }
        if flags.has(Flags::OWNERLESS) && h.mode == Mode::Write as u8 && mode == Mode::Write {
            // Another thread may unlock it (a mutex used as a binary semaphore): the old hold is
            // left to that thread, and this is a new acquisition (a real self-deadlock shows as
            // a hang of this thread, which the program's author sees anyway).
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
            return acquire_in(
                t,
                x,
                obj,
                class,
                mode,
                site,
                flags.without(Flags::OWNERLESS),
            );
        }
        let held = Mode::from_u8(h.mode);
        let ok = if held != Mode::Write && mode != Mode::Write {
            if mode == Mode::Read && !flags.has(Flags::TRY) {
                recursive_read(g, class, h.site, site);
            }
            true
        } else if held == Mode::Write && flags.has(Flags::RELOCK_ERRORS) {
            true
        } else {
            flags.has(Flags::RECURSIVE) || flags.has(Flags::TRY) || flags.has(Flags::TIMED)
        };
        if !ok {
            report::recursion(g, class, h, mode, site);
        }
        t.held[i].depth += 1;
        note_mode(g, class, mode, site, x);
        return;
    }
    if !flags.has(Flags::TRY) && x.no_deps.load(Ordering::Relaxed) == 0 {
        // Dependencies from the top of the stack down to (and including) the first non-trylock.
        let mut i = t.n;
        let mut dropped = false;
        while i > 0 {
            i -= 1;
            let h = t.held[i];
            if h.class == class {
                same_class(g, class, &h, obj, site);
            } else if !add_dep(g, &h, class, mode, site) {
                dropped = true;
            }
            if h.flags & Flags::TRY.0 == 0 {
                break;
            }
        }
        if dropped {
            drop_stale(t);
        }
    }
    note_mode(g, class, mode, site, x);
    if t.n < MAX_HELD {
        t.held[t.n] = Held {
            obj,
            site,
            epoch: ELSEWHERE_GEN.load(Ordering::Relaxed),
            class,
            depth: 1,
            mode: mode as u8,
            flags: flags.0,
        };
        t.n += 1;
    } else {
        t.lost += 1;
        say_too_deep();
    }
}

/// Said once per process: a thread held more locks at once than the held stack has room for.
#[cold]
pub(super) fn say_too_deep() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        report::say(format_args!(
            "locklab lockdep: a thread holds more than {MAX_HELD} locks at once: the locks it takes \
             beyond that are not checked\n"
        ));
    }
}

/// Records that this thread releases the lock at `obj` at `site`. Returns `false` if the thread
/// did not hold it (the caller decides whether that is misuse: [`unlock_not_held`]).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert!(!locklab::lockdep::hooks::release(0x9999, locklab::lockdep::hooks::Site::UNKNOWN), "not held by this thread");
/// ```
#[inline]
pub fn release(obj: usize, site: Site) -> bool {
    let _ = site;
    if !enabled() {
        return true;
    }
    with_thread(|t, _| pop(t, obj, true)).unwrap_or(true)
}

/// As [`release`], for a lock whose kind only lets its owner unlock it (a non-owner's unlock fails,
/// so the owner's record must stay): `false` if this thread does not hold it.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert!(!locklab::lockdep::hooks::release_owned(0x9998));
/// ```
pub fn release_owned(obj: usize) -> bool {
    if !enabled() {
        return true;
    }
    with_thread(|t, _| pop(t, obj, false)).unwrap_or(true)
}

#[inline]
pub(super) fn pop(t: &mut ThreadState, obj: usize, elsewhere: bool) -> bool {
    // The usual case: the lock on top, taken once.
    if t.n > 0 && t.held[t.n - 1].obj == obj && t.held[t.n - 1].depth == 1 {
        t.n -= 1;
        return true;
    }
    if let Some(i) = (0..t.n).rev().find(|&i| t.held[i].obj == obj) {
        if t.held[i].depth > 1 {
            t.held[i].depth -= 1;
        } else {
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
        }
        true
    } else if t.lost > 0 {
        t.lost -= 1;
        true
    } else {
        if elsewhere {
            released_elsewhere(obj);
        }
        false
    }
}

/// Undoes an [`acquire`] that did not take the lock (a timed-out or refused acquisition).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Flags, Mode, Site}};
/// static C: lockdep::LockClass = lockdep::LockClass::new("forget-doc");
/// lockdep::hooks::acquire(0x20, C.id(), Mode::Write, Site::caller(), Flags::NONE);
/// lockdep::hooks::forget(0x20);
/// assert!(!lockdep::hooks::holds(0x20));
/// ```
pub fn forget(obj: usize) {
    if !enabled() {
        return;
    }
    let _ = with_thread(|t, _| {
        if let Some(i) = (0..t.n).rev().find(|&i| t.held[i].obj == obj) {
            if t.held[i].depth > 1 {
                t.held[i].depth -= 1;
            } else {
                t.held.copy_within(i + 1..t.n, i);
                t.n -= 1;
            }
        } else if t.lost > 0 {
            t.lost -= 1;
        }
    });
}

/// Whether this thread holds the lock at `obj` (as far as the validator knows).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert!(!locklab::lockdep::hooks::holds(0x30));
/// ```
pub fn holds(obj: usize) -> bool {
    with_thread(|t, _| t.held[..t.n].iter().any(|h| h.obj == obj)).unwrap_or(false)
}

/// How many locks this thread holds (as far as the validator knows).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert_eq!(locklab::lockdep::hooks::held_count(), 0);
/// ```
pub fn held_count() -> usize {
    with_thread(|t, _| t.n + t.lost).unwrap_or(0)
}

/// Reports an unlock, at `site`, of the lock at `obj` of class `class` that this thread does not
/// hold, where its kind forbids that (an error-checking or recursive mutex: glibc answers `EPERM`).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// // Misuse is reported, and the program goes on (the default action).
/// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("unlock-doc");
/// locklab::lockdep::hooks::unlock_not_held(0x40, C.id(), locklab::lockdep::hooks::Site::caller());
/// ```
pub fn unlock_not_held(obj: usize, class: u32, site: Site) {
    unlock_misuse(
        obj,
        class,
        site,
        "unlock of a lock this thread does not hold",
    );
}

/// Reports an unlock, at `site`, of the lock at `obj` of class `class` that no thread holds (a
/// double unlock): misuse for every kind, even one any thread may unlock (kind `unlock-not-held`).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("unlock-free-doc");
/// locklab::lockdep::hooks::unlock_free(0x41, C.id(), locklab::lockdep::hooks::Site::caller());
/// ```
pub fn unlock_free(obj: usize, class: u32, site: Site) {
    unlock_misuse(obj, class, site, "unlock of a lock no thread holds");
}

pub(super) fn unlock_misuse(obj: usize, class: u32, site: Site, title: &str) {
    let site = site.0;
    if class == 0 || !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|_, _| {
        if g.first_report(table::mix(site as u64 ^ 0x0dd) ^ u64::from(class)) {
            report::misuse(g, ReportKind::UnlockNotHeld, title, class, obj, site, None);
        }
    });
}

/// Checks the destruction, at `site`, of the lock at `obj`: reported if this thread holds it.
/// Call it before the destruction; if the destruction succeeds, call [`destroy_done`].
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::destroyed(0x50, locklab::lockdep::hooks::Site::UNKNOWN);
/// locklab::lockdep::hooks::destroy_done(0x50);
/// ```
pub fn destroyed(obj: usize, site: Site) {
    let site = site.0;
    if !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|t, _| {
        if let Some(h) = t.held[..t.n].iter().find(|h| h.obj == obj).copied()
            && g.first_report(table::mix(site as u64 ^ 0xde5) ^ u64::from(h.class))
        {
            report::misuse(
                g,
                ReportKind::DestroyHeld,
                "destruction of a lock this thread holds",
                h.class,
                obj,
                site,
                Some(&h),
            );
        }
    });
}

/// A lock at `obj` was destroyed: this thread no longer holds it, and the object is forgotten (its
/// recorded class and its instance orders; a later lock at that address is another lock).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::destroy_done(0x51);
/// ```
pub fn destroy_done(obj: usize) {
    if !enabled() {
        return;
    }
    let _ = with_thread(|t, _| {
        if let Some(i) = t.held[..t.n].iter().position(|x| x.obj == obj) {
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
        }
    });
    forget_object(obj);
}

/// Checks a condition-variable wait at `site` on the condvar at `cond`, releasing the mutex at
/// `mutex`: a warning (once per pair of classes) if this thread holds any other lock meanwhile.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::cond_wait(0x60, 0x61, locklab::lockdep::hooks::Site::UNKNOWN);
/// ```
pub fn cond_wait(cond: usize, mutex: usize, site: Site) {
    let site = site.0;
    if !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|t, _| {
        drop_stale(t);
        let mclass = t.held[..t.n]
            .iter()
            .find(|h| h.obj == mutex)
            .map_or(0, |h| h.class);
        if let Some(other) = t.held[..t.n].iter().rev().find(|h| h.obj != mutex).copied() {
            let key = u64::from(other.class) << 32 | u64::from(mclass);
            if g.first_report(table::mix(key ^ 0xc0d)) {
                report::cond_wait(g, &other, mclass, cond, site);
            }
        }
    });
}

/// Checks, at a thread's exit, that it holds no lock (reported once per class and site).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::thread_exit();
/// ```
pub fn thread_exit() {
    if !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|t, _| {
        drop_stale(t);
        if let Some(h) = t.held[..t.n].last().copied()
            && g.first_report(table::mix(h.site as u64 ^ 0xe417) ^ u64::from(h.class))
        {
            report::misuse(
                g,
                ReportKind::ExitHolding,
                "thread exiting with locks held",
                h.class,
                h.obj,
                h.site,
                Some(&h),
            );
        }
        t.n = 0;
        t.lost = 0;
        t.exit_armed = false;
    });
}
