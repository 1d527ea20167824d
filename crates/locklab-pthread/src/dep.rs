//! Lockdep for any program (`LOCKLAB_LOCKDEP=1|abort`, or `locklab run --lockdep`): the library's
//! validator ([`locklab::lockdep`]) called from the pthread and C11 entry points, whichever lock
//! choice runs behind them (glibc's included: `LOCKLAB_MUTEX=glibc LOCKLAB_LOCKDEP=1` checks a
//! program as it runs today).
//!
//! # Classes
//! An object's class is its `*_init` call site, or for an object that was never initialised (a
//! static initializer, zeroed memory, C++'s `std::mutex`) the site of its first lock. The class of
//! each object is kept in the validator's object table, keyed by address (glibc's objects have no
//! spare bytes for it under every choice); `*_destroy` forgets it, so a later object at that
//! address gets its own. An object freed without `*_destroy` (C++'s `std::mutex` never calls it)
//! leaves its class to the next lock placed at its address, which is usually an object of the same
//! kind made by the same code.
//!
//! # Modes
//! Mutexes and spinlocks are taken for writing; a recursive mutex may be taken again by its holder,
//! an error-checking mutex's relock returns `EDEADLK` (neither is reported); a non-owner's unlock of
//! either is reported (glibc answers `EPERM`), as is a non-owner's unlock of a robust mutex. A normal
//! mutex may be unlocked by another thread (glibc allows it and programs rely on it): not reported,
//! and the locking thread's record of it is dropped; but an unlock of a normal mutex that no thread
//! holds (its lock word is free: a double unlock) is reported. A lock call that returns `EOWNERDEAD`
//! (a robust mutex whose owner died) took the mutex: the caller holds it until its unlock.
//! Readers of an rwlock of kind `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP` wait behind queued
//! writers (non-recursive readers); every other kind's readers are recursive.
//!
//! # Signals
//! With lockdep on, `sigaction`, `signal` and the like install the program's handlers behind a
//! wrapper that tells the validator a handler of that signal is running (everything else as the
//! program asked: flags, mask, glibc's own `signal` semantics; queries return the program's own
//! handler); a lock taken in a handler is checked against every hold of its class with that signal
//! unblocked (each hold's mask counts, not only the first's; a thread's mask is read once per
//! change, the mask calls being wrapped too).
//!
//! # Output
//! Each report is printed on standard error when found. With `LOCKLAB_LOCKDEP_OUT=PATH` (`%p`: the
//! process id), every report of the process is also written there as a JSON array at exit and at
//! `_exit`, before an `exec`, and under `abort` before the abort (never by a `vfork` child, which
//! shares its parent's memory). The file is made empty when the process starts (and in a `fork`
//! child), so a process that ended without writing it (killed by a signal) leaves an empty file:
//! not a clean run.

use crate::config;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use libc::c_int;
use locklab::lockdep::{self as ld, Flags, Kind, Mode, Origin, Site};

static ON: AtomicBool = AtomicBool::new(false);

/// Whether the validator is on (one Relaxed load).
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The thread-exit key (its destructor checks for locks still held), -1 before it exists.
static EXIT_KEY: AtomicI32 = AtomicI32::new(-1);

const OUT_MAX: usize = 4095;
struct OutPath(core::cell::UnsafeCell<[u8; OUT_MAX + 1]>);
// SAFETY: written once in `init` before ON is published, read after.
unsafe impl Sync for OutPath {}
static OUT: OutPath = OutPath(core::cell::UnsafeCell::new([0; OUT_MAX + 1]));
static OUT_LEN: AtomicUsize = AtomicUsize::new(0);

