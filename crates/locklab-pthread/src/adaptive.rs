//! The `adaptive` choice (`LOCKLAB_MUTEX=adaptive`, alias `mutex`): an adaptive mutex that spins
//! while the owner runs, then sleeps on the lock word itself, leaving nothing queued anywhere.
//!
//! # Why not the library's `RawMutex` here
//! [`locklab::raw::RawMutex`] keeps its sleepers in a FIFO list of nodes on the sleeping threads'
//! stacks, with hand-off. Real C programs do two things POSIX does not promise and glibc survives,
//! because glibc's wait leaves nothing queued: a signal handler that takes the very mutex its thread
//! is blocked on (a queue would put the handler behind its own interrupted wait: deadlock), and
//! `siglongjmp` out of a blocked `pthread_mutex_lock` (the old `SIGALRM` time-out idiom: a queued
//! node would be left on a discarded stack). Threads that vanish in a `fork` child leave nothing
//! behind either. So the preload library keeps the lesson of the kernel mutex that matters for
//! throughput, optimistic spinning while the owner runs (seed 001), and sleeps the way glibc's
//! futex mutex does, on the lock word.
//!
//! # Algorithm
//! - **Lock, fast path**: `cas(word: 0 -> LOCKED)`. When it fails, the caller goes on with loads:
//!   a look at the word (a CAS only if it shows the lock free, sleepers counted or not), then
//!   `Adaptive::lock_contended`, straight into the spin, whose first look is a
//!   load. On x86 a CAS that fails still takes the line exclusive, away from the holder, which must
//!   take it back for its unlock: the contended path once made three before its first look.
//! - **Spin** (every newcomer whose CAS failed, as glibc's adaptive mutex): while the lock is
//!   held, watch the owner's TID (glibc's `__owner` field, which the caller records after each
//!   acquisition) and take the lock the moment it is free. Stop once the same owner has held it for
//!   [`OWNER_SPIN`] (probably preempted, or in a long section) or after [`SPIN_MAX`] in all (the
//!   clock is read from the eighth look on). The first looks are `pause`s with exponential
//!   backoff; later ones yield the CPU, which the holder may need when threads outnumber CPUs.
//!   Spinning is not limited to one thread (the kernel's OSQ head) and does not stop for sleepers:
//!   in userspace a spinner can be preempted, and a spinner's flag in the word then sent every
//!   other newcomer to sleep for a time slice; with threads outnumbering CPUs that turned most
//!   acquisitions into a futex sleep and a wake-up (0.6x glibc's adaptive mutex, 2,000 times its
//!   system calls, on a 2-CPU machine with 16-64 threads).
//! - **Sleep**: take a free word; else count oneself in the word while the lock is held and
//!   `futex_wait` on the value just written (at most 100 ms at a time, the watchdog, timed or
//!   not); back from the sleep (woken, a signal, the watchdog), leave the count, clear `WAKING`,
//!   and look again.
//! - **Unlock**: one compare-and-swap that clears `LOCKED` and, if the count is non-zero and no
//!   woken sleeper is still on its way (`WAKING`), sets `WAKING`; then, if it set it, a futex wake
//!   of one sleeper. Nothing reads or writes the word after that compare-and-swap (the next owner
//!   may destroy the mutex and reuse its memory at once). Without `WAKING`, every unlock between a
//!   wake-up and the woken thread's first look (on a loaded machine, a whole run-queue wait) woke
//!   another sleeper: a herd of wake-ups, each a system call for the unlocker, most of them only to
//!   sleep again.
//!
//! # State word (bytes 0-3 of `pthread_mutex_t`)
//! | bits | name      | meaning                                               |
//! |------|-----------|-------------------------------------------------------|
//! | 0    | `LOCKED`  | held                                                  |
//! | 1    | `WAKING`  | a sleeper was woken and has not looked yet            |
//! | 2-31 | count     | threads asleep (or about to sleep) on the word        |
//!
//! Transitions: take `s -> s | LOCKED` (from any `s` without `LOCKED`); sleep `s -> s + ONE` on a
//! held word, back `s -> (s - ONE) & !WAKING`; unlock `s -> (s & !LOCKED) | WAKING` and a wake-up
//! if the count is non-zero and `WAKING` clear, else `s -> s & !(LOCKED | WAKING)` with no count,
//! else `s -> s & !LOCKED`.
//!
//! # Invariants
//! 1. No lost wake-up: a thread sleeps only on the exact value it wrote with its count (the kernel
//!    compares and sleeps atomically), so an unlock between its count and its sleep makes the sleep
//!    return at once. An unlock after it sees the count (the count leaves the word only with its
//!    sleeper) and wakes one sleeper, unless `WAKING` is set: then a woken thread has yet to come
//!    back from its sleep, and every thread back from a sleep clears `WAKING` and then looks at
//!    the word (takes a free lock, or counts itself on a held one, whose unlock then wakes), so an
//!    unlock that skipped its wake-up is followed by a look.
//! 2. Nothing outside the word refers to a waiter. A waiter that leaves without finishing
//!    (`siglongjmp`, thread death in a `fork` child) leaves at most its count (unlocks make a spare
//!    wake-up): a cost, never a hang. A `WAKING` whose woken thread never comes back (it
//!    `siglongjmp`ed out, or a `fork` child does not have it) is cleared by the next unlock that
//!    finds nobody counted, or by the next sleeper back from its sleep, at the latest by its
//!    watchdog: a delay of at most 100 ms, timed waits included, never a hang.
//! 3. A nested acquisition by a signal handler of the lock its thread waits for is an ordinary
//!    locker: it spins or sleeps on the word like any other thread and is woken like one.
//!
//! No FIFO order and no hand-off, as glibc: a woken sleeper competes with newcomers (and looks again
//! at least every 100 ms).
//!
//! A loom model runs this file unchanged over a model futex (`locklab`'s
//! `loom_models::preload_adaptive`): three lockers, two lockers twice each, a timed-out locker among
//! plain ones, three threads running the exported calls' fast paths (a swap to 0 for the quiet
//! unlock, glibc's `xchg`, deadlocks there: it loses a sleeper's count); a lost wake-up is a
//! deadlock there (its watchdog wait has no time-out in the model).
//!
//! # Memory orderings
//! Every take is an Acquire CAS, paired with the Release CAS of the unlock that freed the lock.
//! The count and `WAKING` publish nothing (Relaxed); the futex system calls order the rest.
//!
//! ```c
//! pthread_mutex_lock(&m);   /* with LOCKLAB_MUTEX=adaptive (the default) */
//! pthread_mutex_unlock(&m);
//! ```

