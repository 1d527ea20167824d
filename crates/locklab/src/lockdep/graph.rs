//! Dependencies and the search for cycles: recording a new dependency, the class graph's and the
//! same-class instance graph's incremental topological orders, and the strong-path search.

use super::*;

/// Class-wide facts of one acquisition: written (for the recursive-read rule) and signal context.
#[inline]
pub(super) fn note_mode(g: &Graph, class: u32, mode: Mode, site: usize, x: &Tls) {
    let c = g.class(class);
    let f = c.flags.load(Ordering::Relaxed);
    if mode == Mode::Write && f & FLAG_WRITTEN == 0 {
        c.write_site.store(site as u64, Ordering::Relaxed);
        // AcqRel pairs with `recursive_read`'s: whichever comes second sees the other's flag (and,
        // through it, its sites) and reports.
        let old = c.flags.fetch_or(FLAG_WRITTEN, Ordering::AcqRel);
        if old & FLAG_RR != 0 && old & FLAG_WRITTEN == 0 {
            report_rr(g, class);
        }
    }
    if x.sig.load(Ordering::Relaxed) > 0 {
        in_signal(g, class, x, site);
    } else if f & FLAG_SIG_OUT == 0 {
        held_outside_signal(g, class, site, x);
    }
}

#[cold]
#[inline(never)]
pub(super) fn recursive_read(g: &Graph, class: u32, held_site: usize, site: usize) {
    let c = g.class(class);
    if c.flags.load(Ordering::Relaxed) & FLAG_RR == 0 {
        c.rr_held.store(held_site as u64, Ordering::Relaxed);
        c.rr_site.store(site as u64, Ordering::Relaxed);
        // AcqRel: the sites are written before the flag (Release), and the written flag seen
        // (Acquire) pairs with `note_mode`'s fetch_or (the report names a writer's site if one
        // is known).
        let old = c.flags.fetch_or(FLAG_RR, Ordering::AcqRel);
        if old & FLAG_RR == 0 {
            // Reported at once, as the kernel does: the writer that deadlocks it may come in
            // another run, or from another program sharing the lock.
            report_rr(g, class);
        }
    }
}

#[cold]
#[inline(never)]
pub(super) fn report_rr(g: &Graph, class: u32) {
    let c = g.class(class);
    // AcqRel: one reporter wins; the sites it reads were published with the flags above.
    if c.flags.fetch_or(FLAG_RR_REPORTED, Ordering::AcqRel) & FLAG_RR_REPORTED == 0 {
        report::recursive_read(g, class);
    }
}

/// Checks (and, the first time, records) the dependency `h -> class`. `false` if `h` turned out to
/// have been released by another thread (the caller drops it from the stack).
#[inline]
pub(super) fn add_dep(g: &Graph, h: &Held, class: u32, mode: Mode, site: usize) -> bool {
    if g.edges_full.load(Ordering::Relaxed) {
        return true;
    }
    let t = dep_type(Mode::from_u8(h.mode), mode);
    let key = u64::from(h.class) << 32 | u64::from(class);
    if let Some(e) = g.edge_keys.get(key) {
        // Acquire pairs with the Release fetch_or in `add_dep_slow`: the type's sites are written.
        if g.edge(e as u32).types.load(Ordering::Acquire) & (1 << t) != 0 {
            return true;
        }
    }
    add_dep_slow(g, h, class, mode, t, site)
}

