//! A condition variable for [`RawMutex`], without a thundering herd.
//!
//! # Algorithm
//! 1. **Registering.** A waiter queues FIFO on the condvar's own `WaitList` (under a small internal
//!    spinlock, `lock`), then releases the mutex. An untimed waiter queues **watching** (its word
//!    `WATCHING`) if fewer of this condvar's waiters than there are CPUs watch (a watcher spins,
//!    and more would take the CPUs from the threads that notify); any other queues `SLEEPING`. A
//!    watcher's place is given back by whichever side wins its word: the notifier that moves it to
//!    `NOTIFIED`, at once, or the watcher itself when its watch ends unnotified.
//! 2. **Watching, then sleeping.** A watcher loads its own word for up to [`WAIT_SPIN_NS`], backing
//!    off to 16 `pause`s between looks and never yielding (see "Watching without yields"; when the
//!    process's CPU count, `crate::sys::cpus`, is one, it yields instead): the other end of a
//!    producer/consumer pair is usually running and notifies within microseconds, while a futex
//!    sleep costs a wake-up latency of 4-40 us on these VMs. At the end, one yield that returns at
//!    once (within `ALONE_YIELD_NS`: no other thread of its priority to run on its CPU) renews the
//!    watch if this thread's previous wait here that watched was notified within
//!    [`RENEW_AFTER_NOTIFY_NS`] of its start (a busy pair; a thread-local hint) and the thread is
//!    not real-time, up to [`WAIT_ALONE_NS`] in all: a sleeper on an idle CPU is the slowest to
//!    wake, and the CPU would idle anyway (the cost is power). It then announces its sleep with a
//!    compare-and-swap `WATCHING -> SLEEPING`, which fails only if a notifier got there first, and
//!    sleeps on its word while it reads `SLEEPING`.
//! 3. **Choosing whom to notify.** Each waiter records the CPU it queued on. `notify_one` serves the
//!    front waiter if it watches, or if it has slept longer than [`FAIR_NS`]; otherwise, among the
//!    last `WATCHER_SCAN` (8) waiters (watchers are the latest to wait): a watcher on another CPU
//!    than the notifier's, then a sleeper on another CPU, then a watcher on the notifier's own;
//!    otherwise the front. `notify_all` takes every waiter.
//!
//! 4. **Notifying a watcher costs no wake-up.** The notifier moves it with a compare-and-swap
//!    `WATCHING -> NOTIFIED`; the waiter sees it (it is running) and re-locks the mutex like any locker.
//! 5. **Notifying a sleeper costs at most one.** If the mutex is free, the first notified sleeper is
//!    dequeued, its word set to `NOTIFIED`, and woken (after `lock` is released); it takes the mutex as
//!    any locker does, spinning included (parking_lot's choice too). Every other notified sleeper is
//!    **moved** onto the mutex's wait list (the kernel's and parking_lot's *requeue*), where it waits
//!    for the mutex like any other waiter: the mutex's next unlock wakes it (or `requeue` wakes the
//!    mutex's front if the mutex is free). So `notify_one` wakes at most one thread, none when it
//!    finds a watcher; `notify_all` with N waiters wakes at most two (the one woken directly and the
//!    mutex list's front), and a notifier that holds the mutex wakes none: each unlock then wakes the
//!    next one in turn.
//! 6. **Time-outs.** Timed waits do not watch. One that times out takes itself off the condvar's list
//!    if it is still there. If a notifier took it first, it counts as notified and continues as a
//!    mutex waiter, or re-locks if it was `NOTIFIED` (no timeout: it must re-lock).
//!
//! Why another CPU first: a watcher on the notifier's CPU runs only once the notifier blocks, so
//! the two take turns on one CPU (a yield per message) while the other CPU idles. With threads
//! pinned and outnumbering CPUs (the lab pins thread `t` to CPU `t mod 2`), that same-CPU pair was
//! the state every run from 4 to 64 threads fell into: 50% idle, ~0.2 M messages/s, where two
//! threads on two CPUs passed 3 M. Serving the other CPU first (waking a sleeper there if no one
//! watches there: one wake-up, after which the pair across CPUs notifies without any) moves the
//! pair across the CPUs and keeps it there; the renewed watch keeps the woken side watching while
//! the other comes back. Figures: `docs/results/2026-12-07-condvar-cross-cpu.md`.
//!
//! Watching without yields: a watcher that yields between looks hands its CPU to whichever thread
//! is runnable there, and with threads outnumbering CPUs that is rarely the other end of its pair:
//! on the `condvar` workload, 99% of the process's `sched_yield` calls were watchers' (0.66-0.92
//! involuntary context switches per message at 4 threads), and 32-64 threads on 2 CPUs passed
//! 0.6-1.0 M messages/s. A watcher that
//! spins its 5 us keeps its CPU for the pair (the notifier is on another CPU: "Why another CPU
//! first"), and the CPU goes to others when it sleeps: 2.7-3.9 M at every count from 2 to 64. The
//! figures: `docs/results/2026-12-07-condvar-spinning-watch.md`.
//!
//! Why prefer a watcher: with the queue FIFO and every notification to the front, a watcher (the
//! latest waiter, at the back) was never the one notified once sleepers queued: on the `condvar`
//! workload (one slot), 4-64 threads on 2 CPUs, every message cost two futex wake-ups and two sleeps
//! while the watchers spun for nothing; and every notification made a futex wake system call, even
//! to a waiter that was watching. Preferring watchers and skipping the call for them brought the
//! wake-ups to 0.02 per message at 8 threads and 0.06-0.07 at 64, the rate the fairness bound sets:
//! each sleeper that waits out [`FAIR_NS`] is woken in turn. The figures:
//! `docs/results/2026-12-05-condvar-wake.md`.
//!
//! # The waiter's word (see `crate::sleep::wait_list`)
//! - `WATCHING -> NOTIFIED`: a notifier's compare-and-swap (under `lock`; no wake-up).
//! - `WATCHING -> SLEEPING`: the watcher's own compare-and-swap when its watch ends.
//! - `SLEEPING -> NOTIFIED`: a notifier, under `lock`, with the mutex free; then a futex wake.
//! - `SLEEPING` moved to the mutex's list: then the mutex's `WOKEN` or `HANDED`.
//!
//! # Invariants
//! 1. Under `lock`, a waiter in the condvar's list (`in_condvar`) reads `WATCHING` or `SLEEPING`, and
//!    only the notifier (under `lock`) and the waiter itself (its one compare-and-swap) change it.
//! 2. No lost wake-up: a waiter sleeps only on `SLEEPING`. Of the watcher's `WATCHING -> SLEEPING` and
//!    a notifier's `WATCHING -> NOTIFIED`, exactly one succeeds (one modification order); a notifier
//!    that fails has a sleeper, which it wakes or moves onto the mutex, whose unlock wakes it (the
//!    mutex's invariant 4). A waiter registers before it releases the mutex, so a notification sent
//!    under the mutex afterwards, or after the waiter's unlock, finds it.
//! 3. A notifier's last access to a waiter is its `NOTIFIED` store or compare-and-swap (the lifetime
//!    rule); the futex wake that may follow uses only the word's address. The mutex too is touched
//!    only while a waiter still blocked in `wait` keeps it alive: a notification that reaches only
//!    watchers, or whose last sleeper it woke directly, never reads it afterwards (a notified waiter
//!    may re-lock, return, and see the mutex freed by its owner while the notifier still runs).
//! 4. `watchers` counts the queued words that read `WATCHING` (a hint, Relaxed): added to under
//!    `lock` as a watcher queues, taken from by the winner of the word (a notifier's
//!    `WATCHING -> NOTIFIED`, or the watcher's `WATCHING -> SLEEPING`), so exactly once per watch.
//!    When the watcher gave its place back only once it ran again, a notified watcher waiting for its
//!    CPU behind other threads (64 threads on 2 CPUs) kept its place: every other waiter then queued
//!    asleep, and with no watcher near the back every notification woke a sleeper (the two-wake-ups-
//!    per-message state of `docs/results/2026-12-06-condvar-threads.md`).
//! 5. Bounded preference: a front sleeper is passed over only while it has slept less than
//!    [`FAIR_NS`], and a watcher becomes a sleeper after [`WAIT_SPIN_NS`] (renewed while alone on its
//!    CPU in a busy pair, [`WAIT_ALONE_NS`] at most). The CPUs recorded are hints (a thread may have
//!    moved since): they change only whom `notify_one` picks, never whether it notifies.
//!
//! # Properties
//! No spurious wake-ups: `wait` returns only when notified or timed out, so `notify_one` reports whether
//! it notified a waiter and `notify_all` how many. One condvar serves one mutex at a time: waiting with
//! another mutex while waiters of the first remain panics (the misuse `lock_api` allows us to reject).
//! Not FIFO: `notify_one` may serve a later watcher, or a later sleeper on another CPU, before an
//! earlier sleeper, within the bound above.
//!
//! # fork()
//! The child of a `fork` has only the forking thread: every waiter in the condvar's list is a ghost.
//! `lock` is a fork-epoch list lock (`crate::sleep::wait_list::ListLock`): the child's first use of
//! it takes it over even if a vanished thread held it, and empties the list, with the waiting mutex
//! and the watcher places, so a `notify_all` there counts only the child's own waiters. A thread
//! that forks from a signal handler while it waits here is the child's one thread, but its node
//! was in the dropped list: a timed wait of it times out there (it removes nothing and gives back
//! no place), an untimed one waits for good (nothing of the child can notify it).
//!
//! # Lock order
//! condvar `lock` -> mutex `wait_lock` (in `notify`). Nothing takes them the other way round.
//!
//! # Memory orderings
//! The condvar's list and `mutex` field are protected by `lock` (Acquire/Release spinlock). The fast check
//! in `notify` (`mutex` null: nobody waits) is Relaxed: a waiter registers before it releases the mutex,
//! so a notifier that holds the mutex afterwards sees the registration through the mutex's own
//! Acquire/Release; a notifier that does not hold it has no ordering to expect (as with every condvar).
//! The notifier's `NOTIFIED` (store or successful compare-and-swap) is Release; it pairs with the
//! waiter's Acquire: its failed `WATCHING -> SLEEPING` compare-and-swap or its load of `NOTIFIED`.
//! The mutex's own hand-over orders the data the waiter reads once it holds the mutex again.

