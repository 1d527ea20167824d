//! The RCU flavours' protocols, apart from their bookkeeping (records, thread-locals, futexes): the
//! steps that make a grace period wait for every reader it must, written over the `primitive` shim's
//! atomics so that the loom models (`src/loom_models/`) run exactly this code. The domains in
//! `mod.rs`, `qsbr.rs` and `srcu.rs` call these functions; each flavour's module docs explain why
//! the steps are enough, and each fence here names its pair.
//!
//! The waits are passed in as closures (`wait_until`: spin, sleep and warn in the domains; a yield
//! loop under loom), as are the memb flavour's asymmetric fences (`membarrier` and compiler fences in
//! the domain; SeqCst fences under loom, which is the domain's documented fallback).

// Under loom only the parts the models use are called.
#![cfg_attr(loom, allow(dead_code))]

use crate::primitive::{AtomicPtr, AtomicU64, Ordering, fence};
use core::mem::MaybeUninit;

/// Low bits of a memb record's `ctr` that count the nesting depth.
///
/// ```
/// use locklab::rcu::NEST_BITS;
/// // A grace period moves `gp` by one unit above the nesting field.
/// let one_gp = 1u64 << NEST_BITS;
/// assert_eq!(one_gp, 65_536);
/// ```
pub const NEST_BITS: u32 = 16;
/// The nesting field of a memb `ctr`.
pub(crate) const NEST_MASK: u64 = (1 << NEST_BITS) - 1;
/// One grace period in memb's `gp` (above the nesting field).
pub(crate) const GP_UNIT: u64 = 1 << NEST_BITS;

// ----- memb ------------------------------------------------------------------------------------------

/// memb read lock on the thread's own `ctr`: the outermost copies `gp` (whose nesting field is 1),
/// then `light_fence`; a nested one adds 1.
#[inline(always)]
pub(crate) fn memb_enter(ctr: &AtomicU64, gp: &AtomicU64, light_fence: impl Fn()) {
    // Relaxed: our own word (written only by this thread).
    let c = ctr.load(Ordering::Relaxed);
    if c & NEST_MASK == 0 {
        // Relaxed load: any recent value is correct (a stale one is older, so a grace period waits
        // for us all the same); the store publishes our section to grace periods through the fence.
        let g = gp.load(Ordering::Relaxed);
        ctr.store(g, Ordering::Relaxed);
        // Orders the store before the section's loads (pairs with the writer's first heavy fence).
        light_fence();
    } else {
        assert!(
            c & NEST_MASK < NEST_MASK,
            "locklab::rcu: read-side sections nested {NEST_MASK} deep"
        );
        ctr.store(c + 1, Ordering::Relaxed);
    }
}

/// memb read unlock: `light_fence`, then one level less. `true` if that ended the outermost section.
#[inline(always)]
pub(crate) fn memb_exit(ctr: &AtomicU64, light_fence: impl Fn()) -> bool {
    // Orders the section's loads before the store (pairs with the writer's heavy fences).
    light_fence();
    // Relaxed: our own word.
    let c = ctr.load(Ordering::Relaxed);
    debug_assert!(c & NEST_MASK != 0, "locklab::rcu: unbalanced read unlock");
    ctr.store(c - 1, Ordering::Relaxed);
    c & NEST_MASK == 1
}

/// Whether a memb record holding `ctr` might be in a section that began before grace period `gp`:
/// nested, with an older snapshot (`gp` only grows, so an old snapshot never looks current).
#[inline]
pub(crate) fn memb_blocks(ctr: &AtomicU64, gp: u64) -> bool {
    // Relaxed: the heavy fence before the scan (or the one in the sleep path) orders it.
    let c = ctr.load(Ordering::Relaxed);
    c & NEST_MASK != 0 && c & !NEST_MASK < gp & !NEST_MASK
}

