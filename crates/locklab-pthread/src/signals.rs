//! `sigaction`, `signal` and the other handler-installing calls: the program's handlers run behind
//! a wrapper of the library's, which does two things before it calls the program's handler:
//!
//! - **Passes on a wake-up the thread may owe** ([`crate::adaptive::pass_on_owed`]). A thread woken
//!   from a sleep on an adaptive mutex's word owes the sleepers behind it the mark it took with its
//!   wake-up; a handler that leaves the interrupted wait for good (`siglongjmp`, `setcontext`, a C++
//!   `throw`, `pthread_exit`) would otherwise strand them asleep on a free mutex, as glibc's own
//!   mutex does. The wrapper wakes one sleeper of the word this thread waits on (a spare wake-up if
//!   it owed none), whatever way the handler then leaves. Only a handler interrupting a contended
//!   lock's sleeping loop finds a word there (or one left by a wait abandoned before): every other
//!   delivery costs a thread-local load.
//! - **With lockdep on, tells the validator a handler of that signal is running**
//!   ([`locklab::lockdep::hooks::signal_enter`]), so a lock taken in a handler is checked against the
//!   places its class is held with the signal unblocked.
//!
//! Nothing else changes: the wrapper replaces only the handler's address. `sigaction` installs it
//! with the program's own flags and mask (a one-argument wrapper for a plain handler, a
//! three-argument one for `SA_SIGINFO`; the kernel's `siginfo_t` and context are passed through, so a
//! handler that reads or edits the interrupted context works unchanged); `signal`, `bsd_signal`,
//! `sysv_signal`, `__sysv_signal`, `ssignal` and `sigset` are glibc's own calls given the wrapper, so
//! their semantics are glibc's (`signal`'s `SA_RESTART` unless `siginterrupt` asked otherwise,
//! `sysv_signal`'s one-shot handler, `sigset`'s `SIG_HOLD`). `siginterrupt` needs no wrapper
//! (glibc's keeps whatever handler is installed).
//!
//! # One wrapper per handler, for good
//! Each handler the program installs gets a slot of its own the first time ([`SLOTS`] of them),
//! and each slot has its own two wrappers (distinct functions), which call that slot's handler and
//! no other, for the life of the process. So an installation stays one atomic step of the kernel's,
//! as under glibc: a delivery runs the handler whose wrapper the kernel chose, with the flags and
//! mask installed with it, however other threads replace the action meanwhile; an old action
//! (from `sigaction` or a `signal`-like call) is the program's handler the kernel held, exactly, so
//! concurrent installations report one chain of old actions; an action copied to another signal
//! with the raw `rt_sigaction` system call still runs its handler. `SIG_IGN`, `SIG_DFL` and
//! `SIG_HOLD` pass through, and a one-shot handler's reset (`SA_RESETHAND`) is the kernel's, so it
//! reads back as `SIG_DFL`. What the wrapper cannot change: a program that queries with the raw
//! system call sees a wrapper's address (installing that address again, either way, installs the
//! same handler); a handler installed with the raw call runs unwrapped (such a handler that leaves
//! a wait for good strands the sleepers behind it, as under glibc), and so do handlers past the
//! slots' number. With lockdep off the wrapper ends in a jump to the program's handler (no frame of
//! its own: `backtrace()` in a handler and an exception thrown from one see what they see under
//! glibc); with lockdep on it has a frame, with unwind information, that both cross. Without
//! lockdep the wrapper touches no thread-local (`sys::owed_word` finds the thread's word by its TID
//! in a table of the library's): Rust's thread-locals in a shared object go through
//! `__tls_get_addr`, which can `malloc` in a handler.
//!
//! `pthread_sigmask` and `sigprocmask` are glibc's, and with lockdep on then tell the validator the
//! thread's mask changed ([`locklab::lockdep::hooks::signal_mask_changed`]): it reads a thread's mask
//! once per change, not at every hold it needs it for.

