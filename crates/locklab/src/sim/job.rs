//! The simulator runner's protocol: the job the lab's `predict` writes to the runner's standard
//! input ([`Job`]: a [`Machine`] and a [`JobSpec`]), the run the runner writes back ([`JobOut`]),
//! and the locks it runs ([`LOCKS`]). Plain data that builds everywhere, not only under
//! `--cfg locklab_sim`: the lab and the runner share these definitions; with the `serde` feature
//! they are (de)serialisable (as JSON, by both sides).

use super::Machine;

/// The locks the simulator runs, by `predict`'s names (the lab's, plus `fair-mutex`,
/// `rwsem-no-reader-spin` and `rwsem-no-spin`; the workloads `mutex` and `rw`; the
/// `enqueue-shared` and `enqueue-local` workloads run the lock `call-rcu`).
///
/// ```
/// assert!(locklab::sim::job::LOCKS.contains(&"qspinlock"));
/// ```
pub const LOCKS: [&str; 10] = [
    "tas",
    "ticket",
    "mcs",
    "qspinlock",
    "mutex",
    "fair-mutex",
    "rwspinlock",
    "rwsem",
    "rwsem-no-reader-spin",
    "rwsem-no-spin",
];

/// One simulated run: what it runs (the machine apart: see [`Job`]).
///
/// ```
/// let spec = locklab::sim::job::JobSpec {
///     workload: "mutex".into(),
///     lock: "ticket".into(),
///     threads: 2,
///     cs_ns: 100.0,
///     think_ns: 100.0,
///     read_pct: 0,
///     write_cs_ns: None,
///     duration_ms: 1.0,
///     seed: 1,
/// };
/// assert_eq!(spec.write_cs_ns.unwrap_or(spec.cs_ns), 100.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct JobSpec {
    /// `mutex`, `rw`, `enqueue-shared`, `enqueue-local`.
    pub workload: String,
    /// Lab lock name (one of [`LOCKS`], or `call-rcu` for the enqueue workloads).
    pub lock: String,
    /// Threads.
    pub threads: usize,
    /// Critical section, ns.
    pub cs_ns: f64,
    /// Think time, ns.
    pub think_ns: f64,
    /// Shared-mode share, %.
    pub read_pct: u32,
    /// The exclusive sections' work, ns, if not `cs_ns` (seed 003's creates are longer than its
    /// lookups).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub write_cs_ns: Option<f64>,
    /// Virtual time, ms.
    pub duration_ms: f64,
    /// Start-order seed.
    pub seed: u64,
}

/// What the runner reads on its standard input: the machine and the run.
///
/// ```
/// use locklab::sim::{Machine, job::{Job, JobSpec}};
/// let spec = JobSpec {
///     workload: "rw".into(),
///     lock: "rwsem".into(),
///     threads: 4,
///     cs_ns: 100.0,
///     think_ns: 100.0,
///     read_pct: 90,
///     write_cs_ns: None,
///     duration_ms: 1.0,
///     seed: 1,
/// };
/// let job = Job { machine: Machine::example(), spec };
/// assert!(job.machine.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Job {
    /// The simulated machine.
    pub machine: Machine,
    /// What runs on it.
    pub spec: JobSpec,
}

/// Per-thread figures of a run.
///
/// ```
/// let t = locklab::sim::job::JobThread { ops: 10, exclusive: 10, ..Default::default() };
/// assert_eq!(t.handovers, 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct JobThread {
    /// Operations finished within the window.
    pub ops: u64,
    /// Exclusive sections.
    pub exclusive: u64,
    /// Exclusive sections whose previous holder was another thread.
    pub handovers: u64,
    /// Time on a core, ns.
    pub cpu_ns: f64,
    /// The core it ran on.
    pub core: usize,
}

/// A simulated run as the runner writes it on its standard output.
///
/// ```
/// let out = locklab::sim::job::JobOut { virtual_ns: 1e6, ..Default::default() };
/// assert!(out.threads.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct JobOut {
    /// Per thread (the enqueue workloads have one more: the grace-period worker).
    pub threads: Vec<JobThread>,
    /// Busy time per core, ns.
    pub core_busy_ns: Vec<f64>,
    /// Virtual window, ns.
    pub virtual_ns: f64,
    /// Acquisition latency p50, p99, max, ns.
    pub acquire_ns: [f64; 3],
    /// Operations the simulator ordered.
    pub events: u64,
    /// Host hand-overs between virtual threads.
    pub host_switches: u64,
    /// Polling iterations not stepped.
    pub elided_iterations: u64,
    /// Host time, ms.
    pub wall_ms: f64,
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn sim_job_round_trips_as_json_with_the_field_names_of_machine_files() {
        let job = Job {
            machine: Machine::example(),
            spec: JobSpec {
                workload: "mutex".into(),
                lock: "ticket".into(),
                threads: 2,
                cs_ns: 100.0,
                think_ns: 100.0,
                read_pct: 0,
                write_cs_ns: None,
                duration_ms: 1.0,
                seed: 1,
            },
        };
        let text = serde_json::to_string(&job).unwrap();
        assert!(text.contains(r#""line_farthest_ns":120.0"#), "{text}");
        assert!(!text.contains("write_cs_ns"), "{text}");
        assert_eq!(serde_json::from_str::<Job>(&text).unwrap(), job);
        let typo = text.replace("rmw_ns", "rmw_nss");
        let e = serde_json::from_str::<Job>(&typo).unwrap_err().to_string();
        assert!(e.contains("unknown field `rmw_nss`"), "{e}");
        let no_source = text.replace(r#""source":"","#, "");
        assert_eq!(serde_json::from_str::<Job>(&no_source).unwrap(), job);
    }
}
