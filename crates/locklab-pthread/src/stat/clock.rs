//! The statistics' clock: ticks (the TSC on x86-64, the virtual counter on aarch64) and their
//! conversion to nanoseconds by the ratio of ticks to `CLOCK_MONOTONIC` since the start.

use super::*;

/// A tick count: cheap, monotonic, the same rate on every CPU.
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; unserialised (a few cycles of skew do not matter).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: CNTVCT_EL0 is readable at EL0 on Linux; a register read.
        unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) t, options(nomem, nostack)) };
        t
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        monotonic_ns()
    }
}

pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Ticks and nanoseconds when counting started (the base of the conversion).
pub(super) static START_TICKS: AtomicU64 = AtomicU64::new(0);
pub(super) static START_NS: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds per tick, measured over the process's life so far; a process younger than 5 ms waits
/// until it is 5 ms old, so the ratio is good to a few parts per million.
pub(super) fn ns_per_tick() -> f64 {
    #[cfg(target_arch = "aarch64")]
    {
        let f: u64;
        // SAFETY: CNTFRQ_EL0 is readable at EL0; a register read.
        unsafe { core::arch::asm!("mrs {}, cntfrq_el0", out(reg) f, options(nomem, nostack)) };
        if f != 0 {
            return 1e9 / f as f64;
        }
    }
    let start = START_NS.load(Ordering::Relaxed);
    while monotonic_ns().saturating_sub(start) < 5_000_000 {
        core::hint::spin_loop();
    }
    let (t, n) = (ticks(), monotonic_ns());
    let dt = t.saturating_sub(START_TICKS.load(Ordering::Relaxed));
    let dn = n.saturating_sub(start);
    if dt == 0 || dn == 0 {
        return 1.0;
    }
    dn as f64 / dt as f64
}
