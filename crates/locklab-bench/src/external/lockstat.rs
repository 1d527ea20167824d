//! `locklab run --stat`: the lock statistics `liblocklab_pthread.so` writes (one JSON file per process,
//! `LOCKLAB_STAT`), read back, named and shown as the kernel's `lock_stat` shows them.
//!
//! The library names a call site with `dladdr`, which sees only exported symbols; here a site it could
//! only place in its object (`object+0xoff`) is named again from the object's full symbol table (the
//! `object` crate) when the file still has one, and C++ names are demangled.
//!
//! ```
//! use locklab_bench::external::lockstat::ProcessStat;
//! let p: ProcessStat = serde_json::from_str(r#"{"pid": 7, "exe": "/bin/x", "reason": "exit",
//!     "records": [{"lock": "0x10", "kind": "mutex", "algorithm": "mutex", "site": "f+0x4 (x)",
//!     "acquisitions": 10, "contentions": 2, "wait_ns_total": 500, "wait_ns_max": 400,
//!     "hold_ns_total": 100, "holds": 10}]}"#).unwrap();
//! assert_eq!(p.locks().len(), 1);
//! assert!(locklab_bench::external::lockstat::table(&p, 20).contains("f+0x4 (x)"));
//! // The file's `mutex` is the adaptive mutex (`LOCKLAB_MUTEX=adaptive`, alias `mutex`).
//! assert!(locklab_bench::external::lockstat::table(&p, 20).contains("(mutex/adaptive)"));
//! ```

use crate::external::choices;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One (lock, call site) record of a process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[allow(missing_docs)]
pub struct Record {
    /// The lock's address.
    pub lock: String,
    /// The symbol the lock lives in, when it is a named global.
    pub lock_name: Option<String>,
    /// `mutex`, `mutex-recursive`, `mutex-errorcheck`, `mutex-adaptive`, `rwlock`, `condvar`,
    /// `spinlock`.
    pub kind: String,
    /// The algorithm behind it (`glibc` for glibc's objects).
    pub algorithm: String,
    /// The call site's address.
    pub site_addr: String,
    /// The call site, `function+0xoff (object)`.
    pub site: Option<String>,
    /// The object the call site is in, and its offset there.
    pub object: Option<String>,
    pub object_offset: Option<u64>,
    pub acquisitions: u64,
    pub contentions: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    pub wait_ns_min: u64,
    pub holds: u64,
    pub hold_ns_total: u64,
    pub hold_ns_max: u64,
    pub hold_ns_min: u64,
    pub read_acquisitions: u64,
    pub read_contentions: u64,
    pub read_wait_ns_total: u64,
    pub read_wait_ns_max: u64,
    pub cond_waits: u64,
    pub cond_wait_ns_total: u64,
    pub cond_timeouts: u64,
    pub signals: u64,
    pub broadcasts: u64,
}

impl Record {
    /// The call site's name, or its address.
    pub fn site_name(&self) -> String {
        self.site.clone().unwrap_or_else(|| self.site_addr.clone())
    }
    /// Wait of every kind (exclusive and read).
    pub fn wait_total(&self) -> u64 {
        self.wait_ns_total + self.read_wait_ns_total
    }
    /// Contentions of every kind.
    pub fn contended(&self) -> u64 {
        self.contentions + self.read_contentions
    }
}

/// One process's statistics, as the library writes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessStat {
    /// Process id, and its parent's.
    pub pid: u32,
    /// The parent's process id.
    pub ppid: u32,
    /// The program.
    pub exe: String,
    /// `exit`, `exec` (the image before an exec) or `signal` (SIGUSR1, a snapshot).
    pub reason: String,
    /// The choices in force.
    pub mutex: String,
    /// The rwlock choice.
    pub rwlock: String,
    /// The spinlock choice.
    pub spin: String,
    /// Locks (not condvars) used, and those that were contended.
    pub locks_used: u64,
    /// Locks that were contended at least once.
    pub locks_contended: u64,
    /// The most threads that had taken a lock and were alive at once (0 in files written before
    /// the library recorded it).
    pub threads_peak: u64,
    /// Records lost to full per-thread tables, and operations of threads without one.
    pub dropped: u64,
    /// Operations by threads that had no table.
    pub uncounted: u64,
    /// Every (lock, site) record.
    pub records: Vec<Record>,
}

