//! The adaptive futex mutex: the kernel's `struct mutex` design in userspace.
//!
//! # Algorithm (after the kernel's `kernel/locking/mutex.c` and `Documentation/locking/mutex-design.rst`)
//! 1. **Fast path**: `cas(state: 0 -> me|LOCKED)` to lock, `cas(me|LOCKED -> 0)` to unlock. One RMW each.
//! 2. **Optimistic spinning** (seed 001: the 12x of adaptive spinning over sleeping): a contender joins
//!    the lock's [`Osq`], so only the OSQ head spins on the lock word; the head takes the lock the moment
//!    it is free. It stops when a hand-off is pending or its budget runs out (then it unqueues; see
//!    [`crate::osq`]).
//! 3. **Sleeping**: a FIFO [`WaitList`] under the small internal `wait_lock`; each waiter sleeps on its
//!    own futex word. Unlock with WAITERS set wakes the first waiter, which retries (it can lose to a
//!    spinner: that is what keeps the lock busy and fast).
//! 4. **Hand-off** (kernel v4.10): a first waiter that has waited longer than [`HANDOFF_NS`] sets HANDOFF.
//!    From then on nobody may take the free lock; the next unlock writes the waiter's tag into the
//!    state word and marks its node HANDED: the lock moves without ever being free. `unlock_fair` always
//!    hands off when there are waiters.
//!
//! # "Is the owner running?"
//! The kernel spins only while the owner is on a CPU; userspace cannot ask. Our stand-in: the owner's
//! tag is in the state word, and a spinner spins while the **owner is unchanged for at most
//! [`OWNER_SPIN_NS`]**, re-arming whenever the lock changes hands (an owner that keeps it longer is
//! probably preempted or in a long section: sleep), within an overall cap of [`SPIN_MAX_NS`] per
//! acquisition. Measured with the lab (`locklab bench --workload mutex`) against two other choices:
//! a fixed spin count regardless of owner changes, and no spinning; see the README's Mutex section.
//!
//! # State word
//! | bits  | name      | meaning                                                               |
//! |-------|-----------|-----------------------------------------------------------------------|
//! | 0     | LOCKED    | held                                                                  |
//! | 1     | WAITERS   | the wait list is not empty: unlock must wake (or hand off)            |
//! | 2     | HANDOFF   | the first waiter asked for the lock: no stealing, unlock hands it over |
//! | 3-31  | owner tag | the holder's thread tag (0 when free)                                 |
//!
//! Transitions, as `(owner, H, W, L)`:
//! - fast lock `(0,0,0,0) -> (me,0,0,1)`; fast unlock `(me,0,0,1) -> (0,0,0,0)`
//! - spinner / waiter take: `(0,0,w,0) -> (me,0,w',1)`
//! - enqueue: `(o,h,0,l) -> (o,h,1,l)`; request hand-off: `(o,0,1,1) -> (o,1,1,1)`
//! - unlock with waiters: `(me,0,1,1) -> (0,0,1,0)`, then wake the first waiter
//! - hand-off: `(me,1,1,1) -> (first,0,w',1)` with `first` marked HANDED
//!
//! # Invariants
//! 1. HANDOFF implies LOCKED: it is set only by CAS on a locked word, and every unlock that sees it hands
//!    off instead of freeing. A leaving (timed-out) first waiter clears its own request.
//! 2. Under `wait_lock`, WAITERS is set iff the wait list is non-empty.
//! 3. While LOCKED and `wait_lock` are both held, nobody else can change the state word (every other
//!    writer either needs the lock free or holds `wait_lock`), so the hand-off may use a plain store.
//! 4. A waiter returns only after it is out of the list: removed by itself under `wait_lock`, or by a
//!    hand-off whose last access to it is the HANDED store (see [`crate::wait_list`]).
//! 5. Whenever the lock is free and the list non-empty, some waiter is awake or about to be: each unlock
//!    that saw WAITERS wakes the front, and a front waiter that leaves on timeout wakes its successor.
//!
//! # Memory orderings
//! - Every successful take (CAS) is Acquire; it pairs with the Release of the unlock CAS (or the hand-off
//!   store) that last freed or passed the lock.
//! - Hand-off: `state.store(Release)` then `futex.store(HANDED, Release)`; the waiter's Acquire load of
//!   HANDED sees the previous critical section.
//! - Flag updates (WAITERS, HANDOFF) are Relaxed RMWs: they publish no data; the list they describe is
//!   protected by `wait_lock`, and who owns the lock is decided by the Acquire/Release CASes above.

use crate::clock::{Deadline, SpinBudget, time_left};
use crate::osq::Osq;
use crate::primitive::{AtomicU32, Ordering, spin_loop};
use crate::spin::tas::RawTasLock;
use crate::sys::{futex_wait, futex_wake};
use crate::wait_list::{HANDED, SLEEPING, WOKEN, WaitList, Waiter};
use core::cell::UnsafeCell;
use core::marker::PhantomData;

