//! A simulated many-core machine for locklab's own code (`RUSTFLAGS="--cfg locklab_sim"`).
//!
//! Under this cfg the [`primitive`](crate::primitive) layer (every atomic, fence, `pause`, yield),
//! the futex calls of [`sys`](crate::sys) and the clock of the spin budgets go to a deterministic
//! discrete-event simulator instead of the hardware, the way `--cfg loom` sends them to loom. The lock
//! algorithms run unchanged on real threads; only their memory system and their scheduler are
//! simulated.
//!
//! # Execution
//!
//! [`run`] starts N *virtual threads* (host threads) on the C cores of a [`Machine`]. Exactly one of
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
//! another core writes that line. So when a thread reaches a spin boundary ([`boundary`]: a `pause`,
//! a backoff of n `pause`s, a yield with nobody else waiting for the core) after an iteration that
//! only read lines it held and read the same values at the same addresses as the iteration before,
//! it is *parked as a poller*: it keeps its core (busy) and is not stepped again until a write
//! invalidates one of the lines it reads, a deadline it registered passes ([`note_deadline`], the
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
//! ([`spin_until_eq`]; the ticket lock does), and while its thread is stopped in a boundary of that
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

#![allow(clippy::float_cmp)]

pub mod atomic;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A machine description: topology and costs, in nanoseconds.
///
/// ```
/// let m = locklab::sim::Machine::example();
/// assert!(m.validate().is_ok());
/// assert_eq!(m.cores(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Machine {
    /// Sockets.
    pub sockets: usize,
    /// NUMA nodes (dies) per socket.
    pub nodes_per_socket: usize,
    /// Cores per node.
    pub cores_per_node: usize,
    /// A load or store that hits in the core's own cache.
    pub hit_ns: f64,
    /// An atomic read-modify-write (or SeqCst store) on a line the core owns.
    pub rmw_ns: f64,
    /// A full fence.
    pub fence_ns: f64,
    /// One `pause` (spin-loop hint) with the loop around it.
    pub pause_ns: f64,
    /// A line transfer between two cores of one node.
    pub line_node_ns: f64,
    /// A line transfer between nodes of one socket.
    pub line_socket_ns: f64,
    /// A line transfer between sockets (the mean over the sockets' distances).
    pub line_remote_ns: f64,
    /// A line transfer between the two sockets farthest apart: what a probe broadcast to every
    /// node waits for (machines of more than one socket).
    pub line_farthest_ns: f64,
    /// A line nobody caches, from memory.
    pub memory_ns: f64,
    /// The share of a transaction's latency during which the line's home serves no other request
    /// for that line (1: the home holds later requests until the requester reports the transaction
    /// done, as AMD's HyperTransport protocol and directory protocols do).
    pub occupancy: f64,
    /// Whether the home knows which cores hold a line (a probe filter or directory). Without one,
    /// every miss and every write to a shared line probes every node and completes when the
    /// farthest has answered. With one, a miss probes only the owner; a write to a line two or more
    /// other cores share still probes every node (AMD's probe filter keeps no set of sharers).
    pub probe_filter: bool,
    /// A system call that does little (a futex wait that sleeps, before it sleeps).
    pub syscall_ns: f64,
    /// The waker's cost of a futex wake that wakes someone.
    pub futex_wake_ns: f64,
    /// From a futex wake until the woken thread runs (on an idle core).
    pub wakeup_ns: f64,
    /// A context switch between two threads of one core.
    pub ctx_switch_ns: f64,
    /// A `sched_yield` with nobody else waiting for the core.
    pub yield_ns: f64,
    /// A reading of the clock.
    pub clock_ns: f64,
    /// The scheduler's time slice.
    pub slice_ns: f64,
}

impl Machine {
    /// A small 2-socket, 4-core machine with round numbers (documentation and tests).
    ///
    /// ```
    /// let m = locklab::sim::Machine::example();
    /// assert_eq!((m.sockets, m.cores_per_node), (2, 2));
    /// ```
    pub fn example() -> Machine {
        Machine {
            sockets: 2,
            nodes_per_socket: 1,
            cores_per_node: 2,
            hit_ns: 1.0,
            rmw_ns: 8.0,
            fence_ns: 15.0,
            pause_ns: 10.0,
            line_node_ns: 50.0,
            line_socket_ns: 80.0,
            line_remote_ns: 120.0,
            line_farthest_ns: 120.0,
            memory_ns: 90.0,
            occupancy: 1.0,
            probe_filter: true,
            syscall_ns: 150.0,
            futex_wake_ns: 1_500.0,
            wakeup_ns: 4_000.0,
            ctx_switch_ns: 1_500.0,
            yield_ns: 300.0,
            clock_ns: 20.0,
            slice_ns: 3_000_000.0,
        }
    }

    /// Cores in all.
    ///
    /// ```
    /// let mut m = locklab::sim::Machine::example();
    /// m.nodes_per_socket = 3;
    /// assert_eq!(m.cores(), 2 * 3 * 2);
    /// ```
    pub fn cores(&self) -> usize {
        self.sockets * self.nodes_per_socket * self.cores_per_node
    }

