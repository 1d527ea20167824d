//! The platform layer: the only place in locklab that makes system calls. One file per OS family,
//! each providing the same small set of functions, which the public ones below call:
//!
//! | function | Linux | macOS | Windows | FreeBSD | elsewhere (`generic`) |
//! |---|---|---|---|---|---|
//! | [`futex_wait`] / [`futex_wake`] | `futex(2)`, private | `os_sync_wait_on_address` (14.4+), else `__ulock_wait` | `WaitOnAddress` / `WakeByAddress*` | `_umtx_op(UMTX_OP_WAIT_UINT_PRIVATE)` | a parking table on `Thread::park` ([`parking`]) |
//! | [`membarrier`] | `membarrier(2)` | none: fences | `FlushProcessWriteBuffers` | none: fences | none: fences |
//! | [`cpu_walk_barrier`] | `sched_setaffinity` on each CPU | no | no | no | no |
//! | [`thread_id`] | `gettid` | `pthread_threadid_np` | `GetCurrentThreadId` | `pthread_getthreadid_np` | a per-thread counter |
//! | [`current_cpu`] | `sched_getcpu` | unknown | `GetCurrentProcessorNumber` | `sched_getcpu` | unknown |
//! | [`sched_yield`] | `sched_yield` | `sched_yield` | `SwitchToThread` | `sched_yield` | `std::thread::yield_now` |
//! | [`fork_epoch`] | `pthread_atfork` | `pthread_atfork` | 0 (no fork) | `pthread_atfork` | 0 |
//!
//! "None: fences": where no process-wide barrier exists, [`membarrier_register`] answers `false` and
//! PercpuRwSem and the memb RCU flavour put a full fence on their read side instead (the documented
//! fallback; `LOCKLAB_NO_MEMBARRIER=1` forces it on Linux to measure its cost).
//!
//! Building with `--cfg locklab_fallback` (`RUSTFLAGS`) selects the generic layer on any OS, so the
//! fallback runs under the whole test suite on Linux.
//!
//! Under `--cfg locklab_sim`, a virtual thread's futex wait and wake, its CPU number and the CPU count
//! are the simulator's (`crate::sim`); any other thread's go to the OS as usual.
//!
//! Under loom there is no kernel: a futex wait is a yield to the model (callers always re-check their
//! word, so this is a spurious wake-up, which every caller must tolerate anyway) and a wake does nothing.

// The atomics the futex calls take: loom's under loom (the models' atomics), else core's. Named here,
// not through the `primitive` shim, so that the platform layer depends on nothing above it.
#[cfg(not(any(loom, locklab_sim)))]
use core::sync::atomic::AtomicU32;
#[cfg(loom)]
use loom::sync::atomic::AtomicU32;
// Under the simulator, its atomics: a virtual thread's futex calls go to the simulated scheduler.
#[cfg(locklab_sim)]
use crate::sim::atomic::AtomicU32;
use std::time::Duration;

#[cfg(all(target_os = "linux", not(locklab_fallback)))]
mod linux;
#[cfg(all(target_os = "linux", not(locklab_fallback)))]
use linux as os;

#[cfg(all(target_vendor = "apple", not(locklab_fallback)))]
mod apple;
#[cfg(all(target_vendor = "apple", not(locklab_fallback)))]
use apple as os;

#[cfg(all(windows, not(locklab_fallback)))]
mod windows;
#[cfg(all(windows, not(locklab_fallback)))]
use windows as os;

#[cfg(all(target_os = "freebsd", not(locklab_fallback)))]
mod freebsd;
#[cfg(all(target_os = "freebsd", not(locklab_fallback)))]
use freebsd as os;

#[cfg(any(
    locklab_fallback,
    not(any(
        target_os = "linux",
        target_vendor = "apple",
        windows,
        target_os = "freebsd"
    ))
))]
mod generic;
#[cfg(any(
    locklab_fallback,
    not(any(
        target_os = "linux",
        target_vendor = "apple",
        windows,
        target_os = "freebsd"
    ))
))]
use generic as os;

