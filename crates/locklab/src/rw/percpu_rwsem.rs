//! `PercpuRwSem`: the kernel's percpu rw-semaphore in userspace. A read lock and unlock execute **no
//! locked instruction and no fence**: each is a load and a plain store to a counter only the calling
//! thread writes, a compiler fence, and a load of a flag. Writers pay instead: a `membarrier(2)` system
//! call and a scan of every reader counter. For data read constantly and written rarely.
//!
//! # Why (seed 002)
//! brlock/lglock readers took a per-CPU spinlock: no sharing, but one `lock`-prefixed instruction per
//! read, 6.4% of a single-threaded profile. The kernel replaced it with the percpu rwsem, whose reader
//! fast path is `this_cpu_inc(read_count)`: the writer makes the readers' fast path safe by waiting an
//! RCU grace period. Userspace has no cheap per-CPU increment (a thread can migrate between reading its
//! CPU number and incrementing), so locklab keeps one counter per *thread* and replaces the grace period
//! by an *asymmetric fence*: the writer calls `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs
//! a full barrier on every running thread of the process, so a reader needs only a compiler fence where
//! a full fence would otherwise be needed (kernel-primitives.md, section 5).
//!
//! # Algorithm
//! State: `block` (1 while a writer is taking or holds the lock), one counter per thread (`counters`,
//! indexed by the thread's `thread_slot` index, written only by that thread), a
//! shared `overflow` counter for threads without a slot, `wake_seq` (where a writer waits for readers to
//! leave), and `gate`, an [`RawRwSem`] that orders writers among themselves and queues blocked readers.
//! - **Read lock** (fast): `counter += 1` (Relaxed load + store); *light fence*; if `block == 0` (Acquire)
//!   we are in. Otherwise (slow): undo the increment, tell the writer (below), then queue: take `gate`
//!   shared (behind the writer, FIFO with other writers), increment the counter while holding it, and
//!   release `gate`.
//! - **Read unlock**: `counter -= 1` (Release store); *light fence*; if `block != 0`, tell the writer: bump
//!   `wake_seq`, and wake it if it sleeps there.
//! - **Write lock**: take `gate` exclusively; `block = 1`; *heavy fence*; wait until the counters sum to 0
//!   (spin, then sleep on `wake_seq`). **Write unlock**: `block = 0` (Release); release `gate`.
//! - **Downgrade**: increment our counter, then write-unlock: we stay counted as a reader throughout.
//!
//! The light fence is a compiler fence and the heavy fence is `membarrier` when the kernel supports it
//! ([`fast_readers`]); otherwise both are full fences (`mfence`-class: the reader then pays about what an
//! RwSem reader pays, and the lock is still correct). Under loom both are SeqCst fences, which is what
//! the membarrier pairing guarantees.
//!
//! # Why it is correct
//! The reader's "increment, then look at `block`" and the writer's "set `block`, then look at the
//! counters" is Dekker's pattern: with a full fence on both sides, at least one sees the other. The
//! writer's `membarrier` puts a full barrier into every reader thread at some instruction boundary during
//! the call: a reader whose increment is before that point has it visible to the writer's scan (the
//! barrier drained it); a reader whose increment is after it also loads `block` after it, and sees 1.
//! The same pairing covers a reader unlocking while the writer starts waiting.
//!
//! # Invariants
//! 1. `block == 1` only while a writer holds `gate` exclusively (set after taking it, cleared before
//!    releasing it), so a reader holding `gate` shared sees `block == 0`.
//! 2. A counter is written only by the thread that owns its slot; the sum of all counters and `overflow`
//!    (wrapping) is the number of read holds plus transient increments of readers on their way out.
//! 3. A writer is in only after it saw the sum 0 *after* its heavy fence: every reader that got in before
//!    it is out, and every later reader sees `block == 1` and backs off.
//! 4. A reader that decrements while `block == 1` bumps `wake_seq` after the decrement; a writer sleeps
//!    on `wake_seq` only with the value it read before its scan, so no wake-up is lost.
//!
//! # Memory orderings
//! - The reader's Acquire load of `block` pairs with the writer's Release store `block = 0`: a reader let
//!   in by the fast path sees the last writer's writes. A reader let in through `gate` is ordered by the
//!   gate's own Acquire/Release.
//! - The reader's Release decrement pairs with the writer's Acquire loads in the scan: the writer sees
//!   every read section that ended before it. The increment is Relaxed: it is ordered by the fences.
//! - `wake_seq`: readers' `fetch_add` (Release) pairs with the writer's `fetch_or` (Acquire): a writer
//!   that reads a reader's bump rescans and sees that reader's decrement.
//!
//! # Thread exit, and the limits
//! Counters are keyed by thread-slot index, so a thread's counter outlives it and goes, with its value,
//! to the next thread that gets the slot (the handover is ordered by the slot table): nothing leaks and
//! a counter never has two writers. A thread that exits holding a read lock (a forgotten guard) leaves
//! the lock read-held, as it should. Threads with no slot (all taken, or a read lock taken in a
//! thread-local destructor after the slot was returned) count in `overflow` with atomic RMWs. A guard
//! Taken with a slot and dropped after the slot was returned (in a later thread-local destructor)
//! unlocks through `overflow` too: the token remembers its slot and the unlock checks it is still ours
//! (one thread-local load), since the counter may belong to another thread by then. Writers only ever
//! look at the sum, so a lock counted in one counter and its unlock in another cancel: a count is
//! never lost, and none is written by two threads with plain stores.
//!
//! Counters are `usize` and only their differences matter (wrapping): forgetting 2^64 read guards, the
//! only way to wrap one, is out of reach, so the reader count needs no bound.
//!
//! # Signals
//! On x86-64 a private counter update is one instruction (`inc qword ptr [counter]`, no `lock`), so a
//! signal handler on the same thread that takes and releases a read lock between the interrupted
//! thread's instructions cannot lose a count (the kernel's `this_cpu_inc` is one instruction for the
//! same reason). Elsewhere the update is a load and a store, and a read lock taken
//! In a signal handler that interrupts a read lock or unlock of the same thread is **not supported**
//! (the handler's count can be overwritten). On every platform a handler must not be the first user of
//! the lock on its thread: the first use registers a thread slot and may allocate a counter chunk,
//! which is not async-signal-safe. The write side (a `RwSem` and a system call) is never
//! async-signal-safe, as with std's locks.
//! Each lock keeps a directory of [`CHUNKS`] pointers (4 KiB) and allocates counters 32 threads (4 KiB)
//! at a time, on first use by a thread of that index range; a writer scans the allocated chunks.
//! Read locks do not nest across a waiting writer: a thread that holds a read lock and read-locks again
//! while a writer waits deadlocks (the writer waits for the first hold, the second waits behind the
//! writer), as in the kernel and as with std's and parking_lot's RwLock.

