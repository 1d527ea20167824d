//! Lock classes: what a class is keyed by ([`LockClass`], a creation site, an object's own
//! class), the validator's tables (`Graph`: classes, dependencies, instance pairs) and the
//! functions that find or make a class.

use super::*;

/// What kind of lock a class is (names it in reports; picks the RCU messages).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let key = 0x5a_0000; // a site, a `LockClass`'s address or an object's
/// let c = lockdep::hooks::class_for(key, Kind::SpinLock, Origin::Created, Site::UNKNOWN, 0);
/// // The kind is recorded when the class is made; the key alone finds it again.
/// assert_eq!(c, lockdep::hooks::class_for(key, Kind::SpinLock, Origin::Created, Site::UNKNOWN, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A mutex (any algorithm).
    Mutex = 1,
    /// A spinlock.
    SpinLock = 2,
    /// A reader-writer lock.
    RwLock = 3,
    /// An RCU domain (its readers are recursive readers of it; `synchronize` takes it for writing).
    Rcu = 4,
    /// A condition variable (only in condvar reports).
    Condvar = 5,
    /// A sequence lock's writer side.
    SeqLock = 6,
}

impl Kind {
    pub(super) fn from_u8(v: u8) -> Self {
        match v {
            2 => Kind::SpinLock,
            3 => Kind::RwLock,
            4 => Kind::Rcu,
            5 => Kind::Condvar,
            6 => Kind::SeqLock,
            _ => Kind::Mutex,
        }
    }

    /// The name reports use.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert_eq!(locklab::lockdep::hooks::Kind::RwLock.name(), "rwlock");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::SpinLock => "spinlock",
            Kind::RwLock => "rwlock",
            Kind::Rcu => "rcu",
            Kind::Condvar => "condvar",
            Kind::SeqLock => "seqlock",
        }
    }
}

/// How a class's key came about (said in reports).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// // A class keyed by the site that first locked an object of it.
/// let site = Site::caller();
/// let c = lockdep::hooks::class_for(0x5b_0000, Kind::Mutex, Origin::FirstLocked, site, 0);
/// assert_eq!(c, lockdep::hooks::class_for(0x5b_0000, Kind::Mutex, Origin::FirstLocked, site, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Origin {
    /// Created at the class's site (`pthread_mutex_init`).
    Created = 1,
    /// First acquired at the class's site.
    FirstLocked = 2,
    /// A named [`LockClass`].
    Named = 3,
    /// An object of its own (an RCU domain, a static lock).
    Object = 4,
}

/// A named class for locks the program groups itself (the kernel's `lock_class_key`): every lock
/// given it ([`set_class`]) is checked as one class, wherever it was created or first locked.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, LockClass};
/// static BUCKET: LockClass = LockClass::new("hash bucket");
/// let buckets: Vec<locklab::Mutex<u32>> = (0..4).map(locklab::Mutex::new).collect();
/// for b in &buckets {
///     lockdep::set_class(b, &BUCKET);
/// }
/// assert_ne!(BUCKET.id(), 0);
/// ```
pub struct LockClass {
    pub(super) name: &'static str,
    pub(super) id: AtomicU32,
}

impl LockClass {
    /// A class named `name` (the name is what reports print).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("cache");
    /// assert_eq!(C.name(), "cache");
    /// ```
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            id: AtomicU32::new(0),
        }
    }

    /// The class's name.
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// assert_eq!(locklab::lockdep::LockClass::new("x").name(), "x");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The validator's id of this class (registered on first use; 0 if the validator's tables are
    /// full or it cannot get memory).
    ///
    /// ```
    /// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
    /// static C: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("ids");
    /// assert_eq!(C.id(), C.id());
    /// ```
    pub fn id(&'static self) -> u32 {
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id;
        }
        let id = class_for_named(self);
        self.id.store(id, Ordering::Relaxed);
        id
    }
}

