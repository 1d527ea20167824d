//! `fork()` support for every RCU domain, as liburcu gives it: each domain that has been used
//! registers here, and `pthread_atfork` handlers quiesce them before a fork and repair them after.
//!
//! - **Prepare** (the forking thread, before the fork): for each domain, its grace-period thread stops
//!   taking callbacks and finishes the batch it runs, then the domain's record pools and callback
//!   lists are locked, so the child's copy of them is consistent.
//! - **Parent**: everything unlocked; the grace-period thread goes on.
//! - **Child**: unlocked; a grace period that another thread was running at the fork is undone (its
//!   lock released, its sequence put back); reader records of threads that do not exist in the child
//!   are released (their sections cannot be running in the child); the grace-period thread is
//!   started again when next needed.
//!
//! The handlers run in registration order before the fork and in reverse order after it. Where there
//! is no `fork` (Windows) or no `pthread_atfork` (Miri) the handlers are never installed.
#![cfg_attr(not(all(unix, not(miri))), allow(dead_code))]

use super::callback::Host;
use super::registry::{Pooled, Registry};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A domain's fork handlers. `prepare` parks the guards of the locks it takes ([`park`]); they are
/// released after `parent` or `child` ran (which may read what they protect).
pub(super) trait ForkAware: Sync {
    /// Before the fork, on the forking thread.
    fn prepare(&'static self);
    /// After the fork, in the parent, its locks still held.
    fn parent(&'static self);
    /// After the fork, in the child (the forking thread's copy, alone), its locks still held.
    fn child(&'static self);
}

/// A domain of callbacks ([`Host`]) over a pool of reader records: its [`ForkAware`] handlers are
/// this one protocol. Before the fork its engine is quiesced and its pool locked; in the parent the
/// engine goes on; in the child its grace-period sequence is repaired, the records of threads that
/// do not exist there are released ([`release_gone`](Self::release_gone), the flavour's own), and
/// the engine is made to start again when next needed.
pub(super) trait PooledDomain: Host {
    /// The flavour's reader record.
    type Record: Pooled;
    /// The domain's record pool.
    fn records(&'static self) -> &'static Registry<Self::Record>;
    /// In the child: releases the records, of all of the pool's `records`, that belong to threads
    /// other than the forking one (their read-side sections ended with them).
    fn release_gone(&'static self, records: Vec<&'static Self::Record>);
}

impl<D: PooledDomain> ForkAware for D {
    fn prepare(&'static self) {
        self.engine().prepare_fork();
        park(Box::new(self.records().lock_for_fork()));
    }
    fn parent(&'static self) {
        self.engine().parent_after_fork();
    }
    fn child(&'static self) {
        self.gp().repair_after_fork();
        // SAFETY: `prepare` locked it on the thread this one is a copy of (released after).
        self.release_gone(unsafe { self.records().held_snapshot() });
        self.engine().child_after_fork();
    }
}

/// Every registered domain. A spinlock: held across the fork by `prepare`.
static DOMAINS: crate::TasLock<Vec<&'static dyn ForkAware>> = crate::TasLock::new(Vec::new());

std::thread_local! {
    /// Guards held across a fork by the forking thread, released in reverse order after it.
    static PARKED: core::cell::RefCell<Vec<Box<dyn core::any::Any>>> =
        const { core::cell::RefCell::new(Vec::new()) };
}

/// Keeps a lock guard until the fork is over (on the forking thread; its copy in the child).
pub(super) fn park(guard: Box<dyn core::any::Any>) {
    // A fork from a thread-local destructor after this one was destroyed: the guard is leaked, and
    // the lock stays held (in both processes); nothing better can be done there.
    if let Err(e) = PARKED.try_with(|p| p.borrow_mut().push(guard)) {
        let _ = e;
    }
}

/// Registers `d` once (`flag` is the domain's "registered" flag). The handlers are installed first,
/// and the flag is set only once `d` is in the list: a domain's state changes only after both (every
/// path that changes it registers first), so a fork either quiesces and repairs it or finds it
/// untouched.
pub(super) fn register(flag: &AtomicBool, d: &'static dyn ForkAware) {
    // Acquire: pairs with the Release store below; `d` is in the list when we see it set.
    if flag.load(Ordering::Acquire) {
        return;
    }
    install();
    let mut list = DOMAINS.lock();
    if flag.load(Ordering::Relaxed) {
        return;
    }
    list.push(d);
    // Release: see the Acquire load above.
    flag.store(true, Ordering::Release);
}

/// The handlers' registration (`sys::once_per_process`: safe against a fork at any instruction).
#[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
static INSTALL: AtomicU32 = AtomicU32::new(0);

/// Installs the `pthread_atfork` handlers once per process (not under Miri, which has no
/// `pthread_atfork`, nor where there is no `fork`). No lock is held meanwhile.
fn install() {
    #[cfg(all(unix, not(miri)))]
    crate::sys::once_per_process(&INSTALL, || {
        // SAFETY: the three handlers are `extern "C" fn()` with no arguments, valid for the life of
        // the process.
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if r != 0 {
            super::protocol::warn(format_args!(
                "locklab::rcu: pthread_atfork failed ({r}): fork() children may find RCU domains wedged"
            ));
        }
    });
}

extern "C" fn prepare() {
    let list = DOMAINS.lock();
    let domains = list.clone();
    // Held across the fork; released after `parent` and `child`.
    park(Box::new(list));
    // Every domain's locks, held together in the list's order: one global order that classes
    // (one per lock site, shared by all domains) cannot express.
    crate::lockdep::without_dependencies(|| {
        for d in domains {
            d.prepare();
        }
    });
}

/// Runs `f` on every domain in reverse order, then releases every parked lock, in reverse order.
fn after(f: impl Fn(&'static dyn ForkAware)) {
    // SAFETY: `prepare` locked the list on this thread (in the child: on the thread this one is a copy
    // of) and parked the guard; nothing writes it until the guard is dropped below.
    let list = unsafe { (*DOMAINS.data_ptr()).clone() };
    for d in list.iter().rev() {
        f(*d);
    }
    let parked = PARKED.try_with(|p| core::mem::take(&mut *p.borrow_mut()));
    for g in parked.unwrap_or_default().into_iter().rev() {
        drop(g);
    }
}

extern "C" fn parent() {
    after(|d| d.parent());
}

extern "C" fn child() {
    #[cfg(all(unix, not(miri)))]
    crate::sys::registered_here(&INSTALL);
    after(|d| d.child());
}
