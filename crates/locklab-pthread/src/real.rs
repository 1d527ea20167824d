//! glibc's own functions, for the objects we hand to glibc (robust, priority-inherit,
//! priority-protect and process-shared ones, and every object under a `glibc` choice).
//!
//! Each is resolved once, on first use, with `dlvsym(RTLD_NEXT, name, version)`, newest version first
//! (so the default version, not a compatibility one: `pthread_cond_wait@GLIBC_2.3.2`, not `@2.2.5`).
//! A successful lookup does not allocate in glibc 2.34+, and the common case (our own objects) never
//! gets here. A racing first use resolves twice and stores the same address.

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// Versions to try, newest first (x86-64 and aarch64 base versions included).
const VERSIONS: [&CStr; 8] = [
    c"GLIBC_2.34",
    c"GLIBC_2.30",
    c"GLIBC_2.28",
    c"GLIBC_2.17",
    c"GLIBC_2.12",
    c"GLIBC_2.4",
    c"GLIBC_2.3.2",
    c"GLIBC_2.2.5",
];

/// Looks `name` up in the libraries after ours.
#[cold]
pub(crate) fn resolve(name: &CStr, cell: &AtomicPtr<c_void>) -> *mut c_void {
    let mut p = core::ptr::null_mut();
    for v in VERSIONS {
        // SAFETY: NUL-terminated strings; RTLD_NEXT searches the objects loaded after this one.
        p = unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), v.as_ptr()) };
        if !p.is_null() {
            break;
        }
    }
    if p.is_null() {
        // SAFETY: as above.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    }
    if p.is_null() {
        crate::sys::write_stderr(b"liblocklab_pthread: glibc function not found; aborting\n");
        std::process::abort();
    }
    // Release pairs with the Acquire load in `real!`: the address is a plain value, but keep the
    // pointer's publication ordered for tools that check it.
    cell.store(p, Ordering::Release);
    p
}

/// Declares `fn $name(args) -> ret` calling glibc's function of the same C name.
macro_rules! real {
    ($($name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty;)*) => {
        $(
            #[allow(non_snake_case, clippy::missing_safety_doc)]
            pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
                static CELL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
                // Acquire pairs with the Release store in `resolve`.
                let mut p = CELL.load(Ordering::Acquire);
                if p.is_null() {
                    // SAFETY: the C string of the function's own name.
                    p = resolve(unsafe {
                        CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes())
                    }, &CELL);
                }
                // SAFETY: `p` is glibc's function of this name, with this C signature.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(p) };
                // SAFETY: the caller passes what glibc's function expects.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

use libc::{c_int, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t, timespec};
type MutexAttr = *const libc::pthread_mutexattr_t;
type RwAttr = *const libc::pthread_rwlockattr_t;
type CondAttr = *const libc::pthread_condattr_t;
type Ts = *const timespec;

real! {
    pthread_mutex_init(m: *mut pthread_mutex_t, a: MutexAttr) -> c_int;
    pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: Ts) -> c_int;
    pthread_mutex_clocklock(m: *mut pthread_mutex_t, c: clockid_t, t: Ts) -> c_int;
    pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_consistent(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_getprioceiling(m: *const pthread_mutex_t, p: *mut c_int) -> c_int;
    pthread_mutex_setprioceiling(m: *mut pthread_mutex_t, p: c_int, old: *mut c_int) -> c_int;

    pthread_cond_init(c: *mut pthread_cond_t, a: CondAttr) -> c_int;
    pthread_cond_destroy(c: *mut pthread_cond_t) -> c_int;
    pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int;
    pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: Ts) -> c_int;
    pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: Ts) -> c_int;
    pthread_cond_signal(c: *mut pthread_cond_t) -> c_int;
    pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int;

    pthread_rwlock_init(l: *mut pthread_rwlock_t, a: RwAttr) -> c_int;
    pthread_rwlock_destroy(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: Ts) -> c_int;
    pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: Ts) -> c_int;
    pthread_rwlock_clockrdlock(l: *mut pthread_rwlock_t, k: clockid_t, t: Ts) -> c_int;
    pthread_rwlock_clockwrlock(l: *mut pthread_rwlock_t, k: clockid_t, t: Ts) -> c_int;
    pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int;

    pthread_spin_init(l: *mut libc::pthread_spinlock_t, p: c_int) -> c_int;
    pthread_spin_destroy(l: *mut libc::pthread_spinlock_t) -> c_int;
    pthread_spin_lock(l: *mut libc::pthread_spinlock_t) -> c_int;
    pthread_spin_trylock(l: *mut libc::pthread_spinlock_t) -> c_int;
    pthread_spin_unlock(l: *mut libc::pthread_spinlock_t) -> c_int;
}
