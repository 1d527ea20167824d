//! The mutex's slow paths: optimistic spinning (the OSQ, then the owner's word), sleeping in FIFO
//! order, the hand-off a starved waiter requests, and the unlock that wakes or hands over.

use super::*;

impl RawMutex {
    /// Spin, then sleep. Returns `false` only if `deadline` passed first.
    #[cold]
    #[inline(never)]
    pub(super) fn lock_slow(&self, tag: u32, deadline: Option<&Deadline>) -> bool {
        // A WAKING left on the word by a parent's woken waiter that the fork did not copy: nobody in
        // this process will take it off (the spinner's take keeps it), and every fast path would
        // fail on it. A list lock untouched since the fork says so: no waiter of ours was ever
        // queued, so none of ours was woken. `waiters` clears the parent's flags under it.
        // Relaxed: a hint; the clearing happens under `wait_lock`.
        if self.state.load(Ordering::Relaxed) & WAKING != 0 && self.wait_lock.is_stale() {
            drop(self.waiters());
        }
        // Spin only while nobody sleeps: a locker that arrives behind sleepers queues behind them.
        // Spinning then would only keep a CPU from the holder and from the woken waiter when threads
        // outnumber CPUs (the condvar herd), and barge past waiters that have waited longer.
        // Relaxed: a hint; the take and the last look in `wait_queued` decide.
        if self.state.load(Ordering::Relaxed) & WAITERS == 0 && self.spin(tag) {
            return true;
        }
        let waiter = Waiter::new(tag);
        // SAFETY: `waiter` is in no list, and lives on this frame until `wait_queued` returns, which it
        // does only once the waiter is out of the list (invariant 5).
        unsafe { self.wait_queued(&waiter, deadline, false) }
    }

    /// A woken waiter's spin, on the word itself (no OSQ: it goes first); its take clears WAKING.
    /// `true` with the lock held.
    pub(super) fn spin_woken(&self, tag: u32) -> bool {
        self.spin_on_word(tag, WAKING, &mut SpinBudget::new(SPIN_MAX_NS), None)
    }

