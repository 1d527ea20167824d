//! The locklab lab: every locklab primitive and its peers under the same workloads, side by side, with
//! throughput, scaling, idle CPU, fairness, acquisition-latency percentiles and the machine's physical
//! limit. The binary is `locklab`; the README and `docs/lab.md` describe its commands and output.
//!
//! # Layout, top to bottom
//!
//! commands -> engine / external / locks -> the `locklab` library (and the peers the locks wrap).
//! A command imports from the three below it and never from another command's insides; they import
//! nothing of [`commands`].
//!
//! - `main.rs` and [`cli`]: the top-level parser; each subcommand holds its command's own arguments;
//! - [`commands`]: one module per subcommand (folders for those of several files), each turning its
//!   arguments into its plan and running it: [`commands::advise`], [`commands::apps`],
//!   [`commands::bench`], [`commands::calibrate`], [`commands::compare`],
//!   [`commands::default_job`] (`locklab` with no command), [`commands::list`],
//!   [`commands::predict`], [`commands::report`], [`commands::reproduce`], [`commands::run`],
//!   [`commands::torture`] and [`commands::try_`] (`locklab try`). What two commands share lives
//!   below them; the default job alone runs other commands, whole, through their documented entry
//!   points (`reproduce`'s `run`, `report`'s `render` and `write`);
//! - [`engine`]: the shared harness: plans and the suite that runs them, the machine's limits, the
//!   simulator, the advice map, the one noise rule, the output documents, and at its bottom the
//!   runner of one trial with its workloads and calibrated work ([`engine::runner`],
//!   [`engine::workload`], [`engine::calibrated_work`]);
//! - [`external`]: what drives programs outside the lab: the preload runner, the lock statistics,
//!   the program driver and the clean-up of children and scratch files (it imports nothing of the
//!   lab but [`usage`], so the locks' preload adapter finds the library through it too);
//! - [`locks`]: the adapters over the `locklab` library and its peers, and the registry of names, on
//!   the runner's traits;
//! - [`usage`]: the usage error (exit status 2), a leaf every layer may use.
//!
//! Among the three middle layers: the engine's suite and advice map run the [`locks`] and read
//! [`external`]'s lock statistics; the [`locks`] implement the traits of the engine's runner and
//! workloads; [`external`] stands alone.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod cli;
pub mod commands;
pub mod engine;
pub mod external;
pub mod locks;
pub mod usage;
