//! Composing a report: the text and JSON of each kind of problem (a cycle, a recursion, a misuse,
//! ...), written under the graph lock into the memory the store reserved for them (`Store`).

use super::*;

/// A report being composed (graph lock held by the caller or taken here).
struct Rep<'g> {
    g: &'g Graph,
    rec: Option<&'g Record>,
    text_start: usize,
    json_first_step: bool,
}

impl<'g> Rep<'g> {
    fn begin(g: &'g Graph, kind: ReportKind, title: &str, warning: bool) -> Rep<'g> {
        let s = &g.store;
        let i = s.n_records.load(Ordering::Relaxed);
        let rec = (i < MAX_RECORDS).then(|| &s.records[i]);
        if let Some(r) = rec {
            r.kind.store(kind as u8, Ordering::Relaxed);
            r.n_names.store(0, Ordering::Relaxed);
        }
        let text_start = s.text_len.load(Ordering::Relaxed);
        let rep = Rep {
            g,
            rec,
            text_start,
            json_first_step: true,
        };
        let _ = write!(
            rep.t(),
            "\n==== locklab lockdep: {}{} (pid {}, thread {}) ====\n",
            if warning { "warning: " } else { "" },
            title,
            pid(),
            tid()
        );
        let mut j = rep.j(false);
        let sep = if s.json_len.load(Ordering::Relaxed) == 0 {
            ""
        } else {
            ",\n"
        };
        let _ = write!(
            j,
            "{sep}{{\"kind\":\"{}\",\"pid\":{},\"tid\":{},\"message\":\"",
            kind.name(),
            pid(),
            tid()
        );
        let _ = rep.j(true).write_str(title);
        let _ = rep.j(false).write_str("\",\"chain\":[");
        rep
    }

    fn t(&self) -> Arena<'_> {
        Arena {
            buf: self.g.store.text,
            len: &self.g.store.text_len,
            json: false,
        }
    }

    fn j(&self, escape: bool) -> Arena<'_> {
        Arena {
            buf: self.g.store.json,
            len: &self.g.store.json_len,
            json: escape,
        }
    }

    /// Names class `id` in the text, and records it among the report's classes.
    fn class(&mut self, id: u32) {
        let start = self.g.store.text_len.load(Ordering::Relaxed);
        let _ = describe(&mut self.t(), self.g, id);
        let end = self.g.store.text_len.load(Ordering::Relaxed);
        if let Some(r) = self.rec {
            let k = r.n_names.load(Ordering::Relaxed) as usize;
            let dup = r.names[..k].iter().any(|x| {
                let (a, b) = (
                    x[0].load(Ordering::Relaxed) as usize,
                    x[1].load(Ordering::Relaxed) as usize,
                );
                read(self.g.store.text, a, b) == read(self.g.store.text, start, end)
            });
            if k < MAX_NAMES && !dup {
                r.names[k][0].store(start as u32, Ordering::Relaxed);
                r.names[k][1].store(end as u32, Ordering::Relaxed);
                r.n_names.store(k as u8 + 1, Ordering::Relaxed);
            }
        }
    }

    /// One step of a chain in the JSON: `held` (if any) then `acquired`.
    fn json_step(&mut self, held: Option<(u32, Mode, u64)>, acq: (u32, Mode, u64), tid: u32) {
        let sep = if self.json_first_step { "" } else { "," };
        self.json_first_step = false;
        let _ = write!(self.j(false), "{sep}{{");
        let part = |rep: &mut Self, name: &str, (c, m, s): (u32, Mode, u64)| {
            let _ = write!(rep.j(false), "\"{name}\":{{\"class\":{c},\"name\":\"");
            let _ = describe(&mut rep.j(true), rep.g, c);
            let _ = write!(rep.j(false), "\",\"mode\":\"{}\",\"site\":\"", m.name());
            let _ = site(&mut rep.j(true), s);
            let _ = rep.j(false).write_str("\"},");
        };
        if let Some(h) = held {
            part(self, "held", h);
        }
        part(self, "acquired", acq);
        let _ = write!(self.j(false), "\"tid\":{tid}}}");
    }

    fn end(self) {
        let s = &self.g.store;
        let _ = write!(self.j(false), "],\"classes\":[");
        if let Some(r) = self.rec {
            let k = r.n_names.load(Ordering::Relaxed) as usize;
            for (i, x) in r.names[..k].iter().enumerate() {
                let (a, b) = (
                    x[0].load(Ordering::Relaxed) as usize,
                    x[1].load(Ordering::Relaxed) as usize,
                );
                let name = read(s.text, a, b);
                let _ = self.j(false).write_str(if i == 0 { "\"" } else { ",\"" });
                let _ = write!(self.j(true), "{}", Lossy(&name));
                let _ = self.j(false).write_str("\"");
            }
        }
        let _ = self.j(false).write_str("]}");
        let end = s.text_len.load(Ordering::Relaxed);
        if let Some(r) = self.rec {
            r.text[0].store(self.text_start as u32, Ordering::Relaxed);
            r.text[1].store(end as u32, Ordering::Relaxed);
            // Release: the record is complete before it is counted (readers hold the graph lock
            // too; this keeps `report_count`'s lock-free read honest).
            s.n_records.fetch_add(1, Ordering::Release);
        }
        // Print what was composed (a full arena prints nothing more, but still counts).
        let text = read(s.text, self.text_start, end);
        to_stderr(&text);
        if mode() == Action::Abort {
            // The report reaches the output file before the process ends (the lock is held:
            // the composed report is complete, and no other report can start meanwhile).
            #[cfg(unix)]
            run_abort_hook(self.g);
            to_stderr(b"locklab lockdep: aborting (LOCKLAB_LOCKDEP=abort)\n");
            std::process::abort();
        }
    }
}

