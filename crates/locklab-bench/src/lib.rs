//! The locklab lab: every locklab primitive and its peers under the same workloads, side by side, with
//! throughput, scaling, idle CPU, fairness, acquisition-latency percentiles and the machine's physical
//! limit. The binary is `locklab`; the README and `docs/lab.md` describe its commands and output.
//!
//! # Layout, top to bottom (each module imports only from the layers below it)
//!
//! - the command line: `main.rs` parses and dispatches, [`cli`] turns arguments into plans;
//! - the commands, side by side: [`bench`](mod@bench), [`torture`], [`reproduce`], [`compare`], [`advise`],
//!   [`report`] (the HTML page), [`calibrate`], [`list`], and [`story`] (the default job);
//! - running a plan: [`suite`] (every command that measures runs its plans through it);
//! - the plan and its output: [`plan`] (validated plans, usage errors, value parsers), [`output`]
//!   (the run document, the table and the exporters);
//! - the locks: [`locks`] (adapters and the registry of names);
//! - measuring: [`metrics`] (trials to rows), [`runner`] (one trial, and the traits it drives);
//! - the operations: [`workload`], [`work`].

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod advise;
pub mod apps;
pub mod bench;
pub mod calibrate;
pub mod cleanup;
pub mod cli;
pub mod compare;
pub mod list;
pub mod locks;
pub mod lockstat;
pub mod metrics;
pub mod output;
pub mod plan;
pub mod predict;
pub mod predict_validation;
pub mod preload;
pub mod report;
pub mod reproduce;
pub mod runner;
pub mod story;
pub mod suite;
pub mod torture;
pub mod try_cmd;
pub mod usage;
pub mod work;
pub mod workload;
