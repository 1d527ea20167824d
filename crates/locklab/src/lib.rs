//! # locklab
//!
//! The Linux kernel's synchronization primitives, brought to userspace Rust, each a drop-in
//! [`lock_api`] raw lock, and userspace RCU ([`rcu`]).
//!
//! ## Which one?
//!
//! | your data | use |
//! |---|---|
//! | a short critical section, threads <= CPUs | [`SpinLock`] (queued spinlock; unlock is one store) |
//! | any critical section, or more threads than CPUs | [`Mutex`] (+ [`Condvar`]) |
//! | read mostly, writers now and then | [`RwSem`] |
//! | read constantly, written rarely | [`PercpuRwSem`] (no locked instruction per read) |
//! | readers that read again while holding a read lock | [`RecursiveRwSem`] (reader-preferring) |
//! | small `Copy` data, readers must never block writers | [`SeqLock`] |
//! | a reference count with a lock beside it | [`LockRef`], [`LockRefArc`] |
//! | a pointer readers follow without any lock | [`rcu::RcuCell`], [`rcu::QsbrDomain`], [`rcu::SrcuDomain`] |
//! | freeing after readers are done | [`rcu::RcuDomain::call_rcu`], [`rcu::RcuDomain::defer_drop`] |
//!
//! The families, one module each: spinlocks ([`spin`]: TAS, ticket, MCS, qspinlock, lockref),
//! sleeping locks ([`sleep`]: the mutex and its condvar), the reader-writer locks ([`rw`]:
//! rwspinlock, rwsem, percpu rwsem, recursive rwsem, brlock, seqlock), and [`rcu`]. Each module
//! path names its file (`locklab::sleep::mutex`, in `src/sleep/mutex.rs`); the types are also
//! here at the root (the tables below), and their raw locks in [`raw`]. `locklab bench` (the lab) shows what each costs on your machine.
//!
//! ## Every type
//!
//! | type               | raw                         | what it is                                         |
//! |--------------------|-----------------------------|----------------------------------------------------|
//! | [`TasLock`]        | [`raw::RawTasLock`]         | test-and-test-and-set with backoff (baseline)       |
//! | [`TicketLock`]     | [`raw::RawTicketLock`]      | FIFO ticket lock; unlock is a plain store          |
//! | [`McsLock`]        | [`raw::RawMcsLock`]         | MCS queue lock; local spinning                     |
//! | [`QueuedSpinLock`] | [`raw::RawQueuedSpinLock`]  | the kernel's qspinlock; 4 bytes; unlock is a store |
//! | [`SpinLock`]       | = `QueuedSpinLock`          | the spinlock to pick                               |
//! | [`Mutex`]          | [`raw::RawMutex`]           | adaptive futex mutex: OSQ spinning, FIFO sleepers, hand-off |
//! | [`FairMutex`]      | [`raw::RawFairMutex`]       | `Mutex` whose every unlock hands over to the first sleeper |
//! | [`ReentrantMutex`] | [`raw::RawMutex`] + [`raw::RawThreadId`] | `Mutex` its owner may lock again; gives `&T` |
//! | [`Condvar`]        | [`raw::RawCondvar`]         | condvar for `Mutex`; requeues instead of waking a herd |
//! | [`RwSpinLock`]     | [`raw::RawRwSpinLock`]      | the kernel's queued rwlock (reader count + writer byte) |
//! | [`RwSem`]          | [`raw::RawRwSem`]           | rw-semaphore: writer spinning, hand-off, batched reader wake-ups |
//! | [`RecursiveRwSem`] | [`raw::RawRecursiveRwSem`]  | reader-preferring rw-semaphore: a read never waits behind a writer |
//! | [`PercpuRwSem`]    | [`raw::RawPercpuRwSem`]     | per-thread reader counters + membarrier: reads with no locked op |
//! | [`BrLock`]         | [`raw::RawBrLock`]          | big-reader lock, one spinlock per CPU (the contrast) |
//! | [`LockRef`]        | -                           | spinlock + count in one word, updated by one cmpxchg |
//! | [`LockRefArc`]     | -                           | `Arc` whose count is a `LockRef`; the last drop decides under the lock |
//! | [`SeqLock`]        | -                           | sequence lock: readers retry, writers never wait for them |
//! | [`SeqCount`]       | -                           | the bare sequence counter, for data the caller keeps |
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
//! `RUSTFLAGS="--cfg loom"` (the models are in `src/loom_models/`), and every lock runs unchanged
//! on a simulated many-core machine under `RUSTFLAGS="--cfg locklab_sim"` (the `sim` module: a
//! coherence model per cache line and a scheduler; `locklab predict` in the lab uses it).
//!
//! # Safe under anything safe code can do
//! `mem::forget` of any number of guards, counts driven to their bounds (a panic or, for reference
//! counts, an abort, never a wrap), a thread stalled between any two instructions, guards dropped in
//! thread-local destructors after the thread's queue nodes are gone: each keeps mutual exclusion. See
//! `docs/soundness.md` in the repository for the list and the tests.
//!
//! # Signal handlers
//! No lock here is async-signal-safe (std's are not either): a handler that takes a lock its thread
//! holds, or interrupts its thread inside a lock's internal list lock, can deadlock, and a thread's
//! first use of a lock may allocate. None of them corrupts memory when used from a handler: nodes that
//! a handler could reuse are claimed first, and the percpu rwsem's counter update is one instruction
//! on x86-64.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

