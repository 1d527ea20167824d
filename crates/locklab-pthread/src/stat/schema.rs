//! The lock-statistics file's schema: every field name, in the order the library writes them. One
//! JSON object per process; its `records` an array of objects, one per (lock, call site). The
//! library's writer takes its keys from here, and the lab (which compiles this same file as a
//! module of its own, `#[path]`, not linking the library) checks its reader against it.
//!
//! ```text
//! {"pid":7,"ppid":1,"exe":"/bin/x","reason":"exit","mutex":"mutex",...,"records":[
//! {"lock":"0x10","lock_name":null,"kind":"mutex","algorithm":"mutex",...,"broadcasts":0}]}
//! ```

/// Process id.
pub const PID: &str = "pid";
/// The parent's process id.
pub const PPID: &str = "ppid";
/// The program's path.
pub const EXE: &str = "exe";
/// Why the file was written: `exit`, `exec` or `signal`.
pub const REASON: &str = "reason";
/// The `LOCKLAB_MUTEX` choice, by its statistics name (`choices::MUTEX_STAT_NAMES`).
pub const MUTEX: &str = "mutex";
/// The `LOCKLAB_RWLOCK` choice, by its statistics name.
pub const RWLOCK: &str = "rwlock";
/// The `LOCKLAB_SPIN` choice.
pub const SPIN: &str = "spin";
/// Nanoseconds per clock tick (a number with six decimals).
pub const NS_PER_TICK: &str = "ns_per_tick";
/// Locks (condvars aside) used.
pub const LOCKS_USED: &str = "locks_used";
/// Locks (condvars aside) contended at least once.
pub const LOCKS_CONTENDED: &str = "locks_contended";
/// The most threads that had taken a lock and were alive at once.
pub const THREADS_PEAK: &str = "threads_peak";
/// (lock, site) pairs lost to full tables.
pub const DROPPED: &str = "dropped";
/// Operations by threads that had no table.
pub const UNCOUNTED: &str = "uncounted";
/// Lookups that went to the overflow arena.
pub const OVERFLOW_LOOKUPS: &str = "overflow_lookups";
/// Slots probed by those lookups.
pub const OVERFLOW_PROBES: &str = "overflow_probes";
/// The array of records.
pub const RECORDS: &str = "records";

/// The process object's fields, in the order written.
///
/// ```text
/// pid ppid exe reason mutex rwlock spin ns_per_tick ... records
/// ```
pub const PROCESS_FIELDS: [&str; 16] = [
    PID,
    PPID,
    EXE,
    REASON,
    MUTEX,
    RWLOCK,
    SPIN,
    NS_PER_TICK,
    LOCKS_USED,
    LOCKS_CONTENDED,
    THREADS_PEAK,
    DROPPED,
    UNCOUNTED,
    OVERFLOW_LOOKUPS,
    OVERFLOW_PROBES,
    RECORDS,
];

/// The lock's address (a `"0x..."` string).
pub const LOCK: &str = "lock";
/// The global the lock lives in (`name` or `name+0xoff`), or null.
pub const LOCK_NAME: &str = "lock_name";
/// `mutex`, `mutex-recursive`, `mutex-errorcheck`, `mutex-adaptive`, `rwlock`, `condvar`, `spinlock`.
pub const KIND: &str = "kind";
/// The algorithm behind the object, by its statistics name (`glibc` for glibc's objects).
pub const ALGORITHM: &str = "algorithm";
/// The call site's address (a `"0x..."` string).
pub const SITE_ADDR: &str = "site_addr";
/// The call site, `function+0xoff (object)` or `object+0xoff`, or null.
pub const SITE: &str = "site";
/// The object the call site is in, or null.
pub const OBJECT: &str = "object";
/// The call site's offset in its object, or null.
pub const OBJECT_OFFSET: &str = "object_offset";

/// A record's fields before its counters, in the order written.
///
/// ```text
/// lock lock_name kind algorithm site_addr site object object_offset
/// ```
pub const RECORD_FIELDS: [&str; 8] = [
    LOCK,
    LOCK_NAME,
    KIND,
    ALGORITHM,
    SITE_ADDR,
    SITE,
    OBJECT,
    OBJECT_OFFSET,
];

/// A record's counters (numbers; times in ns), in the order written after [`RECORD_FIELDS`].
///
/// ```text
/// acquisitions contentions wait_ns_total ... signals broadcasts
/// ```
pub const RECORD_COUNTERS: [&str; 18] = [
    "acquisitions",
    "contentions",
    "wait_ns_total",
    "wait_ns_max",
    "wait_ns_min",
    "holds",
    "hold_ns_total",
    "hold_ns_max",
    "hold_ns_min",
    "read_acquisitions",
    "read_contentions",
    "read_wait_ns_total",
    "read_wait_ns_max",
    "cond_waits",
    "cond_wait_ns_total",
    "cond_timeouts",
    "signals",
    "broadcasts",
];
