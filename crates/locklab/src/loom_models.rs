//! Loom models of every protocol in the crate. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=1 cargo test -p locklab --release --lib loom_models`
//! (`.ci/run` does; the run time is noted there).
//!
//! Loom 0.7 and test-and-set: a `swap(true)` spin on a held lock makes loom keep reading the
//! spinner's own `true` after the holder's `store(false)` (a two-thread swap spinlock with
//! `yield_now` exceeds the branch limit at preemption bound 1; the same lock on compare-exchange
//! passes). Our internal list lock (`RawTasLock`) therefore uses a compare-exchange under loom (one
//! locked instruction either way on hardware, where it keeps `xchg`); that made the condvar-timeout
//! and RwSem fair-unlock models run, which had stayed ignored as "spinning on a list lock loom never
//! shows released". Futex sleeps are modelled by a loom `Mutex`/`Condvar` pair (`sys`), so loom sees
//! a sleeper as blocked rather than spinning. `LOOM_MAX_BRANCHES` overrides the branch limit.
//!
//! Protected data lives in `loom::cell::UnsafeCell`, so loom reports any access that the lock's
//! Acquire/Release edges fail to order, besides the explicit "two inside" checks. Spin budgets, waiter
//! ages and deadlines are countdowns under loom (see `clock.rs`), so the give-up paths (OSQ unqueue,
//! hand-off request, timeout removal) are explored, not just the happy path.

use crate::clock::Deadline;
use crate::condvar::RawCondvar;
use crate::mutex::RawMutex;
use crate::osq::{Osq, OsqNode};
use crate::spin::mcs::{McsNode, RawMcsLock};
use crate::spin::qspinlock::{RawQueuedSpinLock, encode_tail};
use crate::spin::ticket::RawTicketLock;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_with_preemptions(1, f)
}

/// `model` with at least `bound` preemptions (for the models whose bug needs more than one).
fn model_with_preemptions(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.unwrap_or(1).max(bound));
    // Spin-waits are yields under loom, and each is a branch: allow long waits.
    b.max_branches = std::env::var("LOOM_MAX_BRANCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    b.check(f);
}

/// Data under a lock, with an overlap detector on top of loom's own race detection.
struct Guarded {
    value: UnsafeCell<usize>,
    inside: AtomicUsize,
}

impl Guarded {
    fn new() -> Self {
        Guarded {
            value: UnsafeCell::new(0),
            inside: AtomicUsize::new(0),
        }
    }
    fn critical(&self) {
        assert_eq!(
            self.inside.fetch_add(1, Ordering::Relaxed),
            0,
            "two threads inside"
        );
        self.value.with_mut(|v| unsafe { *v += 1 });
        self.inside.fetch_sub(1, Ordering::Relaxed);
    }
    fn get(&self) -> usize {
        self.value.with(|v| unsafe { *v })
    }
}

/// A spinlock with `lock`/`try_lock`/`unlock`/`is_locked`: mutual exclusion between two lockers and
/// a trier; the lock ends free.
macro_rules! spin_exclusion_model {
    ($($(#[$doc:meta])* $name:ident: $lock:ty;)*) => {$(
        $(#[$doc])*
        #[test]
        fn $name() {
            model(|| {
                let s = Arc::new((<$lock>::new(), Guarded::new()));
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        let s = s.clone();
                        thread::spawn(move || {
                            s.0.lock();
                            s.1.critical();
                            unsafe { s.0.unlock() };
                        })
                    })
                    .collect();
                if s.0.try_lock() {
                    s.1.critical();
                    unsafe { s.0.unlock() };
                }
                for h in hs {
                    h.join().unwrap();
                }
                assert!(s.1.get() >= 2);
                assert!(!s.0.is_locked());
            });
        }
    )*};
}

spin_exclusion_model! {
    /// The ticket lock.
    ticket_mutual_exclusion: RawTicketLock;
    /// Test-and-set.
    tas_mutual_exclusion: crate::spin::tas::RawTasLock;
}

/// `n` threads on an MCS lock, each trying the node-less fast path (`HELD`) and queueing its own node
/// when that fails: hand-overs between `HELD` holders and node holders, and linking into the lock's own
/// `next` (three threads: a `HELD` holder with a successor that has a successor). The main thread takes
/// the lock `main_rounds` times.
fn mcs_threads(n: usize, main_rounds: usize) {
    fn locked_section(l: &RawMcsLock, g: &Guarded) {
        let node = McsNode::new();
        if l.try_lock_held() {
            g.critical();
            // SAFETY: this thread holds the lock as HELD.
            unsafe { l.unlock_held() };
        } else {
            // SAFETY: `node` outlives the acquisition (unlocked below, before it drops).
            unsafe { l.lock_queued(&node) };
            g.critical();
            // SAFETY: this thread holds the lock with `node`.
            unsafe { l.unlock_queued(&node) };
        }
    }
    model(move || {
        let s = Arc::new((RawMcsLock::new(), Guarded::new()));
        let hs: Vec<_> = (1..n)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || locked_section(&s.0, &s.1))
            })
            .collect();
        for _ in 0..main_rounds {
            locked_section(&s.0, &s.1);
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.1.get(), n - 1 + main_rounds);
        assert!(!s.0.is_locked());
    });
}

#[test]
fn mcs_mutual_exclusion_and_handover() {
    mcs_threads(2, 2);
}

#[test]
fn mcs_held_holder_with_a_queue_of_two() {
    mcs_threads(3, 1);
}