/// A lock the validator can be told the class of: the library's lock types (with the `lockdep`
/// feature, each carries its class).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{Classed, LockClass};
/// static CONFIG: LockClass = LockClass::new("doc-config");
/// let m = locklab::Mutex::new(0);
/// m.set_lockdep_class(&CONFIG); // what `lockdep::set_class(&m, &CONFIG)` calls
/// *m.lock() += 1;
/// assert_eq!(*m.lock(), 1);
/// ```
pub trait Classed {
    /// Gives the lock `class` (before its first acquisition, or the change applies from the next).
    fn set_lockdep_class(&self, class: &'static LockClass);
}

impl<R: lock_api::RawMutex + Classed, T: ?Sized> Classed for lock_api::Mutex<R, T> {
    fn set_lockdep_class(&self, class: &'static LockClass) {
        // SAFETY: only the raw lock's class is touched, never its lock state.
        unsafe { self.raw() }.set_lockdep_class(class);
    }
}

impl<R: lock_api::RawRwLock + Classed, T: ?Sized> Classed for lock_api::RwLock<R, T> {
    fn set_lockdep_class(&self, class: &'static LockClass) {
        // SAFETY: only the raw lock's class is touched, never its lock state.
        unsafe { self.raw() }.set_lockdep_class(class);
    }
}

/// Gives `lock` the class `class` (see [`LockClass`]). Without the `lockdep` feature the library's
/// locks carry no class, and this does nothing.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// static Q: locklab::lockdep::LockClass = locklab::lockdep::LockClass::new("queue");
/// let m = locklab::Mutex::new(());
/// locklab::lockdep::set_class(&m, &Q);
/// ```
pub fn set_class<L: Classed + ?Sized>(lock: &L, class: &'static LockClass) {
    lock.set_lockdep_class(class);
}

/// One class: written once by its creator before its id is published (Release in the table), read
/// by anyone after.
pub(super) struct ClassInfo {
    pub(super) key: AtomicU64,
    /// `Kind` in bits 0-7, `Origin` in 8-15, subclass in 16-23.
    pub(super) meta: AtomicU32,
    /// The class's site (creation or first acquisition; a [`Site`]'s value).
    pub(super) site: AtomicU64,
    /// The [`LockClass`]'s address, for a named class (0 otherwise).
    pub(super) named: AtomicU64,
    /// For a class made by [`class_for_chain`]: the sites of the creating call's callers (Site
    /// values, 0 when absent), printed after the site.
    pub(super) from: [AtomicU64; 2],
    /// [`FLAG_WRITTEN`], ...
    pub(super) flags: AtomicU32,
    /// Head of the list of dependencies from this class (an edge index + 1; graph lock).
    pub(super) first_edge: AtomicU32,
    /// Head of the list of dependencies to this class (an edge index + 1; graph lock).
    pub(super) first_in: AtomicU32,
    /// The class's number in the graph's topological order ([`order`]; graph lock).
    pub(super) ord: AtomicU64,
    /// The representative of the class's component in the order (0: itself), and the next member
    /// of the component the class represents or is in (graph lock).
    pub(super) rep: AtomicU32,
    pub(super) next_member: AtomicU32,
    /// The first recursive read of a writer-preferring instance: (held site, acquisition site).
    pub(super) rr_held: AtomicU64,
    pub(super) rr_site: AtomicU64,
    /// The first write acquisition's site.
    pub(super) write_site: AtomicU64,
    /// Signals whose handlers took the class (bit n-1 for signal n), and the first such site.
    pub(super) sig_in: AtomicU64,
    pub(super) sig_in_site: AtomicU64,
    /// Signals unblocked somewhere the class was held outside a handler (accumulated over holds),
    /// and a site of such a hold.
    pub(super) sig_out: AtomicU64,
    pub(super) sig_out_site: AtomicU64,
}

/// Some thread took the class for writing.
pub(super) const FLAG_WRITTEN: u32 = 1;
/// A recursive read of a writer-preferring instance was seen.
pub(super) const FLAG_RR: u32 = 2;
/// The recursive-read problem of the class was reported.
pub(super) const FLAG_RR_REPORTED: u32 = 4;
/// Two instances of the class were held together.
pub(super) const FLAG_NESTS_SELF: u32 = 8;
/// Held outside a signal handler, and `sig_out` already has every watched signal ([`WATCH`]):
/// nothing more to learn from this class's holds (cleared when a signal is first watched).
pub(super) const FLAG_SIG_OUT: u32 = 16;
/// The signal rule was reported.
pub(super) const FLAG_SIG_REPORTED: u32 = 32;

impl ClassInfo {
    pub(super) fn kind(&self) -> Kind {
        Kind::from_u8(self.meta.load(Ordering::Relaxed) as u8)
    }
    pub(super) fn origin(&self) -> u8 {
        (self.meta.load(Ordering::Relaxed) >> 8) as u8
    }
    pub(super) fn subclass(&self) -> u8 {
        (self.meta.load(Ordering::Relaxed) >> 16) as u8
    }
}

/// One dependency `from -> to` (all the types seen for the pair), and where each type was first
/// seen.
pub(super) struct Edge {
    pub(super) from: AtomicU32,
    pub(super) to: AtomicU32,
    /// Bit `t` for each dependency type `t` seen (see [`dep_type`]); set with Release after `sites[t]`.
    pub(super) types: AtomicU32,
    /// Next edge from the same class (index + 1; graph lock).
    pub(super) next: AtomicU32,
    /// Next edge to the same class (index + 1; graph lock).
    pub(super) next_in: AtomicU32,
    pub(super) sites: [EdgeSite; 4],
}

/// Where a dependency type was first seen.
pub(super) struct EdgeSite {
    pub(super) held_site: AtomicU64,
    pub(super) acq_site: AtomicU64,
    pub(super) tid: AtomicU32,
}

/// A dependency's type: bit 1 set if the held lock was held shared (S, else E), bit 0 set if the new
/// lock is taken as a recursive reader (R, else N).
pub(super) fn dep_type(held: Mode, taken: Mode) -> usize {
    (usize::from(held != Mode::Write) << 1) | usize::from(taken == Mode::RecursiveRead)
}

/// A same-class instance pair `a` held while `b` was taken.
pub(super) struct Pair {
    /// Next pair from the same `a` (index + 1; graph lock).
    pub(super) next: AtomicU32,
    /// Next pair to the same `b` (index + 1; graph lock).
    pub(super) next_in: AtomicU32,
    pub(super) a: AtomicU64,
    pub(super) b: AtomicU64,
    pub(super) held_site: AtomicU64,
    pub(super) acq_site: AtomicU64,
    pub(super) tid: AtomicU32,
}

// The tables' capacities (Miri: small, it models every byte).
// (A class per never-initialised object: a program's live locks each have one.)
pub(super) const MAX_CLASSES: usize = if cfg!(miri) { 1 << 8 } else { 1 << 19 };
pub(super) const MAX_EDGES: usize = if cfg!(miri) { 1 << 9 } else { 1 << 19 };
pub(super) const MAX_PAIRS: usize = if cfg!(miri) { 1 << 8 } else { 1 << 19 };
pub(super) const MAX_OBJECTS: usize = if cfg!(miri) { 1 << 10 } else { 1 << 22 };

/// Instances the same-class search visits at most.
pub(super) const INST_QUEUE: usize = if cfg!(miri) { 256 } else { 4096 };

/// The validator's shared state, created on first use.
pub(super) struct Graph {
    pub(super) class_keys: Table,
    pub(super) classes: &'static [ClassInfo],
    pub(super) n_classes: AtomicU32,
    pub(super) edge_keys: Table,
    pub(super) edges: &'static [Edge],
    pub(super) n_edges: AtomicU32,
    pub(super) pair_keys: Table,
    pub(super) pairs: &'static [Pair],
    pub(super) n_pairs: AtomicU32,
    /// Instance (address | 1 << 63) -> its first same-class pair as the one held (index + 1);
    /// (address | 1 << 62) -> its first pair as the one taken second; (address | 1 << 61) -> its
    /// number in the instance graph's topological order; (address | 1 << 60) -> the last search pass
    /// that visited it; (address | 1 << 59) -> the representative of its component in the order;
    /// (address | 1 << 58) -> the next member of the component it represents or is in.
    pub(super) inst_heads: Table,
    /// The next number of an instance new to the instance order, and the last search pass.
    pub(super) inst_ord_next: AtomicU64,
    pub(super) inst_pass: AtomicU64,
    /// Whether the class graph, and the instance graph, still have a topological order of their
    /// components ([`order`]): no search of it ever passed [`order::LIMIT`]. Else every new
    /// dependency searches the whole graph.
    pub(super) class_order_ok: AtomicBool,
    pub(super) inst_order_ok: AtomicBool,
    /// The topological orders' search memory (graph lock).
    pub(super) order: order::Scratch,
    /// Nodes looked at by every search so far ([`search_steps`]).
    pub(super) steps: AtomicU64,
    /// The edge table, and the instance-pair table, are full: new ones are not checked (nor
    /// looked up: a probe of a full table is long).
    pub(super) edges_full: AtomicBool,
    pub(super) pairs_full: AtomicBool,
    /// The instance search's queue and parent links (graph lock).
    pub(super) inst_queue: &'static [AtomicU64],
    pub(super) inst_parent: &'static [AtomicU64],
    /// Object address -> class id, for users without room in their objects (the preload library).
    pub(super) objects: Table,
    /// Problems already reported (a key per problem).
    pub(super) reported: Table,
    /// The search's scratch, per (class, arrived by a recursive read): visit stamp, parent link,
    /// queue (graph lock).
    pub(super) stamp: AtomicU32,
    pub(super) visited: &'static [AtomicU32],
    pub(super) parent: &'static [AtomicU64],
    pub(super) queue: &'static [AtomicU32],
    /// The one internal lock: taken only for a new dependency or a report.
    pub(super) lock: AtomicBool,
    /// The reports.
    pub(super) store: report::Store,
}

pub(super) static GRAPH: AtomicPtr<Graph> = AtomicPtr::new(core::ptr::null_mut());
/// How long a thread waits for the validator's lock before turning the validator off.
pub(super) const LOCK_PATIENCE_NS: u128 = 10_000_000_000;
/// 0: not created; 1: being created; 2: created; 3: could not be created.
pub(super) static GRAPH_STATE: AtomicU8 = AtomicU8::new(0);

#[inline]
pub(super) fn graph() -> Option<&'static Graph> {
    // Acquire pairs with the Release store in `create_graph`: the tables are set up.
    let g = GRAPH.load(Ordering::Acquire);
    if g.is_null() {
        return create_graph();
    }
    // SAFETY: published once, never freed.
    Some(unsafe { &*g })
}

