//! What is counted and where: the counters of a (lock, call site) record, the per-thread shards
//! (open-addressed tables in `mmap`ed memory, then an overflow arena behind a growable index), and
//! the per-thread stack of held locks that times holds.

use super::*;

/// Counter indices of an [`Entry`]. The first six are what an uncontended acquisition and its
/// release write: with the pair's key they fill the entry's first cache line.
pub(super) mod c {
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
    pub(super) fn pack(self) -> u32 {
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
pub(super) fn describe(info: u32) -> (&'static str, &'static str) {
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
pub(super) struct Entry {
    pub(super) lock: AtomicUsize,
    pub(super) site: AtomicUsize,
    pub(super) c: [AtomicU64; c::N],
    pub(super) info: AtomicU32,
}

impl Entry {
    #[inline(always)]
    pub(super) fn add(&self, i: usize, v: u64) {
        // Single writer: a load and a store, no locked instruction.
        let x = &self.c[i];
        x.store(x.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
    }
    #[inline(always)]
    pub(super) fn max(&self, i: usize, v: u64) {
        if v > self.c[i].load(Ordering::Relaxed) {
            self.c[i].store(v, Ordering::Relaxed);
        }
    }
    #[inline(always)]
    pub(super) fn min1(&self, i: usize, v: u64) {
        let cur = self.c[i].load(Ordering::Relaxed);
        if cur == 0 || v + 1 < cur {
            self.c[i].store(v + 1, Ordering::Relaxed);
        }
    }
}

/// Records in a shard's first table (a power of two).
pub(super) const CAP: usize = 1024;
/// Records in each overflow chunk: a thread's pairs that find no slot in the first table are
/// appended to its overflow arena, chunks mapped on demand (only the pages touched cost memory),
/// and found through the shard's overflow index.
pub(super) const OCAP: usize = 16384;
/// Overflow chunks per shard at most: pairs beyond `CAP + OVERFLOWS * OCAP` (over a million) in one
/// thread are counted as dropped.
pub(super) const OVERFLOWS: usize = 64;
/// Slots the overflow index starts with (a power of two); it doubles to stay at most half full.
pub(super) const INDEX_MIN: usize = 4096;
/// Slots a lookup probes in the first table before it goes to the overflow index: a full first
/// table costs a bounded look, never a scan.
pub(super) const PROBE: usize = 4;
/// Held locks remembered per thread for hold times.
pub(super) const HELD: usize = 16;
/// Shards at most (threads alive at once; a thread beyond counts nothing).
pub(super) const MAX_SHARDS: usize = 4096;

#[repr(C)]
pub(super) struct HeldLock {
    pub(super) lock: usize,
    pub(super) entry: *const Entry,
    pub(super) since: u64,
}

/// One thread's counters.
#[repr(C)]
pub(super) struct Shard {
    /// Claimed by a live thread.
    pub(super) in_use: AtomicBool,
    /// Records that did not fit.
    pub(super) dropped: AtomicU64,
    /// Lookups past the first table, and the slots they examined there (owner writes).
    pub(super) olookups: AtomicU64,
    pub(super) oprobes: AtomicU64,
    /// Owner only.
    pub(super) held_len: Cell<usize>,
    pub(super) held: [Cell<HeldLock>; HELD],
    /// The first overflow chunk (null until needed); each links the next (for the dump).
    pub(super) overflow: AtomicPtr<Overflow>,
    /// Owner only: the overflow chunks in order, how many entries they hold (filled in order), and
    /// the overflow index: `icap` slots (a power of two, at most half full), each 0 (empty) or the
    /// low 32 bits of the pair's hash above the entry's number plus one. Only the owner reads the
    /// index (the dump walks the chunks), so it is replaced and unmapped when it grows.
    pub(super) chunks: [Cell<*mut Overflow>; OVERFLOWS],
    pub(super) olen: Cell<usize>,
    pub(super) index: Cell<*mut u64>,
    pub(super) icap: Cell<usize>,
    /// Owner only: a 16-bit tag of the pair in each slot of the first table (never 0), 0 if free.
    pub(super) tags: [Cell<u16>; CAP],
    pub(super) entries: [Entry; CAP],
}

/// An overflow chunk of a shard (anonymous `mmap`, never freed).
#[repr(C)]
pub(super) struct Overflow {
    pub(super) next: AtomicPtr<Overflow>,
    pub(super) entries: [Entry; OCAP],
}

/// A shard's tables, first to last, and each overflow table's slot for the next.
pub(super) fn tables(s: &'static Shard) -> impl Iterator<Item = &'static [Entry]> {
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
pub(super) fn new_overflow(link: &AtomicPtr<Overflow>) -> *mut Overflow {
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

pub(super) static SHARDS: [AtomicPtr<Shard>; MAX_SHARDS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_SHARDS];
pub(super) static SHARD_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Operations not counted: a thread with no shard (all taken, or its own already returned at exit).
pub(super) static UNCOUNTED: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// This thread's shard (null: none yet, or returned). No destructor.
    pub(super) static MINE: Cell<*const Shard> = const { Cell::new(core::ptr::null()) };
    /// The shard was returned at this thread's exit: count nothing more.
    static GONE: Cell<bool> = const { Cell::new(false) };
}

/// The pthread key whose destructor returns a thread's shard (-1: none).
pub(super) static KEY: AtomicI32 = AtomicI32::new(-1);

pub(super) unsafe extern "C" fn shard_exit(p: *mut libc::c_void) {
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
pub(super) fn shard() -> Option<&'static Shard> {
    let p = MINE.try_with(Cell::get).unwrap_or(core::ptr::null());
    if p.is_null() {
        return claim();
    }
    // SAFETY: shards are never freed.
    Some(unsafe { &*p })
}

#[cold]
#[inline(never)]
pub(super) fn claim() -> Option<&'static Shard> {
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
pub(super) fn hash(lock: usize, site: usize) -> usize {
    (lock ^ site.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The entry of (lock, site) in this thread's shard, created if new: at most [`PROBE`] slots of the
/// first table, then the overflow index (a bounded cost whatever the number of pairs).
#[inline(always)]
pub(super) fn entry(
    s: &'static Shard,
    lock: usize,
    site: usize,
    obj: Obj,
) -> Option<&'static Entry> {
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
pub(super) fn probe_first(
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
pub(super) fn bump(x: &AtomicU64, v: u64) {
    x.store(x.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// Overflow entry number `i` (< `olen`).
#[inline(always)]
pub(super) fn oentry(s: &Shard, i: usize) -> &'static Entry {
    // SAFETY: entry `i` < `olen` is in a mapped chunk (mapped before it was counted), never freed.
    unsafe { &(*s.chunks[i / OCAP].get()).entries[i % OCAP] }
}

/// Puts entry number `i`, whose pair hashes to `h`, into an index of `cap` slots with a free one.
pub(super) fn index_insert(index: *mut u64, cap: usize, h: usize, i: usize) {
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
pub(super) fn overflow_find(
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
pub(super) fn grow_index(s: &Shard, n: usize) -> bool {
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
pub(super) fn drop_index(s: &Shard) {
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
pub(super) fn entry_overflow(
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

pub(super) fn push_held(s: &Shard, lock: usize, e: &Entry, since: u64) {
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