/// Invariant 1: a `HELD` holder hands over to a successor that linked into `next`; after that successor
/// is done, a new `HELD` holder must find `next` cleared (a stale link fails this model: the unlock
/// hands the lock to the gone node and leaves it held).
#[test]
fn mcs_held_again_after_handover() {
    model(|| {
        let s = Arc::new((RawMcsLock::new(), Guarded::new()));
        assert!(s.0.try_lock_held());
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let node = McsNode::new();
            // SAFETY: `node` outlives the acquisition.
            unsafe { s2.0.lock_queued(&node) };
            s2.1.critical();
            // SAFETY: this thread holds the lock with `node`.
            unsafe { s2.0.unlock_queued(&node) };
        });
        while s.0.next.load(Ordering::Relaxed).is_null() {
            thread::yield_now(); // until the waiter has linked behind us
        }
        // SAFETY: this thread holds the lock as HELD.
        unsafe { s.0.unlock_held() };
        t.join().unwrap();
        assert!(s.0.try_lock_held());
        s.1.critical();
        // SAFETY: this thread holds the lock as HELD.
        unsafe { s.0.unlock_held() };
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// Detached acquisitions (the preload library's MCS mutex): a contended locker queues a node on its
/// stack and hands its place to the lock (`cas(tail: node -> HELD)`, or its successor's link moved into
/// the lock's `next`) before its section. Two threads, three sections, one of them released by the
/// other thread (POSIX lets a normal mutex be unlocked by a non-owner): the main thread's first
/// section is ended by the spawned thread, which then contends with the main thread's second.
/// Exclusion, every hand-over, and a free lock with a clear `next` at the end.
#[test]
fn mcs_detached_with_a_foreign_unlock() {
    model(|| {
        let s = Arc::new((RawMcsLock::new(), Guarded::new()));
        s.0.lock_detached();
        s.1.critical();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            // SAFETY: the main thread's first acquisition, ended here.
            unsafe { s2.0.unlock_detached() };
            s2.0.lock_detached();
            s2.1.critical();
            // SAFETY: held by this detached acquisition.
            unsafe { s2.0.unlock_detached() };
        });
        s.0.lock_detached();
        s.1.critical();
        // SAFETY: held by this detached acquisition.
        unsafe { s.0.unlock_detached() };
        t.join().unwrap();
        assert_eq!(s.1.get(), 3);
        assert!(!s.0.is_locked());
        assert!(s.0.next.load(Ordering::Relaxed).is_null());
    });
}

/// Three detached lockers: a holder with a queue of two, so one detaching holder finds its successor
/// already linked (the lock's `next` takes the link) and another is still the tail (`cas` to HELD).
#[test]
fn mcs_detached_with_a_queue_of_two() {
    model_with_preemptions(1, || {
        let s = Arc::new((RawMcsLock::new(), Guarded::new()));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    s.0.lock_detached();
                    s.1.critical();
                    // SAFETY: held by this detached acquisition.
                    unsafe { s.0.unlock_detached() };
                })
            })
            .collect();
        s.0.lock_detached();
        s.1.critical();
        // SAFETY: held by this detached acquisition.
        unsafe { s.0.unlock_detached() };
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.1.get(), 3);
        assert!(!s.0.is_locked());
    });
}

/// Three contenders on a queued spinlock: one takes the fast path, one the pending path, one (at least)
/// the queue; with the preemption bound, loom interleaves every hand-over between them.
fn qspinlock_threads(n: usize) {
    model(move || {
        let nodes: Arc<Vec<McsNode>> = Arc::new((0..n).map(|_| McsNode::new()).collect());
        let s = Arc::new((RawQueuedSpinLock::new(), Guarded::new()));
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let (s, nodes) = (s.clone(), nodes.clone());
                thread::spawn(move || {
                    let node_of =
                        |t: u16| &nodes[crate::spin::qspinlock::decode_tail(t).0 as usize];
                    unsafe { s.0.lock_model(&nodes[i], encode_tail(i as u32, 0), node_of) };
                    s.1.critical();
                    unsafe { s.0.unlock() };
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.1.get(), n);
        assert!(!s.0.is_locked());
    });
}

#[test]
fn qspinlock_pending_path() {
    qspinlock_threads(2);
}

#[test]
fn qspinlock_queue_path() {
    qspinlock_threads(3);
}

/// The holder (main), a pending waiter and a queue head with nodes, and one thread
/// without a node (it spins on `locked`, after a PENDING it may set transiently). Mutual exclusion and
/// progress with the node-less path in the mix. The stall the defect describes needs two preemptions
/// (the node-less thread between its tail check and its `fetch_or`, the head between taking `locked`
/// and emptying the queue), beyond the bound CI affords for four threads; `release_tail`'s unit test in
/// `spin/qspinlock.rs` forces that interleaving directly.
#[test]
fn qspinlock_thread_without_node() {
    model(|| {
        let nodes: Arc<Vec<McsNode>> = Arc::new((0..3).map(|_| McsNode::new()).collect());
        let s = Arc::new((RawQueuedSpinLock::new(), Guarded::new()));
        assert!(s.0.try_lock());
        let mut hs: Vec<_> = (1..3)
            .map(|i| {
                let (s, nodes) = (s.clone(), nodes.clone());
                thread::spawn(move || {
                    let node_of =
                        |t: u16| &nodes[crate::spin::qspinlock::decode_tail(t).0 as usize];
                    unsafe { s.0.lock_model(&nodes[i], encode_tail(i as u32, 0), node_of) };
                    s.1.critical();
                    unsafe { s.0.unlock() };
                })
            })
            .collect();
        let s2 = s.clone();
        hs.push(thread::spawn(move || {
            s2.0.lock_model_unqueued();
            s2.1.critical();
            unsafe { s2.0.unlock() };
        }));
        s.1.critical();
        unsafe { s.0.unlock() };
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.1.get(), 4);
        assert!(!s.0.is_locked());
    });
}

