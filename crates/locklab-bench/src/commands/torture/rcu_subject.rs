//! rcutorture: the RCU subjects (memb RCU, SRCU, and the busted grace periods the checks must
//! catch), their published objects and the pool that reuses them.

use super::*;

/// The domains RCU torture runs in (its own: no other reader holds up their grace periods).
pub(super) static TORTURE_RCU: locklab::rcu::RcuDomain = locklab::rcu::RcuDomain::new();
pub(super) static TORTURE_SRCU: locklab::rcu::SrcuDomain = locklab::rcu::SrcuDomain::new();

/// How long `busted-rcu-early`'s grace period lasts: a fixed wait, long enough to cover most
/// sections (a few hundred ns), too short for the readers that hold theirs (`RCU_LONG_READ`).
pub(super) const EARLY_GP: Duration = Duration::from_micros(50);
/// A reader holds its section this long one time in [`RCU_LONG_EVERY`], so that sections span grace
/// periods (the pipe's 1 and 2 buckets) and an early end is seen.
pub(super) const RCU_LONG_READ: Duration = Duration::from_micros(300);
pub(super) const RCU_LONG_EVERY: u64 = 32;
/// Grace periods a dead object waits in the pool before it is reused (a freed object recycled at
/// once would look live again to a reader that holds it: delaying reuse lets the reader see it dead).
pub(super) const REUSE_AFTER_GPS: u64 = 4;

/// An object published under RCU torture. Never freed (leaked: a broken RCU must not make the check
/// itself undefined behaviour); "freed" is the `dead` mark, set where a real free would happen, and a
/// dead object goes back to a pool that writers reuse (what an allocator would do), after
/// [`REUSE_AFTER_GPS`] grace periods, so memory stays bounded.
pub(super) struct RcuObj {
    id: AtomicU64,
    /// Completed grace periods when it was unpublished (`u64::MAX` while published).
    retired_at: AtomicU64,
    /// Its grace period is over: a real RCU user would have freed it now.
    dead: AtomicBool,
}

/// Which RCU `rcu_subject` tortures.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RcuFlavour {
    /// Ours, memb flavour (`rcu`).
    Memb,
    /// Ours, SRCU (`srcu`): readers may sleep inside their sections.
    Srcu,
    /// Grace periods that do not wait at all (`busted-rcu`).
    BustedNoWait,
    /// Grace periods that end after a short fixed wait (`busted-rcu-early`).
    BustedEarly,
}

/// Frees (marks dead) an object when dropped: the `defer_drop` path's payload.
pub(super) struct Killer(Option<Box<dyn FnOnce() + Send>>);

impl Drop for Killer {
    fn drop(&mut self) {
        if let Some(k) = self.0.take() {
            k();
        }
    }
}