    /// Checks the description: at least one core, at most 128, every cost finite and >= 0, a positive
    /// slice; the error names the field.
    ///
    /// ```
    /// let mut m = locklab::sim::Machine::example();
    /// m.wakeup_ns = f64::NAN;
    /// assert!(m.validate().unwrap_err().contains("wakeup_ns"));
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        let cores = self.cores();
        if cores == 0 || cores > MAX_CORES {
            return Err(format!(
                "the machine has {cores} cores (sockets x nodes_per_socket x cores_per_node); 1 to {MAX_CORES} are supported"
            ));
        }
        let costs = [
            ("hit_ns", self.hit_ns),
            ("rmw_ns", self.rmw_ns),
            ("fence_ns", self.fence_ns),
            ("pause_ns", self.pause_ns),
            ("line_node_ns", self.line_node_ns),
            ("line_socket_ns", self.line_socket_ns),
            ("line_remote_ns", self.line_remote_ns),
            ("line_farthest_ns", self.line_farthest_ns),
            ("memory_ns", self.memory_ns),
            ("occupancy", self.occupancy),
            ("syscall_ns", self.syscall_ns),
            ("futex_wake_ns", self.futex_wake_ns),
            ("wakeup_ns", self.wakeup_ns),
            ("ctx_switch_ns", self.ctx_switch_ns),
            ("yield_ns", self.yield_ns),
            ("clock_ns", self.clock_ns),
            ("slice_ns", self.slice_ns),
        ];
        for (name, v) in costs {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("`{name}` must be a finite number >= 0 (got {v})"));
            }
        }
        if self.occupancy > 1.0 {
            return Err(format!(
                "`occupancy` is a share of a transfer, 0 to 1 (got {})",
                self.occupancy
            ));
        }
        if self.pause_ns <= 0.0 || self.slice_ns <= 0.0 {
            return Err("`pause_ns` and `slice_ns` must be above 0".into());
        }
        Ok(())
    }

    fn node_of(&self, core: usize) -> usize {
        core / self.cores_per_node
    }

    fn socket_of(&self, core: usize) -> usize {
        core / (self.cores_per_node * self.nodes_per_socket)
    }

    /// The farthest any core is from any other: what a probe broadcast to every node waits for (the
    /// machine is symmetric: every core has cores at each distance its topology has).
    fn farthest(&self) -> f64 {
        let mut far: f64 = 0.0;
        if self.cores_per_node > 1 {
            far = far.max(self.line_node_ns);
        }
        if self.nodes_per_socket > 1 {
            far = far.max(self.line_socket_ns);
        }
        if self.sockets > 1 {
            far = far.max(self.line_remote_ns).max(self.line_farthest_ns);
        }
        far
    }

    /// The latency of a line transfer between two cores.
    fn distance(&self, a: usize, b: usize) -> f64 {
        if self.node_of(a) == self.node_of(b) {
            self.line_node_ns
        } else if self.socket_of(a) == self.socket_of(b) {
            self.line_socket_ns
        } else {
            self.line_remote_ns
        }
    }
}

/// The most cores a machine description may have (a line's sharers are one `u128`).
///
/// ```
/// assert_eq!(locklab::sim::MAX_CORES, 128);
/// ```
pub const MAX_CORES: usize = 128;

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

// ---------------------------------------------------------------------------------------------
// Engine state

#[derive(Debug)]
enum St {
    /// Spawned, not yet given a core.
    Start,
    /// On its core, its next operation pending at `time`.
    Running,
    /// On its core, spinning without being stepped (see the module docs).
    Polling {
        since: f64,
        cost: f64,
        until: f64,
        yields: bool,
        watch: Vec<u64>,
    },
    /// Runnable, in its core's queue.
    Queued,
    /// In a futex wait on `addr` (FIFO by `seq`), until `until` (infinite: no timeout).
    Sleeping { addr: usize, until: f64, seq: u64 },
    /// Woken (or timed out): runnable from `at`.
    Waking { at: f64 },
    /// Its body returned.
    Done,
}

struct Thread {
    st: St,
    core: usize,
    time: f64,
    cpu_ns: f64,
    run_start: f64,
    /// Iterations the last poll stood for (read by the thread when it resumes).
    elided: u64,
    timed_out: bool,
    host: Option<std::thread::Thread>,
    /// The exit condition of the spin loop the thread is stopped in (set only while its host thread
    /// waits inside a boundary: see "Waiting for a value" in the module docs).
    expect: Option<Expect>,
    /// When a write to a line it polls asks for its exit condition to be tested (infinite: none).
    recheck: f64,
    /// A declared poller (see `expect`) after a look that found the value changed but not the one it
    /// waits for: the stepped loop would look again here and once more an iteration later, and park
    /// only at `parks_at` (when two looks in a row agree); a write before that is seen at the first
    /// of these looks after it (or the one after them), a later one when it happens.
    look_from: f64,
    parks_at: f64,
    /// The step (`pause`s or yield) between a declared poller's looks.
    look_step: f64,
    /// How much longer than iterations of the parked loop its looks took since it parked.
    look_extra: f64,
}

/// A spin loop's exit condition: the 32-bit word at `addr` equals `want`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expect {
    addr: usize,
    want: u32,
}

impl Expect {
    /// Whether the loop would end now.
    fn met(&self) -> bool {
        // SAFETY: set by `spin_until_eq` from a live `&AtomicU32` whose guard (borrowing it, and
        // never leaked: that function's contract) is in force while the thread that set it is
        // stopped in a step after loading it: the only time this is called.
        let v = unsafe {
            (*(self.addr as *const core::sync::atomic::AtomicU32)).load(Ordering::Relaxed)
        };
        v == self.want
    }
}

