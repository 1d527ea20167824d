//! `locklab-sim`: one simulated run per invocation, for `locklab predict`.
//!
//! Built with `RUSTFLAGS="--cfg locklab_sim"` (the lab's build script does it, into `target/sim/`),
//! so that locklab's locks run on the simulated machine of `locklab::sim`. Reads one job as JSON on
//! standard input (the machine description, the workload, the lock, threads and times) and writes
//! the run as JSON on standard output: per-thread operations, hand-overs and CPU time, per-core busy
//! time, and the simulator's own counts. The lab turns that into its usual row.

#[cfg(locklab_sim)]
mod job;

#[cfg(locklab_sim)]
fn main() {
    std::process::exit(job::main());
}

#[cfg(not(locklab_sim))]
fn main() {
    eprintln!(
        "locklab-sim: this build has no simulator (build it with RUSTFLAGS=\"--cfg locklab_sim\"; `locklab predict` uses the one the lab's build makes)"
    );
    std::process::exit(2);
}
