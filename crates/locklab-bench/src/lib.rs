//! The locklab lab: every locklab primitive and its peers under the same workloads, side by side, with
//! throughput, scaling, idle CPU, fairness, acquisition-latency percentiles and the machine's physical
//! limit. The binary is `locklab`; the README and `docs/lab.md` describe its commands and output.
//!
//! # Layout, top to bottom (each layer imports only from the layers below it)
//!
//! - `main.rs` and [`cli`]: the top-level parser; each subcommand holds its command's own arguments;
//! - [`commands`]: one module per subcommand (folders for those of several files), each turning its
//!   arguments into its plan and running it; no command calls into another's insides (the default
//!   job alone runs `reproduce` and `report` whole, by their public entry points);
//! - [`engine`]: what the commands share: plans and the suite that runs them, the machine's limits,
//!   the simulator, the advice map, the one noise rule, the output documents, and below them the
//!   runner of one trial with its workloads and calibrated work;
//! - [`external`]: what drives programs outside the lab: the preload runner, the lock statistics,
//!   the program driver and the clean-up of children and scratch files (it imports nothing of the
//!   lab but [`usage`], so the locks' preload adapter finds the library through it too);
//! - [`locks`]: the adapters and the registry of names, on the runner's traits;
//! - [`usage`]: the usage error (exit status 2), a leaf every layer may use.
//!
//! So: commands -> engine / external -> locks -> runner (`engine::runner`, `engine::workload`,
//! `engine::calibrated_work`).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod cli;
pub mod commands;
pub mod engine;
pub mod external;
pub mod locks;
pub mod usage;