/// One memb grace period (the caller serialises them): heavy fence, `gp += 1`, wait until no record
/// blocks the new value (`wait_until(gp)` returns when none does), heavy fence.
pub(crate) fn memb_grace_period(gp: &AtomicU64, heavy_fence: impl Fn(), wait_until: impl Fn(u64)) {
    // Pairs with every reader's light fence: our unpublish is visible to sections that start after
    // it, and sections that started before it are visible to the scan.
    heavy_fence();
    // Relaxed: only writers (serialised by the caller) write it; readers are ordered by the fences.
    let g = gp.load(Ordering::Relaxed) + GP_UNIT;
    gp.store(g, Ordering::Relaxed);
    wait_until(g);
    // Orders the readers' sections (before their unlock stores, seen by the scan) before whatever
    // the caller does next (frees the old object).
    heavy_fence();
}

/// The cookie of the first grace period that starts after now (the kernel's `rcu_seq_snap`, what
/// `get_state_synchronize_rcu` returns): the value `seq` holds once that grace period has ended.
/// `seq` is even while no grace period runs and odd while one does (+1 at its start, +1 at its end),
/// so if none is running the next one ends at `seq + 2`, and if one is running, the one after it
/// ends at `seq + 3` rounded down to even.
#[inline]
pub(crate) fn seq_snap(seq: &AtomicU64) -> u64 {
    // Orders the caller's unpublish before its look at `seq` (pairs with the fence after a grace
    // period's odd store in `shared_grace_period`): either we see that grace period running (and
    // need the next), or it started after this fence, and its scan covers every reader that could
    // hold the old version. (Without it a caller could be served by a grace period that never saw its
    // unpublish: the loom model `rcu_memb_shared_grace_periods_still_wait` found that in an earlier
    // version.)
    fence(Ordering::SeqCst);
    // Acquire pairs with the Release store that ended a grace period.
    (seq.load(Ordering::Acquire) + 3) & !1
}

/// Whether the grace period named by `cookie` (from [`seq_snap`]) has ended: every read-side section
/// that began before the snapshot has ended, and (Acquire, pairing with the Release end of that
/// grace period) its accesses happen-before whatever the caller does next. `seq` only grows (2^63
/// grace periods before it could wrap).
#[inline]
pub(crate) fn seq_done(seq: &AtomicU64, cookie: u64) -> bool {
    seq.load(Ordering::Acquire) >= cookie
}

/// A grace period shared with concurrent callers, by sequence number (see [`seq_snap`]); `completed`
/// counts the grace periods.
///
/// While a grace period runs, callers do not queue on the lock (a sleeping lock would hand it to one
/// of them at a time, and each would run a grace period of its own): they wait for `seq` to change
/// (`wait_change(seen)` returns once `seq` may differ from `seen`; `ended()` runs after every grace
/// period and wakes them). Then one takes `lock` (which serialises grace periods; its guard is held
/// to the end) and runs the next grace period, which serves every caller that arrived while the
/// previous one ran; they find their target reached and return without running one.
///
/// If `grace_period` unwinds, the grace period did not complete: `seq` goes back to the even value
/// it had before (a lower value only makes waiters wait for a later grace period, never return
/// early), the lock is released and the waiters are woken, so the domain is not wedged.
pub(crate) fn shared_grace_period<G>(
    seq: &AtomicU64,
    completed: &AtomicU64,
    lock: impl Fn() -> G,
    wait_change: impl Fn(u64),
    ended: impl Fn(),
    grace_period: impl FnOnce(),
) {
    let target = seq_snap(seq);
    run_grace_period_until(
        seq,
        completed,
        target,
        lock,
        wait_change,
        ended,
        grace_period,
    );
}

