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
//! # Classes
//! Locks are grouped into **classes** and the rules are checked between classes, so two locks made
//! in the same place are checked as one even if each is only ever used once. A class is keyed by:
//! - a [`LockClass`] the program gave the lock ([`set_class`]), or
//! - the site that created the lock (the preload library: the `pthread_*_init` call site), or
//! - the lock object itself, for a lock with neither (the library's locks without a [`LockClass`],
//!   which `lock_api` constructs in a `const` without a call site; the preload library's statically
//!   initialised and zeroed objects): [`instance_class`], a class per object and per life, named by
//!   its first acquisition's site. So orders between such objects are checked object by object,
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
//! Memory: the tables are reserved once (about 100 MiB of address space, `MAP_NORESERVE`; only the
//! touched pages are backed) and never grow; when one is full the validator says so once and stops
//! checking what does not fit. Time: see the README's lockdep section for measured figures.
//!
//! ```
//! # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
//! use locklab::lockdep::{self, LockClass, Mode, Site};
//! static A: LockClass = LockClass::new("doc-a");
//! static B: LockClass = LockClass::new("doc-b");
//! lockdep::set_mode(lockdep::Action::Report);
//! let (a, b) = (A.id(), B.id());
//! let (oa, ob) = (1usize, 2usize); // any distinct addresses name the two objects
//! // One thread: a then b.
//! lockdep::acquire(oa, a, Mode::Write, Site::caller(), lockdep::Flags::NONE);
//! lockdep::acquire(ob, b, Mode::Write, Site::caller(), lockdep::Flags::NONE);
//! lockdep::release(ob, Site::caller());
//! lockdep::release(oa, Site::caller());
//! // Later, b then a: never deadlocked here, but it could have.
//! lockdep::acquire(ob, b, Mode::Write, Site::caller(), lockdep::Flags::NONE);
//! lockdep::acquire(oa, a, Mode::Write, Site::caller(), lockdep::Flags::NONE);
//! lockdep::release(oa, Site::caller());
//! lockdep::release(ob, Site::caller());
//! let named = |r: &lockdep::Report, n: &str| r.classes.iter().any(|c| c.contains(n));
//! assert!(lockdep::reports().iter().any(|r| r.kind == lockdep::ReportKind::Cycle
//!     && named(r, "doc-a") && named(r, "doc-b")));
//! ```

mod order;
mod report;
mod table;

pub use report::{
    Report, ReportKind, Site, report_count, reports, reports_json, set_address_formatter,
};
#[cfg(unix)]
pub use report::{set_abort_hook, write_json_fd};

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    compiler_fence,
};
use table::{Table, zeroed_array};

// --- configuration -------------------------------------------------------------------------------------

/// What the validator does when it finds a problem.
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
#[inline]
pub fn enabled() -> bool {
    match ACTION.load(Ordering::Relaxed) {
        0 => decide() != Action::Off,
        1 => false,
        _ => true,
    }
}

// --- classes ---------------------------------------------------------------------------------------------

/// What kind of lock a class is (names it in reports; picks the RCU messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A mutex (any algorithm).
    Mutex = 1,
    /// A spinlock.
    SpinLock = 2,
    /// A reader-writer lock.
    RwLock = 3,
    /// An RCU domain (its readers are recursive readers of it; `synchronize` takes it for writing).
    Rcu = 4,
    /// A condition variable (only in condvar reports).
    Condvar = 5,
    /// A sequence lock's writer side.
    SeqLock = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Self {
        match v {
            2 => Kind::SpinLock,
            3 => Kind::RwLock,
            4 => Kind::Rcu,
            5 => Kind::Condvar,
            6 => Kind::SeqLock,
            _ => Kind::Mutex,
        }
    }

    /// The name reports use.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert_eq!(locklab::lockdep::Kind::RwLock.name(), "rwlock");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::SpinLock => "spinlock",
            Kind::RwLock => "rwlock",
            Kind::Rcu => "rcu",
            Kind::Condvar => "condvar",
            Kind::SeqLock => "seqlock",
        }
    }
}

/// How a class's key came about (said in reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Origin {
    /// Created at the class's site (`pthread_mutex_init`).
    Created = 1,
    /// First acquired at the class's site.
    FirstLocked = 2,
    /// A named [`LockClass`].
    Named = 3,
    /// An object of its own (an RCU domain, a static lock).
    Object = 4,
}

/// A named class for locks the program groups itself (the kernel's `lock_class_key`): every lock
/// given it ([`set_class`]) is checked as one class, wherever it was created or first locked.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, LockClass};
/// static BUCKET: LockClass = LockClass::new("hash bucket");
/// let buckets: Vec<locklab::Mutex<u32>> = (0..4).map(locklab::Mutex::new).collect();
/// for b in &buckets {
///     lockdep::set_class(b, &BUCKET);
/// }
/// assert_ne!(BUCKET.id(), 0);
/// ```
pub struct LockClass {
    name: &'static str,
    id: AtomicU32,
}

impl LockClass {
    /// A class named `name` (the name is what reports print).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("cache");
    /// assert_eq!(C.name(), "cache");
    /// ```
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            id: AtomicU32::new(0),
        }
    }

    /// The class's name.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert_eq!(locklab::lockdep::LockClass::new("x").name(), "x");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The validator's id of this class (registered on first use; 0 if the validator's tables are
    /// full or it cannot get memory).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("ids");
    /// assert_eq!(C.id(), C.id());
    /// ```
    pub fn id(&'static self) -> u32 {
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id;
        }
        let id = class_for_named(self);
        self.id.store(id, Ordering::Relaxed);
        id
    }
}

/// A lock the validator can be told the class of: the library's lock types (with the `lockdep`
/// feature, each carries its class).
pub trait Classed {
    /// Gives the lock `class` (before its first acquisition, or the change applies from the next).
    fn set_lockdep_class(&self, class: &'static LockClass);
}

impl<R: lock_api::RawMutex + Classed, T: ?Sized> Classed for lock_api::Mutex<R, T> {
    fn set_lockdep_class(&self, class: &'static LockClass) {
        // SAFETY: only the raw lock's class is touched, never its lock state.
        unsafe { self.raw() }.set_lockdep_class(class);
    }
}

impl<R: lock_api::RawRwLock + Classed, T: ?Sized> Classed for lock_api::RwLock<R, T> {
    fn set_lockdep_class(&self, class: &'static LockClass) {
        // SAFETY: only the raw lock's class is touched, never its lock state.
        unsafe { self.raw() }.set_lockdep_class(class);
    }
}

/// Gives `lock` the class `class` (see [`LockClass`]). Without the `lockdep` feature the library's
/// locks carry no class, and this does nothing.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// static Q: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("queue");
/// let m = locklab::Mutex::new(());
/// locklab::lockdep::set_class(&m, &Q);
/// ```
pub fn set_class<L: Classed + ?Sized>(lock: &L, class: &'static LockClass) {
    lock.set_lockdep_class(class);
}

/// One class: written once by its creator before its id is published (Release in the table), read
/// by anyone after.
struct ClassInfo {
    key: AtomicU64,
    /// `Kind` in bits 0-7, `Origin` in 8-15, subclass in 16-23.
    meta: AtomicU32,
    /// The class's site (creation or first acquisition; a [`Site`]'s value).
    site: AtomicU64,
    /// The [`LockClass`]'s address, for a named class (0 otherwise).
    named: AtomicU64,
    /// For a class made by [`class_for_chain`]: the sites of the creating call's callers (Site
    /// values, 0 when absent), printed after the site.
    from: [AtomicU64; 2],
    /// [`FLAG_WRITTEN`], ...
    flags: AtomicU32,
    /// Head of the list of dependencies from this class (an edge index + 1; graph lock).
    first_edge: AtomicU32,
    /// Head of the list of dependencies to this class (an edge index + 1; graph lock).
    first_in: AtomicU32,
    /// The class's number in the graph's topological order ([`order`]; graph lock).
    ord: AtomicU64,
    /// The representative of the class's component in the order (0: itself), and the next member
    /// of the component the class represents or is in (graph lock).
    rep: AtomicU32,
    next_member: AtomicU32,
    /// The first recursive read of a writer-preferring instance: (held site, acquisition site).
    rr_held: AtomicU64,
    rr_site: AtomicU64,
    /// The first write acquisition's site.
    write_site: AtomicU64,
    /// Signals whose handlers took the class (bit n-1 for signal n), and the first such site.
    sig_in: AtomicU64,
    sig_in_site: AtomicU64,
    /// Signals unblocked somewhere the class was held outside a handler (accumulated over holds),
    /// and a site of such a hold.
    sig_out: AtomicU64,
    sig_out_site: AtomicU64,
}

/// Some thread took the class for writing.
const FLAG_WRITTEN: u32 = 1;
/// A recursive read of a writer-preferring instance was seen.
const FLAG_RR: u32 = 2;
/// The recursive-read problem of the class was reported.
const FLAG_RR_REPORTED: u32 = 4;
/// Two instances of the class were held together.
const FLAG_NESTS_SELF: u32 = 8;
/// Held outside a signal handler, and `sig_out` already has every watched signal ([`WATCH`]):
/// nothing more to learn from this class's holds (cleared when a signal is first watched).
const FLAG_SIG_OUT: u32 = 16;
/// The signal rule was reported.
const FLAG_SIG_REPORTED: u32 = 32;

impl ClassInfo {
    fn kind(&self) -> Kind {
        Kind::from_u8(self.meta.load(Ordering::Relaxed) as u8)
    }
    fn origin(&self) -> u8 {
        (self.meta.load(Ordering::Relaxed) >> 8) as u8
    }
    fn subclass(&self) -> u8 {
        (self.meta.load(Ordering::Relaxed) >> 16) as u8
    }
}

/// One dependency `from -> to` (all the types seen for the pair), and where each type was first
/// seen.
struct Edge {
    from: AtomicU32,
    to: AtomicU32,
    /// Bit `t` for each dependency type `t` seen (see [`dep_type`]); set with Release after `sites[t]`.
    types: AtomicU32,
    /// Next edge from the same class (index + 1; graph lock).
    next: AtomicU32,
    /// Next edge to the same class (index + 1; graph lock).
    next_in: AtomicU32,
    sites: [EdgeSite; 4],
}

/// Where a dependency type was first seen.
struct EdgeSite {
    held_site: AtomicU64,
    acq_site: AtomicU64,
    tid: AtomicU32,
}

/// A dependency's type: bit 1 set if the held lock was held shared (S, else E), bit 0 set if the new
/// lock is taken as a recursive reader (R, else N).
fn dep_type(held: Mode, taken: Mode) -> usize {
    (usize::from(held != Mode::Write) << 1) | usize::from(taken == Mode::RecursiveRead)
}

/// A same-class instance pair `a` held while `b` was taken.
struct Pair {
    /// Next pair from the same `a` (index + 1; graph lock).
    next: AtomicU32,
    /// Next pair to the same `b` (index + 1; graph lock).
    next_in: AtomicU32,
    a: AtomicU64,
    b: AtomicU64,
    held_site: AtomicU64,
    acq_site: AtomicU64,
    tid: AtomicU32,
}

// The tables' capacities (Miri: small, it models every byte).
// (A class per never-initialised object: a program's live locks each have one.)
const MAX_CLASSES: usize = if cfg!(miri) { 1 << 8 } else { 1 << 19 };
const MAX_EDGES: usize = if cfg!(miri) { 1 << 9 } else { 1 << 19 };
const MAX_PAIRS: usize = if cfg!(miri) { 1 << 8 } else { 1 << 19 };
const MAX_OBJECTS: usize = if cfg!(miri) { 1 << 10 } else { 1 << 22 };

/// Instances the same-class search visits at most.
const INST_QUEUE: usize = if cfg!(miri) { 256 } else { 4096 };

/// The validator's shared state, created on first use.
struct Graph {
    class_keys: Table,
    classes: &'static [ClassInfo],
    n_classes: AtomicU32,
    edge_keys: Table,
    edges: &'static [Edge],
    n_edges: AtomicU32,
    pair_keys: Table,
    pairs: &'static [Pair],
    n_pairs: AtomicU32,
    /// Instance (address | 1 << 63) -> its first same-class pair as the one held (index + 1);
    /// (address | 1 << 62) -> its first pair as the one taken second; (address | 1 << 61) -> its
    /// number in the instance graph's topological order; (address | 1 << 60) -> the last search pass
    /// that visited it; (address | 1 << 59) -> the representative of its component in the order;
    /// (address | 1 << 58) -> the next member of the component it represents or is in.
    inst_heads: Table,
    /// The next number of an instance new to the instance order, and the last search pass.
    inst_ord_next: AtomicU64,
    inst_pass: AtomicU64,
    /// Whether the class graph, and the instance graph, still have a topological order of their
    /// components ([`order`]): no search of it ever passed [`order::LIMIT`]. Else every new
    /// dependency searches the whole graph.
    class_order_ok: AtomicBool,
    inst_order_ok: AtomicBool,
    /// The topological orders' search memory (graph lock).
    order: order::Scratch,
    /// Nodes looked at by every search so far ([`search_steps`]).
    steps: AtomicU64,
    /// The edge table, and the instance-pair table, are full: new ones are not checked (nor
    /// looked up: a probe of a full table is long).
    edges_full: AtomicBool,
    pairs_full: AtomicBool,
    /// The instance search's queue and parent links (graph lock).
    inst_queue: &'static [AtomicU64],
    inst_parent: &'static [AtomicU64],
    /// Object address -> class id, for users without room in their objects (the preload library).
    objects: Table,
    /// Problems already reported (a key per problem).
    reported: Table,
    /// The search's scratch, per (class, arrived by a recursive read): visit stamp, parent link,
    /// queue (graph lock).
    stamp: AtomicU32,
    visited: &'static [AtomicU32],
    parent: &'static [AtomicU64],
    queue: &'static [AtomicU32],
    /// The one internal lock: taken only for a new dependency or a report.
    lock: AtomicBool,
    /// The reports.
    store: report::Store,
}

static GRAPH: AtomicPtr<Graph> = AtomicPtr::new(core::ptr::null_mut());
/// How long a thread waits for the validator's lock before turning the validator off.
const LOCK_PATIENCE_NS: u128 = 10_000_000_000;
/// 0: not created; 1: being created; 2: created; 3: could not be created.
static GRAPH_STATE: AtomicU8 = AtomicU8::new(0);

#[inline]
fn graph() -> Option<&'static Graph> {
    // Acquire pairs with the Release store in `create_graph`: the tables are set up.
    let g = GRAPH.load(Ordering::Acquire);
    if g.is_null() {
        return create_graph();
    }
    // SAFETY: published once, never freed.
    Some(unsafe { &*g })
}

