//! `pthread_rwlock_*` on locklab's rwlocks, in glibc's 56-byte `pthread_rwlock_t`.
//!
//! # Semantics, as glibc
//! Readers share. glibc's default kind (`PTHREAD_RWLOCK_PREFER_READER_NP`, and `PREFER_WRITER_NP`,
//! which glibc treats the same) lets a read lock succeed whenever no writer *holds* the lock, even while
//! writers wait, so a thread that reads may read again; real programs rely on it, so both choices honour
//! it: `recursive-rwsem` (alias `rwsem`) is [`locklab::RecursiveRwSem`]'s futex rwlock
//! (reader-preferring for every kind),
//! `rwspinlock` is the queued rwlock with [`read_recursive`](locklab::raw::RawRwSpinLock::read_recursive)
//! unless the lock is `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` (then writers are served in
//! order). A writer that relocks, or reads, its own write lock gets `EDEADLK`; more readers than the
//! count holds get `EAGAIN`. Process-shared rwlocks are glibc's.
//!
//! # Writers first, when the kind asks
//! A program picks `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` precisely so that readers cannot
//! starve writers. For that kind, under both choices, a writer (blocking, trying for a while, or
//! timed) counts itself in `writers` (bytes 16-19) while it waits, and a new reader waits while the
//! count is non-zero (sleeping on `gate`, bytes 20-23, which the last waiting writer bumps and wakes
//! when it leaves the count); `tryrdlock` then answers `EBUSY`. Readers already in hold the lock
//! until they release it, so the writer gets in once they have. As the kind says, a reader that
//! reads again while a writer waits deadlocks (glibc's does too).
//!
//! # Layout
//! | bytes | glibc's field   | ours                                                    |
//! |-------|-----------------|---------------------------------------------------------|
//! | 0-7   | `__readers`, `__writers` | the lock word(s)                               |
//! | 16-19 | `__pad3`        | writers waiting (prefer-writer kind only)               |
//! | 20-23 | `__pad4`        | `gate`: the futex word readers wait on for them         |
//! | 24-27 | `__cur_writer`  | the writer's TID while write-locked (as glibc)          |
//! | 28-31 | `__shared`      | nonzero: process-shared, glibc's object (as glibc)      |
//! | 48    | `__flags`       | the kind; 2 = prefer writers, non-recursive (as glibc)  |
//!
//! ```c
//! pthread_rwlock_rdlock(&l); pthread_rwlock_rdlock(&l); /* fine even if a writer waits */
//! ```

use crate::config::{self, RwAlgo};
use crate::real;
use crate::sys::{self, tid};
use core::sync::atomic::{AtomicI32, AtomicU8, AtomicU32, Ordering};
use libc::{c_int, clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec};
use lock_api::{RawRwLock as _, RawRwLockTimed as _};
use locklab::raw::{RawRecursiveRwSem, RawRwSpinLock};

pub(crate) const OFF_WRITER: usize = 24;
pub(crate) const OFF_SHARED: usize = 28;
pub(crate) const OFF_FLAGS: usize = 48;
const OFF_WRITERS_WAITING: usize = 16;
const OFF_GATE: usize = 20;
pub(crate) const PREFER_WRITER_NONRECURSIVE: u8 = 2;
/// Read holds refused with `EAGAIN` beyond this (well below either lock's hard limit, so a burst of
/// concurrent readers cannot reach it between our check and their increment).
const READ_LIMIT_MARGIN: u32 = 1 << 16;
/// `recursive-rwsem`: read holds refused (`EAGAIN`) from this count on; the fast path's add refuses there too,
/// so the margin above stays free for the slow path's readers.
pub(crate) const RWSEM_READ_LIMIT: u32 =
    locklab::rw::recursive_rwsem::MAX_READERS - READ_LIMIT_MARGIN;

#[derive(Clone, Copy)]
pub(crate) struct L(pub(crate) *mut pthread_rwlock_t);

