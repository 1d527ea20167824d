//! `pthread_mutex_*` on locklab's locks, in glibc's 40-byte `pthread_mutex_t`.
//!
//! # Layout (x86-64 and aarch64 glibc)
//! | bytes | glibc's field | ours                                                                  |
//! |-------|---------------|-----------------------------------------------------------------------|
//! | 0-3   | `__lock`      | `adaptive`: the adaptive mutex's word ([`crate::adaptive`]); `qspinlock`, `tas`: the lock |
//! | 4-7   | `__count`     | recursion count of a recursive mutex (as glibc)                        |
//! | 8-11  | `__owner`     | owner TID while held, 0 when free (as glibc; gdb and programs read it) |
//! | 12-15 | `__nusers`    | the spinlocks: timed lockers now waiting                               |
//! | 16-19 | `__kind`      | glibc's kind, never changed but by init and destroy (static initializers write it) |
//! | 20-23 | `__spins`     | `adaptive`: spin history in bytes 20-21 (glibc's `__spins`, as its adaptive mutex); the spinlocks: fork epoch of the acquisition |
//! | 24-39 | `__list`      | `mcs`: tail and next; `ticket`: tickets (24-31)                        |
//!
//! The adaptive mutex reads the owner TID at byte 8 to decide how long to spin. All-zero is an
//! unlocked default mutex for every algorithm.
//!
//! # Timed lockers of the spinlock choices
//! `mcs`, `ticket` and `qspinlock` queue their waiters, and a queued waiter cannot leave; a timed
//! locker therefore does not queue: it counts itself in bytes 12-15 and polls. While that count is
//! non-zero, blocking lockers that find the lock busy poll too instead of queueing, so the queue
//! drains and the timed locker competes for every release (served with high probability, not in
//! order). The uncontended path never reads the count.
//!
//! # Fork
//! The standard atfork pattern locks in the prepare handler and unlocks in both parent and child
//! handlers; a thread queued at `fork` does not exist in the child, and the spinlocks' unlock would
//! hand the lock to it (an MCS node, a ticket, a queued-spinlock tail). Each acquisition of the
//! spinlock choices records the fork epoch ([`locklab::sys::fork_epoch`]) in bytes 20-23; an unlock
//! in a later epoch (a child releasing what was taken before its fork) frees the lock outright,
//! dropping the parent's queue. Left uncovered: child threads that queued behind the parent's dead
//! waiters before that unlock (they wait for ever); the adaptive mutex has no such gap (nothing of a
//! waiter lives outside its word).
//!
//! # glibc-adaptive
//! `LOCKLAB_MUTEX=glibc-adaptive` leaves every mutex (and condvar) to glibc, as `glibc` does, but
//! first turns a mutex of the normal type (`__kind & 127 == 0`: default, `PTHREAD_MUTEX_NORMAL`,
//! statically initialised, process-shared or not) into glibc's adaptive type (3) with one
//! compare-and-swap, at `pthread_mutex_init` or at its first lock. Nothing a program can observe
//! through the API changes: glibc's adaptive mutex is a normal mutex that spins (bounded, with
//! exponential backoff and jitter) before its futex wait. Recursive, errorcheck, robust and
//! priority mutexes keep their kind. It is the strongest mutex glibc has, run by glibc's own code.
//!
//! # Kinds, as glibc
//! `kind & 3`: 0 normal (relocking deadlocks; any thread may unlock, and unlocking a free mutex is a
//! no-op), 1 recursive (count, `EAGAIN` at its limit; `EPERM` for a non-owner's unlock), 2 errorcheck
//! (`EDEADLK` on relock, `EPERM` for a non-owner's unlock), 3 adaptive (as normal). A kind with the
//! robust (16), priority-inherit (32), priority-protect (64) or process-shared (128) bit, which only
//! `pthread_mutex_init` with such an attribute makes, is glibc's object, and every call on it goes to
//! glibc; so does a destroyed mutex (kind -1, as glibc marks it: glibc answers `EINVAL`).
//!
//! ```no_run
//! // From C, nothing changes:
//! //   static pthread_mutex_t m = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
//! //   pthread_mutex_lock(&m); pthread_mutex_lock(&m); pthread_mutex_unlock(&m); pthread_mutex_unlock(&m);
//! let mut m: libc::pthread_mutex_t = libc::PTHREAD_MUTEX_INITIALIZER;
//! unsafe {
//!     assert_eq!(locklab_pthread::entry::pthread_mutex_lock(&mut m), 0);
//!     assert_eq!(locklab_pthread::entry::pthread_mutex_unlock(&mut m), 0);
//! }
//! ```

