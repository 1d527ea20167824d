//! Lock statistics for any program (`LOCKLAB_STAT=PATH`, or `locklab run --stat`): the kernel's
//! `lock_stat` for pthread locks, per lock object and per acquiring call site.
//!
//! # What is counted
//! For each (lock, call site) pair: acquisitions; contentions (the first try failed, so the caller
//! waited) with wait time (total, min, max); hold time of exclusive holds (mutexes, spinlocks,
//! rwlock writers: total, min, max, and how many holds were timed); read acquisitions, contentions and
//! wait time of rwlocks; condvar waits (count, time blocked, time-outs), signals and broadcasts. The
//! call site is the return address of the call into this library; it is named at the end with
//! `dladdr` (`function+0xoff`, or `object+0xoff` when the object exports no symbol there).
//!
//! # How
//! - **Per-thread shards, no shared line**: each thread counts into its own shard, an open-addressed
//!   table keyed by (lock, site) in `mmap`ed memory (no allocation on a lock path), probed through a
//!   tag per slot; pairs that find no slot there are appended to an overflow arena found through a
//!   growable index, so a lookup costs a bounded number of slots whatever the number of pairs. A thread's shard
//!   goes back to a free list when it exits (a pthread key destructor) and a later thread keeps adding
//!   to it: the dump sums every shard, so which thread counted is irrelevant. Counters are atomics that
//!   only the shard's owner writes (a load and a store, no locked instruction); the dump reads them
//!   with Relaxed loads while threads run, so a figure may miss the last few operations, never tear.
//! - **Time in ticks**: the TSC on x86-64 (`rdtsc`), the virtual counter on aarch64, converted to
//!   nanoseconds at the dump by the ratio of ticks to `CLOCK_MONOTONIC` since the start. An
//!   uncontended acquisition reads the clock once (for the hold time) and its release once.
//! - **Contention without touching the algorithms**: every acquisition first tries (the family's own
//!   `trylock`); only if that fails is the clock read and the blocking call made. So the figures are
//!   the same whichever algorithm, glibc's included, is behind the lock.
//! - **Holds** are matched by a small per-thread stack of held locks (lock, entry, start): a release
//!   that finds no entry (a mutex unlocked by another thread, or a hold deeper than the stack) counts
//!   no hold time. A recursive mutex's hold runs from its first lock to its last unlock.
//!
//! # When the table is written
//! At exit (a destructor, after the program's own), before the process image is replaced by an
//! `exec*` call, and on `SIGUSR1` when the program has no handler of its own (the signal sets a flag;
//! the next lock operation of any thread writes the file, outside any signal handler). A child of
//! `fork` starts from zero and writes its own file. The file is opened when counting starts (at load,
//! or in the child), so a server that drops privileges can still write it; if the descriptor was
//! closed or reused meanwhile (checked by device and inode), the path is opened again.
//!
//! # File names
//! `%p` in the path becomes the process id; if that file exists (the image before an `exec`, or an
//! earlier process with the same id), `-1`, `-2`, ... is appended to the id. A path without `%p` is
//! overwritten by every process that writes it.

pub mod schema;

use crate::config;
use crate::sys;
use core::cell::Cell;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use libc::c_int;

// --- the clock ---------------------------------------------------------------------------------------

/// A tick count: cheap, monotonic, the same rate on every CPU.
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; unserialised (a few cycles of skew do not matter).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: CNTVCT_EL0 is readable at EL0 on Linux; a register read.
        unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) t, options(nomem, nostack)) };
        t
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        monotonic_ns()
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Ticks and nanoseconds when counting started (the base of the conversion).
static START_TICKS: AtomicU64 = AtomicU64::new(0);
static START_NS: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds per tick, measured over the process's life so far; a process younger than 5 ms waits
/// until it is 5 ms old, so the ratio is good to a few parts per million.
fn ns_per_tick() -> f64 {
    #[cfg(target_arch = "aarch64")]
    {
        let f: u64;
        // SAFETY: CNTFRQ_EL0 is readable at EL0; a register read.
        unsafe { core::arch::asm!("mrs {}, cntfrq_el0", out(reg) f, options(nomem, nostack)) };
        if f != 0 {
            return 1e9 / f as f64;
        }
    }
    let start = START_NS.load(Ordering::Relaxed);
    while monotonic_ns().saturating_sub(start) < 5_000_000 {
        core::hint::spin_loop();
    }
    let (t, n) = (ticks(), monotonic_ns());
    let dt = t.saturating_sub(START_TICKS.load(Ordering::Relaxed));
    let dn = n.saturating_sub(start);
    if dt == 0 || dn == 0 {
        return 1.0;
    }
    dn as f64 / dt as f64
}

// --- what is counted -----------------------------------------------------------------------------------

/// Counter indices of an [`Entry`]. The first six are what an uncontended acquisition and its
/// release write: with the pair's key they fill the entry's first cache line.
mod c {
    pub const ACQ: usize = 0;
    pub const HOLDS: usize = 1;
    pub const HOLD_TOTAL: usize = 2;
    pub const HOLD_MAX: usize = 3;
    pub const HOLD_MIN1: usize = 4;
    pub const RD_ACQ: usize = 5;
    pub const CONT: usize = 6;
    pub const WAIT_TOTAL: usize = 7;
    pub const WAIT_MAX: usize = 8;
    /// Minimum plus one (0: none yet).
    pub const WAIT_MIN1: usize = 9;
    pub const RD_CONT: usize = 10;
    pub const RD_WAIT_TOTAL: usize = 11;
    pub const RD_WAIT_MAX: usize = 12;
    pub const COND_WAITS: usize = 13;
    pub const COND_WAIT_TOTAL: usize = 14;
    pub const COND_TIMEOUTS: usize = 15;
    pub const SIGNALS: usize = 16;
    pub const BROADCASTS: usize = 17;
    pub const N: usize = 18;
    /// The counters in the order the file writes them (`schema::RECORD_COUNTERS`' order).
    pub const WRITTEN: [usize; N] = [
        ACQ,
        CONT,
        WAIT_TOTAL,
        WAIT_MAX,
        WAIT_MIN1,
        HOLDS,
        HOLD_TOTAL,
        HOLD_MAX,
        HOLD_MIN1,
        RD_ACQ,
        RD_CONT,
        RD_WAIT_TOTAL,
        RD_WAIT_MAX,
        COND_WAITS,
        COND_WAIT_TOTAL,
        COND_TIMEOUTS,
        SIGNALS,
        BROADCASTS,
    ];
    /// Counters that are times (converted to ns at the dump).
    pub const TIMES: [usize; 9] = [
        WAIT_TOTAL,
        WAIT_MAX,
        WAIT_MIN1,
        HOLD_TOTAL,
        HOLD_MAX,
        HOLD_MIN1,
        RD_WAIT_TOTAL,
        RD_WAIT_MAX,
        COND_WAIT_TOTAL,
    ];
    /// Counters merged by maximum.
    pub const MAXES: [usize; 3] = [WAIT_MAX, HOLD_MAX, RD_WAIT_MAX];
    /// Counters merged by minimum (stored plus one).
    pub const MINS: [usize; 2] = [WAIT_MIN1, HOLD_MIN1];
}

/// What kind of object a record is about (kept with the record, for the table).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Obj {
    /// A `pthread_mutex_t` / `mtx_t`: its kind word and whether glibc owns it.
    Mutex { kind: i32, glibc: bool },
    /// A `pthread_rwlock_t`, glibc's or ours.
    RwLock { glibc: bool },
    /// A `pthread_cond_t`.
    Cond,
    /// A `pthread_spinlock_t`.
    Spin,
}