impl ProcessStat {
    /// Whether the statistics can be true: within each record, no more contentions than
    /// acquisitions (of each mode), no more holds than acquisitions, no maximum above its total;
    /// and the totals summed over the records fit. `Err` names the record and the field.
    ///
    /// ```
    /// use locklab_bench::external::lockstat::{ProcessStat, Record};
    /// let r = Record { lock: "0x10".into(), acquisitions: 1, contentions: 100_000_000_000_000, ..Default::default() };
    /// let p = ProcessStat { pid: 7, records: vec![r], ..Default::default() };
    /// let e = p.check().unwrap_err();
    /// assert!(e.contains("record 1 (lock 0x10") && e.contains("`contentions` 100000000000000"), "{e}");
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let mut sums = [0u128; 4];
        for (i, r) in self.records.iter().enumerate() {
            let at = || {
                format!(
                    "process {}, record {} (lock {} at {})",
                    self.pid,
                    i + 1,
                    r.lock,
                    r.site_name()
                )
            };
            let acquired = u128::from(r.acquisitions) + u128::from(r.read_acquisitions);
            let pairs: [(&str, u64, &str, u128); 6] = [
                (
                    "contentions",
                    r.contentions,
                    "acquisitions",
                    r.acquisitions.into(),
                ),
                (
                    "read_contentions",
                    r.read_contentions,
                    "read_acquisitions",
                    r.read_acquisitions.into(),
                ),
                (
                    "holds",
                    r.holds,
                    "acquisitions and read_acquisitions",
                    acquired,
                ),
                (
                    "wait_ns_max",
                    r.wait_ns_max,
                    "wait_ns_total",
                    r.wait_ns_total.into(),
                ),
                (
                    "hold_ns_max",
                    r.hold_ns_max,
                    "hold_ns_total",
                    r.hold_ns_total.into(),
                ),
                (
                    "read_wait_ns_max",
                    r.read_wait_ns_max,
                    "read_wait_ns_total",
                    r.read_wait_ns_total.into(),
                ),
            ];
            for (k, v, of, limit) in pairs {
                if u128::from(v) > limit {
                    return Err(format!(
                        "{}: `{k}` {v} is more than its `{of}` ({limit}): not statistics a run can write",
                        at()
                    ));
                }
            }
            sums[0] += acquired;
            sums[1] += u128::from(r.contentions) + u128::from(r.read_contentions);
            sums[2] += u128::from(r.wait_ns_total) + u128::from(r.read_wait_ns_total);
            sums[3] += u128::from(r.hold_ns_total);
        }
        // Room for the sums the readers make (and a factor of 100 for shares).
        if sums.iter().any(|&s| s > u128::from(u64::MAX / 128)) {
            return Err(format!(
                "process {}: its records' totals are beyond any run's (more than {} acquisitions or ns in all)",
                self.pid,
                u64::MAX / 128
            ));
        }
        Ok(())
    }
}

/// A lock's records summed over its call sites.
#[derive(Debug, Clone, Default)]
pub struct LockSummary {
    /// The lock's address, and its name if a global.
    pub lock: String,
    /// The global's name, if any.
    pub name: Option<String>,
    /// Kind and algorithm.
    pub kind: String,
    /// The algorithm.
    pub algorithm: String,
    /// Sums (maxima for the `_max` fields, minima for `_min`).
    pub total: Record,
    /// The sites, most waited first.
    pub sites: Vec<Record>,
}

impl ProcessStat {
    /// The locks (condvars apart), most waited first, then most acquired.
    pub fn locks(&self) -> Vec<LockSummary> {
        let mut by: BTreeMap<&str, LockSummary> = BTreeMap::new();
        for r in self.records.iter().filter(|r| r.kind != "condvar") {
            let s = by.entry(&r.lock).or_insert_with(|| LockSummary {
                lock: r.lock.clone(),
                name: r.lock_name.clone(),
                kind: r.kind.clone(),
                algorithm: r.algorithm.clone(),
                ..Default::default()
            });
            let t = &mut s.total;
            t.acquisitions += r.acquisitions;
            t.contentions += r.contentions;
            t.wait_ns_total += r.wait_ns_total;
            t.wait_ns_max = t.wait_ns_max.max(r.wait_ns_max);
            t.wait_ns_min =
                min_nonzero(t.wait_ns_min, r.wait_ns_min, t.contentions > r.contentions);
            t.holds += r.holds;
            t.hold_ns_total += r.hold_ns_total;
            t.hold_ns_max = t.hold_ns_max.max(r.hold_ns_max);
            t.hold_ns_min = min_nonzero(t.hold_ns_min, r.hold_ns_min, t.holds > r.holds);
            t.read_acquisitions += r.read_acquisitions;
            t.read_contentions += r.read_contentions;
            t.read_wait_ns_total += r.read_wait_ns_total;
            t.read_wait_ns_max = t.read_wait_ns_max.max(r.read_wait_ns_max);
            s.sites.push(r.clone());
        }
        let mut v: Vec<LockSummary> = by.into_values().collect();
        for s in &mut v {
            s.sites.sort_by(|a, b| {
                b.wait_total()
                    .cmp(&a.wait_total())
                    .then(b.acquisitions.cmp(&a.acquisitions))
            });
        }
        v.sort_by(|a, b| {
            b.total.wait_total().cmp(&a.total.wait_total()).then(
                (b.total.acquisitions + b.total.read_acquisitions)
                    .cmp(&(a.total.acquisitions + a.total.read_acquisitions)),
            )
        });
        v
    }