impl L {
    fn at<T>(self, off: usize) -> &'static T {
        // SAFETY: the caller passes a valid, 8-aligned pthread_rwlock_t that outlives the call.
        unsafe { &*((self.0 as *const u8).add(off) as *const T) }
    }
    fn sem(self) -> &'static RawRecursiveRwSem {
        self.at(0)
    }
    fn spin(self) -> &'static RawRwSpinLock {
        self.at(0)
    }
    fn writer(self) -> &'static AtomicI32 {
        self.at(OFF_WRITER)
    }
    /// Process-shared (`__shared` non-zero): glibc's object, seen by other processes.
    pub(crate) fn is_shared(self) -> bool {
        self.at::<AtomicI32>(OFF_SHARED).load(Ordering::Relaxed) != 0
    }
    pub(crate) fn is_glibc(self) -> bool {
        self.is_shared() || config::rwlock() == RwAlgo::Glibc
    }
    fn writers_waiting(self) -> &'static AtomicU32 {
        self.at(OFF_WRITERS_WAITING)
    }
    fn gate(self) -> &'static AtomicU32 {
        self.at(OFF_GATE)
    }
    /// A reader of the prefer-writer kind waits here while writers wait (module docs); `false` if
    /// the time passed first.
    fn wait_for_writers(self, until: Option<(clockid_t, &timespec)>) -> bool {
        loop {
            // Acquire pairs with the last writer's Release bump of `gate`.
            let g = self.gate().load(Ordering::Acquire);
            // SeqCst with the writers' increment and decrement: the gate value is read before the
            // count, so a last writer leaving after this read bumps the gate and the sleep below
            // returns at once (no lost wake-up).
            if self.writers_waiting().load(Ordering::SeqCst) == 0 {
                return true;
            }
            if !sys::futex_wait_until(self.gate(), g, until) {
                return self.writers_waiting().load(Ordering::SeqCst) == 0;
            }
        }
    }
    /// A writer of the prefer-writer kind leaves the waiting count; the last one lets readers in.
    fn writer_done_waiting(self) {
        if self.writers_waiting().fetch_sub(1, Ordering::SeqCst) == 1 {
            // Release pairs with the readers' Acquire load of `gate`.
            self.gate().fetch_add(1, Ordering::Release);
            sys::futex_wake(self.gate(), i32::MAX, false);
        }
    }
    /// Readers wait behind queued writers (`PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`), under
    /// every choice (glibc keeps the kind in the same byte).
    pub(crate) fn prefers_writers(self) -> bool {
        self.at::<AtomicU8>(OFF_FLAGS).load(Ordering::Relaxed) == PREFER_WRITER_NONRECURSIVE
    }
    fn recursive_reads(self) -> bool {
        self.at::<AtomicU8>(OFF_FLAGS).load(Ordering::Relaxed) != PREFER_WRITER_NONRECURSIVE
    }
    /// Too many read holds already (forgotten unlocks): `EAGAIN`, as glibc.
    fn readers_full(self) -> bool {
        let w = self.at::<AtomicU32>(0).load(Ordering::Relaxed);
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => {
                w & locklab::rw::recursive_rwsem::COUNT_MASK >= RWSEM_READ_LIMIT
            }
            _ => (w >> 9) >= locklab::rw::rwspinlock::MAX_READERS - READ_LIMIT_MARGIN,
        }
    }

    fn raw_read(self) {
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => drop(self.sem().lock_shared()),
            _ if self.recursive_reads() => self.spin().read_recursive(),
            _ => self.spin().read(),
        }
    }
    fn raw_try_read(self) -> bool {
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => self.sem().try_lock_shared().is_some(),
            _ if self.recursive_reads() => self.spin().try_read_recursive(),
            _ => self.spin().try_read(),
        }
    }
    fn raw_write(self) {
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => drop(self.sem().lock_exclusive()),
            _ => self.spin().write(),
        }
    }
    fn raw_try_write(self) -> bool {
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => self.sem().try_lock_exclusive().is_some(),
            _ => self.spin().try_write(),
        }
    }
    fn raw_read_until(self, clock: clockid_t, abs: &timespec) -> bool {
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => sys::until(clock, abs, |d| {
                self.sem().try_lock_shared_until(d).is_some()
            }),
            _ => sys::until(clock, abs, |d| {
                sys::spin_until(Some(d), || self.raw_try_read())
            }),
        }
    }
    fn raw_write_until(self, clock: clockid_t, abs: &timespec) -> bool {
        match config::rwlock() {
            RwAlgo::RecursiveRwSem => sys::until(clock, abs, |d| {
                self.sem().try_lock_exclusive_until(d).is_some()
            }),
            _ => sys::until(clock, abs, |d| {
                sys::spin_until(Some(d), || self.raw_try_write())
            }),
        }
    }
}

/// The x86-64 `pthread_rwlock_rdlock` entry's refused add (a writer holds the lock, or the count
/// is at the library's limit): given back, then the general read path (`EDEADLK` for the writer
/// itself, `EAGAIN` at the limit, a wait otherwise), without a second try of the fast add, which
/// the entry has just made. The entry runs only with its flag armed: the default choice, no
/// statistics, no lockdep, a lock that is ours and reads recursively.
///
/// # Safety
/// `l` is a valid `pthread_rwlock_t` of ours to which the entry has just added one read hold.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn read_after_refused_add(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the entry's add is a read hold to give back.
    unsafe { L(l).sem().unlock_shared(lock_api::GuardSend::new()) };
    read(L(l), How::Block)
}

