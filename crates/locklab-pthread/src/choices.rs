//! The names of the library's algorithm choices (`LOCKLAB_MUTEX`, `LOCKLAB_RWLOCK`, `LOCKLAB_SPIN`),
//! their aliases, and the names its statistics file writes for them: plain data and two small
//! functions, no dependencies and no allocation.
//!
//! The lab (`locklab run`, `try`, `apps`) compiles this same file as a module of its own
//! (`#[path]`) rather than linking the library: the library exports `pthread_mutex_lock` and the
//! rest, which would replace the lab's own pthread calls.
//!
//! ```text
//! LOCKLAB_MUTEX=adaptive         the library's adaptive mutex (the default)
//! LOCKLAB_MUTEX=mutex            the same: an alias
//! LOCKLAB_RWLOCK=recursive-rwsem the reader-preferring recursive rwsem (the default)
//! LOCKLAB_RWLOCK=rwsem           the same: an alias
//! ```

/// `LOCKLAB_MUTEX` values, in the order of the library's `MutexAlgo` (code 1 first).
///
/// ```text
/// adaptive  mcs  ticket  qspinlock  tas  glibc  glibc-adaptive
/// ```
pub const MUTEX_NAMES: [&str; 7] = [
    "adaptive",
    "mcs",
    "ticket",
    "qspinlock",
    "tas",
    "glibc",
    "glibc-adaptive",
];
/// Older `LOCKLAB_MUTEX` values still accepted, `(alias, name)`.
///
/// ```text
/// LOCKLAB_MUTEX=mutex  is  LOCKLAB_MUTEX=adaptive
/// ```
pub const MUTEX_ALIASES: [(&str, &str); 1] = [("mutex", "adaptive")];
/// What the statistics file writes for each mutex choice (its `mutex` field and the records'
/// `algorithm`), in [`MUTEX_NAMES`] order: the statistics names, which scripts that read the
/// files compare against.
///
/// ```text
/// "mutex": "mutex"   for LOCKLAB_MUTEX=adaptive (or its alias mutex)
/// ```
pub const MUTEX_STAT_NAMES: [&str; 7] = [
    "mutex",
    "mcs",
    "ticket",
    "qspinlock",
    "tas",
    "glibc",
    "glibc-adaptive",
];

/// `LOCKLAB_RWLOCK` values, in the order of the library's `RwAlgo`.
///
/// ```text
/// recursive-rwsem  rwspinlock  glibc
/// ```
pub const RWLOCK_NAMES: [&str; 3] = ["recursive-rwsem", "rwspinlock", "glibc"];
/// Older `LOCKLAB_RWLOCK` values still accepted, `(alias, name)`.
///
/// ```text
/// LOCKLAB_RWLOCK=rwsem  is  LOCKLAB_RWLOCK=recursive-rwsem
/// ```
pub const RWLOCK_ALIASES: [(&str, &str); 1] = [("rwsem", "recursive-rwsem")];
/// What the statistics file writes for each rwlock choice, in [`RWLOCK_NAMES`] order.
///
/// ```text
/// "rwlock": "rwsem"   for LOCKLAB_RWLOCK=recursive-rwsem (or its alias rwsem)
/// ```
pub const RWLOCK_STAT_NAMES: [&str; 3] = ["rwsem", "rwspinlock", "glibc"];

/// `LOCKLAB_SPIN` values, in the order of the library's `SpinAlgo` (the statistics file writes
/// these same names).
///
/// ```text
/// qspinlock  ticket  tas  glibc
/// ```
pub const SPIN_NAMES: [&str; 4] = ["qspinlock", "ticket", "tas", "glibc"];
/// Older `LOCKLAB_SPIN` values still accepted (none).
///
/// ```text
/// (none)
/// ```
pub const SPIN_ALIASES: [(&str, &str); 0] = [];

/// The index in `names` of the choice `value` names, itself or through one of `aliases`.
///
/// ```text
/// position(&MUTEX_NAMES, &MUTEX_ALIASES, b"mutex") == Some(0)   // adaptive
/// position(&MUTEX_NAMES, &MUTEX_ALIASES, b"mcss")  == None
/// ```
pub fn position(names: &[&str], aliases: &[(&str, &str)], value: &[u8]) -> Option<usize> {
    let name = aliases
        .iter()
        .find(|(alias, _)| alias.as_bytes() == value)
        .map_or(value, |(_, name)| name.as_bytes());
    names.iter().position(|n| n.as_bytes() == name)
}

/// The choice name a statistics file's `stat_name` stands for (a name of `stat_names` becomes the
/// name at its index in `names`); any other name is returned as it is (`glibc`, `condvar`).
///
/// ```text
/// from_stat(&MUTEX_NAMES, &MUTEX_STAT_NAMES, "mutex") == "adaptive"
/// from_stat(&MUTEX_NAMES, &MUTEX_STAT_NAMES, "mcs")   == "mcs"
/// ```
pub fn from_stat<'a>(names: &[&'a str], stat_names: &[&str], stat_name: &'a str) -> &'a str {
    match stat_names.iter().position(|n| *n == stat_name) {
        Some(i) if i < names.len() => names[i],
        _ => stat_name,
    }
}