impl Obj {
    /// Packed for the entry: family in bits 0-3, mutex type in 4-5, glibc's object in bit 8, and the
    /// family's algorithm choice (`config`'s code) in bits 16-23.
    fn pack(self) -> u32 {
        match self {
            Obj::Mutex { kind, glibc } => {
                1 | ((kind as u32 & 3) << 4) | (glibc as u32) << 8 | (config::mutex() as u32) << 16
            }
            Obj::RwLock { glibc } => 2 | (glibc as u32) << 8 | (config::rwlock() as u32) << 16,
            Obj::Cond => 3 | (config::mutex_is_glibc() as u32) << 8,
            Obj::Spin => 4 | (config::spin() as u32) << 16,
        }
    }
}

/// The `kind` and `algorithm` names of a packed [`Obj`].
fn describe(info: u32) -> (&'static str, &'static str) {
    let glibc = info & (1 << 8) != 0;
    let code = (info >> 16) as u8;
    match info & 15 {
        1 => {
            let kind = [
                "mutex",
                "mutex-recursive",
                "mutex-errorcheck",
                "mutex-adaptive",
            ][(info >> 4) as usize & 3];
            let algo = if glibc && code != config::MutexAlgo::GlibcAdaptive as u8 {
                "glibc"
            } else {
                config::name_of(&config::MUTEX_STAT_NAMES, code)
            };
            (kind, algo)
        }
        2 => {
            let algo = if glibc {
                "glibc"
            } else {
                config::name_of(&config::RWLOCK_STAT_NAMES, code)
            };
            ("rwlock", algo)
        }
        3 => ("condvar", if glibc { "glibc" } else { "condvar" }),
        _ => ("spinlock", config::name_of(&config::SPIN_NAMES, code)),
    }
}

/// One (lock, site) record. Only the owning thread writes it; `lock` is published last (Release), so a
/// reader that sees it (Acquire) sees `site` and `info`. Aligned to a cache line: the key and the
/// counters of an uncontended lock and unlock are one line.
#[repr(C, align(64))]
struct Entry {
    lock: AtomicUsize,
    site: AtomicUsize,
    c: [AtomicU64; c::N],
    info: AtomicU32,
}

impl Entry {
    #[inline(always)]
    fn add(&self, i: usize, v: u64) {
        // Single writer: a load and a store, no locked instruction.
        let x = &self.c[i];
        x.store(x.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
    }
    #[inline(always)]
    fn max(&self, i: usize, v: u64) {
        if v > self.c[i].load(Ordering::Relaxed) {
            self.c[i].store(v, Ordering::Relaxed);
        }
    }
    #[inline(always)]
    fn min1(&self, i: usize, v: u64) {
        let cur = self.c[i].load(Ordering::Relaxed);
        if cur == 0 || v + 1 < cur {
            self.c[i].store(v + 1, Ordering::Relaxed);
        }
    }
}

/// Records in a shard's first table (a power of two).
const CAP: usize = 1024;
/// Records in each overflow chunk: a thread's pairs that find no slot in the first table are
/// appended to its overflow arena, chunks mapped on demand (only the pages touched cost memory),
/// and found through the shard's overflow index.
const OCAP: usize = 16384;
/// Overflow chunks per shard at most: pairs beyond `CAP + OVERFLOWS * OCAP` (over a million) in one
/// thread are counted as dropped.
const OVERFLOWS: usize = 64;
/// Slots the overflow index starts with (a power of two); it doubles to stay at most half full.
const INDEX_MIN: usize = 4096;
/// Slots a lookup probes in the first table before it goes to the overflow index: a full first
/// table costs a bounded look, never a scan.
const PROBE: usize = 4;
/// Held locks remembered per thread for hold times.
const HELD: usize = 16;
/// Shards at most (threads alive at once; a thread beyond counts nothing).
const MAX_SHARDS: usize = 4096;

#[repr(C)]
struct HeldLock {
    lock: usize,
    entry: *const Entry,
    since: u64,
}

/// One thread's counters.
#[repr(C)]
struct Shard {
    /// Claimed by a live thread.
    in_use: AtomicBool,
    /// Records that did not fit.
    dropped: AtomicU64,
    /// Lookups past the first table, and the slots they examined there (owner writes).
    olookups: AtomicU64,
    oprobes: AtomicU64,
    /// Owner only.
    held_len: Cell<usize>,
    held: [Cell<HeldLock>; HELD],
    /// The first overflow chunk (null until needed); each links the next (for the dump).
    overflow: AtomicPtr<Overflow>,
    /// Owner only: the overflow chunks in order, how many entries they hold (filled in order), and
    /// the overflow index: `icap` slots (a power of two, at most half full), each 0 (empty) or the
    /// low 32 bits of the pair's hash above the entry's number plus one. Only the owner reads the
    /// index (the dump walks the chunks), so it is replaced and unmapped when it grows.
    chunks: [Cell<*mut Overflow>; OVERFLOWS],
    olen: Cell<usize>,
    index: Cell<*mut u64>,
    icap: Cell<usize>,
    /// Owner only: a 16-bit tag of the pair in each slot of the first table (never 0), 0 if free.
    tags: [Cell<u16>; CAP],
    entries: [Entry; CAP],
}

/// An overflow chunk of a shard (anonymous `mmap`, never freed).
#[repr(C)]
struct Overflow {
    next: AtomicPtr<Overflow>,
    entries: [Entry; OCAP],
}

/// A shard's tables, first to last, and each overflow table's slot for the next.
fn tables(s: &'static Shard) -> impl Iterator<Item = &'static [Entry]> {
    let mut next = Some(&s.entries[..]);
    let mut link = &s.overflow;
    core::iter::from_fn(move || {
        let cur = next.take()?;
        // Acquire pairs with the Release store that published the table.
        // SAFETY: overflow tables are never freed.
        if let Some(o) = unsafe { link.load(Ordering::Acquire).as_ref() } {
            next = Some(&o.entries[..]);
            link = &o.next;
        }
        Some(cur)
    })
}

/// Maps a zeroed overflow table and links it at `link` (owner thread only); null if out of memory.
#[cold]
#[inline(never)]
fn new_overflow(link: &AtomicPtr<Overflow>) -> *mut Overflow {
    // SAFETY: an anonymous private mapping; zeroed memory is an empty table.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            core::mem::size_of::<Overflow>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return core::ptr::null_mut();
    }
    // Release pairs with the dump's Acquire load of the link.
    link.store(p.cast(), Ordering::Release);
    p.cast()
}

static SHARDS: [AtomicPtr<Shard>; MAX_SHARDS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_SHARDS];
static SHARD_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Operations not counted: a thread with no shard (all taken, or its own already returned at exit).
static UNCOUNTED: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// This thread's shard (null: none yet, or returned). No destructor.
    static MINE: Cell<*const Shard> = const { Cell::new(core::ptr::null()) };
    /// The shard was returned at this thread's exit: count nothing more.
    static GONE: Cell<bool> = const { Cell::new(false) };
}

/// The pthread key whose destructor returns a thread's shard (-1: none).
static KEY: AtomicI32 = AtomicI32::new(-1);