impl Thread {
    /// A declared poller's time between looks: its iteration's cost.
    fn look_every(&self) -> f64 {
        match self.st {
            St::Polling { cost, .. } => cost,
            _ => f64::INFINITY,
        }
    }
}

struct Core {
    running: Option<usize>,
    queue: VecDeque<usize>,
    /// When the running thread's slice ends.
    slice_end: f64,
    /// When the queue last became non-empty.
    queued_since: f64,
    busy_ns: f64,
}

#[derive(Clone, Copy)]
struct Line {
    owner: Option<u8>,
    sharers: u128,
    busy_until: f64,
}

/// Identity hash for line numbers (already spread enough after a multiply).
#[derive(Default)]
struct LineHasher(u64);

impl std::hash::Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Lines = HashMap<u64, Line, std::hash::BuildHasherDefault<LineHasher>>;

struct Engine {
    m: Machine,
    threads: Vec<Thread>,
    cores: Vec<Core>,
    lines: Lines,
    /// The thread holding the baton.
    current: usize,
    /// The earliest event of any thread but `current` (valid while `current` holds the baton).
    horizon: f64,
    sleep_seq: u64,
    registered: usize,
    events: u64,
    host_switches: u64,
    elided: u64,
}

/// Kinds of memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Load,
    Store,
    /// A SeqCst store (an `xchg` on x86) or a read-modify-write, failed compare-exchanges included
    /// (they take the line exclusive too).
    Rmw,
}

static ENGINE: Mutex<Option<Engine>> = Mutex::new(None);
/// One simulation at a time per process.
static RUN_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// This host thread's virtual thread index, `usize::MAX` for a thread outside the simulation.
    static VT: Cell<usize> = const { Cell::new(usize::MAX) };
    static PAT: RefCell<Pattern> = RefCell::new(Pattern::default());
    static DEADLINES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static EXPECT: Cell<Option<Expect>> = const { Cell::new(None) };
}

/// Whether the calling thread is a virtual thread of a running simulation.
#[inline]
pub(crate) fn virtual_thread() -> Option<usize> {
    let v = VT.with(|v| v.get());
    (v != usize::MAX).then_some(v)
}

