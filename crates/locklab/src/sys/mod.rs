//! The platform layer: the only place in locklab that makes system calls.
//!
//! - [`futex_wait`] / [`futex_wake`]: sleep on and wake a 32-bit word (Linux `futex(2)`, private).
//! - [`sched_yield`], [`thread_id`], [`current_cpu`].
//! - [`membarrier_register`] / [`membarrier`]: the heavy side of an asymmetric fence (`membarrier(2)`).
//! - [`fork_epoch`]: how many `fork`s separate this process from the first (a child's handler counts).
//!
//! Under loom there is no kernel: a futex wait is a yield to the model (callers always re-check their
//! word, so this is a spurious wake-up, which every caller must tolerate anyway) and a wake does nothing.

// The atomics the futex calls take: loom's under loom (the models' atomics), else core's. Named here,
// not through the `primitive` shim, so that the platform layer depends on nothing above it.
#[cfg(not(loom))]
use core::sync::atomic::AtomicU32;
#[cfg(loom)]
use loom::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, for at most `timeout` (forever with `None`).
///
/// Returns `false` if the kernel reported the timeout, `true` otherwise (woken, value already changed,
/// or interrupted). Spurious returns happen: callers re-check their condition.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// let word = AtomicU32::new(0);
/// // The value differs: returns at once. Same value: sleeps until woken or the timeout.
/// assert!(locklab::sys::futex_wait(&word, 1, None));
/// assert!(!locklab::sys::futex_wait(&word, 0, Some(Duration::from_millis(1))), "timed out");
/// word.store(1, Ordering::Release);
/// assert_eq!(locklab::sys::futex_wake(&word, 1), 0, "nobody sleeps there");
/// ```
#[cfg(not(loom))]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY:
    // - `word` is a live, aligned 32-bit atomic for the duration of the call (it is a reference);
    // - `ts_ptr` is null or points to `ts`, which outlives the call;
    // - FUTEX_WAIT_PRIVATE reads the word atomically and uses the other arguments only as values.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        )
    };
    !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}

/// Wakes up to `n` threads sleeping in [`futex_wait`] on `word`; returns how many were woken.
///
/// `word` is used only as an address, never dereferenced, so it may dangle: the wakers in locklab store to
/// a waiter's word and then wake it after the waiter may already have gone. The worst such a wake does is
/// a spurious wake-up of some other sleeper on a reused address, which all sleepers tolerate.
#[cfg(not(loom))]
// The pointer is passed to the kernel as an address and never dereferenced (not here, not there), so this
// stays a safe fn. It is passed as a pointer, not an integer, so that Miri's futex model (which needs the
// pointer's provenance) can find the sleepers on it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn futex_wake(word: *const AtomicU32, n: u32) -> usize {
    let n = n.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: FUTEX_WAKE_PRIVATE uses the address only as a key into the kernel's wait queues; it does not
    // access the memory, so any address is sound.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        )
    };
    r.max(0) as usize
}

// Under loom, one model-wide futex: a loom `Mutex` and `Condvar`. A waiter checks its word and blocks
// under the mutex, a waker takes the mutex and wakes everyone (callers re-check, as with spurious
// wake-ups). So loom sees a sleeper as blocked, not as a thread spinning on yields: it can tell a lost
// wake-up (a deadlock it reports) from a slow one, and explores no branch per spin of a sleeper.
#[cfg(loom)]
loom::lazy_static! {
    static ref FUTEX: (loom::sync::Mutex<()>, loom::sync::Condvar) =
        (loom::sync::Mutex::new(()), loom::sync::Condvar::new());
}

/// Under loom: blocks until a `futex_wake` (any word) if `word` still holds `expected`; a wait with a
/// timeout yields once and returns (the caller's countdown deadline decides when it has timed out).
#[cfg(loom)]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    if timeout.is_some() {
        loom::thread::yield_now();
        return true;
    }
    let g = FUTEX.0.lock().unwrap();
    // Relaxed: the model mutex orders this check against the waker's store and wake.
    if word.load(core::sync::atomic::Ordering::Relaxed) == expected {
        drop(FUTEX.1.wait(g).unwrap());
    }
    true
}

/// Under loom: wakes every model futex sleeper.
#[cfg(loom)]
pub fn futex_wake(_word: *const AtomicU32, _n: u32) -> usize {
    let _g = FUTEX.0.lock().unwrap();
    FUTEX.1.notify_all();
    0
}

