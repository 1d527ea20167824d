//! Ticket spinlock: strict FIFO, and an unlock that is a plain store.
//!
//! # Algorithm
//! Two 16-bit counters in one 32-bit word: `next`, the next ticket to hand out, and `served`, the ticket
//! now allowed in. Lock: take a ticket with `next.fetch_add(1)` and wait until `served` equals it. Unlock:
//! only the holder writes `served`, so unlock is a *release store* of `served + 1`: no locked instruction
//! (seed 000: `spin_unlock` is a store, `read_unlock` a bus-locked RMW).
//!
//! The two halves are separate [`AtomicU16`]s, not one `AtomicU32` written in halves: Rust's memory model
//! does not allow racing atomic accesses of different sizes to the same bytes, so every access here is a
//! 16-bit one. `try_lock` needs no whole-word CAS either (see its comment).
//!
//! # Properties
//! Strict FIFO by ticket. Every waiter polls the same line, so each hand-over invalidates it in every
//! waiter's cache (MCS and the queued spinlock avoid that). Up to 65,535 waiters.
//! A preempted waiter stalls everyone behind it until it runs again (FIFO cannot skip it): waiters yield
//! the CPU after [`SpinWait::SPINS`] steps so that the preempted one gets it back sooner.
//!
//! # State
//! | word      | bits   | meaning                         |
//! |-----------|--------|---------------------------------|
//! | `served`  | 0-15   | ticket now holding the lock     |
//! | `next`    | 16-31  | next ticket to hand out         |
//!
//! `next == served`: free. `next - served = n > 0`: held, with `n - 1` waiters.
//!
//! # Memory orderings
//! The waiter's Acquire load of `served` that sees its ticket pairs with the Release store in `unlock`.

use crate::primitive::{AtomicU16, Ordering, SpinWait};

/// A ticket spinlock. See the [module documentation](self).
#[repr(C, align(4))]
pub struct RawTicketLock {
    served: AtomicU16,
    next: AtomicU16,
}

impl RawTicketLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawTicketLock {
            served: AtomicU16::new(0),
            next: AtomicU16::new(0),
        }
    }

    /// A new, unlocked lock (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawTicketLock {
            served: AtomicU16::new(0),
            next: AtomicU16::new(0),
        }
    }

    /// Takes a ticket and waits for it to be served.
    #[inline]
    pub fn lock(&self) {
        // Relaxed: the ticket number is all we need from this RMW; the Acquire is on `served`.
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        // Acquire pairs with the Release store in `unlock`.
        if self.served.load(Ordering::Acquire) != ticket {
            self.wait_for(ticket);
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_for(&self, ticket: u16) {
        let mut wait = SpinWait::new();
        // Acquire pairs with the Release store in `unlock`.
        while self.served.load(Ordering::Acquire) != ticket {
            wait.wait();
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        // Acquire pairs with the Release store of this value in `unlock`: the previous holder's critical
        // section happens-before ours. (It must be this load: the previous holder released through
        // `served`, not `next`; an Acquire on the `next` CAS alone synchronises with nothing. Miri
        // caught exactly that as a data race in `tests/locks.rs` `ticket::stress`.)
        let served = self.served.load(Ordering::Acquire);
        // If `next == served` at the CAS, no ticket is outstanding, so nobody holds the lock and nobody
        // can move `served` (only a holder does): `served` is still the value read above, and the ticket
        // we take is served at once. Relaxed: the synchronisation is the Acquire load above.
        self.next
            .compare_exchange(
                served,
                served.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Serves the next ticket.
    ///
    /// # Safety
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        // Relaxed load: only the holder (us) writes `served`.
        let served = self.served.load(Ordering::Relaxed);
        // Release pairs with the waiters' Acquire loads of `served`. A plain `mov` on x86.
        self.served.store(served.wrapping_add(1), Ordering::Release);
    }

    /// Whether the lock is held (a snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.next.load(Ordering::Relaxed) != self.served.load(Ordering::Relaxed)
    }
}

#[cfg(not(loom))]
impl Default for RawTicketLock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: mutual exclusion by ticket; Acquire on taking, Release on unlock (see above). The lock has no
// thread affinity, so the stateless guard may be sent.
unsafe impl lock_api::RawMutex for RawTicketLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        RawTicketLock::lock(self);
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        RawTicketLock::try_lock(self).then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // SAFETY: the guard proves the caller holds the lock.
        unsafe { RawTicketLock::unlock(self) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawTicketLock::is_locked(self)
    }
}

#[cfg(not(loom))]
// SAFETY: `unlock` serves the next ticket in FIFO order, so every unlock is already a fair hand-over.
unsafe impl lock_api::RawMutexFair for RawTicketLock {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        // SAFETY: forwarded from the caller.
        unsafe { <Self as lock_api::RawMutex>::unlock(self, guard) }
    }
}
