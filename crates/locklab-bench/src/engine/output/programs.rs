//! One row of a program under a lock choice, as `apps --json` and `try --json` write it (one
//! schema, so `report` draws either).

use serde::Serialize;

/// One app x lock x threads row (lab.md's `apps` JSON entries).
#[derive(Debug, Serialize)]
pub struct AppRow {
    /// App name.
    pub app: String,
    /// `glibc` (no preload) or a `LOCKLAB_MUTEX` choice.
    pub lock: String,
    /// Threads the program was given.
    pub threads: usize,
    /// Throughput unit.
    pub unit: String,
    /// Always true here (throughputs).
    pub higher_is_better: bool,
    /// Each repeat's throughput, in run order.
    pub runs: Vec<f64>,
    /// Median of `runs`.
    pub median: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
    /// `median / glibc's median`.
    pub ratio_vs_glibc: f64,
    /// `faster`, `slower` or `within noise` (the two spreads overlap); `not decided` under 3 runs;
    /// `reference` for glibc's own row.
    pub verdict: String,
    /// Every run verified.
    pub verified: bool,
    /// Why a run failed verification, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The call sites with the most wait, from one more run of the app with lock statistics (for
    /// `glibc`, glibc's own locks counted through the library).
    pub top_locks: Vec<serde_json::Value>,
}
