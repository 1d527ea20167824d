//! `locklab apps`: real programs from Debian, each under glibc's locks and under ours (through
//! `liblocklab_pthread.so`), repeats interleaved (glibc, ours, glibc, ours, ...), every run verified by
//! the program's own checks; median, spread, ratio to glibc and a verdict beyond noise.
//!
//! Each app is a small declarative [`App`]: the program and its package, the command for a thread
//! count, how much work one run does, where its time is (its own `time:` line, or the wall clock), how
//! a run is verified, and, for a server, how it is started and loaded. A program that is not
//! installed is listed as unavailable with the package to install, never a failure.

use crate::engine::output::human_rate;
pub use crate::engine::output::programs::AppRow;
use crate::engine::verdict::{spread, verdict};
use crate::external::preload::{self, MUTEX};
use crate::usage::{UsageError, usage};
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod runs;
pub mod spec;
use crate::external::programs::*;
use runs::run_once;

/// How a run's throughput is read.
#[derive(Clone, Debug)]
pub enum Rate {
    /// `threads x records` over the process's wall clock (every lock pays the start-up alike).
    Records,
    /// This many bytes over the wall clock.
    Bytes(f64),
    /// The first group of the last match in the output (memcaslap's `TPS:`); divided by the seconds
    /// of load when the program prints a total (sysbench's `total number of events:`).
    Regex {
        /// The expression, with at least one group.
        re: regex::Regex,
        /// Whether the number is a total over `{S}` seconds.
        per_load_second: bool,
    },
}

/// How a finished run (exit status 0 already) is verified: the program's own checks.
#[derive(Clone, Debug, Default)]
pub struct Verify {
    /// A line (trimmed) that must be in the output (Tokyo and Kyoto Cabinet's `ok`).
    pub ok_line: Option<String>,
    /// A line (trimmed) that must not be (their `error`).
    pub error_line: Option<String>,
    /// Text the output must contain.
    pub contains: Option<String>,
}

impl Verify {
    /// Whether `out` passes.
    pub fn check(&self, out: &str) -> Result<(), String> {
        if let Some(ok) = &self.ok_line
            && !out.lines().any(|l| l.trim() == ok)
        {
            return Err(format!("the program's own check did not print `{ok}`"));
        }
        if let Some(err) = &self.error_line
            && out.lines().any(|l| l.trim() == err)
        {
            return Err(format!("the program's own check printed `{err}`"));
        }
        if let Some(c) = &self.contains
            && !out.contains(c.as_str())
        {
            return Err(format!("no `{c}` in the output"));
        }
        Ok(())
    }
}

/// The app's input in the scratch directory (`input`), made once.
#[derive(Clone, Debug)]
pub enum Input {
    /// A text-like pseudo-random stream of this many bytes (compressible but not trivially).
    Words(usize),
    /// A command run in the scratch directory.
    Command(String),
}

/// One real program and how to measure and verify it: read from a spec file ([`spec`]).
#[derive(Clone, Debug)]
pub struct App {
    /// `tokyo-hash` (lab.md's names).
    pub name: String,
    /// The executables that must be installed.
    pub programs: Vec<String>,
    /// The Debian packages that have them.
    pub package: String,
    /// One line: what it runs.
    pub what: String,
    /// Expected not to move with the lock (a control).
    pub control: bool,
    /// The command, words split on spaces: `{DIR}` the scratch directory, `{T}` the threads, `{N}` the
    /// records a thread, `{S}` the seconds of load, `{PORT}` the server's port, `{_}` a space inside
    /// a word (a shell line).
    pub args: String,
    /// Records a thread for [`Rate::Records`] (a tenth under `--quick`).
    pub records: usize,
    /// Where the throughput comes from.
    pub rate: Rate,
    /// The program's own checks.
    pub verify: Verify,
    /// A server the command loads (memcached), started under the lock choice (the load without).
    pub server: Option<String>,
    /// The input made in the scratch directory, once.
    pub input: Option<Input>,
    /// How long the input command may run (`input.timeout_s`).
    pub input_timeout: Duration,
    /// How long one run may take (`run.timeout_s`).
    pub run_timeout: Duration,
    /// The spec file it came from.
    pub source: String,
}

