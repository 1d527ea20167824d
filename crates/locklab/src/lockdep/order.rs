//! An incremental topological order of a growing graph (the dynamic algorithm of Pearce and Kelly,
//! "A dynamic topological sort algorithm for directed acyclic graphs", JEA 2006), so that adding an
//! edge that agrees with the order costs one comparison, and one that does not costs a search of only
//! the nodes whose order lies between its two ends, never of the whole graph.
//!
//! The order is over the graph's strongly connected **components** (each named by one member, its
//! representative): every component has an order number, and every edge between two components goes
//! from a lower number to a higher one. Adding `x -> y`, with `X` and `Y` their components:
//! - `X == Y`: the edge is inside a cycle already known (the caller searches the component);
//! - `ord(X) < ord(Y)`: nothing to do, and no path `y ~> x` exists (every path climbs);
//! - else a forward search from `Y` over components numbered up to `ord(X)`, and a backward search
//!   from `X` over those numbered from `ord(Y)`. Components found by both are on a new cycle and
//!   merge into one. The components found share their numbers out again: the backward set first, then
//!   the merged one, then the forward set. Nothing else moves.
//!
//! The validator keeps one order over the class graph and one over the same-class instance graph, and
//! searches a new dependency only where the order cannot rule a cycle out. Each side of a search is
//! bounded by [`LIMIT`] components; past it the caller gives up on the order and searches the whole
//! graph from then on.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

/// The nodes one side of a search may visit.
pub(super) const LIMIT: usize = if cfg!(miri) { 64 } else { 1 << 16 };

/// A graph the order is kept over (all calls under the validator's lock). Nodes are non-zero.
pub(super) trait Dag {
    /// The representative of `n`'s component (`n` itself until it is merged into another).
    fn rep(&self, n: u64) -> u64;
    /// Makes `r` the representative of every member of the component of `other` (a representative)
    /// too.
    fn merge(&self, r: u64, other: u64);
    /// The order number of the component represented by `r` (non-zero).
    fn ord(&self, r: u64) -> u64;
    fn set_ord(&self, r: u64, o: u64);
    /// Calls `f` on the target of each edge from a member of the component represented by `r`.
    fn succ(&self, r: u64, f: &mut dyn FnMut(u64));
    /// Calls `f` on the source of each edge to a member of the component represented by `r`.
    fn pred(&self, r: u64, f: &mut dyn FnMut(u64));
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
    /// Both ends are in one component already: a path back exists (the cycle is known).
    Inside,
    /// A path back exists: the components on the new cycle were merged, and the order holds.
    Cycle,
    /// A side of the search passed [`LIMIT`]: undecided, and the order no longer holds.
    TooBig,
}

/// The searches' memory: `(order number, component)` per component visited, each side, and a stack.
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

/// A depth-first search from the component `start` over components `keep` accepts, following
/// `next`: each found once into `out` with its number. `None` past [`LIMIT`].
fn reach(
    d: &dyn Dag,
    start: u64,
    next: fn(&dyn Dag, u64, &mut dyn FnMut(u64)),
    keep: &dyn Fn(u64) -> bool,
    out: &mut [(u64, u64)],
    stack: &mut [u64],
    work: &mut u64,
) -> Option<usize> {
    let pass = d.pass();
    d.visit(start, pass);
    stack[0] = start;
    let (mut top, mut n) = (1usize, 0usize);
    let mut big = false;
    while top > 0 {
        top -= 1;
        let c = stack[top];
        if n == out.len() {
            return None;
        }
        out[n] = (d.ord(c), c);
        n += 1;
        next(d, c, &mut |w| {
            *work += 1;
            let w = d.rep(w);
            if big || !keep(w) || !d.visit(w, pass) {
                return;
            }
            if top == stack.len() {
                big = true;
            } else {
                stack[top] = w;
                top += 1;
            }
        });
        if big {
            return None;
        }
    }
    Some(n)
}

