//! RCU models: one reader and one writer over two objects. The writer unpublishes object 0 (publishes
//! 1), runs a grace period of the flavour's protocol (`rcu/protocol.rs`, the code the domains run),
//! then "frees" object 0 by writing into it. The reader reads whichever object it loaded inside its
//! read-side section. Loom reports the free racing with the read (the cells are loom `UnsafeCell`s),
//! and the reader asserts it never sees a freed value: a grace period that ends before a reader that
//! could hold the old object has left fails both.

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

/// One thread's call_rcu log and its consumers' side (the record's list lock is a loom `Mutex`).
struct Rec {
    log: p::CbLog,
    list: loom::sync::Mutex<p::Segs>,
    /// Callbacks invoked (barriers wait for `invoked >= published-at-the-barrier`).
    invoked: AtomicU64,
    /// A thread holds the record (the registry's claim, `in_use`).
    in_use: loom::sync::atomic::AtomicBool,
}

impl Rec {
    fn new() -> Arc<Self> {
        let (log, reader) = p::CbLog::new();
        Arc::new(Rec {
            log,
            list: loom::sync::Mutex::new(p::Segs::new(reader)),
            invoked: AtomicU64::new(0),
            in_use: loom::sync::atomic::AtomicBool::new(true),
        })
    }
    /// The holder's `call_rcu`.
    fn push(&self, f: impl FnOnce() + Send + 'static) {
        // SAFETY: the models call this only on the thread that holds the record.
        unsafe { self.log.push(p::Callback::Closure(Box::new(f))) };
    }
    /// A consumer's pass (the grace-period thread's, under the grace-period lock: no grace period
    /// runs meanwhile): advance, assign NEXT up to the published tail, run what is ready, as the
    /// engine's `pass` (the batch runs under the list lock here; the engine's `invoking` flag
    /// orders batches the same way). Returns whether a segment waits for a grace period.
    fn pass(&self, completed: u64) -> bool {
        let mut l = self.list.lock().unwrap();
        let tail = self.log.published();
        let waiting = p::segments_pass(&mut l, completed, tail);
        // SAFETY: we hold the list lock of `self.log`.
        let n = unsafe { l.take_done(&self.log, |_| true, p::Callback::invoke) };
        // Release: pairs with the barrier's Acquire load (the callbacks' effects are visible).
        self.invoked.fetch_add(n, Ordering::Release);
        waiting
    }
}

impl Drop for Rec {
    fn drop(&mut self) {
        let mut l = self.list.lock().unwrap();
        // SAFETY: the last reference: no producer or consumer is left.
        unsafe { self.log.destroy(&mut l.reader) };
    }
}

/// call_rcu: a thread unpublishes object 0 and appends its free to its own log (plain stores and a
/// Release `tail`, no lock), then two more callbacks (crossing a chunk boundary: two callbacks a
/// chunk under loom), racing the grace-period thread's passes (`segments_pass` under the
/// grace-period lock, then the DONE callbacks, then a grace period if a segment waits). The free
/// must not run before a grace period that began after it was queued, whatever a reader that
/// loaded object 0 is doing; every callback runs once, in queue order, and the emptied chunk
/// comes back through the free stack. Bound 2: a push preempted between its steps while a pass
/// and a grace period run, and the reader preempted inside its section.
#[test]
fn rcu_call_rcu_push_races_collection() {
    model_with_preemptions(2, || {
        let o = Objects::new();
        let m = Memb::new();
        let completed = AtomicU64::new(0);
        let rec = Rec::new();
        let order = Arc::new(AtomicUsize::new(0));
        let r = m.reader(&o);
        let caller = {
            let (o, rec, order) = (o.clone(), rec.clone(), order.clone());
            thread::spawn(move || {
                o.publish(1);
                let o2 = o.clone();
                let ord = order.clone();
                rec.push(move || {
                    o2.free(0);
                    assert_eq!(ord.swap(1, Ordering::Relaxed), 0, "FIFO");
                });
                for k in 1..3 {
                    let ord = order.clone();
                    rec.push(move || assert_eq!(ord.swap(k + 1, Ordering::Relaxed), k, "FIFO"));
                }
            })
        };
        // The grace-period thread (this one): the grace-period lock is implicit (one thread). A
        // pass may be followed by a grace period or not (the real thread paces them).
        let pass = |then_gp: bool| {
            if rec.pass(completed.load(Ordering::Acquire)) && then_gp {
                m.grace_period();
                completed.fetch_add(1, Ordering::Release);
            }
        };
        pass(false);
        pass(true);
        caller.join().unwrap();
        pass(false);
        pass(false);
        // Every callback queued runs within three passes with grace periods.
        for _ in 0..3 {
            pass(true);
        }
        assert_eq!(order.load(Ordering::Relaxed), 3, "every callback ran once");
        assert_eq!(rec.invoked.load(Ordering::Relaxed), 3);
        r.join().unwrap();
    });
}