use crate::adaptive::Adaptive;
use crate::config::{self, MutexAlgo};
use crate::real;
use crate::sys::{self, tid};
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use libc::{c_int, clockid_t, pthread_mutex_t, pthread_mutexattr_t, timespec};
use locklab::raw::{RawMcsLock, RawQueuedSpinLock, RawTasLock, RawTicketLock};

const OFF_COUNT: usize = 4;
const OFF_OWNER: usize = 8;
const OFF_KIND: usize = 16;
const OFF_TAIL: usize = 24;
/// The spinlock choices: timed lockers waiting (`__nusers`).
const OFF_TIMED: usize = 12;
/// The spinlock choices: fork epoch of the current acquisition (`__spins`).
const OFF_EPOCH: usize = 20;
/// The adaptive mutex: its spin history (the 16-bit `__spins`, as glibc's adaptive mutex).
const OFF_SPINS: usize = 20;

pub(crate) const KIND_RECURSIVE: i32 = 1;
pub(crate) const KIND_ERRORCHECK: i32 = 2;
/// glibc's `PTHREAD_MUTEX_ADAPTIVE_NP`.
const KIND_ADAPTIVE: i32 = 3;
/// Robust, priority-inherit, priority-protect, process-shared: glibc's objects.
const KIND_GLIBC: i32 = 16 | 32 | 64 | 128;

/// Views of one `pthread_mutex_t`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct M(pub(crate) *mut pthread_mutex_t);

