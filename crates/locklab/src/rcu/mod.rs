//! Userspace RCU, memb flavour: read-side critical sections that cost two plain stores and no fence,
//! and grace periods that wait for every reader that might still see an old version.
//!
//! The flavours' protocol steps are in `protocol.rs`, shared by the domains and the loom models.
//!
//! Status (issue 10): this module has the memb flavour ([`RcuDomain`], [`RcuReadGuard`]),
//! batched [`RcuDomain::synchronize`], the safe [`RcuCell`], and [`RcuDomain::call_rcu`] with
//! per-thread segmented callback lists, flood control and [`RcuDomain::rcu_barrier`] (see the
//! `callback` module's docs), and the QSBR flavour ([`QsbrDomain`], whose read side is free and
//! whose quiescent states the borrow checker keeps out of read sections), and SRCU ([`SrcuDomain`]:
//! sleepable readers, two-index counters).
//!
//! # Algorithm
//! A domain has a global grace-period counter `gp` and a registry of per-thread reader records. A
//! record's word `ctr` holds a snapshot of `gp` in its high bits and the thread's read-side nesting
//! depth in its low [`NEST_BITS`] bits:
//!
//! ```text
//!  ctr:  | gp snapshot (48 bits) | nesting (16 bits) |      gp: | counter | 0...01 |
//! ```
//!
//! - **Read lock** (outermost): copy `gp` (whose nesting field is 1) into the own `ctr`, then a
//!   compiler-only fence. Nested: `ctr += 1`. No locked instruction, no hardware fence, and only the
//!   thread's own cache line is written.
//! - **Read unlock**: a compiler-only fence, then `ctr -= 1`; the outermost unlock also wakes a
//!   writer that sleeps waiting for readers.
//! - **Grace period** (one writer at a time, under `gp_lock`): a heavy fence (`membarrier`, which
//!   turns every reader's compiler fence into a full fence), `gp += 1 << NEST_BITS`, then wait until
//!   every record is idle (nesting 0) or holds the new `gp`, then a heavy fence again.
//! - **Sharing** (`synchronize`): a full fence, then a snapshot of `gp_seq` (even: idle, odd: a grace
//!   period runs) gives the end of the first grace period that starts after the call; take `gp_lock`;
//!   if that end has passed, another caller's grace period served this one: return without running
//!   one. All callers that arrive while one grace period runs share the next.
//!
//! # Why that is enough
//! Take a reader section R and a grace period G that begins after the writer unpublished a pointer.
//! G's first heavy fence splits R's thread: if R's `ctr` store came after it, R's loads come after it
//! too (the compiler fence orders them, the membarrier makes that order hold for other CPUs) and see
//! the unpublished state: R cannot hold the old pointer. If R's store came before it, G's scan sees
//! R's `ctr`: nested and with an older `gp` (`gp` only grows, so a stale snapshot is never mistaken
//! for the new value, the ABA that makes liburcu flip its phase bit twice), so G waits until R's
//! unlock store, after which G's final heavy fence orders R's loads before whatever the writer does
//! next (frees the old object).
//!
//! # Invariants
//! 1. A record's `ctr` is written only by the thread that holds the record (it is per thread, and
//!    guards are `!Send`), with plain load + store.
//! 2. Records are never freed (type-stable, like the thread slots of the queued locks); a thread
//!    returns its record to the domain's pool at exit only if its nesting is 0, so no guard ever
//!    points at a record another thread uses.
//! 3. `gp` only grows (2^48 grace periods before it could wrap: centuries at a microsecond each).
//!
//! # Orderings
//! Readers use Relaxed loads and stores plus compiler fences; the writer's `membarrier` provides the
//! hardware barrier on both sides (as `PercpuRwSem` does). Where the kernel refuses `membarrier` (and
//! under Miri), readers use SeqCst fences and the writer a SeqCst fence: the same protocol, Dekker
//! style. Each fence below names its pair.
//!
//! # Sharp edges
//! - `mem::forget` of a read guard leaves the thread in a read-side section forever: every later grace
//!   period of that domain waits forever (safe, but a hang; the stall warning names the thread).
//! - Calling `synchronize` inside a read-side section of the same domain deadlocks (the kernel's rule
//!   too); it is detected for the calling thread and panics.
//! - A thread's first read lock in a domain registers it (allocates, takes the registry lock): do that
//!   once outside any signal handler before reading in one.

