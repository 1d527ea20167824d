//! RCU schemes for the `rcu-read` and `call-rcu` workloads: ours (`rcu-memb`, and the one-shared-queue
//! `call-rcu-shared` arm that seed 004 contrasts), the peers (`crossbeam-epoch`, `arc-swap`), and the
//! `none` baseline's unprotected object.
//!
//! Every scheme publishes one object (a [`Shared`] line) that readers dereference, and one slot per
//! thread whose object `retire` replaces: the old object is freed once no reader can hold it, by each
//! scheme's own mechanism.

use super::{Kind, LockInfo, RcuUnderTest, rcu};
use crate::engine::workload::Shared;
use crossbeam_utils::CachePadded;
use locklab::rcu::{RcuCell, RcuDomain};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Once};

/// The lab's own domain, so the lab's grace periods never wait for unrelated readers.
static LAB: RcuDomain = RcuDomain::new();

/// A fresh object with `v` in its first word.
pub(crate) fn object(v: u64) -> Shared {
    let mut s = Shared::default();
    s.words[0] = v;
    s
}

/// `none`: the object read with no protection at all (it is never replaced while readers run), and
/// per-thread slots whose old object is freed at once (only its own thread ever sees a slot).
pub struct Unprotected {
    obj: Shared,
    slots: Vec<CachePadded<OwnSlot>>,
}

/// One thread's slot in [`Unprotected`]: touched only by that thread.
struct OwnSlot(UnsafeCell<Box<Shared>>);

// SAFETY: the runner gives worker `t` slot `t` and no other (`retire(t, _)` is called by worker `t`
// only), so no two threads access one slot. Private to this module.
unsafe impl Sync for OwnSlot {}

impl RcuUnderTest for Unprotected {
    fn new(threads: usize) -> Self {
        Unprotected {
            obj: object(1),
            slots: (0..threads)
                .map(|_| CachePadded::new(OwnSlot(UnsafeCell::new(Box::new(object(0))))))
                .collect(),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
        f(&self.obj)
    }
    #[inline(always)]
    fn retire(&self, t: usize, v: u64) {
        // SAFETY: slot `t` belongs to the calling worker alone (see the `Sync` impl).
        let slot = unsafe { &mut *self.slots[t].0.get() };
        // A new allocation and the old one freed, as every scheme's retire does (just at once).
        drop(std::mem::replace(slot, Box::new(object(v))));
    }
    #[inline(always)]
    fn update(&self, t: usize, v: u64) {
        // No protection, so the published object is never replaced: each updater does its
        // allocation and free on its own slot, as in `call-rcu` (slot `t`: two updaters sharing one
        // slot would free each other's objects).
        self.retire(t, v);
    }
    #[inline(always)]
    fn synchronize(&self) {
        // No grace period at all: the harness's own cost of an `rcu-sync` op.
    }
}

/// Per-thread slots of raw pointers, each holding a `Box<Shared>` (ours and the shared-queue arm).
struct Slots(Vec<CachePadded<AtomicPtr<Shared>>>);

impl Slots {
    fn new(threads: usize) -> Self {
        Slots(
            (0..threads)
                .map(|_| CachePadded::new(AtomicPtr::new(Box::into_raw(Box::new(object(0))))))
                .collect(),
        )
    }
    /// Publishes a new object in slot `t`; returns the old one, now unpublished, as an address.
    #[inline(always)]
    fn swap(&self, t: usize, v: u64) -> usize {
        let new = Box::into_raw(Box::new(object(v)));
        // AcqRel: publishes the new object; takes ownership of the old one.
        self.0[t].swap(new, Ordering::AcqRel) as usize
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for s in &mut self.0 {
            // SAFETY: the current objects came from `Box::into_raw` and are no longer shared (`&mut`).
            drop(unsafe { Box::from_raw(*s.get_mut()) });
        }
    }
}

/// Frees an object retired by [`Slots::swap`].
///
/// # Safety
/// `addr` came from `Slots::swap` and a grace period has passed since (no reader holds it).
unsafe fn free(addr: usize) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(addr as *mut Shared) });
}

/// The object both of our memb arms publish, read under a read-side section of [`LAB`].
struct Published(RcuCell<Shared>);