#[cfg(not(loom))]
pub(crate) mod membarrier_mode;
#[cfg(not(loom))]
pub mod parking;
/// Under loom the asymmetric fence is modelled by SeqCst fences on both sides (see the real
/// `membarrier_mode`).
#[cfg(loom)]
pub(crate) mod membarrier_mode {
    pub(crate) fn fast() -> bool {
        false
    }
    pub(crate) fn writers_heavy() -> bool {
        false
    }
    pub(crate) fn degrade() -> bool {
        true
    }
}

/// What a platform without a process-wide barrier or thread affinity answers (macOS, FreeBSD, the
/// generic layer): PercpuRwSem and memb RCU then fence their readers.
#[cfg(any(locklab_fallback, not(any(target_os = "linux", windows))))]
mod no_barrier {
    pub(crate) fn membarrier_register() -> bool {
        false
    }

    pub(crate) fn membarrier() -> bool {
        false
    }

    pub(crate) fn cpu_walk_barrier() -> bool {
        false
    }

    pub(crate) fn use_process_affinity() -> bool {
        false
    }
}

/// Sleeps while `*word == expected`, for at most `timeout` (forever with `None`).
///
/// Returns `false` if the wait timed out, `true` otherwise (woken, value already changed, or
/// interrupted). Spurious returns happen: callers re-check their condition.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// let word = AtomicU32::new(0);
/// // The value differs: returns at once. Same value: sleeps until woken or the timeout.
/// assert!(locklab::sys::futex_wait(&word, 1, None));
/// assert!(!locklab::sys::futex_wait(&word, 0, Some(Duration::from_millis(1))), "timed out");
/// word.store(1, Ordering::Release);
/// locklab::sys::futex_wake(&word, 1); // nobody sleeps there
/// ```
#[cfg(not(loom))]
#[inline]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    #[cfg(locklab_sim)]
    if let Some(r) = crate::sim::futex_wait(word, expected, timeout) {
        return r;
    }
    #[cfg(locklab_sim)]
    let word = word.inner();
    os::wait(word, expected, timeout)
}

/// Wakes up to `n` threads sleeping in [`futex_wait`] on `word`; returns how many were woken where
/// the platform says (Linux, the parking table), else 0.
///
/// `word` is used only as an address, never dereferenced, so it may dangle: the wakers in locklab store to
/// a waiter's word and then wake it after the waiter may already have gone. The worst such a wake does is
/// a spurious wake-up of some other sleeper on a reused address, which all sleepers tolerate.
///
/// ```
/// let word = std::sync::atomic::AtomicU32::new(0);
/// locklab::sys::futex_wake(&word, u32::MAX); // nobody sleeps there: nothing happens
/// ```
#[cfg(not(loom))]
// The pointer is passed to the kernel as an address and never dereferenced (not here, not there), so this
// stays a safe fn. It is passed as a pointer, not an integer, so that Miri's futex model (which needs the
// pointer's provenance) can find the sleepers on it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[inline]
pub fn futex_wake(word: *const AtomicU32, n: u32) -> usize {
    #[cfg(locklab_sim)]
    if let Some(r) = crate::sim::futex_wake(word, n) {
        return r;
    }
    #[cfg(locklab_sim)]
    let word = word.cast::<core::sync::atomic::AtomicU32>();
    os::wake(word, n)
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

/// CPUs this process may run on (at least 1), looked up once. A sizing hint for spin policies.
/// On Linux, the larger of the main thread's affinity and the caller's, capped by a cgroup CPU
/// quota: the first caller may be a worker pinned to one CPU (the lab pins each), and
/// `available_parallelism` counts only the caller's own.
pub(crate) fn cpus() -> usize {
    use core::sync::atomic::{AtomicUsize, Ordering as O};
    // A plain atomic even under loom: a cache of a constant, not part of any protocol.
    static CPUS: AtomicUsize = AtomicUsize::new(0);
    if cfg!(loom) {
        return 2;
    }
    #[cfg(locklab_sim)]
    if let Some(n) = crate::sim::machine_cores() {
        return n;
    }
    // Relaxed: every racing first caller stores the same value.
    match CPUS.load(O::Relaxed) {
        0 => {
            let callers = || std::thread::available_parallelism().map_or(1, |n| n.get());
            #[cfg(all(target_os = "linux", not(locklab_fallback), not(miri)))]
            let n = os::process_cpus().unwrap_or_else(callers);
            #[cfg(not(all(target_os = "linux", not(locklab_fallback), not(miri))))]
            let n = callers();
            CPUS.store(n, O::Relaxed);
            n
        }
        n => n,
    }
}

/// Gives up the CPU to another runnable thread.
///
/// ```
/// locklab::sys::sched_yield();
/// ```
#[inline]
pub fn sched_yield() {
    os::yield_now();
}

/// Registers this process for the process-wide barrier [`membarrier`] (idempotent). Returns `false`
/// where there is none: Linux before 4.14 or under a seccomp filter that forbids it, macOS, FreeBSD,
/// other systems, and under Miri and loom. Callers then fence on their read side.
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
        os::membarrier_register()
    }
}

