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

/// One finished run.
struct Outcome {
    status: ExitStatus,
    wall: f64,
    stdout: Vec<u8>,
    stderr: String,
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

fn status_text(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{s}"),
    }
}

/// The last `n` non-empty lines of a program's stderr, for a one-line message: each line cut to 160
/// characters and the whole to 400, with what was left out counted (a program's stderr can be
/// megabytes, on one line or many).
fn tail(text: &str, n: usize) -> String {
    const LINE: usize = 160;
    const ALL: usize = 400;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let kept = &lines[lines.len().saturating_sub(n)..];
    let mut cut_bytes = text.len();
    let mut parts: Vec<String> = Vec::new();
    let mut room = ALL;
    for l in kept.iter().rev() {
        if room == 0 {
            break;
        }
        // The end of a long line: the message a program prints last is what explains its end.
        let want = l.len().min(LINE).min(room);
        let mut start = l.len() - want;
        while !l.is_char_boundary(start) {
            start += 1;
        }
        let piece = &l[start..];
        cut_bytes -= piece.len();
        room -= piece.len();
        parts.push(if start > 0 {
            format!("...{piece}")
        } else {
            piece.to_string()
        });
    }
    parts.reverse();
    let mut s = parts.join(" | ");
    let whole = parts.len() == lines.len() && parts.iter().all(|p| !p.starts_with("..."));
    if !whole {
        s += &format!(
            " [stderr cut: {cut_bytes} of its {} bytes not shown]",
            text.len()
        );
    }
    s
}