#[cold]
fn create_graph() -> Option<&'static Graph> {
    let mut since: Option<std::time::Instant> = None;
    loop {
        // Acquire pairs with the Release stores of 2 and 3 below: the graph (or its absence) is
        // published with them.
        match GRAPH_STATE.compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => break,
            Err(2) => {
                // SAFETY: published before state 2 (Release below; Acquire above).
                return Some(unsafe { &*GRAPH.load(Ordering::Acquire) });
            }
            Err(3) => return None,
            Err(_) => {
                // Another thread is creating it (a few mmaps). Not for long: one that does not
                // finish in a second is stopped, or not in this process (a fork child whose
                // handler did not run): validation is off until it does.
                let t0 = *since.get_or_insert_with(std::time::Instant::now);
                if t0.elapsed() > std::time::Duration::from_secs(1) {
                    // Relaxed: nothing is published with it.
                    let _ =
                        GRAPH_STATE.compare_exchange(1, 3, Ordering::Relaxed, Ordering::Relaxed);
                    return None;
                }
                crate::sys::sched_yield();
            }
        }
    }
    let made = (|| {
        Some(Graph {
            class_keys: Table::new(MAX_CLASSES * 2)?,
            classes: zeroed_array(MAX_CLASSES)?,
            n_classes: AtomicU32::new(0),
            edge_keys: Table::new(MAX_EDGES * 2)?,
            edges: zeroed_array(MAX_EDGES)?,
            n_edges: AtomicU32::new(0),
            pair_keys: Table::new(MAX_PAIRS * 2)?,
            pairs: zeroed_array(MAX_PAIRS)?,
            n_pairs: AtomicU32::new(0),
            inst_heads: Table::new(MAX_PAIRS * 4)?,
            inst_ord_next: AtomicU64::new(1),
            inst_pass: AtomicU64::new(0),
            class_order_ok: AtomicBool::new(true),
            inst_order_ok: AtomicBool::new(true),
            order: order::Scratch::new()?,
            steps: AtomicU64::new(0),
            edges_full: AtomicBool::new(false),
            pairs_full: AtomicBool::new(false),
            inst_queue: zeroed_array(INST_QUEUE)?,
            inst_parent: zeroed_array(INST_QUEUE)?,
            objects: Table::new(MAX_OBJECTS)?,
            reported: Table::new(if cfg!(miri) { 1 << 8 } else { 1 << 14 })?,
            stamp: AtomicU32::new(0),
            visited: zeroed_array(MAX_CLASSES * 2)?,
            parent: zeroed_array(MAX_CLASSES * 2)?,
            queue: zeroed_array(MAX_CLASSES * 2)?,
            lock: AtomicBool::new(false),
            store: report::Store::new()?,
        })
    })();
    let Some(made) = made else {
        // Release: waiters (Acquire above) see the final state.
        GRAPH_STATE.store(3, Ordering::Release);
        report::say(format_args!(
            "locklab lockdep: could not reserve the validator's tables: validation is off\n"
        ));
        return None;
    };
    let Some(slot) = zeroed_array::<core::mem::MaybeUninit<Graph>>(1) else {
        // Release as above.
        GRAPH_STATE.store(3, Ordering::Release);
        return None;
    };
    let p = slot.as_ptr() as *mut Graph;
    // SAFETY: fresh, writable, aligned memory for one Graph that nobody else can see yet.
    unsafe { p.write(made) };
    // Release pairs with the Acquire loads in `graph`: the tables are written before the pointer.
    GRAPH.store(p, Ordering::Release);
    GRAPH_STATE.store(2, Ordering::Release);
    install_fork_handlers();
    // SAFETY: just written.
    Some(unsafe { &*p })
}

impl Graph {
    /// Takes the validator's lock; `false` if it stays held for [`LOCK_PATIENCE_NS`] (its holder
    /// was left by `siglongjmp` or cancelled inside the validator): the validator then turns itself
    /// off rather than wedge the program.
    #[must_use]
    fn lock(&self) -> bool {
        // Acquire pairs with the Release in `unlock`: the last holder's graph writes are seen.
        if self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        self.lock_slow()
    }
    /// [`Graph::lock`] when busy: out of line, so the common path's frame stays small (it runs on
    /// signal handlers' stacks).
    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> bool {
        let mut since: Option<std::time::Instant> = None;
        loop {
            // Acquire as in `lock`.
            if self
                .lock
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            crate::sys::sched_yield();
            let t0 = *since.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed().as_nanos() > LOCK_PATIENCE_NS {
                set_mode(Action::Off);
                report::say(format_args!(
                    "locklab lockdep: the validator's lock has been held for 10 s (a thread left it \
                     by siglongjmp or cancellation?): lockdep is off\n"
                ));
                return false;
            }
        }
    }
    fn unlock(&self) {
        // Release pairs with the Acquire in `lock`.
        self.lock.store(false, Ordering::Release);
    }
    fn class(&self, id: u32) -> &ClassInfo {
        &self.classes[id as usize]
    }
    fn edge(&self, idx1: u32) -> &Edge {
        &self.edges[idx1 as usize - 1]
    }
    /// `true` the first time `key` is offered (a problem not yet reported).
    fn first_report(&self, key: u64) -> bool {
        matches!(self.reported.get_or_insert(key | 1, || 1), Some((_, true)))
    }
}

static FULL_SAID: AtomicBool = AtomicBool::new(false);

#[cold]
fn say_full(what: &str) {
    if !FULL_SAID.swap(true, Ordering::Relaxed) {
        report::say(format_args!(
            "locklab lockdep: the {what} table is full: what does not fit is not checked\n"
        ));
    }
}

/// The class of `key` (non-zero; a site, a [`LockClass`]'s or an object's address), created with
/// `kind`, `origin` and `site` if new. 0 if the validator is off or out of room.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Origin, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::class_for(0x1234_5678, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// assert_eq!(c, lockdep::class_for(0x1234_5678, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0));
/// assert_ne!(c, lockdep::class_for(0x1234_5678, Kind::Mutex, Origin::Created, Site::UNKNOWN, 1));
/// ```
pub fn class_for(key: usize, kind: Kind, origin: Origin, site: Site, subclass: u8) -> u32 {
    class_with(key, kind, origin, site.0, 0, [0; 2], subclass)
}

/// The class of objects created at `chain[0]` when called from `chain[1]`, itself called from
/// `chain[2]`: the creating call and up to two of its callers (unknown ones [`Site::UNKNOWN`]).
/// A lock type whose constructor wraps the init call (`Mutex::Mutex() { pthread_mutex_init(..) }`)
/// then gets one class per place that constructs it, as the kernel's `mutex_init` macro gives
/// one key per call site, instead of one class for every lock of the program. Reports print the
/// whole chain.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// let wrapper = Site::address(0x5000);
/// let a = lockdep::class_for_chain(Kind::Mutex, [wrapper, Site::address(0x6000), Site::UNKNOWN]);
/// let b = lockdep::class_for_chain(Kind::Mutex, [wrapper, Site::address(0x7000), Site::UNKNOWN]);
/// assert_ne!(a, b);
/// assert_eq!(a, lockdep::class_for_chain(Kind::Mutex, [wrapper, Site::address(0x6000), Site::UNKNOWN]));
/// ```
pub fn class_for_chain(kind: Kind, chain: [Site; 3]) -> u32 {
    let [s0, s1, s2] = chain.map(|s| s.0 as u64);
    // Distinct chains get distinct keys with overwhelming likelihood; the top byte is the
    // subclass's (cleared), bit 55 set so that no chain's key is a bare site's.
    let mix = |x: u64| x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    let key = if s1 == 0 && s2 == 0 {
        s0
    } else {
        (s0 ^ mix(s1 ^ mix(s2))) & !(0xff << 56) | 1 << 55
    };
    class_with(
        key as usize,
        kind,
        Origin::Created,
        s0 as usize,
        0,
        [s1 as usize, s2 as usize],
        0,
    )
}

