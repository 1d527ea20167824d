//! `sigaction` and `signal` with lockdep on: the program's handlers run behind a wrapper that tells
//! the validator a handler of that signal is running ([`locklab::lockdep::signal_enter`]), so a lock
//! taken in a handler is checked against the places its class is held with the signal unblocked.
//! Queries return the program's own handler and flags, as it set them. With lockdep off, each call
//! is glibc's, unchanged.

use crate::{dep, real};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use libc::{c_int, c_void, sighandler_t, siginfo_t};

const NSIG: usize = 65;
/// The program's handler of each signal, behind the wrapper.
static USER: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
/// Whether it takes three arguments (`SA_SIGINFO`).
static INFO: [AtomicBool; NSIG] = [const { AtomicBool::new(false) }; NSIG];

type Handler3 = unsafe extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void);
type Handler1 = unsafe extern "C-unwind" fn(c_int);

unsafe extern "C-unwind" fn wrapper(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let i = sig as usize;
    if i >= NSIG {
        return;
    }
    let h = USER[i].load(Ordering::Acquire);
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    let saved = locklab::lockdep::signal_enter(sig);
    // SAFETY: the program's handler as it installed it, called as the kernel would have.
    unsafe {
        if INFO[i].load(Ordering::Relaxed) {
            core::mem::transmute::<usize, Handler3>(h)(sig, info, ctx);
        } else {
            core::mem::transmute::<usize, Handler1>(h)(sig);
        }
    }
    locklab::lockdep::signal_leave(saved);
}

/// `sigaction`: with lockdep on, a handler is installed behind the wrapper.
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let i = sig as usize;
    if !dep::on() || !(1..NSIG).contains(&i) {
        // SAFETY: forwarded.
        return unsafe { real::sigaction(sig, act, old) };
    }
    let w = wrapper as *const () as usize;
    let (prev, prev_info) = (
        USER[i].load(Ordering::Relaxed),
        INFO[i].load(Ordering::Relaxed),
    );
    let mut mine: libc::sigaction;
    let mut a = act;
    // SAFETY: the caller's attribute, null or valid.
    if let Some(act) = unsafe { act.as_ref() } {
        let h = act.sa_sigaction;
        if h != libc::SIG_DFL && h != libc::SIG_IGN && h != w {
            mine = *act;
            mine.sa_sigaction = w;
            mine.sa_flags |= libc::SA_SIGINFO;
            INFO[i].store(act.sa_flags & libc::SA_SIGINFO != 0, Ordering::Relaxed);
            // Release pairs with the wrapper's Acquire: the flag is written first.
            USER[i].store(h, Ordering::Release);
            a = &mine;
        }
    }
    // SAFETY: forwarded (our copy, or the caller's).
    let r = unsafe { real::sigaction(sig, a, old) };
    if r != 0 {
        INFO[i].store(prev_info, Ordering::Relaxed);
        USER[i].store(prev, Ordering::Release);
        return r;
    }
    // SAFETY: the caller's out-pointer, null or valid.
    if let Some(old) = unsafe { old.as_mut() }
        && old.sa_sigaction == w
    {
        old.sa_sigaction = prev;
        if !prev_info {
            old.sa_flags &= !libc::SA_SIGINFO;
        }
    }
    r
}

/// `signal`, `bsd_signal` and `sysv_signal` through [`sigaction`] (glibc's call its internal one).
fn install(sig: c_int, h: sighandler_t, flags: c_int, self_mask: bool) -> sighandler_t {
    // SAFETY: all-zero is a valid sigaction; the set calls take a valid set.
    let mut a: libc::sigaction = unsafe { core::mem::zeroed() };
    a.sa_sigaction = h;
    a.sa_flags = flags;
    // SAFETY: as above.
    unsafe {
        libc::sigemptyset(&mut a.sa_mask);
        if self_mask {
            libc::sigaddset(&mut a.sa_mask, sig);
        }
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: valid pointers.
    if unsafe { sigaction(sig, &a, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// `signal` (BSD semantics, as glibc's: `SA_RESTART`, the signal blocked in its handler).
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    if !dep::on() {
        // SAFETY: forwarded.
        return unsafe { real::signal(sig, h) };
    }
    install(sig, h, libc::SA_RESTART, true)
}

/// `bsd_signal`: as [`signal`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    if !dep::on() {
        // SAFETY: forwarded.
        return unsafe { real::bsd_signal(sig, h) };
    }
    install(sig, h, libc::SA_RESTART, true)
}

/// `sysv_signal`: one-shot, not blocked in its handler.
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    if !dep::on() {
        // SAFETY: forwarded.
        return unsafe { real::sysv_signal(sig, h) };
    }
    install(sig, h, libc::SA_RESETHAND | libc::SA_NODEFER, false)
}