impl Published {
    fn new() -> Self {
        Published(RcuCell::with_domain(object(1), &LAB))
    }
    #[inline(always)]
    fn read<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        let g = LAB.read_lock();
        f(self.0.load(&g))
    }
}

/// `rcu-memb`: our memb-flavour RCU; retire is `defer_drop` (call_rcu of the free) appended to the
/// thread's own log.
pub struct MembRcu {
    obj: Published,
    slots: Slots,
}

impl RcuUnderTest for MembRcu {
    fn new(threads: usize) -> Self {
        MembRcu {
            obj: Published::new(),
            slots: Slots::new(threads),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
        self.obj.read(f)
    }
    #[inline(always)]
    fn retire(&self, t: usize, v: u64) {
        let old = self.slots.swap(t, v);
        // SAFETY: `old` came from `Box::into_raw` in `swap` and was unpublished by it: ours alone.
        // `defer_drop` (call_rcu with a drop, no closure allocation) frees it after a grace period.
        LAB.defer_drop(unsafe { Box::from_raw(old as *mut Shared) });
    }
    #[inline(always)]
    fn update(&self, _t: usize, v: u64) {
        self.obj.0.store_deferred(object(v));
    }
    fn synchronize(&self) {
        LAB.synchronize();
    }
    fn sync_counts(&self) -> Option<(u64, u64)> {
        Some((LAB.grace_periods(), LAB.synchronize_calls()))
    }
    fn drain(&self) {
        LAB.rcu_barrier();
    }
}

/// `call-rcu-shared`: the same read side, but retire goes through one process-wide queue, as in
/// liburcu's default `call_rcu` and the kernel before seed 004's fix: a CAS on a shared head, a shared
/// counter increment and a full fence per call; one worker runs the grace periods and frees.
pub struct SharedQueueRcu {
    /// The published object (a `Box<Shared>`), read under a [`LAB`] read-side section; raw rather than
    /// an [`RcuCell`] because `update` retires the old object through the shared queue.
    obj: AtomicPtr<Shared>,
    slots: Slots,
}

struct Node {
    next: *mut Node,
    obj: usize,
}

static QUEUE: AtomicPtr<Node> = AtomicPtr::new(std::ptr::null_mut());
static QUEUED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);
static WORKER_IDLE: AtomicU32 = AtomicU32::new(0);
static WORKER: Once = Once::new();

fn shared_worker() {
    loop {
        // Acquire pairs with the pushers' Release CAS: the nodes are fully written.
        let mut head = QUEUE.swap(std::ptr::null_mut(), Ordering::Acquire);
        if head.is_null() {
            // SeqCst store then load (Dekker with `enqueue`'s push, full fence and `WORKER_IDLE`
            // load): either the pusher sees us idle and wakes us, or we see its node and go on.
            WORKER_IDLE.store(1, Ordering::SeqCst);
            if QUEUE.load(Ordering::SeqCst).is_null() {
                locklab::sys::futex_wait(
                    &WORKER_IDLE,
                    1,
                    Some(std::time::Duration::from_millis(10)),
                );
            }
            // SeqCst as above (a store the pushers' next look must not miss).
            WORKER_IDLE.store(0, Ordering::SeqCst);
            continue;
        }
        LAB.synchronize();
        while !head.is_null() {
            // SAFETY: every node came from `Box::into_raw` in `retire` and was taken off the queue
            // by the swap above; its object was unpublished before it was queued, and the grace
            // period above has passed.
            let node = unsafe { Box::from_raw(head) };
            // SAFETY: `node.obj` came from `Slots::swap` or `update` (a `Box<Shared>` unpublished
            // before it was queued), is queued once, and the grace period above has passed.
            unsafe { free(node.obj) };
            head = node.next;
            // Release pairs with `drain`'s Acquire load: the frees happen-before it returns.
            FREED.fetch_add(1, Ordering::Release);
        }
    }
}

