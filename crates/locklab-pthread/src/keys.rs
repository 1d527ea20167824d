//! `pthread_key_create`: the library needs one thread-specific key (two with statistics) of the
//! process's `PTHREAD_KEYS_MAX`, for the release of its per-thread queue nodes at thread exit. A
//! program that creates every key it can would get one or two fewer than under glibc; so when
//! glibc answers `EAGAIN`, the library gives its keys back ([`locklab::give_up_thread_exit_key`])
//! and asks again. The locks work on; threads that exit afterwards keep their nodes (not reused).
//!
//! ```c
//! while (pthread_key_create(&k, NULL) == 0) n++;   /* n == PTHREAD_KEYS_MAX, as under glibc */
//! ```

use crate::real;
use libc::{c_int, pthread_key_t};

/// `pthread_key_create`: glibc's, with the library's keys given back when it runs out.
///
/// # Safety
/// `key` is writable; `dtor` is null or a valid destructor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_key_create(
    key: *mut pthread_key_t,
    dtor: Option<unsafe extern "C" fn(*mut libc::c_void)>,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { real::pthread_key_create(key, dtor) };
    if r == libc::EAGAIN {
        let freed = locklab::give_up_thread_exit_key()
            | crate::stat::give_up_key()
            | crate::dep::give_up_key();
        if freed {
            // SAFETY: forwarded.
            return unsafe { real::pthread_key_create(key, dtor) };
        }
    }
    r
}

/// `__pthread_key_create`, the internal alias libstdc++ calls.
///
/// # Safety
/// As [`pthread_key_create`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __pthread_key_create(
    key: *mut pthread_key_t,
    dtor: Option<unsafe extern "C" fn(*mut libc::c_void)>,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { pthread_key_create(key, dtor) }
}
