//! Signal handlers: the locks a handler takes checked against the places the same classes are held
//! with the signal unblocked (the userspace form of the kernel's irq-safe/irq-unsafe rule).

use super::*;

/// Runs `f` as the handler of signal `sig`: the locks it takes are checked against the places the
/// same classes are held with `sig` unblocked (a lock taken in a handler and held where the handler
/// can interrupt its holder deadlocks). The preload library wraps a program's handlers in this.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::signal_handler(10, || {});
/// ```
pub fn signal_handler<R>(sig: i32, f: impl FnOnce() -> R) -> R {
    let saved = signal_enter(sig);
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            signal_leave(self.0);
        }
    }
    let _r = Restore(saved);
    f()
}

/// Enters a signal handler for `sig` (the preload library's wrapper, which cannot use a closure
/// across `siglongjmp`): returns the state to give back to [`signal_leave`]. A handler left by
/// `siglongjmp` is noticed at the next acquisition (its stack frame is gone).
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let s = locklab::lockdep::hooks::signal_enter(12);
/// locklab::lockdep::hooks::signal_leave(s);
/// ```
pub fn signal_enter(sig: i32) -> u64 {
    let marker = 0u8;
    let sp = &marker as *const u8 as usize;
    if (1..=64).contains(&sig) && WATCH.load(Ordering::Relaxed) & 1 << (sig - 1) == 0 {
        watch_signal(sig);
    }
    THREAD
        .try_with(|x| {
            // The handler runs with another mask, and may leave by `siglongjmp` with it.
            x.mask_known.store(false, Ordering::Relaxed);
            let depth = x.sig.load(Ordering::Relaxed);
            let saved = u64::from(depth) << 32 | x.sig_no.load(Ordering::Relaxed) as u32 as u64;
            x.sig_no.store(sig, Ordering::Relaxed);
            x.sig_sp.store(sp, Ordering::Relaxed);
            x.sig.store(depth + 1, Ordering::Relaxed);
            // The handler's locks come after these stores (same thread: a compiler fence).
            compiler_fence(Ordering::SeqCst);
            saved
        })
        .unwrap_or(u64::MAX)
}

/// Leaves a handler entered with [`signal_enter`].
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// let saved = locklab::lockdep::hooks::signal_enter(10);
/// // ... the handler's locks ...
/// locklab::lockdep::hooks::signal_leave(saved);
/// ```
pub fn signal_leave(saved: u64) {
    if saved == u64::MAX {
        return;
    }
    let _ = THREAD.try_with(|x| {
        // The handler's locks come before these stores (as in `signal_enter`).
        compiler_fence(Ordering::SeqCst);
        let depth = (saved >> 32) as u32;
        x.mask_known.store(false, Ordering::Relaxed);
        x.sig.store(depth, Ordering::Relaxed);
        x.sig_no.store(saved as u32 as i32, Ordering::Relaxed);
        if depth == 0 {
            x.sig_sp.store(0, Ordering::Relaxed);
        }
    });
}

pub(super) fn in_signal(g: &Graph, class: u32, x: &Tls, site: usize) {
    // A handler left by siglongjmp: the stack is back above its frame.
    let marker = 0u8;
    if (&marker as *const u8 as usize) > x.sig_sp.load(Ordering::Relaxed) {
        return;
    }
    let sig = x.sig_no.load(Ordering::Relaxed);
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    let c = g.class(class);
    if c.sig_in.load(Ordering::Relaxed) & bit == 0 {
        c.sig_in_site.store(site as u64, Ordering::Relaxed);
        // SeqCst, as the loads below and in `held_outside_signal`: of a handler's hold and an
        // unblocked hold elsewhere racing, at least one sees the other's bit (and the site written
        // before it) and reports.
        c.sig_in.fetch_or(bit, Ordering::SeqCst);
    }
    if c.sig_out.load(Ordering::SeqCst) & bit != 0 {
        report_signal(g, class, sig);
    }
}

/// Signals with a program handler behind the validator (bit n-1 for signal n): what a hold's
/// blocked mask is read for.
pub(super) static WATCH: AtomicU64 = AtomicU64::new(0);

/// The blocked masks come from a caller that calls [`signal_mask_changed`] whenever a thread's
/// mask changes (the preload library): each thread's last reading is kept until then.
pub(super) static MASK_TRACKED: AtomicBool = AtomicBool::new(false);

