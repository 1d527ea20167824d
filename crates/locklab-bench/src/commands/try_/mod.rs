//! `locklab try -- CMD`: would another lock make *this* program faster, and is its output still
//! right? The user's command runs under glibc (no preload) and under each chosen lock (through
//! `liblocklab_pthread.so`), repeats interleaved (glibc, mutex, mcs, ..., glibc, mutex, ...), every run
//! verified against glibc's first: the same exit status, and with `--same-output` the same standard
//! output, byte for byte. Throughput is the wall clock's (lower time is better) or a rate the program
//! prints (`--rate REGEX`, its first group). Then median, spread, speed-up over glibc and `apps`'
//! noise-aware verdict; one more run per choice with lock statistics gives the top contended call
//! sites under each row, and the statistics of glibc's run give the crossover map's prediction
//! (`advise --from`), printed beside the measured verdict. Last, one line: what to set, or that
//! nothing beats glibc here.
//!
//! Every run is its own process group, bounded in time (ten times glibc's slowest run, at least
//! 10 s; a row that reaches it runs no more), and the group is killed after it exits, so nothing
//! the program started is left running; `SIGINT`/`SIGTERM` to the lab kill the run in progress too.

use crate::engine::output::programs::AppRow;
use crate::engine::verdict::{spread, verdict};
use crate::external::cleanup;
use crate::external::preload::{self, MUTEX, RWLOCK};
use crate::external::programs::on_path;
use crate::usage::{UsageError, usage};
use clap::Args;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod advice_check;
mod json;
mod measure;
mod recommend;
mod runs;
mod table;
use advice_check::*;
use json::*;
use measure::*;
use recommend::*;
use runs::*;
use table::*;

/// One choice the command runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `glibc`, a `LOCKLAB_MUTEX` value, or `rwlock:Y` for a `LOCKLAB_RWLOCK` value.
    pub label: String,
    /// The variables set (empty for glibc: no preload at all).
    pub env: Vec<(&'static str, String)>,
}

impl Choice {
    fn glibc() -> Choice {
        Choice {
            label: "glibc".into(),
            env: vec![],
        }
    }
    fn mutex(m: &str) -> Choice {
        Choice {
            label: m.into(),
            env: vec![("LOCKLAB_MUTEX", m.into())],
        }
    }
    /// An rwlock row keeps glibc's mutexes, so the row shows the rwlock's effect alone.
    fn rwlock(r: &str) -> Choice {
        Choice {
            label: format!("rwlock:{r}"),
            env: vec![
                ("LOCKLAB_MUTEX", "glibc".into()),
                ("LOCKLAB_RWLOCK", r.into()),
            ],
        }
    }
}

/// `locklab try` options.
#[derive(Args, Debug, Clone, Default)]
pub struct TryArgs {
    /// Mutex choices (LOCKLAB_MUTEX values; glibc, meaning no preload, always runs first).
    /// Default: glibc-adaptive, mutex, mcs, qspinlock.
    #[arg(long, value_name = "LIST")]
    pub locks: Option<String>,
    /// Rwlock choices (LOCKLAB_RWLOCK values, each with glibc's mutexes). Default: rwsem,
    /// rwspinlock, run only if the program takes an rwlock; an empty list runs none.
    #[arg(long, value_name = "LIST")]
    pub rwlocks: Option<String>,
    /// Interleaved repeats (default 5; verdicts need 3).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub repeats: Option<String>,
    /// Throughput from the program's output instead of the wall clock: a regular expression
    /// whose first group is the rate (its last match in stdout, else stderr), e.g.
    /// 'ops/s: ([0-9.]+)'.
    #[arg(long, value_name = "REGEX")]
    pub rate: Option<String>,
    /// Every run's standard output must be identical to glibc's first run's.
    #[arg(long)]
    pub same_output: bool,
    /// A shell command run before each run (e.g. `rm -f test.db`).
    #[arg(long, value_name = "CMD")]
    pub setup: Option<String>,
    /// How long one --setup may run, in seconds (1-3600, default 300); one that does not finish
    /// by then stops `try` with an error.
    #[arg(long, value_name = "S", allow_hyphen_values = true)]
    pub setup_timeout: Option<String>,
    /// Also write one row per choice as JSON here, in `apps`' schema (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
    /// The program and its arguments, after `--`.
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub cmd: Vec<String>,
}

