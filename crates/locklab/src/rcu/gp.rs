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
//! - `lock`: serialises grace periods; `owner` identifies its holder (0: free) by the address of a
//!   thread-local, which the forking thread keeps in a `fork()` child (its kernel thread id changes),
//!   so the child can tell a lock held by a thread that does not exist in it.
//!
//! # Invariants
//! 1. Only the holder of `lock` writes `seq` and `completed`.
//! 2. `seq` only grows, except that an unwound grace period puts it back to the even value it had
//!    (waiters then wait for a later grace period; none returns early).

use super::protocol;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// A grace-period sequence and its lock (module docs).
pub(super) struct GpSeq {
    seq: AtomicU64,
    completed: AtomicU64,
    word: AtomicU32,
    /// 0: free, 1: held, 2: held with sleepers (a futex lock: see `lock`).
    lock: AtomicU32,
    owner: AtomicUsize,
}

/// Holds a [`GpSeq`]'s lock; releases it when dropped.
pub(super) struct GpLockGuard<'a>(&'a GpSeq);

impl Drop for GpLockGuard<'_> {
    fn drop(&mut self) {
        // Relaxed: read only by a fork child's repair, which runs on the forking thread.
        self.0.owner.store(0, Ordering::Relaxed);
        self.0.unlock();
    }
}

impl GpSeq {
    pub(super) const fn new() -> Self {
        GpSeq {
            seq: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            word: AtomicU32::new(0),
            lock: AtomicU32::new(0),
            owner: AtomicUsize::new(0),
        }
    }

    /// Takes the grace-period lock (no grace period runs while it is held). A three-state futex lock
    /// (free, held, held with sleepers): holders are few (grace periods, the grace-period thread's
    /// passes), and a `fork()` child must be able to release one whose holder is gone.
    pub(super) fn lock(&self) -> GpLockGuard<'_> {
        // Acquire (all three): pairs with the Release in `unlock`; the last holder's writes are ours.
        if self
            .lock
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.lock.swap(2, Ordering::Acquire) != 0 {
                crate::sys::futex_wait(&self.lock, 2, None);
            }
        }
        // Relaxed: see `GpLockGuard::drop`.
        self.owner.store(thread_identity(), Ordering::Relaxed);
        GpLockGuard(self)
    }

    fn unlock(&self) {
        // Release: pairs with the Acquire in `lock`.
        if self.lock.swap(0, Ordering::Release) == 2 {
            crate::sys::futex_wake(&self.lock, 1);
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
            self.owner.store(0, Ordering::Relaxed);
            // The holder does not exist in the child, and the lock protects no data (it only
            // serialises grace periods, whose state was just repaired).
            self.unlock();
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
