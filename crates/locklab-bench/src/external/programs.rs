//! Driving external programs: found on `PATH`, started in their own process group, servers waited
//! for on their port and stopped, every run bounded in time and whatever it left reaped.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The last `n` non-blank lines of `text`.
///
/// ```
/// use locklab_bench::external::programs::last_lines;
/// assert_eq!(last_lines("a\n\nb\nc\n", 2), "b\nc");
/// ```
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How long a server has to listen on its port.
pub const SERVER_READY: Duration = Duration::from_secs(10);

/// Kills a child started as the leader of its own process group, with its group.
pub fn kill(child: Option<Child>) {
    if let Some(mut c) = child {
        // SAFETY: a signal to the process group our own (unreaped) child leads.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Stops a server the way its operator would (`SIGTERM`), so it exits normally; killed after 10 s.
pub fn stop(child: Option<Child>) {
    if let Some(mut c) = child {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while matches!(c.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        kill(Some(c));
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Whether something listens on loopback `port` within `limit` (tried every 20 ms).
pub fn wait_for_port(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Runs `cmd` (stdout and stderr together) in its own process group with a time limit: `(exited
/// 0, output)`, or, at the limit, that `step` did not finish. Then the group is killed, and every
/// other child of the lab but `keep` (what the program left outside its group would hold its output
/// open, and run on).
pub fn run_limited(
    mut cmd: Command,
    limit: Duration,
    keep: &[i32],
    step: &str,
) -> Result<(bool, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{step}: cannot run: {e}"))?;
    let group = crate::external::cleanup::Group::new(child.id() as i32);
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if start.elapsed() > limit => {
                break Err(format!(
                    "{step} did not finish in {} s: stopped",
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => break Err(format!("{step}: {e}")),
        }
    };
    crate::external::cleanup::hold_if_ending();
    group.kill();
    let _ = child.wait();
    drop(group);
    crate::external::cleanup::reap_descendants_except(keep);
    let mut text = reader.join().unwrap_or_default();
    text.push_str(&err_reader.join().unwrap_or_default());
    Ok((status?.success(), text))
}

/// Whether `program` is an executable on `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| {
            let p = d.join(program);
            p.is_file()
                && std::fs::metadata(&p)
                    .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
                    .unwrap_or(false)
        })
    })
}
