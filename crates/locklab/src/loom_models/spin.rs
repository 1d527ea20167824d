//! Loom models of the spinlocks: MCS (node-less holders, detached acquisitions, foreign unlocks)
//! and the queued spinlock (pending and queue paths, a thread without a node).

use super::*;

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
