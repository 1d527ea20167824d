//! The hooks the primitive layer calls (memory accesses, fences, spin boundaries, futex calls) and
//! the virtual threads' clock and private work.

use super::atomic;
use super::baton::{hand_to, turn};
use super::engine::{Access, DEADLINES, EXPECT, Expect, PAT, St, engine, virtual_thread};
use std::time::Duration;

/// A memory access by the calling thread: waits for its turn, charges the access. Returns whether it
/// hit (for the polling detector). Outside a simulation: nothing.
#[inline]
pub(crate) fn mem(addr: usize, kind: Access) {
    let Some(me) = virtual_thread() else { return };
    let hit = {
        let mut g = turn(me);
        let e = g.as_mut().expect("simulation running");
        let t = e.threads[me].time;
        let core = e.threads[me].core;
        let (cost, hit) = e.access(core, addr, kind, t);
        e.threads[me].time = t + cost;
        hit
    };
    PAT.with(|p| p.borrow_mut().op(kind, hit));
}

/// Records the value a load returned (the polling detector compares iterations by address and value).
#[inline]
pub(crate) fn loaded(addr: usize, value: u64) {
    if virtual_thread().is_none() {
        return;
    }
    PAT.with(|p| p.borrow_mut().loaded(addr, value));
}

/// A fence: a full one costs `fence_ns`.
#[inline]
pub(crate) fn fence(seq_cst: bool) {
    let Some(me) = virtual_thread() else { return };
    if !seq_cst {
        return;
    }
    {
        let mut g = turn(me);
        let e = g.as_mut().expect("simulation running");
        e.threads[me].time += e.m.fence_ns;
    }
    PAT.with(|p| p.borrow_mut().impure());
}

/// Spin-boundary kinds, for [`boundary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// `n` `pause`s.
    Pause(u32),
    /// `sched_yield`.
    Yield,
}

/// One step of a busy-wait: `Pause(n)` costs n `pause`s, `Yield` gives the core to the next queued
/// thread (or costs `yield_ns` when none waits). If the iteration that ended here only re-read, as
/// hits, what the one before read, the thread is parked as a poller (module docs) for at most
/// `max_iters` iterations. Returns how many iterations this call stood for (1 without a park; at
/// most `max_iters`). Outside a simulation: the real `pause` or yield, 1.
pub(crate) fn boundary(kind: Boundary, max_iters: u64) -> u64 {
    let Some(me) = virtual_thread() else {
        match kind {
            Boundary::Pause(n) => (0..n).for_each(|_| core::hint::spin_loop()),
            Boundary::Yield => std::thread::yield_now(),
        }
        return 1;
    };
    let sig = match kind {
        Boundary::Pause(n) => n as u64,
        Boundary::Yield => u64::MAX,
    };
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let now = e.threads[me].time;
    let core = e.threads[me].core;
    let queued = !e.cores[core].queue.is_empty();
    if kind == Boundary::Yield && queued {
        // A real yield: the next queued thread runs.
        e.threads[me].time = now + e.m.yield_ns;
        e.requeue(me);
        // Only in the declared loop: its last look was at the declared word.
        e.threads[me].expect = EXPECT
            .with(|x| x.get())
            .filter(|x| PAT.with(|p| p.borrow().cur.iter().any(|&(a, _)| a == x.addr)));
        let next = e.schedule();
        let mut g = hand_to(g, me, next);
        let e = g.as_mut().expect("simulation running");
        e.threads[me].expect = None;
        e.threads[me].recheck = f64::INFINITY;
        drop(g);
        PAT.with(|p| p.borrow_mut().impure());
        return 1;
    }
    let poll = PAT.with(|p| p.borrow_mut().boundary(sig, now));
    let step = match kind {
        Boundary::Pause(n) => e.m.pause_ns * n as f64,
        Boundary::Yield => e.m.yield_ns,
    };
    // Park only on lines still held: a write between the last load and this boundary has already
    // invalidated the copy, and the next look would see it.
    if let Some((cost, watch)) = poll
        && max_iters > 1
        && watch.iter().all(|l| {
            e.lines
                .get(l)
                .is_some_and(|line| line.sharers & (1u128 << core) != 0)
        })
    {
        let cost = cost.max(step).max(1e-3);
        let mut until = if max_iters == u64::MAX {
            f64::INFINITY
        } else {
            now + cost * (max_iters - 1) as f64
        };
        DEADLINES.with(|d| {
            let mut d = d.borrow_mut();
            d.retain(|&x| x > now);
            if let Some(first) = d.iter().copied().reduce(f64::min) {
                until = until.min(first);
            }
        });
        if until > now {
            e.threads[me].recheck = f64::INFINITY;
            e.threads[me].look_from = now;
            e.threads[me].parks_at = now;
            e.threads[me].look_step = step;
            e.threads[me].look_extra = 0.0;
            e.threads[me].expect = EXPECT
                .with(|x| x.get())
                .filter(|x| watch.contains(&((x.addr >> 6) as u64)));
            e.threads[me].st = St::Polling {
                since: now,
                cost,
                until,
                yields: kind == Boundary::Yield,
                watch,
            };
            let next = e.schedule();
            let mut g = hand_to(g, me, next);
            let e = g.as_mut().expect("simulation running");
            e.threads[me].expect = None;
            e.threads[me].recheck = f64::INFINITY;
            let n = std::mem::take(&mut e.threads[me].elided);
            return (n + 1).min(max_iters);
        }
    }
    e.threads[me].time = now + step;
    1
}