fn engine() -> std::sync::MutexGuard<'static, Option<Engine>> {
    // A panic while the engine lock is held can only come from the simulator itself (the lock code
    // never runs under it); its state is still the last consistent one.
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Engine {
    /// The time of thread `i`'s next event, if it has one.
    fn event_time(&self, i: usize) -> Option<f64> {
        let t = &self.threads[i];
        match &t.st {
            St::Running => Some(t.time),
            St::Polling {
                since,
                until,
                yields,
                ..
            } => {
                let c = &self.cores[t.core];
                let mut at = until.min(t.recheck);
                if !c.queue.is_empty() {
                    let pre = if *yields { c.queued_since } else { c.slice_end };
                    at = at.min(pre.max(*since));
                }
                Some(at)
            }
            St::Sleeping { until, .. } if until.is_finite() => Some(*until),
            St::Waking { at } => Some(*at),
            _ => None,
        }
    }

    /// The thread with the earliest event (ties: lowest index), and the earliest event of any other.
    fn earliest(&self, skip: usize) -> (Option<(f64, usize)>, f64) {
        let mut best: Option<(f64, usize)> = None;
        let mut other = f64::INFINITY;
        for i in 0..self.threads.len() {
            if let Some(t) = self.event_time(i).filter(|t| t.is_finite()) {
                if best.is_none_or(|(bt, _)| t < bt) {
                    best = Some((t, i));
                }
                if i != skip && t < other {
                    other = t;
                }
            }
        }
        (best, other)
    }

    fn lower_horizon(&mut self, t: f64) {
        if t < self.horizon {
            self.horizon = t;
        }
    }

    /// Puts `i` on its core at `t`, running.
    fn start_on_core(&mut self, i: usize, t: f64) {
        let c = self.threads[i].core;
        self.cores[c].running = Some(i);
        self.cores[c].slice_end = t + self.m.slice_ns;
        let th = &mut self.threads[i];
        th.st = St::Running;
        th.time = t;
        th.run_start = t;
    }

    /// `i` leaves its core at `t` (it sleeps, ends, yields or is preempted); the next queued thread
    /// starts after a context switch.
    fn leave_core(&mut self, i: usize, t: f64) {
        let c = self.threads[i].core;
        let ran = t - self.threads[i].run_start;
        self.threads[i].cpu_ns += ran;
        self.cores[c].busy_ns += ran;
        self.cores[c].running = None;
        if let Some(next) = self.cores[c].queue.pop_front() {
            if !self.cores[c].queue.is_empty() {
                self.cores[c].queued_since = t;
            }
            // The switch itself keeps the core busy (kernel time), charged to no thread.
            self.cores[c].busy_ns += self.m.ctx_switch_ns;
            self.start_on_core(next, t + self.m.ctx_switch_ns);
        }
    }

    /// `i` becomes runnable at `t`: it runs at once on an idle core, else waits in the queue.
    fn make_runnable(&mut self, i: usize, t: f64) {
        let c = self.threads[i].core;
        if self.cores[c].running.is_none() {
            self.start_on_core(i, t);
        } else {
            if self.cores[c].queue.is_empty() {
                self.cores[c].queued_since = t;
            }
            self.cores[c].queue.push_back(i);
            self.threads[i].st = St::Queued;
        }
        self.lower_horizon(t);
    }

    /// Moves `i` (running at its time) behind the threads queued on its core.
    fn requeue(&mut self, i: usize) {
        let t = self.threads[i].time;
        self.leave_core(i, t);
        let c = self.threads[i].core;
        if self.cores[c].queue.is_empty() {
            self.cores[c].queued_since = t;
        }
        self.cores[c].queue.push_back(i);
        self.threads[i].st = St::Queued;
    }

    fn preempt_due(&self, i: usize) -> bool {
        let t = &self.threads[i];
        let c = &self.cores[t.core];
        !c.queue.is_empty() && t.time >= c.slice_end
    }

    /// Wakes poller `p` at `t`: it resumes, counting the iterations its wait stood for.
    fn resume_poller(&mut self, p: usize, t: f64) {
        if let St::Polling { since, cost, .. } = self.threads[p].st {
            let at = t.max(since);
            // A declared poller's looks count one iteration each, whatever they took.
            let n = ((at - since - self.threads[p].look_extra).max(0.0) / cost) as u64;
            self.elided += n;
            let th = &mut self.threads[p];
            th.elided = n;
            th.time = at;
            th.st = St::Running;
            th.expect = None;
            th.recheck = f64::INFINITY;
            self.lower_horizon(at);
        }
    }

    /// Declared waiter `i`, on its core at `t` while others wait for the core and its value not
    /// there, makes one look (charged as the load) and yields, without running.
    fn look_then_yield(&mut self, i: usize, x: Expect, t: f64) {
        let core = self.threads[i].core;
        let (cost, _) = self.access(core, x.addr, Access::Load, t);
        let th = &mut self.threads[i];
        th.time = t + cost + self.m.yield_ns;
        th.recheck = f64::INFINITY;
        th.st = St::Running;
        self.requeue(i);
        self.elided += 1;
    }

    /// Processes every event before the earliest pending operation; returns the thread whose
    /// operation that is. Exits the process if no thread can ever run again (a lost wake-up: a bug
    /// this simulator exists to show, reported with every thread's state).
    fn schedule(&mut self) -> usize {
        loop {
            let (best, _) = self.earliest(usize::MAX);
            let Some((t, i)) = best else {
                self.deadlock();
            };
            match self.threads[i].st {
                St::Running => {
                    if self.preempt_due(i) {
                        self.requeue(i);
                        continue;
                    }
                    if let Some(x) = self.threads[i].expect {
                        let core = self.threads[i].core;
                        if !x.met() && !self.cores[core].queue.is_empty() {
                            // Back on its core inside a yield: one more look, then the next yield.
                            self.look_then_yield(i, x, t);
                            continue;
                        }
                        self.threads[i].expect = None;
                    }
                    return i;
                }
                St::Polling { yields, until, .. } => {
                    if let Some(x) = self.threads[i].expect {
                        let core = self.threads[i].core;
                        if self.threads[i].recheck <= t {
                            // A write reached a line it polls: the written value is in memory by
                            // now (no operation runs between a write's turn and the write).
                            self.threads[i].recheck = f64::INFINITY;
                            if x.met() {
                                self.resume_poller(i, t);
                            } else {
                                // It looks, pays the transfer, takes its step, and polls on.
                                let (took, _) = self.access(core, x.addr, Access::Load, t);
                                let th = &mut self.threads[i];
                                th.look_from = t + took + th.look_step;
                                th.parks_at = th.look_from + th.look_every() + self.m.hit_ns;
                                // The look is one iteration of a bounded spin, however long its
                                // transfer: the bound moves on by the difference.
                                if let St::Polling { cost, until, .. } = &mut th.st {
                                    let extra = (took + th.look_step - *cost).max(0.0);
                                    th.look_extra += extra;
                                    *until += extra;
                                }
                            }
                            continue;
                        }
                        if yields && t < until && !x.met() {
                            // Its core is wanted: one more look, then the yield.
                            self.look_then_yield(i, x, t);
                            continue;
                        }
                    }
                    self.resume_poller(i, t)
                }
                St::Sleeping { .. } => {
                    self.threads[i].timed_out = true;
                    self.threads[i].st = St::Waking { at: t };
                }
                St::Waking { at } => self.make_runnable(i, at),
                _ => unreachable!("no event for this state"),
            }
        }
    }

    fn deadlock(&self) -> ! {
        let states: Vec<String> = self
            .threads
            .iter()
            .enumerate()
            .filter(|(_, t)| !matches!(t.st, St::Done))
            .map(|(i, t)| format!("thread {i} at {:.0} ns: {:?}", t.time, t.st))
            .collect();
        eprintln!(
            "locklab simulator: no thread can run again (a lost wake-up or a thread waiting for itself):\n  {}",
            states.join("\n  ")
        );
        std::process::exit(3)
    }

    /// The cost of `core`'s access to `addr`'s line at time `t`, and whether it hit; updates the
    /// line and wakes the pollers whose copies it invalidates.
    fn access(&mut self, core: usize, addr: usize, kind: Access, t: f64) -> (f64, bool) {
        let m = self.m;
        let me = 1u128 << core;
        let key = (addr >> 6) as u64;
        let line = self.lines.entry(key).or_insert(Line {
            owner: None,
            sharers: 0,
            busy_until: 0.0,
        });
        let nearest = |set: u128| -> f64 {
            let mut d = f64::INFINITY;
            let mut s = set;
            while s != 0 {
                let c = s.trailing_zeros() as usize;
                d = d.min(m.distance(core, c));
                s &= s - 1;
            }
            d
        };
        let farthest = |set: u128| -> f64 {
            let mut d: f64 = 0.0;
            let mut s = set;
            while s != 0 {
                let c = s.trailing_zeros() as usize;
                d = d.max(m.distance(core, c));
                s &= s - 1;
            }
            d
        };
        match kind {
            Access::Load => {
                if line.sharers & me != 0 {
                    return (m.hit_ns, true);
                }
                let source = match line.owner {
                    Some(o) => m.distance(core, o as usize),
                    None if line.sharers != 0 => nearest(line.sharers),
                    None => m.memory_ns,
                };
                // Without a probe filter every node is probed and the miss completes when the
                // farthest has answered, wherever the data comes from.
                let lat = if m.probe_filter {
                    source
                } else {
                    source.max(m.farthest())
                };
                // The home takes one request for the line at a time: this one waits for those
                // before it and holds the line for its own share.
                let start = t.max(line.busy_until);
                line.busy_until = start + lat * m.occupancy;
                line.owner = None;
                line.sharers |= me;
                (start - t + lat, false)
            }
            Access::Store | Access::Rmw => {
                let op = if kind == Access::Rmw {
                    m.rmw_ns
                } else {
                    m.hit_ns
                };
                if line.owner == Some(core as u8) {
                    return (op, true);
                }
                let others = line.sharers & !me;
                if others == 0 {
                    // Shared by us alone (exclusive, clean): a silent upgrade. Nobody's: from memory
                    // (after every node's probe answer, without a probe filter).
                    let lat = if line.sharers & me != 0 {
                        0.0
                    } else if m.probe_filter {
                        m.memory_ns
                    } else {
                        m.memory_ns.max(m.farthest())
                    };
                    line.owner = Some(core as u8);
                    line.sharers = me;
                    return (lat + op, lat == 0.0);
                }
                // The invalidations: to the one other holder if the home knows it (a probe filter
                // tracks an owner or a single sharer), else to every node, the farthest answering
                // last.
                let lat = if m.probe_filter && others.count_ones() == 1 {
                    farthest(others)
                } else {
                    farthest(others).max(m.farthest())
                };
                let start = t.max(line.busy_until);
                // A read-modify-write moves the line (data and ownership) and holds its home; a
                // plain store's invalidations do not hold up the re-read a reader then asks for
                // (a transfer's latency is the two together: what a ping-pong measures, one way).
                if kind == Access::Rmw {
                    line.busy_until = start + lat * m.occupancy;
                }
                line.owner = Some(core as u8);
                line.sharers = me;
                // A poller on one of the invalidated cores reading this line resumes when the write
                // is performed; its next load misses and pays the transfer. (A transfer's latency is
                // what a store takes to reach a spinning reader, invalidation and refetch together:
                // what the calibration's ping-pong measures.)
                let mut s = others;
                while s != 0 {
                    let c = s.trailing_zeros() as usize;
                    s &= s - 1;
                    if let Some(p) = self.cores[c].running
                        && let St::Polling { watch, .. } = &self.threads[p].st
                        && watch.contains(&key)
                    {
                        if self.threads[p].expect.is_some() {
                            // Parked, it resumes when the write is performed, as any poller;
                            // still looking (see `look_from`), its copy is gone from the write's
                            // issue on, and its next look sees it.
                            let th = &self.threads[p];
                            let at = if t >= th.parks_at {
                                start
                            } else {
                                let every = th.look_every();
                                th.look_from + ((t - th.look_from).max(0.0) / every).ceil() * every
                            };
                            self.threads[p].recheck = self.threads[p].recheck.min(at);
                            self.lower_horizon(at);
                        } else {
                            self.resume_poller(p, start);
                        }
                    }
                }
                // A plain store retires into the store buffer: the storer goes on; an RMW waits for
                // the line.
                let cost = if kind == Access::Store {
                    m.hit_ns
                } else {
                    start - t + lat + op
                };
                (cost, false)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The baton

/// The thread holding the baton (also `Engine::current`), read without the engine's lock by the
/// threads waiting for it.
static CURRENT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Waits (parked) until thread `me` holds the baton again; returns with the engine locked.
fn wait_for_baton(me: usize) -> std::sync::MutexGuard<'static, Option<Engine>> {
    // Acquire pairs with the Release store in `pass_baton`: the engine's state as its last holder
    // left it (the engine's mutex orders it too; this is the wake-up's own edge).
    while CURRENT.load(Ordering::Acquire) != me {
        std::thread::park();
    }
    engine()
}

/// Gives the baton to `next` and wakes its host thread, with the engine unlocked first (a woken
/// thread that preempts its waker must not find the engine's lock held).
fn pass_baton(mut g: std::sync::MutexGuard<'static, Option<Engine>>, next: usize) {
    let e = g.as_mut().expect("simulation running");
    e.current = next;
    e.host_switches += 1;
    let host = e.threads[next].host.clone();
    // Release: see `wait_for_baton`.
    CURRENT.store(next, Ordering::Release);
    drop(g);
    if let Some(h) = host {
        h.unpark();
    }
}

/// Hands the baton to `next` (which must be Running) and, unless it is `me`, waits for it back.
fn hand_to(
    g: std::sync::MutexGuard<'static, Option<Engine>>,
    me: usize,
    next: usize,
) -> std::sync::MutexGuard<'static, Option<Engine>> {
    let mut g = if next != me {
        pass_baton(g, next);
        wait_for_baton(me)
    } else {
        g
    };
    let e = g.as_mut().expect("simulation running");
    let (_, other) = e.earliest(me);
    e.horizon = other;
    g
}

/// Blocks the calling virtual thread until its pending operation is the earliest of all; returns
/// with the engine locked and the baton held.
fn turn(me: usize) -> std::sync::MutexGuard<'static, Option<Engine>> {
    let mut g = engine();
    let e = g.as_mut().expect("simulation running");
    e.events += 1;
    if e.threads[me].time <= e.horizon && !e.preempt_due(me) {
        return g;
    }
    let next = e.schedule();
    hand_to(g, me, next)
}

// ---------------------------------------------------------------------------------------------
// The hooks the primitive layer calls

/// A memory access by the calling thread: waits for its turn, charges the access. Returns whether it
/// hit (for the polling detector). Outside a simulation: nothing.
#[inline]
pub(crate) fn mem(addr: usize, kind: Access) {
    let Some(me) = virtual_thread() else { return };
    let hit = {
        let mut g = turn(me);
        let e = g.as_mut().expect("simulation running");
        let t = e.threads[me].time;
        let core = e.threads[me].core;
        let (cost, hit) = e.access(core, addr, kind, t);
        e.threads[me].time = t + cost;
        hit
    };
    PAT.with(|p| p.borrow_mut().op(kind, hit));
}

/// Records the value a load returned (the polling detector compares iterations by address and value).
#[inline]
pub(crate) fn loaded(addr: usize, value: u64) {
    if virtual_thread().is_none() {
        return;
    }
    PAT.with(|p| p.borrow_mut().loaded(addr, value));
}

/// A fence: a full one costs `fence_ns`.
#[inline]
pub(crate) fn fence(seq_cst: bool) {
    let Some(me) = virtual_thread() else { return };
    if !seq_cst {
        return;
    }
    {
        let mut g = turn(me);
        let e = g.as_mut().expect("simulation running");
        e.threads[me].time += e.m.fence_ns;
    }
    PAT.with(|p| p.borrow_mut().impure());
}

/// Spin-boundary kinds, for [`boundary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// `n` `pause`s.
    Pause(u32),
    /// `sched_yield`.
    Yield,
}

