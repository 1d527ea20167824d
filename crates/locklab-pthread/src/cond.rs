//! `pthread_cond_*`: a sequence-counter condition variable in glibc's 48-byte `pthread_cond_t`, for
//! every mutex choice and kind.
//!
//! # Algorithm
//! - **Wait**: `waiters += 1`; read `seq`; release the mutex (all of a recursive mutex's count); sleep
//!   on `seq` while it still holds the value read (a futex wait, absolute time-out on the condvar's
//!   clock); `waiters -= 1`; take the mutex back.
//! - **Signal**: if `waiters` is 0, nothing (no system call); else `seq += 1` and wake one sleeper.
//! - **Broadcast**: if `waiters` is 0, nothing; else `seq += 1` and wake every sleeper. They then take
//!   the mutex one by one through its own slow path (a short spin, then a sleep on its word). A
//!   futex requeue onto the mutex word, as glibc's pre-2.25 condvar did, would put sleepers on the
//!   adaptive mutex's word that no mark announces, and the spinlock choices have no word to sleep
//!   on.
//!
//! # Why no wake-up is lost
//! A waiter reads `seq` (and has counted itself in `waiters`) before it releases the mutex. A
//! signaller that changed the predicate under the mutex therefore sees `waiters > 0`, and its
//! `seq += 1` comes after the waiter's read: the waiter's futex wait either finds `seq` changed and
//! returns at once, or is already asleep and is woken. The futex wait compares and sleeps atomically in
//! the kernel. Spurious returns are allowed by POSIX (callers loop on their predicate).
//!
//! # A cancelled waiter passes its wake-up on
//! A waiter that `pthread_cancel` unwinds out of the wait may have been the one a signal woke. POSIX
//! forbids it to consume that signal while others wait, so its cleanup wakes one more sleeper if
//! `seq` moved since it read it (a spurious wake-up at worst, which POSIX allows).
//!
//! # Destroy waits for the last touch
//! `pthread_cond_destroy` may be followed at once by `free` (POSIX's own example). A woken waiter's
//! last touch of the condvar is its `waiters` decrement, however late it runs (held up in a signal
//! handler, stopped, starved). Destroy sets `DESTROYING` (bit 31 of `waiters`) and sleeps on the
//! word until the count is 0; a waiter whose decrement leaves `DESTROYING` alone in the word wakes
//! it (a futex wake on an address never reads it, so the memory may already be gone). No spin, no
//! bound: a waiter that was never woken would be the program's bug, and glibc waits for it too.
//!
//! # Process-shared condvars are glibc's
//! A condvar initialised `PTHREAD_PROCESS_SHARED` may be used by a process that does not have this
//! library, so every call on it goes to glibc (its init marks bit 0 of `__wrefs`). glibc's wait
//! releases and retakes the mutex with its own internal calls, so a wait that pairs such a condvar
//! with one of our (process-private) mutexes goes through a glibc *shadow* mutex: the waiter takes
//! the shadow before it releases ours and glibc's wait releases the shadow atomically; our
//! `signal`/`broadcast` on a shared condvar take the shadow around glibc's, so no signal falls in
//! between (a process without the library signalling such a pair is the one case left uncovered:
//! its waiters' mutex is private to one process anyway).
//!
//! The shadow is only needed while some thread of this process is in such a wait: `SHADOW_WAITERS`
//! counts them (incremented before the waiter releases its mutex), and a signal or broadcast that
//! finds it 0 calls glibc's directly. That is exact: a signaller whose predicate change could matter
//! to a shadow waiter took the waiter's mutex after the waiter released it, so it sees the count.
//! The common pairing (a process-shared condvar with a process-shared mutex, both glibc's) never
//! touches the shadow.
//!
//! A `fork()` copies the shadow as it is; if another thread held it at that moment (inside a
//! signal or between a shadow waiter's lock and glibc's wait), the child's copy would stay locked
//! forever and the child's first signal on any process-shared condvar would hang. That thread does
//! not exist in the child, so the library's fork handler resets the shadow and the count there.
//!
//! # Layout
//! | bytes | glibc's field | ours                                                          |
//! |-------|---------------|---------------------------------------------------------------|
//! | 0-3   | `__wseq`      | `seq`, the futex word                                          |
//! | 4-7   | `__wseq`      | `waiters` (bit 31: `DESTROYING`)                               |
//! | 36-39 | `__wrefs`     | bit 0: process-shared (then all of it is glibc's), bit 1: `CLOCK_MONOTONIC` (as glibc) |
//!
//! All-zero (`PTHREAD_COND_INITIALIZER`) is a private condvar on `CLOCK_REALTIME`. Bytes 44-47 are
//! never read (an old static initializer may not have written them).
//!
//! ```c
//! pthread_cond_wait(&c, &m) / pthread_cond_signal(&c), unchanged.
//! ```

