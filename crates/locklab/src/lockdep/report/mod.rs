//! The validator's reports: printed on standard error (a `write` to descriptor 2 that ignores
//! errors: a closed stderr loses the text, never panics), kept for [`reports`] and as JSON for
//! [`reports_json`], and the process aborted after printing under [`Action::Abort`].
//!
//! Reports are composed under the graph lock into memory the validator reserved for them (no
//! allocation: the preload library reports from inside `pthread_mutex_lock`).

use super::{Action, ClassInfo, Graph, Held, Kind, Mode, Pair, Path, graph, mode, table};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicUsize, Ordering};

mod compose;
pub(super) use compose::*;

// --- sites -----------------------------------------------------------------------------------------------

/// Where something happened: a source location (the library's locks, through `#[track_caller]`), a
/// code address (the preload library: its caller's return address), or unknown.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::hooks::Site;
/// let s = Site::caller();
/// assert_ne!(s, Site::UNKNOWN);
/// assert_eq!(Site::address(0), Site::UNKNOWN);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site(pub(super) usize);

impl Site {
    /// An unknown site.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// use locklab::lockdep::hooks::Site;
    /// assert_eq!(Site::address(0), Site::UNKNOWN);
    /// assert_ne!(Site::caller(), Site::UNKNOWN);
    /// ```
    pub const UNKNOWN: Site = Site(0);

    /// A source location.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// let _ = locklab::lockdep::hooks::Site::location(std::panic::Location::caller());
    /// ```
    pub fn location(l: &'static core::panic::Location<'static>) -> Site {
        // Even: a Location is at least 4-aligned (it holds a reference). Exposed: `site` turns the
        // number back into the reference.
        Site((l as *const core::panic::Location<'static>).expose_provenance())
    }

    /// The caller's source location.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// let _ = locklab::lockdep::hooks::Site::caller();
    /// ```
    #[track_caller]
    #[inline]
    pub fn caller() -> Site {
        Site::location(core::panic::Location::caller())
    }

    /// A code address (0: unknown).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert_ne!(locklab::lockdep::hooks::Site::address(0x401000), locklab::lockdep::hooks::Site::UNKNOWN);
    /// ```
    pub fn address(a: usize) -> Site {
        if a == 0 {
            Site::UNKNOWN
        } else {
            Site(a << 1 | 1)
        }
    }
}

/// Formats a code address (the preload library names it as its lock statistics do).
type AddrFmt = fn(usize, &mut dyn Write) -> fmt::Result;
static ADDR_FMT: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets how code-address sites ([`Site::address`]) are printed (default: `0x` and the address).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// fn name(a: usize, w: &mut dyn core::fmt::Write) -> core::fmt::Result {
///     write!(w, "code@{a:#x}")
/// }
/// locklab::lockdep::hooks::set_address_formatter(name);
/// ```
pub fn set_address_formatter(f: fn(usize, &mut dyn Write) -> fmt::Result) {
    ADDR_FMT.store(f as *mut (), Ordering::Release);
}

/// Writes a stored site value.
fn site(w: &mut dyn Write, v: u64) -> fmt::Result {
    let v = v as usize;
    if v == 0 {
        return w.write_str("an unknown site");
    }
    if v & 1 == 1 {
        // Acquire pairs with the Release in `set_address_formatter`.
        let f = ADDR_FMT.load(Ordering::Acquire);
        if f.is_null() {
            return write!(w, "{:#x}", v >> 1);
        }
        // SAFETY: set only by `set_address_formatter` from an `AddrFmt`.
        let f: AddrFmt = unsafe { core::mem::transmute::<*mut (), AddrFmt>(f) };
        return f(v >> 1, w);
    }
    // SAFETY: even non-zero site values are made only by `Site::location` from a
    // `&'static Location` (the validator stores nothing else there).
    let l = unsafe { &*core::ptr::with_exposed_provenance::<core::panic::Location<'static>>(v) };
    write!(w, "{}:{}:{}", l.file(), l.line(), l.column())
}

// --- plain output ------------------------------------------------------------------------------------------

/// Writes bytes to standard error, ignoring errors (a closed stderr must not panic a lock path).
fn to_stderr(b: &[u8]) {
    #[cfg(unix)]
    {
        let mut b = b;
        while !b.is_empty() {
            // SAFETY: a valid buffer; descriptor 2 may be closed (then the write fails).
            let n = unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
            if n <= 0 {
                return;
            }
            b = &b[n as usize..];
        }
    }
    #[cfg(not(unix))]
    {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(b);
    }
}

/// A fixed buffer for one line.
struct Line {
    b: [u8; 512],
    n: usize,
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let k = s.len().min(self.b.len() - self.n);
        self.b[self.n..self.n + k].copy_from_slice(&s.as_bytes()[..k]);
        self.n += k;
        Ok(())
    }
}

/// Prints one short message on standard error.
pub(super) fn say(args: fmt::Arguments<'_>) {
    let mut l = Line { b: [0; 512], n: 0 };
    let _ = l.write_fmt(args);
    to_stderr(&l.b[..l.n]);
}

/// Bytes shown as text (invalid UTF-8 replaced).
pub(super) struct Lossy<'a>(pub(super) &'a [u8]);

impl fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.utf8_chunks() {
            f.write_str(c.valid())?;
            if !c.invalid().is_empty() {
                f.write_str("\u{fffd}")?;
            }
        }
        Ok(())
    }
}

