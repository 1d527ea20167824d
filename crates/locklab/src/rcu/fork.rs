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

/// [`INSTALL`]: the handlers are installed.
const INSTALLED: u32 = u32::MAX;

/// 0: handlers not installed; [`INSTALLED`]; otherwise the pid of the process in which a thread is
/// installing them. One word, so that a `fork()` child can tell an installation it must take over
/// (the installing thread does not exist in it) from one running in its own process, whichever
/// instruction the fork caught the installer at; no lock is held meanwhile.
static INSTALL: AtomicU32 = AtomicU32::new(0);

/// Installs the `pthread_atfork` handlers once per process (not under Miri, which has no
/// `pthread_atfork`, nor where there is no `fork`).
fn install() {
    #[cfg(all(unix, not(miri)))]
    install_with(&INSTALL, pid(), || {
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

/// This process's id (a system call: glibc does not cache it).
#[cfg(all(unix, not(miri)))]
fn pid() -> u32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as u32 }
}

/// The installation protocol over `state` ([`INSTALL`]), for process `me`: the first caller runs
/// `register`; the others wait for it. In a `fork()` child whose parent was installing at the fork,
/// the installer's pid is the parent's: one caller takes the installation over (the parent's
/// registration either happened before the fork, and then the child handler already marked the
/// word [`INSTALLED`] here, or did not happen in this process).
#[cfg_attr(not(all(unix, not(miri))), allow(dead_code))]
fn install_with(state: &AtomicU32, me: u32, register: impl FnOnce()) {
    loop {
        // Acquire: pairs with the Release store after `register`.
        let s = state.load(Ordering::Acquire);
        if s == INSTALLED {
            return;
        }
        if s != me
            && state
                .compare_exchange(s, me, Ordering::Acquire, Ordering::Acquire)
                .is_ok()
        {
            register();
            // Release: the registration happens-before every caller that sees it done.
            state.store(INSTALLED, Ordering::Release);
            crate::sys::futex_wake(state, u32::MAX);
            return;
        }
        // Another thread of this process installs: wait (a timeout in case it is stopped between
        // its steps; its store wakes us otherwise).
        crate::sys::futex_wait(state, me, Some(std::time::Duration::from_millis(1)));
    }
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
    // Our handlers are registered in this process (the installer may have been caught between its
    // registration and marking it done).
    INSTALL.store(INSTALLED, Ordering::Relaxed);
    after(|d| d.child());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The first caller registers, once; later callers find it done.
    #[test]
    fn installs_once() {
        let state = AtomicU32::new(0);
        let runs = AtomicUsize::new(0);
        install_with(&state, 7, || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        install_with(&state, 7, || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(state.load(Ordering::SeqCst), INSTALLED);
    }

    /// A fork child whose parent was installing at the fork (the word holds the parent's pid, and
    /// no child handler of ours ran to mark it done): the child installs for itself.
    #[test]
    fn a_child_takes_over_its_parents_installation() {
        let state = AtomicU32::new(41); // the parent's pid
        let runs = AtomicUsize::new(0);
        install_with(&state, 42, || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(state.load(Ordering::SeqCst), INSTALLED);
    }

    /// Another thread of this process is installing: wait for it, do not register twice.
    #[test]
    fn waits_for_an_installer_of_its_own_process() {
        static STATE: AtomicU32 = AtomicU32::new(0);
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        STATE.store(9, Ordering::SeqCst); // a thread of process 9 is installing
        let waiter = std::thread::spawn(|| {
            install_with(&STATE, 9, || {
                RUNS.fetch_add(1, Ordering::SeqCst);
            });
        });
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) {
            5
        } else {
            30
        }));
        assert!(
            !waiter.is_finished(),
            "returned before the installation ended"
        );
        STATE.store(INSTALLED, Ordering::SeqCst);
        crate::sys::futex_wake(&STATE, u32::MAX);
        waiter.join().unwrap();
        assert_eq!(RUNS.load(Ordering::SeqCst), 0);
    }
}