use crate::primitive::{AtomicPtr, AtomicU32, Ordering};
use crate::sleep::mutex::{MutexToken, RawMutex, current_tag};
use crate::sleep::wait_list::{
    ListLock, LockedList, NOTIFIED, SLEEPING, WATCHING, WaitList, Waiter,
};
use crate::sys::futex_wait;
#[cfg(all(not(loom), not(locklab_sim)))]
use core::cell::Cell;
use core::cell::UnsafeCell;
use core::ptr;

/// How long a waiter watches its word before it sleeps (ns), unless renewed (see [`WAIT_ALONE_NS`]).
///
/// ```
/// use locklab::sleep::{condvar::WAIT_SPIN_NS, mutex::OWNER_SPIN_NS};
/// assert!(WAIT_SPIN_NS <= OWNER_SPIN_NS); // a waiter watches its word briefly, then sleeps
/// ```
pub const WAIT_SPIN_NS: u64 = 5_000;
/// Most `pause`s between its looks (it never yields between them: see "Watching without yields").
const WAIT_SPIN_BACKOFF: u32 = 16;
/// How long a watch may go on in all while renewed (ns). At the end of each [`WAIT_SPIN_NS`], one
/// yield that returns within 2 us (no other thread of its priority to run on the watcher's CPU)
/// renews it, if this thread's previous wait on this condvar that watched was notified within
/// [`RENEW_AFTER_NOTIFY_NS`] of its start (its producer/consumer pair is busy) and the thread is
/// under the ordinary time-sharing policy: a sleeper on an idle virtual CPU took 30-40 us to wake
/// on the 2-vCPU VM, and a watcher still there when the other side of the pair comes back needs no
/// wake-up at all. The cost is power (and a hyperthread sibling's share of its core): each time a
/// busy pair goes quiet (after every burst of jobs, say), a CPU that would idle stays busy up to
/// this long. A real-time thread never renews: its `sched_yield` returns at once even with an
/// ordinary thread waiting for the CPU, which may be the very notifier.
///
/// ```
/// use locklab::sleep::condvar::{WAIT_ALONE_NS, WAIT_SPIN_NS};
/// assert!(WAIT_ALONE_NS >= 20 * WAIT_SPIN_NS); // renewed only while nothing else runs there
/// ```
pub const WAIT_ALONE_NS: u64 = 100_000;
/// A watch is renewed only if the same thread's previous wait that watched on the same condvar was
/// notified within this long of its start (ns; see [`WAIT_ALONE_NS`]): a worker whose jobs come
/// one at a time and rarely never renews, and watches [`WAIT_SPIN_NS`] per wait. (Linux only:
/// elsewhere watches are not renewed.)
///
/// ```
/// use locklab::sleep::condvar::{RENEW_AFTER_NOTIFY_NS, WAIT_ALONE_NS};
/// assert!(RENEW_AFTER_NOTIFY_NS <= WAIT_ALONE_NS);
/// ```
pub const RENEW_AFTER_NOTIFY_NS: u64 = 100_000;
/// A yield that returns within this (ns) found nothing else to run on its CPU: a bare
/// `sched_yield` took 0.7 us on the 2-vCPU VM, one that ran another yielding thread 3.8 us.
#[cfg(all(not(loom), not(locklab_sim)))]
const ALONE_YIELD_NS: u64 = 2_000;
/// `notify_one` serves the front waiter first once it has slept this long (ns); until then it prefers
/// a watching waiter, which needs no wake-up. The bound on how long a sleeper can be passed over, and
/// what sets the wake-up rate with more waiters than watchers: each sleeper that waits it out is woken
/// in turn. 4 ms, the kernel rwsem's hand-off figure (on the one-slot `condvar` workload, 64 threads
/// on 2 CPUs: 1 ms gave 0.55-0.76 sleeps per message, 4 ms 0.06-0.07, for 1.5-1.9x the messages).
///
/// ```
/// use locklab::sleep::{condvar::FAIR_NS, mutex::HANDOFF_NS};
/// assert_eq!(FAIR_NS, 4 * HANDOFF_NS); // passed over for at most 4 ms
/// ```
pub const FAIR_NS: u64 = 4_000_000;
/// How many waiters from the back `notify_one` looks at for a watcher, or a sleeper on another CPU
/// (watchers are the latest to wait, and at most as many as CPUs).
const WATCHER_SCAN: usize = 8;