use crate::clock::{Deadline, time_left};
use crate::primitive::{AtomicPtr, AtomicU32, AtomicUsize, Ordering, SpinWait, fence};
use crate::rw::rwsem::{RawRwSem, RwSemToken};
use crate::sys::membarrier_mode as mode;
use core::marker::PhantomData;
use core::ptr;

#[cfg(not(loom))]
mod api;

/// Counters per chunk (two under loom, where every counter the writer scans is a scheduling point).
const PER_CHUNK: usize = if cfg!(loom) { 2 } else { 32 };
/// Thread indices with a counter of their own: every index the thread-slot table can hand out (four
/// under loom).
const MAX_INDEX: usize = if cfg!(loom) { 4 } else { 1 << 14 };
/// Chunk pointers per lock.
///
/// ```
/// use locklab::rw::percpu_rwsem::CHUNKS;
/// let l = locklab::raw::RawPercpuRwSem::new();
/// assert!(l.allocated_chunks() <= CHUNKS);
/// ```
pub const CHUNKS: usize = MAX_INDEX / PER_CHUNK;
/// Busy-wait steps a writer spends waiting for readers before it sleeps.
const WRITER_SPINS: u32 = if cfg!(loom) { 1 } else { 256 };
/// Then yields before it sleeps.
const WRITER_YIELDS: u32 = if cfg!(loom) { 0 } else { 8 };

/// `wake_seq` bit 0: the writer sleeps (or is about to). Readers add 2.
const SLEEPER: u32 = 1;

/// One thread's reader counter, on its own cache-line pair (so readers on different CPUs never share a
/// line): read locks and read unlocks counted apart, so that a lock and the unlock after it update
/// different words (each a load and a store) instead of the unlock waiting for the lock's store to be
/// forwarded to its load. Readers in = `locks - unlocks` (wrapping).
#[repr(align(128))]
struct Counter {
    locks: AtomicUsize,
    unlocks: AtomicUsize,
}

impl Counter {
    crate::primitive::const_unless_loom! {
        fn new() -> Self {
            Counter {
                locks: AtomicUsize::new(0),
                unlocks: AtomicUsize::new(0),
            }
        }
    }

    /// Readers in, as seen now. `unlocks` is read first, with Acquire (pairing with the Release store
    /// that counted the unlock): an unlock seen here comes with its lock, so the result is never below
    /// the number of read holds at the moment `locks` is read.
    fn readers(&self) -> usize {
        let unlocks = self.unlocks.load(Ordering::Acquire);
        let locks = self.locks.load(Ordering::Acquire);
        locks.wrapping_sub(unlocks)
    }
}

struct Chunk {
    counters: [Counter; PER_CHUNK],
}

impl Chunk {
    fn new_boxed() -> Box<Chunk> {
        Box::new(Chunk {
            counters: core::array::from_fn(|_| Counter::new()),
        })
    }
}