unsafe extern "C" fn shard_exit(p: *mut libc::c_void) {
    let s = p as *const Shard;
    let _ = MINE.try_with(|m| m.set(core::ptr::null()));
    let _ = GONE.try_with(|g| g.set(true));
    // SAFETY: the value this thread stored: one of the never-freed shards.
    let s = unsafe { &*s };
    s.held_len.set(0);
    // Release pairs with the Acquire CAS in `claim`: this thread's counts are complete before another
    // thread writes the shard.
    s.in_use.store(false, Ordering::Release);
}

#[inline(always)]
fn shard() -> Option<&'static Shard> {
    let p = MINE.try_with(Cell::get).unwrap_or(core::ptr::null());
    if p.is_null() {
        return claim();
    }
    // SAFETY: shards are never freed.
    Some(unsafe { &*p })
}

#[cold]
#[inline(never)]
fn claim() -> Option<&'static Shard> {
    if GONE.try_with(Cell::get).unwrap_or(true) {
        UNCOUNTED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let n = SHARD_COUNT.load(Ordering::Acquire).min(MAX_SHARDS);
    let mut found = None;
    for cell in &SHARDS[..n] {
        // SAFETY: published shards are never freed.
        if let Some(s) = unsafe { cell.load(Ordering::Acquire).as_ref() }
            // Acquire pairs with the Release store in `shard_exit`.
            && s.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            found = Some(s);
            break;
        }
    }
    if found.is_none() {
        let i = SHARD_COUNT.fetch_add(1, Ordering::AcqRel);
        if i >= MAX_SHARDS {
            UNCOUNTED.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: an anonymous private mapping (zero-filled: an empty shard, `in_use` false).
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                core::mem::size_of::<Shard>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: zeroed memory is a valid Shard (atomics, cells, null pointers).
        let s: &'static Shard = unsafe { &*(p as *const Shard) };
        s.in_use.store(true, Ordering::Relaxed);
        // Release pairs with the Acquire loads in `claim` and the dump.
        SHARDS[i].store(p.cast(), Ordering::Release);
        found = Some(s);
    }
    let s = found?;
    let key = KEY.load(Ordering::Relaxed);
    if key >= 0 {
        // SAFETY: our key; a low key (created in the constructor), so no allocation.
        unsafe {
            libc::pthread_setspecific(key as libc::pthread_key_t, (s as *const Shard).cast())
        };
    }
    let _ = MINE.try_with(|m| m.set(s));
    Some(s)
}