/// When a watch started (the clock's reading; nothing under loom and the simulator, which do not
/// renew watches).
#[cfg(all(not(loom), not(locklab_sim)))]
type WatchStart = std::time::Instant;
#[cfg(any(loom, locklab_sim))]
#[derive(Clone, Copy)]
struct WatchStart;

#[cfg(all(not(loom), not(locklab_sim)))]
std::thread_local! {
    /// The condvar (its address) on which this thread's last wait that watched was notified
    /// within [`RENEW_AFTER_NOTIFY_NS`] of its start, watching or asleep: this thread is one end
    /// of a busy pair there, and its next watch there may renew. 0: none.
    static BUSY_PAIR: Cell<usize> = const { Cell::new(0) };
}

/// The condition variable. See the [module documentation](self). Use it through [`crate::Condvar`];
/// the raw notify calls work alone:
///
/// ```
/// let cv = locklab::raw::RawCondvar::new();
/// assert!(!cv.notify_one(), "nobody waits");
/// assert_eq!(cv.notify_all(), 0);
/// ```
pub struct RawCondvar {
    /// The mutex the current waiters use; null when there are none.
    mutex: AtomicPtr<RawMutex>,
    /// Protects `waiters` and writes of `mutex`.
    lock: ListLock,
    waiters: UnsafeCell<WaitList>,
    /// Waiters watching their word before they sleep (at most as many as CPUs; counted up under
    /// `lock` as they queue, down by whoever wins the word: the notifier or the watcher; invariant 4).
    watchers: AtomicU32,
    /// Under loom: the most watchers, the CPU count (2) unless a model lowers it to reach the
    /// sleeping paths.
    #[cfg(loom)]
    pub(crate) max_watchers: u32,
}

