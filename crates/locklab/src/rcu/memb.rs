//! The memb flavour: a domain ([`RcuDomain`]) whose readers store a snapshot of the grace-period
//! counter in their own record, fenced by the writers' `membarrier`, and the global domain's
//! functions ([`read_lock`], [`synchronize_rcu`], ...).
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
//!    returns its record to the domain's pool when it exits with nesting 0, or else at its last read
//!    unlock (a guard kept in a thread-local destroyed after ours: the record is "orphaned" until
//!    then), so no guard ever points at a record another thread uses, and none leaks.
//! 3. `gp` only grows (2^48 grace periods before it could wrap: centuries at a microsecond each).
//!
//! # Orderings
//! Readers use Relaxed loads and stores plus compiler fences; the writer's `membarrier` provides the
//! hardware barrier on both sides (as `PercpuRwSem` does). Where the kernel refuses `membarrier` (and
//! under Miri), readers use SeqCst fences and the writer a SeqCst fence: the same protocol, Dekker
//! style. If `membarrier` starts failing after readers ran without fences (a seccomp filter on one
//! thread), the process switches to the fences and fences the running readers once by moving the
//! writer across every CPU (`sys::cpu_walk_barrier`). Each fence below names its pair.
//!
//! # Rules, and what happens when they are broken
//! - `mem::forget` of a read guard leaves the thread in a read-side section forever: every later grace
//!   period of that domain waits forever (safe, but a hang; the stall warning names the thread).
//! - `synchronize`, `cond_synchronize` and `rcu_barrier` inside a read-side section of the same domain
//!   would wait for themselves (the kernel's rule too): they panic, also in thread-local destructors.
//!   `rcu_barrier` inside a callback of the same domain panics likewise. `call_rcu` is allowed
//!   anywhere: inside a section it never waits (flood control, `callback` module).
//! - No panic wedges a domain: a grace period that unwinds puts the sequence back and wakes its
//!   waiters, warnings ignore a closed stderr, the grace-period thread survives panicking callbacks.
//! - A thread's first read lock in a domain registers it (allocates, takes the registry lock): do that
//!   once outside any signal handler before reading in one. `call_rcu` and `defer_drop` are not
//!   async-signal-safe (they allocate, and append to the calling thread's own log, which has one
//!   producer): a signal handler must not call them (installing one is `unsafe` for that reason).
//! - `fork()`: the child may use every domain (grace periods, callbacks, barriers). Read-side sections
//!   of other threads at the fork do not exist in the child and do not hold its grace periods; the
//!   forking thread's own sections go on. Callbacks pending at the fork run in both processes. A
//!   callback may fork (the fork does not wait for the batch it is part of). A fork waits at most
//!   a second for a running batch of callbacks (one may be waiting for the fork: a callback that
//!   forks at the same time, or waits for a lock the forking thread holds); a batch still running
//!   then runs in the parent only.

use super::*;

/// One thread's reader record. Cache-line sized so that readers never share a line.
#[repr(align(128))]
pub(super) struct Record {
    /// gp snapshot | nesting (module docs). Written only by the holding thread (invariant 1).
    pub(super) ctr: AtomicU64,
    /// Whether a thread holds the record (free records are in the pool, `ctr` nesting 0).
    pub(super) in_use: AtomicBool,
    /// The kernel thread id of the holder, for stall warnings.
    pub(super) tid: AtomicU32,
    /// The holder's thread-local storage is gone while a section is open (invariant 2): the outermost
    /// unlock returns the record. Written by the holder only.
    pub(super) orphan: AtomicBool,
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
    pub(super) gp: AtomicU64,
    /// Every record ever created for this domain (type-stable: leaked boxes).
    pub(super) records: Registry<Record>,
    /// Grace-period sequence, lock and completed count (`gp.rs`).
    pub(super) gps: GpSeq,
    /// `synchronize` calls (statistics: grace periods are shared between concurrent callers).
    pub(super) calls: AtomicU64,
    /// 1 while a writer sleeps waiting for readers; the outermost read unlock wakes it.
    pub(super) waiting: AtomicU32,
    /// Stall warning threshold, ms (0: never).
    pub(super) stall_ms: AtomicU64,
    /// `call_rcu`'s lists and grace-period thread.
    pub(super) engine: Engine,
    /// The `fork()` handlers know this domain.
    pub(super) fork_registered: AtomicBool,
}

/// Whether `membarrier` carries the readers' fences: one decision per process, shared with
/// `PercpuRwSem` (the first to decide wins; `LOCKLAB_NO_MEMBARRIER` forces the fallback).
use crate::sys::membarrier_mode as mode;

