//! `RecursiveRwSem`: a reader-preferring sleeping rwlock, the semantics of parking_lot's
//! `RecursiveRwLock`-style recursive reads and of glibc's default `pthread_rwlock_t`
//! (`PTHREAD_RWLOCK_PREFER_READER_NP`): a read lock succeeds whenever no writer *holds* the lock,
//! even while writers wait, so a thread that already reads may read again without deadlocking behind
//! a queued writer. The price is that a steady stream of readers can starve writers; use [`RwSem`]
//! (writers queue FIFO with readers, and spin) when that matters.
//!
//! [`RwSem`]: crate::RwSem
//!
//! # Algorithm
//! One 32-bit word, waited on with a futex:
//!
//! ```text
//!  word:  | WRITER (bit 31) | WRITERS_WAITING (30) | READERS_WAITING (29) | readers (bits 0..29) |
//! ```
//!
//! - **Read lock**: one `fetch_add(1)`, as glibc's and the kernel's rwsem read lock; if it shows
//!   no WRITER and room in the count, the hold is taken. Otherwise the add is undone (a read unlock)
//!   and the slow path runs: while WRITER is clear, CAS `readers += 1` (keeping the flags); while it
//!   is set, CAS READERS_WAITING in (from the exact value seen) and sleep on the word with that value.
//! - **Write lock**: when WRITER and `readers` are both clear, CAS WRITER in (keeping the flags; a
//!   waiting writer re-sets WRITERS_WAITING when it sleeps again). Else CAS WRITERS_WAITING in and
//!   sleep on the word with that value.
//! - **Read unlock** (and the undo of a refused add): one CAS, `readers -= 1`; the last reader out,
//!   if WRITERS_WAITING is set and no writer holds the lock, clears it in the same CAS and then wakes
//!   every sleeper (the writers race for the lock; the losers sleep again). The release is the
//!   unlock's last write to the word: a writer may take, release and free the lock the moment the
//!   count reaches 0, and the wake-up uses only the word's address. With WRITER set the decrement
//!   was a refused add's undo, and the writer's own unlock wakes the sleepers.
//! - **Write unlock**: clear WRITER and both waiting bits; if either was set, wake every sleeper.
//! - Timed and `try` forms: the same, giving up at the deadline (nothing to undo: a waiter changes
//!   the word only by setting a waiting bit, which at worst causes one spurious wake-up).
//!
//! # Invariants
//! 1. Exclusion: a writer enters only by a CAS from a value with `readers == 0` and WRITER clear; a
//!    reader holds only if its add (or CAS) saw WRITER clear. While a writer holds, `readers` counts
//!    only refused adds about to be undone (each thread has at most one in flight, or one per
//!    nested signal handler).
//! 2. A sleeper sleeps only on the exact value it saw with its waiting bit set; any change to the word
//!    (an unlock, another waiter, a reader arriving or leaving) makes its futex wait return at once.
//! 3. An unlock that ends the condition a sleeper waits for (WRITER cleared; `readers` reaching 0) sees
//!    that sleeper's bit (set by CAS on a value that had WRITER or readers, so ordered before the
//!    unlock's RMW on the same word) and wakes every sleeper: no wake-up is lost.
//! 4. `readers` never reaches the waiting bits: a read lock at [`MAX_READERS`] (2^28 - 1) panics
//!    with the count unchanged, and `try_read` refuses. The adds in flight on top of the holds
//!    number at most the threads (at most 2^22 on Linux) times their signal nesting, which the
//!    2^28 of headroom below bit 29 covers, so an add never carries into READERS_WAITING.
//!
//! # Memory orderings
//! The CAS that takes the lock is Acquire (pairs with the Release RMW of the unlock that let it in);
//! the unlocks are Release RMWs. Flag-setting CASes and the failed loads are Relaxed: they publish
//! nothing, and the futex wait re-reads the word itself.

use crate::clock::{Deadline, time_left};
#[cfg(not(loom))]
use crate::dep::{LockdepHooks as _, M};
use crate::primitive::{AtomicU32, Ordering};

const WRITER: u32 = 1 << 31;
const WRITERS_WAITING: u32 = 1 << 30;
const READERS_WAITING: u32 = 1 << 29;
const READERS: u32 = READERS_WAITING - 1;

/// Most concurrent read holds (2^28 - 1); one more panics, with the count left as it was. The
/// count field has 2^28 more values as headroom for the refused adds in flight (invariant 4).
///
/// ```
/// use locklab::rw::recursive_rwsem::{COUNT_MASK, MAX_READERS};
/// assert!(MAX_READERS <= COUNT_MASK); // the count field has room beyond the bound
/// ```
pub const MAX_READERS: u32 = (1 << 28) - 1;