/// What `try` was asked for.
#[derive(Debug)]
pub struct TryPlan {
    /// glibc first, then the mutex choices, then the rwlock choices.
    pub choices: Vec<Choice>,
    /// Whether the rwlock rows were asked for by name (else they run only if the program takes an
    /// rwlock under glibc).
    pub rwlocks_explicit: bool,
    /// Interleaved repeats.
    pub repeats: usize,
    /// `--rate`: the program's own rate, its first group.
    pub rate: Option<regex::Regex>,
    /// `--same-output`.
    pub same_output: bool,
    /// `--setup`: a shell command before each run.
    pub setup: Option<String>,
    /// `--setup-timeout`: how long one setup may run.
    pub setup_timeout: Duration,
    /// `--json` target.
    pub json: Option<String>,
    /// The program and its arguments.
    pub cmd: Vec<String>,
}

/// The default mutex choices (glibc is always first).
pub const DEFAULT_LOCKS: [&str; 4] = ["glibc-adaptive", "mutex", "mcs", "qspinlock"];
/// How long one `--setup` may run unless `--setup-timeout` says otherwise.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(300);
/// The default rwlock rows, run when the program takes an rwlock.
pub const DEFAULT_RWLOCKS: [&str; 2] = ["rwsem", "rwspinlock"];

impl TryFrom<TryArgs> for TryPlan {
    type Error = UsageError;

    /// Validates the flags: one clear line for each mistake.
    ///
    /// ```
    /// use locklab_bench::commands::try_::{TryArgs, TryPlan};
    /// let args = |locks: Option<&str>, rwlocks: Option<&str>, rate: Option<&str>| TryArgs {
    ///     locks: locks.map(Into::into),
    ///     rwlocks: rwlocks.map(Into::into),
    ///     rate: rate.map(Into::into),
    ///     cmd: vec!["true".into()],
    ///     ..TryArgs::default()
    /// };
    /// let p = TryPlan::try_from(args(Some("mcs"), Some(""), None)).unwrap();
    /// assert_eq!(p.choices.iter().map(|c| c.label.as_str()).collect::<Vec<_>>(), ["glibc", "mcs"]);
    /// let e = TryPlan::try_from(args(None, None, Some("ops: [0-9]+")));
    /// assert!(e.unwrap_err().to_string().contains("no group"));
    /// ```
    fn try_from(a: TryArgs) -> Result<TryPlan, UsageError> {
        let TryArgs {
            locks,
            rwlocks,
            repeats,
            rate,
            same_output,
            setup,
            setup_timeout,
            json,
            cmd,
        } = a;
        let (locks, rwlocks, repeats) = (locks.as_deref(), rwlocks.as_deref(), repeats.as_deref());
        let (rate, setup_timeout) = (rate.as_deref(), setup_timeout.as_deref());
        if cmd.is_empty() || cmd[0].is_empty() {
            return usage("locklab try needs a command: locklab try [OPTIONS] -- CMD ARGS...");
        }
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect()
        };
        let mut choices = vec![Choice::glibc()];
        let mutexes: Vec<String> = match locks {
            None => DEFAULT_LOCKS.iter().map(|s| s.to_string()).collect(),
            Some(l) => list(l),
        };
        for m in &mutexes {
            if !MUTEX.accepts(m) {
                return usage(format!(
                    "--locks: unknown lock `{m}` (valid: {})",
                    MUTEX.valid()
                ));
            }
            if m != "glibc" && !choices.iter().any(|c| c.label == *m) {
                choices.push(Choice::mutex(m));
            }
        }
        let rw: Vec<String> = match rwlocks {
            None => DEFAULT_RWLOCKS.iter().map(|s| s.to_string()).collect(),
            Some(l) => list(l),
        };
        for r in &rw {
            if !RWLOCK.accepts(r) {
                return usage(format!(
                    "--rwlocks: unknown rwlock `{r}` (valid: {})",
                    RWLOCK.valid()
                ));
            }
            let c = Choice::rwlock(r);
            if r != "glibc" && !choices.contains(&c) {
                choices.push(c);
            }
        }
        let repeats = match repeats {
            None => 5,
            Some(r) => match r.parse::<usize>() {
                Ok(n) if (1..=50).contains(&n) => n,
                _ => return usage(format!("--repeats: `{r}` is not 1-50")),
            },
        };
        let rate = match rate {
            None => None,
            Some(r) => {
                let re = regex::Regex::new(r).map_err(|e| {
                    let first = e.to_string();
                    let first = first.lines().last().unwrap_or("").trim().to_string();
                    UsageError(format!(
                        "--rate: `{r}` is not a regular expression ({first})"
                    ))
                })?;
                if re.captures_len() < 2 {
                    return usage(format!(
                        "--rate: `{r}` has no group: put the number in parentheses, e.g. 'ops/s: ([0-9.]+)'"
                    ));
                }
                Some(re)
            }
        };
        if setup.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return usage("--setup needs a command (run with sh -c before each run)");
        }
        let setup_timeout = match setup_timeout {
            None => DEFAULT_SETUP_TIMEOUT,
            Some(t) => match t.parse::<u64>() {
                Ok(n) if (1..=3600).contains(&n) => Duration::from_secs(n),
                _ => return usage(format!("--setup-timeout: `{t}` is not 1-3600 seconds")),
            },
        };
        if json.as_deref() == Some("") {
            return usage("--json needs a file name (or - for standard output)");
        }
        Ok(TryPlan {
            choices,
            rwlocks_explicit: rwlocks.is_some(),
            repeats,
            rate,
            same_output,
            setup,
            setup_timeout,
            json,
            cmd,
        })
    }
}