fn class_with(
    key: usize,
    kind: Kind,
    origin: Origin,
    site: usize,
    named: usize,
    from: [usize; 2],
    subclass: u8,
) -> u32 {
    if !enabled() || key == 0 {
        return 0;
    }
    let Some(g) = graph() else { return 0 };
    let full = (key as u64) ^ (u64::from(subclass) << 56);
    match g.class_keys.get_or_insert(full, || {
        let id = g.n_classes.fetch_add(1, Ordering::Relaxed) + 1;
        if id as usize >= MAX_CLASSES {
            return u64::MAX;
        }
        let c = g.class(id);
        c.key.store(full, Ordering::Relaxed);
        c.meta.store(
            kind as u32 | (origin as u32) << 8 | u32::from(subclass) << 16,
            Ordering::Relaxed,
        );
        c.site.store(site as u64, Ordering::Relaxed);
        c.named.store(named as u64, Ordering::Relaxed);
        c.ord.store(u64::from(id), Ordering::Relaxed);
        c.from[0].store(from[0] as u64, Ordering::Relaxed);
        c.from[1].store(from[1] as u64, Ordering::Relaxed);
        u64::from(id)
    }) {
        Some((id, _)) if id != u64::MAX => id as u32,
        _ => {
            say_full("class");
            0
        }
    }
}

/// Tag of the keys of [`instance_class`]'s classes (a counter below it): never a site's, a
/// [`LockClass`]'s or an RCU domain's key (addresses below 2^48, a domain's with bit 63 flipped;
/// a subclass uses bits 56-63).
const INSTANCE_KEY: u64 = 1 << 52;
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// A new class for one lock object that was never given a class (a `lock_api` lock without
/// [`set_class`], a pthread object never passed to an init function): a class of its own, for this
/// object's life only, named by `site` (its first acquisition). So the graph between such objects
/// is the graph of the objects themselves, and an order that is consistent between objects is never
/// a cycle, whichever code touched each object first (the kernel's class per static lock). 0 if the
/// validator is off or out of room.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// let (a, b) = (lockdep::instance_class(Kind::Mutex, Site::caller()), lockdep::instance_class(Kind::Mutex, Site::caller()));
/// assert!(a != 0 && b != 0 && a != b, "one class per object, even from one site");
/// ```
pub fn instance_class(kind: Kind, site: Site) -> u32 {
    if let Some(g) = graph()
        && g.n_classes.load(Ordering::Relaxed) as usize >= MAX_CLASSES - 1
    {
        // Full: said once; a new key would only probe the whole full table.
        say_full("class");
        return 0;
    }
    let n = INSTANCES.fetch_add(1, Ordering::Relaxed) + 1;
    class_with(
        (INSTANCE_KEY | (n & ((1 << 48) - 1))) as usize,
        kind,
        Origin::FirstLocked,
        site.0,
        0,
        [0; 2],
        0,
    )
}

fn class_for_named(c: &'static LockClass) -> u32 {
    // Exposed: a report turns the number back into the reference to print the name.
    let a = (c as *const LockClass).expose_provenance();
    class_with(a, Kind::Mutex, Origin::Named, 0, a, [0; 2], 0)
}

/// The class of a subclass of `class` (the kernel's nesting annotation; 0 stays 0).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Origin, Site};
/// let c = lockdep::class_for(0x42_0000, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// assert_ne!(lockdep::subclass_of(c, 1), c);
/// assert_eq!(lockdep::subclass_of(c, 0), c);
/// ```
pub fn subclass_of(class: u32, subclass: u8) -> u32 {
    if class == 0 || subclass == 0 {
        return class;
    }
    let Some(g) = graph() else { return 0 };
    let c = g.class(class);
    let key = c.key.load(Ordering::Relaxed) & !(0xff << 56);
    class_with(
        key as usize,
        c.kind(),
        match c.origin() {
            1 => Origin::Created,
            2 => Origin::FirstLocked,
            3 => Origin::Named,
            _ => Origin::Object,
        },
        c.site.load(Ordering::Relaxed) as usize,
        c.named.load(Ordering::Relaxed) as usize,
        [
            c.from[0].load(Ordering::Relaxed) as usize,
            c.from[1].load(Ordering::Relaxed) as usize,
        ],
        subclass,
    )
}

// --- the object table (for users without room in their objects) ---------------------------------------

/// The class recorded for the object at `obj`, if any ([`set_object_class`]).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Origin, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::class_for(0x77_0000, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// lockdep::set_object_class(0x1000, c);
/// assert_eq!(lockdep::object_class(0x1000), Some(c));
/// lockdep::forget_object(0x1000);
/// assert_eq!(lockdep::object_class(0x1000), None);
/// ```
#[inline]
pub fn object_class(obj: usize) -> Option<u32> {
    let g = graph()?;
    match g.objects.get(obj as u64)? {
        u64::MAX => None,
        c => Some(c as u32),
    }
}

/// The class of the object at `obj`: the recorded one, else (an object never initialised, or
/// destroyed since) a new [`instance_class`] named by `site`, recorded. Racing first acquisitions
/// agree on one class. 0 if the validator is off or out of room.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::object_class_or_new(0x3_0000, Kind::Mutex, Site::caller());
/// assert_eq!(lockdep::object_class_or_new(0x3_0000, Kind::Mutex, Site::caller()), c);
/// assert_ne!(lockdep::object_class_or_new(0x3_0040, Kind::Mutex, Site::caller()), c);
/// ```
pub fn object_class_or_new(obj: usize, kind: Kind, site: Site) -> u32 {
    if obj == 0 {
        return 0;
    }
    let Some(g) = graph() else { return 0 };
    let new = || match instance_class(kind, site) {
        0 => u64::MAX,
        c => u64::from(c),
    };
    match g.objects.get_or_insert(obj as u64, new) {
        Some((c, _)) if c != u64::MAX => c as u32,
        Some(_) => {
            // Forgotten (destroyed): a new life, a new class; a racing first acquisition may
            // replace it once (the table's value is the winner from then on).
            let c = instance_class(kind, site);
            if c != 0 && g.objects.replace(obj as u64, u64::MAX, u64::from(c)) {
                // Release as in `set_object_class`.
                OBJ_EPOCH.fetch_add(1, Ordering::Release);
            }
            object_class(obj).unwrap_or(0)
        }
        None => {
            say_full("object");
            0
        }
    }
}

/// Records `class` as the class of the object at `obj` (an init call, or a first acquisition).
pub fn set_object_class(obj: usize, class: u32) {
    if class == 0 || obj == 0 {
        return;
    }
    let Some(g) = graph() else { return };
    match g.objects.get_or_insert(obj as u64, || u64::from(class)) {
        Some((_, true)) => {}
        Some(_) => {
            g.objects.set(obj as u64, u64::from(class));
            // Release pairs with the Acquire in `acquire_object`: threads' caches drop the old one.
            OBJ_EPOCH.fetch_add(1, Ordering::Release);
        }
        None => say_full("object"),
    }
}

/// Bumped whenever an object's recorded class changes or is forgotten: the per-thread caches of
/// `acquire_object` start over.
static OBJ_EPOCH: AtomicU64 = AtomicU64::new(0);

/// [`acquire`] of an object whose class is in the object table ([`set_object_class`]); an object
/// not there gets a class of its own named by `site` ([`object_class_or_new`]). Each
/// thread caches the classes of the objects it took last, so the steady state does not touch the
/// shared table.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Flags, Kind, Mode, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// lockdep::acquire_object(0x7000, Kind::Mutex, Mode::Write, Site::caller(), Flags::NONE);
/// assert!(lockdep::object_class(0x7000).is_some());
/// assert!(lockdep::release(0x7000, Site::caller()));
/// ```
#[inline]
pub fn acquire_object(obj: usize, kind: Kind, mode: Mode, site: Site, flags: Flags) {
    if !enabled() {
        return;
    }
    let first = with_thread(|t, x| {
        // Acquire pairs with the Release bumps: a class changed before the bump is not used after.
        let e = OBJ_EPOCH.load(Ordering::Acquire);
        if t.cache_epoch != e {
            t.cache = [(0, 0, 0); CACHE];
            t.cache_epoch = e;
        }
        let slot = (obj >> 3) % CACHE;
        let need = if mode == Mode::Write {
            NOTED_WRITE | NOTED_SIG
        } else {
            NOTED_SIG
        };
        let (o, _, noted) = t.cache[slot];
        if o == obj
            && t.n == 0
            && x.sig.load(Ordering::Relaxed) == 0
            && noted & need == need
            && t.exit_armed
        {
            // The steady state of a lock taken alone: nothing held to depend on or to take again,
            // and the class's once-only facts (written, held outside a handler) already recorded.
            t.held[0] = Held {
                obj,
                site: site.0,
                epoch: ELSEWHERE_GEN.load(Ordering::Relaxed),
                class: t.cache[slot].1,
                depth: 1,
                mode: mode as u8,
                flags: flags.0,
            };
            t.n = 1;
            return false;
        }
        acquire_object_slow(t, x, obj, kind, mode, site, flags, slot)
    });
    if first == Some(true) {
        run_exit_hook();
    }
}

/// `acquire_object` past its steady-state fast path: the class looked up (or made) and cached, the
/// acquisition checked. Returns whether this is the thread's first acquisition.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn acquire_object_slow(
    t: &mut ThreadState,
    x: &Tls,
    obj: usize,
    kind: Kind,
    mode: Mode,
    site: Site,
    flags: Flags,
    slot: usize,
) -> bool {
    let (o, c, _) = t.cache[slot];
    let class = if o == obj {
        c
    } else {
        let c = object_class_or_new(obj, kind, site);
        t.cache[slot] = (obj, c, 0);
        c
    };
    if class == 0 {
        return false;
    }
    let first = !t.exit_armed;
    t.exit_armed = true;
    acquire_in(t, x, obj, class, mode, site.0, flags);
    if let Some(g) = graph() {
        let f = g.class(class).flags.load(Ordering::Relaxed);
        let noted = if f & FLAG_WRITTEN != 0 {
            NOTED_WRITE
        } else {
            0
        } | if f & FLAG_SIG_OUT != 0 { NOTED_SIG } else { 0 };
        t.cache[slot].2 = noted;
    }
    first
}

#[cold]
fn run_exit_hook() {
    // Acquire pairs with the Release in `set_exit_hook`.
    let f = EXIT_HOOK.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: set only by `set_exit_hook` from a `fn()`.
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(f) };
        f();
    }
}

/// Forgets the object at `obj` (destroyed: a later object at that address gets a class of its own).
pub fn forget_object(obj: usize) {
    if obj == 0 {
        return;
    }
    if let Some(g) = graph() {
        if g.objects.set(obj as u64, u64::MAX) {
            // Release as in `set_object_class`.
            OBJ_EPOCH.fetch_add(1, Ordering::Release);
        }
        forget_pairs(g, obj);
    }
}

/// Forgets every object recorded in `[start, start + len)`: the memory is going away (a plugin's
/// data unloaded by `dlclose`), and a lock placed there later is another lock, with a class and
/// orders of its own. A scan of the whole object table: for rare events only.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Kind, Site};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::object_class_or_new(0x9_0010, Kind::Mutex, Site::caller());
/// lockdep::forget_range(0x9_0000, 0x100);
/// assert_ne!(lockdep::object_class_or_new(0x9_0010, Kind::Mutex, Site::caller()), c);
/// ```
pub fn forget_range(start: usize, len: usize) {
    if len == 0 || !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let end = start.saturating_add(len) as u64;
    let mut forgotten = false;
    g.objects.for_each(|obj, class| {
        if (start as u64..end).contains(&obj) && class != u64::MAX {
            g.objects.set(obj, u64::MAX);
            forget_pairs(g, obj as usize);
            forgotten = true;
        }
    });
    if forgotten {
        // Release as in `set_object_class`.
        OBJ_EPOCH.fetch_add(1, Ordering::Release);
    }
}

// --- the per-thread stack ----------------------------------------------------------------------------------