/// The bits of the lock word that count readers (for code that reads the word itself, such as a
/// `pthread_rwlock_t` shim deciding which hold an unlock ends).
///
/// ```
/// use locklab::rw::recursive_rwsem::COUNT_MASK;
/// // The reader count of a lock word read directly (a shim deciding which hold an unlock ends).
/// let word: u32 = 3; // three readers, no flag
/// assert_eq!(word & COUNT_MASK, 3);
/// ```
pub const COUNT_MASK: u32 = READERS;

/// The word's bit that says a writer holds the lock (its top bit; the preload library's x86-64
/// `pthread_rwlock_rdlock` entry tests it in assembly).
///
/// ```
/// use locklab::rw::recursive_rwsem::{COUNT_MASK, HELD_FOR_WRITING};
/// assert_eq!(HELD_FOR_WRITING, 1 << 31);
/// assert_eq!(HELD_FOR_WRITING & COUNT_MASK, 0);
/// ```
pub const HELD_FOR_WRITING: u32 = WRITER;

/// The word's bit that says a writer waits (the preload library's x86-64 `pthread_rwlock_unlock`
/// entry leaves a read unlock that sees it to the general path, whose release clears it).
///
/// ```
/// use locklab::rw::recursive_rwsem::{COUNT_MASK, HELD_FOR_WRITING, WRITER_WAITING};
/// assert_eq!(WRITER_WAITING, 1 << 30);
/// assert_eq!(WRITER_WAITING & (COUNT_MASK | HELD_FOR_WRITING), 0);
/// ```
pub const WRITER_WAITING: u32 = WRITERS_WAITING;

/// A reader-preferring sleeping rwlock (module docs).
///
/// ```
/// use lock_api::RawRwLock as _;
/// let l = locklab::raw::RawRecursiveRwSem::INIT;
/// let a = l.lock_shared();
/// let b = l.lock_shared(); // recursion: no writer holds it
/// unsafe { l.unlock_shared(a); l.unlock_shared(b) };
/// let w = l.try_lock_exclusive().expect("free");
/// unsafe { l.unlock_exclusive(w) };
/// ```
#[repr(C)] // the word first: the preload library's entry reads and adds to it in place
pub struct RawRecursiveRwSem {
    word: AtomicU32,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

impl Default for RawRecursiveRwSem {
    fn default() -> Self {
        Self::new()
    }
}

impl RawRecursiveRwSem {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked lock.
        ///
        /// ```
        /// static L: locklab::raw::RawRecursiveRwSem = locklab::raw::RawRecursiveRwSem::new();
        /// ```
        pub fn new() -> Self {
            RawRecursiveRwSem {
                dep: crate::dep::Dep::new(),
                word: AtomicU32::new(0),
            }
        }
    }

    /// Sets `bit` in the word if it still holds `seen`, then sleeps while the word is `seen | bit`,
    /// at most until `deadline`. `false`: the deadline passed.
    fn sleep(&self, seen: u32, bit: u32, deadline: Option<&Deadline>) -> bool {
        let want = seen | bit;
        // Relaxed: the bit publishes nothing; invariant 2 (the wait re-reads the word).
        if seen & bit == 0
            && self
                .word
                .compare_exchange(seen, want, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return true; // the word moved: look again
        }
        let Some(left) = time_left(deadline) else {
            return false;
        };
        crate::sys::futex_wait(&self.word, want, left);
        true
    }

    /// One `fetch_add`: takes a read hold if no writer holds the lock and the count is below `max`
    /// (at most [`MAX_READERS`]); otherwise undoes the add and answers `false`.
    #[inline]
    fn read_fast_below(&self, max: u32) -> bool {
        // Acquire pairs with the Release of the write unlock that cleared WRITER.
        let prev = self.word.fetch_add(1, Ordering::Acquire);
        if prev & WRITER == 0 && prev & READERS < max {
            return true;
        }
        self.read_unlock();
        false
    }

    #[inline]
    fn read_fast(&self) -> bool {
        self.read_fast_below(MAX_READERS)
    }

    /// One attempt at a read hold with a single `fetch_add`, undone if a writer holds the lock or
    /// the count is already `max` (capped at [`MAX_READERS`]): the fast path of a read lock, for
    /// callers that handle the rest themselves with a lower limit of their own (the preload
    /// library's `pthread_rwlock_rdlock`, which answers `EAGAIN` below the library's limit).
    /// `true`: held, release it with `unlock_shared`.
    ///
    /// ```
    /// use lock_api::RawRwLock as _;
    /// let l = locklab::raw::RawRecursiveRwSem::INIT;
    /// assert!(l.read_once(1));
    /// assert!(!l.read_once(1), "the count is at the limit given");
    /// assert!(l.try_lock_exclusive().is_none());
    /// unsafe { l.unlock_shared(lock_api::GuardSend::new()) };
    /// ```
    #[inline]
    pub fn read_once(&self, max: u32) -> bool {
        self.read_fast_below(max.min(MAX_READERS))
    }