impl App {
    /// Seconds of load for the load generators.
    fn seconds(quick: bool) -> u32 {
        if quick { 2 } else { 8 }
    }

    fn records_for(&self, quick: bool) -> usize {
        if quick {
            self.records / 10
        } else {
            self.records
        }
    }

    /// `template` with the placeholders filled in, split into words.
    fn words(
        &self,
        template: &str,
        dir: &Path,
        threads: usize,
        quick: bool,
        port: u16,
    ) -> Vec<String> {
        template
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| {
                w.replace("{DIR}", &dir.display().to_string())
                    .replace("{T}", &threads.to_string())
                    .replace("{N}", &self.records_for(quick).to_string())
                    .replace("{S}", &Self::seconds(quick).to_string())
                    .replace("{PORT}", &port.to_string())
                    .replace("{_}", " ")
            })
            .collect()
    }

    /// The throughput of a run from its output and wall-clock seconds.
    fn throughput(&self, threads: usize, quick: bool, out: &str, wall: f64) -> Option<f64> {
        match &self.rate {
            Rate::Records => Some((threads * self.records_for(quick)) as f64 / wall),
            Rate::Bytes(b) => Some(b / wall),
            Rate::Regex {
                re,
                per_load_second,
            } => {
                let v: f64 = re
                    .captures_iter(out)
                    .last()?
                    .get(1)?
                    .as_str()
                    .replace(',', "")
                    .parse()
                    .ok()?;
                Some(if *per_load_second {
                    v / f64::from(Self::seconds(quick))
                } else {
                    v
                })
            }
        }
    }

    /// Makes the input in `dir`.
    fn make_input(&self, dir: &Path) -> std::io::Result<()> {
        match &self.input {
            None => Ok(()),
            Some(Input::Words(bytes)) => {
                let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("input"))?);
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                let words = [
                    "lock ", "unlock ", "mutex ", "futex ", "spin ", "queue ", "wake ", "sleep ",
                ];
                let mut n = 0usize;
                while n < *bytes {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let w = words[(x % 8) as usize];
                    f.write_all(w.as_bytes())?;
                    n += w.len();
                }
                f.flush()
            }
            Some(Input::Command(c)) => {
                let args = self.words(c, dir, 1, false, 0);
                let mut cmd = Command::new(&args[0]);
                cmd.args(&args[1..]).current_dir(dir);
                let step = format!(
                    "the input command (input.timeout_s = {})",
                    self.input_timeout.as_secs()
                );
                let (ok, text) = run_limited(cmd, self.input_timeout, &[], &step)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", self.source)))?;
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::other(format!(
                        "{}: the input command failed: {}",
                        self.source,
                        last_lines(&text, 3)
                    )))
                }
            }
        }
    }
}

/// The apps, in lab.md's order (the shipped spec files).
pub fn apps() -> Vec<App> {
    spec::built_in()
}

/// `locklab apps` options.
#[derive(Args, Debug, Clone, Default)]
pub struct AppsArgs {
    /// Short runs, threads = CPUs, one repeat (every app still verified under every lock).
    #[arg(long)]
    pub quick: bool,
    /// Apps: tokyo-hash, tokyo-btree, kyoto-order, kyoto-wicked, memcached, sysbench-threads, pigz
    /// (or the names in --spec files).
    #[arg(long, value_name = "LIST")]
    pub apps: Option<String>,
    /// Run the apps of these spec files (TOML, the shipped ones in crates/locklab-bench/apps/ are
    /// examples) instead of the built-in ones.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub spec: Vec<String>,
    /// Lock choices (LOCKLAB_MUTEX values; glibc, meaning no preload, is always run first). Default:
    /// glibc, glibc-adaptive, mutex, mcs, qspinlock.
    #[arg(long, value_name = "LIST")]
    pub locks: Option<String>,
    /// Thread counts given to each program (default: CPUs and 2 x CPUs).
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub threads: Option<String>,
    /// Interleaved repeats (default 5; --quick 1).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub repeats: Option<String>,
    /// Also write the rows as JSON here (`-`: standard output).
    #[arg(long, value_name = "F")]
    pub json: Option<String>,
}