use crate::{dep, real};
use core::sync::atomic::{AtomicUsize, Ordering};
use libc::{c_int, c_void, sighandler_t, siginfo_t};

const NSIG: usize = 65;
/// glibc's `SIG_HOLD` (`sigset`'s "block it").
const SIG_HOLD: usize = 2;

/// How many distinct handlers the wrappers can stand in for. A program that installs more runs the
/// rest unwrapped (as if installed with the raw system call).
const SLOTS: usize = 128;

/// The program's handler each wrapper stands in for: slot `k` is given a handler once, by the
/// first installation of that handler, and keeps it for the life of the process. So a wrapper the
/// kernel calls always calls the handler it was installed for, whatever installations happened
/// since (a delivery, an old action handed back, a copy made with the raw system call), and every
/// installation is the kernel's one atomic step, as under glibc. 0: a free slot.
static SLOT: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

type Handler3 = unsafe extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void);
type Handler1 = unsafe extern "C-unwind" fn(c_int);

/// Slot `K`'s wrapper of a plain handler (installed without `SA_SIGINFO`, as the program asked).
unsafe extern "C-unwind" fn wrapper1<const K: usize>(sig: c_int) {
    // Acquire pairs with the Release CAS in `slot_of`, which filled the slot before any
    // installation of this wrapper.
    let h = SLOT[K].load(Ordering::Acquire);
    crate::adaptive::pass_on_owed();
    if !dep::on() {
        // SAFETY: the program's one-argument handler (a slot is filled only with a handler, never
        // emptied), called as the kernel would have.
        return unsafe { core::mem::transmute::<usize, Handler1>(h)(sig) };
    }
    let saved = locklab::lockdep::hooks::signal_enter(sig);
    // SAFETY: as above.
    unsafe { core::mem::transmute::<usize, Handler1>(h)(sig) };
    locklab::lockdep::hooks::signal_leave(saved);
}

/// Slot `K`'s wrapper of an `SA_SIGINFO` handler.
unsafe extern "C-unwind" fn wrapper3<const K: usize>(
    sig: c_int,
    info: *mut siginfo_t,
    ctx: *mut c_void,
) {
    // Acquire as in `wrapper1`.
    let h = SLOT[K].load(Ordering::Acquire);
    crate::adaptive::pass_on_owed();
    if !dep::on() {
        // SAFETY: the program's three-argument handler (as in `wrapper1`), called as the kernel
        // would have.
        return unsafe { core::mem::transmute::<usize, Handler3>(h)(sig, info, ctx) };
    }
    let saved = locklab::lockdep::hooks::signal_enter(sig);
    // SAFETY: as above.
    unsafe { core::mem::transmute::<usize, Handler3>(h)(sig, info, ctx) };
    locklab::lockdep::hooks::signal_leave(saved);
}

/// Sixteen slots' wrappers, `16 * $hi` on.
macro_rules! sixteen {
    ($w:ident, $t:ty, $hi:literal) => {
        [
            $w::<{ 16 * $hi }> as $t,
            $w::<{ 16 * $hi + 1 }> as $t,
            $w::<{ 16 * $hi + 2 }> as $t,
            $w::<{ 16 * $hi + 3 }> as $t,
            $w::<{ 16 * $hi + 4 }> as $t,
            $w::<{ 16 * $hi + 5 }> as $t,
            $w::<{ 16 * $hi + 6 }> as $t,
            $w::<{ 16 * $hi + 7 }> as $t,
            $w::<{ 16 * $hi + 8 }> as $t,
            $w::<{ 16 * $hi + 9 }> as $t,
            $w::<{ 16 * $hi + 10 }> as $t,
            $w::<{ 16 * $hi + 11 }> as $t,
            $w::<{ 16 * $hi + 12 }> as $t,
            $w::<{ 16 * $hi + 13 }> as $t,
            $w::<{ 16 * $hi + 14 }> as $t,
            $w::<{ 16 * $hi + 15 }> as $t,
        ]
    };
}

