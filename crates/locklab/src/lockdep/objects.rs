//! The object table: the class of each lock object kept by address, for users (the preload
//! library) whose objects have no room for one, and the forgetting of objects and address ranges.

use super::*;

/// The class recorded for the object at `obj`, if any ([`set_object_class`]).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::hooks::class_for(0x77_0000, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// lockdep::hooks::set_object_class(0x1000, c);
/// assert_eq!(lockdep::hooks::object_class(0x1000), Some(c));
/// lockdep::hooks::forget_object(0x1000);
/// assert_eq!(lockdep::hooks::object_class(0x1000), None);
/// ```
#[inline]
pub fn object_class(obj: usize) -> Option<u32> {
    let g = graph()?;
    match g.objects.get(obj as u64)? {
        u64::MAX => None,
        c => Some(c as u32),
    }
}

/// The class of the object at `obj`: the recorded one, else (an object never initialised, or
/// destroyed since) a new [`instance_class`] named by `site`, recorded. Racing first acquisitions
/// agree on one class. 0 if the validator is off or out of room.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::hooks::object_class_or_new(0x3_0000, Kind::Mutex, Site::caller());
/// assert_eq!(lockdep::hooks::object_class_or_new(0x3_0000, Kind::Mutex, Site::caller()), c);
/// assert_ne!(lockdep::hooks::object_class_or_new(0x3_0040, Kind::Mutex, Site::caller()), c);
/// ```
pub fn object_class_or_new(obj: usize, kind: Kind, site: Site) -> u32 {
    if obj == 0 {
        return 0;
    }
    let Some(g) = graph() else { return 0 };
    let new = || match instance_class(kind, site) {
        0 => u64::MAX,
        c => u64::from(c),
    };
    match g.objects.get_or_insert(obj as u64, new) {
        Some((c, _)) if c != u64::MAX => c as u32,
        Some(_) => {
            // Forgotten (destroyed): a new life, a new class; a racing first acquisition may
            // replace it once (the table's value is the winner from then on).
            let c = instance_class(kind, site);
            if c != 0 && g.objects.replace(obj as u64, u64::MAX, u64::from(c)) {
                // Release as in `set_object_class`.
                OBJ_EPOCH.fetch_add(1, Ordering::Release);
            }
            object_class(obj).unwrap_or(0)
        }
        None => {
            say_full("object");
            0
        }
    }
}

/// Records `class` as the class of the object at `obj` (an init call, or a first acquisition).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::hooks::class_for(0x5c_0000, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// lockdep::hooks::set_object_class(0x2000, c);
/// assert_eq!(lockdep::hooks::object_class(0x2000), Some(c));
/// # lockdep::hooks::forget_object(0x2000);
/// ```
pub fn set_object_class(obj: usize, class: u32) {
    if class == 0 || obj == 0 {
        return;
    }
    let Some(g) = graph() else { return };
    match g.objects.get_or_insert(obj as u64, || u64::from(class)) {
        Some((_, true)) => {}
        Some(_) => {
            g.objects.set(obj as u64, u64::from(class));
            // Release pairs with the Acquire in `acquire_object`: threads' caches drop the old one.
            OBJ_EPOCH.fetch_add(1, Ordering::Release);
        }
        None => say_full("object"),
    }
}

/// Bumped whenever an object's recorded class changes or is forgotten: the per-thread caches of
/// `acquire_object` start over.
pub(super) static OBJ_EPOCH: AtomicU64 = AtomicU64::new(0);

/// [`acquire`] of an object whose class is in the object table ([`set_object_class`]); an object
/// not there gets a class of its own named by `site` ([`object_class_or_new`]). Each
/// thread caches the classes of the objects it took last, so the steady state does not touch the
/// shared table.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Flags, Kind, Mode, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// lockdep::hooks::acquire_object(0x7000, Kind::Mutex, Mode::Write, Site::caller(), Flags::NONE);
/// assert!(lockdep::hooks::object_class(0x7000).is_some());
/// assert!(lockdep::hooks::release(0x7000, Site::caller()));
/// ```
#[inline]
pub fn acquire_object(obj: usize, kind: Kind, mode: Mode, site: Site, flags: Flags) {
    if !enabled() {
        return;
    }
    let first = with_thread(|t, x| {
        // Acquire pairs with the Release bumps: a class changed before the bump is not used after.
        let e = OBJ_EPOCH.load(Ordering::Acquire);
        if t.cache_epoch != e {
            t.cache = [(0, 0, 0); CACHE];
            t.cache_epoch = e;
        }
        let slot = (obj >> 3) % CACHE;
        let need = if mode == Mode::Write {
            NOTED_WRITE | NOTED_SIG
        } else {
            NOTED_SIG
        };
        let (o, _, noted) = t.cache[slot];
        if o == obj
            && t.n == 0
            && x.sig.load(Ordering::Relaxed) == 0
            && noted & need == need
            && t.exit_armed
        {
            // The steady state of a lock taken alone: nothing held to depend on or to take again,
            // and the class's once-only facts (written, held outside a handler) already recorded.
            t.held[0] = Held {
                obj,
                site: site.0,
                epoch: ELSEWHERE_GEN.load(Ordering::Relaxed),
                class: t.cache[slot].1,
                depth: 1,
                mode: mode as u8,
                flags: flags.0,
            };
            t.n = 1;
            return false;
        }
        acquire_object_slow(t, x, obj, kind, mode, site, flags, slot)
    });
    if first == Some(true) {
        run_exit_hook();
    }
}

