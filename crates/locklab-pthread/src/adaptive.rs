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
//!   a look at the word (a CAS only if it shows the lock free), then
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
//! - **Spin history** (glibc's `__spins`, the 16-bit field at bytes 20-21, where glibc's adaptive
//!   mutex keeps its own spin estimate; `__elision` beside it is left alone): a failure level in
//!   the high 4 bits and a count of skips in the low 12. A spin that ends without the lock raises
//!   the level (to at most [`LEVEL_MAX`]) and sets the skips to [`SKIPS_BASE`] doubled per level
//!   above 1 (16, 32, ... 512); one that takes it lowers the level by 1. While skips are left, a
//!   contended acquisition goes straight to the sleep after one look and takes 1 off. A mutex held
//!   across system calls or long sections (sysbench's `threads` test holds its mutex across
//!   `sched_yield`; 83% of its spins failed) climbs to the top level and then probes with a spin
//!   on about one contended acquisition in 500, and its waiters no longer keep CPUs busy that the
//!   holders' yields would have left to them; a mutex whose spins succeed (short sections, 304
//!   failures in 469,000 spins at 16-64 threads, cs 50 ns) stays at level 0 and spins every time,
//!   a rare failure costing it 16 skipped spins. The history is a hint: plain loads and stores,
//!   racing updates lose a step, and a value the program wrote itself is at most 4,095 skips, its
//!   level clamped by the first update.
//! - **Sleep** (glibc's protocol): `swap(word, LOCKED | SLEEPERS)`; if the old word was free, the
//!   lock is taken (with the mark: this thread cannot know whether others sleep); else
//!   `futex_wait` on `LOCKED | SLEEPERS` (with no time-out of its own: a timed lock's deadline
//!   only), and back from the sleep (woken, a signal, the word changed first), the swap again. Once
//!   a thread has slept it never takes the lock without the mark. Before each sleep the thread
//!   records the word in a thread-local (put back as it was when the call returns): what the
//!   library's signal-handler wrapper passes on (invariant 2).
//! - **Unlock**: `swap(word, 0)`, then a futex wake of one sleeper if the old word had `SLEEPERS`.
//!   Nothing reads or writes the word after the swap (the next owner may destroy the mutex and
//!   reuse its memory at once). The unlock that wakes clears the mark, so the unlocks after it are
//!   quiet until the woken thread (or a new sleeper) marks the word again: no herd of wake-ups
//!   while the woken thread waits for a CPU, and no slow path for anyone meanwhile.
//!
//! Why not a sleeper count in the word (the design before, with a `WAKING` bit): a sleeper's count
//! stayed in the word from its sleep until it ran again after its wake-up, and with threads
//! outnumbering CPUs a woken thread waits for a CPU behind a run queue of others. All that time the
//! word was neither 0 nor `LOCKED`, so every lock and every unlock failed its fast path's CAS and
//! went through the general functions (the unlocks without a wake-up: `WAKING` held them back). In
//! one 16-thread run on 2 CPUs (50 ns sections), 1,425,098 of the run's 1,426,767 general locks found
//! a count in the word, for 78 sleeps. The mark is cleared by the unlock that wakes: one slow unlock
//! per wake-up, and the fast paths for everyone until the woken thread looks again.
//!
//! # State word (bytes 0-3 of `pthread_mutex_t`)
//! | bits | name       | meaning                                                         |
//! |------|------------|-----------------------------------------------------------------|
//! | 0    | `LOCKED`   | held                                                            |
//! | 1    | `SLEEPERS` | a thread may sleep on the word: the unlock wakes one            |
//! | 2-31 |            | always 0                                                        |
//!
//! Values: 0 free; `LOCKED` held, nobody marked asleep (the fast paths' two values);
//! `LOCKED | SLEEPERS` held, a sleeper may be waiting. A free word is always 0: only the unlock
//! frees it, with a swap to 0. Transitions: take `0 -> LOCKED` (CAS: fast path, look, spin);
//! sleep `s -> LOCKED | SLEEPERS` (swap: a take if `s` was free, a mark if held); unlock
//! `s -> 0` (swap, or the fast path's CAS from exactly `LOCKED`) and a wake-up if `s` had
//! `SLEEPERS`.
//!
//! # Invariants
//! 1. No lost wake-up: a thread sleeps only on `LOCKED | SLEEPERS`, which its own swap wrote or
//!    found (the kernel compares and sleeps atomically), so an unlock between its swap and its
//!    sleep makes the sleep return at once. Only an unlock removes the mark, and it then wakes one
//!    sleeper. Every sleeper left asleep is covered: the woken thread swaps the mark back in at once
//!    (taking the lock with it, whose unlock wakes the next, or marking the holder's word and sleeping
//!    again), so the chain of wake-ups goes on until a wake-up finds nobody (a spare wake-up, as
//!    glibc's). A newcomer that takes the free word with a plain `LOCKED` in the meantime only delays
//!    the woken thread's swap.
//! 2. Nothing outside the word refers to a waiter, and the word holds no count. A waiter that leaves
//!    without finishing (`siglongjmp`, thread death in a `fork` child) leaves at most the mark
//!    (the next unlock makes a spare wake-up): a cost, never a hang. A woken thread, though, took
//!    the mark with its wake-up and owes it to the sleepers behind it until its next swap. In a
//!    `fork` child those sleepers are gone with it. In its own process it can leave its wait for
//!    good only from a signal handler (`siglongjmp`, `setcontext`, a `throw`, `pthread_exit`;
//!    `pthread_mutex_lock` is no cancellation point), and the library runs every handler the
//!    program installs behind a wrapper that first wakes one sleeper of the word the thread
//!    recorded (`pass_on_owed`; a spare wake-up when the thread owed nothing). A handler the
//!    program installs with the raw `rt_sigaction` system call has no wrapper: leaving a wait from
//!    one strands the sleepers behind it, as glibc's mutex does for every handler
//!    (`tests/c/jump_out_of_wait.c`). A timed locker that gives up leaves the mark its last swap
//!    wrote: a spare wake-up at most.
//! 3. A nested acquisition by a signal handler of the lock its thread waits for is an ordinary
//!    locker: it spins or sleeps on the word like any other thread and is woken like one.
//!
//! No FIFO order and no hand-off, as glibc: a woken sleeper competes with newcomers.
//!
//! A loom model runs this file unchanged over a model futex (`locklab`'s
//! `loom_models::preload_adaptive`): three lockers, two lockers twice each, a timed-out locker among
//! plain ones, three threads running the exported calls' fast paths; a lost wake-up is a deadlock
//! there. `preload_adaptive_interrupts` adds a woken thread that leaves its wait with its wake-up
//! passed on, as the handler wrapper does (and deadlocks without the pass-on).
//!
//! # Memory orderings
//! Every take (a CAS or the sleeper's swap) is Acquire, paired with the Release swap or CAS of the
//! unlock that freed the lock. The mark publishes nothing of its own; the futex system calls order
//! the sleep and the wake-up.
//!
//! ```c
//! pthread_mutex_lock(&m);   /* with LOCKLAB_MUTEX=adaptive (the default) */
//! pthread_mutex_unlock(&m);
//! ```