impl M {
    #[inline]
    fn word<T>(self, off: usize) -> &'static T {
        // SAFETY: the caller of every entry point passes a valid, 8-aligned pthread_mutex_t that
        // outlives the call; the fields are atomics, so shared views may race.
        unsafe { &*((self.0 as *const u8).add(off) as *const T) }
    }
    #[inline]
    pub(crate) fn kind(self) -> i32 {
        self.word::<AtomicI32>(OFF_KIND).load(Ordering::Relaxed)
    }
    #[inline]
    fn owner(self) -> &'static AtomicI32 {
        self.word(OFF_OWNER)
    }
    #[inline]
    fn count(self) -> &'static AtomicU32 {
        self.word(OFF_COUNT)
    }
    #[inline]
    fn mutex(self) -> Adaptive {
        Adaptive {
            word: self.word(0),
            owner: self.owner(),
            spins: self.word(OFF_SPINS),
        }
    }
    #[inline]
    fn mcs(self) -> &'static RawMcsLock {
        self.word(OFF_TAIL)
    }
    #[inline]
    fn ticket(self) -> &'static RawTicketLock {
        self.word(OFF_TAIL)
    }
    #[inline]
    fn qspin(self) -> &'static RawQueuedSpinLock {
        self.word(0)
    }
    #[inline]
    fn tas(self) -> &'static RawTasLock {
        self.word(0)
    }
    #[inline]
    fn timed(self) -> &'static AtomicU32 {
        self.word(OFF_TIMED)
    }
    #[inline]
    fn epoch(self) -> &'static AtomicU32 {
        self.word(OFF_EPOCH)
    }

    /// glibc owns this object (by kind, or the process's choice).
    #[inline]
    pub(crate) fn is_glibc(self) -> bool {
        self.kind() & KIND_GLIBC != 0 || config::mutex_is_glibc()
    }

    /// Under `glibc-adaptive`, turns a normal mutex into glibc's adaptive kind before glibc takes
    /// it (module docs, "glibc-adaptive").
    #[inline]
    fn adapt(self) {
        if config::mutex() == MutexAlgo::GlibcAdaptive {
            let k = self.word::<AtomicI32>(OFF_KIND);
            let kind = k.load(Ordering::Relaxed);
            if kind & 127 == 0 {
                // Relaxed: glibc reads the kind relaxed too; a racing locker that still sees the
                // normal kind takes the same lock word by the same protocol, only without spinning.
                let _ = k.compare_exchange(
                    kind,
                    kind | KIND_ADAPTIVE,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }

    // --- the algorithms: lock word only, no kinds ---------------------------------------------

    #[inline]
    fn raw_lock(self) {
        match config::mutex() {
            MutexAlgo::Adaptive => self.mutex().lock(),
            MutexAlgo::Tas => self.tas().lock(),
            // Never called with glibc's choice (its objects go to glibc first); polling is correct
            // for every algorithm.
            MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive => {
                sys::spin_until(None, || self.raw_try_lock());
            }
            _ => {
                if !self.raw_try_lock() {
                    self.lock_queued();
                }
            }
        }
        self.after_spin_lock();
    }

    /// The queued spinlocks' contended lock: queue, unless a timed locker is waiting (then poll,
    /// so it is served: module docs).
    #[cold]
    #[inline(never)]
    fn lock_queued(self) {
        if self.timed().load(Ordering::Relaxed) != 0 {
            sys::spin_until(None, || self.raw_try_lock());
            return;
        }
        match config::mutex() {
            MutexAlgo::Mcs => self.mcs().lock_detached(),
            MutexAlgo::Ticket => self.ticket().lock(),
            MutexAlgo::QSpinLock => self.qspin().lock(),
            _ => {
                sys::spin_until(None, || self.raw_try_lock());
            }
        }
    }

    /// Records a spinlock choice's acquisition epoch (module docs, "Fork").
    #[inline]
    fn after_spin_lock(self) {
        if !matches!(config::mutex(), MutexAlgo::Adaptive | MutexAlgo::Tas) {
            let e = locklab::sys::fork_epoch();
            if self.epoch().load(Ordering::Relaxed) != e {
                self.epoch().store(e, Ordering::Relaxed);
            }
        }
    }

    /// The lock was taken before a `fork` this process came out of: free it outright, dropping
    /// the queue of the parent's threads (module docs, "Fork"). `false` if it was not.
    #[inline]
    fn release_stale(self) -> bool {
        if self.epoch().load(Ordering::Relaxed) == locklab::sys::fork_epoch() {
            return false;
        }
        self.release_stale_slow();
        true
    }

    #[cold]
    #[inline(never)]
    fn release_stale_slow(self) {
        // All-zero is free for every algorithm; Release publishes the critical section to the
        // next locker's Acquire take.
        match config::mutex() {
            MutexAlgo::QSpinLock => self.word::<AtomicU32>(0).store(0, Ordering::Release),
            _ => {
                self.word::<core::sync::atomic::AtomicU64>(OFF_TAIL + 8)
                    .store(0, Ordering::Relaxed);
                self.word::<core::sync::atomic::AtomicU64>(OFF_TAIL)
                    .store(0, Ordering::Release);
            }
        }
        self.epoch()
            .store(locklab::sys::fork_epoch(), Ordering::Relaxed);
    }

    #[inline]
    fn raw_try_lock(self) -> bool {
        match config::mutex() {
            MutexAlgo::Adaptive => self.mutex().try_lock(),
            MutexAlgo::Mcs => self.mcs().try_lock_detached(),
            MutexAlgo::Ticket => self.ticket().try_lock(),
            MutexAlgo::QSpinLock => self.qspin().try_lock(),
            MutexAlgo::Tas => self.tas().try_lock(),
            MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive => false,
        }
    }

    /// Locks before `abs` on `clock`; `false` on time-out. The spinlock choices poll, counted in
    /// `timed` so that blocking lockers poll too meanwhile (module docs).
    fn raw_lock_until(self, clock: clockid_t, abs: &timespec) -> bool {
        match config::mutex() {
            MutexAlgo::Adaptive => self.mutex().lock_until(clock, abs),
            MutexAlgo::Tas => sys::until(clock, abs, |d| {
                sys::spin_until(Some(d), || self.raw_try_lock())
            }),
            _ => {
                self.timed().fetch_add(1, Ordering::Relaxed);
                let ok = sys::until(clock, abs, |d| {
                    sys::spin_until(Some(d), || self.raw_try_lock())
                });
                self.timed().fetch_sub(1, Ordering::Relaxed);
                if ok {
                    self.after_spin_lock();
                }
                ok
            }
        }
    }

    #[inline]
    fn raw_is_locked(self) -> bool {
        match config::mutex() {
            MutexAlgo::Adaptive => self.mutex().is_locked(),
            MutexAlgo::Mcs => self.mcs().is_locked(),
            MutexAlgo::Ticket => self.ticket().is_locked(),
            MutexAlgo::QSpinLock => self.qspin().is_locked(),
            MutexAlgo::Tas => self.tas().is_locked(),
            MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive => false,
        }
    }

    /// Releases the lock, whichever thread took it.
    ///
    /// # Safety
    /// The lock is held, and this ends that acquisition.
    #[inline]
    unsafe fn raw_unlock(self) {
        // SAFETY: the caller's contract; every algorithm here may be released by any thread (the
        // adaptive mutex and the spinlocks by a swap or a store, MCS as a detached holder).
        unsafe {
            match config::mutex() {
                MutexAlgo::Adaptive => self.mutex().unlock(),
                MutexAlgo::Tas => self.tas().unlock(),
                _ if self.release_stale() => {}
                MutexAlgo::Mcs => self.mcs().unlock_detached(),
                MutexAlgo::Ticket => self.ticket().unlock(),
                MutexAlgo::QSpinLock => self.qspin().unlock(),
                MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive => {}
            }
        }
    }

    // --- kinds ---------------------------------------------------------------------------------

    /// The kind checks before a blocking or trying lock: `Some(result)` ends the call.
    #[inline]
    fn before_lock(self, kind: i32, me: i32, trying: bool) -> Option<c_int> {
        let ty = kind & 3;
        if (ty == KIND_RECURSIVE || ty == KIND_ERRORCHECK)
            && self.owner().load(Ordering::Relaxed) == me
        {
            if ty == KIND_ERRORCHECK {
                return Some(if trying { libc::EBUSY } else { libc::EDEADLK });
            }
            let c = self.count().load(Ordering::Relaxed);
            if c == u32::MAX {
                return Some(libc::EAGAIN);
            }
            self.count().store(c + 1, Ordering::Relaxed);
            return Some(0);
        }
        None
    }

    /// Records the new holder.
    #[inline]
    fn after_lock(self, kind: i32, me: i32) {
        if kind & 3 == KIND_RECURSIVE {
            self.count().store(1, Ordering::Relaxed);
        }
        self.owner().store(me, Ordering::Relaxed);
    }
}

/// The lock's common case, as the x86-64 entry ([`crate::entry`]) runs it in assembly: the fast
/// path armed ([`sys::MUTEX_FAST`]: the default choice, no statistics, no lockdep), a normal mutex
/// (kind 0), free: one CAS (a plain load and store while the process has one thread) and the owner
/// store. `false` (nothing done) otherwise: [`lock_general`] then. Small enough to need no stack
/// frame.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline(always)]
pub(crate) unsafe fn lock_fast(m: M) -> bool {
    if !(sys::MUTEX_FAST.load(Ordering::Relaxed) && m.kind() == 0) {
        return false;
    }
    // One thread in the process: nobody else can touch the mutex, plain accesses do.
    let took = if sys::single_threaded() {
        m.mutex().try_lock_unshared()
    } else {
        m.mutex().try_lock_fast()
    };
    if took {
        m.owner().store(tid(), Ordering::Relaxed);
    }
    took
}

/// Takes the lock (blocking): every case ([`lock_fast`]'s too).
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline(never)]
pub(crate) unsafe fn lock_general(m: M) -> c_int {
    let kind = m.kind();
    let algo = config::mutex();
    if kind & KIND_GLIBC != 0 || matches!(algo, MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive) {
        m.adapt();
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_lock(m.0) };
    }
    let me = tid();
    if kind & 3 != 0
        && let Some(r) = m.before_lock(kind, me, false)
    {
        return r;
    }
    match algo {
        // Only the adaptive mutex sleeps (a futex wait may fail and set errno): its fast path is
        // inline, its slow path keeps errno. The spinlocks' only system call, `sched_yield`, does not
        // fail.
        MutexAlgo::Adaptive => {
            // One thread in the process: nobody else can touch the mutex, plain accesses do.
            let alone = sys::single_threaded() && m.mutex().try_lock_unshared();
            // A load before any CAS: the common case's CAS in `lock` has just failed (a CAS that
            // fails still takes the line from the holder); a CAS only if the word shows the lock
            // free.
            if !alone && !m.mutex().try_lock() {
                lock_slow(m);
            }
        }
        MutexAlgo::Tas => m.tas().lock(),
        MutexAlgo::Mcs | MutexAlgo::Ticket | MutexAlgo::QSpinLock => {
            if !m.raw_try_lock() {
                m.lock_queued();
            }
            m.after_spin_lock();
        }
        // Handled above (glibc's objects and choice go to glibc).
        MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive => return libc::EINVAL,
    }
    m.after_lock(kind, me);
    0
}

