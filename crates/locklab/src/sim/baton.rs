//! The baton: the one virtual thread allowed to run on the host, and how it passes between them.

use super::engine::{Engine, engine};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The thread holding the baton (also `Engine::current`), read without the engine's lock by the
/// threads waiting for it.
pub(super) static CURRENT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Waits (parked) until thread `me` holds the baton again; returns with the engine locked.
pub(super) fn wait_for_baton(me: usize) -> std::sync::MutexGuard<'static, Option<Engine>> {
    // Acquire pairs with the Release store in `pass_baton`: the engine's state as its last holder
    // left it (the engine's mutex orders it too; this is the wake-up's own edge).
    while CURRENT.load(Ordering::Acquire) != me {
        std::thread::park();
    }
    engine()
}

/// Gives the baton to `next` and wakes its host thread, with the engine unlocked first (a woken
/// thread that preempts its waker must not find the engine's lock held).
pub(super) fn pass_baton(mut g: std::sync::MutexGuard<'static, Option<Engine>>, next: usize) {
    let e = g.as_mut().expect("simulation running");
    e.current = next;
    e.host_switches += 1;
    let host = e.threads[next].host.clone();
    // Release: see `wait_for_baton`.
    CURRENT.store(next, Ordering::Release);
    drop(g);
    if let Some(h) = host {
        h.unpark();
    }
}

/// Hands the baton to `next` (which must be Running) and, unless it is `me`, waits for it back.
pub(super) fn hand_to(
    g: std::sync::MutexGuard<'static, Option<Engine>>,
    me: usize,
    next: usize,
) -> std::sync::MutexGuard<'static, Option<Engine>> {
    let mut g = if next != me {
        pass_baton(g, next);
        wait_for_baton(me)
    } else {
        g
    };
    let e = g.as_mut().expect("simulation running");
    let (_, other) = e.earliest(me);
    e.horizon = other;
    g
}

/// Blocks the calling virtual thread until its pending operation is the earliest of all; returns
/// with the engine locked and the baton held.
pub(super) fn turn(me: usize) -> std::sync::MutexGuard<'static, Option<Engine>> {
    let mut g = engine();
    let e = g.as_mut().expect("simulation running");
    e.events += 1;
    if e.threads[me].time <= e.horizon && !e.preempt_due(me) {
        return g;
    }
    let next = e.schedule();
    hand_to(g, me, next)
}
