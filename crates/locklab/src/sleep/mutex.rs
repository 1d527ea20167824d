//! The adaptive futex mutex: the kernel's `struct mutex` design in userspace.
//!
//! # Algorithm (after the kernel's `kernel/locking/mutex.c` and `Documentation/locking/mutex-design.rst`)
//! 1. **Fast path**: `cas(state: 0 -> me|LOCKED)` to lock, `fetch_sub(me|LOCKED)` to unlock. One RMW each.
//! 2. **Optimistic spinning** (seed 001: the 12x of adaptive spinning over sleeping): a contender, if
//!    no waiter sleeps (WAITERS clear), joins
//!    the lock's `Osq`, so only the OSQ head spins on the lock word; the head takes the lock the moment
//!    it is free. It stops when a hand-off is pending or its budget runs out (then it unqueues; see
//!    `crate::sleep::osq`). While another spinner holds the OSQ, a contender does not queue behind it: it
//!    waits outside, unordered, looking at the word (and taking it if free) with a `pause` or two and
//!    then a yield between looks, within the same budget. The kernel queues its spinners because it
//!    knows they are running; in userspace a queued spinner may be preempted, and everyone behind it
//!    then waits out its time slice: on the lab's `mutex` workload with 200 ns of work between
//!    sections, 4-64 threads on 2 CPUs, the queue gave 0.53-0.59x the best peer (4.7-5.4 M ops/s,
//!    ~350,000 yields a second); waiting outside it, 0.95-1.0x (8.9-9.4 M).
//! 3. **Sleeping** (parking_lot's queue shape, the kernel's FIFO): a FIFO `WaitList` under the small
//!    internal `wait_lock` holds **only sleepers**; each sleeps on its own futex word. A locker that
//!    finds WAITERS set does not spin: it queues behind the sleepers (spinning there would keep a CPU
//!    from the holder and the woken waiter when threads outnumber CPUs, and barge past older waiters).
//!    A waiter queues only to sleep; its `fetch_or(WAITERS)` under `wait_lock` is its last look at the
//!    word. An unlock that saw WAITERS takes `wait_lock`, dequeues the front waiter and wakes it
//!    (unless the lock was taken again meanwhile: that holder's unlock will wake it). The woken waiter
//!    competes on the word without `wait_lock`: it sets **WAKING**, which fails every fast-path lock,
//!    so the thread that just unlocked cannot re-lock at once before the woken one gets a look (it
//!    goes the slow way); it tries, spins on the word like the OSQ head does, and clears WAKING with
//!    its take, or when it queues again to sleep, at the front (it keeps its place). Without WAKING
//!    a woken waiter loses almost every race at long sections (the figures:
//!    `docs/results/2026-11-25-mutex-condvar-variants.md`). The futex wake is made after
//!    `wait_lock` is released.
//! 4. **Hand-off** (kernel v4.10): a waiter that queues again at the front after waiting longer than
//!    [`HANDOFF_NS`] sets HANDOFF. From then on nobody but that waiter may take the lock: the next
//!    (plain) unlock frees it with HANDOFF still set and wakes the waiter (a front waiter that old is
//!    woken even if the lock looks held), and spinners and `try_lock` keep off until it has taken it.
//!    Only `unlock_fair` hands the lock over directly (when there are waiters): it writes the first
//!    waiter's tag into the state word and marks its node HANDED, so the lock moves without ever being
//!    free.
//!
//! # "Is the owner running?"
//! The kernel spins only while the owner is on a CPU; userspace cannot ask. Our stand-in: the owner's
//! tag is in the state word, and a spinner spins while the **owner is unchanged for at most
//! [`OWNER_SPIN_NS`]**, re-arming whenever the owner tag changes (a holder that keeps
//! it longer is probably preempted or in a long section: sleep), within an overall cap of
//! [`SPIN_MAX_NS`] per acquisition. Between looks it backs off exponentially (up to
//! `MAX_SPIN_BACKOFF` `pause`s), so the spinner does not keep pulling the line from a running holder.
//! Chosen with the lab (`locklab bench --workload mutex`); see `docs/design/sleep.md`.
//!
//! # When to yield between looks
//! A holder that re-locks the moment it unlocks (no work between its sections) gains nothing from a
//! spinner: every look pulls the line from it, and the lock changes hands only in the few
//! nanoseconds it is free. There the spinner should yield between looks, as parking_lot's waiters
//! do, and leave the holder to run alone; with work between sections the spinner's quick look as the
//! lock comes free is what keeps both CPUs busy, and yielding there cost a quarter of the throughput
//! (`docs/results/2026-12-07-mutex-relock-yield.md`). The owner tag cannot tell the two apart (the
//! same thread re-locks), so a spinner marks the hold it looks at: it sets **SPUN** (a
//! compare-and-swap on the held word), and every take and the unlock clear it. It marks only where
//! its next look can tell: while the wait before that look is at most `QUICK_GAP` `pause`s (the
//! first steps of its backoff), or on the first look of a pair (below). The next look then tells:
//! - SPUN gone from a held word, the two looks at most `QUICK_GAP` `pause`s apart: the lock was
//!   released and taken again in between (by its holder or another thread; a spinner preempted
//!   between the two looks can misjudge, which costs only rhythm). From then on the spinner yields
//!   between looks: after each yield one load (taking the lock if it is free), and every
//!   `PAIR_EVERY`th yield a pair of looks `PAIR_GAP` `pause`s apart, the first marking;
//! - SPUN still there on a pair's second look: a hold that lasts. Quick looks again, backing off
//!   from the first step.
//!
//! The OSQ head keeps the rhythm its spin ended with in its thread slot (which names the mutex), so
//! the thread's next spin on the same lock starts where this one stopped rather than relearning it
//! with quick looks; a woken waiter's spin starts with quick looks and records nothing. (A slot
//! reused by a new thread keeps the hint: a wrong first rhythm, corrected by the first pair.) SPUN is
//! a hint on the rhythm only; the budgets, hand-off and WAKING are as above.
//!
//! # State word
//! | bits  | name      | meaning                                                                   |
//! |-------|-----------|---------------------------------------------------------------------------|
//! | 0     | LOCKED    | held                                                                      |
//! | 1     | WAITERS   | the wait list is not empty                                                |
//! | 2     | HANDOFF   | the first waiter asked for the lock: nobody else may take it              |
//! | 3     | WAKING    | a woken waiter is competing: the fast path fails (a hint)                 |
//! | 4     | SPUN      | a spinner has looked at this hold (a hint)                                |
//! | 5-31  | owner tag | the holder's tag (0 when free)                                            |
//!
//! Transitions, as `(owner, H, K, W, L)` (K = WAKING); SPUN is left out where it is unchanged, and
//! every take below clears it:
//! - fast lock `(0,0,0,0,0) -> (me,0,0,0,1)`; fails on any flag
//! - unlock: one `fetch_sub(me|L)`: `(me,h,k,w,1) -> (0,h,k,w,0)`; if it saw SPUN, the unlocker
//!   clears it with a `fetch_and` (if the lock was taken and marked again in between, that mark is
//!   lost: a hint); if it saw `w`, the unlocker takes
//!   `wait_lock`, dequeues the front waiter (clearing W if the list empties) and wakes it (word
//!   SLEEPING -> WOKEN), unless the lock is held again and the front waiter is younger than
//!   [`HANDOFF_NS`]
//! - spinner's mark (OSQ head or woken waiter, on a held word without SPUN): `S: 0 -> 1`
//! - spinner take (only while W is clear; OSQ head): `(0,0,k,w,0) -> (me,0,k,w,1)`: K stays, so the
//!   spinner's next lock after this one goes the slow way too, while the woken waiter still competes
//! - `try_lock` / waiter take (the waiter that set HANDOFF, or anyone while it is clear):
//!   `(0,h,k,w,0) -> (me,0,0,w,1)`
//! - woken waiter running again: `(o,h,k,w,l) -> (o,h,1,w,l)`; its spin's take
//!   `(0,0,k,w,0) -> (me,0,0,w,1)`
//! - queue to sleep (under `wait_lock`, the last look): `(o,h,k,w,l) -> (o,h,k',1,l)` (`k' = 0` for a
//!   woken waiter, which withdraws its WAKING in the same RMW); if it saw the lock takable, it
//!   dequeues itself again (clearing W if the list empties) and retries
//! - request hand-off (front waiter queueing, after [`HANDOFF_NS`]): `(o,0,k,1,1) -> (o,1,k,1,1)`
//! - `unlock_fair` / direct hand-off: `(me,h,k,1,1) -> (first,0,0,w',1)` with `first` dequeued and
//!   marked HANDED
//!
//! # Invariants
//! 1. Only the waiter that set HANDOFF may take the lock while it is set; HANDOFF is cleared by its
//!    take, by a direct hand-off, or when that waiter leaves (time-out). It is set only by the front
//!    waiter while it queues, so at most one is pending.
//! 2. Under `wait_lock`, WAITERS is set iff the wait list is non-empty.
//! 3. Every queued waiter's word is SLEEPING; wakers dequeue a waiter before they store WOKEN or
//!    HANDED, all under `wait_lock`.
//! 4. No lost wake-up: a waiter sleeps only after its `fetch_or(WAITERS)` under `wait_lock` saw the
//!    lock held (or HANDOFF for another waiter). The unlock that frees the lock comes later in the
//!    word's modification order, so it sees WAITERS (cleared only under `wait_lock` when the list
//!    empties), and its `wait_lock` section comes after the waiter's: the list is non-empty there and
//!    it wakes the front waiter, or skips because the lock is held again, whose holder's unlock
//!    repeats the argument. A pending HANDOFF's waiter is woken even then (it is >= [`HANDOFF_NS`]
//!    old), and only it can take the lock.
//! 5. A waiter returns only after it is out of the list: removed by itself under `wait_lock`, or by a
//!    waker whose last access to it is the WOKEN or HANDED store (see `crate::sleep::wait_list`).
//! 6. While LOCKED and `wait_lock` are both held, nobody else changes the state word but a woken
//!    waiter's WAKING update, a spinner's SPUN mark and an earlier unlocker's late clear of SPUN, so
//!    a direct hand-off may use a plain store (dropping a WAKING or a mark, or a late clear removing
//!    a mark from the new hold: hints).
//! 7. WAKING is a hint and never decides who owns the lock: it only fails the fast path, whose callers
//!    then take the slow path, which takes a free lock whatever K says. A waiter that sets it clears it
//!    on each way out of its competition (its take, its re-queue, its time-out), so the last update
//!    of the bit by the woken waiters is a clear and it is clear once none of them runs; `try_lock`'s
//!    take and a direct hand-off clear it too. Several woken waiters share the bit: the first to leave
//!    clears it for all (a hint lost, never a stuck one). After a `fork` the child has none of the
//!    parent's woken waiters: its first slow-path lock that sees WAKING with the wait list untouched
//!    since the fork (the list lock's epoch) clears it with the parent's other flags.
//! 8. SPUN is a hint and never decides who owns the lock. It is set only on a held word (a
//!    compare-and-swap), cleared by every take but the fast path's (which takes only a word of 0) and
//!    by the unlock that saw it, so a free word carries it only between that unlock's `fetch_sub` and
//!    its `fetch_and` (there it fails a fast-path lock, whose slow path takes a free lock whatever
//!    SPUN says). A mutex nobody holds ends with no SPUN (the loom models check the word ends at 0).
//!
//! # Memory orderings
//! - Every successful take (CAS) is Acquire; it pairs with the Release `fetch_sub` of the unlock (or the
//!   hand-off store) that last freed or passed the lock.
//! - Hand-off: `state.store(Release)` then `futex.store(HANDED, Release)`; the waiter's Acquire load of
//!   HANDED sees the previous critical section.
//! - Flag updates (WAITERS, HANDOFF, WAKING, SPUN) are Relaxed RMWs: they publish no data; the list they
//!   describe is protected by `wait_lock`, and who owns the lock is decided by the Acquire/Release
//!   operations above. Invariant 4 relies on the single modification order of the word, and on
//!   `wait_lock` (Acquire/Release) ordering the waiter's and the waker's sections.