/// The adaptive mutex's waiting part, which may make failing system calls: errno is kept as it was.
#[cold]
#[inline(never)]
fn lock_slow(m: M) {
    let e = sys::errno();
    m.mutex().lock_contended();
    sys::set_errno(e);
}

/// The unlock's common case, as in [`lock_fast`]: armed, a normal mutex held, its word not marked
/// by a sleeper: the owner cleared and one CAS (a plain load and store while the process has
/// one thread). `false` otherwise: [`unlock_general`] then (which clears the owner of a normal
/// mutex too, so a failed attempt here leaves nothing to undo).
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline(always)]
pub(crate) unsafe fn unlock_fast(m: M) -> bool {
    if !(sys::MUTEX_FAST.load(Ordering::Relaxed) && m.kind() == 0) {
        return false;
    }
    m.owner().store(0, Ordering::Relaxed);
    if sys::single_threaded() {
        m.mutex().unlock_unshared()
    } else {
        m.mutex().unlock_quiet()
    }
}

/// Releases the lock: every case ([`unlock_fast`]'s too).
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline(never)]
unsafe fn unlock_general(m: M) -> c_int {
    let kind = m.kind();
    let algo = config::mutex();
    if kind & KIND_GLIBC != 0 || matches!(algo, MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive) {
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_unlock(m.0) };
    }
    let ty = kind & 3;
    let owned = ty == KIND_RECURSIVE || ty == KIND_ERRORCHECK;
    if owned {
        if m.owner().load(Ordering::Relaxed) != tid() {
            return libc::EPERM;
        }
        if ty == KIND_RECURSIVE {
            let c = m.count().load(Ordering::Relaxed);
            if c > 1 {
                m.count().store(c - 1, Ordering::Relaxed);
                return 0;
            }
            m.count().store(0, Ordering::Relaxed);
        }
    }
    // glibc lets a normal mutex be unlocked when free (nothing happens) and by any thread. An
    // unlock's only system call is a futex wake, which does not fail (errno stays as it was).
    // SAFETY (each arm): held, as checked (the owner-tracking kinds) or seen (a normal mutex).
    unsafe {
        match algo {
            MutexAlgo::Adaptive => {
                // The unlock leaves a free mutex alone itself.
                m.owner().store(0, Ordering::Relaxed);
                if !(sys::single_threaded() && m.mutex().unlock_unshared()) {
                    m.mutex().unlock();
                }
            }
            MutexAlgo::Mcs | MutexAlgo::Ticket | MutexAlgo::QSpinLock => {
                if owned || m.raw_is_locked() {
                    m.owner().store(0, Ordering::Relaxed);
                    m.raw_unlock();
                }
            }
            MutexAlgo::Tas => {
                let x = m.tas();
                if owned || x.is_locked() {
                    m.owner().store(0, Ordering::Relaxed);
                    x.unlock();
                }
            }
            MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive => {}
        }
    }
    0
}