/// What `apps` was asked for.
#[derive(Debug, Clone)]
pub struct AppsPlan {
    /// Short runs, one repeat, threads = CPUs.
    pub quick: bool,
    /// The apps, in run order.
    pub apps: Vec<App>,
    /// Lock choices, `glibc` (no preload) first.
    pub locks: Vec<String>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Interleaved repeats.
    pub repeats: usize,
    /// `--json` target.
    pub json: Option<String>,
}

impl AppsArgs {
    /// Validates the flags (defaults: every app, glibc,mutex,mcs,qspinlock, CPUs and 2 x CPUs, 5
    /// repeats; `--quick`: CPUs only, 1 repeat, short runs). With `--spec` files, their apps
    /// instead of the shipped ones.
    pub fn plan(self, cpus: usize) -> Result<AppsPlan, UsageError> {
        let AppsArgs {
            quick,
            spec: specs,
            apps: apps_flag,
            locks,
            threads,
            repeats,
            json,
        } = self;
        let (apps_flag, locks) = (apps_flag.as_deref(), locks.as_deref());
        let (threads, repeats) = (threads.as_deref(), repeats.as_deref());
        let known = if specs.is_empty() {
            apps()
        } else {
            let mut v: Vec<App> = Vec::new();
            for f in &specs {
                let text =
                    std::fs::read_to_string(f).map_err(|e| UsageError(format!("spec {f}: {e}")))?;
                let app = spec::parse(f, &text).map_err(UsageError)?;
                if let Some(other) = v.iter().find(|a| a.name == app.name) {
                    return usage(format!(
                        "spec {f}: `name`: `{}` is also the name in {}",
                        app.name, other.source
                    ));
                }
                v.push(app);
            }
            v
        };
        let names: Vec<App> = match apps_flag {
            None => known.clone(),
            Some(list) => {
                let mut v = Vec::new();
                for n in list.split(',').map(str::trim) {
                    match known.iter().find(|a| a.name == n) {
                        Some(a) => v.push(a.clone()),
                        None => {
                            return usage(format!(
                                "unknown app `{n}` (valid: {})",
                                known
                                    .iter()
                                    .map(|a| a.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ));
                        }
                    }
                }
                v
            }
        };
        let mut lock_list: Vec<String> = match locks {
            None => ["glibc", "glibc-adaptive", "mutex", "mcs", "qspinlock"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(list) => {
                let mut v = Vec::new();
                for l in list.split(',').map(str::trim) {
                    if !MUTEX.accepts(l) {
                        return usage(format!(
                            "unknown lock `{l}` for apps (valid: {})",
                            MUTEX.valid()
                        ));
                    }
                    v.push(l.to_string());
                }
                v
            }
        };
        // glibc is the reference every ratio needs: always run, first.
        lock_list.retain(|l| l != "glibc");
        lock_list.insert(0, "glibc".into());
        let threads = match threads {
            None if quick => vec![cpus.max(1)],
            None => {
                let mut v = vec![cpus.max(1), 2 * cpus.max(1)];
                v.dedup();
                v
            }
            Some(list) => {
                let mut v = Vec::new();
                for t in list.split(',').map(str::trim) {
                    match t.parse::<usize>() {
                        Ok(n) if (1..=256).contains(&n) => v.push(n),
                        _ => {
                            return usage(format!(
                                "--threads: `{t}` is not a thread count (1-256)"
                            ));
                        }
                    }
                }
                v
            }
        };
        let repeats = match repeats {
            None => {
                if quick {
                    1
                } else {
                    5
                }
            }
            Some(r) => match r.parse::<usize>() {
                Ok(n) if (1..=50).contains(&n) => n,
                _ => return usage(format!("--repeats: `{r}` is not 1-50")),
            },
        };
        Ok(AppsPlan {
            quick,
            apps: names,
            locks: lock_list,
            threads,
            repeats,
            json,
        })
    }
}

/// An app that is not installed.
#[derive(Debug, Serialize)]
pub struct Unavailable {
    /// App name.
    pub app: String,
    /// `install PACKAGE`.
    pub unavailable: String,
}

/// What `--json` writes.
#[derive(Debug, Serialize)]
pub struct AppsReport {
    /// The lab's version.
    pub locklab_version: String,
    /// This machine.
    pub machine: crate::engine::metrics::Machine,
    /// The rows, then the unavailable apps.
    pub apps: Vec<serde_json::Value>,
}

/// The command: every app x threads, locks interleaved per repeat; a table, and `--json`. Fails (exit
/// 1) if any run did not verify.
pub fn command(plan: &AppsPlan) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    if plan.locks.iter().any(|l| l != "glibc") {
        preload::find_library(&exe)?;
    }
    let mut rows: Vec<AppRow> = Vec::new();
    let mut unavailable = Vec::new();
    // Before any thread: the lab reaps what the runs leave, and a signal cleans up.
    crate::external::cleanup::install();
    let scratch_guard = crate::external::cleanup::Scratch::new(
        std::env::temp_dir().join(format!("locklab-apps-{}", std::process::id())),
    )?;
    let scratch = scratch_guard.path();
    println!(
        "{:<17} {:>7}  {:<10} {:>15}  {:>25}  {:>9}  verdict",
        "app", "threads", "lock", "median", "spread", "vs glibc"
    );
    for app in &plan.apps {
        if let Some(u) = unavailable_app(app) {
            unavailable.push(u);
            continue;
        }
        let dir = scratch.join(&app.name);
        std::fs::create_dir_all(&dir)?;
        app.make_input(&dir)?;
        for &threads in &plan.threads {
            let cell = AppCell::measure(plan, app, threads, &dir)?;
            rows.extend(cell.rows(plan));
        }
    }
    drop(scratch_guard);
    if let Some(target) = &plan.json {
        write_json(target, &rows, &unavailable)?;
    }
    let failures = rows.iter().filter(|r| !r.verified).count();
    if failures > 0 {
        anyhow::bail!("{failures} app row(s) did not verify");
    }
    Ok(())
}

/// `Some` (printed as a row) if a program of `app` is not installed.
fn unavailable_app(app: &App) -> Option<Unavailable> {
    let missing: Vec<&str> = app
        .programs
        .iter()
        .map(String::as_str)
        .filter(|p| !on_path(p))
        .collect();
    if missing.is_empty() {
        return None;
    }
    println!(
        "{:<17} unavailable: {} not installed (install {})",
        app.name,
        missing.join(", "),
        app.package
    );
    Some(Unavailable {
        app: app.name.clone(),
        unavailable: format!("install {}", app.package),
    })
}

/// One app at one thread count under every lock of the plan: the timed runs, the first failure and
/// the top call sites of each lock (in the plan's order).
struct AppCell<'a> {
    app: &'a App,
    threads: usize,
    runs: Vec<Vec<f64>>,
    failed: Vec<Option<String>>,
    tops: Vec<Vec<serde_json::Value>>,
}

