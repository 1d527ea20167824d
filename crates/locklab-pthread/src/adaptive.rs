//! The `mutex` choice: an adaptive mutex that spins while the owner runs, then sleeps on the lock
//! word itself, leaving nothing queued anywhere.
//!
//! # Why not the library's `RawMutex` here
//! [`locklab::raw::RawMutex`] keeps its sleepers in a FIFO list of nodes on the sleeping threads'
//! stacks, with hand-off. Real C programs do two things POSIX does not promise and glibc survives,
//! because glibc's wait leaves nothing queued: a signal handler that takes the very mutex its thread
//! is blocked on (a queue would put the handler behind its own interrupted wait: deadlock), and
//! `siglongjmp` out of a blocked `pthread_mutex_lock` (the old `SIGALRM` time-out idiom: a queued
//! node would be left on a discarded stack). A thread killed by `fork` (every thread but the caller)
//! leaves nothing behind either. So the preload library keeps the kernel mutex's lesson that matters
//! for throughput, optimistic spinning while the owner runs (seed 001), and sleeps the way glibc's
//! futex mutex does, with no queue: at worst a flag that costs one spare wake-up.
//!
//! # Algorithm
//! - **Lock, fast path**: `cas(word: 0 -> LOCKED)`.
//! - **Spin**: while the lock is held, watch the owner's TID (glibc's `__owner` field, which the
//!   caller records after each acquisition); take the lock the moment it is free. Stop once the same
//!   owner has held it for [`OWNER_SPIN`] (probably preempted or in a long section) or after
//!   [`SPIN_MAX`] in all. Exponential backoff between looks, up to 64 `pause`s.
//! - **Sleep**: set `SLEEPERS` on a held word and `futex_wait(word, LOCKED | SLEEPERS)`; on waking,
//!   take a free word as `LOCKED | SLEEPERS` (another sleeper may remain, so the next unlock must wake
//!   it: Drepper's "mutex3" rule). A time-out ends the wait after one last try.
//! - **Unlock**: `swap(word, 0)`; if it held `SLEEPERS`, wake one sleeper.
//!
//! # State word (bytes 0-3 of `pthread_mutex_t`)
//! | bits | name       | meaning                                                 |
//! |------|------------|---------------------------------------------------------|
//! | 0    | `LOCKED`   | held                                                    |
//! | 1    | `SLEEPERS` | a thread may sleep on the word: the unlock wakes one    |
//!
//! Transitions: lock `s -> s | LOCKED` (from any `s` without `LOCKED`); sleeper `LOCKED ->
//! LOCKED | SLEEPERS`; woken or sleeping-path taker `s -> LOCKED | SLEEPERS`; unlock `s -> 0`.
//!
//! # Invariants
//! 1. No lost wake-up: a thread sleeps only while the word is `LOCKED | SLEEPERS` (the kernel
//!    compares and sleeps atomically), and the unlock that clears `LOCKED` comes later in the word's
//!    modification order, so it sees `SLEEPERS` and wakes one sleeper; the woken thread either takes
//!    the lock or sees it held again, whose holder's unlock repeats the argument (the taker restores
//!    `SLEEPERS` for the ones still asleep).
//! 2. Nothing outside the word refers to a waiter: a waiter that leaves by any path (`siglongjmp`,
//!    a time-out, thread death in a `fork` child) leaves at most `SLEEPERS` set, which costs one
//!    wake-up of nobody.
//! 3. A nested acquisition by a signal handler of the lock its thread waits for is an ordinary
//!    locker: it spins or sleeps on the word like any other thread and is woken like one.
//!
//! No FIFO order and no hand-off (as glibc): a sleeper can lose the lock to spinners; it is woken
//! again by each unlock while it sleeps.
//!
//! # Memory orderings
//! Every take is an Acquire CAS, paired with the Release `swap` of the unlock that freed the lock.
//! Setting `SLEEPERS` publishes nothing (Relaxed); the futex system calls order the rest.
//!
//! ```c
//! pthread_mutex_lock(&m);   /* with LOCKLAB_MUTEX=mutex (the default) */
//! pthread_mutex_unlock(&m);
//! ```

use crate::sys;
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Held.
const LOCKED: u32 = 1;
/// A thread may sleep on the word.
const SLEEPERS: u32 = 2;
/// A spinner stops after the same owner has held the lock this long.
pub const OWNER_SPIN: Duration = Duration::from_micros(10);
/// Overall cap on spinning per acquisition.
pub const SPIN_MAX: Duration = Duration::from_micros(40);
/// Most `pause`s between two looks at the word.
const MAX_BACKOFF: u32 = 64;

