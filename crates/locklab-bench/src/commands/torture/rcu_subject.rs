//! rcutorture: the RCU subjects (memb RCU, SRCU, and the busted grace periods the checks must
//! catch), their published objects and the pool that reuses them.

use super::*;
use std::sync::atomic::Ordering::SeqCst;

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
    let busted = matches!(flavour, RcuFlavour::BustedNoWait | RcuFlavour::BustedEarly);
    let st = Arc::new(RcuState::new(flavour));
    let (st1, st2, st3) = (st.clone(), st.clone(), st.clone());
    Subject {
        name: match flavour {
            RcuFlavour::Memb => "rcu",
            RcuFlavour::Srcu => "srcu",
            RcuFlavour::BustedNoWait => "busted-rcu",
            RcuFlavour::BustedEarly => "busted-rcu-early",
        },
        write: Box::new(move |op| st1.write(&op)),
        read: Some(Box::new(move |op| st2.read(&op))),
        forget: None,
        finish: Some(Box::new(move || st3.finish())),
        stop: None,
        pipe: Some(st.pipe.clone()),
        paths: (!busted).then_some(st.paths.clone()),
    }
}

/// Dead objects, with the grace-period count at their death, ready for reuse later.
type Pool = Arc<StdMutex<std::collections::VecDeque<(u64, &'static RcuObj)>>>;

/// What RCU torture's readers and writers share.
struct RcuState {
    /// The RCU under torture.
    flavour: RcuFlavour,
    /// The published object.
    cur: std::sync::atomic::AtomicPtr<RcuObj>,
    next_id: AtomicU64,
    retired: AtomicU64,
    killed: Arc<AtomicU64>,
    /// The busted RCUs' fake grace-period count.
    fake_gp: Arc<AtomicU64>,
    pool: Pool,
    /// The flavour's paths and how often each ran.
    paths: Arc<Paths>,
    /// Readers' ages (in grace periods) of the objects they saw.
    pipe: Arc<[AtomicU64; 4]>,
}

/// A new object, leaked (never freed).
fn leak(id: u64) -> *mut RcuObj {
    Box::into_raw(Box::new(RcuObj {
        id: AtomicU64::new(id),
        retired_at: AtomicU64::new(u64::MAX),
        dead: AtomicBool::new(false),
    }))
}

/// The completed grace periods of `flavour` (the busted ones': `fake`).
fn grace_periods(flavour: RcuFlavour, fake: &AtomicU64) -> u64 {
    match flavour {
        RcuFlavour::Memb => TORTURE_RCU.grace_periods(),
        RcuFlavour::Srcu => TORTURE_SRCU.grace_periods(),
        _ => fake.load(SeqCst),
    }
}

/// Waits until `done`, polling.
fn poll(done: &dyn Fn() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_micros(50));
    }
}

impl RcuState {
    /// Object 0 published, nothing retired, no path run.
    fn new(flavour: RcuFlavour) -> Self {
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
        RcuState {
            flavour,
            cur: std::sync::atomic::AtomicPtr::new(leak(0)),
            next_id: AtomicU64::new(1),
            retired: AtomicU64::new(0),
            killed: Arc::new(AtomicU64::new(0)),
            fake_gp: Arc::new(AtomicU64::new(0)),
            pool: Arc::new(StdMutex::new(std::collections::VecDeque::new())),
            paths: Paths::new(names),
            pipe: Arc::new(Default::default()),
        }
    }

    /// The completed grace periods.
    fn gps(&self) -> u64 {
        grace_periods(self.flavour, &self.fake_gp)
    }

    /// An object to publish: a dead one from the pool, if it died long enough ago, else a new one.
    fn fresh(&self) -> *mut RcuObj {
        let id = self.next_id.fetch_add(1, Relaxed);
        let now = self.gps();
        let mut pool = self.pool.lock().unwrap();
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
    }