/// The hash of a (lock, site) pair: its top bits place it in a table, its low 32 bits are the
/// overflow index's tag.
#[inline(always)]
fn hash(lock: usize, site: usize) -> usize {
    (lock ^ site.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The entry of (lock, site) in this thread's shard, created if new: at most [`PROBE`] slots of the
/// first table, then the overflow index (a bounded cost whatever the number of pairs).
#[inline(always)]
fn entry(s: &'static Shard, lock: usize, site: usize, obj: Obj) -> Option<&'static Entry> {
    let h = hash(lock, site);
    if let Some(e) = probe_first(s, h, lock, site, obj) {
        return Some(e);
    }
    entry_overflow(s, h, lock, site, obj)
}

/// Looks (lock, site), hashed to `h`, up in the first table: [`PROBE`] slots from the one its top
/// bits name, through their tags (one line of the owner's tag array: the entries themselves are
/// read only on a tag match), taking a free slot if the pair is not there; `None` if the slots are
/// all other pairs'.
#[inline(always)]
fn probe_first(
    s: &'static Shard,
    h: usize,
    lock: usize,
    site: usize,
    obj: Obj,
) -> Option<&'static Entry> {
    let tag = (h >> 16) as u16 | 1;
    let start = h >> (64 - CAP.trailing_zeros());
    for k in 0..PROBE {
        let i = (start + k) & (CAP - 1);
        let t = s.tags[i].get();
        if t == tag {
            let e = &s.entries[i];
            if e.lock.load(Ordering::Relaxed) == lock && e.site.load(Ordering::Relaxed) == site {
                return Some(e);
            }
        } else if t == 0 {
            s.tags[i].set(tag);
            let e = &s.entries[i];
            e.site.store(site, Ordering::Relaxed);
            e.info.store(obj.pack(), Ordering::Relaxed);
            // Release pairs with the dump's Acquire load: `site` and `info` are visible first.
            e.lock.store(lock, Ordering::Release);
            return Some(e);
        }
    }
    None
}

/// Adds `v` to a counter only its owner writes (a load and a store).
#[inline(always)]
fn bump(x: &AtomicU64, v: u64) {
    x.store(x.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// Overflow entry number `i` (< `olen`).
#[inline(always)]
fn oentry(s: &Shard, i: usize) -> &'static Entry {
    // SAFETY: entry `i` < `olen` is in a mapped chunk (mapped before it was counted), never freed.
    unsafe { &(*s.chunks[i / OCAP].get()).entries[i % OCAP] }
}

/// Puts entry number `i`, whose pair hashes to `h`, into an index of `cap` slots with a free one.
fn index_insert(index: *mut u64, cap: usize, h: usize, i: usize) {
    let mut j = h >> (64 - cap.trailing_zeros());
    loop {
        // SAFETY: `j` < `cap`, the index's length; owner only (or the fork child, alone).
        let slot = unsafe { &mut *index.add(j) };
        if *slot == 0 {
            *slot = ((h as u32 as u64) << 32) | (i as u64 + 1);
            return;
        }
        j = (j + 1) & (cap - 1);
    }
}

/// Looks (lock, site), hashed to `h`, up in the overflow index; counts the index slots and entries
/// it examines in `probes`.
#[inline(always)]
fn overflow_find(
    s: &Shard,
    h: usize,
    lock: usize,
    site: usize,
    probes: &mut u64,
) -> Option<&'static Entry> {
    let index = s.index.get();
    if index.is_null() {
        return None;
    }
    let cap = s.icap.get();
    let mut j = h >> (64 - cap.trailing_zeros());
    loop {
        *probes += 1;
        // SAFETY: `j` < `cap`, the index's length; owner only.
        let slot = unsafe { *index.add(j) };
        if slot == 0 {
            return None;
        }
        if (slot >> 32) as u32 == h as u32 {
            *probes += 1;
            let e = oentry(s, (slot as u32 - 1) as usize);
            if e.lock.load(Ordering::Relaxed) == lock && e.site.load(Ordering::Relaxed) == site {
                return Some(e);
            }
        }
        j = (j + 1) & (cap - 1);
    }
}

/// Doubles the overflow index (or maps the first) so that `n + 1` entries leave it at most half
/// full, reinserting the `n` it has; `false` if out of memory.
#[cold]
#[inline(never)]
fn grow_index(s: &Shard, n: usize) -> bool {
    let cap = (2 * (n + 1)).next_power_of_two().max(INDEX_MIN);
    // SAFETY: an anonymous private mapping; zeroed memory is an empty index.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            cap * 8,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    let index = p.cast::<u64>();
    for i in 0..n {
        let e = oentry(s, i);
        let h = hash(
            e.lock.load(Ordering::Relaxed),
            e.site.load(Ordering::Relaxed),
        );
        index_insert(index, cap, h, i);
    }
    drop_index(s);
    s.index.set(index);
    s.icap.set(cap);
    true
}

/// Unmaps the overflow index (owner only, or the fork child).
fn drop_index(s: &Shard) {
    let old = s.index.replace(core::ptr::null_mut());
    let cap = s.icap.replace(0);
    if !old.is_null() {
        // SAFETY: the index's own mapping, of `cap` slots; nobody else reads it.
        unsafe { libc::munmap(old.cast(), cap * 8) };
    }
}

/// A pair that found no slot in the first table: its entry in the overflow arena, through the
/// overflow index; appended (its chunk mapped if new, the index grown if it would be over half
/// full) if it is not there. `None`, counted as dropped, past `OVERFLOWS` chunks or out of memory.
#[cold]
#[inline(never)]
fn entry_overflow(
    s: &'static Shard,
    h: usize,
    lock: usize,
    site: usize,
    obj: Obj,
) -> Option<&'static Entry> {
    let mut probes = 0;
    let found = overflow_find(s, h, lock, site, &mut probes);
    bump(&s.olookups, 1);
    bump(&s.oprobes, probes);
    if found.is_some() {
        return found;
    }
    let n = s.olen.get();
    let k = n / OCAP;
    let room = n < OVERFLOWS * OCAP && (2 * (n + 1) <= s.icap.get() || grow_index(s, n));
    if room && s.chunks[k].get().is_null() {
        let link = match k {
            0 => &s.overflow,
            // SAFETY: chunk k - 1 is mapped (chunks are mapped in order), never freed.
            _ => unsafe { &(*s.chunks[k - 1].get()).next },
        };
        s.chunks[k].set(new_overflow(link));
    }
    if !room || s.chunks[k].get().is_null() {
        bump(&s.dropped, 1);
        return None;
    }
    s.olen.set(n + 1);
    let e = oentry(s, n);
    e.site.store(site, Ordering::Relaxed);
    e.info.store(obj.pack(), Ordering::Relaxed);
    // Release pairs with the dump's Acquire load: `site` and `info` are visible first.
    e.lock.store(lock, Ordering::Release);
    index_insert(s.index.get(), s.icap.get(), h, n);
    Some(e)
}

fn push_held(s: &Shard, lock: usize, e: &Entry, since: u64) {
    let n = s.held_len.get();
    for h in &s.held[..n] {
        // A recursive relock keeps the first hold (its start time).
        let x = h.replace(HeldLock {
            lock: 0,
            entry: core::ptr::null(),
            since: 0,
        });
        let same = x.lock == lock;
        h.set(x);
        if same {
            return;
        }
    }
    if n < HELD {
        s.held[n].set(HeldLock {
            lock,
            entry: e,
            since,
        });
        s.held_len.set(n + 1);
    }
}

// --- the wrappers the entry points call ------------------------------------------------------------------

/// Whether statistics are being kept.
#[inline(always)]
pub(crate) fn on() -> bool {
    config::stat() && (STARTED.load(Ordering::Relaxed) != 0 || start_now())
}

/// Starts the statistics from the configured path on their first use.
#[cold]
#[inline(never)]
fn start_now() -> bool {
    start(config::stat_path());
    true
}

/// An exclusive (`write`) or shared acquisition, timed when it must wait. `try_once` is the family's
/// trylock; `block` its blocking (or timed) call, made only when `try_once` answered `EBUSY`.
#[inline(never)]
pub(crate) fn acquire(
    lock: usize,
    site: usize,
    obj: Obj,
    exclusive: bool,
    try_once: impl FnOnce() -> c_int,
    block: impl FnOnce() -> c_int,
) -> c_int {
    poll_dump();
    let mut r = try_once();
    let mut waited = None;
    let now;
    if r == libc::EBUSY {
        let t0 = ticks();
        r = block();
        now = ticks();
        waited = Some(now.saturating_sub(t0));
    } else {
        now = ticks();
    }
    record(lock, site, obj, exclusive, waited, r, now);
    r
}

/// A trylock: counted when it succeeds (a failed try is no contention: the caller did not wait).
#[inline(never)]
pub(crate) fn try_acquire(
    lock: usize,
    site: usize,
    obj: Obj,
    exclusive: bool,
    try_once: impl FnOnce() -> c_int,
) -> c_int {
    poll_dump();
    let r = try_once();
    if r == 0 || r == libc::EOWNERDEAD {
        record(lock, site, obj, exclusive, None, r, ticks());
    }
    r
}

/// Counts one acquisition attempt that returned `r` at `now`, after waiting `waited` ticks if it
/// had to wait.
#[inline(always)]
fn record(
    lock: usize,
    site: usize,
    obj: Obj,
    exclusive: bool,
    waited: Option<u64>,
    r: c_int,
    now: u64,
) {
    let Some(s) = shard() else { return };
    let Some(e) = entry(s, lock, site, obj) else {
        return;
    };
    if let Some(w) = waited
        && matches!(r, 0 | libc::EOWNERDEAD | libc::ETIMEDOUT)
    {
        if exclusive {
            e.add(c::CONT, 1);
            e.add(c::WAIT_TOTAL, w);
            e.max(c::WAIT_MAX, w);
            e.min1(c::WAIT_MIN1, w);
        } else {
            e.add(c::RD_CONT, 1);
            e.add(c::RD_WAIT_TOTAL, w);
            e.max(c::RD_WAIT_MAX, w);
        }
    }
    if r == 0 || r == libc::EOWNERDEAD {
        if exclusive {
            e.add(c::ACQ, 1);
            push_held(s, lock, e, now);
        } else {
            e.add(c::RD_ACQ, 1);
        }
    }
}

/// The end of an exclusive hold of `lock`, if this thread's stack has it (call before the unlock).
#[inline(never)]
pub(crate) fn release(lock: usize) {
    poll_dump();
    let Some(s) = MINE.try_with(Cell::get).ok().filter(|p| !p.is_null()) else {
        return;
    };
    // SAFETY: shards are never freed.
    let s = unsafe { &*s };
    let n = s.held_len.get();
    for i in (0..n).rev() {
        let h = s.held[i].replace(HeldLock {
            lock: 0,
            entry: core::ptr::null(),
            since: 0,
        });
        if h.lock != lock {
            s.held[i].set(h);
            continue;
        }
        // Close the gap.
        for j in i..n - 1 {
            s.held[j].set(s.held[j + 1].replace(HeldLock {
                lock: 0,
                entry: core::ptr::null(),
                since: 0,
            }));
        }
        s.held_len.set(n - 1);
        // SAFETY: entries live in never-freed shards.
        let e = unsafe { &*h.entry };
        // A fork in between may have cleared the record (then it belongs to no lock).
        if e.lock.load(Ordering::Relaxed) == lock {
            let d = ticks().saturating_sub(h.since);
            e.add(c::HOLDS, 1);
            e.add(c::HOLD_TOTAL, d);
            e.max(c::HOLD_MAX, d);
            e.min1(c::HOLD_MIN1, d);
        }
        return;
    }
}

/// A condvar wait on `cond` with `mutex`: the mutex's hold ends before, a new one starts after (an
/// acquisition at this site), and the time blocked is the condvar's.
pub(crate) fn cond_wait(
    cond: usize,
    mutex: usize,
    mutex_obj: Obj,
    site: usize,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    release(mutex);
    let t0 = ticks();
    let r = wait();
    let now = ticks();
    if let Some(s) = shard() {
        if let Some(e) = entry(s, cond, site, Obj::Cond) {
            e.add(c::COND_WAITS, 1);
            e.add(c::COND_WAIT_TOTAL, now.saturating_sub(t0));
            if r == libc::ETIMEDOUT {
                e.add(c::COND_TIMEOUTS, 1);
            }
        }
        if (r == 0 || r == libc::ETIMEDOUT || r == libc::EOWNERDEAD)
            && let Some(e) = entry(s, mutex, site, mutex_obj)
        {
            e.add(c::ACQ, 1);
            push_held(s, mutex, e, now);
        }
    }
    r
}

/// A `signal` (`all`: a broadcast) of `cond` at `site`.
pub(crate) fn notify(cond: usize, site: usize, all: bool) {
    poll_dump();
    if let Some(s) = shard()
        && let Some(e) = entry(s, cond, site, Obj::Cond)
    {
        e.add(if all { c::BROADCASTS } else { c::SIGNALS }, 1);
    }
}

// --- start, fork, exec, signal ---------------------------------------------------------------------------

/// Longest path template kept.
const PATH_MAX: usize = 4096;
/// A byte buffer in a static, written by one thread at a time (each use says why).
struct Buf<const N: usize>(core::cell::UnsafeCell<[u8; N]>);

// SAFETY: every access is serialised by its users (see each `get`).
unsafe impl<const N: usize> Sync for Buf<N> {}

impl<const N: usize> Buf<N> {
    const fn new() -> Self {
        Buf(core::cell::UnsafeCell::new([0; N]))
    }
    /// # Safety
    /// No other reference to the buffer is live.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get(&self) -> &mut [u8; N] {
        // SAFETY: the caller's exclusivity.
        unsafe { &mut *self.0.get() }
    }
}