/// `rwlock #3 "created at f+0x1c (prog)"`.
fn describe(w: &mut dyn Write, g: &Graph, id: u32) -> fmt::Result {
    let c: &ClassInfo = g.class(id);
    let named = c.named.load(Ordering::Relaxed) as usize;
    if named != 0 {
        // SAFETY: a named class's `named` is the address of a `&'static LockClass`.
        let lc =
            unsafe { &*core::ptr::with_exposed_provenance::<crate::lockdep::LockClass>(named) };
        write!(w, "class #{id} \"{}\"", lc.name())?;
    } else {
        write!(w, "{} #{id} (", c.kind().name())?;
        match c.origin() {
            1 => w.write_str("created at ")?,
            2 => w.write_str("first locked at ")?,
            _ => {
                // An RCU domain's key is its address with the top bit flipped.
                let key = c.key.load(Ordering::Relaxed) & !(0xff << 56);
                return write!(w, "the domain at {key:#x})");
            }
        }
        site(w, c.site.load(Ordering::Relaxed))?;
        for f in &c.from {
            let f = f.load(Ordering::Relaxed);
            if f != 0 {
                w.write_str(" from ")?;
                site(w, f)?;
            }
        }
        w.write_str(")")?;
    }
    if c.subclass() != 0 {
        write!(w, "/{}", c.subclass())?;
    }
    Ok(())
}

fn with_lock(g: &Graph, held: bool, f: impl FnOnce()) {
    if !held && !g.lock() {
        return;
    }
    f();
    if !held {
        g.unlock();
    }
}

/// A circular dependency: the new `h -> class` closes `path` (graph lock held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn cycle(
    g: &Graph,
    h: &Held,
    class: u32,
    acq_mode: Mode,
    acq_site: usize,
    path: &Path,
) {
    let rcu = g.class(class).kind() == Kind::Rcu
        || g.class(h.class).kind() == Kind::Rcu
        || path.steps[..path.n]
            .iter()
            .any(|s| g.class(g.edge(s.edge()).to.load(Ordering::Relaxed)).kind() == Kind::Rcu);
    let title = if rcu {
        "possible deadlock through an RCU grace period (a lock held across synchronize is taken in a reader)"
    } else {
        "possible circular locking dependency (a deadlock that did not happen this time)"
    };
    let mut r = Rep::begin(g, ReportKind::Cycle, title, false);
    let held_mode = Mode::from_u8(h.mode);
    let _ = r.t().write_str("thread is taking     ");
    r.class(class);
    let _ = write!(r.t(), " ({})\n  at ", acq_mode.name());
    let _ = site(&mut r.t(), acq_site as u64);
    let _ = r.t().write_str("\nwhile holding        ");
    r.class(h.class);
    let _ = write!(r.t(), " ({}), taken at ", held_mode.name());
    let _ = site(&mut r.t(), h.site as u64);
    let _ = write!(
        r.t(),
        "\nand the opposite order was seen before. The cycle, each step \"held -> taken\" with \
         where each lock was taken:\n  [now]  "
    );
    r.class(h.class);
    let _ = r.t().write_str(" -> ");
    r.class(class);
    let _ = r.t().write_str("\n         held since ");
    let _ = site(&mut r.t(), h.site as u64);
    let _ = r.t().write_str(", taking at ");
    let _ = site(&mut r.t(), acq_site as u64);
    let _ = writeln!(r.t(), " (thread {})", tid());
    r.json_step(
        Some((h.class, held_mode, h.site as u64)),
        (class, acq_mode, acq_site as u64),
        tid(),
    );
    for s in &path.steps[..path.n] {
        let e = g.edge(s.edge());
        let (from, to) = (e.from.load(Ordering::Relaxed), e.to.load(Ordering::Relaxed));
        let es = &e.sites[s.t()];
        let (hs, as_, et) = (
            es.held_site.load(Ordering::Relaxed),
            es.acq_site.load(Ordering::Relaxed),
            es.tid.load(Ordering::Relaxed),
        );
        let _ = r.t().write_str("  [seen] ");
        r.class(from);
        let _ = r.t().write_str(" -> ");
        r.class(to);
        let fm = if s.t() & 2 != 0 {
            Mode::Read
        } else {
            Mode::Write
        };
        let tm = mode_of(s.t() & 1, Mode::Write);
        let _ = write!(r.t(), "\n         held ({}) since ", fm.name());
        let _ = site(&mut r.t(), hs);
        let _ = write!(r.t(), ", took ({}) at ", tm.name());
        let _ = site(&mut r.t(), as_);
        let _ = writeln!(r.t(), " (thread {et})");
        r.json_step(Some((from, fm, hs)), (to, tm, as_), et);
    }
    if path.more > 0 {
        let _ = writeln!(r.t(), "  ... and {} more steps", path.more);
    }
    let _ = r.t().write_str(
        "Threads taking these locks in these orders at the same time can each wait for the next, \
         for ever.\n",
    );
    r.end();
}