/// The calling thread's id (the kernel's, on Linux).
pub(super) fn tid() -> u32 {
    crate::sys::thread_id()
}

fn pid() -> u32 {
    std::process::id()
}

// --- the store -------------------------------------------------------------------------------------------

/// What kind of problem a report is.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::ReportKind;
/// assert_eq!(ReportKind::Recursion.name(), "recursive-locking");
/// // Reports are told apart by kind.
/// let cycles = locklab::lockdep::reports()
///     .into_iter()
///     .filter(|r| r.kind == ReportKind::Cycle)
///     .count();
/// assert!(cycles <= locklab::lockdep::reports().len());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReportKind {
    /// A circular dependency between classes (a potential deadlock).
    Cycle = 1,
    /// Two instances of one class taken in both orders.
    SameClassOrder = 2,
    /// A lock taken again by its holder (a self-deadlock).
    Recursion = 3,
    /// A recursive read of a writer-preferring rwlock class that writers also take.
    RecursiveRead = 4,
    /// `synchronize` or `barrier` of an RCU domain inside one of its read sections.
    RcuSyncInReader = 5,
    /// A class taken in a signal handler and held where that signal can arrive.
    SignalUnsafe = 6,
    /// A condvar wait while another lock is held (a warning).
    CondWaitHolding = 7,
    /// An unlock of a lock the thread does not hold, where the kind forbids it.
    UnlockNotHeld = 8,
    /// The destruction of a held lock.
    DestroyHeld = 9,
    /// A thread exiting with locks held.
    ExitHolding = 10,
}

impl ReportKind {
    fn from_u8(v: u8) -> Self {
        use ReportKind::*;
        [
            Cycle,
            SameClassOrder,
            Recursion,
            RecursiveRead,
            RcuSyncInReader,
            SignalUnsafe,
            CondWaitHolding,
            UnlockNotHeld,
            DestroyHeld,
            ExitHolding,
        ][(v as usize).clamp(1, 10) - 1]
    }

    /// The name used in the JSON (`"kind"`).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert_eq!(locklab::lockdep::ReportKind::Cycle.name(), "circular-dependency");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ReportKind::Cycle => "circular-dependency",
            ReportKind::SameClassOrder => "same-class-order",
            ReportKind::Recursion => "recursive-locking",
            ReportKind::RecursiveRead => "recursive-read",
            ReportKind::RcuSyncInReader => "rcu-synchronize-in-reader",
            ReportKind::SignalUnsafe => "signal-unsafe",
            ReportKind::CondWaitHolding => "cond-wait-holding",
            ReportKind::UnlockNotHeld => "unlock-not-held",
            ReportKind::DestroyHeld => "destroy-held",
            ReportKind::ExitHolding => "exit-holding",
        }
    }
}

