//! `fork()`: the validator's own fork handlers, so that a child never waits for the validator's
//! lock held by a thread it does not have.

use super::*;

// A `fork()` child has only the forking thread. Had another thread held the validator's lock at that
// instant, the child's first new dependency would wait for a thread it does not have. So the
// validator's `pthread_atfork` handlers (registered once the tables exist) follow the standard
// pattern: the prepare handler takes the lock (waiting out a holder, which never blocks inside the
// validator), and the parent and child handlers give it back, the child with a consistent graph and
// validation still on. Meanwhile the forking thread counts as inside the validator (its `busy`
// flag), so the locks other fork handlers take between ours are not checked: they could need the
// lock it holds. Forks are serialised through their handlers by the C library, so one flag says
// whether the prepare handler holds the lock.

/// The prepare handler holds the validator's lock for the fork in progress.
#[cfg(all(unix, not(miri), not(loom)))]
pub(super) static FORK_HOLDS_LOCK: AtomicBool = AtomicBool::new(false);
/// The prepare handler set the forking thread's `busy` flag.
#[cfg(all(unix, not(miri), not(loom)))]
pub(super) static FORK_SET_BUSY: AtomicBool = AtomicBool::new(false);
/// [`install_fork_handlers`]' registration (`sys::once_per_process`).
#[cfg(all(unix, not(miri), not(loom)))]
pub(super) static FORK_REGISTRATION: core::sync::atomic::AtomicU32 =
    core::sync::atomic::AtomicU32::new(0);

/// Registers the validator's fork handlers, once per process (done when its tables are first made;
/// the preload library calls it from its constructor). `pthread_atfork` may allocate.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: no pthread_atfork
/// locklab::lockdep::hooks::install_fork_handlers();
/// ```
pub fn install_fork_handlers() {
    #[cfg(all(unix, not(miri), not(loom)))]
    crate::sys::once_per_process(&FORK_REGISTRATION, || {
        // SAFETY: handlers that touch only the validator's atomics and this thread's flag.
        let r = unsafe {
            libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child))
        };
        if r != 0 {
            report::say(format_args!(
                "locklab lockdep: pthread_atfork failed ({r}): a fork() child may find the \
                 validator off\n"
            ));
        }
    });
}

#[cfg(all(unix, not(miri), not(loom)))]
extern "C" fn fork_prepare() {
    // Acquire pairs with the Release store in `create_graph`.
    let g = GRAPH.load(Ordering::Acquire);
    if g.is_null() {
        return;
    }
    // SAFETY: published once, never freed.
    let g = unsafe { &*g };
    let entered = THREAD
        .try_with(|x| {
            if x.busy.load(Ordering::Relaxed) {
                // A fork from a signal handler that interrupted this thread's validator call: the
                // lock may be this thread's own. The child decides as if another thread held it.
                return false;
            }
            x.busy.store(true, Ordering::Relaxed);
            true
        })
        .unwrap_or(false);
    if !entered {
        return;
    }
    // Relaxed (both): read by this thread's parent or child handler (the child is this thread).
    FORK_SET_BUSY.store(true, Ordering::Relaxed);
    if g.lock() {
        FORK_HOLDS_LOCK.store(true, Ordering::Relaxed);
    }
}

/// Gives back what [`fork_prepare`] took, in the parent or the child.
#[cfg(all(unix, not(miri), not(loom)))]
pub(super) fn fork_release(g: &Graph) {
    // Relaxed: this thread's own flags (see `fork_prepare`).
    if FORK_HOLDS_LOCK.swap(false, Ordering::Relaxed) {
        g.unlock();
    }
    if FORK_SET_BUSY.swap(false, Ordering::Relaxed) {
        let _ = THREAD.try_with(|x| x.busy.store(false, Ordering::Relaxed));
    }
}

#[cfg(all(unix, not(miri), not(loom)))]
extern "C" fn fork_parent() {
    // Acquire as in `fork_prepare`.
    let g = GRAPH.load(Ordering::Acquire);
    if !g.is_null() {
        // SAFETY: published once, never freed.
        fork_release(unsafe { &*g });
    }
}

#[cfg(all(unix, not(miri), not(loom)))]
extern "C" fn fork_child() {
    after_fork_child();
}

/// Call in the child of `fork` (the validator's own fork handler does; calling it again is
/// harmless). The held stacks of the parent's other threads are gone with them (the forking
/// thread's stays). If the validator's fork handlers did not run (a `fork` system call made
/// directly) and another thread was inside the validator at the fork (its lock held, or its tables
/// being made), what it was writing may be half done: the validator turns itself off in this child
/// (with one line on standard error) rather than read it.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::after_fork_child();
/// ```
pub fn after_fork_child() {
    // Relaxed (all): the child has one thread.
    if GRAPH_STATE.load(Ordering::Relaxed) == 1 {
        // Being made by a thread that does not exist here: never finished.
        GRAPH_STATE.store(3, Ordering::Relaxed);
    }
    let g = GRAPH.load(Ordering::Acquire);
    if !g.is_null() {
        // SAFETY: published once, never freed.
        let g = unsafe { &*g };
        #[cfg(all(unix, not(miri), not(loom)))]
        fork_release(g);
        if g.lock.load(Ordering::Relaxed) {
            set_mode(Action::Off);
            report::say(format_args!(
                "locklab lockdep: another thread was inside the validator at fork(): lockdep is off \
                 in this child\n"
            ));
            g.lock.store(false, Ordering::Relaxed);
        }
    }
    report::after_fork_child();
}
