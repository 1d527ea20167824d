//! The shared engine every measuring command runs on: plans and their validation, the suite that
//! runs them, one trial ([`runner`]), the workloads and their calibrated work, trials to rows
//! ([`metrics`]), the machine's limits, the simulator, the advice map, the one noise rule
//! ([`verdict`]) and the output documents.

pub mod advice;
pub mod calibrated_work;
pub mod limits;
pub mod metrics;
pub mod output;
pub mod plan;
pub mod runner;
pub mod sim;
pub mod suite;
pub mod verdict;
pub mod workload;
