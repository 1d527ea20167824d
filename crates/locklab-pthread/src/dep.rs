//! Lockdep for any program (`LOCKLAB_LOCKDEP=1|abort`, or `locklab run --lockdep`): the library's
//! validator ([`locklab::lockdep`]) called from the pthread and C11 entry points, whichever lock
//! choice runs behind them (glibc's included: `LOCKLAB_MUTEX=glibc LOCKLAB_LOCKDEP=1` checks a
//! program under glibc's own locks).
//!
//! # Classes
//! An object's class is its `*_init` call site together with the two frames that called it (so
//! that a lock wrapper's constructor, which makes every lock of a C++ program at one init site,
//! gives one class per place that constructs the wrapper). An object that was never initialised (a
//! static initializer, zeroed memory, C++'s `std::mutex`) has a class of its own, named by the site
//! of its first lock: orders between such objects are checked object by object, so locks of one
//! kind taken in a consistent order (by address, index, list position) are never a cycle, whichever
//! code touched each first. The class of each object is kept in the validator's object table, keyed
//! by address (glibc's objects have no spare bytes for it under every choice); `*_destroy` forgets
//! it, so a later object at that address gets its own. Memory reused without `*_destroy` (C++'s
//! `std::mutex` never calls it; a pool's `memset`) is found by a life mark that lockdep leaves in
//! spare bytes of mutexes and rwlocks (`check_life`): the object starts a new life, with the dead
//! one's class and orders forgotten.
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
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use libc::c_int;
use locklab::lockdep;
use locklab::lockdep::hooks::{self as ld, Flags, Kind, Mode, Site};

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
        Some(v) => match lockdep::parse_action(v) {
            Some(a) => a,
            None => {
                crate::sys::write_stderr(
                    b"liblocklab_pthread: unknown LOCKLAB_LOCKDEP (valid: 0|off|1|report|abort); lockdep is off\n",
                );
                return;
            }
        },
    };
    if action == lockdep::Action::Off {
        return;
    }
    // SAFETY: written only here, before ON is set (the constructor runs once).
    let out = unsafe { &mut *OUT.0.get() };
    if let Some(p) = config::lookup(c"LOCKLAB_LOCKDEP_OUT", &mut out[..OUT_MAX]) {
        OUT_LEN.store(p.len(), Ordering::Relaxed);
    }
    lockdep::set_mode(action);
    ld::set_address_formatter(name_site);
    // Here, where allocating is safe (the validator would otherwise register them when its tables
    // are first made, inside some lock call): a fork waits for a validator call in progress, so a
    // child never finds the validator's lock held by a thread it does not have.
    ld::install_fork_handlers();
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    LIFE_SECRET.store(
        (t.tv_nsec as u64) << 32 ^ t.tv_sec as u64 ^ u64::from(std::process::id()) << 17,
        Ordering::Relaxed,
    );
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

/// The class of `obj`: recorded at init or first lock, else one of its own named by this site.
#[inline]
fn class(obj: usize, kind: Kind, site: usize) -> u32 {
    ld::object_class_or_new(obj, kind, Site::address(site))
}

/// An object initialised at `site`: the class of its init call and that call's two callers (the
/// object's old record forgotten). See the module docs, "Classes".
pub(crate) fn created(obj: usize, kind: Kind, site: usize) {
    ld::forget_object(obj);
    if let Some(slot) = life_slot(obj, kind) {
        slot.store(life_mark(obj), Ordering::Relaxed);
    }
    if site != 0 {
        let [s0, s1, s2] = init_chain(site);
        let c = ld::class_for_chain(
            kind,
            [Site::address(s0), site_or_unknown(s1), site_or_unknown(s2)],
        );
        ld::set_object_class(obj, c);
    }
}

// --- lives: memory reused without destroy ---------------------------------------------------------

/// The process's secret in life marks (set by `init`; a new value per process start).
static LIFE_SECRET: AtomicU64 = AtomicU64::new(0x243f_6a88_85a3_08d3);

/// The mark lockdep leaves in the spare bytes of an object it knows (see `life_slot`): a value the
/// program never writes there, so that its absence means the memory was written since.
fn life_mark(obj: usize) -> u64 {
    let x = (obj as u64 ^ LIFE_SECRET.load(Ordering::Relaxed)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x ^ x >> 29) | 1
}

/// Where an object's life mark lives: 8 bytes that no lock choice and no glibc code uses for
/// this object. A mutex's bytes 32-39 (the second half of `__list`, which glibc uses only for
/// robust mutexes and the `mcs` choice for its queue), an rwlock's 40-47 (`__pad2`). None for a
/// spinlock (4 bytes), under `mcs`, and for robust, priority and process-shared objects (glibc's
/// own, or seen by other processes, each with its own mark).
fn life_slot(obj: usize, kind: Kind) -> Option<&'static AtomicU64> {
    let off = match kind {
        Kind::Mutex => {
            if config::mutex() == config::MutexAlgo::Mcs
                || crate::mutex::M(obj as *mut libc::pthread_mutex_t).kind() & (16 | 32 | 64 | 128)
                    != 0
            {
                return None;
            }
            32
        }
        Kind::RwLock => {
            if crate::rwlock::L(obj as *mut libc::pthread_rwlock_t).is_shared() {
                return None;
            }
            40
        }
        _ => return None,
    };
    // SAFETY: the caller's live object of this kind (40 and 56 bytes), 8-aligned; the bytes are
    // touched by no one else (above).
    Some(unsafe { &*((obj + off) as *const AtomicU64) })
}

