//! The adaptive futex mutex: the kernel's `struct mutex` design in userspace.
//!
//! # Algorithm (after the kernel's `kernel/locking/mutex.c` and `Documentation/locking/mutex-design.rst`)
//! 1. **Fast path**: `cas(state: 0 -> me|LOCKED)` to lock, `cas(me|LOCKED -> 0)` to unlock. One RMW each.
//! 2. **Optimistic spinning** (seed 001: the 12x of adaptive spinning over sleeping): a contender joins
//!    the lock's [`Osq`], so only the OSQ head spins on the lock word; the head takes the lock the moment
//!    it is free. It stops when a hand-off is pending or its budget runs out (then it unqueues; see
//!    [`crate::osq`]).
//! 3. **Sleeping**: a FIFO [`WaitList`] under the small internal `wait_lock`; each waiter sleeps on its
//!    own futex word. The first waiter spins (loads only, while the owner is unchanged, up to
//!    [`OWNER_SPIN_NS`]) before each sleep, as the kernel's first waiter does: a woken or requeued
//!    waiter that found the lock held used to sleep again at once. A waiter about to sleep sets SLEEPER
//!    (under `wait_lock`, as its last look at the word); an unlock takes the slow path only if it sees
//!    SLEEPER, and then wakes the first waiter still asleep, unless the first waiter is spinning (it
//!    will see the free lock itself). The woken waiter retries (it can lose to a spinner: that is what
//!    keeps the lock busy and fast). Waiters that are awake but queued (spinning, or woken and not yet
//!    back) cost unlocks nothing: before SLEEPER, every unlock with the list non-empty took `wait_lock`
//!    (in a scratch build that sent deep spinners to the list, 4 threads: 3.2-3.4 M such unlocks/s, of
//!    which all but ~300 found nobody asleep). Several woken waiters may be awake at once: a herd
//!    requeued by `Condvar::notify_all` drains in parallel instead of one wake-up latency at a time
//!    (issue 8, defect 12: the earlier WAKING bit allowed one wake-up in flight, and a one-slot
//!    producer/consumer queue crawled at ~4.5 K messages/s where parking_lot moves ~120 K). The futex
//!    wake is made after `wait_lock` is released.
//! 4. **Hand-off** (kernel v4.10): a first waiter that has waited longer than [`HANDOFF_NS`] sets HANDOFF.
//!    From then on nobody but that waiter may take the lock: the next (plain) unlock frees it with
//!    HANDOFF still set and wakes the waiter, and spinners and `try_lock` keep off until it has taken it.
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
//! [`MAX_SPIN_BACKOFF`] `pause`s), so the spinner does not keep pulling the line from a running holder.
//! Chosen with the lab (`locklab bench --workload mutex`); see the README's Mutex section.
//!
//! # State word
//! | bits  | name      | meaning                                                                   |
//! |-------|-----------|---------------------------------------------------------------------------|
//! | 0     | LOCKED    | held                                                                      |
//! | 1     | WAITERS   | the wait list is not empty                                                |
//! | 2     | HANDOFF   | the first waiter asked for the lock: nobody else may take it              |
//! | 3     | SLEEPER   | a waiter may be asleep on its futex word: unlocks must look               |
//! | 4-31  | owner tag | the holder's tag (0 when free)                                            |
//!
//! Transitions, as `(owner, S, H, W, L)`:
//! - fast lock `(0,0,0,0,0) -> (me,0,0,0,1)`
//! - unlock: one `fetch_sub(me|L)`: `(me,s,h,w,1) -> (0,s,h,w,0)`; if it saw `s`, the unlocker takes
//!   `wait_lock` and wakes the first waiter still asleep (its word SLEEPING -> WOKEN), unless the first
//!   waiter is SPINNING; it clears S if no other waiter's word is SLEEPING
//! - spinner / `try_lock` take: `(0,s,0,w,0) -> (me,s,0,w,1)`
//! - waiter take (first waiter, or any waiter without HANDOFF): `(0,s,h,1,0) -> (me,s',0,w',1)`
//!   (`s' = s` unless the list empties)
//! - enqueue: `(o,s,h,0,l) -> (o,s,h,1,l)`; request hand-off (first waiter): `(o,s,0,1,1) -> (o,s,1,1,1)`
//! - about to sleep: `(o,s,h,1,l) -> (o,1,h,1,l)` (a `fetch_or`, the waiter's last look)
//! - `unlock_fair` / direct hand-off: `(me,s,h,1,1) -> (first,s',0,w',1)` with `first` marked HANDED
//!
//! # Invariants
//! 1. Only the first waiter may take the lock while HANDOFF is set; HANDOFF is cleared by its take, by
//!    a direct hand-off, or when that waiter leaves (time-out).
//! 2. Under `wait_lock`, WAITERS is set iff the wait list is non-empty.
//! 3. A waiter's word is SLEEPING only while it is asleep or about to sleep, and SPINNING only while it
//!    is the first waiter watching the word: it stores either under `wait_lock`, and a waker sets WOKEN
//!    under `wait_lock`.
//! 4. No lost wake-up: a waiter sleeps only after its `fetch_or(SLEEPER)` under `wait_lock` saw LOCKED
//!    (or HANDOFF for another waiter). The unlock that frees the lock comes later in the word's
//!    modification order, so it sees SLEEPER: S is cleared only under `wait_lock` by a waker that found
//!    no word SLEEPING (a later section than the waiter's, which would have seen ours), or when the list
//!    empties. The unlock's `wait_lock` section comes after the waiter's, where it finds a SLEEPING word
//!    (ours or an earlier sleeper's) and wakes it, or finds the first waiter SPINNING: that waiter's next
//!    `wait_lock` section is later still, and it looks at the word there (a take, then its own
//!    `fetch_or`) before it can sleep, so it sees the free lock. A HANDOFF waiter that is first is woken
//!    first.
//! 5. A waiter returns only after it is out of the list: removed by itself under `wait_lock`, or by a
//!    hand-off whose last access to it is the HANDED store (see [`crate::wait_list`]).
//! 6. While LOCKED and `wait_lock` are both held, nobody else changes the state word, so a direct
//!    hand-off may use a plain store.
//!
//! # Memory orderings
//! - Every successful take (CAS) is Acquire; it pairs with the Release `fetch_sub` of the unlock (or the
//!   hand-off store) that last freed or passed the lock.
//! - Hand-off: `state.store(Release)` then `futex.store(HANDED, Release)`; the waiter's Acquire load of
//!   HANDED sees the previous critical section.
//! - Flag updates (WAITERS, HANDOFF) are Relaxed RMWs: they publish no data; the list they
//!   describe is protected by `wait_lock`, and who owns the lock is decided by the Acquire/Release
//!   operations above. Invariant 4 relies on the single modification order of the word, and on
//!   `wait_lock` (Acquire/Release) ordering the waiter's and the waker's sections.

