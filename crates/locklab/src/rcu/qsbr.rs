//! QSBR flavour (quiescent-state-based reclamation): read-side sections that cost nothing at all.
//!
//! # Algorithm
//! A [`QsbrDomain`] has a grace-period counter `gp` (starts at 1, +1 per grace period) and registered
//! threads, each with a record word `ctr`: 0 while the thread is offline, else the value of `gp` the
//! thread last announced.
//! - **Read lock / unlock**: nothing (the guard only borrows the thread's handle).
//! - **Quiescent state** (the thread holds no RCU reference): if `ctr != gp`: fence, `ctr = gp`, fence,
//!   wake a writer that sleeps.
//! - **Offline / online** (around blocking): `ctr = 0` / `ctr = gp`, fenced the same way.
//! - **Grace period** (under the grace-period lock, shared between concurrent callers as memb's
//!   are): fence, `gp += 1`, wait until every record is 0 or equals the new `gp`, fence.
//!
//! # Why it is sound from safe code
//! A thread can only announce a quiescent state, go offline or unregister through `&mut` of its
//! [`QsbrThread`], and a read guard borrows the handle (`&`): the borrow checker rules out announcing
//! a quiescent state while a guard, or any reference read under it, is alive. That is QSBR's whole
//! contract, checked at compile time. A handle is `!Send` (the record is the thread's). Going
//! offline returns a [`QsbrOffline`] that borrows the handle mutably, so no read lock can be taken
//! while offline: that rule is checked at compile time too.
//!
//! # Orderings
//! SeqCst fences on both sides (Dekker's pattern between the announcing store and the writer's scan);
//! quiescent states are rare (the caller chooses how often), so the fences are off the read path.
//!
//! # Sharp edges
//! - A registered thread that stays online and never announces a quiescent state holds every grace
//!   period up (the classic QSBR bug): the stall warning names it. `mem::forget` of a handle does the
//!   same forever.
//! - [`QsbrDomain::synchronize`] (and `cond_synchronize`, `rcu_barrier`) on a thread registered and
//!   online in the same domain would wait for itself: it panics; use [`QsbrThread::synchronize`],
//!   which goes offline around the wait. `call_rcu` on such a thread never waits (its list grows past
//!   [`LIMIT`](super::LIMIT) until the thread's next quiescent state lets callbacks drain).

use super::callback::{Engine, Host};
use super::gp::GpSeq;
use super::registry::{Pooled, Registry, Wait, wait_for_records};
use super::{fork, protocol};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};
use std::cell::RefCell;
use std::time::Duration;

#[repr(align(128))]
pub(super) struct QsbrRecord {
    /// 0: offline; else the `gp` this thread last announced.
    ctr: AtomicU64,
    in_use: AtomicBool,
    tid: AtomicU32,
}

/// A QSBR domain: threads [`register`](Self::register), read for free, and announce quiescent states.
///
/// ```
/// use locklab::rcu::QsbrDomain;
/// static D: QsbrDomain = QsbrDomain::new();
/// let mut me = D.register();
/// {
///     let _g = me.read_lock(); // costs nothing
///     // ... read RCU-protected data ...
/// }
/// me.quiescent_state(); // no references held: a grace period may end
/// drop(me);
/// D.synchronize();
/// ```
pub struct QsbrDomain {
    gp: AtomicU64,
    records: Registry<QsbrRecord>,
    gps: GpSeq,
    waiting: AtomicU32,
    stall_ms: AtomicU64,
    engine: Engine,
    fork_registered: AtomicBool,
}