/// Whether readers run the fence-free fast path: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is
/// available (Linux >= 4.14, not forbidden by seccomp) and registered, and `LOCKLAB_NO_MEMBARRIER` is not
/// set. Decided once per process; `false` means the documented fallback (full fences on both sides).
///
/// ```
/// // Either way the lock is correct; the answer says what a read costs here.
/// println!("percpu readers fence-free: {}", locklab::rw::percpu_rwsem::fast_readers());
/// ```
pub fn fast_readers() -> bool {
    mode::fast()
}

/// The reader's side of the asymmetric fence.
#[inline(always)]
fn light_fence() {
    if mode::fast() {
        // The writer's membarrier supplies the hardware barrier; only the compiler must keep order.
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fallback_fence();
    }
}

/// The fallback's full fence, out of line so that the fast path's code holds no fence instruction
/// (`.ci/check-unlock-asm.sh` checks).
#[cold]
#[inline(never)]
fn fallback_fence() {
    // SeqCst fence: pairs with the writer's SeqCst fence in `heavy_fence` (Dekker's pattern).
    fence(Ordering::SeqCst);
}

/// The writer's side of the asymmetric fence. `false` if the system call failed (then readers that
/// rely on it are not fenced, and the writer must not go on).
#[must_use]
fn heavy_fence() -> bool {
    #[cfg(all(test, not(loom)))]
    if tests::FAIL_HEAVY_FENCE.with(|f| f.get()) {
        return false;
    }
    if mode::writers_heavy() {
        // A full barrier here and in every running thread: pairs with each reader's compiler fence.
        // Where the kernel refuses it, the readers switch to fences and the CPU walk fences those
        // still on the fast path (`mode::degrade`).
        crate::sys::membarrier()
            || (mode::degrade() && {
                // Pairs with the readers' SeqCst fences, which every reader takes from now on.
                fence(Ordering::SeqCst);
                true
            })
    } else {
        // Pairs with the readers' SeqCst fence in `fallback_fence`.
        fence(Ordering::SeqCst);
        true
    }
}

/// The heavy fence failed: `membarrier` refused even its global form (e.g. a seccomp filter on this
/// thread). The lock was reopened before this runs, so it is not wedged.
#[cold]
#[inline(never)]
fn heavy_fence_failed(why: std::io::Error) -> ! {
    panic!(
        "locklab::PercpuRwSem: membarrier failed on this thread ({why}); the write lock cannot fence \
         readers here, and was released"
    );
}

/// Guard state of a read hold: the counter it incremented. Not `Send`: only the owning thread may write
/// that counter.
///
/// ```
/// let l = locklab::raw::RawPercpuRwSem::new();
/// let t: locklab::raw::PercpuReadToken = l.read();
/// unsafe { l.read_unlock(t) };
/// ```
pub struct PercpuReadToken {
    counter: *const Counter,
    /// The thread slot that owned `counter` at lock time ([`owner_now`]), which the unlock checks still
    /// owns it; null when `counter` is `overflow`, shared between threads and updated with RMWs.
    owner: *const (),
    _not_send: PhantomData<*mut ()>,
}

// SAFETY: `&PercpuReadToken` exposes nothing.
unsafe impl Sync for PercpuReadToken {}

/// Guard state of a write hold: the gate's token (which also keeps the guard from being `Send`).
///
/// ```
/// let l = locklab::raw::RawPercpuRwSem::new();
/// let w: locklab::raw::PercpuWriteToken = l.write();
/// let r = unsafe { l.downgrade(w) }; // stays a reader throughout
/// unsafe { l.read_unlock(r) };
/// ```
pub struct PercpuWriteToken {
    _gate: RwSemToken,
}

/// The percpu rw-semaphore. See the [module documentation](self).
///
/// ```
/// let l = locklab::raw::RawPercpuRwSem::new();
/// let r = l.read(); // a load and a store to this thread's counter, no locked instruction
/// assert!(l.try_write().is_none(), "a writer waits for the reader");
/// unsafe { l.read_unlock(r) };
/// let w = l.write(); // a membarrier and a scan of every counter
/// unsafe { l.write_unlock(w) };
/// ```
pub struct RawPercpuRwSem {
    block: AtomicU32,
    wake_seq: AtomicU32,
    gate: RawRwSem,
    overflow: Counter,
    chunks: [AtomicPtr<Chunk>; CHUNKS],
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

// SAFETY: every field is atomic or the (Sync) gate; a counter is written only by its owning thread
// (invariant 2), through atomics.
unsafe impl Sync for RawPercpuRwSem {}
// SAFETY: chunks are owned heap memory; no guard can be outstanding while the lock is moved.
unsafe impl Send for RawPercpuRwSem {}

/// The calling thread's counter index, or `None` (use `overflow`).
#[cfg(not(loom))]
#[inline(always)]
fn my_index() -> Option<usize> {
    crate::thread_slot::current().map(|s| s.index as usize)
}

/// Under loom the public paths use `overflow`; the models name their counters explicitly.
#[cfg(loom)]
fn my_index() -> Option<usize> {
    None
}

impl RawPercpuRwSem {
    /// A new, unlocked semaphore.
    ///
    /// ```
    /// static L: locklab::raw::RawPercpuRwSem = locklab::raw::RawPercpuRwSem::new();
    /// assert!(!L.is_locked());
    /// ```
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawPercpuRwSem {
            dep: crate::dep::Dep::new(),
            block: AtomicU32::new(0),
            wake_seq: AtomicU32::new(0),
            gate: RawRwSem::new(),
            overflow: Counter::new(),
            chunks: [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS],
        }
    }

