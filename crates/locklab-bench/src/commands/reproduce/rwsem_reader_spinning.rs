//! Seed 003 (Chen 2016): after i_mutex became i_rwsem, an equal mix of lookups (shared) and
//! creates/unlinks (exclusive) in one directory left the CPUs 90% idle where the mutex left them
//! 15-20% idle: the rwsem's writers stopped spinning as soon as readers held the lock and went to
//! sleep. (The kernel's fix, v5.3: writers spin on reader-owned locks for a bounded time.)
//!
//! The model, one operation = one system call on the directory:
//! - a lookup (`lookup_slow` under `inode_lock_shared`): the directory's shared mode, a hash lookup of
//!   a name and [`READ_CS_NS`] of work (allocating and filling the dentry);
//! - a create or an unlink (the directory's exclusive mode): insert or remove one of the thread's own
//!   names and [`WRITE_CS_NS`] of work;
//! - [`THINK_NS`] outside the lock (the rest of the system call).
//!
//! Half the operations are lookups. Threads: the CPUs (the seed's figures are "when all the cpus
//! are contending on the lock": the verdict is checked there) and four times as many (oversubscribed,
//! reported beside). Locks: our `Mutex`, our `RwSem`, our `RwSem` without reader spinning (the
//! seed's rwsem), parking_lot's and std's `RwLock`. Figures: throughput and the idle share of the CPUs.
//!
//! `figures`: `{"rows": [{"lock", "threads", "ops_per_sec", "idle_pct", "cpu_s_per_mop"}], "seed": {...}}`.

use super::Reproduction;
use super::model::{Measured, OldRwSem, RwModel, measure, median, mix};
use crate::engine::calibrated_work::{WorkCalibration, spin_work};
use crate::engine::runner::{Clock, Op, Tally, TrialSpec, allowed_cpus};
use std::collections::HashMap;

/// Work inside a lookup's shared section, ns.
pub const READ_CS_NS: u64 = 300;
/// Work inside a create's or unlink's exclusive section, ns.
pub const WRITE_CS_NS: u64 = 500;
/// Work outside the lock per operation, ns.
pub const THINK_NS: u64 = 500;
/// Names every lookup chooses from (the directory's permanent entries).
const NAMES: u64 = 1_000;
/// Names each thread creates and unlinks in turn.
const OWN: u64 = 16;

/// The directory: name -> inode number.
type Dir = HashMap<u64, u64>;

fn new_dir() -> Dir {
    (0..NAMES).map(|n| (n, n + 100)).collect()
}

/// One system call on the directory, on lock `L`.
struct DirOp<'a, L> {
    dir: L,
    clock: &'a dyn Clock,
    read_loops: u64,
    write_loops: u64,
    think_loops: u64,
}

impl<L: RwModel<Dir>> Op for DirOp<'_, L> {
    #[inline]
    fn run<const SAMPLE: bool>(&self, t: usize, i: u64, tally: &mut Tally) -> u64 {
        let start = if SAMPLE { self.clock.now_ns() } else { 0 };
        let m = mix(t, i);
        if m.is_multiple_of(2) {
            let name = (m >> 8) % NAMES;
            tally.sink ^= self
                .dir
                .read(|d| spin_work(self.read_loops, d.get(&name).copied().unwrap_or(0)));
        } else {
            let name = (1 << 32) | ((t as u64) << 8) | ((m >> 8) % OWN);
            tally.sink ^= self.dir.write(|d| {
                let ino = if d.remove(&name).is_none() {
                    d.insert(name, i);
                    i
                } else {
                    0
                };
                spin_work(self.write_loops, ino)
            });
            tally.exclusive += 1;
        }
        let lat = if SAMPLE {
            self.clock.now_ns() - start
        } else {
            0
        };
        tally.sink ^= spin_work(self.think_loops, i);
        lat
    }
}

fn run_arm<L: RwModel<Dir>>(
    spec: &TrialSpec,
    clock: &dyn Clock,
    cal: &WorkCalibration,
) -> Measured {
    let op = DirOp {
        dir: L::new(new_dir()),
        clock,
        read_loops: cal.loops_for(READ_CS_NS),
        write_loops: cal.loops_for(WRITE_CS_NS),
        think_loops: cal.loops_for(THINK_NS),
    };
    measure(spec, clock, op)
}

type Arm = (
    &'static str,
    fn(&TrialSpec, &dyn Clock, &WorkCalibration) -> Measured,
);

