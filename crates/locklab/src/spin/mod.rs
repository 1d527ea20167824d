//! The spinlock family: test-and-test-and-set, ticket, MCS and queued spinlocks.
//!
//! All four implement [`lock_api::RawMutex`]; the crate root has the `lock_api::Mutex` aliases.

pub mod mcs;
pub mod qspinlock;
pub mod tas;
pub mod ticket;
