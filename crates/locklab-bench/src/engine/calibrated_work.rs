//! Calibrated work: `--cs-ns` and `--think-ns` are turned into loop counts of a fixed arithmetic loop
//! once at start-up, so "100 ns" of work is about 100 ns on this machine.

use std::hint::black_box;
use std::time::Instant;

/// Runs `loops` iterations of a dependent multiply-add chain (about one multiply latency each) seeded
/// with `seed`, and returns the result so the work cannot be optimised away. No work (`loops` 0) costs
/// a compare, not a call: the harness's cost with `--cs-ns 0` stays out of every op.
#[inline]
pub fn spin_work(loops: u64, seed: u64) -> u64 {
    if loops == 0 {
        seed
    } else {
        spin_loop(loops, seed)
    }
}

/// The out-of-line loop behind [`spin_work`] (out of line so its timing does not depend on the caller).
#[inline(never)]
fn spin_loop(loops: u64, seed: u64) -> u64 {
    let mut x = seed;
    for i in 0..loops {
        x = black_box(x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(i));
    }
    x
}

/// How many [`spin_work`] loops make a nanosecond on this machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkCalibration {
    /// Loops per nanosecond.
    pub loops_per_ns: f64,
}

impl WorkCalibration {
    /// Measures the loop's speed: the fastest of a few timed runs (the least disturbed one).
    pub fn measure() -> Self {
        const LOOPS: u64 = 2_000_000;
        spin_work(LOOPS / 10, 1); // warm up caches and frequency
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                black_box(spin_work(LOOPS, 7));
                t.elapsed().as_nanos().max(1) as f64
            })
            .fold(f64::INFINITY, f64::min);
        WorkCalibration {
            loops_per_ns: LOOPS as f64 / best,
        }
    }

    /// Loop count for `ns` nanoseconds of work.
    pub fn loops_for(&self, ns: u64) -> u64 {
        (ns as f64 * self.loops_per_ns).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_scales_linearly() {
        let c = WorkCalibration { loops_per_ns: 0.5 };
        assert_eq!(c.loops_for(0), 0);
        assert_eq!(c.loops_for(100), 50);
        assert_eq!(c.loops_for(1000), 500);
        let real = WorkCalibration::measure();
        assert!(
            real.loops_per_ns > 0.01 && real.loops_per_ns < 100.0,
            "{real:?}"
        );
    }

    #[test]
    fn work_depends_on_seed_and_loops() {
        assert_ne!(spin_work(10, 1), spin_work(10, 2));
        assert_ne!(spin_work(10, 1), spin_work(11, 1));
        assert_eq!(spin_work(0, 9), 9);
    }
}
