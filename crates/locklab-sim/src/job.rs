//! The job: read, run on the simulator, written back.
//!
//! Workloads (the lab's, `docs/lab.md`):
//! - `mutex`: lock; a critical section that reads the owner word of the protected line, writes it
//!   and a counter, and works `cs_ns`; unlock; `think_ns` of private work.
//! - `rw`: as `mutex`, but `read_pct` of the operations take the shared mode and only read the line.
//! - `enqueue-shared` / `enqueue-local` (seed 004's two arms): `cs_ns` of private work (the rest of
//!   the seed's close(open())), then a call_rcu-style enqueue: onto one shared queue (a CAS on its
//!   head, a shared counter and a full fence: the base arm) or onto the thread's own queue (the
//!   `call_rcu` arm); one extra virtual thread, on its own core, takes the queues every millisecond.

use locklab::sim;
use locklab::sim::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use locklab::sim::job::{Job, JobOut, JobSpec, JobThread, LOCKS};
use std::io::Read;
use std::time::Duration;

/// The protected data: one line of words, apart from the lock's (as the lab's `Shared`).
#[repr(C, align(64))]
#[derive(Default)]
struct Data {
    words: [AtomicU64; 8],
}

impl Data {
    /// The exclusive section's accesses: read the last owner, write it and a counter. Returns whether
    /// the owner changed.
    fn write(&self, me: u64) -> bool {
        let last = self.words[2].load(Ordering::Relaxed);
        self.words[2].store(me, Ordering::Relaxed);
        let n = self.words[1].load(Ordering::Relaxed);
        self.words[1].store(n.wrapping_add(1), Ordering::Relaxed);
        last != me
    }

    fn read(&self) -> u64 {
        self.words[0].load(Ordering::Relaxed) ^ self.words[1].load(Ordering::Relaxed)
    }
}

/// A lock under test: exclusive and shared sections over [`Data`].
trait Subject: Sync {
    fn exclusive<R>(&self, f: impl FnOnce(&Data) -> R) -> R;
    fn shared<R>(&self, f: impl FnOnce(&Data) -> R) -> R;
}

struct M<R: lock_api::RawMutex>(lock_api::Mutex<R, Data>);
struct Rw<R: lock_api::RawRwLock>(lock_api::RwLock<R, Data>);

impl<R: lock_api::RawMutex + Sync + Send> Subject for M<R> {
    fn exclusive<T>(&self, f: impl FnOnce(&Data) -> T) -> T {
        f(&self.0.lock())
    }
    fn shared<T>(&self, f: impl FnOnce(&Data) -> T) -> T {
        f(&self.0.lock())
    }
}

impl<R: lock_api::RawRwLock + Sync + Send> Subject for Rw<R> {
    fn exclusive<T>(&self, f: impl FnOnce(&Data) -> T) -> T {
        f(&self.0.write())
    }
    fn shared<T>(&self, f: impl FnOnce(&Data) -> T) -> T {
        f(&self.0.read())
    }
}

/// The lab's per-op read/write choice (the same function as the lab's `is_read`).
fn is_read(thread: usize, i: u64, read_pct: u32) -> bool {
    match read_pct {
        0 => false,
        100 => true,
        _ => {
            let x = (i ^ ((thread as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 32) % 100) < read_pct as u64
        }
    }
}

/// A start offset for thread `t` (under a microsecond), from the job's seed: runs with different
/// seeds start the threads in a different order.
fn jitter(seed: u64, t: usize) -> f64 {
    let mut x = seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % 1000) as f64
}

struct Tally {
    out: JobThread,
    samples: Vec<f32>,
}

fn lock_body<S: Subject>(lock: &S, job: &JobSpec, t: usize) -> Tally {
    let end = job.duration_ms * 1e6;
    let me = t as u64 + 1;
    let mut tally = Tally {
        out: JobThread::default(),
        samples: Vec::new(),
    };
    sim::work(jitter(job.seed, t));
    let mut i = 0u64;
    while sim::peek() < end {
        let start = sim::peek();
        let mut got = 0.0;
        if is_read(t, i, job.read_pct) {
            lock.shared(|d| {
                got = sim::peek();
                std::hint::black_box(d.read());
                sim::work(job.cs_ns);
            });
        } else {
            let changed = lock.exclusive(|d| {
                got = sim::peek();
                let c = d.write(me);
                sim::work(job.write_cs_ns.unwrap_or(job.cs_ns));
                c
            });
            tally.out.exclusive += 1;
            tally.out.handovers += changed as u64;
        }
        sim::work(job.think_ns);
        if sim::peek() <= end {
            tally.out.ops += 1;
        }
        if i.is_multiple_of(8) {
            tally.samples.push((got - start) as f32);
        }
        i += 1;
    }
    tally
}