/// [`shared_grace_period`] for a target taken earlier (a polled cookie).
pub(crate) fn run_grace_period_until<G>(
    seq: &AtomicU64,
    completed: &AtomicU64,
    target: u64,
    lock: impl Fn() -> G,
    wait_change: impl Fn(u64),
    ended: impl Fn(),
    grace_period: impl FnOnce(),
) {
    let guard = loop {
        // Acquire pairs with the Release store that ended a grace period: its waits happen-before us.
        let now = seq.load(Ordering::Acquire);
        if now >= target {
            return;
        }
        if now & 1 == 1 {
            wait_change(now);
            continue;
        }
        let guard = lock();
        // Acquire as above.
        let now = seq.load(Ordering::Acquire);
        if now >= target {
            return;
        }
        break guard;
    };
    // Only the lock holder writes `seq`, and no grace period runs: it is even here.
    let now = seq.load(Ordering::Relaxed);
    seq.store(now + 1, Ordering::Relaxed);
    // Restores `seq` and wakes the waiters if the grace period unwinds (dropped before `guard`, so
    // the lock is still held while `seq` is put back).
    struct Unwind<'a, E: Fn()> {
        seq: &'a AtomicU64,
        now: u64,
        ended: &'a E,
        armed: bool,
    }
    impl<E: Fn()> Drop for Unwind<'_, E> {
        fn drop(&mut self) {
            if self.armed {
                // Release: as the normal end below (nothing was freed on the strength of it).
                self.seq.store(self.now, Ordering::Release);
                (self.ended)();
            }
        }
    }
    let mut unwind = Unwind {
        seq,
        now,
        ended: &ended,
        armed: true,
    };
    // Orders the odd store before the grace period (pairs with the callers' fence in `seq_snap`).
    fence(Ordering::SeqCst);
    grace_period();
    unwind.armed = false;
    // Release: see the Acquire loads above.
    completed.fetch_add(1, Ordering::Release);
    seq.store(now + 2, Ordering::Release);
    drop(guard);
    ended();
}

// ----- QSBR ------------------------------------------------------------------------------------------

/// QSBR announcement: `ctr = v` (the current `gp`: a quiescent state or coming online; 0: offline),
/// fenced on both sides.
#[inline]
pub(crate) fn qsbr_announce(ctr: &AtomicU64, v: u64) {
    // Orders our read-side accesses before the announcement (pairs with the writer's fences).
    fence(Ordering::SeqCst);
    ctr.store(v, Ordering::Relaxed);
    // Orders the announcement before our next reads (and the caller's `waiting` load).
    fence(Ordering::SeqCst);
}

/// Whether a QSBR record holding `ctr` holds grace period `gp` up: online, last announced earlier.
#[inline]
pub(crate) fn qsbr_blocks(ctr: &AtomicU64, gp: u64) -> bool {
    let c = ctr.load(Ordering::Relaxed);
    c != 0 && c != gp
}

/// One QSBR grace period (serialised by the caller): fence, `gp += 1`, fence, wait until no record
/// blocks it, fence.
pub(crate) fn qsbr_grace_period(gp: &AtomicU64, wait_until: impl Fn(u64)) {
    // Pairs with the readers' fences around their announcements: our unpublish before the new `gp`.
    fence(Ordering::SeqCst);
    let g = gp.load(Ordering::Relaxed) + 1;
    gp.store(g, Ordering::Relaxed);
    // Orders the new `gp` before the scan (pairs with the readers' fence after each announcement:
    // a reader that announces after this sees the new `gp`, one that announced before is scanned).
    fence(Ordering::SeqCst);
    wait_until(g);
    // Orders the readers' sections (before their announcements) before what the caller does next.
    fence(Ordering::SeqCst);
}

// ----- SRCU ------------------------------------------------------------------------------------------

/// A thread's SRCU counters: `locks[i]` and `unlocks[i]` for the two indexes, each written only by the
/// thread that holds them.
pub(crate) struct SrcuCounters {
    pub(crate) locks: [AtomicU64; 2],
    pub(crate) unlocks: [AtomicU64; 2],
}

impl SrcuCounters {
    /// All zero (const outside loom, whose atomics are built at run time).
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        SrcuCounters {
            locks: [const { AtomicU64::new(0) }; 2],
            unlocks: [const { AtomicU64::new(0) }; 2],
        }
    }

    /// All zero.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        SrcuCounters {
            locks: [AtomicU64::new(0), AtomicU64::new(0)],
            unlocks: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }
}

/// `*c += 1` on a counter only this thread writes: a plain load and store.
#[inline(always)]
fn bump(c: &AtomicU64) {
    // Relaxed load: our own counter.
    let v = c.load(Ordering::Relaxed);
    c.store(v + 1, Ordering::Relaxed);
}

/// The index a new SRCU reader counts in.
#[inline(always)]
pub(crate) fn srcu_index(idx: &AtomicU64) -> usize {
    // Relaxed: a stale index is fine (srcu.rs: the grace period's two waits cover it).
    (idx.load(Ordering::Relaxed) & 1) as usize
}