/// Tries once.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline]
pub(crate) unsafe fn trylock(m: M) -> c_int {
    if m.is_glibc() {
        m.adapt();
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_trylock(m.0) };
    }
    let kind = m.kind();
    let me = tid();
    if kind & 3 != 0
        && let Some(r) = m.before_lock(kind, me, true)
    {
        return r;
    }
    if !m.raw_try_lock() {
        return libc::EBUSY;
    }
    m.after_spin_lock();
    m.after_lock(kind, me);
    0
}

/// Locks before `abs` on `clock`.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`; `abs` to a `timespec`.
pub(crate) unsafe fn clocklock(m: M, clock: clockid_t, abs: *const timespec) -> c_int {
    if !sys::valid_clock(clock) {
        return libc::EINVAL;
    }
    if m.is_glibc() {
        m.adapt();
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_clocklock(m.0, clock, abs) };
    }
    let kind = m.kind();
    let me = tid();
    if let Some(r) = m.before_lock(kind, me, false) {
        return r;
    }
    if m.raw_try_lock() {
        m.after_spin_lock();
    } else {
        // As glibc, the time is checked only when the call must wait; no time at all waits as long
        // as it takes (glibc's futex wait with no time-out).
        // SAFETY: the caller's pointer.
        let Some(abs) = (unsafe { abs.as_ref() }) else {
            let e = sys::errno();
            m.raw_lock();
            sys::set_errno(e);
            m.after_lock(kind, me);
            return 0;
        };
        // glibc's order: a time before the epoch has passed (whatever its nanoseconds say), and
        // only then are the nanoseconds checked.
        if abs.tv_sec < 0 {
            return libc::ETIMEDOUT;
        }
        if !sys::valid_timespec(abs) {
            return libc::EINVAL;
        }
        let e = sys::errno();
        let ok = m.raw_lock_until(clock, abs);
        sys::set_errno(e);
        if !ok {
            return libc::ETIMEDOUT;
        }
    }
    m.after_lock(kind, me);
    0
}

