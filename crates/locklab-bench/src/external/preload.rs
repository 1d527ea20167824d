//! The preload runner (`locklab run`; `try` and `apps` start programs through it too): an unmodified
//! program on locklab's locks, through `liblocklab_pthread.so`
//! (the `locklab-pthread` crate), found beside the `locklab` binary. The process is replaced by the
//! program (`exec`), so its exit status, signals, standard streams and process id are its own.

use crate::usage::{UsageError, usage};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The preload library's file name.
pub const LIBRARY: &str = "liblocklab_pthread.so";
use super::choices;

/// `LOCKLAB_MUTEX` values (besides the aliases of [`MUTEX`]).
pub const MUTEXES: [&str; 7] = choices::MUTEX_NAMES;
/// `LOCKLAB_RWLOCK` values (besides the aliases of [`RWLOCK`]).
pub const RWLOCKS: [&str; 3] = choices::RWLOCK_NAMES;
/// `LOCKLAB_SPIN` values.
pub const SPINS: [&str; 4] = choices::SPIN_NAMES;

/// One variable's choices: its names and the older names still accepted.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The names, in the library's order.
    pub names: &'static [&'static str],
    /// `(alias, name)` pairs.
    pub aliases: &'static [(&'static str, &'static str)],
}

/// `LOCKLAB_MUTEX`'s choices.
pub const MUTEX: Family = Family {
    names: &choices::MUTEX_NAMES,
    aliases: &choices::MUTEX_ALIASES,
};
/// `LOCKLAB_RWLOCK`'s choices.
pub const RWLOCK: Family = Family {
    names: &choices::RWLOCK_NAMES,
    aliases: &choices::RWLOCK_ALIASES,
};
/// `LOCKLAB_SPIN`'s choices.
pub const SPIN: Family = Family {
    names: &choices::SPIN_NAMES,
    aliases: &choices::SPIN_ALIASES,
};

impl Family {
    /// Whether `value` is one of the names or aliases.
    ///
    /// ```
    /// use locklab_bench::external::preload::{MUTEX, RWLOCK};
    /// assert!(MUTEX.accepts("adaptive") && MUTEX.accepts("mutex") && !MUTEX.accepts("mcss"));
    /// assert!(RWLOCK.accepts("recursive-rwsem") && RWLOCK.accepts("rwsem"));
    /// ```
    pub fn accepts(&self, value: &str) -> bool {
        choices::position(self.names, self.aliases, value.as_bytes()).is_some()
    }

    /// The valid values, for an error line: the names, then each alias and what it stands for.
    ///
    /// ```
    /// use locklab_bench::external::preload::RWLOCK;
    /// assert_eq!(RWLOCK.valid(), "recursive-rwsem, rwspinlock, glibc; rwsem for recursive-rwsem");
    /// ```
    pub fn valid(&self) -> String {
        let mut v = self.names.join(", ");
        for (i, (alias, name)) in self.aliases.iter().enumerate() {
            v.push_str(if i == 0 { "; " } else { ", " });
            v.push_str(&format!("{alias} for {name}"));
        }
        v
    }
}

/// The algorithm choices of a run (`None`: the library's default, or what the environment says).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Choices {
    /// `--mutex`.
    pub mutex: Option<String>,
    /// `--rwlock`.
    pub rwlock: Option<String>,
    /// `--spin`.
    pub spin: Option<String>,
}

impl Choices {
    /// Validates the flags.
    ///
    /// ```
    /// use locklab_bench::external::preload::Choices;
    /// assert!(Choices::parse(Some("mcs".into()), None, None).is_ok());
    /// assert!(Choices::parse(Some("mutex".into()), Some("rwsem".into()), None).is_ok());
    /// let e = Choices::parse(Some("mcss".into()), None, None).unwrap_err();
    /// assert!(e.to_string().contains("adaptive, mcs, ticket, qspinlock, tas, glibc, glibc-adaptive"));
    /// ```
    pub fn parse(
        mutex: Option<String>,
        rwlock: Option<String>,
        spin: Option<String>,
    ) -> Result<Choices, UsageError> {
        fn check(flag: &str, v: &Option<String>, family: Family) -> Result<(), UsageError> {
            match v {
                Some(x) if !family.accepts(x) => {
                    usage(format!("unknown {flag} `{x}` (valid: {})", family.valid()))
                }
                _ => Ok(()),
            }
        }
        check("--mutex", &mutex, MUTEX)?;
        check("--rwlock", &rwlock, RWLOCK)?;
        check("--spin", &spin, SPIN)?;
        Ok(Choices {
            mutex,
            rwlock,
            spin,
        })
    }

