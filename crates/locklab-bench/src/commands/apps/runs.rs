//! One verified run of an app under a lock choice: its status and the program's own checks, its
//! server started and stopped, its throughput.

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
            c.env("LOCKLAB_STAT", crate::external::lockstat::env_value(d));
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
            crate::external::cleanup::reap_descendants();
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
    crate::external::cleanup::reap_descendants();
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