/// How a lock is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Exclusively: a mutex, a spinlock, a write lock, `synchronize`.
    Write = 0,
    /// A reader that waits behind a queued writer (a writer-preferring rwlock: `RwSem`, glibc's
    /// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`).
    Read = 1,
    /// A reader that never waits for a queued writer (glibc's default rwlock, `RecursiveRwSem`, an
    /// RCU read section).
    RecursiveRead = 2,
}

impl Mode {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Mode::Read,
            2 => Mode::RecursiveRead,
            _ => Mode::Write,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::Read => "read",
            Mode::RecursiveRead => "recursive read",
        }
    }
}

/// Properties of one acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags(u8);

impl Flags {
    /// A blocking acquisition of a lock without special rules.
    pub const NONE: Flags = Flags(0);
    /// A trylock that succeeded: pushed, adds no dependency.
    pub const TRY: Flags = Flags(1);
    /// The kind allows the holder to take it again (a recursive mutex).
    pub const RECURSIVE: Flags = Flags(2);
    /// Taking again what the thread holds for writing returns an error instead of deadlocking (an
    /// error-checking mutex, a pthread rwlock): the caller will [`forget`] it.
    pub const RELOCK_ERRORS: Flags = Flags(4);
    /// A timed acquisition: it adds dependencies as a blocking one, but taking a lock the thread
    /// holds is not reported (it times out; the caller [`forget`]s it).
    pub const TIMED: Flags = Flags(8);
    /// Any thread may unlock it (glibc's normal mutexes, which programs use as binary semaphores):
    /// its holder taking it again waits for another thread's unlock, not for ever, and is not
    /// reported.
    pub const OWNERLESS: Flags = Flags(16);

    /// Both sets of flags.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::Flags;
    /// assert!(Flags::TRY.with(Flags::RECURSIVE).has(Flags::TRY));
    /// ```
    pub const fn with(self, o: Flags) -> Flags {
        Flags(self.0 | o.0)
    }
    /// These flags without those of `o`.
    ///
    /// ```
    /// use locklab::lockdep::Flags;
    /// assert!(!Flags::TRY.with(Flags::TIMED).without(Flags::TRY).has(Flags::TRY));
    /// ```
    pub const fn without(self, o: Flags) -> Flags {
        Flags(self.0 & !o.0)
    }
    /// Whether every flag of `o` is set.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert!(!locklab::lockdep::Flags::NONE.has(locklab::lockdep::Flags::TRY));
    /// ```
    pub const fn has(self, o: Flags) -> bool {
        self.0 & o.0 == o.0
    }
}

#[derive(Clone, Copy)]
struct Held {
    obj: usize,
    site: usize,
    /// [`ELSEWHERE_GEN`] when acquired.
    epoch: u64,
    class: u32,
    depth: u32,
    mode: u8,
    flags: u8,
}

const EMPTY: Held = Held {
    obj: 0,
    site: 0,
    epoch: 0,
    class: 0,
    depth: 0,
    mode: 0,
    flags: 0,
};

/// Locks one thread may hold at once and still be checked (the kernel's MAX_LOCK_DEPTH is 48).
const MAX_HELD: usize = 48;

struct ThreadState {
    held: [Held; MAX_HELD],
    n: usize,
    /// Acquisitions that did not fit in `held` (their releases are not looked for).
    lost: usize,
    /// The exit check is armed for this thread.
    exit_armed: bool,
    /// `acquire_object`'s cache of (object, class, NOTED_* facts of the class), valid for
    /// `cache_epoch`.
    cache: [(usize, u32, u8); CACHE],
    cache_epoch: u64,
}

/// Entries of the per-thread object cache.
const CACHE: usize = 16;
/// The class is known to be written ([`FLAG_WRITTEN`]).
const NOTED_WRITE: u8 = 1;
/// The class is known to be held outside a signal handler ([`FLAG_SIG_OUT`]).
const NOTED_SIG: u8 = 2;

/// A thread's validator state: the part only validator calls touch (behind `busy`), and the part
/// that code running on top of a validator call (a signal handler) may change, in atomics (Relaxed:
/// one thread; `compiler_fence`s order them against the interrupted code).
struct Tls {
    state: UnsafeCell<ThreadState>,
    /// A validator call is running on this thread (a signal handler that locks meanwhile is not
    /// validated; a handler left by `siglongjmp` out of a validator call leaves the thread
    /// unchecked from then on, never inconsistent).
    busy: AtomicBool,
    /// The subclass of this thread's acquisitions inside [`with_subclass`].
    subclass: AtomicU8,
    /// Inside [`without_dependencies`]: acquisitions are recorded as held but add no dependency.
    no_deps: AtomicU32,
    /// Signal handler nesting (the preload library's wrapped handlers, [`signal_handler`]).
    sig: AtomicU32,
    /// The signal of the innermost handler, and the stack pointer at its entry.
    sig_no: AtomicI32,
    sig_sp: AtomicUsize,
    /// This thread's blocked signals as last read, valid while `mask_known` (see
    /// [`signal_mask_changed`]).
    mask: AtomicU64,
    mask_known: AtomicBool,
}

std::thread_local! {
    // No destructor: usable in every thread-local destructor, and no registration on first use.
    static THREAD: Tls = const { Tls {
        state: UnsafeCell::new(ThreadState {
            held: [EMPTY; MAX_HELD],
            n: 0,
            lost: 0,
            exit_armed: false,
            cache: [(0, 0, 0); CACHE],
            cache_epoch: 0,
        }),
        busy: AtomicBool::new(false),
        subclass: AtomicU8::new(0),
        no_deps: AtomicU32::new(0),
        sig: AtomicU32::new(0),
        sig_no: AtomicI32::new(0),
        sig_sp: AtomicUsize::new(0),
        mask: AtomicU64::new(0),
        mask_known: AtomicBool::new(false),
    } };
}

/// Runs `f` on this thread's state unless the validator is already running on this thread.
#[inline]
fn with_thread<R>(f: impl FnOnce(&mut ThreadState, &Tls) -> R) -> Option<R> {
    THREAD
        .try_with(|x| {
            if x.busy.load(Ordering::Relaxed) {
                return None;
            }
            x.busy.store(true, Ordering::Relaxed);
            // A signal handler that interrupts what follows sees `busy` set.
            compiler_fence(Ordering::SeqCst);
            // SAFETY: the state is this thread's, and `busy` keeps every nested call (a signal
            // handler that interrupts this one) from making a second reference to it.
            let t = unsafe { &mut *x.state.get() };
            let r = f(t, x);
            compiler_fence(Ordering::SeqCst);
            x.busy.store(false, Ordering::Relaxed);
            Some(r)
        })
        .ok()
        .flatten()
}

/// Called once per thread on its first acquisition (to arm a thread-exit check), if set.
static EXIT_HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the function called on a thread's first checked acquisition (the preload library sets a
/// pthread key there, whose destructor calls [`thread_exit`]).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// fn arm() {}
/// locklab::lockdep::set_exit_hook(arm);
/// ```
pub fn set_exit_hook(f: fn()) {
    EXIT_HOOK.store(f as *mut (), Ordering::Release);
}

/// Released-elsewhere bookkeeping: a release of a lock the releasing thread does not hold (a guard
/// sent to another thread, a normal pthread mutex unlocked by another thread) is recorded here, so
/// that the acquiring thread's stack does not keep it as held.
static ELSEWHERE_GEN: AtomicU64 = AtomicU64::new(0);
const RING: usize = 256;
static ELSEWHERE: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];
static ELSEWHERE_AT: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];

#[cold]
#[inline(never)]
fn released_elsewhere(obj: usize) {
    // AcqRel: a generation per release elsewhere; its ring slot is published below (Release on
    // ELSEWHERE_AT), this only numbers it.
    let g = ELSEWHERE_GEN.fetch_add(1, Ordering::AcqRel) + 1;
    let i = g as usize % RING;
    ELSEWHERE[i].store(obj as u64, Ordering::Relaxed);
    // Release pairs with the Acquire in `stale`: the object is written before its generation.
    ELSEWHERE_AT[i].store(g, Ordering::Release);
}

/// Whether `h` was released by another thread since it was taken.
fn stale(h: &Held) -> bool {
    let now = ELSEWHERE_GEN.load(Ordering::Acquire);
    if now == h.epoch {
        return false;
    }
    if now - h.epoch >= RING as u64 {
        // More releases elsewhere than the ring keeps: this one may be among the lost. Taken as
        // released (a missed dependency at worst, never a false report).
        return true;
    }
    let first = h.epoch.max(now.saturating_sub(RING as u64 - 1)) + 1;
    (first..=now).any(|e| {
        let i = e as usize % RING;
        // Acquire pairs with the Release store in `released_elsewhere`: the object is written.
        ELSEWHERE_AT[i].load(Ordering::Acquire) == e
            && ELSEWHERE[i].load(Ordering::Relaxed) == h.obj as u64
    })
}

#[cold]
#[inline(never)]
fn drop_stale(t: &mut ThreadState) {
    let mut i = 0;
    while i < t.n {
        if stale(&t.held[i]) {
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
        } else {
            i += 1;
        }
    }
}

/// Runs `f` with this thread's acquisitions in subclass `sub` (the kernel's `*_nested` calls), for
/// locks of one class taken in a fixed order.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let (parent, child) = (locklab::Mutex::new(()), locklab::Mutex::new(()));
/// let _p = parent.lock();
/// let _c = locklab::lockdep::with_subclass(1, || child.lock());
/// ```
pub fn with_subclass<R>(sub: u8, f: impl FnOnce() -> R) -> R {
    let old = THREAD
        .try_with(|x| x.subclass.swap(sub, Ordering::Relaxed))
        .unwrap_or(0);
    struct Restore(u8);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = THREAD.try_with(|x| x.subclass.store(self.0, Ordering::Relaxed));
        }
    }
    let _r = Restore(old);
    f()
}

/// Runs `f` with this thread's acquisitions recorded as held but making no dependency: for code
/// that takes a whole set of locks in one global order, which classes cannot express (the kernel's
/// `lockdep_off` around such code; locklab's RCU domains park all their locks this way before a
/// `fork`). Locks taken after `f` returns still depend on the ones it left held.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let locks: Vec<locklab::Mutex<()>> = (0..3).map(|_| locklab::Mutex::new(())).collect();
/// let guards = locklab::lockdep::without_dependencies(|| {
///     locks.iter().map(|l| l.lock()).collect::<Vec<_>>()
/// });
/// drop(guards);
/// ```
pub fn without_dependencies<R>(f: impl FnOnce() -> R) -> R {
    let set = |d: i32| {
        let _ = THREAD.try_with(|x| {
            let n = x.no_deps.load(Ordering::Relaxed);
            x.no_deps
                .store(n.saturating_add_signed(d), Ordering::Relaxed);
        });
    };
    struct Restore<F: Fn(i32)>(F);
    impl<F: Fn(i32)> Drop for Restore<F> {
        fn drop(&mut self) {
            (self.0)(-1);
        }
    }
    set(1);
    let _r = Restore(set);
    f()
}

/// The subclass set by [`with_subclass`] on this thread (0 outside it).
#[inline]
pub fn current_subclass() -> u8 {
    THREAD
        .try_with(|x| x.subclass.load(Ordering::Relaxed))
        .unwrap_or(0)
}

// --- the checks --------------------------------------------------------------------------------------------