mod callback;
mod cell;
pub(crate) mod protocol;
mod qsbr;
mod registry;
mod srcu;

use callback::GpThread;
pub use callback::{HIGH_WATER, LIMIT, call_rcu, rcu_barrier};
pub use cell::RcuCell;
use protocol::SegList;
pub use qsbr::{QsbrDomain, QsbrReadGuard, QsbrThread};
use registry::{Pooled, Registry, Wait, wait_for_records};
pub use srcu::{SrcuDomain, SrcuReadGuard};

use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, compiler_fence, fence};
use std::cell::RefCell;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

pub use protocol::NEST_BITS;
use protocol::NEST_MASK;

/// One thread's reader record. Cache-line sized so that readers never share a line.
#[repr(align(128))]
struct Record {
    /// gp snapshot | nesting (module docs). Written only by the holding thread (invariant 1).
    ctr: AtomicU64,
    /// Whether a thread holds the record (free records are in the pool, `ctr` nesting 0).
    in_use: AtomicBool,
    /// The kernel thread id of the holder, for stall warnings.
    tid: AtomicU32,
    /// The thread's `call_rcu` callbacks (taken by the thread and the grace-period thread only).
    cbs: crate::TasLock<SegList>,
    /// Callbacks of this list invoked so far (in queue order; `rcu_barrier`).
    invoked: AtomicU64,
    /// Someone is running a batch of this list's callbacks (callback module, invariant 1).
    invoking: AtomicBool,
}

impl Pooled for Record {
    fn in_use(&self) -> &AtomicBool {
        &self.in_use
    }
}

/// An RCU domain (memb flavour): a grace-period counter, its readers, and its writers' lock.
///
/// The default domain is [`RcuDomain::global`]; create others as `static`s (a domain lives as long as
/// the program, as its reader records do).
///
/// ```
/// use locklab::rcu::RcuDomain;
/// static DOMAIN: RcuDomain = RcuDomain::new();
/// let g = DOMAIN.read_lock();
/// // ... read RCU-protected data ...
/// drop(g);
/// DOMAIN.synchronize(); // every reader that started before this call has finished
/// ```
pub struct RcuDomain {
    /// The grace-period counter: `counter << NEST_BITS | 1` (module docs).
    gp: AtomicU64,
    /// Every record ever created for this domain (type-stable: leaked boxes).
    records: Registry<Record>,
    /// Serialises grace periods.
    gp_lock: StdMutex<()>,
    /// Grace periods completed.
    completed: AtomicU64,
    /// Even while no grace period runs, odd while one does (for sharing: see `synchronize`).
    gp_seq: AtomicU64,
    /// Bumped after each grace period: the futex that callers wait on while one runs.
    gp_seq_word: AtomicU32,
    /// `synchronize` calls (statistics: grace periods are shared between concurrent callers).
    calls: AtomicU64,
    /// 1 while a writer sleeps waiting for readers; the outermost read unlock wakes it.
    waiting: AtomicU32,
    /// Stall warning threshold, ms (0: never).
    stall_ms: AtomicU64,
    /// The `call_rcu` grace-period thread's state.
    gpt: GpThread,
    /// Started once, by the first `call_rcu` or `rcu_barrier`.
    gp_thread_started: std::sync::Once,
}

/// Whether `membarrier` carries the readers' fences: one decision per process, shared with
/// `PercpuRwSem` (the first to decide wins; `LOCKLAB_NO_MEMBARRIER` forces the fallback).
use crate::percpu_rwsem::mode;

/// The readers' side of the asymmetric fence.
#[inline(always)]
fn light_fence() {
    if mode::fast() {
        // Pairs with the writer's membarrier, which makes this a full fence on every CPU.
        compiler_fence(Ordering::SeqCst);
    } else {
        // Pairs with the writer's SeqCst fence in `heavy_fence`.
        fence(Ordering::SeqCst);
    }
}

