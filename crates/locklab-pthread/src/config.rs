//! The per-process choice of algorithm for each family, read from the environment once, on first
//! use (or in the constructor), with `getenv`: no allocation, so it works from inside a `malloc` and
//! before any constructor. An unknown value prints one line on stderr and the default is used.
//!
//! ```
//! use locklab_pthread::config::{self, MutexAlgo};
//! // The default, unless the environment chose another.
//! if std::env::var_os("LOCKLAB_MUTEX").is_none() {
//!     assert_eq!(config::mutex(), MutexAlgo::Adaptive);
//! }
//! ```

use core::sync::atomic::{AtomicU8, Ordering};

/// The algorithm behind `pthread_mutex_t` and `mtx_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MutexAlgo {
    /// The adaptive mutex ([`crate::adaptive`]: optimistic spinning while the owner runs, then a
    /// sleep on the lock word, nothing queued). The default: `LOCKLAB_MUTEX=adaptive` (or its alias
    /// `mutex`).
    Adaptive = 1,
    /// The MCS queue lock (a spinlock: correct but slow when threads outnumber CPUs).
    Mcs,
    /// The ticket lock (a spinlock).
    Ticket,
    /// The queued spinlock (a spinlock).
    QSpinLock,
    /// Test-and-set (a spinlock).
    Tas,
    /// glibc's own, condvars included.
    Glibc,
    /// glibc's own, condvars included, with every normal mutex turned into glibc's adaptive kind
    /// (`PTHREAD_MUTEX_ADAPTIVE_NP`: a bounded spin with exponential backoff before the futex
    /// wait): glibc's strongest mutex, as a reference point.
    GlibcAdaptive,
}

/// The algorithm behind `pthread_rwlock_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RwAlgo {
    /// locklab's reader-preferring futex rwsem (`RecursiveRwSem`). The default:
    /// `LOCKLAB_RWLOCK=recursive-rwsem` (or its alias `rwsem`).
    RecursiveRwSem = 1,
    /// The queued rwlock spinlock (`RwSpinLock`), with recursive reads unless the lock prefers writers.
    RwSpinLock,
    /// glibc's own.
    Glibc,
}

/// The algorithm behind `pthread_spinlock_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SpinAlgo {
    /// The queued spinlock (convoys when a queued waiter is preempted: not the default).
    QSpinLock = 1,
    /// A ticket lock in the word's two 16-bit halves.
    Ticket,
    /// Test-and-test-and-set with backoff, then yields: glibc's algorithm. The default.
    Tas,
    /// glibc's own.
    Glibc,
}

pub use crate::choices::{
    MUTEX_ALIASES, MUTEX_NAMES, MUTEX_STAT_NAMES, RWLOCK_ALIASES, RWLOCK_NAMES, RWLOCK_STAT_NAMES,
    SPIN_ALIASES, SPIN_NAMES,
};