/// Gives up the CPU to another runnable thread (`sched_yield(2)`).
///
/// ```
/// locklab::sys::sched_yield();
/// ```
#[inline]
pub fn sched_yield() {
    // SAFETY: sched_yield takes no arguments and cannot fail in a way that matters to us.
    unsafe {
        libc::sched_yield();
    }
}

// membarrier(2) commands (include/uapi/linux/membarrier.h).
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1 << 0;
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(not(any(loom, miri)))]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

#[cfg(not(any(loom, miri)))]
fn membarrier_call(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integer arguments (command, flags) and a CPU id that is ignored
    // without MEMBARRIER_CMD_FLAG_CPU; it touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    }
}

/// Registers this process for `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (idempotent). Returns `false` where the
/// kernel lacks the command (before Linux 4.14), forbids it (seccomp), or under Miri and loom.
///
/// ```
/// if locklab::sys::membarrier_register() {
///     assert!(locklab::sys::membarrier(), "a full barrier on every running thread of the process");
/// }
/// ```
pub fn membarrier_register() -> bool {
    #[cfg(any(loom, miri))]
    {
        false
    }
    #[cfg(not(any(loom, miri)))]
    {
        let supported = membarrier_call(MEMBARRIER_CMD_QUERY);
        supported >= 0
            && supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED as libc::c_long != 0
            && membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    }
}

/// The asymmetric fence's heavy side: makes every running thread of this process execute a full memory
/// barrier before returning (threads not running pass one when they are next scheduled), and is a full
/// barrier for the caller. Only valid after [`membarrier_register`] returned `true`.
///
/// Returns `false` if the kernel refused both `MEMBARRIER_CMD_PRIVATE_EXPEDITED` and the slower,
/// registration-free `MEMBARRIER_CMD_GLOBAL` (a per-thread seccomp filter can forbid the system call in
/// one thread after another registered): the caller must not rely on the fence then.
#[must_use]
pub fn membarrier() -> bool {
    #[cfg(any(loom, miri))]
    unreachable!("membarrier is never registered under loom or Miri");
    #[cfg(not(any(loom, miri)))]
    {
        #[cfg(test)]
        if FAIL_MEMBARRIER.with(|f| f.get()) {
            return false;
        }
        membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0
            || membarrier_call(MEMBARRIER_CMD_GLOBAL) == 0
    }
}

#[cfg(all(test, not(any(loom, miri))))]
std::thread_local! {
    /// Tests: `membarrier` fails on this thread (as under a per-thread seccomp filter).
    pub(crate) static FAIL_MEMBARRIER: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// The fallback for a refused [`membarrier`]: makes every CPU this process may run on execute a full
/// barrier, by moving the calling thread onto each of them in turn (the kernel migrates a thread
/// before `sched_setaffinity` returns; the switch to it on that CPU is a full barrier there, and
/// whatever ran there was switched out). Slow (a migration per CPU), but needs no permission.
/// Restores the thread's affinity. Returns `false` if it could not run on some CPU it is allowed to
/// (CPUs outside the process's cpuset, where none of its threads can run, are skipped).
///
/// ```
/// assert!(locklab::sys::cpu_walk_barrier());
/// ```
pub fn cpu_walk_barrier() -> bool {
    #[cfg(miri)]
    {
        // Under Miri there are no CPUs to walk: this thread's own full fence is all there is.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        true
    }
    #[cfg(not(miri))]
    // SAFETY: every `cpu_set_t` is a valid zeroed set of the size passed; the affinity calls take no
    // other memory arguments.
    unsafe {
        let size = core::mem::size_of::<libc::cpu_set_t>();
        let mut old: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut old) != 0 {
            return false;
        }
        let n = libc::sysconf(libc::_SC_NPROCESSORS_CONF)
            .clamp(1, libc::CPU_SETSIZE as libc::c_long) as usize;
        let mut ran = 0;
        let mut ok = true;
        for cpu in 0..n {
            let mut one: libc::cpu_set_t = core::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            if libc::sched_setaffinity(0, size, &one) == 0 {
                ran += 1;
            } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                ok = false; // allowed there, yet refused: that CPU was not fenced
            }
        }
        let restored = libc::sched_setaffinity(0, size, &old) == 0;
        ok && ran > 0 && restored
    }
}