// Families, as std's `sys/sync` groups them: `spin` (spinlocks and lockref), `sleep` (the mutex, its
// condvar, and their OSQ and wait list), `rw` (the reader-writer locks and seqlock), `rcu`. Each
// public module path names its file (`locklab::sleep::mutex` is `src/sleep/mutex.rs`); the lock types
// are also re-exported at the root (`locklab::Mutex`) and their raw locks in `raw`.
mod clock;
mod dep;
#[cfg(not(loom))]
pub mod lockdep;
mod primitive;
pub mod sim;
#[cfg(all(loom, locklab_sim))]
compile_error!("`--cfg loom` and `--cfg locklab_sim` each replace the atomics: choose one");
// RCU keeps its own atomics and helper threads, which the simulator does not model.
#[cfg(not(any(loom, locklab_sim)))]
pub mod rcu;
/// Under loom only the RCU flavours' protocol builds (the domains need thread-locals and futexes);
/// the models run it.
#[cfg(loom)]
#[path = "rcu/protocol.rs"]
pub(crate) mod rcu_protocol;
pub mod rw;
pub mod sleep;
pub mod spin;
// The platform layer: public for the workspace's other crates (the preload library, the lab, the
// simulator), not part of the library's interface.
#[doc(hidden)]
pub mod sys;
#[cfg(not(loom))]
mod thread_slot;

/// Sets up, now, what a thread's first contended lock would otherwise set up: the process-wide
/// thread-exit hook of the queued locks' per-thread nodes, and the fork handler of the sleeping
/// locks' wait lists. Never needed for correctness; a library
/// constructor that may run before its process creates many thread-specific keys calls it so that the
/// lock paths never allocate (`liblocklab_pthread.so` does).
///
/// ```
/// locklab::prepare_threads(); // idempotent and cheap
/// locklab::prepare_threads();
/// ```
#[cfg(not(loom))]
pub fn prepare_threads() {
    thread_slot::prepare();
    // The sleeping locks' fork epoch: registers its handler now rather than on first contention.
    let _ = sys::fork_epoch();
}

/// Gives back the one thread-specific key the queued locks use (for their per-thread nodes'
/// release at thread exit) to a process that has run out of keys: `true` if one was freed (then the
/// caller may retry its `pthread_key_create`). Afterwards the locks work on, without reusing the
/// nodes of exited threads once they run out of them (the node-less paths documented on each lock).
/// `liblocklab_pthread.so` calls it when a program's `pthread_key_create` fails with `EAGAIN`.
///
/// ```
/// // Usually nothing to give back in a program that has not contended a queued lock yet, and a
/// // second call never frees anything.
/// locklab::give_up_thread_exit_key();
/// assert!(!locklab::give_up_thread_exit_key());
/// ```
#[cfg(not(loom))]
pub fn give_up_thread_exit_key() -> bool {
    thread_slot::give_up_exit_key()
}

#[cfg(all(test, not(loom)))]
mod exit_tests;
#[cfg(all(test, unix, not(loom), not(miri)))]
mod fork_tests;
#[cfg(all(test, loom))]
mod loom_models;