    /// The condvar records, most waited first.
    pub fn condvars(&self) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.kind == "condvar")
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.cond_wait_ns_total));
        v
    }
}

/// The smaller of two minima where 0 means "none" (`had_before`: `a` counts earlier samples).
fn min_nonzero(a: u64, b: u64, had_before: bool) -> u64 {
    match (had_before, a, b) {
        (false, _, b) => b,
        (true, a, 0) => a,
        (true, a, b) => a.min(b),
    }
}

/// The statistics files in `dir` (`locklab run --stat --lockdep` shares the directory: the lockdep
/// reports are not statistics), unordered.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("stat-files-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("12.json"), "{}").unwrap();
/// std::fs::write(dir.join("lockdep-12.json"), "[]").unwrap();
/// let files = locklab_bench::external::lockstat::stat_files(&dir);
/// assert_eq!(files.len(), 1);
/// assert_eq!(files[0].file_name(), "12.json");
/// std::fs::remove_dir_all(&dir).unwrap();
/// assert!(locklab_bench::external::lockstat::stat_files(&dir).is_empty());
/// ```
pub fn stat_files(dir: &Path) -> Vec<std::fs::DirEntry> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    !e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("lockdep-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads every statistics file in `dir`: the processes (in pid order, snapshots replaced by the
/// final table of the same file), and how many files were empty (processes that ended by `_exit` or
/// a signal, before writing).
pub fn read_dir(dir: &Path) -> (Vec<ProcessStat>, usize) {
    let mut files: Vec<PathBuf> = stat_files(dir).iter().map(|e| e.path()).collect();
    files.sort();
    let mut out = Vec::new();
    let mut empty = 0;
    for f in files {
        match std::fs::read_to_string(&f)
            .ok()
            .and_then(|s| serde_json::from_str::<ProcessStat>(&s).ok())
        {
            Some(p) => out.push(p),
            None => empty += 1,
        }
    }
    out.sort_by_key(|p| (p.pid, p.reason == "exit"));
    (out, empty)
}

/// Names the sites the library could only place in their object, from the object's symbol table,
/// and demangles C++ names. Objects are read once each.
pub fn symbolise(processes: &mut [ProcessStat]) {
    let mut cache: HashMap<String, Option<Symbols>> = HashMap::new();
    for p in processes.iter_mut() {
        for r in &mut p.records {
            let (Some(obj), Some(off)) = (r.object.clone(), r.object_offset) else {
                continue;
            };
            let base_name = Path::new(&obj)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let placed_only = r
                .site
                .as_deref()
                .is_none_or(|s| s.starts_with(&format!("{base_name}+")));
            if placed_only
                && let Some(Some(syms)) = Some(
                    cache
                        .entry(obj.clone())
                        .or_insert_with(|| Symbols::load(Path::new(&obj))),
                )
                && let Some((name, delta)) = syms.find(off)
            {
                r.site = Some(format!("{}+{:#x} ({base_name})", demangle(&name), delta));
                continue;
            }
            if let Some(site) = &r.site
                && let Some((name, rest)) = site.split_once('+')
                && name.starts_with("_Z")
            {
                r.site = Some(format!("{}+{rest}", demangle(name)));
            }
        }
    }
}

/// A C++ name demangled (without parameter lists, as lock_stat's short names), or as given: only a
/// mangled name (`_Z...`) is demangled, a plain C name (`w`, `worker`) stays what it is.
///
/// ```
/// use locklab_bench::external::lockstat::demangle;
/// assert_eq!(demangle("w"), "w");
/// assert_eq!(demangle("_Z6workerPv"), "worker");
/// ```
pub fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or_else(|| name.to_string())
}