/// Watches signal `sig`: a handler of it is installed (the preload library calls this before
/// installing one; [`signal_enter`] does it for any other). From now on the holds of each class are
/// checked for `sig` being unblocked until one is (each thread's blocked mask is read, or its
/// last reading reused, see [`track_signal_mask`]), so a class held with `sig` blocked at first and
/// unblocked later is seen, and one held with it always blocked is never reported.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::watch_signal(10);
/// ```
pub fn watch_signal(sig: i32) {
    if !(1..=64).contains(&sig) {
        return;
    }
    let bit = 1u64 << (sig - 1);
    // SeqCst: a hold that reads the new watch set (SeqCst in `held_outside_signal`) either comes
    // after the classes' flags are cleared below, or its own flag is cleared by them.
    if WATCH.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
        return;
    }
    let Some(g) = graph() else { return };
    let n = (g.n_classes.load(Ordering::Relaxed) as usize + 1).min(MAX_CLASSES);
    let mut cleared = false;
    for id in 1..n {
        let c = g.class(id as u32);
        if c.flags.load(Ordering::Relaxed) & FLAG_SIG_OUT != 0
            && c.sig_out.load(Ordering::Relaxed) & bit == 0
        {
            c.flags.fetch_and(!FLAG_SIG_OUT, Ordering::Relaxed);
            cleared = true;
        }
    }
    if cleared {
        // Release pairs with the Acquire in `acquire_object`: the threads' caches of the class
        // facts start over.
        OBJ_EPOCH.fetch_add(1, Ordering::Release);
    }
}

/// Says that the caller calls [`signal_mask_changed`] on every change of a thread's blocked signals
/// (the preload library, which wraps `pthread_sigmask` and `sigprocmask`): each thread then reads
/// its mask (a system call) once per change rather than at every hold that needs it.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::track_signal_mask();
/// ```
pub fn track_signal_mask() {
    MASK_TRACKED.store(true, Ordering::Relaxed);
}

/// The calling thread's blocked signals changed (or may have): its kept reading is dropped.
///
/// ```
/// # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
/// locklab::lockdep::hooks::signal_mask_changed();
/// ```
pub fn signal_mask_changed() {
    let _ = THREAD.try_with(|x| x.mask_known.store(false, Ordering::Relaxed));
}

/// The calling thread's blocked signals: its kept reading if valid, else read (and kept).
pub(super) fn thread_blocked(x: &Tls) -> u64 {
    if MASK_TRACKED.load(Ordering::Relaxed) && x.mask_known.load(Ordering::Relaxed) {
        return x.mask.load(Ordering::Relaxed);
    }
    let m = blocked_signals();
    x.mask.store(m, Ordering::Relaxed);
    // A handler that interrupts from here on marks it unknown after this (same thread).
    compiler_fence(Ordering::SeqCst);
    x.mask_known.store(true, Ordering::Relaxed);
    m
}

/// A hold of `class` outside any handler, while the class may still have something to learn:
/// the signals unblocked here are added to the class's, and a signal newly seen unblocked whose
/// handler took the class is reported.
#[cold]
#[inline(never)]
pub(super) fn held_outside_signal(g: &Graph, class: u32, site: usize, x: &Tls) {
    let c = g.class(class);
    // SeqCst: see `watch_signal`.
    let watch = WATCH.load(Ordering::SeqCst);
    // Only signals with a handler count: a hold before the handler exists cannot be interrupted
    // by it.
    let unblocked = !thread_blocked(x) & watch;
    let have = c.sig_out.load(Ordering::SeqCst);
    let new = unblocked & !have;
    if new != 0 {
        if have == 0 || c.sig_in.load(Ordering::SeqCst) & new != 0 {
            // The site a report names (written before the bits: see `in_signal`).
            c.sig_out_site.store(site as u64, Ordering::Relaxed);
        }
        // SeqCst: see `in_signal`.
        c.sig_out.fetch_or(new, Ordering::SeqCst);
    }
    if (have | unblocked) & watch == watch {
        // Every watched signal seen unblocked: later holds have nothing to add (until another
        // signal is watched).
        c.flags.fetch_or(FLAG_SIG_OUT, Ordering::Relaxed);
    }
    // SeqCst: see `in_signal`.
    let inside = c.sig_in.load(Ordering::SeqCst) & new;
    if inside != 0 {
        report_signal(g, class, inside.trailing_zeros() as i32 + 1);
    }
}

#[cold]
#[inline(never)]
pub(super) fn report_signal(g: &Graph, class: u32, sig: i32) {
    let c = g.class(class);
    // AcqRel: one reporter wins (as `report_rr`).
    if c.flags.fetch_or(FLAG_SIG_REPORTED, Ordering::AcqRel) & FLAG_SIG_REPORTED == 0 {
        report::signal(g, class, sig);
    }
}

/// The calling thread's blocked signals (bit n-1 for signal n); 0 where unknown.
pub(super) fn blocked_signals() -> u64 {
    #[cfg(all(unix, not(miri)))]
    {
        // SAFETY: an out-pointer to a sigset_t; querying (a null new set) changes nothing.
        let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut set) } != 0 {
            return 0;
        }
        let mut m = 0u64;
        for s in 1..=64 {
            // SAFETY: a valid set; out-of-range signals answer -1.
            if unsafe { libc::sigismember(&set, s) } == 1 {
                m |= 1 << (s - 1);
            }
        }
        m
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        0
    }
}