/// Whether a mutex of a normal kind (normal or adaptive, process-shared or not; not robust, nor
/// priority) is held by some thread: its lock word, ours or glibc's (`__lock`, 0 when free). Other
/// kinds answer `true` (their unlock checks the owner itself). Lockdep asks it before an unlock by
/// a thread it does not know as a holder.
pub(crate) fn normal_is_held(m: M) -> bool {
    let kind = m.kind();
    if kind & (16 | 32 | 64) != 0 || kind & 3 == KIND_RECURSIVE || kind & 3 == KIND_ERRORCHECK {
        return true;
    }
    if m.is_glibc() {
        m.word::<AtomicI32>(0).load(Ordering::Relaxed) != 0
    } else {
        m.raw_is_locked()
    }
}

/// Whether an unlock by the calling thread now ends the hold (not so for a recursive mutex it
/// holds more than once).
pub(crate) fn releases(m: M) -> bool {
    !(m.kind() & 3 == KIND_RECURSIVE
        && m.owner().load(Ordering::Relaxed) == tid()
        && m.count().load(Ordering::Relaxed) > 1)
}

/// The mutex as lock statistics describe it.
pub(crate) fn stat_obj(m: M) -> crate::stat::Obj {
    crate::stat::Obj::Mutex {
        kind: m.kind(),
        glibc: m.is_glibc(),
    }
}