/// One step of a busy-wait: `Pause(n)` costs n `pause`s, `Yield` gives the core to the next queued
/// thread (or costs `yield_ns` when none waits). If the iteration that ended here only re-read, as
/// hits, what the one before read, the thread is parked as a poller (module docs) for at most
/// `max_iters` iterations. Returns how many iterations this call stood for (1 without a park; at
/// most `max_iters`). Outside a simulation: the real `pause` or yield, 1.
pub(crate) fn boundary(kind: Boundary, max_iters: u64) -> u64 {
    let Some(me) = virtual_thread() else {
        match kind {
            Boundary::Pause(n) => (0..n).for_each(|_| core::hint::spin_loop()),
            Boundary::Yield => std::thread::yield_now(),
        }
        return 1;
    };
    let sig = match kind {
        Boundary::Pause(n) => n as u64,
        Boundary::Yield => u64::MAX,
    };
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let now = e.threads[me].time;
    let core = e.threads[me].core;
    let queued = !e.cores[core].queue.is_empty();
    if kind == Boundary::Yield && queued {
        // A real yield: the next queued thread runs.
        e.threads[me].time = now + e.m.yield_ns;
        e.requeue(me);
        // Only in the declared loop: its last look was at the declared word.
        e.threads[me].expect = EXPECT
            .with(|x| x.get())
            .filter(|x| PAT.with(|p| p.borrow().cur.iter().any(|&(a, _)| a == x.addr)));
        let next = e.schedule();
        let mut g = hand_to(g, me, next);
        let e = g.as_mut().expect("simulation running");
        e.threads[me].expect = None;
        e.threads[me].recheck = f64::INFINITY;
        drop(g);
        PAT.with(|p| p.borrow_mut().impure());
        return 1;
    }
    let poll = PAT.with(|p| p.borrow_mut().boundary(sig, now));
    let step = match kind {
        Boundary::Pause(n) => e.m.pause_ns * n as f64,
        Boundary::Yield => e.m.yield_ns,
    };
    // Park only on lines still held: a write between the last load and this boundary has already
    // invalidated the copy, and the next look would see it.
    if let Some((cost, watch)) = poll
        && max_iters > 1
        && watch.iter().all(|l| {
            e.lines
                .get(l)
                .is_some_and(|line| line.sharers & (1u128 << core) != 0)
        })
    {
        let cost = cost.max(step).max(1e-3);
        let mut until = if max_iters == u64::MAX {
            f64::INFINITY
        } else {
            now + cost * (max_iters - 1) as f64
        };
        DEADLINES.with(|d| {
            let mut d = d.borrow_mut();
            d.retain(|&x| x > now);
            if let Some(first) = d.iter().copied().reduce(f64::min) {
                until = until.min(first);
            }
        });
        if until > now {
            e.threads[me].recheck = f64::INFINITY;
            e.threads[me].look_from = now;
            e.threads[me].parks_at = now;
            e.threads[me].look_step = step;
            e.threads[me].look_extra = 0.0;
            e.threads[me].expect = EXPECT
                .with(|x| x.get())
                .filter(|x| watch.contains(&((x.addr >> 6) as u64)));
            e.threads[me].st = St::Polling {
                since: now,
                cost,
                until,
                yields: kind == Boundary::Yield,
                watch,
            };
            let next = e.schedule();
            let mut g = hand_to(g, me, next);
            let e = g.as_mut().expect("simulation running");
            e.threads[me].expect = None;
            e.threads[me].recheck = f64::INFINITY;
            let n = std::mem::take(&mut e.threads[me].elided);
            return (n + 1).min(max_iters);
        }
    }
    e.threads[me].time = now + step;
    1
}

