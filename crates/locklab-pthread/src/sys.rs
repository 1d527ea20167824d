//! What the families share: the cached thread id, errno preservation, absolute time-outs, futex waits
//! on any clock, and a stderr writer that never allocates or fails.

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
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
    owed_after_fork_child();
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

/// The lock word each thread sleeps on in an adaptive-mutex wait (`adaptive::pass_on_owed`), by
/// TID: what the signal-handler wrapper passes a wake-up on to. Not a thread-local: the wrapper runs
/// on every delivery, and Rust's `thread_local!` in a shared object is reached through
/// `__tls_get_addr`, which may `malloc` (to grow the thread's TLS vector after the program
/// `dlopen`ed libraries with TLS) and so deadlock a handler that interrupted `malloc`; a TLS variable
/// of the initial-exec model would avoid that but makes the library impossible to `dlopen`.
///
/// A thread claims a slot near its TID's hash (a CAS of the slot's TID from 0) before its first
/// sleep of a lock call, writes the word there, and at the end of the call puts back the value it
/// found (an interrupted outer wait's), giving the slot up when that was none. Only the claiming
/// thread writes a slot's word and reads it (in its own handlers): program order, no orderings. A
/// wait left for good from a handler keeps its slot until the thread's next lock call; the slot of a
/// thread that then exits is taken back by a claim that finds no free slot (the TID no longer
/// exists). A thread that finds no slot at all sleeps unrecorded: its handler passes nothing on
/// (as glibc's mutex).
struct OwedSlot {
    tid: AtomicI32,
    word: AtomicPtr<AtomicU32>,
}

/// Slots: threads asleep on adaptive mutexes at once beyond about this many (their probe windows
/// full) sleep unrecorded.
const OWED_SLOTS: usize = 4096;
const _: () = assert!(OWED_SLOTS.is_power_of_two());
/// Slots a thread looks at from its hash, to claim or to find its own.
const OWED_PROBE: usize = 32;

static OWED: [OwedSlot; OWED_SLOTS] = [const {
    OwedSlot {
        tid: AtomicI32::new(0),
        word: AtomicPtr::new(core::ptr::null_mut()),
    }
}; OWED_SLOTS];

/// Slots claimed: 0 lets a handler return at once.
static OWED_CLAIMED: AtomicUsize = AtomicUsize::new(0);

/// The slots a thread may use, from its TID's hash.
fn owed_probe(tid: i32) -> impl Iterator<Item = &'static OwedSlot> {
    // Fibonacci hashing: the product's high bits depend on every bit of the TID (its low bits
    // only on the TID's low bits, which made TIDs equal modulo the table's size share a window).
    let h = ((tid as u32).wrapping_mul(0x9e37_79b9) >> (32 - OWED_SLOTS.trailing_zeros())) as usize;
    (0..OWED_PROBE).map(move |i| &OWED[(h + i) % OWED_SLOTS])
}

/// The calling thread's TID, in a signal handler too (no lookup, no thread-local).
fn tid_in_handler() -> i32 {
    let off = TID_OFFSET.load(Ordering::Relaxed);
    if off != 0 && off != usize::MAX {
        // SAFETY: as in `tid`.
        return unsafe { descriptor_word(off) };
    }
    // SAFETY: gettid has no arguments.
    unsafe { libc::gettid() }
}

/// The word of this thread's current (or abandoned) lock wait, null if none. Safe in a signal
/// handler: loads only (and `gettid` where glibc's descriptor was not found).
#[inline]
pub(crate) fn owed_word() -> *const AtomicU32 {
    if OWED_CLAIMED.load(Ordering::Relaxed) == 0 {
        return core::ptr::null();
    }
    let me = tid_in_handler();
    owed_probe(me)
        .find(|s| s.tid.load(Ordering::Relaxed) == me)
        .map_or(core::ptr::null(), |s| s.word.load(Ordering::Relaxed))
}

/// Records the word this thread is about to sleep on.
#[inline]
pub(crate) fn set_owed_word(w: &AtomicU32) {
    set_owed_word_ptr(w);
}

