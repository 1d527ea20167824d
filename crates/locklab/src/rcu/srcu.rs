//! SRCU: sleepable RCU, one domain per use, readers that may block.
//!
//! # Algorithm (the kernel's srcutree, per thread instead of per CPU)
//! A [`SrcuDomain`] has an index `idx` (0 or 1, the low bit of a counter) and per-thread records with
//! two sets of counters, `locks[0..2]` and `unlocks[0..2]`, each written only by the record's thread:
//! `own` for [`read_lock`](SrcuDomain::read_lock) sections, `shared` for
//! [`down_read`](SrcuDomain::down_read) ones.
//! - **Read lock**: `i = idx`; `own.locks[i] += 1` (own counter, plain load + store); full fence. The
//!   guard remembers `i` and the record, and unlocks on that record.
//! - **Read unlock**: full fence; `own.unlocks[i] += 1` on the guard's record.
//! - **down_read / up_read** (the kernel's `srcu_down_read`/`srcu_up_read`, a `Send` guard that may
//!   end on another thread): the same steps on `shared` of whatever record the locking and the
//!   unlocking thread hold (the sums are what count).
//! - **Grace period** (under the grace-period lock, shared between concurrent callers): wait until
//!   index `!idx` is drained (sum of its unlocks, fence, sum of its locks, over both sets of every
//!   record: equal), flip `idx`, wait until the old index is drained.
//!
//! # Rules
//! - [`SrcuReadGuard`] is not `Send`: its sections are counted per thread (`own`, balanced on one
//!   record: `own.locks[i] - own.unlocks[i]` sections are open on it), so `synchronize`,
//!   `cond_synchronize` and `srcu_barrier` inside a section of the same domain on the same thread
//!   panic instead of waiting for themselves. A [`SrcuDownGuard`] may end on any thread, so it is not
//!   counted: waiting for a grace period while holding one waits for it (as in the kernel).
//! - `call_srcu` never waits inside a section (see `LIMIT`).
//! - `fork()`: the child's grace periods do not wait for other threads' [`SrcuReadGuard`] sections
//!   (those threads are gone): a record of another thread gets `own.unlocks = own.locks`, exact
//!   whichever instruction the fork caught its thread at (each count is one store); a
//!   [`SrcuDownGuard`] taken before the fork holds the child's grace periods until it is dropped in
//!   the child, wherever it is (it may have moved to the forking thread, so it cannot be discounted).
//!
//! # Why two waits
//! A reader that loaded `idx` before a flip may increment the old index after the writer's scan of it.
//! Draining the other index first, then flipping, then draining the old one waits out every reader that
//! began before the grace period: a reader that read the old `idx` is counted in it (the fences order
//! its increment before its section and the writer's sums), and one that read the new `idx` after the
//! flip began after the grace period started. Sums of unlocks are read before sums of locks (fenced), so
//! a reader running meanwhile can only make the index look busier, never drained too early.
//!
//! # Invariants
//! 1. A record's counters are written only by the thread that holds the record.
//! 2. For each index: sum(unlocks) <= sum(locks), equal when no reader holds that index.
//! 3. Per record and index, `own.unlocks <= own.locks`; a record goes back to the pool only with
//!    them equal (a guard that outlives its thread's thread-locals keeps it until its unlock).
//! 4. Records are never freed (type-stable), reused only when their thread has exited.
//!
//! # Orderings
//! SeqCst fences on both sides (Dekker's pattern between a reader's increment and the writer's sums).
//! The readers' fence is the price of sleeping readers (as in the kernel); memb's asymmetric fence
//! would make a blocked reader's `membarrier` IPI-free but not cheaper to reason about.

use super::callback::{Engine, Host};
use super::fork;
use super::gp::{self, GpSeq};
use super::protocol::{self, SrcuCounters};
use super::registry::{Pooled, Registry};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::cell::Cell;
use std::time::Duration;

#[repr(align(128))]
pub(super) struct SrcuRecord {
    /// [`SrcuReadGuard`] sections: locked and unlocked here (invariants 1 and 3).
    own: SrcuCounters,
    /// [`SrcuDownGuard`] sections counted in or out by the holding thread (invariant 1).
    shared: SrcuCounters,
    in_use: AtomicBool,
    /// The holder's `gp::thread_identity` (0: free, or being claimed): a `fork()` child keeps the
    /// forking thread's records and repairs every other one.
    owner: AtomicUsize,
}