/// The readers' side of the asymmetric fence.
#[inline(always)]
pub(super) fn light_fence() {
    if mode::fast() {
        // Pairs with the writer's membarrier, which makes this a full fence on every CPU.
        compiler_fence(Ordering::SeqCst);
    } else {
        // Pairs with the writer's SeqCst fence in `heavy_fence`.
        fence(Ordering::SeqCst);
    }
}

/// The writer's side.
pub(super) fn heavy_fence() {
    if mode::writers_heavy() {
        // Pairs with every reader's compiler fence.
        if crate::sys::membarrier() {
            return;
        }
        // Refused (seccomp on this thread): readers switch to fences, and the CPU walk fences those
        // still on the fast path (`sys::membarrier_mode::degrade`).
        if !mode::degrade() {
            protocol::warn(format_args!(
                "locklab::rcu: membarrier failed and this thread cannot run on every CPU to fence \
                 readers; a grace period cannot be completed safely: aborting"
            ));
            std::process::abort();
        }
    }
    // Pairs with the readers' SeqCst fences.
    fence(Ordering::SeqCst);
}

/// Per-thread: the records this thread holds, one per domain it has read in.
pub(super) struct Held(RefCell<Vec<(*const RcuDomain, &'static Record)>>);

impl Drop for Held {
    fn drop(&mut self) {
        let (_, last) = LAST.get();
        let mut keep_last = false;
        for (_, rec) in self.0.borrow().iter() {
            // Relaxed: our own word (invariant 1).
            if rec.ctr.load(Ordering::Relaxed) & NEST_MASK == 0 {
                // Release: the next holder's Acquire claim sees the record idle.
                rec.in_use.store(false, Ordering::Release);
            } else {
                // A guard outlives this destructor (one kept in a later thread-local, or a forgotten
                // guard): the record stays ours until its outermost unlock returns it (invariant 2).
                rec.orphan.store(true, Ordering::Relaxed);
                keep_last |= core::ptr::eq(*rec, last as *const Record);
            }
        }
        // Later lookups (a late thread-local destructor) must not find a returned record through the
        // cache; an orphaned one stays findable, so that nested locks and `in_read_section` see it.
        if !keep_last {
            LAST.set((0, 0));
        }
    }
}

std::thread_local! {
    static HELD: Held = const { Held(RefCell::new(Vec::new())) };
    /// The last (domain, record) this thread used: the read lock's fast path. No destructor, so it
    /// stays readable in every thread-local destructor; `Held`'s destructor clears it unless it
    /// names an orphaned record.
    static LAST: core::cell::Cell<(usize, usize)> = const { core::cell::Cell::new((0, 0)) };
}

pub(super) static GLOBAL: RcuDomain = RcuDomain::new();

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
            gps: GpSeq::new(),
            calls: AtomicU64::new(0),
            waiting: AtomicU32::new(0),
            stall_ms: AtomicU64::new(10_000),
            engine: Engine::new(),
            fork_registered: AtomicBool::new(false),
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
    pub(super) fn claim(&'static self) -> &'static Record {
        self.fork_hooks();
        let tid = crate::sys::thread_id();
        let r = self.records.claim(|| Record {
            ctr: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
            tid: AtomicU32::new(tid),
            orphan: AtomicBool::new(false),
        });
        r.tid.store(tid, Ordering::Relaxed);
        r
    }

    /// This thread's record in this domain.
    #[inline(always)]
    pub(super) fn record(&'static self) -> &'static Record {
        let (d, r) = LAST.get();
        if d == self as *const RcuDomain as usize {
            // SAFETY: `r` was stored below from a `&'static Record` this thread holds (records are
            // never freed, invariant 2); the cache is cleared before the thread gives a record back
            // (`Held`'s destructor, `release_orphan`).
            return unsafe { &*(r as *const Record) };
        }
        self.record_slow()
    }

    #[cold]
    #[inline(never)]
    pub(super) fn record_slow(&'static self) -> &'static Record {
        let me: *const RcuDomain = self;
        let found = HELD.try_with(|h| {
            if let Some(&(_, r)) = h.0.borrow().iter().find(|(d, _)| *d == me) {
                return r;
            }
            let r = self.claim();
            h.0.borrow_mut().push((me, r));
            r
        });
        let r = found.unwrap_or_else(|_| {
            // In a thread-local destructor after ours ran: a record that the outermost unlock (or
            // the caller, if no section opens) returns.
            let r = self.claim();
            r.orphan.store(true, Ordering::Relaxed);
            r
        });
        LAST.set((me as usize, r as *const Record as usize));
        r
    }

    /// Returns an orphaned record whose sections have all ended (invariant 2).
    #[cold]
    pub(super) fn release_orphan(rec: &'static Record) {
        rec.orphan.store(false, Ordering::Relaxed);
        if LAST.get().1 == rec as *const Record as usize {
            LAST.set((0, 0));
        }
        // Release: the next holder's Acquire claim sees the record idle.
        rec.in_use.store(false, Ordering::Release);
    }

    /// Registers this domain's `fork()` handlers (once).
    #[inline]
    pub(super) fn fork_hooks(&'static self) {
        fork::register(&self.fork_registered, self);
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
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn read_lock(&'static self) -> RcuReadGuard {
        crate::dep::rcu(
            self as *const Self as *const (),
            crate::dep::M::RecRead,
            false,
        );
        let rec = self.record();
        // Our own word (invariant 1); the protocol's steps and their fences: `protocol.rs`.
        protocol::memb_enter(&rec.ctr, &self.gp, light_fence);
        RcuReadGuard {
            domain: self,
            rec,
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
    ///
    /// Also right in thread-local destructors, after this module's own thread-local is gone.
    pub fn in_read_section(&'static self) -> bool {
        let me: *const RcuDomain = self;
        let nested = |r: &Record| r.ctr.load(Ordering::Relaxed) & NEST_MASK != 0;
        let (d, r) = LAST.get();
        if d == me as usize {
            // SAFETY: as in `record`.
            return nested(unsafe { &*(r as *const Record) });
        }
        HELD.try_with(|h| h.0.borrow().iter().any(|(d, r)| *d == me && nested(r)))
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
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn synchronize(&'static self) {
        crate::dep::rcu(self as *const Self as *const (), crate::dep::M::Write, true);
        self.refuse_inside("synchronize");
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.fork_hooks();
        self.run_gp();
    }

    /// Panics if the calling thread is inside a read-side section of this domain (`what` would wait
    /// for itself).
    pub(super) fn refuse_inside(&'static self, what: &str) {
        assert!(
            !self.in_read_section(),
            "locklab::rcu: {what} inside a read-side section of the same domain would wait for itself"
        );
    }

    /// Like [`synchronize`](Self::synchronize); in this flavour a grace period is already a pair of
    /// `membarrier` calls and a scan, so the expedited form is the same.
    ///
    /// ```
    /// locklab::rcu::RcuDomain::global().synchronize_expedited();
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
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
        self.gps.completed()
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
    pub(super) fn blocks(r: &Record, gp: u64) -> bool {
        protocol::memb_blocks(&r.ctr, gp)
    }

    /// Waits until no record blocks `gp`: spins, then sleeps on `waiting` (woken by an outermost
    /// read unlock), warning once per stall period about the readers that hold it up.
    pub(super) fn wait_for_readers(&self, gp: u64) {
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

api::grace_period_api!(RcuDomain, call_rcu, rcu_barrier, refuse_inside);

impl Host for RcuDomain {
    fn engine(&self) -> &Engine {
        &self.engine
    }
    fn gp(&self) -> &GpSeq {
        &self.gps
    }
    /// `protocol::memb_grace_period`: heavy fence, `gp += 1`, wait for the readers, heavy fence.
    fn grace_period_body(&'static self) {
        protocol::memb_grace_period(&self.gp, heavy_fence, |gp| self.wait_for_readers(gp));
    }
    fn may_wait(&'static self) -> bool {
        !self.in_read_section()
    }
    fn fork_hooks(&'static self) {
        RcuDomain::fork_hooks(self)
    }
    fn names(&self) -> (&'static str, &'static str) {
        ("call_rcu", "rcu_barrier")
    }
}

impl fork::PooledDomain for RcuDomain {
    type Record = Record;
    fn records(&'static self) -> &'static Registry<Record> {
        &self.records
    }
    fn release_gone(&'static self, records: Vec<&'static Record>) {
        // The forking thread's records (thread-locals are copied with it).
        let mut mine: Vec<usize> = HELD
            .try_with(|h| {
                h.0.borrow()
                    .iter()
                    .map(|(_, r)| *r as *const Record as usize)
                    .collect()
            })
            .unwrap_or_default();
        mine.push(LAST.get().1);
        for r in records {
            if !mine.contains(&(r as *const Record as usize)) {
                // Its thread does not exist here, nor do its sections (guards are not `Send`).
                r.ctr.store(0, Ordering::Relaxed);
                r.orphan.store(false, Ordering::Relaxed);
                // Release: the next holder's Acquire claim (`Registry::claim`) sees the record reset.
                r.in_use.store(false, Ordering::Release);
            }
        }
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
    pub(super) domain: &'static RcuDomain,
    pub(super) rec: &'static Record,
    pub(super) _not_send: PhantomData<*const ()>,
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
        crate::dep::rcu_end(self.domain as *const RcuDomain as *const ());
        // Our own word (invariant 1): light fence, one level less.
        if protocol::memb_exit(&self.rec.ctr, light_fence) {
            // Orders the store above before the `waiting` load (the writer's sleep path).
            light_fence();
            // Relaxed: see `wait_for_readers`.
            if self.domain.waiting.load(Ordering::Relaxed) != 0 {
                self.domain.waiting.store(0, Ordering::Relaxed);
                crate::sys::futex_wake(&self.domain.waiting, 1);
            }
            // Relaxed: our own flag (the record's line, already in cache).
            if self.rec.orphan.load(Ordering::Relaxed) {
                RcuDomain::release_orphan(self.rec);
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
#[cfg_attr(feature = "lockdep", track_caller)]
pub fn read_lock() -> RcuReadGuard {
    GLOBAL.read_lock()
}

/// A grace period of the global domain (see [`RcuDomain::synchronize`]).
///
/// ```
/// locklab::rcu::synchronize_rcu();
/// ```
#[cfg_attr(feature = "lockdep", track_caller)]
pub fn synchronize_rcu() {
    GLOBAL.synchronize()
}

/// [`RcuDomain::get_state_synchronize`] on the global domain.
///
/// ```
/// let c = locklab::rcu::get_state_synchronize_rcu();
/// locklab::rcu::cond_synchronize_rcu(c);
/// assert!(locklab::rcu::poll_state_synchronize_rcu(c));
/// ```
pub fn get_state_synchronize_rcu() -> GpCookie {
    GLOBAL.get_state_synchronize()
}

/// [`RcuDomain::start_poll_synchronize`] on the global domain.
///
/// ```
/// let c = locklab::rcu::start_poll_synchronize_rcu();
/// # #[cfg(not(miri))]
/// while !locklab::rcu::poll_state_synchronize_rcu(c) {
///     std::thread::yield_now();
/// }
/// ```
pub fn start_poll_synchronize_rcu() -> GpCookie {
    GLOBAL.start_poll_synchronize()
}

/// [`RcuDomain::poll_state_synchronize`] on the global domain.
///
/// ```
/// let c = locklab::rcu::get_state_synchronize_rcu();
/// locklab::rcu::synchronize_rcu();
/// assert!(locklab::rcu::poll_state_synchronize_rcu(c));
/// ```
pub fn poll_state_synchronize_rcu(cookie: GpCookie) -> bool {
    GLOBAL.poll_state_synchronize(cookie)
}

/// [`RcuDomain::cond_synchronize`] on the global domain.
///
/// ```
/// locklab::rcu::cond_synchronize_rcu(locklab::rcu::get_state_synchronize_rcu());
/// ```
pub fn cond_synchronize_rcu(cookie: GpCookie) {
    GLOBAL.cond_synchronize(cookie)
}

/// Queues `f` on the global domain (see [`RcuDomain::call_rcu`]).
///
/// ```
/// locklab::rcu::call_rcu(|| println!("after a grace period"));
/// locklab::rcu::rcu_barrier();
/// ```
pub fn call_rcu(f: impl FnOnce() + Send + 'static) {
    GLOBAL.call_rcu(f)
}

/// [`RcuDomain::rcu_barrier`] on the global domain.
///
/// ```
/// locklab::rcu::rcu_barrier();
/// ```
#[cfg_attr(feature = "lockdep", track_caller)]
pub fn rcu_barrier() {
    GLOBAL.rcu_barrier()
}

/// Names a grace period of one domain, for the polled calls (`get_state_synchronize`,
/// `start_poll_synchronize`, `poll_state_synchronize`, `cond_synchronize`): the value the domain's
/// grace-period sequence reaches when that grace period ends. Cheap to copy and keep, e.g. next to an
/// object waiting to be freed.
///
/// ```
/// let d = locklab::rcu::RcuDomain::global();
/// let c: locklab::rcu::GpCookie = d.get_state_synchronize();
/// d.synchronize();
/// assert!(d.poll_state_synchronize(c));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GpCookie {
    pub(super) seq: u64,
    pub(super) domain: usize,
}

impl GpCookie {
    pub(super) fn new(seq: u64, domain: usize) -> Self {
        GpCookie { seq, domain }
    }

    /// The sequence value, after checking that the cookie is `domain`'s.
    pub(super) fn check(self, domain: usize) -> u64 {
        assert_eq!(
            self.domain, domain,
            "locklab::rcu: a grace-period cookie used with another domain than the one it came from"
        );
        self.seq
    }
}