/// OSQ heads are exclusive; spinners whose budget runs out unqueue (steps A-C) without breaking the
/// queue: later heads are still handed over and nobody hangs.
#[test]
fn osq_with_unqueue() {
    model(|| {
        let nodes: &'static [OsqNode] = Vec::leak((0..2).map(|_| OsqNode::new()).collect());
        for n in nodes {
            n.register();
        }
        let s = Arc::new((Osq::new(), Guarded::new(), AtomicUsize::new(0)));
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let s = s.clone();
                thread::spawn(move || {
                    let mut budget = crate::clock::SpinBudget::new(0);
                    if unsafe { s.0.lock(&nodes[i], &mut budget) } {
                        s.1.critical();
                        s.2.fetch_add(1, Ordering::Relaxed);
                        unsafe { s.0.unlock(&nodes[i]) };
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(
            s.2.load(Ordering::Relaxed) >= 1,
            "the first spinner is head at once"
        );
        // The queue is empty again: a new spinner is head immediately.
        let mut budget = crate::clock::SpinBudget::new(0);
        assert!(unsafe { s.0.lock(&nodes[0], &mut budget) });
        unsafe { s.0.unlock(&nodes[0]) };
    });
}

/// Spawns `n` threads that each take the mutex once (with `lock`) around a critical section.
fn spawn_mutex_lockers(s: &Arc<(RawMutex, Guarded)>, n: usize) -> Vec<thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let s = s.clone();
            thread::spawn(move || {
                let t = s.0.lock();
                s.1.critical();
                unsafe { s.0.unlock(t) };
            })
        })
        .collect()
}

/// Mutex: spinning (budget runs out quickly under loom), sleeping, waking, and hand-off (a waiter is
/// "old" from its second look, so it requests hand-off) between three threads.
#[test]
fn mutex_lock_unlock_handoff() {
    model(|| {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let hs = spawn_mutex_lockers(&s, 2);
        let t = s.0.lock();
        s.1.critical();
        unsafe { s.0.unlock_fair(t) };
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.1.get(), 3);
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
    });
}

/// Mutex: every waiter that queued to sleep (its `fetch_or(WAITERS)` the last look) is woken by a
/// later unlock, though unlocks skip the wake-up when the lock is held again (invariant 4), and woken
/// waiters close the fast path with WAKING while they compete (invariant 7: every waiter's WAKING is
/// withdrawn, so the word ends at 0). Two waiters queue behind the main thread. Preemption bound 2.
#[test]
fn mutex_sleepers_are_woken() {
    mutex_two_sleepers(false)
}

/// As [`mutex_sleepers_are_woken`], the main thread handing the lock over with `unlock_fair`.
#[test]
fn mutex_sleepers_are_woken_after_hand_off() {
    mutex_two_sleepers(true)
}

fn mutex_two_sleepers(fair: bool) {
    model_with_preemptions(2, move || {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let t = s.0.lock();
        let hs = spawn_mutex_lockers(&s, 2);
        s.1.critical();
        if fair {
            unsafe { s.0.unlock_fair(t) };
        } else {
            unsafe { s.0.unlock(t) };
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(s.1.get(), 3);
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
    });
}

/// Timed lock: a waiter whose deadline passes leaves the wait list; it either got the lock or holds
/// nothing, and the lock still works afterwards.
#[test]
fn mutex_timeout_removal() {
    model(|| {
        let s = Arc::new((RawMutex::new(), Guarded::new()));
        let s2 = s.clone();
        let h = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if let Some(t) = s2.0.lock_until(&d) {
                s2.1.critical();
                unsafe { s2.0.unlock(t) };
            }
        });
        let t = s.0.lock();
        s.1.critical();
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
        let t = s.0.try_lock().expect("free after everyone left");
        unsafe { s.0.unlock(t) };
    });
}

/// Condvar: a waiter and a notifier that sets a flag under the mutex and notifies, holding the mutex
/// (`under_mutex`: the waiter is requeued) or after unlocking it (the `condvar` workload's pattern: the
/// waiter is woken directly, `NOTIFIED` and in no list, when the mutex is free). The waiter never misses
/// the flag (the wait registers before releasing the mutex) and the mutex ends free.
fn condvar_flag(under_mutex: bool) {
    model(move || {
        let s = Arc::new((RawMutex::new(), RawCondvar::new(), UnsafeCell::new(false)));
        let s2 = s.clone();
        let h = thread::spawn(move || {
            let t = s2.0.lock();
            s2.2.with_mut(|f| unsafe { *f = true });
            if under_mutex {
                s2.1.notify_one();
            }
            // SAFETY: this thread holds the mutex with `t`.
            unsafe { s2.0.unlock(t) };
            if !under_mutex {
                s2.1.notify_one();
            }
        });
        let mut t = s.0.lock();
        while !s.2.with(|f| unsafe { *f }) {
            // SAFETY: `t` is this thread's acquisition of `s.0`.
            unsafe { s.1.wait_until_impl(&s.0, &mut t, None) };
        }
        // SAFETY: `t` is this thread's acquisition.
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert!(!s.0.is_locked());
    });
}

#[test]
fn condvar_notify() {
    condvar_flag(true);
}

#[test]
fn condvar_notify_after_unlock() {
    condvar_flag(false);
}

