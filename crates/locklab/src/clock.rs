//! Time as the lock protocols see it: spin budgets, waiter ages and timeouts.
//!
//! On hardware these read the monotonic clock. Under loom, whose executions must be deterministic, each is
//! a countdown of how many times it was consulted, so that the model still explores the paths that time
//! decides (a spinner giving up and unqueueing, a waiter asking for hand-off, a timed lock timing out).

#[cfg(all(not(loom), not(locklab_sim)))]
mod imp {
    use std::time::{Duration, Instant};

    /// A budget for busy-waiting, in nanoseconds of wall time. The clock (a vDSO call, ~20 ns) is read only
    /// on every [`SpinBudget::POLL_EVERY`]th call to [`SpinBudget::expired`], so spinning stays cheap.
    pub(crate) struct SpinBudget {
        deadline: Instant,
        polls: u32,
    }

    impl SpinBudget {
        const POLL_EVERY: u32 = 16;

        #[inline]
        pub(crate) fn new(ns: u64) -> Self {
            SpinBudget {
                deadline: Instant::now() + Duration::from_nanos(ns),
                polls: 0,
            }
        }

        /// Whether the budget is used up.
        #[inline]
        pub(crate) fn expired(&mut self) -> bool {
            self.polls = self.polls.wrapping_add(1);
            self.polls.is_multiple_of(Self::POLL_EVERY) && Instant::now() >= self.deadline
        }
    }

    /// When a waiter joined a wait list.
    pub(crate) struct Stamp(std::cell::Cell<Instant>);

    impl Stamp {
        #[inline]
        pub(crate) fn now() -> Self {
            Stamp(std::cell::Cell::new(Instant::now()))
        }

        /// Restarts the clock (the waiter joined another list).
        #[inline]
        pub(crate) fn reset(&self) {
            self.0.set(Instant::now());
        }

        /// Whether this waiter has waited for longer than `ns`.
        #[inline]
        pub(crate) fn older_than(&self, ns: u64) -> bool {
            self.0.get().elapsed() >= Duration::from_nanos(ns)
        }
    }
}

/// Under the simulator: the spin budgets and waiter stamps read the virtual clock (a budget's end is
/// registered, so that a parked poller wakes at it); timeouts stay on the host's clock (no workload
/// the simulator runs takes a timed lock).
#[cfg(locklab_sim)]
mod imp {
    pub(crate) struct SpinBudget {
        deadline: f64,
    }

    impl SpinBudget {
        #[inline]
        pub(crate) fn new(ns: u64) -> Self {
            let deadline = crate::sim::now() + ns as f64;
            crate::sim::note_deadline(deadline);
            SpinBudget { deadline }
        }

        /// Whether the budget is used up (the hardware build reads the clock every 16th call; the
        /// simulated clock is read every time, at no cost, so a poller woken at the deadline stops).
        #[inline]
        pub(crate) fn expired(&mut self) -> bool {
            crate::sim::peek() >= self.deadline
        }
    }

    pub(crate) struct Stamp(std::cell::Cell<f64>);

    impl Stamp {
        #[inline]
        pub(crate) fn now() -> Self {
            Stamp(std::cell::Cell::new(crate::sim::now()))
        }

        #[inline]
        pub(crate) fn reset(&self) {
            self.0.set(crate::sim::now());
        }

        #[inline]
        pub(crate) fn older_than(&self, ns: u64) -> bool {
            crate::sim::now() - self.0.get() >= ns as f64
        }
    }
}

#[cfg(loom)]
mod imp {
    use std::cell::Cell;
    use std::time::Duration;

    /// Under loom: expires after a few polls, so the give-up paths are explored.
    pub(crate) struct SpinBudget {
        left: u32,
    }

    impl SpinBudget {
        pub(crate) fn new(_ns: u64) -> Self {
            SpinBudget { left: 2 }
        }

        pub(crate) fn expired(&mut self) -> bool {
            if self.left == 0 {
                return true;
            }
            self.left -= 1;
            false
        }
    }

    /// Under loom: "old enough" from the second time it is asked.
    pub(crate) struct Stamp(Cell<u32>);

    impl Stamp {
        pub(crate) fn now() -> Self {
            Stamp(Cell::new(1))
        }

        pub(crate) fn reset(&self) {
            self.0.set(1);
        }

        pub(crate) fn older_than(&self, _ns: u64) -> bool {
            let n = self.0.get();
            if n == 0 {
                return true;
            }
            self.0.set(n - 1);
            false
        }
    }

    /// Under loom: a deadline passes after a given number of looks at it.
    pub(crate) struct Deadline(Cell<u32>);

    impl Deadline {
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) fn after_polls(n: u32) -> Self {
            Deadline(Cell::new(n))
        }
    }

    pub(crate) fn time_left(deadline: Option<&Deadline>) -> Option<Option<Duration>> {
        match deadline {
            None => Some(None),
            Some(d) => {
                let n = d.0.get();
                if n == 0 {
                    return None;
                }
                d.0.set(n - 1);
                Some(Some(Duration::from_nanos(1)))
            }
        }
    }
}

/// Timeouts, on the host's monotonic clock in every build but loom's.
#[cfg(not(loom))]
mod deadline {
    use std::time::{Duration, Instant};

    /// An absolute timeout for the timed lock operations.
    pub(crate) type Deadline = Instant;

    /// How long is left before `deadline`: `Some(None)` for no deadline, `None` once it has passed.
    #[inline]
    pub(crate) fn time_left(deadline: Option<&Deadline>) -> Option<Option<Duration>> {
        match deadline {
            None => Some(None),
            Some(d) => d
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero())
                .map(Some),
        }
    }
}

#[cfg(not(loom))]
pub(crate) use deadline::*;
pub(crate) use imp::*;
