//! `locklab reproduce NNN --predict`: a seed's experiment on a simulated machine of the seed's own
//! size (`locklab predict`'s simulator), with the seed's figures beside the prediction and a verdict.
//!
//! - 001 (Mason 2011): the root lock of the seed's B-tree, which every dbench operation takes (half
//!   lookups, shared; half modifications, exclusive, copying the node), at 4 threads on `xeon-2s`:
//!   the old btrfs lock (our `Mutex`, exclusive for readers too, spinning), the 2011 rwsem (no
//!   writer spinning) and our `RwSem`. The B-tree below the root and Mason's own lock are not
//!   simulated (the lab's measured reproduction has them).
//! - 003 (Chen 2016): lookups and creates/unlinks on one directory's lock, half and half, at every
//!   core of `xeon-2s` contending and at 4x as many threads: idle share under our `Mutex`, the rwsem
//!   whose writers do not spin on readers (the seed's), and our `RwSem`.
//! - 004 (McKenney/Piggin 2009): 1 to 8 threads each doing the seed's close(open()) work and one
//!   call_rcu-style enqueue, on the seed's 2-socket 8-core Opteron (`opteron-2s8c`): the base arm
//!   (a shared queue: CAS on its head, a shared counter, a full fence) against the per-thread queue;
//!   the private work is set so that the base arm's 1-thread rate is the seed's (595,238/s).
//!
//! 000 and 002 are single-thread instruction-cost seeds: a simulation adds nothing to measuring them
//! here, and says so.

use super::Reproduction;
use crate::engine::sim::{self as predict, JobOut, JobSpec};
use serde_json::json;
use std::fmt::Write as _;

/// The seeds with a predicted experiment.
pub const PREDICTED: [&str; 3] = ["001", "003", "004"];

/// The work of one simulated job: critical section (and the writers' own, if apart), think time
/// and read share.
#[derive(Clone, Copy)]
struct Work {
    cs: f64,
    write_cs: Option<f64>,
    think: f64,
    read_pct: u32,
}

/// Only a critical section: no think time, no readers.
fn cs_only(cs: f64) -> Work {
    Work {
        cs,
        write_cs: None,
        think: 0.0,
        read_pct: 0,
    }
}

fn job(workload: &str, lock: &str, threads: usize, w: Work, ms: f64) -> JobSpec {
    JobSpec {
        workload: workload.into(),
        lock: lock.into(),
        threads,
        cs_ns: w.cs,
        think_ns: w.think,
        read_pct: w.read_pct,
        write_cs_ns: w.write_cs,
        duration_ms: ms,
        seed: 1,
    }
}

fn ops_per_sec(job: &JobSpec, out: &JobOut) -> f64 {
    let ops: u64 = out.threads[..job.threads].iter().map(|t| t.ops).sum();
    ops as f64 / (out.virtual_ns / 1e9)
}

fn idle_pct(job: &JobSpec, out: &JobOut, cores: usize) -> f64 {
    predict::row(job, out, cores).idle_pct
}