use crate::config;
use crate::mutex::{self, M};
use crate::real;
use crate::sys::{self, Wait};
use core::sync::atomic::{AtomicU32, Ordering};
use libc::{c_int, clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

const OFF_WREFS: usize = 36;
const SHARED: u32 = 1;
const MONOTONIC: u32 = 2;
/// In `waiters`: `pthread_cond_destroy` is waiting for the count to reach 0.
const DESTROYING: u32 = 1 << 31;

#[derive(Clone, Copy)]
struct C(*mut pthread_cond_t);

impl C {
    fn word(self, off: usize) -> &'static AtomicU32 {
        // SAFETY: the caller passes a valid, 8-aligned pthread_cond_t that outlives the call.
        unsafe { &*((self.0 as *const u8).add(off) as *const AtomicU32) }
    }
    fn seq(self) -> &'static AtomicU32 {
        self.word(0)
    }
    fn waiters(self) -> &'static AtomicU32 {
        self.word(4)
    }
    fn flags(self) -> u32 {
        self.word(OFF_WREFS).load(Ordering::Relaxed)
    }
    fn shared(self) -> bool {
        self.flags() & SHARED != 0
    }
    fn clock(self) -> clockid_t {
        if self.flags() & MONOTONIC != 0 {
            libc::CLOCK_MONOTONIC
        } else {
            libc::CLOCK_REALTIME
        }
    }
}

/// Under `LOCKLAB_MUTEX=glibc` the condvars are glibc's (they must match its mutexes).
fn glibc() -> bool {
    config::mutex_is_glibc()
}

/// The waiter's last touch of the condvar: leaves the count (Release pairs with destroy's Acquire
/// loads) and wakes a waiting `pthread_cond_destroy` if it was the last.
fn leave(c: C) {
    let addr = c.waiters() as *const AtomicU32;
    if c.waiters().fetch_sub(1, Ordering::Release) == DESTROYING | 1 {
        // The memory may be reused from here on: only the address is passed to the kernel.
        sys::futex_wake(addr, i32::MAX, false);
    }
}

/// What a cancelled wait's cleanup needs: the condvar, the mutex, what the release saved, and the
/// `seq` the waiter slept on.
struct Waiting {
    c: C,
    m: *mut pthread_mutex_t,
    held: Option<mutex::Held>,
    seq: u32,
}

/// Runs when `pthread_cancel` unwinds out of a wait: the waiter passes on a wake-up it may have
/// taken, leaves the count and takes the mutex back before the program's cleanup handlers run, as
/// POSIX asks.
unsafe extern "C" fn cancelled(arg: *mut libc::c_void) {
    // SAFETY: the `Waiting` on the cancelled wait's frame, which is still there while glibc runs
    // this cleanup.
    let w = unsafe { &mut *arg.cast::<Waiting>() };
    // A signal or broadcast since our read may have woken us: hand its wake-up to another sleeper
    // (Relaxed: a stale value only makes the extra wake-up less likely to be skipped).
    if w.c.seq().load(Ordering::Relaxed) != w.seq
        && w.c.waiters().load(Ordering::Relaxed) & !DESTROYING > 1
    {
        sys::futex_wake(w.c.seq(), 1, false);
    }
    leave(w.c);
    if let Some(held) = w.held.take() {
        // SAFETY: released by this thread for the wait.
        let _ = unsafe { mutex::reacquire(M::from(w.m), held) };
    }
}

