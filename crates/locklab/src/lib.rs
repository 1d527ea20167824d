//! # locklab
//!
//! The Linux kernel's synchronization primitives, brought to userspace Rust, each a drop-in
//! [`lock_api`] raw lock:
//!
//! | type               | raw                         | what it is                                         |
//! |--------------------|-----------------------------|----------------------------------------------------|
//! | [`TasLock`]        | [`raw::RawTasLock`]         | test-and-test-and-set with backoff (baseline)       |
//! | [`TicketLock`]     | [`raw::RawTicketLock`]      | FIFO ticket lock; unlock is a plain store          |
//! | [`McsLock`]        | [`raw::RawMcsLock`]         | MCS queue lock; local spinning                     |
//! | [`QueuedSpinLock`] | [`raw::RawQueuedSpinLock`]  | the kernel's qspinlock; 4 bytes; unlock is a store |
//! | [`SpinLock`]       | = `QueuedSpinLock`          | the spinlock to pick                               |
//! | [`Mutex`]          | [`raw::RawMutex`]           | adaptive futex mutex: OSQ spinning, FIFO sleepers, hand-off |
//! | [`Condvar`]        | [`raw::RawCondvar`]         | condvar for `Mutex`; requeues instead of waking a herd |
//! | [`RwSpinLock`]     | [`raw::RawRwSpinLock`]      | the kernel's queued rwlock (reader count + writer byte) |
//! | [`RwSem`]          | [`raw::RawRwSem`]           | rw-semaphore: writer spinning, hand-off, batched reader wake-ups |
//! | [`PercpuRwSem`]    | [`raw::RawPercpuRwSem`]     | per-thread reader counters + membarrier: reads with no locked op |
//! | [`BrLock`]         | [`raw::RawBrLock`]          | big-reader lock, one spinlock per CPU (the contrast) |
//! | [`LockRef`]        | -                           | spinlock + count in one word, updated by one cmpxchg |
//! | [`SeqLock`]        | -                           | sequence lock: readers retry, writers never wait for them |
//!
//! ```
//! use locklab::{Mutex, Condvar, SpinLock};
//! let m = Mutex::new(0);
//! *m.lock() += 1;
//! let s = SpinLock::new(vec![1]);
//! s.lock().push(2);
//! assert_eq!((*m.lock(), s.lock().len()), (1, 2));
//! let _cv = Condvar::new();
//! ```
//!
//! Each primitive's module opens with its algorithm, state layout, transitions, invariants and memory
//! orderings. Atomics come from the `primitive` loom shim, so every protocol is model-checked under
//! `RUSTFLAGS="--cfg loom"` (the models are in `src/loom_models.rs`).
//!
//! # Safe under anything safe code can do
//! `mem::forget` of any number of guards, counts driven to their bounds (a panic or, for reference
//! counts, an abort, never a wrap), a thread stalled between any two instructions, guards dropped in
//! thread-local destructors after the thread's queue nodes are gone: each keeps mutual exclusion. See
//! the README's "Soundness" section for the list and the tests.
//!
//! # Signal handlers
//! No lock here is async-signal-safe (std's are not either): a handler that takes a lock its thread
//! holds, or interrupts its thread inside a lock's internal list lock, can deadlock, and a thread's
//! first use of a lock may allocate. None of them corrupts memory when used from a handler: nodes that
//! a handler could reuse are claimed first, and the percpu rwsem's counter update is one instruction
//! on x86-64.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(not(loom))]
pub mod brlock;
mod clock;
pub mod condvar;
pub mod lockref;
pub mod mutex;
mod osq;
pub mod percpu_rwsem;
mod primitive;
pub mod rwsem;
pub mod rwspinlock;
pub mod seqlock;
pub mod spin;
pub mod sys;
#[cfg(not(loom))]
mod thread_slot;
mod wait_list;

#[cfg(all(test, not(loom)))]
mod exit_tests;
#[cfg(all(test, loom))]
mod loom_models;

/// The raw lock types, for use with [`lock_api`] directly or for building other primitives.
pub mod raw {
    #[cfg(not(loom))]
    pub use crate::brlock::{BrReadGuard, RawBrLock};
    pub use crate::condvar::RawCondvar;
    pub use crate::mutex::{MutexToken, RawMutex};
    pub use crate::percpu_rwsem::{PercpuReadToken, PercpuWriteToken, RawPercpuRwSem};
    pub use crate::rwsem::{RawRwSem, RwSemToken};
    pub use crate::rwspinlock::RawRwSpinLock;
    pub use crate::spin::mcs::{McsGuard, McsNode, RawMcsLock};
    pub use crate::spin::qspinlock::RawQueuedSpinLock;
    pub use crate::spin::tas::RawTasLock;
    pub use crate::spin::ticket::RawTicketLock;
}

#[cfg(not(loom))]
mod aliases {
    use crate::raw;

    /// A test-and-test-and-set spinlock protecting a `T`.
    pub type TasLock<T> = lock_api::Mutex<raw::RawTasLock, T>;
    /// Guard of a [`TasLock`].
    pub type TasLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawTasLock, T>;
    /// A FIFO ticket spinlock protecting a `T`.
    pub type TicketLock<T> = lock_api::Mutex<raw::RawTicketLock, T>;
    /// Guard of a [`TicketLock`].
    pub type TicketLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawTicketLock, T>;
    /// An MCS queue lock protecting a `T`.
    pub type McsLock<T> = lock_api::Mutex<raw::RawMcsLock, T>;
    /// Guard of an [`McsLock`].
    pub type McsLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawMcsLock, T>;
    /// A queued spinlock (qspinlock) protecting a `T`.
    pub type QueuedSpinLock<T> = lock_api::Mutex<raw::RawQueuedSpinLock, T>;
    /// Guard of a [`QueuedSpinLock`].
    pub type QueuedSpinLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawQueuedSpinLock, T>;
    /// The spinlock to pick: the queued spinlock.
    pub type SpinLock<T> = QueuedSpinLock<T>;
    /// Guard of a [`SpinLock`].
    pub type SpinLockGuard<'a, T> = QueuedSpinLockGuard<'a, T>;
    /// The adaptive futex mutex protecting a `T`.
    pub type Mutex<T> = lock_api::Mutex<raw::RawMutex, T>;
    /// Guard of a [`Mutex`].
    pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawMutex, T>;
    /// A condition variable for [`Mutex`].
    pub type Condvar = lock_api::Condvar<raw::RawCondvar>;
    /// A queued reader-writer spinlock protecting a `T`.
    pub type RwSpinLock<T> = lock_api::RwLock<raw::RawRwSpinLock, T>;
    /// The reader-writer semaphore (optimistic spinning, hand-off, batched reader wake-ups).
    pub type RwSem<T> = lock_api::RwLock<raw::RawRwSem, T>;
    /// The percpu rw-semaphore: reads with no locked instruction, writes with a `membarrier`.
    pub type PercpuRwSem<T> = lock_api::RwLock<raw::RawPercpuRwSem, T>;
    /// A big-reader lock (one spinlock per CPU) protecting a `T`.
    pub type BrLock<T> = lock_api::RwLock<raw::RawBrLock, T>;
    pub use crate::lockref::{LockRef, LockRefArc};
    pub use crate::seqlock::{SeqCount, SeqLock, SeqLockWriteGuard};
    /// Whether a timed condvar wait timed out.
    pub use lock_api::WaitTimeoutResult;
}

#[cfg(not(loom))]
pub use aliases::*;