#[cfg(not(loom))]
mod api;
mod slow;
#[cfg(all(loom, test))]
pub(crate) use slow::loom_relocking;

use crate::clock::{Deadline, SpinBudget};
use crate::primitive::{AtomicU32, Backoff, Ordering};
use crate::sleep::osq::Osq;
use crate::sleep::wait_list::{HANDED, ListLock, LockedList, SLEEPING, WOKEN, WaitList, Waiter};
use crate::sys::futex_wake;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ptr;

/// Held.
const LOCKED: u32 = 1 << 0;
/// The wait list is non-empty: its waiters sleep, so an unlock must wake one.
const WAITERS: u32 = 1 << 1;
/// The first waiter asked for the lock to be handed to it.
const HANDOFF: u32 = 1 << 2;
/// A woken waiter is running and competing: the fast path fails, so the releasing thread's re-lock
/// goes the slow way and the woken waiter gets a look (a hint, set and withdrawn by the woken waiter;
/// invariant 7).
const WAKING: u32 = 1 << 3;
/// A spinner has looked at this hold: set by a spinner on a held word, cleared by every take and by
/// the unlock (a hint: a spinner that finds it gone from a held word knows the lock was released and
/// taken again since its last look).
const SPUN: u32 = 1 << 4;
/// The owner tag lives above the flags.
const OWNER_SHIFT: u32 = 5;
/// Owner tags are 27-bit, never 0.
pub(crate) const TAG_MASK: u32 = (1 << (32 - OWNER_SHIFT)) - 1;