/// The shadow mutex of process-shared condvars waited on with one of our mutexes (module docs):
/// glibc's own object, only ever passed to glibc's functions.
struct Shadow(core::cell::UnsafeCell<pthread_mutex_t>);
// SAFETY: only glibc's functions touch it, which synchronise.
unsafe impl Sync for Shadow {}
static SHADOW: Shadow = Shadow(core::cell::UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

fn shadow() -> *mut pthread_mutex_t {
    SHADOW.0.get()
}

/// Threads of this process inside a shadow wait (module docs).
static SHADOW_WAITERS: AtomicU32 = AtomicU32::new(0);

/// The child's part of a `fork()` (called by the library's fork handler): the child has one thread,
/// which is in no shadow wait and holds no shadow; a copy caught held by another thread is reset.
pub(crate) fn after_fork_child() {
    SHADOW_WAITERS.store(0, Ordering::Relaxed);
    // SAFETY: the child's only thread; no other thread can touch the shadow while it is rewritten.
    unsafe { shadow().write(libc::PTHREAD_MUTEX_INITIALIZER) };
}

/// What a cancelled shadow wait's cleanup needs.
struct ShadowWaiting {
    m: *mut pthread_mutex_t,
    held: Option<mutex::Held>,
}

/// Runs when cancellation unwinds out of glibc's wait (which has retaken the shadow): lets the
/// shadow go and takes the caller's mutex back.
unsafe extern "C" fn shadow_cancelled(arg: *mut libc::c_void) {
    // SAFETY: the `ShadowWaiting` on the cancelled wait's frame.
    let w = unsafe { &mut *arg.cast::<ShadowWaiting>() };
    // SAFETY: glibc's wait retook the shadow before unwinding.
    unsafe { real::pthread_mutex_unlock(shadow()) };
    SHADOW_WAITERS.fetch_sub(1, Ordering::Relaxed);
    if let Some(held) = w.held.take() {
        // SAFETY: released by this thread for the wait.
        let _ = unsafe { mutex::reacquire(M::from(w.m), held) };
    }
}

/// A process-shared (glibc) condvar waited on: with a glibc mutex, glibc's wait itself; with ours,
/// through the shadow mutex.
///
/// # Safety
/// Valid objects; `abs` null or a valid `timespec`.
unsafe fn shared_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: Option<clockid_t>,
    abs: *const timespec,
) -> c_int {
    // SAFETY (this block): forwarded to glibc with the caller's objects, or the shadow.
    unsafe {
        let call = |mm: *mut pthread_mutex_t| match clock {
            None => real::pthread_cond_wait(c, mm),
            Some(k) => real::pthread_cond_clockwait(c, mm, k, abs),
        };
        if M::from(m).is_glibc() {
            return call(m);
        }
        sys::pthread_testcancel();
        // Counted before our mutex is released (SeqCst with the signaller's load): a signaller
        // that takes the mutex after us sees the count and goes through the shadow.
        SHADOW_WAITERS.fetch_add(1, Ordering::SeqCst);
        real::pthread_mutex_lock(shadow());
        let held = match mutex::release_for_wait(M::from(m)) {
            Ok(h) => h,
            Err(e) => {
                real::pthread_mutex_unlock(shadow());
                SHADOW_WAITERS.fetch_sub(1, Ordering::Relaxed);
                return e;
            }
        };
        let mut waiting = ShadowWaiting {
            m,
            held: Some(held),
        };
        let mut buffer = sys::CleanupBuffer::new();
        sys::_pthread_cleanup_push(&mut buffer, shadow_cancelled, (&raw mut waiting).cast());
        let r = call(shadow());
        sys::_pthread_cleanup_pop(&mut buffer, 0);
        real::pthread_mutex_unlock(shadow());
        SHADOW_WAITERS.fetch_sub(1, Ordering::Relaxed);
        let relock = match waiting.held.take() {
            Some(held) => mutex::reacquire(M::from(m), held),
            None => 0,
        };
        if relock != 0 { relock } else { r }
    }
}