/// The writer's side.
fn heavy_fence() {
    if mode::fast() {
        // Pairs with every reader's compiler fence.
        if !crate::sys::membarrier() {
            panic!(
                "locklab::rcu: membarrier failed on this thread; a grace period cannot fence readers"
            );
        }
    } else {
        // Pairs with the readers' SeqCst fences.
        fence(Ordering::SeqCst);
    }
}

/// Per-thread: the records this thread holds, one per domain it has read in.
struct Held(RefCell<Vec<(*const RcuDomain, &'static Record)>>);

impl Drop for Held {
    fn drop(&mut self) {
        // The records go back below: later lookups (a late thread-local destructor) must not find
        // them through the cache.
        LAST.set((0, 0));
        for (_, rec) in self.0.borrow().iter() {
            // Relaxed: our own word (invariant 1).
            if rec.ctr.load(Ordering::Relaxed) & NEST_MASK == 0 {
                // Release: the next holder's Acquire claim sees the record idle.
                rec.in_use.store(false, Ordering::Release);
            }
            // Otherwise a guard outlives this destructor (a later thread-local destructor, or a
            // forgotten guard): the record stays ours forever (invariant 2).
        }
    }
}

std::thread_local! {
    static HELD: Held = const { Held(RefCell::new(Vec::new())) };
    /// The last (domain, record) this thread used: the read lock's fast path. No destructor, so it
    /// stays readable in every thread-local destructor; `Held`'s destructor clears it.
    static LAST: core::cell::Cell<(usize, usize)> = const { core::cell::Cell::new((0, 0)) };
}

static GLOBAL: RcuDomain = RcuDomain::new();

impl Default for RcuDomain {
    fn default() -> Self {
        Self::new()
    }
}

impl RcuDomain {
    /// A new domain with no readers.
    ///
    /// ```
    /// static D: locklab::rcu::RcuDomain = locklab::rcu::RcuDomain::new();
    /// assert_eq!(D.grace_periods(), 0);
    /// ```
    pub const fn new() -> Self {
        RcuDomain {
            gp: AtomicU64::new(1),
            records: Registry::new(),
            gp_lock: StdMutex::new(()),
            completed: AtomicU64::new(0),
            gp_seq: AtomicU64::new(0),
            gp_seq_word: AtomicU32::new(0),
            calls: AtomicU64::new(0),
            waiting: AtomicU32::new(0),
            stall_ms: AtomicU64::new(10_000),
            gpt: GpThread::new(),
            gp_thread_started: std::sync::Once::new(),
        }
    }

    /// The process-wide default domain.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// drop(d.read_lock());
    /// d.synchronize();
    /// ```
    pub fn global() -> &'static RcuDomain {
        &GLOBAL
    }

    /// A free record of this domain, claimed for the calling thread (a pooled one if any).
    fn claim(&'static self) -> &'static Record {
        let tid = crate::sys::thread_id();
        let r = self.records.claim(|| Record {
            ctr: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
            tid: AtomicU32::new(tid),
            cbs: crate::TasLock::new(SegList::default()),
            invoked: AtomicU64::new(0),
            invoking: AtomicBool::new(false),
        });
        r.tid.store(tid, Ordering::Relaxed);
        r
    }

    /// This thread's record in this domain, and whether it is a one-off (thread-local storage gone).
    #[inline(always)]
    fn record(&'static self) -> (&'static Record, bool) {
        let (d, r) = LAST.get();
        if d == self as *const RcuDomain as usize {
            // SAFETY: `r` was stored below from a `&'static Record` this thread holds (records are
            // never freed, invariant 2), and `Held`'s destructor clears the cache before the thread
            // gives its records back.
            return (unsafe { &*(r as *const Record) }, false);
        }
        self.record_slow()
    }

    #[cold]
    #[inline(never)]
    fn record_slow(&'static self) -> (&'static Record, bool) {
        let me: *const RcuDomain = self;
        let found = HELD.try_with(|h| {
            if let Some(&(_, r)) = h.0.borrow().iter().find(|(d, _)| *d == me) {
                return r;
            }
            let r = self.claim();
            h.0.borrow_mut().push((me, r));
            r
        });
        match found {
            Ok(r) => {
                LAST.set((me as usize, r as *const Record as usize));
                (r, false)
            }
            // In a thread-local destructor after ours ran: a record for this guard alone.
            Err(_) => (self.claim(), true),
        }
    }

    /// Enters a read-side critical section; it lasts until the guard drops. Sections nest.
    ///
    /// Every RCU-protected reference read under the guard (e.g. [`RcuCell::load`]) is valid until
    /// the guard drops, and no longer: grace periods that start after this call wait for the guard.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// let outer = d.read_lock();
    /// let inner = d.read_lock(); // nesting is free
    /// drop(inner);
    /// drop(outer);
    /// ```
    #[inline]
    pub fn read_lock(&'static self) -> RcuReadGuard {
        let (rec, one_off) = self.record();
        // Our own word (invariant 1); the protocol's steps and their fences: `protocol.rs`.
        protocol::memb_enter(&rec.ctr, &self.gp, light_fence);
        RcuReadGuard {
            domain: self,
            rec,
            one_off,
            _not_send: PhantomData,
        }
    }

    /// Whether the calling thread is inside a read-side section of this domain.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// assert!(!d.in_read_section());
    /// let g = d.read_lock();
    /// assert!(d.in_read_section());
    /// ```
    pub fn in_read_section(&'static self) -> bool {
        let me: *const RcuDomain = self;
        HELD.try_with(|h| {
            h.0.borrow()
                .iter()
                .any(|(d, r)| *d == me && r.ctr.load(Ordering::Relaxed) & NEST_MASK != 0)
        })
        .unwrap_or(false)
    }

    /// Waits until every read-side section that began before the call has ended (a grace period).
    /// Concurrent callers share grace periods: N callers at once cost about two, not N.
    ///
    /// Panics if called inside a read-side section of this domain on this thread (it would wait for
    /// itself forever).
    ///
    /// ```
    /// use locklab::rcu::RcuDomain;
    /// static D: RcuDomain = RcuDomain::new();
    /// D.synchronize();
    /// assert_eq!((D.synchronize_calls(), D.grace_periods()), (1, 1));
    /// ```
    pub fn synchronize(&'static self) {
        assert!(
            !self.in_read_section(),
            "locklab::rcu: synchronize inside a read-side section of the same domain would wait for itself"
        );
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.synchronize_inner();
    }

    /// A grace period, shared with concurrent callers (no checks, not counted as a call): see
    /// `protocol::shared_grace_period` for the sharing, `protocol::memb_grace_period` for the rest.
    fn synchronize_inner(&'static self) {
        protocol::shared_grace_period(
            &self.gp_seq,
            &self.completed,
            || self.gp_lock.lock().unwrap_or_else(|e| e.into_inner()),
            |seen| {
                // The futex word changes (then wakes everyone) after every grace period, after
                // `gp_seq` did: read it, re-check `gp_seq`, sleep while the word is unchanged. A grace
                // period that ends in between changes the word, so the sleep returns at once.
                // SeqCst on the three accesses: the word's load must not pass the `gp_seq` check.
                let w = self.gp_seq_word.load(Ordering::SeqCst);
                if self.gp_seq.load(Ordering::SeqCst) == seen {
                    crate::sys::futex_wait(&self.gp_seq_word, w, Some(Duration::from_millis(10)));
                }
            },
            || {
                // SeqCst: see the waiters' loads above (after `gp_seq`'s Release store).
                self.gp_seq_word.fetch_add(1, Ordering::SeqCst);
                crate::sys::futex_wake(&self.gp_seq_word, u32::MAX);
            },
            || protocol::memb_grace_period(&self.gp, heavy_fence, |gp| self.wait_for_readers(gp)),
        );
    }

    /// Like [`synchronize`](Self::synchronize); in this flavour a grace period is already a pair of
    /// `membarrier` calls and a scan, so the expedited form is the same.
    ///
    /// ```
    /// locklab::rcu::RcuDomain::global().synchronize_expedited();
    /// ```
    pub fn synchronize_expedited(&'static self) {
        self.synchronize()
    }

    /// Grace periods completed so far.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// let before = d.grace_periods();
    /// d.synchronize();
    /// assert!(d.grace_periods() > before);
    /// ```
    pub fn grace_periods(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// `synchronize` calls so far (compare with [`grace_periods`](Self::grace_periods): the calls a
    /// shared grace period served).
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// d.synchronize();
    /// assert!(d.synchronize_calls() >= 1);
    /// ```
    pub fn synchronize_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Sets after how long a grace period blocked by a reader prints a stall warning naming the
    /// reader's thread (default 10 s; `Duration::ZERO`: never).
    ///
    /// ```
    /// locklab::rcu::RcuDomain::global().set_stall_timeout(std::time::Duration::from_secs(30));
    /// ```
    pub fn set_stall_timeout(&self, t: Duration) {
        self.stall_ms.store(
            t.as_millis().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Whether `r` might still be in a section that began before grace period `gp`.
    fn blocks(r: &Record, gp: u64) -> bool {
        protocol::memb_blocks(&r.ctr, gp)
    }

    /// Waits until no record blocks `gp`: spins, then sleeps on `waiting` (woken by an outermost
    /// read unlock), warning once per stall period about the readers that hold it up.
    fn wait_for_readers(&self, gp: u64) {
        wait_for_records(
            self.records.snapshot(),
            Wait {
                blocks: &|r: &Record| Self::blocks(r, gp),
                waiting: &self.waiting,
                fence: &heavy_fence,
                stall_ms: &self.stall_ms,
                tid: &|r: &Record| r.tid.load(Ordering::Relaxed),
                what: "leave their read-side sections (a read guard held, or forgotten)",
            },
        );
    }
}

/// A read-side critical section of one [`RcuDomain`]; ends when dropped. Not `Send`: the section
/// belongs to the thread that entered it.
///
/// ```
/// let g = locklab::rcu::RcuDomain::global().read_lock();
/// drop(g);
/// ```
#[must_use = "the read-side section ends when the guard drops"]
pub struct RcuReadGuard {
    domain: &'static RcuDomain,
    rec: &'static Record,
    one_off: bool,
    _not_send: PhantomData<*const ()>,
}

impl RcuReadGuard {
    /// The domain this section belongs to.
    ///
    /// ```
    /// let d = locklab::rcu::RcuDomain::global();
    /// assert!(std::ptr::eq(d.read_lock().domain(), d));
    /// ```
    pub fn domain(&self) -> &'static RcuDomain {
        self.domain
    }
}

impl Drop for RcuReadGuard {
    #[inline]
    fn drop(&mut self) {
        // Our own word (invariant 1): light fence, one level less.
        if protocol::memb_exit(&self.rec.ctr, light_fence) {
            // Orders the store above before the `waiting` load (the writer's sleep path).
            light_fence();
            // Relaxed: see `wait_for_readers`.
            if self.domain.waiting.load(Ordering::Relaxed) != 0 {
                self.domain.waiting.store(0, Ordering::Relaxed);
                crate::sys::futex_wake(&self.domain.waiting, 1);
            }
            if self.one_off {
                // Release: the next holder's Acquire claim sees the record idle.
                self.rec.in_use.store(false, Ordering::Release);
            }
        }
    }
}

/// Enters a read-side section of the global domain.
///
/// ```
/// let g = locklab::rcu::read_lock();
/// drop(g);
/// locklab::rcu::synchronize_rcu();
/// ```
pub fn read_lock() -> RcuReadGuard {
    GLOBAL.read_lock()
}

/// A grace period of the global domain (see [`RcuDomain::synchronize`]).
///
/// ```
/// locklab::rcu::synchronize_rcu();
/// ```
pub fn synchronize_rcu() {
    GLOBAL.synchronize()
}

#[cfg(test)]
mod tests;
