//! `pthread_spin_*` in glibc's 4-byte `pthread_spinlock_t`.
//!
//! - `qspinlock` (default): [`locklab::raw::RawQueuedSpinLock`], whose word is exactly 4 bytes. Its
//!   queue names waiting threads by their slot in this process, so a lock initialised
//!   `PTHREAD_PROCESS_SHARED` is marked (the tail half-word 2, which the queued spinlock never
//!   writes: a level bit with no thread) and taken with a test-and-set of its locked byte instead.
//! - `ticket`: the ticket lock in the word's two 16-bit halves (next ticket at byte 2, owner at byte
//!   0), each its own atomic.
//! - `tas`: [`locklab::raw::RawTasLock`] in the first byte.
//! - `glibc`: glibc's own.
//!
//! All-zero is unlocked. Like glibc's, these locks never sleep: a holder preempted while threads
//! outnumber CPUs costs the waiters their time slices (they yield after a short spin).
//!
//! ```c
//! pthread_spin_init(&s, 0); pthread_spin_lock(&s); pthread_spin_unlock(&s);
//! ```

use crate::config::{self, SpinAlgo};
use crate::real;
use core::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, Ordering};
use libc::{c_int, pthread_spinlock_t};
use locklab::raw::{RawQueuedSpinLock, RawTasLock};

/// A process-shared queued spinlock's word when free: tail half-word 2.
const SHARED_MARK: u32 = 2 << 16;

fn word(s: *mut pthread_spinlock_t) -> &'static AtomicU32 {
    // SAFETY: the caller passes a valid, 4-aligned pthread_spinlock_t that outlives the call.
    unsafe { &*(s as *const AtomicU32) }
}
fn byte0(s: *mut pthread_spinlock_t) -> &'static AtomicU8 {
    // SAFETY: as `word`; only the byte is accessed on a marked lock (never the whole word).
    unsafe { &*(s as *const AtomicU8) }
}
fn qspin(s: *mut pthread_spinlock_t) -> &'static RawQueuedSpinLock {
    // SAFETY: as `word`: the queued spinlock is one 4-byte, 4-aligned word.
    unsafe { &*(s as *const RawQueuedSpinLock) }
}
fn tas(s: *mut pthread_spinlock_t) -> &'static RawTasLock {
    // SAFETY: as `word`: the test-and-set lock is one byte.
    unsafe { &*(s as *const RawTasLock) }
}
/// The upper (offset 2) or lower (offset 0) half-word. The queued spinlock itself accesses its locked
/// byte and its tail half-word as separate atomics; so do we (a whole-word load right after the
/// unlock's byte store would also stall on store forwarding).
fn half(s: *mut pthread_spinlock_t, upper: bool) -> &'static AtomicU16 {
    // SAFETY: as `word`; a 2-aligned half of the word.
    unsafe { &*((s as *const AtomicU16).add(upper as usize)) }
}
fn shared_qspin(s: *mut pthread_spinlock_t) -> bool {
    half(s, true).load(Ordering::Relaxed) == (SHARED_MARK >> 16) as u16
}

fn try_byte(s: *mut pthread_spinlock_t) -> bool {
    // Acquire pairs with the Release store of the unlock.
    byte0(s)
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// The ticket lock: `next` (the upper half) is taken with a 16-bit `fetch_add`, `owner` (the lower
/// half) is advanced by the holder with a plain release store, as the kernel's ticket unlock.
fn try_ticket(s: *mut pthread_spinlock_t) -> bool {
    let next = half(s, true).load(Ordering::Relaxed);
    // Free when the owner has caught up with the next ticket; then taking ticket `next` is ours if
    // nobody took it first. Acquire pairs with the unlock's Release store of `owner`.
    half(s, false).load(Ordering::Acquire) == next
        && half(s, true)
            .compare_exchange(
                next,
                next.wrapping_add(1),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
}

/// `pthread_spin_init`.
///
/// # Safety
/// `s` points to writable memory for a `pthread_spinlock_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_init(s: *mut pthread_spinlock_t, pshared: c_int) -> c_int {
    match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => unsafe { real::pthread_spin_init(s, pshared) },
        SpinAlgo::QSpinLock if pshared != libc::PTHREAD_PROCESS_PRIVATE => {
            word(s).store(SHARED_MARK, Ordering::Relaxed);
            0
        }
        _ => {
            word(s).store(0, Ordering::Relaxed);
            0
        }
    }
}

/// `pthread_spin_destroy`.
///
/// # Safety
/// `s` points to a valid `pthread_spinlock_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_destroy(s: *mut pthread_spinlock_t) -> c_int {
    match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => unsafe { real::pthread_spin_destroy(s) },
        _ => 0,
    }
}

/// `pthread_spin_lock`.
///
/// # Safety
/// `s` points to a valid `pthread_spinlock_t`.
pub(crate) unsafe extern "C" fn pthread_spin_lock(s: *mut pthread_spinlock_t) -> c_int {
    match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => return unsafe { real::pthread_spin_lock(s) },
        SpinAlgo::QSpinLock if shared_qspin(s) => {
            crate::sys::spin_until(None, || try_byte(s));
        }
        SpinAlgo::QSpinLock => qspin(s).lock(),
        SpinAlgo::Tas => tas(s).lock(),
        SpinAlgo::Ticket => {
            let me = half(s, true).fetch_add(1, Ordering::Relaxed);
            // Acquire pairs with the unlock's Release store of `owner`.
            if half(s, false).load(Ordering::Acquire) != me {
                crate::sys::spin_until(None, || half(s, false).load(Ordering::Acquire) == me);
            }
        }
    }
    0
}

/// `pthread_spin_trylock`: `EBUSY` if held.
///
/// # Safety
/// `s` points to a valid `pthread_spinlock_t`.
pub(crate) unsafe extern "C" fn pthread_spin_trylock(s: *mut pthread_spinlock_t) -> c_int {
    let ok = match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => return unsafe { real::pthread_spin_trylock(s) },
        SpinAlgo::QSpinLock if shared_qspin(s) => try_byte(s),
        SpinAlgo::QSpinLock => qspin(s).try_lock(),
        SpinAlgo::Tas => tas(s).try_lock(),
        SpinAlgo::Ticket => try_ticket(s),
    };
    if ok { 0 } else { libc::EBUSY }
}

/// `pthread_spin_unlock`.
///
/// # Safety
/// `s` points to a `pthread_spinlock_t` the caller holds.
pub(crate) unsafe extern "C" fn pthread_spin_unlock(s: *mut pthread_spinlock_t) -> c_int {
    match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => return unsafe { real::pthread_spin_unlock(s) },
        // Release pairs with the next locker's Acquire.
        SpinAlgo::QSpinLock if shared_qspin(s) => byte0(s).store(0, Ordering::Release),
        // SAFETY: held by the caller (POSIX's precondition); either lock may be released by any thread.
        SpinAlgo::QSpinLock => unsafe { qspin(s).unlock() },
        // SAFETY: as above.
        SpinAlgo::Tas => unsafe { tas(s).unlock() },
        SpinAlgo::Ticket => {
            // Only the holder writes `owner`: a load and a Release store (pairs with the next
            // holder's Acquire load), wrapping within 16 bits.
            let owner = half(s, false);
            owner.store(
                owner.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Release,
            );
        }
    }
    0
}