/// The path template (`LOCKLAB_STAT`), NUL-terminated.
static TEMPLATE: Buf<PATH_MAX> = Buf::new();
/// The file this process writes: its name (NUL-terminated), descriptor, device and inode.
static OUT_NAME: Buf<{ PATH_MAX + 32 }> = Buf::new();
static OUT_FD: AtomicI32 = AtomicI32::new(-1);
static OUT_DEV: AtomicU64 = AtomicU64::new(0);
static OUT_INO: AtomicU64 = AtomicU64::new(0);
/// The process that opened the file (a `vfork` child, which shares our memory, must not write it).
static OUT_PID: AtomicI32 = AtomicI32::new(0);
/// SIGUSR1 asked for a dump.
static DUMP_ASKED: AtomicBool = AtomicBool::new(false);
/// A dump is being written (another request meanwhile is dropped).
static DUMPING: AtomicBool = AtomicBool::new(false);
/// 0: not started; 1: started.
static STARTED: AtomicU8 = AtomicU8::new(0);

/// Starts counting with `path` as the template (from `config::load`, once, when `LOCKLAB_STAT` is
/// set and non-empty).
fn start(path: &[u8]) {
    if STARTED.swap(1, Ordering::Relaxed) != 0 {
        return;
    }
    let n = path.len().min(PATH_MAX - 1);
    // SAFETY: written once, here, before `on()` turns true (config stores the flag after this call).
    unsafe {
        let t = TEMPLATE.get();
        t[..n].copy_from_slice(&path[..n]);
        t[n] = 0;
    }
    START_TICKS.store(ticks(), Ordering::Relaxed);
    START_NS.store(monotonic_ns(), Ordering::Relaxed);
    open_output(false);
}

/// Gives the statistics' thread-exit key back to a process that ran out of keys (shards of threads
/// that exit afterwards are not reused; their counts stay in the dump). `true` if one was freed.
pub(crate) fn give_up_key() -> bool {
    let k = KEY.swap(-2, Ordering::Relaxed);
    // SAFETY: our key; glibc runs no destructor of a deleted key.
    k >= 0 && unsafe { libc::pthread_key_delete(k as libc::pthread_key_t) } == 0
}

/// The constructor's part: the thread-exit key, the SIGUSR1 handler (only if the program's
/// disposition is the default) and the destructor's registration are done once libc is up.
pub(crate) fn init() {
    if !on() {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and destructor.
    if unsafe { libc::pthread_key_create(&mut key, Some(shard_exit)) } == 0 {
        KEY.store(key as i32, Ordering::Relaxed);
    }
    // SAFETY: querying, then installing, a handler that only stores to an atomic.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(libc::SIGUSR1, core::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_DFL
        {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_sigusr1 as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, core::ptr::null_mut());
        }
    }
}

extern "C" fn on_sigusr1(_: c_int) {
    DUMP_ASKED.store(true, Ordering::Relaxed);
}

#[inline(always)]
fn poll_dump() {
    if DUMP_ASKED.load(Ordering::Relaxed) {
        asked_dump();
    }
}

#[cold]
#[inline(never)]
fn asked_dump() {
    if DUMP_ASKED.swap(false, Ordering::Relaxed) {
        dump(b"signal");
    }
}

/// The destructor: the table at exit.
pub(crate) fn at_exit() {
    if on() {
        dump(b"exit");
    }
}

/// Before an `exec*`: the table of the image about to be replaced (not from a child of `vfork`,
/// which runs in our memory until it execs).
pub(crate) fn before_exec() {
    // SAFETY: no arguments.
    if on() && unsafe { libc::getpid() } == OUT_PID.load(Ordering::Relaxed) {
        dump(b"exec");
    }
}

/// In the child of `fork` (the only thread): counts start from zero, every other thread's shard is
/// free, and the child opens its own file.
pub(crate) fn after_fork_child() {
    if !on() {
        return;
    }
    let mine = MINE.try_with(Cell::get).unwrap_or(core::ptr::null());
    let n = SHARD_COUNT.load(Ordering::Relaxed).min(MAX_SHARDS);
    for cell in &SHARDS[..n] {
        let p = cell.load(Ordering::Relaxed);
        // SAFETY: published shards are never freed; the child has one thread.
        let Some(s) = (unsafe { p.as_ref() }) else {
            continue;
        };
        for e in tables(s).flatten() {
            if e.lock.load(Ordering::Relaxed) != 0 {
                e.lock.store(0, Ordering::Relaxed);
                e.site.store(0, Ordering::Relaxed);
                for x in &e.c {
                    x.store(0, Ordering::Relaxed);
                }
            }
        }
        s.dropped.store(0, Ordering::Relaxed);
        s.olookups.store(0, Ordering::Relaxed);
        s.oprobes.store(0, Ordering::Relaxed);
        // The arena's entries are cleared above: it refills from its first chunk.
        s.olen.set(0);
        drop_index(s);
        for t in &s.tags {
            t.set(0);
        }
        if !core::ptr::eq(p, mine) {
            s.held_len.set(0);
            s.in_use.store(false, Ordering::Relaxed);
        }
    }
    UNCOUNTED.store(0, Ordering::Relaxed);
    DUMPING.store(false, Ordering::Relaxed);
    DUMP_ASKED.store(false, Ordering::Relaxed);
    let fd = OUT_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the parent's descriptor, inherited; ours to close in the child.
        unsafe { libc::close(fd) };
    }
    open_output(false);
}

/// Appends `src` to `buf` at `*n`, truncating at the end.
pub(crate) fn put(buf: &mut [u8], n: &mut usize, src: &[u8]) {
    let k = src.len().min(buf.len().saturating_sub(*n));
    buf[*n..*n + k].copy_from_slice(&src[..k]);
    *n += k;
}

pub(crate) fn put_u64(buf: &mut [u8], n: &mut usize, v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut v = v;
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    put(buf, n, &tmp[i..]);
}