    /// The environment variables these choices set.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        [
            ("LOCKLAB_MUTEX", &self.mutex),
            ("LOCKLAB_RWLOCK", &self.rwlock),
            ("LOCKLAB_SPIN", &self.spin),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
        .collect()
    }
}

/// The library beside `exe` (the `locklab` binary) or in its `deps/`, or a clear error naming the
/// build command.
pub fn find_library(exe: &Path) -> anyhow::Result<PathBuf> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        anyhow::bail!(
            "{LIBRARY} replaces glibc's pthread calls: `locklab run` and `locklab apps` need Linux with glibc"
        );
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    // `cargo build` puts it beside the binary (`cargo test` may leave it in `deps/` only); the
    // lab's build script builds one too (build.rs: `cargo run --release` alone gives the whole
    // toolset). The newest wins: a library edited and rebuilt either way is the one used.
    let mut found: Option<(std::time::SystemTime, PathBuf)> = None;
    let built = option_env!("LOCKLAB_PRELOAD_BUILT").map(PathBuf::from);
    for lib in [dir.join(LIBRARY), dir.join("deps").join(LIBRARY)]
        .into_iter()
        .chain(built)
    {
        let Ok(meta) = std::fs::metadata(&lib) else {
            continue;
        };
        let when = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if meta.is_file() && found.as_ref().is_none_or(|(t, _)| when > *t) {
            found = Some((when, lib));
        }
    }
    if let Some((_, lib)) = found {
        return Ok(lib);
    }
    anyhow::bail!(
        "{LIBRARY} not found beside {} (build it with `cargo build --release -p locklab-pthread`, \
         or `cargo build --release` for the whole workspace)",
        exe.display()
    )
}

/// `LD_PRELOAD` with what the caller had preloaded first and `lib` last: an interposer the user
/// preloads (a call counter, a tracer) wraps the pthread functions it defines and finds the
/// library's as its next definition (`dlsym(RTLD_NEXT)`), as it would find glibc's without the lab.
/// Entries are separated by colons or spaces, as the dynamic loader reads them; `lib` itself (a
/// nested `locklab run`) is not repeated.
///
/// ```
/// use std::path::Path;
/// let v = locklab_bench::external::preload::preload_value(Path::new("/l/lib.so"), Some("a.so b.so".into()));
/// assert_eq!(v, "a.so:b.so:/l/lib.so");
/// ```
pub fn preload_value(lib: &Path, existing: Option<OsString>) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    let mut v = OsString::new();
    if let Some(e) = existing {
        for part in e
            .as_bytes()
            .split(|&b| b == b':' || b == b' ' || b == b'\t')
            .filter(|p| !p.is_empty())
        {
            let part = std::ffi::OsStr::from_bytes(part);
            if Path::new(part) == lib {
                continue;
            }
            v.push(part);
            v.push(":");
        }
    }
    v.push(lib);
    v
}

/// Replaces this process with `cmd` on the library. Returns only on failure: the exit status is the
/// shell's (127 not found, 126 not executable), after one line on stderr.
pub fn run(choices: &Choices, cmd: &[String]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = cmd.split_first() else {
        return Err(
            UsageError("locklab run needs a command: locklab run -- CMD ARGS...".into()).into(),
        );
    };
    let lib = find_library(&std::env::current_exe()?)?;
    let mut c = std::process::Command::new(program);
    c.args(args).env(
        "LD_PRELOAD",
        preload_value(&lib, std::env::var_os("LD_PRELOAD")),
    );
    for (k, v) in choices.env() {
        c.env(k, v);
    }
    let err = c.exec();
    eprintln!("locklab: error: cannot run `{program}`: {err}");
    std::process::exit(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    });
}

