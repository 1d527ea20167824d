//! C11 `mtx_*` and `cnd_*`: glibc's `mtx_t` and `cnd_t` are its `pthread_mutex_t` and
//! `pthread_cond_t`, and glibc's `mtx_lock` calls its mutex internally, so these are ours too, over the
//! pthread calls of this library (which hand glibc's objects to glibc).
//!
//! ```no_run
//! // In C: mtx_t m; mtx_init(&m, mtx_plain | mtx_recursive); mtx_lock(&m); mtx_unlock(&m);
//! ```

use crate::cond::*;
use crate::mutex::*;
use libc::{c_int, pthread_cond_t, pthread_mutex_t, timespec};

/// `thrd_success`.
pub const THRD_SUCCESS: c_int = 0;
/// `thrd_busy`.
pub const THRD_BUSY: c_int = 1;
/// `thrd_error`.
pub const THRD_ERROR: c_int = 2;
/// `thrd_nomem`.
pub const THRD_NOMEM: c_int = 3;
/// `thrd_timedout`.
pub const THRD_TIMEDOUT: c_int = 4;
const MTX_RECURSIVE: c_int = 1;
const MTX_TIMED: c_int = 2;

fn result(e: c_int) -> c_int {
    match e {
        0 => THRD_SUCCESS,
        libc::EBUSY => THRD_BUSY,
        libc::ETIMEDOUT => THRD_TIMEDOUT,
        libc::ENOMEM => THRD_NOMEM,
        _ => THRD_ERROR,
    }
}

/// `mtx_init`: `mtx_plain` or `mtx_timed`, optionally `| mtx_recursive`.
///
/// # Safety
/// `m` points to writable memory for a `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_init(m: *mut pthread_mutex_t, ty: c_int) -> c_int {
    if ty & !(MTX_RECURSIVE | MTX_TIMED) != 0 {
        return THRD_ERROR;
    }
    let mut a: libc::pthread_mutexattr_t = unsafe { core::mem::zeroed() };
    // SAFETY: a local attribute, initialised, used and destroyed here; these calls are not ours.
    unsafe {
        libc::pthread_mutexattr_init(&mut a);
        if ty & MTX_RECURSIVE != 0 {
            libc::pthread_mutexattr_settype(&mut a, libc::PTHREAD_MUTEX_RECURSIVE);
        }
        let r = pthread_mutex_init(m, &a);
        libc::pthread_mutexattr_destroy(&mut a);
        result(r)
    }
}

/// `mtx_lock`.
///
/// # Safety
/// `m` points to a valid `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_lock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_mutex_lock(m) })
}

/// `mtx_trylock`: `thrd_busy` if held.
///
/// # Safety
/// `m` points to a valid `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_trylock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_mutex_trylock(m) })
}

/// `mtx_timedlock`: `TIME_UTC` (`CLOCK_REALTIME`).
///
/// # Safety
/// `m` points to a valid `mtx_t`; `t` to a `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_timedlock(m: *mut pthread_mutex_t, t: *const timespec) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_mutex_timedlock(m, t) })
}

/// `mtx_unlock`.
///
/// # Safety
/// `m` points to a valid `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_unlock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_mutex_unlock(m) })
}

/// `mtx_destroy`.
///
/// # Safety
/// `m` points to a valid `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_destroy(m: *mut pthread_mutex_t) {
    // SAFETY: forwarded.
    unsafe { pthread_mutex_destroy(m) };
}

/// `cnd_init`.
///
/// # Safety
/// `c` points to writable memory for a `cnd_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_init(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_cond_init(c, core::ptr::null()) })
}

/// `cnd_signal`.
///
/// # Safety
/// `c` points to a valid `cnd_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_signal(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_cond_signal(c) })
}

/// `cnd_broadcast`.
///
/// # Safety
/// `c` points to a valid `cnd_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_broadcast(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_cond_broadcast(c) })
}

/// `cnd_wait`.
///
/// # Safety
/// Valid objects; the mutex held by the caller.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn cnd_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_cond_wait(c, m) })
}

/// `cnd_timedwait`: `TIME_UTC` (`CLOCK_REALTIME`).
///
/// # Safety
/// Valid objects; the mutex held by the caller; `t` a valid `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn cnd_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { pthread_cond_clockwait(c, m, libc::CLOCK_REALTIME, t) })
}

/// `cnd_destroy`.
///
/// # Safety
/// `c` points to a valid `cnd_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_destroy(c: *mut pthread_cond_t) {
    // SAFETY: forwarded.
    unsafe { pthread_cond_destroy(c) };
}
