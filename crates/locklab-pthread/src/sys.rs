//! What the families share: the cached thread id, errno preservation, absolute time-outs, futex waits
//! on any clock, and a stderr writer that never allocates or fails.

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The atomics the adaptive mutex is built from: core's; loom's in its model (`locklab`'s
/// `loom_models::preload_adaptive` includes `adaptive.rs` beside a `sys` of its own).
pub(crate) mod atomic {
    pub(crate) use core::sync::atomic::{AtomicI32, AtomicU16, AtomicU32, Ordering};
}

/// Whether the code runs in that loom model (a spin takes one look and reads no clock): never here.
pub(crate) const MODEL: bool = false;

std::thread_local! {
    /// This thread's kernel TID, 0 until first asked (the fallback when glibc's own field cannot be
    /// read). No destructor (no allocation, readable during thread exit).
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// Where glibc keeps a thread's TID in its thread descriptor (`struct pthread`), from the descriptor
/// glibc publishes for debuggers (`_thread_db_pthread_tid`: bits, count, offset); 0 until looked up,
/// `usize::MAX` if unavailable (then the TID is cached in our own thread-local). Crate-private (no
/// public inline function reads it), so the library reads it PC-relative, not through the GOT; the
/// x86-64 mutex entry ([`crate::entry`]) reads it too.
pub(crate) static TID_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's descriptor, as `pthread_self()` returns it.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn thread_self() -> usize {
    // SAFETY: no arguments.
    unsafe { libc::pthread_self() as usize }
}

/// The 32-bit word at `off` in the calling thread's descriptor.
///
/// # Safety
/// `off` is inside glibc's `struct pthread` (every thread's has the same layout).
#[inline(always)]
unsafe fn descriptor_word(off: usize) -> i32 {
    #[cfg(target_arch = "x86_64")]
    {
        let v: i32;
        // SAFETY: on x86-64 glibc's thread pointer (the %fs base) is the descriptor itself (the TCB
        // header opens `struct pthread`; its `self` at %fs:0x10 is the same address, which
        // `pthread_self` returns): one load, %fs-relative; the caller's offset is inside it.
        unsafe {
            core::arch::asm!("mov {v:e}, dword ptr fs:[{o}]", v = out(reg) v, o = in(reg) off,
                options(nostack, readonly, preserves_flags));
        }
        v
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's offset, inside this thread's descriptor.
    unsafe {
        *((thread_self() + off) as *const i32)
    }
}

/// The calling thread's TID (what glibc stores as a mutex's owner): read from glibc's own thread
/// descriptor, where glibc keeps it (and updates it in a child of `fork`), at the offset its
/// debugger descriptor gives; checked once against `gettid`. Without it, a cached `gettid`.
#[inline]
pub(crate) fn tid() -> i32 {
    let off = TID_OFFSET.load(Ordering::Relaxed);
    if off != 0 && off != usize::MAX {
        // SAFETY: `off` was checked to hold the TID in a live descriptor (`find_tid_offset`); every
        // thread's descriptor has the same layout.
        return unsafe { descriptor_word(off) };
    }
    if off == 0 {
        find_tid_offset();
        return tid();
    }
    let t = TID.with(Cell::get);
    if t != 0 {
        return t;
    }
    fresh_tid()
}

#[cold]
#[inline(never)]
fn find_tid_offset() {
    let desc = crate::real::find(c"_thread_db_pthread_tid") as *const u32;
    let mut off = usize::MAX;
    if !desc.is_null() {
        // SAFETY: glibc's DB_STRUCT_FIELD descriptor: three 32-bit words, the offset last.
        let (bits, o) = unsafe { (*desc, *desc.add(2) as usize) };
        // SAFETY: gettid has no arguments.
        let me = unsafe { libc::gettid() };
        // SAFETY: inside this thread's descriptor (glibc's `sizeof (struct pthread)` is above 1 KiB
        // and the offset comes from glibc); a plain load, checked against the real TID.
        if bits == 32 && o > 0 && o < 4096 && unsafe { descriptor_word(o) } == me {
            off = o;
        }
    }
    TID_OFFSET.store(off, Ordering::Relaxed);
}

#[cold]
fn fresh_tid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    let t = unsafe { libc::gettid() };
    TID.with(|c| c.set(t));
    t
}

/// glibc's `__libc_single_threaded` (2.32+): nonzero while the process has one thread; null until
/// looked up, [`NEVER_SINGLE`] if glibc has none (then the test reads that zero byte: no branch on
/// whether the flag exists). Read PC-relative by the x86-64 mutex entry too.
pub(crate) static SINGLE: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
/// The flag read when glibc has none: always 0 (the process is treated as multi-threaded).
static NEVER_SINGLE: u8 = 0;

/// Whether only one thread exists (glibc's own flag, which it clears before it starts a second
/// thread): then no other thread can touch a lock, and the adaptive mutex may skip its locked
/// instructions, as glibc's own mutex does.
#[inline]
pub(crate) fn single_threaded() -> bool {
    let p = SINGLE.load(Ordering::Relaxed);
    if p.is_null() {
        return find_single_threaded();
    }
    // SAFETY: glibc's flag (a `char` that lives as long as libc) or our zero byte, read with a
    // plain load as glibc's own code does.
    unsafe { core::ptr::read_volatile(p) != 0 }
}

#[cold]
#[inline(never)]
fn find_single_threaded() -> bool {
    let p = crate::real::find(c"__libc_single_threaded").cast::<u8>();
    let p = if p.is_null() {
        (&raw const NEVER_SINGLE).cast_mut()
    } else {
        p
    };
    SINGLE.store(p, Ordering::Relaxed);
    single_threaded()
}

/// Whether the exported `pthread_mutex_lock` and `pthread_mutex_unlock` may take their inline fast
/// path (the x86-64 entry in [`crate::entry`]): the default choice, no statistics, no lockdep, and
/// the TID and the single-thread flag looked up. Set by the constructor ([`arm_mutex_fast`]), never
/// cleared (none of these changes afterwards); false before it, when every call takes the general
/// path. Crate-private, so the entry reads it with one PC-relative load.
pub(crate) static MUTEX_FAST: AtomicBool = AtomicBool::new(false);

/// Sets [`MUTEX_FAST`] if the fast path's conditions hold (the constructor calls it, after the
/// choices, statistics and lockdep are read).
pub(crate) fn arm_mutex_fast() {
    let _ = single_threaded();
    let _ = tid();
    let off = TID_OFFSET.load(Ordering::Relaxed);
    let ok = crate::config::mutex() == crate::config::MutexAlgo::Adaptive
        && !crate::config::stat()
        && !crate::dep::on()
        && off != 0
        && off != usize::MAX
        && !SINGLE.load(Ordering::Relaxed).is_null();
    // Release pairs with the entry's load of the flag (a plain x86-64 load, ordered before its
    // loads of the offset and the flag pointer, as an Acquire): they were written above.
    MUTEX_FAST.store(ok, Ordering::Release);
}

/// Whether the exported `pthread_rwlock_rdlock` and `pthread_rwlock_unlock` may take their inline
/// fast path (the x86-64 entry in [`crate::entry`]): the default rwlock choice
/// (`recursive-rwsem`), no statistics, no lockdep. Set by the constructor ([`arm_rwlock_fast`]),
/// never cleared; false before it, when every call takes the general path.
pub(crate) static RWLOCK_FAST: AtomicBool = AtomicBool::new(false);

/// Sets [`RWLOCK_FAST`] if the fast path's conditions hold (the constructor calls it, after the
/// choices, statistics and lockdep are read).
pub(crate) fn arm_rwlock_fast() {
    let ok = crate::config::rwlock_is_default() && !crate::config::stat() && !crate::dep::on();
    // Release pairs with the entry's load of the flag (a plain x86-64 load).
    RWLOCK_FAST.store(ok, Ordering::Release);
}

/// In a child of `fork` the only thread has a new TID (for the cached fallback; glibc updates its
/// own field itself).
pub(crate) fn after_fork_child() {
    if TID.with(Cell::get) != 0 {
        let _ = fresh_tid();
    }
}

/// The calling thread's errno.
#[inline]
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Restores errno (glibc's pthread calls never change it; our futex calls go through `syscall`, which
/// does).
#[inline]
pub(crate) fn set_errno(e: i32) {
    // SAFETY: as `errno`.
    unsafe { *libc::__errno_location() = e };
}

/// Writes all of `bytes` to stderr, ignoring errors (a closed stderr must not disturb the program).
pub(crate) fn write_stderr(bytes: &[u8]) {
    let e = errno();
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: a valid buffer of the given length.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            break;
        }
        rest = &rest[n as usize..];
    }
    set_errno(e);
}