/// The asymmetric fence's heavy side: makes every running thread of this process execute a full memory
/// barrier before returning (threads not running pass one when they are next scheduled), and is a full
/// barrier for the caller. Only valid after [`membarrier_register`] returned `true`.
///
/// Returns `false` if the system refused it (on Linux a per-thread seccomp filter can forbid the
/// system call in one thread after another registered): the caller must not rely on the fence then.
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
        os::membarrier()
    }
}

#[cfg(all(test, not(any(loom, miri))))]
std::thread_local! {
    /// Tests: `membarrier` fails on this thread (as under a per-thread seccomp filter).
    pub(crate) static FAIL_MEMBARRIER: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// The fallback for a refused [`membarrier`] (Linux): makes every CPU this process may run on execute
/// a full barrier, by moving the calling thread onto each of them in turn (the kernel migrates a
/// thread before `sched_setaffinity` returns; the switch to it on that CPU is a full barrier there,
/// and whatever ran there was switched out). Slow (a migration per CPU), but needs no permission.
/// Restores the thread's affinity. Returns `false` if it could not run on some CPU it is allowed to
/// (CPUs outside the process's cpuset, where none of its threads can run, are skipped), and on
/// systems without it (where [`membarrier_register`] never chose the fast mode in the first place).
///
/// ```
/// #[cfg(target_os = "linux")]
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
    {
        os::cpu_walk_barrier()
    }
}

/// Gives the calling thread the CPU affinity of the process's main thread. A helper thread inherits
/// the affinity of whichever thread spawned it: one spawned by a thread pinned to one CPU would share
/// that CPU with it. Returns whether the system accepted it (`false` under Miri and where threads
/// have no affinity to inherit).
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
    {
        os::use_process_affinity()
    }
}

/// An id of the calling thread, unique among the process's live threads (the kernel's where it has
/// one that fits 32 bits).
///
/// ```
/// let me = locklab::sys::thread_id();
/// assert_ne!(me, std::thread::spawn(locklab::sys::thread_id).join().unwrap());
/// ```
pub fn thread_id() -> u32 {
    os::thread_id()
}

/// The CPU the calling thread is running on right now, or `None` if unknown. Only a hint: the thread
/// may migrate the moment this returns.
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
    #[cfg(locklab_sim)]
    if let Some(c) = crate::sim::current_core() {
        return Some(c);
    }
    os::current_cpu()
}