/// A spin-loop hint for code run on the simulator (a `pause`; a polling loop around it is parked
/// like the library's own). Outside a simulation: `core::hint::spin_loop`.
///
/// ```
/// locklab::sim::pause();
/// ```
pub fn pause() {
    boundary(Boundary::Pause(1), u64::MAX);
}

/// Declares the exit condition of the spin loop the calling virtual thread is about to run: the loop
/// ends when `word` holds `want`, and between its looks it only takes spin steps ([`pause`], the
/// library's bounded spinning), whose course nothing else it reads changes. While the
/// returned guard lives, a write to the word's line tests the condition inside the simulator, and
/// the thread is run only once it holds (see "Waiting for a value" in the module docs). Outside a
/// simulation: nothing.
///
/// A wrong declaration makes a wrong simulation (a thread that is never run again ends the run as
/// a lost wake-up), not unsound code.
///
/// # Safety
///
/// The guard must be dropped, not leaked (`mem::forget`): while it is in force the simulator reads
/// the word's address whenever the thread stops in a spin step after loading it, and the borrow
/// keeps the word alive only as long as the guard is.
///
/// ```
/// use locklab::sim::atomic::{AtomicU32, Ordering};
/// let served = AtomicU32::new(0);
/// let my_turn = 0;
/// // SAFETY: the guard is dropped at the end of this scope.
/// let _until = unsafe { locklab::sim::spin_until_eq(&served, my_turn) };
/// while served.load(Ordering::Acquire) != my_turn {
///     locklab::sim::pause();
/// }
/// ```
pub unsafe fn spin_until_eq(word: &atomic::AtomicU32, want: u32) -> SpinUntil<'_> {
    if virtual_thread().is_some() {
        let addr = word as *const atomic::AtomicU32 as usize;
        EXPECT.with(|x| x.set(Some(Expect { addr, want })));
    }
    SpinUntil(core::marker::PhantomData)
}