#[cold]
pub(super) fn create_graph() -> Option<&'static Graph> {
    let mut since: Option<std::time::Instant> = None;
    loop {
        // Acquire pairs with the Release stores of 2 and 3 below: the graph (or its absence) is
        // published with them.
        match GRAPH_STATE.compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => break,
            Err(2) => {
                // SAFETY: published before state 2 (Release below; Acquire above).
                return Some(unsafe { &*GRAPH.load(Ordering::Acquire) });
            }
            Err(3) => return None,
            Err(_) => {
                // Another thread is creating it (a few mmaps). Not for long: one that does not
                // finish in a second is stopped, or not in this process (a fork child whose
                // handler did not run): validation is off until it does.
                let t0 = *since.get_or_insert_with(std::time::Instant::now);
                if t0.elapsed() > std::time::Duration::from_secs(1) {
                    // Relaxed: nothing is published with it.
                    let _ =
                        GRAPH_STATE.compare_exchange(1, 3, Ordering::Relaxed, Ordering::Relaxed);
                    return None;
                }
                crate::sys::sched_yield();
            }
        }
    }
    let made = (|| {
        Some(Graph {
            class_keys: Table::new(MAX_CLASSES * 2)?,
            classes: zeroed_array(MAX_CLASSES)?,
            n_classes: AtomicU32::new(0),
            edge_keys: Table::new(MAX_EDGES * 2)?,
            edges: zeroed_array(MAX_EDGES)?,
            n_edges: AtomicU32::new(0),
            pair_keys: Table::new(MAX_PAIRS * 2)?,
            pairs: zeroed_array(MAX_PAIRS)?,
            n_pairs: AtomicU32::new(0),
            inst_heads: Table::new(MAX_PAIRS * 4)?,
            inst_ord_next: AtomicU64::new(1),
            inst_pass: AtomicU64::new(0),
            class_order_ok: AtomicBool::new(true),
            inst_order_ok: AtomicBool::new(true),
            order: order::Scratch::new()?,
            steps: AtomicU64::new(0),
            edges_full: AtomicBool::new(false),
            pairs_full: AtomicBool::new(false),
            inst_queue: zeroed_array(INST_QUEUE)?,
            inst_parent: zeroed_array(INST_QUEUE)?,
            objects: Table::new(MAX_OBJECTS)?,
            reported: Table::new(if cfg!(miri) { 1 << 8 } else { 1 << 14 })?,
            stamp: AtomicU32::new(0),
            visited: zeroed_array(MAX_CLASSES * 2)?,
            parent: zeroed_array(MAX_CLASSES * 2)?,
            queue: zeroed_array(MAX_CLASSES * 2)?,
            lock: AtomicBool::new(false),
            store: report::Store::new()?,
        })
    })();
    let Some(made) = made else {
        // Release: waiters (Acquire above) see the final state.
        GRAPH_STATE.store(3, Ordering::Release);
        report::say(format_args!(
            "locklab lockdep: could not reserve the validator's tables: validation is off\n"
        ));
        return None;
    };
    let Some(slot) = zeroed_array::<core::mem::MaybeUninit<Graph>>(1) else {
        // Release as above.
        GRAPH_STATE.store(3, Ordering::Release);
        return None;
    };
    let p = slot.as_ptr() as *mut Graph;
    // SAFETY: fresh, writable, aligned memory for one Graph that nobody else can see yet.
    unsafe { p.write(made) };
    // Release pairs with the Acquire loads in `graph`: the tables are written before the pointer.
    GRAPH.store(p, Ordering::Release);
    GRAPH_STATE.store(2, Ordering::Release);
    install_fork_handlers();
    // SAFETY: just written.
    Some(unsafe { &*p })
}

