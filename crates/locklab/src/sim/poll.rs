//! The polling detector: recognises an iteration of a spin loop that repeats the one before it
//! (same loads, same values, only hits), so that its thread can be parked as a poller.

use super::engine::Access;

/// The most loads a polling iteration is recognised with (see [`Pattern::loaded`]).
const MAX_POLL_LOADS: usize = 4096;

/// What the calling thread did since its last spin boundary, and in the iteration before.
#[derive(Default)]
pub(super) struct Pattern {
    /// Loads of this iteration: (address, value).
    pub(super) cur: Vec<(usize, u64)>,
    /// The boundaries that closed it (a signature), once one has.
    group: Option<u64>,
    /// Only hits and loads so far.
    pure: bool,
    /// When this iteration started.
    start: f64,
    prev: Vec<(usize, u64)>,
    prev_group: u64,
    prev_pure: bool,
    prev_cost: f64,
}

impl Pattern {
    /// An access or other operation begins: a closed iteration becomes the previous one (its cost
    /// was taken when its first boundary closed it).
    fn roll(&mut self) {
        if let Some(g) = self.group.take() {
            self.prev = std::mem::take(&mut self.cur);
            self.prev_group = g;
            self.prev_pure = self.pure;
            self.pure = true;
        }
    }

    pub(super) fn op(&mut self, kind: Access, hit: bool) {
        self.roll();
        if kind != Access::Load || !hit {
            self.pure = false;
        }
    }

    /// A load of this iteration. An iteration of more than [`MAX_POLL_LOADS`] loads is no polling
    /// loop (a spin iteration reads a word or a few): it is marked impure and its loads are no
    /// longer kept, so that a thread that never reaches a spin boundary (one alone, never
    /// contended) keeps a bounded list, not one entry per load of the whole run.
    pub(super) fn loaded(&mut self, addr: usize, value: u64) {
        if self.cur.len() >= MAX_POLL_LOADS {
            self.pure = false;
            self.cur.clear();
        }
        self.cur.push((addr, value));
    }

    pub(super) fn impure(&mut self) {
        self.roll();
        self.pure = false;
    }

    /// A boundary at `now`: `Some((iteration cost, lines read))` if this iteration repeats the last.
    pub(super) fn boundary(&mut self, sig: u64, now: f64) -> Option<(f64, Vec<u64>)> {
        let g = match self.group {
            None => {
                // The iteration's cost runs from one group's close to the next's.
                sig
            }
            Some(g) => g.rotate_left(7) ^ sig.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        };
        let first_close = self.group.is_none();
        self.group = Some(g);
        if first_close {
            let cost = now - self.start;
            self.start = now;
            let repeats = self.pure
                && self.prev_pure
                && !self.cur.is_empty()
                && self.cur == self.prev
                && g == self.prev_group;
            self.prev_cost = cost;
            if repeats {
                return Some((cost, self.lines()));
            }
            return None;
        }
        let repeats = self.pure
            && self.prev_pure
            && !self.cur.is_empty()
            && self.cur == self.prev
            && g == self.prev_group;
        repeats.then(|| (self.prev_cost, self.lines()))
    }

    fn lines(&self) -> Vec<u64> {
        let mut l: Vec<u64> = self.cur.iter().map(|&(a, _)| (a >> 6) as u64).collect();
        l.sort_unstable();
        l.dedup();
        l
    }
}