    /// Read lock, giving up at `deadline`.
    #[inline]
    pub(crate) fn read_until(&self, deadline: Option<&Deadline>) -> bool {
        self.read_fast() || self.read_slow(deadline)
    }

    #[cold]
    #[inline(never)]
    fn read_slow(&self, deadline: Option<&Deadline>) -> bool {
        loop {
            // Relaxed: the CAS below decides.
            let s = self.word.load(Ordering::Relaxed);
            if s & WRITER == 0 {
                assert!(
                    s & READERS < MAX_READERS,
                    "locklab::RecursiveRwSem: more than {MAX_READERS} read holds"
                );
                // Acquire pairs with the Release of the write unlock that cleared WRITER.
                if self
                    .word
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if !self.sleep(s, READERS_WAITING, deadline) {
                return false;
            }
        }
    }

    /// Write lock, giving up at `deadline`.
    pub(crate) fn write_until(&self, deadline: Option<&Deadline>) -> bool {
        loop {
            // Relaxed: the CAS below decides.
            let s = self.word.load(Ordering::Relaxed);
            if s & (WRITER | READERS) == 0 {
                // Acquire pairs with the Release of the unlock that emptied the lock.
                if self
                    .word
                    .compare_exchange_weak(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if !self.sleep(s, WRITERS_WAITING, deadline) {
                return false;
            }
        }
    }

    /// Takes a read hold if no writer holds the lock (and the count has room). A look first, so a
    /// `try` loop against a held write lock makes no write to the word.
    #[inline]
    pub(crate) fn try_read(&self) -> bool {
        // Relaxed: the add decides (and refuses a full count itself).
        let s = self.word.load(Ordering::Relaxed);
        s & WRITER == 0 && s & READERS < MAX_READERS && self.read_fast()
    }

    /// Ends a read hold (or undoes a refused add); the last reader out wakes waiting writers.
    ///
    /// One compare-and-swap both releases the hold and, for the last reader with writers waiting,
    /// clears WRITERS_WAITING: the moment the count reaches 0 a writer may take the lock, release
    /// it and free its memory (glibc allows destroying a rwlock as soon as it is free), so the
    /// release must be this thread's last write to the word. The wake-up after it uses only the
    /// word's address.
    #[inline]
    pub(crate) fn read_unlock(&self) {
        let addr = core::ptr::addr_of!(self.word);
        // Relaxed: the CAS below decides.
        let mut s = self.word.load(Ordering::Relaxed);
        loop {
            debug_assert!(s & READERS != 0, "unlock_shared without a read hold");
            // With WRITER set this is a refused add's undo: the writer's unlock wakes the sleepers.
            let last = s & READERS == 1 && s & (WRITERS_WAITING | WRITER) == WRITERS_WAITING;
            let new = if last {
                (s - 1) & !WRITERS_WAITING
            } else {
                s - 1
            };
            // Release: ends the read section (pairs with a writer's Acquire CAS).
            match self
                .word
                .compare_exchange_weak(s, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    if last {
                        // The last reader: let the writers race (invariant 3).
                        crate::sys::futex_wake(addr, u32::MAX);
                    }
                    return;
                }
                Err(now) => s = now,
            }
        }
    }

    /// Takes the write hold if nobody holds the lock.
    pub(crate) fn try_write(&self) -> bool {
        // Relaxed: the CAS decides.
        let s = self.word.load(Ordering::Relaxed);
        s & (WRITER | READERS) == 0
            // Acquire as in `write_until`.
            && self
                .word
                .compare_exchange(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Ends the write hold; wakes every sleeper if any.
    pub(crate) fn write_unlock(&self) {
        // The wake-up after the release uses only the address (the lock may be freed by then).
        let addr = core::ptr::addr_of!(self.word);
        // Release: ends the write section (pairs with the next holder's Acquire CAS).
        let prev = self.word.fetch_and(
            !(WRITER | WRITERS_WAITING | READERS_WAITING),
            Ordering::Release,
        );
        debug_assert!(
            prev & WRITER != 0,
            "unlock_exclusive without the write hold"
        );
        if prev & (WRITERS_WAITING | READERS_WAITING) != 0 {
            // Every sleeper (invariant 3).
            crate::sys::futex_wake(addr, u32::MAX);
        }
    }
}

#[cfg(not(loom))]
// SAFETY: invariant 1 (exclusion between the modes), the Acquire/Release pairs of the module docs, and
// no lost wake-up (invariants 2 and 3). A read lock never waits behind a waiting writer, only behind a
// holding one, so a thread that holds a read lock may take another. The guards are `Send`: the lock
// has no owner identity, so an unlock is the same from any thread.
unsafe impl lock_api::RawRwLock for RawRecursiveRwSem {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type SharedGuard = lock_api::GuardSend;
    type ExclusiveGuard = lock_api::GuardSend;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) -> lock_api::GuardSend {
        self.lockdep_before_lock(M::RecRead);
        self.read_until(None);
        lock_api::GuardSend::new()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> Option<lock_api::GuardSend> {
        self.lockdep_after_trylock(M::RecRead, self.try_read().then(lock_api::GuardSend::new))
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self, _g: lock_api::GuardSend) {
        self.lockdep_before_unlock();
        self.read_unlock();
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) -> lock_api::GuardSend {
        self.lockdep_before_lock(M::Write);
        self.write_until(None);
        lock_api::GuardSend::new()
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> Option<lock_api::GuardSend> {
        self.lockdep_after_trylock(M::Write, self.try_write().then(lock_api::GuardSend::new))
    }

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self, _g: lock_api::GuardSend) {
        self.lockdep_before_unlock();
        self.write_unlock();
    }

    fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) & (WRITER | READERS) != 0
    }

    fn is_locked_exclusive(&self) -> bool {
        self.word.load(Ordering::Relaxed) & WRITER != 0
    }
}

#[cfg(not(loom))]
// SAFETY: a timed-out attempt holds nothing (at most it left a waiting bit, which costs one spurious
// wake-up).
unsafe impl lock_api::RawRwLockTimed for RawRecursiveRwSem {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_for(&self, timeout: Self::Duration) -> Option<lock_api::GuardSend> {
        self.lockdep_timed_for(
            M::RecRead,
            timeout,
            |d| self.read_until(Some(d)).then(lock_api::GuardSend::new),
            || self.read_until(None).then(lock_api::GuardSend::new),
        )
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_until(&self, deadline: Self::Instant) -> Option<lock_api::GuardSend> {
        self.lockdep_timed(M::RecRead, || {
            self.read_until(Some(&deadline))
                .then(lock_api::GuardSend::new)
        })
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_for(&self, timeout: Self::Duration) -> Option<lock_api::GuardSend> {
        self.lockdep_timed_for(
            M::Write,
            timeout,
            |d| self.write_until(Some(d)).then(lock_api::GuardSend::new),
            || self.write_until(None).then(lock_api::GuardSend::new),
        )
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_until(&self, deadline: Self::Instant) -> Option<lock_api::GuardSend> {
        self.lockdep_timed(M::Write, || {
            self.write_until(Some(&deadline))
                .then(lock_api::GuardSend::new)
        })
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawRecursiveRwSem, RwLock);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::time::Duration;

    /// A second read succeeds while a writer waits (the point of the lock), and the writer gets in
    /// once both reads end.
    #[test]
    fn a_read_does_not_wait_behind_a_waiting_writer() {
        let l = Arc::new(RawRecursiveRwSem::new());
        assert!(l.read_until(None));
        let wrote = Arc::new(AtomicBool::new(false));
        let w = {
            let (l, wrote) = (l.clone(), wrote.clone());
            std::thread::spawn(move || {
                assert!(l.write_until(None));
                wrote.store(true, SeqCst);
                l.write_unlock();
            })
        };
        // Wait until the writer has announced itself.
        while l.word.load(SeqCst) & WRITERS_WAITING == 0 {
            std::thread::yield_now();
        }
        assert!(l.try_read(), "a read while a writer waits");
        assert!(l.read_until(None));
        assert!(!wrote.load(SeqCst));
        for _ in 0..3 {
            l.read_unlock();
        }
        w.join().unwrap();
        assert!(wrote.load(SeqCst));
        assert_eq!(l.word.load(SeqCst), 0);
    }

    /// Timed acquisitions time out against the other mode and succeed once it ends.
    #[test]
    fn timed_acquisitions() {
        let l = RawRecursiveRwSem::new();
        assert!(l.write_until(None));
        let soon = || std::time::Instant::now() + Duration::from_millis(5);
        assert!(!l.read_until(Some(&soon())));
        assert!(!l.write_until(Some(&soon())));
        l.write_unlock();
        assert!(l.read_until(Some(&soon())));
        assert!(!l.write_until(Some(&soon())));
        l.read_unlock();
        assert!(l.write_until(Some(&soon())));
        l.write_unlock();
        assert_eq!(l.word.load(SeqCst) & (WRITER | READERS), 0);
    }

    /// At the bound a read lock panics with the count unchanged; `try_lock_shared` refuses.
    #[test]
    fn the_reader_count_is_bounded() {
        let l = RawRecursiveRwSem::new();
        l.word.store(MAX_READERS, SeqCst);
        assert!(!l.try_read());
        assert!(std::panic::catch_unwind(|| l.read_until(None)).is_err());
        assert_eq!(l.word.load(SeqCst), MAX_READERS);
    }
}