const ARMS: [Arm; 5] = [
    ("mutex", run_arm::<locklab::Mutex<Dir>>),
    ("rwsem", run_arm::<locklab::RwSem<Dir>>),
    ("rwsem-no-reader-spin", run_arm::<OldRwSem<Dir>>),
    ("parking-lot-rwlock", run_arm::<parking_lot::RwLock<Dir>>),
    ("std-rwlock", run_arm::<std::sync::RwLock<Dir>>),
];

/// The seed's idle shares: the rwsem's, and the mutex's range.
pub const SEED_RWSEM_IDLE: f64 = 90.0;
/// The mutex's idle share in the seed, low end, %.
pub const SEED_MUTEX_IDLE: (f64, f64) = (15.0, 20.0);

/// One measured row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The lock.
    pub lock: String,
    /// Threads.
    pub threads: usize,
    /// What it measured.
    #[serde(flatten)]
    pub m: Measured,
}

/// The seed's claims, checked where the seed saw them, "when all the cpus are contending on the
/// lock" (threads = CPUs, the lowest count run), each holding when our figure goes the seed's way
/// beyond noise: (1) the rwsem without reader spinning leaves at least 10 points more of the CPUs
/// idle than the mutex, and (2) runs below 0.95x the mutex's throughput. Reported beside: the same at
/// the oversubscribed count (where a sleeping writer's CPU goes to another thread, so idle need not
/// cost throughput), and whether our default `RwSem` closes the gap (idle within 5 points of the
/// mutex's: the kernel's v5.3 fix working here).
pub fn verdict(rows: &[Row]) -> (bool, String) {
    let lo = rows.iter().map(|r| r.threads).min().unwrap_or(0);
    let top = rows.iter().map(|r| r.threads).max().unwrap_or(0);
    let at = |lock: &str, t: usize| {
        rows.iter()
            .find(|r| r.lock == lock && r.threads == t)
            .map(|r| r.m)
    };
    let (Some(mutex), Some(old), Some(new), Some(mutex_o), Some(old_o)) = (
        at("mutex", lo),
        at("rwsem-no-reader-spin", lo),
        at("rwsem", lo),
        at("mutex", top),
        at("rwsem-no-reader-spin", top),
    ) else {
        return (false, "not reproduced: a required arm did not run".into());
    };
    let idles_more = old.idle_pct >= mutex.idle_pct + 10.0;
    let slower = old.ops_per_sec < 0.95 * mutex.ops_per_sec;
    let fixed = new.idle_pct <= mutex.idle_pct + 5.0;
    let ok = idles_more && slower;
    let text = format!(
        "{}: at {lo} threads (every CPU contending) the rwsem without reader spinning left {:.0}% of the CPUs idle vs the mutex's {:.0}% (seed: {SEED_RWSEM_IDLE:.0}% vs {:.0}-{:.0}%; {}) and ran at {:.2}x the mutex's throughput ({}); our RwSem with reader spinning (the v5.3 fix): {:.0}% idle, {:.2}x the mutex ({}); oversubscribed ({top} threads): {:.0}% idle vs the mutex's {:.0}%, {:.2}x its throughput",
        if ok { "reproduced" } else { "not reproduced" },
        old.idle_pct,
        mutex.idle_pct,
        SEED_MUTEX_IDLE.0,
        SEED_MUTEX_IDLE.1,
        if idles_more {
            "it sleeps where the mutex spins, as in the seed"
        } else {
            "NOT more idle here"
        },
        old.ops_per_sec / mutex.ops_per_sec.max(1e-9),
        if slower {
            "slower, as in the seed"
        } else {
            "NOT slower here"
        },
        new.idle_pct,
        new.ops_per_sec / mutex.ops_per_sec.max(1e-9),
        if fixed {
            "the gap closed"
        } else {
            "the gap is NOT closed here"
        },
        old_o.idle_pct,
        mutex_o.idle_pct,
        old_o.ops_per_sec / mutex_o.ops_per_sec.max(1e-9),
    );
    (ok, text)
}

