//! The subcommands, one module each, named as `main.rs` dispatches them. A command owns its
//! arguments (a clap `Args` struct), turns them into its plan and runs it; what two commands share
//! lives in [`crate::engine`] or [`crate::external`], not in either command.

pub mod advise;
pub mod apps;
pub mod bench;
pub mod calibrate;
pub mod compare;
pub mod default_job;
pub mod list;
pub mod predict;
pub mod report;
pub mod reproduce;
pub mod run;
pub mod torture;
pub mod try_;