/// The wait, with an optional absolute time-out on `clock`.
///
/// # Safety
/// Valid objects; `abs` null or a valid `timespec`.
unsafe fn wait(c: C, m: *mut pthread_mutex_t, clock: clockid_t, abs: Option<&timespec>) -> c_int {
    // POSIX: a cancellation point.
    // SAFETY: no arguments; acts on a pending cancellation before anything is changed.
    unsafe { sys::pthread_testcancel() };
    let e = sys::errno();
    // SeqCst with the signaller's `waiters` load and `seq` increment: our count is visible before our
    // read of `seq`, which is before the mutex release (see "Why no wake-up is lost").
    c.waiters().fetch_add(1, Ordering::SeqCst);
    let seq = c.seq().load(Ordering::SeqCst);
    // SAFETY: the caller's mutex.
    let held = match unsafe { mutex::release_for_wait(M::from(m)) } {
        Ok(h) => h,
        Err(err) => {
            c.waiters().fetch_sub(1, Ordering::Relaxed);
            return err;
        }
    };
    let mut waiting = Waiting {
        c,
        m,
        held: Some(held),
        seq,
    };
    let mut buffer = sys::CleanupBuffer::new();
    // SAFETY: the buffer and `waiting` live on this frame until the pop below; the routine only
    // touches them.
    unsafe { sys::_pthread_cleanup_push(&mut buffer, cancelled, (&raw mut waiting).cast()) };
    let r = sys::futex_wait_cancellable(c.seq(), seq, clock, abs, c.shared());
    // SAFETY: pushed above, on this frame; not executed (the wait ended normally).
    unsafe { sys::_pthread_cleanup_pop(&mut buffer, 0) };
    // The last touch of the condvar: `pthread_cond_destroy` waits for it, after which the memory
    // may be reused.
    leave(c);
    // Taken only by the cancellation cleanup, which did not run (the wait returned).
    let relock = match waiting.held.take() {
        // SAFETY: released above by this thread.
        Some(held) => unsafe { mutex::reacquire(M::from(m), held) },
        None => 0,
    };
    sys::set_errno(e);
    if relock != 0 {
        return relock;
    }
    if r == Wait::TimedOut {
        // The wake-up may have come just as the time ran out; POSIX lets us report either.
        return libc::ETIMEDOUT;
    }
    0
}

/// `pthread_cond_init`: records the attribute's clock and process-shared setting.
///
/// # Safety
/// `c` points to writable memory for a `pthread_cond_t`; `a` is null or a valid attribute.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_init(
    c: *mut pthread_cond_t,
    a: *const pthread_condattr_t,
) -> c_int {
    let mut flags = 0;
    if !a.is_null() {
        let (mut clock, mut sh) = (0, 0);
        // SAFETY: the caller's attribute; these getters are not ours.
        unsafe {
            libc::pthread_condattr_getclock(a, &mut clock);
            libc::pthread_condattr_getpshared(a, &mut sh);
        }
        if clock == libc::CLOCK_MONOTONIC {
            flags |= MONOTONIC;
        }
        if sh != libc::PTHREAD_PROCESS_PRIVATE {
            flags |= SHARED;
        }
    }
    if glibc() || flags & SHARED != 0 {
        // SAFETY: forwarded (glibc marks a shared condvar in `__wrefs` bit 0, as we read it).
        return unsafe { real::pthread_cond_init(c, a) };
    }
    // SAFETY: 48 writable bytes; nobody uses a condvar being initialised.
    unsafe { core::ptr::write_bytes(c.cast::<u8>(), 0, core::mem::size_of::<pthread_cond_t>()) };
    C(c).word(OFF_WREFS).store(flags, Ordering::Relaxed);
    0
}

/// `pthread_cond_destroy`.
///
/// # Safety
/// `c` points to a valid `pthread_cond_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_destroy(c: *mut pthread_cond_t) -> c_int {
    if glibc() || C(c).shared() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_destroy(c) };
    }
    // POSIX lets a condvar be destroyed (and its memory reused) as soon as every waiter has been
    // woken; a woken waiter's last touch of it is its `waiters` decrement ("Destroy waits for the
    // last touch"). Acquire pairs with the waiters' Release decrements.
    let c = C(c);
    let mut w = c.waiters().fetch_or(DESTROYING, Ordering::Acquire) | DESTROYING;
    while w != DESTROYING {
        sys::futex_wait(c.waiters(), w);
        w = c.waiters().load(Ordering::Acquire);
    }
    // Left as a fresh condvar's count (a program may init it again, or wrongly reuse it as is).
    c.waiters().store(0, Ordering::Relaxed);
    0
}

