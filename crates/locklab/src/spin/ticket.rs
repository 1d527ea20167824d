//! Ticket spinlock: strict FIFO, and an unlock that is a plain store.
//!
//! # Algorithm
//! Two 32-bit counters: `next`, the next ticket to hand out, and `served`, the ticket now allowed in.
//! Lock: take a ticket with `next.fetch_add(1)` and wait until `served` equals it. Unlock: only the
//! holder writes `served`, so unlock is a *release store* of `served + 1`: no locked instruction (seed
//! 000: `spin_unlock` is a store, `read_unlock` a bus-locked RMW). Try-lock: if `next == served`, take
//! ticket `served` with a CAS on `next`, then confirm `served` still names it (below).
//!
//! The two halves are separate [`AtomicU32`]s, not one `AtomicU64` written in halves: Rust's memory model
//! does not allow racing atomic accesses of different sizes to the same bytes, and a whole-word unlock
//! would be a locked RMW. So `try_lock` cannot compare both halves in one instruction, as the kernel's
//! does; it compares `next` and then checks `served` again.
//!
//! # Why the halves are 32-bit
//! - *Waiters.* Each outstanding ticket belongs to a thread inside `lock` or holding the lock (`lock`
//!   waits for its ticket, and so does a `try_lock` that took one), so at most one per thread. Linux
//!   allows at most 2^22 threads (`PID_MAX_LIMIT`), so `next - served` never reaches 2^32: the counters
//!   cannot wrap onto each other. With 16-bit halves, 65,536 threads made `next == served` while held.
//! - *`try_lock`'s ABA.* `try_lock` reads `served`, then CASes `next` from that value. A thread stalled in
//!   between while 2^32 tickets are issued finds `next` equal again and takes a ticket that is not the
//!   one being served. With 16-bit halves that was 65,536 tickets, about a millisecond of traffic.
//!   Now it is 2^32 (many seconds even uncontended), and the recheck makes even that harmless: if
//!   `served` moved, the ticket is an ordinary place in the queue, and `try_lock` waits for it (the
//!   only case in which it waits) and returns `true` holding the lock. It never returns `true` without.
//!
//! # Properties
//! Strict FIFO by ticket. Every waiter polls the same line, so each hand-over invalidates it in every
//! waiter's cache (MCS and the queued spinlock avoid that).
//! A preempted waiter stalls everyone behind it until it runs again (FIFO cannot skip it): waiters yield
//! the CPU after `SpinWait::SPINS` steps so that the preempted one gets it back sooner.
//!
//! # State
//! | word      | bytes  | meaning                         |
//! |-----------|--------|---------------------------------|
//! | `served`  | 0-3    | ticket now holding the lock     |
//! | `next`    | 4-7    | next ticket to hand out         |
//!
//! `next == served`: free. `next - served = n > 0`: held, with `n - 1` waiters.
//!
//! # Memory orderings
//! The waiter's Acquire load of `served` that sees its ticket pairs with the Release store in `unlock`.

use crate::primitive::{AtomicU32, Ordering, SpinWait};

/// A ticket spinlock. See the [module documentation](self).
///
/// ```
/// use locklab::TicketLock;
/// let l = TicketLock::new(0u64);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| *l.lock() += 1); // served in the order the tickets were taken
///     }
/// });
/// assert_eq!(*l.lock(), 4);
/// ```
#[repr(C, align(8))]
pub struct RawTicketLock {
    served: AtomicU32,
    next: AtomicU32,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

impl RawTicketLock {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked lock.
        ///
        /// ```
        /// let l = locklab::raw::RawTicketLock::new();
        /// assert!(!l.is_locked());
        /// ```
        pub fn new() -> Self {
            RawTicketLock {
                dep: crate::dep::Dep::new(),
                served: AtomicU32::new(0),
                next: AtomicU32::new(0),
            }
        }
    }

    /// Takes a ticket and waits for it to be served.
    ///
    /// ```
    /// let l = locklab::raw::RawTicketLock::new();
    /// l.lock();
    /// assert!(l.is_locked());
    /// // SAFETY: the `lock` above took the lock.
    /// unsafe { l.unlock() };
    /// ```
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
    fn wait_for(&self, ticket: u32) {
        let mut wait = SpinWait::new();
        // The loop's only exit, for the simulator (nothing on hardware).
        let _until = crate::primitive::spin_until_eq(&self.served, ticket);
        // Acquire pairs with the Release store in `unlock`.
        while self.served.load(Ordering::Acquire) != ticket {
            wait.wait();
        }
    }

