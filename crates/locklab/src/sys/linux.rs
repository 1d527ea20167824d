//! Linux: `futex(2)`, `membarrier(2)`, `sched_setaffinity`, `gettid`, `sched_getcpu`.

#[cfg(not(loom))]
use core::sync::atomic::AtomicU32;
#[cfg(not(loom))]
use std::time::Duration;

#[cfg(not(loom))]
pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY:
    // - `word` is a live, aligned 32-bit atomic for the duration of the call (it is a reference);
    // - `ts_ptr` is null or points to `ts`, which outlives the call;
    // - FUTEX_WAIT_PRIVATE reads the word atomically and uses the other arguments only as values.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        )
    };
    !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}

#[cfg(not(loom))]
pub(super) fn wake(word: *const AtomicU32, n: u32) -> usize {
    let n = n.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: FUTEX_WAKE_PRIVATE uses the address only as a key into the kernel's wait queues; it does not
    // access the memory, so any address is sound.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            // The kernel's `u32 *uaddr` (Miri checks variadic argument types).
            word.cast::<u32>().cast_mut(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        )
    };
    r.max(0) as usize
}

#[inline]
pub(super) fn yield_now() {
    // SAFETY: sched_yield takes no arguments and cannot fail in a way that matters to us.
    unsafe {
        libc::sched_yield();
    }
}

// membarrier(2) commands (include/uapi/linux/membarrier.h).
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1 << 0;
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

#[cfg(not(any(loom, miri)))]
fn membarrier_call(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integer arguments (command, flags) and a CPU id that is ignored
    // without MEMBARRIER_CMD_FLAG_CPU; it touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    }
}

#[cfg(not(any(loom, miri)))]
pub(super) fn membarrier_register() -> bool {
    let supported = membarrier_call(MEMBARRIER_CMD_QUERY);
    supported >= 0
        && supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED as libc::c_long != 0
        && membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
}

#[cfg(not(any(loom, miri)))]
pub(super) fn membarrier() -> bool {
    membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0
        || membarrier_call(MEMBARRIER_CMD_GLOBAL) == 0
}

#[cfg(not(miri))]
pub(super) fn cpu_walk_barrier() -> bool {
    // SAFETY: every `cpu_set_t` is a valid zeroed set of the size passed; the affinity calls take no
    // other memory arguments.
    unsafe {
        let size = core::mem::size_of::<libc::cpu_set_t>();
        let mut old: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut old) != 0 {
            return false;
        }
        let n = libc::sysconf(libc::_SC_NPROCESSORS_CONF)
            .clamp(1, libc::CPU_SETSIZE as libc::c_long) as usize;
        let mut ran = 0;
        let mut ok = true;
        for cpu in 0..n {
            let mut one: libc::cpu_set_t = core::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            if libc::sched_setaffinity(0, size, &one) == 0 {
                ran += 1;
            } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                ok = false; // allowed there, yet refused: that CPU was not fenced
            }
        }
        let restored = libc::sched_setaffinity(0, size, &old) == 0;
        ok && ran > 0 && restored
    }
}

#[cfg(not(miri))]
pub(super) fn use_process_affinity() -> bool {
    // SAFETY: `set` is a valid, zeroed cpu_set_t of the size passed; getpid and the affinity calls
    // have no other memory arguments.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        let size = core::mem::size_of::<libc::cpu_set_t>();
        libc::sched_getaffinity(libc::getpid(), size, &mut set) == 0
            && libc::sched_setaffinity(0, size, &set) == 0
    }
}

/// The CPUs the process's main thread may run on: the process's own set, where a worker may have
/// pinned itself to one. `None` if the call fails (more CPUs than `cpu_set_t` holds, or a main
/// thread that has exited).
#[cfg(not(miri))]
pub(super) fn process_cpus() -> Option<usize> {
    // SAFETY: `set` is a valid, zeroed cpu_set_t of the size passed; getpid and sched_getaffinity
    // have no other memory arguments.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        let size = core::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(libc::getpid(), size, &mut set) != 0 {
            return None;
        }
        usize::try_from(libc::CPU_COUNT(&set))
            .ok()
            .filter(|&n| n > 0)
    }
}

pub(super) fn thread_id() -> u32 {
    // SAFETY: gettid takes no arguments and always succeeds.
    unsafe { libc::gettid() as u32 }
}

pub(super) fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments; it returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}
