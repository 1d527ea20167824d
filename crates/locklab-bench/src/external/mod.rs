//! What drives programs outside the lab: the preload library and its runner ([`preload`]), the lock
//! statistics those programs write ([`lockstat`]), starting, timing and reaping a program under a
//! lock choice ([`programs`]), and the clean-up of child processes and scratch files ([`cleanup`]).

pub mod cleanup;
pub mod lockstat;
pub mod preload;
pub mod programs;
