//! The validated plans every command runs (a [`Plan`] of workloads, locks and settings), the usage
//! errors and the value parsers the command line and the commands share. Below every command; the
//! command line (`cli`) only parses arguments into these.

use crate::engine::output::Exporter;
use crate::engine::runner::CondvarSpec;
use crate::engine::workload::Workload;
use crate::locks::{self, LockInfo};

/// A validated run.
#[derive(Clone)]
pub struct Plan {
    /// Each workload with the locks to run on it.
    pub workloads: Vec<(Workload, Vec<LockInfo>)>,
    /// Thread counts, ascending, unique.
    pub threads: Vec<usize>,
    /// cs, ns
    pub cs_ns: u64,
    /// think, ns
    pub think_ns: u64,
    /// read percent for `rw`
    pub read_pct: u32,
    /// updater threads for `rcu-update` (capped at each row's threads)
    pub writers: usize,
    /// `condvar`: queue capacity and notify mode.
    pub condvar: CondvarSpec,
    /// window, ms
    pub duration_ms: u64,
    /// warm-up, ms
    pub warmup_ms: u64,
    /// repeats
    pub repeats: usize,
    /// pin threads
    pub pin: bool,
    /// no progress, no table
    pub quiet: bool,
    /// exports
    pub exporters: Vec<Exporter>,
    /// print the "who wins where" summary
    pub summary: bool,
    /// `mutex`/`rw`: instances of the lock, each op taking one (`--lock-count`; 1 usually)
    pub lock_count: usize,
}

pub use crate::usage::UsageError;
pub(crate) use crate::usage::usage;

/// Most threads a run may ask for.
pub const MAX_THREADS: usize = 1024;
/// Largest work per operation, ns (10 ms).
pub const MAX_WORK_NS: u64 = 10_000_000;
/// Most `--lock-count` instances.
pub const MAX_LOCKS: u64 = 4096;
/// `--threads many`: the many-thread regime, whatever the machine.
pub const MANY_THREADS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Largest `--slots`.
pub const MAX_SLOTS: u64 = 1_000_000;
/// Longest window, ms (10 minutes).
pub const MAX_DURATION_MS: u64 = 600_000;
/// Most repeats.
pub const MAX_REPEATS: usize = 100;

/// Parses a whole number for `--flag` within `[min, max]`.
pub fn number(flag: &str, s: &str, min: u64, max: u64) -> Result<u64, UsageError> {
    let v: i128 = match s.trim().parse() {
        Ok(v) => v,
        Err(_) => {
            return usage(format!(
                "--{flag}: '{s}' is not a whole number (expected {min} to {max})"
            ));
        }
    };
    if v < min as i128 || v > max as i128 {
        return usage(format!(
            "--{flag}: {v} is out of range (expected {min} to {max})"
        ));
    }
    Ok(v as u64)
}

