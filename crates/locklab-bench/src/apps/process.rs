//! Running the real programs: one verified run (its status and the program's own checks), servers
//! started, waited for on their port and stopped, and every run bounded in time.

use super::*;

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
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        with_lock(&mut c);
        server = Some(
            c.spawn()
                .map_err(|e| format!("cannot start {}: {e}", args[0]))?,
        );
        if !wait_for_port(port, Duration::from_secs(10)) {
            kill(server.take());
            return Err(format!("{} did not listen on port {port}", args[0]));
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
    let out = run_limited(c, Duration::from_secs(600));
    let wall = start.elapsed().as_secs_f64();
    if let Some(s) = server.as_mut() {
        // The server must still be alive after the load (a crash under our locks is a failure).
        let alive = matches!(s.try_wait(), Ok(None));
        kill(server);
        if !alive {
            return Err("the server died under the load".into());
        }
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

pub(super) fn kill(child: Option<Child>) {
    if let Some(mut c) = child {
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

/// Runs `cmd` (stdout and stderr together) with a time limit: `(exited 0, output)`.
pub(super) fn run_limited(mut cmd: Command, limit: Duration) -> Result<(bool, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("did not finish in {limit:?} (a hang)"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut text = reader.join().unwrap_or_default();
    text.push_str(&err_reader.join().unwrap_or_default());
    Ok((status.success(), text))
}
