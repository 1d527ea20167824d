//! The locklab lab: every locklab primitive and its peers under the same workloads, side by side, with
//! throughput, scaling, idle CPU, fairness, acquisition-latency percentiles and the machine's physical
//! limit. The binary is `locklab`; lab.md (and the README) define its commands and output.
//!
//! The pipeline, one module each: [`cli`] -> [`suite`] -> [`runner`] (over [`locks`] and
//! [`workload`]) -> [`metrics`] -> [`report`].

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod advise;
pub mod calibrate;
pub mod cli;
pub mod compare;
pub mod locks;
pub mod metrics;
pub mod report;
pub mod reproduce;
pub mod runner;
pub mod story;
pub mod suite;
pub mod torture;
pub mod work;
pub mod workload;