/// Seed 004's arms: private work, then an enqueue; thread `workers` (one past the last) drains.
struct Queues {
    head: Padded,
    count: Padded,
    local: Vec<Padded>,
    idle: AtomicU32,
}

#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

fn enqueue_body(q: &Queues, job: &JobSpec, t: usize, shared: bool) -> Tally {
    let end = job.duration_ms * 1e6;
    let mut tally = Tally {
        out: JobThread::default(),
        samples: Vec::new(),
    };
    if t == job.threads {
        // The grace-period worker: every millisecond, take every queue.
        while sim::peek() < end {
            locklab::sys::futex_wait(&q.idle, 0, Some(Duration::from_millis(1)));
            // Acquire pairs with the pushers' Release (CAS or store): what they queued is visible
            // (the model queues counts, not objects, but keeps the real arms' orderings and costs).
            if shared {
                q.head.0.swap(0, Ordering::Acquire);
            } else {
                for l in &q.local {
                    l.0.swap(0, Ordering::Acquire);
                }
            }
        }
        return tally;
    }
    sim::work(jitter(job.seed, t));
    while sim::peek() < end {
        sim::work(job.cs_ns);
        if shared {
            // A push onto the shared list (read the head, CAS it: Release pairs with the worker's
            // Acquire swap), the shared count, a full fence (the base arm's grace-period ordering).
            let mut h = q.head.0.load(Ordering::Relaxed);
            while let Err(now) =
                q.head
                    .0
                    .compare_exchange(h, h + 1, Ordering::Release, Ordering::Relaxed)
            {
                h = now;
            }
            q.count.0.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
        } else {
            // A push onto this thread's own list: its own line, no locked instruction (Release pairs
            // with the worker's Acquire swap).
            let l = &q.local[t].0;
            l.store(l.load(Ordering::Relaxed) + 1, Ordering::Release);
        }
        sim::work(job.think_ns);
        if sim::peek() <= end {
            tally.out.ops += 1;
        }
    }
    tally
}

/// Runs the whole simulation on one host CPU (`LOCKLAB_SIM_CPU` if it names one this process may
/// use, else the first it may): only one virtual thread runs at a time anyway, and a hand-over
/// between threads of one CPU is a context switch, where one to a thread idle on another CPU costs a
/// wake-up across CPUs (several times slower, in a VM much more).
fn pin_to_one_cpu() {
    #[cfg(target_os = "linux")]
    // SAFETY: `set` is a zeroed, then filled, cpu_set_t owned by this frame; the calls read it (and
    // write it for getaffinity) within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return;
        }
        let wanted = std::env::var("LOCKLAB_SIM_CPU")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&c| c < libc::CPU_SETSIZE as usize && libc::CPU_ISSET(c, &set));
        let first = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set));
        let Some(cpu) = wanted.or(first) else {
            return;
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}