/// An object's function symbols, sorted by address, with the base that object offsets count from.
struct Symbols {
    base: u64,
    funcs: Vec<(u64, u64, String)>,
}

impl Symbols {
    fn load(path: &Path) -> Option<Symbols> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let mut funcs: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        funcs.sort();
        funcs.dedup_by_key(|f| f.0);
        Some(Symbols {
            base: file.relative_address_base(),
            funcs,
        })
    }

    /// The function containing object offset `off` (a return address: the call ends inside it).
    fn find(&self, off: u64) -> Option<(String, u64)> {
        let addr = self.base + off;
        let i = self.funcs.partition_point(|f| f.0 <= addr);
        let (start, size, name) = self.funcs.get(i.checked_sub(1)?)?;
        (addr - start <= (*size).max(1)).then(|| (name.clone(), addr - start))
    }
}

/// A duration for the tables: `850 ns`, `12.5 us`, `3.2 ms`, `1.5 s`.
pub fn ns_text(v: u64) -> String {
    ns(v)
}

fn ns(v: u64) -> String {
    match v {
        0..10_000 => format!("{v} ns"),
        10_000..10_000_000 => format!("{:.1} us", v as f64 / 1e3),
        10_000_000..10_000_000_000 => format!("{:.1} ms", v as f64 / 1e6),
        _ => format!("{:.1} s", v as f64 / 1e9),
    }
}

fn div(a: u64, b: u64) -> u64 {
    a.checked_div(b).unwrap_or(0)
}

/// The choice name the tables show for a record's `algorithm` (the file keeps the names it has
/// always written: `mutex` for the adaptive mutex, `rwsem` for the recursive rwsem).
fn display_algorithm<'a>(kind: &str, algorithm: &'a str) -> &'a str {
    match kind {
        "rwlock" => choices::from_stat(
            &choices::RWLOCK_NAMES,
            &choices::RWLOCK_STAT_NAMES,
            algorithm,
        ),
        k if k.starts_with("mutex") => {
            choices::from_stat(&choices::MUTEX_NAMES, &choices::MUTEX_STAT_NAMES, algorithm)
        }
        _ => algorithm,
    }
}

/// A process's table, lock_stat's columns: the `top` locks by total wait, each with its call sites
/// (up to three), then the condvars, then the count of locks used and contended.
pub fn table(p: &ProcessStat, top: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let name = Path::new(&p.exe)
        .file_name()
        .map_or(p.exe.clone(), |n| n.to_string_lossy().into_owned());
    let _ = writeln!(
        s,
        "lock statistics: pid {} ({name}{}), mutex={} rwlock={} spin={}",
        p.pid,
        match p.reason.as_str() {
            "exec" => ", before exec",
            "signal" => ", snapshot",
            _ => "",
        },
        choices::from_stat(&choices::MUTEX_NAMES, &choices::MUTEX_STAT_NAMES, &p.mutex),
        choices::from_stat(
            &choices::RWLOCK_NAMES,
            &choices::RWLOCK_STAT_NAMES,
            &p.rwlock
        ),
        p.spin
    );
    let locks = p.locks();
    if !locks.is_empty() {
        let _ = writeln!(
            s,
            "{:<36} {:>11} {:>12} {:>12} {:>14} {:>12} {:>12} {:>12} {:>14} {:>12}",
            "class name (kind/algorithm)",
            "contentions",
            "waittime-min",
            "waittime-max",
            "waittime-total",
            "waittime-avg",
            "acquisitions",
            "holdtime-max",
            "holdtime-total",
            "holdtime-avg"
        );
    }
    for l in locks.iter().take(top) {
        let t = &l.total;
        let label = format!(
            "{} ({}/{})",
            l.name.clone().unwrap_or_else(|| l.lock.clone()),
            l.kind,
            display_algorithm(&l.kind, &l.algorithm)
        );
        let _ = writeln!(
            s,
            "{:<36} {:>11} {:>12} {:>12} {:>14} {:>12} {:>12} {:>12} {:>14} {:>12}",
            label,
            t.contentions,
            ns(t.wait_ns_min),
            ns(t.wait_ns_max),
            ns(t.wait_ns_total),
            ns(div(t.wait_ns_total, t.contentions)),
            t.acquisitions,
            ns(t.hold_ns_max),
            ns(t.hold_ns_total),
            ns(div(t.hold_ns_total, t.holds))
        );
        if t.read_acquisitions > 0 {
            let _ = writeln!(
                s,
                "{:<36} {:>11} {:>12} {:>12} {:>14} {:>12} {:>12}",
                "  (reads)",
                t.read_contentions,
                "",
                ns(t.read_wait_ns_max),
                ns(t.read_wait_ns_total),
                ns(div(t.read_wait_ns_total, t.read_contentions)),
                t.read_acquisitions
            );
        }
        for r in l.sites.iter().take(3) {
            let _ = writeln!(
                s,
                "  {:>11} contentions {:>10} waiting {:>12} acquisitions at {}",
                r.contended(),
                ns(r.wait_total()),
                r.acquisitions + r.read_acquisitions,
                r.site_name()
            );
        }
    }
    if locks.len() > top {
        let _ = writeln!(s, "... {} more locks (all in the JSON)", locks.len() - top);
    }
    for c in p.condvars().into_iter().take(top.min(5)) {
        let _ = writeln!(
            s,
            "condvar {}: {} waits ({} timed out), {} blocked, {} signals, {} broadcasts at {}",
            c.lock_name.clone().unwrap_or_else(|| c.lock.clone()),
            c.cond_waits,
            c.cond_timeouts,
            ns(c.cond_wait_ns_total),
            c.signals,
            c.broadcasts,
            c.site_name()
        );
    }
    let contended = locks.iter().filter(|l| l.total.contended() > 0).count();
    let _ = writeln!(s, "{} locks used, {} contended", locks.len(), contended);
    if p.dropped + p.uncounted > 0 {
        let _ = writeln!(
            s,
            "({} records did not fit the per-thread tables; {} operations by threads without one were not counted)",
            p.dropped, p.uncounted
        );
    }
    s
}