    /// Takes the lock if it is free.
    ///
    /// ```
    /// let l = locklab::raw::RawTicketLock::new();
    /// assert!(l.try_lock());
    /// assert!(!l.try_lock()); // held: no ticket is taken
    /// // SAFETY: the `try_lock` above took the lock.
    /// unsafe { l.unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn try_lock(&self) -> bool {
        // Relaxed: `try_take` makes the Acquire load that decides.
        self.try_take(self.served.load(Ordering::Relaxed))
    }

    /// `try_lock` once `served` has been read as `seen` (split out so a test can stall between the
    /// two steps).
    #[inline]
    fn try_take(&self, seen: u32) -> bool {
        // Cheap pre-check: no RMW on a held lock.
        if self.next.load(Ordering::Relaxed) != seen {
            return false;
        }
        // Relaxed: the synchronisation is the Acquire load of `served` below.
        if self
            .next
            .compare_exchange(
                seen,
                seen.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        // We hold ticket `seen`. Acquire pairs with the Release store of `seen` in `unlock`: the previous
        // holder's critical section happens-before ours. (The Acquire must be on `served`, the word the
        // previous holder released through; Miri caught an Acquire on the `next` CAS alone as a race.)
        // If `served` is no longer `seen`, `next` came back to it after 2^32 tickets (module docs): our
        // ticket is a place in the queue, and we wait for it like `lock`.
        if self.served.load(Ordering::Acquire) != seen {
            self.wait_for(seen);
        }
        true
    }

    /// Serves the next ticket.
    ///
    /// # Safety
    /// The caller holds the lock.
    ///
    /// ```
    /// let l = locklab::raw::RawTicketLock::new();
    /// l.lock();
    /// // SAFETY: this thread holds the lock (the `lock` above).
    /// unsafe { l.unlock() };
    /// assert!(l.try_lock()); // the next ticket is served at once
    /// // SAFETY: the `try_lock` above took the lock.
    /// unsafe { l.unlock() };
    /// ```
    #[inline]
    pub unsafe fn unlock(&self) {
        // Relaxed load: only the holder (us) writes `served`.
        let served = self.served.load(Ordering::Relaxed);
        // Release pairs with the waiters' Acquire loads of `served`. A plain store on x86 (`incl`).
        self.served.store(served.wrapping_add(1), Ordering::Release);
    }

    /// Whether the lock is held (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawTicketLock::new();
    /// assert!(!l.is_locked());
    /// l.lock();
    /// assert!(l.is_locked());
    /// // SAFETY: the `lock` above took the lock.
    /// unsafe { l.unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.next.load(Ordering::Relaxed) != self.served.load(Ordering::Relaxed)
    }
}

#[cfg(not(loom))]
// SAFETY: mutual exclusion by ticket; Acquire on taking, Release on unlock (see above). The lock has no
// thread affinity, so the stateless guard may be sent.
crate::dep::spin_raw_mutex!(unsafe impl RawMutex for RawTicketLock);

#[cfg(not(loom))]
// SAFETY: `unlock` serves the next ticket in FIFO order, so every unlock is already a fair hand-over.
unsafe impl lock_api::RawMutexFair for RawTicketLock {
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        // SAFETY: forwarded from the caller (the checked unlock).
        unsafe { <Self as lock_api::RawMutex>::unlock(self, guard) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A `try_lock` stalled between its load of `served` and its CAS while the ticket
    /// counter comes back to the value it read must not return `true` while another thread holds.
    #[test]
    fn stalled_try_lock_never_enters_beside_the_holder() {
        static L: RawTicketLock = RawTicketLock::new();
        let l = &L;
        // The stalled thread read `served == 0`...
        let seen = l.served.load(Ordering::Relaxed);
        assert_eq!(seen, 0);
        // ... then 2^32 tickets were issued: this thread holds ticket u32::MAX, and `next` is back at 0.
        l.served.store(u32::MAX, Ordering::Relaxed);
        l.next.store(0, Ordering::Relaxed);
        let t = std::thread::spawn(move || l.try_take(seen));
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) {
            5
        } else {
            50
        }));
        assert!(
            !t.is_finished(),
            "try_lock returned while another thread held the lock"
        );
        // The holder leaves; the stalled thread's ticket (0) is served next.
        unsafe { l.unlock() };
        assert!(
            t.join().unwrap(),
            "it holds the lock once its ticket is served"
        );
        assert!(l.is_locked() && !l.try_lock());
        unsafe { l.unlock() };
        assert!(l.try_lock());
    }
}
