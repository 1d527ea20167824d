//! An incremental topological order of a growing graph (the dynamic algorithm of Pearce and Kelly,
//! "A dynamic topological sort algorithm for directed acyclic graphs", JEA 2006), so that adding an
//! edge that agrees with the order costs one comparison, and one that does not costs a search of only
//! the nodes whose order lies between its two ends, never of the whole graph.
//!
//! Every node has an order number; while the graph has no cycle, each edge goes from a lower number
//! to a higher one. Adding `x -> y`:
//! - `ord(x) < ord(y)`: nothing to do, and no path `y ~> x` exists (every path climbs);
//! - else a forward search from `y` over nodes numbered below `ord(x)` (reaching `x`: a cycle) and a
//!   backward search from `x` over nodes numbered above `ord(y)`; the two sets found then share their
//!   numbers out again, the backward set first. Nothing else moves.
//!
//! The validator keeps one order over the class graph and one over the same-class instance graph, and
//! uses them to skip its searches for new dependencies that cannot close a cycle. Each search's work
//! is bounded by [`LIMIT`] nodes a side; past it (or once the graph has a cycle: a reported one, or a
//! cycle through recursive readers, which is no deadlock) the caller falls back to searching the
//! whole graph as before.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

/// The nodes one side of a search may visit.
pub(super) const LIMIT: usize = if cfg!(miri) { 64 } else { 1 << 16 };

/// A graph the order is kept over (all calls under the validator's lock).
pub(super) trait Dag {
    /// The node's order number (non-zero).
    fn ord(&self, n: u64) -> u64;
    fn set_ord(&self, n: u64, o: u64);
    /// Calls `f` on each node with an edge from `n`.
    fn succ(&self, n: u64, f: &mut dyn FnMut(u64));
    /// Calls `f` on each node with an edge to `n`.
    fn pred(&self, n: u64, f: &mut dyn FnMut(u64));
    /// Marks `n` seen in the pass `pass`: `false` if it already was.
    fn visit(&self, n: u64, pass: u64) -> bool;
    /// A fresh pass number (never seen by any node yet).
    fn pass(&self) -> u64;
}

/// What adding an edge found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Added {
    /// No path back: the order now holds the new edge too.
    Ordered,
    /// A path back from the edge's end to its start exists (the edge closes a cycle of some kind).
    Cycle,
    /// A side of the search passed [`LIMIT`]: undecided, and the order is no longer kept.
    TooBig,
}

/// The searches' memory: `(order number, node)` per visited node, each side, and a stack.
pub(super) struct Scratch {
    fwd: &'static [UnsafeCell<(u64, u64)>],
    back: &'static [UnsafeCell<(u64, u64)>],
    ords: &'static [UnsafeCell<u64>],
    stack: &'static [UnsafeCell<u64>],
}

// SAFETY: used only under the validator's lock (one thread at a time).
unsafe impl Sync for Scratch {}
// SAFETY: as above; the arrays are 'static.
unsafe impl Send for Scratch {}

impl Scratch {
    pub(super) fn new() -> Option<Self> {
        Some(Self {
            fwd: super::table::zeroed_array(LIMIT)?,
            back: super::table::zeroed_array(LIMIT)?,
            ords: super::table::zeroed_array(2 * LIMIT)?,
            stack: super::table::zeroed_array(LIMIT)?,
        })
    }
}