// `super::` rather than `crate::`: the loom model (`locklab`'s `loom_models::preload_adaptive`)
// includes this file beside a `sys` of its own, with loom's atomics and a model futex.
use super::sys;
use super::sys::atomic::{AtomicI32, AtomicU16, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Held.
const LOCKED: u32 = 1;
/// A thread may sleep on the word: the unlock that clears it wakes one.
const SLEEPERS: u32 = 2;
/// A spinner stops after the same owner has held the lock this long.
pub const OWNER_SPIN: Duration = Duration::from_micros(10);
/// Overall cap on spinning per acquisition.
pub const SPIN_MAX: Duration = Duration::from_micros(40);
/// The spin history's skip count: its low 12 bits, the contended acquisitions left that skip
/// the spin.
const SKIP_MASK: u16 = 0x0fff;
/// The spin history's failure level: its high 4 bits (0 while spins succeed).
const LEVEL_SHIFT: u32 = 12;
/// The highest failure level.
pub const LEVEL_MAX: u16 = 6;
/// The skips a failed spin sets at failure level 1; each level above doubles them (512 at
/// [`LEVEL_MAX`]).
pub const SKIPS_BASE: u16 = 16;
/// Looks at the word with `pause`s before the spinner starts yielding the CPU between looks.
const PAUSE_LOOKS: u32 = 16;
/// Most `pause`s between two looks at the word.
const MAX_BACKOFF: u32 = 64;

/// The lock word of a `pthread_mutex_t` under the `adaptive` choice, with the owner field beside it.
#[derive(Clone, Copy)]
pub(crate) struct Adaptive {
    pub(crate) word: &'static AtomicU32,
    pub(crate) owner: &'static AtomicI32,
    /// The spin history ([`LEVEL_MAX`], [`SKIPS_BASE`]): glibc's `__spins`, where glibc's adaptive mutex keeps its
    /// own estimate of how long to spin.
    pub(crate) spins: &'static AtomicU16,
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

    /// Takes the lock if it is free (a look, then a CAS only on a free word).
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
        // The release and the decision to wake in one swap, and nothing touches the word after it:
        // the next owner may destroy the mutex and reuse its memory at once (POSIX allows it;
        // glibc's unlock keeps the same rule, its wake-up never reads the address). The swap
        // clears the mark: the thread woken here puts it back when it looks again (invariant 1).
        // Release pairs with the next taker's Acquire (CAS or swap).
        let s = self.word.swap(0, Ordering::Release);
        if s & SLEEPERS != 0 {
            // `futex_wake` never dereferences the address.
            sys::futex_wake(self.word, 1, false);
        }
    }

    /// Releases a lock whose word is exactly `LOCKED` with one CAS; `false` (nothing done) if the
    /// word says anything else (a sleeper marked it: [`unlock`](Self::unlock) then).
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
        // The word this thread may owe a wake-up to while it sleeps (invariant 2): a signal
        // handler that interrupts the loop passes it on before the program's handler runs,
        // whatever way that handler then leaves (`crate::signals`). The previous value is an
        // interrupted outer wait's (this call in a handler), put back on the way out.
        let outer = sys::owed_word();
        let took = loop {
            // Take a free word or mark a held one, in one step; from here on this thread takes the
            // lock only with the mark (it may have taken a wake-up's mark away from other sleepers).
            // Acquire pairs with the Release of the unlock that freed the lock.
            if self.word.swap(LOCKED | SLEEPERS, Ordering::Acquire) & LOCKED == 0 {
                break true;
            }
            sys::set_owed_word(self.word);
            // Marked and held when the swap looked. Back (woken, a signal, the word changed
            // before the sleep): the swap again, which puts the mark back.
            if !sys::futex_wait_until(self.word, LOCKED | SLEEPERS, until) {
                // Timed out: the mark this thread's last swap wrote (or found) stays for the
                // holder's unlock: a spare wake-up at most, never a sleeper left unwoken.
                break false;
            }
        };
        sys::set_owed_word_ptr(outer);
        took
    }

    /// Optimistic spinning, unless the spins on this mutex have lately failed; `true` if it took
    /// the lock.
    fn spin(self) -> bool {
        if sys::MODEL {
            // In the loom model: one look, then the sleeping path (the spin is time-bound, and
            // the history below is a hint that no step of the protocol reads).
            return self.try_lock();
        }
        // The history is a hint, read and written with plain loads and stores: racing updates
        // lose a step, and a value the program wrote itself is at most 4095 skips, after which
        // the first update clamps its level.
        let h = self.spins.load(Ordering::Relaxed);
        let skips = h & SKIP_MASK;
        let level = (h >> LEVEL_SHIFT).min(LEVEL_MAX);
        if skips > 0 {
            self.spins.store(h - 1, Ordering::Relaxed);
            return self.try_lock();
        }
        let took = self.spin_while_held();
        let next = if took {
            level.saturating_sub(1) << LEVEL_SHIFT
        } else {
            let level = (level + 1).min(LEVEL_MAX);
            level << LEVEL_SHIFT | SKIPS_BASE << (level - 1)
        };
        if next != h {
            self.spins.store(next, Ordering::Relaxed);
        }
        took
    }

    /// Optimistic spinning while the owner runs; `true` if it took the lock.
    fn spin_while_held(self) -> bool {
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

/// Passes on a wake-up this thread may owe (invariant 2): called by the library's wrapper
/// (`crate::signals`) before the program's signal handler runs, since that handler may leave the
/// interrupted wait for good. Wakes one sleeper of the word this thread sleeps on (or slept on last
/// in a wait it left): a spare wake-up when it owed none, and harmless on a word since freed (a
/// futex wake never dereferences the address; its error, `EFAULT` on memory since unmapped, is
/// not the interrupted code's: errno is kept).
pub(crate) fn pass_on_owed() {
    let w = sys::owed_word();
    if !w.is_null() {
        let e = sys::errno();
        sys::futex_wake(w, 1, false);
        sys::set_errno(e);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn leak() -> Adaptive {
        let word: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
        let owner: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
        let spins: &'static AtomicU16 = Box::leak(Box::new(AtomicU16::new(0)));
        Adaptive { word, owner, spins }
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
        assert_eq!(m.word.load(Ordering::Relaxed), 0, "no mark or hold left");
    }

    /// Locks `m` from another thread while this one holds it for `hold`, then releases it.
    fn contend_once(m: Adaptive, hold: Duration) {
        m.lock();
        m.owner.store(1, Ordering::Relaxed);
        let locker = std::thread::spawn(move || {
            m.lock();
            m.unlock();
        });
        std::thread::sleep(hold);
        m.owner.store(0, Ordering::Relaxed);
        m.unlock();
        locker.join().unwrap();
    }

    /// The history's value for a failure level and a skip count.
    fn history(level: u16, skips: u16) -> u16 {
        level << LEVEL_SHIFT | skips
    }

    #[test]
    fn failed_spins_build_a_history_that_skips_spins_and_decays() {
        let m = leak();
        // Held 20 ms, far past the spin's budgets: the locker's spin fails and it sleeps.
        contend_once(m, Duration::from_millis(20));
        assert_eq!(m.spins.load(Ordering::Relaxed), history(1, SKIPS_BASE));
        // Skips left: each contended acquisition skips its spin and takes 1 off.
        contend_once(m, Duration::from_millis(20));
        assert_eq!(m.spins.load(Ordering::Relaxed), history(1, SKIPS_BASE - 1));
        // No skips left: the locker spins again; another failure raises the level and doubles the
        // skips.
        m.spins.store(history(1, 0), Ordering::Relaxed);
        contend_once(m, Duration::from_millis(20));
        assert_eq!(m.spins.load(Ordering::Relaxed), history(2, 2 * SKIPS_BASE));
        // The level stops at its ceiling; a level out of range (the program's own bytes) is
        // clamped by the first update.
        m.spins.store(history(LEVEL_MAX, 0), Ordering::Relaxed);
        contend_once(m, Duration::from_millis(20));
        let top = history(LEVEL_MAX, SKIPS_BASE << (LEVEL_MAX - 1));
        assert_eq!(m.spins.load(Ordering::Relaxed), top);
        m.spins.store(history(15, 0), Ordering::Relaxed);
        contend_once(m, Duration::from_millis(20));
        assert_eq!(m.spins.load(Ordering::Relaxed), top);
        // Uncontended acquisitions never touch it.
        m.lock();
        m.unlock();
        assert_eq!(m.spins.load(Ordering::Relaxed), top);
    }

    #[test]
    fn a_spin_that_takes_the_lock_lowers_the_level() {
        let m = leak();
        let ready: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
        // Released a few microseconds after the locker starts: most tries catch it in its spin
        // (10 us with the same owner); one that slept instead leaves the history higher.
        let mut lowered = false;
        for _ in 0..200 {
            m.spins.store(history(2, 0), Ordering::Relaxed);
            ready.store(0, Ordering::Relaxed);
            m.lock();
            let locker = std::thread::spawn(move || {
                ready.store(1, Ordering::Relaxed);
                m.lock();
                m.unlock();
            });
            while ready.load(Ordering::Relaxed) == 0 {
                core::hint::spin_loop();
            }
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(3) {
                core::hint::spin_loop();
            }
            m.unlock();
            locker.join().unwrap();
            if m.spins.load(Ordering::Relaxed) == history(1, 0) {
                lowered = true;
                break;
            }
        }
        assert!(lowered, "no spin took the lock in 200 tries");
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
        assert_eq!(
            m.word.load(Ordering::Relaxed),
            LOCKED | SLEEPERS,
            "the waiter sleeps, the word marked"
        );
        m.unlock();
        waiter.join().unwrap();
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_timed_lock_times_out_and_leaves_the_mark() {
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
        assert_eq!(m.word.load(Ordering::Relaxed), LOCKED | SLEEPERS);
        // A spare wake-up, and the word is clean.
        m.unlock();
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
        assert!(m.try_lock());
        m.unlock();
    }

    #[test]
    fn a_stale_mark_costs_a_wake_up_not_a_hang() {
        // A waiter that vanished (siglongjmp, a fork child) left the mark behind: the lock is still
        // taken and released, the unlock's wake-up finds nobody, and the word is clean after it.
        let m = leak();
        m.word.store(LOCKED | SLEEPERS, Ordering::Relaxed);
        assert!(!m.try_lock_fast());
        assert!(
            !m.unlock_quiet(),
            "a marked word goes to the general unlock"
        );
        m.unlock();
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
        assert!(m.try_lock_fast());
        assert!(m.unlock_quiet());
    }

    #[test]
    fn a_sleeper_whose_wake_up_went_to_a_thread_that_left_is_woken_by_its_handler_wrapper() {
        // A sleeper marks the word; the mark then goes as an unlock's would, to a woken thread that
        // leaves from a signal handler (taken away here by hand), and the holder's release is quiet.
        // What the library's wrapper runs before that handler (here on a thread whose owed word is
        // the mutex's) wakes the sleeper, which gets the lock.
        let m = leak();
        m.lock();
        let t = std::thread::spawn(move || {
            m.lock();
            m.unlock();
        });
        while m.word.load(Ordering::Relaxed) != LOCKED | SLEEPERS {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            m.word
                .compare_exchange(
                    LOCKED | SLEEPERS,
                    LOCKED,
                    Ordering::Relaxed,
                    Ordering::Relaxed
                )
                .is_ok()
        );
        assert!(m.unlock_quiet());
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.is_finished(), "nothing has woken the sleeper yet");
        sys::set_owed_word(m.word);
        pass_on_owed();
        sys::set_owed_word_ptr(core::ptr::null());
        t.join().unwrap();
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
    }
}