/// A spinner gives up after the same owner has held the lock this long (ns).
///
/// ```
/// use locklab::sleep::mutex::{OWNER_SPIN_NS, SPIN_MAX_NS};
/// assert!(OWNER_SPIN_NS <= SPIN_MAX_NS);
/// ```
pub const OWNER_SPIN_NS: u64 = 10_000;
/// Overall cap on optimistic spinning per acquisition, OSQ wait included (ns).
///
/// ```
/// use locklab::sleep::mutex::{HANDOFF_NS, SPIN_MAX_NS};
/// assert!(SPIN_MAX_NS < HANDOFF_NS); // spinning ends long before a waiter asks for hand-off
/// ```
pub const SPIN_MAX_NS: u64 = 40_000;
/// Looks (with `pause`s) a would-be spinner takes, waiting for the spinner slot, before it yields
/// between looks.
const OSQ_WAIT_SPINS: u32 = 2;
/// Two looks at most this many `pause`s apart that find the lock released and taken again in between
/// show a holder that re-locks at once.
const QUICK_GAP: u32 = 4;
/// `pause`s between the two looks of a pair, while yielding.
const PAIR_GAP: u32 = 2;
/// While yielding, every this many yields the look after one is a pair (the others are lone loads).
const PAIR_EVERY: u32 = 4;
/// Most `pause`s between two looks at the lock word while spinning (see [`Backoff`]).
const MAX_SPIN_BACKOFF: u32 = 64;
/// A first waiter that has waited this long asks for hand-off (ns). The kernel's rwsem uses 4 ms; we
/// pick 1 ms so that a starved waiter waits at most a few milliseconds even on a loaded 2-CPU VM.
///
/// ```
/// use locklab::sleep::mutex::HANDOFF_NS;
/// assert_eq!(std::time::Duration::from_nanos(HANDOFF_NS).as_millis(), 1);
/// ```
pub const HANDOFF_NS: u64 = 1_000_000;

/// The calling thread's owner tag: its stack address in 2 MiB units (27 bits, never 0: a 47-bit user
/// address space needs 26).
///
/// Free to compute (no thread-local access on the fast path: measured ~5% of an uncontended
/// lock+unlock). Thread stacks are disjoint mappings of at least 2 MiB (Rust's default), so live threads
/// get different tags except where two stacks share a 2 MiB frame. A tag is never a proof of ownership,
/// only a spinning heuristic and the value a hand-off writes: a collision only makes a spinner believe
/// the owner has not changed. One acquisition computes it once and carries it (in its token and its
/// waiter node), so lock and unlock always agree.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn current_tag() -> u32 {
    let marker = 0u8;
    let sp = core::ptr::addr_of!(marker) as usize;
    let t = (sp >> 21) as u32 & TAG_MASK;
    t | (t == 0) as u32
}