/// Adds `x -> y` to the order (the caller adds it to the graph after, if it keeps it). `steps`
/// counts the edges and components looked at.
pub(super) fn add(d: &dyn Dag, s: &Scratch, x: u64, y: u64, steps: &AtomicU64) -> Added {
    let (cx, cy) = (d.rep(x), d.rep(y));
    if cx == cy {
        return Added::Inside;
    }
    let (lb, ub) = (d.ord(cy), d.ord(cx));
    if ub < lb {
        return Added::Ordered;
    }
    // SAFETY: the validator's lock is held (every caller), and these are the only references.
    let (fwd, back, ords, stack) =
        unsafe { (slice(s.fwd), slice(s.back), slice(s.ords), slice(s.stack)) };
    let mut work = 0u64;
    // Forward from y's component over those numbered up to x's (x's own included: a cycle).
    let nf = reach(
        d,
        cy,
        |d, c, f| d.succ(c, f),
        &|w| d.ord(w) <= ub,
        fwd,
        stack,
        &mut work,
    );
    // Backward from x's component over those numbered from y's.
    let nb = nf.and_then(|_| {
        reach(
            d,
            cx,
            |d, c, f| d.pred(c, f),
            &|w| d.ord(w) >= lb,
            back,
            stack,
            &mut work,
        )
    });
    let (Some(nf), Some(nb)) = (nf, nb) else {
        steps.fetch_add(work, Ordering::Relaxed);
        return Added::TooBig;
    };
    steps.fetch_add(work + (nf + nb) as u64, Ordering::Relaxed);
    let (fwd, back) = (&mut fwd[..nf], &mut back[..nb]);
    // The components on a new cycle are those both searches found (x's and y's among them): sort
    // the forward set by component to find them, and mark them with number 0.
    let cycle = fwd.iter().any(|&(_, c)| c == cx);
    let mut merged = 0usize;
    if cycle {
        fwd.sort_unstable_by_key(|&(_, c)| c);
        for e in back.iter_mut() {
            if let Ok(i) = fwd.binary_search_by_key(&e.1, |&(_, c)| c) {
                ords[merged] = e.0;
                merged += 1;
                if e.1 != cx {
                    d.merge(cx, e.1);
                }
                fwd[i].0 = 0;
                e.0 = 0;
            }
        }
    }
    // The numbers of every component found, sorted: the backward set's first, then the merged
    // component's, then the forward set's, each set keeping its own relative order.
    fwd.sort_unstable();
    back.sort_unstable();
    let (fwd, back) = (&fwd[merged.min(nf)..], &back[merged.min(nb)..]);
    let mut n = merged;
    for &(o, _) in back.iter().chain(fwd.iter()) {
        ords[n] = o;
        n += 1;
    }
    let ords = &mut ords[..n];
    ords.sort_unstable();
    let mut k = 0;
    for &(_, c) in back {
        d.set_ord(c, ords[k]);
        k += 1;
    }
    if merged > 0 {
        // The merged component takes the last of its members' places (any between the two sets).
        k += merged - 1;
        d.set_ord(cx, ords[k]);
        k += 1;
    }
    for &(_, c) in fwd {
        d.set_ord(c, ords[k]);
        k += 1;
    }
    if cycle { Added::Cycle } else { Added::Ordered }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};

    #[derive(Default)]
    struct G {
        ord: RefCell<HashMap<u64, u64>>,
        rep: RefCell<HashMap<u64, u64>>,
        out: RefCell<HashMap<u64, Vec<u64>>>,
        inn: RefCell<HashMap<u64, Vec<u64>>>,
        seen: RefCell<HashMap<u64, u64>>,
        passes: RefCell<u64>,
    }
    impl G {
        fn members(&self, r: u64) -> Vec<u64> {
            let mut m: Vec<u64> = self
                .rep
                .borrow()
                .iter()
                .filter(|&(_, &v)| v == r)
                .map(|(&k, _)| k)
                .collect();
            m.push(r);
            m
        }
        fn edge(&self, a: u64, b: u64) {
            self.out.borrow_mut().entry(a).or_default().push(b);
            self.inn.borrow_mut().entry(b).or_default().push(a);
        }
    }
    impl Dag for G {
        fn rep(&self, n: u64) -> u64 {
            self.rep.borrow().get(&n).copied().unwrap_or(n)
        }
        fn merge(&self, r: u64, other: u64) {
            for m in self.members(other) {
                self.rep.borrow_mut().insert(m, r);
            }
        }
        fn ord(&self, n: u64) -> u64 {
            let mut o = self.ord.borrow_mut();
            let k = o.len() as u64 + 1;
            *o.entry(n).or_insert(k)
        }
        fn set_ord(&self, n: u64, v: u64) {
            self.ord.borrow_mut().insert(n, v);
        }
        fn succ(&self, r: u64, f: &mut dyn FnMut(u64)) {
            for m in self.members(r) {
                let v = self.out.borrow().get(&m).cloned().unwrap_or_default();
                v.into_iter().for_each(&mut *f);
            }
        }
        fn pred(&self, r: u64, f: &mut dyn FnMut(u64)) {
            for m in self.members(r) {
                let v = self.inn.borrow().get(&m).cloned().unwrap_or_default();
                v.into_iter().for_each(&mut *f);
            }
        }
        fn visit(&self, n: u64, pass: u64) -> bool {
            self.seen.borrow_mut().insert(n, pass) != Some(pass)
        }
        fn pass(&self) -> u64 {
            *self.passes.borrow_mut() += 1;
            *self.passes.borrow()
        }
    }

    /// Every edge between two components climbs.
    fn check(g: &G, edges: &HashSet<(u64, u64)>) {
        for &(p, q) in edges {
            let (a, b) = (g.rep(p), g.rep(q));
            assert!(a == b || g.ord(a) < g.ord(b), "{p}->{q} out of order");
        }
    }

    /// A path from `a` to `b` (plain search, for the check).
    fn path(g: &G, a: u64, b: u64) -> bool {
        let (mut seen, mut todo) = (HashSet::new(), vec![a]);
        while let Some(n) = todo.pop() {
            if n == b {
                return true;
            }
            if seen.insert(n) {
                todo.extend(g.out.borrow().get(&n).cloned().unwrap_or_default());
            }
        }
        false
    }

    #[test]
    // Miri: the scratch tables live as long as the process (mmap'd in production, never freed),
    // which Miri reports as a leak. The test runs natively and under ThreadSanitizer.
    #[cfg_attr(miri, ignore)]
    fn keeps_a_topological_order_of_components_and_finds_every_cycle() {
        let g = G::default();
        let s = Scratch::new().unwrap();
        let steps = AtomicU64::new(0);
        // Register nodes in a scrambled order, then add random edges, mostly climbing by index.
        for n in [5u64, 1, 9, 3, 7, 2, 8, 4, 6, 12, 10, 11] {
            g.ord(n);
        }
        let mut edges = HashSet::new();
        let mut x = 12345u64;
        for i in 0..400 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (a, b) = ((x >> 33) % 12 + 1, (x >> 45) % 12 + 1);
            // One edge in 20 goes down: cycles.
            let (a, b) = if i % 20 == 0 {
                (a.max(b), a.min(b))
            } else {
                (a.min(b), a.max(b))
            };
            if a == b || !edges.insert((a, b)) {
                continue;
            }
            let back = path(&g, b, a);
            let r = add(&g, &s, a, b, &steps);
            assert_eq!(
                back,
                matches!(r, Added::Cycle | Added::Inside),
                "{a}->{b}: {r:?}"
            );
            g.edge(a, b);
            check(&g, &edges);
            // Components are exactly the nodes that reach each other.
            for &(p, q) in &edges {
                assert_eq!(g.rep(p) == g.rep(q), path(&g, p, q) && path(&g, q, p));
            }
        }
        assert!(steps.load(Ordering::Relaxed) > 0);
    }
}
