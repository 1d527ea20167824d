//! FreeBSD: `_umtx_op(UMTX_OP_WAIT_UINT_PRIVATE / UMTX_OP_WAKE_PRIVATE)`, `sched_yield`,
//! `pthread_getthreadid_np`, `sched_getcpu`. No process-wide barrier is used (PercpuRwSem and memb
//! RCU fence their readers).

pub(super) use super::no_barrier::*;
use core::sync::atomic::AtomicU32;
use std::time::Duration;

pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    // A relative timeout on the monotonic clock, passed as `_umtx_time` with its size in `uaddr`.
    let mut t = timeout.map(|d| libc::_umtx_time {
        _timeout: libc::timespec {
            tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        },
        _flags: 0,
        _clockid: libc::CLOCK_MONOTONIC as u32,
    });
    let (size, ptr) = match t.as_mut() {
        Some(t) => (
            core::mem::size_of::<libc::_umtx_time>(),
            t as *mut libc::_umtx_time as *mut libc::c_void,
        ),
        None => (0, core::ptr::null_mut()),
    };
    // SAFETY: the word is a live u32 (a reference); the timeout, if any, lives on this stack; the
    // kernel compares the word with `expected` atomically.
    let r = unsafe {
        libc::_umtx_op(
            word.as_ptr().cast(),
            libc::UMTX_OP_WAIT_UINT_PRIVATE,
            expected as libc::c_ulong,
            size as *mut libc::c_void,
            ptr,
        )
    };
    !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}

pub(super) fn wake(word: *const AtomicU32, n: u32) -> usize {
    // SAFETY: the address is only a key for the kernel's queues.
    unsafe {
        libc::_umtx_op(
            word as *mut libc::c_void,
            libc::UMTX_OP_WAKE_PRIVATE,
            n.min(i32::MAX as u32) as libc::c_ulong,
            core::ptr::null_mut(),
            core::ptr::null_mut(),
        )
    };
    0
}

pub(super) fn yield_now() {
    // SAFETY: no arguments.
    unsafe { libc::sched_yield() };
}

pub(super) fn thread_id() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::pthread_getthreadid_np() as u32 }
}

pub(super) fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; -1 on failure.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}