/// Waits for `child` (the leader of its own process group, started at `start`) for at most
/// `limit`, then kills its group either way (on time-out, or whatever it left behind) and every
/// other descendant the lab has (a daemon that left the group: the lab is their subreaper): its
/// status (`None`: killed at the limit) and its wall time in seconds. The group is known to the
/// signal thread meanwhile ([`cleanup::Group`]). With `notice`, a line on stderr once the wait
/// passes [`NOTICE_AFTER`]: what is still running, and until when.
fn wait_group(
    child: &mut std::process::Child,
    start: Instant,
    limit: Duration,
    notice: Option<&str>,
) -> std::io::Result<(Option<ExitStatus>, f64)> {
    let group = cleanup::Group::new(child.id() as i32);
    let mut noticed = notice.is_none();
    let notice_after = NOTICE_AFTER.min(limit / 2);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > limit => break None,
            Ok(None) => {
                if !noticed && start.elapsed() > notice_after {
                    noticed = true;
                    eprintln!(
                        "locklab try: {} still running after {} s (stopped at {} s)",
                        notice.unwrap_or_default(),
                        notice_after.as_secs(),
                        limit.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    let wall = start.elapsed().as_secs_f64();
    cleanup::hold_if_ending();
    group.kill();
    if status.is_none() {
        let _ = child.wait();
    }
    drop(group);
    cleanup::reap_descendants();
    Ok((status, wall))
}

/// The bound of glibc's first run (nothing measured yet to bound it by).
const FIRST_LIMIT: Duration = Duration::from_secs(3600);

/// When a setup or glibc's first run (the ones without an earlier run to bound them) says it is
/// still running (or at half its bound, if sooner).
const NOTICE_AFTER: Duration = Duration::from_secs(10);

struct Runner<'a> {
    plan: &'a TryPlan,
    lib: PathBuf,
    scratch: PathBuf,
}

impl Runner<'_> {
    /// Runs the setup, then the command under `choice` (statistics into `stat`), bounded by `limit`.
    fn run(
        &self,
        choice: &Choice,
        stat: Option<&Path>,
        limit: Duration,
    ) -> anyhow::Result<Result<Outcome, String>> {
        if let Some(setup) = &self.plan.setup {
            // Its own group and its own bound (`--setup-timeout`): a setup that hangs must not hang
            // `try`.
            let err_path = self.scratch.join("setup-stderr");
            let mut child = Command::new("sh")
                .arg("-c")
                .arg(setup)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&err_path)?)
                .process_group(0)
                .spawn()
                .map_err(|e| anyhow::anyhow!("--setup: cannot run sh: {e}"))?;
            let limit = self.plan.setup_timeout;
            let (status, _) = wait_group(
                &mut child,
                Instant::now(),
                limit,
                Some(&format!("--setup `{setup}`")),
            )?;
            let stderr =
                String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default()).into_owned();
            match status {
                None => anyhow::bail!(
                    "--setup `{setup}` did not finish in {} s (--setup-timeout): stopped",
                    limit.as_secs()
                ),
                Some(st) if !st.success() => anyhow::bail!(
                    "--setup `{setup}` failed ({}): {}",
                    status_text(&st),
                    tail(&stderr, 3)
                ),
                Some(_) => {}
            }
        }
        let out_path = self.scratch.join("stdout");
        let err_path = self.scratch.join("stderr");
        let mut c = Command::new(&self.plan.cmd[0]);
        c.args(&self.plan.cmd[1..])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path)?)
            .stderr(std::fs::File::create(&err_path)?)
            .process_group(0);
        for k in [
            "LOCKLAB_MUTEX",
            "LOCKLAB_RWLOCK",
            "LOCKLAB_SPIN",
            "LOCKLAB_STAT",
        ] {
            c.env_remove(k);
        }
        let existing = std::env::var_os("LD_PRELOAD");
        if !choice.env.is_empty() || stat.is_some() {
            c.env("LD_PRELOAD", preload::preload_value(&self.lib, existing));
            if choice.env.is_empty() {
                // glibc's own locks, counted through the library.
                for k in ["LOCKLAB_MUTEX", "LOCKLAB_RWLOCK", "LOCKLAB_SPIN"] {
                    c.env(k, "glibc");
                }
            }
            for (k, v) in &choice.env {
                c.env(k, v);
            }
        }
        if let Some(d) = stat {
            c.env("LOCKLAB_STAT", crate::external::lockstat::env_value(d));
        }
        let start = Instant::now();
        let mut child = match c.spawn() {
            Ok(ch) => ch,
            Err(e) => {
                // The program cannot be started at all (not an executable format, no permission):
                // the shell's status, one line.
                eprintln!("locklab: error: cannot run `{}`: {e}", self.plan.cmd[0]);
                let _ = std::fs::remove_dir_all(&self.scratch);
                std::process::exit(if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                });
            }
        };
        let notice = (limit >= FIRST_LIMIT).then(|| format!("`{}`", shell_words(&self.plan.cmd)));
        let (status, wall) = wait_group(&mut child, start, limit, notice.as_deref())?;
        let stdout = std::fs::read(&out_path).unwrap_or_default();
        let stderr =
            String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default()).into_owned();
        let Some(status) = status else {
            return Ok(Err(format!(
                "did not finish in {:.0} s, ten times glibc's slowest run (hung, or far slower): no more runs of it; stderr: {}",
                limit.as_secs_f64(),
                tail(&stderr, 3)
            )));
        };
        Ok(Ok(Outcome {
            status,
            wall,
            stdout,
            stderr,
        }))
    }

    /// The run's throughput: the program's rate, or its wall time (seconds).
    fn value(&self, o: &Outcome) -> Result<f64, String> {
        match &self.plan.rate {
            None => Ok(o.wall),
            Some(re) => {
                let out = String::from_utf8_lossy(&o.stdout);
                let find = |text: &str| {
                    re.captures_iter(text)
                        .last()
                        .and_then(|c| c.get(1))
                        .map(|m| m.as_str().replace([',', '_'], ""))
                };
                let Some(v) = find(&out).or_else(|| find(&o.stderr)) else {
                    return Err(format!(
                        "--rate `{}` matched nothing in the output",
                        re.as_str()
                    ));
                };
                match v.trim().parse::<f64>() {
                    Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                    _ => Err(format!("--rate's group read `{v}`, not a positive number")),
                }
            }
        }
    }
}

/// Where the first difference between two outputs is: `line L`.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let line = a[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let show = |s: &[u8]| {
        let start = s[..at.min(s.len())]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |p| p + 1);
        let end = s[start..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(s.len(), |p| start + p);
        let l = String::from_utf8_lossy(&s[start..end]).into_owned();
        if l.len() > 80 {
            format!("{}...", &l[..l.floor_char_boundary(80)])
        } else {
            l
        }
    };
    format!("line {line}: `{}` (glibc: `{}`)", show(b), show(a))
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

/// One choice's runs and what went wrong.
#[derive(Default, Clone)]
struct Arm {
    /// A run was killed at the time limit: the row runs no more (each would cost the limit again).
    gave_up: bool,
    values: Vec<f64>,
    failure: Option<String>,
    top: Vec<serde_json::Value>,
}

/// What the runs gave: the choices run (the rwlock rows only if the program takes rwlocks), each
/// one's runs, glibc's lock statistics and glibc's exit status (the reference).
struct Measured {
    choices: Vec<Choice>,
    arms: Vec<Arm>,
    glibc_processes: Vec<crate::external::lockstat::ProcessStat>,
    takes_rwlocks: bool,
    ref_status: Option<ExitStatus>,
}