    /// The spin on the lock word (the OSQ head's, or a woken waiter's): looks while the same owner
    /// holds the lock, for up to [`OWNER_SPIN_NS`] per owner, until `budget` runs out or a hand-off is
    /// pending; takes the lock the moment it is free, `(0,0,k,w,s,0) -> (me,0,k & !clear,w,0,1)`.
    /// Between looks it pauses (backing off), or yields while the holder re-locks at once (see
    /// "When to yield between looks"); `relocking` carries that rhythm from one spin of this thread
    /// to its next on the same lock. `true` with the lock held.
    pub(super) fn spin_on_word(
        &self,
        tag: u32,
        clear: u32,
        budget: &mut SpinBudget,
        relocking: Option<&core::cell::Cell<usize>>,
    ) -> bool {
        let me = self as *const RawMutex as usize;
        let mut owner = u32::MAX;
        let mut owner_budget = SpinBudget::new(OWNER_SPIN_NS);
        let mut backoff = Backoff::new(MAX_SPIN_BACKOFF);
        // Yield between looks (the holder re-locks at once); else pause, backing off.
        let mut relocked = relocking.is_some_and(|r| r.get() == me);
        // We set SPUN on the hold our previous look saw.
        let mut marked = false;
        // `pause`s between our previous look and this one (`u32::MAX`: a yield, or none before).
        let mut gap = u32::MAX;
        // While yielding: what this look is (a lone look, or the first or second of a pair).
        let mut look = Look::Pair1;
        // Yields since the last pair.
        let mut yields = 0u32;
        let got = loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & HANDOFF != 0 {
                break false;
            }
            if s & LOCKED == 0 {
                // Acquire pairs with the Release of the unlock that freed the lock.
                if self
                    .state
                    .compare_exchange(
                        s,
                        (s & !(clear | SPUN)) | held_by(tag),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    break true;
                }
                marked = false;
                // Lost to another locker: the spin budget still bounds a waiter that keeps losing.
                if budget.expired() {
                    break false;
                }
                gap = 0;
                continue;
            }
            {
                let quick = cfg!(loom) || gap <= QUICK_GAP;
                // Mark only where the next look can tell: the first of a pair while yielding, else
                // while the next wait is quick (later looks of a backoff are loads, as before).
                let marks = if relocked {
                    look == Look::Pair1
                } else {
                    cfg!(loom) || backoff.next_pauses().is_some_and(|p| p <= QUICK_GAP)
                };
                if s & SPUN == 0 {
                    // The hold our previous look marked has ended: released and taken again.
                    if marked && quick {
                        relocked = true;
                    }
                    // Relaxed: SPUN is a hint (invariant 8); the compare-and-swap from `s` sets it only
                    // on the held word we saw.
                    marked = marks
                        && self
                            .state
                            .compare_exchange(s, s | SPUN, Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok();
                } else if relocked && marked && quick {
                    // The hold we marked lasts: quick looks again, from the first step.
                    relocked = false;
                    backoff = Backoff::new(MAX_SPIN_BACKOFF);
                }
                if !marks {
                    marked = false;
                }
            }
            if s >> OWNER_SHIFT != owner {
                owner = s >> OWNER_SHIFT;
                owner_budget = SpinBudget::new(OWNER_SPIN_NS);
            }
            if owner_budget.expired() || budget.expired() {
                break false;
            }
            if relocked {
                if look == Look::Pair1 {
                    crate::primitive::pause_n(PAIR_GAP);
                    gap = PAIR_GAP;
                    look = Look::Pair2;
                } else {
                    crate::primitive::yield_now();
                    gap = u32::MAX;
                    yields += 1;
                    look = if yields >= PAIR_EVERY {
                        yields = 0;
                        Look::Pair1
                    } else {
                        Look::Lone
                    };
                }
            } else {
                look = Look::Pair1;
                yields = 0;
                gap = backoff.next_pauses().unwrap_or(u32::MAX);
                backoff.wait();
            }
        };
        if let Some(r) = relocking {
            r.set(if relocked { me } else { 0 });
        }
        got
    }

    /// Optimistic spinning through the OSQ. Returns `true` with the lock held.
    pub(super) fn spin(&self, tag: u32) -> bool {
        if self.state.load(Ordering::Relaxed) & HANDOFF != 0 {
            return false;
        }
        let mut budget = SpinBudget::new(SPIN_MAX_NS);
        // While another spinner is queued, wait outside the queue (unordered: a queue of spinners
        // convoys behind a preempted member when threads outnumber CPUs), taking the lock if it is
        // seen free, pausing then yielding between looks.
        let mut wait = crate::primitive::SpinWait::with_spins(OSQ_WAIT_SPINS);
        while self.osq.is_busy() {
            let s = self.state.load(Ordering::Relaxed);
            if s & (HANDOFF | WAITERS) != 0 || budget.expired() {
                return false;
            }
            // Acquire pairs with the Release of the unlock that freed the lock.
            if s & LOCKED == 0
                && self
                    .state
                    .compare_exchange(
                        s,
                        (s & !SPUN) | held_by(tag),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                return true;
            }
            wait.wait();
        }
        let Some(claim) = osq_node() else {
            return false;
        };
        let node: &crate::sleep::osq::OsqNode = &claim;
        // SAFETY: OSQ nodes live in never-freed thread slots (or leaked boxes under loom), and the claim
        // keeps ours out of any other queue until it drops, after `osq.unlock` below.
        if !unsafe { self.osq.lock(node, &mut budget) } {
            return false;
        }
        // K stays: the spinner's next lock goes the slow way too while a woken waiter competes.
        // The thread's rhythm hint lives in its slot (a model thread's own cell under loom).
        #[cfg(not(loom))]
        let got = self.spin_on_word(tag, 0, &mut budget, claim.relocking());
        #[cfg(loom)]
        let got = loom_relocking::HINT.with(|r| self.spin_on_word(tag, 0, &mut budget, Some(r)));
        // SAFETY: we are the OSQ head (lock returned true) with this node.
        unsafe { self.osq.unlock(node) };
        got
    }

