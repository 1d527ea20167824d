//! C11 `mtx_*` and `cnd_*`: glibc's `mtx_t` and `cnd_t` are its `pthread_mutex_t` and
//! `pthread_cond_t`, and glibc's `mtx_lock` calls its mutex internally, so these are ours too, over the
//! pthread calls of this library (which hand glibc's objects to glibc). The exported `mtx_*` calls
//! that lockdep or the statistics see (lock, unlock, init, destroy) are the entry module's, over
//! these.
//!
//! ```c
//! mtx_t m; mtx_init(&m, mtx_plain | mtx_recursive); mtx_lock(&m); mtx_unlock(&m);
//! ```

use crate::cond::*;
use crate::mutex::*;
use libc::{c_int, pthread_cond_t, pthread_mutex_t};

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

/// The `thrd_*` result of a pthread call's error number.
pub(crate) fn result(e: c_int) -> c_int {
    match e {
        0 => THRD_SUCCESS,
        libc::EBUSY => THRD_BUSY,
        libc::ETIMEDOUT => THRD_TIMEDOUT,
        libc::ENOMEM => THRD_NOMEM,
        _ => THRD_ERROR,
    }
}

/// `mtx_init`, as glibc 2.36's: `mtx_timed` is ignored, the mutex is recursive when what is left is
/// exactly `mtx_recursive`, and plain for any other value (unknown bits included, never
/// `thrd_error` for the type).
///
/// # Safety
/// `m` points to writable memory for a `mtx_t`.
pub unsafe extern "C" fn mtx_init(m: *mut pthread_mutex_t, ty: c_int) -> c_int {
    // SAFETY: all-zero is a valid (uninitialised) attribute object, initialised below.
    let mut a: libc::pthread_mutexattr_t = unsafe { core::mem::zeroed() };
    // SAFETY: a local attribute, initialised, used and destroyed here; these calls are not ours.
    unsafe {
        libc::pthread_mutexattr_init(&mut a);
        if ty & !MTX_TIMED == MTX_RECURSIVE {
            libc::pthread_mutexattr_settype(&mut a, libc::PTHREAD_MUTEX_RECURSIVE);
        }
        let r = pthread_mutex_init(m, &a);
        libc::pthread_mutexattr_destroy(&mut a);
        result(r)
    }
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

/// `cnd_destroy`.
///
/// # Safety
/// `c` points to a valid `cnd_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_destroy(c: *mut pthread_cond_t) {
    // SAFETY: forwarded.
    unsafe { pthread_cond_destroy(c) };
}