/// Records that this thread takes (or, with [`Flags::TRY`], has taken) the lock at `obj` of class
/// `class` in `mode` at `site`, after checking the acquisition against everything seen before.
/// Call it before a blocking acquisition blocks (a deadlock is reported before it happens), and
/// after a trylock succeeds. A class of 0 (the validator could not classify) is not checked.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Flags, Mode, Site};
/// static C: lockdep::LockClass = lockdep::LockClass::new("acquire-doc");
/// lockdep::acquire(0x10, C.id(), Mode::Write, Site::caller(), Flags::NONE);
/// assert!(lockdep::holds(0x10));
/// assert!(lockdep::release(0x10, Site::caller()));
/// ```
#[inline]
pub fn acquire(obj: usize, class: u32, mode: Mode, site: Site, flags: Flags) {
    if class == 0 || !enabled() {
        return;
    }
    let first = with_thread(|t, x| {
        if t.n == 0
            && t.exit_armed
            && x.sig.load(Ordering::Relaxed) == 0
            && x.subclass.load(Ordering::Relaxed) == 0
        {
            // The steady state of a lock taken alone (see `acquire_object`): the class's
            // once-only facts already recorded.
            let need = if mode == Mode::Write {
                FLAG_WRITTEN | FLAG_SIG_OUT
            } else {
                FLAG_SIG_OUT
            };
            // Acquire pairs with the Release in `create_graph`.
            let g = GRAPH.load(Ordering::Acquire);
            // SAFETY: published once, never freed (see `graph`).
            if let Some(g) = unsafe { g.as_ref() }
                && g.class(class).flags.load(Ordering::Relaxed) & need == need
            {
                t.held[0] = Held {
                    obj,
                    site: site.0,
                    epoch: ELSEWHERE_GEN.load(Ordering::Relaxed),
                    class,
                    depth: 1,
                    mode: mode as u8,
                    flags: flags.0,
                };
                t.n = 1;
                return false;
            }
        }
        acquire_slow(t, x, obj, class, mode, site, flags)
    });
    if first == Some(true) {
        run_exit_hook();
    }
}

#[inline(never)]
fn acquire_slow(
    t: &mut ThreadState,
    x: &Tls,
    obj: usize,
    class: u32,
    mode: Mode,
    site: Site,
    flags: Flags,
) -> bool {
    let class = match x.subclass.load(Ordering::Relaxed) {
        0 => class,
        s => subclass_of(class, s),
    };
    let first = !t.exit_armed;
    t.exit_armed = true;
    acquire_in(t, x, obj, class, mode, site.0, flags);
    first
}

fn acquire_in(
    t: &mut ThreadState,
    x: &Tls,
    obj: usize,
    class: u32,
    mode: Mode,
    site: usize,
    flags: Flags,
) {
    let Some(g) = graph() else { return };
    // Taken again?
    if let Some(i) = (0..t.n).rev().find(|&i| t.held[i].obj == obj) {
        let h = t.held[i];
        if stale(&h) {
            // Released by another thread since (a guard sent away): not held, a new acquisition.
            drop_stale(t);
            return acquire_in(t, x, obj, class, mode, site, flags);
        }
        if flags.has(Flags::OWNERLESS) && h.mode == Mode::Write as u8 && mode == Mode::Write {
            // Another thread may unlock it (a mutex used as a binary semaphore): the old hold is
            // left to that thread, and this is a new acquisition (a real self-deadlock shows as
            // a hang of this thread, which the program's author sees anyway).
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
            return acquire_in(
                t,
                x,
                obj,
                class,
                mode,
                site,
                flags.without(Flags::OWNERLESS),
            );
        }
        let held = Mode::from_u8(h.mode);
        let ok = if held != Mode::Write && mode != Mode::Write {
            if mode == Mode::Read && !flags.has(Flags::TRY) {
                recursive_read(g, class, h.site, site);
            }
            true
        } else if held == Mode::Write && flags.has(Flags::RELOCK_ERRORS) {
            true
        } else {
            flags.has(Flags::RECURSIVE) || flags.has(Flags::TRY) || flags.has(Flags::TIMED)
        };
        if !ok {
            report::recursion(g, class, h, mode, site);
        }
        t.held[i].depth += 1;
        note_mode(g, class, mode, site, x);
        return;
    }
    if !flags.has(Flags::TRY) && x.no_deps.load(Ordering::Relaxed) == 0 {
        // Dependencies from the top of the stack down to (and including) the first non-trylock.
        let mut i = t.n;
        let mut dropped = false;
        while i > 0 {
            i -= 1;
            let h = t.held[i];
            if h.class == class {
                same_class(g, class, &h, obj, site);
            } else if !add_dep(g, &h, class, mode, site) {
                dropped = true;
            }
            if h.flags & Flags::TRY.0 == 0 {
                break;
            }
        }
        if dropped {
            drop_stale(t);
        }
    }
    note_mode(g, class, mode, site, x);
    if t.n < MAX_HELD {
        t.held[t.n] = Held {
            obj,
            site,
            epoch: ELSEWHERE_GEN.load(Ordering::Relaxed),
            class,
            depth: 1,
            mode: mode as u8,
            flags: flags.0,
        };
        t.n += 1;
    } else {
        t.lost += 1;
        say_too_deep();
    }
}

/// Said once per process: a thread held more locks at once than the held stack has room for.
#[cold]
fn say_too_deep() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        report::say(format_args!(
            "locklab lockdep: a thread holds more than {MAX_HELD} locks at once: the locks it takes \
             beyond that are not checked\n"
        ));
    }
}

/// Class-wide facts of one acquisition: written (for the recursive-read rule) and signal context.
#[inline]
fn note_mode(g: &Graph, class: u32, mode: Mode, site: usize, x: &Tls) {
    let c = g.class(class);
    let f = c.flags.load(Ordering::Relaxed);
    if mode == Mode::Write && f & FLAG_WRITTEN == 0 {
        c.write_site.store(site as u64, Ordering::Relaxed);
        // AcqRel pairs with `recursive_read`'s: whichever comes second sees the other's flag (and,
        // through it, its sites) and reports.
        let old = c.flags.fetch_or(FLAG_WRITTEN, Ordering::AcqRel);
        if old & FLAG_RR != 0 && old & FLAG_WRITTEN == 0 {
            report_rr(g, class);
        }
    }
    if x.sig.load(Ordering::Relaxed) > 0 {
        in_signal(g, class, x, site);
    } else if f & FLAG_SIG_OUT == 0 {
        held_outside_signal(g, class, site, x);
    }
}

#[cold]
#[inline(never)]
fn recursive_read(g: &Graph, class: u32, held_site: usize, site: usize) {
    let c = g.class(class);
    if c.flags.load(Ordering::Relaxed) & FLAG_RR == 0 {
        c.rr_held.store(held_site as u64, Ordering::Relaxed);
        c.rr_site.store(site as u64, Ordering::Relaxed);
        // AcqRel: the sites are written before the flag (Release), and the written flag seen
        // (Acquire) pairs with `note_mode`'s fetch_or (the report names a writer's site if one
        // is known).
        let old = c.flags.fetch_or(FLAG_RR, Ordering::AcqRel);
        if old & FLAG_RR == 0 {
            // Reported at once, as the kernel does: the writer that deadlocks it may come in
            // another run, or from another program sharing the lock.
            report_rr(g, class);
        }
    }
}

#[cold]
#[inline(never)]
fn report_rr(g: &Graph, class: u32) {
    let c = g.class(class);
    // AcqRel: one reporter wins; the sites it reads were published with the flags above.
    if c.flags.fetch_or(FLAG_RR_REPORTED, Ordering::AcqRel) & FLAG_RR_REPORTED == 0 {
        report::recursive_read(g, class);
    }
}

/// Checks (and, the first time, records) the dependency `h -> class`. `false` if `h` turned out to
/// have been released by another thread (the caller drops it from the stack).
#[inline]
fn add_dep(g: &Graph, h: &Held, class: u32, mode: Mode, site: usize) -> bool {
    if g.edges_full.load(Ordering::Relaxed) {
        return true;
    }
    let t = dep_type(Mode::from_u8(h.mode), mode);
    let key = u64::from(h.class) << 32 | u64::from(class);
    if let Some(e) = g.edge_keys.get(key) {
        // Acquire pairs with the Release fetch_or in `add_dep_slow`: the type's sites are written.
        if g.edge(e as u32).types.load(Ordering::Acquire) & (1 << t) != 0 {
            return true;
        }
    }
    add_dep_slow(g, h, class, mode, t, site)
}

#[cold]
#[inline(never)]
fn add_dep_slow(g: &Graph, h: &Held, class: u32, mode: Mode, t: usize, site: usize) -> bool {
    if stale(h) {
        return false;
    }
    if !g.lock() {
        return true;
    }
    let key = u64::from(h.class) << 32 | u64::from(class);
    let known = g
        .edge_keys
        .get(key)
        .is_some_and(|e| g.edge(e as u32).types.load(Ordering::Relaxed) & (1 << t) != 0);
    if !known {
        // While the class graph keeps a topological order of its components, a dependency that
        // agrees with it cannot close a cycle: no search. One that closes a cycle (or a new type of
        // one inside a component) is searched for within its component only: every path back is.
        use order::Dag as _;
        let dag = ClassDag(g);
        let (from, to) = (u64::from(h.class), u64::from(class));
        let within = if !g.class_order_ok.load(Ordering::Relaxed) {
            Some(0)
        } else if g.edge_keys.get(key).is_some() {
            // Already in the graph (another type): in the order already.
            Some(dag.rep(from)).filter(|&r| r == dag.rep(to))
        } else {
            match order::add(&dag, &g.order, from, to, &g.steps) {
                order::Added::Ordered => None,
                order::Added::Inside | order::Added::Cycle => Some(dag.rep(from)),
                order::Added::TooBig => {
                    g.class_order_ok.store(false, Ordering::Relaxed);
                    Some(0)
                }
            }
        };
        if let Some(within) = within
            && let Some((end, start)) = search(g, h.class, class, t, within as u32)
        {
            report_cycle(g, h, class, mode, site, end, start);
        }
        record_edge(g, key, h.class, class, t, h.site, site);
    }
    g.unlock();
    true
}

/// Adds type `t` of `from -> to` to the graph (graph lock held).
fn record_edge(g: &Graph, key: u64, from: u32, to: u32, t: usize, held_site: usize, site: usize) {
    let r = g.edge_keys.get_or_insert(key, || {
        let idx = g.n_edges.fetch_add(1, Ordering::Relaxed) + 1;
        if idx as usize > MAX_EDGES {
            g.edges_full.store(true, Ordering::Relaxed);
            return u64::MAX;
        }
        let e = g.edge(idx);
        e.from.store(from, Ordering::Relaxed);
        e.to.store(to, Ordering::Relaxed);
        let c = g.class(from);
        e.next
            .store(c.first_edge.load(Ordering::Relaxed), Ordering::Relaxed);
        c.first_edge.store(idx, Ordering::Relaxed);
        let c = g.class(to);
        e.next_in
            .store(c.first_in.load(Ordering::Relaxed), Ordering::Relaxed);
        c.first_in.store(idx, Ordering::Relaxed);
        u64::from(idx)
    });
    let Some((idx, _)) = r.filter(|&(i, _)| i != u64::MAX && i != 0) else {
        say_full("dependency");
        return;
    };
    let e = g.edge(idx as u32);
    let s = &e.sites[t];
    s.held_site.store(held_site as u64, Ordering::Relaxed);
    s.acq_site.store(site as u64, Ordering::Relaxed);
    s.tid.store(report::tid(), Ordering::Relaxed);
    // Release pairs with the Acquire load in `add_dep`: the sites are written first.
    e.types.fetch_or(1 << t, Ordering::Release);
}