/// Which lock, how long, and whether only to try.
enum How<'a> {
    Block,
    Try,
    Until(clockid_t, &'a timespec),
}

/// `Some(EINVAL)` for a clock or time glibc's timed rwlock calls refuse before they try the lock.
///
/// # Safety
/// `t` null or a valid `timespec`.
pub(crate) unsafe fn bad_time(clock: clockid_t, t: *const timespec) -> Option<c_int> {
    // SAFETY: the caller's pointer.
    unsafe { timed(clock, t) }.err()
}

/// Checks a clock and time the way glibc's rwlock does: up front, whether or not the call must wait.
///
/// # Safety
/// `t` null or a valid `timespec`.
unsafe fn timed(clock: clockid_t, t: *const timespec) -> Result<How<'static>, c_int> {
    if !sys::valid_clock(clock) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's pointer, read during the call only (the 'static is local to this module).
    match unsafe { t.as_ref() } {
        Some(abs) if sys::valid_timespec(abs) => Ok(How::Until(clock, abs)),
        // No time at all: glibc's futex wait then has no time-out.
        None => Ok(How::Block),
        _ => Err(libc::EINVAL),
    }
}

fn read(l: L, how: How<'_>) -> c_int {
    if l.writer().load(Ordering::Relaxed) == tid() {
        return if matches!(how, How::Try) {
            libc::EBUSY
        } else {
            libc::EDEADLK
        };
    }
    if l.readers_full() {
        return libc::EAGAIN;
    }
    let e = sys::errno();
    if !l.recursive_reads() && l.writers_waiting().load(Ordering::SeqCst) != 0 {
        let passed = match how {
            How::Try => false,
            How::Block => l.wait_for_writers(None),
            How::Until(clock, abs) => l.wait_for_writers(Some((clock, abs))),
        };
        if !passed {
            sys::set_errno(e);
            return if matches!(how, How::Try) {
                libc::EBUSY
            } else {
                libc::ETIMEDOUT
            };
        }
    }
    let ok = match how {
        How::Block => {
            l.raw_read();
            true
        }
        How::Try => l.raw_try_read(),
        How::Until(clock, abs) => l.raw_try_read() || l.raw_read_until(clock, abs),
    };
    sys::set_errno(e);
    match (ok, how) {
        (true, _) => 0,
        (false, How::Try) => libc::EBUSY,
        (false, _) => libc::ETIMEDOUT,
    }
}

fn write(l: L, how: How<'_>) -> c_int {
    let me = tid();
    if l.writer().load(Ordering::Relaxed) == me {
        return if matches!(how, How::Try) {
            libc::EBUSY
        } else {
            libc::EDEADLK
        };
    }
    let e = sys::errno();
    let first = !l.recursive_reads() && !matches!(how, How::Try);
    if first {
        // SeqCst with the readers' check of the count (module docs).
        l.writers_waiting().fetch_add(1, Ordering::SeqCst);
    }
    let ok = match how {
        How::Block => {
            l.raw_write();
            true
        }
        How::Try => l.raw_try_write(),
        How::Until(clock, abs) => l.raw_try_write() || l.raw_write_until(clock, abs),
    };
    if first {
        l.writer_done_waiting();
    }
    sys::set_errno(e);
    if ok {
        l.writer().store(me, Ordering::Relaxed);
        return 0;
    }
    if matches!(how, How::Try) {
        libc::EBUSY
    } else {
        libc::ETIMEDOUT
    }
}

/// `pthread_rwlock_init`: our rwlock with the attribute's kind, or glibc's if process-shared.
///
/// # Safety
/// `l` points to writable memory for a `pthread_rwlock_t`; `a` null or a valid attribute.
pub unsafe extern "C" fn pthread_rwlock_init(
    l: *mut pthread_rwlock_t,
    a: *const pthread_rwlockattr_t,
) -> c_int {
    let (mut kind, mut sh) = (0, libc::PTHREAD_PROCESS_PRIVATE);
    if !a.is_null() {
        // SAFETY: the caller's attribute; the getters are not ours.
        unsafe {
            libc::pthread_rwlockattr_getkind_np(a, &mut kind);
            libc::pthread_rwlockattr_getpshared(a, &mut sh);
        }
    }
    if sh != libc::PTHREAD_PROCESS_PRIVATE || config::rwlock() == RwAlgo::Glibc {
        // SAFETY: forwarded.
        return unsafe { real::pthread_rwlock_init(l, a) };
    }
    // SAFETY: 56 writable bytes; nobody uses a lock being initialised.
    unsafe {
        core::ptr::write_bytes(l.cast::<u8>(), 0, core::mem::size_of::<pthread_rwlock_t>());
    }
    L(l).at::<AtomicU8>(OFF_FLAGS)
        .store(kind as u8, Ordering::Relaxed);
    0
}