/// What the processes of a run left in their lockdep files.
struct LockdepFiles {
    /// Every report, in file order.
    reports: Vec<serde_json::Value>,
    /// Processes that wrote their reports (an array, maybe empty).
    written: usize,
    /// Processes that started but ended without writing (an empty file: killed by a signal): not
    /// checked to the end.
    unwritten: usize,
}

/// The lockdep reports every process wrote (`lockdep-PID.json` files, each an array; a process
/// empties its file when it starts, so an empty one is a process that ended without writing).
fn read_lockdep(dir: &Path) -> LockdepFiles {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("lockdep-") && n.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut f = LockdepFiles {
        reports: Vec::new(),
        written: 0,
        unwritten: 0,
    };
    for p in &names {
        let Ok(text) = std::fs::read_to_string(p) else {
            f.unwritten += 1;
            continue;
        };
        if text.trim().is_empty() {
            f.unwritten += 1;
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Array(a)) => {
                f.reports.extend(a);
                f.written += 1;
            }
            _ => {
                // Cut short while writing (a signal in the middle of the exit path).
                eprintln!(
                    "locklab: warning: {} is not a JSON array of reports (its process ended while writing it?)",
                    p.display()
                );
                f.unwritten += 1;
            }
        }
    }
    f
}

/// `SIGABRT`'s name for signal 6, and so on (`signal N` for one without a usual name).
fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    format!("{name} (signal {sig})")
}

/// The lines that sum up lockdep's findings, and the JSON file if asked. `signal`: the signal that
/// ended the program, if one did. A clean run is claimed only when every process wrote its reports
/// and the program was not killed.
fn lockdep_summary(
    l: &Lockdep,
    cmd: &[String],
    f: &LockdepFiles,
    signal: Option<i32>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let reports = &f.reports;
    let plural = |n: usize| if n == 1 { "" } else { "es" };
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in reports {
        *kinds.entry(r["kind"].as_str().unwrap_or("?")).or_default() += 1;
    }
    let complete = f.unwritten == 0 && signal.is_none();
    let mut line = if reports.is_empty() && complete {
        format!(
            "\nlockdep: no potential deadlock or lock misuse found ({} process{} checked)\n",
            f.written,
            plural(f.written)
        )
    } else if reports.is_empty() {
        format!(
            "\nlockdep: no report written ({} process{} checked to the end), but the run did not finish cleanly: see below\n",
            f.written,
            plural(f.written)
        )
    } else {
        let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        format!(
            "\nlockdep: {} report{} ({}), printed above as found\n",
            reports.len(),
            if reports.len() == 1 { "" } else { "s" },
            list.join(", ")
        )
    };
    if let Some(sig) = signal {
        line.push_str(&format!(
            "lockdep: the program was killed by {}\n",
            signal_name(sig)
        ));
    }
    if f.unwritten > 0 {
        line.push_str(&format!(
            "lockdep: {} process{} ended without writing {} reports (killed by a signal?): what {} found is only in the text above\n",
            f.unwritten,
            plural(f.unwritten),
            if f.unwritten == 1 { "its" } else { "their" },
            if f.unwritten == 1 { "it" } else { "they" },
        ));
    }
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(out) = &l.out {
        let doc = serde_json::json!({
            "locklab_version": env!("CARGO_PKG_VERSION"),
            "command": cmd,
            "processes": f.written + f.unwritten,
            "unfinished_processes": f.unwritten,
            "signal": signal,
            "complete": complete,
            "reports": reports,
        });
        write_doc(out, &doc)?;
    }
    Ok(())
}

/// Writes a JSON document to `out` (`-`: standard output); a file that cannot be written is said
/// on standard error, the run's result stands.
fn write_doc(out: &str, doc: &serde_json::Value) -> anyhow::Result<()> {
    let body = serde_json::to_string_pretty(doc)? + "\n";
    if out == "-" {
        use std::io::Write as _;
        let _ = std::io::stdout().write_all(body.as_bytes());
    } else if let Err(e) = std::fs::write(out, body) {
        eprintln!("locklab: error: cannot write {out}: {e}");
    }
    Ok(())
}

