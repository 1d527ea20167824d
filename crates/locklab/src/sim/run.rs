//! A simulation's entry point ([`run`]), what it returns, and how it fails.

use super::Machine;
use super::baton::{CURRENT, pass_baton, turn, wait_for_baton};
use super::engine::{
    Core, DEADLINES, EXPECT, Engine, Lines, PAT, RUN_LOCK, St, Thread, VT, engine,
};
use super::poll::Pattern;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What one virtual thread did: its result and its time.
///
/// ```
/// let r = locklab::sim::run(&locklab::sim::Machine::example(), 2, |t| t * 10).unwrap();
/// assert_eq!(r.threads[1].result, 10);
/// assert_eq!(r.threads[1].core, 1);
/// ```
#[derive(Debug)]
pub struct ThreadRun<R> {
    /// What the thread's body returned.
    pub result: R,
    /// The core it was placed on.
    pub core: usize,
    /// Virtual time it spent running on its core (spinning included), ns.
    pub cpu_ns: f64,
    /// Its clock when it finished, ns.
    pub end_ns: f64,
}

/// A finished simulation.
///
/// ```
/// let r = locklab::sim::run(&locklab::sim::Machine::example(), 3, |_| locklab::sim::work(1_000.0))
///     .unwrap();
/// assert_eq!(r.core_busy_ns.len(), 4); // the machine's cores; the fourth ran nothing
/// assert_eq!(r.core_busy_ns[3], 0.0);
/// ```
#[derive(Debug)]
pub struct Run<R> {
    /// One entry per virtual thread, by index.
    pub threads: Vec<ThreadRun<R>>,
    /// Busy time per core, ns (a core is busy while a thread runs on it, spinning or not, and while it
    /// switches between threads).
    pub core_busy_ns: Vec<f64>,
    /// Operations the simulator ordered (memory accesses, boundaries, futex calls).
    pub events: u64,
    /// Times the baton moved between host threads.
    pub host_switches: u64,
    /// Iterations of polling loops that were not stepped one by one.
    pub elided_iterations: u64,
}

/// Why a simulation failed.
///
/// ```
/// use locklab::sim::{Machine, SimError, run};
/// assert_eq!(run(&Machine::example(), 0, |_| ()).unwrap_err(), SimError::Threads(0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum SimError {
    /// The machine description is invalid.
    Machine(String),
    /// No thread count, or more than the simulator supports.
    Threads(usize),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Machine(e) => write!(f, "machine description: {e}"),
            SimError::Threads(n) => {
                write!(f, "{n} threads: the simulator runs 1 to {MAX_THREADS}")
            }
        }
    }
}

impl std::error::Error for SimError {}

/// The most virtual threads in one run.
///
/// ```
/// let too_many = locklab::sim::MAX_THREADS + 1;
/// assert!(locklab::sim::run(&locklab::sim::Machine::example(), too_many, |_| ()).is_err());
/// ```
pub const MAX_THREADS: usize = 1024;