std::thread_local! {
    /// The records of the handles this thread holds: (domain, record).
    static MINE: RefCell<Vec<(usize, &'static QsbrRecord)>> = const { RefCell::new(Vec::new()) };
}

impl Default for QsbrDomain {
    fn default() -> Self {
        Self::new()
    }
}

impl QsbrDomain {
    /// A new domain.
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// assert_eq!(D.grace_periods(), 0);
    /// ```
    pub const fn new() -> Self {
        QsbrDomain {
            gp: AtomicU64::new(1),
            records: Registry::new(),
            gps: GpSeq::new(),
            waiting: AtomicU32::new(0),
            stall_ms: AtomicU64::new(10_000),
            engine: Engine::new(),
            fork_registered: AtomicBool::new(false),
        }
    }

    /// Registers the calling thread (online); the handle unregisters it when dropped.
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let me = D.register();
    /// drop(me);
    /// ```
    pub fn register(&'static self) -> QsbrThread {
        fork::register(&self.fork_registered, self);
        let tid = crate::sys::thread_id();
        let rec = self.records.claim(|| QsbrRecord {
            ctr: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
            tid: AtomicU32::new(0),
        });
        rec.tid.store(tid, Ordering::Relaxed);
        let me = self as *const Self as usize;
        let _ = MINE.try_with(|m| m.borrow_mut().push((me, rec)));
        let t = QsbrThread {
            domain: self,
            rec,
            _not_send: PhantomData,
        };
        t.announce(self.gp.load(Ordering::Relaxed));
        t
    }

    /// Waits until every registered thread has announced a quiescent state (or gone offline) since the
    /// call began. Concurrent callers share grace periods.
    ///
    /// Panics on a thread registered and online in this domain (it would wait for itself): use
    /// [`QsbrThread::synchronize`], which goes offline around the wait.
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// D.synchronize();
    /// assert_eq!(D.grace_periods(), 1);
    /// ```
    pub fn synchronize(&'static self) {
        self.refuse_online("synchronize");
        fork::register(&self.fork_registered, self);
        self.run_gp();
    }

    fn refuse_online(&'static self, what: &str) {
        assert!(
            !self.caller_online(),
            "locklab::rcu: QsbrDomain::{what} on a thread registered online in the same domain would \
             wait for itself (use QsbrThread::synchronize, or go offline first)"
        );
    }

    /// Grace periods completed.
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// D.synchronize();
    /// assert_eq!(D.grace_periods(), 1);
    /// ```
    pub fn grace_periods(&self) -> u64 {
        self.gps.completed()
    }

    /// Sets the stall warning threshold (default 10 s; `Duration::ZERO`: never).
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// D.set_stall_timeout(std::time::Duration::from_secs(1));
    /// ```
    pub fn set_stall_timeout(&self, t: Duration) {
        self.stall_ms.store(
            t.as_millis().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    fn blocks(r: &QsbrRecord, gp: u64) -> bool {
        protocol::qsbr_blocks(&r.ctr, gp)
    }

    /// Whether the calling thread holds a handle of this domain and is online (it would wait for
    /// itself in a grace period).
    fn caller_online(&'static self) -> bool {
        let me = self as *const Self as usize;
        MINE.try_with(|m| {
            m.borrow()
                .iter()
                .any(|(d, r)| *d == me && r.ctr.load(Ordering::Relaxed) != 0)
        })
        .unwrap_or(false)
    }

    fn wait_for(&self, gp: u64) {
        wait_for_records(
            self.records.snapshot(),
            Wait {
                blocks: &|r: &QsbrRecord| Self::blocks(r, gp),
                waiting: &self.waiting,
                // Pairs with the fence between a reader's announcement and its `waiting` load.
                fence: &|| fence(Ordering::SeqCst),
                stall_ms: &self.stall_ms,
                tid: &|r: &QsbrRecord| r.tid.load(Ordering::Relaxed),
                what: "announce a quiescent state or go offline (QSBR)",
            },
        );
    }
}

impl Pooled for QsbrRecord {
    fn in_use(&self) -> &AtomicBool {
        &self.in_use
    }
}

/// A thread's registration in a [`QsbrDomain`]. `!Send`. Dropping it unregisters the thread.
///
/// A quiescent state cannot be announced while a read guard (or anything read under it) is alive:
///
/// ```compile_fail
/// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
/// let mut me = D.register();
/// let g = me.read_lock();
/// me.quiescent_state(); // error: `me` is borrowed by `g`
/// drop(g);
/// ```
///
/// and the handle stays on its thread:
///
/// ```compile_fail
/// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
/// let me = D.register();
/// std::thread::spawn(move || drop(me)); // error: `QsbrThread` is not `Send`
/// ```
///
/// ```
/// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
/// let mut me = D.register();
/// let off = me.offline(); // about to block: grace periods need not wait for us
/// std::thread::sleep(std::time::Duration::from_millis(1));
/// off.online();
/// ```
pub struct QsbrThread {
    domain: &'static QsbrDomain,
    rec: &'static QsbrRecord,
    _not_send: PhantomData<*const ()>,
}

impl QsbrThread {
    /// Stores `v` as our announcement, fenced both sides, and wakes a waiting writer. Out of line:
    /// it is off the read path (`quiescent_state` calls it only when a grace period waits), and
    /// inlined into a reader's loop its fences and futex call cost registers there.
    #[cold]
    #[inline(never)]
    fn announce(&self, v: u64) {
        // Fenced on both sides (`protocol.rs`); the second fence also orders the `waiting` load.
        super::protocol::qsbr_announce(&self.rec.ctr, v);
        if self.domain.waiting.load(Ordering::Relaxed) != 0 {
            self.domain.waiting.store(0, Ordering::Relaxed);
            crate::sys::futex_wake(&self.domain.waiting, 1);
        }
    }

    /// A read-side section: free. References read under it live no longer than the guard, and the
    /// guard borrows the handle, so no quiescent state can be announced meanwhile, nor can the thread
    /// go offline (a [`QsbrOffline`] borrows the handle mutably).
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let me = D.register();
    /// let g = me.read_lock();
    /// drop(g);
    /// ```
    #[inline(always)]
    pub fn read_lock(&self) -> QsbrReadGuard<'_> {
        QsbrReadGuard { _t: PhantomData }
    }

    /// Announces a quiescent state: this thread holds no reference read under an earlier guard (the
    /// borrow checker guarantees it). Cheap when no grace period is waiting (a load and a compare).
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let mut me = D.register();
    /// me.quiescent_state();
    /// ```
    #[inline]
    pub fn quiescent_state(&mut self) {
        // Relaxed: a stale value only delays the announcement to the next call.
        let gp = self.domain.gp.load(Ordering::Relaxed);
        if self.rec.ctr.load(Ordering::Relaxed) != gp {
            self.announce(gp);
        }
    }

    /// Goes offline (e.g. before blocking): grace periods stop waiting for this thread until the
    /// returned [`QsbrOffline`] is dropped (or [`online`](QsbrOffline::online) is called). It borrows
    /// the handle mutably, so no read lock can be taken while offline (liburcu's
    /// `rcu_thread_offline`/`rcu_thread_online`, checked at compile time):
    ///
    /// ```compile_fail
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let mut me = D.register();
    /// let off = me.offline();
    /// let g = me.read_lock(); // error: `me` is borrowed mutably by `off`
    /// drop(off);
    /// ```
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let mut me = D.register();
    /// let off = me.offline();
    /// D.synchronize(); // does not wait for us
    /// off.online();
    /// assert!(me.is_online());
    /// ```
    pub fn offline(&mut self) -> QsbrOffline<'_> {
        self.announce(0);
        QsbrOffline { t: self }
    }

    /// Whether the thread is online.
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// assert!(D.register().is_online());
    /// ```
    pub fn is_online(&self) -> bool {
        self.rec.ctr.load(Ordering::Relaxed) != 0
    }

    /// A grace period from a registered thread: offline around the wait (it would wait for itself).
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let mut me = D.register();
    /// me.synchronize();
    /// assert!(me.is_online());
    /// ```
    pub fn synchronize(&mut self) {
        self.offline().domain_synchronize();
    }
}

impl Drop for QsbrThread {
    fn drop(&mut self) {
        self.announce(0);
        let rec: *const QsbrRecord = self.rec;
        let _ = MINE.try_with(|m| m.borrow_mut().retain(|(_, r)| !core::ptr::eq(*r, rec)));
        // Release: the next registrant's Acquire claim sees the record offline.
        self.rec.in_use.store(false, Ordering::Release);
    }
}

/// A registered thread gone offline ([`QsbrThread::offline`]): grace periods do not wait for it.
/// Dropping it, or [`online`](Self::online), brings the thread back online.
///
/// ```
/// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
/// let mut me = D.register();
/// {
///     let _off = me.offline();
///     std::thread::sleep(std::time::Duration::from_millis(1)); // blocking is fine offline
/// }
/// assert!(me.is_online());
/// ```
#[must_use = "the thread comes back online when this drops"]
pub struct QsbrOffline<'t> {
    t: &'t mut QsbrThread,
}