// SAFETY: `waiters` is only accessed with `lock` held.
unsafe impl Sync for RawCondvar {}
// SAFETY: waiters borrow the condvar, so none exist when it moves.
unsafe impl Send for RawCondvar {}

impl RawCondvar {
    crate::primitive::const_unless_loom! {
        /// A new condvar.
        ///
        /// ```
        /// let cv = locklab::raw::RawCondvar::new();
        /// assert_eq!(cv.notify_all(), 0);
        /// ```
        pub fn new() -> Self {
            RawCondvar {
                mutex: AtomicPtr::new(ptr::null_mut()),
                lock: ListLock::new(),
                waiters: UnsafeCell::new(WaitList::new()),
                watchers: AtomicU32::new(0),
                #[cfg(loom)]
                max_watchers: crate::sys::cpus() as u32,
            }
        }
    }

    /// The internal list lock (tests: a thread caught holding it at a `fork`).
    #[cfg(all(test, unix, not(loom), not(miri)))]
    pub(crate) fn list_lock(&self) -> &ListLock {
        &self.lock
    }

    /// How many watcher places are taken (loom models: 0 once every wait has returned, invariant 4).
    #[cfg(loom)]
    pub(crate) fn watcher_places(&self) -> u32 {
        self.watchers.load(Ordering::Relaxed)
    }

    /// Runs `f` with `lock` held (released when `f` returns or unwinds).
    fn locked<R>(&self, f: impl FnOnce(&mut WaitList) -> R) -> R {
        let mut list = LockedList::lock(&self.lock, &self.waiters);
        if list.was_stale {
            // The list was a parent's (a fork came between), now emptied: its waiters are not in
            // this process, so nobody waits and nobody watches. Relaxed: under `lock`.
            self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            self.watchers.store(0, Ordering::Relaxed);
        }
        f(&mut list)
    }

    /// Releases `mutex`, waits for a notification or `deadline`, re-locks. Returns `true` on timeout.
    ///
    /// # Safety
    /// `token` is the state of the caller's current acquisition of `mutex`; on return it is replaced by
    /// the state of the new acquisition.
    pub(crate) unsafe fn wait_until_impl(
        &self,
        mutex: &RawMutex,
        token: &mut MutexToken,
        deadline: Option<&crate::clock::Deadline>,
    ) -> bool {
        let waiter = Waiter::new(current_tag());
        let me = mutex as *const RawMutex as *mut RawMutex;
        // The fork epoch we queue in: a thread that forks from a signal handler while it waits here
        // is in the child's process, but its node was in the list the child drops (`locked`).
        let epoch = crate::sys::fork_epoch();
        let watch = self.locked(|list| {
            let current = self.mutex.load(Ordering::Relaxed);
            if current.is_null() {
                self.mutex.store(me, Ordering::Relaxed);
            } else if current != me {
                // Panics below, once `lock` is released (a panic hook may touch this condvar).
                return None;
            }
            // Watch before sleeping (untimed waits only), at most as many watchers as CPUs: a
            // watcher spins without yielding, and more would take the CPUs from the threads that
            // notify. Relaxed (the count and its check): a sizing hint, publishing nothing.
            #[cfg(not(loom))]
            let max = u32::try_from(crate::sys::cpus()).unwrap_or(u32::MAX);
            #[cfg(loom)]
            let max = self.max_watchers;
            let watch = deadline.is_none() && self.watchers.load(Ordering::Relaxed) < max;
            waiter.cpu.set(cpu_now());
            if watch {
                self.watchers.fetch_add(1, Ordering::Relaxed);
                // Relaxed: notifiers read it under `lock`, which we hold.
                waiter.futex.store(WATCHING, Ordering::Relaxed);
            }
            waiter.in_condvar.set(true);
            // SAFETY: `waiter` stays on this frame until it is out of both lists (below).
            unsafe { list.push_back(&waiter) };
            Some(watch)
        });
        let Some(watch) = watch else {
            panic!("locklab::Condvar: waited on with two different mutexes at once");
        };
        let held = core::mem::replace(token, MutexToken::placeholder());
        // SAFETY: `held` is the caller's current acquisition.
        unsafe { mutex.unlock(held) };

        // When a watch that ended unnotified started (the wait then sleeps): the pair hint is
        // recorded once that sleep ends (a watch notified while watching records it itself).
        let mut slept_after_watch = None;
        // Watch our word a little before sleeping (loads only): a notifier that is already running
        // (the other end of a producer/consumer pair) usually comes within microseconds, and it
        // prefers a watcher (see `notify`), which it moves with no futex wake at all.
        if watch {
            let started = self.watch_word(&waiter.futex);
            // WATCHING -> SLEEPING: from now on a notifier wakes us with a futex wake. It fails only
            // if a notifier stored NOTIFIED first. Acquire (failure) pairs with that Release CAS;
            // Relaxed (success): publishes nothing, the word's modification order decides.
            if waiter
                .futex
                .compare_exchange(WATCHING, SLEEPING, Ordering::Relaxed, Ordering::Acquire)
                .is_ok()
            {
                // Our watch ended unnotified: we give our watcher place back (a notifier that
                // wins the word gives it back for us), unless a fork since dropped every place.
                // Relaxed: a sizing hint.
                if crate::sys::fork_epoch() == epoch {
                    self.watchers.fetch_sub(1, Ordering::Relaxed);
                }
                slept_after_watch = Some(started);
            }
        }
        let mut timed_out = false;
        loop {
            // Acquire pairs with the wakers' Release stores (WOKEN/HANDED) in the mutex.
            if waiter.futex.load(Ordering::Acquire) != SLEEPING {
                break;
            }
            match crate::clock::time_left(deadline) {
                None => {
                    timed_out = true;
                    break;
                }
                Some(left) => {
                    futex_wait(&waiter.futex, SLEEPING, left);
                }
            }
        }
        if let Some(started) = slept_after_watch {
            // An untimed wait (only those watch) returns only notified.
            Self::note_pair(self as *const Self as usize, started);
        }
        if timed_out {
            let still_here = self.locked(|list| {
                if crate::sys::fork_epoch() != epoch {
                    // We forked (from a signal handler) while waiting: the list we were in is the
                    // parent's, dropped here; we are in no list of this process. A time-out.
                    return true;
                }
                if !waiter.in_condvar.get() {
                    return false;
                }
                // SAFETY: `in_condvar` says it is in this list.
                unsafe { list.remove(&waiter) };
                if list.is_empty() {
                    self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
                }
                true
            });
            if still_here {
                *token = mutex.lock();
                return true;
            }
        }
        // Acquire pairs with the notifier's Release store of NOTIFIED (made under the condvar's lock, so
        // the timed-out path above, which saw `in_condvar` false under that lock, sees it too).
        if waiter.futex.load(Ordering::Acquire) == NOTIFIED {
            // Dequeued by the notifier, in no list: re-lock like any locker.
            *token = mutex.lock();
            return false;
        }
        // Notified: `waiter` is in the mutex's wait list now (maybe already woken or handed the lock).
        // SAFETY: `waiter` lives on this frame, was made by this thread, and was moved to `mutex`'s list.
        let got = unsafe { mutex.wait_queued(&waiter, None, true) };
        debug_assert!(got, "a wait without deadline always gets the lock");
        *token = MutexToken::for_tag(waiter.tag);
        false
    }