impl Graph {
    /// Takes the validator's lock; `false` if it stays held for [`LOCK_PATIENCE_NS`] (its holder
    /// was left by `siglongjmp` or cancelled inside the validator): the validator then turns itself
    /// off rather than wedge the program.
    #[must_use]
    pub(super) fn lock(&self) -> bool {
        // Acquire pairs with the Release in `unlock`: the last holder's graph writes are seen.
        if self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        self.lock_slow()
    }
    /// [`Graph::lock`] when busy: out of line, so the common path's frame stays small (it runs on
    /// signal handlers' stacks).
    #[cold]
    #[inline(never)]
    pub(super) fn lock_slow(&self) -> bool {
        let mut since: Option<std::time::Instant> = None;
        loop {
            // Acquire as in `lock`.
            if self
                .lock
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            crate::sys::sched_yield();
            let t0 = *since.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed().as_nanos() > LOCK_PATIENCE_NS {
                set_mode(Action::Off);
                report::say(format_args!(
                    "locklab lockdep: the validator's lock has been held for 10 s (a thread left it \
                     by siglongjmp or cancellation?): lockdep is off\n"
                ));
                return false;
            }
        }
    }
    pub(super) fn unlock(&self) {
        // Release pairs with the Acquire in `lock`.
        self.lock.store(false, Ordering::Release);
    }
    pub(super) fn class(&self, id: u32) -> &ClassInfo {
        &self.classes[id as usize]
    }
    pub(super) fn edge(&self, idx1: u32) -> &Edge {
        &self.edges[idx1 as usize - 1]
    }
    /// `true` the first time `key` is offered (a problem not yet reported).
    pub(super) fn first_report(&self, key: u64) -> bool {
        matches!(self.reported.get_or_insert(key | 1, || 1), Some((_, true)))
    }
}