/// A thread that exits with callbacks queued: its record goes back to the pool with them (`in_use`
/// false, Release), another thread adopts it (the claim's Acquire CAS) and appends to the same log,
/// racing an `rcu_barrier` on a third thread that snapshots the published count and helps (passes)
/// until that many callbacks have run, and the grace-period thread's own pass. The barrier must not
/// return before the exited thread's callbacks ran; nothing is lost or run twice, in queue order.
#[test]
fn rcu_call_rcu_exited_thread_adopted_racing_barrier() {
    model_with_preemptions(2, || {
        let rec = Rec::new();
        let ran = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicU64::new(0));
        let exiting = {
            let (rec, ran) = (rec.clone(), ran.clone());
            thread::spawn(move || {
                for k in 0..2 {
                    let ran = ran.clone();
                    rec.push(move || assert_eq!(ran.swap(k + 1, Ordering::Relaxed), k, "FIFO"));
                }
                // The thread exits: `Held`'s destructor. Release: the next holder's Acquire
                // claim sees our pushes (and the producer's fields).
                rec.in_use.store(false, Ordering::Release);
            })
        };
        let adopter = {
            let (rec, ran) = (rec.clone(), ran.clone());
            thread::spawn(move || {
                // Acquire: pairs with the exiting holder's Release.
                if rec
                    .in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    rec.push(move || assert_eq!(ran.swap(3, Ordering::Relaxed), 2, "FIFO"));
                    rec.in_use.store(false, Ordering::Release);
                    true
                } else {
                    false
                }
            })
        };
        let gp_thread = {
            let (rec, completed) = (rec.clone(), completed.clone());
            thread::spawn(move || {
                // One pass, and a grace period if a segment waits (instant: no reader here).
                if rec.pass(completed.load(Ordering::Acquire)) {
                    completed.fetch_add(1, Ordering::Release);
                }
            })
        };
        // The barrier, on this thread: every callback queued before it (the exited thread's).
        exiting.join().unwrap();
        let target = rec.log.published();
        assert!(target >= 2);
        // Acquire: pairs with the Release increment after each batch.
        while rec.invoked.load(Ordering::Acquire) < target {
            // `help`: a pass and a grace period (the lock serializes us with the other pass).
            if rec.pass(completed.load(Ordering::Acquire)) {
                completed.fetch_add(1, Ordering::Release);
            }
            thread::yield_now();
        }
        assert!(
            ran.load(Ordering::Relaxed) >= 2,
            "the barrier returned early"
        );
        let adopted = adopter.join().unwrap();
        gp_thread.join().unwrap();
        // Drain: nothing lost.
        for _ in 0..3 {
            if rec.pass(completed.load(Ordering::Acquire)) {
                completed.fetch_add(1, Ordering::Release);
            }
        }
        let want = if adopted { 3 } else { 2 };
        assert_eq!(ran.load(Ordering::Relaxed), want, "every callback ran once");
        assert_eq!(rec.invoked.load(Ordering::Relaxed), want as u64);
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