/// The child being waited for, for the signal forwarder (0: none).
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// A `SIGUSR1` was passed on: print the snapshot tables once the program has written them.
static SNAPSHOT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The signals a running program gets from the lab.
const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];

/// Forwarded signals that came before the program's pid was known (bit `1 << sig`).
static PENDING: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    } else {
        PENDING.fetch_or(1 << sig, std::sync::atomic::Ordering::Relaxed);
    }
    if sig == libc::SIGUSR1 {
        SNAPSHOT.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A `SIGUSR1` passed on to the program, waiting for the snapshots it causes.
///
/// Each process rewrites its own statistics file at its next lock operation after the signal, which
/// may be before the lab's next tick: a snapshot file modified since shortly before the tick that saw
/// the request is an answer. Once the first answer is seen, the others get a moment more; a program
/// that takes no lock for [`SnapshotWait::PATIENCE`] gets one line saying so (its table comes at its
/// end).
struct SnapshotWait {
    asked: std::time::Instant,
    /// Files modified from this time on are answers: the tick that saw the request, less a tick and
    /// the file system's clock granularity.
    since: std::time::SystemTime,
    first_answer: Option<std::time::Instant>,
}

impl SnapshotWait {
    /// How long a program may take to answer.
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);
    /// How long other processes get after the first answer.
    const GATHER: std::time::Duration = std::time::Duration::from_millis(200);
    /// The lab's polling interval.
    const TICK: std::time::Duration = std::time::Duration::from_millis(20);

    fn new() -> SnapshotWait {
        let now = std::time::SystemTime::now();
        SnapshotWait {
            asked: std::time::Instant::now(),
            since: now
                .checked_sub(Self::TICK + std::time::Duration::from_millis(30))
                .unwrap_or(now),
            first_answer: None,
        }
    }

    /// The snapshots written since the request.
    fn answers(&self, dir: &Path) -> Vec<crate::external::lockstat::ProcessStat> {
        crate::external::lockstat::stat_files(dir)
            .iter()
            .filter(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= self.since)
            })
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|s| serde_json::from_str::<crate::external::lockstat::ProcessStat>(&s).ok())
            .filter(|p| p.reason == "signal")
            .collect()
    }

    /// Called every tick: `true` once the tables were printed (or the wait given up).
    fn poll(&mut self, dir: &Path) -> bool {
        let answers = self.answers(dir);
        if !answers.is_empty() && self.first_answer.is_none() {
            self.first_answer = Some(std::time::Instant::now());
        }
        let gathered = self
            .first_answer
            .is_some_and(|t| t.elapsed() >= Self::GATHER);
        if !gathered && self.asked.elapsed() < Self::PATIENCE {
            return false;
        }
        print_snapshots(answers);
        true
    }
}

/// The tables of the snapshots (`SIGUSR1`) the processes wrote, on stderr.
fn print_snapshots(mut processes: Vec<crate::external::lockstat::ProcessStat>) {
    use std::io::Write as _;
    processes.sort_by_key(|p| p.pid);
    crate::external::lockstat::symbolise(&mut processes);
    let mut text = String::new();
    for p in &processes {
        text.push('\n');
        text.push_str(&crate::external::lockstat::table(p, 20));
    }
    if processes.is_empty() {
        text.push_str(&format!(
            "locklab: no snapshot: the program took no lock in the {} s after SIGUSR1 (its tables come at its end)\n",
            SnapshotWait::PATIENCE.as_secs()
        ));
    }
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// `locklab run --lockdep[=MODE] [--lockdep-out F]`: what to check and where the reports go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lockdep {
    /// `report` or `abort` (`LOCKLAB_LOCKDEP`).
    pub mode: String,
    /// Where to write every process's reports as JSON (`-`: standard output).
    pub out: Option<String>,
}