    /// A new, unlocked semaphore (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawPercpuRwSem {
            dep: crate::dep::Dep::new(),
            block: AtomicU32::new(0),
            wake_seq: AtomicU32::new(0),
            gate: RawRwSem::new(),
            overflow: Counter::new(),
            chunks: core::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// The counter of thread index `index` (or `overflow`), allocating its chunk on first use.
    #[inline(always)]
    fn counter(&self, index: Option<usize>) -> (&Counter, bool) {
        let Some(i) = index.filter(|&i| i < MAX_INDEX) else {
            return (&self.overflow, true);
        };
        // Acquire pairs with the Release CAS that published the chunk: its zeroed counters are visible.
        let chunk = self.chunks[i / PER_CHUNK].load(Ordering::Acquire);
        let chunk = if chunk.is_null() {
            self.alloc_chunk(i / PER_CHUNK)
        } else {
            // SAFETY: non-null chunk pointers come from `alloc_chunk` and live until `drop`, which
            // cannot run while `self` is borrowed.
            unsafe { &*chunk }
        };
        (&chunk.counters[i % PER_CHUNK], false)
    }

    #[cold]
    #[inline(never)]
    fn alloc_chunk(&self, c: usize) -> &Chunk {
        let fresh = Box::into_raw(Chunk::new_boxed());
        // Release publishes the zeroed chunk; Acquire on failure pairs with the winner's Release.
        match self.chunks[c].compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: we just published `fresh`; it lives until `drop`.
            Ok(_) => unsafe { &*fresh },
            Err(winner) => {
                // SAFETY: `fresh` came from `Box::into_raw` above and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: as in `counter`.
                unsafe { &*winner }
            }
        }
    }

    // ----- readers ------------------------------------------------------------------------------

    /// Takes the lock shared.
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let (a, b) = (l.read(), l.read()); // readers share it
    /// assert!(l.is_locked() && !l.is_locked_exclusive());
    /// // SAFETY: `a` and `b` came from `l` on this thread, each released once.
    /// unsafe { l.read_unlock(a) };
    /// // SAFETY: as above.
    /// unsafe { l.read_unlock(b) };
    /// assert!(!l.is_locked());
    /// ```
    // Always inlined (as is `read_unlock`): the fast path is a dozen instructions, and a call plus a
    // token returned through memory would cost as much again.
    #[inline(always)]
    pub fn read(&self) -> PercpuReadToken {
        // Both read the same thread-local, next to each other: one load (the chunk's Acquire load in
        // `counter` would force a second).
        let (index, me) = (my_index(), owner_now());
        let (c, shared) = self.counter(index);
        let owner = if shared { ptr::null() } else { me };
        if self.enter(c, shared) {
            return token(c, owner);
        }
        match self.read_slow(c, shared, None) {
            Some(t) => t,
            None => unreachable!("no deadline, so no timeout"),
        }
    }

    /// Takes the lock shared if no writer is taking or holding it.
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let r = l.try_read().expect("no writer");
    /// // SAFETY: `r` came from `l` on this thread.
    /// unsafe { l.read_unlock(r) };
    /// let w = l.write();
    /// assert!(l.try_read().is_none()); // a writer holds it
    /// // SAFETY: `w` came from `l`'s write lock.
    /// unsafe { l.write_unlock(w) };
    /// ```
    #[inline]
    pub fn try_read(&self) -> Option<PercpuReadToken> {
        let (c, shared) = self.counter(my_index());
        let owner = owner_of(shared);
        if self.enter(c, shared) {
            return Some(token(c, owner));
        }
        self.leave(c, shared);
        None
    }

    /// Takes the lock shared as thread index `index`, giving up at `deadline`.
    #[inline]
    pub(crate) fn read_at(
        &self,
        index: Option<usize>,
        deadline: Option<&Deadline>,
    ) -> Option<PercpuReadToken> {
        let (c, shared) = self.counter(index);
        let owner = owner_of(shared);
        if self.enter(c, shared) {
            return Some(token(c, owner));
        }
        self.read_slow(c, shared, deadline)
    }

    /// The fast path: increment, light fence, look at `block`. `true`: we hold the lock.
    #[inline(always)]
    fn enter(&self, c: &Counter, shared: bool) -> bool {
        bump(&c.locks, shared);
        light_fence();
        // Acquire pairs with the writer's Release store `block = 0`.
        self.block.load(Ordering::Acquire) == 0
    }

    /// Undoes an increment (the end of a read hold, or a backed-off attempt) and tells a waiting writer.
    #[inline(always)]
    fn leave(&self, c: &Counter, shared: bool) {
        bump(&c.unlocks, shared);
        light_fence();
        if self.block.load(Ordering::Relaxed) != 0 {
            self.reader_left();
        }
    }

    /// A writer is taking or holds the lock: tell it one reader fewer (invariant 4).
    #[cold]
    #[inline(never)]
    fn reader_left(&self) {
        // Release pairs with the writer's Acquire `fetch_or`: it then sees our decrement.
        let old = self.wake_seq.fetch_add(2, Ordering::Release);
        if old & SLEEPER != 0 {
            // Relaxed: the bit only says whether a futex wake is needed; the writer re-checks.
            self.wake_seq.fetch_and(!SLEEPER, Ordering::Relaxed);
            crate::sys::futex_wake(&self.wake_seq, 1);
        }
    }

    /// A writer is taking or holds the lock: back off, queue behind it on `gate`, and count ourselves in
    /// while holding `gate` shared (then `block == 0`, invariant 1).
    #[cold]
    #[inline(never)]
    fn read_slow(
        &self,
        c: &Counter,
        shared: bool,
        deadline: Option<&Deadline>,
    ) -> Option<PercpuReadToken> {
        self.leave(c, shared);
        let _t = match deadline {
            None => self.gate.read(),
            Some(d) => self.gate.read_until(d)?,
        };
        // The gate's Release unlock below publishes it to the next writer, which takes the gate
        // (Acquire) before it scans.
        bump(&c.locks, shared);
        // SAFETY: we took the gate shared just above.
        unsafe { self.gate.read_unlock() };
        Some(token(c, owner_of(shared)))
    }

    /// Releases a shared hold.
    ///
    /// # Safety
    /// `t` came from this lock, on this thread (it is not `Send`).
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let r = l.read();
    /// // SAFETY: `r` came from `l` on this thread.
    /// unsafe { l.read_unlock(r) };
    /// assert!(!l.is_locked());
    /// ```
    #[inline(always)]
    pub unsafe fn read_unlock(&self, t: PercpuReadToken) {
        let shared = t.owner.is_null();
        if !shared && t.owner != owner_now() {
            return self.unlock_orphaned();
        }
        // SAFETY: the token points at one of our counters (or `overflow`), alive while `self` is.
        let c = unsafe { &*t.counter };
        self.leave(c, shared);
    }

    /// Our slot was returned while the guard lived (it is being dropped in a thread-local destructor
    /// after the slot's releaser ran), and its counter may belong to another thread now, which writes
    /// it with plain stores: count the unlock in the shared `overflow` instead.
    /// Readers are the *sum* of all counters, so a lock counted in one and its unlock in another cancel.
    #[cold]
    #[inline(never)]
    fn unlock_orphaned(&self) {
        self.leave(&self.overflow, true);
    }

    // ----- writers ------------------------------------------------------------------------------

    /// Takes the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let w = l.write(); // blocks new readers, then waits for those in
    /// assert!(l.is_locked_exclusive());
    /// assert!(l.try_read().is_none());
    /// // SAFETY: `w` came from `l`'s write lock.
    /// unsafe { l.write_unlock(w) };
    /// ```
    pub fn write(&self) -> PercpuWriteToken {
        let t = self.close(self.gate.write());
        let drained = self.wait_for_readers(None);
        debug_assert!(drained);
        t
    }

    /// Takes the lock exclusively if no writer holds it and no reader is in. Costs a heavy fence even
    /// when it fails because of readers.
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let w = l.try_write().expect("free");
    /// assert!(l.try_write().is_none());
    /// // SAFETY: `w` came from `l`'s write lock.
    /// unsafe { l.write_unlock(w) };
    /// ```
    pub fn try_write(&self) -> Option<PercpuWriteToken> {
        let t = self.close(self.gate.try_write()?);
        if self.readers() == 0 {
            return Some(t);
        }
        self.open(t);
        None
    }

    /// Takes the lock exclusively, giving up at `deadline`.
    pub(crate) fn write_until(&self, deadline: &Deadline) -> Option<PercpuWriteToken> {
        let t = self.close(self.gate.write_until(deadline)?);
        if self.wait_for_readers(Some(deadline)) {
            return Some(t);
        }
        self.open(t);
        None
    }

    /// With `gate` held exclusively (`g`): block new readers and make every reader's increment visible.
    /// If the heavy fence fails, reopens (releasing `gate`) and panics: the lock stays usable.
    fn close(&self, g: RwSemToken) -> PercpuWriteToken {
        // Relaxed: the heavy fence orders it before the scans (Dekker's pattern, module docs).
        self.block.store(1, Ordering::Relaxed);
        let t = PercpuWriteToken { _gate: g };
        if !heavy_fence() {
            let why = std::io::Error::last_os_error();
            self.open(t);
            heavy_fence_failed(why);
        }
        t
    }

    /// Lets readers in again and releases `gate`.
    fn open(&self, g: PercpuWriteToken) {
        // Release pairs with the readers' Acquire load of `block`.
        self.block.store(0, Ordering::Release);
        let PercpuWriteToken { _gate: _ } = g;
        // SAFETY: the token proved we hold the gate exclusively.
        unsafe { self.gate.write_unlock() };
    }

    /// The sum of all reader counters (wrapping), each read with Acquire (pairs with the readers'
    /// Release decrements).
    fn readers(&self) -> usize {
        let mut sum = self.overflow.readers();
        for chunk in &self.chunks {
            // Acquire pairs with the chunk's publication.
            let p = chunk.load(Ordering::Acquire);
            // SAFETY: as in `counter`.
            if let Some(chunk) = unsafe { p.as_ref() } {
                for c in &chunk.counters {
                    sum = sum.wrapping_add(c.readers());
                }
            }
        }
        sum
    }

    /// With `block` set and fenced: waits until no reader is in. `false` on timeout.
    fn wait_for_readers(&self, deadline: Option<&Deadline>) -> bool {
        // Readers' sections are usually short: spin, then yield a few times, then sleep.
        let mut spin = SpinWait::with_spins(WRITER_SPINS);
        let mut steps = 0;
        loop {
            if self.readers() == 0 {
                return true;
            }
            if steps < WRITER_SPINS + WRITER_YIELDS {
                steps += 1;
                spin.wait();
                continue;
            }
            let Some(timeout) = time_left(deadline) else {
                return false;
            };
            // Announce that we sleep. Acquire pairs with the readers' Release `fetch_add`: a bump we
            // read here comes with that reader's decrement, which the scan below sees (invariant 4).
            let seq = self.wake_seq.fetch_or(SLEEPER, Ordering::Acquire) | SLEEPER;
            if self.readers() == 0 {
                return true;
            }
            crate::sys::futex_wait(&self.wake_seq, seq, timeout);
        }
    }

    /// Releases an exclusive hold.
    ///
    /// # Safety
    /// `t` came from this lock's write lock.
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let w = l.write();
    /// // SAFETY: `w` came from `l`'s write lock.
    /// unsafe { l.write_unlock(w) };
    /// assert!(!l.is_locked());
    /// ```
    pub unsafe fn write_unlock(&self, t: PercpuWriteToken) {
        self.open(t);
    }

    /// Turns an exclusive hold into a shared one; no writer can get in between.
    ///
    /// # Safety
    /// `t` came from this lock's write lock, on this thread.
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let w = l.write();
    /// // SAFETY: `w` came from `l`'s write lock, on this thread.
    /// let r = unsafe { l.downgrade(w) };
    /// assert!(l.is_locked() && !l.is_locked_exclusive());
    /// assert!(l.try_write().is_none()); // still a reader in
    /// // SAFETY: `r` came from `l` on this thread.
    /// unsafe { l.read_unlock(r) };
    /// ```
    pub unsafe fn downgrade(&self, t: PercpuWriteToken) -> PercpuReadToken {
        self.downgrade_at(my_index(), t)
    }

    pub(crate) fn downgrade_at(
        &self,
        index: Option<usize>,
        t: PercpuWriteToken,
    ) -> PercpuReadToken {
        let (c, shared) = self.counter(index);
        // Published to the next writer by the gate's Release in `open`.
        bump(&c.locks, shared);
        self.open(t);
        token(c, owner_of(shared))
    }

    /// Whether anyone holds the lock (a snapshot; costs a scan).
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// assert!(!l.is_locked());
    /// let r = l.read();
    /// assert!(l.is_locked());
    /// // SAFETY: `r` came from `l` on this thread.
    /// unsafe { l.read_unlock(r) };
    /// ```
    pub fn is_locked(&self) -> bool {
        self.block.load(Ordering::Relaxed) != 0 || self.readers() != 0
    }

    /// Whether a writer is taking or holds the lock (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// let r = l.read();
    /// assert!(!l.is_locked_exclusive()); // held, but shared
    /// // SAFETY: `r` came from `l` on this thread.
    /// unsafe { l.read_unlock(r) };
    /// let w = l.write();
    /// assert!(l.is_locked_exclusive());
    /// // SAFETY: `w` came from `l`'s write lock.
    /// unsafe { l.write_unlock(w) };
    /// ```
    pub fn is_locked_exclusive(&self) -> bool {
        self.block.load(Ordering::Relaxed) != 0
    }

    /// Chunks of counters allocated so far (for tests: thread churn must not grow it without bound).
    ///
    /// ```
    /// let l = locklab::raw::RawPercpuRwSem::new();
    /// assert_eq!(l.allocated_chunks(), 0); // nothing until a thread reads
    /// let r = l.read();
    /// // SAFETY: `r` came from `l` on this thread.
    /// unsafe { l.read_unlock(r) };
    /// assert!(l.allocated_chunks() <= 1);
    /// ```
    pub fn allocated_chunks(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| !c.load(Ordering::Relaxed).is_null())
            .count()
    }
}