    /// Dequeues the waiter `notify_one` serves: the front one if it watches or has slept longer
    /// than `fair_ns` ([`FAIR_NS`]); else, among the last [`WATCHER_SCAN`] waiters, one watching on
    /// another CPU than the notifier's (`me`), then one sleeping on another CPU, then one watching on
    /// ours; else the front. (Why the other CPU first: "Choosing whom to notify".)
    fn pick_one(list: &mut WaitList, fair_ns: u64, me: u32) -> WaitList {
        let mut one = WaitList::new();
        let Some(front) = list.front() else {
            return one;
        };
        // Relaxed (every word load here): under `lock` the word is WATCHING or SLEEPING, and a
        // watcher may turn itself SLEEPING at any time: a hint, the CAS in `notify` decides.
        let watching = |w: &Waiter| w.futex.load(Ordering::Relaxed) == WATCHING;
        // A CPU unknown on either side is nobody's "other".
        let elsewhere = |w: &Waiter| me != u32::MAX && w.cpu.get() != u32::MAX && w.cpu.get() != me;
        let pick = if watching(front) || front.since.older_than(fair_ns) {
            front
        } else {
            list.find_from_back(WATCHER_SCAN, |w| watching(w) && elsewhere(w))
                .or_else(|| list.find_from_back(WATCHER_SCAN, |w| !watching(w) && elsewhere(w)))
                .or_else(|| list.find_from_back(WATCHER_SCAN, watching))
                .unwrap_or(front)
        };
        let pick = pick as *const Waiter;
        // SAFETY: `pick` is in `list`, alive while queued; it moves list to list.
        unsafe {
            list.remove(&*pick);
            one.push_back(&*pick);
        }
        one
    }

    /// Notifies up to `n` waiters (see the module documentation): watchers get `NOTIFIED` with no
    /// wake-up; of the sleepers, with the mutex free, the first is woken directly (`NOTIFIED`) and the
    /// rest move to the mutex's wait list. Returns how many.
    #[inline]
    pub(crate) fn notify(&self, n: usize) -> usize {
        // Inlined into the caller: with nobody waiting, a notification is this one load.
        if self.mutex.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        self.notify_slow(n)
    }