/// Reports the cycle that the path `start ~> end` of the last search closes (graph lock held).
/// Out of line: the path lives in this frame only while a report is composed, not in every
/// dependency check's (which may run on a signal handler's small stack).
#[cold]
#[inline(never)]
fn report_cycle(
    g: &Graph,
    h: &Held,
    class: u32,
    mode: Mode,
    site: usize,
    end: usize,
    start: usize,
) {
    let mut path = Path {
        steps: [Step(0); 32],
        n: 0,
        more: 0,
    };
    path.fill(g, end, start);
    report::cycle(g, h, class, mode, site, &path);
}

/// One step of a path: an edge index (+1) and the dependency type taken.
#[derive(Clone, Copy)]
struct Step(u32);

impl Step {
    /// The edge's index (+1).
    fn edge(self) -> u32 {
        self.0 >> 2
    }
    /// The dependency type, 0..4.
    fn t(self) -> usize {
        (self.0 & 3) as usize
    }
}

/// Searches (breadth first) for a path `to ~> from` that makes the new dependency `from -(t)-> to`
/// close a strong cycle, through the classes of the component represented by `within` only (0: all).
/// Graph lock held. Returns the search states at the path's two ends, for [`Path::fill`].
fn search(g: &Graph, from: u32, to: u32, t: usize, within: u32) -> Option<(usize, usize)> {
    let stamp = next_stamp(g);
    let new_from_shared = t & 2 != 0;
    let state = |class: u32, r: bool| class as usize * 2 + usize::from(r);
    let start = state(to, t & 1 != 0);
    g.visited[start].store(stamp, Ordering::Relaxed);
    g.parent[start].store(0, Ordering::Relaxed);
    g.queue[0].store(start as u32, Ordering::Relaxed);
    let (mut head, mut tail) = (0usize, 1usize);
    while head < tail {
        let s = g.queue[head].load(Ordering::Relaxed) as usize;
        head += 1;
        g.steps.fetch_add(1, Ordering::Relaxed);
        let (c, r) = ((s / 2) as u32, s % 2 == 1);
        let mut ei = g.class(c).first_edge.load(Ordering::Relaxed);
        while ei != 0 {
            let e = g.edge(ei);
            let types = e.types.load(Ordering::Relaxed);
            let d = e.to.load(Ordering::Relaxed);
            for et in 0..4 {
                if types & (1 << et) == 0 {
                    continue;
                }
                // Not strong: a recursive read of `c` followed by `c` held shared.
                if r && et & 2 != 0 {
                    continue;
                }
                let nr = et & 1 != 0;
                let ns = state(d, nr);
                if d == from && !(nr && new_from_shared) {
                    g.parent[ns].store(
                        (s as u64) << 32 | u64::from(ei) << 2 | et as u64,
                        Ordering::Relaxed,
                    );
                    return Some((ns, start));
                }
                if within != 0 && order::Dag::rep(&ClassDag(g), d.into()) != u64::from(within) {
                    continue;
                }
                if g.visited[ns].load(Ordering::Relaxed) != stamp && tail < g.queue.len() {
                    g.visited[ns].store(stamp, Ordering::Relaxed);
                    g.parent[ns].store(
                        (s as u64) << 32 | u64::from(ei) << 2 | et as u64,
                        Ordering::Relaxed,
                    );
                    g.queue[tail].store(ns as u32, Ordering::Relaxed);
                    tail += 1;
                }
            }
            ei = e.next.load(Ordering::Relaxed);
        }
    }
    None
}

/// A fresh visit stamp for the class searches (graph lock).
fn next_stamp(g: &Graph) -> u32 {
    let stamp = g.stamp.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    if stamp == 0 {
        // Wrapped: clear the stamps once every 4 billion searches.
        for v in g.visited {
            v.store(0, Ordering::Relaxed);
        }
        g.stamp.store(1, Ordering::Relaxed);
        1
    } else {
        stamp
    }
}

/// The class graph, for [`order`] (graph lock).
struct ClassDag<'a>(&'a Graph);

impl ClassDag<'_> {
    /// Calls `f` on each member of the component represented by `r`.
    fn members(&self, r: u32, mut f: impl FnMut(u32)) {
        let mut m = r;
        while m != 0 {
            f(m);
            m = self.0.class(m).next_member.load(Ordering::Relaxed);
        }
    }
}

impl order::Dag for ClassDag<'_> {
    fn rep(&self, n: u64) -> u64 {
        match self.0.class(n as u32).rep.load(Ordering::Relaxed) {
            0 => n,
            r => r.into(),
        }
    }
    fn merge(&self, r: u64, other: u64) {
        let mut tail = r as u32;
        self.members(r as u32, |m| tail = m);
        self.members(other as u32, |m| {
            self.0.class(m).rep.store(r as u32, Ordering::Relaxed)
        });
        self.0
            .class(tail)
            .next_member
            .store(other as u32, Ordering::Relaxed);
    }
    fn ord(&self, n: u64) -> u64 {
        self.0.class(n as u32).ord.load(Ordering::Relaxed)
    }
    fn set_ord(&self, n: u64, o: u64) {
        self.0.class(n as u32).ord.store(o, Ordering::Relaxed);
    }
    fn succ(&self, r: u64, f: &mut dyn FnMut(u64)) {
        self.members(r as u32, |m| {
            let mut ei = self.0.class(m).first_edge.load(Ordering::Relaxed);
            while ei != 0 {
                let e = self.0.edge(ei);
                f(e.to.load(Ordering::Relaxed).into());
                ei = e.next.load(Ordering::Relaxed);
            }
        });
    }
    fn pred(&self, r: u64, f: &mut dyn FnMut(u64)) {
        self.members(r as u32, |m| {
            let mut ei = self.0.class(m).first_in.load(Ordering::Relaxed);
            while ei != 0 {
                let e = self.0.edge(ei);
                f(e.from.load(Ordering::Relaxed).into());
                ei = e.next_in.load(Ordering::Relaxed);
            }
        });
    }
    fn visit(&self, n: u64, pass: u64) -> bool {
        // The search's stamps, state (class, not arrived by a recursive read).
        let v = &self.0.visited[n as usize * 2];
        if v.load(Ordering::Relaxed) == pass as u32 {
            return false;
        }
        v.store(pass as u32, Ordering::Relaxed);
        true
    }
    fn pass(&self) -> u64 {
        next_stamp(self.0).into()
    }
}

/// The same-class instance graph, for [`order`] (graph lock).
struct InstDag<'a>(&'a Graph);

impl InstDag<'_> {
    /// Calls `f` on each member of the component represented by `r`.
    fn members(&self, r: u64, mut f: impl FnMut(u64)) {
        let mut m = r;
        while m != 0 {
            f(m);
            m = self.0.inst_heads.get(m | 1 << 58).unwrap_or(0);
            if m == u64::MAX {
                m = 0;
            }
        }
    }
    /// Sets the instance's `tag` entry to `v`.
    fn put(&self, key: u64, v: u64) {
        if let Some((_, false)) = self.0.inst_heads.get_or_insert(key, || v) {
            self.0.inst_heads.set(key, v);
        }
    }
}