/// Under loom: the model thread's number plus one. Stack addresses differ between a model's
/// executions (two model threads' stacks may or may not share a 2 MiB frame), and tag equality steers
/// the spinners' "same owner?" branches, so an address tag made the models nondeterministic.
#[cfg(loom)]
pub(crate) fn current_tag() -> u32 {
    let id = format!("{:?}", loom::thread::current().id());
    let digits: String = id.chars().filter(char::is_ascii_digit).collect();
    digits.parse::<u32>().map_or(1, |n| (n + 1) & TAG_MASK)
}

/// The state word value of a lock held by `tag` with no flags.
#[inline]
const fn held_by(tag: u32) -> u32 {
    (tag << OWNER_SHIFT) | LOCKED
}

/// Guard state of [`RawMutex`]: the state word value a flag-free unlock expects. Not `Send`, as std's
/// guard is not: the owner tag names the locking thread.
///
/// ```
/// let m = locklab::raw::RawMutex::new();
/// let t: locklab::raw::MutexToken = m.lock();
/// unsafe { m.unlock(t) }; // the token of this acquisition, consumed by its unlock
/// ```
pub struct MutexToken {
    expected: u32,
    _not_send: PhantomData<*mut ()>,
}

// SAFETY: `&MutexToken` exposes only a plain integer.
unsafe impl Sync for MutexToken {}

// SAFETY (`send_guard` only): the token is the state word an unlock expects; an unlock from another
// thread is correct (the owner tag in the word is a spinning hint: spinners watch a thread that no
// longer holds the lock, and stop at their budget).
#[cfg(feature = "send_guard")]
unsafe impl Send for MutexToken {}

impl MutexToken {
    #[inline]
    fn new(tag: u32) -> Self {
        MutexToken {
            expected: held_by(tag),
            _not_send: PhantomData,
        }
    }

    /// The token of an acquisition made with `tag` (a waiter's).
    #[inline]
    pub(crate) fn for_tag(tag: u32) -> Self {
        Self::new(tag)
    }

    /// A token standing for no acquisition, left in a guard while the condvar has released the lock.
    /// It is never passed to `unlock`: the condvar replaces it before returning, and nothing between
    /// can unwind.
    #[inline]
    pub(crate) fn placeholder() -> Self {
        MutexToken {
            expected: 0,
            _not_send: PhantomData,
        }
    }
}

/// The adaptive mutex. See the [module documentation](self).
///
/// ```
/// let m = locklab::raw::RawMutex::new();
/// let t = m.lock();
/// assert!(m.try_lock().is_none());
/// unsafe { m.unlock_fair(t) }; // hands over to the first waiter, or frees the lock
/// assert!(!m.is_locked());
/// ```
///
/// # Layout
/// `#[repr(C)]`, 40 bytes, 8-aligned: the size of glibc's x86-64 `pthread_mutex_t`, with the three
/// 32-bit words at byte offsets [`RawMutex::SPARE_OFFSETS`] (4, 8 and 16) never read or written by the
/// mutex. They are where glibc keeps a mutex's recursion count, owner TID and kind, so a
/// `pthread_mutex_t` can hold this mutex in place and keep those fields where static initializers,
/// debuggers and programs look for them (`liblocklab_pthread.so` does). Other users can ignore them.
#[repr(C)]
pub struct RawMutex {
    state: AtomicU32,
    spare0: core::sync::atomic::AtomicU32,
    spare1: core::sync::atomic::AtomicU32,
    /// Optimistic spinners (a 32-bit id of the last one).
    osq: Osq,
    spare2: core::sync::atomic::AtomicU32,
    /// Protects `waiters`.
    wait_lock: ListLock,
    waiters: UnsafeCell<WaitList>,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    pub(crate) dep: crate::dep::Dep,
}

// SAFETY: `waiters` is only accessed with `wait_lock` held; everything else is atomic.
unsafe impl Sync for RawMutex {}
// SAFETY: the raw pointers in `waiters` point to waiters that borrow the mutex, so none exist when the
// mutex itself is moved to another thread.
unsafe impl Send for RawMutex {}

/// `wait_lock` held, giving access to the wait list.
type Waiters<'a> = LockedList<'a>;