impl RcuUnderTest for SharedQueueRcu {
    fn new(threads: usize) -> Self {
        WORKER.call_once(|| {
            std::thread::Builder::new()
                .name("lab-shared-call-rcu".into())
                .spawn(|| {
                    locklab::sys::use_process_affinity(); // not the pinned spawner's single CPU
                    shared_worker()
                })
                .expect("spawn the shared call_rcu worker");
        });
        SharedQueueRcu {
            obj: AtomicPtr::new(Box::into_raw(Box::new(object(1)))),
            slots: Slots::new(threads),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
        let _g = LAB.read_lock();
        // Acquire: pairs with `update`'s AcqRel swap (the object's contents are visible).
        let p = self.obj.load(Ordering::Acquire);
        // SAFETY: `p` was published and is freed only after a grace period of `LAB` (the shared queue's
        // worker synchronizes before freeing), which waits for this read-side section.
        f(unsafe { &*p })
    }
    #[inline(always)]
    fn retire(&self, t: usize, v: u64) {
        enqueue(self.slots.swap(t, v));
    }
    #[inline(always)]
    fn update(&self, _t: usize, v: u64) {
        // AcqRel: publishes the new object; takes the old one, now unpublished.
        let old = self
            .obj
            .swap(Box::into_raw(Box::new(object(v))), Ordering::AcqRel);
        enqueue(old as usize);
    }
    fn drain(&self) {
        // Acquire pairs with the worker's Release increments.
        while FREED.load(Ordering::Acquire) < QUEUED.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

impl Drop for SharedQueueRcu {
    fn drop(&mut self) {
        // SAFETY: the current object came from `Box::into_raw` and was never retired; `&mut self`.
        drop(unsafe { Box::from_raw(*self.obj.get_mut()) });
    }
}

/// Queues the unpublished object at `old` (from `Box::into_raw`) on the one shared queue: a CAS on
/// the shared head, a shared counter increment and a full fence, then a wake of the worker if it
/// sleeps.
#[inline(always)]
fn enqueue(old: usize) {
    let node = Box::into_raw(Box::new(Node {
        next: std::ptr::null_mut(),
        obj: old,
    }));
    let mut head = QUEUE.load(Ordering::Relaxed);
    loop {
        // SAFETY: `node` is ours until the CAS below publishes it.
        unsafe { (*node).next = head };
        // Release: publishes the node's fields to the worker's Acquire swap.
        match QUEUE.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    QUEUED.fetch_add(1, Ordering::Relaxed);
    // The full fence liburcu's enqueue pays before it looks at the worker's futex.
    std::sync::atomic::fence(Ordering::SeqCst);
    if WORKER_IDLE.load(Ordering::Relaxed) != 0 {
        WORKER_IDLE.store(0, Ordering::Relaxed);
        locklab::sys::futex_wake(&WORKER_IDLE, 1);
    }
}

/// `crossbeam-epoch`: pin, load, unpin; retire is `swap` + `defer_destroy`.
pub struct Epoch {
    obj: crossbeam_epoch::Atomic<Shared>,
    slots: Vec<CachePadded<crossbeam_epoch::Atomic<Shared>>>,
}

impl RcuUnderTest for Epoch {
    fn new(threads: usize) -> Self {
        Epoch {
            obj: crossbeam_epoch::Atomic::new(object(1)),
            slots: (0..threads)
                .map(|_| CachePadded::new(crossbeam_epoch::Atomic::new(object(0))))
                .collect(),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
        let g = crossbeam_epoch::pin();
        // Acquire pairs with `update`'s AcqRel swap (the object's contents are visible).
        let p = self.obj.load(Ordering::Acquire, &g);
        // SAFETY: `obj` is never replaced or freed while the scheme lives; `g` pins the epoch.
        f(unsafe { p.deref() })
    }
    #[inline(always)]
    fn retire(&self, t: usize, v: u64) {
        let g = crossbeam_epoch::pin();
        // AcqRel: publishes the new object; takes the old one, now unpublished.
        let old = self.slots[t].swap(crossbeam_epoch::Owned::new(object(v)), Ordering::AcqRel, &g);
        // SAFETY: `old` was unpublished by the swap; crossbeam frees it once no pinned thread can
        // hold it.
        unsafe { g.defer_destroy(old) };
    }
    #[inline(always)]
    fn update(&self, _t: usize, v: u64) {
        let g = crossbeam_epoch::pin();
        // AcqRel: publishes the new object to `read`'s Acquire load; takes the old one.
        let old = self
            .obj
            .swap(crossbeam_epoch::Owned::new(object(v)), Ordering::AcqRel, &g);
        // SAFETY: as in `retire`.
        unsafe { g.defer_destroy(old) };
    }
    fn drain(&self) {
        for _ in 0..4 {
            crossbeam_epoch::pin().flush();
        }
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no thread holds a reference into the scheme any more.
        unsafe {
            let g = crossbeam_epoch::unprotected();
            drop(self.obj.load(Ordering::Relaxed, g).into_owned());
            for s in &self.slots {
                drop(s.load(Ordering::Relaxed, g).into_owned());
            }
        }
    }
}

/// `arc-swap`: `load` (a debt slot, no RMW on the Arc in the common case); retire is `store` of a new
/// `Arc` (the old one is freed when its last holder lets go).
pub struct ArcSwapped {
    obj: arc_swap::ArcSwap<Shared>,
    slots: Vec<CachePadded<arc_swap::ArcSwap<Shared>>>,
}

impl RcuUnderTest for ArcSwapped {
    fn new(threads: usize) -> Self {
        ArcSwapped {
            obj: arc_swap::ArcSwap::from_pointee(object(1)),
            slots: (0..threads)
                .map(|_| CachePadded::new(arc_swap::ArcSwap::from_pointee(object(0))))
                .collect(),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
        let g = self.obj.load();
        f(&g)
    }
    #[inline(always)]
    fn retire(&self, t: usize, v: u64) {
        self.slots[t].store(Arc::new(object(v)));
    }
    #[inline(always)]
    fn update(&self, _t: usize, v: u64) {
        self.obj.store(Arc::new(object(v)));
    }
}

/// The QSBR domain of the `rcu-qsbr` rows (read-only: no grace period ever runs in it).
static QSBR: locklab::rcu::QsbrDomain = locklab::rcu::QsbrDomain::new();

/// `rcu-qsbr` (`rcu-read` only): our QSBR flavour. Reads cost nothing; each thread registers on its
/// first read (a thread-local handle, as a QSBR program keeps one per thread) and announces a
/// quiescent state every [`QS_EVERY`] reads (a load and a compare while no grace period waits).
pub struct QsbrRcu {
    obj: Box<Shared>,
}

/// How often an `rcu-qsbr` reader announces a quiescent state.
pub const QS_EVERY: u64 = 256;

std::thread_local! {
    /// This thread's QSBR registration, or null: the read path's lookup (one thread-local load; no
    /// destructor, so no lazy-registration check).
    static QS_ME: Cell<*mut locklab::rcu::QsbrThread> = const { Cell::new(std::ptr::null_mut()) };
    /// Owns the registration and unregisters it when the thread exits.
    static QS_OWNER: QsOwner = const { QsOwner(Cell::new(std::ptr::null_mut())) };
}

/// Drops the thread's registration at thread exit.
struct QsOwner(Cell<*mut locklab::rcu::QsbrThread>);

impl Drop for QsOwner {
    fn drop(&mut self) {
        let p = self.0.replace(std::ptr::null_mut());
        if !p.is_null() {
            QS_ME.set(std::ptr::null_mut());
            // SAFETY: `p` came from `Box::into_raw` in `register_qsbr`, once, on this thread; the
            // read path no longer finds it (cleared above).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// Registers the calling thread in [`QSBR`] (first read).
#[cold]
#[inline(never)]
fn register_qsbr() -> *mut locklab::rcu::QsbrThread {
    let p = Box::into_raw(Box::new(QSBR.register()));
    // A thread past its thread-local destructors keeps the registration for good (leaked, offline
    // never): the lab's workers never read from a destructor.
    let _ = QS_OWNER.try_with(|o| o.0.set(p));
    QS_ME.set(p);
    p
}

impl RcuUnderTest for QsbrRcu {
    fn new(_threads: usize) -> Self {
        QsbrRcu {
            obj: Box::new(object(1)),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _t: usize, i: u64, f: impl FnOnce(&Shared) -> R) -> R {
        let mut p = QS_ME.get();
        if p.is_null() {
            p = register_qsbr();
        }
        // SAFETY: the thread's own registration (`register_qsbr`), alive until the thread's
        // `QsOwner` destructor runs, which clears `QS_ME` first; no other reference to it exists
        // while this one does (`f` does not reach it).
        let me = unsafe { &mut *p };
        let r = {
            let _g = me.read_lock();
            f(&self.obj) // never replaced: the read side's cost is what is measured
        };
        if i.is_multiple_of(QS_EVERY) {
            me.quiescent_state();
        }
        r
    }
    fn retire(&self, _: usize, _: u64) {
        unreachable!("rcu-qsbr runs rcu-read only")
    }
    fn update(&self, _: usize, _: u64) {
        unreachable!("rcu-qsbr runs rcu-read only")
    }
}

/// The SRCU domain of the `srcu` rows.
static SRCU: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();

/// `srcu` (`rcu-read` and `rcu-sync`): our SRCU. A read counts the thread in the domain's current
/// index on its own counters, with a full fence on each side (the price of sleepable readers);
/// `synchronize` drains both indexes around a flip. No `call_rcu` in SRCU.
pub struct SrcuRcu {
    obj: AtomicPtr<Shared>,
}

impl RcuUnderTest for SrcuRcu {
    fn new(_: usize) -> Self {
        SrcuRcu {
            obj: AtomicPtr::new(Box::into_raw(Box::new(object(1)))),
        }
    }
    #[inline(always)]
    fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
        let _g = SRCU.read_lock();
        // Acquire: pairs with the publication in `new` (the object is never replaced).
        let p = self.obj.load(Ordering::Acquire);
        // SAFETY: freed only in `Drop`, when no reader is left.
        f(unsafe { &*p })
    }
    fn retire(&self, _: usize, _: u64) {
        unreachable!("srcu has no call_rcu")
    }
    fn update(&self, _: usize, _: u64) {
        unreachable!("srcu has no call_rcu")
    }
    fn synchronize(&self) {
        SRCU.synchronize();
    }
}

impl Drop for SrcuRcu {
    fn drop(&mut self) {
        // SAFETY: from `Box::into_raw` in `new`, never retired; `&mut self`: no reader is left.
        drop(unsafe { Box::from_raw(*self.obj.get_mut()) });
    }
}

/// Our RCU schemes.
pub fn ours() -> Vec<LockInfo> {
    vec![
        LockInfo {
            call_rcu: None,
            rcu_update: None,
            ..rcu::<QsbrRcu>(
                "rcu-qsbr",
                Kind::Ours,
                "our RCU, QSBR flavour (rcu-read only): read lock/unlock are no code; a quiescent state every 256 reads",
            )
        },
        LockInfo {
            rcu_sync: Some(crate::engine::runner::run_rcu_sync::<MembRcu>),
            ..rcu::<MembRcu>(
                "rcu-memb",
                Kind::Ours,
                "our RCU, memb flavour: read = two plain stores, no fence; retire = call_rcu appended to the thread's own log (no lock, no RMW); synchronize batched",
            )
        },
        LockInfo {
            call_rcu: None,
            rcu_update: None,
            rcu_sync: Some(crate::engine::runner::run_rcu_sync::<SrcuRcu>),
            ..rcu::<SrcuRcu>(
                "srcu",
                Kind::Ours,
                "our SRCU (rcu-read, rcu-sync): sleepable readers, per-thread two-index counters, a full fence per lock and unlock",
            )
        },
        rcu::<SharedQueueRcu>(
            "call-rcu-shared",
            Kind::Baseline,
            "our read side, but call_rcu through one shared queue + shared counter + full fence (seed 004's base arm)",
        ),
    ]
}

/// Peers' RCU-like schemes.
pub fn peers() -> Vec<LockInfo> {
    vec![
        rcu::<Epoch>(
            "crossbeam-epoch",
            Kind::Peer,
            "crossbeam-epoch: pin/load to read, swap + defer_destroy to retire",
        ),
        rcu::<ArcSwapped>(
            "arc-swap",
            Kind::Peer,
            "arc-swap: load (debt slots) to read, store of a new Arc to retire",
        ),
    ]
}