/// Records `w` (a value read by [`owed_word`], or a word about to be slept on) as this thread's;
/// null gives the thread's slot up.
pub(crate) fn set_owed_word_ptr(w: *const AtomicU32) {
    let me = tid_in_handler();
    if let Some(s) = owed_probe(me).find(|s| s.tid.load(Ordering::Relaxed) == me) {
        s.word.store(w.cast_mut(), Ordering::Relaxed);
        if w.is_null() {
            // Release pairs with a claimer's Acquire CAS: it finds the word cleared.
            s.tid.store(0, Ordering::Release);
            OWED_CLAIMED.fetch_sub(1, Ordering::Relaxed);
        }
        return;
    }
    if w.is_null() {
        return;
    }
    for pass in 0..2 {
        for s in owed_probe(me) {
            let t = s.tid.load(Ordering::Relaxed);
            // A slot of a thread that no longer exists (it left a wait for good, then exited) is
            // taken back on the second pass. The check is a system call: only when the first pass
            // found nothing free.
            // SAFETY: tgkill with signal 0 only checks that the thread exists.
            let dead = pass == 1
                && t != 0
                && unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), t, 0) } != 0
                && errno() == libc::ESRCH;
            // Acquire pairs with the Release of the slot's last owner giving it up.
            if (t == 0 || dead)
                && s.tid
                    .compare_exchange(t, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                if t == 0 {
                    OWED_CLAIMED.fetch_add(1, Ordering::Relaxed);
                }
                s.word.store(w.cast_mut(), Ordering::Relaxed);
                return;
            }
        }
    }
}

/// In a `fork` child: the parent's threads are gone, and their slots with them.
fn owed_after_fork_child() {
    for s in &OWED {
        s.word.store(core::ptr::null_mut(), Ordering::Relaxed);
        s.tid.store(0, Ordering::Relaxed);
    }
    OWED_CLAIMED.store(0, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn word() -> &'static AtomicU32 {
        Box::leak(Box::new(AtomicU32::new(0)))
    }

    #[test]
    fn each_thread_has_its_own_owed_word_given_up_at_the_end() {
        let (a, b) = (word(), word());
        set_owed_word(a);
        assert!(core::ptr::eq(owed_word(), a));
        // Another thread sees its own (none), and records its own.
        let other = std::thread::spawn(move || {
            let none = owed_word().is_null();
            set_owed_word(b);
            let mine = core::ptr::eq(owed_word(), b);
            set_owed_word_ptr(core::ptr::null());
            (none, mine, owed_word().is_null())
        })
        .join()
        .unwrap();
        assert_eq!(other, (true, true, true));
        // A nested wait (a lock call in a handler) records its word and puts the outer one back.
        let outer = owed_word();
        set_owed_word(b);
        assert!(core::ptr::eq(owed_word(), b));
        set_owed_word_ptr(outer);
        assert!(core::ptr::eq(owed_word(), a));
        set_owed_word_ptr(core::ptr::null());
        assert!(owed_word().is_null());
    }

    #[test]
    fn a_slot_left_by_a_thread_that_exited_is_taken_back() {
        // Twice as many threads as there are slots leave their waits for good and exit, keeping
        // their slots: the table fills, and the later ones (and every new thread) find a slot
        // only by taking back a dead thread's.
        let w = word() as *const AtomicU32 as usize;
        for _ in 0..2 * OWED_SLOTS {
            std::thread::spawn(move || set_owed_word_ptr(w as *const AtomicU32))
                .join()
                .unwrap();
        }
        for _ in 0..OWED_SLOTS / OWED_PROBE {
            let found = std::thread::spawn(move || {
                set_owed_word_ptr(w as *const AtomicU32);
                let ok = core::ptr::eq(owed_word(), w as *const AtomicU32);
                set_owed_word_ptr(core::ptr::null());
                ok
            })
            .join()
            .unwrap();
            assert!(found);
        }
    }
}
