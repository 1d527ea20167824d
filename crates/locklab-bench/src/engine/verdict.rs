//! The one noise rule every comparison of repeated runs uses (`compare`, `apps`, `try`): a result is
//! faster or slower only when the two spreads (min..max) do not overlap; otherwise it is within noise.
//!
//! ```
//! use locklab_bench::engine::verdict::{Verdict, spread, verdict};
//! assert_eq!(Verdict::of((11.0, 12.0), (9.0, 10.0)), Verdict::Faster);
//! assert_eq!(spread(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
//! assert_eq!(verdict((7.0, 8.0), (9.0, 10.0), 5), "slower");
//! ```

/// The verdict for one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The new range lies entirely above the old one.
    Faster,
    /// The new range lies entirely below the old one.
    Slower,
    /// The ranges overlap.
    WithinNoise,
}

impl Verdict {
    /// As printed.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::WithinNoise => "within noise",
        }
    }
}

impl Verdict {
    /// The verdict for `new` against `old`, each a spread `(min, max)`: faster when the new range
    /// lies entirely above the old one, slower when entirely below, else within noise.
    ///
    /// ```
    /// use locklab_bench::engine::verdict::Verdict;
    /// assert_eq!(Verdict::of((9.5, 12.0), (9.0, 10.0)), Verdict::WithinNoise);
    /// ```
    pub fn of(new: (f64, f64), old: (f64, f64)) -> Verdict {
        if new.0 > old.1 {
            Verdict::Faster
        } else if new.1 < old.0 {
            Verdict::Slower
        } else {
            Verdict::WithinNoise
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count); `v` must not be empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// `faster`/`slower` when the two spreads (min, max) do not overlap, else `within noise`; `not
/// decided` with fewer than 3 runs an arm (no spread to judge noise by).
pub fn verdict(ours: (f64, f64), glibc: (f64, f64), runs: usize) -> &'static str {
    if runs < 3 {
        "not decided"
    } else {
        Verdict::of(ours, glibc).name()
    }
}

/// `(median, min, max)`; zeros when there are no runs.
pub fn spread(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    (
        median(v),
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(0.0, f64::max),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn verdicts_need_separated_spreads_and_three_runs() {
        assert_eq!(verdict((11.0, 12.0), (9.0, 10.0), 3), "faster");
        assert_eq!(verdict((7.0, 8.0), (9.0, 10.0), 5), "slower");
        assert_eq!(verdict((9.5, 12.0), (9.0, 10.0), 5), "within noise");
        assert_eq!(verdict((11.0, 12.0), (9.0, 10.0), 2), "not decided");
    }
}
