//! `sigaction`, `signal` and the other handler-installing calls with lockdep on: the program's
//! handlers run behind a wrapper that tells the validator a handler of that signal is running
//! ([`locklab::lockdep::hooks::signal_enter`]), so a lock taken in a handler is checked against the places
//! its class is held with the signal unblocked. With lockdep off, each call is glibc's, unchanged.
//!
//! Nothing else changes: the wrapper replaces only the handler's address. `sigaction` installs it
//! with the program's own flags and mask (a one-argument wrapper for a plain handler, a
//! three-argument one for `SA_SIGINFO`); `signal`, `bsd_signal`, `sysv_signal`, `__sysv_signal`,
//! `ssignal` and `sigset` are glibc's own calls given the wrapper, so their semantics are glibc's
//! (`signal`'s `SA_RESTART` unless `siginterrupt` asked otherwise, `sysv_signal`'s one-shot
//! handler, `sigset`'s `SIG_HOLD`). Every query (an old action, the returned old handler) answers
//! the program's handler where the wrapper is installed; `SIG_IGN` and `SIG_DFL` pass through.
//! `siginterrupt` needs no wrapper (glibc's keeps whatever handler is installed).
//!
//! `pthread_sigmask` and `sigprocmask` are glibc's, and then tell the validator the thread's mask
//! changed ([`locklab::lockdep::hooks::signal_mask_changed`]): it reads a thread's mask once per change,
//! not at every hold it needs it for.

use crate::{dep, real};
use core::sync::atomic::{AtomicUsize, Ordering};
use libc::{c_int, c_void, sighandler_t, siginfo_t};

const NSIG: usize = 65;
/// glibc's `SIG_HOLD` (`sigset`'s "block it").
const SIG_HOLD: usize = 2;
/// The program's handler of each signal, behind the wrapper.
static USER: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];

type Handler3 = unsafe extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void);
type Handler1 = unsafe extern "C-unwind" fn(c_int);

/// The program's own handler of `sig` for a wrapper to call; `None` if there is none to call
/// (a signal number out of range, or the disposition changed to default or ignore meanwhile).
fn program_handler(sig: c_int) -> Option<usize> {
    let i = usize::try_from(sig).ok().filter(|&i| i < NSIG)?;
    // Acquire pairs with the Release stores in `install`.
    let h = USER[i].load(Ordering::Acquire);
    (h != libc::SIG_DFL && h != libc::SIG_IGN).then_some(h)
}

/// The wrapper of a plain handler (installed without `SA_SIGINFO`, as the program asked).
unsafe extern "C-unwind" fn wrapper1(sig: c_int) {
    let Some(h) = program_handler(sig) else {
        return;
    };
    let saved = locklab::lockdep::hooks::signal_enter(sig);
    // SAFETY: the program's one-argument handler, called as the kernel would have.
    unsafe { core::mem::transmute::<usize, Handler1>(h)(sig) };
    locklab::lockdep::hooks::signal_leave(saved);
}

/// The wrapper of an `SA_SIGINFO` handler.
unsafe extern "C-unwind" fn wrapper3(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let Some(h) = program_handler(sig) else {
        return;
    };
    let saved = locklab::lockdep::hooks::signal_enter(sig);
    // SAFETY: the program's three-argument handler, called as the kernel would have.
    unsafe { core::mem::transmute::<usize, Handler3>(h)(sig, info, ctx) };
    locklab::lockdep::hooks::signal_leave(saved);
}

fn w1() -> usize {
    wrapper1 as *const () as usize
}

fn w3() -> usize {
    wrapper3 as *const () as usize
}

/// Whether `h` is one of the wrappers.
fn wrapped(h: usize) -> bool {
    h == w1() || h == w3()
}

/// `true` if signal `sig`'s handler `h` is the program's own, to be wrapped (not the default, not
/// ignored, not a wrapper given back, a valid signal).
fn wraps(sig: c_int, h: usize) -> bool {
    (1..NSIG as c_int).contains(&sig)
        && h != libc::SIG_DFL
        && h != libc::SIG_IGN
        && h != libc::SIG_ERR
        && h != SIG_HOLD
        && !wrapped(h)
}