fn percentile(sorted: &[f32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64
}

fn run_job(Job { machine, spec: job }: Job) -> Result<JobOut, String> {
    if job.threads == 0 || job.threads >= sim::MAX_THREADS {
        return Err(format!(
            "threads: {} (1 to {})",
            job.threads,
            sim::MAX_THREADS - 1
        ));
    }
    if !(job.duration_ms > 0.0 && job.duration_ms.is_finite()) {
        return Err("duration_ms must be above 0".into());
    }
    if !(job.cs_ns >= 0.0
        && job.think_ns >= 0.0
        && job.write_cs_ns.is_none_or(|w| w >= 0.0)
        && job.read_pct <= 100)
    {
        return Err("cs_ns and think_ns must be >= 0, read_pct 0 to 100".into());
    }
    machine
        .validate()
        .map_err(|e| format!("machine description: {e}"))?;
    pin_to_one_cpu();
    let wall = std::time::Instant::now();
    let threads = job.threads;
    macro_rules! with {
        ($subject:expr) => {{
            let s = $subject;
            sim::run(&machine, threads, |t| lock_body(&s, &job, t))
        }};
    }
    let run = match (job.workload.as_str(), job.lock.as_str()) {
        ("mutex" | "rw", "tas") => with!(M(locklab::TasLock::new(Data::default()))),
        ("mutex" | "rw", "ticket") => with!(M(locklab::TicketLock::new(Data::default()))),
        ("mutex" | "rw", "mcs") => with!(M(locklab::McsLock::new(Data::default()))),
        ("mutex" | "rw", "qspinlock") => with!(M(locklab::QueuedSpinLock::new(Data::default()))),
        ("mutex" | "rw", "mutex") => with!(M(locklab::Mutex::new(Data::default()))),
        ("mutex" | "rw", "fair-mutex") => with!(M(locklab::FairMutex::new(Data::default()))),
        ("mutex" | "rw", "rwspinlock") => with!(Rw(locklab::RwSpinLock::new(Data::default()))),
        ("mutex" | "rw", "rwsem") => with!(Rw(locklab::RwSem::new(Data::default()))),
        // The kernel's rwsem of v3.16-v5.2 (writers do not spin on readers) and before v3.16 (no
        // writer spinning at all): seeds 003 and 001.
        ("mutex" | "rw", "rwsem-no-reader-spin") => with!(Rw(locklab::RwSem::from_raw(
            locklab::raw::RawRwSem::without_reader_spinning(),
            Data::default()
        ))),
        ("mutex" | "rw", "rwsem-no-spin") => with!(Rw(locklab::RwSem::from_raw(
            locklab::raw::RawRwSem::without_spinning(),
            Data::default()
        ))),
        ("enqueue-shared" | "enqueue-local", "call-rcu") => {
            let shared = job.workload == "enqueue-shared";
            let q = Queues {
                head: Padded::default(),
                count: Padded::default(),
                local: (0..threads).map(|_| Padded::default()).collect(),
                idle: AtomicU32::new(0),
            };
            sim::run(&machine, threads + 1, |t| enqueue_body(&q, &job, t, shared))
        }
        (w, l) => {
            return Err(format!(
                "no simulated run of lock `{l}` under workload `{w}` (locks: {}; workloads: mutex, rw; enqueue-shared and enqueue-local with lock `call-rcu`)",
                LOCKS.join(", ")
            ));
        }
    }
    .map_err(|e| e.to_string())?;
    let mut samples: Vec<f32> = Vec::new();
    let mut threads_out = Vec::new();
    for t in run.threads {
        let mut tally = t.result;
        samples.append(&mut tally.samples);
        tally.out.cpu_ns = t.cpu_ns;
        tally.out.core = t.core;
        threads_out.push(tally.out);
    }
    samples.sort_unstable_by(f32::total_cmp);
    Ok(JobOut {
        threads: threads_out,
        core_busy_ns: run.core_busy_ns,
        virtual_ns: job.duration_ms * 1e6,
        acquire_ns: [
            percentile(&samples, 0.5),
            percentile(&samples, 0.99),
            samples.last().copied().unwrap_or(0.0) as f64,
        ],
        events: run.events,
        host_switches: run.host_switches,
        elided_iterations: run.elided_iterations,
        wall_ms: wall.elapsed().as_secs_f64() * 1e3,
    })
}

/// Reads the job, runs it, writes the result; the exit status (0, or 2 with one line on stderr).
pub fn main() -> i32 {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("locklab-sim: reading the job: {e}");
        return 2;
    }
    let job: Job = match serde_json::from_str(&input) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("locklab-sim: the job: {e}");
            return 2;
        }
    };
    match run_job(job) {
        Ok(out) => {
            let text = serde_json::to_string(&out).expect("numbers serialise");
            use std::io::Write;
            let mut so = std::io::stdout().lock();
            if writeln!(so, "{text}").is_err() {
                return 1;
            }
            0
        }
        Err(e) => {
            eprintln!("locklab-sim: {e}");
            2
        }
    }
}