    /// One writer operation: publish a new object, retire the old one by a path chosen by
    /// `op.roll`.
    fn write(&self, op: &Op) -> Result<(), String> {
        let new = self.fresh();
        // SAFETY (of the deref below): objects are leaked, never freed.
        let old = unsafe { &*self.cur.swap(new, std::sync::atomic::Ordering::AcqRel) };
        old.retired_at.store(self.gps(), SeqCst);
        self.retired.fetch_add(1, Relaxed);
        let (killed, pool, fake) = (self.killed.clone(), self.pool.clone(), self.fake_gp.clone());
        let flavour = self.flavour;
        let kill = move || {
            old.dead.store(true, SeqCst);
            killed.fetch_add(1, Relaxed);
            let died = grace_periods(flavour, &fake);
            pool.lock().unwrap().push_back((died, old));
        };
        match flavour {
            RcuFlavour::BustedNoWait | RcuFlavour::BustedEarly => {
                if flavour == RcuFlavour::BustedEarly {
                    std::thread::sleep(EARLY_GP);
                }
                self.fake_gp.fetch_add(1, SeqCst);
                self.paths.hit("early");
                kill();
            }
            RcuFlavour::Memb => self.retire_memb(op.roll, kill),
            RcuFlavour::Srcu => self.retire_srcu(op.roll, kill),
        }
        Ok(())
    }

    /// Retires an object under memb RCU by the path `roll` picks; `kill` marks it dead.
    fn retire_memb(&self, roll: u64, kill: impl FnOnce() + Send + 'static) {
        let (d, pw) = (&TORTURE_RCU, &self.paths);
        match roll % 8 {
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
            5 if roll % 64 == 5 => {
                pw.hit("barrier");
                d.call_rcu(kill);
                d.rcu_barrier();
            }
            _ => {
                pw.hit("call_rcu");
                d.call_rcu(kill);
            }
        }
    }

    /// Retires an object under SRCU by the path `roll` picks; `kill` marks it dead.
    fn retire_srcu(&self, roll: u64, kill: impl FnOnce() + Send + 'static) {
        let (sd, pw) = (&TORTURE_SRCU, &self.paths);
        match roll % 8 {
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
            5 if roll % 64 == 5 => {
                pw.hit("barrier");
                sd.call_srcu(kill);
                sd.srcu_barrier();
            }
            _ => {
                pw.hit("call_srcu");
                sd.call_srcu(kill);
            }
        }
    }

    /// One reader operation: a read-side section over the published object, checked inside.
    fn read(&self, op: &Op) -> Result<(), String> {
        let (d, sd) = (&TORTURE_RCU, &TORTURE_SRCU);
        // The section: memb, or SRCU (sometimes a `down_read` section).
        enum G {
            Memb(#[allow(dead_code)] locklab::rcu::RcuReadGuard),
            Srcu(#[allow(dead_code)] locklab::rcu::SrcuReadGuard),
            Down(#[allow(dead_code)] locklab::rcu::SrcuDownGuard),
        }
        let g = match self.flavour {
            RcuFlavour::Srcu if op.roll % 8 == 7 => {
                self.paths.hit("down_read");
                G::Down(sd.down_read())
            }
            RcuFlavour::Srcu => G::Srcu(sd.read_lock()),
            _ => G::Memb(d.read_lock()),
        };
        // SAFETY: objects are leaked, never freed.
        let o = unsafe { &*self.cur.load(std::sync::atomic::Ordering::Acquire) };
        let id = o.id.load(SeqCst);
        match op.hold {
            Some(t) => std::thread::sleep(t),
            None if op.roll % RCU_LONG_EVERY == 3 => std::thread::sleep(RCU_LONG_READ),
            None => work(20),
        }
        let dead = o.dead.load(SeqCst);
        let id_now = o.id.load(SeqCst);
        let retired = o.retired_at.load(SeqCst);
        let now = self.gps();
        drop(g);
        let age = if retired == u64::MAX {
            0
        } else {
            now.saturating_sub(retired)
        };
        self.pipe[age.min(3) as usize].fetch_add(1, Relaxed);
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
    }

    /// After the run: the barrier, then every retired object must be dead.
    fn finish(&self) -> Result<(), String> {
        match self.flavour {
            RcuFlavour::Memb => TORTURE_RCU.rcu_barrier(),
            RcuFlavour::Srcu => TORTURE_SRCU.srcu_barrier(),
            _ => {}
        }
        let (r, k) = (self.retired.load(Relaxed), self.killed.load(Relaxed));
        if r != k {
            return Err(format!(
                "{r} objects retired but {k} freed after the barrier (lost callbacks)"
            ));
        }
        Ok(())
    }
}
