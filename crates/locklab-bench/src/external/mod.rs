//! What drives programs outside the lab: the preload library's names and statistics schema
//! ([`choices`], [`stat_schema`], its own files), its runner ([`preload`]), the lock
//! statistics those programs write ([`lockstat`]), starting, timing and reaping a program under a
//! lock choice ([`programs`]), and the clean-up of child processes and scratch files ([`cleanup`]).

/// The preload library's choice names, their aliases and the names of its statistics file: the
/// library's own `choices.rs`, compiled here as a module of the lab. Not a dependency on the library:
/// linking it would bring its exported `pthread_mutex_lock` and the rest into the lab, in place of
/// glibc's.
#[path = "../../../locklab-pthread/src/choices.rs"]
pub mod choices;
/// The preload library's statistics file's field names ([`lockstat`] reads that file), compiled
/// here the same way.
#[path = "../../../locklab-pthread/src/stat/schema.rs"]
pub mod stat_schema;

pub mod cleanup;
pub mod lockstat;
pub mod preload;
pub mod programs;
