//! Userspace RCU: read-side critical sections that cost two plain stores and no fence (memb),
//! nothing at all (QSBR) or may sleep (SRCU), and grace periods that wait for every reader that
//! might still see an old version.
//!
//! The flavours' protocol steps are in `protocol.rs`, shared by the domains and the loom models.
//!
//! Three flavours: memb ([`RcuDomain`], [`RcuReadGuard`]), QSBR ([`QsbrDomain`], whose read side is
//! free and whose quiescent states the borrow checker keeps out of read sections) and SRCU
//! ([`SrcuDomain`]: sleepable readers, two-index counters). Each has batched `synchronize` (concurrent
//! callers share grace periods), polled grace periods ([`GpCookie`]), `call_rcu` appending to
//! per-thread callback logs (no lock, no read-modify-write), flood control and a barrier (the `callback` module's docs), and survives
//! `fork()` (the `fork` module's docs). [`RcuCell`] is the safe published value.
//!
//! # The API against the kernel's and liburcu's
//!
//! | locklab (memb / global)                  | kernel                          | liburcu                   |
//! |------------------------------------------|---------------------------------|---------------------------|
//! | [`RcuDomain::read_lock`], [`read_lock`]  | `rcu_read_lock`/`unlock`        | `rcu_read_lock`/`unlock`  |
//! | [`RcuDomain::synchronize`]               | `synchronize_rcu`               | `synchronize_rcu`         |
//! | [`RcuDomain::call_rcu`], [`call_rcu`]    | `call_rcu`                      | `call_rcu`                |
//! | [`RcuDomain::defer_drop`]                | `kfree_rcu`                     | `defer_rcu` (roughly)     |
//! | [`RcuDomain::rcu_barrier`]               | `rcu_barrier`                   | `rcu_barrier`             |
//! | [`RcuDomain::get_state_synchronize`]     | `get_state_synchronize_rcu`     | -                         |
//! | [`RcuDomain::start_poll_synchronize`]    | `start_poll_synchronize_rcu`    | `start_poll_synchronize_rcu` |
//! | [`RcuDomain::poll_state_synchronize`]    | `poll_state_synchronize_rcu`    | `poll_state_synchronize_rcu` |
//! | [`RcuDomain::cond_synchronize`]          | `cond_synchronize_rcu`          | -                         |
//! | [`QsbrThread::quiescent_state`]          | (a context switch)              | `rcu_quiescent_state`     |
//! | [`QsbrThread::offline`], `online`        | -                               | `rcu_thread_offline`/`online` |
//! | [`SrcuDomain::call_srcu`], [`SrcuDomain::srcu_barrier`] | `call_srcu`, `srcu_barrier` | -          |
//!
//! QSBR and SRCU domains have the same polled and callback calls as methods.
//!
//! The memb flavour's algorithm, invariants and orderings are in `memb.rs`.

mod api;
mod callback;
mod cell;
mod fork;
mod gp;
mod memb;
pub(crate) mod protocol;
mod qsbr;
mod registry;
mod srcu;

use callback::{Engine, Host};
pub use callback::{HIGH_WATER, LIMIT};
pub use cell::RcuCell;
use gp::GpSeq;
pub use qsbr::{QsbrDomain, QsbrOffline, QsbrReadGuard, QsbrThread};
use registry::{Pooled, Registry, Wait, wait_for_records};
pub use srcu::{SrcuDomain, SrcuDownGuard, SrcuReadGuard};

use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, compiler_fence, fence};
use std::cell::RefCell;
use std::time::Duration;

#[allow(unused_imports)]
use memb::*;
pub use memb::{
    GpCookie, RcuDomain, RcuReadGuard, call_rcu, cond_synchronize_rcu, get_state_synchronize_rcu,
    poll_state_synchronize_rcu, rcu_barrier, read_lock, start_poll_synchronize_rcu,
    synchronize_rcu,
};
pub use protocol::NEST_BITS;
use protocol::NEST_MASK;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_polled;
#[cfg(test)]
mod tests_regressions;