/// Held.
const LOCKED: u32 = 1 << 0;
/// The wait list is non-empty.
const WAITERS: u32 = 1 << 1;
/// The first waiter asked for the lock to be handed to it.
const HANDOFF: u32 = 1 << 2;
/// The owner tag lives above the flags.
const OWNER_SHIFT: u32 = 3;
/// Owner tags are 29-bit, never 0.
const TAG_MASK: u32 = (1 << (32 - OWNER_SHIFT)) - 1;

/// A spinner gives up after the same owner has held the lock this long (ns).
pub const OWNER_SPIN_NS: u64 = 10_000;
/// Overall cap on optimistic spinning per acquisition, OSQ wait included (ns).
pub const SPIN_MAX_NS: u64 = 40_000;
/// A first waiter that has waited this long asks for hand-off (ns). The kernel's rwsem uses 4 ms; we
/// pick 1 ms so that a starved waiter waits at most a few milliseconds even on a loaded 2-CPU VM.
pub const HANDOFF_NS: u64 = 1_000_000;

/// The calling thread's owner tag: small, non-zero, stable for the thread's life.
#[inline]
pub(crate) fn current_tag() -> u32 {
    #[cfg(not(loom))]
    std::thread_local!(static TAG: core::cell::Cell<u32> = const { core::cell::Cell::new(0) });
    #[cfg(loom)]
    loom::thread_local!(static TAG: core::cell::Cell<u32> = core::cell::Cell::new(0));
    let t = TAG.with(|t| t.get());
    if t != 0 {
        return t;
    }
    #[cold]
    fn assign(cell: &core::cell::Cell<u32>) -> u32 {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        loop {
            // Relaxed: tags only need to differ between live threads most of the time (they are a
            // spinning heuristic and a hand-off target name, never a proof of ownership).
            let t = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & TAG_MASK;
            if t != 0 {
                cell.set(t);
                return t;
            }
        }
    }
    TAG.with(assign)
}

/// The state word value of a lock held by `tag` with no flags.
#[inline]
const fn held_by(tag: u32) -> u32 {
    (tag << OWNER_SHIFT) | LOCKED
}

/// Guard state of [`RawMutex`]: the state word value a flag-free unlock expects. Not `Send`, as std's
/// guard is not: the owner tag names the locking thread.
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

    /// The token of an acquisition by the calling thread.
    #[inline]
    pub(crate) fn for_current_thread() -> Self {
        Self::new(current_tag())
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
struct Waiters<'a> {
    mutex: &'a RawMutex,
}

impl core::ops::Deref for Waiters<'_> {
    type Target = WaitList;
    fn deref(&self) -> &WaitList {
        // SAFETY: `wait_lock` is held for this guard's life.
        unsafe { &*self.mutex.waiters.get() }
    }
}

impl core::ops::DerefMut for Waiters<'_> {
    fn deref_mut(&mut self) -> &mut WaitList {
        // SAFETY: `wait_lock` is held for this guard's life, and `&mut self` makes this access unique.
        unsafe { &mut *self.mutex.waiters.get() }
    }
}