/// rcutorture for our RCU (`rcu`: memb; `srcu`), or for a busted one (`busted-rcu`: grace periods
/// that do not wait; `busted-rcu-early`: grace periods that end after a short fixed wait), which the
/// checks must catch.
///
/// Readers (even workers) take a read-side section, load the published object and its id, work (or
/// hold the section for [`RCU_LONG_READ`] now and then, or sleep under `long-holds`), and check,
/// still inside: the object is not dead, it is still the object loaded (same id: not freed and
/// reused), and at most 2 grace periods completed since it was unpublished (a reader's section can
/// span only the grace period in progress when it began: ages 0 and 1 are normal, 2 is
/// rcutorture's tolerance, more is a failure). Ages go into the pipe histogram. Writers (odd
/// workers) publish a new object and retire the old one by one of the flavour's paths, chosen at
/// random: `synchronize` then marking it dead, the expedited form, `call_rcu` of the marking,
/// `defer_drop` of a value whose drop marks it, a polled grace period (`start_poll_synchronize` then
/// polling), `get_state_synchronize` then `cond_synchronize`, or `call_rcu` then the barrier. At the
/// end the barrier must have run every callback: every retired object is dead. Every path must have
/// run.
pub(super) fn rcu_subject(flavour: RcuFlavour) -> Subject {
    use std::collections::VecDeque;
    use std::sync::atomic::Ordering::SeqCst;
    struct State {
        cur: std::sync::atomic::AtomicPtr<RcuObj>,
        next_id: AtomicU64,
        retired: AtomicU64,
        killed: Arc<AtomicU64>,
        /// The busted RCUs' fake grace-period count.
        fake_gp: Arc<AtomicU64>,
        /// Dead objects, with the grace-period count at their death, ready for reuse later.
        pool: Arc<StdMutex<VecDeque<(u64, &'static RcuObj)>>>,
    }
    let busted = matches!(flavour, RcuFlavour::BustedNoWait | RcuFlavour::BustedEarly);
    let d = &TORTURE_RCU;
    let sd = &TORTURE_SRCU;
    let gps_of = move |fake: &AtomicU64| match flavour {
        RcuFlavour::Memb => d.grace_periods(),
        RcuFlavour::Srcu => sd.grace_periods(),
        _ => fake.load(SeqCst),
    };
    fn leak(id: u64) -> *mut RcuObj {
        Box::into_raw(Box::new(RcuObj {
            id: AtomicU64::new(id),
            retired_at: AtomicU64::new(u64::MAX),
            dead: AtomicBool::new(false),
        }))
    }
    let fresh = move |st: &State| -> *mut RcuObj {
        let id = st.next_id.fetch_add(1, Relaxed);
        let now = gps_of(&st.fake_gp);
        let mut pool = st.pool.lock().unwrap();
        match pool.front() {
            Some(&(died, o)) if now >= died + REUSE_AFTER_GPS => {
                pool.pop_front();
                o.id.store(id, SeqCst);
                o.retired_at.store(u64::MAX, SeqCst);
                o.dead.store(false, SeqCst);
                o as *const RcuObj as *mut RcuObj
            }
            _ => leak(id),
        }
    };
    let st = Arc::new(State {
        cur: std::sync::atomic::AtomicPtr::new(leak(0)),
        next_id: AtomicU64::new(1),
        retired: AtomicU64::new(0),
        killed: Arc::new(AtomicU64::new(0)),
        fake_gp: Arc::new(AtomicU64::new(0)),
        pool: Arc::new(StdMutex::new(VecDeque::new())),
    });
    let names: &[&'static str] = match flavour {
        RcuFlavour::Memb => &[
            "synchronize",
            "expedited",
            "call_rcu",
            "defer_drop",
            "polled",
            "cond",
            "barrier",
        ],
        RcuFlavour::Srcu => &[
            "synchronize",
            "call_srcu",
            "defer_drop",
            "polled",
            "cond",
            "barrier",
            "down_read",
        ],
        _ => &["early"],
    };
    let paths = Paths::new(names);
    let pipe: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let (st1, st2, st3, pipe2, pw, pr) = (
        st.clone(),
        st.clone(),
        st.clone(),
        pipe.clone(),
        paths.clone(),
        paths.clone(),
    );
    Subject {
        name: match flavour {
            RcuFlavour::Memb => "rcu",
            RcuFlavour::Srcu => "srcu",
            RcuFlavour::BustedNoWait => "busted-rcu",
            RcuFlavour::BustedEarly => "busted-rcu-early",
        },
        write: Box::new(move |op| {
            let st = &*st1;
            let new = fresh(st);
            // SAFETY (of the deref below): objects are leaked, never freed.
            let old = unsafe { &*st.cur.swap(new, std::sync::atomic::Ordering::AcqRel) };
            old.retired_at.store(gps_of(&st.fake_gp), SeqCst);
            st.retired.fetch_add(1, Relaxed);
            let (killed, pool, fake) = (st.killed.clone(), st.pool.clone(), st.fake_gp.clone());
            let kill = move || {
                old.dead.store(true, SeqCst);
                killed.fetch_add(1, Relaxed);
                let died = match flavour {
                    RcuFlavour::Memb => d.grace_periods(),
                    RcuFlavour::Srcu => sd.grace_periods(),
                    _ => fake.load(SeqCst),
                };
                pool.lock().unwrap().push_back((died, old));
            };
            let poll = |done: &dyn Fn() -> bool| {
                while !done() {
                    std::thread::sleep(Duration::from_micros(50));
                }
            };
            match flavour {
                RcuFlavour::BustedNoWait | RcuFlavour::BustedEarly => {
                    if flavour == RcuFlavour::BustedEarly {
                        std::thread::sleep(EARLY_GP);
                    }
                    st.fake_gp.fetch_add(1, SeqCst);
                    pw.hit("early");
                    kill();
                }
                RcuFlavour::Memb => match op.roll % 8 {
                    0 => {
                        pw.hit("synchronize");
                        d.synchronize();
                        kill();
                    }
                    1 => {
                        pw.hit("expedited");
                        d.synchronize_expedited();
                        kill();
                    }
                    2 => {
                        pw.hit("defer_drop");
                        d.defer_drop(Box::new(Killer(Some(Box::new(kill)))));
                    }
                    3 => {
                        pw.hit("polled");
                        let c = d.start_poll_synchronize();
                        poll(&|| d.poll_state_synchronize(c));
                        kill();
                    }
                    4 => {
                        pw.hit("cond");
                        let c = d.get_state_synchronize();
                        d.cond_synchronize(c);
                        kill();
                    }
                    5 if op.roll % 64 == 5 => {
                        pw.hit("barrier");
                        d.call_rcu(kill);
                        d.rcu_barrier();
                    }
                    _ => {
                        pw.hit("call_rcu");
                        d.call_rcu(kill);
                    }
                },
                RcuFlavour::Srcu => match op.roll % 8 {
                    0 | 1 => {
                        pw.hit("synchronize");
                        sd.synchronize();
                        kill();
                    }
                    2 => {
                        pw.hit("defer_drop");
                        sd.defer_drop(Box::new(Killer(Some(Box::new(kill)))));
                    }
                    3 => {
                        pw.hit("polled");
                        let c = sd.start_poll_synchronize();
                        poll(&|| sd.poll_state_synchronize(c));
                        kill();
                    }
                    4 => {
                        pw.hit("cond");
                        let c = sd.get_state_synchronize();
                        sd.cond_synchronize(c);
                        kill();
                    }
                    5 if op.roll % 64 == 5 => {
                        pw.hit("barrier");
                        sd.call_srcu(kill);
                        sd.srcu_barrier();
                    }
                    _ => {
                        pw.hit("call_srcu");
                        sd.call_srcu(kill);
                    }
                },
            }
            Ok(())
        }),
        read: Some(Box::new(move |op| {
            let st = &*st2;
            // The section: memb, or SRCU (sometimes a `down_read` section).
            enum G {
                Memb(#[allow(dead_code)] locklab::rcu::RcuReadGuard),
                Srcu(#[allow(dead_code)] locklab::rcu::SrcuReadGuard),
                Down(#[allow(dead_code)] locklab::rcu::SrcuDownGuard),
            }
            let g = match flavour {
                RcuFlavour::Srcu if op.roll % 8 == 7 => {
                    pr.hit("down_read");
                    G::Down(sd.down_read())
                }
                RcuFlavour::Srcu => G::Srcu(sd.read_lock()),
                _ => G::Memb(d.read_lock()),
            };
            // SAFETY: objects are leaked, never freed.
            let o = unsafe { &*st.cur.load(std::sync::atomic::Ordering::Acquire) };
            let id = o.id.load(SeqCst);
            match op.hold {
                Some(t) => std::thread::sleep(t),
                None if op.roll % RCU_LONG_EVERY == 3 => std::thread::sleep(RCU_LONG_READ),
                None => work(20),
            }
            let dead = o.dead.load(SeqCst);
            let id_now = o.id.load(SeqCst);
            let retired = o.retired_at.load(SeqCst);
            let now = gps_of(&st.fake_gp);
            drop(g);
            let age = if retired == u64::MAX {
                0
            } else {
                now.saturating_sub(retired)
            };
            pipe2[age.min(3) as usize].fetch_add(1, Relaxed);
            if dead {
                return Err(format!(
                    "reader saw object {id} freed under it (its grace period ended early)"
                ));
            }
            if id_now != id {
                return Err(format!(
                    "reader's object {id} was freed and reused as {id_now} under it"
                ));
            }
            if age > 2 {
                return Err(format!(
                    "reader held object {id} across {age} grace periods"
                ));
            }
            Ok(())
        })),
        forget: None,
        finish: Some(Box::new(move || {
            match flavour {
                RcuFlavour::Memb => d.rcu_barrier(),
                RcuFlavour::Srcu => sd.srcu_barrier(),
                _ => {}
            }
            let (r, k) = (st3.retired.load(Relaxed), st3.killed.load(Relaxed));
            if r != k {
                return Err(format!(
                    "{r} objects retired but {k} freed after the barrier (lost callbacks)"
                ));
            }
            Ok(())
        })),
        stop: None,
        pipe: Some(pipe),
        paths: (!busted).then_some(paths),
    }
}