/// `acquire_object` past its steady-state fast path: the class looked up (or made) and cached, the
/// acquisition checked. Returns whether this is the thread's first acquisition.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn acquire_object_slow(
    t: &mut ThreadState,
    x: &Tls,
    obj: usize,
    kind: Kind,
    mode: Mode,
    site: Site,
    flags: Flags,
    slot: usize,
) -> bool {
    let (o, c, _) = t.cache[slot];
    let class = if o == obj {
        c
    } else {
        let c = object_class_or_new(obj, kind, site);
        t.cache[slot] = (obj, c, 0);
        c
    };
    if class == 0 {
        return false;
    }
    let first = !t.exit_armed;
    t.exit_armed = true;
    acquire_in(t, x, obj, class, mode, site.0, flags);
    if let Some(g) = graph() {
        let f = g.class(class).flags.load(Ordering::Relaxed);
        let noted = if f & FLAG_WRITTEN != 0 {
            NOTED_WRITE
        } else {
            0
        } | if f & FLAG_SIG_OUT != 0 { NOTED_SIG } else { 0 };
        t.cache[slot].2 = noted;
    }
    first
}

#[cold]
pub(super) fn run_exit_hook() {
    // Acquire pairs with the Release in `set_exit_hook`.
    let f = EXIT_HOOK.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: set only by `set_exit_hook` from a `fn()`.
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(f) };
        f();
    }
}

/// Forgets the object at `obj` (destroyed: a later object at that address gets a class of its own).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Origin, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::hooks::class_for(0x5d_0000, Kind::Mutex, Origin::Created, Site::UNKNOWN, 0);
/// lockdep::hooks::set_object_class(0x3000, c);
/// lockdep::hooks::forget_object(0x3000); // destroyed
/// assert_eq!(lockdep::hooks::object_class(0x3000), None);
/// ```
pub fn forget_object(obj: usize) {
    if obj == 0 {
        return;
    }
    if let Some(g) = graph() {
        if g.objects.set(obj as u64, u64::MAX) {
            // Release as in `set_object_class`.
            OBJ_EPOCH.fetch_add(1, Ordering::Release);
        }
        forget_pairs(g, obj);
    }
}

/// Forgets every object recorded in `[start, start + len)`: the memory is going away (a plugin's
/// data unloaded by `dlclose`), and a lock placed there later is another lock, with a class and
/// orders of its own. A scan of the whole object table: for rare events only.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// use locklab::lockdep::{self, hooks::{Kind, Site}};
/// lockdep::set_mode(lockdep::Action::Report);
/// let c = lockdep::hooks::object_class_or_new(0x9_0010, Kind::Mutex, Site::caller());
/// lockdep::hooks::forget_range(0x9_0000, 0x100);
/// assert_ne!(lockdep::hooks::object_class_or_new(0x9_0010, Kind::Mutex, Site::caller()), c);
/// ```
pub fn forget_range(start: usize, len: usize) {
    if len == 0 || !enabled() {
        return;
    }
    let Some(g) = graph() else { return };
    let end = start.saturating_add(len) as u64;
    let mut forgotten = false;
    g.objects.for_each(|obj, class| {
        if (start as u64..end).contains(&obj) && class != u64::MAX {
            g.objects.set(obj, u64::MAX);
            forget_pairs(g, obj as usize);
            forgotten = true;
        }
    });
    if forgotten {
        // Release as in `set_object_class`.
        OBJ_EPOCH.fetch_add(1, Ordering::Release);
    }
}