/// The raw lock types, for use with [`lock_api`] directly or for building other primitives: a
/// re-export of each family module's raw lock, in one place.
pub mod raw {
    #[cfg(not(loom))]
    pub use crate::rw::brlock::{BrReadGuard, RawBrLock};
    pub use crate::rw::percpu_rwsem::{PercpuReadToken, PercpuWriteToken, RawPercpuRwSem};
    pub use crate::rw::recursive_rwsem::RawRecursiveRwSem;
    pub use crate::rw::rwsem::{RawRwSem, RwSemToken};
    pub use crate::rw::rwspinlock::RawRwSpinLock;
    pub use crate::sleep::condvar::RawCondvar;
    pub use crate::sleep::mutex::{MutexToken, RawMutex};
    #[cfg(not(loom))]
    pub use crate::sleep::variants::{RawFairMutex, RawThreadId};
    pub use crate::spin::mcs::{McsGuard, RawMcsLock};
    pub use crate::spin::qspinlock::RawQueuedSpinLock;
    pub use crate::spin::tas::RawTasLock;
    pub use crate::spin::ticket::RawTicketLock;
}

#[cfg(not(loom))]
mod aliases {
    use crate::raw;

    /// A test-and-test-and-set spinlock protecting a `T`. The baseline: unfair (whoever's swap lands
    /// first wins), one byte.
    ///
    /// ```
    /// let l = locklab::TasLock::new(0);
    /// *l.lock() += 1;
    /// assert_eq!(l.try_lock().map(|g| *g), Some(1));
    /// ```
    pub type TasLock<T> = lock_api::Mutex<raw::RawTasLock, T>;
    /// Guard of a [`TasLock`]; unlocks when dropped.
    ///
    /// ```
    /// let l = locklab::TasLock::new(vec![1]);
    /// let mut g: locklab::TasLockGuard<'_, Vec<i32>> = l.lock();
    /// g.push(2);
    /// drop(g);
    /// assert!(!l.is_locked());
    /// ```
    pub type TasLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawTasLock, T>;
    /// A FIFO ticket spinlock protecting a `T`. Its sharp edge: strict FIFO means a preempted waiter
    /// stalls everyone behind it, so it collapses when threads outnumber CPUs (the lab shows it); use
    /// [`Mutex`] there.
    ///
    /// ```
    /// static L: locklab::TicketLock<u32> = locklab::TicketLock::new(0);
    /// std::thread::scope(|s| {
    ///     for _ in 0..2 {
    ///         s.spawn(|| *L.lock() += 1);
    ///     }
    /// });
    /// assert_eq!(*L.lock(), 2);
    /// ```
    pub type TicketLock<T> = lock_api::Mutex<raw::RawTicketLock, T>;
    /// Guard of a [`TicketLock`]; dropping it serves the next ticket (a plain store).
    ///
    /// ```
    /// let l = locklab::TicketLock::new(1);
    /// let g: locklab::TicketLockGuard<'_, i32> = l.lock();
    /// assert!(l.try_lock().is_none(), "held: try_lock takes no ticket");
    /// drop(g);
    /// ```
    pub type TicketLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawTicketLock, T>;
    /// An MCS queue lock protecting a `T`: each waiter spins on its own node. Uncontended, no node is
    /// used; a contended acquisition queues one of its thread's eight, or a heap node beyond that.
    ///
    /// ```
    /// let locks: Vec<_> = (0..10).map(locklab::McsLock::new).collect();
    /// let guards: Vec<_> = locks.iter().map(|l| l.lock()).collect();
    /// assert_eq!(guards.iter().map(|g| **g).sum::<i32>(), 45);
    /// ```
    pub type McsLock<T> = lock_api::Mutex<raw::RawMcsLock, T>;
    /// Guard of an [`McsLock`]; holds the queue node of a contended acquisition until dropped (so it is
    /// not `Send`).
    ///
    /// ```
    /// let l = locklab::McsLock::new(5);
    /// let g: locklab::McsLockGuard<'_, i32> = l.lock();
    /// assert_eq!(*g, 5);
    /// ```
    pub type McsLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawMcsLock, T>;
    /// A queued spinlock (qspinlock) protecting a `T`: four bytes (eight with the `lockdep`
    /// feature, which adds the lock's class), a plain-store unlock.
    ///
    /// ```
    /// static HITS: locklab::QueuedSpinLock<u64> = locklab::QueuedSpinLock::new(0);
    /// *HITS.lock() += 1;
    /// # let lockdep = if cfg!(feature = "lockdep") { 4 } else { 0 };
    /// assert_eq!(std::mem::size_of_val(unsafe { HITS.raw() }), 4 + lockdep);
    /// ```
    pub type QueuedSpinLock<T> = lock_api::Mutex<raw::RawQueuedSpinLock, T>;
    /// Guard of a [`QueuedSpinLock`].
    ///
    /// ```
    /// let l = locklab::QueuedSpinLock::new(0);
    /// let mut g: locklab::QueuedSpinLockGuard<'_, i32> = l.lock();
    /// *g = 3;
    /// ```
    pub type QueuedSpinLockGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawQueuedSpinLock, T>;
    /// The spinlock to pick: the queued spinlock. For short sections on threads that are not
    /// preempted; otherwise pick [`Mutex`].
    ///
    /// ```
    /// let l = locklab::SpinLock::new(Vec::new());
    /// l.lock().push(1);
    /// ```
    pub type SpinLock<T> = QueuedSpinLock<T>;
    /// Guard of a [`SpinLock`].
    ///
    /// ```
    /// let l = locklab::SpinLock::new(1);
    /// let g: locklab::SpinLockGuard<'_, i32> = l.lock();
    /// assert_eq!(*g, 1);
    /// ```
    pub type SpinLockGuard<'a, T> = QueuedSpinLockGuard<'a, T>;
    /// The adaptive futex mutex protecting a `T`: spins while the owner is probably running, then
    /// sleeps in FIFO order; a waiter starved for 1 ms gets the lock handed to it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = locklab::Mutex::new(0);
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| *m.lock() += 1);
    ///     }
    /// });
    /// let g = m.lock();
    /// assert!(m.try_lock_for(Duration::from_millis(1)).is_none(), "timed out while held");
    /// locklab::MutexGuard::unlock_fair(g); // hands over to a waiter, if any
    /// assert_eq!(*m.lock(), 4);
    /// ```
    pub type Mutex<T> = lock_api::Mutex<raw::RawMutex, T>;
    /// Guard of a [`Mutex`]. Not `Send` (the owner tag names the locking thread), as std's.
    ///
    /// ```
    /// let m = locklab::Mutex::new(String::new());
    /// let mut g: locklab::MutexGuard<'_, String> = m.lock();
    /// g.push('x');
    /// ```
    pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawMutex, T>;
    /// A [`Mutex`] whose every unlock hands the lock to the first sleeping waiter (parking_lot's
    /// `FairMutex`): FIFO among sleepers, a context switch per hand-over.
    ///
    /// ```
    /// let m = locklab::FairMutex::new(0);
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| *m.lock() += 1);
    ///     }
    /// });
    /// assert_eq!(*m.lock(), 4);
    /// ```
    #[cfg(not(loom))]
    pub type FairMutex<T> = lock_api::Mutex<raw::RawFairMutex, T>;
    /// Guard of a [`FairMutex`]; its drop is a fair unlock.
    ///
    /// ```
    /// let m = locklab::FairMutex::new(1);
    /// let g: locklab::FairMutexGuard<'_, i32> = m.lock();
    /// assert_eq!(*g, 1);
    /// ```
    #[cfg(not(loom))]
    pub type FairMutexGuard<'a, T> = lock_api::MutexGuard<'a, raw::RawFairMutex, T>;
    /// A mutex the owning thread may lock again (parking_lot's `ReentrantMutex`): lock_api's
    /// reentrant wrapper over our [`Mutex`]'s raw lock. It gives `&T` only (a second lock by the
    /// same thread must not alias a `&mut`): put a `Cell`/`RefCell` inside for mutation.
    ///
    /// ```
    /// use std::cell::RefCell;
    /// let m = locklab::ReentrantMutex::new(RefCell::new(0));
    /// let outer = m.lock();
    /// let inner = m.lock(); // the same thread: no wait
    /// *inner.borrow_mut() += 1;
    /// drop(inner);
    /// assert_eq!(*outer.borrow(), 1);
    /// ```
    #[cfg(not(loom))]
    pub type ReentrantMutex<T> = lock_api::ReentrantMutex<raw::RawMutex, raw::RawThreadId, T>;
    /// Guard of a [`ReentrantMutex`].
    ///
    /// ```
    /// let m = locklab::ReentrantMutex::new(5);
    /// let g: locklab::ReentrantMutexGuard<'_, i32> = m.lock();
    /// assert_eq!(*g, 5);
    /// ```
    #[cfg(not(loom))]
    pub type ReentrantMutexGuard<'a, T> =
        lock_api::ReentrantMutexGuard<'a, raw::RawMutex, raw::RawThreadId, T>;
    /// A [`Mutex`] guard that owns an `Arc` of its mutex, so it is `'static` (lock_api's
    /// `lock_arc`; the `arc_lock` feature, as parking_lot's).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let m = Arc::new(locklab::Mutex::new(1));
    /// let g: locklab::ArcMutexGuard<i32> = m.lock_arc();
    /// assert_eq!(*g, 1);
    /// ```
    #[cfg(feature = "arc_lock")]
    pub type ArcMutexGuard<T> = lock_api::ArcMutexGuard<raw::RawMutex, T>;
    /// A condition variable for [`Mutex`]. No spurious wake-ups, so `notify_one`/`notify_all` report
    /// exactly how many waiters they woke. Its sharp edge: one condvar serves one mutex at a time; waiting
    /// on it with a second mutex while waiters of the first remain panics.
    ///
    /// ```
    /// use locklab::{Condvar, Mutex};
    /// let (m, cv) = (Mutex::new(false), Condvar::new());
    /// std::thread::scope(|s| {
    ///     let waiter = s.spawn(|| {
    ///         let mut ready = m.lock();
    ///         cv.wait_while(&mut ready, |r| !*r);
    ///     });
    ///     *m.lock() = true;
    ///     // The flag is set under the mutex, so the waiter either sees it or is waiting: notify until
    ///     // it is done (`notify_one` returns whether it woke a waiter).
    ///     while !waiter.is_finished() {
    ///         cv.notify_one();
    ///         std::thread::yield_now();
    ///     }
    /// });
    /// ```
    pub type Condvar = lock_api::Condvar<raw::RawCondvar>;
    /// A queued reader-writer spinlock protecting a `T`. Every read lock and unlock is a locked RMW on
    /// the shared word (seed 000). At most `rwspinlock::MAX_READERS` read holds at once: one more
    /// panics (forgotten guards cannot wrap the count).
    ///
    /// ```
    /// let l = locklab::RwSpinLock::new(1);
    /// let (a, b) = (l.read(), l.read());
    /// assert!(l.try_write().is_none());
    /// drop((a, b));
    /// *l.write() += 1;
    /// ```
    pub type RwSpinLock<T> = lock_api::RwLock<raw::RawRwSpinLock, T>;
    /// The reader-writer semaphore (optimistic spinning, hand-off, batched reader wake-ups). See
    /// [`raw::RawRwSem`] for the nested-read sharp edge.
    ///
    /// ```
    /// let l = locklab::RwSem::new(0);
    /// *l.write() = 5;
    /// let r = lock_api::RwLockWriteGuard::downgrade(l.write()); // no writer can slip in
    /// assert_eq!(*r, 5);
    /// ```
    pub type RwSem<T> = lock_api::RwLock<raw::RawRwSem, T>;
    /// A reader-preferring sleeping rwlock: a read succeeds whenever no writer holds the lock, even
    /// while writers wait, so a reader may read again without deadlocking (parking_lot's recursive
    /// reads; glibc's default `pthread_rwlock_t`). Writers can starve under a stream of readers.
    ///
    /// ```
    /// let l = locklab::RecursiveRwSem::new(5);
    /// let a = l.read();
    /// let b = l.read(); // a second read never waits behind a waiting writer
    /// assert_eq!(*a + *b, 10);
    /// drop((a, b));
    /// *l.write() += 1;
    /// ```
    pub type RecursiveRwSem<T> = lock_api::RwLock<raw::RawRecursiveRwSem, T>;
    /// The percpu rw-semaphore: reads with no locked instruction, writes with a `membarrier` (tens of
    /// microseconds): for data read constantly and written rarely. Read guards are not `Send`.
    ///
    /// ```
    /// let cfg = locklab::PercpuRwSem::new(String::from("v1"));
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| assert!(cfg.read().starts_with('v'))); // no shared cache line written
    ///     }
    /// });
    /// *cfg.write() = "v2".into(); // the expensive side
    /// assert_eq!(*cfg.read(), "v2");
    /// ```
    pub type PercpuRwSem<T> = lock_api::RwLock<raw::RawPercpuRwSem, T>;
    /// A big-reader lock (a reader-writer spinlock per CPU shard) protecting a `T`.
    ///
    /// ```
    /// let l = locklab::BrLock::new(0);
    /// let r = l.read(); // this CPU's shard, shared
    /// assert!(l.try_write().is_none());
    /// drop(r);
    /// *l.write() += 1; // every shard, exclusively
    /// ```
    pub type BrLock<T> = lock_api::RwLock<raw::RawBrLock, T>;
    pub use crate::rw::seqlock::{SeqCount, SeqLock, SeqLockWriteGuard};
    pub use crate::spin::lockref::{LockRef, LockRefArc};
    /// Whether a timed condvar wait timed out.
    pub use lock_api::WaitTimeoutResult;
}

#[cfg(not(loom))]
pub use aliases::*;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// docs/library.md's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDocDoctests;