/// SRCU read lock, after [`srcu_index`]: count in index `i` on the thread's own counters, then a full
/// fence.
#[inline(always)]
pub(crate) fn srcu_enter(mine: &SrcuCounters, i: usize) {
    bump(&mine.locks[i]);
    // Orders the increment before the section's loads (pairs with the writer's fence between sums).
    fence(Ordering::SeqCst);
}

/// SRCU read unlock of a section counted in index `i`, on the unlocking thread's own counters.
#[inline(always)]
pub(crate) fn srcu_exit(mine: &SrcuCounters, i: usize) {
    // Orders the section's loads before the unlock count (pairs with the writer's sums).
    fence(Ordering::SeqCst);
    bump(&mine.unlocks[i]);
}

/// Whether index `i` has no reader, over every record's counters: unlocks summed first, a fence, then
/// locks (a reader counting meanwhile can only make the index look busier).
pub(crate) fn srcu_drained<'a>(
    records: impl Iterator<Item = &'a SrcuCounters> + Clone,
    i: usize,
) -> bool {
    let unlocks: u64 = records
        .clone()
        .map(|r| r.unlocks[i].load(Ordering::Relaxed))
        .sum();
    // Unlocks before locks; pairs with the readers' fences.
    fence(Ordering::SeqCst);
    let locks: u64 = records.map(|r| r.locks[i].load(Ordering::Relaxed)).sum();
    locks == unlocks
}

/// One SRCU grace period (serialised by the caller): wait until the other index drains, flip, wait
/// until the old index drains (`wait_drained(i)` returns once index `i` has no reader).
pub(crate) fn srcu_grace_period(idx: &AtomicU64, wait_drained: impl Fn(usize)) {
    // Orders the caller's unpublish before the scans (pairs with the readers' fences).
    fence(Ordering::SeqCst);
    let cur = idx.load(Ordering::Relaxed);
    wait_drained(((cur + 1) & 1) as usize);
    idx.store(cur + 1, Ordering::Relaxed);
    // Orders the flip before the second scan (pairs with the readers' fence after counting in: a
    // reader that loaded the old index and counts in it after this fence is seen by the scan).
    fence(Ordering::SeqCst);
    wait_drained((cur & 1) as usize);
    // Orders the readers' sections (before their unlock counts) before what the caller does next.
    fence(Ordering::SeqCst);
}

// ----- call_rcu segments ---------------------------------------------------------------------------

/// A callback: runs once, on the grace-period thread.
pub(crate) enum Callback {
    /// Any closure (boxed: one allocation unless it captures nothing).
    Closure(Box<dyn FnOnce() + Send>),
    /// Drops a `Box<T>` (`defer_drop`, the kernel's `kfree_rcu`): its drop function and pointer, no
    /// allocation for the callback itself.
    Drop {
        drop: unsafe fn(*mut ()),
        ptr: *mut (),
        /// `T` has no drop glue: running it is a deallocation only, safe on any thread at any point
        /// (so the queueing thread may run it itself: see "Who runs callbacks").
        trivial: bool,
    },
}

// SAFETY: `Closure` holds a `Send` closure; `Drop` holds a `Box<T>` with `T: Send` (the bound on
// `defer_drop`, the only constructor), so running it on another thread is what `T: Send` allows.
unsafe impl Send for Callback {}

impl Callback {
    pub(crate) fn invoke(self) {
        match self {
            Callback::Closure(f) => f(),
            // SAFETY: `defer_drop` built this from `Box::into_raw` of a `Box<T>` and `drop_box::<T>`;
            // it runs once (the callback is consumed).
            Callback::Drop { drop, ptr, .. } => unsafe { drop(ptr) },
        }
    }

    pub(crate) fn trivial(&self) -> bool {
        matches!(self, Callback::Drop { trivial: true, .. })
    }
}

/// Drops a `Box<T>` given as a type-erased pointer.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw` and is dropped once.
pub(crate) unsafe fn drop_box<T>(p: *mut ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p as *mut T) });
}