/// The lock word of a `pthread_mutex_t` under the `mutex` choice, with the owner field beside it.
#[derive(Clone, Copy)]
pub(crate) struct Adaptive {
    pub(crate) word: &'static AtomicU32,
    pub(crate) owner: &'static AtomicI32,
}

impl Adaptive {
    /// Takes a free lock with one CAS; `false` if the word is not exactly free.
    #[inline]
    pub(crate) fn try_lock_fast(self) -> bool {
        // Acquire pairs with the Release swap of the last unlock.
        self.word
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock if it is free (whatever `SLEEPERS` says).
    #[inline]
    pub(crate) fn try_lock(self) -> bool {
        let mut s = self.word.load(Ordering::Relaxed);
        while s & LOCKED == 0 {
            // Acquire pairs with the Release swap of the last unlock.
            match self.word.compare_exchange_weak(
                s,
                s | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// Takes the lock, spinning then sleeping.
    #[inline]
    pub(crate) fn lock(self) {
        if !self.try_lock_fast() {
            self.lock_slow(None);
        }
    }

    /// Takes the lock before the absolute time on the clock given; `false` on time-out.
    pub(crate) fn lock_until(self, clock: libc::clockid_t, abs: &libc::timespec) -> bool {
        self.try_lock_fast() || self.lock_slow(Some((clock, abs)))
    }

    /// Whether the lock is held.
    #[inline]
    pub(crate) fn is_locked(self) -> bool {
        self.word.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// Releases the lock (any thread; a free lock stays free).
    #[inline]
    pub(crate) fn unlock(self) {
        // Release pairs with the next taker's Acquire CAS.
        if self.word.swap(0, Ordering::Release) & SLEEPERS != 0 {
            sys::futex_wake(self.word, 1, false);
        }
    }

    /// Takes a free lock with plain accesses: only while the process has a single thread (no other
    /// thread can touch the word); `false` if it is not free.
    #[inline]
    pub(crate) fn try_lock_unshared(self) -> bool {
        let free = self.word.load(Ordering::Relaxed) == 0;
        if free {
            self.word.store(LOCKED, Ordering::Relaxed);
        }
        free
    }

    /// Releases with a plain store a lock that shows no sleeper: only while the process has a single
    /// thread; `false` (nothing done) otherwise.
    #[inline]
    pub(crate) fn unlock_unshared(self) -> bool {
        let quiet = self.word.load(Ordering::Relaxed) == LOCKED;
        if quiet {
            self.word.store(0, Ordering::Relaxed);
        }
        quiet
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(self, until: Option<(libc::clockid_t, &libc::timespec)>) -> bool {
        if self.spin() {
            return true;
        }
        loop {
            let s = self.word.load(Ordering::Relaxed);
            if s & LOCKED == 0 {
                // Acquire pairs with the Release swap of the last unlock. `SLEEPERS` is set on
                // the way in: another sleeper may remain (invariant 1).
                if self
                    .word
                    .compare_exchange(s, LOCKED | SLEEPERS, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if s & SLEEPERS == 0
                && self
                    .word
                    .compare_exchange(s, s | SLEEPERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if !sys::futex_wait_until(self.word, LOCKED | SLEEPERS, until) {
                return self.try_lock();
            }
        }
    }

    /// Optimistic spinning while the owner runs; `true` if it took the lock.
    fn spin(self) -> bool {
        let start = Instant::now();
        let mut owner = self.owner.load(Ordering::Relaxed);
        let mut since = start;
        let mut backoff = 1u32;
        let mut looks = 0u32;
        loop {
            let s = self.word.load(Ordering::Relaxed);
            if s & LOCKED == 0 {
                // Acquire pairs with the Release swap of the last unlock.
                if self
                    .word
                    .compare_exchange(s, s | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            for _ in 0..backoff {
                core::hint::spin_loop();
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            looks += 1;
            if looks % 8 == 0 {
                let now = Instant::now();
                let o = self.owner.load(Ordering::Relaxed);
                if o != owner {
                    (owner, since) = (o, now);
                }
                if now.duration_since(since) > OWNER_SPIN || now.duration_since(start) > SPIN_MAX {
                    return false;
                }
            }
        }
    }
}
