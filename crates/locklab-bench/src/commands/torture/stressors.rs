//! The workers and the stressors they apply: one operation at a time, with the active stressor's
//! twist (pauses, re-pinning, long holds, timeouts, forgotten guards, thread churn).

use super::*;
use crate::engine::runner::{pin_to, unpin};
use std::cell::RefCell;

/// A small xorshift generator (per thread; no dependency needed for this).
pub(super) struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One operation by worker `w`, with the active stressor applied.
pub(super) fn one_op(sh: &Shared, w: usize, rng: &mut Rng) {
    let stressor = sh.stressor();
    let me = w + 1;
    // Under `timeouts` half the acquisitions are timed and a quarter are `try`; otherwise one in
    // 64 of each, so that a short run still reaches those paths.
    let mode = if stressor == "timeouts" {
        rng.below(4)
    } else {
        rng.below(64)
    };
    let op = Op {
        me,
        hold: (stressor == "long-holds" && rng.below(2000) == 0)
            .then(|| Duration::from_micros(1000 + rng.below(4000))),
        timeout: (mode < 2 && (stressor == "timeouts" || mode < 1))
            .then(|| Duration::from_micros(rng.below(2000))),
        try_only: mode == 2,
        roll: rng.next(),
    };
    let read = sh.subject.read.is_some() && w.is_multiple_of(2);
    let r = match (&sh.subject.read, read) {
        (Some(f), true) => f(op),
        _ => (sh.subject.write)(op),
    };
    match r {
        Ok(()) => {
            if read {
                sh.reads[w].fetch_add(1, Relaxed);
            } else {
                sh.writes[w].fetch_add(1, Relaxed);
            }
        }
        Err(m) => sh.fail(if read { &sh.read_fail } else { &sh.write_fail }, m),
    }
    if let (true, Some(f)) = (
        stressor == "forget" && rng.below(512) == 0,
        &sh.subject.forget,
    ) && let Err(m) = f()
    {
        sh.fail(&sh.other_fail, m);
    }
}

/// An operation run from a thread-local destructor.
pub(super) struct LateOp(RefCell<Option<Box<dyn FnOnce()>>>);

impl Drop for LateOp {
    fn drop(&mut self) {
        if let Some(f) = self.0.borrow_mut().take() {
            f();
        }
    }
}

thread_local! {
    /// Set first in every worker, so its destructor runs after the thread's slot was returned
    /// (destructors run in reverse order of registration).
    static LATE: LateOp = const { LateOp(RefCell::new(None)) };
}

/// One worker thread's life: until the run stops, or (churn) a random lifetime ends.
pub(super) fn worker(sh: Arc<Shared>, w: usize, seed: u64) {
    // Register the late operation's destructor before anything takes a thread slot.
    let late = sh.clone();
    LATE.with(|l| {
        *l.0.borrow_mut() = Some(Box::new(move || {
            let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
            if !late.stop.load(Relaxed) || late.subject.stop.is_none() {
                one_op(&late, w, &mut rng);
                late.late_ops.fetch_add(1, Relaxed);
            }
        }))
    });
    let mut rng = Rng(seed | 1);
    let born = Instant::now();
    let lifetime = Duration::from_millis(50 + rng.below(400));
    let mut shuffle_seen = usize::MAX;
    while !sh.stop.load(Relaxed) {
        if sh.stutter.load(Relaxed) {
            while sh.stutter.load(Relaxed) && !sh.stop.load(Relaxed) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let phase = sh.phase.load(Relaxed);
        if sh.stressor() == "shuffle" && phase != shuffle_seen {
            shuffle_seen = phase;
            pin_to(sh.cpus[rng.below(sh.cpus.len() as u64) as usize]);
        } else if shuffle_seen != usize::MAX && sh.stressor() != "shuffle" {
            shuffle_seen = usize::MAX;
            unpin(&sh.cpus);
        }
        one_op(&sh, w, &mut rng);
        if sh.stressor() == "churn" && born.elapsed() > lifetime {
            return;
        }
    }
}