/// Runs every arm at the CPU count and at four times it (interleaved repeats, medians).
pub fn run(quick: bool, clock: &dyn Clock) -> Reproduction {
    let cpus = allowed_cpus();
    let n = cpus.len().max(1);
    let repeats = if quick { 3 } else { 7 };
    let cal = WorkCalibration::measure();
    let mut rows = vec![];
    for threads in [n, 4 * n] {
        let spec = super::model_spec(threads, if quick { 150 } else { 500 }, cpus.clone());
        let mut runs = vec![vec![]; ARMS.len()];
        for _ in 0..repeats {
            for (a, (_, f)) in ARMS.iter().enumerate() {
                runs[a].push(f(&spec, clock, &cal));
            }
        }
        for ((name, _), r) in ARMS.iter().zip(runs) {
            rows.push(Row {
                lock: name.to_string(),
                threads,
                m: median(r),
            });
        }
    }
    let (reproduced, verdict) = verdict(&rows);
    let title = "Chen 2016: an rwsem whose writers stop spinning when readers hold it idles the CPUs where a mutex keeps them busy (lookups + creates/unlinks in one directory)";
    let mut table = format!(
        "seed 003: {title}\n{:<24}{:>8}{:>14}{:>9}{:>12}{:>14}\n",
        "directory lock", "threads", "ops/s", "idle %", "cpu s/Mop", "seed idle %"
    );
    for r in &rows {
        let seed = match r.lock.as_str() {
            "mutex" => format!("{:.0}-{:.0}", SEED_MUTEX_IDLE.0, SEED_MUTEX_IDLE.1),
            "rwsem-no-reader-spin" => format!("{SEED_RWSEM_IDLE:.0}"),
            _ => "-".into(),
        };
        table += &format!(
            "{:<24}{:>8}{:>14.0}{:>9.1}{:>12.3}{:>14}\n",
            r.lock, r.threads, r.m.ops_per_sec, r.m.idle_pct, r.m.cpu_s_per_mop, seed
        );
    }
    Reproduction {
        seed: "003".into(),
        title: title.into(),
        figures: serde_json::json!({
            "rows": rows,
            "seed": { "rwsem_idle_pct": SEED_RWSEM_IDLE, "mutex_idle_pct": SEED_MUTEX_IDLE },
            "model": { "read_cs_ns": READ_CS_NS, "write_cs_ns": WRITE_CS_NS, "think_ns": THINK_NS, "read_pct": 50 },
        }),
        table,
        reproduced,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(lock: &str, threads: usize, ops: f64, idle: f64) -> Row {
        Row {
            lock: lock.into(),
            threads,
            m: Measured {
                ops_per_sec: ops,
                cpu_s_per_mop: 1.0,
                idle_pct: idle,
            },
        }
    }

    #[test]
    fn the_verdict_checks_idle_and_throughput_with_every_cpu_contending() {
        let rows = vec![
            row("mutex", 2, 2e6, 10.0),
            row("rwsem-no-reader-spin", 2, 1e6, 60.0),
            row("rwsem", 2, 2e6, 12.0),
            row("mutex", 8, 1e6, 1.0),
            row("rwsem-no-reader-spin", 8, 1e6, 40.0),
            row("rwsem", 8, 1e6, 1.0),
        ];
        let (ok, text) = verdict(&rows);
        assert!(
            ok && text.contains("the gap closed") && text.contains("0.50x"),
            "{text}"
        );
        assert!(
            text.contains("oversubscribed (8 threads): 40% idle"),
            "{text}"
        );
        let mut flat = rows.clone();
        flat[1].m.idle_pct = 15.0;
        let (ok, text) = verdict(&flat);
        assert!(!ok && text.contains("NOT more idle"), "{text}");
        let mut faster = rows.clone();
        faster[1].m.ops_per_sec = 1.96e6;
        let (ok, text) = verdict(&faster);
        assert!(!ok && text.contains("NOT slower"), "{text}");
        let missing: Vec<Row> = rows.iter().filter(|r| r.lock != "rwsem").cloned().collect();
        assert!(verdict(&missing).1.contains("did not run"));
    }

    #[test]
    fn creates_and_unlinks_balance_and_lookups_hit() {
        let l = locklab::Mutex::new(new_dir());
        let op = DirOp {
            dir: l,
            clock: &crate::engine::runner::SystemClock::default(),
            read_loops: 0,
            write_loops: 0,
            think_loops: 0,
        };
        let mut tally = Tally::default();
        for i in 0..10_000 {
            op.run::<false>(3, i, &mut tally);
        }
        let d = op.dir.lock();
        // Between 40% and 60% writes; the thread's own names number at most OWN at any time.
        assert!(
            (4_000..6_000).contains(&tally.exclusive),
            "{}",
            tally.exclusive
        );
        assert!(d.len() as u64 >= NAMES && d.len() as u64 <= NAMES + OWN);
        assert!((0..NAMES).all(|n| d.get(&n) == Some(&(n + 100))));
    }
}