/// The repeats' state: glibc's first run (status and output: the reference every run is checked
/// against), glibc's slowest run (the time limit of the others), and a difference between glibc's
/// own outputs.
#[derive(Default)]
struct Repeats {
    reference: Option<(ExitStatus, Vec<u8>)>,
    glibc_max: f64,
    nondeterministic: Option<String>,
}

/// How long a run may take: 10 x glibc's slowest (at least 10 s), or [`FIRST_LIMIT`] before glibc
/// has run.
fn limit(glibc_max: f64) -> Duration {
    if glibc_max > 0.0 {
        Duration::from_secs_f64((10.0 * glibc_max).max(10.0))
    } else {
        FIRST_LIMIT
    }
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

/// Every run: glibc's with statistics first, the repeats interleaved, then one run with statistics
/// per other choice (its top call sites).
fn run_all(r: &Runner) -> anyhow::Result<Measured> {
    let plan = r.plan;
    let stat_dir = r.scratch.join("stat");
    let stat_run = |choice: &Choice,
                    limit: Duration|
     -> anyhow::Result<(
        Result<Outcome, String>,
        Vec<crate::external::lockstat::ProcessStat>,
    )> {
        let _ = std::fs::remove_dir_all(&stat_dir);
        std::fs::create_dir_all(&stat_dir)?;
        let o = r.run(choice, Some(&stat_dir), limit)?;
        let (mut processes, _) = crate::external::lockstat::read_dir(&stat_dir);
        crate::external::lockstat::symbolise(&mut processes);
        Ok((o, processes))
    };
    // First, glibc with statistics: whether the program takes rwlocks (the rwlock rows), and the
    // statistics the prediction reads.
    let (glibc_stat, glibc_processes) = stat_run(&plan.choices[0], FIRST_LIMIT)?;
    let takes_rwlocks = glibc_processes
        .iter()
        .flat_map(|p| &p.records)
        .any(|rec| rec.kind == "rwlock" && rec.acquisitions + rec.read_acquisitions > 0);
    let choices: Vec<Choice> = plan
        .choices
        .iter()
        .filter(|c| plan.rwlocks_explicit || takes_rwlocks || !c.label.starts_with("rwlock:"))
        .cloned()
        .collect();
    let n = choices.len();
    let mut arms: Vec<Arm> = vec![Arm::default(); n];
    print_header(plan, n);
    let total = (plan.repeats * n + n - 1) as u64;
    let bar = progress_bar(total);
    let mut state = Repeats::default();
    for _ in 0..plan.repeats {
        for (i, choice) in choices.iter().enumerate() {
            bar.set_message(format!(
                "run {} of {total}: {}",
                bar.position() + 1,
                choice.label
            ));
            if arms[i].gave_up {
                bar.inc(1);
                continue;
            }
            let o = r.run(choice, None, limit(state.glibc_max))?;
            bar.inc(1);
            if let Err(e) = state.record(r, i, o, &mut arms[i]) {
                bar.finish_and_clear();
                return Err(e);
            }
        }
    }
    // One more run per choice with statistics: its top call sites (glibc's was the first run).
    let ref_status = state.reference.as_ref().map(|r| r.0);
    let check_stat = |o: Result<Outcome, String>| -> Option<String> {
        match (o, ref_status) {
            (Err(e), _) => Some(format!("(run with statistics) {e}")),
            (Ok(o), Some(s)) if o.status != s => Some(format!(
                "(run with statistics) {} (glibc: {}); stderr: {}",
                status_text(&o.status),
                status_text(&s),
                tail(&o.stderr, 5)
            )),
            _ => None,
        }
    };
    arms[0].top = crate::external::lockstat::top_sites(&glibc_processes, 3);
    if let Some(e) = check_stat(glibc_stat) {
        arms[0].failure.get_or_insert(e);
    }
    for (i, choice) in choices.iter().enumerate().skip(1) {
        bar.set_message(format!(
            "run {} of {total}: {} (statistics)",
            bar.position() + 1,
            choice.label
        ));
        bar.inc(1);
        if arms[i].gave_up {
            continue;
        }
        let (o, processes) = stat_run(choice, limit(state.glibc_max))?;
        arms[i].top = crate::external::lockstat::top_sites(&processes, 3);
        if let Some(e) = check_stat(o) {
            arms[i].failure.get_or_insert(e);
        }
    }
    bar.finish_and_clear();
    if let Some(d) = state.nondeterministic {
        anyhow::bail!(
            "--same-output: the program's standard output differs between its own runs under glibc ({d}): it cannot be compared"
        );
    }
    Ok(Measured {
        choices,
        arms,
        glibc_processes,
        takes_rwlocks,
        ref_status,
    })
}

/// The first line: the command, the repeats and choices, what is measured.
fn print_header(plan: &TryPlan, n: usize) {
    println!(
        "locklab try: {}\n{} repeats interleaved over {} choices; {}{}",
        shell_words(&plan.cmd),
        plan.repeats,
        n,
        if plan.uses_rate() {
            format!(
                "rate from the output (`{}`)",
                plan.rate.as_ref().unwrap().as_str()
            )
        } else {
            "wall time".into()
        },
        if plan.same_output {
            "; standard output must match glibc's"
        } else {
            ""
        }
    );
}

/// The progress bar on a terminal (hidden otherwise).
fn progress_bar(total: u64) -> indicatif::ProgressBar {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg}, {eta} left").expect("a valid template"),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    }
}

