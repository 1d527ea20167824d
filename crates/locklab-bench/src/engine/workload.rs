//! The workloads of `docs lab.md`: what one operation is.

use serde::Serialize;
use std::fmt;

/// A workload: what each thread does in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// lock; critical section writing the protected data; unlock; think.
    Mutex,
    /// like `mutex`, but `read_pct` of the operations take the shared mode and only read.
    Rw,
    /// take a reference to a shared object and drop it.
    Refcount,
    /// a bounded queue on one mutex and two condvars: half the threads produce, half consume; an op is
    /// a message delivered.
    Condvar,
    /// RCU read side: read lock, dereference of the published object, unlock.
    #[serde(rename = "rcu-read")]
    RcuRead,
    /// each thread publishes a new object in its own slot and retires the old one (seed 004's
    /// close(open()) shape: call_rcu on every op).
    #[serde(rename = "call-rcu")]
    CallRcu,
    /// one updater (thread 0) replaces the one published object and retires the old one with call_rcu,
    /// while every other thread reads it; reads/s and updates/s reported apart.
    #[serde(rename = "rcu-update")]
    RcuUpdate,
    /// every thread calls `synchronize` (a blocking grace period) in a loop: how well concurrent
    /// callers share grace periods.
    #[serde(rename = "rcu-sync")]
    RcuSync,
}

impl Workload {
    /// Every workload, in the order the default suite runs them.
    pub const ALL: [Workload; 8] = [
        Workload::Mutex,
        Workload::Rw,
        Workload::Refcount,
        Workload::Condvar,
        Workload::RcuRead,
        Workload::CallRcu,
        Workload::RcuUpdate,
        Workload::RcuSync,
    ];

    /// Every workload's name, for `bench --help`: `mutex, rw, ...`.
    ///
    /// ```
    /// use locklab_bench::engine::workload::Workload;
    /// assert!(Workload::names_help().starts_with("The workload: mutex, rw, "));
    /// ```
    pub fn names_help() -> String {
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        format!(
            "The workload: {} (`locklab list` says what each does).",
            names.join(", ")
        )
    }

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Mutex => "mutex",
            Workload::Rw => "rw",
            Workload::Refcount => "refcount",
            Workload::Condvar => "condvar",
            Workload::RcuRead => "rcu-read",
            Workload::CallRcu => "call-rcu",
            Workload::RcuUpdate => "rcu-update",
            Workload::RcuSync => "rcu-sync",
        }
    }

    /// One line for `locklab list`.
    pub fn summary(self) -> &'static str {
        match self {
            Workload::Mutex => {
                "lock; cs of --cs-ns writing the data; unlock; --think-ns of private work"
            }
            Workload::Rw => {
                "as mutex, but --read-pct of the ops take the shared mode and only read"
            }
            Workload::Refcount => {
                "take a reference to a shared object, hold it for --cs-ns, drop it"
            }
            Workload::Condvar => {
                "bounded queue (--slots) on a mutex + 2 condvars; half produce, half consume (--notify one|all); ops = messages"
            }
            Workload::RcuRead => {
                "RCU read lock, dereference the published object (--cs-ns of work on it), unlock"
            }
            Workload::CallRcu => {
                "publish a new object in the thread's own slot, retire the old one (call_rcu)"
            }
            Workload::RcuUpdate => {
                "thread 0 replaces the published object and retires the old one (call_rcu); the others read it"
            }
            Workload::RcuSync => {
                "every thread calls synchronize_rcu in a loop (grace periods shared between callers)"
            }
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The data every lock protects: one cache line of words that the critical section reads or writes.
#[derive(Default, Clone, Copy)]
#[repr(C, align(64))]
pub struct Shared {
    /// The words.
    pub words: [u64; 8],
}

// SAFETY: `repr(C)`, 64 bytes of `u64`s with alignment 64: no padding, every byte initialised; `Copy`
// and `'static` as the trait requires. (Lets `SeqLock<Shared>` store its byte image.)
unsafe impl bytemuck::NoUninit for Shared {}

impl Shared {
    /// An exclusive critical section: `loops` of work folded into the data.
    #[inline]
    pub fn write(&mut self, loops: u64) {
        let v = crate::engine::calibrated_work::spin_work(loops, self.words[0]);
        self.words[0] = v;
        self.words[1] = self.words[1].wrapping_add(1);
    }

    /// A shared critical section: `loops` of work on a copy of the data.
    #[inline]
    pub fn read(&self, loops: u64) -> u64 {
        crate::engine::calibrated_work::spin_work(loops, self.words[0] ^ self.words[1])
    }
}

/// The name of the no-lock baseline: the same loop with no lock, each thread on its own data.
pub const NONE: &str = "none";