impl<'a> AppCell<'a> {
    /// The plan's repeats of every lock, interleaved, then one more run per lock, untimed, with
    /// lock statistics.
    fn measure(plan: &AppsPlan, app: &'a App, threads: usize, dir: &Path) -> anyhow::Result<Self> {
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); plan.locks.len()];
        let mut failed: Vec<Option<String>> = vec![None; plan.locks.len()];
        for _ in 0..plan.repeats {
            for (i, lock) in plan.locks.iter().enumerate() {
                clean(dir);
                match run_once(app, lock, threads, plan.quick, dir, None) {
                    Ok(v) => runs[i].push(v),
                    Err(e) => {
                        failed[i].get_or_insert(e);
                    }
                }
            }
        }
        // One more run per lock, untimed, with lock statistics: the top call sites.
        let mut tops: Vec<Vec<serde_json::Value>> = Vec::new();
        for (i, lock) in plan.locks.iter().enumerate() {
            clean(dir);
            let stat_dir = dir.join(".locklab-stat");
            let _ = std::fs::remove_dir_all(&stat_dir);
            std::fs::create_dir_all(&stat_dir)?;
            if let Err(e) = run_once(app, lock, threads, plan.quick, dir, Some(&stat_dir)) {
                failed[i].get_or_insert(format!("(run with --stat) {e}"));
            }
            let (mut processes, _) = crate::external::lockstat::read_dir(&stat_dir);
            let _ = std::fs::remove_dir_all(&stat_dir);
            crate::external::lockstat::symbolise(&mut processes);
            tops.push(crate::external::lockstat::top_sites(&processes, 5));
        }
        Ok(AppCell {
            app,
            threads,
            runs,
            failed,
            tops,
        })
    }

    /// The cell's rows, one per lock, each printed with its top lock.
    fn rows(&self, plan: &AppsPlan) -> Vec<AppRow> {
        let (app, threads, runs, failed) = (self.app, self.threads, &self.runs, &self.failed);
        let glibc = spread(&runs[0]);
        let mut rows = Vec::new();
        for (i, lock) in plan.locks.iter().enumerate() {
            let s = spread(&runs[i]);
            let ratio = if glibc.0 > 0.0 { s.0 / glibc.0 } else { 0.0 };
            let verdict = if i == 0 {
                "reference".to_string()
            } else {
                verdict(
                    (s.1, s.2),
                    (glibc.1, glibc.2),
                    runs[i].len().min(runs[0].len()),
                )
                .to_string()
            };
            let verified = failed[i].is_none();
            println!(
                "{:<17} {:>7}  {:<10} {:>15}  {:>25}  {:>8.2}x  {}",
                app.name,
                threads,
                lock,
                human_rate(s.0),
                format!("[{} - {}]", human_rate(s.1), human_rate(s.2)),
                ratio,
                if verified {
                    verdict.clone()
                } else {
                    format!("NOT VERIFIED: {}", failed[i].as_deref().unwrap_or(""))
                }
            );
            rows.push(AppRow {
                app: app.name.clone(),
                lock: lock.clone(),
                threads,
                unit: "ops/s".into(),
                higher_is_better: true,
                runs: runs[i].clone(),
                median: s.0,
                min: s.1,
                max: s.2,
                ratio_vs_glibc: ratio,
                verdict,
                verified,
                failure: failed[i].clone(),
                top_locks: self.tops[i].clone(),
            });
            if let Some(top) = self.tops[i].first() {
                println!(
                    "{:<17} {:>7}  {:<10} top lock: {} contentions, {} waiting, at {}",
                    "",
                    "",
                    "",
                    top["contentions"],
                    crate::external::lockstat::ns_text(top["wait_ns_total"].as_u64().unwrap_or(0)),
                    top["site"].as_str().unwrap_or("?")
                );
            }
        }
        rows
    }
}