/// The name of choice `code` (an algorithm enum's value, from 1) in `names`; `?` if out of range.
pub(crate) fn name_of(names: &[&'static str], code: u8) -> &'static str {
    (code as usize)
        .checked_sub(1)
        .and_then(|i| names.get(i))
        .copied()
        .unwrap_or("?")
}

static MUTEX: AtomicU8 = AtomicU8::new(0);
static RWLOCK: AtomicU8 = AtomicU8::new(0);
static SPIN: AtomicU8 = AtomicU8::new(0);
/// 0: not read yet; 1: off; 2: on (`LOCKLAB_STAT` set).
static STAT: AtomicU8 = AtomicU8::new(0);

/// Whether lock statistics are kept (`LOCKLAB_STAT=PATH` set and non-empty; see [`crate::stat`]).
#[inline]
pub fn stat() -> bool {
    match STAT.load(Ordering::Relaxed) {
        0 => first_use(stat),
        v => v == 2,
    }
}

/// The mutex choice.
#[inline]
pub fn mutex() -> MutexAlgo {
    match MUTEX.load(Ordering::Relaxed) {
        0 => first_use(mutex),
        1 => MutexAlgo::Adaptive,
        2 => MutexAlgo::Mcs,
        3 => MutexAlgo::Ticket,
        4 => MutexAlgo::QSpinLock,
        5 => MutexAlgo::Tas,
        6 => MutexAlgo::Glibc,
        _ => MutexAlgo::GlibcAdaptive,
    }
}

/// Whether the rwlock choice is the default (`recursive-rwsem`), with one load.
#[inline(always)]
pub fn rwlock_is_default() -> bool {
    RWLOCK.load(Ordering::Relaxed) == RwAlgo::RecursiveRwSem as u8
}

/// Whether glibc runs every mutex and condvar (`glibc` or `glibc-adaptive`).
#[inline]
pub fn mutex_is_glibc() -> bool {
    matches!(mutex(), MutexAlgo::Glibc | MutexAlgo::GlibcAdaptive)
}

/// The rwlock choice.
#[inline]
pub fn rwlock() -> RwAlgo {
    match RWLOCK.load(Ordering::Relaxed) {
        0 => first_use(rwlock),
        1 => RwAlgo::RecursiveRwSem,
        2 => RwAlgo::RwSpinLock,
        _ => RwAlgo::Glibc,
    }
}

/// The spinlock choice.
#[inline]
pub fn spin() -> SpinAlgo {
    match SPIN.load(Ordering::Relaxed) {
        0 => first_use(spin),
        1 => SpinAlgo::QSpinLock,
        2 => SpinAlgo::Ticket,
        3 => SpinAlgo::Tas,
        _ => SpinAlgo::Glibc,
    }
}

/// Longest value looked at (longer ones are reported as unknown).
const VALUE_MAX: usize = 32;

unsafe extern "C" {
    /// The process environment (null until libc's own initialisation has run).
    static environ: *const *const libc::c_char;
}

/// The value of `name` in the environment, copied into `buf` (truncated at its size).
///
/// glibc sets `environ` in its own initialiser, which runs after an executable's `.preinit_array`:
/// a lock taken there would see no environment with `getenv` and fix the default for good. Then the
/// environment the kernel gave the process is read from `/proc/self/environ` instead (system calls
/// into a stack buffer: no allocation).
pub(crate) fn lookup<'a>(name: &core::ffi::CStr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: reading the pointer value only.
    let env = unsafe { core::ptr::read_volatile(&raw const environ) };
    if !env.is_null() {
        // SAFETY: a NUL-terminated name.
        let raw = unsafe { libc::getenv(name.as_ptr()) };
        if raw.is_null() {
            return None;
        }
        // SAFETY: getenv returns a NUL-terminated string.
        let s = unsafe { core::ffi::CStr::from_ptr(raw) }.to_bytes();
        let n = s.len().min(buf.len());
        buf[..n].copy_from_slice(&s[..n]);
        return Some(&buf[..n]);
    }
    proc_environ(name.to_bytes(), buf)
}

/// `lookup` from `/proc/self/environ`: entries `NAME=value\0`, scanned in 4 KiB reads.
fn proc_environ<'a>(name: &[u8], buf: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc/self/environ".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // Scanner state: `pos` is how far into the current entry we are; `Some(len)` once the entry
    // matched `name=`, with the value's bytes copied so far.
    let (mut pos, mut matching, mut value): (usize, bool, Option<usize>) = (0, true, None);
    let mut found = None;
    let mut chunk = [0u8; 4096];
    'read: loop {
        // SAFETY: a valid buffer of the given length.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n <= 0 {
            break;
        }
        for &b in &chunk[..n as usize] {
            if b == 0 {
                if let Some(len) = value {
                    found = Some(len);
                    break 'read;
                }
                (pos, matching) = (0, true);
                continue;
            }
            if let Some(len) = value.as_mut() {
                if *len < buf.len() {
                    buf[*len] = b;
                    *len += 1;
                }
            } else if matching {
                if pos < name.len() {
                    matching = name[pos] == b;
                } else {
                    matching = false;
                    if b == b'=' {
                        value = Some(0);
                    }
                }
            }
            pos += 1;
        }
    }
    if found.is_none() {
        found = value;
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    found.map(|n| &buf[..n])
}

/// Reads the environment, then answers `get` (kept out of line: the getters' fast path is one load).
#[cold]
#[inline(never)]
fn first_use<T>(get: fn() -> T) -> T {
    load();
    get()
}