/// Whether `ts` is a valid absolute time (`tv_nsec` in `[0, 1e9)`), as glibc checks.
#[inline]
pub(crate) fn valid_timespec(ts: &libc::timespec) -> bool {
    (0..1_000_000_000).contains(&ts.tv_nsec)
}

/// Whether `clock` is one glibc accepts for a time-out (`CLOCK_REALTIME` or `CLOCK_MONOTONIC`).
#[inline]
pub(crate) fn valid_clock(clock: libc::clockid_t) -> bool {
    clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_MONOTONIC
}

/// The time left until `abs` on `clock`, or `None` if it has passed.
pub(crate) fn time_left(clock: libc::clockid_t, abs: &libc::timespec) -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut now) };
    let left = (abs.tv_sec as i128 - now.tv_sec as i128) * 1_000_000_000
        + (abs.tv_nsec as i128 - now.tv_nsec as i128);
    if left <= 0 {
        None
    } else {
        Some(Duration::from_nanos(left.min(u64::MAX as i128) as u64))
    }
}

/// Runs `attempt(deadline)` until it succeeds or `abs` on `clock` has passed: each try gets a
/// monotonic `Instant` for the time left; a `CLOCK_REALTIME` deadline is checked again afterwards
/// (the wall clock may have been set back meanwhile).
pub(crate) fn until(
    clock: libc::clockid_t,
    abs: &libc::timespec,
    mut attempt: impl FnMut(Instant) -> bool,
) -> bool {
    loop {
        let Some(left) = time_left(clock, abs) else {
            return false;
        };
        let deadline = Instant::now()
            .checked_add(left)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 40));
        if attempt(deadline) {
            return true;
        }
    }
}

