//! Seed 002 (Torvalds 2013): one serializing instruction per call shows in a profile even
//! single-threaded. The seed profiled stat() in a loop: `lg_local_lock` (the mount brlock, taken twice
//! per lookup: path_init and mntput) stayed at 6.4% of the profile with one thread, 85% of it on one
//! `lock xadd`; lockref's get/put on the final dentry were 3% each single-threaded and 20%+ each once
//! threads bounced the dentry's line.
//!
//! The model, one operation = one stat():
//! 1. the mount lock's read side (path_init);
//! 2. a lockless hash walk of four path components over a read-only dentry table (the RCU walk);
//! 3. a reference on the final dentry (`lockref` get, or a count under our spinlock, or none);
//! 4. the stat copy: 144 bytes of the inode's attributes read out;
//! 5. the reference dropped, and the mount lock's read side again (mntput).
//!
//! Arms: the mount lock is our `BrLock` (a per-CPU spinlock: a locked RMW to take and one to drop,
//! as `lg_local_lock`), our `PercpuRwSem` (no locked instruction) or none; the reference is a
//! `LockRef`, a count under a spinlock, or none. A lock's share of the whole operation is measured by
//! subtraction: (arm - the same arm without it) / arm, at 1 thread and at 2 threads (all threads on
//! the same final dentry, so its line bounces; the brlock's shards do not).
//!
//! `figures`: `{"arms": [{"arm", "ns_per_op": [1 thread, 2 threads]}], "shares": {...}, "seed": {...}}`
//! (ns per op per thread: wall time x threads / ops).

use super::Reproduction;
use super::model::median_f64;
use crate::engine::runner::{Clock, NoCount, Op, Tally, TrialSpec, allowed_cpus, run_trial};
use crate::engine::workload::Shared;
use crate::locks::{LockUnderTest, RefCountUnderTest, ours};
use crossbeam_utils::CachePadded;
use std::hint::black_box;

/// The mount lock's read side, as the lookup takes it.
pub trait Mount: Send + Sync + 'static {
    /// A new, unlocked mount lock.
    fn new() -> Self;
    /// Read lock, read a word of the mount, unlock.
    fn hold(&self) -> u64;
}

/// A mount lock that is one of the lab's locks (its shared mode).
pub struct Locked<L>(L);

impl<L: LockUnderTest> Mount for Locked<L> {
    fn new() -> Self {
        Locked(L::new())
    }
    #[inline(always)]
    fn hold(&self) -> u64 {
        self.0.shared(|d| d.words[0])
    }
}

/// No mount lock: the word read directly.
pub struct NoMount(Shared);

impl Mount for NoMount {
    fn new() -> Self {
        NoMount(Shared::default())
    }
    #[inline(always)]
    fn hold(&self) -> u64 {
        self.0.words[0]
    }
}

/// A dentry: its parent, name and name hash, and its inode's attributes (what stat copies out).
struct Dentry {
    parent: usize,
    name: Vec<u8>,
    stat: [u64; 18],
}

/// The dentry cache: a read-only open hash table over (parent, name), walked without locks.
pub struct Dcache {
    dentries: Vec<Dentry>,
    /// Index + 1 of the dentry in each bucket (0: empty), open addressing.
    buckets: Vec<u32>,
}

/// The path every lookup resolves (from the root, dentry 0).
pub const PATH: [&[u8]; 4] = [b"usr", b"share", b"locklab", b"seed-002.txt"];