#[cold]
#[inline(never)]
pub(super) fn add_dep_slow(
    g: &Graph,
    h: &Held,
    class: u32,
    mode: Mode,
    t: usize,
    site: usize,
) -> bool {
    if stale(h) {
        return false;
    }
    if !g.lock() {
        return true;
    }
    let key = u64::from(h.class) << 32 | u64::from(class);
    let known = g
        .edge_keys
        .get(key)
        .is_some_and(|e| g.edge(e as u32).types.load(Ordering::Relaxed) & (1 << t) != 0);
    if !known {
        // While the class graph keeps a topological order of its components, a dependency that
        // agrees with it cannot close a cycle: no search. One that closes a cycle (or a new type of
        // one inside a component) is searched for within its component only: every path back is.
        use order::Dag as _;
        let dag = ClassDag(g);
        let (from, to) = (u64::from(h.class), u64::from(class));
        let within = if !g.class_order_ok.load(Ordering::Relaxed) {
            Some(0)
        } else if g.edge_keys.get(key).is_some() {
            // Already in the graph (another type): in the order already.
            Some(dag.rep(from)).filter(|&r| r == dag.rep(to))
        } else {
            match order::add(&dag, &g.order, from, to, &g.steps) {
                order::Added::Ordered => None,
                order::Added::Inside | order::Added::Cycle => Some(dag.rep(from)),
                order::Added::TooBig => {
                    g.class_order_ok.store(false, Ordering::Relaxed);
                    Some(0)
                }
            }
        };
        if let Some(within) = within
            && let Some((end, start)) = search(g, h.class, class, t, within as u32)
        {
            report_cycle(g, h, class, mode, site, end, start);
        }
        record_edge(g, key, h.class, class, t, h.site, site);
    }
    g.unlock();
    true
}

/// Adds type `t` of `from -> to` to the graph (graph lock held).
pub(super) fn record_edge(
    g: &Graph,
    key: u64,
    from: u32,
    to: u32,
    t: usize,
    held_site: usize,
    site: usize,
) {
    let r = g.edge_keys.get_or_insert(key, || {
        let idx = g.n_edges.fetch_add(1, Ordering::Relaxed) + 1;
        if idx as usize > MAX_EDGES {
            g.edges_full.store(true, Ordering::Relaxed);
            return u64::MAX;
        }
        let e = g.edge(idx);
        e.from.store(from, Ordering::Relaxed);
        e.to.store(to, Ordering::Relaxed);
        let c = g.class(from);
        e.next
            .store(c.first_edge.load(Ordering::Relaxed), Ordering::Relaxed);
        c.first_edge.store(idx, Ordering::Relaxed);
        let c = g.class(to);
        e.next_in
            .store(c.first_in.load(Ordering::Relaxed), Ordering::Relaxed);
        c.first_in.store(idx, Ordering::Relaxed);
        u64::from(idx)
    });
    let Some((idx, _)) = r.filter(|&(i, _)| i != u64::MAX && i != 0) else {
        say_full("dependency");
        return;
    };
    let e = g.edge(idx as u32);
    let s = &e.sites[t];
    s.held_site.store(held_site as u64, Ordering::Relaxed);
    s.acq_site.store(site as u64, Ordering::Relaxed);
    s.tid.store(report::tid(), Ordering::Relaxed);
    // Release pairs with the Acquire load in `add_dep`: the sites are written first.
    e.types.fetch_or(1 << t, Ordering::Release);
}

/// Reports the cycle that the path `start ~> end` of the last search closes (graph lock held).
/// Out of line: the path lives in this frame only while a report is composed, not in every
/// dependency check's (which may run on a signal handler's small stack).
#[cold]
#[inline(never)]
pub(super) fn report_cycle(
    g: &Graph,
    h: &Held,
    class: u32,
    mode: Mode,
    site: usize,
    end: usize,
    start: usize,
) {
    let mut path = Path {
        steps: [Step(0); 32],
        n: 0,
        more: 0,
    };
    path.fill(g, end, start);
    report::cycle(g, h, class, mode, site, &path);
}

/// One step of a path: an edge index (+1) and the dependency type taken.
#[derive(Clone, Copy)]
pub(super) struct Step(pub(super) u32);

impl Step {
    /// The edge's index (+1).
    pub(super) fn edge(self) -> u32 {
        self.0 >> 2
    }
    /// The dependency type, 0..4.
    pub(super) fn t(self) -> usize {
        (self.0 & 3) as usize
    }
}