/// One report, as [`reports`] returns it.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, LockClass, ReportKind};
/// static FIRST: LockClass = LockClass::new("doc-report-first");
/// static SECOND: LockClass = LockClass::new("doc-report-second");
/// let (a, b) = (locklab::Mutex::new(()), locklab::Mutex::new(()));
/// lockdep::set_class(&a, &FIRST);
/// lockdep::set_class(&b, &SECOND);
/// drop((a.lock(), b.lock())); // first, then second
/// drop((b.lock(), a.lock())); // second, then first: a potential deadlock
/// let report = lockdep::reports().into_iter().find(|r| {
///     r.kind == ReportKind::Cycle && r.classes.iter().any(|c| c.contains("doc-report-first"))
/// });
/// if cfg!(feature = "lockdep") {
///     let report = report.expect("AB-BA reported");
///     assert!(report.classes.iter().any(|c| c.contains("doc-report-second")));
///     assert!(!report.text.is_empty());
/// } else {
///     // Without the `lockdep` feature the locks never call the validator.
///     assert!(report.is_none());
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Report {
    /// The problem.
    pub kind: ReportKind,
    /// The classes involved, as the report names them (a [`super::LockClass`]'s name, or the kind
    /// and site).
    pub classes: Vec<String>,
    /// The printed text.
    pub text: String,
}

const TEXT_CAP: usize = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
const JSON_CAP: usize = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
const MAX_RECORDS: usize = if cfg!(miri) { 256 } else { 1 << 14 };
const MAX_NAMES: usize = 8;

struct Record {
    kind: AtomicU8,
    text: [AtomicU32; 2],
    names: [[AtomicU32; 2]; MAX_NAMES],
    n_names: AtomicU8,
}

/// The reports so far (graph lock for writes; the lengths are published with Release).
pub(super) struct Store {
    text: &'static [AtomicU8],
    text_len: AtomicUsize,
    json: &'static [AtomicU8],
    json_len: AtomicUsize,
    records: &'static [Record],
    n_records: AtomicUsize,
}

impl Store {
    pub(super) fn new() -> Option<Store> {
        Some(Store {
            text: table::zeroed_array(TEXT_CAP)?,
            text_len: AtomicUsize::new(0),
            json: table::zeroed_array(JSON_CAP)?,
            json_len: AtomicUsize::new(0),
            records: table::zeroed_array(MAX_RECORDS)?,
            n_records: AtomicUsize::new(0),
        })
    }
}

/// Appends to one of the store's arenas (graph lock held); stops quietly when full.
struct Arena<'a> {
    buf: &'static [AtomicU8],
    len: &'a AtomicUsize,
    /// Also escape as a JSON string body.
    json: bool,
}

impl Write for Arena<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut n = self.len.load(Ordering::Relaxed);
        let mut put = |b: u8| {
            if n < self.buf.len() {
                self.buf[n].store(b, Ordering::Relaxed);
                n += 1;
            }
        };
        for &b in s.as_bytes() {
            if self.json {
                match b {
                    b'"' | b'\\' => {
                        put(b'\\');
                        put(b);
                    }
                    b'\n' => {
                        put(b'\\');
                        put(b'n');
                    }
                    0..=0x1f => {
                        for x in [
                            b'\\',
                            b'u',
                            b'0',
                            b'0',
                            HEX[(b >> 4) as usize],
                            HEX[(b & 15) as usize],
                        ] {
                            put(x);
                        }
                    }
                    _ => put(b),
                }
            } else {
                put(b);
            }
        }
        self.len.store(n, Ordering::Relaxed);
        Ok(())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn read(buf: &[AtomicU8], from: usize, to: usize) -> Vec<u8> {
    buf[from..to]
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .collect()
}

/// Every report so far, oldest first.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let n = locklab::lockdep::reports().len();
/// assert!(locklab::lockdep::reports().len() >= n);
/// ```
pub fn reports() -> Vec<Report> {
    let Some(g) = graph() else { return Vec::new() };
    if !g.lock() {
        return Vec::new();
    }
    let s = &g.store;
    let n = s.n_records.load(Ordering::Relaxed).min(MAX_RECORDS);
    let out = s.records[..n]
        .iter()
        .map(|r| {
            let range = |x: &[AtomicU32; 2]| {
                (
                    x[0].load(Ordering::Relaxed) as usize,
                    x[1].load(Ordering::Relaxed) as usize,
                )
            };
            let (a, b) = range(&r.text);
            let text = String::from_utf8_lossy(&read(s.text, a, b)).into_owned();
            let classes = r.names[..r.n_names.load(Ordering::Relaxed) as usize]
                .iter()
                .map(|x| {
                    let (a, b) = range(x);
                    String::from_utf8_lossy(&read(s.text, a, b)).into_owned()
                })
                .collect();
            Report {
                kind: ReportKind::from_u8(r.kind.load(Ordering::Relaxed)),
                classes,
                text,
            }
        })
        .collect();
    g.unlock();
    out
}