fn mode_of(recursive_read: usize, otherwise: Mode) -> Mode {
    if recursive_read != 0 {
        Mode::RecursiveRead
    } else {
        otherwise
    }
}

/// A lock taken again by its holder (graph lock not held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn recursion(g: &Graph, class: u32, h: Held, mode: Mode, site_now: usize) {
    if !g.first_report(table::mix(
        u64::from(class) ^ (site_now as u64).rotate_left(7) ^ 0x5e1f,
    )) {
        return;
    }
    with_lock(g, false, || {
        let rcu = g.class(class).kind() == Kind::Rcu;
        let (kind, title) = if rcu {
            (
                ReportKind::RcuSyncInReader,
                "synchronize (or barrier) inside a read-side critical section of the same RCU domain",
            )
        } else {
            (
                ReportKind::Recursion,
                "possible recursive locking (this thread would wait for itself)",
            )
        };
        let mut r = Rep::begin(g, kind, title, false);
        let _ = r.t().write_str("thread is taking     ");
        r.class(class);
        let _ = write!(r.t(), " ({}) at ", mode.name());
        let _ = site(&mut r.t(), site_now as u64);
        let _ = write!(
            r.t(),
            "\nbut already holds it ({}), taken at ",
            Mode::from_u8(h.mode).name()
        );
        let _ = site(&mut r.t(), h.site as u64);
        let _ = r.t().write_str("\n");
        r.json_step(
            Some((class, Mode::from_u8(h.mode), h.site as u64)),
            (class, mode, site_now as u64),
            tid(),
        );
        r.end();
    });
}

/// A recursive read of a writer-preferring class that writers take (graph lock not held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn recursive_read(g: &Graph, class: u32) {
    with_lock(g, false, || {
        let c = g.class(class);
        let (hs, rs, ws) = (
            c.rr_held.load(Ordering::Relaxed),
            c.rr_site.load(Ordering::Relaxed),
            c.write_site.load(Ordering::Relaxed),
        );
        let mut r = Rep::begin(
            g,
            ReportKind::RecursiveRead,
            "possible deadlock: recursive read of a writer-preferring rwlock",
            false,
        );
        let _ = r.t().write_str("a thread took        ");
        r.class(class);
        let _ = r.t().write_str(" for reading at ");
        let _ = site(&mut r.t(), rs);
        let _ = r
            .t()
            .write_str("\nwhile it already held it for reading, taken at ");
        let _ = site(&mut r.t(), hs);
        if ws != 0 {
            let _ = r.t().write_str("\nand writers take it, e.g. at ");
            let _ = site(&mut r.t(), ws);
        }
        let _ = r.t().write_str(
            "\nA writer that queues between the two reads blocks the second one (the lock prefers \
             writers) and itself waits for the first: both wait for ever.\n",
        );
        r.json_step(Some((class, Mode::Read, hs)), (class, Mode::Read, rs), 0);
        if ws != 0 {
            r.json_step(None, (class, Mode::Write, ws), 0);
        }
        r.end();
    });
}