/// Callbacks in one chunk of a [`CbLog`]: small under loom, so the models cross chunk boundaries.
pub(crate) const CHUNK: usize = if cfg!(loom) { 2 } else { 64 };
/// Emptied chunks a log keeps for reuse (beyond, the consumer frees them): 640 chunks, 40,960
/// callbacks' worth, at least callback.rs's flood-control `LIMIT` (checked there at compile time),
/// so a list that stays under the mark reuses its chunks and never allocates or frees one (about
/// 1 MB kept per record at most). A smaller cap (256 chunks) was under the backlog of a thread
/// queuing ~9M callbacks/s across a grace-period cycle of ~2 ms: the consumers freed chunks (under
/// the list lock) and the producer allocated new ones, a 1.5 KB `malloc` and `free` (outside
/// glibc's fast bins and thread cache) every 64 calls, which made the slowest 1% of calls 4x slower.
pub(crate) const KEEP_FREE: u64 = if cfg!(loom) { 1 } else { 640 };

/// An `UnsafeCell` that loom checks for data races (its accesses must be ordered by the atomics
/// around them); `core`'s elsewhere.
struct RawCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] core::cell::UnsafeCell<T>,
);

impl<T> RawCell<T> {
    fn new(v: T) -> Self {
        #[cfg(loom)]
        return RawCell(loom::cell::UnsafeCell::new(v));
        #[cfg(not(loom))]
        RawCell(core::cell::UnsafeCell::new(v))
    }
    /// Runs `f` on the cell's pointer (the caller orders the access against every other one).
    #[inline(always)]
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }
}

/// [`CHUNK`] callback slots of a [`CbLog`], linked in queue order.
pub(crate) struct Chunk {
    /// The queue index of slot 0 (a multiple of [`CHUNK`]). Producer only.
    base: RawCell<u64>,
    /// The chunk after this one: linked by the producer before it publishes any index in it. In the
    /// free stack, the chunk below.
    next: AtomicPtr<Chunk>,
    /// In the free stack: chunks from this one down (an estimate, for the [`KEEP_FREE`] cap).
    depth: AtomicU64,
    slots: [RawCell<MaybeUninit<Callback>>; CHUNK],
}

impl Chunk {
    fn boxed(base: u64) -> *mut Chunk {
        Box::into_raw(Box::new(Chunk {
            base: RawCell::new(base),
            next: AtomicPtr::new(core::ptr::null_mut()),
            depth: AtomicU64::new(0),
            slots: core::array::from_fn(|_| RawCell::new(MaybeUninit::uninit())),
        }))
    }
}

/// One thread's `call_rcu` callbacks: a single-producer log of chunks (callback.rs's module docs).
/// The producer (the thread that holds the record) appends with plain stores and one Release store
/// of `tail`: no read-modify-write, no lock, no fence. Consumers (under the record's list lock, a
/// [`LogReader`]) take callbacks in index order up to the `tail` they loaded.
///
/// Producer steps, each one word, in this order: link a new chunk after the current one (reusing
/// one already linked: a producer that vanished at a fork may have linked it), move `prod` to it,
/// write the slot, publish `tail`. A producer stopped after any of them leaves the log consistent for
/// the next holder (it rewrites the unpublished slot).
pub(crate) struct CbLog {
    /// Callbacks ever published. Producer: Relaxed load of its own value, Release store (pairs with
    /// the consumers' Acquire load: the slot, and any chunk link, are written before it).
    tail: AtomicU64,
    /// The chunk holding index `tail - 1` (or the first chunk). Producer only.
    prod: RawCell<*mut Chunk>,
    /// Chunks the consumers have emptied, a stack: consumers push one at a time (CAS, under the
    /// list lock, so one at a time), the producer takes them all at once (swap), so no ABA.
    free: AtomicPtr<Chunk>,
    /// Chunks the producer took from `free` and has not used yet, linked by `next`. Producer only.
    stash: RawCell<*mut Chunk>,
    /// Chunks allocated at boundaries (tests: the free stack is reused).
    #[cfg(test)]
    pub(crate) made: core::sync::atomic::AtomicU64,
}

