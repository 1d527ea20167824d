//! Whether `membarrier` carries the readers' fences, decided once per process: the read side of
//! the percpu rw-semaphore and of the memb RCU flavour (a compiler fence when the writers'
//! `membarrier` fences the readers, a full fence otherwise), and the switch to full fences when
//! `membarrier` fails after readers ran without them.

use core::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const FAST: u8 = 1;
const FALLBACK: u8 = 2;
/// `membarrier` failed after readers ran on the fast path: new readers fence themselves, but
/// writers must still fence the fast-path readers that may be running (`degrade`).
const DEGRADING: u8 = 3;
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether readers may use the compiler-only fence (the writers' `membarrier` fences them).
#[inline(always)]
pub(crate) fn fast() -> bool {
    // Relaxed: the value is a fact about the kernel, and each thread that finds it unknown derives
    // it itself (registering first) before relying on it. A reader that still sees FAST after a
    // switch to DEGRADING is fenced by the switch's CPU walk (`degrade`).
    match MODE.load(Ordering::Relaxed) {
        FAST => true,
        FALLBACK | DEGRADING => false,
        _ => detect(),
    }
}

/// Whether writers must fence readers from outside (`membarrier`, or the CPU walk): some reader
/// may run with compiler fences only.
#[inline]
pub(crate) fn writers_heavy() -> bool {
    // Relaxed: as in `fast`; DEGRADING stays heavy until the walk is done.
    match MODE.load(Ordering::Relaxed) {
        FAST | DEGRADING => true,
        FALLBACK => false,
        _ => detect(),
    }
}

#[cold]
#[inline(never)]
fn detect() -> bool {
    let fast =
        std::env::var_os("LOCKLAB_NO_MEMBARRIER").is_none() && crate::sys::membarrier_register();
    decide(&MODE, fast)
}

/// Records the mode once: the first thread to decide wins, and everyone, including a later thread
/// whose own probe disagreed (a per-thread seccomp filter can forbid `membarrier` in one thread
/// only), uses the winner's mode. A last-store-wins update could switch readers from the fence-free
/// path to the fallback while a writer relied on the other.
pub(crate) fn decide(mode: &AtomicU8, fast: bool) -> bool {
    let mine = if fast { FAST } else { FALLBACK };
    // Relaxed: see `fast`.
    match mode.compare_exchange(UNKNOWN, mine, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => fast,
        Err(decided) => decided == FAST,
    }
}

/// `membarrier` failed on this thread after the process chose the fast mode: switches every
/// reader to full fences for good, and fences the readers that may still be on the fast path by
/// running this thread once on every CPU (each switch to it is a full barrier on that CPU, and
/// readers load the mode after their first store, so a reader whose load came before the switch
/// has its store visible after it). Returns `false` if the walk could not be done (then nothing
/// fences those readers, and the caller must not go on).
#[cold]
pub(crate) fn degrade() -> bool {
    // SeqCst: the switch happens-before the walk's barriers.
    let _ = MODE.compare_exchange(FAST, DEGRADING, Ordering::SeqCst, Ordering::Relaxed);
    if !crate::sys::cpu_walk_barrier() {
        return false;
    }
    // After the walk every CPU has passed a full barrier since the switch: no reader runs on the
    // fast path any more, so writers may use plain fences (pairs with `writers_heavy`).
    let _ = MODE.compare_exchange(DEGRADING, FALLBACK, Ordering::SeqCst, Ordering::Relaxed);
    true
}
