//! The reader-writer family, cheapest write to cheapest read: [`rwspinlock`] (the kernel's qrwlock:
//! one reader count, an RMW each way), [`rwsem`] (sleeping, writer spinning, hand-off), [`brlock`] (a
//! reader lock per shard), [`percpu_rwsem`] (per-thread reader counters, no locked instruction to read;
//! writers pay a `membarrier`), [`recursive_rwsem`] (reader-preferring: a read never waits behind a
//! waiting writer) and [`seqlock`] (readers write nothing and retry). What they share with
//! the rest of the crate: the wait list and OSQ of `sleep`, the thread slots, the `sys` calls.

#[cfg(not(loom))]
pub mod brlock;
pub mod percpu_rwsem;
pub mod recursive_rwsem;
pub mod rwsem;
pub mod rwspinlock;
pub mod seqlock;