impl QsbrOffline<'_> {
    /// Comes back online (the same as dropping it).
    ///
    /// ```
    /// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
    /// let mut me = D.register();
    /// me.offline().online();
    /// assert!(me.is_online());
    /// ```
    pub fn online(self) {}

    /// A grace period of the thread's domain, waited for while offline.
    fn domain_synchronize(self) {
        self.t.domain.synchronize();
    }
}

impl Drop for QsbrOffline<'_> {
    fn drop(&mut self) {
        self.t.announce(self.t.domain.gp.load(Ordering::Relaxed));
    }
}

super::api::grace_period_api!(QsbrDomain, call_rcu, rcu_barrier, refuse_online);

impl Host for QsbrDomain {
    fn engine(&self) -> &Engine {
        &self.engine
    }
    fn gp(&self) -> &GpSeq {
        &self.gps
    }
    /// `protocol::qsbr_grace_period`: fence, `gp += 1`, fence, wait for the records, fence.
    fn grace_period_body(&'static self) {
        protocol::qsbr_grace_period(&self.gp, |gp| self.wait_for(gp));
    }
    fn may_wait(&'static self) -> bool {
        !self.caller_online()
    }
    fn fork_hooks(&'static self) {
        fork::register(&self.fork_registered, self);
    }
    fn names(&self) -> (&'static str, &'static str) {
        ("call_rcu", "rcu_barrier")
    }
}

