//! What every flavour's grace periods share: the sequence number that lets concurrent callers share one
//! grace period and gives polled cookies, the lock that serialises grace periods, the futex their
//! callers sleep on, and the repairs a `fork()` child needs.
//!
//! # State
//! - `seq`: even while no grace period runs, odd while one does (`protocol::seq_snap`); a polled
//!   cookie is a future value of `seq`.
//! - `completed`: grace periods completed (statistics, and the callbacks' segment targets).
//! - `word`: bumped after every grace period (and after an unwound one); callers that wait for a
//!   running grace period sleep on it.
//! - `owner`: the lock that serialises grace periods, taken by a CAS from 0 (free) to the holder's
//!   identity, the address of a thread-local, which the forking thread keeps in a `fork()` child
//!   (its kernel thread id changes). Being held and saying by whom is one store, so a child always
//!   tells a lock held by a thread that does not exist in it, whichever instruction the fork caught
//!   that thread at. `sleepers` (1 while a thread waits for it) is the futex word waiters sleep on.
//!
//! # Invariants
//! 1. Only the holder of the lock (`owner`) writes `seq` and `completed`.
//! 2. `seq` only grows, except that an unwound grace period puts it back to the even value it had
//!    (waiters then wait for a later grace period; none returns early).

use super::protocol;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::time::Duration;

/// A grace-period sequence and its lock (module docs).
pub(super) struct GpSeq {
    seq: AtomicU64,
    completed: AtomicU64,
    word: AtomicU32,
    /// The lock: its holder's [`thread_identity`], 0 when free (see `lock`).
    owner: AtomicUsize,
    /// 1 while a thread waits (or is about to) for `owner`; their futex word.
    sleepers: AtomicU32,
}

/// Holds a [`GpSeq`]'s lock; releases it when dropped.
pub(super) struct GpLockGuard<'a>(&'a GpSeq);

impl Drop for GpLockGuard<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

impl GpSeq {
    pub(super) const fn new() -> Self {
        GpSeq {
            seq: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            word: AtomicU32::new(0),
            owner: AtomicUsize::new(0),
            sleepers: AtomicU32::new(0),
        }
    }

    /// Takes the grace-period lock (no grace period runs while it is held): a CAS of `owner` from
    /// 0 to our identity, else announce in `sleepers`, retry, sleep. Holders are few (grace periods,
    /// the grace-period thread's passes), and a `fork()` child must be able to release one whose
    /// holder is gone (module docs).
    pub(super) fn lock(&self) -> GpLockGuard<'_> {
        let me = thread_identity();
        // Acquire (both CASes): pairs with the Release in `unlock`; the last holder's writes are ours.
        let take = || {
            self.owner
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        while !take() {
            // Dekker's pattern with `unlock` (SeqCst fences on both sides): either our retry sees the
            // lock free, or the unlocker sees `sleepers == 1` and wakes us.
            self.sleepers.store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if take() {
                break;
            }
            crate::sys::futex_wait(&self.sleepers, 1, None);
        }
        GpLockGuard(self)
    }

    fn unlock(&self) {
        // Release: pairs with the Acquire CAS in `lock`.
        self.owner.store(0, Ordering::Release);
        // See `lock`. Every sleeper is woken: the flag does not count them.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0
            && self.sleepers.swap(0, Ordering::Relaxed) != 0
        {
            crate::sys::futex_wake(&self.sleepers, u32::MAX);
        }
    }

    /// Grace periods completed. Acquire: pairs with the Release increment at the end of each, so a
    /// caller that sees the count sees the grace period's waits done.
    pub(super) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// A cookie for the first grace period that starts after now (`protocol::seq_snap`).
    pub(super) fn snap(&self) -> u64 {
        protocol::seq_snap(&self.seq)
    }

    /// Whether the grace period named by `cookie` has ended (`protocol::seq_done`).
    pub(super) fn done(&self, cookie: u64) -> bool {
        protocol::seq_done(&self.seq, cookie)
    }

    /// Runs `grace_period` (a flavour's protocol) as a grace period shared with concurrent callers,
    /// until the one named by `cookie` has ended (none runs if it already has).
    pub(super) fn run_until(&self, cookie: u64, grace_period: impl FnOnce()) {
        protocol::run_grace_period_until(
            &self.seq,
            &self.completed,
            cookie,
            || self.lock(),
            |seen| self.wait_change(seen),
            || self.ended(),
            grace_period,
        );
    }

    /// A grace period shared with concurrent callers: one that starts after the call has ended when
    /// this returns (`protocol::shared_grace_period`).
    pub(super) fn synchronize(&self, grace_period: impl FnOnce()) {
        protocol::shared_grace_period(
            &self.seq,
            &self.completed,
            || self.lock(),
            |seen| self.wait_change(seen),
            || self.ended(),
            grace_period,
        );
    }

    /// Sleeps until `seq` may differ from `seen`. The futex word changes (then wakes everyone) after
    /// every grace period, after `seq` did: read it, re-check `seq`, sleep while the word is unchanged.
    /// A grace period that ends in between changes the word, so the sleep returns at once.
    fn wait_change(&self, seen: u64) {
        // SeqCst on the three accesses (here and in `ended`): the word's load must not pass the
        // `seq` check.
        let w = self.word.load(Ordering::SeqCst);
        if self.seq.load(Ordering::SeqCst) == seen {
            crate::sys::futex_wait(&self.word, w, Some(Duration::from_millis(10)));
        }
    }

    /// After a grace period (or an unwound one): wakes the callers waiting for `seq` to change.
    fn ended(&self) {
        // SeqCst: see `wait_change` (after `seq`'s Release store).
        self.word.fetch_add(1, Ordering::SeqCst);
        crate::sys::futex_wake(&self.word, u32::MAX);
    }

    /// In a `fork()` child: a grace period that another thread was running at the fork will never
    /// end here (that thread does not exist in the child). Releases its lock and puts `seq` back
    /// (invariant 2). A lock held by the forking thread itself is left alone.
    pub(super) fn repair_after_fork(&self) {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != 0 && owner != thread_identity() {
            let s = self.seq.load(Ordering::Relaxed);
            if s & 1 == 1 {
                // Release: as an unwound grace period's (protocol.rs), pairing with the callers'
                // Acquire loads of `seq`; nothing was freed on the strength of it.
                self.seq.store(s - 1, Ordering::Release);
            }
            // The holder does not exist in the child, and the lock protects no data (it only
            // serialises grace periods, whose state was just repaired). Nobody sleeps on it here.
            self.owner.store(0, Ordering::Relaxed);
            self.sleepers.store(0, Ordering::Relaxed);
        }
    }
}

/// The calling thread's identity, kept across `fork()` by the forking thread: the address of one of
/// its thread-locals (no destructor, so valid for the whole thread).
pub(super) fn thread_identity() -> usize {
    std::thread_local! {
        static ME: u8 = const { 0 };
    }
    ME.with(|m| m as *const u8 as usize)
}
