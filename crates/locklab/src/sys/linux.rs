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

/// How many CPUs the process may use: the larger of its main thread's affinity and the caller's
/// (a worker may have pinned itself to one CPU, or the main thread itself; each set is a subset of
/// what the process may use, and an exited main thread reports its last set), capped by a cgroup v2
/// CPU quota (`cpu.max`, rounded up). `None` if neither affinity can be read (more CPUs than
/// `cpu_set_t` holds).
#[cfg(not(miri))]
pub(super) fn process_cpus() -> Option<usize> {
    let count = |pid: libc::pid_t| {
        // SAFETY: `set` is a valid, zeroed cpu_set_t of the size passed; sched_getaffinity has no
        // other memory arguments.
        unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            let size = core::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(pid, size, &mut set) != 0 {
                return None;
            }
            usize::try_from(libc::CPU_COUNT(&set))
                .ok()
                .filter(|&n| n > 0)
        }
    };
    // SAFETY: getpid has no arguments and always succeeds.
    let main = count(unsafe { libc::getpid() });
    let n = main.max(count(0))?;
    Some(cgroup_cpu_quota().map_or(n, |q| n.min(q)))
}

/// The CPU quota of the process's cgroup (v2), in CPUs rounded up; `None` without one.
#[cfg(not(miri))]
fn cgroup_cpu_quota() -> Option<usize> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
    cpu_max_cpus(&std::fs::read_to_string(format!("/sys/fs/cgroup{path}/cpu.max")).ok()?)
}

/// A cgroup v2 `cpu.max` line (`"<quota> <period>"`, or `"max <period>"` for none) as CPUs,
/// rounded up.
#[cfg(not(miri))]
fn cpu_max_cpus(line: &str) -> Option<usize> {
    let mut fields = line.split_whitespace();
    // "max" (no quota) fails to parse: None.
    let quota: u64 = fields.next()?.parse().ok()?;
    let period: u64 = fields.next()?.parse().ok()?;
    (period > 0).then(|| usize::try_from(quota.div_ceil(period).max(1)).unwrap_or(usize::MAX))
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

#[cfg(all(test, not(miri)))]
mod tests {
    /// The quota of `cpu.max` in CPUs, rounded up; none for `max` or a malformed line.
    #[test]
    fn cpu_max_lines() {
        assert_eq!(super::cpu_max_cpus("max 100000\n"), None);
        assert_eq!(super::cpu_max_cpus("150000 100000\n"), Some(2));
        assert_eq!(super::cpu_max_cpus("50000 100000"), Some(1));
        assert_eq!(super::cpu_max_cpus("200000 100000"), Some(2));
        assert_eq!(super::cpu_max_cpus("100000 0"), None);
        assert_eq!(super::cpu_max_cpus(""), None);
    }
}