/// What [`release_for_wait`] saved, for [`reacquire`].
pub(crate) struct Held {
    count: u32,
}

/// Releases the mutex for a condvar wait, remembering a recursive mutex's count (all of it is
/// released, and restored after). `Err(EPERM)` if an owner-tracking mutex is not ours.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
pub(crate) unsafe fn release_for_wait(m: M) -> Result<Held, c_int> {
    if m.is_glibc() {
        // SAFETY: forwarded.
        return match unsafe { real::pthread_mutex_unlock(m.0) } {
            0 => Ok(Held { count: 0 }),
            e => Err(e),
        };
    }
    let ty = m.kind() & 3;
    let mut count = 0;
    if ty == KIND_RECURSIVE || ty == KIND_ERRORCHECK {
        if m.owner().load(Ordering::Relaxed) != tid() {
            return Err(libc::EPERM);
        }
        if ty == KIND_RECURSIVE {
            count = m.count().swap(0, Ordering::Relaxed);
        }
    }
    // A normal mutex the caller does not hold (undefined by POSIX): glibc releases nothing and the
    // wait goes on; so do we (releasing a free lock would hand it to nobody, or wait for a holder).
    if ty == KIND_RECURSIVE || ty == KIND_ERRORCHECK || m.raw_is_locked() {
        m.owner().store(0, Ordering::Relaxed);
        // SAFETY: held: by us (checked), or seen held (POSIX's precondition for a wait).
        unsafe { m.raw_unlock() };
    }
    Ok(Held { count })
}

/// Takes the mutex back after a condvar wait, as the waiter's.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t` released by `release_for_wait`.
pub(crate) unsafe fn reacquire(m: M, held: Held) -> c_int {
    if m.is_glibc() {
        // SAFETY: forwarded (a robust mutex may answer EOWNERDEAD, which the wait returns).
        return unsafe { real::pthread_mutex_lock(m.0) };
    }
    m.raw_lock();
    if held.count != 0 {
        m.count().store(held.count, Ordering::Relaxed);
    }
    m.owner().store(tid(), Ordering::Relaxed);
    0
}

impl From<*mut pthread_mutex_t> for M {
    fn from(p: *mut pthread_mutex_t) -> M {
        M(p)
    }
}

/// Reads a mutex attribute through glibc's getters: `(type, glibc's)`, where `glibc's` is set for a
/// robust, priority-inherit, priority-protect or process-shared attribute.
unsafe fn attr_kind(a: *const pthread_mutexattr_t) -> Result<(i32, bool), c_int> {
    if a.is_null() {
        return Ok((0, false));
    }
    let (mut ty, mut sh, mut rb, mut pr) = (0, 0, 0, 0);
    // SAFETY: a valid attribute (the caller's), valid out-pointers; these getters are not ours.
    unsafe {
        if sys::pthread_mutexattr_gettype(a, &mut ty) != 0 {
            return Err(libc::EINVAL);
        }
        libc::pthread_mutexattr_getpshared(a, &mut sh);
        libc::pthread_mutexattr_getrobust(a, &mut rb);
        libc::pthread_mutexattr_getprotocol(a, &mut pr);
    }
    let glibc = sh != libc::PTHREAD_PROCESS_PRIVATE
        || rb != libc::PTHREAD_MUTEX_STALLED
        || pr != libc::PTHREAD_PRIO_NONE;
    Ok((ty & 3, glibc))
}