/// `&mut` over a scratch array.
///
/// # Safety
/// The caller holds the validator's lock, and no other reference into `a` is live.
#[allow(clippy::mut_from_ref)]
unsafe fn slice<T>(a: &'static [UnsafeCell<T>]) -> &'static mut [T] {
    // SAFETY: `UnsafeCell<T>` has `T`'s layout, writes through it are allowed, and the caller's
    // contract makes this the only access.
    unsafe { core::slice::from_raw_parts_mut(a.as_ptr() as *mut T, a.len()) }
}

/// Adds `x -> y` to the order (the caller adds it to the graph after, if it keeps it). `steps`
/// counts the nodes looked at.
pub(super) fn add(d: &dyn Dag, s: &Scratch, x: u64, y: u64, steps: &AtomicU64) -> Added {
    if x == y {
        return Added::Cycle;
    }
    let (lb, ub) = (d.ord(y), d.ord(x));
    if ub < lb {
        return Added::Ordered;
    }
    // SAFETY: the validator's lock is held (every caller), and these are the only references.
    let (fwd, back, ords, stack) =
        unsafe { (slice(s.fwd), slice(s.back), slice(s.ords), slice(s.stack)) };
    let mut work = 0u64;
    // Forward from y, over nodes numbered below ub.
    let pass = d.pass();
    let (mut nf, mut top) = (0usize, 0usize);
    let mut found = false;
    let mut big = false;
    d.visit(y, pass);
    stack[0] = y;
    top += 1;
    while top > 0 && !found && !big {
        top -= 1;
        let n = stack[top];
        if nf == fwd.len() {
            big = true;
            break;
        }
        fwd[nf] = (d.ord(n), n);
        nf += 1;
        d.succ(n, &mut |w| {
            work += 1;
            if found || big {
                return;
            }
            if w == x {
                found = true;
            } else if d.ord(w) < ub && d.visit(w, pass) {
                if top == stack.len() {
                    big = true;
                } else {
                    stack[top] = w;
                    top += 1;
                }
            }
        });
    }
    if found || big {
        steps.fetch_add(work + nf as u64, Ordering::Relaxed);
        return if found { Added::Cycle } else { Added::TooBig };
    }
    // Backward from x, over nodes numbered above lb.
    let pass = d.pass();
    let mut nb = 0usize;
    top = 0;
    d.visit(x, pass);
    stack[0] = x;
    top += 1;
    while top > 0 && !big {
        top -= 1;
        let n = stack[top];
        if nb == back.len() {
            big = true;
            break;
        }
        back[nb] = (d.ord(n), n);
        nb += 1;
        d.pred(n, &mut |w| {
            work += 1;
            if big {
                return;
            }
            if d.ord(w) > lb && d.visit(w, pass) {
                if top == stack.len() {
                    big = true;
                } else {
                    stack[top] = w;
                    top += 1;
                }
            }
        });
    }
    steps.fetch_add(work + (nf + nb) as u64, Ordering::Relaxed);
    if big {
        return Added::TooBig;
    }
    // Share the numbers of both sets out again: the backward set (which must precede x -> y)
    // first, each set keeping its own relative order.
    let (fwd, back) = (&mut fwd[..nf], &mut back[..nb]);
    fwd.sort_unstable();
    back.sort_unstable();
    let ords = &mut ords[..nf + nb];
    for (o, &(k, _)) in ords.iter_mut().zip(back.iter().chain(fwd.iter())) {
        *o = k;
    }
    ords.sort_unstable();
    for (&o, &(_, n)) in ords.iter().zip(back.iter().chain(fwd.iter())) {
        d.set_ord(n, o);
    }
    Added::Ordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};

    #[derive(Default)]
    struct G {
        ord: RefCell<HashMap<u64, u64>>,
        out: RefCell<HashMap<u64, Vec<u64>>>,
        inn: RefCell<HashMap<u64, Vec<u64>>>,
        seen: RefCell<HashMap<u64, u64>>,
        passes: RefCell<u64>,
    }
    impl Dag for G {
        fn ord(&self, n: u64) -> u64 {
            let mut o = self.ord.borrow_mut();
            let k = o.len() as u64 + 1;
            *o.entry(n).or_insert(k)
        }
        fn set_ord(&self, n: u64, v: u64) {
            self.ord.borrow_mut().insert(n, v);
        }
        fn succ(&self, n: u64, f: &mut dyn FnMut(u64)) {
            let v = self.out.borrow().get(&n).cloned().unwrap_or_default();
            v.into_iter().for_each(f);
        }
        fn pred(&self, n: u64, f: &mut dyn FnMut(u64)) {
            let v = self.inn.borrow().get(&n).cloned().unwrap_or_default();
            v.into_iter().for_each(f);
        }
        fn visit(&self, n: u64, pass: u64) -> bool {
            self.seen.borrow_mut().insert(n, pass) != Some(pass)
        }
        fn pass(&self) -> u64 {
            *self.passes.borrow_mut() += 1;
            *self.passes.borrow()
        }
    }

    #[test]
    fn keeps_a_topological_order_and_finds_cycles() {
        let g = G::default();
        let s = Scratch::new().unwrap();
        let steps = AtomicU64::new(0);
        // Register nodes in a scrambled order, then add edges in index order (a DAG).
        for n in [5u64, 1, 9, 3, 7, 2, 8, 4, 6] {
            g.ord(n);
        }
        let mut edges = HashSet::new();
        let mut x = 12345u64;
        for _ in 0..200 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (a, b) = ((x >> 33) % 9 + 1, (x >> 45) % 9 + 1);
            let (a, b) = (a.min(b), a.max(b));
            if a == b || !edges.insert((a, b)) {
                continue;
            }
            assert_eq!(add(&g, &s, a, b, &steps), Added::Ordered);
            g.out.borrow_mut().entry(a).or_default().push(b);
            g.inn.borrow_mut().entry(b).or_default().push(a);
            for &(p, q) in &edges {
                assert!(g.ord(p) < g.ord(q), "{p}->{q} out of order");
            }
        }
        // Any edge from higher to lower closes a cycle when a path exists.
        let (a, b) = *edges.iter().next().unwrap();
        assert_eq!(add(&g, &s, b, a, &steps), Added::Cycle);
        assert!(steps.load(Ordering::Relaxed) > 0);
    }
}