/// Every slot's wrappers, by slot.
macro_rules! all_slots {
    ($w:ident, $t:ty) => {
        [
            sixteen!($w, $t, 0),
            sixteen!($w, $t, 1),
            sixteen!($w, $t, 2),
            sixteen!($w, $t, 3),
            sixteen!($w, $t, 4),
            sixteen!($w, $t, 5),
            sixteen!($w, $t, 6),
            sixteen!($w, $t, 7),
        ]
    };
}

static WRAPPERS1: [[Handler1; 16]; SLOTS / 16] = all_slots!(wrapper1, Handler1);
static WRAPPERS3: [[Handler3; 16]; SLOTS / 16] = all_slots!(wrapper3, Handler3);

/// Slot `k`'s wrapper of the kind the flags ask for (`SA_SIGINFO` or not), as an address.
fn wrapper_of(k: usize, siginfo: bool) -> usize {
    if siginfo {
        WRAPPERS3[k / 16][k % 16] as usize
    } else {
        WRAPPERS1[k / 16][k % 16] as usize
    }
}

/// The slot standing in for handler `h` (found, or given to it now); `None` when every slot is
/// taken by other handlers.
fn slot_of(h: usize) -> Option<usize> {
    for (k, s) in SLOT.iter().enumerate() {
        // Acquire pairs with the Release CAS below (another thread's fill).
        let v = s.load(Ordering::Acquire);
        if v == h {
            return Some(k);
        }
        // Release: the wrappers' Acquire load of the slot (and the next installer's) sees it
        // filled; the failure's Acquire as the load above. Two threads filling slots for one
        // handler at once may give it two: both work.
        if v == 0 {
            match s.compare_exchange(0, h, Ordering::Release, Ordering::Acquire) {
                Ok(_) => return Some(k),
                Err(now) if now == h => return Some(k),
                Err(_) => {}
            }
        }
    }
    None
}

/// The program's view of a handler address the kernel holds: the handler a wrapper stands in
/// for, any other address as it is.
fn unwrap(h: usize) -> usize {
    for (k, s) in SLOT.iter().enumerate() {
        // Acquire pairs with the fill in `slot_of`.
        let v = s.load(Ordering::Acquire);
        if v == 0 {
            // Slots are filled in order: none after the first free one.
            break;
        }
        if h == wrapper_of(k, false) || h == wrapper_of(k, true) {
            return v;
        }
    }
    h
}

/// The address to install for the program's handler `h` of signal `sig` (its wrapper, with the
/// validator told to watch the signal when lockdep is on), or `h` itself when it is no handler to
/// wrap (default, ignore, `SIG_HOLD`, an error value, an invalid signal) or no slot is left.
fn wrapped_for(sig: c_int, h: usize, siginfo: bool) -> usize {
    // glibc refuses (`EINVAL`) signals out of range and its own two (32, 33), the kernel `SIGKILL`
    // and `SIGSTOP`: a refused installation must not take a slot for good.
    if !(1..NSIG as c_int).contains(&sig)
        || sig == 32
        || sig == 33
        || sig == libc::SIGKILL
        || sig == libc::SIGSTOP
        || h == libc::SIG_DFL
        || h == libc::SIG_IGN
        || h == libc::SIG_ERR
        || h == SIG_HOLD
    {
        return h;
    }
    let Some(k) = slot_of(unwrap(h)) else {
        return h;
    };
    if dep::on() {
        // The validator watches the signal's unblocked holds from now on.
        locklab::lockdep::hooks::watch_signal(sig);
    }
    wrapper_of(k, siginfo)
}