pub(super) static FULL_SAID: AtomicBool = AtomicBool::new(false);

#[cold]
pub(super) fn say_full(what: &str) {
    if !FULL_SAID.swap(true, Ordering::Relaxed) {
        report::say(format_args!(
            "locklab lockdep: the {what} table is full: what does not fit is not checked\n"
        ));
    }
}

/// The class of `key` (non-zero; a site, a [`LockClass`]'s or an object's address), created with
/// `kind`, `origin` and `site` if new. 0 if the validator is off or out of room.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::hooks::class_for(0x1234_5678, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// assert_eq!(c, lockdep::hooks::class_for(0x1234_5678, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0));
/// assert_ne!(c, lockdep::hooks::class_for(0x1234_5678, Kind::Mutex, Origin::Created, Site::UNKNOWN, 1));
/// ```
pub fn class_for(key: usize, kind: Kind, origin: Origin, site: Site, subclass: u8) -> u32 {
    class_with(key, kind, origin, site.0, 0, [0; 2], subclass)
}

/// The class of objects created at `chain[0]` when called from `chain[1]`, itself called from
/// `chain[2]`: the creating call and up to two of its callers (unknown ones [`Site::UNKNOWN`]).
/// A lock type whose constructor wraps the init call (`Mutex::Mutex() { pthread_mutex_init(..) }`)
/// then gets one class per place that constructs it, as the kernel's `mutex_init` macro gives
/// one key per call site, instead of one class for every lock of the program. Reports print the
/// whole chain.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let wrapper = Site::address(0x5000);
/// let a = lockdep::hooks::class_for_chain(Kind::Mutex, [wrapper, Site::address(0x6000), Site::UNKNOWN]);
/// let b = lockdep::hooks::class_for_chain(Kind::Mutex, [wrapper, Site::address(0x7000), Site::UNKNOWN]);
/// assert_ne!(a, b);
/// assert_eq!(a, lockdep::hooks::class_for_chain(Kind::Mutex, [wrapper, Site::address(0x6000), Site::UNKNOWN]));
/// ```
pub fn class_for_chain(kind: Kind, chain: [Site; 3]) -> u32 {
    let [s0, s1, s2] = chain.map(|s| s.0 as u64);
    // Distinct chains get distinct keys with overwhelming likelihood; the top byte is the
    // subclass's (cleared), bit 55 set so that no chain's key is a bare site's.
    let mix = |x: u64| x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    let key = if s1 == 0 && s2 == 0 {
        s0
    } else {
        (s0 ^ mix(s1 ^ mix(s2))) & !(0xff << 56) | 1 << 55
    };
    class_with(
        key as usize,
        kind,
        Origin::Created,
        s0 as usize,
        0,
        [s1 as usize, s2 as usize],
        0,
    )
}