/// Records `h` as signal `sig`'s program handler, runs `call` (the installation of the wrapper),
/// and undoes the record if `call` says it failed. Returns `call`'s result.
fn install<R>(sig: c_int, h: usize, call: impl FnOnce() -> R, failed: impl Fn(&R) -> bool) -> R {
    let i = sig as usize;
    // The validator watches the signal's unblocked holds from now on.
    locklab::lockdep::hooks::watch_signal(sig);
    let prev = USER[i].load(Ordering::Relaxed);
    // Release pairs with the wrappers' Acquire: a delivery that finds a wrapper installed finds
    // its handler (stored before the wrapper is).
    USER[i].store(h, Ordering::Release);
    let r = call();
    if failed(&r) {
        // Release as above.
        USER[i].store(prev, Ordering::Release);
    }
    r
}

/// The program's view of an old handler `h` of signal `sig` (its own handler where a wrapper is
/// installed). `before`: the program's handler recorded before this call.
fn unwrap_old(h: usize, before: usize) -> usize {
    if wrapped(h) { before } else { h }
}

/// `sigaction`: with lockdep on, a handler is installed behind the wrapper, with the program's flags
/// and mask.
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !dep::on() || !(1..NSIG as c_int).contains(&sig) {
        // SAFETY: forwarded.
        return unsafe { real::sigaction(sig, act, old) };
    }
    let before = USER[sig as usize].load(Ordering::Relaxed);
    // SAFETY: the caller's action, null or valid.
    let r = match unsafe { act.as_ref() } {
        Some(a) if wraps(sig, a.sa_sigaction) => {
            let mut mine = *a;
            mine.sa_sigaction = if a.sa_flags & libc::SA_SIGINFO != 0 {
                w3()
            } else {
                w1()
            };
            // SAFETY: forwarded (our copy; `old` as the caller gave it).
            install(
                sig,
                a.sa_sigaction,
                || unsafe { real::sigaction(sig, &mine, old) },
                |&r| r != 0,
            )
        }
        // SAFETY: forwarded.
        _ => unsafe { real::sigaction(sig, act, old) },
    };
    // SAFETY: the caller's out-pointer, null or valid (written by glibc if the call succeeded).
    if r == 0
        && let Some(o) = unsafe { old.as_mut() }
    {
        o.sa_sigaction = unwrap_old(o.sa_sigaction, before);
    }
    r
}

/// One of glibc's `signal`-like calls (`f`) with the wrapper in place of the program's handler.
fn signal_like(
    sig: c_int,
    h: sighandler_t,
    f: unsafe fn(c_int, sighandler_t) -> sighandler_t,
) -> sighandler_t {
    if !(1..NSIG as c_int).contains(&sig) {
        // SAFETY: forwarded (glibc answers the error).
        return unsafe { f(sig, h) };
    }
    let before = USER[sig as usize].load(Ordering::Relaxed);
    let old = if wraps(sig, h) {
        // SAFETY: forwarded, with the one-argument wrapper (these calls never set SA_SIGINFO).
        install(sig, h, || unsafe { f(sig, w1()) }, |&o| o == libc::SIG_ERR)
    } else {
        // SAFETY: forwarded.
        unsafe { f(sig, h) }
    };
    unwrap_old(old, before)
}

/// The `signal`-like calls: glibc's own, with lockdep's wrapper in place of the program's handler
/// while lockdep is on (so each keeps its own semantics: `siginterrupt`, one-shot, `SIG_HOLD`).
macro_rules! signal_like_exports {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(sig: c_int, h: sighandler_t) -> sighandler_t {
            if !dep::on() {
                // SAFETY: forwarded.
                return unsafe { real::$name(sig, h) };
            }
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

/// Finds glibc's async-signal-safe calls wrapped here now (the constructor): a program may call them
/// first inside a signal handler, where looking a function up (which takes the dynamic linker's
/// lock) could deadlock.
pub(crate) fn init() {
    // SAFETY: queries (null new set or action) with valid out-pointers: nothing changes.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        real::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set);
        real::sigprocmask(libc::SIG_BLOCK, core::ptr::null(), &mut set);
        let mut old: libc::sigaction = core::mem::zeroed();
        real::sigaction(libc::SIGUSR1, core::ptr::null(), &mut old);
    }
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