/// Opens this process's file (`again`: the earlier descriptor was lost; reuse the name).
fn open_output(again: bool) {
    // SAFETY: the template is written once in `start`; the name only by this function, which runs in
    // `start`, in the child after fork, and in a dump (one at a time: `DUMPING`).
    let (template, name) = unsafe { (&*TEMPLATE.get(), OUT_NAME.get()) };
    let tlen = template.iter().position(|&b| b == 0).unwrap_or(0);
    let template = &template[..tlen];
    let has_pid = template.windows(2).any(|w| w == b"%p");
    let mut flags = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
    let fd = if again {
        // SAFETY: a NUL-terminated name.
        unsafe { libc::open(name.as_ptr().cast(), flags, 0o644) }
    } else {
        let mut fd = -1;
        for attempt in 0..100u64 {
            let mut n = 0;
            let mut i = 0;
            while i < template.len() {
                if template[i..].starts_with(b"%p") {
                    // SAFETY: no arguments.
                    put_u64(name, &mut n, unsafe { libc::getpid() } as u64);
                    if attempt > 0 {
                        put(name, &mut n, b"-");
                        put_u64(name, &mut n, attempt);
                    }
                    i += 2;
                } else {
                    put(name, &mut n, &template[i..i + 1]);
                    i += 1;
                }
            }
            let n = n.min(name.len() - 1);
            name[n] = 0;
            flags |= if has_pid { libc::O_EXCL } else { libc::O_TRUNC };
            // SAFETY: a NUL-terminated name.
            fd = unsafe { libc::open(name.as_ptr().cast(), flags, 0o644) };
            if fd >= 0 || !has_pid || sys::errno() != libc::EEXIST {
                break;
            }
        }
        fd
    };
    if fd < 0 {
        return;
    }
    // SAFETY: all-zero is a valid `struct stat` (integers only).
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: our descriptor and a valid out-pointer.
    unsafe { libc::fstat(fd, &mut st) };
    OUT_DEV.store(st.st_dev, Ordering::Relaxed);
    OUT_INO.store(st.st_ino, Ordering::Relaxed);
    OUT_FD.store(fd, Ordering::Relaxed);
    // SAFETY: no arguments.
    OUT_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// Our descriptor, if it is still our file (a program may close every descriptor it does not know,
/// and reuse the number).
fn output_fd() -> Option<c_int> {
    let check = |fd: c_int| {
        // SAFETY: all-zero is a valid `struct stat` (integers only).
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: any descriptor number; a valid out-pointer.
        fd >= 0
            && unsafe { libc::fstat(fd, &mut st) } == 0
            && st.st_dev == OUT_DEV.load(Ordering::Relaxed)
            && st.st_ino == OUT_INO.load(Ordering::Relaxed)
    };
    let fd = OUT_FD.load(Ordering::Relaxed);
    if check(fd) {
        return Some(fd);
    }
    open_output(true);
    let fd = OUT_FD.load(Ordering::Relaxed);
    (fd >= 0).then_some(fd)
}

// --- the dump --------------------------------------------------------------------------------------------

/// A merged record.
#[derive(Clone, Copy)]
struct Rec {
    lock: usize,
    site: usize,
    info: u32,
    c: [u64; c::N],
}

/// Memory from `mmap` for `n` records (no allocation: a dump may run inside the program's `malloc`).
struct Scratch {
    p: *mut Rec,
    len: usize,
}

impl Scratch {
    fn new(n: usize) -> Option<Scratch> {
        let bytes = n.max(1) * core::mem::size_of::<Rec>();
        // SAFETY: an anonymous private mapping.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| Scratch {
            p: p.cast(),
            len: n.max(1),
        })
    }
    fn slice(&mut self) -> &mut [Rec] {
        // SAFETY: zero-filled memory for `len` records (all-zero is a valid Rec), ours alone.
        unsafe { core::slice::from_raw_parts_mut(self.p, self.len) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.p.cast(), self.len * core::mem::size_of::<Rec>()) };
    }
}

/// Writes the JSON file. Never allocates and never fails loudly; one dump at a time.
fn dump(reason: &[u8]) {
    if DUMPING.swap(true, Ordering::Acquire) {
        return;
    }
    let e = sys::errno();
    write_dump(reason);
    sys::set_errno(e);
    DUMPING.store(false, Ordering::Release);
}

