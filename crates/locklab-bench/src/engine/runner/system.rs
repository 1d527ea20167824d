//! What the runner asks of the system: this process's CPU time, context switches and resident set,
//! the machine's CPU time from `/proc/stat`, and pinning threads to CPUs.

/// Process CPU time and context switches (`getrusage(RUSAGE_SELF)`).
#[derive(Clone, Copy, Default, Debug)]
pub struct Usage {
    /// user + system, ns
    pub cpu_ns: u64,
    /// voluntary context switches
    pub voluntary: u64,
    /// involuntary context switches
    pub involuntary: u64,
}

/// Reads this process's resource usage.
pub fn usage() -> Usage {
    let ru = rusage(libc::RUSAGE_SELF);
    Usage {
        cpu_ns: tv(ru.ru_utime) + tv(ru.ru_stime),
        voluntary: ru.ru_nvcsw as u64,
        involuntary: ru.ru_nivcsw as u64,
    }
}

/// `getrusage(who)`.
fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: `ru` is a valid, zeroed out-pointer; getrusage fills it and cannot fail for
    // RUSAGE_SELF or RUSAGE_CHILDREN (the only `who`s passed here).
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    }
}

fn tv(t: libc::timeval) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000
}

/// The user and system CPU time, ns, of this process's waited-for children (`RUSAGE_CHILDREN`).
pub fn children_cpu_ns() -> (u64, u64) {
    let ru = rusage(libc::RUSAGE_CHILDREN);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// The whole machine's CPU time from `/proc/stat` (all CPUs, nanoseconds): busy (user, nice, system,
/// irq, softirq) and stolen by the hypervisor. `None` where `/proc/stat` is unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SystemCpu {
    /// Busy time of every process, ns.
    pub busy_ns: u64,
    /// Steal time, ns.
    pub steal_ns: u64,
}

/// Parses `/proc/stat`'s first line (`cpu user nice system idle iowait irq softirq steal ...`), in
/// clock ticks of `tick_ns`.
pub fn parse_proc_stat(text: &str, tick_ns: u64) -> Option<SystemCpu> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(SystemCpu {
        busy_ns: (at(0) + at(1) + at(2) + at(5) + at(6)) * tick_ns,
        steal_ns: at(7) * tick_ns,
    })
}

/// Online CPUs of the machine (what `/proc/stat`'s totals cover).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// The machine's CPU time now (see [`SystemCpu`]).
pub fn system_cpu() -> Option<SystemCpu> {
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tick_ns = 1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0)?;
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?, tick_ns)
}

/// Pins the calling thread to `cpu`; returns whether the kernel accepted it. Callers that can run
/// unpinned ignore a failure (the run is then unpinned, not wrong). Linux only: elsewhere `false`.
#[cfg(target_os = "linux")]
pub fn pin_to(cpu: usize) -> bool {
    // SAFETY: `set` is a zeroed cpu_set_t, filled with CPU_SET and passed with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Pins the calling thread to `cpu`: no thread affinity here (macOS has none), so never.
#[cfg(not(target_os = "linux"))]
pub fn pin_to(_cpu: usize) -> bool {
    false
}

/// Lets the calling thread run on all of `cpus` again.
#[cfg(target_os = "linux")]
pub fn unpin(cpus: &[usize]) {
    // SAFETY: as in `pin_to`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Lets the calling thread run on all of `cpus` again (nothing to undo without affinity).
#[cfg(not(target_os = "linux"))]
pub fn unpin(_cpus: &[usize]) {}

/// The CPUs this process may run on.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a valid out-buffer of the size we pass.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set we own.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The CPUs this process may run on: all of them, where threads have no affinity.
#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Vec<usize> {
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// This process's resident set size (`VmRSS` in `/proc/self/status`), KiB.
pub fn rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