impl order::Dag for InstDag<'_> {
    fn rep(&self, n: u64) -> u64 {
        self.0.inst_heads.get(n | 1 << 59).unwrap_or(n)
    }
    fn merge(&self, r: u64, other: u64) {
        let mut tail = r;
        self.members(r, |m| tail = m);
        self.members(other, |m| self.put(m | 1 << 59, r));
        self.put(tail | 1 << 58, other);
    }
    fn ord(&self, n: u64) -> u64 {
        let g = self.0;
        g.inst_heads
            .get_or_insert(n | 1 << 61, || {
                g.inst_ord_next.fetch_add(1, Ordering::Relaxed)
            })
            .map_or(u64::MAX, |(o, _)| o)
    }
    fn set_ord(&self, n: u64, o: u64) {
        self.0.inst_heads.set(n | 1 << 61, o);
    }
    fn succ(&self, r: u64, f: &mut dyn FnMut(u64)) {
        let g = self.0;
        self.members(r, |n| {
            let mut pi = match g.inst_heads.get(n | 1 << 63) {
                Some(v) if v != u64::MAX => v as u32,
                _ => 0,
            };
            while pi != 0 {
                let p = &g.pairs[pi as usize - 1];
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if a == n && b != 0 {
                    f(b);
                }
                pi = p.next.load(Ordering::Relaxed);
            }
        });
    }
    fn pred(&self, r: u64, f: &mut dyn FnMut(u64)) {
        let g = self.0;
        self.members(r, |n| {
            let mut pi = g.inst_heads.get(n | 1 << 62).unwrap_or(0) as u32;
            while pi != 0 {
                let p = &g.pairs[pi as usize - 1];
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if b == n && a != 0 {
                    f(a);
                }
                pi = p.next_in.load(Ordering::Relaxed);
            }
        });
    }
    fn visit(&self, n: u64, pass: u64) -> bool {
        match self.0.inst_heads.get_or_insert(n | 1 << 60, || pass) {
            Some((_, true)) => true,
            Some((v, false)) if v != pass => self.0.inst_heads.set(n | 1 << 60, pass),
            _ => false,
        }
    }
    fn pass(&self) -> u64 {
        self.0.inst_pass.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Nodes (classes and same-class instances) the validator's searches have looked at so far in this
/// process: a measure of the work its new dependencies cost, which grows about linearly with the
/// dependencies for any program (a new dependency that agrees with the graph's order costs none).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let before = locklab::lockdep::search_steps();
/// assert!(locklab::lockdep::search_steps() >= before);
/// ```
pub fn search_steps() -> u64 {
    graph().map_or(0, |g| g.steps.load(Ordering::Relaxed))
}

/// A path of existing dependencies, in order from the new lock back to the held one.
struct Path {
    steps: [Step; 32],
    n: usize,
    /// Steps left out of a longer path.
    more: usize,
}

impl Path {
    /// The path `start ~> end` from the search's parent links, in order (the last 32 steps of
    /// a longer one). In place, one array of 4-byte steps: this runs on the stack of whatever took
    /// the lock, a signal handler's small alternate stack included.
    fn fill(&mut self, g: &Graph, end: usize, start: usize) {
        let (mut n, mut total) = (0, 0);
        let mut s = end;
        while s != start {
            let p = g.parent[s].load(Ordering::Relaxed);
            if n < 32 {
                // The edge index (+1) and type, as `search` packed them in the low half.
                self.steps[n] = Step(p as u32);
                n += 1;
            }
            total += 1;
            s = (p >> 32) as usize;
            if total > MAX_CLASSES * 2 {
                break;
            }
        }
        self.steps[..n].reverse();
        self.n = n;
        self.more = total - n;
    }
}

/// Two instances of one class held together: record the order, report the opposite order.
fn same_class(g: &Graph, class: u32, h: &Held, obj: usize, site: usize) {
    if g.pairs_full.load(Ordering::Relaxed) {
        return;
    }
    let key = pair_key(h.obj, obj);
    if g.pair_keys.get(key).is_some() {
        return;
    }
    same_class_slow(g, class, h, obj, site, key);
}

fn pair_key(a: usize, b: usize) -> u64 {
    table::mix(a as u64 ^ table::mix(b as u64).rotate_left(17)) | 1
}

#[cold]
#[inline(never)]
fn same_class_slow(g: &Graph, class: u32, h: &Held, obj: usize, site: usize, key: u64) {
    if stale(h) {
        return;
    }
    if !g.lock() {
        return;
    }
    g.class(class)
        .flags
        .fetch_or(FLAG_NESTS_SELF, Ordering::Relaxed);
    if g.pair_keys.get(key).is_none() {
        // As for classes: an order that agrees with the instance graph's cannot close a cycle.
        let ordered = g.inst_order_ok.load(Ordering::Relaxed)
            && match order::add(&InstDag(g), &g.order, h.obj as u64, obj as u64, &g.steps) {
                order::Added::Ordered => true,
                order::Added::Inside | order::Added::Cycle => false,
                order::Added::TooBig => {
                    g.inst_order_ok.store(false, Ordering::Relaxed);
                    false
                }
            };
        let mut path = [0u32; 32];
        if !ordered
            && let Some(n) = instance_search(g, obj, h.obj, &mut path)
            && g.first_report(key ^ 0x5ca1e)
        {
            report::same_class(g, class, h, obj, site, &path[..n]);
        }
        let r = g.pair_keys.get_or_insert(key, || {
            let i = g.n_pairs.fetch_add(1, Ordering::Relaxed) + 1;
            if i as usize > MAX_PAIRS {
                g.pairs_full.store(true, Ordering::Relaxed);
                return u64::MAX;
            }
            let p = &g.pairs[i as usize - 1];
            p.a.store(h.obj as u64, Ordering::Relaxed);
            p.b.store(obj as u64, Ordering::Relaxed);
            p.held_site.store(h.site as u64, Ordering::Relaxed);
            p.acq_site.store(site as u64, Ordering::Relaxed);
            p.tid.store(report::tid(), Ordering::Relaxed);
            // Link it first in the list of pairs to `obj` (which also marks `obj` as in a pair,
            // for `forget_pairs`), and in the list of pairs from `h.obj`.
            match g
                .inst_heads
                .get_or_insert(obj as u64 | 1 << 62, || u64::from(i))
            {
                Some((_, true)) => {}
                Some((old, false)) => {
                    p.next_in.store(old as u32, Ordering::Relaxed);
                    g.inst_heads.set(obj as u64 | 1 << 62, u64::from(i));
                }
                None => say_full("instance"),
            }
            let head = g.inst_heads.get(h.obj as u64 | 1 << 63).unwrap_or(u64::MAX);
            p.next.store(
                if head == u64::MAX { 0 } else { head as u32 },
                Ordering::Relaxed,
            );
            match g
                .inst_heads
                .get_or_insert(h.obj as u64 | 1 << 63, || u64::from(i))
            {
                Some((_, true)) => {}
                Some(_) => {
                    g.inst_heads.set(h.obj as u64 | 1 << 63, u64::from(i));
                }
                None => say_full("instance"),
            }
            u64::from(i)
        });
        if matches!(r, None | Some((u64::MAX, _))) {
            say_full("instance-pair");
        }
    }
    g.unlock();
}

/// Searches the same-class instance orders for a path `from ~> to` (graph lock held): the new order
/// `to -> from` then closes a cycle. Writes the path's pair indices (+1) into `out`; the count.
fn instance_search(g: &Graph, from: usize, to: usize, out: &mut [u32; 32]) -> Option<usize> {
    // Queue entries: (instance, index of the entry it was reached from + 1, pair used).
    let q = g.inst_queue;
    let dag = InstDag(g);
    let pass = order::Dag::pass(&dag);
    order::Dag::visit(&dag, from as u64, pass);
    q[0].store(from as u64, Ordering::Relaxed);
    g.inst_parent[0].store(0, Ordering::Relaxed);
    let (mut head, mut tail) = (0usize, 1usize);
    while head < tail {
        let x = q[head].load(Ordering::Relaxed);
        g.steps.fetch_add(1, Ordering::Relaxed);
        let mut pi = match g.inst_heads.get(x | 1 << 63) {
            Some(v) if v != u64::MAX => v as u32,
            _ => 0,
        };
        while pi != 0 {
            let p = &g.pairs[pi as usize - 1];
            let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
            if a == x && b != 0 {
                if b == to as u64 {
                    // Walk back to the start.
                    let mut n = 0;
                    let mut rev = [0u32; 32];
                    rev[0] = pi;
                    n += 1;
                    let mut e = head;
                    while e != 0 && n < 32 {
                        let par = g.inst_parent[e].load(Ordering::Relaxed);
                        rev[n] = par as u32;
                        n += 1;
                        e = (par >> 32) as usize - 1;
                    }
                    for i in 0..n {
                        out[i] = rev[n - 1 - i];
                    }
                    return Some(n);
                }
                if tail < q.len() && order::Dag::visit(&dag, b, pass) {
                    q[tail].store(b, Ordering::Relaxed);
                    g.inst_parent[tail]
                        .store((head as u64 + 1) << 32 | u64::from(pi), Ordering::Relaxed);
                    tail += 1;
                }
            }
            pi = p.next.load(Ordering::Relaxed);
        }
        head += 1;
    }
    None
}

/// Forgets the instance pairs of a destroyed object (a later lock at its address is another lock).
fn forget_pairs(g: &Graph, obj: usize) {
    let n = (g.n_pairs.load(Ordering::Relaxed) as usize).min(MAX_PAIRS);
    // Only an object that is in some pair costs a scan (most destroyed locks never nested).
    if n == 0
        || (g.inst_heads.get(obj as u64 | 1 << 63).is_none()
            && g.inst_heads.get(obj as u64 | 1 << 62).is_none())
    {
        return;
    }
    if !g.lock() {
        return;
    }
    // Its own pairs only: the list of those from it and the list of those to it.
    for (key, to) in [(obj as u64 | 1 << 63, false), (obj as u64 | 1 << 62, true)] {
        let mut pi = match g.inst_heads.get(key) {
            Some(v) if v != u64::MAX => v as u32,
            _ => 0,
        };
        while pi != 0 {
            let p = &g.pairs[pi as usize - 1];
            let end = if to { &p.b } else { &p.a };
            if end.load(Ordering::Relaxed) == obj as u64 {
                // A pair of addresses never used again as such (the key is left: tables only grow).
                p.a.store(0, Ordering::Relaxed);
                p.b.store(0, Ordering::Relaxed);
            }
            pi = if to { &p.next_in } else { &p.next }.load(Ordering::Relaxed);
        }
    }
    g.unlock();
}

/// Records that this thread releases the lock at `obj` at `site`. Returns `false` if the thread
/// did not hold it (the caller decides whether that is misuse: [`unlock_not_held`]).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert!(!locklab::lockdep::release(0x9999, locklab::lockdep::Site::UNKNOWN), "not held by this thread");
/// ```
#[inline]
pub fn release(obj: usize, site: Site) -> bool {
    let _ = site;
    if !enabled() {
        return true;
    }
    with_thread(|t, _| pop(t, obj, true)).unwrap_or(true)
}

/// As [`release`], for a lock whose kind only lets its owner unlock it (a non-owner's unlock fails,
/// so the owner's record must stay): `false` if this thread does not hold it.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert!(!locklab::lockdep::release_owned(0x9998));
/// ```
pub fn release_owned(obj: usize) -> bool {
    if !enabled() {
        return true;
    }
    with_thread(|t, _| pop(t, obj, false)).unwrap_or(true)
}

#[inline]
fn pop(t: &mut ThreadState, obj: usize, elsewhere: bool) -> bool {
    // The usual case: the lock on top, taken once.
    if t.n > 0 && t.held[t.n - 1].obj == obj && t.held[t.n - 1].depth == 1 {
        t.n -= 1;
        return true;
    }
    if let Some(i) = (0..t.n).rev().find(|&i| t.held[i].obj == obj) {
        if t.held[i].depth > 1 {
            t.held[i].depth -= 1;
        } else {
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
        }
        true
    } else if t.lost > 0 {
        t.lost -= 1;
        true
    } else {
        if elsewhere {
            released_elsewhere(obj);
        }
        false
    }
}

/// Undoes an [`acquire`] that did not take the lock (a timed-out or refused acquisition).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, Flags, Mode, Site};
/// static C: lockdep::LockClass = lockdep::LockClass::new("forget-doc");
/// lockdep::acquire(0x20, C.id(), Mode::Write, Site::caller(), Flags::NONE);
/// lockdep::forget(0x20);
/// assert!(!lockdep::holds(0x20));
/// ```
pub fn forget(obj: usize) {
    if !enabled() {
        return;
    }
    let _ = with_thread(|t, _| {
        if let Some(i) = (0..t.n).rev().find(|&i| t.held[i].obj == obj) {
            if t.held[i].depth > 1 {
                t.held[i].depth -= 1;
            } else {
                t.held.copy_within(i + 1..t.n, i);
                t.n -= 1;
            }
        } else if t.lost > 0 {
            t.lost -= 1;
        }
    });
}

/// Whether this thread holds the lock at `obj` (as far as the validator knows).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert!(!locklab::lockdep::holds(0x30));
/// ```
pub fn holds(obj: usize) -> bool {
    with_thread(|t, _| t.held[..t.n].iter().any(|h| h.obj == obj)).unwrap_or(false)
}

/// How many locks this thread holds (as far as the validator knows).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// assert_eq!(locklab::lockdep::held_count(), 0);
/// ```
pub fn held_count() -> usize {
    with_thread(|t, _| t.n + t.lost).unwrap_or(0)
}

/// Reports an unlock, at `site`, of the lock at `obj` of class `class` that this thread does not
/// hold, where its kind forbids that (an error-checking or recursive mutex: glibc answers `EPERM`).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// // Misuse is reported, and the program goes on (the default action).
/// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("unlock-doc");
/// locklab::lockdep::unlock_not_held(0x40, C.id(), locklab::lockdep::Site::caller());
/// ```
pub fn unlock_not_held(obj: usize, class: u32, site: Site) {
    unlock_misuse(
        obj,
        class,
        site,
        "unlock of a lock this thread does not hold",
    );
}

/// Reports an unlock, at `site`, of the lock at `obj` of class `class` that no thread holds (a
/// double unlock): misuse for every kind, even one any thread may unlock (kind `unlock-not-held`).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("unlock-free-doc");
/// locklab::lockdep::unlock_free(0x41, C.id(), locklab::lockdep::Site::caller());
/// ```
pub fn unlock_free(obj: usize, class: u32, site: Site) {
    unlock_misuse(obj, class, site, "unlock of a lock no thread holds");
}

fn unlock_misuse(obj: usize, class: u32, site: Site, title: &str) {
    let site = site.0;
    if class == 0 || !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|_, _| {
        if g.first_report(table::mix(site as u64 ^ 0x0dd) ^ u64::from(class)) {
            report::misuse(g, ReportKind::UnlockNotHeld, title, class, obj, site, None);
        }
    });
}

/// Checks the destruction, at `site`, of the lock at `obj`: reported if this thread holds it.
/// Call it before the destruction; if the destruction succeeds, call [`destroy_done`].
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::destroyed(0x50, locklab::lockdep::Site::UNKNOWN);
/// locklab::lockdep::destroy_done(0x50);
/// ```
pub fn destroyed(obj: usize, site: Site) {
    let site = site.0;
    if !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|t, _| {
        if let Some(h) = t.held[..t.n].iter().find(|h| h.obj == obj).copied()
            && g.first_report(table::mix(site as u64 ^ 0xde5) ^ u64::from(h.class))
        {
            report::misuse(
                g,
                ReportKind::DestroyHeld,
                "destruction of a lock this thread holds",
                h.class,
                obj,
                site,
                Some(&h),
            );
        }
    });
}

/// A lock at `obj` was destroyed: this thread no longer holds it, and the object is forgotten (its
/// recorded class and its instance orders; a later lock at that address is another lock).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::destroy_done(0x51);
/// ```
pub fn destroy_done(obj: usize) {
    if !enabled() {
        return;
    }
    let _ = with_thread(|t, _| {
        if let Some(i) = t.held[..t.n].iter().position(|x| x.obj == obj) {
            t.held.copy_within(i + 1..t.n, i);
            t.n -= 1;
        }
    });
    forget_object(obj);
}