/// `sigaction`: a handler is installed behind its wrapper, with the program's flags and mask; an
/// old action answers the program's handler.
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's action, null or valid.
    let r = match unsafe { act.as_ref() } {
        Some(a) => {
            let mut mine = *a;
            mine.sa_sigaction =
                wrapped_for(sig, a.sa_sigaction, a.sa_flags & libc::SA_SIGINFO != 0);
            // SAFETY: forwarded (our copy; `old` as the caller gave it).
            unsafe { real::sigaction(sig, &mine, old) }
        }
        // SAFETY: forwarded.
        None => unsafe { real::sigaction(sig, act, old) },
    };
    // SAFETY: the caller's out-pointer, null or valid (written by glibc if the call succeeded).
    if r == 0
        && let Some(o) = unsafe { old.as_mut() }
    {
        o.sa_sigaction = unwrap(o.sa_sigaction);
    }
    r
}

/// One of glibc's `signal`-like calls (`f`) with the wrapper in place of the program's handler
/// (these calls never set `SA_SIGINFO`).
fn signal_like(
    sig: c_int,
    h: sighandler_t,
    f: unsafe fn(c_int, sighandler_t) -> sighandler_t,
) -> sighandler_t {
    // SAFETY: forwarded, with the one-argument wrapper where there is one.
    let old = unsafe { f(sig, wrapped_for(sig, h, false)) };
    unwrap(old)
}

/// The `signal`-like calls: glibc's own, with the wrapper in place of the program's handler (so
/// each keeps its own semantics: `siginterrupt`, one-shot, `SIG_HOLD`).
macro_rules! signal_like_exports {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(sig: c_int, h: sighandler_t) -> sighandler_t {
            signal_like(sig, h, real::$name)
        }
    )*};
}

signal_like_exports! {
    /// `signal` (glibc's: BSD semantics, `SA_RESTART` unless `siginterrupt` asked otherwise).
    signal;
    /// `bsd_signal`: as [`signal`].
    bsd_signal;
    /// `ssignal`: as [`signal`].
    ssignal;
    /// `sysv_signal`: one-shot, not blocked in its handler (glibc's).
    sysv_signal;
    /// `__sysv_signal`: what `signal` means in a program built for strict ISO C; as [`sysv_signal`].
    __sysv_signal;
    /// `sigset` (glibc's: `SIG_HOLD` blocks, a handler unblocks; the old disposition, or `SIG_HOLD`).
    sigset;
}

/// Finds glibc's calls wrapped here now (the constructor): a program may call them first inside a
/// signal handler, where looking a function up (which takes the dynamic linker's lock) could
/// deadlock.
pub(crate) fn init() {
    // SAFETY: queries (null new set or action) with valid out-pointers: nothing changes.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        real::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set);
        real::sigprocmask(libc::SIG_BLOCK, core::ptr::null(), &mut set);
        let mut old: libc::sigaction = core::mem::zeroed();
        real::sigaction(libc::SIGUSR1, core::ptr::null(), &mut old);
    }
    // The `signal`-like calls, each given an invalid signal: glibc answers `EINVAL` and changes
    // nothing (errno is put back).
    let e = crate::sys::errno();
    // SAFETY: as above.
    unsafe {
        real::signal(-1, libc::SIG_DFL);
        real::bsd_signal(-1, libc::SIG_DFL);
        real::ssignal(-1, libc::SIG_DFL);
        real::sysv_signal(-1, libc::SIG_DFL);
        real::__sysv_signal(-1, libc::SIG_DFL);
        real::sigset(-1, libc::SIG_DFL);
    }
    crate::sys::set_errno(e);
}

/// `pthread_sigmask`: glibc's; with lockdep on, the validator's reading of this thread's mask is
/// dropped.
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { real::pthread_sigmask(how, set, old) };
    if dep::on() && !set.is_null() {
        locklab::lockdep::hooks::signal_mask_changed();
    }
    r
}

/// `sigprocmask`: as [`pthread_sigmask`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { real::sigprocmask(how, set, old) };
    if dep::on() && !set.is_null() {
        locklab::lockdep::hooks::signal_mask_changed();
    }
    r
}
