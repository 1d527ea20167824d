//! `locklab run -- CMD`: an unmodified program on locklab's locks, through `liblocklab_pthread.so`
//! (the `locklab-pthread` crate), found beside the `locklab` binary. The process is replaced by the
//! program (`exec`), so its exit status, signals, standard streams and process id are its own.

use crate::plan::{UsageError, usage};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The preload library's file name.
pub const LIBRARY: &str = "liblocklab_pthread.so";
/// `LOCKLAB_MUTEX` values.
pub const MUTEXES: [&str; 6] = ["mutex", "mcs", "ticket", "qspinlock", "tas", "glibc"];
/// `LOCKLAB_RWLOCK` values.
pub const RWLOCKS: [&str; 3] = ["rwsem", "rwspinlock", "glibc"];
/// `LOCKLAB_SPIN` values.
pub const SPINS: [&str; 4] = ["qspinlock", "ticket", "tas", "glibc"];

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
    /// use locklab_bench::preload::Choices;
    /// assert!(Choices::parse(Some("mcs".into()), None, None).is_ok());
    /// let e = Choices::parse(Some("mcss".into()), None, None).unwrap_err();
    /// assert!(e.to_string().contains("mutex, mcs, ticket, qspinlock, tas, glibc"));
    /// ```
    pub fn parse(
        mutex: Option<String>,
        rwlock: Option<String>,
        spin: Option<String>,
    ) -> Result<Choices, UsageError> {
        fn check(flag: &str, v: &Option<String>, valid: &[&str]) -> Result<(), UsageError> {
            match v {
                Some(x) if !valid.contains(&x.as_str()) => usage(format!(
                    "unknown {flag} `{x}` (valid: {})",
                    valid.join(", ")
                )),
                _ => Ok(()),
            }
        }
        check("--mutex", &mutex, &MUTEXES)?;
        check("--rwlock", &rwlock, &RWLOCKS)?;
        check("--spin", &spin, &SPINS)?;
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
    let dir = exe.parent().unwrap_or(Path::new("."));
    // `cargo build` puts it beside the binary; `cargo test` may leave it in `deps/` only.
    for lib in [dir.join(LIBRARY), dir.join("deps").join(LIBRARY)] {
        if lib.is_file() {
            return Ok(lib);
        }
    }
    anyhow::bail!(
        "{LIBRARY} not found beside {} (build it with `cargo build --release -p locklab-pthread`, \
         or `cargo build --release` for the whole workspace)",
        exe.display()
    )
}

/// `LD_PRELOAD` with `lib` first, keeping what the caller had preloaded.
pub fn preload_value(lib: &Path, existing: Option<OsString>) -> OsString {
    let mut v = OsString::from(lib);
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(e);
    }
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
