//! A simulated many-core machine for locklab's own code (`RUSTFLAGS="--cfg locklab_sim"`).
//!
//! Under this cfg the `primitive` layer (every atomic, fence, `pause`, yield),
//! the futex calls of [`sys`](crate::sys) and the clock of the spin budgets go to a deterministic
//! discrete-event simulator instead of the hardware, the way `--cfg loom` sends them to loom. The lock
//! algorithms run unchanged on real threads; only their memory system and their scheduler are
//! simulated.
//!
//! # Execution
//!
//! `run` starts N *virtual threads* (host threads) on the C cores of a [`Machine`]. Exactly one of
//! them runs on the host at any moment: it holds the *baton*. Each virtual thread has a virtual clock;
//! an operation (a memory access, a `pause`, a futex call) may only be performed by the thread whose
//! pending event is the earliest of all (ties: lowest thread index), so every run of the same inputs
//! performs the same operations in the same order and gives the same figures. A thread keeps the
//! baton, without any host switch, for as long as its clock stays at or below the *horizon* (the
//! earliest event of every other thread); otherwise it hands the baton to the earliest thread and
//! parks.
//!
//! # Memory: one coherence state per 64-byte line
//!
//! | line state | load by core c | write (store, RMW, failed CAS) by core c |
//! |---|---|---|
//! | c holds it (shared or owned) | hit: `hit_ns` | owned by c: `hit_ns` (store), `rmw_ns` (RMW, SeqCst store) |
//! | another core owns it | transfer from the owner, owner demoted to shared | invalidate every other copy, c owns it |
//! | only others share it | transfer from the nearest sharer | invalidate every other copy, c owns it |
//! | nobody holds it | `memory_ns` | `memory_ns` |
//!
//! A transfer costs the distance between the cores (`line_node_ns` within a NUMA node,
//! `line_socket_ns` across nodes of a socket, `line_remote_ns` across sockets): the time from a store
//! to a spinning reader on the other core having the new value, invalidation and refetch together
//! (what a ping-pong between two cores measures per one-way trip). A read-modify-write waits for
//! its invalidations: the farthest copy's distance; a plain store does not (store buffer).
//!
//! Probes: with a probe filter ([`Machine::probe_filter`]) a miss asks the holder only, and a write
//! invalidates the one other holder directly; a line two or more others share is invalidated by a
//! probe to every node. Without one, every miss and every invalidation probes every node and
//! completes when the farthest has answered (`line_farthest_ns` at least, on machines of more than
//! one socket).
//!
//! Transactions on one line are serialised at its home: each miss or read-modify-write holds the
//! home for `occupancy` x its latency (1 on the modelled protocols: the home takes the next request
//! for the line only when the requester reports this one done), and the next starts when that ends.
//! This is what makes a lock whose waiters all poll one line (a ticket lock) collapse as cores are
//! added: every release and every new ticket invalidates every waiter's copy, their re-reads queue
//! at the home one whole transfer each, and the next holder waits for its place in that queue.