/// Condvar `notify_all` under the mutex with two waiters (the herd in miniature): both are requeued onto
/// the mutex's sleepers-only list at once, woken one per unlock, and compete with WAKING set. Both see
/// the flag, each exactly once, and the mutex ends with its word at 0 (no WAITERS or WAKING left).
#[test]
fn condvar_notify_all_requeues_two() {
    model(|| {
        // SAFETY (every access to the flag `s.2` below): it is read and written only with `s.0` held.
        let s = Arc::new((RawMutex::new(), RawCondvar::new(), UnsafeCell::new(0u32)));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    let mut t = s.0.lock();
                    while s.2.with(|f| unsafe { *f }) == 0 {
                        // SAFETY: `t` is this thread's acquisition of `s.0`.
                        unsafe { s.1.wait_until_impl(&s.0, &mut t, None) };
                    }
                    s.2.with_mut(|f| unsafe { *f += 1 });
                    // SAFETY: this thread's acquisition.
                    unsafe { s.0.unlock(t) };
                })
            })
            .collect();
        let t = s.0.lock();
        s.2.with_mut(|f| unsafe { *f = 1 });
        s.1.notify_all();
        // SAFETY: this thread's acquisition.
        unsafe { s.0.unlock(t) };
        for h in waiters {
            h.join().unwrap();
        }
        assert_eq!(s.2.with(|f| unsafe { *f }), 3);
        assert_eq!(s.0.state_word(), 0, "a flag left behind");
    });
}

/// Condvar timeout racing with a notification: the waiter either times out (and is off the condvar's
/// list) or is moved to the mutex and re-locks; the mutex ends free either way.
#[test]
fn condvar_timeout_vs_notify() {
    model(|| {
        let s = Arc::new((RawMutex::new(), RawCondvar::new()));
        let s2 = s.clone();
        let h = thread::spawn(move || {
            s2.1.notify_all();
        });
        let mut t = s.0.lock();
        let d = Deadline::after_polls(1);
        unsafe { s.1.wait_until_impl(&s.0, &mut t, Some(&d)) };
        assert!(s.0.is_locked());
        unsafe { s.0.unlock(t) };
        h.join().unwrap();
        assert!(!s.0.is_locked());
        assert_eq!(s.1.notify_all(), 0);
    });
}