#[inline(always)]
fn hash(parent: usize, name: &[u8]) -> u64 {
    // FNV-1a over the name, seeded with the parent (as the kernel salts the name hash with the parent).
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ parent as u64;
    for &b in name {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

impl Dcache {
    /// The root, the path's four dentries and 2,000 siblings, in a table of 4,096 buckets.
    pub fn new() -> Self {
        let mut d = Dcache {
            dentries: vec![Dentry {
                parent: 0,
                name: b"/".to_vec(),
                stat: [0; 18],
            }],
            buckets: vec![0; 4096],
        };
        let mut parent = 0;
        for (depth, comp) in PATH.iter().enumerate() {
            for k in 0..500 {
                d.insert(parent, format!("f{depth}-{k}").into_bytes());
            }
            parent = d.insert(parent, comp.to_vec());
        }
        d
    }

    fn insert(&mut self, parent: usize, name: Vec<u8>) -> usize {
        let i = self.dentries.len();
        let mask = self.buckets.len() - 1;
        let mut b = hash(parent, &name) as usize & mask;
        while self.buckets[b] != 0 {
            b = (b + 1) & mask;
        }
        self.buckets[b] = i as u32 + 1;
        let stat = std::array::from_fn(|k| (i * 31 + k) as u64);
        self.dentries.push(Dentry { parent, name, stat });
        i
    }

    /// Resolves [`PATH`] from the root: the final dentry's index.
    #[inline(always)]
    pub fn walk(&self) -> usize {
        let mask = self.buckets.len() - 1;
        let mut cur = 0;
        for comp in PATH {
            let comp = black_box(comp);
            let mut b = hash(cur, comp) as usize & mask;
            loop {
                let e = self.buckets[b] as usize;
                assert!(e != 0, "every component is in the table");
                let d = &self.dentries[e - 1];
                if d.parent == cur && d.name == comp {
                    cur = e - 1;
                    break;
                }
                b = (b + 1) & mask;
            }
        }
        cur
    }

    /// The stat copy: the dentry's attributes read out and folded.
    #[inline(always)]
    fn stat(&self, d: usize) -> u64 {
        let st = black_box(self.dentries[d].stat);
        st.iter().fold(0, |a, &w| a ^ w)
    }
}

impl Default for Dcache {
    fn default() -> Self {
        Self::new()
    }
}

/// One stat() on mount lock `M` and dentry reference `R`.
/// The mount lock and the dentry's count on lines of their own (in the kernel they are different
/// objects): the count's line bounces at 2 threads, the mount lock's must not with it.
struct StatOp<'a, M, R> {
    mount: CachePadded<M>,
    dref: CachePadded<R>,
    cache: Dcache,
    clock: &'a dyn Clock,
}

impl<M: Mount, R: RefCountUnderTest> Op for StatOp<'_, M, R> {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, _: usize, _: u64, tally: &mut Tally) -> u64 {
        let start = if SAMPLE { self.clock.now_ns() } else { 0 };
        tally.sink ^= self.mount.hold(); // path_init
        let d = self.cache.walk();
        self.dref.get(); // the final dentry's reference (lockref_get_or_lock)
        tally.sink ^= self.cache.stat(d);
        self.dref.put(); // dput (lockref_put_or_lock)
        tally.sink ^= self.mount.hold(); // mntput
        if SAMPLE {
            self.clock.now_ns() - start
        } else {
            0
        }
    }
}

/// ns per stat() per thread for arm `M` x `R` at `threads`, the median of `repeats` windows.
fn measure<M: Mount, R: RefCountUnderTest>(spec: &TrialSpec, clock: &dyn Clock) -> f64 {
    let op = StatOp {
        mount: CachePadded::new(M::new()),
        dref: CachePadded::new(R::new()),
        cache: Dcache::new(),
        clock,
    };
    let out = run_trial(spec, clock, op);
    spec.threads as f64 * 1e9 / out.ops_per_sec().max(1e-9)
}

