//! One run of the program under one choice: its own process group, bounded in time, with its
//! setup; its value (wall time or `--rate`) and where two outputs first differ.

use super::*;

/// One finished run.
pub(super) struct Outcome {
    pub(super) status: ExitStatus,
    pub(super) wall: f64,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: String,
}

pub(super) fn status_text(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{s}"),
    }
}

/// The last `n` non-empty lines of a program's stderr, for a one-line message: each line cut to 160
/// characters and the whole to 400, with what was left out counted (a program's stderr can be
/// megabytes, on one line or many).
pub(super) fn tail(text: &str, n: usize) -> String {
    pub(super) const LINE: usize = 160;
    pub(super) const ALL: usize = 400;
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
pub(super) fn wait_group(
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
pub(super) const FIRST_LIMIT: Duration = Duration::from_secs(3600);

/// When a setup or glibc's first run (the ones without an earlier run to bound them) says it is
/// still running (or at half its bound, if sooner).
pub(super) const NOTICE_AFTER: Duration = Duration::from_secs(10);

pub(super) struct Runner<'a> {
    pub(super) plan: &'a TryPlan,
    pub(super) lib: PathBuf,
    pub(super) scratch: PathBuf,
}

impl Runner<'_> {
    /// Runs the setup, then the command under `choice` (statistics into `stat`), bounded by `limit`.
    pub(super) fn run(
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
    pub(super) fn value(&self, o: &Outcome) -> Result<f64, String> {
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
pub(super) fn first_difference(a: &[u8], b: &[u8]) -> String {
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