/// The apps' `top_locks`: the `n` call sites with the most wait over all processes, lab.md's fields.
pub fn top_sites(processes: &[ProcessStat], n: usize) -> Vec<serde_json::Value> {
    let mut by: BTreeMap<String, (u64, u64, u64, u64, u64)> = BTreeMap::new();
    for p in processes {
        for r in p.records.iter().filter(|r| r.kind != "condvar") {
            let e = by.entry(r.site_name()).or_default();
            e.0 += r.acquisitions + r.read_acquisitions;
            e.1 += r.contended();
            e.2 += r.wait_total();
            e.3 = e.3.max(r.wait_ns_max.max(r.read_wait_ns_max));
            e.4 += r.hold_ns_total;
        }
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.2.cmp(&a.1.2).then(b.1.0.cmp(&a.1.0)));
    v.into_iter()
        .take(n)
        .map(|(site, (acq, con, wt, wm, ht))| {
            serde_json::json!({"site": site, "acquisitions": acq, "contentions": con,
                "wait_ns_total": wt, "wait_ns_max": wm, "hold_ns_total": ht})
        })
        .collect()
}

/// The environment value that makes the library write into `dir` (one file per process).
pub fn env_value(dir: &Path) -> std::ffi::OsString {
    dir.join("%p.json").into_os_string()
}

#[cfg(test)]
mod tests {
    use super::{ProcessStat, Record};
    use crate::external::stat_schema as schema;
    use std::collections::BTreeSet;

    fn keys(v: serde_json::Value) -> BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// The reader's fields are the library's (`stat/schema.rs`): a field renamed or added on either
    /// side fails here.
    #[test]
    fn the_reader_has_the_files_fields() {
        let record = keys(serde_json::to_value(Record::default()).unwrap());
        let written: BTreeSet<String> = schema::RECORD_FIELDS
            .iter()
            .chain(&schema::RECORD_COUNTERS)
            .map(|s| s.to_string())
            .collect();
        assert_eq!(record, written);
        let process = keys(serde_json::to_value(ProcessStat::default()).unwrap());
        let written: BTreeSet<String> = schema::PROCESS_FIELDS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let unread: BTreeSet<String> = written.difference(&process).cloned().collect();
        assert!(
            process.is_subset(&written),
            "{:?}",
            process.difference(&written)
        );
        // What the lab does not read (the library's own diagnostics).
        assert_eq!(
            unread,
            [
                schema::NS_PER_TICK,
                schema::OVERFLOW_LOOKUPS,
                schema::OVERFLOW_PROBES
            ]
            .map(String::from)
            .into()
        );
    }
}