/// RwSem: a writer excludes a reader and another writer; the reader's data is never half-written; the
/// rwsem ends free (no waiter stranded).
#[test]
fn rwsem_reader_writer_exclusion() {
    model(|| {
        let s = Arc::new((crate::rwsem::RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let _t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock() };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let _t = s3.0.read();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock() };
        });
        let _t = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSpinLock: same exclusion property.
#[test]
fn rwspinlock_reader_writer_exclusion() {
    model(|| {
        let s = Arc::new((crate::rwspinlock::RawRwSpinLock::new(), Guarded::new()));
        let s2 = s.clone();
        let r = thread::spawn(move || {
            s2.0.read();
            let _ = s2.1.get();
            unsafe { s2.0.read_unlock() };
        });
        s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        r.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// RwSpinLock's recursive read (the kernel's interrupt-context reader): a thread that reads takes a
/// second read while a writer waits, without deadlocking; the writer gets in once both are released;
/// the writer never overlaps a reader.
#[test]
fn rwspinlock_recursive_read_with_a_waiting_writer() {
    model(|| {
        let s = Arc::new((crate::rwspinlock::RawRwSpinLock::new(), Guarded::new()));
        s.0.read();
        let s2 = s.clone();
        let w = thread::spawn(move || {
            s2.0.write();
            s2.1.critical();
            // SAFETY: held exclusively.
            unsafe { s2.0.write_unlock() };
        });
        s.0.read_recursive();
        let _ = s.1.get();
        // SAFETY: two read holds of this thread.
        unsafe {
            s.0.read_unlock();
            s.0.read_unlock();
        }
        w.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// LockRef: a lockless get racing with a lock holder: the holder sees a frozen count, and no update is
/// lost.
#[test]
fn lockref_frozen_under_lock_no_lost_update() {
    model(|| {
        let l = Arc::new(crate::lockref::LockRef::new(1));
        let l2 = l.clone();
        let h = thread::spawn(move || {
            l2.get();
            assert!(l2.put_not_zero());
        });
        l.lock();
        let c = l.count();
        assert_eq!(l.count(), c, "the count changed while the lock was held");
        unsafe { l.unlock() };
        l.get();
        h.join().unwrap();
        assert_eq!(l.count(), 2);
    });
}

/// SeqCount: a reader never accepts a torn pair written by a concurrent writer.
#[test]
fn seqcount_reader_never_torn() {
    use loom::sync::atomic::AtomicU64;
    model(|| {
        let s = Arc::new((
            crate::seqlock::SeqCount::new(),
            AtomicU64::new(0),
            AtomicU64::new(0),
        ));
        let s2 = s.clone();
        let w = thread::spawn(move || unsafe {
            s2.0.write_begin();
            s2.1.store(1, Ordering::Relaxed);
            s2.2.store(1, Ordering::Relaxed);
            s2.0.write_end();
        });
        loop {
            let start = s.0.read_begin();
            let (a, b) = (s.1.load(Ordering::Relaxed), s.2.load(Ordering::Relaxed));
            if !s.0.read_retry(start) {
                assert_eq!(a, b, "torn read accepted");
                break;
            }
        }
        w.join().unwrap();
    });
}

/// PercpuRwSem: a writer excludes readers on two private counters (the asymmetric fence is SeqCst
/// fences here); loom's race detector checks that each reader's view of the data is ordered after or
/// before the write, and the lock ends free.
#[test]
fn percpu_rwsem_reader_writer_exclusion() {
    use crate::percpu_rwsem::RawPercpuRwSem;
    model(|| {
        let s = Arc::new((RawPercpuRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock(t) };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let t = s3.0.read_at(Some(0), None).unwrap();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock(t) };
        });
        let t = s.0.read_at(Some(3), None).unwrap();
        let _ = s.1.get();
        unsafe { s.0.read_unlock(t) };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// PercpuRwSem downgrade: the downgraded writer stays counted as a reader, so a second writer cannot get
/// in before it unlocks, and a reader sees the write.
#[test]
fn percpu_rwsem_downgrade() {
    use crate::percpu_rwsem::RawPercpuRwSem;
    model(|| {
        let s = Arc::new((RawPercpuRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock(t) };
        });
        let t = s.0.write();
        s.1.critical();
        let r = s.0.downgrade_at(Some(1), t);
        let seen = s.1.get();
        assert!(seen >= 1);
        unsafe { s.0.read_unlock(r) };
        w.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// PercpuRwSem timeouts: a writer that gives up waiting for a reader reopens the lock (the reader's
/// second read gets in), and a reader that gives up behind a writer holds nothing.
#[test]
fn percpu_rwsem_timeouts() {
    use crate::percpu_rwsem::RawPercpuRwSem;
    model(|| {
        let s = Arc::new((RawPercpuRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if let Some(t) = s2.0.write_until(&d) {
                s2.1.critical();
                unsafe { s2.0.write_unlock(t) };
            }
        });
        let t = s.0.read_at(Some(0), None).unwrap();
        let _ = s.1.get();
        unsafe { s.0.read_unlock(t) };
        let d = Deadline::after_polls(1);
        if let Some(t) = s.0.read_at(Some(0), Some(&d)) {
            let _ = s.1.get();
            unsafe { s.0.read_unlock(t) };
        }
        w.join().unwrap();
        assert!(!s.0.is_locked());
        let t = s.0.try_write().expect("free after everyone left");
        unsafe { s.0.write_unlock(t) };
    });
}

/// RwSem fair unlock, writer waiting: the lock passes to the queued writer without ever being free, so
/// the releaser's next write lock comes after the waiter's (loom's race detector checks the two
/// critical sections are ordered); the rwsem ends free.
#[test]
fn rwsem_fair_unlock_hands_to_writer() {
    rwsem_fair_unlock_with(false);
}

/// RwSem fair unlock, reader waiting: the reader is granted through the downgrade path.
#[test]
fn rwsem_fair_unlock_grants_reader() {
    rwsem_fair_unlock_with(true);
}

fn rwsem_fair_unlock_with(reader: bool) {
    use crate::rwsem::RawRwSem;
    model(move || {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let t = s.0.write();
        let s2 = s.clone();
        let h = thread::spawn(move || {
            if reader {
                let _t = s2.0.read();
                let _ = s2.1.get();
                unsafe { s2.0.read_unlock() };
            } else {
                let _t = s2.0.write();
                s2.1.critical();
                unsafe { s2.0.write_unlock() };
            }
        });
        // Hold the lock until the other thread has queued, so the fair unlock has someone to hand to.
        while !s.0.has_waiters() {
            thread::yield_now();
        }
        s.1.critical();
        unsafe { s.0.write_unlock_fair(&t) };
        let _t = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        h.join().unwrap();
        assert_eq!(s.1.get(), if reader { 2 } else { 3 });
        assert!(!s.0.is_locked());
    });
}

/// RwSem downgrade: the downgraded holder reads its own write, a competing writer is excluded until the
/// read hold ends, a queued reader may be granted alongside; the rwsem ends free.
#[test]
fn rwsem_downgrade() {
    use crate::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let _t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock() };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let _t = s3.0.read();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock() };
        });
        let t = s.0.write();
        s.1.critical();
        unsafe { s.0.downgrade(&t) };
        assert!(s.1.get() >= 1);
        assert!(!s.0.is_locked_exclusive());
        unsafe { s.0.read_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSem upgrade against a reader and a writer: the upgradable holder reads, then (after the reader
/// leaves, while the writer waits or has gone) upgrades and writes with nobody inside; no writer
/// comes between its read and its write (the value it read is still there); the rwsem ends free.
#[test]
fn rwsem_upgrade_against_a_reader_and_a_writer() {
    use crate::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let _t = s2.0.write();
            s2.1.critical();
            unsafe { s2.0.write_unlock() };
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let _t = s3.0.read();
            let _ = s3.1.get();
            unsafe { s3.0.read_unlock() };
        });
        let t = s.0.read_upgradable();
        let seen = s.1.get();
        let t = unsafe { s.0.upgrade(t) };
        assert_eq!(
            s.1.get(),
            seen,
            "a writer came between the read and the upgrade"
        );
        s.1.critical();
        unsafe { s.0.downgrade_to_upgradable(&t) };
        unsafe { s.0.upgradable_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSem: an upgrade that sleeps until the last other reader leaves is woken by that reader's
/// unlock (nothing else would wake it: a lost wake-up is a deadlock loom reports).
#[test]
fn rwsem_upgrade_is_woken_by_the_last_reader() {
    use crate::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let _r = s.0.read();
        let s2 = s.clone();
        let up = thread::spawn(move || {
            let t = s2.0.read_upgradable();
            let t = unsafe { s2.0.upgrade(t) };
            s2.1.critical();
            let _ = t;
            unsafe { s2.0.write_unlock() };
        });
        let _ = s.1.get();
        unsafe { s.0.read_unlock() };
        up.join().unwrap();
        assert_eq!(s.1.get(), 1);
        assert!(!s.0.is_locked());
    });
}

/// RwSem: two upgradable readers. The second waits (its read hold given back) until the first has
/// upgraded, written and unlocked; each upgrade writes alone; the rwsem ends free.
#[test]
fn rwsem_two_upgraders() {
    use crate::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let other = thread::spawn(move || {
            let t = s2.0.read_upgradable();
            let t = unsafe { s2.0.upgrade(t) };
            s2.1.critical();
            let _ = t;
            unsafe { s2.0.write_unlock() };
        });
        let t = s.0.read_upgradable();
        let t = unsafe { s.0.upgrade(t) };
        s.1.critical();
        let _ = t;
        unsafe { s.0.write_unlock() };
        other.join().unwrap();
        assert_eq!(s.1.get(), 2);
        assert!(!s.0.is_locked());
    });
}

/// RwSem: an upgrade that must wait for a reader, with a late reader that queues behind the upgrade
/// (or gets in before it), and a timed upgrade that gives up: the held-back reader still gets in.
#[test]
fn rwsem_upgrade_holds_back_new_readers_and_gives_up_cleanly() {
    use crate::clock::Deadline;
    use crate::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let first = s.0.read();
        let s2 = s.clone();
        let late = thread::spawn(move || {
            let _t = s2.0.read();
            let _ = s2.1.get();
            unsafe { s2.0.read_unlock() };
        });
        let s3 = s.clone();
        let up = thread::spawn(move || {
            let t = s3.0.read_upgradable();
            // Gives up after a few polls (our first read may still be in), still upgradable.
            if s3.0.upgrade_until(&t, Some(&Deadline::after_polls(1))) {
                s3.1.critical();
                unsafe { s3.0.write_unlock() };
            } else {
                unsafe { s3.0.upgradable_unlock() };
            }
        });
        let _ = first;
        unsafe { s.0.read_unlock() };
        late.join().unwrap();
        up.join().unwrap();
        assert!(!s.0.is_locked());
    });
}

/// RwSem timeouts: a writer and a reader whose deadlines pass leave the wait list holding nothing (or
/// got the lock first); the rwsem ends free and usable.
#[test]
fn rwsem_timeout_removal() {
    use crate::rwsem::RawRwSem;
    model(|| {
        let s = Arc::new((RawRwSem::new(), Guarded::new()));
        let s2 = s.clone();
        let w = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if s2.0.write_until(&d).is_some() {
                s2.1.critical();
                unsafe { s2.0.write_unlock() };
            }
        });
        let s3 = s.clone();
        let r = thread::spawn(move || {
            let d = Deadline::after_polls(1);
            if s3.0.read_until(&d).is_some() {
                let _ = s3.1.get();
                unsafe { s3.0.read_unlock() };
            }
        });
        let _t = s.0.write();
        s.1.critical();
        unsafe { s.0.write_unlock() };
        w.join().unwrap();
        r.join().unwrap();
        assert!(!s.0.is_locked());
        let _t = s.0.try_write().expect("free after everyone left");
        unsafe { s.0.write_unlock() };
    });
}

/// `RecursiveRwSem`: a writer against two readers of which one reads twice (the second read while the
/// writer may be waiting): the write section excludes both readers (loom reports a race on the cell
/// otherwise), the nested read never deadlocks behind the waiting writer, and every sleeper is woken
/// (a lost wake-up is a deadlock loom reports).
#[test]
fn recursive_rwsem_excludes_and_reads_recursively() {
    use crate::rw::recursive_rwsem::RawRecursiveRwSem;
    model(|| {
        let l = Arc::new(RawRecursiveRwSem::new());
        let cell = Arc::new(UnsafeCell::new(0usize));
        let w = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                assert!(l.write_until(None));
                // SAFETY: the write hold; loom checks no reader overlaps.
                cell.with_mut(|v| unsafe { *v += 1 });
                l.write_unlock();
            })
        };
        let r = {
            let (l, cell) = (l.clone(), cell.clone());
            thread::spawn(move || {
                assert!(l.read_until(None));
                // SAFETY: a read hold.
                let v1 = cell.with(|v| unsafe { *v });
                // May run while the writer waits: must not block behind it.
                assert!(l.read_until(None));
                // SAFETY: a read hold.
                let v2 = cell.with(|v| unsafe { *v });
                assert_eq!(v1, v2, "a write inside a read section");
                l.read_unlock();
                l.read_unlock();
            })
        };
        w.join().unwrap();
        r.join().unwrap();
        // SAFETY: every thread is joined.
        assert_eq!(cell.with(|v| unsafe { *v }), 1);
    });
}