impl TryPlan {
    fn uses_rate(&self) -> bool {
        self.rate.is_some()
    }
}

/// The words of a shell line, quoted where needed (for the recommendation line).
fn shell_words(cmd: &[String]) -> String {
    cmd.iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command. Fails (exit 1) when a choice failed a run; bad input is a usage error (exit 2); a
/// program not found ends the lab with 127 (126: not executable).
pub fn command(plan: &TryPlan) -> anyhow::Result<()> {
    let program = &plan.cmd[0];
    let found = if program.contains('/') {
        let p = Path::new(program);
        if !p.exists() {
            None
        } else {
            Some(
                std::fs::metadata(p)
                    .map(|m| {
                        p.is_file()
                            && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111
                                != 0
                    })
                    .unwrap_or(false),
            )
        }
    } else if on_path(program) {
        Some(true)
    } else {
        None
    };
    match found {
        None => {
            eprintln!("locklab: error: `{program}`: command not found");
            std::process::exit(127);
        }
        Some(false) => {
            eprintln!("locklab: error: `{program}`: not an executable file");
            std::process::exit(126);
        }
        Some(true) => {}
    }
    let lib = preload::find_library(&std::env::current_exe()?)?;
    // A --json file that cannot be written is said now, not after every run.
    if let Some(f) = plan.json.as_deref().filter(|f| *f != "-") {
        std::fs::File::create(f).map_err(|e| anyhow::anyhow!("cannot write {f}: {e}"))?;
    }
    // Before any thread: the lab reaps what the runs leave, and a signal cleans up.
    cleanup::install();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let scratch = cleanup::Scratch::new(
        std::env::temp_dir().join(format!("locklab-try-{}-{nanos}", std::process::id())),
    )?;
    let r = Runner {
        plan,
        lib,
        scratch: scratch.path().to_path_buf(),
    };
    measure(&r)
}

/// The runs, the table, the prediction, the recommendation and the JSON.
fn measure(r: &Runner) -> anyhow::Result<()> {
    let plan = r.plan;
    let m = run_all(r)?;
    let (rows, failed) = table(plan, &m);
    // The prediction from glibc's statistics, beside the measurement.
    let predicted = crate::engine::advice::from_processes(&m.glibc_processes, None, None, false);
    match &predicted {
        Ok(p) => println!(
            "\npredicted from the lock statistics (advise --from): {}",
            p.summary()
        ),
        Err(e) => println!("\npredicted from the lock statistics: none ({e})"),
    }
    let recommendation = recommend(r, &m.choices, &rows);
    if let Ok(p) = &predicted {
        check_prediction(p, &rows);
    }
    println!("recommendation: {recommendation}");
    if let Some(target) = &plan.json {
        write_json(
            target,
            plan,
            &rows,
            &predicted,
            &recommendation,
            m.ref_status,
        )?;
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "the program failed under {} (not under glibc): see the row{}",
            failed.join(", "),
            if failed.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(
        locks: Option<&str>,
        rw: Option<&str>,
        rate: Option<&str>,
    ) -> Result<TryPlan, UsageError> {
        TryPlan::try_from(TryArgs {
            locks: locks.map(Into::into),
            rwlocks: rw.map(Into::into),
            rate: rate.map(Into::into),
            cmd: vec!["true".into()],
            ..TryArgs::default()
        })
    }

    #[test]
    fn defaults_glibc_first_and_bad_flags_in_one_line() {
        let p = parse(None, None, None).unwrap();
        let labels: Vec<_> = p.choices.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "glibc",
                "glibc-adaptive",
                "mutex",
                "mcs",
                "qspinlock",
                "rwlock:rwsem",
                "rwlock:rwspinlock"
            ]
        );
        assert!(!p.rwlocks_explicit);
        let p = parse(Some("mcs,glibc,mcs"), Some("rwspinlock"), None).unwrap();
        let labels: Vec<_> = p.choices.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["glibc", "mcs", "rwlock:rwspinlock"]);
        assert_eq!(
            p.choices[2].env,
            [
                ("LOCKLAB_MUTEX", "glibc".to_string()),
                ("LOCKLAB_RWLOCK", "rwspinlock".to_string())
            ]
        );
        let e = parse(Some("mcs,bogus"), None, None).unwrap_err().0;
        assert!(
            e.contains("unknown lock `bogus`") && !e.contains('\n'),
            "{e}"
        );
        let e = parse(None, Some("nope"), None).unwrap_err().0;
        assert!(e.contains("unknown rwlock `nope`"), "{e}");
        let e = parse(None, None, Some("ops: [0-9]+")).unwrap_err().0;
        assert!(e.contains("has no group"), "{e}");
        let e = parse(None, None, Some("ops: ([0-9]+")).unwrap_err().0;
        assert!(
            e.contains("not a regular expression") && !e.contains('\n'),
            "{e}"
        );
        assert!(TryPlan::try_from(TryArgs::default()).is_err());
        let cmd = vec!["x".to_string()];
        assert!(
            TryPlan::try_from(TryArgs {
                repeats: Some("0".into()),
                cmd: cmd.clone(),
                ..TryArgs::default()
            })
            .is_err()
        );
        assert!(
            TryPlan::try_from(TryArgs {
                setup: Some(" ".into()),
                cmd,
                ..TryArgs::default()
            })
            .is_err()
        );
    }

    #[test]
    fn the_rate_is_the_last_match_of_the_first_group() {
        let plan = parse(None, None, Some(r"ops/s: ([0-9.,]+)")).unwrap();
        let r = Runner {
            plan: &plan,
            lib: PathBuf::new(),
            scratch: PathBuf::new(),
        };
        let o = |out: &str, err: &str| Outcome {
            status: ExitStatus::from_raw(0),
            wall: 2.0,
            stdout: out.as_bytes().to_vec(),
            stderr: err.into(),
        };
        assert_eq!(r.value(&o("ops/s: 10\nops/s: 1,250.5\n", "")), Ok(1250.5));
        assert_eq!(r.value(&o("nothing", "ops/s: 7")), Ok(7.0), "stderr too");
        assert!(
            r.value(&o("nothing", ""))
                .unwrap_err()
                .contains("matched nothing")
        );
        let wall = parse(None, None, None).unwrap();
        let r = Runner {
            plan: &wall,
            lib: PathBuf::new(),
            scratch: PathBuf::new(),
        };
        assert_eq!(r.value(&o("", "")), Ok(2.0));
    }

    #[test]
    fn differences_name_the_line() {
        assert_eq!(
            first_difference(b"a\nnusers 1\nz\n", b"a\nnusers 0\nz\n"),
            "line 2: `nusers 0` (glibc: `nusers 1`)"
        );
        assert_eq!(
            shell_words(&["sh".into(), "-c".into(), "echo 'x'".into()]),
            r"sh -c 'echo '\''x'\'''"
        );
    }
}