// SAFETY: the raw pointers are chunks owned by the log; the producer's fields (`prod`, `stash`) are
// touched by the
// record's holder only (a handover between holders is ordered by the record's `in_use` claim), the
// consumer's by the holder of the list lock; the callbacks are `Send`.
unsafe impl Send for CbLog {}
// SAFETY: as above.
unsafe impl Sync for CbLog {}

/// A consumer's position in a [`CbLog`] (kept under the list lock).
pub(crate) struct LogReader {
    /// The chunk holding index `head` (or the chunk that ends at it).
    cons: *mut Chunk,
    /// Its first index.
    base: u64,
    /// Callbacks taken so far.
    pub(crate) head: u64,
}

// SAFETY: `cons` is a chunk of the log the reader belongs to, used under its list lock only.
unsafe impl Send for LogReader {}

impl CbLog {
    /// An empty log and its reader.
    pub(crate) fn new() -> (CbLog, LogReader) {
        let first = Chunk::boxed(0);
        let log = CbLog {
            tail: AtomicU64::new(0),
            prod: RawCell::new(first),
            free: AtomicPtr::new(core::ptr::null_mut()),
            stash: RawCell::new(core::ptr::null_mut()),
            #[cfg(test)]
            made: core::sync::atomic::AtomicU64::new(0),
        };
        let reader = LogReader {
            cons: first,
            base: 0,
            head: 0,
        };
        (log, reader)
    }

    /// Callbacks ever published (Acquire: pairs with `push`'s Release store, so the slots below it
    /// and the chunk links are visible).
    #[inline(always)]
    pub(crate) fn published(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }

    /// Appends `cb`; returns the new `tail`.
    ///
    /// # Safety
    /// The caller is the log's only producer (it holds the record), and does not re-enter (from a
    /// signal handler).
    #[inline(always)]
    pub(crate) unsafe fn push(&self, cb: Callback) -> u64 {
        // Relaxed: our own value (or the previous holder's, ordered by the record's claim).
        let t = self.tail.load(Ordering::Relaxed);
        // SAFETY: producer-only fields, and `prod` is a live chunk of this log (chunks behind the
        // consumer are freed only once `tail` has passed them, which only this producer moves).
        unsafe {
            let mut c = self.prod.with_mut(|p| *p);
            if t == (*c).base.with_mut(|b| *b) + CHUNK as u64 {
                c = self.next_chunk(c, t);
            }
            (*c).slots[(t % CHUNK as u64) as usize].with_mut(|s| (*s).write(cb));
        }
        // Release: pairs with the consumers' Acquire `published` (the slot is written).
        self.tail.store(t + 1, Ordering::Release);
        t + 1
    }

    /// Moves the producer to the chunk after `c` (starting at index `t`), linking one if none is.
    ///
    /// # Safety
    /// As `push`; `c` is `prod`.
    #[cold]
    #[inline(never)]
    unsafe fn next_chunk(&self, c: *mut Chunk, t: u64) -> *mut Chunk {
        // SAFETY: `c` is live (see `push`); a linked chunk is ours until `tail` passes it.
        unsafe {
            // Relaxed: only producers write it (a handover is ordered by the record's claim).
            let mut n = (*c).next.load(Ordering::Relaxed);
            if n.is_null() {
                n = self.stash.with_mut(|s| *s);
                if n.is_null() {
                    // Acquire: pairs with the consumers' Release push (they are done reading the
                    // slots, and wrote the links).
                    n = self.free.swap(core::ptr::null_mut(), Ordering::Acquire);
                }
                if n.is_null() {
                    n = Chunk::boxed(t);
                    #[cfg(test)]
                    self.made
                        .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
                } else {
                    // Relaxed (both): ordered by the swap above, or ours since.
                    let below = (*n).next.load(Ordering::Relaxed);
                    self.stash.with_mut(|s| *s = below);
                    (*n).base.with_mut(|b| *b = t);
                    // Relaxed: published with the link below.
                    (*n).next.store(core::ptr::null_mut(), Ordering::Relaxed);
                }
                // Release: pairs with the consumer's Acquire load of the link (which it reads only
                // after `published` covers index `t`, itself ordered after this).
                (*c).next.store(n, Ordering::Release);
            }
            self.prod.with_mut(|p| *p = n);
            n
        }
    }