// `super::` rather than `crate::`: the loom model (`locklab`'s `loom_models::preload_adaptive`)
// includes this file beside a `sys` of its own, with loom's atomics and a model futex.
use super::sys;
use super::sys::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Held.
const LOCKED: u32 = 1;
/// An unlocker woke a sleeper that has not looked at the word since: unlocks do not wake another.
const WAKING: u32 = 2;
/// One sleeper in the count (bits 2-31).
const ONE: u32 = 4;
/// A spinner stops after the same owner has held the lock this long.
pub const OWNER_SPIN: Duration = Duration::from_micros(10);
/// Overall cap on spinning per acquisition.
pub const SPIN_MAX: Duration = Duration::from_micros(40);
/// Looks at the word with `pause`s before the spinner starts yielding the CPU between looks.
const PAUSE_LOOKS: u32 = 16;
/// Most `pause`s between two looks at the word.
const MAX_BACKOFF: u32 = 64;

/// The lock word of a `pthread_mutex_t` under the `adaptive` choice, with the owner field beside it.
#[derive(Clone, Copy)]
pub(crate) struct Adaptive {
    pub(crate) word: &'static AtomicU32,
    pub(crate) owner: &'static AtomicI32,
}

impl Adaptive {
    /// Takes a free lock with one CAS; `false` if the word is not exactly free.
    #[inline]
    pub(crate) fn try_lock_fast(self) -> bool {
        // Acquire pairs with the Release of the last unlock.
        self.word
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock if it is free, whatever else the word says.
    #[inline]
    pub(crate) fn try_lock(self) -> bool {
        let mut s = self.word.load(Ordering::Relaxed);
        while s & LOCKED == 0 {
            // Acquire pairs with the Release of the last unlock.
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

    /// Takes the lock after the caller's own attempt failed: straight to the spin, whose first
    /// look is a load (another failing CAS would only take the line from the holder).
    #[inline]
    pub(crate) fn lock_contended(self) {
        self.lock_slow(None);
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
        // The release and the decision to wake in one compare-and-swap, and nothing touches the
        // word after it: the next owner may destroy the mutex and reuse its memory at once (POSIX
        // allows it; glibc's unlock keeps the same rule, its wake-up never reads the address).
        // Sleepers and no wake-up in flight: this unlock wakes one. Nobody counted: a `WAKING`
        // left by a woken thread that is back (and clearing it too) or gone is cleared here.
        let wakes = |s: u32| s >= ONE && s & WAKING == 0;
        // Release pairs with the next taker's Acquire CAS.
        // (The closure always returns `Some`: `fetch_update` cannot fail.)
        let s = self
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                Some(if wakes(s) {
                    (s & !LOCKED) | WAKING
                } else if s < ONE {
                    s & !(LOCKED | WAKING)
                } else {
                    s & !LOCKED
                })
            })
            .unwrap_or_else(|s| s);
        if wakes(s) {
            // `futex_wake` never dereferences the address.
            sys::futex_wake(self.word, 1, false);
        }
    }

    /// Releases a lock whose word is exactly `LOCKED` with one CAS; `false` (nothing done) if the
    /// word says anything else (a sleeper arrived: [`unlock`](Self::unlock) then).
    #[inline(always)]
    pub(crate) fn unlock_quiet(self) -> bool {
        // Release pairs with the next taker's Acquire CAS.
        self.word
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
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

    /// Releases with a plain store a lock that shows nothing but its hold: only while the process
    /// has a single thread; `false` (nothing done) otherwise.
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
            if self.try_lock() {
                return true;
            }
            // Held when `try_lock` looked: count ourselves, unless the word changed since.
            let s = self.word.load(Ordering::Relaxed);
            if s & LOCKED == 0
                || self
                    .word
                    .compare_exchange(s, s + ONE, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            // The watchdog: a sleeper, timed or not, looks again at least every 100 ms
            // (invariant 2).
            let timed_out = !sys::futex_wait_watched(self.word, s + ONE, until);
            // Back (woken, a signal, the watchdog, or the word changed before the sleep): leave the
            // count and clear `WAKING` in one step (whoever was woken, it is this thread or one
            // that will look as this one does; a spare wake-up at worst).
            let _ = self
                .word
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some(s.wrapping_sub(ONE) & !WAKING)
                });
            if timed_out {
                return self.try_lock();
            }
        }
    }

    /// Optimistic spinning while the owner runs; `true` if it took the lock.
    fn spin(self) -> bool {
        // The clock is read from the eighth look on, not at the start: most spins end within a
        // few looks, and a clock reading (a vDSO call, tens of ns on a VM) on every contended
        // acquisition was a sixth of a contended loop's time. The first looks' backoff (at most
        // ~255 `pause`s) is then outside the budgets below.
        let mut start: Option<Instant> = None;
        let mut owner = self.owner.load(Ordering::Relaxed);
        let mut since: Option<Instant> = None;
        let mut backoff = 1u32;
        let mut looks = 0u32;
        loop {
            let s = self.word.load(Ordering::Relaxed);
            if s & LOCKED == 0 {
                // Acquire pairs with the Release of the last unlock.
                if self
                    .word
                    .compare_exchange(s, s | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            looks += 1;
            if sys::MODEL {
                // In the loom model: one look, then the sleeping path (the spin is time-bound).
                return false;
            }
            if looks < PAUSE_LOOKS {
                for _ in 0..backoff {
                    core::hint::spin_loop();
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            } else {
                // SAFETY: no arguments.
                unsafe { libc::sched_yield() };
            }
            if looks.is_multiple_of(8) {
                let now = Instant::now();
                let start = *start.get_or_insert(now);
                let o = self.owner.load(Ordering::Relaxed);
                if o != owner {
                    (owner, since) = (o, None);
                }
                let since = *since.get_or_insert(now);
                if now.duration_since(since) > OWNER_SPIN || now.duration_since(start) > SPIN_MAX {
                    return false;
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn leak() -> Adaptive {
        let word: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
        let owner: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
        Adaptive { word, owner }
    }

    #[test]
    fn more_threads_than_cpus_count_exactly_and_leave_the_word_clean() {
        let m = leak();
        let count: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        m.lock();
                        m.owner.store(t + 1, Ordering::Relaxed);
                        // A non-atomic read-modify-write under the lock: lost updates show races.
                        let v = count.load(Ordering::Relaxed);
                        count.store(v + 1, Ordering::Relaxed);
                        m.owner.store(0, Ordering::Relaxed);
                        m.unlock();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), 8 * 20_000);
        assert_eq!(
            m.word.load(Ordering::Relaxed),
            0,
            "no count, waking flag or hold left"
        );
    }

    #[test]
    fn a_sleeper_is_woken_by_an_unlock_from_another_thread() {
        let m = leak();
        m.lock();
        let waiter = std::thread::spawn(move || {
            m.lock();
            m.unlock();
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            m.word.load(Ordering::Relaxed) >= ONE,
            "the waiter sleeps, counted"
        );
        m.unlock();
        waiter.join().unwrap();
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_timed_lock_times_out_and_leaves_its_count() {
        let m = leak();
        m.lock();
        let mut abs = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut abs) };
        abs.tv_nsec += 20_000_000;
        if abs.tv_nsec >= 1_000_000_000 {
            abs.tv_sec += 1;
            abs.tv_nsec -= 1_000_000_000;
        }
        let t = std::thread::spawn(move || m.lock_until(libc::CLOCK_MONOTONIC, &abs));
        assert!(!t.join().unwrap());
        assert_eq!(m.word.load(Ordering::Relaxed), LOCKED);
        m.unlock();
        assert!(m.try_lock());
        m.unlock();
    }

    #[test]
    fn a_stale_count_costs_a_wake_up_not_a_hang() {
        // A waiter that vanished (siglongjmp, a fork child) left its count behind: the lock is
        // still taken and released; the unlock's wake-up finds nobody and leaves `WAKING` set.
        let m = leak();
        m.word.store(ONE, Ordering::Relaxed);
        assert!(!m.try_lock_fast());
        m.lock();
        m.unlock();
        assert_eq!(m.word.load(Ordering::Relaxed), ONE | WAKING);
        // A stale WAKING alone neither keeps the lock from being taken nor outlives the next
        // unlock that finds nobody counted.
        m.word.store(WAKING, Ordering::Relaxed);
        m.lock();
        m.unlock();
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
        // Beside a stale count, a real sleeper is not woken by the unlock (a wake-up seems to be in
        // flight) but looks again at its watchdog and gets the lock: a delay, not a hang.
        m.word.store(ONE | WAKING, Ordering::Relaxed);
        m.lock();
        let t = std::thread::spawn(move || {
            m.lock();
            m.unlock();
        });
        std::thread::sleep(Duration::from_millis(20));
        m.unlock();
        t.join().unwrap();
        let left = m.word.load(Ordering::Relaxed);
        assert_eq!(left & LOCKED, 0, "released");
        assert_eq!(left & !(LOCKED | WAKING), ONE, "only the stale count left");
    }
}