/// `*c += 1` (wrapping). A private counter is written only by this thread, so no locked RMW is needed;
/// `overflow` is shared and needs one. Release: an unlock ends a read section (module docs), and a lock
/// is ordered by the fences, for which the Release is free on x86.
#[inline(always)]
fn bump(c: &AtomicUsize, shared: bool) {
    if shared {
        bump_shared(c);
    } else {
        bump_private(c);
    }
}

/// The private update as one instruction, so a signal handler cannot interleave with it (module docs).
#[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
#[inline(always)]
fn bump_private(c: &AtomicUsize) {
    // SAFETY: `c.as_ptr()` is a valid, aligned `usize` for the lifetime of `c`. The counter is written
    // only by this thread (invariant 2) and read by others with atomic loads; on x86-64 an aligned
    // 8-byte `inc` to memory is a single-copy-atomic load and store, which other threads observe
    // exactly as the `load(Relaxed)` + `store(Release)` it replaces (x86 stores are release stores).
    // The block is not `nomem`, so the compiler treats it as reading and writing memory: it is also
    // the compiler barrier the fast path relies on. It does not touch the stack; it changes flags.
    unsafe {
        core::arch::asm!("inc qword ptr [{0}]", in(reg) c.as_ptr(), options(nostack));
    }
}

