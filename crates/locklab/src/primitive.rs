//! The loom shim: every atomic, fence and busy-wait step in locklab is imported from here, never from
//! `core` directly, so each protocol runs unchanged under the [loom] model checker
//! (`RUSTFLAGS="--cfg loom"`). Under loom a busy-wait step becomes a scheduler yield, which is how loom
//! explores spin loops without running them forever.
//!
//! Under `--cfg locklab_sim` the same items go to the simulator ([`crate::sim`]): its atomics, and
//! busy-wait steps that it can stand for many iterations of a polling loop (which is why the bounded
//! spinners below count what a step returns).
//!
//! [loom]: https://docs.rs/loom

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

#[cfg(locklab_sim)]
pub(crate) use crate::sim::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

#[cfg(not(any(loom, locklab_sim)))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

/// A constructor that is a `const fn` except under loom, whose atomics cannot be built in const
/// context: written once, it expands to the `const fn` (`cfg(not(loom))`) and to the same function
/// without `const` (`cfg(loom)`), with the same attributes, documentation and body.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $name:ident($($arg:tt)*) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])*
        $vis const fn $name($($arg)*) -> $ret $body

        #[cfg(loom)]
        $(#[$attr])*
        $vis fn $name($($arg)*) -> $ret $body
    };
}
pub(crate) use const_unless_loom;

/// One step of a busy-wait loop: a `pause` hint on hardware, a yield to the model under loom.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(locklab_sim)]
    crate::sim::boundary(crate::sim::Boundary::Pause(1), u64::MAX);
    #[cfg(not(any(loom, locklab_sim)))]
    core::hint::spin_loop();
}

/// `n` `pause`s: one simulator step (its cost is `n` pauses), one yield to the model under loom.
#[inline]
pub(crate) fn pause_n(n: u32) {
    #[cfg(loom)]
    {
        let _ = n;
        loom::thread::yield_now();
    }
    #[cfg(locklab_sim)]
    crate::sim::boundary(crate::sim::Boundary::Pause(n), u64::MAX);
    #[cfg(not(any(loom, locklab_sim)))]
    for _ in 0..n {
        core::hint::spin_loop();
    }
}

/// Gives the CPU away: `sched_yield(2)` on hardware, a yield to the model under loom.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(locklab_sim)]
    crate::sim::boundary(crate::sim::Boundary::Yield, u64::MAX);
    #[cfg(not(any(loom, locklab_sim)))]
    crate::sys::sched_yield();
}

/// Declares the exit condition of the spin loop that follows, for the simulator: the loop ends when
/// `word` holds `want`, and nothing else it reads or counts changes its course (only the steps of a
/// [`SpinWait`] may be taken between its looks). A simulated run then tests the condition itself
/// when the word's line is written, and runs the thread only once it holds (see the `sim` module).
/// In force until the returned guard drops; on hardware and under loom, nothing.
#[cfg(locklab_sim)]
#[inline]
pub(crate) fn spin_until_eq(word: &AtomicU32, want: u32) -> crate::sim::SpinUntil<'_> {
    // SAFETY: the callers keep the guard in a local of the waiting function, dropped when it
    // returns (never leaked).
    unsafe { crate::sim::spin_until_eq(word, want) }
}

/// See the simulated build's `spin_until_eq`: nothing here.
#[cfg(not(locklab_sim))]
#[inline(always)]
pub(crate) fn spin_until_eq(_word: &AtomicU32, _want: u32) -> SpinUntil {
    SpinUntil
}

/// What `spin_until_eq` returns outside the simulator: nothing to undo.
#[cfg(not(locklab_sim))]
pub(crate) struct SpinUntil;

/// Busy-wait with a bounded appetite for the CPU.
///
/// These machines are often oversubscribed (more runnable threads than CPUs), so the thread we wait for
/// may be preempted; spinning on then burns the time slice it needs. `SpinWait` spins with `pause` for
/// [`SpinWait::SPINS`] steps, then yields the CPU on every further step. It never changes *who* gets the
/// lock, only how the waiting is done, so FIFO locks stay FIFO.
pub(crate) struct SpinWait {
    steps: u32,
    spins: u32,
}

impl SpinWait {
    /// Steps of pure spinning before each step yields. ~1000 `pause`s are a few microseconds on current
    /// x86 (a `pause` is 10 to 140 cycles depending on the core), longer than most critical sections.
    pub(crate) const SPINS: u32 = 1024;

    #[inline]
    pub(crate) const fn new() -> Self {
        SpinWait {
            steps: 0,
            spins: Self::SPINS,
        }
    }

    /// A `SpinWait` that starts yielding after `spins` steps.
    #[inline]
    pub(crate) const fn with_spins(spins: u32) -> Self {
        SpinWait { steps: 0, spins }
    }

    /// One step of waiting.
    #[inline]
    pub(crate) fn wait(&mut self) {
        if self.steps < self.spins {
            #[cfg(locklab_sim)]
            {
                // The simulator may stand this step for many (a parked poller): count them all.
                let left = u64::from(self.spins - self.steps);
                let n = crate::sim::boundary(crate::sim::Boundary::Pause(1), left);
                self.steps += n.min(left) as u32;
            }
            #[cfg(not(locklab_sim))]
            {
                self.steps += 1;
                spin_loop();
            }
        } else {
            yield_now();
        }
    }
}

/// Polls `attempt` with a [`SpinWait`] until it succeeds or `deadline` passes: the timed form of the
/// spinning locks, which have no sleeping path (the bound is the caller's: a spinner never sleeps).
#[cfg(not(loom))]
pub(crate) fn spin_until(deadline: std::time::Instant, mut attempt: impl FnMut() -> bool) -> bool {
    let mut w = SpinWait::new();
    loop {
        if attempt() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        w.wait();
    }
}

/// `now + timeout`, or `None` if that is beyond what an `Instant` holds (then: no deadline).
#[cfg(not(loom))]
pub(crate) fn deadline_after(timeout: std::time::Duration) -> Option<std::time::Instant> {
    std::time::Instant::now().checked_add(timeout)
}

/// Exponential backoff for a spinner watching a lock word: 1, 2, 4, ... `pause`s between looks, up to
/// `max`; at the cap, every further step yields the CPU instead. Every look pulls the line away from a
/// running holder (whose unlock, and with short sections next lock, then pays a transfer); and on an
/// oversubscribed machine the holder may be waiting for this very CPU (a `sched_yield` with nobody else
/// runnable costs well under a microsecond).
pub(crate) struct Backoff {
    step: u32,
    max: u32,
}

impl Backoff {
    /// Starts at one `pause`; `max` is 1 under loom, where each `pause` is a scheduling point.
    #[inline]
    pub(crate) const fn new(max: u32) -> Self {
        Backoff {
            step: 1,
            max: if cfg!(loom) { 1 } else { max },
        }
    }

    /// The `pause`s the next [`wait`](Self::wait) makes, `None` if it yields.
    #[inline]
    pub(crate) fn next_pauses(&self) -> Option<u32> {
        (self.step < self.max).then_some(self.step)
    }

    /// One step of waiting.
    #[inline]
    pub(crate) fn wait(&mut self) {
        if self.step < self.max {
            pause_n(self.step);
            self.step *= 2;
        } else {
            yield_now();
        }
    }
}
