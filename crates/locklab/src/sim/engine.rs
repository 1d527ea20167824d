//! The engine's state: the virtual threads, the cores and their run queues, the cache lines'
//! coherence states, and what moves them (the scheduler and the memory model of the module docs).

use super::Machine;
use super::poll::Pattern;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

#[derive(Debug)]
pub(super) enum St {
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

pub(super) struct Thread {
    pub(super) st: St,
    pub(super) core: usize,
    pub(super) time: f64,
    pub(super) cpu_ns: f64,
    pub(super) run_start: f64,
    /// Iterations the last poll stood for (read by the thread when it resumes).
    pub(super) elided: u64,
    pub(super) timed_out: bool,
    pub(super) host: Option<std::thread::Thread>,
    /// The exit condition of the spin loop the thread is stopped in (set only while its host thread
    /// waits inside a boundary: see "Waiting for a value" in the module docs).
    pub(super) expect: Option<Expect>,
    /// When a write to a line it polls asks for its exit condition to be tested (infinite: none).
    pub(super) recheck: f64,
    /// A declared poller (see `expect`) after a look that found the value changed but not the one it
    /// waits for: the stepped loop would look again here and once more an iteration later, and park
    /// only at `parks_at` (when two looks in a row agree); a write before that is seen at the first
    /// of these looks after it (or the one after them), a later one when it happens.
    pub(super) look_from: f64,
    pub(super) parks_at: f64,
    /// The step (`pause`s or yield) between a declared poller's looks.
    pub(super) look_step: f64,
    /// How much longer than iterations of the parked loop its looks took since it parked.
    pub(super) look_extra: f64,
}

/// A spin loop's exit condition: the 32-bit word at `addr` equals `want`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Expect {
    pub(super) addr: usize,
    pub(super) want: u32,
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

pub(super) struct Core {
    pub(super) running: Option<usize>,
    pub(super) queue: VecDeque<usize>,
    /// When the running thread's slice ends.
    pub(super) slice_end: f64,
    /// When the queue last became non-empty.
    pub(super) queued_since: f64,
    pub(super) busy_ns: f64,
}

#[derive(Clone, Copy)]
pub(super) struct Line {
    owner: Option<u8>,
    pub(super) sharers: u128,
    busy_until: f64,
}

/// Identity hash for line numbers (already spread enough after a multiply).
#[derive(Default)]
pub(super) struct LineHasher(u64);

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

pub(super) type Lines = HashMap<u64, Line, std::hash::BuildHasherDefault<LineHasher>>;

pub(super) struct Engine {
    /// The machine (shared: `access` holds it while it updates the rest).
    pub(super) m: std::sync::Arc<Machine>,
    pub(super) threads: Vec<Thread>,
    pub(super) cores: Vec<Core>,
    pub(super) lines: Lines,
    /// The thread holding the baton.
    pub(super) current: usize,
    /// The earliest event of any thread but `current` (valid while `current` holds the baton).
    pub(super) horizon: f64,
    pub(super) sleep_seq: u64,
    pub(super) registered: usize,
    pub(super) events: u64,
    pub(super) host_switches: u64,
    pub(super) elided: u64,
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
pub(super) static RUN_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// This host thread's virtual thread index, `usize::MAX` for a thread outside the simulation.
    pub(super) static VT: Cell<usize> = const { Cell::new(usize::MAX) };
    pub(super) static PAT: RefCell<Pattern> = RefCell::new(Pattern::default());
    pub(super) static DEADLINES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    pub(super) static EXPECT: Cell<Option<Expect>> = const { Cell::new(None) };
}

/// Whether the calling thread is a virtual thread of a running simulation.
#[inline]
pub(crate) fn virtual_thread() -> Option<usize> {
    let v = VT.with(|v| v.get());
    (v != usize::MAX).then_some(v)
}

pub(super) fn engine() -> std::sync::MutexGuard<'static, Option<Engine>> {
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
    pub(super) fn earliest(&self, skip: usize) -> (Option<(f64, usize)>, f64) {
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

    pub(super) fn lower_horizon(&mut self, t: f64) {
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
    pub(super) fn leave_core(&mut self, i: usize, t: f64) {
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
    pub(super) fn make_runnable(&mut self, i: usize, t: f64) {
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
    pub(super) fn requeue(&mut self, i: usize) {
        let t = self.threads[i].time;
        self.leave_core(i, t);
        let c = self.threads[i].core;
        if self.cores[c].queue.is_empty() {
            self.cores[c].queued_since = t;
        }
        self.cores[c].queue.push_back(i);
        self.threads[i].st = St::Queued;
    }

    pub(super) fn preempt_due(&self, i: usize) -> bool {
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
    pub(super) fn schedule(&mut self) -> usize {
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
    pub(super) fn access(&mut self, core: usize, addr: usize, kind: Access, t: f64) -> (f64, bool) {
        let m = std::sync::Arc::clone(&self.m);
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

/// The topology's distances, as the engine reads them.
impl Machine {
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