use crate::clock::{Deadline, SpinBudget};
use crate::osq::Osq;
use crate::primitive::{AtomicU32, Backoff, Ordering};
use crate::spin::tas::RawTasLock;
use crate::sys::futex_wake;
use crate::wait_list::{HANDED, LockedList, SLEEPING, SPINNING, WOKEN, WaitList, Waiter};
use core::cell::UnsafeCell;
use core::marker::PhantomData;

/// Held.
const LOCKED: u32 = 1 << 0;
/// The wait list is non-empty.
const WAITERS: u32 = 1 << 1;
/// The first waiter asked for the lock to be handed to it.
const HANDOFF: u32 = 1 << 2;
/// A waiter may be asleep on its futex: only then does an unlock take `wait_lock` to wake one.
const SLEEPER: u32 = 1 << 3;
/// The owner tag lives above the flags.
const OWNER_SHIFT: u32 = 4;
/// Owner tags are 28-bit, never 0.
const TAG_MASK: u32 = (1 << (32 - OWNER_SHIFT)) - 1;

/// A spinner gives up after the same owner has held the lock this long (ns).
pub const OWNER_SPIN_NS: u64 = 10_000;
/// Overall cap on optimistic spinning per acquisition, OSQ wait included (ns).
pub const SPIN_MAX_NS: u64 = 40_000;
/// Most `pause`s between two looks at the lock word while spinning (see [`Backoff`]).
const MAX_SPIN_BACKOFF: u32 = 64;
/// A first waiter that has waited this long asks for hand-off (ns). The kernel's rwsem uses 4 ms; we
/// pick 1 ms so that a starved waiter waits at most a few milliseconds even on a loaded 2-CPU VM.
pub const HANDOFF_NS: u64 = 1_000_000;

/// The calling thread's owner tag: its stack address in 2 MiB units (28 bits, never 0).
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
pub struct RawMutex {
    state: AtomicU32,
    /// Protects `waiters`.
    wait_lock: RawTasLock,
    osq: Osq,
    waiters: UnsafeCell<WaitList>,
}