/// Gives the calling thread the CPU affinity of the process's main thread. A helper thread inherits
/// the affinity of whichever thread spawned it: one spawned by a thread pinned to one CPU would share
/// that CPU with it. Returns whether the kernel accepted it (no-op under Miri).
///
/// ```
/// std::thread::spawn(|| locklab::sys::use_process_affinity()).join().unwrap();
/// ```
pub fn use_process_affinity() -> bool {
    #[cfg(miri)]
    {
        false
    }
    #[cfg(not(miri))]
    // SAFETY: `set` is a valid, zeroed cpu_set_t of the size passed; getpid and the affinity calls
    // have no other memory arguments.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        let size = core::mem::size_of::<libc::cpu_set_t>();
        libc::sched_getaffinity(libc::getpid(), size, &mut set) == 0
            && libc::sched_setaffinity(0, size, &set) == 0
    }
}

/// The kernel's id of the calling thread (`gettid(2)`).
///
/// ```
/// let me = locklab::sys::thread_id();
/// assert_ne!(me, std::thread::spawn(locklab::sys::thread_id).join().unwrap());
/// ```
pub fn thread_id() -> u32 {
    // SAFETY: gettid takes no arguments and always succeeds.
    unsafe { libc::gettid() as u32 }
}

/// The CPU the calling thread is running on right now (`sched_getcpu(3)`), or `None` if unknown.
/// Only a hint: the thread may migrate the moment this returns.
///
/// ```
/// let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
/// if let Some(c) = locklab::sys::current_cpu() {
///     assert!(c < 4096 && cpus >= 1);
/// }
/// ```
pub fn current_cpu() -> Option<usize> {
    // Miri has no model of `sched_getcpu`: report "unknown", which every caller handles.
    if cfg!(miri) {
        return None;
    }
    // SAFETY: sched_getcpu takes no arguments; it returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// The process's fork epoch: 0 in the first process, one more in each child of `fork` than in its
/// parent (a `pthread_atfork` child handler counts, registered on first use). The sleeping locks tag
/// their wait lists with it: a list last touched in an earlier epoch names only threads that did not
/// survive the fork (only the forking thread is copied into the child, and it was not waiting), so the
/// child drops it instead of waiting behind ghosts or for a list lock a vanished thread held.
///
/// ```
/// # if cfg!(miri) { return; } // Miri cannot fork
/// let e = locklab::sys::fork_epoch();
/// // SAFETY: the child only compares a number and exits.
/// let pid = unsafe { libc::fork() };
/// if pid == 0 {
///     let ok = locklab::sys::fork_epoch() == e + 1;
///     unsafe { libc::_exit(if ok { 0 } else { 1 }) };
/// }
/// let mut st = 0;
/// unsafe { libc::waitpid(pid, &mut st, 0) };
/// assert_eq!(st, 0, "the child's epoch is one more");
/// assert_eq!(locklab::sys::fork_epoch(), e, "the parent's is unchanged");
/// ```
#[cfg(all(unix, not(loom), not(miri)))]
#[inline]
pub fn fork_epoch() -> u32 {
    use core::sync::atomic::Ordering;
    if !fork_watch::WATCHING.load(Ordering::Relaxed) {
        fork_watch::watch();
    }
    fork_watch::EPOCH.load(Ordering::Relaxed)
}

/// The fork epoch (always 0: no `fork` here, or none the model or Miri can make).
#[cfg(not(all(unix, not(loom), not(miri))))]
#[inline]
pub fn fork_epoch() -> u32 {
    0
}

#[cfg(all(unix, not(loom), not(miri)))]
pub(crate) mod fork_watch {
    use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// The epoch (see [`super::fork_epoch`]).
    pub(crate) static EPOCH: AtomicU32 = AtomicU32::new(0);
    /// The handler is registered.
    pub(crate) static WATCHING: AtomicBool = AtomicBool::new(false);

    extern "C" fn child() {
        // Relaxed: the child has one thread.
        EPOCH.fetch_add(1, Ordering::Relaxed);
    }

    /// Registers the child handler once (it may allocate: called from the preload library's
    /// constructor through `prepare_threads`, else on a sleeping lock's first wait-list use).
    #[cold]
    pub(crate) fn watch() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: a handler that only bumps an atomic.
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        });
        WATCHING.store(true, Ordering::Relaxed);
    }
}