impl SrcuRecord {
    /// Whether a [`SrcuReadGuard`] section is open on this record. Relaxed: called by the holder
    /// (its own counters), or in a fork child on the only thread.
    fn open(&self) -> bool {
        (0..2).any(|i| {
            self.own.locks[i].load(Ordering::Relaxed) != self.own.unlocks[i].load(Ordering::Relaxed)
        })
    }

    /// Gives the record back to the pool (its holder, with no section open on it).
    fn release(&self) {
        // Relaxed: read by a fork child's repair only (on the forking thread's copy).
        self.owner.store(0, Ordering::Relaxed);
        // Release: the next holder's Acquire claim sees our counter updates.
        self.in_use.store(false, Ordering::Release);
    }
}

impl Pooled for SrcuRecord {
    fn in_use(&self) -> &AtomicBool {
        &self.in_use
    }
}

/// An SRCU domain: readers may sleep inside their sections; grace periods wait only for this domain's
/// readers.
///
/// ```
/// use locklab::rcu::SrcuDomain;
/// static D: SrcuDomain = SrcuDomain::new();
/// let g = D.read_lock();
/// std::thread::sleep(std::time::Duration::from_millis(1)); // readers may block
/// drop(g);
/// D.synchronize();
/// ```
pub struct SrcuDomain {
    idx: AtomicU64,
    records: Registry<SrcuRecord>,
    gps: GpSeq,
    engine: Engine,
    fork_registered: AtomicBool,
}

impl Default for SrcuDomain {
    fn default() -> Self {
        Self::new()
    }
}