/// Reads the variables. Idempotent; concurrent first calls compute the same values (only one
/// prints a warning).
#[cold]
#[inline(never)]
pub fn load() {
    fn pick(
        name: &core::ffi::CStr,
        valid: &[&str],
        aliases: &[(&str, &str)],
        default: u8,
        cell: &AtomicU8,
    ) {
        if cell.load(Ordering::Relaxed) != 0 {
            return;
        }
        let mut buf = [0u8; VALUE_MAX];
        let found = lookup(name, &mut buf);
        let mut value = default;
        let mut bad = false;
        if let Some(s) = found {
            match crate::choices::position(valid, aliases, s) {
                Some(i) => value = i as u8 + 1,
                None => bad = !s.is_empty(),
            }
        }
        // Relaxed: the value is a plain choice, the same from every racing caller.
        if cell
            .compare_exchange(0, value, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
            && bad
        {
            let mut line = [0u8; 200];
            let mut n = 0;
            for part in [
                b"liblocklab_pthread: unknown ".as_slice(),
                name.to_bytes(),
                b" (valid: ",
            ] {
                n += copy(&mut line[n..], part);
            }
            for (i, v) in valid.iter().enumerate() {
                if i > 0 {
                    n += copy(&mut line[n..], b"|");
                }
                n += copy(&mut line[n..], v.as_bytes());
            }
            for (alias, of) in aliases {
                for part in [b", ".as_slice(), alias.as_bytes(), b" for ", of.as_bytes()] {
                    n += copy(&mut line[n..], part);
                }
            }
            n += copy(&mut line[n..], b"); using ");
            n += copy(&mut line[n..], valid[default as usize - 1].as_bytes());
            n += copy(&mut line[n..], b"\n");
            crate::sys::write_stderr(&line[..n]);
        }
    }
    fn copy(dst: &mut [u8], src: &[u8]) -> usize {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        n
    }
    pick(c"LOCKLAB_MUTEX", &MUTEX_NAMES, &MUTEX_ALIASES, 1, &MUTEX);
    pick(
        c"LOCKLAB_RWLOCK",
        &RWLOCK_NAMES,
        &RWLOCK_ALIASES,
        1,
        &RWLOCK,
    );
    // The default spinlock is `tas` (3): a queued spinlock hands the lock to its queue's head even
    // when that thread is preempted, and every waiter behind it waits out its time slice (4 threads
    // on 2 CPUs: 4.2-14 s where glibc's takes 0.003-0.11 s).
    pick(
        c"LOCKLAB_SPIN",
        &SPIN_NAMES,
        &SPIN_ALIASES,
        SpinAlgo::Tas as u8,
        &SPIN,
    );
    if STAT.load(Ordering::Relaxed) == 0 {
        // SAFETY: written only here, before STAT leaves 0 for good; racing first callers write the
        // same bytes (the environment does not change under them).
        let path = unsafe { &mut *STAT_PATH.0.get() };
        let on = match lookup(c"LOCKLAB_STAT", &mut path[..STAT_PATH_MAX]) {
            Some(p) if !p.is_empty() => {
                STAT_PATH_LEN.store(p.len(), Ordering::Relaxed);
                true
            }
            _ => false,
        };
        // Release pairs with the Acquire in `stat_path`: the path is written first.
        STAT.store(if on { 2 } else { 1 }, Ordering::Release);
    }
}

/// Longest `LOCKLAB_STAT` path kept.
const STAT_PATH_MAX: usize = 4095;

/// The `LOCKLAB_STAT` path, kept for [`crate::stat`] (which starts from it on first use).
struct PathBuf(core::cell::UnsafeCell<[u8; STAT_PATH_MAX + 1]>);
// SAFETY: written once before STAT is published with Release, read after an Acquire of it.
unsafe impl Sync for PathBuf {}
static STAT_PATH: PathBuf = PathBuf(core::cell::UnsafeCell::new([0; STAT_PATH_MAX + 1]));
static STAT_PATH_LEN: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// The `LOCKLAB_STAT` path (empty when statistics are off).
pub(crate) fn stat_path() -> &'static [u8] {
    if STAT.load(Ordering::Acquire) != 2 {
        return &[];
    }
    // SAFETY: written before STAT became 2 (Acquire above), never again.
    let path = unsafe { &*STAT_PATH.0.get() };
    &path[..STAT_PATH_LEN.load(Ordering::Relaxed).min(STAT_PATH_MAX)]
}
