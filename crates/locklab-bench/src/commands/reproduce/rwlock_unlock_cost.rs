//! Seed 000 (Morton 2003): a million one-byte `write()`s took twice as long on an SMP kernel as on a
//! UP one, on one CPU: the SMP build's locked instructions (fget/fput's file count, the files lock,
//! find_lock_page, the page lock). An x86 `read_unlock` is a locked instruction where `spin_unlock`
//! is a plain store, so turning the files lock from an rwlock into a spinlock was 5% faster; a plain
//! file count under that spinlock "would probably speed things up further".
//!
//! The model, one operation = one 1-byte `write()` on one thread:
//! 1. `fget`: the files lock (read side), the file's count up, unlock;
//! 2. `find_lock_page`: the mapping's lock around a page-cache lookup and the page's count up, then the
//!    page lock bit set;
//! 3. the byte copied into the page, the page's dirty bit set and the file size updated;
//! 4. `__mark_inode_dirty`: the inode lock around the inode's state;
//! 5. the page unlocked and its count down, `f_pos` advanced;
//! 6. `fput`: the file's count down.
//!
//! Arms: "UP" (every lock compiled out and every atomic a plain read-modify-write: what a UP kernel
//! builds), and three "SMP" builds: the files lock an rwlock (our `RwSpinLock`: a locked instruction to
//! lock and one to unlock), a spinlock (our `SpinLock`: locked to lock, a plain store to unlock), and a
//! spinlock with a plain file count under it (fget and fput each take the spinlock once). Every other
//! SMP step uses the kernel's SMP instruction: locked RMWs for counts and page bits, our `SpinLock` for
//! the mapping and inode locks. Reference row: the seed's own command, `dd if=/dev/zero of=F bs=1
//! count=1M`, on tmpfs, timed as the post prints it (user, system, total).
//!
//! `figures`: `{"arms": [{"arm", "ns_per_write"}], "dd": {...} | null, "seed": {...}}`.

use super::Reproduction;
use crate::engine::runner::{Clock, Op, Tally, TrialSpec, allowed_cpus, run_trial};
use locklab::raw::{RawQueuedSpinLock, RawRwSpinLock};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};

/// Bytes per page.
const PAGE: u64 = 4096;
/// Pages in the model's file (its page cache): the write loop wraps around.
const PAGES: usize = 256;
const PG_LOCKED: u32 = 1 << 0;
const PG_DIRTY: u32 = 1 << 1;
const I_DIRTY: u32 = 1 << 0;

/// How the files lock and the file count are built.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Files {
    /// An rwlock; the count an atomic.
    RwLock,
    /// A spinlock; the count an atomic.
    SpinLock,
    /// A spinlock; the count a plain integer under it.
    SpinPlainCount,
}

struct Page {
    flags: AtomicU32,
    count: AtomicU32,
    data: Vec<AtomicU8>,
}

/// The file, its inode, its page cache, and the files table lock.
struct WritePath<'a, const SMP: bool> {
    files: Files,
    files_rw: RawRwSpinLock,
    files_spin: RawQueuedSpinLock,
    f_count: AtomicU32,
    f_pos: AtomicU64,
    mapping_lock: RawQueuedSpinLock,
    pages: Vec<Page>,
    inode_lock: RawQueuedSpinLock,
    i_state: AtomicU32,
    i_size: AtomicU64,
    clock: &'a dyn Clock,
}