/// Searches (breadth first) for a path `to ~> from` that makes the new dependency `from -(t)-> to`
/// close a strong cycle, through the classes of the component represented by `within` only (0: all).
/// Graph lock held. Returns the search states at the path's two ends, for [`Path::fill`].
pub(super) fn search(
    g: &Graph,
    from: u32,
    to: u32,
    t: usize,
    within: u32,
) -> Option<(usize, usize)> {
    let stamp = next_stamp(g);
    let new_from_shared = t & 2 != 0;
    let state = |class: u32, r: bool| class as usize * 2 + usize::from(r);
    let start = state(to, t & 1 != 0);
    g.visited[start].store(stamp, Ordering::Relaxed);
    g.parent[start].store(0, Ordering::Relaxed);
    g.queue[0].store(start as u32, Ordering::Relaxed);
    let (mut head, mut tail) = (0usize, 1usize);
    while head < tail {
        let s = g.queue[head].load(Ordering::Relaxed) as usize;
        head += 1;
        g.steps.fetch_add(1, Ordering::Relaxed);
        let (c, r) = ((s / 2) as u32, s % 2 == 1);
        let mut ei = g.class(c).first_edge.load(Ordering::Relaxed);
        while ei != 0 {
            let e = g.edge(ei);
            let types = e.types.load(Ordering::Relaxed);
            let d = e.to.load(Ordering::Relaxed);
            for et in 0..4 {
                if types & (1 << et) == 0 {
                    continue;
                }
                // Not strong: a recursive read of `c` followed by `c` held shared.
                if r && et & 2 != 0 {
                    continue;
                }
                let nr = et & 1 != 0;
                let ns = state(d, nr);
                if d == from && !(nr && new_from_shared) {
                    g.parent[ns].store(
                        (s as u64) << 32 | u64::from(ei) << 2 | et as u64,
                        Ordering::Relaxed,
                    );
                    return Some((ns, start));
                }
                if within != 0 && order::Dag::rep(&ClassDag(g), d.into()) != u64::from(within) {
                    continue;
                }
                if g.visited[ns].load(Ordering::Relaxed) != stamp && tail < g.queue.len() {
                    g.visited[ns].store(stamp, Ordering::Relaxed);
                    g.parent[ns].store(
                        (s as u64) << 32 | u64::from(ei) << 2 | et as u64,
                        Ordering::Relaxed,
                    );
                    g.queue[tail].store(ns as u32, Ordering::Relaxed);
                    tail += 1;
                }
            }
            ei = e.next.load(Ordering::Relaxed);
        }
    }
    None
}

/// A fresh visit stamp for the class searches (graph lock).
pub(super) fn next_stamp(g: &Graph) -> u32 {
    let stamp = g.stamp.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    if stamp == 0 {
        // Wrapped: clear the stamps once every 4 billion searches.
        for v in g.visited {
            v.store(0, Ordering::Relaxed);
        }
        g.stamp.store(1, Ordering::Relaxed);
        1
    } else {
        stamp
    }
}

/// The class graph, for [`order`] (graph lock).
pub(super) struct ClassDag<'a>(&'a Graph);

impl ClassDag<'_> {
    /// Calls `f` on each member of the component represented by `r`.
    pub(super) fn members(&self, r: u32, mut f: impl FnMut(u32)) {
        let mut m = r;
        while m != 0 {
            f(m);
            m = self.0.class(m).next_member.load(Ordering::Relaxed);
        }
    }
}

impl order::Dag for ClassDag<'_> {
    fn rep(&self, n: u64) -> u64 {
        match self.0.class(n as u32).rep.load(Ordering::Relaxed) {
            0 => n,
            r => r.into(),
        }
    }
    fn merge(&self, r: u64, other: u64) {
        let mut tail = r as u32;
        self.members(r as u32, |m| tail = m);
        self.members(other as u32, |m| {
            self.0.class(m).rep.store(r as u32, Ordering::Relaxed)
        });
        self.0
            .class(tail)
            .next_member
            .store(other as u32, Ordering::Relaxed);
    }
    fn ord(&self, n: u64) -> u64 {
        self.0.class(n as u32).ord.load(Ordering::Relaxed)
    }
    fn set_ord(&self, n: u64, o: u64) {
        self.0.class(n as u32).ord.store(o, Ordering::Relaxed);
    }
    fn succ(&self, r: u64, f: &mut dyn FnMut(u64)) {
        self.members(r as u32, |m| {
            let mut ei = self.0.class(m).first_edge.load(Ordering::Relaxed);
            while ei != 0 {
                let e = self.0.edge(ei);
                f(e.to.load(Ordering::Relaxed).into());
                ei = e.next.load(Ordering::Relaxed);
            }
        });
    }
    fn pred(&self, r: u64, f: &mut dyn FnMut(u64)) {
        self.members(r as u32, |m| {
            let mut ei = self.0.class(m).first_in.load(Ordering::Relaxed);
            while ei != 0 {
                let e = self.0.edge(ei);
                f(e.from.load(Ordering::Relaxed).into());
                ei = e.next_in.load(Ordering::Relaxed);
            }
        });
    }
    fn visit(&self, n: u64, pass: u64) -> bool {
        // The search's stamps, state (class, not arrived by a recursive read).
        let v = &self.0.visited[n as usize * 2];
        if v.load(Ordering::Relaxed) == pass as u32 {
            return false;
        }
        v.store(pass as u32, Ordering::Relaxed);
        true
    }
    fn pass(&self) -> u64 {
        next_stamp(self.0).into()
    }
}