/// Seed 004's prediction.
fn seed_004(quick: bool) -> anyhow::Result<Reproduction> {
    let m = predict::machine("opteron-2s8c")?;
    let ms = if quick { 5.0 } else { 20.0 };
    // The private work that makes the base arm's 1-thread rate the seed's.
    let target_ns = 1e9 / super::call_rcu_scaling::SEED_004[0].1;
    let probe = job("enqueue-shared", "call-rcu", 1, cs_only(target_ns), ms);
    let out = predict::simulate_all(&m, std::slice::from_ref(&probe), &|_, _| {})?;
    let per_op = 1e9 / ops_per_sec(&probe, &out[0]);
    let work = (target_ns - (per_op - target_ns)).max(0.0);
    let procs = [1usize, 2, 4, 8];
    let mut jobs = vec![];
    for &p in &procs {
        for arm in ["enqueue-shared", "enqueue-local"] {
            jobs.push(job(arm, "call-rcu", p, cs_only(work), ms));
        }
    }
    let outs = predict::simulate_all(&m, &jobs, &|_, _| {})?;
    let rate = |i: usize| ops_per_sec(&jobs[i], &outs[i]);
    let (base1, rcu1) = (rate(0), rate(1));
    let mut table = format!(
        "seed 004 PREDICTED on {} ({}): call_rcu enqueue, {work:.0} ns of private work an op\n",
        m.name, m.what
    );
    let _ = writeln!(
        table,
        "{:>6}{:>14}{:>8}{:>14}{:>8}   {:>12}{:>8}{:>12}{:>8}",
        "procs", "base ops/s", "(xN)", "rcu ops/s", "(xN)", "seed base", "(xN)", "seed rcu", "(xN)"
    );
    let mut rows = vec![];
    let mut behind = vec![];
    for (k, &p) in procs.iter().enumerate() {
        let (b, r) = (rate(2 * k), rate(2 * k + 1));
        let (bs, rs) = (b / base1, r / rcu1);
        let seed = super::call_rcu_scaling::SEED_004.iter().find(|s| s.0 == p);
        let (sb, sr) = seed.map_or((f64::NAN, f64::NAN), |s| (s.1, s.2));
        let (s0b, s0r) = (
            super::call_rcu_scaling::SEED_004[0].1,
            super::call_rcu_scaling::SEED_004[0].2,
        );
        let _ = writeln!(
            table,
            "{:>6}{:>14}{:>8}{:>14}{:>8}   {:>12}{:>8}{:>12}{:>8}  predicted",
            p,
            crate::engine::output::table::group(b),
            format!("x{bs:.2}"),
            crate::engine::output::table::group(r),
            format!("x{rs:.2}"),
            crate::engine::output::table::group(sb),
            format!("x{:.2}", sb / s0b),
            crate::engine::output::table::group(sr),
            format!("x{:.2}", sr / s0r),
        );
        if p >= 4 {
            behind.push((p, bs, rs, sb / s0b, sr / s0r));
        }
        rows.push(
            json!({"procs": p, "base": b, "rcu": r, "base_scaling": bs, "rcu_scaling": rs,
            "seed": seed.map(|s| [s.1, s.2])}),
        );
    }
    let reproduced = behind.iter().all(|&(_, b, r, _, _)| b < r);
    let parts: Vec<String> = behind
        .iter()
        .map(|(p, b, r, sb, sr)| {
            format!("at {p}: base x{b:.2} vs call_rcu x{r:.2} (seed x{sb:.2} vs x{sr:.2})")
        })
        .collect();
    let verdict = format!(
        "{}: the base arm's scaling {} the call_rcu arm's from 4 processes on: {}",
        if reproduced {
            "PREDICTED AS THE SEED"
        } else {
            "NOT PREDICTED"
        },
        if reproduced {
            "falls behind"
        } else {
            "does not fall behind"
        },
        parts.join("; ")
    );
    Ok(Reproduction {
        seed: "004".into(),
        title: format!(
            "call_rcu scalability (McKenney/Piggin 2009), predicted on {}",
            m.name
        ),
        figures: json!({"predicted": true, "machine": m, "work_ns": work, "rows": rows,
            "base_1proc": base1, "rcu_1proc": rcu1}),
        table,
        reproduced,
        verdict,
    })
}