/// The process's fork epoch: 0 in the first process, one more in each child of `fork` than in its
/// parent (a `pthread_atfork` child handler counts, registered on first use). The sleeping locks tag
/// their wait lists with it: a list last touched in an earlier epoch names only threads that did not
/// survive the fork (only the forking thread is copied into the child, and it was not waiting), so the
/// child drops it instead of waiting behind ghosts or for a list lock a vanished thread held.
///
/// ```
/// # #[cfg(all(unix, not(miri)))] { // Miri cannot fork; Windows has no fork
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
/// # }
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
    /// Its registration ([`super::once_per_process`]).
    static REGISTRATION: AtomicU32 = AtomicU32::new(0);

    extern "C" fn child() {
        super::registered_here(&REGISTRATION);
        // Relaxed: the child has one thread.
        EPOCH.fetch_add(1, Ordering::Relaxed);
    }

    /// Registers the child handler once (it may allocate: called from the preload library's
    /// constructor through `prepare_threads`, else on a sleeping lock's first wait-list use).
    #[cold]
    pub(crate) fn watch() {
        super::once_per_process(&REGISTRATION, || {
            // SAFETY: a handler that only bumps atomics.
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        });
        WATCHING.store(true, Ordering::Relaxed);
    }
}

/// [`once_per_process`]'s word once the registration is done.
#[cfg(all(unix, not(miri)))]
const REGISTERED: u32 = u32::MAX;

/// Runs `register` (a `pthread_atfork` registration) once per process, safe against a `fork()` by
/// another thread at any instruction, which `std::sync::Once` is not (a child whose parent was
/// inside `call_once` at the fork waits forever for a thread it does not have). `state` starts at 0;
/// while a thread registers it holds that process's pid, then [`REGISTERED`]. A `fork()` child that
/// finds its parent's pid there takes the registration over: either the parent's registration
/// happened before the fork, and then the child handler it registered already marked `state` here
/// ([`registered_here`]), or it did not happen in this process. Callers wait for a thread of their
/// own process that is registering (rare: the first uses, racing).
#[cfg(all(unix, not(miri)))]
pub(crate) fn once_per_process(state: &core::sync::atomic::AtomicU32, register: impl FnOnce()) {
    use core::sync::atomic::Ordering;
    // Acquire: pairs with the Release store after `register`.
    if state.load(Ordering::Acquire) == REGISTERED {
        return;
    }
    // SAFETY: getpid has no preconditions and cannot fail.
    let me = unsafe { libc::getpid() } as u32;
    once_per_process_as(state, me, register);
}

/// [`once_per_process`] for process `me` (tests give any pid).
#[cfg(all(unix, not(miri)))]
fn once_per_process_as(state: &core::sync::atomic::AtomicU32, me: u32, register: impl FnOnce()) {
    use core::sync::atomic::Ordering;
    std::thread_local! {
        /// This thread is inside a registration (no destructor).
        static REGISTERING: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    }
    loop {
        // Acquire: pairs with the Release store after `register`.
        let s = state.load(Ordering::Acquire);
        if s == REGISTERED {
            return;
        }
        if s != me
            && state
                .compare_exchange(s, me, Ordering::Acquire, Ordering::Acquire)
                .is_ok()
        {
            // Should `register` unwind, the next caller tries again (instead of waiting forever).
            struct Unwind<'a>(&'a core::sync::atomic::AtomicU32);
            impl Drop for Unwind<'_> {
                fn drop(&mut self) {
                    REGISTERING.set(false);
                    // Relaxed: nothing was published.
                    self.0.store(0, Ordering::Relaxed);
                }
            }
            REGISTERING.set(true);
            let unwind = Unwind(state);
            register();
            core::mem::forget(unwind);
            REGISTERING.set(false);
            // Release: the registration happens-before every caller that sees it done.
            state.store(REGISTERED, Ordering::Release);
            return;
        }
        if REGISTERING.get() {
            // A signal handler on the registering thread: waiting would wait for ourselves. Not
            // registered yet, as if the handler had run just before the registration.
            return;
        }
        // A thread of this process registers: wait (not on a futex: this layer's futex word type is
        // loom's under loom).
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// In a `pthread_atfork` child handler registered through [`once_per_process`] on `state`: the
/// registration exists in this process (its registering thread may have been caught between the
/// registration and marking it done).
#[cfg(all(unix, not(miri)))]
pub(crate) fn registered_here(state: &core::sync::atomic::AtomicU32) {
    // Relaxed: the child has one thread.
    state.store(REGISTERED, core::sync::atomic::Ordering::Relaxed);
}