/// A spin-loop hint for code run on the simulator (a `pause`; a polling loop around it is parked
/// like the library's own). Outside a simulation: `core::hint::spin_loop`.
///
/// ```
/// locklab::sim::pause();
/// ```
pub fn pause() {
    boundary(Boundary::Pause(1), u64::MAX);
}

/// Declares the exit condition of the spin loop the calling virtual thread is about to run: the loop
/// ends when `word` holds `want`, and between its looks it only takes spin steps ([`pause`], the
/// library's bounded spinning), whose course nothing else it reads changes. While the
/// returned guard lives, a write to the word's line tests the condition inside the simulator, and
/// the thread is run only once it holds (see "Waiting for a value" in the module docs). Outside a
/// simulation: nothing.
///
/// A wrong declaration makes a wrong simulation (a thread that is never run again ends the run as
/// a lost wake-up), not unsound code.
///
/// # Safety
///
/// The guard must be dropped, not leaked (`mem::forget`): while it is in force the simulator reads
/// the word's address whenever the thread stops in a spin step after loading it, and the borrow
/// keeps the word alive only as long as the guard is.
///
/// ```
/// use locklab::sim::atomic::{AtomicU32, Ordering};
/// let served = AtomicU32::new(0);
/// let my_turn = 0;
/// // SAFETY: the guard is dropped at the end of this scope.
/// let _until = unsafe { locklab::sim::spin_until_eq(&served, my_turn) };
/// while served.load(Ordering::Acquire) != my_turn {
///     locklab::sim::pause();
/// }
/// ```
pub unsafe fn spin_until_eq(word: &atomic::AtomicU32, want: u32) -> SpinUntil<'_> {
    if virtual_thread().is_some() {
        let addr = word as *const atomic::AtomicU32 as usize;
        EXPECT.with(|x| x.set(Some(Expect { addr, want })));
    }
    SpinUntil(core::marker::PhantomData)
}

/// Ends a [`spin_until_eq`] declaration when dropped; borrows the word meanwhile.
///
/// ```
/// let served = locklab::sim::atomic::AtomicU32::new(0);
/// // SAFETY: dropped at once.
/// drop(unsafe { locklab::sim::spin_until_eq(&served, 0) });
/// ```
#[must_use = "the declaration lasts as long as this guard"]
pub struct SpinUntil<'a>(core::marker::PhantomData<&'a atomic::AtomicU32>);

impl Drop for SpinUntil<'_> {
    fn drop(&mut self) {
        if virtual_thread().is_some() {
            EXPECT.with(|x| x.set(None));
        }
    }
}

/// Registers a spin deadline of the calling thread (a spin budget's end): a poller wakes at it.
pub(crate) fn note_deadline(at: f64) {
    if virtual_thread().is_none() {
        return;
    }
    DEADLINES.with(|d| {
        let mut d = d.borrow_mut();
        if d.len() > 16 {
            d.clear();
        }
        d.push(at);
    });
}