impl Repeats {
    /// Checks one run of choice `i` against glibc's reference and keeps its value in `arm`; an
    /// error when glibc itself fails.
    fn record(
        &mut self,
        r: &Runner,
        i: usize,
        o: Result<Outcome, String>,
        arm: &mut Arm,
    ) -> anyhow::Result<()> {
        let plan = r.plan;
        let o = match o {
            Ok(o) => o,
            Err(e) if i == 0 && self.reference.is_none() => {
                anyhow::bail!(
                    "the program fails under glibc itself ({e}): nothing to compare the locks with"
                );
            }
            Err(e) => {
                arm.gave_up = true;
                arm.failure.get_or_insert(e);
                return Ok(());
            }
        };
        if i == 0 {
            self.glibc_max = self.glibc_max.max(o.wall);
        }
        if self.reference.is_none() && !o.status.success() {
            // Every row is compared with glibc's run: a program that fails under glibc itself
            // would "verify" everywhere while measuring its failure.
            anyhow::bail!(
                "the program fails under glibc itself ({}; stderr: {}): nothing to compare the locks with",
                status_text(&o.status),
                tail(&o.stderr, 3)
            );
        }
        let (ref_status, ref_out) = self
            .reference
            .get_or_insert_with(|| (o.status, o.stdout.clone()));
        if o.status != *ref_status {
            arm.failure.get_or_insert(format!(
                "{} (glibc: {}); stderr: {}",
                status_text(&o.status),
                status_text(ref_status),
                tail(&o.stderr, 5)
            ));
            return Ok(());
        }
        if plan.same_output && o.stdout != *ref_out {
            let d = first_difference(ref_out, &o.stdout);
            if i == 0 {
                self.nondeterministic.get_or_insert(d);
            } else {
                arm.failure
                    .get_or_insert(format!("standard output differs from glibc's, {d}"));
            }
            return Ok(());
        }
        match r.value(&o) {
            Ok(v) => arm.values.push(v),
            Err(e) => {
                arm.failure.get_or_insert(e);
            }
        }
        Ok(())
    }
}

/// Prints the table (and each row's top contended site); the rows, and the choices that failed.
fn table(plan: &TryPlan, m: &Measured) -> (Vec<AppRow>, Vec<String>) {
    let unit = if plan.uses_rate() { "rate" } else { "s" };
    let higher = plan.uses_rate();
    let fmt = |v: f64| {
        if higher {
            crate::engine::output::human_rate(v)
        } else {
            format!("{v:.3} s")
        }
    };
    let g = spread(&m.arms[0].values);
    println!(
        "\n{:<18} {:>12}  {:>25}  {:>9}  verdict",
        "lock", "median", "spread", "speed-up"
    );
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (i, choice) in m.choices.iter().enumerate() {
        let arm = &m.arms[i];
        let s = spread(&arm.values);
        let ratio = match (higher, g.0 > 0.0 && s.0 > 0.0) {
            (_, false) => 0.0,
            (true, true) => s.0 / g.0,
            (false, true) => g.0 / s.0,
        };
        let v = if i == 0 {
            "reference".to_string()
        } else {
            let runs = arm.values.len().min(m.arms[0].values.len());
            // Time: lower is better, so the spreads are compared as speeds.
            let (ours, base) = if higher {
                ((s.1, s.2), (g.1, g.2))
            } else {
                ((-s.2, -s.1), (-g.2, -g.1))
            };
            verdict(ours, base, runs).to_string()
        };
        if arm.failure.is_some() {
            failed.push(choice.label.clone());
        }
        let (median, range, speedup) = if arm.values.is_empty() {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            (
                fmt(s.0),
                format!("[{} - {}]", fmt(s.1), fmt(s.2)),
                format!("{ratio:.2}x"),
            )
        };
        println!(
            "{:<18} {:>12}  {:>25}  {:>9}  {}",
            choice.label,
            median,
            range,
            speedup,
            match &arm.failure {
                None => v.clone(),
                Some(f) => format!("FAILED: {f}"),
            }
        );
        if let Some(top) = arm
            .top
            .first()
            .filter(|t| t["contentions"].as_u64() > Some(0))
        {
            println!(
                "{:<18} top lock: {} contentions, {} waiting, at {}",
                "",
                top["contentions"],
                crate::external::lockstat::ns_text(top["wait_ns_total"].as_u64().unwrap_or(0)),
                top["site"].as_str().unwrap_or("?")
            );
        }
        rows.push(AppRow {
            app: plan.cmd[0].clone(),
            lock: choice.label.clone(),
            threads: 0,
            unit: unit.into(),
            higher_is_better: higher,
            runs: arm.values.clone(),
            median: s.0,
            min: s.1,
            max: s.2,
            ratio_vs_glibc: ratio,
            verdict: if arm.failure.is_some() {
                "failed".into()
            } else {
                v
            },
            verified: arm.failure.is_none(),
            failure: arm.failure.clone(),
            top_locks: arm.top.clone(),
        });
    }
    if !plan.rwlocks_explicit && !m.takes_rwlocks {
        println!("(no rwlock rows: the program took no pthread rwlock under glibc)");
    }
    (rows, failed)
}