/// Elsewhere (and under Miri and loom, which run no assembly): a load and a store; a read lock in a
/// signal handler that interrupts this is unsupported there (module docs).
#[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
#[inline(always)]
fn bump_private(c: &AtomicUsize) {
    // Relaxed load: we are the only writer (invariant 2), so this reads our own last store.
    let v = c.load(Ordering::Relaxed);
    c.store(v.wrapping_add(1), Ordering::Release);
}

/// `*c += 1` on `overflow`: out of line, so the fast path's code holds no locked instruction.
#[cold]
#[inline(never)]
fn bump_shared(c: &AtomicUsize) {
    // Release as in `bump`.
    c.fetch_add(1, Ordering::Release);
}

#[inline(always)]
fn token(c: &Counter, owner: *const ()) -> PercpuReadToken {
    PercpuReadToken {
        counter: c,
        owner,
        _not_send: PhantomData,
    }
}

/// The token's owner for a counter: null for the shared `overflow`, else this thread's slot.
#[inline(always)]
fn owner_of(shared: bool) -> *const () {
    if shared { ptr::null() } else { owner_now() }
}

/// The calling thread's slot, as an identity (null without one). Read once at lock time and once at
/// unlock: a thread-local load, no registration.
#[cfg(not(loom))]
#[inline(always)]
fn owner_now() -> *const () {
    crate::thread_slot::current_ptr()
}