/// Reads `LOCKLAB_LOCKDEP` and `LOCKLAB_LOCKDEP_OUT` (the constructor calls it); turns the
/// validator on if asked.
pub(crate) fn init() {
    let mut buf = [0u8; 32];
    let action = match config::lookup(c"LOCKLAB_LOCKDEP", &mut buf) {
        None => return,
        Some(v) => match ld::parse_action(v) {
            Some(a) => a,
            None => {
                crate::sys::write_stderr(
                    b"liblocklab_pthread: unknown LOCKLAB_LOCKDEP (valid: 0|off|1|report|abort); lockdep is off\n",
                );
                return;
            }
        },
    };
    if action == ld::Action::Off {
        return;
    }
    // SAFETY: written only here, before ON is set (the constructor runs once).
    let out = unsafe { &mut *OUT.0.get() };
    if let Some(p) = config::lookup(c"LOCKLAB_LOCKDEP_OUT", &mut out[..OUT_MAX]) {
        OUT_LEN.store(p.len(), Ordering::Relaxed);
    }
    ld::set_mode(action);
    ld::set_address_formatter(name_site);
    ld::set_abort_hook(write_before_abort);
    // `signals` wraps the mask calls: each thread's mask is read once per change.
    ld::track_signal_mask();
    // A report names sites through `dladdr`, whose first call makes glibc bind a symbol lazily
    // (the dynamic linker's resolver saves the vector registers: about 3 KiB of stack with
    // AVX-512), and reads the program's path once: done here, so that a report composed in a
    // signal handler on a small alternate stack needs neither.
    // SAFETY: getauxval reads the auxiliary vector.
    let _ = crate::stat::symbolise(unsafe { libc::getauxval(libc::AT_ENTRY) } as usize);
    make_path();
    mark_started();
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and destructor; the constructor runs while the program has few
    // keys, so `pthread_setspecific` on this one never allocates.
    if unsafe { crate::real::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
        EXIT_KEY.store(key as i32, Ordering::Relaxed);
        ld::set_exit_hook(arm_exit);
    }
    // Release: the configuration above is written before the entry points see lockdep on.
    ON.store(true, Ordering::Release);
}

fn arm_exit() {
    let k = EXIT_KEY.load(Ordering::Relaxed);
    if k >= 0 {
        // SAFETY: our key; a non-null value makes its destructor run at thread exit.
        unsafe {
            libc::pthread_setspecific(
                k as libc::pthread_key_t,
                core::ptr::dangling::<libc::c_void>(),
            )
        };
    }
}

/// Gives the thread-exit key back to a program that ran out of keys (the exit check is then off):
/// `true` if it was freed.
pub(crate) fn give_up_key() -> bool {
    let k = EXIT_KEY.swap(-1, Ordering::Relaxed);
    if k < 0 {
        return false;
    }
    // SAFETY: our key, deleted once (the swap above).
    unsafe { libc::pthread_key_delete(k as libc::pthread_key_t) == 0 }
}

unsafe extern "C" fn thread_exit(_: *mut libc::c_void) {
    ld::thread_exit();
}

/// Names a code address as the lock statistics do: `function+0xoff (object)`.
fn name_site(a: usize, w: &mut dyn core::fmt::Write) -> core::fmt::Result {
    match crate::stat::symbolise(a) {
        Some((file, base, sym)) => {
            let file = file.rsplit(|&c| c == b'/').next().unwrap_or(file);
            match sym {
                Some((name, at, _)) => {
                    write!(w, "{}+{:#x} ({})", show(name), a - at, show(file))
                }
                None => write!(w, "{}+{:#x}", show(file), a - base),
            }
        }
        None => write!(w, "{a:#x}"),
    }
}

fn show(b: &[u8]) -> &str {
    core::str::from_utf8(b).unwrap_or("?")
}

/// The class of `obj`: recorded at init or first lock, else made now from this lock's site.
#[inline]
fn class(obj: usize, kind: Kind, site: usize) -> u32 {
    if let Some(c) = ld::object_class(obj) {
        return c;
    }
    let c = ld::class_for(site, kind, Origin::FirstLocked, Site::address(site), 0);
    ld::set_object_class(obj, c);
    c
}

/// An object initialised at `site`: a class of its own site (the object's old record forgotten).
pub(crate) fn created(obj: usize, kind: Kind, site: usize) {
    ld::forget_object(obj);
    if site != 0 {
        let c = ld::class_for(site, kind, Origin::Created, Site::address(site), 0);
        ld::set_object_class(obj, c);
    }
}

/// Before an object's destruction at `site` (a held one is reported).
pub(crate) fn destroying(obj: usize, site: usize) {
    ld::destroyed(obj, Site::address(site));
}

/// After a destruction that returned `r`: a destroyed object is forgotten.
pub(crate) fn destroyed(obj: usize, r: c_int) -> c_int {
    if r == 0 {
        ld::destroy_done(obj);
    }
    r
}

/// glibc's robust bit of a mutex kind.
const ROBUST: i32 = 16;