/// The recommendation: the fastest choice that is faster beyond noise, or why glibc stays.
fn recommend(r: &Runner, choices: &[Choice], rows: &[AppRow]) -> String {
    let plan = r.plan;
    let best = rows
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, row)| row.verified && row.verdict == "faster")
        .max_by(|a, b| a.1.ratio_vs_glibc.total_cmp(&b.1.ratio_vs_glibc));
    match best {
        Some((i, row)) => {
            let vars: Vec<String> = choices[i]
                .env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "set LD_PRELOAD={} {} ({:.2}x glibc, faster beyond noise): {}",
                r.lib.display(),
                vars.join(" "),
                row.ratio_vs_glibc,
                format_args!(
                    "locklab run --{} {} -- {}",
                    if choices[i].label.starts_with("rwlock:") {
                        "rwlock"
                    } else {
                        "mutex"
                    },
                    choices[i].label.trim_start_matches("rwlock:"),
                    shell_words(&plan.cmd)
                )
            )
        }
        None => {
            let near = rows
                .iter()
                .skip(1)
                .filter(|row| row.verified && row.ratio_vs_glibc > 0.0)
                .max_by(|a, b| a.ratio_vs_glibc.total_cmp(&b.ratio_vs_glibc));
            match near {
                Some(row) => format!(
                    "keep glibc: no choice is faster beyond noise here (best: {} at {:.2}x, {})",
                    row.lock, row.ratio_vs_glibc, row.verdict
                ),
                None => "keep glibc: no choice ran verified".into(),
            }
        }
    }
}

/// The measurement of the choice the lock statistics predicted.
fn check_prediction(p: &crate::engine::advice::Prediction, rows: &[AppRow]) {
    match rows.iter().find(|row| row.lock == p.process_choice) {
        Some(m) => println!(
            "  measured for the predicted choice {}: {:.2}x, {}{}",
            m.lock,
            m.ratio_vs_glibc,
            m.verdict,
            match m.verdict.as_str() {
                "slower" => " (the prediction and the measurement disagree)",
                _ => "",
            }
        ),
        None => println!(
            "  the predicted choice {} was not measured (add it with --locks)",
            p.process_choice
        ),
    }
}

/// `--json`: one row per choice in `apps`' schema, the prediction and the recommendation.
fn write_json(
    target: &str,
    plan: &TryPlan,
    rows: &[AppRow],
    predicted: &anyhow::Result<crate::engine::advice::Prediction>,
    recommendation: &str,
    ref_status: Option<ExitStatus>,
) -> anyhow::Result<()> {
    let higher = plan.uses_rate();
    let doc = serde_json::json!({
        "locklab_version": env!("CARGO_PKG_VERSION"),
        "machine": crate::engine::limits::machine(),
        "command": plan.cmd,
        "measure": if higher { "rate" } else { "wall time" },
        "apps": rows,
        "predicted": predicted.as_ref().ok(),
        "recommendation": recommendation,
        "glibc_status": ref_status.map(|s| status_text(&s)),
    });
    let text = serde_json::to_string_pretty(&doc)? + "\n";
    if target == "-" {
        print!("{text}");
    } else {
        std::fs::write(target, text).map_err(|e| anyhow::anyhow!("cannot write {target}: {e}"))?;
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