/// Parses `1,2,4` and `start:end:step` items for `--flag` into a sorted, unique list of numbers in
/// `[min, max]` (lab.md: ranges are accepted wherever a list is).
pub fn number_list(flag: &str, s: &str, min: u64, max: u64) -> Result<Vec<u64>, UsageError> {
    let mut out = vec![];
    for item in s.split(',').map(str::trim) {
        if item.is_empty() {
            return usage(format!(
                "--{flag}: empty item in '{s}' (expected a list like 1,2,4 or a range like 1:8:1)"
            ));
        }
        let parts: Vec<&str> = item.split(':').collect();
        match parts.as_slice() {
            [n] => out.push(number(flag, n, min, max)?),
            [a, b, step] => {
                let (a, b) = (number(flag, a, min, max)?, number(flag, b, min, max)?);
                let step = number(flag, step, 1, max.max(1))?;
                if a > b {
                    return usage(format!(
                        "--{flag}: range '{item}' runs backwards (start must be <= end)"
                    ));
                }
                out.extend((a..=b).step_by(step as usize));
            }
            _ => {
                return usage(format!(
                    "--{flag}: '{item}' is neither a number nor a start:end:step range"
                ));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// [`number_list`] for `--threads`: 1 to [`MAX_THREADS`].
pub fn thread_list(s: &str) -> Result<Vec<usize>, UsageError> {
    if s.trim() == "many" {
        return Ok(MANY_THREADS.to_vec());
    }
    Ok(number_list("threads", s, 1, MAX_THREADS as u64)?
        .into_iter()
        .map(|n| n as usize)
        .collect())
}

/// The default thread counts: 1, 2 and 2 x logical CPUs.
pub fn default_threads(cpus: usize) -> Vec<usize> {
    let mut v = vec![1, 2, 2 * cpus.max(1)];
    v.sort_unstable();
    v.dedup();
    v
}

/// Peers the default job leaves to `locklab bench`: the C and C++ FIFO queue spinlocks, which convoy
/// at 2 x CPUs threads exactly as ours (`mcs`, `ticket`, `qspinlock`, which the default job runs) do.
pub const NOT_IN_DEFAULT_JOB: [&str; 5] = [
    "ck-mcs",
    "ck-clh",
    "ck-ticket",
    "tbb-queuing-mutex",
    "tbb-queuing-rw-mutex",
];

/// Whether the default job runs `l` on `w`: every lock that runs the workload, but a peer runs only
/// the workload its mode is for (a mutex `mutex`, an rwlock `rw`; the other only repeats it in
/// `bench`, while ours run both: seed 000's spinlock-vs-rwlock comparison), and
/// [`NOT_IN_DEFAULT_JOB`] only in `bench`.
pub fn in_default_job(l: &LockInfo, w: Workload) -> bool {
    let peer = l.kind == locks::Kind::Peer;
    l.supports(w)
        && !NOT_IN_DEFAULT_JOB.contains(&l.name)
        && !(peer && w == Workload::Rw && !l.shared_mode)
        && !(peer && w == Workload::Mutex && l.shared_mode)
}

/// The default suite: every workload, the locks [`in_default_job`], 1, 2 and 2 x CPUs threads, short
/// windows (130 ms; about 2 min 30 s on 2 CPUs), then the "who wins where" summary.
pub fn plan_default(cpus: usize) -> Plan {
    let registry = locks::registry();
    Plan {
        workloads: Workload::ALL
            .iter()
            .map(|&w| {
                (
                    w,
                    registry
                        .iter()
                        .filter(|l| in_default_job(l, w))
                        .cloned()
                        .collect(),
                )
            })
            .collect(),
        threads: default_threads(cpus),
        cs_ns: 0,
        think_ns: 0,
        read_pct: 90,
        writers: 1,
        condvar: CondvarSpec::default(),
        duration_ms: 130,
        warmup_ms: 30,
        repeats: 3,
        pin: true,
        quiet: false,
        exporters: vec![],
        summary: true,
        lock_count: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_lists_and_ranges() {
        assert_eq!(thread_list("1,2,4").unwrap(), [1, 2, 4]);
        assert_eq!(thread_list("1:8:1").unwrap(), (1..=8).collect::<Vec<_>>());
        assert_eq!(thread_list("2:9:3,1,2").unwrap(), [1, 2, 5, 8]);
        for bad in ["0", "1,,2", "4:1:1", "1:8:0", "x", "1:2", "-1", "2000"] {
            assert!(thread_list(bad).is_err(), "{bad} accepted");
        }
        // Any list flag takes ranges, within its own bounds.
        assert_eq!(
            number_list("read-pct", "0:100:50", 0, 100).unwrap(),
            [0, 50, 100]
        );
        assert!(number_list("read-pct", "0:101:1", 0, 100).is_err());
    }

    #[test]
    fn numbers_name_the_flag_and_range() {
        let e = number("cs-ns", "-5", 0, 10).unwrap_err().0;
        assert!(
            e.contains("--cs-ns") && e.contains("-5") && e.contains("0 to 10"),
            "{e}"
        );
        assert!(
            number("cs-ns", "abc", 0, 10)
                .unwrap_err()
                .0
                .contains("not a whole number")
        );
        assert_eq!(number("cs-ns", "7", 0, 10).unwrap(), 7);
    }

    #[test]
    fn default_threads_cover_oversubscription() {
        assert_eq!(default_threads(2), [1, 2, 4]);
        assert_eq!(default_threads(1), [1, 2]);
    }
}