/// Ends a [`spin_until_eq`] declaration when dropped; borrows the word meanwhile.
///
/// ```
/// let served = locklab::sim::atomic::AtomicU32::new(0);
/// // SAFETY: dropped at once.
/// drop(unsafe { locklab::sim::spin_until_eq(&served, 0) });
/// ```
#[must_use = "the declaration lasts as long as this guard"]
pub struct SpinUntil<'a>(core::marker::PhantomData<&'a atomic::AtomicU32>);

impl Drop for SpinUntil<'_> {
    fn drop(&mut self) {
        if virtual_thread().is_some() {
            EXPECT.with(|x| x.set(None));
        }
    }
}

/// Registers a spin deadline of the calling thread (a spin budget's end): a poller wakes at it.
pub(crate) fn note_deadline(at: f64) {
    if virtual_thread().is_none() {
        return;
    }
    DEADLINES.with(|d| {
        let mut d = d.borrow_mut();
        if d.len() > 16 {
            d.clear();
        }
        d.push(at);
    });
}

/// A futex wait by a virtual thread (see [`crate::sys::futex_wait`]): `None` outside a simulation.
pub(crate) fn futex_wait(
    word: &atomic::AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> Option<bool> {
    let me = virtual_thread()?;
    PAT.with(|p| p.borrow_mut().impure());
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let addr = word as *const _ as usize;
    let core = e.threads[me].core;
    let now = e.threads[me].time;
    let (cost, _) = e.access(core, addr, Access::Load, now);
    let now = now + cost + e.m.syscall_ns;
    e.threads[me].time = now;
    // Relaxed: the baton orders it (only its holder runs, and the hand-over is Release/Acquire),
    // as the kernel's futex check is ordered by its hash-bucket lock.
    if word.inner().load(core::sync::atomic::Ordering::Relaxed) != expected {
        return Some(true);
    }
    let until = timeout.map_or(f64::INFINITY, |d| now + d.as_nanos() as f64);
    e.sleep_seq += 1;
    e.threads[me].timed_out = false;
    e.threads[me].st = St::Sleeping {
        addr,
        until,
        seq: e.sleep_seq,
    };
    e.leave_core(me, now);
    let next = e.schedule();
    let mut g = hand_to(g, me, next);
    let e = g.as_mut().expect("simulation running");
    Some(!std::mem::take(&mut e.threads[me].timed_out))
}

/// A futex wake by a virtual thread: wakes up to `n` sleepers on `word`, oldest first. `None`
/// outside a simulation.
pub(crate) fn futex_wake(word: *const atomic::AtomicU32, n: u32) -> Option<usize> {
    let me = virtual_thread()?;
    PAT.with(|p| p.borrow_mut().impure());
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let addr = word as usize;
    let mut sleepers: Vec<(u64, usize)> = e
        .threads
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t.st {
            St::Sleeping { addr: a, seq, .. } if a == addr => Some((seq, i)),
            _ => None,
        })
        .collect();
    sleepers.sort_unstable();
    sleepers.truncate(n as usize);
    let now = e.threads[me].time;
    let cost = if sleepers.is_empty() {
        e.m.syscall_ns
    } else {
        e.m.futex_wake_ns
    };
    e.threads[me].time = now + cost;
    for &(_, i) in &sleepers {
        let at = now + cost + e.m.wakeup_ns;
        e.threads[i].st = St::Waking { at };
        e.lower_horizon(at);
    }
    Some(sleepers.len())
}

