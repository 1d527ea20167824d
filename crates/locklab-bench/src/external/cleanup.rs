//! Nothing a command starts outlives it: the processes of `try`'s and `apps`' runs (daemons that
//! left their process group and session included) and their scratch directories.
//!
//! - The lab is a *child subreaper* ([`install`]): a process that a run's program orphans (the
//!   usual `fork`, `setsid`, `fork` of a daemon) is re-parented to the lab, not to init, so the lab
//!   can find it. After each run, [`reap_descendants`] kills and reaps every child the lab has then:
//!   the run's own leftovers, and the orphans of their orphans, round after round until none is left.
//! - Each program runs in its own process group, registered here ([`Group`]) while it runs.
//! - Scratch directories are [`Scratch`] guards: removed when dropped (normal return, an error, a
//!   panic), and by the signal thread.
//! - `SIGINT`, `SIGTERM` and `SIGHUP` are taken by one thread ([`install`] blocks them in every other
//!   thread): it kills the registered groups and every descendant, removes the scratch directories,
//!   then ends the lab by the same signal.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What the signal thread cleans: the running groups and the scratch directories.
struct Registry {
    groups: Vec<i32>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    groups: Vec::new(),
    dirs: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Set by the signal thread when it starts cleaning: the lab is ending by a signal.
static ENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits forever if the lab is ending by a signal: a thread that saw its child killed by the signal
/// thread must not go on (report that run as failed, end the lab with another status) while the
/// signal thread cleans up and ends the lab by the signal.
///
/// ```
/// locklab_bench::external::cleanup::hold_if_ending(); // returns at once: no signal came
/// ```
pub fn hold_if_ending() {
    // Acquire: pairs with the signal thread's Release store, before its first kill.
    while ENDING.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::park();
    }
}

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// `waitpid`'s flag for any kind of child (Linux's `__WALL`; elsewhere every child is one kind).
#[cfg(target_os = "linux")]
const WAIT_ALL: libc::c_int = libc::__WALL;
#[cfg(not(target_os = "linux"))]
const WAIT_ALL: libc::c_int = 0;

/// Makes the lab the subreaper of everything it starts and hands `SIGINT`/`SIGTERM`/`SIGHUP` to a
/// cleaning thread. Call it first thing in a command, before it starts threads (a thread started
/// before keeps the signals unblocked, and one delivered to it ends the lab without the cleaning).
/// Idempotent.
///
/// ```
/// locklab_bench::external::cleanup::install();
/// locklab_bench::external::cleanup::install();
/// ```
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with an integer argument; sigset operations on a local set; the mask of the
        // calling thread (threads started later inherit it; children get an empty mask from std's
        // spawn).
        unsafe {
            // Linux only: elsewhere the run's process group is all the lab can reach.
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let spawned = std::thread::Builder::new()
            .name("locklab-signals".into())
            .spawn(signal_thread);
        if spawned.is_err() {
            // No thread, no cleaning on a signal: at least let the signals end the lab.
            unblock();
        }
    });
}

fn unblock() {
    // SAFETY: as in `install`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

fn signal_thread() {
    // SAFETY: sigwait on a local set of signals blocked in this thread (inherited from `install`).
    let sig = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        let mut sig: libc::c_int = 0;
        while libc::sigwait(&set, &mut sig) != 0 {}
        sig
    };
    // Release: pairs with `hold_if_ending`'s Acquire, so a thread that sees a child it waits for
    // killed by what follows sees the flag.
    ENDING.store(true, std::sync::atomic::Ordering::Release);
    {
        let r = registry();
        for &g in &r.groups {
            // SAFETY: a signal to a process group the lab started (its leader is our child, unreaped).
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
    }
    reap_descendants();
    let dirs = std::mem::take(&mut registry().dirs);
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    // SAFETY: the default action for the signal, unblocked here, then raised: the lab ends by it
    // (its parent sees the signal, as with no handler at all).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        unblock();
        libc::raise(sig);
    }
    std::process::exit(128 + sig);
}

/// A running process group (its leader's pid), known to the signal thread while the guard lives.
///
/// ```
/// let g = locklab_bench::external::cleanup::Group::new(std::process::id() as i32);
/// drop(g);
/// ```
pub struct Group(i32);