/// The calling thread's SRCU record per domain (few domains per thread: a short list).
struct Held(std::cell::RefCell<Vec<(usize, &'static SrcuRecord)>>);

impl Drop for Held {
    fn drop(&mut self) {
        let (_, last) = LAST.get();
        let mut keep_last = false;
        for (_, r) in self.0.borrow().iter() {
            // A guard that outlives this (in a later thread-local, or forgotten) keeps the record
            // ours (invariant 3): its unlock gives it back.
            if !r.open() {
                r.release();
            } else {
                keep_last |= core::ptr::eq(*r, last as *const SrcuRecord);
            }
        }
        // Later lookups (a late thread-local destructor) must not find a returned record through the
        // cache; a kept one stays findable, so that nested sections count on it and
        // `in_read_section` sees it.
        if !keep_last {
            LAST.set((0, 0));
        }
    }
}

std::thread_local! {
    static HELD: Held = const { Held(std::cell::RefCell::new(Vec::new())) };
    static LAST: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

impl SrcuDomain {
    /// A new domain.
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// assert_eq!(D.grace_periods(), 0);
    /// ```
    pub const fn new() -> Self {
        SrcuDomain {
            idx: AtomicU64::new(0),
            records: Registry::new(),
            gps: GpSeq::new(),
            engine: Engine::new(),
            fork_registered: AtomicBool::new(false),
        }
    }

    fn claim(&'static self) -> &'static SrcuRecord {
        fork::register(&self.fork_registered, self);
        let r = self.records.claim(|| SrcuRecord {
            own: SrcuCounters::new(),
            shared: SrcuCounters::new(),
            in_use: AtomicBool::new(true),
            owner: AtomicUsize::new(0),
        });
        // Relaxed: see `SrcuRecord::release`. A fork between the claim and this store finds the
        // record held by nobody here (0), which is right: the claiming thread is not the forking one.
        r.owner.store(gp::thread_identity(), Ordering::Relaxed);
        r
    }

    /// Runs `f` on this thread's record, and whether it is a one-off (in a late thread-local
    /// destructor: a record claimed for this call, returned right after unless `f` left a section
    /// open on it, which its guard's unlock then returns).
    #[inline]
    fn with_record<R>(&'static self, f: impl FnOnce(&'static SrcuRecord, bool) -> R) -> R {
        let me = self as *const SrcuDomain as usize;
        let (d, r) = LAST.get();
        if d == me {
            // SAFETY: stored below from a `&'static SrcuRecord` this thread holds; cleared by
            // `Held`'s destructor before the thread gives its records back.
            return f(unsafe { &*(r as *const SrcuRecord) }, false);
        }
        let held = HELD.try_with(|h| {
            let found = h.0.borrow().iter().find(|(d, _)| *d == me).map(|&(_, r)| r);
            let r = found.unwrap_or_else(|| {
                let r = self.claim();
                h.0.borrow_mut().push((me, r));
                r
            });
            LAST.set((me, r as *const SrcuRecord as usize));
            r
        });
        match held {
            Ok(r) => f(r, false),
            Err(_) => {
                // Counts are sums: a one-off record works as well as the thread's own.
                let r = self.claim();
                let out = f(r, true);
                if !r.open() {
                    r.release();
                }
                out
            }
        }
    }

    /// Enters a read-side section; it may block. The guard stays on this thread (see
    /// [`down_read`](Self::down_read) for a section that ends on another).
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// let g = D.read_lock();
    /// std::thread::sleep(std::time::Duration::from_millis(1)); // readers may block
    /// drop(g);
    /// D.synchronize();
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read_lock(&'static self) -> SrcuReadGuard {
        crate::dep::rcu(
            self as *const Self as *const (),
            crate::dep::M::RecRead,
            false,
        );
        self.read_lock_stalled(|| {})
    }

    /// `read_lock` with `stall` run between loading the index and counting in it (the window the
    /// first of a grace period's two waits exists for; tests force it).
    #[inline(always)]
    fn read_lock_stalled(&'static self, stall: impl FnOnce()) -> SrcuReadGuard {
        // A stale index is fine (module docs: the two waits cover it).
        let idx = protocol::srcu_index(&self.idx);
        stall();
        // Count in index `idx` on our own record (invariant 1), then a full fence (`protocol.rs`).
        // In a late thread-local destructor the record is one claimed for this section: it stays
        // ours until the guard's unlock (invariant 3).
        let rec = self.with_record(|r, _| {
            protocol::srcu_enter(&r.own, idx);
            r
        });
        SrcuReadGuard {
            domain: self,
            idx,
            rec,
            _not_send: PhantomData,
        }
    }

    /// Enters a read-side section that may end on another thread (the kernel's `srcu_down_read`):
    /// the guard is `Send`. Such a section is not counted as the thread's own, so waiting for a grace
    /// period while holding it is not detected (it waits until the guard is dropped elsewhere).
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// let g = D.down_read();
    /// std::thread::spawn(move || drop(g)).join().unwrap(); // ended elsewhere (srcu_up_read)
    /// D.synchronize();
    /// ```
    pub fn down_read(&'static self) -> SrcuDownGuard {
        let idx = protocol::srcu_index(&self.idx);
        self.with_record(|r, _| protocol::srcu_enter(&r.shared, idx));
        SrcuDownGuard { domain: self, idx }
    }

    /// Whether the calling thread is inside a [`read_lock`](Self::read_lock) section of this domain.
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// assert!(!D.in_read_section());
    /// let g = D.read_lock();
    /// assert!(D.in_read_section());
    /// drop(g);
    /// assert!(!D.in_read_section());
    /// ```
    pub fn in_read_section(&'static self) -> bool {
        let me = self as *const SrcuDomain as usize;
        let open = |r: &SrcuRecord| r.open();
        let (d, r) = LAST.get();
        if d == me {
            // SAFETY: as in `with_record`.
            return open(unsafe { &*(r as *const SrcuRecord) });
        }
        HELD.try_with(|h| h.0.borrow().iter().any(|(d, r)| *d == me && open(r)))
            .unwrap_or(false)
    }

    fn refuse_inside(&'static self, what: &str) {
        assert!(
            !self.in_read_section(),
            "locklab::rcu: SrcuDomain::{what} inside a read-side section of the same domain would \
             wait for itself"
        );
    }

    /// Whether index `i` has no reader (`protocol::srcu_drained`: unlocks, fence, locks).
    fn drained(&self, i: usize) -> bool {
        let recs = self.records.snapshot();
        protocol::srcu_drained(recs.iter().flat_map(|r| [&r.own, &r.shared]), i)
    }

    fn wait_drained(&self, i: usize) {
        let mut spins = 0u32;
        loop {
            if self.drained(i) {
                return;
            }
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                // Readers may sleep for long: poll at 1 ms.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Waits until every read-side section of this domain that began before the call has ended.
    /// Concurrent callers share grace periods.
    ///
    /// Panics inside a [`read_lock`](Self::read_lock) section of this domain on this thread.
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// D.synchronize();
    /// assert_eq!(D.grace_periods(), 1);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn synchronize(&'static self) {
        crate::dep::rcu(self as *const Self as *const (), crate::dep::M::Write, true);
        self.refuse_inside("synchronize");
        fork::register(&self.fork_registered, self);
        self.run_gp();
    }

    /// Tests: records held by a thread now.
    #[cfg(test)]
    pub(super) fn held_records(&self) -> usize {
        let recs = self.records.snapshot();
        recs.iter()
            .filter(|r| r.in_use.load(Ordering::SeqCst))
            .count()
    }

    /// Grace periods completed.
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// assert_eq!(D.grace_periods(), 0);
    /// ```
    pub fn grace_periods(&self) -> u64 {
        self.gps.completed()
    }
}

super::api::grace_period_api!(SrcuDomain, call_srcu, srcu_barrier, refuse_inside);

impl Host for SrcuDomain {
    fn engine(&self) -> &Engine {
        &self.engine
    }
    fn gp(&self) -> &GpSeq {
        &self.gps
    }
    /// `protocol::srcu_grace_period`: drain the other index, flip, drain the old one.
    fn grace_period_body(&'static self) {
        protocol::srcu_grace_period(&self.idx, |i| self.wait_drained(i));
    }
    fn may_wait(&'static self) -> bool {
        !self.in_read_section()
    }
    fn fork_hooks(&'static self) {
        fork::register(&self.fork_registered, self);
    }
    fn names(&self) -> (&'static str, &'static str) {
        ("call_srcu", "srcu_barrier")
    }
}

impl fork::PooledDomain for SrcuDomain {
    type Record = SrcuRecord;
    fn records(&'static self) -> &'static Registry<SrcuRecord> {
        &self.records
    }
    fn release_gone(&'static self, records: Vec<&'static SrcuRecord>) {
        let me = gp::thread_identity();
        for r in records {
            // Relaxed: this is the only thread (`owner` and the counters: see their docs).
            if r.owner.load(Ordering::Relaxed) == me || !r.in_use.load(Ordering::Relaxed) {
                continue;
            }
            // A thread that does not exist here: its `read_lock` sections (not `Send`) ended with
            // it. Count their unlocks, so the sums balance (its down_read sections stay counted).
            for i in 0..2 {
                let l = r.own.locks[i].load(Ordering::Relaxed);
                r.own.unlocks[i].store(l, Ordering::Relaxed);
            }
            r.release();
        }
    }
}

/// An SRCU read-side section (the index it counted in). Not `Send` (see
/// [`SrcuDomain::down_read`] for one that is):
///
/// ```compile_fail
/// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
/// let g = D.read_lock();
/// std::thread::spawn(move || drop(g)); // error: `SrcuReadGuard` is not `Send`
/// ```
///
/// ```
/// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
/// let g = D.read_lock();
/// assert!(g.index() < 2);
/// ```
#[must_use = "the read-side section ends when the guard drops"]
pub struct SrcuReadGuard {
    domain: &'static SrcuDomain,
    idx: usize,
    /// The record the section is counted on (this thread's; kept while the section is open).
    rec: &'static SrcuRecord,
    _not_send: PhantomData<*const ()>,
}

/// An SRCU read-side section that may end on any thread ([`SrcuDomain::down_read`]).
///
/// ```
/// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
/// let g = D.down_read();
/// std::thread::spawn(move || drop(g)).join().unwrap();
/// ```
#[must_use = "the read-side section ends when the guard drops"]
pub struct SrcuDownGuard {
    domain: &'static SrcuDomain,
    idx: usize,
}

impl Drop for SrcuDownGuard {
    fn drop(&mut self) {
        // A full fence, then the unlock count on our own counters (invariant 1; `protocol.rs`).
        let i = self.idx;
        self.domain
            .with_record(|r, _| protocol::srcu_exit(&r.shared, i));
    }
}

impl SrcuReadGuard {
    /// The index (0 or 1) this section counted in.
    ///
    /// ```
    /// static D: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();
    /// let a = D.read_lock().index();
    /// D.synchronize(); // flips the index
    /// assert_ne!(D.read_lock().index(), a);
    /// ```
    pub fn index(&self) -> usize {
        self.idx
    }
}

impl Drop for SrcuReadGuard {
    fn drop(&mut self) {
        crate::dep::rcu_end(self.domain as *const SrcuDomain as *const ());
        // A full fence, then the unlock count on the record the section was counted on: ours (the
        // guard is not `Send`, and the record stays ours while a section is open on it).
        let r = self.rec;
        protocol::srcu_exit(&r.own, self.idx);
        // Past this thread's thread-locals (a late guard: `Held` left the record ours, or it was
        // claimed for this section), the last unlock gives the record back (invariant 3).
        if !r.open() && HELD.try_with(|_| ()).is_err() {
            if LAST.get().1 == r as *const SrcuRecord as usize {
                LAST.set((0, 0));
            }
            r.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicPtr;

    /// A grace period waits for a sleeping reader that began before it, and the index flips.
    #[test]
    fn synchronize_waits_for_a_sleeping_reader() {
        static D: SrcuDomain = SrcuDomain::new();
        let inside = AtomicBool::new(false);
        let released = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let g = D.read_lock();
                inside.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 100 }));
                released.store(true, Ordering::SeqCst);
                drop(g);
            });
            while !inside.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            D.synchronize();
            assert!(
                released.load(Ordering::SeqCst),
                "the grace period ended under the reader"
            );
        });
    }

    /// The reason for the first wait: a reader stalled between loading the index and counting in it
    /// while a whole grace period ran is counted in the old index after that grace period's scan; the
    /// next grace period must still wait for it (it drains the other index before flipping).
    #[test]
    fn a_reader_stalled_across_a_flip_holds_the_next_grace_period() {
        static D: SrcuDomain = SrcuDomain::new();
        let g = D.read_lock_stalled(|| D.synchronize()); // a full grace period inside the window
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let writer = std::thread::spawn(move || {
            D.synchronize();
            d2.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
        assert!(
            !done.load(Ordering::SeqCst),
            "the grace period ended under a reader counted after the previous flip"
        );
        drop(g);
        writer.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }

    /// rcutorture's check: readers never see their object retired, readers sleep sometimes and
    /// some guards are unlocked on another thread.
    #[test]
    fn no_reader_outlives_its_grace_period() {
        static D: SrcuDomain = SrcuDomain::new();
        struct Obj {
            dead: AtomicBool,
        }
        const N: usize = if cfg!(miri) { 4 } else { 300 };
        let cur = AtomicPtr::new(Box::into_raw(Box::new(Obj {
            dead: AtomicBool::new(false),
        })));
        let stop = AtomicBool::new(false);
        let mut retired = vec![];
        std::thread::scope(|s| {
            for k in 0..3 {
                let (cur, stop) = (&cur, &stop);
                s.spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let g = D.read_lock();
                        // SAFETY: objects are freed only at the end of the test (they are marked meanwhile).
                        let o = unsafe { &*cur.load(Ordering::Acquire) };
                        if n.is_multiple_of(64) {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        assert!(!o.dead.load(Ordering::SeqCst), "retired under a reader");
                        drop(g);
                        if k == 0 && n.is_multiple_of(16) {
                            let d = D.down_read();
                            std::thread::spawn(move || drop(d)).join().unwrap();
                        }
                    }
                });
            }
            for _ in 0..N {
                let old = cur.swap(
                    Box::into_raw(Box::new(Obj {
                        dead: AtomicBool::new(false),
                    })),
                    Ordering::AcqRel,
                );
                D.synchronize();
                // SAFETY: kept until the end of the test (see above).
                unsafe { &*old }.dead.store(true, Ordering::SeqCst);
                retired.push(old as usize);
            }
            stop.store(true, Ordering::Relaxed);
        });
        retired.push(cur.load(Ordering::Relaxed) as usize);
        for p in retired {
            // SAFETY: every object came from `Box::into_raw`, once each, and every reader has exited.
            drop(unsafe { Box::from_raw(p as *mut Obj) });
        }
        assert_eq!(D.grace_periods(), N as u64);
        // Every lock has its unlock, in both indexes.
        for i in 0..2 {
            assert!(D.drained(i), "index {i}");
        }
    }
}