/// `pthread_cond_wait`.
///
/// # Safety
/// Valid objects; the mutex held by the caller.
pub(crate) unsafe extern "C-unwind" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_wait(c, m) };
    }
    if C(c).shared() {
        // SAFETY: forwarded.
        return unsafe { shared_wait(c, m, None, core::ptr::null()) };
    }
    // SAFETY: forwarded.
    unsafe { wait(C(c), m, libc::CLOCK_REALTIME, None) }
}

/// `pthread_cond_timedwait`: the time-out is on the condvar's clock.
///
/// # Safety
/// Valid objects; the mutex held by the caller; `t` a valid `timespec`.
pub(crate) unsafe extern "C-unwind" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_timedwait(c, m, t) };
    }
    if C(c).shared() && !t.is_null() {
        // SAFETY: forwarded, on the condvar's clock as glibc's timedwait.
        return unsafe { shared_wait(c, m, Some(C(c).clock()), t) };
    }
    // SAFETY: the caller's pointer.
    let Some(abs) = (unsafe { t.as_ref() }) else {
        return libc::EINVAL;
    };
    if !sys::valid_timespec(abs) {
        return libc::EINVAL;
    }
    // SAFETY: forwarded.
    unsafe { wait(C(c), m, C(c).clock(), Some(abs)) }
}

/// `pthread_cond_clockwait`: the time-out is on the clock given (`CLOCK_REALTIME` or
/// `CLOCK_MONOTONIC`).
///
/// # Safety
/// Valid objects; the mutex held by the caller; `t` a valid `timespec`.
pub(crate) unsafe extern "C-unwind" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    t: *const timespec,
) -> c_int {
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_clockwait(c, m, clock, t) };
    }
    if !sys::valid_clock(clock) {
        return libc::EINVAL;
    }
    if C(c).shared() && !t.is_null() {
        // SAFETY: forwarded.
        return unsafe { shared_wait(c, m, Some(clock), t) };
    }
    // SAFETY: the caller's pointer.
    let Some(abs) = (unsafe { t.as_ref() }) else {
        return libc::EINVAL;
    };
    if !sys::valid_timespec(abs) {
        return libc::EINVAL;
    }
    // SAFETY: forwarded.
    unsafe { wait(C(c), m, clock, Some(abs)) }
}

/// `pthread_cond_signal`.
///
/// # Safety
/// `c` points to a valid `pthread_cond_t`.
pub(crate) unsafe extern "C" fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int {
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_signal(c) };
    }
    if C(c).shared() {
        // SAFETY: forwarded, under the shadow (module docs).
        return unsafe { shared_notify(c, real::pthread_cond_signal) };
    }
    notify(C(c), 1);
    0
}

/// `pthread_cond_broadcast`.
///
/// # Safety
/// `c` points to a valid `pthread_cond_t`.
pub(crate) unsafe extern "C" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_broadcast(c) };
    }
    if C(c).shared() {
        // SAFETY: forwarded, under the shadow (module docs).
        return unsafe { shared_notify(c, real::pthread_cond_broadcast) };
    }
    notify(C(c), i32::MAX);
    0
}

/// glibc's signal or broadcast of a process-shared condvar, under the shadow mutex so that a
/// shadow waiter between its mutex release and glibc's wait cannot miss it.
///
/// # Safety
/// `c` points to a valid (glibc) `pthread_cond_t`.
unsafe fn shared_notify(
    c: *mut pthread_cond_t,
    f: unsafe fn(*mut pthread_cond_t) -> c_int,
) -> c_int {
    // SeqCst pairs with a shadow waiter's increment (module docs): no shadow waiter, no shadow.
    if SHADOW_WAITERS.load(Ordering::SeqCst) == 0 {
        // SAFETY: glibc's call on glibc's object.
        return unsafe { f(c) };
    }
    // SAFETY: glibc's calls on glibc's objects.
    unsafe {
        real::pthread_mutex_lock(shadow());
        let r = f(c);
        real::pthread_mutex_unlock(shadow());
        r
    }
}

fn notify(c: C, n: i32) {
    // SeqCst pairs with the waiter's SeqCst increment and read (module docs).
    if c.waiters().load(Ordering::SeqCst) & !DESTROYING == 0 {
        return;
    }
    c.seq().fetch_add(1, Ordering::SeqCst);
    let e = sys::errno();
    sys::futex_wake(c.seq(), n, c.shared());
    sys::set_errno(e);
}