/// Spins then yields until `try_once` succeeds or `deadline` (if any) passes: the timed form of the
/// spinlocks, which have no sleeping path.
pub(crate) fn spin_until(deadline: Option<Instant>, mut try_once: impl FnMut() -> bool) -> bool {
    let mut spins = 0u32;
    loop {
        if try_once() {
            return true;
        }
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return false;
        }
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            // SAFETY: no arguments.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Futex result of [`futex_wait_cancellable`].
#[derive(PartialEq, Eq, Debug)]
pub(crate) enum Wait {
    /// Woken, or the word had changed, or a spurious return.
    Woken,
    /// The absolute time passed.
    TimedOut,
}

/// Sleeps while `*word == expected`, until `abs` on `clock` if given (`FUTEX_WAIT_BITSET`, absolute,
/// on the clock asked for; `shared`: a process-shared object, no `FUTEX_PRIVATE_FLAG`). A
/// cancellation point: the wait runs with asynchronous cancellation, so a `pthread_cancel` unwinds out
/// of it (through the cleanup the caller pushed), as glibc's own blocking calls do; the previous type
/// is restored after.
pub(crate) fn futex_wait_cancellable(
    word: &AtomicU32,
    expected: u32,
    clock: libc::clockid_t,
    abs: Option<&libc::timespec>,
    shared: bool,
) -> Wait {
    let mut op = libc::FUTEX_WAIT_BITSET;
    if !shared {
        op |= libc::FUTEX_PRIVATE_FLAG;
    }
    if abs.is_some() && clock == libc::CLOCK_REALTIME {
        op |= libc::FUTEX_CLOCK_REALTIME;
    }
    // The kernel refuses a negative time with EINVAL; glibc's waits report such a deadline as past.
    if abs.is_some_and(|t| t.tv_sec < 0) {
        return Wait::TimedOut;
    }
    let ts = abs.map_or(core::ptr::null(), |t| t as *const libc::timespec);
    let mut old = 0;
    // SAFETY: valid arguments; between the two type changes only the system call runs, and the
    // caller's cleanup (pushed before) repairs its state wherever a cancellation strikes.
    let r = unsafe {
        pthread_setcanceltype(CANCEL_ASYNCHRONOUS, &mut old);
        let r = syscall_unwind(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            expected,
            ts,
            core::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        );
        pthread_setcanceltype(old, &mut old);
        r
    };
    if r == 0 {
        return Wait::Woken;
    }
    // EINTR (a signal) is a spurious wake-up for the caller, as POSIX allows.
    if errno() == libc::ETIMEDOUT {
        Wait::TimedOut
    } else {
        Wait::Woken
    }
}

/// Sleeps while `*word == expected` (a private futex, no time-out, not a cancellation point); may
/// return spuriously.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    futex_wait_until(word, expected, None);
}

/// Sleeps while `*word == expected`, until the absolute `(clock, time)` if given (a private futex,
/// not a cancellation point); `false` once that time has passed. May return `true` spuriously.
pub(crate) fn futex_wait_until(
    word: &AtomicU32,
    expected: u32,
    until: Option<(libc::clockid_t, &libc::timespec)>,
) -> bool {
    let mut op = libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG;
    let mut ts = core::ptr::null::<libc::timespec>();
    if let Some((clock, abs)) = until {
        if abs.tv_sec < 0 {
            return false;
        }
        if clock == libc::CLOCK_REALTIME {
            op |= libc::FUTEX_CLOCK_REALTIME;
        }
        ts = abs;
    }
    let e = errno();
    // SAFETY: valid arguments; the kernel compares and sleeps atomically.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            expected,
            ts,
            core::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        )
    };
    let timed_out = r != 0 && errno() == libc::ETIMEDOUT;
    set_errno(e);
    !timed_out
}