/// RCU models: one reader and one writer over two objects. The writer unpublishes object 0 (publishes
/// 1), runs a grace period of the flavour's protocol (`rcu/protocol.rs`, the code the domains run),
/// then "frees" object 0 by writing into it. The reader reads whichever object it loaded inside its
/// read-side section. Loom reports the free racing with the read (the cells are loom `UnsafeCell`s),
/// and the reader asserts it never sees a freed value: a grace period that ends before a reader that
/// could hold the old object has left fails both.
mod rcu {
    use super::{model, model_with_preemptions};
    use crate::rcu_protocol as p;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
    use loom::thread;

    const FREED: usize = usize::MAX;

    /// The published pointer (an index) and the objects.
    struct Objects {
        published: AtomicUsize,
        objs: [UnsafeCell<usize>; 3],
    }

    // SAFETY: the cells are only accessed as the RCU protocol under test allows; loom checks it.
    unsafe impl Sync for Objects {}

    impl Objects {
        fn new() -> Arc<Self> {
            Arc::new(Objects {
                published: AtomicUsize::new(0),
                objs: [UnsafeCell::new(0), UnsafeCell::new(1), UnsafeCell::new(2)],
            })
        }
        /// The reader's dereference: load the published index, read the object.
        fn read(&self) {
            // Acquire: rcu_dereference (pairs with the writer's Release publication).
            let i = self.published.load(Ordering::Acquire);
            // The reader may be delayed between the dereference and the use (a cell access is not a
            // scheduling point for loom; this makes the writer's whole grace period fit here).
            thread::yield_now();
            // SAFETY: a plain read of a `u64` cell; whether the grace period orders it before the
            // writer's free is what the model checks (loom reports the race if it does not).
            let v = self.objs[i].with(|v| unsafe { *v });
            assert_ne!(v, FREED, "a reader saw object {i} after its grace period");
        }
        /// The writer's update up to the grace period: publish object `k` (unpublishing `k - 1`).
        fn publish(&self, k: usize) {
            self.published.store(k, Ordering::Release);
        }
        /// The writer's free of object `k`, after a grace period since it was unpublished.
        fn free(&self, k: usize) {
            // SAFETY: as in `read`: loom reports this write if a reader's access is not ordered
            // before it.
            self.objs[k].with_mut(|v| unsafe { *v = FREED });
        }
        fn unpublish_old(&self) {
            self.publish(1);
        }
        fn free_old(&self) {
            self.free(0);
        }
    }