impl Drop for Waiters<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took `wait_lock`.
        unsafe { self.mutex.wait_lock.unlock() }
    }
}

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
        self.wait_lock.lock();
        Waiters { mutex: self }
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
        // Release pairs with the Acquire of whoever takes the lock next.
        if self
            .state
            .compare_exchange(token.expected, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow(false);
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
            self.unlock_slow(true);
        }
    }

    /// Whether the lock is held (a snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// `(0,0,w,0) -> (me,0,w,1)`.
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
        let Some(node) = osq_node() else { return false };
        let mut budget = SpinBudget::new(SPIN_MAX_NS);
        // SAFETY: OSQ nodes live in never-freed thread slots (or leaked boxes under loom).
        if !unsafe { self.osq.lock(node, &mut budget) } {
            return false;
        }
        let mut owner = u32::MAX;
        let mut owner_budget = SpinBudget::new(OWNER_SPIN_NS);
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
            spin_loop();
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
            // Relaxed: see "Memory orderings"; `(o,h,0,l) -> (o,h,1,l)`.
            self.state.fetch_or(WAITERS, Ordering::Relaxed);
        }
        loop {
            // Acquire pairs with the Release store of HANDED in `hand_off`.
            if w.futex.load(Ordering::Acquire) == HANDED {
                return true;
            }
            // Under wait_lock, so no waker's store can be lost between this and the check below.
            w.futex.store(SLEEPING, Ordering::Relaxed);
            if self.take_queued(w, &mut list) {
                return true;
            }
            let first = list.front().is_some_and(|f| core::ptr::eq(f, w));
            if first && w.since.older_than(HANDOFF_NS) && self.request_handoff() {
                continue; // the lock was free after all: take it
            }
            drop(list);
            let timed_out = Self::sleep(w, deadline);
            list = self.waiters();
            // Acquire pairs with the Release store of HANDED in `hand_off`.
            if timed_out && w.futex.load(Ordering::Acquire) != HANDED {
                if self.take_queued(w, &mut list) {
                    return true;
                }
                // SAFETY: `w` is in this list: only a hand-off removes a waiter other than itself.
                unsafe { self.leave(w, &mut list) };
                return false;
            }
        }
    }

    /// Sleeps until woken; returns `true` if `deadline` passed first.
    fn sleep(w: &Waiter, deadline: Option<&Deadline>) -> bool {
        loop {
            // Acquire pairs with the Release stores of WOKEN/HANDED by wakers.
            if w.futex.load(Ordering::Acquire) != SLEEPING {
                return false;
            }
            match time_left(deadline) {
                None => return true,
                Some(left) => {
                    futex_wait(&w.futex, SLEEPING, left);
                }
            }
        }
    }

    /// A queued waiter's take: `(0,0,w,0) -> (me,0,w',1)`, dequeuing itself; `w'` says whether others
    /// remain (invariant 2).
    fn take_queued(&self, w: &Waiter, list: &mut Waiters<'_>) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED != 0 {
                return false;
            }
            debug_assert_eq!(s & HANDOFF, 0, "HANDOFF on a free mutex (invariant 1)");
            let rest = if list.is_only(w) { 0 } else { WAITERS };
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

    /// `(o,0,1,1) -> (o,1,1,1)`. Returns `true` if the lock turned out to be free instead.
    fn request_handoff(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED == 0 {
                return true;
            }
            if s & HANDOFF != 0 {
                return false;
            }
            // Relaxed: a flag; see "Memory orderings".
            match self.state.compare_exchange_weak(
                s,
                s | HANDOFF,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return false,
                Err(now) => s = now,
            }
        }
    }

    /// A timed-out waiter leaves: clears WAITERS if it was the last, its own HANDOFF request if it was
    /// first, and passes a wake-up on if the lock is free (invariant 5).
    ///
    /// # Safety
    /// `w` is in `list`.
    unsafe fn leave(&self, w: &Waiter, list: &mut Waiters<'_>) {
        let was_first = list.front().is_some_and(|f| core::ptr::eq(f, w));
        // SAFETY: forwarded contract.
        unsafe { list.remove(w) };
        let clear = if list.is_empty() { WAITERS } else { 0 } | if was_first { HANDOFF } else { 0 };
        // Relaxed: flags; see "Memory orderings".
        let s = self.state.fetch_and(!clear, Ordering::Relaxed);
        if s & LOCKED == 0 && was_first {
            Self::wake_front(list);
        }
    }

    /// Unlock with flags set.
    #[cold]
    #[inline(never)]
    fn unlock_slow(&self, fair: bool) {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & HANDOFF != 0 || (fair && s & WAITERS != 0) {
                return self.hand_off();
            }
            // `(me,0,w,1) -> (0,0,w,0)`. Release pairs with the next taker's Acquire.
            match self.state.compare_exchange_weak(
                s,
                s & WAITERS,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if s & WAITERS != 0 {
            Self::wake_front(&mut self.waiters());
        }
    }

    /// `(me,1,1,1) -> (first,0,w',1)`: gives the lock to the first waiter without freeing it.
    fn hand_off(&self) {
        let mut list = self.waiters();
        let Some(first) = list.front() else {
            // No waiter (it timed out): nobody else can touch the word (invariant 3): free it.
            // Release pairs with the next taker's Acquire.
            self.state.store(0, Ordering::Release);
            return;
        };
        let first = first as *const Waiter;
        // SAFETY: `first` is queued, hence alive until we store HANDED (invariant 4).
        let first = unsafe { &*first };
        // SAFETY: `first` is in this list.
        unsafe { list.remove(first) };
        let rest = if list.is_empty() { 0 } else { WAITERS };
        // Invariant 3: a plain store is enough. Release: publishes our critical section to `first`.
        self.state
            .store(held_by(first.tag) | rest, Ordering::Release);
        let word = &first.futex as *const AtomicU32;
        // Release pairs with the waiter's Acquire load of HANDED. Last access to `first`.
        first.futex.store(HANDED, Ordering::Release);
        drop(list);
        futex_wake(word, 1);
    }

    /// Wakes the first waiter, if it sleeps. Takes the list guard so the store happens under wait_lock;
    /// the wake syscall happens after the caller drops it.
    fn wake_front(list: &mut Waiters<'_>) {
        if let Some(first) = list.front() {
            let word = &first.futex as *const AtomicU32;
            // Release pairs with the Acquire load in `sleep` (it orders nothing the waiter needs, since
            // it re-reads everything under wait_lock, but keeps every waker store uniform).
            if first.futex.swap(WOKEN, Ordering::Release) == SLEEPING {
                futex_wake(word, 1);
            }
        }
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
        let s = self.state.fetch_or(WAITERS, Ordering::Relaxed);
        if s & LOCKED == 0 {
            Self::wake_front(&mut list);
        }
    }
}

#[cfg(not(loom))]
impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

/// This thread's OSQ node.
#[cfg(not(loom))]
fn osq_node() -> Option<&'static crate::osq::OsqNode> {
    crate::thread_slot::current().map(|s| &s.osq)
}

/// This thread's OSQ node: leaked per model thread, since nodes must be type-stable.
#[cfg(loom)]
fn osq_node() -> Option<&'static crate::osq::OsqNode> {
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