fn write_dump(reason: &[u8]) {
    let Some(fd) = output_fd() else { return };
    let shards = SHARD_COUNT.load(Ordering::Acquire).min(MAX_SHARDS);
    // Count the records to size the merge table.
    let mut used = 0usize;
    let mut dropped = 0u64;
    let (mut olookups, mut oprobes) = (0u64, 0u64);
    for cell in &SHARDS[..shards] {
        // SAFETY: published shards are never freed.
        let Some(s) = (unsafe { cell.load(Ordering::Acquire).as_ref() }) else {
            continue;
        };
        dropped += s.dropped.load(Ordering::Relaxed);
        olookups += s.olookups.load(Ordering::Relaxed);
        oprobes += s.oprobes.load(Ordering::Relaxed);
        used += tables(s)
            .flatten()
            .filter(|e| e.lock.load(Ordering::Relaxed) != 0)
            .count();
    }
    let cap = (used * 2).next_power_of_two().max(16);
    let Some(mut table) = Scratch::new(cap) else {
        return;
    };
    let t = table.slice();
    let mut records = 0usize;
    for cell in &SHARDS[..shards] {
        // SAFETY: as above.
        let Some(s) = (unsafe { cell.load(Ordering::Acquire).as_ref() }) else {
            continue;
        };
        for e in tables(s).flatten() {
            // Acquire pairs with the Release store that published the entry.
            let lock = e.lock.load(Ordering::Acquire);
            if lock == 0 {
                continue;
            }
            let site = e.site.load(Ordering::Relaxed);
            let h = (lock ^ site.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            // The top bits: the low bits of a product of aligned addresses barely vary, which made
            // every probe sequence long (a dump quadratic in its records).
            let mut i = h >> (64 - cap.trailing_zeros());
            let mut placed = false;
            for _ in 0..cap {
                let r = &mut t[i];
                if r.lock == 0 {
                    if records >= used {
                        break;
                    }
                    r.lock = lock;
                    r.site = site;
                    r.info = e.info.load(Ordering::Relaxed);
                    records += 1;
                }
                if r.lock == lock && r.site == site {
                    for k in 0..c::N {
                        let v = e.c[k].load(Ordering::Relaxed);
                        if c::MAXES.contains(&k) {
                            r.c[k] = r.c[k].max(v);
                        } else if c::MINS.contains(&k) {
                            if v != 0 && (r.c[k] == 0 || v < r.c[k]) {
                                r.c[k] = v;
                            }
                        } else {
                            r.c[k] = r.c[k].wrapping_add(v);
                        }
                    }
                    placed = true;
                    break;
                }
                i = (i + 1) & (cap - 1);
            }
            if !placed {
                dropped += 1;
            }
        }
    }
    // Compact, then sort by total wait (exclusive + read + condvar), the table's order.
    let mut k = 0;
    for i in 0..cap {
        if t[i].lock != 0 {
            t.swap(k, i);
            k += 1;
        }
    }
    let recs = &mut t[..k];
    let locks = count_locks(recs);
    let wait = |r: &Rec| r.c[c::WAIT_TOTAL] + r.c[c::RD_WAIT_TOTAL];
    recs.sort_unstable_by(|a, b| wait(b).cmp(&wait(a)).then(b.c[c::ACQ].cmp(&a.c[c::ACQ])));
    let scale = ns_per_tick();
    // Into a temporary file beside ours, renamed over it once complete: a process that ends in the
    // middle of a dump (another thread exits during a SIGUSR1 snapshot) leaves the last complete
    // table, never a truncated one. Where no file can be created any more (privileges dropped),
    // the table is rewritten in place.
    let dump = |to: c_int| {
        let mut w = Writer::new(to);
        write_json(
            &mut w,
            reason,
            recs,
            scale,
            (dropped, olookups, oprobes),
            locks,
        );
        w.finish();
        w.ok
    };
    if let Some((tmp_fd, tmp_name)) = open_temp(fd) {
        // SAFETY: NUL-terminated names (ours).
        let renamed = dump(tmp_fd)
            && unsafe { libc::rename(tmp_name.as_ptr().cast(), OUT_NAME.get().as_ptr().cast()) }
                == 0;
        if renamed {
            adopt(tmp_fd);
            // SAFETY: our previous descriptor, whose file the rename replaced.
            unsafe { libc::close(fd) };
            return;
        }
        // SAFETY: our temporary file and descriptor.
        unsafe {
            libc::unlink(tmp_name.as_ptr().cast());
            libc::close(tmp_fd);
        }
    }
    dump(fd);
}

/// Creates `<our file>.tmp` for a dump: its descriptor and NUL-terminated name. Only when the name
/// is absolute and names, itself (no symbolic link), the regular file `fd` has open: anything else
/// (`/dev/null`, a pipe, a link the user made) is rewritten in place, never replaced.
fn open_temp(fd: c_int) -> Option<(c_int, [u8; PATH_MAX + 40])> {
    // SAFETY: the name is written only by `open_output`, which runs in a dump (one at a time:
    // `DUMPING`) or before any.
    let name = unsafe { &*OUT_NAME.get() };
    let len = name.iter().position(|&b| b == 0)?;
    // A relative name would resolve against the program's current directory, which it may have
    // changed since the file was opened: such a file is rewritten in place.
    if name.first() != Some(&b'/') {
        return None;
    }
    // SAFETY: all-zero is a valid `struct stat` (integers only); valid pointers.
    let (mut st, mut lst): (libc::stat, libc::stat) = unsafe { core::mem::zeroed() };
    // SAFETY: our descriptor, a NUL-terminated name, valid out-pointers.
    let same_regular = unsafe {
        libc::fstat(fd, &mut st) == 0 && libc::lstat(name.as_ptr().cast(), &mut lst) == 0
    } && st.st_mode & libc::S_IFMT == libc::S_IFREG
        && lst.st_mode & libc::S_IFMT == libc::S_IFREG
        && (st.st_dev, st.st_ino) == (lst.st_dev, lst.st_ino);
    if !same_regular {
        return None;
    }
    let mut tmp = [0u8; PATH_MAX + 40];
    let mut n = 0;
    put(&mut tmp, &mut n, &name[..len]);
    put(&mut tmp, &mut n, b".tmp");
    if n >= tmp.len() {
        return None;
    }
    tmp[n] = 0;
    // SAFETY: a NUL-terminated name.
    let fd = unsafe {
        libc::open(
            tmp.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o644,
        )
    };
    (fd >= 0).then_some((fd, tmp))
}

/// Makes `fd` (now at our file's name) the descriptor of our file.
fn adopt(fd: c_int) {
    // SAFETY: all-zero is a valid `struct stat` (integers only).
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: our descriptor and a valid out-pointer.
    unsafe { libc::fstat(fd, &mut st) };
    OUT_DEV.store(st.st_dev, Ordering::Relaxed);
    OUT_INO.store(st.st_ino, Ordering::Relaxed);
    OUT_FD.store(fd, Ordering::Relaxed);
}

/// A buffered writer to a descriptor, from the start of the file; errors end the writing quietly.
struct Writer {
    fd: c_int,
    buf: [u8; 8192],
    n: usize,
    off: i64,
    /// Every write so far succeeded.
    ok: bool,
}

impl Writer {
    fn new(fd: c_int) -> Writer {
        // SAFETY: our descriptor: the file is rewritten from the start.
        let ok = unsafe { libc::ftruncate(fd, 0) } == 0;
        Writer {
            fd,
            buf: [0; 8192],
            n: 0,
            off: 0,
            ok,
        }
    }
    fn flush(&mut self) {
        let mut done = 0;
        while self.ok && done < self.n {
            // SAFETY: a valid buffer range; our descriptor.
            let r = unsafe {
                libc::pwrite(
                    self.fd,
                    self.buf[done..self.n].as_ptr().cast(),
                    self.n - done,
                    self.off,
                )
            };
            if r <= 0 {
                self.ok = false;
                break;
            }
            done += r as usize;
            self.off += r as i64;
        }
        self.n = 0;
    }
    fn s(&mut self, b: &[u8]) -> &mut Self {
        for chunk in b.chunks(4096) {
            if self.n + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.n..self.n + chunk.len()].copy_from_slice(chunk);
            self.n += chunk.len();
        }
        self
    }
    fn u(&mut self, v: u64) -> &mut Self {
        let mut tmp = [0u8; 20];
        let mut n = 0;
        put_u64(&mut tmp, &mut n, v);
        self.s(&tmp[..n])
    }
    fn hex(&mut self, v: usize) -> &mut Self {
        let mut tmp = [0u8; 18];
        tmp[0] = b'0';
        tmp[1] = b'x';
        let mut n = 2;
        let digits = (usize::BITS - v.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            tmp[n] = b"0123456789abcdef"[(v >> (i * 4)) & 15];
            n += 1;
        }
        self.s(&tmp[..n])
    }
    /// A JSON string (escaped).
    fn q(&mut self, b: &[u8]) -> &mut Self {
        self.s(b"\"");
        for &ch in b {
            match ch {
                b'"' => self.s(b"\\\""),
                b'\\' => self.s(b"\\\\"),
                0..=0x1f | 0x7f..=0xff => {
                    let hx = b"0123456789abcdef";
                    self.s(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        hx[(ch >> 4) as usize],
                        hx[(ch & 15) as usize],
                    ])
                }
                _ => self.s(&[ch]),
            };
        }
        self.s(b"\"")
    }
    /// `,"name":`, a field's key after the first.
    fn key(&mut self, name: &str) -> &mut Self {
        self.s(b",\"").s(name.as_bytes()).s(b"\":")
    }
    /// `{"name":`, an object's first key.
    fn first_key(&mut self, name: &str) -> &mut Self {
        self.s(b"{\"").s(name.as_bytes()).s(b"\":")
    }
    fn finish(&mut self) {
        self.flush();
    }
}

/// `dladdr` of an address: (object path, object base, symbol name, symbol address, symbol size if
/// known).
/// A symbol: its name, address and size (0 if unknown).
pub(crate) type Sym = (&'static [u8], usize, usize);

pub(crate) fn symbolise(addr: usize) -> Option<(&'static [u8], usize, Option<Sym>)> {
    if addr == 0 {
        return None;
    }
    // SAFETY: all-zero is a valid `Dl_info` (null pointers).
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let mut sym: *const libc::Elf64_Sym = core::ptr::null();
    // SAFETY: valid out-pointers; RTLD_DL_SYMENT (2) stores the symbol's table entry.
    let ok = unsafe {
        dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&raw mut sym).cast(),
            2,
        )
    };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's strings live as long as the object stays loaded (a dump runs before unload).
    let mut fname = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    if !fname.starts_with(b"/") {
        // The main program is named as it was started (`./t`, or empty): name it by its path.
        fname = exe_path();
    }
    let s = if info.dli_sname.is_null() {
        None
    } else {
        // SAFETY: as above.
        let name = unsafe { core::ffi::CStr::from_ptr(info.dli_sname) }.to_bytes();
        // SAFETY: the symbol entry dladdr1 gave, if any.
        let size = unsafe { sym.as_ref() }.map_or(0, |s| s.st_size as usize);
        Some((name, info.dli_saddr as usize, size))
    };
    Some((fname, info.dli_fbase as usize, s))
}