/// `--json`: the rows, then the unavailable apps, to `target` (`-`: standard output).
fn write_json(target: &str, rows: &[AppRow], unavailable: &[Unavailable]) -> anyhow::Result<()> {
    let mut entries: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| serde_json::to_value(r).expect("plain data"))
        .collect();
    entries.extend(
        unavailable
            .iter()
            .map(|u| serde_json::to_value(u).expect("plain data")),
    );
    let report = AppsReport {
        locklab_version: env!("CARGO_PKG_VERSION").into(),
        machine: crate::engine::limits::machine(),
        apps: entries,
    };
    let text = serde_json::to_string_pretty(&report)?;
    if target == "-" {
        println!("{text}");
    } else {
        std::fs::write(target, text + "\n")?;
    }
    Ok(())
}

/// Empties the scratch directory but the app's input.
fn clean(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p: PathBuf = e.path();
            if p.file_name().is_some_and(|n| n != "input") {
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked_with_one_clear_line() {
        let parse = |apps: Option<&str>,
                     locks: Option<&str>,
                     threads: Option<&str>,
                     repeats: Option<&str>| {
            AppsArgs {
                apps: apps.map(Into::into),
                locks: locks.map(Into::into),
                threads: threads.map(Into::into),
                repeats: repeats.map(Into::into),
                ..AppsArgs::default()
            }
            .plan(2)
        };
        let e = parse(Some("tokyo-hash,nope"), None, None, None).unwrap_err();
        assert!(e.0.contains("unknown app `nope`"), "{e}");
        assert!(e.0.contains("tokyo-hash, tokyo-btree, kyoto-order"), "{e}");
        let e = parse(None, Some("mutex,bogus"), None, None).unwrap_err();
        assert!(e.0.contains("unknown lock `bogus`"), "{e}");
        assert!(parse(None, None, Some("0"), None).is_err());
        assert!(parse(None, None, None, Some("0")).is_err());
        assert!(parse(None, None, None, Some("x")).is_err());
        let e = AppsArgs {
            spec: vec!["/nonexistent/x.toml".into()],
            ..AppsArgs::default()
        }
        .plan(2)
        .unwrap_err();
        assert!(e.0.starts_with("spec /nonexistent/x.toml: "), "{e}");
    }

    #[test]
    fn defaults_and_glibc_first() {
        let p = AppsArgs::default().plan(2).unwrap();
        assert_eq!(p.apps.len(), apps().len());
        assert_eq!(
            p.locks,
            ["glibc", "glibc-adaptive", "mutex", "mcs", "qspinlock"]
        );
        assert_eq!(p.threads, [2, 4]);
        assert_eq!(p.repeats, 5);
        let q = AppsArgs {
            quick: true,
            locks: Some("mcs,glibc".into()),
            ..AppsArgs::default()
        }
        .plan(2)
        .unwrap();
        assert_eq!(q.locks, ["glibc", "mcs"], "glibc once, first");
        assert_eq!((q.threads.as_slice(), q.repeats), ([2].as_slice(), 1));
    }

    #[test]
    fn outputs_are_read_as_the_programs_print_them() {
        let all = apps();
        let tc = all.iter().find(|a| a.name == "tokyo-hash").unwrap();
        assert!(tc.verify.check("time: 0.050\nok\n\n").is_ok());
        assert!(tc.verify.check("time: 0.050\nerror\n").is_err());
        assert!(
            tc.verify.check("ok\nerror\n").is_err(),
            "an error line fails even with ok"
        );
        let mc = all.iter().find(|a| a.name == "memcached").unwrap();
        let out = "Run time: 8.0s Ops: 590000 TPS: 73750 Net_rate: 12.3M/s\n";
        assert_eq!(mc.throughput(2, false, out, 9.0), Some(73750.0));
        assert!(mc.verify.check("no summary").is_err());
        let sb = all.iter().find(|a| a.name == "sysbench-threads").unwrap();
        let out = "General statistics:\n    total time: 8.0001s\n    total number of events:              5000\n";
        assert_eq!(sb.throughput(4, false, out, 8.2), Some(625.0));
        assert_eq!(
            tc.throughput(4, false, "ok", 2.0),
            Some(200_000.0),
            "4 x 100,000 records in 2 s"
        );
        assert_eq!(
            tc.throughput(4, true, "ok", 2.0),
            Some(20_000.0),
            "a tenth under --quick"
        );
        let words = tc.words(&tc.args, Path::new("/d"), 4, false, 0);
        assert_eq!(
            words,
            ["tchmttest", "write", "-rnd", "/d/a.tch", "4", "100000"]
        );
        let pz = all.iter().find(|a| a.name == "pigz").unwrap();
        assert!(matches!(pz.input, Some(Input::Words(50_331_648))));
        let words = pz.words(&pz.args, Path::new("/d"), 2, true, 0);
        assert_eq!(words.len(), 3, "sh -c LINE: {words:?}");
        assert!(
            words[2].starts_with("pigz -p 2 -c /d/input > /d/input.gz"),
            "{words:?}"
        );
    }
}