    /// [`notify`](Self::notify) once a waiter has been seen.
    #[inline(never)]
    fn notify_slow(&self, n: usize) -> usize {
        let mut wake: *const AtomicU32 = ptr::null();
        let count = self.locked(|list| {
            let mutex = self.mutex.load(Ordering::Relaxed);
            if mutex.is_null() {
                return 0;
            }
            let mut moved = if n == 1 {
                Self::pick_one(list, FAIR_NS, cpu_now())
            } else {
                list.split_front(n)
            };
            if list.is_empty() {
                self.mutex.store(ptr::null_mut(), Ordering::Relaxed);
            }
            // Watchers are running: NOTIFIED is all they need. Sleepers stay in `moved`.
            let mut sleepers = WaitList::new();
            let mut count = 0;
            while let Some(w) = moved.pop_front() {
                count += 1;
                // SAFETY: `w` was in our list, so alive until a NOTIFIED store reaches it (the
                // waiter waits for its word to change); we touch it through raw places only.
                unsafe {
                    (*w).in_condvar.set(false);
                    // Release pairs with the waiter's Acquire (its failed WATCHING -> SLEEPING CAS,
                    // or its load of NOTIFIED). On success, our last access to it.
                    if (*w)
                        .futex
                        .compare_exchange(WATCHING, NOTIFIED, Ordering::Release, Ordering::Relaxed)
                        .is_ok()
                    {
                        // It watches no more: its place goes to the next waiter now, not when
                        // it next runs (with threads outnumbering CPUs, a notified watcher may
                        // wait a scheduling round for its CPU). Relaxed: a sizing hint.
                        self.watchers.fetch_sub(1, Ordering::Relaxed);
                    } else {
                        // SLEEPING (under `lock`, a queued word is WATCHING or SLEEPING).
                        sleepers.push_back(&*w);
                    }
                }
            }
            if sleepers.is_empty() {
                // Every notified waiter was watching: nothing keeps the mutex alive any more (a
                // NOTIFIED watcher re-locks it, returns, and its owner may free it while we are
                // here), and none needs anything of it from us. We must not touch it.
                return count;
            }
            // SAFETY: `mutex` is alive: the waiters in `sleepers` still block in `wait` (their words
            // read SLEEPING until we change them), borrowing it until they re-lock.
            let mutex = unsafe { &*mutex };
            if !mutex.is_locked()
                && let Some(w) = sleepers.pop_front()
            {
                // SAFETY: `w` is alive until it sees this store (it waits for a non-SLEEPING word,
                // or takes our lock to check `in_condvar`, which we hold): the store is our last
                // access to it. Release pairs with its Acquire load of NOTIFIED.
                unsafe {
                    wake = ptr::addr_of!((*w).futex);
                    (*wake).store(NOTIFIED, Ordering::Release);
                }
                if sleepers.is_empty() {
                    // The woken waiter may now re-lock, return and free the mutex: the store
                    // above was our last access to it too.
                    return count;
                }
            }
            // SAFETY: each moved waiter stays alive until it leaves the mutex's list (it only returns
            // then), and was made by its thread for this mutex; its word is SLEEPING. The mutex is
            // alive: `sleepers` is not empty (above).
            unsafe { mutex.requeue(&mut sleepers) };
            count
        });
        if !wake.is_null() {
            // After the condvar's lock is released: the woken thread may need it. `futex_wake` never
            // dereferences the address (the lifetime rule of `crate::sleep::wait_list`).
            crate::sys::futex_wake(wake, 1);
        }
        count
    }

    /// Wakes one waiter; returns whether there was one.
    ///
    /// ```
    /// use locklab::{Condvar, Mutex};
    /// let (m, cv) = (Mutex::new(0), Condvar::new());
    /// assert!(!cv.notify_one(), "nobody waits");
    /// std::thread::scope(|s| {
    ///     let waiter = s.spawn(|| {
    ///         let mut n = m.lock();
    ///         cv.wait_while(&mut n, |n| *n == 0);
    ///     });
    ///     *m.lock() = 1;
    ///     // The waiter may not be waiting yet: notify until it is done.
    ///     while !waiter.is_finished() {
    ///         cv.notify_one();
    ///         std::thread::yield_now();
    ///     }
    /// });
    /// ```
    #[inline]
    pub fn notify_one(&self) -> bool {
        self.notify(1) == 1
    }

    /// Wakes every waiter; returns how many there were.
    ///
    /// ```
    /// use locklab::{Condvar, Mutex};
    /// let (m, cv) = (Mutex::new(false), Condvar::new());
    /// assert_eq!(cv.notify_all(), 0, "nobody waits");
    /// std::thread::scope(|s| {
    ///     let waiters: Vec<_> = (0..2)
    ///         .map(|_| {
    ///             s.spawn(|| {
    ///                 let mut go = m.lock();
    ///                 cv.wait_while(&mut go, |go| !*go);
    ///             })
    ///         })
    ///         .collect();
    ///     *m.lock() = true;
    ///     while !waiters.iter().all(|w| w.is_finished()) {
    ///         cv.notify_all();
    ///         std::thread::yield_now();
    ///     }
    /// });
    /// ```
    #[inline]
    pub fn notify_all(&self) -> usize {
        self.notify(usize::MAX)
    }
}

/// The CPU this thread runs on, `u32::MAX` if unknown (always under loom, whose executions must not
/// depend on the host's scheduler).
#[inline]
fn cpu_now() -> u32 {
    #[cfg(loom)]
    return u32::MAX;
    #[cfg(not(loom))]
    crate::sys::current_cpu().map_or(u32::MAX, |c| c.min(u32::MAX as usize - 1) as u32)
}