impl Lockdep {
    /// Validates the flags (`--lockdep-out` alone implies `--lockdep=report`).
    ///
    /// ```
    /// use locklab_bench::external::preload::Lockdep;
    /// assert_eq!(Lockdep::parse(None, None).unwrap(), None);
    /// assert_eq!(Lockdep::parse(Some("abort".into()), None).unwrap().unwrap().mode, "abort");
    /// assert_eq!(Lockdep::parse(None, Some("r.json".into())).unwrap().unwrap().mode, "report");
    /// assert!(Lockdep::parse(Some("loud".into()), None).is_err());
    /// assert!(Lockdep::parse(None, Some("".into())).is_err());
    /// ```
    pub fn parse(mode: Option<String>, out: Option<String>) -> Result<Option<Lockdep>, UsageError> {
        if out.as_deref() == Some("") {
            return usage("--lockdep-out needs a file name (or - for standard output)");
        }
        match (mode, out) {
            (None, None) => Ok(None),
            (Some(m), _) if m != "report" && m != "abort" => {
                usage(format!("unknown --lockdep `{m}` (valid: report, abort)"))
            }
            (m, out) => Ok(Some(Lockdep {
                mode: m.unwrap_or_else(|| "report".into()),
                out,
            })),
        }
    }
}

/// `locklab run --stat` and `--lockdep`: runs `cmd` on the library with statistics and/or lockdep
/// on (one file per process in a fresh directory), waits for it, prints each process's lock_stat
/// table on stderr and writes them all as JSON to `stat_out` if given; the lockdep reports (printed by
/// the program as it finds them) are summed up on stderr and written to their JSON file if asked.
/// Ends as the program did (its exit status, or its signal).
/// Signals meant for the program (`SIGTERM`, `SIGHUP`, `SIGUSR1`, `SIGUSR2`) are passed on to it;
/// after a `SIGUSR1` the snapshot tables are printed as soon as the program has written them.
/// `SIGINT` and `SIGQUIT` are left to the terminal, which sends them to the program too.
pub fn run_supervised(
    choices: &Choices,
    stat: bool,
    stat_out: Option<&str>,
    lockdep: Option<&Lockdep>,
    cmd: &[String],
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some((program, _)) = cmd.split_first() else {
        return Err(UsageError(
            "locklab run needs a command: locklab run [--stat] [--lockdep] -- CMD ARGS...".into(),
        )
        .into());
    };
    if stat_out == Some("") {
        return Err(
            UsageError("--stat-out needs a file name (or - for standard output)".into()).into(),
        );
    }
    let lib = find_library(&std::env::current_exe()?)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("locklab-stat-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    // Writable by a program that drops privileges and then forks (each process opens its own file);
    // sticky, as /tmp.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?;
    let run = Supervision {
        choices,
        stat,
        stat_out,
        lockdep,
        cmd,
        dir,
    };
    let mut child = run.spawn(run.command(&lib), program);
    let status = run.wait(&mut child)?;
    run.report(status)?;
    end_as(status)
}

/// One supervised run: the program, what to record and the scratch directory the records go to.
struct Supervision<'a> {
    choices: &'a Choices,
    stat: bool,
    stat_out: Option<&'a str>,
    lockdep: Option<&'a Lockdep>,
    /// The program and its arguments.
    cmd: &'a [String],
    /// The fresh directory the library writes its files into.
    dir: std::path::PathBuf,
}