/// Seed 001's prediction.
fn seed_001(quick: bool) -> anyhow::Result<Reproduction> {
    use super::adaptive_spinning::{COW_NS, LEAF_NS, NODE_NS, SEED_DBENCH, THINK_NS};
    let m = predict::machine("xeon-2s")?;
    let ms = if quick { 5.0 } else { 20.0 };
    // The root's hold: its search and the child's acquisition (and, writing, the root's copy); the
    // rest of the path and the work outside the tree are outside the root's lock.
    let read_cs = 2.0 * NODE_NS as f64;
    let write_cs = 2.0 * (NODE_NS + COW_NS) as f64;
    let think = (THINK_NS + LEAF_NS + NODE_NS) as f64;
    let locks = ["mutex", "rwsem-no-spin", "rwsem"];
    let jobs: Vec<JobSpec> = locks
        .iter()
        .map(|l| {
            let w = Work {
                cs: read_cs,
                write_cs: Some(write_cs),
                think,
                read_pct: 50,
            };
            job("rw", l, 4, w, ms)
        })
        .collect();
    let outs = predict::simulate_all(&m, &jobs, &|_, _| {})?;
    let rates: Vec<f64> = jobs
        .iter()
        .zip(&outs)
        .map(|(j, o)| ops_per_sec(j, o))
        .collect();
    let idle: Vec<f64> = jobs
        .iter()
        .zip(&outs)
        .map(|(j, o)| idle_pct(j, o, m.cores()))
        .collect();
    let mut table = format!(
        "seed 001 PREDICTED on {} ({}): the B-tree's root lock, dbench mix (50% lookups), 4 threads\n",
        m.name, m.what
    );
    let _ = writeln!(
        table,
        "{:<16}{:>14}{:>8}{:>10}   {:>14}",
        "lock", "ops/s", "idle%", "vs rwsem", "seed MB/s"
    );
    let seed_mb = [SEED_DBENCH.0, SEED_DBENCH.2, f64::NAN];
    for (i, l) in locks.iter().enumerate() {
        let _ = writeln!(
            table,
            "{:<16}{:>14}{:>7.0}%{:>10}   {:>14}  predicted",
            l,
            crate::engine::output::table::group(rates[i]),
            idle[i],
            format!("{:.2}x", rates[i] / rates[1]),
            if seed_mb[i].is_nan() {
                "-".to_string()
            } else {
                format!("{:.0}", seed_mb[i])
            }
        );
    }
    let ratio = rates[0] / rates[1];
    let seed_ratio = SEED_DBENCH.0 / SEED_DBENCH.2;
    let reproduced = ratio >= 2.0;
    let verdict = format!(
        "{}: the spinning lock (old btrfs: mutex) ran the root {ratio:.1}x the 2011 rwsem (seed: {seed_ratio:.0}x on the whole tree; Mason's lock 12x); our RwSem {:.1}x; the 2011 rwsem left {:.0}% of the CPUs idle vs the mutex's {:.0}%",
        if reproduced {
            "PREDICTED AS THE SEED (direction; several times)"
        } else {
            "NOT PREDICTED"
        },
        rates[2] / rates[1],
        idle[1],
        idle[0]
    );
    Ok(Reproduction {
        seed: "001".into(),
        title: format!(
            "btrfs B-tree locks (Mason 2011), the root lock predicted on {}",
            m.name
        ),
        figures: json!({"predicted": true, "machine": m, "read_cs_ns": read_cs, "write_cs_ns": write_cs,
            "think_ns": think, "rows": locks.iter().enumerate().map(|(i, l)| json!({"lock": l,
            "threads": 4, "ops_per_sec": rates[i], "idle_pct": idle[i]})).collect::<Vec<_>>(),
            "seed": {"dbench_mb_s": [SEED_DBENCH.0, SEED_DBENCH.1, SEED_DBENCH.2]}}),
        table,
        reproduced,
        verdict,
    })
}