/// Under loom every counter is named explicitly by the models; ownership never changes.
#[cfg(loom)]
#[inline(always)]
fn owner_now() -> *const () {
    ptr::null()
}

impl Drop for RawPercpuRwSem {
    fn drop(&mut self) {
        for chunk in &self.chunks {
            let p = chunk.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: allocated by `alloc_chunk` with `Box::into_raw`; `&mut self` means no reader
                // or writer is using it.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Fault injection: this thread's heavy fences fail (as `membarrier` under a seccomp filter).
        pub(super) static FAIL_HEAVY_FENCE: Cell<bool> = const { Cell::new(false) };
    }

    /// A failing `membarrier` makes the writer panic with the lock reopened, not
    /// wedge it with the gate held and `block` set.
    #[test]
    fn failing_heavy_fence_does_not_wedge_the_lock() {
        let s = RawPercpuRwSem::new();
        FAIL_HEAVY_FENCE.with(|f| f.set(true));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.write()));
        let r2 = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.try_write()));
        FAIL_HEAVY_FENCE.with(|f| f.set(false));
        let msg = r.err().expect("the writer panics");
        assert!(
            msg.downcast_ref::<String>()
                .unwrap()
                .contains("membarrier failed")
        );
        assert!(r2.is_err(), "try_write panics too");
        assert!(!s.is_locked(), "block cleared and gate released");
        let rd = s.try_read().expect("readers get in");
        unsafe { s.read_unlock(rd) };
        let w = s.try_write().expect("and writers");
        unsafe { s.write_unlock(w) };
    }

    /// The mode is decided once; a later thread whose probe disagrees adopts it.
    #[test]
    fn mode_is_decided_once() {
        use core::sync::atomic::AtomicU8;
        let m = AtomicU8::new(0);
        assert!(!mode::decide(&m, false));
        assert!(
            !mode::decide(&m, true),
            "a later probe does not flip the mode"
        );
        let m = AtomicU8::new(0);
        assert!(mode::decide(&m, true));
        assert!(mode::decide(&m, false));
    }

    /// A read guard taken with a slot and dropped in a thread-local destructor after
    /// the slot was returned, while another thread owns that slot's counter and reads in a loop. No
    /// count may be lost: at the end no reader is counted and a writer gets in.
    #[test]
    fn guard_dropped_after_its_slot_was_returned() {
        static S: RawPercpuRwSem = RawPercpuRwSem::new();
        let s = &S;
        for _ in 0..if cfg!(miri) { 2 } else { 50 } {
            // The token is not Send and never leaves its thread: it is parked in a thread-local with
            // no destructor (readable during thread exit) between the two closures.
            thread_local!(static PARKED: Cell<*mut PercpuReadToken> = const { Cell::new(ptr::null_mut()) });
            let h = crate::exit_tests::late(
                move || {
                    let t = s.read();
                    PARKED.with(|p| p.set(Box::into_raw(Box::new(t))));
                },
                move || {
                    // Let a new thread take the slot and hammer its counter meanwhile.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    let t = PARKED.with(|p| p.replace(ptr::null_mut()));
                    // SAFETY (test): the box this thread made above, unboxed once.
                    let t = unsafe { Box::from_raw(t) };
                    unsafe { s.read_unlock(*t) };
                },
            );
            let hammer = std::thread::spawn(move || {
                for _ in 0..if cfg!(miri) { 10 } else { 20_000 } {
                    let t = s.read();
                    unsafe { s.read_unlock(t) };
                }
            });
            h.join().unwrap();
            hammer.join().unwrap();
        }
        assert_eq!(s.readers(), 0, "every read hold was released exactly once");
        let w = s.try_write().expect("no reader is left counted");
        unsafe { s.write_unlock(w) };
    }

    /// Read lock and unlock in a signal handler that interrupts this thread's own
    /// read locks and unlocks (on x86-64 each counter update is one instruction). A lost count shows as
    /// a reader left over at the end.
    #[test]
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn read_lock_in_a_signal_handler_loses_no_count() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        static LOCK: RawPercpuRwSem = RawPercpuRwSem::new();
        static HANDLED: AtomicUsize = AtomicUsize::new(0);
        extern "C" fn handler(_: libc::c_int) {
            // No system call here (the read path makes none), so errno is untouched.
            let t = LOCK.read();
            unsafe { LOCK.read_unlock(t) };
            HANDLED.fetch_add(1, Ordering::Relaxed);
        }
        // Register this thread's slot and counter chunk before any signal can arrive.
        let t = LOCK.read();
        unsafe { LOCK.read_unlock(t) };
        crate::exit_tests::install_handler(libc::SIGUSR2, handler);
        let me = unsafe { libc::pthread_self() } as usize;
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let sender = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR2) };
            }
        });
        let start = std::time::Instant::now();
        // Signals to one thread coalesce while pending, so how many get handled depends on how often
        // the sender and this thread run: on a loaded 2-CPU machine it can be a few hundred per second.
        while HANDLED.load(Ordering::Relaxed) < 20_000
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            for _ in 0..1000 {
                let t = LOCK.read();
                unsafe { LOCK.read_unlock(t) };
            }
        }
        stop.store(true, Ordering::Relaxed);
        sender.join().unwrap();
        assert!(
            HANDLED.load(Ordering::Relaxed) >= 100,
            "signals were delivered: {}",
            HANDLED.load(Ordering::Relaxed)
        );
        assert_eq!(
            LOCK.readers(),
            0,
            "a handler's read lock or unlock was lost"
        );
        let w = LOCK.try_write().expect("no reader left counted");
        unsafe { LOCK.write_unlock(w) };
    }

    #[test]
    fn readers_share_writers_exclude_downgrade() {
        let s = RawPercpuRwSem::new();
        let a = s.read();
        let b = s.try_read().expect("readers share");
        assert!(s.try_write().is_none(), "a writer waits for readers");
        assert!(!s.is_locked_exclusive(), "a failed try_write reopens");
        unsafe {
            s.read_unlock(a);
            s.read_unlock(b);
        }
        assert!(!s.is_locked());
        let w = s.write();
        assert!(s.try_read().is_none() && s.try_write().is_none());
        let r = unsafe { s.downgrade(w) };
        let r2 = s.try_read().expect("after downgrade readers may enter");
        assert!(s.try_write().is_none());
        unsafe {
            s.read_unlock(r);
            s.read_unlock(r2);
        }
        assert!(!s.is_locked());
        assert_eq!(s.readers(), 0);
    }

    #[test]
    fn overflow_counter_and_out_of_range_index() {
        let s = RawPercpuRwSem::new();
        let a = s.read_at(None, None).unwrap();
        let b = s.read_at(Some(MAX_INDEX + 5), None).unwrap();
        assert_eq!(s.readers(), 2);
        assert_eq!(s.allocated_chunks(), 0);
        assert!(s.try_write().is_none());
        unsafe {
            s.read_unlock(a);
            s.read_unlock(b);
        }
        assert!(s.try_write().is_some());
    }
}
