//! `pthread_cond_*`: a sequence-counter condition variable in glibc's 48-byte `pthread_cond_t`, for
//! every mutex choice and kind.
//!
//! # Algorithm
//! - **Wait**: `waiters += 1`; read `seq`; release the mutex (all of a recursive mutex's count); sleep
//!   on `seq` while it still holds the value read (a futex wait, absolute time-out on the condvar's
//!   clock); `waiters -= 1`; take the mutex back.
//! - **Signal**: if `waiters` is 0, nothing (no system call); else `seq += 1` and wake one sleeper.
//! - **Broadcast**: if `waiters` is 0, nothing; else `seq += 1` and wake every sleeper. They then take
//!   the mutex one by one through its own slow path (our adaptive mutex queues them FIFO, spinning
//!   only at the head). A futex requeue onto the mutex word, as glibc's pre-2.25 condvar did, needs a
//!   mutex whose sleepers wait on that word; ours sleep on their own words, so there is nothing to
//!   requeue onto.
//!
//! # Why no wake-up is lost
//! A waiter reads `seq` (and has counted itself in `waiters`) before it releases the mutex. A
//! signaller that changed the predicate under the mutex therefore sees `waiters > 0`, and its
//! `seq += 1` comes after the waiter's read: the waiter's futex wait either finds `seq` changed and
//! returns at once, or is already asleep and is woken. The futex wait compares and sleeps atomically in
//! the kernel. Spurious returns are allowed by POSIX (callers loop on their predicate).
//!
//! # Layout
//! | bytes | glibc's field | ours                                                          |
//! |-------|---------------|---------------------------------------------------------------|
//! | 0-3   | `__wseq`      | `seq`, the futex word                                          |
//! | 4-7   | `__wseq`      | `waiters`                                                      |
//! | 36-39 | `__wrefs`     | bit 0: process-shared, bit 1: `CLOCK_MONOTONIC` (as glibc)     |
//!
//! All-zero (`PTHREAD_COND_INITIALIZER`) is a private condvar on `CLOCK_REALTIME`. Bytes 44-47 are
//! never read (an old static initializer may not have written them).
//!
//! ```no_run
//! // In C: pthread_cond_wait(&c, &m) / pthread_cond_signal(&c), unchanged.
//! ```

use crate::config::{self, MutexAlgo};
use crate::mutex::{self, M};
use crate::real;
use crate::sys::{self, Wait};
use core::sync::atomic::{AtomicU32, Ordering};
use libc::{c_int, clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

const OFF_WREFS: usize = 36;
const SHARED: u32 = 1;
const MONOTONIC: u32 = 2;

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
    config::mutex() == MutexAlgo::Glibc
}

/// What a cancelled wait's cleanup needs: the condvar, the mutex, and what the release saved.
struct Waiting {
    c: C,
    m: *mut pthread_mutex_t,
    held: Option<mutex::Held>,
}

/// Runs when `pthread_cancel` unwinds out of a wait: the waiter leaves the count and takes the
/// mutex back before the program's cleanup handlers run, as POSIX asks.
unsafe extern "C" fn cancelled(arg: *mut libc::c_void) {
    // SAFETY: the `Waiting` on the cancelled wait's frame, which is still there while glibc runs
    // this cleanup.
    let w = unsafe { &mut *arg.cast::<Waiting>() };
    // Release: as the normal exit's decrement (`pthread_cond_destroy` waits for it).
    w.c.waiters().fetch_sub(1, Ordering::Release);
    if let Some(held) = w.held.take() {
        // SAFETY: released by this thread for the wait.
        let _ = unsafe { mutex::reacquire(M::from(w.m), held) };
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
    };
    let mut buffer = sys::CleanupBuffer::new();
    // SAFETY: the buffer and `waiting` live on this frame until the pop below; the routine only
    // touches them.
    unsafe { sys::_pthread_cleanup_push(&mut buffer, cancelled, (&raw mut waiting).cast()) };
    let r = sys::futex_wait_cancellable(c.seq(), seq, clock, abs, c.shared());
    // SAFETY: pushed above, on this frame; not executed (the wait ended normally).
    unsafe { sys::_pthread_cleanup_pop(&mut buffer, 0) };
    // The last touch of the condvar: `pthread_cond_destroy` waits for it (Release pairs with its
    // Acquire load), after which the memory may be reused.
    c.waiters().fetch_sub(1, Ordering::Release);
    let held = waiting
        .held
        .take()
        .expect("taken only by the cancellation cleanup");
    // SAFETY: released above by this thread.
    let relock = unsafe { mutex::reacquire(M::from(m), held) };
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
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_init(c, a) };
    }
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
    if glibc() {
        // SAFETY: forwarded.
        return unsafe { real::pthread_cond_destroy(c) };
    }
    // POSIX lets a condvar be destroyed (and its memory reused) as soon as every waiter has been
    // woken; a woken waiter's last touch of it is its `waiters` decrement. Wait for those, as glibc
    // does (a waiter still blocked here would be the caller's bug: it is not waited for forever).
    let c = C(c);
    let mut spins = 0u32;
    while c.waiters().load(Ordering::Acquire) != 0 && spins < 1_000_000 {
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            // SAFETY: no arguments.
            unsafe { libc::sched_yield() };
        }
    }
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
    notify(C(c), i32::MAX);
    0
}

fn notify(c: C, n: i32) {
    // SeqCst pairs with the waiter's SeqCst increment and read (module docs).
    if c.waiters().load(Ordering::SeqCst) == 0 {
        return;
    }
    c.seq().fetch_add(1, Ordering::SeqCst);
    let e = sys::errno();
    sys::futex_wake(c.seq(), n, c.shared());
    sys::set_errno(e);
}