/// Wakes up to `n` waiters of `word`.
pub(crate) fn futex_wake(word: *const AtomicU32, n: i32, shared: bool) {
    let _ = futex_wake_count(word, n, shared);
}

/// Wakes up to `n` waiters of `word`; how many it woke.
pub(crate) fn futex_wake_count(word: *const AtomicU32, n: i32, shared: bool) -> i64 {
    let mut op = libc::FUTEX_WAKE;
    if !shared {
        op |= libc::FUTEX_PRIVATE_FLAG;
    }
    // SAFETY: FUTEX_WAKE never dereferences the address in user space; any address is harmless.
    unsafe { libc::syscall(libc::SYS_futex, word, op, n) }
}

/// How long a sleeper on a lock word sleeps at most before it looks again, woken or not: what
/// bounds the cost of a waiter that left without its share of the protocol (`siglongjmp` out of a
/// wait, threads gone in a `fork` child).
pub(crate) const WATCHDOG: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};

/// Sleeps while `*word == expected` (a private futex, not a cancellation point), at most
/// [`WATCHDOG`] at a time, and not past the absolute `(clock, time)` if given; `false` once that
/// time has passed. Returns early (`true`) when woken, on a signal, or when the watchdog ends.
pub(crate) fn futex_wait_watched(
    word: &AtomicU32,
    expected: u32,
    until: Option<(libc::clockid_t, &libc::timespec)>,
) -> bool {
    const WATCHDOG_LEN: Duration = Duration::new(WATCHDOG.tv_sec as u64, WATCHDOG.tv_nsec as u32);
    if let Some((clock, abs)) = until {
        match time_left(clock, abs) {
            None => return false,
            // The deadline comes first: sleep to it.
            Some(left) if left <= WATCHDOG_LEN => return futex_wait_until(word, expected, until),
            Some(_) => {}
        }
    }
    futex_wait_for(word, expected, &WATCHDOG);
    true
}

/// Sleeps while `*word == expected`, for at most `rel` (a private futex, relative time-out, not a
/// cancellation point); may return early.
pub(crate) fn futex_wait_for(word: &AtomicU32, expected: u32, rel: &libc::timespec) {
    let e = errno();
    // SAFETY: valid arguments; the kernel compares and sleeps atomically.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            rel as *const libc::timespec,
        )
    };
    set_errno(e);
}

/// glibc's legacy cleanup buffer (`struct _pthread_cleanup_buffer`), for
/// [`_pthread_cleanup_push`]: glibc runs its routine when cancellation unwinds past the frame that
/// holds it.
#[repr(C)]
pub(crate) struct CleanupBuffer {
    routine: Option<unsafe extern "C" fn(*mut libc::c_void)>,
    arg: *mut libc::c_void,
    canceltype: libc::c_int,
    prev: *mut CleanupBuffer,
}

impl CleanupBuffer {
    pub(crate) const fn new() -> Self {
        CleanupBuffer {
            routine: None,
            arg: core::ptr::null_mut(),
            canceltype: 0,
            prev: core::ptr::null_mut(),
        }
    }
}

/// `PTHREAD_CANCEL_ASYNCHRONOUS`.
pub(crate) const CANCEL_ASYNCHRONOUS: libc::c_int = 1;

// Calls through which glibc's cancellation may unwind (a forced unwind, which passes Rust frames that
// have nothing to drop).
unsafe extern "C-unwind" {
    /// Registers `routine(arg)` to run if cancellation unwinds past `buffer`'s frame.
    pub(crate) fn _pthread_cleanup_push(
        buffer: *mut CleanupBuffer,
        routine: unsafe extern "C" fn(*mut libc::c_void),
        arg: *mut libc::c_void,
    );
    /// Unregisters `buffer` (running its routine if `execute`).
    pub(crate) fn _pthread_cleanup_pop(buffer: *mut CleanupBuffer, execute: libc::c_int);
    /// Sets the cancellation type; switching to asynchronous acts on a pending request at once.
    pub(crate) fn pthread_setcanceltype(ty: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
    /// The raw system call (a cancellation may unwind out of it while the type is asynchronous).
    #[link_name = "syscall"]
    fn syscall_unwind(n: libc::c_long, ...) -> libc::c_long;
}

// glibc calls the libc crate does not declare (none of them is ours: we never export these).
unsafe extern "C" {
    /// Acts on a pending cancellation request.
    pub(crate) fn pthread_testcancel();
    /// The mutex type of an attribute.
    pub(crate) fn pthread_mutexattr_gettype(
        a: *const libc::pthread_mutexattr_t,
        ty: *mut libc::c_int,
    ) -> libc::c_int;
}