/// Whether this thread is under the ordinary time-sharing policy, where a yield that returns at
/// once means nothing else waits for the CPU (a real-time thread's yield passes over every thread
/// of a lower class).
///
/// A system call, so the answer is kept per thread and asked again every 1,024 uses: a thread made
/// real-time after it started waiting renews at most that many more watches.
#[cfg(all(not(loom), not(locklab_sim), target_os = "linux", not(miri)))]
fn time_sharing() -> bool {
    use core::cell::Cell;
    std::thread_local! {
        /// The last answer, and how many more uses it serves (0: ask).
        static ANSWER: Cell<(bool, u16)> = const { Cell::new((false, 0)) };
    }
    // No destructor (a `Cell` of plain values), so this works in any thread-local destructor too.
    ANSWER.with(|a| {
        let (answer, uses) = a.get();
        if uses > 0 {
            a.set((answer, uses - 1));
            return answer;
        }
        // SAFETY: no pointers; 0 is the calling thread.
        let policy = unsafe { libc::sched_getscheduler(0) };
        // The kernel ORs SCHED_RESET_ON_FORK into the policy it reports.
        let policy = policy & !libc::SCHED_RESET_ON_FORK;
        let answer = policy == libc::SCHED_OTHER || policy == libc::SCHED_BATCH;
        a.set((answer, 1023));
        answer
    })
}

/// Elsewhere: no renewal (the policy cannot be asked the same way).
#[cfg(all(not(loom), not(locklab_sim), any(not(target_os = "linux"), miri)))]
fn time_sharing() -> bool {
    false
}

impl RawCondvar {
    /// A watcher's look at its own word while it reads `WATCHING`: for [`WAIT_SPIN_NS`], backing
    /// off up to [`WAIT_SPIN_BACKOFF`] `pause`s between looks, never yielding between them (on a
    /// machine with one CPU, where the notifier needs ours, it yields at the cap instead); then
    /// renewed as [`WAIT_ALONE_NS`] says, each time by one yield that returns at once.
    /// Returns when the watch started.
    #[cfg(all(not(loom), not(locklab_sim)))]
    fn watch_word(&self, word: &AtomicU32) -> WatchStart {
        use std::time::{Duration, Instant};
        let me = self as *const Self as usize;
        let start = Instant::now();
        let alone_end = start + Duration::from_nanos(WAIT_ALONE_NS);
        let mut end = start + Duration::from_nanos(WAIT_SPIN_NS);
        let mut backoff = crate::primitive::Backoff::new(WAIT_SPIN_BACKOFF);
        let one_cpu = crate::sys::cpus() == 1;
        // A thread-local hint with no destructor: readable even in a late thread-local destructor.
        let busy = BUSY_PAIR.try_with(Cell::get).unwrap_or(0) == me;
        // Asked once per watch, at the first chance to renew it.
        let mut may_renew: Option<bool> = None;
        // The clock at the last look that read it: within one step of when the watch ended.
        let mut last = start;
        // Relaxed: a hint; the caller's compare-and-swap decides.
        while word.load(Ordering::Relaxed) == WATCHING {
            if backoff.next_pauses().is_some() {
                // A few short steps (1 to 8 `pause`s) before the clock is read.
                backoff.wait();
                continue;
            }
            if one_cpu {
                crate::primitive::yield_now();
            } else {
                crate::primitive::pause_n(WAIT_SPIN_BACKOFF);
            }
            last = Instant::now();
            if last < end {
                continue;
            }
            // The watch is over unless it renews: only in a busy pair, for a time-sharing thread,
            // and if a yield shows no other thread waiting for this CPU (it returns at once).
            if one_cpu || !busy || last >= alone_end || !*may_renew.get_or_insert_with(time_sharing)
            {
                break;
            }
            crate::primitive::yield_now();
            let after = Instant::now();
            if after - last >= Duration::from_nanos(ALONE_YIELD_NS) {
                last = after;
                break;
            }
            last = after;
            end = (after + Duration::from_nanos(WAIT_SPIN_NS)).min(alone_end);
        }
        // Relaxed: the word's value only decides a hint here. A watch that ends unnotified leaves
        // the hint to the end of the sleep that follows (`note_pair`).
        if word.load(Ordering::Relaxed) != WATCHING {
            Self::pair_hint(
                me,
                last - start <= Duration::from_nanos(RENEW_AFTER_NOTIFY_NS),
            );
        }
        start
    }

    /// Records whether this thread's wait on condvar `me` was notified within
    /// [`RENEW_AFTER_NOTIFY_NS`] of its start (a busy pair: its next watch there may renew).
    #[cfg(all(not(loom), not(locklab_sim)))]
    fn pair_hint(me: usize, busy: bool) {
        // No destructor: usable even in a late thread-local destructor; `try_with` never panics.
        let _ = BUSY_PAIR.try_with(|b| b.set(if busy { me } else { 0 }));
    }

    /// A wait that watched, slept and was notified: records the pair hint from its whole length.
    #[cfg(all(not(loom), not(locklab_sim)))]
    fn note_pair(me: usize, started: WatchStart) {
        let quick = started.elapsed() <= std::time::Duration::from_nanos(RENEW_AFTER_NOTIFY_NS);
        Self::pair_hint(me, quick);
    }

    /// Under loom and the simulator: no renewal, so no hint.
    #[cfg(any(loom, locklab_sim))]
    fn note_pair(_me: usize, _started: WatchStart) {}

    /// Under loom and the simulator: the budget's own clock (a few polls under loom; a yield there
    /// would always let the notifier run, and the models would never see a watch end unnotified).
    #[cfg(any(loom, locklab_sim))]
    fn watch_word(&self, word: &AtomicU32) -> WatchStart {
        let mut budget = crate::clock::SpinBudget::new(WAIT_SPIN_NS);
        #[cfg(not(loom))]
        let mut backoff = crate::primitive::Backoff::new(WAIT_SPIN_BACKOFF);
        // Relaxed: a hint; the caller's compare-and-swap decides.
        while word.load(Ordering::Relaxed) == WATCHING && !budget.expired() {
            #[cfg(not(loom))]
            backoff.wait();
        }
        WatchStart
    }
}