pub(super) fn class_with(
    key: usize,
    kind: Kind,
    origin: Origin,
    site: usize,
    named: usize,
    from: [usize; 2],
    subclass: u8,
) -> u32 {
    if !enabled() || key == 0 {
        return 0;
    }
    let Some(g) = graph() else { return 0 };
    let full = (key as u64) ^ (u64::from(subclass) << 56);
    match g.class_keys.get_or_insert(full, || {
        let id = g.n_classes.fetch_add(1, Ordering::Relaxed) + 1;
        if id as usize >= MAX_CLASSES {
            return u64::MAX;
        }
        let c = g.class(id);
        c.key.store(full, Ordering::Relaxed);
        c.meta.store(
            kind as u32 | (origin as u32) << 8 | u32::from(subclass) << 16,
            Ordering::Relaxed,
        );
        c.site.store(site as u64, Ordering::Relaxed);
        c.named.store(named as u64, Ordering::Relaxed);
        c.ord.store(u64::from(id), Ordering::Relaxed);
        c.from[0].store(from[0] as u64, Ordering::Relaxed);
        c.from[1].store(from[1] as u64, Ordering::Relaxed);
        u64::from(id)
    }) {
        Some((id, _)) if id != u64::MAX => id as u32,
        _ => {
            say_full("class");
            0
        }
    }
}