// --- exports ---------------------------------------------------------------------------------------

/// `pthread_mutex_init`: our mutex of the attribute's type, or glibc's for a robust, priority or
/// process-shared attribute.
///
/// # Safety
/// `m` points to writable memory for a `pthread_mutex_t`; `a` is null or a valid attribute.
pub unsafe extern "C" fn pthread_mutex_init(
    m: *mut pthread_mutex_t,
    a: *const pthread_mutexattr_t,
) -> c_int {
    // SAFETY: the caller's attribute.
    let (ty, glibc) = match unsafe { attr_kind(a) } {
        Ok(k) => k,
        Err(e) => return e,
    };
    if glibc || config::mutex_is_glibc() {
        // SAFETY: forwarded.
        let r = unsafe { real::pthread_mutex_init(m, a) };
        if r == 0 {
            M(m).adapt();
        }
        return r;
    }
    // SAFETY: 40 writable bytes (the caller's contract); no other thread may use a mutex being
    // initialised.
    unsafe {
        core::ptr::write_bytes(m.cast::<u8>(), 0, core::mem::size_of::<pthread_mutex_t>());
        M(m).word::<AtomicI32>(OFF_KIND)
            .store(ty, Ordering::Relaxed);
    }
    0
}

/// `pthread_mutex_destroy`: `EBUSY` if held; marks the mutex destroyed as glibc does.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    let mm = M(m);
    if mm.is_glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_destroy(m) };
    }
    if mm.raw_is_locked() {
        return libc::EBUSY;
    }
    mm.word::<AtomicI32>(OFF_KIND).store(-1, Ordering::Relaxed);
    0
}

/// `pthread_mutex_lock` past the fast path ([`lock_fast`]): every case.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline]
pub(crate) unsafe extern "C" fn pthread_mutex_lock_general(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { lock_general(M(m)) }
}

/// `pthread_mutex_unlock` past the fast path ([`unlock_fast`]): every case.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline]
pub(crate) unsafe extern "C" fn pthread_mutex_unlock_general(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { unlock_general(M(m)) }
}

/// `pthread_mutex_trylock`.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[inline]
pub(crate) unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { trylock(M(m)) }
}

/// `pthread_mutex_timedlock`: `CLOCK_REALTIME`.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`; `t` to a `timespec`.
pub(crate) unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    if M(m).is_glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_timedlock(m, t) };
    }
    // SAFETY: forwarded.
    unsafe { clocklock(M(m), libc::CLOCK_REALTIME, t) }
}

/// `pthread_mutex_clocklock`.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`; `t` to a `timespec`.
pub(crate) unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    t: *const timespec,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { clocklock(M(m), clock, t) }
}

/// `pthread_mutex_consistent`: only robust mutexes (glibc's) have a state to repair.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_consistent(m: *mut pthread_mutex_t) -> c_int {
    if M(m).is_glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_consistent(m) };
    }
    libc::EINVAL
}

/// `pthread_mutex_consistent_np`, the old name.
///
/// # Safety
/// As [`pthread_mutex_consistent`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_consistent_np(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { pthread_mutex_consistent(m) }
}

/// `pthread_mutex_getprioceiling`: only priority-protect mutexes (glibc's) have one.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`; `p` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_getprioceiling(
    m: *const pthread_mutex_t,
    p: *mut c_int,
) -> c_int {
    if M(m.cast_mut()).is_glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_getprioceiling(m, p) };
    }
    libc::EINVAL
}

/// `pthread_mutex_setprioceiling`: only priority-protect mutexes (glibc's) have one.
///
/// # Safety
/// `m` points to a valid `pthread_mutex_t`; `old` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_setprioceiling(
    m: *mut pthread_mutex_t,
    p: c_int,
    old: *mut c_int,
) -> c_int {
    if M(m).is_glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_mutex_setprioceiling(m, p, old) };
    }
    libc::EINVAL
}