#[cfg(not(loom))]
impl Default for RawCondvar {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: `wait` registers on the condvar's list before it releases the mutex, so a notification sent
// after the release (under the mutex) finds it; it re-locks the mutex before returning and stores the new
// acquisition's state in `guard`. Nothing in it panics after the unlock. No spurious wake-ups, so the
// notify counts are exact.
unsafe impl lock_api::RawCondvar for RawCondvar {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type RawMutex = RawMutex;

    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn wait(&self, mutex: &RawMutex, guard: &mut MutexToken) {
        crate::dep::cond_wait(
            self as *const Self as *const (),
            mutex as *const RawMutex as *const (),
        );
        // SAFETY: forwarded contract.
        unsafe { self.wait_until_impl(mutex, guard, None) };
    }

    #[inline]
    fn notify_one(&self) -> bool {
        RawCondvar::notify_one(self)
    }

    #[inline]
    fn notify_all(&self) -> usize {
        RawCondvar::notify_all(self)
    }
}

#[cfg(not(loom))]
// SAFETY: as for `RawCondvar`; a timed-out wait also re-locks before returning.
unsafe impl lock_api::RawCondvarTimed for RawCondvar {
    fn checked_duration_to_instant(timeout: &std::time::Duration) -> Option<std::time::Instant> {
        std::time::Instant::now().checked_add(*timeout)
    }

    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn wait_until(
        &self,
        mutex: &RawMutex,
        guard: &mut MutexToken,
        timeout: &std::time::Instant,
    ) -> bool {
        crate::dep::cond_wait(
            self as *const Self as *const (),
            mutex as *const RawMutex as *const (),
        );
        // SAFETY: forwarded contract.
        unsafe { self.wait_until_impl(mutex, guard, Some(timeout)) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The waiter `notify_one` serves: a watcher near the back before a young front sleeper; the front
    /// when it watches itself, when nobody watches, when the watcher is beyond the scan, and once the
    /// front has slept longer than `FAIR_NS` (the bound on being passed over). With CPUs known: a
    /// watcher on another CPU than the notifier's first, then a sleeper there, then a watcher on ours.
    #[test]
    fn pick_one_prefers_a_watcher_within_the_fairness_bound() {
        let ws: Vec<Waiter> = (0..12).map(Waiter::new).collect();
        // Waiters as (word, CPU); the notifier runs on CPU `me`.
        let pick_on = |fair_ns: u64, me: u32, waiters: &[(u32, u32)]| {
            let mut l = WaitList::new();
            for (w, &(word, cpu)) in ws.iter().zip(waiters) {
                w.futex.store(word, Ordering::Relaxed);
                w.cpu.set(cpu);
                unsafe { l.push_back(w) };
            }
            let one = RawCondvar::pick_one(&mut l, fair_ns, me);
            let tag = one.front().map(|w| w.tag);
            let mut rest = 0;
            l.for_each(|_| rest += 1);
            assert_eq!(rest + tag.is_some() as usize, waiters.len(), "one dequeued");
            tag
        };
        let unknown = u32::MAX;
        let picked_after = |fair_ns: u64, words: &[u32]| {
            let waiters: Vec<_> = words.iter().map(|&w| (w, unknown)).collect();
            pick_on(fair_ns, unknown, &waiters)
        };
        // Everyone is younger than a bound that never passes.
        let picked = |words: &[u32]| picked_after(u64::MAX, words);
        let (s, w) = (SLEEPING, WATCHING);
        assert_eq!(
            picked(&[s, s, w]),
            Some(2),
            "the watcher, not the young sleeper"
        );
        assert_eq!(picked(&[s, w, s]), Some(1), "the watcher nearest the back");
        assert_eq!(picked(&[w, s, w]), Some(0), "the front, watching");
        assert_eq!(picked(&[s, s, s]), Some(0), "nobody watches: the front");
        assert_eq!(
            picked(&[s, w, s, s, s, s, s, s, s, s]),
            Some(0),
            "the watcher is beyond the scan"
        );
        assert_eq!(picked(&[]), None);
        assert_eq!(
            picked_after(0, &[s, s, w]),
            Some(0),
            "the front has waited out the bound"
        );
        // The notifier on CPU 0.
        let on_cpu0 = |waiters: &[(u32, u32)]| pick_on(u64::MAX, 0, waiters);
        assert_eq!(
            on_cpu0(&[(s, 1), (w, 1), (w, 0)]),
            Some(1),
            "a watcher on the other CPU before one on ours"
        );
        assert_eq!(
            on_cpu0(&[(s, 0), (s, 1), (w, 0)]),
            Some(1),
            "a sleeper on the other CPU before a watcher on ours"
        );
        assert_eq!(
            on_cpu0(&[(s, 0), (s, 0), (w, 0)]),
            Some(2),
            "only our CPU: the watcher"
        );
        assert_eq!(
            on_cpu0(&[(s, 0), (s, unknown), (w, 0)]),
            Some(2),
            "an unknown CPU is not another"
        );
        assert_eq!(
            on_cpu0(&[(w, 0), (w, 1)]),
            Some(0),
            "the front watching goes first, wherever it is"
        );
        assert_eq!(
            pick_on(0, 0, &[(s, 0), (w, 1)]),
            Some(0),
            "the bound goes before any CPU"
        );
    }
}