    fn full_fence() {
        fence(Ordering::SeqCst);
    }

    /// A writer's wait in the models: yield while `blocked`.
    fn yield_while(blocked: impl Fn() -> bool) {
        while blocked() {
            thread::yield_now();
        }
    }

    /// A memb domain's counter and one reader's record, as the memb models share them.
    #[derive(Clone)]
    struct Memb {
        gp: Arc<AtomicU64>,
        ctr: Arc<AtomicU64>,
    }

    impl Memb {
        fn new() -> Self {
            Memb {
                gp: Arc::new(AtomicU64::new(1)),
                ctr: Arc::new(AtomicU64::new(0)),
            }
        }
        /// One grace period of the protocol (SeqCst fences for membarrier).
        fn grace_period(&self) {
            p::memb_grace_period(&self.gp, full_fence, |g| {
                yield_while(|| p::memb_blocks(&self.ctr, g))
            });
        }
        /// A reader thread: one read-side section that reads `o`.
        fn reader(&self, o: &Arc<Objects>) -> thread::JoinHandle<()> {
            let (m, o) = (self.clone(), o.clone());
            thread::spawn(move || {
                p::memb_enter(&m.ctr, &m.gp, full_fence);
                o.read();
                p::memb_exit(&m.ctr, full_fence);
            })
        }
    }

    /// memb: a reader (nested sections) against a grace period (fences are the SeqCst fallback, as
    /// the domain uses where `membarrier` is refused).
    #[test]
    fn rcu_memb_grace_period_waits_for_readers() {
        model(|| {
            let o = Objects::new();
            let m = Memb::new();
            let r = {
                let (o, m) = (o.clone(), m.clone());
                thread::spawn(move || {
                    p::memb_enter(&m.ctr, &m.gp, full_fence);
                    p::memb_enter(&m.ctr, &m.gp, full_fence);
                    o.read();
                    assert!(!p::memb_exit(&m.ctr, full_fence), "still nested");
                    o.read();
                    assert!(p::memb_exit(&m.ctr, full_fence), "outermost");
                })
            };
            o.unpublish_old();
            m.grace_period();
            o.free_old();
            r.join().unwrap();
        });
    }

    /// Shared grace periods: a writer unpublishes object 0 and calls the shared grace period while
    /// another caller runs two; the writer's call may be served by the other's grace period instead
    /// of running its own, and a reader's section may overlap either. Then the writer frees object 0.
    #[test]
    fn rcu_memb_shared_grace_periods_still_wait() {
        model(|| {
            let o = Objects::new();
            let m = Memb::new();
            let completed = Arc::new(AtomicU64::new(0));
            let seq = Arc::new(AtomicU64::new(0));
            let lock = Arc::new(loom::sync::Mutex::new(()));
            let synchronize = {
                let (m, completed, seq, lock) =
                    (m.clone(), completed.clone(), seq.clone(), lock.clone());
                move || {
                    p::shared_grace_period(
                        &seq,
                        &completed,
                        || lock.lock().unwrap(),
                        |_| thread::yield_now(),
                        || {},
                        || m.grace_period(),
                    )
                }
            };
            let r = m.reader(&o);
            let w = {
                let (o, synchronize) = (o.clone(), synchronize.clone());
                thread::spawn(move || {
                    o.publish(1);
                    synchronize();
                    o.free(0);
                })
            };
            // The other caller: it frees nothing, so an early return is checked through the writer.
            synchronize();
            synchronize();
            w.join().unwrap();
            r.join().unwrap();
            assert!(completed.load(Ordering::Relaxed) >= 1);
        });
    }

    /// call_rcu: a thread unpublishes object 0 and queues its free on its own segmented list; the
    /// grace-period thread's passes (`segments_pass` under the grace-period lock, then the DONE
    /// callbacks, then a grace period if a segment waits) must not run it before a grace period that
    /// began after it was queued, whatever a reader that loaded object 0 is doing.
    #[test]
    fn rcu_call_rcu_segments_wait_for_a_grace_period() {
        use crate::rcu_protocol::{Callback, SegList};
        model(|| {
            let o = Objects::new();
            let m = Memb::new();
            let completed = AtomicU64::new(0);
            let list = Arc::new(loom::sync::Mutex::new(SegList::default()));
            let r = m.reader(&o);
            let caller = {
                let (o, list) = (o.clone(), list.clone());
                thread::spawn(move || {
                    o.publish(1);
                    let o2 = o.clone();
                    list.lock()
                        .unwrap()
                        .push(Callback::Closure(Box::new(move || o2.free(0))));
                })
            };
            // The grace-period thread (this one): the grace-period lock is implicit (one thread). A
            // pass may be followed by a grace period or not (the real thread paces them).
            let pass = |then_gp: bool| {
                let (done, waiting) = {
                    let mut l = list.lock().unwrap();
                    let waiting = p::segments_pass(&mut l, completed.load(Ordering::Acquire));
                    (l.take_done(), waiting)
                };
                for cb in done {
                    cb.invoke();
                }
                if waiting && then_gp {
                    m.grace_period();
                    completed.fetch_add(1, Ordering::Release);
                }
            };
            pass(false);
            pass(false);
            caller.join().unwrap();
            pass(false);
            // Every callback queued runs within three passes with grace periods.
            for _ in 0..3 {
                pass(true);
            }
            assert_eq!(list.lock().unwrap().len, 0, "the callback ran");
            r.join().unwrap();
        });
    }