/// The same-class instance graph, for [`order`] (graph lock).
pub(super) struct InstDag<'a>(&'a Graph);

impl InstDag<'_> {
    /// Calls `f` on each member of the component represented by `r`.
    pub(super) fn members(&self, r: u64, mut f: impl FnMut(u64)) {
        let mut m = r;
        while m != 0 {
            f(m);
            m = self.0.inst_heads.get(m | 1 << 58).unwrap_or(0);
            if m == u64::MAX {
                m = 0;
            }
        }
    }
    /// Sets the instance's `tag` entry to `v`.
    pub(super) fn put(&self, key: u64, v: u64) {
        if let Some((_, false)) = self.0.inst_heads.get_or_insert(key, || v) {
            self.0.inst_heads.set(key, v);
        }
    }
}

impl order::Dag for InstDag<'_> {
    fn rep(&self, n: u64) -> u64 {
        self.0.inst_heads.get(n | 1 << 59).unwrap_or(n)
    }
    fn merge(&self, r: u64, other: u64) {
        let mut tail = r;
        self.members(r, |m| tail = m);
        self.members(other, |m| self.put(m | 1 << 59, r));
        self.put(tail | 1 << 58, other);
    }
    fn ord(&self, n: u64) -> u64 {
        let g = self.0;
        g.inst_heads
            .get_or_insert(n | 1 << 61, || {
                g.inst_ord_next.fetch_add(1, Ordering::Relaxed)
            })
            .map_or(u64::MAX, |(o, _)| o)
    }
    fn set_ord(&self, n: u64, o: u64) {
        self.0.inst_heads.set(n | 1 << 61, o);
    }
    fn succ(&self, r: u64, f: &mut dyn FnMut(u64)) {
        let g = self.0;
        self.members(r, |n| {
            let mut pi = match g.inst_heads.get(n | 1 << 63) {
                Some(v) if v != u64::MAX => v as u32,
                _ => 0,
            };
            while pi != 0 {
                let p = &g.pairs[pi as usize - 1];
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if a == n && b != 0 {
                    f(b);
                }
                pi = p.next.load(Ordering::Relaxed);
            }
        });
    }
    fn pred(&self, r: u64, f: &mut dyn FnMut(u64)) {
        let g = self.0;
        self.members(r, |n| {
            let mut pi = g.inst_heads.get(n | 1 << 62).unwrap_or(0) as u32;
            while pi != 0 {
                let p = &g.pairs[pi as usize - 1];
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if b == n && a != 0 {
                    f(a);
                }
                pi = p.next_in.load(Ordering::Relaxed);
            }
        });
    }
    fn visit(&self, n: u64, pass: u64) -> bool {
        match self.0.inst_heads.get_or_insert(n | 1 << 60, || pass) {
            Some((_, true)) => true,
            Some((v, false)) if v != pass => self.0.inst_heads.set(n | 1 << 60, pass),
            _ => false,
        }
    }
    fn pass(&self) -> u64 {
        self.0.inst_pass.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Nodes (classes and same-class instances) the validator's searches have looked at so far in this
/// process: a measure of the work its new dependencies cost, which grows about linearly with the
/// dependencies for any program (a new dependency that agrees with the graph's order costs none).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let before = locklab::lockdep::hooks::search_steps();
/// assert!(locklab::lockdep::hooks::search_steps() >= before);
/// ```
pub fn search_steps() -> u64 {
    graph().map_or(0, |g| g.steps.load(Ordering::Relaxed))
}

/// A path of existing dependencies, in order from the new lock back to the held one.
pub(super) struct Path {
    pub(super) steps: [Step; 32],
    pub(super) n: usize,
    /// Steps left out of a longer path.
    pub(super) more: usize,
}

impl Path {
    /// The path `start ~> end` from the search's parent links, in order (the last 32 steps of
    /// a longer one). In place, one array of 4-byte steps: this runs on the stack of whatever took
    /// the lock, a signal handler's small alternate stack included.
    pub(super) fn fill(&mut self, g: &Graph, end: usize, start: usize) {
        let (mut n, mut total) = (0, 0);
        let mut s = end;
        while s != start {
            let p = g.parent[s].load(Ordering::Relaxed);
            if n < 32 {
                // The edge index (+1) and type, as `search` packed them in the low half.
                self.steps[n] = Step(p as u32);
                n += 1;
            }
            total += 1;
            s = (p >> 32) as usize;
            if total > MAX_CLASSES * 2 {
                break;
            }
        }
        self.steps[..n].reverse();
        self.n = n;
        self.more = total - n;
    }
}

/// Two instances of one class held together: record the order, report the opposite order.
pub(super) fn same_class(g: &Graph, class: u32, h: &Held, obj: usize, site: usize) {
    if g.pairs_full.load(Ordering::Relaxed) {
        return;
    }
    let key = pair_key(h.obj, obj);
    if g.pair_keys.get(key).is_some() {
        return;
    }
    same_class_slow(g, class, h, obj, site, key);
}

pub(super) fn pair_key(a: usize, b: usize) -> u64 {
    table::mix(a as u64 ^ table::mix(b as u64).rotate_left(17)) | 1
}

#[cold]
#[inline(never)]
pub(super) fn same_class_slow(g: &Graph, class: u32, h: &Held, obj: usize, site: usize, key: u64) {
    if stale(h) {
        return;
    }
    if !g.lock() {
        return;
    }
    g.class(class)
        .flags
        .fetch_or(FLAG_NESTS_SELF, Ordering::Relaxed);
    if g.pair_keys.get(key).is_none() {
        // As for classes: an order that agrees with the instance graph's cannot close a cycle.
        let ordered = g.inst_order_ok.load(Ordering::Relaxed)
            && match order::add(&InstDag(g), &g.order, h.obj as u64, obj as u64, &g.steps) {
                order::Added::Ordered => true,
                order::Added::Inside | order::Added::Cycle => false,
                order::Added::TooBig => {
                    g.inst_order_ok.store(false, Ordering::Relaxed);
                    false
                }
            };
        let mut path = [0u32; 32];
        if !ordered
            && let Some(n) = instance_search(g, obj, h.obj, &mut path)
            && g.first_report(key ^ 0x5ca1e)
        {
            report::same_class(g, class, h, obj, site, &path[..n]);
        }
        let r = g.pair_keys.get_or_insert(key, || {
            let i = g.n_pairs.fetch_add(1, Ordering::Relaxed) + 1;
            if i as usize > MAX_PAIRS {
                g.pairs_full.store(true, Ordering::Relaxed);
                return u64::MAX;
            }
            let p = &g.pairs[i as usize - 1];
            p.a.store(h.obj as u64, Ordering::Relaxed);
            p.b.store(obj as u64, Ordering::Relaxed);
            p.held_site.store(h.site as u64, Ordering::Relaxed);
            p.acq_site.store(site as u64, Ordering::Relaxed);
            p.tid.store(report::tid(), Ordering::Relaxed);
            // Link it first in the list of pairs to `obj` (which also marks `obj` as in a pair,
            // for `forget_pairs`), and in the list of pairs from `h.obj`.
            match g
                .inst_heads
                .get_or_insert(obj as u64 | 1 << 62, || u64::from(i))
            {
                Some((_, true)) => {}
                Some((old, false)) => {
                    p.next_in.store(old as u32, Ordering::Relaxed);
                    g.inst_heads.set(obj as u64 | 1 << 62, u64::from(i));
                }
                None => say_full("instance"),
            }
            let head = g.inst_heads.get(h.obj as u64 | 1 << 63).unwrap_or(u64::MAX);
            p.next.store(
                if head == u64::MAX { 0 } else { head as u32 },
                Ordering::Relaxed,
            );
            match g
                .inst_heads
                .get_or_insert(h.obj as u64 | 1 << 63, || u64::from(i))
            {
                Some((_, true)) => {}
                Some(_) => {
                    g.inst_heads.set(h.obj as u64 | 1 << 63, u64::from(i));
                }
                None => say_full("instance"),
            }
            u64::from(i)
        });
        if matches!(r, None | Some((u64::MAX, _))) {
            say_full("instance-pair");
        }
    }
    g.unlock();
}

/// Searches the same-class instance orders for a path `from ~> to` (graph lock held): the new order
/// `to -> from` then closes a cycle. Writes the path's pair indices (+1) into `out`; the count.
pub(super) fn instance_search(
    g: &Graph,
    from: usize,
    to: usize,
    out: &mut [u32; 32],
) -> Option<usize> {
    // Queue entries: (instance, index of the entry it was reached from + 1, pair used).
    let q = g.inst_queue;
    let dag = InstDag(g);
    let pass = order::Dag::pass(&dag);
    order::Dag::visit(&dag, from as u64, pass);
    q[0].store(from as u64, Ordering::Relaxed);
    g.inst_parent[0].store(0, Ordering::Relaxed);
    let (mut head, mut tail) = (0usize, 1usize);
    while head < tail {
        let x = q[head].load(Ordering::Relaxed);
        g.steps.fetch_add(1, Ordering::Relaxed);
        let mut pi = match g.inst_heads.get(x | 1 << 63) {
            Some(v) if v != u64::MAX => v as u32,
            _ => 0,
        };
        while pi != 0 {
            let p = &g.pairs[pi as usize - 1];
            let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
            if a == x && b != 0 {
                if b == to as u64 {
                    // Walk back to the start.
                    let mut n = 0;
                    let mut rev = [0u32; 32];
                    rev[0] = pi;
                    n += 1;
                    let mut e = head;
                    while e != 0 && n < 32 {
                        let par = g.inst_parent[e].load(Ordering::Relaxed);
                        rev[n] = par as u32;
                        n += 1;
                        e = (par >> 32) as usize - 1;
                    }
                    for i in 0..n {
                        out[i] = rev[n - 1 - i];
                    }
                    return Some(n);
                }
                if tail < q.len() && order::Dag::visit(&dag, b, pass) {
                    q[tail].store(b, Ordering::Relaxed);
                    g.inst_parent[tail]
                        .store((head as u64 + 1) << 32 | u64::from(pi), Ordering::Relaxed);
                    tail += 1;
                }
            }
            pi = p.next.load(Ordering::Relaxed);
        }
        head += 1;
    }
    None
}

/// Forgets the instance pairs of a destroyed object (a later lock at its address is another lock).
pub(super) fn forget_pairs(g: &Graph, obj: usize) {
    let n = (g.n_pairs.load(Ordering::Relaxed) as usize).min(MAX_PAIRS);
    // Only an object that is in some pair costs a scan (most destroyed locks never nested).
    if n == 0
        || (g.inst_heads.get(obj as u64 | 1 << 63).is_none()
            && g.inst_heads.get(obj as u64 | 1 << 62).is_none())
    {
        return;
    }
    if !g.lock() {
        return;
    }
    // Its own pairs only: the list of those from it and the list of those to it.
    for (key, to) in [(obj as u64 | 1 << 63, false), (obj as u64 | 1 << 62, true)] {
        let mut pi = match g.inst_heads.get(key) {
            Some(v) if v != u64::MAX => v as u32,
            _ => 0,
        };
        while pi != 0 {
            let p = &g.pairs[pi as usize - 1];
            let end = if to { &p.b } else { &p.a };
            if end.load(Ordering::Relaxed) == obj as u64 {
                // A pair of addresses never used again as such (the key is left: tables only grow).
                p.a.store(0, Ordering::Relaxed);
                p.b.store(0, Ordering::Relaxed);
            }
            pi = if to { &p.next_in } else { &p.next }.load(Ordering::Relaxed);
        }
    }
    g.unlock();
}