/// The calling virtual thread's core (`None` outside a simulation).
pub(crate) fn current_core() -> Option<usize> {
    let me = virtual_thread()?;
    let g = engine();
    g.as_ref().map(|e| e.threads[me].core)
}

/// The simulated machine's core count while a simulation runs.
pub(crate) fn machine_cores() -> Option<usize> {
    virtual_thread()?;
    engine().as_ref().map(|e| e.cores.len())
}

/// The calling virtual thread's clock, ns (reading it costs `clock_ns`); outside a simulation, the
/// host's monotonic clock in ns since the first call.
///
/// ```
/// let a = locklab::sim::now();
/// assert!(locklab::sim::now() >= a);
/// ```
pub fn now() -> f64 {
    let Some(me) = virtual_thread() else {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as f64;
    };
    // An event like any other: a thread whose slice has ended is preempted here.
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let t = &mut e.threads[me];
    t.time += e.m.clock_ns;
    t.time
}

/// Charges `ns` of private work (no memory traffic) to the calling virtual thread; outside a
/// simulation, nothing.
///
/// ```
/// locklab::sim::work(100.0); // outside a simulation: does nothing
/// ```
pub fn work(ns: f64) {
    let Some(me) = virtual_thread() else { return };
    {
        let mut g = engine();
        let e = g.as_mut().expect("simulation running");
        e.threads[me].time += ns.max(0.0);
    }
    // The work's end is an event: a slice that ended during it preempts the thread here.
    drop(turn(me));
}

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
        m: *machine,
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

// ---------------------------------------------------------------------------------------------
// The polling detector

/// The most loads a polling iteration is recognised with (see [`Pattern::loaded`]).
const MAX_POLL_LOADS: usize = 4096;

/// What the calling thread did since its last spin boundary, and in the iteration before.
#[derive(Default)]
struct Pattern {
    /// Loads of this iteration: (address, value).
    cur: Vec<(usize, u64)>,
    /// The boundaries that closed it (a signature), once one has.
    group: Option<u64>,
    /// Only hits and loads so far.
    pure: bool,
    /// When this iteration started.
    start: f64,
    prev: Vec<(usize, u64)>,
    prev_group: u64,
    prev_pure: bool,
    prev_cost: f64,
}

impl Pattern {
    /// An access or other operation begins: a closed iteration becomes the previous one (its cost
    /// was taken when its first boundary closed it).
    fn roll(&mut self) {
        if let Some(g) = self.group.take() {
            self.prev = std::mem::take(&mut self.cur);
            self.prev_group = g;
            self.prev_pure = self.pure;
            self.pure = true;
        }
    }

    fn op(&mut self, kind: Access, hit: bool) {
        self.roll();
        if kind != Access::Load || !hit {
            self.pure = false;
        }
    }

    /// A load of this iteration. An iteration of more than [`MAX_POLL_LOADS`] loads is no polling
    /// loop (a spin iteration reads a word or a few): it is marked impure and its loads are no
    /// longer kept, so that a thread that never reaches a spin boundary (one alone, never
    /// contended) keeps a bounded list, not one entry per load of the whole run.
    fn loaded(&mut self, addr: usize, value: u64) {
        if self.cur.len() >= MAX_POLL_LOADS {
            self.pure = false;
            self.cur.clear();
        }
        self.cur.push((addr, value));
    }

    fn impure(&mut self) {
        self.roll();
        self.pure = false;
    }

    /// A boundary at `now`: `Some((iteration cost, lines read))` if this iteration repeats the last.
    fn boundary(&mut self, sig: u64, now: f64) -> Option<(f64, Vec<u64>)> {
        let g = match self.group {
            None => {
                // The iteration's cost runs from one group's close to the next's.
                sig
            }
            Some(g) => g.rotate_left(7) ^ sig.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        };
        let first_close = self.group.is_none();
        self.group = Some(g);
        if first_close {
            let cost = now - self.start;
            self.start = now;
            let repeats = self.pure
                && self.prev_pure
                && !self.cur.is_empty()
                && self.cur == self.prev
                && g == self.prev_group;
            self.prev_cost = cost;
            if repeats {
                return Some((cost, self.lines()));
            }
            return None;
        }
        let repeats = self.pure
            && self.prev_pure
            && !self.cur.is_empty()
            && self.cur == self.prev
            && g == self.prev_group;
        repeats.then(|| (self.prev_cost, self.lines()))
    }

    fn lines(&self) -> Vec<u64> {
        let mut l: Vec<u64> = self.cur.iter().map(|&(a, _)| (a >> 6) as u64).collect();
        l.sort_unstable();
        l.dedup();
        l
    }
}

/// The calling virtual thread's clock without the cost of a reading: the simulator's own look, for
/// measuring a run without disturbing it ([`now`] outside a simulation).
///
/// ```
/// assert!(locklab::sim::peek() >= 0.0);
/// ```
pub fn peek() -> f64 {
    let Some(me) = virtual_thread() else {
        return now();
    };
    engine().as_ref().map_or(0.0, |e| e.threads[me].time)
}
