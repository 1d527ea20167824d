//! The spinlock family: test-and-test-and-set, ticket, MCS and queued spinlocks, and the lockref
//! built on the ticket lock.
//!
//! The four locks implement [`lock_api::RawMutex`]; the crate root has the `lock_api::Mutex` aliases.

pub mod lockref;
pub mod mcs;
pub(crate) mod node;
pub mod qspinlock;
pub mod tas;
pub mod ticket;