impl Group {
    /// Registers the group led by `pid`.
    pub fn new(pid: i32) -> Group {
        registry().groups.push(pid);
        Group(pid)
    }

    /// Kills every process of the group (its leader stays a zombie until waited for).
    pub fn kill(&self) {
        // SAFETY: a signal to the process group our own child leads.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        registry().groups.retain(|&g| g != self.0);
    }
}

/// A scratch directory: created now, removed with everything in it when the guard is dropped (or by
/// the signal thread); every process the lab still has is killed with it.
///
/// ```
/// let d = std::env::temp_dir().join(format!("scratch-doc-{}", std::process::id()));
/// let s = locklab_bench::external::cleanup::Scratch::new(d.clone()).unwrap();
/// assert!(s.path().is_dir());
/// drop(s);
/// assert!(!d.exists());
/// ```
pub struct Scratch(PathBuf);

impl Scratch {
    /// Creates `dir` (and its parents) and registers it.
    pub fn new(dir: PathBuf) -> std::io::Result<Scratch> {
        std::fs::create_dir_all(&dir)?;
        registry().dirs.push(dir.clone());
        Ok(Scratch(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        hold_if_ending();
        reap_descendants();
        let _ = std::fs::remove_dir_all(&self.0);
        registry().dirs.retain(|d| *d != self.0);
    }
}

/// The lab's children now (threads' children included), zombies too.
fn children() -> Vec<i32> {
    let mut out = Vec::new();
    let mut found_file = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                found_file = true;
                out.extend(
                    text.split_whitespace()
                        .filter_map(|w| w.parse::<i32>().ok()),
                );
            }
        }
    }
    if !found_file {
        // A kernel without the children files: every process whose parent is the lab.
        let me = std::process::id() as i32;
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for p in procs.flatten() {
                let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) else {
                    continue;
                };
                // pid (comm) state ppid ...: the command may hold spaces and parentheses.
                let ppid = stat
                    .rfind(')')
                    .and_then(|e| stat[e + 1..].split_whitespace().nth(1))
                    .and_then(|w| w.parse::<i32>().ok());
                if ppid == Some(me) {
                    out.push(pid);
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Kills and reaps every child the lab has, then the children they left (re-parented to the lab, its
/// subreaper), until none is left: how many it ended. Call it only when the lab waits for no child
/// of its own (every `Child` waited for): it reaps them all. Gives up after 1000 rounds (a program
/// that forks faster than it is killed), saying so.
///
/// ```
/// locklab_bench::external::cleanup::install();
/// let mut c = std::process::Command::new("sleep").arg("100").spawn().unwrap();
/// assert!(locklab_bench::external::cleanup::reap_descendants() >= 1);
/// # let _ = c.try_wait();
/// ```
pub fn reap_descendants() -> usize {
    reap_descendants_except(&[])
}

/// [`reap_descendants`], but the children in `keep` (a server still needed) are left alone.
///
/// ```
/// locklab_bench::external::cleanup::install();
/// let mut keep = std::process::Command::new("sleep").arg("100").spawn().unwrap();
/// let mut other = std::process::Command::new("sleep").arg("100").spawn().unwrap();
/// assert_eq!(locklab_bench::external::cleanup::reap_descendants_except(&[keep.id() as i32]), 1);
/// assert!(keep.try_wait().unwrap().is_none(), "still running");
/// keep.kill().unwrap();
/// keep.wait().unwrap();
/// # let _ = other.try_wait();
/// ```
pub fn reap_descendants_except(keep: &[i32]) -> usize {
    let mut ended = 0;
    for _ in 0..1000 {
        let kids: Vec<i32> = children()
            .into_iter()
            .filter(|k| !keep.contains(k))
            .collect();
        if kids.is_empty() {
            return ended;
        }
        for &k in &kids {
            // SAFETY: a signal to our own child, not yet reaped (its pid cannot be reused).
            unsafe { libc::kill(k, libc::SIGKILL) };
        }
        for &k in &kids {
            let mut status = 0;
            // SAFETY: waits for our own child; ECHILD if something else reaped it meanwhile.
            unsafe { libc::waitpid(k, &mut status, WAIT_ALL) };
            ended += 1;
        }
    }
    eprintln!(
        "locklab: warning: processes the run left keep forking; some may still be running (children of pid {})",
        std::process::id()
    );
    ended
}
