//! Running the real programs: one verified run (its status and the program's own checks), servers
//! started, waited for on their port and stopped, and every run bounded in time.

use super::*;
use std::os::unix::process::CommandExt;

/// Runs one app once under `lock`; the throughput (ops/s), or why it failed. With `stat`, the run
/// keeps lock statistics in that directory (glibc's locks too: the library is then preloaded with
/// `LOCKLAB_MUTEX=glibc`, and counts around glibc's own calls); a server is stopped with `SIGTERM`
/// so that it exits and writes them.
pub(super) fn run_once(
    app: &App,
    lock: &str,
    threads: usize,
    quick: bool,
    dir: &Path,
    stat: Option<&Path>,
) -> Result<f64, String> {
    let lib = preload::find_library(&std::env::current_exe().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let with_lock = |c: &mut Command| {
        c.env_remove("LD_PRELOAD")
            .env_remove("LOCKLAB_MUTEX")
            .env_remove("LOCKLAB_STAT");
        if lock != "glibc" || stat.is_some() {
            c.env("LD_PRELOAD", &lib).env("LOCKLAB_MUTEX", lock);
        }
        if let Some(d) = stat {
            c.env("LOCKLAB_STAT", crate::lockstat::env_value(d));
        }
    };
    let kill = |child: Option<Child>| {
        if stat.is_some() {
            stop(child)
        } else {
            kill(child)
        }
    };
    let mut server: Option<Child> = None;
    let mut port = 0u16;
    if let Some(server_args) = &app.server {
        port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let args = app.words(server_args, dir, threads, quick, port);
        let mut c = Command::new(&args[0]);
        c.args(&args[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        with_lock(&mut c);
        server = Some(
            c.spawn()
                .map_err(|e| format!("cannot start {}: {e}", args[0]))?,
        );
        if !wait_for_port(port, SERVER_READY) {
            kill(server.take());
            crate::cleanup::reap_descendants();
            return Err(format!(
                "the server (server.command) did not listen on port {port} in {} s",
                SERVER_READY.as_secs()
            ));
        }
    }
    let args = app.words(&app.args, dir, threads, quick, port);
    let mut c = Command::new(&args[0]);
    c.args(&args[1..]).current_dir(dir);
    if server.is_none() {
        with_lock(&mut c);
    } else {
        c.env_remove("LD_PRELOAD");
    }
    let start = Instant::now();
    let keep: Vec<i32> = server.iter().map(|s| s.id() as i32).collect();
    let step = format!("the run (run.timeout_s = {})", app.run_timeout.as_secs());
    let out = run_limited(c, app.run_timeout, &keep, &step);
    let wall = start.elapsed().as_secs_f64();
    let alive = server
        .as_mut()
        .is_none_or(|s| matches!(s.try_wait(), Ok(None)));
    kill(server);
    // Whatever the run and the server left (daemons included: the lab is their subreaper).
    crate::cleanup::reap_descendants();
    if !alive {
        // The server must still be alive after the load (a crash under our locks is a failure).
        return Err("the server died under the load".into());
    }
    let (status, text) = out?;
    if !status {
        return Err(format!(
            "exit status not 0; last lines:\n{}",
            last_lines(&text, 5)
        ));
    }
    app.verify.check(&text)?;
    match app.throughput(threads, quick, &text, wall) {
        Some(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err("no throughput in the output".into()),
    }
}

pub(super) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How long a server has to listen on its port.
pub(super) const SERVER_READY: Duration = Duration::from_secs(10);

/// Kills a child started as the leader of its own process group, with its group.
pub(super) fn kill(child: Option<Child>) {
    if let Some(mut c) = child {
        // SAFETY: a signal to the process group our own (unreaped) child leads.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Stops a server the way its operator would (`SIGTERM`), so it exits normally; killed after 10 s.
pub(super) fn stop(child: Option<Child>) {
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
pub(super) fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub(super) fn wait_for_port(port: u16, limit: Duration) -> bool {
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
pub(super) fn run_limited(
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
    let group = crate::cleanup::Group::new(child.id() as i32);
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
    crate::cleanup::hold_if_ending();
    group.kill();
    let _ = child.wait();
    drop(group);
    crate::cleanup::reap_descendants_except(keep);
    let mut text = reader.join().unwrap_or_default();
    text.push_str(&err_reader.join().unwrap_or_default());
    Ok((status?.success(), text))
}