type Arm = (&'static str, fn(&TrialSpec, &dyn Clock) -> f64);

/// The arms, by name: mount lock + dentry reference.
const ARMS: [Arm; 5] = [
    (
        "brlock + spinlock-count",
        measure::<Locked<ours::Br>, ours::SpinlockCount>,
    ),
    (
        "brlock + lockref",
        measure::<Locked<ours::Br>, ours::LockRefCount>,
    ),
    (
        "percpu-rwsem + lockref",
        measure::<Locked<ours::PercpuRwSem>, ours::LockRefCount>,
    ),
    (
        "no mount lock + lockref",
        measure::<NoMount, ours::LockRefCount>,
    ),
    (
        "brlock + no reference",
        measure::<Locked<ours::Br>, NoCount>,
    ),
];

/// The seed's profile figures: `lg_local_lock`'s share single-threaded, and lockref get's (and put's)
/// share single-threaded and with bouncing.
pub const SEED_MOUNT_SHARE_1: f64 = 6.40;
/// lockref_get_or_lock's share, single-threaded (put's is the same), %.
pub const SEED_LOCKREF_SHARE_1: f64 = 3.0;
/// Its share with threads bouncing the dentry ("20%+ each"), %.
pub const SEED_LOCKREF_SHARE_N: f64 = 20.0;

/// The measured shares, in %, from the arms' ns/op (1 thread, 2 threads).
#[derive(Debug, serde::Serialize)]
pub struct Shares {
    /// The brlock mount lock (both calls) in `brlock + lockref`, 1 thread.
    pub brlock_1: f64,
    /// The percpu-rwsem mount lock in `percpu-rwsem + lockref`, 1 thread.
    pub percpu_1: f64,
    /// lockref get + put in `brlock + lockref`, 1 thread.
    pub lockref_1: f64,
    /// The same at 2 threads (the dentry's line bouncing).
    pub lockref_2: f64,
    /// A spinlock-protected count's get + put in `brlock + spinlock-count`, 2 threads.
    pub spin_count_2: f64,
    /// What the percpu-rwsem mount lock saves over the brlock per stat() at 1 thread, ns: the median
    /// over repeats of `brlock + lockref` minus `percpu-rwsem + lockref`, each pair measured back to
    /// back (the machine's speed drifts between repeats more than the gap between the two).
    pub percpu_saves_ns_1: f64,
}

/// Shares from the arms' figures (`ns[arm] = [1 thread, 2 threads]`, in `ARMS` order) and the
/// paired saving (see [`Shares::percpu_saves_ns_1`]).
pub fn shares(ns: &[[f64; 2]; 5], percpu_saves_ns_1: f64) -> Shares {
    let share = |with: f64, without: f64| 100.0 * (with - without) / with;
    let [spin, br, percpu, nomount, noref] = ns;
    Shares {
        brlock_1: share(br[0], nomount[0]),
        percpu_1: share(percpu[0], nomount[0]),
        lockref_1: share(br[0], noref[0]),
        lockref_2: share(br[1], noref[1]),
        spin_count_2: share(spin[1], noref[1]),
        percpu_saves_ns_1,
    }
}

/// The seed's claims on our shares: (1) the brlock mount lock is a visible share single-threaded
/// (its locked instructions, no bouncing: at least 2%) and the mount lock without locked
/// instructions costs less (paired: [`Shares::percpu_saves_ns_1`] > 0); (2) bouncing multiplies the reference's share (at least 2x, the seed
/// went from 3% to 20%+).
pub fn verdict(s: &Shares) -> (bool, String) {
    let visible = s.brlock_1 >= 2.0 && s.percpu_saves_ns_1 > 0.0;
    let bounces = s.lockref_2 >= 2.0 * s.lockref_1.max(0.5);
    let ok = visible && bounces;
    let text = format!(
        "{}: 1 thread: brlock mount lock {:.1}% of a stat() (seed: lg_local_lock {SEED_MOUNT_SHARE_1:.1}%), percpu-rwsem's {:.1}%, {:.1} ns less per stat() in paired runs ({}); lockref get+put {:.1}% at 1 thread -> {:.1}% at 2 threads (seed: {SEED_LOCKREF_SHARE_1:.0}% -> {SEED_LOCKREF_SHARE_N:.0}%+ each; {}); a count under a spinlock {:.1}% at 2 threads. Our stat() is a model without the system call, so every share is larger than the seed's",
        if ok { "reproduced" } else { "not reproduced" },
        s.brlock_1,
        s.percpu_1,
        s.percpu_saves_ns_1,
        if visible {
            "a serializing instruction shows single-threaded, as in the seed"
        } else {
            "NOT visible here"
        },
        s.lockref_1,
        s.lockref_2,
        if bounces {
            "bouncing multiplies it, as in the seed"
        } else {
            "NOT multiplied by bouncing here"
        },
        s.spin_count_2,
    );
    (ok, text)
}

/// Runs the arms at 1 and 2 threads (interleaved repeats, medians), prints nothing.
pub fn run(quick: bool, clock: &dyn Clock) -> Reproduction {
    let cpus = allowed_cpus();
    let repeats = if quick { 5 } else { 7 };
    let spec = |threads| super::model_spec(threads, if quick { 100 } else { 400 }, cpus.clone());
    let mut ns = [[0.0; 2]; 5];
    let mut percpu_saves_ns_1 = 0.0;
    for (col, threads) in [1usize, 2].into_iter().enumerate() {
        let s = spec(threads);
        let mut runs = vec![vec![]; ARMS.len()];
        for _ in 0..repeats {
            for (a, (_, f)) in ARMS.iter().enumerate() {
                runs[a].push(f(&s, clock));
            }
        }
        if col == 0 {
            // ARMS[1] is brlock + lockref, ARMS[2] percpu-rwsem + lockref: run back to back.
            percpu_saves_ns_1 =
                median_f64(runs[1].iter().zip(&runs[2]).map(|(b, p)| b - p).collect());
        }
        for (a, r) in runs.into_iter().enumerate() {
            ns[a][col] = median_f64(r);
        }
    }
    let sh = shares(&ns, percpu_saves_ns_1);
    let (reproduced, verdict) = verdict(&sh);
    let title = "Torvalds 2013: one serializing instruction per call shows even single-threaded (a stat() path lookup: mount lock twice, lockless walk, dentry reference)";
    let mut table = format!(
        "seed 002: {title}\n{:<26}{:>16}{:>22}\n",
        "mount lock + reference", "1 thread ns/op", "2 threads ns/op/thr"
    );
    for ((name, _), v) in ARMS.iter().zip(&ns) {
        table += &format!("{name:<26}{:>16.1}{:>22.1}\n", v[0], v[1]);
    }
    table += &format!(
        "share of a stat(): brlock mount lock {:.1}% (seed lg_local_lock {SEED_MOUNT_SHARE_1:.1}%), percpu-rwsem {:.1}%, lockref get+put {:.1}% -> {:.1}% at 2 threads (seed {SEED_LOCKREF_SHARE_1:.0}% -> {SEED_LOCKREF_SHARE_N:.0}%+ each)\n",
        sh.brlock_1, sh.percpu_1, sh.lockref_1, sh.lockref_2
    );
    let arms: Vec<_> = ARMS
        .iter()
        .zip(&ns)
        .map(|((name, _), v)| serde_json::json!({ "arm": name, "ns_per_op": v }))
        .collect();
    Reproduction {
        seed: "002".into(),
        title: title.into(),
        figures: serde_json::json!({
            "arms": arms,
            "shares": sh,
            "seed": {
                "mount_share_1_pct": SEED_MOUNT_SHARE_1,
                "lockref_share_1_pct": SEED_LOCKREF_SHARE_1,
                "lockref_share_n_pct": SEED_LOCKREF_SHARE_N,
            },
        }),
        table,
        reproduced,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_resolves_the_path_to_its_last_dentry() {
        let c = Dcache::new();
        let d = c.walk();
        assert_eq!(c.dentries[d].name, PATH[3]);
        let mut up = vec![];
        let mut cur = d;
        while cur != 0 {
            up.push(c.dentries[cur].name.clone());
            cur = c.dentries[cur].parent;
        }
        up.reverse();
        assert_eq!(up, PATH.map(|p| p.to_vec()));
    }

    #[test]
    fn shares_are_measured_by_subtraction() {
        // spin, brlock+lockref, percpu+lockref, no mount, no reference
        let ns = [
            [30.0, 90.0],
            [20.0, 60.0],
            [16.0, 50.0],
            [15.0, 48.0],
            [18.0, 30.0],
        ];
        let s = shares(&ns, 4.0);
        assert!((s.brlock_1 - 25.0).abs() < 1e-9);
        assert!((s.percpu_1 - 100.0 / 16.0).abs() < 1e-9);
        assert!((s.lockref_1 - 10.0).abs() < 1e-9);
        assert!((s.lockref_2 - 50.0).abs() < 1e-9);
        let (ok, text) = verdict(&s);
        assert!(ok, "{text}");
        // No bouncing effect: not reproduced, and the verdict says which claim failed.
        let flat = Shares {
            lockref_2: 12.0,
            ..s
        };
        let (ok, text) = verdict(&flat);
        assert!(!ok && text.contains("NOT multiplied"), "{text}");
        let invisible = Shares {
            brlock_1: 0.5,
            ..shares(&ns, 4.0)
        };
        let (ok, text) = verdict(&invisible);
        assert!(!ok && text.contains("NOT visible"), "{text}");
        // The lock without locked instructions no cheaper in paired runs: not reproduced either.
        let (ok, text) = verdict(&shares(&ns, -0.3));
        assert!(!ok && text.contains("NOT visible"), "{text}");
    }
}
