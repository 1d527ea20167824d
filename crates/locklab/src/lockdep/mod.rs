//! Lockdep for userspace: potential deadlocks reported the first time the lock order that allows
//! them is seen, not when they happen (after the kernel's `kernel/locking/lockdep.c` and
//! `Documentation/locking/lockdep-design.rst`).
//!
//! One validator serves both uses: the library's locks with the `lockdep` cargo feature (each lock
//! calls it from its lock and unlock paths), and `liblocklab_pthread.so` with `LOCKLAB_LOCKDEP` set
//! (its pthread entry points call it, whichever lock choice runs behind them, glibc's included).
//! Without the feature the library's lock paths contain no call at all; this module is only the
//! validator, which does nothing until something calls it.
//!
//! A Rust program uses this module: it names its locks' classes ([`set_class`], [`LockClass`]),
//! annotates nesting ([`with_subclass`], [`without_dependencies`]), chooses what a report does
//! ([`set_mode`], [`Action`], [`enabled`]) and reads the reports ([`reports`], [`Report`],
//! [`ReportKind`]). The calls a lock makes on its lock and unlock paths (which the `lockdep`
//! feature makes for the library's locks) are [`hooks`]: the preload library's interface, and that
//! of any other embedder checking locks of its own.
//!
//! ```
//! # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
//! use locklab::Mutex;
//! use locklab::lockdep::{self, LockClass, ReportKind};
//! static ACCOUNTS: LockClass = LockClass::new("doc-accounts");
//! static LEDGER: LockClass = LockClass::new("doc-ledger");
//! let (accounts, ledger) = (Mutex::new(100), Mutex::new(Vec::new()));
//! lockdep::set_class(&accounts, &ACCOUNTS);
//! lockdep::set_class(&ledger, &LEDGER);
//! lockdep::set_mode(lockdep::Action::Report); // the default: print, record, go on
//! {
//!     // accounts, then ledger
//!     let a = accounts.lock();
//!     ledger.lock().push(*a);
//! }
//! {
//!     // later, the same thread: ledger, then accounts. Nothing deadlocked, but two threads
//!     // taking these two orders at once could have.
//!     let l = ledger.lock();
//!     *accounts.lock() -= l.len() as i32;
//! }
//! let cycle = lockdep::reports().into_iter().find(|r| {
//!     r.kind == ReportKind::Cycle && r.classes.iter().any(|c| c.contains("doc-ledger"))
//! });
//! if cfg!(feature = "lockdep") {
//!     let cycle = cycle.expect("AB-BA reported");
//!     assert!(cycle.classes.iter().any(|c| c.contains("doc-accounts")));
//! } else {
//!     // Without the `lockdep` feature the locks never call the validator.
//!     assert!(cycle.is_none());
//! }
//! ```
//!
//! # Classes
//! Locks are grouped into **classes** and the rules are checked between classes, so two locks made
//! in the same place are checked as one even if each is only ever used once. A class is keyed by:
//! - a [`LockClass`] the program gave the lock ([`set_class`]), or
//! - the site that created the lock (the preload library: the `pthread_*_init` call site), or
//! - the lock object itself, for a lock with neither (the library's locks without a [`LockClass`],
//!   which `lock_api` constructs in a `const` without a call site; the preload library's statically
//!   initialised and zeroed objects): [`hooks::instance_class`], a class per object and per
//!   life, named by its first acquisition's site. So orders between such objects are checked object by object,
//!   as the kernel checks its static locks: a consistent order is never a cycle, whichever code
//!   happened to lock each object first.
//!
//! Nesting annotations ([`with_subclass`]) split a class into ordered subclasses, as the kernel's
//! `mutex_lock_nested`.
//!
//! # What is checked, and when
//! Each thread keeps the stack of locks it holds (the object, its class, the mode, the acquisition
//! site). An acquisition that will block (not a trylock) makes a **dependency** from the held lock on
//! top of the stack (and any trylocks above the first non-trylock) to the lock being taken, typed by
//! how each is taken: the held lock exclusively (E) or shared (S), the new one non-recursively (N:
//! a write lock, a mutex, a reader of a writer-preferring rwlock, which waits behind a queued writer)
//! or as a recursive reader (R: a reader that never waits for a queued writer). A dependency is
//! looked up in a lock-free hash table; only the **first** time a (held class, new class, type) is
//! seen does the validator take its one internal lock and search the graph. So the steady state is
//! a few reads of shared, unchanging memory and writes to the thread's own stack.
//!
//! The search looks for a path back from the new lock to the held one that closes a **strong
//! cycle**: one with no two consecutive steps `-(*R)-> X -(S*)->` (a recursive reader of X cannot be
//! blocked by another reader of X). A strong cycle is a potential deadlock; every other cycle is not
//! (Boqun Feng's theorem, which the kernel's lockdep checks since 5.11). Each cycle is reported once:
//! it is found when its last new dependency appears, and that dependency is then recorded.
//!
//! Also reported, each once per distinct problem:
//! - **recursive locking**: a thread takes again, blocking, a lock it holds, where the lock's kind
//!   neither allows it (a recursive mutex) nor refuses it with an error (an error-checking mutex);
//!   a write lock taken while the thread holds a read lock of the same rwlock;
//! - **recursive read of a non-recursive rwlock**: a reader of a writer-preferring class takes it
//!   again, blocking (a writer that queues between the two reads blocks the second, and itself
//!   waits for the first): reported at once, as the kernel does, whether or not a writer of the
//!   class was seen in this run (it may come in another);
//! - **RCU**: `synchronize` (or `barrier`) of a domain inside a read section of that domain (a
//!   recursive-locking report of the domain's class), and a lock held across `synchronize` that is
//!   also taken inside the domain's readers (a cycle through the domain's class: readers are
//!   recursive readers of it, `synchronize` takes it for writing);
//! - **signal handlers**: a class taken inside a handler of a signal and also held where that signal
//!   is not blocked (the userspace form of the kernel's irq-safe/irq-unsafe rule);
//! - **condvar waits** while another lock is held (a warning: the other lock is held for as long as
//!   the wait lasts);
//! - **misuse**: an unlock of a lock the thread does not hold (where the kind forbids it), the
//!   destruction of a held lock, a thread that exits holding locks.
//!
//! Trylocks add no dependency (they cannot block), and a recursion the kind allows adds none.
//!
//! # Same-class nesting
//! The kernel reports two locks of one class held together unless the code annotates subclasses.
//! An unmodified C program cannot annotate (Kyoto Cabinet holds several of its slot mutexes, all
//! created at one site, in a fixed order), so within a class this validator checks **instances**:
//! two instances of one class taken in both orders (an AB-BA inside the class) are reported, a
//! consistent order never is. Such nesting adds no dependency between classes.
//!
//! # Costs
//! Searches: the class graph and the same-class instance graph each keep a topological order of
//! their strongly connected components, updated incrementally (`order.rs`), so a new dependency that
//! agrees with it is not searched at all, one that does not searches only the part of the graph
//! between its two ends, and one that closes a cycle is searched for a deadlock within the cycle's
//! component only.
//!
//! Memory: the tables are reserved once (about 310 MiB of address space, `MAP_NORESERVE`; only the
//! touched pages are backed) and never grow; when one is full the validator says so once and stops
//! checking what does not fit. Time: measured figures are in `docs/lockdep.md` and `docs/results/`.