/// Runs `body(i)` on `threads` virtual threads of `machine` until every body returns.
///
/// A body that panics ends the process (exit status 101, the message on stderr): the other virtual
/// threads would otherwise wait for the baton forever.
///
/// Thread i is placed on core i mod C. The bodies see a virtual clock ([`now`]) and do their
/// private work with [`work`]; every lock they take runs locklab's real code on the simulated
/// memory and scheduler. A body should loop while `now()` is below its end time.
///
/// ```
/// use locklab::sim::{Machine, now, run, work};
/// let m = Machine::example();
/// let lock = locklab::TicketLock::new(0u64);
/// let r = run(&m, 4, |_| {
///     let mut ops = 0u64;
///     while now() < 50_000.0 {
///         *lock.lock() += 1;
///         work(100.0);
///         ops += 1;
///     }
///     ops
/// })
/// .unwrap();
/// let total: u64 = r.threads.iter().map(|t| t.result).sum();
/// assert_eq!(total, *lock.lock());
/// ```
pub fn run<R: Send>(
    machine: &Machine,
    threads: usize,
    body: impl Fn(usize) -> R + Sync,
) -> Result<Run<R>, SimError> {
    machine.validate().map_err(SimError::Machine)?;
    if threads == 0 || threads > MAX_THREADS {
        return Err(SimError::Threads(threads));
    }
    let _one = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let cores = machine.cores();
    *engine() = Some(Engine {
        m: std::sync::Arc::new(machine.clone()),
        threads: (0..threads)
            .map(|i| Thread {
                st: St::Start,
                core: i % cores,
                time: 0.0,
                cpu_ns: 0.0,
                run_start: 0.0,
                elided: 0,
                timed_out: false,
                host: None,
                expect: None,
                recheck: f64::INFINITY,
                look_from: 0.0,
                parks_at: 0.0,
                look_step: 0.0,
                look_extra: 0.0,
            })
            .collect(),
        cores: (0..cores)
            .map(|_| Core {
                running: None,
                queue: VecDeque::new(),
                slice_end: 0.0,
                queued_since: 0.0,
                busy_ns: 0.0,
            })
            .collect(),
        lines: Lines::default(),
        current: usize::MAX,
        horizon: 0.0,
        sleep_seq: 0,
        registered: 0,
        events: 0,
        host_switches: 0,
        elided: 0,
    });
    let body = &body;
    let results: Vec<R> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("sim-{i}"))
                    .spawn_scoped(s, move || {
                        VT.with(|v| v.set(i));
                        PAT.with(|p| *p.borrow_mut() = Pattern::default());
                        DEADLINES.with(|d| d.borrow_mut().clear());
                        EXPECT.with(|x| x.set(None));
                        {
                            let mut g = engine();
                            let e = g.as_mut().expect("simulation running");
                            e.threads[i].host = Some(std::thread::current());
                            e.registered += 1;
                            drop(g);
                            drop(wait_for_baton(i));
                        }
                        // A panic on a virtual thread would keep the baton from every other one
                        // forever: the simulation ends there, with the panic's message.
                        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            body(i)
                        })) {
                            Ok(r) => r,
                            Err(p) => {
                                let msg = p
                                    .downcast_ref::<&str>()
                                    .map(|s| s.to_string())
                                    .or_else(|| p.downcast_ref::<String>().cloned())
                                    .unwrap_or_default();
                                let _ = std::io::Write::write_all(
                                    &mut std::io::stderr(),
                                    format!(
                                        "locklab simulator: virtual thread {i} panicked: {msg}\n"
                                    )
                                    .as_bytes(),
                                );
                                std::process::exit(101);
                            }
                        };
                        finish(i);
                        VT.with(|v| v.set(usize::MAX));
                        r
                    })
                    .expect("spawn a virtual thread")
            })
            .collect();
        // Every host thread is registered before the first is given the baton.
        loop {
            let mut g = engine();
            let e = g.as_mut().expect("simulation running");
            if e.registered == threads {
                for i in 0..threads {
                    e.make_runnable(i, 0.0);
                }
                let first = e.schedule();
                let (_, other) = e.earliest(first);
                e.horizon = other;
                e.host_switches = 0;
                pass_baton(g, first);
                break;
            }
            drop(g);
            std::thread::sleep(Duration::from_micros(200));
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let e = engine().take().expect("simulation running");
    Ok(Run {
        threads: results
            .into_iter()
            .zip(&e.threads)
            .map(|(result, t)| ThreadRun {
                result,
                core: t.core,
                cpu_ns: t.cpu_ns,
                end_ns: t.time,
            })
            .collect(),
        core_busy_ns: e.cores.iter().map(|c| c.busy_ns).collect(),
        events: e.events,
        host_switches: e.host_switches,
        elided_iterations: e.elided,
    })
}

/// The calling virtual thread's body returned: it leaves its core and passes the baton on.
fn finish(me: usize) {
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let t = e.threads[me].time;
    e.leave_core(me, t);
    e.threads[me].st = St::Done;
    if e.threads.iter().all(|t| matches!(t.st, St::Done)) {
        e.current = usize::MAX;
        CURRENT.store(usize::MAX, Ordering::Relaxed);
        return;
    }
    let next = e.schedule();
    let (_, other) = e.earliest(next);
    e.horizon = other;
    pass_baton(g, next);
}