/// A futex wait by a virtual thread (see [`crate::sys::futex_wait`]): `None` outside a simulation.
pub(crate) fn futex_wait(
    word: &atomic::AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> Option<bool> {
    let me = virtual_thread()?;
    PAT.with(|p| p.borrow_mut().impure());
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let addr = word as *const _ as usize;
    let core = e.threads[me].core;
    let now = e.threads[me].time;
    let (cost, _) = e.access(core, addr, Access::Load, now);
    let now = now + cost + e.m.syscall_ns;
    e.threads[me].time = now;
    // Relaxed: the baton orders it (only its holder runs, and the hand-over is Release/Acquire),
    // as the kernel's futex check is ordered by its hash-bucket lock.
    if word.inner().load(core::sync::atomic::Ordering::Relaxed) != expected {
        return Some(true);
    }
    let until = timeout.map_or(f64::INFINITY, |d| now + d.as_nanos() as f64);
    e.sleep_seq += 1;
    e.threads[me].timed_out = false;
    e.threads[me].st = St::Sleeping {
        addr,
        until,
        seq: e.sleep_seq,
    };
    e.leave_core(me, now);
    let next = e.schedule();
    let mut g = hand_to(g, me, next);
    let e = g.as_mut().expect("simulation running");
    Some(!std::mem::take(&mut e.threads[me].timed_out))
}

/// A futex wake by a virtual thread: wakes up to `n` sleepers on `word`, oldest first. `None`
/// outside a simulation.
pub(crate) fn futex_wake(word: *const atomic::AtomicU32, n: u32) -> Option<usize> {
    let me = virtual_thread()?;
    PAT.with(|p| p.borrow_mut().impure());
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let addr = word as usize;
    let mut sleepers: Vec<(u64, usize)> = e
        .threads
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t.st {
            St::Sleeping { addr: a, seq, .. } if a == addr => Some((seq, i)),
            _ => None,
        })
        .collect();
    sleepers.sort_unstable();
    sleepers.truncate(n as usize);
    let now = e.threads[me].time;
    let cost = if sleepers.is_empty() {
        e.m.syscall_ns
    } else {
        e.m.futex_wake_ns
    };
    e.threads[me].time = now + cost;
    for &(_, i) in &sleepers {
        let at = now + cost + e.m.wakeup_ns;
        e.threads[i].st = St::Waking { at };
        e.lower_horizon(at);
    }
    Some(sleepers.len())
}

/// The calling virtual thread's core (`None` outside a simulation).
pub(crate) fn current_core() -> Option<usize> {
    let me = virtual_thread()?;
    let g = engine();
    g.as_ref().map(|e| e.threads[me].core)
}

/// The simulated machine's core count while a simulation runs.
pub(crate) fn machine_cores() -> Option<usize> {
    virtual_thread()?;
    engine().as_ref().map(|e| e.cores.len())
}

/// The calling virtual thread's clock, ns (reading it costs `clock_ns`); outside a simulation, the
/// host's monotonic clock in ns since the first call.
///
/// ```
/// let a = locklab::sim::now();
/// assert!(locklab::sim::now() >= a);
/// ```
pub fn now() -> f64 {
    let Some(me) = virtual_thread() else {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as f64;
    };
    // An event like any other: a thread whose slice has ended is preempted here.
    let mut g = turn(me);
    let e = g.as_mut().expect("simulation running");
    let t = &mut e.threads[me];
    t.time += e.m.clock_ns;
    t.time
}

/// Charges `ns` of private work (no memory traffic) to the calling virtual thread; outside a
/// simulation, nothing.
///
/// ```
/// locklab::sim::work(100.0); // outside a simulation: does nothing
/// ```
pub fn work(ns: f64) {
    let Some(me) = virtual_thread() else { return };
    {
        let mut g = engine();
        let e = g.as_mut().expect("simulation running");
        e.threads[me].time += ns.max(0.0);
    }
    // The work's end is an event: a slice that ended during it preempts the thread here.
    drop(turn(me));
}

/// The calling virtual thread's clock without the cost of a reading: the simulator's own look, for
/// measuring a run without disturbing it ([`now`] outside a simulation).
///
/// ```
/// assert!(locklab::sim::peek() >= 0.0);
/// ```
pub fn peek() -> f64 {
    let Some(me) = virtual_thread() else {
        return now();
    };
    engine().as_ref().map_or(0.0, |e| e.threads[me].time)
}