impl<const SMP: bool> WritePath<'_, SMP> {
    /// `atomic_inc` (SMP: a locked add; UP: a plain add).
    #[inline(always)]
    fn inc(c: &AtomicU32) {
        if SMP {
            c.fetch_add(1, Relaxed);
        } else {
            c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }
    /// `atomic_dec_and_test`.
    #[inline(always)]
    fn dec_and_test(c: &AtomicU32) -> bool {
        if SMP {
            c.fetch_sub(1, Relaxed) == 1
        } else {
            let v = c.load(Relaxed).wrapping_sub(1);
            c.store(v, Relaxed);
            v == 0
        }
    }
    /// `test_and_set_bit` / `set_bit`: the old value of the bit.
    #[inline(always)]
    fn set_bit(w: &AtomicU32, bit: u32) -> bool {
        if SMP {
            w.fetch_or(bit, Relaxed) & bit != 0
        } else {
            let v = w.load(Relaxed);
            w.store(v | bit, Relaxed);
            v & bit != 0
        }
    }
    /// `clear_bit`.
    #[inline(always)]
    fn clear_bit(w: &AtomicU32, bit: u32) {
        if SMP {
            w.fetch_and(!bit, Relaxed);
        } else {
            w.store(w.load(Relaxed) & !bit, Relaxed);
        }
    }
    /// `spin_lock` ... `spin_unlock` around `f` (UP: `f` alone).
    #[inline(always)]
    fn spin<R>(l: &RawQueuedSpinLock, f: impl FnOnce() -> R) -> R {
        if SMP {
            l.lock();
            let r = f();
            // SAFETY: locked just above by this thread.
            unsafe { l.unlock() };
            r
        } else {
            f()
        }
    }

    fn fget(&self) {
        if !SMP {
            Self::inc(&self.f_count);
            return;
        }
        match self.files {
            Files::RwLock => {
                self.files_rw.read();
                Self::inc(&self.f_count);
                // SAFETY: read-locked just above by this thread.
                unsafe { self.files_rw.read_unlock() };
            }
            Files::SpinLock => Self::spin(&self.files_spin, || Self::inc(&self.f_count)),
            Files::SpinPlainCount => Self::spin(&self.files_spin, || {
                self.f_count.store(self.f_count.load(Relaxed) + 1, Relaxed)
            }),
        }
    }

    fn fput(&self) -> bool {
        if SMP && self.files == Files::SpinPlainCount {
            Self::spin(&self.files_spin, || {
                let v = self.f_count.load(Relaxed) - 1;
                self.f_count.store(v, Relaxed);
                v == 0
            })
        } else {
            Self::dec_and_test(&self.f_count)
        }
    }

    /// One `write(fd, "x", 1)`; returns the byte's page index (for the tally).
    #[inline(never)]
    fn write_byte(&self, byte: u8) -> u64 {
        self.fget();
        let pos = self.f_pos.load(Relaxed);
        let index = (pos / PAGE) as usize % PAGES;
        // find_lock_page: the page-cache lookup under the mapping lock, a reference, the page lock.
        let page = Self::spin(&self.mapping_lock, || {
            let p = &self.pages[std::hint::black_box(index)];
            Self::inc(&p.count);
            p
        });
        let contended = Self::set_bit(&page.flags, PG_LOCKED);
        debug_assert!(!contended, "one writer: the page lock is free");
        // prepare/commit_write: the copy, the page dirtied, the size extended.
        page.data[(pos % PAGE) as usize].store(byte, Relaxed);
        Self::set_bit(&page.flags, PG_DIRTY);
        if pos + 1 > self.i_size.load(Relaxed) {
            self.i_size.store(pos + 1, Relaxed);
        }
        // __mark_inode_dirty under the inode lock.
        Self::spin(&self.inode_lock, || {
            self.i_state
                .store(self.i_state.load(Relaxed) | I_DIRTY, Relaxed)
        });
        // unlock_page, page_cache_release.
        Self::clear_bit(&page.flags, PG_LOCKED);
        Self::dec_and_test(&page.count);
        self.f_pos.store(pos + 1, Relaxed);
        let last = self.fput();
        debug_assert!(!last, "the file's own reference stays");
        index as u64
    }
}

impl<const SMP: bool> Op for WritePath<'_, SMP> {
    #[inline(always)]
    fn run<const SAMPLE: bool>(&self, _: usize, i: u64, tally: &mut Tally) -> u64 {
        let start = if SAMPLE { self.clock.now_ns() } else { 0 };
        tally.sink ^= self.write_byte(i as u8);
        if SAMPLE {
            self.clock.now_ns() - start
        } else {
            0
        }
    }
}

fn model<const SMP: bool>(files: Files, clock: &dyn Clock) -> WritePath<'_, SMP> {
    WritePath {
        files,
        files_rw: RawRwSpinLock::new(),
        files_spin: RawQueuedSpinLock::new(),
        f_count: AtomicU32::new(1),
        f_pos: AtomicU64::new(0),
        mapping_lock: RawQueuedSpinLock::new(),
        pages: (0..PAGES)
            .map(|_| Page {
                flags: AtomicU32::new(0),
                count: AtomicU32::new(1),
                data: (0..PAGE).map(|_| AtomicU8::new(0)).collect(),
            })
            .collect(),
        inode_lock: RawQueuedSpinLock::new(),
        i_state: AtomicU32::new(0),
        i_size: AtomicU64::new(0),
        clock,
    }
}

/// The arms, by name: the build and the files lock.
pub const ARMS: [(&str, bool, Files); 4] = [
    ("UP", false, Files::SpinLock),
    ("SMP, files_lock rwlock", true, Files::RwLock),
    ("SMP, files_lock spinlock", true, Files::SpinLock),
    ("SMP, spinlock + plain f_count", true, Files::SpinPlainCount),
];

fn measure(smp: bool, files: Files, spec: &TrialSpec, clock: &dyn Clock) -> f64 {
    let out = if smp {
        run_trial(spec, clock, model::<true>(files, clock))
    } else {
        run_trial(spec, clock, model::<false>(files, clock))
    };
    1e9 / out.ops_per_sec().max(1e-9)
}