mod classes;
mod fork;
mod graph;
mod held;
pub mod hooks;
mod objects;
mod order;
mod report;
mod signals;
mod table;

pub use classes::{Classed, LockClass, set_class};
pub use held::{current_subclass, with_subclass, without_dependencies};
pub use report::{Report, ReportKind, report_count, reports, reports_json};

use classes::*;
#[allow(unused_imports)]
use fork::*;
use graph::*;
use held::*;
use objects::*;
use report::Site;
#[allow(unused_imports)]
use signals::*;

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    compiler_fence,
};
use table::{Table, zeroed_array};

// --- configuration -------------------------------------------------------------------------------------

/// What the validator does when it finds a problem.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Action};
/// lockdep::set_mode(Action::Report); // print, record and continue
/// assert!(lockdep::enabled());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Validate nothing.
    Off,
    /// Print the report on standard error, record it ([`reports`]) and continue (the default).
    Report,
    /// Print the report and abort the process (`LOCKLAB_LOCKDEP=abort`).
    Abort,
}

/// 0: not decided yet (the first call reads `LOCKLAB_LOCKDEP`); else `Action as u8 + 1`.
static ACTION: AtomicU8 = AtomicU8::new(0);

/// Sets what the validator does from now on (every thread).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::set_mode(locklab::lockdep::Action::Report);
/// assert_eq!(locklab::lockdep::mode(), locklab::lockdep::Action::Report);
/// ```
pub fn set_mode(a: Action) {
    ACTION.store(a as u8 + 1, Ordering::Relaxed);
}

/// The current [`Action`]; the first call decides it from `LOCKLAB_LOCKDEP` (`0`/`off`, `1`/`report`
/// (the default), `abort`; anything else is reported once on standard error and the default used).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let _ = locklab::lockdep::mode();
/// ```
pub fn mode() -> Action {
    match ACTION.load(Ordering::Relaxed) {
        0 => decide(),
        1 => Action::Off,
        2 => Action::Report,
        _ => Action::Abort,
    }
}