/// Whether only the owner may unlock a mutex of `kind` (glibc answers `EPERM` to another thread):
/// the recursive and error-checking kinds, and every robust one.
fn owner_checked(kind: i32) -> bool {
    kind & 3 == 1 || kind & 3 == 2 || kind & ROBUST != 0
}

/// `kind & 3` of a mutex: 1 recursive, 2 error-checking.
fn mutex_flags(kind: i32) -> Flags {
    match kind & 3 {
        1 => Flags::RECURSIVE,
        2 => Flags::RELOCK_ERRORS,
        // A robust normal mutex: only its owner unlocks it.
        _ if kind & ROBUST != 0 => Flags::NONE,
        // Normal and adaptive: glibc lets any thread unlock them.
        _ => Flags::OWNERLESS,
    }
}

/// Before a mutex lock (or after a trylock that succeeded, `tried`).
pub(crate) fn mutex_lock(m: *mut libc::pthread_mutex_t, site: usize, tried: bool) {
    let kind = crate::mutex::M(m).kind();
    let mut f = mutex_flags(kind);
    if tried {
        f = f.with(Flags::TRY);
    }
    ld::acquire_object(m as usize, Kind::Mutex, Mode::Write, Site::address(site), f);
}

/// Before a timed mutex lock: a relock of a held mutex times out, so it is not reported.
pub(crate) fn mutex_timed(m: *mut libc::pthread_mutex_t, site: usize, _: bool) {
    let f = mutex_flags(crate::mutex::M(m).kind()).with(Flags::TIMED);
    ld::acquire_object(m as usize, Kind::Mutex, Mode::Write, Site::address(site), f);
}

/// Before a mutex unlock.
pub(crate) fn mutex_unlock(m: *mut libc::pthread_mutex_t, site: usize) {
    let kind = crate::mutex::M(m).kind();
    if owner_checked(kind) {
        // An owner-checked kind: a non-owner's unlock fails, the owner still holds it.
        if !ld::release_owned(m as usize) {
            ld::unlock_not_held(
                m as usize,
                class(m as usize, Kind::Mutex, site),
                Site::address(site),
            );
        }
    } else if !ld::release(m as usize, Site::address(site))
        && !crate::mutex::normal_is_held(crate::mutex::M(m))
    {
        // Another thread's unlock of a held normal mutex is legal (a binary semaphore); an unlock
        // of a free one never is (a double unlock: the next one frees a lock someone else holds).
        ld::unlock_free(
            m as usize,
            class(m as usize, Kind::Mutex, site),
            Site::address(site),
        );
    }
}

/// How an rwlock is taken: readers of a writer-preferring kind wait behind queued writers.
fn rw_mode(l: *mut libc::pthread_rwlock_t, write: bool) -> Mode {
    if write {
        Mode::Write
    } else if crate::rwlock::L(l).prefers_writers() {
        Mode::Read
    } else {
        Mode::RecursiveRead
    }
}

/// Before an rwlock lock (or after a trylock that succeeded).
pub(crate) fn rw_lock(l: *mut libc::pthread_rwlock_t, site: usize, write: bool, tried: bool) {
    let mut f = Flags::RELOCK_ERRORS;
    if tried {
        f = f.with(Flags::TRY);
    }
    ld::acquire_object(
        l as usize,
        Kind::RwLock,
        rw_mode(l, write),
        Site::address(site),
        f,
    );
}

/// Before a timed rwlock lock.
pub(crate) fn rw_timed(l: *mut libc::pthread_rwlock_t, site: usize, write: bool) {
    let f = Flags::RELOCK_ERRORS.with(Flags::TIMED);
    ld::acquire_object(
        l as usize,
        Kind::RwLock,
        rw_mode(l, write),
        Site::address(site),
        f,
    );
}

/// Before a spinlock lock (or after a trylock that succeeded).
pub(crate) fn spin_lock(s: *mut libc::pthread_spinlock_t, site: usize, tried: bool) {
    ld::acquire_object(
        s as usize,
        Kind::SpinLock,
        Mode::Write,
        Site::address(site),
        if tried { Flags::TRY } else { Flags::NONE },
    );
}

/// Before an rwlock or spinlock unlock.
pub(crate) fn unlock(obj: usize, site: usize) {
    ld::release(obj, Site::address(site));
}