/// Checks a condition-variable wait at `site` on the condvar at `cond`, releasing the mutex at
/// `mutex`: a warning (once per pair of classes) if this thread holds any other lock meanwhile.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::cond_wait(0x60, 0x61, locklab::lockdep::Site::UNKNOWN);
/// ```
pub fn cond_wait(cond: usize, mutex: usize, site: Site) {
    let site = site.0;
    if !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|t, _| {
        drop_stale(t);
        let mclass = t.held[..t.n]
            .iter()
            .find(|h| h.obj == mutex)
            .map_or(0, |h| h.class);
        if let Some(other) = t.held[..t.n].iter().rev().find(|h| h.obj != mutex).copied() {
            let key = u64::from(other.class) << 32 | u64::from(mclass);
            if g.first_report(table::mix(key ^ 0xc0d)) {
                report::cond_wait(g, &other, mclass, cond, site);
            }
        }
    });
}

/// Checks, at a thread's exit, that it holds no lock (reported once per class and site).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::thread_exit();
/// ```
pub fn thread_exit() {
    if !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let _ = with_thread(|t, _| {
        drop_stale(t);
        if let Some(h) = t.held[..t.n].last().copied()
            && g.first_report(table::mix(h.site as u64 ^ 0xe417) ^ u64::from(h.class))
        {
            report::misuse(
                g,
                ReportKind::ExitHolding,
                "thread exiting with locks held",
                h.class,
                h.obj,
                h.site,
                Some(&h),
            );
        }
        t.n = 0;
        t.lost = 0;
        t.exit_armed = false;
    });
}

// --- signal handlers -----------------------------------------------------------------------------------

/// Runs `f` as the handler of signal `sig`: the locks it takes are checked against the places the
/// same classes are held with `sig` unblocked (a lock taken in a handler and held where the handler
/// can interrupt its holder deadlocks). The preload library wraps a program's handlers in this.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::signal_handler(10, || {});
/// ```
pub fn signal_handler<R>(sig: i32, f: impl FnOnce() -> R) -> R {
    let saved = signal_enter(sig);
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            signal_leave(self.0);
        }
    }
    let _r = Restore(saved);
    f()
}

/// Enters a signal handler for `sig` (the preload library's wrapper, which cannot use a closure
/// across `siglongjmp`): returns the state to give back to [`signal_leave`]. A handler left by
/// `siglongjmp` is noticed at the next acquisition (its stack frame is gone).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let s = locklab::lockdep::signal_enter(12);
/// locklab::lockdep::signal_leave(s);
/// ```
pub fn signal_enter(sig: i32) -> u64 {
    let marker = 0u8;
    let sp = &marker as *const u8 as usize;
    if (1..=64).contains(&sig) && WATCH.load(Ordering::Relaxed) & 1 << (sig - 1) == 0 {
        watch_signal(sig);
    }
    THREAD
        .try_with(|x| {
            // The handler runs with another mask, and may leave by `siglongjmp` with it.
            x.mask_known.store(false, Ordering::Relaxed);
            let depth = x.sig.load(Ordering::Relaxed);
            let saved = u64::from(depth) << 32 | x.sig_no.load(Ordering::Relaxed) as u32 as u64;
            x.sig_no.store(sig, Ordering::Relaxed);
            x.sig_sp.store(sp, Ordering::Relaxed);
            x.sig.store(depth + 1, Ordering::Relaxed);
            // The handler's locks come after these stores (same thread: a compiler fence).
            compiler_fence(Ordering::SeqCst);
            saved
        })
        .unwrap_or(u64::MAX)
}

/// Leaves a handler entered with [`signal_enter`].
pub fn signal_leave(saved: u64) {
    if saved == u64::MAX {
        return;
    }
    let _ = THREAD.try_with(|x| {
        // The handler's locks come before these stores (as in `signal_enter`).
        compiler_fence(Ordering::SeqCst);
        let depth = (saved >> 32) as u32;
        x.mask_known.store(false, Ordering::Relaxed);
        x.sig.store(depth, Ordering::Relaxed);
        x.sig_no.store(saved as u32 as i32, Ordering::Relaxed);
        if depth == 0 {
            x.sig_sp.store(0, Ordering::Relaxed);
        }
    });
}

fn in_signal(g: &Graph, class: u32, x: &Tls, site: usize) {
    // A handler left by siglongjmp: the stack is back above its frame.
    let marker = 0u8;
    if (&marker as *const u8 as usize) > x.sig_sp.load(Ordering::Relaxed) {
        return;
    }
    let sig = x.sig_no.load(Ordering::Relaxed);
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    let c = g.class(class);
    if c.sig_in.load(Ordering::Relaxed) & bit == 0 {
        c.sig_in_site.store(site as u64, Ordering::Relaxed);
        // SeqCst, as the loads below and in `held_outside_signal`: of a handler's hold and an
        // unblocked hold elsewhere racing, at least one sees the other's bit (and the site written
        // before it) and reports.
        c.sig_in.fetch_or(bit, Ordering::SeqCst);
    }
    if c.sig_out.load(Ordering::SeqCst) & bit != 0 {
        report_signal(g, class, sig);
    }
}

/// Signals with a program handler behind the validator (bit n-1 for signal n): what a hold's
/// blocked mask is read for.
static WATCH: AtomicU64 = AtomicU64::new(0);

/// The blocked masks come from a caller that calls [`signal_mask_changed`] whenever a thread's
/// mask changes (the preload library): each thread's last reading is kept until then.
static MASK_TRACKED: AtomicBool = AtomicBool::new(false);

/// Watches signal `sig`: a handler of it is installed (the preload library calls this before
/// installing one; [`signal_enter`] does it for any other). From now on the holds of each class are
/// checked for `sig` being unblocked until one is (each thread's blocked mask is read, or its
/// last reading reused, see [`track_signal_mask`]), so a class held with `sig` blocked at first and
/// unblocked later is seen, and one held with it always blocked is never reported.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::watch_signal(10);
/// ```
pub fn watch_signal(sig: i32) {
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    // SeqCst: a hold that reads the new watch set (SeqCst in `held_outside_signal`) either comes
    // after the classes' flags are cleared below, or its own flag is cleared by them.
    if WATCH.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
        return;
    }
    let Some(g) = graph() else { return };
    let n = (g.n_classes.load(Ordering::Relaxed) as usize + 1).min(MAX_CLASSES);
    let mut cleared = false;
    for id in 1..n {
        let c = g.class(id as u32);
        if c.flags.load(Ordering::Relaxed) & FLAG_SIG_OUT != 0
            && c.sig_out.load(Ordering::Relaxed) & bit == 0
        {
            c.flags.fetch_and(!FLAG_SIG_OUT, Ordering::Relaxed);
            cleared = true;
        }
    }
    if cleared {
        // Release pairs with the Acquire in `acquire_object`: the threads' caches of the class
        // facts start over.
        OBJ_EPOCH.fetch_add(1, Ordering::Release);
    }
}

/// Says that the caller calls [`signal_mask_changed`] on every change of a thread's blocked signals
/// (the preload library, which wraps `pthread_sigmask` and `sigprocmask`): each thread then reads
/// its mask (a system call) once per change rather than at every hold that needs it.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::track_signal_mask();
/// ```
pub fn track_signal_mask() {
    MASK_TRACKED.store(true, Ordering::Relaxed);
}

/// The calling thread's blocked signals changed (or may have): its kept reading is dropped.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::signal_mask_changed();
/// ```
pub fn signal_mask_changed() {
    let _ = THREAD.try_with(|x| x.mask_known.store(false, Ordering::Relaxed));
}

/// The calling thread's blocked signals: its kept reading if valid, else read (and kept).
fn thread_blocked(x: &Tls) -> u64 {
    if MASK_TRACKED.load(Ordering::Relaxed) && x.mask_known.load(Ordering::Relaxed) {
        return x.mask.load(Ordering::Relaxed);
    }
    let m = blocked_signals();
    x.mask.store(m, Ordering::Relaxed);
    // A handler that interrupts from here on marks it unknown after this (same thread).
    compiler_fence(Ordering::SeqCst);
    x.mask_known.store(true, Ordering::Relaxed);
    m
}

/// A hold of `class` outside any handler, while the class may still have something to learn:
/// the signals unblocked here are added to the class's, and a signal newly seen unblocked whose
/// handler took the class is reported.
#[cold]
#[inline(never)]
fn held_outside_signal(g: &Graph, class: u32, site: usize, x: &Tls) {
    let c = g.class(class);
    // SeqCst: see `watch_signal`.
    let watch = WATCH.load(Ordering::SeqCst);
    // Only signals with a handler count: a hold before the handler exists cannot be interrupted
    // by it.
    let unblocked = !thread_blocked(x) & watch;
    let have = c.sig_out.load(Ordering::SeqCst);
    let new = unblocked & !have;
    if new != 0 {
        if have == 0 || c.sig_in.load(Ordering::SeqCst) & new != 0 {
            // The site a report names (written before the bits: see `in_signal`).
            c.sig_out_site.store(site as u64, Ordering::Relaxed);
        }
        // SeqCst: see `in_signal`.
        c.sig_out.fetch_or(new, Ordering::SeqCst);
    }
    if (have | unblocked) & watch == watch {
        // Every watched signal seen unblocked: later holds have nothing to add (until another
        // signal is watched).
        c.flags.fetch_or(FLAG_SIG_OUT, Ordering::Relaxed);
    }
    // SeqCst: see `in_signal`.
    let inside = c.sig_in.load(Ordering::SeqCst) & new;
    if inside != 0 {
        report_signal(g, class, inside.trailing_zeros() as i32 + 1);
    }
}

#[cold]
#[inline(never)]
fn report_signal(g: &Graph, class: u32, sig: i32) {
    let c = g.class(class);
    // AcqRel: one reporter wins (as `report_rr`).
    if c.flags.fetch_or(FLAG_SIG_REPORTED, Ordering::AcqRel) & FLAG_SIG_REPORTED == 0 {
        report::signal(g, class, sig);
    }
}

/// The calling thread's blocked signals (bit n-1 for signal n); 0 where unknown.
fn blocked_signals() -> u64 {
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: an out-pointer to a sigset_t; querying (a null new set) changes nothing.
        let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set) } != 0 {
            return 0;
        }
        let mut m = 0u64;
        for s in 1..=64 {
            // SAFETY: a valid set; out-of-range signals answer -1.
            if unsafe { libc::sigismember(&set, s) } == 1 {
                m |= 1 << (s - 1);
            }
        }
        m
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        0
    }
}

// --- fork ------------------------------------------------------------------------------------------------
//
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
static FORK_HOLDS_LOCK: AtomicBool = AtomicBool::new(false);
/// The prepare handler set the forking thread's `busy` flag.
static FORK_SET_BUSY: AtomicBool = AtomicBool::new(false);
/// [`install_fork_handlers`]' registration (`sys::once_per_process`).
#[cfg(all(unix, not(miri), not(loom)))]
static FORK_REGISTRATION: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// Registers the validator's fork handlers, once per process (done when its tables are first made;
/// the preload library calls it from its constructor). `pthread_atfork` may allocate.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: no pthread_atfork
/// locklab::lockdep::install_fork_handlers();
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
fn fork_release(g: &Graph) {
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
/// locklab::lockdep::after_fork_child();
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

// Not under Miri: it models every byte of the validator's tables (the table's own tests run there).
#[cfg(all(test, not(miri)))]
mod tests;