/// Instances of one class taken in a cycle: the new `h.obj -> obj` closes the earlier orders
/// `pairs` (indices + 1), which lead from `obj` back to `h.obj` (graph lock held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn same_class(
    g: &Graph,
    class: u32,
    h: &Held,
    obj: usize,
    site_now: usize,
    pairs: &[u32],
) {
    let mut r = Rep::begin(
        g,
        ReportKind::SameClassOrder,
        "possible deadlock: locks of one class taken in a cycle of orders",
        false,
    );
    let _ = r.t().write_str("class                ");
    r.class(class);
    let _ = write!(
        r.t(),
        "
  [now]  holding {:#x} (taken at ",
        h.obj
    );
    let _ = site(&mut r.t(), h.site as u64);
    let _ = write!(r.t(), "), taking {obj:#x} at ");
    let _ = site(&mut r.t(), site_now as u64);
    let _ = writeln!(r.t(), " (thread {})", tid());
    r.json_step(
        Some((class, Mode::from_u8(h.mode), h.site as u64)),
        (class, Mode::Write, site_now as u64),
        tid(),
    );
    for &pi in pairs {
        let p: &Pair = &g.pairs[pi as usize - 1];
        let (a, b, hs, as_, pt) = (
            p.a.load(Ordering::Relaxed),
            p.b.load(Ordering::Relaxed),
            p.held_site.load(Ordering::Relaxed),
            p.acq_site.load(Ordering::Relaxed),
            p.tid.load(Ordering::Relaxed),
        );
        let _ = write!(r.t(), "  [seen] holding {a:#x} (taken at ");
        let _ = site(&mut r.t(), hs);
        let _ = write!(r.t(), "), took {b:#x} at ");
        let _ = site(&mut r.t(), as_);
        let _ = writeln!(r.t(), " (thread {pt})");
        r.json_step(
            Some((class, Mode::Write, hs)),
            (class, Mode::Write, as_),
            pt,
        );
    }
    let _ = r.t().write_str(
        "Instances of one class are checked by address (the class has no order of its own): \
         these orders form a cycle.\n",
    );
    r.end();
}

/// Misuse of one lock (graph lock not held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn misuse(
    g: &Graph,
    kind: ReportKind,
    title: &str,
    class: u32,
    obj: usize,
    site_now: usize,
    held: Option<&Held>,
) {
    with_lock(g, false, || {
        let mut r = Rep::begin(g, kind, title, false);
        let _ = r.t().write_str("lock                 ");
        r.class(class);
        let _ = write!(r.t(), " at {obj:#x}\n  at ");
        let _ = site(&mut r.t(), site_now as u64);
        if let Some(h) = held {
            let _ = r.t().write_str("\n  held since ");
            let _ = site(&mut r.t(), h.site as u64);
        }
        let _ = r.t().write_str("\n");
        r.json_step(
            held.map(|h| (class, Mode::from_u8(h.mode), h.site as u64)),
            (class, Mode::Write, site_now as u64),
            tid(),
        );
        r.end();
    });
}

/// A condvar wait with another lock held (graph lock not held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn cond_wait(
    g: &Graph,
    other: &Held,
    mclass: u32,
    cond: usize,
    site_now: usize,
) {
    with_lock(g, false, || {
        let mut r = Rep::begin(
            g,
            ReportKind::CondWaitHolding,
            "condition variable wait with another lock held",
            true,
        );
        let _ = write!(r.t(), "waiting on the condvar at {cond:#x} at ");
        let _ = site(&mut r.t(), site_now as u64);
        if mclass != 0 {
            let _ = r.t().write_str("\n  releasing          ");
            r.class(mclass);
        }
        let _ = r.t().write_str("\n  but still holding  ");
        r.class(other.class);
        let _ = r.t().write_str(", taken at ");
        let _ = site(&mut r.t(), other.site as u64);
        let _ = r
            .t()
            .write_str("\nWhoever must take that lock to signal this condvar waits for ever.\n");
        r.json_step(
            Some((other.class, Mode::from_u8(other.mode), other.site as u64)),
            (mclass, Mode::Write, site_now as u64),
            tid(),
        );
        r.end();
    });
}

/// A class taken in a handler of `sig` and held where `sig` is not blocked (graph lock not held).
#[cold]
#[inline(never)]
pub(in crate::lockdep) fn signal(g: &Graph, class: u32, sig: i32) {
    with_lock(g, false, || {
        let c = g.class(class);
        let (ins, outs) = (
            c.sig_in_site.load(Ordering::Relaxed),
            c.sig_out_site.load(Ordering::Relaxed),
        );
        let mut r = Rep::begin(
            g,
            ReportKind::SignalUnsafe,
            "lock taken in a signal handler is also held where that signal can arrive",
            false,
        );
        let _ = r.t().write_str("lock                 ");
        r.class(class);
        let _ = write!(r.t(), "\n  taken in a handler of signal {sig} at ");
        let _ = site(&mut r.t(), ins);
        let _ = r
            .t()
            .write_str("\n  held with that signal unblocked, taken at ");
        let _ = site(&mut r.t(), outs);
        let _ = r.t().write_str(
            "\nIf the signal arrives while the lock is held, the handler waits for its own thread.\n",
        );
        r.json_step(None, (class, Mode::Write, outs), 0);
        r.json_step(None, (class, Mode::Write, ins), 0);
        r.end();
    });
}
