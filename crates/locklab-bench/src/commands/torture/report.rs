//! A lock's result: the counts, the locktorture-shaped line, and the JSON document.

use super::*;

/// One kind of operation's counts.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Counts {
    /// Operations done, all workers.
    pub total: u64,
    /// Most done by one worker.
    pub max: u64,
    /// Fewest done by one worker.
    pub min: u64,
    /// Operations whose checks failed.
    pub fail: u64,
}

/// One lock's result.
#[derive(Serialize, Clone, Debug)]
pub struct LockResult {
    /// The lock's name.
    pub lock: String,
    /// Exclusive operations (producers, for `condvar`).
    pub writes: Counts,
    /// Shared operations (consumers for `condvar`, `LockRefArc` clones for `lockref`), if any.
    pub reads: Option<Counts>,
    /// Failed end-of-run and stressor checks (forget, balance, hang).
    pub other_failures: u64,
    /// The first few failure messages.
    pub failures: Vec<String>,
    /// Threads replaced by `churn`.
    pub threads_replaced: u64,
    /// Operations run from thread-local destructors after the thread's slot was returned.
    pub late_ops: u64,
    /// Some thread never finished (deadlock or lost wake-up); the run stopped here.
    pub hung: bool,
    /// RCU: how many reads saw an object aged 0, 1, 2, and 3 or more grace periods since it was
    /// unpublished (rcutorture's pipe; more than 2 is a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe: Option<[u64; 4]>,
    /// How many times each path of the subject ran (`try`, `timed`, `notify_all`, `synchronize`,
    /// ...); a path that never ran fails the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<PathCount>>,
    /// `true` when nothing failed.
    pub ok: bool,
}

impl LockResult {
    /// The locktorture-shaped line.
    pub fn line(&self) -> String {
        fn part(label: &str, c: &Counts) -> String {
            let mark = if c.fail > 0 {
                " !!!"
            } else if c.max > 2 * c.min {
                " ???"
            } else {
                ""
            };
            format!(
                "{label}: Total: {} Max/Min: {}/{}{mark} Fail: {}",
                c.total, c.max, c.min, c.fail
            )
        }
        let mut s = format!("{:<22}{}", self.lock, part("Writes", &self.writes));
        if let Some(r) = &self.reads {
            s += "  ";
            s += &part("Reads", r);
        }
        if let Some(p) = &self.pipe {
            s += &format!("  Pipe: {} {} {} {}", p[0], p[1], p[2], p[3]);
        }
        if let Some(paths) = &self.paths {
            s += "  Paths:";
            for p in paths {
                s += &format!(
                    " {}={}{}",
                    p.path,
                    p.runs,
                    if p.runs == 0 { " !!!" } else { "" }
                );
            }
        }
        if self.other_failures > 0 {
            s += &format!("  Other: {} !!!", self.other_failures);
        }
        s
    }
}

/// The JSON report.
#[derive(Serialize, Debug)]
pub struct Report {
    /// locklab's version.
    pub locklab_version: String,
    /// The machine.
    pub machine: crate::engine::metrics::Machine,
    /// Seconds per lock.
    pub duration_s: u64,
    /// Worker threads per lock.
    pub threads: usize,
    /// The stressors in rotation.
    pub stressors: Vec<String>,
    /// One per lock.
    pub results: Vec<LockResult>,
    /// `true` when every lock passed.
    pub ok: bool,
}
