//! macOS (and the other Apple systems): waiting on an address with `os_sync_wait_on_address` /
//! `os_sync_wake_by_address_*` where the system has them (macOS 14.4+, found at run time with `dlsym`
//! so that the binary still loads on older systems), else with the `__ulock_wait` / `__ulock_wake`
//! calls they are built on (macOS 10.12+, the ones libc++'s `atomic::wait` uses). No process-wide
//! barrier (PercpuRwSem and memb RCU fence their readers), no CPU number, no thread affinity.

pub(super) use super::no_barrier::*;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

// <sys/ulock.h>: compare-and-wait on a 32-bit word; wake all; return -errno instead of setting errno.
const UL_COMPARE_AND_WAIT: u32 = 1;
const ULF_WAKE_ALL: u32 = 0x0000_0100;
const ULF_NO_ERRNO: u32 = 0x0100_0000;

unsafe extern "C" {
    fn __ulock_wait(operation: u32, addr: *mut c_void, value: u64, timeout_us: u32) -> c_int;
    fn __ulock_wake(operation: u32, addr: *mut c_void, wake_value: u64) -> c_int;
}

type WaitFn = unsafe extern "C" fn(*mut c_void, u64, usize, u32) -> c_int;
type WaitTimeoutFn = unsafe extern "C" fn(*mut c_void, u64, usize, u32, u32, u64) -> c_int;
type WakeFn = unsafe extern "C" fn(*mut c_void, usize, u32) -> c_int;

/// The os_sync functions, resolved once (0: not looked up; 1: absent).
struct OsSync {
    wait: usize,
    wait_timeout: usize,
    wake_any: usize,
    wake_all: usize,
}

static WAIT: AtomicUsize = AtomicUsize::new(0);
static WAIT_TIMEOUT: AtomicUsize = AtomicUsize::new(0);
static WAKE_ANY: AtomicUsize = AtomicUsize::new(0);
static WAKE_ALL: AtomicUsize = AtomicUsize::new(0);

fn os_sync() -> Option<OsSync> {
    let mut w = WAIT.load(Ordering::Relaxed);
    if w == 0 {
        let look = |name: &core::ffi::CStr| {
            // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches every loaded image.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
            if p == 0 { 1 } else { p }
        };
        let (a, b, c, d) = (
            look(c"os_sync_wait_on_address"),
            look(c"os_sync_wait_on_address_with_timeout"),
            look(c"os_sync_wake_by_address_any"),
            look(c"os_sync_wake_by_address_all"),
        );
        let all = a != 1 && b != 1 && c != 1 && d != 1;
        // Relaxed: racing first calls resolve the same addresses.
        WAIT_TIMEOUT.store(b, Ordering::Relaxed);
        WAKE_ANY.store(c, Ordering::Relaxed);
        WAKE_ALL.store(d, Ordering::Relaxed);
        w = if all { a } else { 1 };
        WAIT.store(w, Ordering::Relaxed);
    }
    (w != 1).then(|| OsSync {
        wait: w,
        wait_timeout: WAIT_TIMEOUT.load(Ordering::Relaxed),
        wake_any: WAKE_ANY.load(Ordering::Relaxed),
        wake_all: WAKE_ALL.load(Ordering::Relaxed),
    })
}

/// `OS_CLOCK_MACH_ABSOLUTE_TIME`, the one clock the timed wait takes.
const OS_CLOCK_MACH_ABSOLUTE_TIME: u32 = 32;

pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let addr = word.as_ptr().cast::<c_void>();
    if let Some(f) = os_sync() {
        // SAFETY: the functions dlsym found, with their documented signatures; the word is a live
        // 4-byte object.
        let r = unsafe {
            match timeout {
                None => core::mem::transmute::<usize, WaitFn>(f.wait)(addr, expected as u64, 4, 0),
                Some(d) => core::mem::transmute::<usize, WaitTimeoutFn>(f.wait_timeout)(
                    addr,
                    expected as u64,
                    4,
                    0,
                    OS_CLOCK_MACH_ABSOLUTE_TIME,
                    // Nanoseconds for this clock (the documented unit of the timeout).
                    d.as_nanos().clamp(1, u64::MAX as u128) as u64,
                ),
            }
        };
        return !(r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT));
    }
    // Microseconds, rounded up; 0 means forever, so a wait longer than the 32-bit field is cut into
    // the longest finite waits (each a spurious return the caller tolerates).
    let us = timeout.map_or(0, |d| {
        d.as_nanos().div_ceil(1000).clamp(1, u32::MAX as u128) as u32
    });
    // SAFETY: the word is a live 4-byte object; the call compares it with `expected`.
    let r = unsafe {
        __ulock_wait(
            UL_COMPARE_AND_WAIT | ULF_NO_ERRNO,
            addr,
            expected as u64,
            us,
        )
    };
    r != -libc::ETIMEDOUT
}

pub(super) fn wake(word: *const AtomicU32, n: u32) -> usize {
    let addr = word as *mut c_void;
    if let Some(f) = os_sync() {
        // SAFETY: as in `wait`; the address is only a key.
        unsafe {
            if n == 1 {
                core::mem::transmute::<usize, WakeFn>(f.wake_any)(addr, 4, 0);
            } else {
                core::mem::transmute::<usize, WakeFn>(f.wake_all)(addr, 4, 0);
            }
        }
        return 0;
    }
    let op = UL_COMPARE_AND_WAIT | ULF_NO_ERRNO | if n == 1 { 0 } else { ULF_WAKE_ALL };
    // SAFETY: the address is only a key.
    unsafe { __ulock_wake(op, addr, 0) };
    0
}

pub(super) fn yield_now() {
    // SAFETY: no arguments.
    unsafe { libc::sched_yield() };
}

pub(super) fn thread_id() -> u32 {
    let mut id = 0u64;
    // SAFETY: thread 0 names the calling thread; a valid out-pointer.
    unsafe { libc::pthread_threadid_np(0, &mut id) };
    // The system's ids count up from boot: the low 32 bits tell live threads apart.
    id as u32
}

pub(super) fn current_cpu() -> Option<usize> {
    None
}