impl Supervision<'_> {
    /// The program's command: preloading `lib`, with the statistics, lockdep and choices asked for.
    fn command(&self, lib: &std::path::Path) -> std::process::Command {
        let mut c = std::process::Command::new(&self.cmd[0]);
        c.args(&self.cmd[1..]).env(
            "LD_PRELOAD",
            preload_value(lib, std::env::var_os("LD_PRELOAD")),
        );
        if self.stat {
            c.env(
                "LOCKLAB_STAT",
                crate::external::lockstat::env_value(&self.dir),
            );
        } else {
            c.env_remove("LOCKLAB_STAT");
        }
        if let Some(l) = self.lockdep {
            c.env("LOCKLAB_LOCKDEP", &l.mode)
                .env("LOCKLAB_LOCKDEP_OUT", self.dir.join("lockdep-%p.json"));
        }
        for (k, v) in self.choices.env() {
            c.env(k, v);
        }
        c
    }

    /// Starts `c` with the signal forwarder in place (exits 127 or 126 if it cannot run).
    fn spawn(&self, mut c: std::process::Command, program: &str) -> std::process::Child {
        // The forwarder is installed before the spawn (a caught signal is reset to its default by
        // `exec`, so the program does not inherit it): a signal sent as soon as the program runs (it
        // may print before the lab is scheduled again) is kept until the program's pid is known,
        // then forwarded; never fatal to the lab.
        // SAFETY: installing handlers that only call kill or store to atomics.
        unsafe {
            for sig in FORWARDED {
                libc::signal(sig, forward as *const () as libc::sighandler_t);
            }
        }
        let child = match c.spawn() {
            Ok(ch) => ch,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&self.dir);
                eprintln!("locklab: error: cannot run `{program}`: {err}");
                std::process::exit(if err.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                });
            }
        };
        CHILD.store(child.id() as i32, std::sync::atomic::Ordering::Relaxed);
        let pending = PENDING.swap(0, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: signals to our own child, then ignoring two signals (after the spawn: an ignored
        // signal stays ignored across `exec`).
        unsafe {
            for sig in FORWARDED {
                if pending & (1 << sig) != 0 {
                    libc::kill(child.id() as i32, sig);
                }
            }
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        }
        child
    }

    /// Waits for the program, answering each SIGUSR1 with the snapshot's tables meanwhile.
    fn wait(&self, child: &mut std::process::Child) -> anyhow::Result<std::process::ExitStatus> {
        // Poll rather than block, so that a SIGUSR1 (passed on to the program, which writes a
        // snapshot at its next lock operation) can be answered with the snapshot's tables meanwhile.
        let mut snapshot: Option<SnapshotWait> = None;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {
                    if SNAPSHOT.swap(false, std::sync::atomic::Ordering::Relaxed) {
                        snapshot = Some(SnapshotWait::new());
                    }
                    if snapshot.as_mut().is_some_and(|w| w.poll(&self.dir)) {
                        snapshot = None;
                    }
                    std::thread::sleep(SnapshotWait::TICK);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        CHILD.store(0, std::sync::atomic::Ordering::Relaxed);
        Ok(status)
    }

    /// After the program: reads and removes its files, prints the tables and the lockdep summary,
    /// writes the statistics' JSON if asked.
    fn report(&self, status: std::process::ExitStatus) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        let reports = self.lockdep.map(|_| read_lockdep(&self.dir));
        let (mut processes, empty) = if self.stat {
            crate::external::lockstat::read_dir(&self.dir)
        } else {
            (Vec::new(), 0)
        };
        let _ = std::fs::remove_dir_all(&self.dir);
        crate::external::lockstat::symbolise(&mut processes);
        self.print_tables(&processes, empty);
        if let (Some(l), Some(files)) = (self.lockdep, &reports) {
            lockdep_summary(l, self.cmd, files, status.signal())?;
        }
        if let Some(out) = self.stat_out {
            let doc = serde_json::json!({
                "locklab_version": env!("CARGO_PKG_VERSION"),
                "command": self.cmd,
                "processes": processes,
            });
            write_doc(out, &doc)?;
        }
        Ok(())
    }

    /// Each process's lock_stat table on stderr, and how many took no lock or wrote nothing
    /// (`empty`).
    fn print_tables(&self, processes: &[crate::external::lockstat::ProcessStat], empty: usize) {
        let used: Vec<_> = processes.iter().filter(|p| !p.records.is_empty()).collect();
        let mut text = String::new();
        for p in &used {
            text.push('\n');
            text.push_str(&crate::external::lockstat::table(p, 20));
        }
        let idle = processes.len() - used.len();
        if self.stat && idle + empty > 0 {
            text.push_str(&format!(
                "\n{} process{} took no lock{}\n",
                idle,
                if idle == 1 { "" } else { "es" },
                if empty > 0 {
                    format!("; {empty} ended without writing statistics (_exit or a signal)")
                } else {
                    String::new()
                }
            ));
        }
        use std::io::Write as _;
        // A closed stderr must not turn the program's status into ours.
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
}

/// Ends as the program did (its exit status, or its signal).
fn end_as(status: std::process::ExitStatus) -> ! {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        // End as the program did, without a core file of our own.
        // SAFETY: plain system calls on this process.
        unsafe {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(status.code().unwrap_or(1));
}