impl fork::PooledDomain for QsbrDomain {
    type Record = QsbrRecord;
    fn records(&'static self) -> &'static Registry<QsbrRecord> {
        &self.records
    }
    fn release_gone(&'static self, records: Vec<&'static QsbrRecord>) {
        let mine: Vec<usize> = MINE
            .try_with(|m| {
                m.borrow()
                    .iter()
                    .map(|(_, r)| *r as *const QsbrRecord as usize)
                    .collect()
            })
            .unwrap_or_default();
        for r in records {
            if !mine.contains(&(r as *const QsbrRecord as usize)) {
                // A handle of a thread that does not exist here (handles are not `Send`): offline.
                r.ctr.store(0, Ordering::Relaxed);
                // Release: the next holder's Acquire claim (`Registry::claim`) sees the record reset.
                r.in_use.store(false, Ordering::Release);
            }
        }
    }
}

/// A QSBR read-side section: no code at all; it borrows the thread's [`QsbrThread`].
///
/// ```
/// static D: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();
/// let me = D.register();
/// let _g = me.read_lock();
/// ```
#[must_use = "references read under the guard live as long as it does"]
pub struct QsbrReadGuard<'t> {
    _t: PhantomData<&'t QsbrThread>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicPtr;

    struct Obj {
        dead: AtomicBool,
    }

    /// rcutorture's check for QSBR: readers announce quiescent states between sections; writers retire
    /// with synchronize and mark; no reader sees its object dead.
    #[test]
    fn no_reader_outlives_its_grace_period() {
        static D: QsbrDomain = QsbrDomain::new();
        const N: usize = if cfg!(miri) { 5 } else { 500 };
        let cur = AtomicPtr::new(Box::into_raw(Box::new(Obj {
            dead: AtomicBool::new(false),
        })));
        let stop = AtomicBool::new(false);
        let mut retired = vec![];
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let mut me = D.register();
                    while !stop.load(Ordering::Relaxed) {
                        {
                            let _g = me.read_lock();
                            // SAFETY: objects are freed only at the end of the test (they are marked meanwhile).
                            let o = unsafe { &*cur.load(Ordering::Acquire) };
                            for _ in 0..50 {
                                core::hint::spin_loop();
                            }
                            assert!(!o.dead.load(Ordering::SeqCst), "retired under a reader");
                        }
                        me.quiescent_state();
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
    }

    /// An offline thread does not hold grace periods up; an online one that never announces does.
    #[test]
    fn offline_threads_do_not_block() {
        static D: QsbrDomain = QsbrDomain::new();
        let mut me = D.register();
        let off = me.offline();
        std::thread::spawn(|| D.synchronize()).join().unwrap();
        off.online();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let before = D.gp.load(Ordering::SeqCst);
        let h = std::thread::spawn(move || {
            D.synchronize();
            d2.store(true, Ordering::SeqCst);
        });
        // Once its grace period has begun, it cannot end without our announcement.
        while D.gp.load(Ordering::SeqCst) == before {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
        assert!(
            !done.load(Ordering::SeqCst),
            "the grace period ended without our announcement"
        );
        me.quiescent_state();
        h.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        // A registered thread can run a grace period itself (offline around it).
        me.synchronize();
        assert!(me.is_online());
    }

    #[test]
    fn handles_unregister_and_records_are_reused() {
        static D: QsbrDomain = QsbrDomain::new();
        for _ in 0..5 {
            std::thread::spawn(|| drop(D.register())).join().unwrap();
        }
        assert_eq!(D.records.snapshot().len(), 1);
        D.synchronize(); // nobody registered: returns at once
    }
}