unsafe extern "C" {
    fn dladdr1(
        addr: *const libc::c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut libc::c_void,
        flags: c_int,
    ) -> c_int;
}

/// `/proc/self/exe`, read once per dump (a dump at a time).
fn exe_path() -> &'static [u8] {
    static EXE: Buf<1024> = Buf::new();
    static LEN: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: written only here, during a dump (one at a time: `DUMPING`).
    let buf = unsafe { EXE.get() };
    let mut n = LEN.load(Ordering::Relaxed);
    if n == 0 {
        // SAFETY: a NUL-terminated path and a valid buffer.
        let r = unsafe {
            libc::readlink(
                c"/proc/self/exe".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        n = r.max(0) as usize;
        LEN.store(n, Ordering::Relaxed);
    }
    &buf[..n]
}

fn basename(p: &[u8]) -> &[u8] {
    p.rsplit(|&b| b == b'/').next().unwrap_or(p)
}

/// Distinct locks (condvars aside) among `recs`, and how many of them were contended: sorted by
/// lock first, so one pass counts them.
fn count_locks(recs: &mut [Rec]) -> (u64, u64) {
    recs.sort_unstable_by_key(|r| r.lock);
    let (mut used, mut contended) = (0u64, 0u64);
    let mut i = 0;
    while i < recs.len() {
        let lock = recs[i].lock;
        let (mut lock_seen, mut lock_contended) = (false, false);
        while i < recs.len() && recs[i].lock == lock {
            let r = &recs[i];
            if r.info & 15 != 3 {
                lock_seen = true;
                lock_contended |= r.c[c::CONT] + r.c[c::RD_CONT] > 0;
            }
            i += 1;
        }
        used += lock_seen as u64;
        contended += lock_contended as u64;
    }
    (used, contended)
}

fn write_json(
    w: &mut Writer,
    reason: &[u8],
    recs: &[Rec],
    scale: f64,
    (dropped, olookups, oprobes): (u64, u64, u64),
    (locks_used, locks_contended): (u64, u64),
) {
    let ns = |t: u64| (t as f64 * scale).round() as u64;
    let exe = exe_path();
    // SAFETY: no arguments.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    w.first_key(schema::PID)
        .u(pid as u64)
        .key(schema::PPID)
        .u(ppid as u64)
        .key(schema::EXE)
        .q(exe);
    w.key(schema::REASON).q(reason);
    for (key, names, code) in [
        (
            schema::MUTEX,
            &config::MUTEX_STAT_NAMES[..],
            config::mutex() as u8,
        ),
        (
            schema::RWLOCK,
            &config::RWLOCK_STAT_NAMES[..],
            config::rwlock() as u8,
        ),
        (schema::SPIN, &config::SPIN_NAMES[..], config::spin() as u8),
    ] {
        w.key(key).q(config::name_of(names, code).as_bytes());
    }
    w.key(schema::NS_PER_TICK);
    // Six decimals, without float formatting machinery that might allocate.
    let micro = (scale * 1e6).round() as u64;
    w.u(micro / 1_000_000).s(b".");
    let frac = micro % 1_000_000;
    let mut tmp = [b'0'; 6];
    let mut f = frac;
    for i in (0..6).rev() {
        tmp[i] = b'0' + (f % 10) as u8;
        f /= 10;
    }
    w.s(&tmp);
    w.key(schema::LOCKS_USED)
        .u(locks_used)
        .key(schema::LOCKS_CONTENDED)
        .u(locks_contended);
    // Shards are reused when their thread exits, so their count is the most threads that had
    // taken a lock and were alive at once (the advice's thread count).
    w.key(schema::THREADS_PEAK)
        .u(SHARD_COUNT.load(Ordering::Relaxed).min(MAX_SHARDS) as u64);
    w.key(schema::DROPPED)
        .u(dropped)
        .key(schema::UNCOUNTED)
        .u(UNCOUNTED.load(Ordering::Relaxed));
    w.key(schema::OVERFLOW_LOOKUPS)
        .u(olookups)
        .key(schema::OVERFLOW_PROBES)
        .u(oprobes);
    w.key(schema::RECORDS).s(b"[");
    for (i, r) in recs.iter().enumerate() {
        if i > 0 {
            w.s(b",");
        }
        let (kind, algo) = describe(r.info);
        w.s(b"\n")
            .first_key(schema::LOCK)
            .s(b"\"")
            .hex(r.lock)
            .s(b"\"");
        w.key(schema::LOCK_NAME);
        match symbolise(r.lock) {
            Some((_, _, Some((name, at, size)))) if r.lock >= at && r.lock < at + size.max(1) => {
                w.s(b"\"");
                w.s(&json_safe(name));
                if r.lock > at {
                    w.s(b"+").hex(r.lock - at);
                }
                w.s(b"\"");
            }
            _ => {
                w.s(b"null");
            }
        }
        w.key(schema::KIND)
            .q(kind.as_bytes())
            .key(schema::ALGORITHM)
            .q(algo.as_bytes());
        w.key(schema::SITE_ADDR).s(b"\"").hex(r.site).s(b"\"");
        w.key(schema::SITE);
        match symbolise(r.site) {
            Some((obj, base, sym)) => {
                w.s(b"\"");
                match sym {
                    Some((name, at, _)) => {
                        w.s(&json_safe(name)).s(b"+").hex(r.site - at);
                        w.s(b" (").s(&json_safe(basename(obj))).s(b")\"");
                    }
                    None => {
                        w.s(&json_safe(basename(obj)))
                            .s(b"+")
                            .hex(r.site - base)
                            .s(b"\"");
                    }
                }
                w.key(schema::OBJECT)
                    .q(obj)
                    .key(schema::OBJECT_OFFSET)
                    .u((r.site - base) as u64);
            }
            None => {
                w.s(b"null")
                    .key(schema::OBJECT)
                    .s(b"null")
                    .key(schema::OBJECT_OFFSET)
                    .s(b"null");
            }
        }
        for (name, k) in schema::RECORD_COUNTERS.into_iter().zip(c::WRITTEN) {
            let mut v = r.c[k];
            if c::MINS.contains(&k) {
                v = v.saturating_sub(1);
            }
            if c::TIMES.contains(&k) {
                v = ns(v);
            }
            w.key(name).u(v);
        }
        w.s(b"}");
    }
    w.s(b"\n]}\n");
}

/// A name's bytes with anything JSON would need escaped replaced by `?` (symbol names never have
/// such characters; this keeps the writer simple where names are spliced into a string).
fn json_safe(b: &[u8]) -> JsonSafe<'_> {
    JsonSafe(b)
}

struct JsonSafe<'a>(&'a [u8]);

impl core::ops::Deref for JsonSafe<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self
            .0
            .iter()
            .all(|&c| (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\')
        {
            self.0
        } else {
            b"?"
        }
    }
}