/// Tag of the keys of [`instance_class`]'s classes (a counter below it): never a site's, a
/// [`LockClass`]'s or an RCU domain's key (addresses below 2^48, a domain's with bit 63 flipped;
/// a subclass uses bits 56-63).
pub(super) const INSTANCE_KEY: u64 = 1 << 52;
pub(super) static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// A new class for one lock object that was never given a class (a `lock_api` lock without
/// [`set_class`], a pthread object never passed to an init function): a class of its own, for this
/// object's life only, named by `site` (its first acquisition). So the graph between such objects
/// is the graph of the objects themselves, and an order that is consistent between objects is never
/// a cycle, whichever code touched each object first (the kernel's class per static lock). 0 if the
/// validator is off or out of room.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let (a, b) = (lockdep::hooks::instance_class(Kind::Mutex, Site::caller()), lockdep::hooks::instance_class(Kind::Mutex, Site::caller()));
/// assert!(a != 0 && b != 0 && a != b, "one class per object, even from one site");
/// ```
pub fn instance_class(kind: Kind, site: Site) -> u32 {
    if let Some(g) = graph()
        && g.n_classes.load(Ordering::Relaxed) as usize >= MAX_CLASSES - 1
    {
        // Full: said once; a new key would only probe the whole full table.
        say_full("class");
        return 0;
    }
    let n = INSTANCES.fetch_add(1, Ordering::Relaxed) + 1;
    class_with(
        (INSTANCE_KEY | (n & ((1 << 48) - 1))) as usize,
        kind,
        Origin::FirstLocked,
        site.0,
        0,
        [0; 2],
        0,
    )
}

pub(super) fn class_for_named(c: &'static LockClass) -> u32 {
    // Exposed: a report turns the number back into the reference to print the name.
    let a = (c as *const LockClass).expose_provenance();
    class_with(a, Kind::Mutex, Origin::Named, 0, a, [0; 2], 0)
}

/// The class of a subclass of `class` (the kernel's nesting annotation; 0 stays 0).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// let c = lockdep::hooks::class_for(0x42_0000, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// assert_ne!(lockdep::hooks::subclass_of(c, 1), c);
/// assert_eq!(lockdep::hooks::subclass_of(c, 0), c);
/// ```
pub fn subclass_of(class: u32, subclass: u8) -> u32 {
    if class == 0 || subclass == 0 {
        return class;
    }
    let Some(g) = graph() else { return 0 };
    let c = g.class(class);
    let key = c.key.load(Ordering::Relaxed) & !(0xff << 56);
    class_with(
        key as usize,
        c.kind(),
        match c.origin() {
            1 => Origin::Created,
            2 => Origin::FirstLocked,
            3 => Origin::Named,
            _ => Origin::Object,
        },
        c.site.load(Ordering::Relaxed) as usize,
        c.named.load(Ordering::Relaxed) as usize,
        [
            c.from[0].load(Ordering::Relaxed) as usize,
            c.from[1].load(Ordering::Relaxed) as usize,
        ],
        subclass,
    )
}