//! # Polling threads are not stepped
//!
//! A spinner re-reading a line it holds generates no traffic and cannot see anything new until
//! another core writes that line. So when a thread reaches a spin boundary (`boundary`: a `pause`,
//! a backoff of n `pause`s, a yield with nobody else waiting for the core) after an iteration that
//! only read lines it held and read the same values at the same addresses as the iteration before,
//! it is *parked as a poller*: it keeps its core (busy) and is not stepped again until a write
//! invalidates one of the lines it reads, a deadline it registered passes (`note_deadline`, the
//! spin budgets), its bounded spin count runs out, or another thread is queued on its core. The
//! boundary then returns how many iterations the wait stood for, which the bounded spinners
//! (`SpinWait`, `Backoff`) count. Only a loop whose other state depends on neither time nor counts
//! nor memory may be parked this way; every spin loop in locklab is of that kind.
//!
//! # Waiting for a value
//!
//! A parked poller still wakes at every write to its line, to re-read it, and a lock whose waiters
//! all poll one word (the ticket lock) has every waiter woken at every release: with 64 threads,
//! ~150 host switches per acquisition, none of which changes anything but the waiter's time and the
//! line's state. A loop whose only exit is "this 32-bit word holds this value" declares it
//! (`spin_until_eq`; the ticket lock does), and while its thread is stopped in a boundary of that
//! loop the simulator makes the loop's looks itself, at the times the stepped loop would:
//!
//! - a write to a line the parked poller reads schedules a look: at the write's completion if the
//!   poller had parked before the write was issued (as any woken poller resumes), else at its next
//!   look after the write's issue (after a look that saw a change the stepped loop takes two more
//!   looks, one iteration apart, before it parks again);
//! - the look reads the word in memory (the write is done by then: nothing runs between a write's
//!   turn and the write itself); if it holds the value the thread resumes there and pays its load;
//!   if not, the look is charged as that load (the transfer, its place in the line's queue, the core
//!   back among the sharers), counts as one iteration of a bounded spin, and the thread stays
//!   parked;
//! - a thread stopped in a yield of that loop, given its core back while others wait for it, looks
//!   (charged as a load) and, if the value is not there, yields again without running.
//!
//! The same spin loop, declared or not, gives the same run (a test); only the host switches go.
//!
//! # Scheduler
//!
//! Threads are placed on cores round-robin (thread i on core i mod C, as pinned threads would be).
//! A core runs one thread; the others placed on it wait in its FIFO run queue. A running thread is
//! preempted at the end of its time slice (`slice_ns`) if another waits; a yield moves it to the
//! back of the queue at once. A futex wait costs `syscall_ns` and takes the thread off its core (the
//! next queued thread starts after `ctx_switch_ns`; with none, the core idles); a futex wake costs
//! the waker `futex_wake_ns` and makes the sleeper runnable `wakeup_ns` later. Each core's busy and
//! idle time is accounted, so sleeping locks' idle share is predicted too.
//!
//! # What is not modelled
//!
//! Prefetchers, SMT siblings, frequency scaling, store-buffer forwarding beyond "a plain store costs
//! the storer a hit", the real kernel's scheduler (load balancing, wake-up placement, preemption of a
//! lock holder by a woken thread), interrupts. See `docs/design/predict.md`.
//!
//! # Layout
//!
//! The machine description ([`machine`]) and the runner's protocol ([`job`]: what the lab's
//! `predict` sends the `locklab-sim` runner and reads back, and the locks it runs) are plain data
//! and build everywhere. The simulator itself builds only under the cfg: the engine's state and
//! memory model (`engine`), the baton (`baton`), the hooks the primitive layer calls (`hooks`), the
//! polling detector (`poll`), the entry point `run` (`run`), and the simulated atomics
//! (`atomic`).

#![allow(clippy::float_cmp)]

pub mod job;
pub mod machine;
pub use machine::{MAX_CORES, Machine};

#[cfg(locklab_sim)]
pub mod atomic;
#[cfg(locklab_sim)]
mod baton;
#[cfg(locklab_sim)]
mod engine;
#[cfg(locklab_sim)]
mod hooks;
#[cfg(locklab_sim)]
mod poll;
#[cfg(locklab_sim)]
mod run;

#[cfg(locklab_sim)]
pub(crate) use engine::Access;
#[cfg(locklab_sim)]
pub(crate) use hooks::{
    Boundary, boundary, current_core, fence, futex_wait, futex_wake, loaded, machine_cores, mem,
    note_deadline,
};
#[cfg(locklab_sim)]
pub use hooks::{SpinUntil, now, pause, peek, spin_until_eq, work};
#[cfg(locklab_sim)]
pub use run::{MAX_THREADS, Run, SimError, ThreadRun, run};