// SAFETY: `waiters` is only accessed with `wait_lock` held; everything else is atomic.
unsafe impl Sync for RawMutex {}
// SAFETY: the raw pointers in `waiters` point to waiters that borrow the mutex, so none exist when the
// mutex itself is moved to another thread.
unsafe impl Send for RawMutex {}

/// `wait_lock` held, giving access to the wait list.
type Waiters<'a> = LockedList<'a>;

impl RawMutex {
    /// A new, unlocked mutex.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawMutex {
            state: AtomicU32::new(0),
            wait_lock: RawTasLock::new(),
            osq: Osq::new(),
            waiters: UnsafeCell::new(WaitList::new()),
        }
    }

    /// A new, unlocked mutex (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawMutex {
            state: AtomicU32::new(0),
            wait_lock: RawTasLock::new(),
            osq: Osq::new(),
            waiters: UnsafeCell::new(WaitList::new()),
        }
    }

    fn waiters(&self) -> Waiters<'_> {
        LockedList::lock(&self.wait_lock, &self.waiters)
    }

    /// Takes the lock, spinning and then sleeping as needed.
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

    /// Takes the lock if it is free (and no hand-off is pending).
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

    /// Releases the lock: one CAS, or the slow path if anyone waits.
    ///
    /// # Safety
    /// `token` is the state of the caller's current acquisition of this mutex.
    #[inline]
    pub unsafe fn unlock(&self, token: MutexToken) {
        // `(me,s,h,w,1) -> (0,s,h,w,0)`: one RMW whatever the flags.
        // Release pairs with the Acquire of whoever takes the lock next.
        let old = self.state.fetch_sub(token.expected, Ordering::Release);
        if old & SLEEPER != 0 {
            self.unlock_slow();
        }
    }

    /// Releases the lock, handing it directly to the first waiter if there is one.
    ///
    /// # Safety
    /// As [`unlock`](Self::unlock).
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
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// `(0,s,0,w,0) -> (me,s,0,w,1)`.
    #[inline]
    fn try_take(&self, tag: u32) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        while s & (LOCKED | HANDOFF) == 0 {
            // Acquire pairs with the Release of the unlock that freed the lock.
            match self.state.compare_exchange_weak(
                s,
                s | held_by(tag),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// Spin, then sleep. Returns `false` only if `deadline` passed first.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self, tag: u32, deadline: Option<&Deadline>) -> bool {
        if self.spin(tag) {
            return true;
        }
        let waiter = Waiter::new(tag);
        // SAFETY: `waiter` lives on this frame until `wait_queued` returns, which it does only once the
        // waiter is out of the list (invariant 4).
        unsafe { self.wait_queued(&waiter, deadline, true) }
    }

    /// Optimistic spinning through the OSQ. Returns `true` with the lock held.
    fn spin(&self, tag: u32) -> bool {
        if self.state.load(Ordering::Relaxed) & HANDOFF != 0 {
            return false;
        }
        let Some(claim) = osq_node() else {
            return false;
        };
        let node: &crate::osq::OsqNode = &claim;
        let mut budget = SpinBudget::new(SPIN_MAX_NS);
        // SAFETY: OSQ nodes live in never-freed thread slots (or leaked boxes under loom), and the claim
        // keeps ours out of any other queue until it drops, after `osq.unlock` below.
        if !unsafe { self.osq.lock(node, &mut budget) } {
            return false;
        }
        let mut owner = u32::MAX;
        let mut owner_budget = SpinBudget::new(OWNER_SPIN_NS);
        let mut backoff = Backoff::new(MAX_SPIN_BACKOFF);
        let got = loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & HANDOFF != 0 {
                break false;
            }
            if s & LOCKED == 0 {
                // Acquire pairs with the Release of the unlock that freed the lock.
                if self
                    .state
                    .compare_exchange(s, s | held_by(tag), Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    break true;
                }
                continue;
            }
            if s >> OWNER_SHIFT != owner {
                owner = s >> OWNER_SHIFT;
                owner_budget = SpinBudget::new(OWNER_SPIN_NS);
            }
            if owner_budget.expired() || budget.expired() {
                break false;
            }
            backoff.wait();
        };
        // SAFETY: we are the OSQ head (lock returned true) with this node.
        unsafe { self.osq.unlock(node) };
        got
    }

    /// Sleeps on the wait list until the lock is ours (`true`) or `deadline` passes (`false`).
    ///
    /// # Safety
    /// - `w` stays alive and unmoved until this returns;
    /// - `enqueue`: `w` is in no list; else `w` is already in this mutex's list (moved there by a
    ///   condvar) and was initialised by this thread for this mutex.
    pub(crate) unsafe fn wait_queued(
        &self,
        w: &Waiter,
        deadline: Option<&Deadline>,
        enqueue: bool,
    ) -> bool {
        let mut list = self.waiters();
        if enqueue {
            w.since.reset();
            // SAFETY: forwarded contract.
            unsafe { list.push_back(w) };
            // Relaxed: see "Memory orderings"; `(o,s,h,0,l) -> (o,s,h,1,l)`.
            self.state.fetch_or(WAITERS, Ordering::Relaxed);
        }
        // The first waiter spins before it sleeps, as the kernel's does: a condvar waiter requeued here,
        // or a waiter just woken, finding the lock held would otherwise sleep again at once and cost
        // another wake-up (seen on the `condvar` workload: 1-3 wake-ups per message). Cleared when a
        // spin ends with the owner holding on: the next round sleeps.
        let mut may_spin = true;
        loop {
            // Acquire pairs with the Release store of HANDED in `hand_off`.
            if w.futex.load(Ordering::Acquire) == HANDED {
                return true;
            }
            // Under wait_lock: no waker's store can land between this and our decision below.
            w.futex.store(SLEEPING, Ordering::Relaxed);
            let first = list.front().is_some_and(|f| core::ptr::eq(f, w));
            if self.take_queued(w, first, &mut list) {
                return true;
            }
            if first && w.since.older_than(HANDOFF_NS) {
                self.request_handoff();
            }
            if first && may_spin && crate::clock::time_left(deadline).is_some() {
                // Under wait_lock: from here on, unlocks leave us to see the free lock ourselves.
                w.futex.store(SPINNING, Ordering::Relaxed);
                drop(list);
                may_spin = self.spin_as_first_waiter(w);
                list = self.waiters();
                continue;
            }
            // About to sleep: announce it, so that unlocks wake us. The fetch_or is our last look at the
            // word (invariant 4): if it shows the lock takable, look again instead of sleeping.
            // Relaxed: a flag; see "Memory orderings".
            let s = self.state.fetch_or(SLEEPER, Ordering::Relaxed);
            if s & LOCKED == 0 && (first || s & HANDOFF == 0) {
                continue;
            }
            drop(list);
            let timed_out = w.sleep(deadline);
            may_spin = true;
            list = self.waiters();
            // Acquire pairs with the Release store of HANDED in `hand_off`.
            if timed_out && w.futex.load(Ordering::Acquire) != HANDED {
                let first = list.front().is_some_and(|f| core::ptr::eq(f, w));
                if self.take_queued(w, first, &mut list) {
                    return true;
                }
                // SAFETY: `w` is in this list: only a hand-off removes a waiter other than itself.
                unsafe { self.leave(w, &mut list) };
                return false;
            }
        }
    }

    /// The first waiter's spin, outside `wait_lock`, its word SPINNING (so unlocks do not wake it, nor
    /// anyone behind it): watches the state word (loads only) while the same owner holds the lock, for
    /// up to [`OWNER_SPIN_NS`]. `true` when the lock was seen free or our word changed (handed the
    /// lock). `false` when the owner held on: the caller re-takes `wait_lock`, looks again, and sleeps
    /// only after setting SLEEPER (invariant 4).
    fn spin_as_first_waiter(&self, w: &Waiter) -> bool {
        let mut budget = SpinBudget::new(OWNER_SPIN_NS);
        let mut backoff = Backoff::new(MAX_SPIN_BACKOFF);
        let owner = self.state.load(Ordering::Relaxed) >> OWNER_SHIFT;
        loop {
            // Relaxed: a hint to look again; the take under wait_lock decides (and acquires).
            let s = self.state.load(Ordering::Relaxed);
            if s & LOCKED == 0 || w.futex.load(Ordering::Relaxed) != SPINNING {
                return true;
            }
            if s >> OWNER_SHIFT != owner || budget.expired() {
                return false;
            }
            backoff.wait();
        }
    }

    /// A queued waiter's take: `(0,h,1,0) -> (me,0,w',1)`, dequeuing itself. Allowed with HANDOFF only
    /// for the first waiter (invariant 1); `w'` says whether others remain (invariant 2).
    fn take_queued(&self, w: &Waiter, first: bool, list: &mut Waiters<'_>) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED != 0 || (s & HANDOFF != 0 && !first) {
                return false;
            }
            // SLEEPER stays (it may be stale: a wasted slow unlock, which clears it) unless the list
            // empties.
            let rest = if list.is_only(w) {
                0
            } else {
                WAITERS | (s & SLEEPER)
            };
            // Acquire pairs with the Release of the unlock that freed the lock.
            match self.state.compare_exchange(
                s,
                held_by(w.tag) | rest,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // SAFETY: `w` is in this list (caller's contract).
                    unsafe { list.remove(w) };
                    return true;
                }
                Err(now) => s = now,
            }
        }
    }

    /// `(o,0,1,1) -> (o,1,1,1)`; nothing if the lock is free (the caller retries) or already
    /// requested.
    fn request_handoff(&self) {
        let mut s = self.state.load(Ordering::Relaxed);
        while s & LOCKED != 0 && s & HANDOFF == 0 {
            // Relaxed: a flag; see "Memory orderings".
            match self.state.compare_exchange_weak(
                s,
                s | HANDOFF,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    /// A timed-out waiter leaves: clears WAITERS if it was the last; if it was first, clears its own
    /// HANDOFF request, and passes the wake-up on if the lock is free (invariant 4).
    ///
    /// # Safety
    /// `w` is in `list`.
    unsafe fn leave(&self, w: &Waiter, list: &mut Waiters<'_>) {
        let was_first = list.front().is_some_and(|f| core::ptr::eq(f, w));
        // SAFETY: forwarded contract.
        unsafe { list.remove(w) };
        let clear = if list.is_empty() {
            WAITERS | SLEEPER
        } else {
            0
        } | if was_first { HANDOFF } else { 0 };
        // Relaxed: flags; see "Memory orderings".
        let s = self.state.fetch_and(!clear, Ordering::Relaxed);
        if was_first && s & LOCKED == 0 {
            self.wake_front(list);
        }
    }

    /// After an unlock that saw SLEEPER: wake the first sleeping waiter.
    #[cold]
    #[inline(never)]
    fn unlock_slow(&self) {
        self.wake_front(&mut self.waiters());
    }

    /// Direct hand-off (`unlock_fair`): `(me,h,1,1) -> (first,0,w',1)`, giving the lock to the first
    /// waiter without ever freeing it. Frees it normally if nobody waits.
    fn hand_off(&self, expected: u32) {
        let mut list = self.waiters();
        let Some(first) = list.front() else {
            drop(list);
            // Nobody waits: a plain unlock. Release pairs with the next taker's Acquire.
            let old = self.state.fetch_sub(expected, Ordering::Release);
            if old & SLEEPER != 0 {
                self.unlock_slow();
            }
            return;
        };
        let first = first as *const Waiter;
        // SAFETY: `first` is queued, hence alive until we store HANDED (invariant 5).
        let first = unsafe { &*first };
        // SAFETY: `first` is in this list.
        unsafe { list.remove(first) };
        // Invariant 6: nobody else changes the word now, so its SLEEPER is current (kept, maybe stale).
        let rest = if list.is_empty() {
            0
        } else {
            WAITERS | (self.state.load(Ordering::Relaxed) & SLEEPER)
        };
        // Invariant 6: a plain store is enough. Release: publishes our critical section to `first`.
        self.state
            .store(held_by(first.tag) | rest, Ordering::Release);
        let word = &first.futex as *const AtomicU32;
        // Release pairs with the waiter's Acquire load of HANDED. Last access to `first`.
        first.futex.store(HANDED, Ordering::Release);
        drop(list);
        futex_wake(word, 1);
    }

    /// Wakes the first waiter that is still asleep (those ahead of it are awake and will re-check),
    /// or nobody while the first waiter spins; clears SLEEPER when no other sleeper remains.
    /// Called with `wait_lock` held (the guard); the futex wake is made after the guard releases
    /// `wait_lock` ([`LockedList::wake_after_unlock`]), since the woken thread's first step is to take it.
    fn wake_front(&self, list: &mut Waiters<'_>) {
        if list
            .front()
            .is_some_and(|f| f.futex.load(Ordering::Relaxed) == SPINNING)
        {
            // The first waiter is watching the word: it sees the lock free, or it re-takes wait_lock
            // after this section and looks again before it sleeps (invariant 4). Waking a sleeper now
            // would only add a second contender (and a futex call to every unlock). SLEEPER stays.
            return;
        }
        let Some(first) = list.first_sleeping() else {
            // Relaxed: a flag. Under wait_lock, where every waiter sets it: nobody is asleep.
            self.state.fetch_and(!SLEEPER, Ordering::Relaxed);
            return;
        };
        if !list.sleeping_after(first) {
            // Relaxed, as above: `first` is the last sleeper and is about to be woken.
            self.state.fetch_and(!SLEEPER, Ordering::Relaxed);
        }
        let word = &first.futex as *const AtomicU32;
        // Release pairs with the Acquire load in `sleep` (it orders nothing the waiter needs, since
        // it re-reads everything under wait_lock, but keeps every waker store uniform).
        first.futex.store(WOKEN, Ordering::Release);
        list.wake_after_unlock(word);
    }

    /// Moves condvar waiters to the back of this mutex's wait list; wakes the front one if the mutex is
    /// free (else its unlock will, having seen WAITERS).
    ///
    /// # Safety
    /// Every waiter in `moved` stays alive until it leaves this mutex's list, and was made by its thread
    /// for waiting on this mutex.
    pub(crate) unsafe fn requeue(&self, moved: &mut WaitList) {
        if moved.is_empty() {
            return;
        }
        moved.for_each(|w| w.since.reset());
        let mut list = self.waiters();
        list.append(moved);
        // Relaxed: flag; see "Memory orderings".
        // SLEEPER: the moved waiters are asleep (or about to sleep) on their words.
        let s = self.state.fetch_or(WAITERS | SLEEPER, Ordering::Relaxed);
        if s & LOCKED == 0 {
            self.wake_front(&mut list);
        }
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
/// while its thread spins in an OSQ; issue 8, defect 11). Then the caller skips spinning and sleeps.
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
    type Target = crate::osq::OsqNode;
    fn deref(&self) -> &crate::osq::OsqNode {
        &self.slot.osq
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
pub(crate) fn osq_node() -> Option<&'static crate::osq::OsqNode> {
    loom::thread_local!(static NODE: &'static crate::osq::OsqNode = Box::leak(Box::new(crate::osq::OsqNode::new())));
    Some(NODE.with(|n| *n))
}

#[cfg(not(loom))]
// SAFETY: mutual exclusion: the lock is taken only by a CAS from a state without LOCKED, or given by a
// hand-off while held (invariant 3). Acquire/Release as documented. The token is this acquisition's
// state; a forgotten token leaves the mutex locked, which is safe. No operation unwinds while holding
// internal state (`wait_lock` is released by a drop guard).
unsafe impl lock_api::RawMutex for RawMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = MutexToken;

    #[inline]
    fn lock(&self) -> MutexToken {
        RawMutex::lock(self)
    }

    #[inline]
    fn try_lock(&self) -> Option<MutexToken> {
        RawMutex::try_lock(self)
    }

    #[inline]
    unsafe fn unlock(&self, guard: MutexToken) {
        // SAFETY: forwarded from the caller.
        unsafe { RawMutex::unlock(self, guard) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawMutex::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: `unlock_fair` hands the lock to the first waiter without freeing it (same exclusion argument).
unsafe impl lock_api::RawMutexFair for RawMutex {
    #[inline]
    unsafe fn unlock_fair(&self, guard: MutexToken) {
        // SAFETY: forwarded from the caller.
        unsafe { RawMutex::unlock_fair(self, guard) }
    }
}

#[cfg(not(loom))]
// SAFETY: a timed-out attempt leaves the wait list and returns `None` holding nothing (or returns the
// lock if a hand-off reached it first).
unsafe impl lock_api::RawMutexTimed for RawMutex {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    fn try_lock_for(&self, timeout: std::time::Duration) -> Option<MutexToken> {
        match std::time::Instant::now().checked_add(timeout) {
            Some(deadline) => self.lock_until(&deadline),
            None => Some(self.lock()),
        }
    }

    fn try_lock_until(&self, deadline: std::time::Instant) -> Option<MutexToken> {
        self.lock_until(&deadline)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

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

    /// SLEEPER's life: set by waiters that go to sleep behind a held lock, kept while any of them still
    /// sleeps (else a waiter is never woken: the test fails after 10 s instead of hanging), and gone
    /// from the word once every waiter has taken the lock and left.
    #[test]
    fn sleeper_set_by_sleeping_waiters_and_gone_when_they_leave() {
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
                eventually(|| m.state.load(Ordering::Relaxed) & SLEEPER != 0),
                "{waiters} waiter(s) behind a held lock never announced a sleep"
            );
            // Let the others get to sleep too, so that one unlock finds several asleep (the waker must
            // keep SLEEPER for the ones it does not wake).
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
}