#[cold]
fn decide() -> Action {
    let a = match env_lockdep() {
        None => Action::Report,
        Some(v) => match parse_action(&v) {
            Some(a) => a,
            None => {
                report::say(format_args!(
                    "locklab: LOCKLAB_LOCKDEP={}: expected 0, off, 1, report or abort; using report\n",
                    report::Lossy(&v)
                ));
                Action::Report
            }
        },
    };
    // A racing decision reads the same variable: the same answer.
    set_mode(a);
    // The library's locks (the preload library sets its mode and hook itself, so never gets here):
    // a thread-local destructor checks each thread's exit.
    #[cfg(feature = "lockdep")]
    if a != Action::Off && EXIT_HOOK.load(Ordering::Relaxed).is_null() {
        set_exit_hook(arm_thread_exit);
    }
    a
}

/// Arms the thread-exit check of the library's locks: a pthread key (made once; neither it nor
/// `pthread_setspecific` on it allocates, so a `#[global_allocator]` built on these locks can take
/// its first lock here), elsewhere a thread-local destructor.
#[cfg(feature = "lockdep")]
fn arm_thread_exit() {
    #[cfg(all(unix, not(miri)))]
    {
        static KEY: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(-1);
        unsafe extern "C" fn at_exit(_: *mut libc::c_void) {
            thread_exit();
        }
        // Acquire pairs with the AcqRel exchange below: the key is made.
        let mut k = KEY.load(Ordering::Acquire);
        if k < 0 {
            let mut key: libc::pthread_key_t = 0;
            // SAFETY: a valid out-pointer and destructor.
            if unsafe { libc::pthread_key_create(&mut key, Some(at_exit)) } != 0 {
                return;
            }
            // AcqRel: one key for every thread; the loser of a race deletes its own.
            match KEY.compare_exchange(-1, key as i64, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => k = key as i64,
                Err(won) => {
                    // SAFETY: our own key, unused.
                    unsafe { libc::pthread_key_delete(key) };
                    k = won;
                }
            }
        }
        // SAFETY: the key made above; a non-null value makes its destructor run at thread exit.
        unsafe {
            libc::pthread_setspecific(
                k as libc::pthread_key_t,
                core::ptr::dangling::<libc::c_void>(),
            )
        };
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        struct ExitCheck;
        impl Drop for ExitCheck {
            fn drop(&mut self) {
                thread_exit();
            }
        }
        std::thread_local! {
            static EXIT: ExitCheck = const { ExitCheck };
        }
        let _ = EXIT.try_with(|_| {});
    }
}

/// Parses a `LOCKLAB_LOCKDEP` value.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{parse_action, Action};
/// assert_eq!(parse_action(b"abort"), Some(Action::Abort));
/// assert_eq!(parse_action(b"1"), Some(Action::Report));
/// assert_eq!(parse_action(b"0"), Some(Action::Off));
/// assert_eq!(parse_action(b"maybe"), None);
/// ```
pub fn parse_action(v: &[u8]) -> Option<Action> {
    match v {
        b"0" | b"off" | b"" => Some(Action::Off),
        b"1" | b"report" | b"on" => Some(Action::Report),
        b"abort" => Some(Action::Abort),
        _ => None,
    }
}

/// `LOCKLAB_LOCKDEP`, read without allocating (the first call may come from inside an allocator).
fn env_lockdep() -> Option<ValueBuf> {
    #[cfg(unix)]
    {
        // SAFETY: a NUL-terminated name; getenv's result is read at once (no setenv races it in a
        // program that has not started threads, which is when the first lock usually comes).
        let p = unsafe { libc::getenv(c"LOCKLAB_LOCKDEP".as_ptr()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string from the environment.
        let v = unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes();
        Some(ValueBuf::from(v))
    }
    #[cfg(not(unix))]
    {
        std::env::var_os("LOCKLAB_LOCKDEP").map(|v| ValueBuf::from(v.to_string_lossy().as_bytes()))
    }
}

/// A short copy of an environment value.
struct ValueBuf([u8; 32], usize);

impl ValueBuf {
    fn from(v: &[u8]) -> Self {
        let mut b = [0u8; 32];
        let n = v.len().min(32);
        b[..n].copy_from_slice(&v[..n]);
        // A longer value is never a valid one: keep it longer than any keyword.
        Self(b, if v.len() > 32 { 32 } else { n })
    }
}

impl core::ops::Deref for ValueBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0[..self.1]
    }
}

/// Whether the validator runs: one Relaxed load.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep;
/// lockdep::set_mode(lockdep::Action::Report);
/// assert!(lockdep::enabled());
/// ```
#[inline]
pub fn enabled() -> bool {
    match ACTION.load(Ordering::Relaxed) {
        0 => decide() != Action::Off,
        1 => false,
        _ => true,
    }
}

// Not under Miri: it models every byte of the validator's tables (the table's own tests run there).
#[cfg(all(test, not(miri)))]
mod tests;
