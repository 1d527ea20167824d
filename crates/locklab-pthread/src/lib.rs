//! `liblocklab_pthread.so`: glibc's pthread mutexes, rwlocks, condition variables and spinlocks, and
//! C11's `mtx_*` / `cnd_*`, on locklab's locks, for `LD_PRELOAD` into unmodified C and C++ programs
//! (glibc on Linux, x86-64 and aarch64 layouts).
//!
//! ```text
//! LD_PRELOAD=target/release/liblocklab_pthread.so LOCKLAB_MUTEX=mcs ./program
//! locklab run --mutex mcs -- ./program        # the same, from the lab
//! ```
//!
//! # Design
//! - **State inline in the caller's object**, never a side table: all-zero memory is an unlocked
//!   default object at any moment (libstdc++'s `std::mutex` never calls init or destroy), and glibc's
//!   fields that static initializers, debuggers and programs read stay where glibc keeps them: the
//!   mutex kind at byte 16, the owner TID at byte 8 and the recursion count at byte 4; the rwlock's
//!   `__cur_writer` at 24, `__shared` at 28 and `__flags` at 48; the condvar's clock and pshared bits
//!   in `__wrefs` at 36. Layouts per object in [`mutex`], [`rwlock`], [`cond`], [`spin`].
//! - **Unversioned exports**, so one definition binds every version a program references
//!   (`pthread_mutex_trylock@GLIBC_2.34` as well as `@GLIBC_2.2.5`).
//! - **Whole families**: glibc's condvar and `mtx_*` call glibc's mutex internally, so the condvars,
//!   C11 calls, timed and clock variants and the old `__pthread_*` aliases are all ours too.
//! - **Nothing on a lock path allocates, calls `dlsym` or needs a constructor**: the choices are read
//!   from the environment with `getenv` on first use, the thread id is cached in a destructor-free
//!   thread-local, and the queued locks' per-thread nodes come from `mmap` (see
//!   [`locklab::prepare_threads`]). glibc's own functions, for the objects handed to it, are looked
//!   up in glibc's own symbol tables (not with `dlsym`) on first use of such an object, never for the
//!   common case.
//! - **Call sites and statistics**: each lock, wait and signal export is a two-instruction trampoline
//!   that passes its caller's return address on ([`entry`]); with `LOCKLAB_STAT` set, [`stat`] counts
//!   per lock and call site (`locklab run --stat`).
//! - **Delegated, exactly as glibc**: robust, priority-inherit, priority-protect and process-shared
//!   mutexes, process-shared rwlocks, and everything under `LOCKLAB_MUTEX=glibc` / `LOCKLAB_RWLOCK=glibc`
//!   go to glibc's implementation: they can only be made by `*_init` with an attribute, so the choice is
//!   made there and recorded in glibc's own kind bits.
//!
//! # Choices (per process, read once)
//! - `LOCKLAB_MUTEX=adaptive|mcs|ticket|qspinlock|tas|glibc|glibc-adaptive` (default `adaptive`, the
//!   library's own queue-free adaptive mutex, [`adaptive`]; `mutex` is an alias of `adaptive`).
//! - `LOCKLAB_RWLOCK=recursive-rwsem|rwspinlock|glibc` (default `recursive-rwsem`, locklab's
//!   reader-preferring `RecursiveRwSem`; `rwsem` is an alias of `recursive-rwsem`).
//! - `LOCKLAB_SPIN=qspinlock|ticket|tas|glibc` (default `tas`).
//!
//! An unknown value prints one line on stderr and the default is used. The names, their aliases
//! and the names the statistics file writes are in [`choices`].

#![deny(missing_docs)]
// glibc's objects, symbols and calls: the library exists on Linux with glibc only (elsewhere the
// crate is empty, so a workspace build on macOS builds everything else).
#![cfg(all(target_os = "linux", target_env = "gnu"))]

pub mod adaptive;
pub mod c11;
pub mod choices;
pub mod cond;
pub mod config;
mod dep;
pub mod entry;
pub mod keys;
pub mod mutex;
pub mod plugins;
mod real;
pub mod rwlock;
mod signals;
pub mod spin;
pub mod stat;
mod sys;

/// The library's constructor: creates the thread-exit key of the queued locks' per-thread nodes
/// while the process has few keys (so `pthread_setspecific` never allocates for it), reads the
/// choices, and registers the fork handler that refreshes the cached thread id in a child. Nothing
/// depends on it having run: calls that come before it (another library's static initializers) work.
extern "C" fn init() {
    locklab::prepare_threads();
    config::load();
    stat::init();
    signals::init();
    entry::find_exit();
    dep::init();
    sys::arm_mutex_fast();
    sys::arm_rwlock_fast();
    // SAFETY: a handler that only makes system calls and writes the library's own state.
    unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
}

/// The fork handler (registered by the constructor: `pthread_atfork` may allocate): a child's only
/// thread has a new TID, and its lock statistics start from zero in a file of its own.
extern "C" fn child_after_fork() {
    sys::after_fork_child();
    cond::after_fork_child();
    spin::after_fork_child();
    stat::after_fork_child();
    dep::after_fork_child();
}

/// The library's destructor: the lock statistics at exit (it runs after the program's own
/// destructors and `atexit` handlers, the library having been loaded first).
extern "C" fn fini() {
    stat::at_exit();
    dep::write_out();
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = fini;

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
