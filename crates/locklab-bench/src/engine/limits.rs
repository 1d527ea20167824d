//! The machine's physical limits, measured (`locklab calibrate` prints them; every run records them).

use crate::engine::metrics::{Calibration, Machine};
use crate::engine::runner::{allowed_cpus, pin_to};
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// The best (least disturbed) of `rounds` timings of `f`, in ns per iteration.
fn best_ns(rounds: usize, iters: u64, mut f: impl FnMut(u64)) -> f64 {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f(iters);
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// One uncontended `fetch_add` on a hot line.
pub fn atomic_rmw_ns() -> f64 {
    let a = AtomicU64::new(0);
    best_ns(5, 1_000_000, |n| {
        for _ in 0..n {
            black_box(a.fetch_add(1, Ordering::SeqCst));
        }
    })
}

/// One uncontended successful compare-exchange.
pub fn cas_ns() -> f64 {
    let a = AtomicU64::new(0);
    best_ns(5, 1_000_000, |n| {
        for i in 0..n {
            black_box(
                a.compare_exchange(i, i + 1, Ordering::SeqCst, Ordering::Relaxed)
                    .ok(),
            );
        }
    })
}

/// Rounds of the line-transfer probe (each 20,000 round trips).
pub const LINE_ROUNDS: usize = 15;

/// The line-transfer probe: best and median of [`LINE_ROUNDS`] rounds, and whether both threads were
/// pinned to different CPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineTransfer {
    /// Best round, ns per one-way transfer.
    pub best_ns: f64,
    /// Median round.
    pub median_ns: f64,
    /// Both threads pinned, to different CPUs.
    pub pinned: bool,
}

/// Half the round trip of a line bounced between two threads pinned to different CPUs; zeros with
/// one CPU.
pub fn line_transfer() -> LineTransfer {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        return LineTransfer {
            best_ns: 0.0,
            median_ns: 0.0,
            pinned: false,
        };
    }
    const ROUNDS: u64 = 20_000;
    let flag = AtomicU64::new(0);
    let (a, b) = (cpus[0], cpus[1]);
    let mut rounds = vec![];
    let pinned_b = std::sync::atomic::AtomicBool::new(true);
    let mut pinned = true;
    for _ in 0..LINE_ROUNDS {
        flag.store(0, Ordering::SeqCst);
        let ns = std::thread::scope(|s| {
            s.spawn(|| {
                if !pin_to(b) {
                    pinned_b.store(false, Ordering::Relaxed);
                }
                for i in 0..ROUNDS {
                    while flag.load(Ordering::Acquire) != 2 * i + 1 {
                        std::hint::spin_loop();
                    }
                    flag.store(2 * i + 2, Ordering::Release);
                }
            });
            pinned &= pin_to(a);
            let t = Instant::now();
            for i in 0..ROUNDS {
                flag.store(2 * i + 1, Ordering::Release);
                while flag.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            t.elapsed().as_nanos() as f64 / (2 * ROUNDS) as f64
        });
        rounds.push(ns);
    }
    crate::engine::runner::unpin(&cpus);
    rounds.sort_by(f64::total_cmp);
    LineTransfer {
        best_ns: rounds[0],
        median_ns: rounds[rounds.len() / 2],
        pinned: pinned && pinned_b.load(Ordering::Relaxed),
    }
}

/// Median time from `FUTEX_WAKE` to the woken thread running.
pub fn futex_wake_ns() -> f64 {
    const N: usize = 200;
    let word = AtomicU32::new(0);
    let woke_at = AtomicU64::new(0);
    let origin = Instant::now();
    let mut samples = Vec::with_capacity(N);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..N as u32 {
                while word.load(Ordering::Acquire) == 2 * i {
                    locklab::sys::futex_wait(&word, 2 * i, None);
                }
                woke_at.store(origin.elapsed().as_nanos() as u64, Ordering::Release);
                word.store(2 * i + 2, Ordering::Release);
                locklab::sys::futex_wake(&word, 1);
            }
        });
        for i in 0..N as u32 {
            // let the sleeper get into the kernel
            std::thread::sleep(std::time::Duration::from_micros(200));
            let t = origin.elapsed().as_nanos() as u64;
            word.store(2 * i + 1, Ordering::Release);
            locklab::sys::futex_wake(&word, 1);
            while word.load(Ordering::Acquire) != 2 * i + 2 {
                locklab::sys::futex_wait(&word, 2 * i + 1, None);
            }
            samples.push(woke_at.load(Ordering::Acquire).saturating_sub(t));
        }
    });
    samples.sort_unstable();
    samples[N / 2] as f64
}

/// Every calibration figure.
pub fn calibrate() -> Calibration {
    let line = line_transfer();
    Calibration {
        atomic_rmw_ns: atomic_rmw_ns(),
        cas_ns: cas_ns(),
        line_transfer_ns: line.best_ns,
        line_transfer_median_ns: line.median_ns,
        line_transfer_pinned: line.pinned,
        futex_wake_ns: futex_wake_ns(),
    }
}

/// What machine this is.
pub fn machine() -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Machine {
        cpu_model,
        logical_cpus: allowed_cpus().len(),
        kernel,
        rustc: env!("LOCKLAB_RUSTC_VERSION").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_positive_and_ordered() {
        let c = calibrate();
        assert!(c.atomic_rmw_ns > 0.0 && c.atomic_rmw_ns < 1_000.0, "{c:?}");
        assert!(c.cas_ns > 0.0 && c.cas_ns < 1_000.0, "{c:?}");
        assert!(c.futex_wake_ns > 0.0, "{c:?}");
        if allowed_cpus().len() >= 2 {
            assert!(c.line_transfer_ns > 0.0, "{c:?}");
            assert!(c.line_transfer_median_ns >= c.line_transfer_ns, "{c:?}");
            assert!(
                c.line_transfer_pinned,
                "two allowed CPUs: both probe threads pinned"
            );
        }
        let m = machine();
        assert!(m.logical_cpus >= 1);
        assert!(m.rustc.starts_with("rustc"), "{}", m.rustc);
    }
}