#[cfg(all(test, unix, not(loom), not(miri)))]
mod once_tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

    /// The first caller registers, once; later callers find it done.
    #[test]
    fn registers_once() {
        let state = AtomicU32::new(0);
        let runs = AtomicUsize::new(0);
        for _ in 0..2 {
            once_per_process_as(&state, 7, || {
                runs.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(state.load(Ordering::SeqCst), REGISTERED);
    }

    /// A fork child whose parent was registering at the fork (the word holds the parent's pid, and
    /// no child handler of ours ran to mark it done): the child registers for itself.
    #[test]
    fn a_child_takes_over_its_parents_registration() {
        let state = AtomicU32::new(41); // the parent's pid
        let runs = AtomicUsize::new(0);
        once_per_process_as(&state, 42, || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(state.load(Ordering::SeqCst), REGISTERED);
    }

    /// Another thread of this process is registering: wait for it, do not register twice.
    #[test]
    fn waits_for_a_registration_in_its_own_process() {
        static STATE: AtomicU32 = AtomicU32::new(9); // a thread of process 9 is registering
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let waiter = std::thread::spawn(|| {
            once_per_process_as(&STATE, 9, || {
                RUNS.fetch_add(1, Ordering::SeqCst);
            });
        });
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            !waiter.is_finished(),
            "returned before the registration ended"
        );
        STATE.store(REGISTERED, Ordering::SeqCst);
        waiter.join().unwrap();
        assert_eq!(RUNS.load(Ordering::SeqCst), 0);
    }

    /// A second registration from inside the first on the same thread (a signal handler that
    /// takes a lock while its thread registers): it returns instead of waiting for itself.
    #[test]
    fn a_registration_inside_a_registration_returns() {
        let state = AtomicU32::new(0);
        let inner = AtomicUsize::new(0);
        once_per_process_as(&state, 5, || {
            once_per_process_as(&state, 5, || {
                inner.fetch_add(1, Ordering::SeqCst);
            });
        });
        assert_eq!(inner.load(Ordering::SeqCst), 0);
        assert_eq!(state.load(Ordering::SeqCst), REGISTERED);
    }

    /// A real child of a process whose registration was caught half-way (the word holds the
    /// parent's pid, as if a thread were inside the registration at the fork): the child registers
    /// and returns instead of waiting for that thread.
    #[test]
    fn a_real_fork_child_is_not_stuck_behind_its_parents_registration() {
        static STATE: AtomicU32 = AtomicU32::new(0);
        // SAFETY: getpid has no preconditions.
        STATE.store(unsafe { libc::getpid() } as u32, Ordering::SeqCst);
        let status = crate::fork_tests::status_of_child(10, || {
            let mut ran = false;
            once_per_process(&STATE, || ran = true);
            ran
        });
        assert!(
            crate::fork_tests::exited_0(status),
            "the child hung or did not register (wait status {status})"
        );
    }
}

#[cfg(all(test, target_os = "linux", not(locklab_fallback), not(loom), not(miri)))]
mod cpus_tests {
    /// A thread pinned to one CPU still counts the process's CPUs (the main thread's set, under
    /// any cgroup quota), where `available_parallelism` counts only its own one.
    #[test]
    fn a_pinned_thread_counts_the_process_cpus() {
        let process = super::os::process_cpus().expect("the main thread's affinity");
        let (mine, counted) = std::thread::spawn(|| {
            // SAFETY: `one` is a valid, zeroed cpu_set_t of the size passed.
            let pinned = unsafe {
                let mut one: libc::cpu_set_t = core::mem::zeroed();
                libc::CPU_SET(libc::sched_getcpu().max(0) as usize, &mut one);
                libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &one) == 0
            };
            assert!(pinned, "could not pin the thread");
            let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
            (mine, super::os::process_cpus())
        })
        .join()
        .unwrap();
        assert_eq!(mine, 1, "pinned to one CPU");
        assert_eq!(
            counted,
            Some(process),
            "the pinned thread's count is the process's"
        );
        assert!(process >= 1);
    }
}