/// Before a lock of `obj`: if its memory was rewritten since lockdep last marked it (freed and
/// reused, zeroed by a pool, a C++ object built where another was, none of them passing through
/// `*_destroy`), the object starts a new life: what lockdep recorded of the old one (its class,
/// its orders) is forgotten, so a dead object's orders never meet the new one's. One load and
/// compare when the mark is there.
#[inline]
fn check_life(obj: usize, kind: Kind) {
    let Some(slot) = life_slot(obj, kind) else {
        return;
    };
    let want = life_mark(obj);
    let cur = slot.load(Ordering::Relaxed);
    if cur != want
        // One of the threads racing to lock a rewritten object starts its new life.
        && slot
            .compare_exchange(cur, want, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        && ld::object_class(obj).is_some()
    {
        ld::forget_object(obj);
    }
}

fn site_or_unknown(a: usize) -> Site {
    if a == 0 {
        Site::UNKNOWN
    } else {
        Site::address(a)
    }
}

// The unwinder of libgcc_s, which every Rust program on this target links for panics.
unsafe extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut libc::c_void, *mut libc::c_void) -> c_int,
        arg: *mut libc::c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut libc::c_void) -> usize;
}

/// What the unwinder's callback fills: the init site's frame and the two above it.
struct Chain {
    site: usize,
    found: usize,
    out: [usize; 3],
    seen: usize,
}

/// `_URC_NO_REASON` (go on) and `_URC_NORMAL_STOP` (stop).
const UNWIND_GO_ON: c_int = 0;
const UNWIND_STOP: c_int = 4;
/// Frames looked at before giving up on finding the init site (the library's own are few).
const UNWIND_MAX_FRAMES: usize = 32;

unsafe extern "C" fn chain_step(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> c_int {
    // SAFETY: `arg` is the `Chain` of `init_chain`'s frame, alive for the whole walk.
    let ch = unsafe { &mut *arg.cast::<Chain>() };
    // SAFETY: the unwinder's context for this frame.
    let ip = unsafe { _Unwind_GetIP(ctx) };
    ch.seen += 1;
    if ch.found == 0 && ip != ch.site {
        return if ch.seen >= UNWIND_MAX_FRAMES {
            UNWIND_STOP
        } else {
            UNWIND_GO_ON
        };
    }
    ch.out[ch.found] = ip;
    ch.found += 1;
    if ch.found == 3 {
        UNWIND_STOP
    } else {
        UNWIND_GO_ON
    }
}

/// The init call's return address `site` and the return addresses of the two frames above it:
/// a lock type whose constructor wraps the init (`Mutex::Mutex() { pthread_mutex_init(..) }`) is
/// told apart by where it is constructed. Done once per init, with lockdep on only; an unwinder
/// that cannot find the site's frame (a tail call, a frame without unwind tables) leaves the
/// callers unknown and the class is the site's alone, as before.
fn init_chain(site: usize) -> [usize; 3] {
    let mut ch = Chain {
        site,
        found: 0,
        out: [0; 3],
        seen: 0,
    };
    // SAFETY: a walk of this thread's own stack; the callback only writes `ch`. The unwinder
    // takes no lock of ours (its FDE lookup runs under the dynamic linker's own lock).
    unsafe { _Unwind_Backtrace(chain_step, (&raw mut ch).cast()) };
    if ch.found == 0 {
        return [site, 0, 0];
    }
    ch.out
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

/// Before `dlclose(handle)`: forgets the lock objects in the object's writable segments.
pub(crate) fn closing(handle: *mut libc::c_void) {
    if !on() || handle.is_null() {
        return;
    }
    let mut lm: *mut libc::c_void = core::ptr::null_mut();
    // SAFETY: the program's handle from `dlopen` (glibc's contract for `dlclose`), an out-pointer
    // for the link map.
    if unsafe { libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, (&raw mut lm).cast()) } != 0
        || lm.is_null()
    {
        return;
    }
    // SAFETY: a `struct link_map`, whose first field is the object's load address.
    let base = unsafe { *(lm as *const usize) };
    if base == 0 {
        return;
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: libc::size_t,
        base: *mut libc::c_void,
    ) -> c_int {
        // SAFETY: `dl_iterate_phdr` passes a valid description of a loaded object.
        let info = unsafe { &*info };
        if info.dlpi_addr as usize != base as usize {
            return 0;
        }
        // SAFETY: the object's program headers.
        let ph = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        for p in ph {
            if p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_W != 0 {
                ld::forget_range(base as usize + p.p_vaddr as usize, p.p_memsz as usize);
            }
        }
        1
    }
    // SAFETY: a callback that reads only what it is given.
    unsafe { libc::dl_iterate_phdr(Some(each), base as *mut libc::c_void) };
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
    check_life(m as usize, Kind::Mutex);
    let kind = crate::mutex::M(m).kind();
    let mut f = mutex_flags(kind);
    if tried {
        f = f.with(Flags::TRY);
    }
    ld::acquire_object(m as usize, Kind::Mutex, Mode::Write, Site::address(site), f);
}

/// Before a timed mutex lock: a relock of a held mutex times out, so it is not reported.
pub(crate) fn mutex_timed(m: *mut libc::pthread_mutex_t, site: usize, _: bool) {
    check_life(m as usize, Kind::Mutex);
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
    check_life(l as usize, Kind::RwLock);
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
    check_life(l as usize, Kind::RwLock);
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