/// Whether a lock call that returned `r` took the lock: 0, or `EOWNERDEAD` (a robust mutex whose
/// owner died: the caller holds it, to make it consistent and unlock; `ENOTRECOVERABLE` is not a
/// hold).
#[inline]
pub(crate) fn took(r: c_int) -> bool {
    r == 0 || r == libc::EOWNERDEAD
}

/// An acquisition announced with a lock call that returned `r`: undone unless it took the lock.
#[inline]
pub(crate) fn settle(obj: usize, r: c_int) -> c_int {
    if !took(r) {
        ld::forget(obj);
    }
    r
}

/// Before a condvar wait.
pub(crate) fn cond_wait(c: usize, m: usize, site: usize) {
    ld::cond_wait(c, m, Site::address(site));
}

static FORKS: AtomicU32 = AtomicU32::new(0);

/// In the child of `fork`.
pub(crate) fn after_fork_child() {
    if on() {
        FORKS.fetch_add(1, Ordering::Relaxed);
        ld::after_fork_child();
        make_path();
        mark_started();
    }
}

/// At exit and before `exec`: the reports as JSON, if asked.
pub(crate) fn write_out() {
    // SAFETY: no arguments.
    if !on() || unsafe { libc::getpid() } != PID.load(Ordering::Relaxed) {
        // Off, or a `vfork` child (it shares the parent's memory; the parent writes its own).
        return;
    }
    let Some(fd) = open_out() else { return };
    ld::write_json_fd(fd);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
}

/// Under `LOCKLAB_LOCKDEP=abort`, after a report and before the abort: the reports so far (the
/// validator's writer, its lock held).
fn write_before_abort(write: &dyn Fn(c_int)) {
    let Some(fd) = open_out() else { return };
    write(fd);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
}

/// At the start of a process (the constructor, a `fork` child): the output file made empty, so a
/// process that ends without writing its reports (killed by a signal) leaves an empty file rather
/// than none, and whoever reads the files can tell it was not checked to the end.
fn mark_started() {
    if let Some(fd) = open_out() {
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
    }
}

/// The output file (`LOCKLAB_LOCKDEP_OUT` with `%p` replaced), opened for writing and truncated;
/// `None` if not asked, or (said on stderr) if it cannot be opened.
fn open_out() -> Option<c_int> {
    if OUT_LEN.load(Ordering::Relaxed) == 0 {
        return None;
    }
    // SAFETY: a NUL-terminated path, written by `make_path` while this process had one thread
    // (the constructor, a fork child) and only read since. A static rather than a stack buffer:
    // this also runs from a signal handler on a small alternate stack (a report under `abort`).
    let fd = unsafe {
        libc::open(
            (*PATH.0.get()).as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        crate::sys::write_stderr(b"liblocklab_pthread: cannot write LOCKLAB_LOCKDEP_OUT\n");
        return None;
    }
    Some(fd)
}

/// This process's output path: `LOCKLAB_LOCKDEP_OUT` with `%p` replaced, NUL-terminated.
struct Path(core::cell::UnsafeCell<[u8; OUT_MAX + 33]>);
// SAFETY: written by `make_path` only while the process has one thread, read after.
unsafe impl Sync for Path {}
static PATH: Path = Path(core::cell::UnsafeCell::new([0; OUT_MAX + 33]));

/// The process [`PATH`] was made for: another (a `vfork` child, which runs no fork handler) writes
/// nothing.
static PID: AtomicI32 = AtomicI32::new(0);

/// Fills [`PATH`] for this process (the constructor, and a fork child: one thread each time).
fn make_path() {
    PID.store(std::process::id() as i32, Ordering::Relaxed);
    let n = OUT_LEN.load(Ordering::Relaxed);
    if n == 0 {
        return;
    }
    // SAFETY: the template is written in `init` before this; the path only here, while the
    // process has one thread (see `PATH`).
    let (tmpl, path) = unsafe { (&(&*OUT.0.get())[..n], &mut *PATH.0.get()) };
    let mut k = 0;
    let mut i = 0;
    while i < tmpl.len() {
        if tmpl[i..].starts_with(b"%p") {
            crate::stat::put_u64(&mut path[..OUT_MAX], &mut k, u64::from(std::process::id()));
            i += 2;
        } else {
            crate::stat::put(&mut path[..OUT_MAX], &mut k, &tmpl[i..i + 1]);
            i += 1;
        }
    }
    path[k] = 0;
}