    /// Sleeps on the wait list, competing for the word after each wake-up, until the lock is ours
    /// (`true`) or `deadline` passes (`false`).
    ///
    /// The list holds only sleepers: a waiter queues (under `wait_lock`) only to sleep, and whoever
    /// wakes it dequeues it first. A woken waiter competes on the word like any locker, without
    /// `wait_lock`: it tries the word, spins (as a fresh locker does), and queues again only to sleep,
    /// at the front (it keeps its place, so the list stays FIFO), unless another waiter's hand-off
    /// is pending, which must stay first. A front waiter older than [`HANDOFF_NS`] requests hand-off
    /// as it queues; from then on only it may take the lock (`handoff` below).
    ///
    /// # Safety
    /// - `w` stays alive and unmoved until this returns;
    /// - `queued`: `w` was moved into this mutex's list by a condvar (it may since have been woken or
    ///   handed the lock), made by this thread for this mutex; else `w` is in no list.
    pub(crate) unsafe fn wait_queued(
        &self,
        w: &Waiter,
        deadline: Option<&Deadline>,
        mut queued: bool,
    ) -> bool {
        // HANDOFF is ours: we set it as the front waiter; our take clears it (or `leave`).
        let mut handoff = false;
        // Been through the list already: spin again before re-queueing, and re-queue at the front.
        let mut woken = queued;
        // We set WAKING and have not withdrawn it (our take, re-queue or time-out does).
        let mut waking = false;
        loop {
            if queued {
                let timed_out = w.sleep(deadline);
                // Acquire pairs with the Release store of HANDED in `hand_off`.
                let word = w.futex.load(Ordering::Acquire);
                if word == HANDED {
                    return true;
                }
                if timed_out && word == SLEEPING {
                    let mut list = self.waiters();
                    // Relaxed: wakers store under wait_lock, which we hold: still SLEEPING means
                    // still queued.
                    if w.futex.load(Ordering::Relaxed) == SLEEPING {
                        // SAFETY: `w` is in this list (SLEEPING under wait_lock).
                        unsafe { self.leave(w, handoff, &mut list) };
                        return false;
                    }
                    drop(list);
                    // Acquire, as above: a hand-off may have come in between.
                    if w.futex.load(Ordering::Acquire) == HANDED {
                        return true;
                    }
                }
                // WOKEN: dequeued by the waker; compete like any locker.
                queued = false;
                woken = true;
                // Running again: close the fast path until we take the lock or queue again, so the
                // thread that just unlocked cannot re-lock at once before we get a look (it goes the
                // slow way). `(o,h,k,w,l) -> (o,h,1,w,l)`. Relaxed: a hint; see "Memory orderings".
                self.state.fetch_or(WAKING, Ordering::Relaxed);
                waking = true;
            }
            // `take` and `spin_woken` clear WAKING with their take.
            if self.take(w.tag, handoff) {
                return true;
            }
            // A waiter whose hand-off is pending does not give up here: it queues, and its sleep
            // (already timed out) takes it out through `leave`, which passes the hand-off on.
            if !handoff && crate::clock::time_left(deadline).is_none() {
                if waking {
                    // Relaxed: a hint, as where it was set.
                    self.state.fetch_and(!WAKING, Ordering::Relaxed);
                }
                return false;
            }
            if woken && !handoff && self.spin_woken(w.tag) {
                return true;
            }
            let mut list = self.waiters();
            // Under wait_lock: no waker can store between this and our decision below.
            w.futex.store(SLEEPING, Ordering::Relaxed);
            // Relaxed: HANDOFF changes under wait_lock (set) or by its owner's take (cleared), and a
            // stale "set" only sends us to the back.
            let pending = self.state.load(Ordering::Relaxed) & HANDOFF != 0;
            if woken && (handoff || !pending) {
                // SAFETY: `w` is in no list (dequeued by its waker, or never queued) and outlives its
                // stay (caller's contract).
                unsafe { list.push_front(w) };
            } else {
                // SAFETY: as above.
                unsafe { list.push_back(w) };
            }
            if !handoff
                && list.front().is_some_and(|f| ptr::eq(f, w))
                && w.since.older_than(HANDOFF_NS)
            {
                handoff = self.request_handoff();
            }
            // The last look (invariant 4): a fetch_or, so that the unlock that frees the lock after it
            // sees WAITERS. `(o,h,k,w,l) -> (o,h,k,1,l)`. Relaxed: a flag; see "Memory orderings".
            // A woken waiter withdraws its WAKING in the same RMW: `(o,h,k,w,l) -> (o,h,0,1,l)`.
            let s = if waking {
                waking = false;
                match self
                    .state
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                        Some((s & !WAKING) | WAITERS)
                    }) {
                    Ok(s) | Err(s) => s,
                }
            } else {
                self.state.fetch_or(WAITERS, Ordering::Relaxed)
            };
            if s & LOCKED == 0 && (s & HANDOFF == 0 || handoff) {
                // Takable: leave the list again and compete.
                // SAFETY: pushed above, under this same wait_lock section.
                unsafe { list.remove(w) };
                if list.is_empty() {
                    // Relaxed: a flag, under wait_lock (invariant 2).
                    self.state.fetch_and(!WAITERS, Ordering::Relaxed);
                }
                continue;
            }
            drop(list);
            queued = true;
        }
    }

    /// `(o,0,k,1,1) -> (o,1,k,1,1)`: asks for the lock to be kept for us. `true` if we set HANDOFF;
    /// `false` if the lock is free (the caller retries) or another hand-off is pending. Called by the
    /// front waiter under `wait_lock`.
    pub(super) fn request_handoff(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        while s & LOCKED != 0 && s & HANDOFF == 0 {
            // Relaxed: a flag; see "Memory orderings".
            match self.state.compare_exchange_weak(
                s,
                s | HANDOFF,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// A timed-out waiter leaves the list: clears WAITERS if it was the last; if its hand-off was
    /// pending, clears HANDOFF and, if the lock is free, wakes the front waiter (which may have gone
    /// to sleep on seeing our HANDOFF over a free lock).
    ///
    /// # Safety
    /// `w` is in `list`.
    pub(super) unsafe fn leave(&self, w: &Waiter, handoff: bool, list: &mut Waiters<'_>) {
        // SAFETY: forwarded contract.
        unsafe { list.remove(w) };
        let clear = if list.is_empty() { WAITERS } else { 0 } | if handoff { HANDOFF } else { 0 };
        // Relaxed: flags; see "Memory orderings".
        let s = self.state.fetch_and(!clear, Ordering::Relaxed);
        if handoff && s & LOCKED == 0 {
            self.wake_front(list);
        }
    }

    /// After an unlock that saw WAITERS or SPUN (`freed` is the word it left): clears SPUN, then wakes
    /// the front waiter if WAITERS was set.
    #[cold]
    #[inline(never)]
    pub(super) fn unlock_flagged(&self, freed: u32) {
        if freed & SPUN != 0 {
            // Unconditional: SPUN set since (a spinner's mark on a newer hold) only loses a hint, and
            // no free word keeps SPUN past this (invariant 8). Relaxed: a hint.
            self.state.fetch_and(!SPUN, Ordering::Relaxed);
        }
        if freed & WAITERS != 0 {
            self.unlock_slow();
        }
    }

    /// After an unlock that saw WAITERS: wake the front waiter.
    #[cold]
    #[inline(never)]
    pub(super) fn unlock_slow(&self) {
        self.wake_front(&mut self.waiters());
    }

    /// Direct hand-off (`unlock_fair`): `(me,h,k,1,1) -> (first,0,0,w',1)`, giving the lock to the first
    /// waiter without ever freeing it. Frees it normally if nobody waits.
    pub(super) fn hand_off(&self, expected: u32) {
        let mut list = self.waiters();
        let Some(first) = list.front() else {
            drop(list);
            // Nobody waits: a plain unlock. Release pairs with the next taker's Acquire.
            let old = self.state.fetch_sub(expected, Ordering::Release);
            if old & (WAITERS | SPUN) != 0 {
                self.unlock_flagged(old - expected);
            }
            return;
        };
        let first = first as *const Waiter;
        // SAFETY: `first` is queued, hence alive until we store HANDED (invariant 5).
        let first = unsafe { &*first };
        // SAFETY: `first` is in this list.
        unsafe { list.remove(first) };
        // HANDOFF, WAKING and SPUN, if set, are cleared. HANDOFF was set by `first` (the front
        // waiter) or by a waiter woken since, which keeps its `handoff` and takes a free lock like any waiter: only
        // the order of service is at stake. Invariant 6: a plain store is enough.
        let rest = if list.is_empty() { 0 } else { WAITERS };
        // Release: publishes our critical section to `first`.
        self.state
            .store(held_by(first.tag) | rest, Ordering::Release);
        let word = &first.futex as *const AtomicU32;
        // Release pairs with the waiter's Acquire load of HANDED. Last access to `first`.
        first.futex.store(HANDED, Ordering::Release);
        drop(list);
        futex_wake(word, 1);
    }

    /// Dequeues and wakes the front waiter (its word SLEEPING -> WOKEN), clearing WAITERS if the list
    /// empties, unless the lock has been taken again in the meantime: its holder's unlock will see
    /// WAITERS (invariant 4) and wake then, so a wake-up now would only find the lock held. A front
    /// waiter old enough for hand-off is woken anyway, so that it can ask for it (else spinners that
    /// keep the lock busy could starve it). Called with `wait_lock` held (the guard); the futex wake
    /// is made after the guard releases `wait_lock` ([`LockedList::wake_after_unlock`]), since the
    /// woken thread may need it.
    pub(super) fn wake_front(&self, list: &mut Waiters<'_>) {
        let Some(first) = list.front() else {
            return;
        };
        // Relaxed: a hint; correctness rests on WAITERS being seen by the holder's unlock.
        if self.state.load(Ordering::Relaxed) & LOCKED != 0 && !first.since.older_than(HANDOFF_NS) {
            return;
        }
        let first = first as *const Waiter;
        // SAFETY: `first` is queued, hence alive until our WOKEN store (invariant 5).
        let first = unsafe { &*first };
        // SAFETY: `first` is in this list.
        unsafe { list.remove(first) };
        if list.is_empty() {
            // Relaxed: a flag, under wait_lock (invariant 2).
            self.state.fetch_and(!WAITERS, Ordering::Relaxed);
        }
        let word = &first.futex as *const AtomicU32;
        // Release pairs with the Acquire load in `sleep` (it orders nothing the waiter needs, since
        // it competes on the word afresh, but keeps every waker store uniform). Last access to `first`.
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
        // Relaxed: flag; see "Memory orderings". The moved waiters are asleep on their words.
        let s = self.state.fetch_or(WAITERS, Ordering::Relaxed);
        if s & LOCKED == 0 {
            self.wake_front(&mut list);
        }
    }
}

/// A look while yielding between looks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Look {
    /// After a yield, with no mark.
    Lone,
    /// After a yield: marks the hold.
    Pair1,
    /// `PAIR_GAP` `pause`s after the first: tells a hold that lasts from a re-lock.
    Pair2,
}

/// Under loom, each model thread's rhythm hint (the thread slot's field on hardware).
#[cfg(loom)]
pub(crate) mod loom_relocking {
    loom::thread_local!(pub(crate) static HINT: core::cell::Cell<usize> = core::cell::Cell::new(0));
}