impl RawMutex {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked mutex.
        ///
        /// ```
        /// let m = locklab::raw::RawMutex::new();
        /// assert!(!m.is_locked());
        /// ```
        pub fn new() -> Self {
            RawMutex {
                dep: crate::dep::Dep::new(),
                state: AtomicU32::new(0),
                spare0: core::sync::atomic::AtomicU32::new(0),
                spare1: core::sync::atomic::AtomicU32::new(0),
                osq: Osq::new(),
                spare2: core::sync::atomic::AtomicU32::new(0),
                wait_lock: ListLock::new(),
                waiters: UnsafeCell::new(WaitList::new()),
            }
        }
    }

    /// Whether the word says waiters are queued (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn has_waiters(&self) -> bool {
        self.state.load(Ordering::Relaxed) & WAITERS != 0
    }

    /// The state word (tests).
    #[cfg(all(test, unix, not(loom), not(miri)))]
    pub(crate) fn word(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }

    /// Sets WAKING on the word, as a woken waiter does (tests: one caught by a `fork`).
    #[cfg(all(test, unix, not(loom), not(miri)))]
    pub(crate) fn mark_waking(&self) {
        self.state.fetch_or(WAKING, Ordering::Relaxed);
    }

    /// The internal list lock (tests: a thread caught holding it at a `fork`).
    #[cfg(all(test, unix, not(loom), not(miri)))]
    pub(crate) fn list_lock(&self) -> &ListLock {
        &self.wait_lock
    }

    /// Byte offsets of the three 32-bit words the mutex never touches (see "Layout").
    ///
    /// ```
    /// use locklab::raw::RawMutex;
    /// for off in RawMutex::SPARE_OFFSETS {
    ///     assert!(off % 4 == 0 && off + 4 <= size_of::<RawMutex>());
    /// }
    /// ```
    pub const SPARE_OFFSETS: [usize; 3] = [4, 8, 16];

    /// Releases the lock held by any thread, as POSIX lets a default `pthread_mutex_t` be unlocked by a
    /// thread that did not lock it (glibc allows it and real programs do it).
    ///
    /// ```
    /// let m = std::sync::Arc::new(locklab::raw::RawMutex::new());
    /// std::mem::forget(m.lock()); // the token stays with this thread...
    /// let m2 = m.clone();
    /// // ...and another thread ends the acquisition.
    /// std::thread::spawn(move || unsafe { m2.unlock_on_behalf() }).join().unwrap();
    /// assert!(!m.is_locked());
    /// ```
    ///
    /// A free mutex is left alone (glibc's default mutex allows such an unlock; it does nothing).
    ///
    /// # Safety
    /// The mutex is held (or free), and the token of that acquisition is never used again.
    // For locklab-pthread (its pthread_mutex_* entry points); hidden from the user's docs.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn unlock_on_behalf(&self) {
        // The owner tag stays in the word for the whole acquisition (only flags change meanwhile), so
        // the word names the token this unlock stands for.
        let s = self.state.load(Ordering::Relaxed);
        if s & LOCKED != 0 {
            // SAFETY: the caller's contract; the token is the one the holder got.
            unsafe { self.unlock(MutexToken::new(s >> OWNER_SHIFT)) }
        }
    }

    fn waiters(&self) -> Waiters<'_> {
        let w = LockedList::lock(&self.wait_lock, &self.waiters);
        if w.was_stale {
            // The list was a parent's (a fork came between), now emptied: its waiters' flags go too.
            // No flag can be this epoch's yet: WAITERS and HANDOFF are set under `wait_lock`, WAKING
            // by woken waiters, which were in the list. Relaxed: under `wait_lock` (invariant 2).
            self.state
                .fetch_and(!(WAITERS | HANDOFF | WAKING), Ordering::Relaxed);
        }
        w
    }

    /// Takes the lock, spinning and then sleeping as needed.
    ///
    /// ```
    /// let m = std::sync::Arc::new(locklab::raw::RawMutex::new());
    /// let t = m.lock();
    /// let m2 = m.clone();
    /// let other = std::thread::spawn(move || {
    ///     let t = m2.lock(); // spins, then sleeps until the main thread unlocks
    ///     // SAFETY: `t` is this thread's acquisition of `m2`.
    ///     unsafe { m2.unlock(t) };
    /// });
    /// // SAFETY: `t` is this thread's acquisition of `m`.
    /// unsafe { m.unlock(t) };
    /// other.join().unwrap();
    /// assert!(!m.is_locked());
    /// ```
    #[inline]
    pub fn lock(&self) -> MutexToken {
        let tag = current_tag();
        // Acquire pairs with the Release of the unlock that freed the lock.
        if self
            .state
            .compare_exchange(0, held_by(tag), Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow(tag, None);
        }
        MutexToken::new(tag)
    }

    /// The fast path of [`lock`](Self::lock) alone: one compare-and-swap from a free word with no
    /// waiters or flags. `None` when the lock is held, has waiters or shows a flag (then `lock` would
    /// take its slow path): for callers that must do something before a slow path that may sleep.
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// let t = m.try_lock_fast().expect("free and quiet");
    /// assert!(m.try_lock_fast().is_none());
    /// unsafe { m.unlock(t) };
    /// ```
    // For locklab-pthread (its pthread_mutex_* entry points); hidden from the user's docs.
    #[doc(hidden)]
    #[inline]
    pub fn try_lock_fast(&self) -> Option<MutexToken> {
        let tag = current_tag();
        // Acquire pairs with the Release of the unlock that freed the lock.
        self.state
            .compare_exchange(0, held_by(tag), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| MutexToken::new(tag))
    }

    /// Takes a free, quiet mutex with a plain load and store, no atomic read-modify-write: glibc's
    /// trick for single-threaded processes (it drops the `lock` prefix while only one thread exists),
    /// where a locked instruction is most of the cost of an uncontended lock.
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// // SAFETY: no other thread can see `m`.
    /// unsafe {
    ///     let _t = m.try_lock_unshared().expect("free");
    ///     assert!(m.is_locked());
    ///     assert!(m.unlock_unshared());
    /// }
    /// assert!(!m.is_locked());
    /// ```
    ///
    /// # Safety
    /// No other thread accesses the mutex until the matching unlock (a process with one thread; a
    /// signal handler of this thread is fine: it runs between our instructions, not during them).
    // For locklab-pthread (its pthread_mutex_* entry points); hidden from the user's docs.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn try_lock_unshared(&self) -> Option<MutexToken> {
        let tag = current_tag();
        (self.state.load(Ordering::Relaxed) == 0).then(|| {
            self.state.store(held_by(tag), Ordering::Relaxed);
            MutexToken::new(tag)
        })
    }

    /// Releases, with a plain store, a held mutex whose word shows only its holder (no waiter, no
    /// flag); `false` (nothing done) otherwise, and the caller unlocks the usual way. Any holder's
    /// acquisition is ended (as [`unlock_on_behalf`](Self::unlock_on_behalf)).
    ///
    /// # Safety
    /// As [`try_lock_unshared`](Self::try_lock_unshared); the acquisition's token is never used again.
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// // SAFETY: no other thread can see `m`; the token is dropped unused.
    /// unsafe {
    ///     let _t = m.try_lock_unshared().expect("free");
    ///     assert!(m.unlock_unshared());
    /// }
    /// assert!(!m.is_locked());
    /// ```
    // For locklab-pthread (its pthread_mutex_* entry points); hidden from the user's docs.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn unlock_unshared(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        let quiet = s & LOCKED != 0 && s == held_by(s >> OWNER_SHIFT);
        if quiet {
            self.state.store(0, Ordering::Relaxed);
        }
        quiet
    }

    /// Takes the lock if it is free (and no hand-off is pending).
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// let t = m.try_lock().expect("free");
    /// assert!(m.try_lock().is_none());
    /// // SAFETY: `t` is this thread's acquisition of `m`.
    /// unsafe { m.unlock(t) };
    /// ```
    #[inline]
    pub fn try_lock(&self) -> Option<MutexToken> {
        let tag = current_tag();
        self.try_take(tag).then(|| MutexToken::new(tag))
    }

    /// Takes the lock, giving up once `deadline` has passed; `None` on timeout.
    pub(crate) fn lock_until(&self, deadline: &Deadline) -> Option<MutexToken> {
        let tag = current_tag();
        // Acquire pairs with the Release of the unlock that freed the lock.
        if self
            .state
            .compare_exchange(0, held_by(tag), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            || self.lock_slow(tag, Some(deadline))
        {
            Some(MutexToken::new(tag))
        } else {
            None
        }
    }

    /// Releases the lock: one `fetch_sub`, then the slow path if anyone waits (or a spinner marked
    /// the hold, whose mark it clears).
    ///
    /// # Safety
    /// `token` is the state of the caller's current acquisition of this mutex.
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// let t = m.lock();
    /// // SAFETY: `t` is this thread's current acquisition of `m`.
    /// unsafe { m.unlock(t) };
    /// assert!(!m.is_locked());
    /// ```
    #[inline]
    pub unsafe fn unlock(&self, token: MutexToken) {
        // `(me,h,k,w,1) -> (0,h,k,w,0)`: one RMW whatever the flags.
        // Release pairs with the Acquire of whoever takes the lock next.
        let old = self.state.fetch_sub(token.expected, Ordering::Release);
        if old & (WAITERS | SPUN) != 0 {
            self.unlock_flagged(old - token.expected);
        }
    }

    /// Releases the lock, handing it directly to the first waiter if there is one.
    ///
    /// # Safety
    /// As [`unlock`](Self::unlock).
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// let t = m.lock();
    /// // SAFETY: `t` is this thread's current acquisition of `m`.
    /// unsafe { m.unlock_fair(t) }; // nobody waits: simply freed
    /// assert!(!m.is_locked());
    /// ```
    #[inline]
    pub unsafe fn unlock_fair(&self, token: MutexToken) {
        // Release pairs with the Acquire of whoever takes the lock next.
        if self
            .state
            .compare_exchange(token.expected, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.hand_off(token.expected);
        }
    }

    /// Whether the lock is held (a snapshot).
    ///
    /// ```
    /// let m = locklab::raw::RawMutex::new();
    /// assert!(!m.is_locked());
    /// let t = m.lock();
    /// assert!(m.is_locked());
    /// // SAFETY: `t` is this thread's acquisition of `m`.
    /// unsafe { m.unlock(t) };
    /// ```
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// The whole state word (tests: a free, quiet mutex must read 0, no flag left behind).
    #[cfg(all(test, loom))]
    pub(crate) fn state_word(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }

    /// A take by anyone but the hand-off's owner: `(0,0,k,w,0) -> (me,0,0,w,1)`.
    #[inline]
    fn try_take(&self, tag: u32) -> bool {
        self.take(tag, false)
    }

    /// `(0,h,k,w,0) -> (me,0,0,w,1)`, allowed with HANDOFF only to the waiter that set it (`handoff`),
    /// whose take clears it (invariant 1).
    #[inline]
    fn take(&self, tag: u32, handoff: bool) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        while s & LOCKED == 0 && (s & HANDOFF == 0 || handoff) {
            // Acquire pairs with the Release of the unlock that freed the lock.
            match self.state.compare_exchange_weak(
                s,
                (s & WAITERS) | held_by(tag),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }
}

#[cfg(not(loom))]
impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

/// This thread's OSQ node, claimed for one spin: `None` if the thread has no slot, or if its node is
/// already in use by the code this call interrupted (a signal handler that locks a `Mutex` or `RwSem`
/// while its thread spins in an OSQ). Then the caller skips spinning and sleeps.
/// Reusing the node would link it into a second queue while it is still in the first.
#[cfg(not(loom))]
pub(crate) fn osq_node() -> Option<OsqClaim> {
    let slot = crate::thread_slot::current()?;
    if slot.osq_busy.replace(true) {
        return None;
    }
    // A signal handler runs on this thread between two of its instructions: the flag must be set
    // before any store to the node (a compiler fence is the signal-handler fence).
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    Some(OsqClaim { slot })
}

/// A claim on this thread's OSQ node; gives it back when dropped.
#[cfg(not(loom))]
pub(crate) struct OsqClaim {
    slot: &'static crate::thread_slot::ThreadSlot,
}

#[cfg(not(loom))]
impl core::ops::Deref for OsqClaim {
    type Target = crate::sleep::osq::OsqNode;
    fn deref(&self) -> &crate::sleep::osq::OsqNode {
        &self.slot.osq
    }
}

#[cfg(not(loom))]
impl OsqClaim {
    /// Where this thread keeps the spinning rhythm its last spin ended with.
    pub(crate) fn relocking(&self) -> Option<&core::cell::Cell<usize>> {
        Some(&self.slot.relocking)
    }
}

#[cfg(not(loom))]
impl Drop for OsqClaim {
    fn drop(&mut self) {
        // Every use of the node (queueing, unqueueing, unlocking) is done before the flag clears.
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.slot.osq_busy.set(false);
    }
}

/// This thread's OSQ node: leaked per model thread, since nodes must be type-stable.
#[cfg(loom)]
pub(crate) fn osq_node() -> Option<&'static crate::sleep::osq::OsqNode> {
    loom::thread_local!(static NODE: &'static crate::sleep::osq::OsqNode = {
        let node: &'static crate::sleep::osq::OsqNode = Box::leak(Box::new(crate::sleep::osq::OsqNode::new()));
        node.register();
        node
    });
    Some(NODE.with(|n| *n))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// The layout promise: 40 bytes, and the spare words are never written by locking, contention,
    /// sleeping and waking.
    #[test]
    fn spare_words_are_untouched() {
        // 40 bytes, glibc's pthread_mutex_t; the lockdep feature adds the class at the end.
        let lockdep = if cfg!(feature = "lockdep") { 8 } else { 0 };
        assert_eq!(core::mem::size_of::<RawMutex>(), 40 + lockdep);
        assert_eq!(core::mem::align_of::<RawMutex>(), 8);
        let m = Arc::new(RawMutex::new());
        let spare = |m: &RawMutex, i: usize| {
            // SAFETY: the offset is inside the struct, on a 4-aligned AtomicU32 field.
            unsafe {
                &*((m as *const RawMutex as *const u8).add(RawMutex::SPARE_OFFSETS[i])
                    as *const core::sync::atomic::AtomicU32)
            }
        };
        for i in 0..3 {
            spare(&m, i).store(0xdead_0000 + i as u32, Ordering::Relaxed);
        }
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let t = m.lock();
                        unsafe { m.unlock(t) };
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        for i in 0..3 {
            assert_eq!(spare(&m, i).load(Ordering::Relaxed), 0xdead_0000 + i as u32);
        }
        assert!(!m.is_locked());
    }

    /// Polls `f` for up to 10 s.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// WAITERS's life: set by waiters that go to sleep behind a held lock, kept while any of them still
    /// sleeps (else a waiter is never woken: the test fails after 10 s instead of hanging), and gone
    /// from the word once every waiter has taken the lock and left.
    #[test]
    fn waiters_set_by_sleeping_waiters_and_gone_when_they_leave() {
        for waiters in [1, 3] {
            let m = Arc::new(RawMutex::new());
            let t = m.lock();
            let hs: Vec<_> = (0..waiters)
                .map(|_| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        let t = m.lock();
                        // SAFETY: this acquisition's token.
                        unsafe { m.unlock(t) };
                    })
                })
                .collect();
            // Spinning ends after SPIN_MAX_NS / OWNER_SPIN_NS (tens of microseconds): all sleep then.
            assert!(
                eventually(|| m.state.load(Ordering::Relaxed) & WAITERS != 0),
                "{waiters} waiter(s) behind a held lock never announced a sleep"
            );
            // Let the others get to sleep too, so that one unlock finds several asleep (the waker must
            // keep WAITERS for the ones it does not wake).
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: the token of the acquisition above.
            unsafe { m.unlock(t) };
            assert!(
                eventually(|| hs.iter().all(|h| h.is_finished())),
                "a sleeping waiter was never woken ({waiters} waiters)"
            );
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(m.state.load(Ordering::Relaxed), 0, "flags left behind");
        }
    }

    /// Every path that sets or clears a flag, mixed under contention with more threads than CPUs:
    /// plain and fair unlocks, timed locks with short deadlines (which may time out queued or while
    /// woken and competing), `try_lock`. Mutual exclusion holds (a counter updated non-atomically, with a yield
    /// between its read and its write now and then) and, once everyone has left, the word is 0: no
    /// WAKING, WAITERS or HANDOFF left behind.
    #[test]
    fn mixed_paths_keep_exclusion_and_leave_no_flag() {
        struct Shared {
            m: RawMutex,
            count: UnsafeCell<u64>,
        }
        // SAFETY: `count` is only accessed with `m` held.
        unsafe impl Sync for Shared {}
        const THREADS: u64 = if cfg!(miri) { 3 } else { 8 };
        const ROUNDS: u64 = if cfg!(miri) { 40 } else { 3_000 };
        let s = Shared {
            m: RawMutex::new(),
            count: UnsafeCell::new(0),
        };
        let done: u64 = std::thread::scope(|scope| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let s = &s;
                    scope.spawn(move || {
                        let mut mine = 0;
                        for i in 0..ROUNDS {
                            let token = match (i + t) % 4 {
                                0 | 1 => Some(s.m.lock()),
                                2 => s.m.lock_until(
                                    &(Instant::now() + Duration::from_micros(20 + i % 50)),
                                ),
                                _ => s.m.try_lock(),
                            };
                            let Some(token) = token else { continue };
                            // SAFETY: `m` is held, so nobody else touches `count`.
                            unsafe {
                                let c = s.count.get();
                                let v = c.read_volatile();
                                if i % 16 == 0 {
                                    std::thread::yield_now();
                                }
                                // A section long enough that waiters sleep and time out.
                                let until = Instant::now() + Duration::from_micros(3);
                                #[cfg(miri)]
                                let until = Instant::now();
                                while Instant::now() < until {
                                    core::hint::spin_loop();
                                }
                                c.write_volatile(v + 1);
                            }
                            mine += 1;
                            // SAFETY: this acquisition's token.
                            unsafe {
                                if i % 3 == 0 {
                                    s.m.unlock_fair(token)
                                } else {
                                    s.m.unlock(token)
                                }
                            };
                        }
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(s.count.into_inner(), done, "lost an update");
        assert!(
            done >= THREADS * ROUNDS / 2,
            "the untimed locks alone make half"
        );
        assert_eq!(s.m.state.load(Ordering::Relaxed), 0, "flags left behind");
    }
    /// A spinner marks the hold it looks at (SPUN on the held word), and the unlock that frees the
    /// lock takes the mark away: the word ends at 0. Fails if the spinner never marks, or if the
    /// unlock leaves SPUN on the free word.
    #[test]
    #[cfg_attr(miri, ignore)] // timing: a spinner's budget against the main thread's polling
    fn a_spinner_marks_the_hold_and_the_unlock_clears_the_mark() {
        let m = Arc::new(RawMutex::new());
        let t = m.lock();
        let m2 = m.clone();
        let h = std::thread::spawn(move || {
            let t = m2.lock();
            // SAFETY: this acquisition's token.
            unsafe { m2.unlock(t) };
        });
        // The spinner's first look at the held word marks it (before its budget sends it to sleep).
        let start = Instant::now();
        let mut seen = false;
        while !seen && start.elapsed() < Duration::from_secs(10) && !h.is_finished() {
            seen = m.state.load(Ordering::Relaxed) & SPUN != 0;
        }
        assert!(seen, "the spinner never marked the hold");
        // SAFETY: the token of the acquisition above.
        unsafe { m.unlock(t) };
        h.join().unwrap();
        assert_eq!(
            m.state.load(Ordering::Relaxed),
            0,
            "SPUN left on a free word"
        );
        // The unlock alone clears a mark (no later take to do it), for both kinds of unlock.
        for fair in [false, true] {
            let t = m.lock();
            m.state.fetch_or(SPUN, Ordering::Relaxed); // a spinner's mark
            // SAFETY: the token of this acquisition.
            unsafe { if fair { m.unlock_fair(t) } else { m.unlock(t) } };
            assert_eq!(
                m.state.load(Ordering::Relaxed),
                0,
                "the unlock left SPUN (fair: {fair})"
            );
        }
    }

    /// Spins (through `lock`'s slow path, as the OSQ head) while another thread re-locks at once,
    /// until a spin ends with this thread's slot naming the mutex: it saw a re-lock between two
    /// quick looks and went to yielding. `false` if 120 s of tries never did (each needs the two
    /// threads running at once, which a loaded machine makes rare, not impossible: the tests
    /// running beside this one, slower under the `lockdep` feature, can hold both CPUs for tens of
    /// seconds; the first success ends the wait).
    fn spinner_learns_relocking(m: &RawMutex) -> bool {
        let me = m as *const RawMutex as usize;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(120) {
            let t = m.lock();
            // SAFETY: this acquisition's token.
            unsafe { m.unlock(t) };
            if crate::thread_slot::current().is_some_and(|s| s.relocking.get() == me) {
                return true;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        false
    }

    /// With the holder re-locking at once, the spinner goes to yielding between looks and keeps
    /// that rhythm for its next spin (its slot names the mutex); against a hold that lasts until
    /// the spinner has given up and queued, a spinner that starts yielding goes back to quick looks
    /// and its slot forgets the mutex. Fails with either change of rhythm removed.
    #[test]
    #[cfg_attr(miri, ignore)] // timing: needs a holder re-locking at hardware speed
    fn the_spin_rhythm_follows_the_holder() {
        let m = Arc::new(RawMutex::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m2 = m.clone();
        let stop2 = stop.clone();
        let holder = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let t = m2.lock();
                // SAFETY: this acquisition's token.
                unsafe { m2.unlock(t) };
            }
        });
        let learned = spinner_learns_relocking(&m);
        stop.store(true, Ordering::Relaxed);
        holder.join().unwrap();
        assert!(learned, "no spin saw the holder re-lock at once");

        // A hold that lasts until the spinner has queued (WAITERS: its spin is over and recorded).
        // The spinner starts yielding (its slot names the mutex), so its first pair of looks must
        // find its mark still there.
        let t = m.lock();
        let m3 = m.clone();
        let spinner = std::thread::spawn(move || {
            let me = &*m3 as *const RawMutex as usize;
            let slot = crate::thread_slot::current().expect("a slot");
            slot.relocking.set(me);
            let t = m3.lock();
            // SAFETY: this acquisition's token.
            unsafe { m3.unlock(t) };
            slot.relocking.get() == me
        });
        assert!(
            eventually(|| m.state.load(Ordering::Relaxed) & WAITERS != 0),
            "the spinner never queued"
        );
        // SAFETY: the token of the acquisition above.
        unsafe { m.unlock(t) };
        assert!(
            !spinner.join().unwrap(),
            "a spinner kept yielding on a hold that lasted"
        );
        assert_eq!(m.state.load(Ordering::Relaxed), 0, "flags left behind");
    }
}