/// Seed 003's prediction.
fn seed_003(quick: bool) -> anyhow::Result<Reproduction> {
    use super::rwsem_reader_spinning::{
        READ_CS_NS, SEED_MUTEX_IDLE, SEED_RWSEM_IDLE, THINK_NS, WRITE_CS_NS,
    };
    let m = predict::machine("xeon-2s")?;
    let ms = if quick { 5.0 } else { 20.0 };
    let locks = ["mutex", "rwsem-no-reader-spin", "rwsem"];
    let counts = [m.cores(), 4 * m.cores()];
    let mut jobs = vec![];
    for &t in &counts {
        for l in locks {
            let w = Work {
                cs: READ_CS_NS as f64,
                write_cs: Some(WRITE_CS_NS as f64),
                think: THINK_NS as f64,
                read_pct: 50,
            };
            jobs.push(job("rw", l, t, w, ms));
        }
    }
    let outs = predict::simulate_all(&m, &jobs, &|_, _| {})?;
    let mut table = format!(
        "seed 003 PREDICTED on {} ({}): a directory's lock, 50% lookups, 50% creates/unlinks\n",
        m.name, m.what
    );
    let _ = writeln!(
        table,
        "{:<22}{:>8}{:>14}{:>8}   {:>10}",
        "lock", "threads", "ops/s", "idle%", "seed idle"
    );
    let mut fig = vec![];
    let mut at = |i: usize| -> (f64, f64) {
        let r = ops_per_sec(&jobs[i], &outs[i]);
        let idle = idle_pct(&jobs[i], &outs[i], m.cores());
        fig.push(json!({"lock": jobs[i].lock, "threads": jobs[i].threads, "ops_per_sec": r, "idle_pct": idle}));
        (r, idle)
    };
    let mut cells = vec![];
    for i in 0..jobs.len() {
        cells.push(at(i));
    }
    for (i, j) in jobs.iter().enumerate() {
        let seed = match (j.lock.as_str(), j.threads == m.cores()) {
            ("mutex", true) => format!("{:.0}-{:.0}%", SEED_MUTEX_IDLE.0, SEED_MUTEX_IDLE.1),
            ("rwsem-no-reader-spin", true) => format!("{SEED_RWSEM_IDLE:.0}%"),
            _ => "-".into(),
        };
        let _ = writeln!(
            table,
            "{:<22}{:>8}{:>14}{:>7.0}%   {:>10}  predicted",
            j.lock,
            j.threads,
            crate::engine::output::table::group(cells[i].0),
            cells[i].1,
            seed
        );
    }
    let (mutex, old, ours) = (cells[0], cells[1], cells[2]);
    let reproduced = old.1 >= 50.0 && old.1 >= 2.0 * mutex.1.max(1.0);
    let verdict = format!(
        "{}: at {} threads (every core contending) the rwsem without reader spinning left {:.0}% of the cores idle vs the mutex's {:.0}% (seed: {SEED_RWSEM_IDLE:.0}% vs {:.0}-{:.0}%), at {:.2}x the mutex's throughput; our RwSem (reader spinning, the v5.3 fix): {:.0}% idle, {:.2}x",
        if reproduced {
            "PREDICTED AS THE SEED"
        } else {
            "NOT PREDICTED"
        },
        m.cores(),
        old.1,
        mutex.1,
        SEED_MUTEX_IDLE.0,
        SEED_MUTEX_IDLE.1,
        old.0 / mutex.0,
        ours.1,
        ours.0 / mutex.0
    );
    Ok(Reproduction {
        seed: "003".into(),
        title: format!("i_rwsem idle CPUs (Chen 2016), predicted on {}", m.name),
        figures: json!({"predicted": true, "machine": m, "rows": fig,
            "seed": {"rwsem_idle_pct": SEED_RWSEM_IDLE, "mutex_idle_pct": SEED_MUTEX_IDLE}}),
        table,
        reproduced,
        verdict,
    })
}

/// What `reproduce --predict --json` writes.
#[derive(serde::Serialize)]
pub struct PredictedReport {
    /// The lab's version.
    pub locklab_version: String,
    /// Always true.
    pub predicted: bool,
    /// The host the simulation ran on.
    pub host: crate::engine::metrics::Machine,
    /// One entry per seed predicted.
    pub reproductions: Vec<Reproduction>,
}

/// `reproduce SEED --predict`: the seeds' predicted experiments, printed; the JSON if asked.
pub fn command(which: &[&str], quick: bool, json: Option<&str>) -> anyhow::Result<()> {
    let to_stdout = json == Some("-");
    let mut out = vec![];
    for seed in which {
        let r = match *seed {
            "001" => seed_001(quick)?,
            "003" => seed_003(quick)?,
            "004" => seed_004(quick)?,
            s => {
                let line = format!(
                    "seed {s}: not predicted (a single-thread instruction-cost experiment: `locklab reproduce {s}` measures it here)\n"
                );
                if to_stdout {
                    eprint!("{line}");
                } else {
                    println!("{line}");
                }
                continue;
            }
        };
        let text = format!("{}verdict: {}\n", r.table, r.verdict);
        if to_stdout {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
        out.push(r);
    }
    if let Some(target) = json {
        let report = PredictedReport {
            locklab_version: env!("CARGO_PKG_VERSION").into(),
            predicted: true,
            host: crate::engine::limits::machine(),
            reproductions: out,
        };
        let text = serde_json::to_string_pretty(&report)?;
        if target == "-" {
            println!("{text}");
        } else {
            std::fs::write(target, text + "\n")
                .map_err(|e| anyhow::anyhow!("cannot write {target}: {e}"))?;
        }
    }
    Ok(())
}