    /// The next callback `r` would take.
    ///
    /// # Safety
    /// `r` is this log's reader, under its list lock, and `r.head < self.published()`.
    pub(crate) unsafe fn peek<'a>(&'a self, r: &mut LogReader) -> &'a Callback {
        // SAFETY: the caller's contract; `step` keeps `r.cons` on the chunk of `r.head`.
        unsafe {
            self.step(r);
            (*r.cons).slots[(r.head % CHUNK as u64) as usize].with_mut(|s| (*s).assume_init_ref())
        }
    }

    /// Takes the next callback.
    ///
    /// # Safety
    /// As `peek`.
    pub(crate) unsafe fn take(&self, r: &mut LogReader) -> Callback {
        // SAFETY: as `peek`; the slot was written before `tail` passed it and is read once (the
        // producer rewrites it only after the chunk comes back through the free stack).
        unsafe {
            self.step(r);
            let cb = (*r.cons).slots[(r.head % CHUNK as u64) as usize]
                .with_mut(|s| (*s).assume_init_read());
            r.head += 1;
            cb
        }
    }

    /// At a chunk boundary, moves `r` to the next chunk and hands the emptied one back.
    ///
    /// # Safety
    /// As `peek`.
    unsafe fn step(&self, r: &mut LogReader) {
        if r.head != r.base + CHUNK as u64 {
            return;
        }
        // SAFETY: `published() > r.head`: the producer linked the next chunk before it published
        // index `r.head`, and is done with this one (it wrote `r.head` in the next).
        unsafe {
            // Acquire: pairs with the producer's Release link.
            let n = (*r.cons).next.load(Ordering::Acquire);
            let old = core::mem::replace(&mut r.cons, n);
            r.base += CHUNK as u64;
            self.recycle(old);
        }
    }

    /// Pushes an emptied chunk on the free stack, or frees it past [`KEEP_FREE`].
    ///
    /// # Safety
    /// The caller holds the list lock, and nobody else uses `old` any more.
    unsafe fn recycle(&self, old: *mut Chunk) {
        // Relaxed: the Release CAS below publishes; a stale head only fails the CAS.
        let mut h = self.free.load(Ordering::Relaxed);
        // SAFETY: chunks are freed only here, under the list lock: `h`, even if the producer took
        // it meanwhile, is alive (its `depth` is atomic; the value is an estimate).
        unsafe {
            loop {
                let depth = if h.is_null() {
                    0
                } else {
                    (*h).depth.load(Ordering::Relaxed)
                };
                if depth >= KEEP_FREE {
                    drop(Box::from_raw(old));
                    return;
                }
                // Relaxed (both): published by the Release CAS below.
                (*old).depth.store(depth + 1, Ordering::Relaxed);
                (*old).next.store(h, Ordering::Relaxed);
                // Release: pairs with the producer's Acquire swap (our reads of the slots, and the
                // link above, come first). Only the producer removes, and all at once: no ABA.
                match self
                    .free
                    .compare_exchange_weak(h, old, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(now) => h = now,
                }
            }
        }
    }
}

#[cfg(any(loom, test))]
impl CbLog {
    /// Drops the callbacks not taken (unrun) and frees the chunks (the models' and unit tests'
    /// teardown: a domain's logs live as long as the process).
    ///
    /// # Safety
    /// No producer or consumer is left; `r` is this log's reader.
    pub(crate) unsafe fn destroy(&self, r: &mut LogReader) {
        // SAFETY: the caller's contract: every chunk from `r.cons` on is ours.
        unsafe {
            while r.head < self.published() {
                drop(self.take(r));
            }
            let mut c = core::mem::replace(&mut r.cons, core::ptr::null_mut());
            while !c.is_null() {
                let n = (*c).next.load(Ordering::Relaxed);
                drop(Box::from_raw(c));
                c = n;
            }
            for mut c in [
                self.free.load(Ordering::Relaxed),
                self.stash.with_mut(|s| *s),
            ] {
                while !c.is_null() {
                    let n = (*c).next.load(Ordering::Relaxed);
                    drop(Box::from_raw(c));
                    c = n;
                }
            }
        }
    }
}