    /// Polled grace periods: a writer unpublishes object 0 and takes a cookie (`seq_snap`, the
    /// kernel's `get_state_synchronize_rcu`) while another thread runs a shared grace period; the
    /// writer frees object 0 only once the cookie is done (`seq_done`: `poll_state_synchronize`),
    /// running the grace period it names itself if not (`run_grace_period_until`:
    /// `cond_synchronize`). A reader that loaded object 0 holds off the free either way.
    #[test]
    fn rcu_polled_cookie_waits_for_readers() {
        model(|| {
            let o = Objects::new();
            let m = Memb::new();
            let completed = Arc::new(AtomicU64::new(0));
            let seq = Arc::new(AtomicU64::new(0));
            let lock = Arc::new(loom::sync::Mutex::new(()));
            let r = m.reader(&o);
            let other = {
                let (m, completed, seq, lock) =
                    (m.clone(), completed.clone(), seq.clone(), lock.clone());
                thread::spawn(move || {
                    p::shared_grace_period(
                        &seq,
                        &completed,
                        || lock.lock().unwrap(),
                        |_| thread::yield_now(),
                        || {},
                        || m.grace_period(),
                    )
                })
            };
            o.unpublish_old();
            let cookie = p::seq_snap(&seq);
            if !p::seq_done(&seq, cookie) {
                p::run_grace_period_until(
                    &seq,
                    &completed,
                    cookie,
                    || lock.lock().unwrap(),
                    |_| thread::yield_now(),
                    || {},
                    || m.grace_period(),
                );
            }
            assert!(p::seq_done(&seq, cookie), "the cookie's grace period ended");
            o.free_old();
            other.join().unwrap();
            r.join().unwrap();
        });
    }

    /// A cookie taken before a grace period starts is not done until a grace period that started
    /// after it ends: the one running at the snapshot does not count.
    #[test]
    fn rcu_polled_cookie_is_not_done_early() {
        model(|| {
            let completed = Arc::new(AtomicU64::new(0));
            let seq = Arc::new(AtomicU64::new(0));
            let lock = Arc::new(loom::sync::Mutex::new(()));
            let started = Arc::new(AtomicU64::new(0));
            let gp = {
                let (completed, seq, lock, started) = (
                    completed.clone(),
                    seq.clone(),
                    lock.clone(),
                    started.clone(),
                );
                thread::spawn(move || {
                    p::shared_grace_period(
                        &seq,
                        &completed,
                        || lock.lock().unwrap(),
                        |_| thread::yield_now(),
                        || {},
                        || {
                            started.fetch_add(1, Ordering::SeqCst);
                        },
                    )
                })
            };
            // How many grace-period bodies had begun when the cookie was taken: the cookie needs
            // one more to have begun (and ended) before it is done.
            let before = started.load(Ordering::SeqCst);
            let cookie = p::seq_snap(&seq);
            gp.join().unwrap();
            if p::seq_done(&seq, cookie) {
                assert!(
                    started.load(Ordering::SeqCst) > before,
                    "done without a grace period that began after the snapshot"
                );
            }
        });
    }

    /// QSBR: a registered reader reads, announces a quiescent state, reads again, goes offline.
    #[test]
    fn rcu_qsbr_grace_period_waits_for_quiescent_states() {
        model(|| {
            let o = Objects::new();
            let gp = Arc::new(AtomicU64::new(1));
            // Registered and online before the writer starts (as `register` does).
            let ctr = Arc::new(AtomicU64::new(1));
            let r = {
                let (o, gp, ctr) = (o.clone(), gp.clone(), ctr.clone());
                thread::spawn(move || {
                    o.read();
                    p::qsbr_announce(&ctr, gp.load(Ordering::Relaxed)); // quiescent state
                    o.read();
                    p::qsbr_announce(&ctr, 0); // offline
                })
            };
            o.unpublish_old();
            p::qsbr_grace_period(&gp, |g| yield_while(|| p::qsbr_blocks(&ctr, g)));
            o.free_old();
            r.join().unwrap();
        });
    }

    /// SRCU: the reader may load the index, stall, and count in it after a whole grace period flipped
    /// it; two grace periods run (each frees the object the one before unpublished), so a reader
    /// counted in the stale index during the second one is what its first wait is for. That bug
    /// needs two preemptions to show (checked: without the first wait this model fails at 2, not 1).
    #[test]
    fn rcu_srcu_index_flip_waits_for_readers() {
        model_with_preemptions(2, || {
            let o = Objects::new();
            let idx = Arc::new(AtomicU64::new(0));
            let mine = Arc::new(p::SrcuCounters::new());
            let r = {
                let (o, idx, mine) = (o.clone(), idx.clone(), mine.clone());
                thread::spawn(move || {
                    let i = p::srcu_index(&idx);
                    thread::yield_now(); // stalled between the index and the count
                    p::srcu_enter(&mine, i);
                    o.read();
                    p::srcu_exit(&mine, i);
                })
            };
            let gp = || {
                p::srcu_grace_period(&idx, |i| {
                    yield_while(|| !p::srcu_drained(std::iter::once(&*mine), i))
                })
            };
            for k in 1..3 {
                o.publish(k);
                gp();
                o.free(k - 1);
            }
            r.join().unwrap();
            assert_eq!(idx.load(Ordering::Relaxed), 2, "the index flipped twice");
        });
    }
}