/// Every report so far as a JSON array (`[]` if none): one object per report with `kind`,
/// `message`, `pid`, `tid`, `classes` and `chain` (each step `held` -> `acquired`, each with its
/// class, mode and site, and the thread that made it).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let j = locklab::lockdep::reports_json();
/// assert!(j.starts_with('[') && j.ends_with(']'));
/// ```
pub fn reports_json() -> String {
    let Some(g) = graph() else {
        return "[]".into();
    };
    if !g.lock() {
        return "[]".into();
    }
    let n = g.store.json_len.load(Ordering::Relaxed);
    let body = read(g.store.json, 0, n);
    g.unlock();
    let mut s = String::with_capacity(body.len() + 4);
    s.push('[');
    s.push_str(&String::from_utf8_lossy(&body));
    s.push(']');
    s
}

/// Writes every report so far as a JSON array to `fd` (the preload library at exit); no
/// allocation.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// # #[cfg(unix)]
/// locklab::lockdep::hooks::write_json_fd(-1); // a bad descriptor: nothing written, no error
/// ```
#[cfg(unix)]
pub fn write_json_fd(fd: i32) {
    let Some(g) = graph() else { return };
    if !g.lock() {
        return;
    }
    write_json_locked(g, fd);
    g.unlock();
}

/// [`write_json_fd`] with the graph lock held by the caller.
#[cfg(unix)]
fn write_json_locked(g: &Graph, fd: i32) {
    let n = g.store.json_len.load(Ordering::Relaxed);
    // Small: under `abort` this runs on the stack of the thread that found the problem, maybe a
    // signal handler's alternate stack.
    let mut chunk = [0u8; 256];
    let put = |b: &[u8]| {
        let mut b = b;
        while !b.is_empty() {
            // SAFETY: a valid buffer; a bad descriptor fails.
            let k = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
            if k <= 0 {
                return;
            }
            b = &b[k as usize..];
        }
    };
    put(b"[");
    let mut i = 0;
    while i < n {
        let k = (n - i).min(chunk.len());
        for (j, c) in chunk[..k].iter_mut().enumerate() {
            *c = g.store.json[i + j].load(Ordering::Relaxed);
        }
        put(&chunk[..k]);
        i += k;
    }
    put(b"]\n");
}

/// The function [`set_abort_hook`] set (null: none).
#[cfg(unix)]
static ABORT_HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the function called under [`Action::Abort`] after a report is printed and before the
/// process aborts, with a writer of every report so far as a JSON array to a descriptor (what
/// [`write_json_fd`] writes; the validator's lock is held meanwhile, so the hook must not call
/// [`write_json_fd`] itself). The preload library writes its `LOCKLAB_LOCKDEP_OUT` file there: a
/// process that aborts on its first report leaves that report in its file.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// fn before_abort(write: &dyn Fn(i32)) {
///     write(-1); // a bad descriptor: nothing written, no error
/// }
/// locklab::lockdep::hooks::set_abort_hook(before_abort);
/// ```
#[cfg(unix)]
pub fn set_abort_hook(f: fn(&dyn Fn(i32))) {
    // Release pairs with the Acquire in `run_abort_hook`.
    ABORT_HOOK.store(f as *mut (), Ordering::Release);
}

#[cfg(unix)]
fn run_abort_hook(g: &Graph) {
    // Acquire pairs with the Release in `set_abort_hook`.
    let f = ABORT_HOOK.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: set only by `set_abort_hook` from a `fn(&dyn Fn(i32))`.
        let f: fn(&dyn Fn(i32)) = unsafe { core::mem::transmute::<*mut (), fn(&dyn Fn(i32))>(f) };
        f(&|fd| write_json_locked(g, fd));
    }
}

/// How many reports so far.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let _ = locklab::lockdep::report_count();
/// ```
pub fn report_count() -> usize {
    // Acquire pairs with the Release count in `Rep::end`.
    graph().map_or(0, |g| g.store.n_records.load(Ordering::Acquire))
}

pub(super) fn after_fork_child() {}