/// `pthread_rwlock_destroy`.
///
/// # Safety
/// `l` points to a valid `pthread_rwlock_t`.
pub unsafe extern "C" fn pthread_rwlock_destroy(l: *mut pthread_rwlock_t) -> c_int {
    if L(l).is_glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_rwlock_destroy(l) };
    }
    0
}

macro_rules! entry {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) => |$l:ident| $body:expr;) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `l` points to a valid `pthread_rwlock_t`; a time, if any, to a `timespec`.
        #[inline]
        pub(crate) unsafe extern "C" fn $name(l: *mut pthread_rwlock_t $(, $arg: $ty)*) -> c_int {
            if L(l).is_glibc() {
                // SAFETY: forwarded.
                return unsafe { real::$name(l $(, $arg)*) };
            }
            let $l = L(l);
            $body
        }
    };
}

entry! {
    /// `pthread_rwlock_rdlock`: the common case first (the default choice, a kind that reads
    /// recursively, no writer holding: one `fetch_add`), else the general path.
    pthread_rwlock_rdlock() => |l| {
        if config::rwlock_is_default() && l.recursive_reads() && l.sem().read_once(RWSEM_READ_LIMIT) {
            0
        } else {
            read(l, How::Block)
        }
    };
}
entry! {
    /// `pthread_rwlock_tryrdlock`.
    pthread_rwlock_tryrdlock() => |l| read(l, How::Try);
}
entry! {
    /// `pthread_rwlock_timedrdlock` (`CLOCK_REALTIME`).
    pthread_rwlock_timedrdlock(t: *const timespec) => |l| {
        // SAFETY: the caller's pointer.
        match unsafe { timed(libc::CLOCK_REALTIME, t) } {
            Ok(how) => read(l, how),
            Err(e) => e,
        }
    };
}
entry! {
    /// `pthread_rwlock_clockrdlock`.
    pthread_rwlock_clockrdlock(clock: clockid_t, t: *const timespec) => |l| {
        // SAFETY: the caller's pointer.
        match unsafe { timed(clock, t) } {
            Ok(how) => read(l, how),
            Err(e) => e,
        }
    };
}
entry! {
    /// `pthread_rwlock_wrlock`.
    pthread_rwlock_wrlock() => |l| write(l, How::Block);
}
entry! {
    /// `pthread_rwlock_trywrlock`.
    pthread_rwlock_trywrlock() => |l| write(l, How::Try);
}
entry! {
    /// `pthread_rwlock_timedwrlock` (`CLOCK_REALTIME`).
    pthread_rwlock_timedwrlock(t: *const timespec) => |l| {
        // SAFETY: the caller's pointer.
        match unsafe { timed(libc::CLOCK_REALTIME, t) } {
            Ok(how) => write(l, how),
            Err(e) => e,
        }
    };
}
entry! {
    /// `pthread_rwlock_clockwrlock`.
    pthread_rwlock_clockwrlock(clock: clockid_t, t: *const timespec) => |l| {
        // SAFETY: the caller's pointer.
        match unsafe { timed(clock, t) } {
            Ok(how) => write(l, how),
            Err(e) => e,
        }
    };
}
entry! {
    /// `pthread_rwlock_unlock`: the write lock if the caller holds it, else one read hold.
    pthread_rwlock_unlock() => |l| {
        // No errno to keep: an unlock's only system call, a futex wake, does not fail. A zero
        // writer field (no writer holds) needs no look at our TID.
        let writer = l.writer().load(Ordering::Relaxed);
        if writer != 0 && writer == tid() {
            l.writer().store(0, Ordering::Relaxed);
            // SAFETY: we hold it exclusively.
            unsafe {
                match config::rwlock() {
                    RwAlgo::RecursiveRwSem => l.sem().unlock_exclusive(lock_api::GuardSend::new()),
                    _ => l.spin().write_unlock(),
                }
            }
        } else {
            let w = l.at::<AtomicU32>(0).load(Ordering::Relaxed);
            let readers = match config::rwlock() {
                RwAlgo::RecursiveRwSem => w & locklab::rw::recursive_rwsem::COUNT_MASK,
                _ => w >> 9,
            };
            if readers == 0 {
                // Not held for reading (nor by us for writing): glibc's behaviour is undefined
                // here; ours is to leave the lock alone.
                return 0;
            }
            // SAFETY: a read hold exists (the caller's, by POSIX's precondition).
            unsafe {
                match config::rwlock() {
                    RwAlgo::RecursiveRwSem => l.sem().unlock_shared(lock_api::GuardSend::new()),
                    _ => l.spin().read_unlock(),
                }
            }
        }
        0
    };
}