/// The seed's figures (2.7 GHz P4-HT, 2.5.65-mm4, `time dd ... bs=1 count=1M`), seconds.
pub const SEED_UP: (f64, f64, f64) = (0.34, 1.00, 1.348);
/// SMP, files_lock an rwlock: user, system, total.
pub const SEED_SMP_RW: (f64, f64, f64) = (0.41, 2.04, 2.445);
/// SMP, files_lock a spinlock.
pub const SEED_SMP_SPIN: (f64, f64, f64) = (0.34, 2.00, 2.329);

/// The dd reference row: user, system, total seconds for `count` one-byte writes, and the file's
/// directory.
#[derive(Debug, serde::Serialize)]
pub struct Dd {
    /// Writes made.
    pub count: u64,
    /// Directory of the file (tmpfs where the machine has `/dev/shm`).
    pub dir: String,
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub system_s: f64,
    /// Wall seconds.
    pub total_s: f64,
}

/// Runs the seed's `dd` (None when dd is missing or fails).
pub fn dd(count: u64) -> Option<Dd> {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let file = tempfile_in(&dir)?;
    let (u0, s0) = crate::engine::runner::children_cpu_ns();
    let t = std::time::Instant::now();
    let st = std::process::Command::new("dd")
        .args(["if=/dev/zero", &format!("of={}", file.display()), "bs=1"])
        .arg(format!("count={count}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    let total_s = t.elapsed().as_secs_f64();
    let (u1, s1) = crate::engine::runner::children_cpu_ns();
    let _ = std::fs::remove_file(&file);
    if !st.ok()?.success() {
        return None;
    }
    Some(Dd {
        count,
        dir: dir.display().to_string(),
        user_s: u1.saturating_sub(u0) as f64 / 1e9,
        system_s: s1.saturating_sub(s0) as f64 / 1e9,
        total_s,
    })
}

fn tempfile_in(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let p = dir.join(format!("locklab-seed000-{}", std::process::id()));
    std::fs::File::create(&p).ok()?;
    Some(p)
}

/// The seed's claims on our ns per write (in [`ARMS`] order): (1) SMP slower than UP (the seed:
/// 1.81x in total time, 2.04x in system time); (2) the spinlock files lock faster than the rwlock
/// (the seed: 5%). Reported beside: whether the plain count under the spinlock is faster still (the
/// post's guess).
pub fn verdict(ns: &[f64; 4]) -> (bool, String) {
    let [up, rw, spin, plain] = *ns;
    let smp_x = rw / up;
    let spin_gain = 100.0 * (rw - spin) / rw;
    let plain_gain = 100.0 * (spin - plain) / spin;
    let seed_x = SEED_SMP_RW.2 / SEED_UP.2;
    let seed_gain = 100.0 * (SEED_SMP_RW.2 - SEED_SMP_SPIN.2) / SEED_SMP_RW.2;
    let slower = smp_x > 1.05;
    let faster = spin_gain > 0.0;
    let ok = slower && faster;
    let text = format!(
        "{}: one CPU, SMP (rwlock files lock) {smp_x:.2}x UP's time per write (seed {seed_x:.2}x total, {:.2}x system; {}); rwlock -> spinlock {spin_gain:+.1}% (seed {seed_gain:+.1}%; {}); a plain f_count under the spinlock {plain_gain:+.1}% more (the post's guess: faster still; {}). Our model has no system-call entry, so its SMP share is larger than the seed's",
        if ok { "reproduced" } else { "not reproduced" },
        SEED_SMP_RW.1 / SEED_UP.1,
        if slower {
            "the SMP build's locked instructions cost, as in the seed"
        } else {
            "NOT slower here"
        },
        if faster {
            "read_unlock's locked instruction costs, as in the seed"
        } else {
            "NOT faster here"
        },
        if plain_gain > 0.0 {
            "it is"
        } else {
            "it is not"
        },
    );
    (ok, text)
}

/// Runs the four arms on one thread (interleaved repeats, medians) and the dd reference row.
pub fn run(quick: bool, clock: &dyn Clock) -> Reproduction {
    let cpus = allowed_cpus();
    let repeats = if quick { 5 } else { 9 };
    let spec = super::model_spec(
        1,
        if quick { 100 } else { 300 },
        cpus.into_iter().take(1).collect(),
    );
    let mut runs = vec![vec![]; ARMS.len()];
    for _ in 0..repeats {
        for (a, &(_, smp, files)) in ARMS.iter().enumerate() {
            runs[a].push(measure(smp, files, &spec, clock));
        }
    }
    let mut ns = [0.0; 4];
    for (a, r) in runs.into_iter().enumerate() {
        ns[a] = super::model::median_f64(r);
    }
    let dd = dd(if quick { 256 * 1024 } else { 1024 * 1024 });
    let (reproduced, verdict) = verdict(&ns);
    let title = "Morton 2003: one-byte write()s run twice as slow on an SMP kernel (locked instructions on one CPU); rwlock -> spinlock 5% faster";
    let mut table = format!(
        "seed 000: {title}\n{:<32}{:>12}{:>10}   {}\n",
        "build (model of the write path)", "ns/write", "vs UP", "seed (user, system, total s)"
    );
    let seeds = [Some(SEED_UP), Some(SEED_SMP_RW), Some(SEED_SMP_SPIN), None];
    for (((name, _, _), v), s) in ARMS.iter().zip(&ns).zip(seeds) {
        let s = s.map_or("-".to_string(), |(u, sy, t)| {
            format!("{u:.2}s user {sy:.2}s system {t:.3} total")
        });
        table += &format!("{name:<32}{v:>12.2}{:>9.2}x   {s}\n", v / ns[0]);
    }
    match &dd {
        Some(d) => {
            let per = d.total_s * 1e9 / d.count as f64;
            table += &format!(
                "reference: dd if=/dev/zero of={}/F bs=1 count={}: {:.2}s user {:.2}s system {:.3} total ({per:.0} ns/write; this kernel, SMP): the model's SMP locked instructions ({:.1} ns) would be {:.1}% of it\n",
                d.dir,
                d.count,
                d.user_s,
                d.system_s,
                d.total_s,
                ns[1] - ns[0],
                100.0 * (ns[1] - ns[0]) / per.max(1e-9),
            )
        }
        None => table += "reference: dd could not run here\n",
    }
    let arms: Vec<_> = ARMS
        .iter()
        .zip(&ns)
        .map(|((name, _, _), v)| serde_json::json!({ "arm": name, "ns_per_write": v }))
        .collect();
    Reproduction {
        seed: "000".into(),
        title: title.into(),
        figures: serde_json::json!({
            "arms": arms,
            "dd": dd,
            "seed": { "up": SEED_UP, "smp_rwlock": SEED_SMP_RW, "smp_spinlock": SEED_SMP_SPIN },
        }),
        table,
        reproduced,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::runner::SystemClock;

    #[test]
    fn every_build_writes_the_same_bytes() {
        let clock = SystemClock::default();
        for &(name, smp, files) in &ARMS {
            let check =
                |pages: &[Page], f_count: u32, i_size: u64| {
                    assert_eq!(f_count, 1, "{name}: fget/fput balance");
                    assert_eq!(i_size, 5000, "{name}");
                    assert_eq!(
                        pages[1].data[5000 - 4096 - 1].load(Relaxed),
                        (4999 % 256) as u8
                    );
                    assert!(
                        pages.iter().all(|p| p.count.load(Relaxed) == 1
                            && p.flags.load(Relaxed) & PG_LOCKED == 0)
                    );
                    assert_eq!(pages[1].flags.load(Relaxed) & PG_DIRTY, PG_DIRTY);
                };
            if smp {
                let m = model::<true>(files, &clock);
                (0..5000).for_each(|i| {
                    m.write_byte(i as u8);
                });
                check(&m.pages, m.f_count.load(Relaxed), m.i_size.load(Relaxed));
                assert!(!m.files_rw.is_locked() && !m.files_spin.is_locked());
            } else {
                let m = model::<false>(files, &clock);
                (0..5000).for_each(|i| {
                    m.write_byte(i as u8);
                });
                check(&m.pages, m.f_count.load(Relaxed), m.i_size.load(Relaxed));
            }
        }
    }

    #[test]
    fn the_verdict_needs_both_claims() {
        let (ok, text) = verdict(&[10.0, 30.0, 28.0, 26.0]);
        assert!(
            ok && text.contains("3.00x") && text.contains("+6.7%"),
            "{text}"
        );
        let (ok, text) = verdict(&[10.0, 30.0, 31.0, 26.0]);
        assert!(!ok && text.contains("NOT faster"), "{text}");
        let (ok, text) = verdict(&[10.0, 10.2, 9.0, 9.0]);
        assert!(!ok && text.contains("NOT slower"), "{text}");
    }

    #[test]
    fn dd_reference_times_the_real_writes() {
        let Some(d) = dd(20_000) else {
            return; // no dd on this machine: the row says so
        };
        assert_eq!(d.count, 20_000);
        assert!(
            d.total_s > 0.0 && d.user_s + d.system_s <= d.total_s * 1.5 + 0.05,
            "{d:?}"
        );
    }
}