/// The grace periods of one thread's callbacks, by queue index (callback.rs's module docs), under
/// the record's list lock:
///
/// ```text
///   [head, done_end)   DONE: ready
///   [.., wait.1)       WAIT: after grace period wait.0
///   [.., ready.1)      NEXT_READY: after grace period ready.0
///   [assigned, tail)   NEXT: no grace period assigned yet
/// ```
pub(crate) struct Segs {
    pub(crate) reader: LogReader,
    pub(crate) done_end: u64,
    pub(crate) wait: Option<(u64, u64)>,
    pub(crate) next_ready: Option<(u64, u64)>,
    /// Callbacks below this index have a grace period (or are DONE).
    pub(crate) assigned: u64,
    /// DONE was non-empty at the grace-period thread's last pass and left to the owner.
    pub(crate) done_stale: bool,
}

impl Segs {
    pub(crate) fn new(reader: LogReader) -> Self {
        Segs {
            reader,
            done_end: 0,
            wait: None,
            next_ready: None,
            assigned: 0,
            done_stale: false,
        }
    }

    /// Moves segments whose grace period has completed to DONE.
    pub(crate) fn advance(&mut self, completed: u64) {
        while let Some((gp, end)) = self.wait {
            if gp > completed {
                break;
            }
            self.done_end = end;
            self.wait = self.next_ready.take();
        }
    }

    /// Gives NEXT, up to `tail` (a `published` value), a target grace period, one that surely
    /// starts after `tail` was loaded.
    pub(crate) fn accelerate(&mut self, target: u64, tail: u64) {
        if tail <= self.assigned {
            return;
        }
        self.assigned = tail;
        for seg in [&mut self.wait, &mut self.next_ready] {
            match seg {
                Some((gp, end)) if *gp == target => {
                    *end = tail;
                    return;
                }
                None => {
                    *seg = Some((target, tail));
                    return;
                }
                Some(_) => {}
            }
        }
        // Both segments hold earlier targets (WAIT < NEXT_READY < target): NEXT_READY's grace period
        // has not started yet, so a later one covers it too; merge under the later target.
        self.next_ready = Some((target, tail));
    }

    /// Whether a segment waits for a grace period.
    pub(crate) fn waiting(&self) -> bool {
        self.wait.is_some() || self.next_ready.is_some()
    }

    /// Callbacks ready and not yet taken.
    pub(crate) fn ready(&self) -> u64 {
        self.done_end - self.reader.head
    }

    /// Takes the ready callbacks, in queue order, while `more` accepts the next one.
    ///
    /// # Safety
    /// `log` is the log of this list, whose lock the caller holds.
    pub(crate) unsafe fn take_done(
        &mut self,
        log: &CbLog,
        mut more: impl FnMut(&Callback) -> bool,
        mut each: impl FnMut(Callback),
    ) -> u64 {
        let mut n = 0;
        // SAFETY: `done_end <= assigned <= published()` (the caller's contract gives the reader).
        unsafe {
            while self.reader.head < self.done_end && more(log.peek(&mut self.reader)) {
                each(log.take(&mut self.reader));
                n += 1;
            }
        }
        self.done_stale = false;
        n
    }
}

/// One list's share of a grace-period pass: segments whose grace period has completed move to DONE,
/// and NEXT (up to `tail`) gets the next grace period (`completed + 1`). The caller holds the list's
/// lock and the domain's grace-period lock (so no grace period is running: the next one starts after
/// this, and after every callback published below `tail`), loaded `tail` with `published` and
/// `completed` with Acquire after taking that lock (pairs with the Release increment that ended the
/// last grace period). Returns whether a segment waits for a grace period.
pub(crate) fn segments_pass(s: &mut Segs, completed: u64, tail: u64) -> bool {
    s.advance(completed);
    s.accelerate(completed + 1, tail);
    s.waiting()
}

/// Writes a warning to stderr, ignoring errors (a closed stderr must not make a grace period or the
/// grace-period thread panic, as `eprintln!` would). Here, beside the protocol, so that the callback
/// engine, the fork machinery and the registry share it without importing one another.
pub(super) fn warn(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}
