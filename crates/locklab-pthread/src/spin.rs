//! `pthread_spin_*` in glibc's 4-byte `pthread_spinlock_t`.
//!
//! - `tas` (default): [`locklab::raw::RawTasLock`] in the first byte: test-and-test-and-set with
//!   backoff, then yielding, as glibc's. A FIFO spinlock cannot be the default where threads
//!   outnumber CPUs: it hands the lock to the queue's head even when that thread is preempted, and
//!   every waiter behind it waits out the head's time slice (4 threads x 100,000 lock/unlock on 2
//!   CPUs: `qspinlock` 4-14 s, `ticket` 0.7-1.2 s, `tas` 0.01 s, glibc 0.003-0.1 s).
//! - `qspinlock`: [`locklab::raw::RawQueuedSpinLock`], whose word is exactly 4 bytes. Its
//!   queue names waiting threads by their slot in this process, so a lock initialised
//!   `PTHREAD_PROCESS_SHARED` is marked (the tail half-word 2, which the queued spinlock never
//!   writes: a level bit with no thread) and taken with a test-and-set of its locked byte instead.
//! - `ticket`: the ticket lock in the word's two 16-bit halves (next ticket at byte 2, owner at byte
//!   0), each its own atomic.
//! - `glibc`: glibc's own.
//!
//! All-zero is unlocked. Like glibc's, these locks never sleep: a holder preempted while threads
//! outnumber CPUs costs the waiters their time slices (they yield after a short spin).
//!
//! # Fork
//! The atfork pattern (the prepare handler locks, parent and child handlers unlock) with threads
//! queued on the lock: in the child, the queued spinlock's tail and the ticket lock's later tickets
//! name threads that do not exist there, and the child's unlock would hand the lock to one of them.
//! The 4-byte object has no room for a fork epoch, so [`fork`] is interposed: while a thread is in
//! `fork` (prepare handlers included), the spinlocks it takes are noted (one relaxed load of a global
//! on every lock: nothing else); the child handler, which runs before the program's (registered
//! first), drops the queue of each noted lock still held (the queued spinlock keeps only its locked
//! byte; the ticket lock's next ticket becomes its owner's plus one), so the program's own child
//! handler frees it. A lock taken outside `fork` by the thread that forks keeps the parent's queue
//! (not covered).
//!
//! ```c
//! pthread_spin_init(&s, 0); pthread_spin_lock(&s); pthread_spin_unlock(&s);
//! ```

use crate::config::{self, SpinAlgo};
use crate::real;
use core::sync::atomic::{AtomicI32, AtomicU8, AtomicU16, AtomicU32, AtomicUsize, Ordering};
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
pub unsafe extern "C" fn pthread_spin_destroy(s: *mut pthread_spinlock_t) -> c_int {
    match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => unsafe { real::pthread_spin_destroy(s) },
        _ => 0,
    }
}

/// The thread now in `fork` (its TID), 0 when none.
static FORKING: AtomicI32 = AtomicI32::new(0);
/// Spinlocks the forking thread took while in `fork`, and how many (at most [`NOTED_MAX`]).
static NOTED: [AtomicUsize; NOTED_MAX] = [const { AtomicUsize::new(0) }; NOTED_MAX];
static NOTED_LEN: AtomicUsize = AtomicUsize::new(0);
const NOTED_MAX: usize = 32;

/// Notes a lock the forking thread takes in `fork` (module docs, "Fork").
#[inline]
fn note_if_forking(s: *mut pthread_spinlock_t) {
    if FORKING.load(Ordering::Relaxed) != 0 {
        note_slow(s);
    }
}

#[cold]
#[inline(never)]
fn note_slow(s: *mut pthread_spinlock_t) {
    if FORKING.load(Ordering::Relaxed) == crate::sys::tid() {
        let i = NOTED_LEN.load(Ordering::Relaxed);
        if i < NOTED_MAX {
            NOTED[i].store(s as usize, Ordering::Relaxed);
            NOTED_LEN.store(i + 1, Ordering::Relaxed);
        }
    }
}

/// The child's part (called by the library's fork handler): drops the parent's waiters of every
/// lock noted in `fork` that is still held (module docs, "Fork").
pub(crate) fn after_fork_child() {
    let n = NOTED_LEN.swap(0, Ordering::Relaxed).min(NOTED_MAX);
    FORKING.store(0, Ordering::Relaxed);
    for cell in &NOTED[..n] {
        let s = cell.load(Ordering::Relaxed) as *mut pthread_spinlock_t;
        match config::spin() {
            // The locked byte stays: only the dead waiters' pending bit and tail go.
            SpinAlgo::QSpinLock if !shared_qspin(s) && byte0(s).load(Ordering::Relaxed) != 0 => {
                half(s, true).store(0, Ordering::Relaxed);
            }
            // Held: the next ticket is the owner's plus one.
            SpinAlgo::Ticket
                if half(s, true).load(Ordering::Relaxed)
                    != half(s, false).load(Ordering::Relaxed) =>
            {
                let owner = half(s, false).load(Ordering::Relaxed);
                half(s, true).store(owner.wrapping_add(1), Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// `fork`: glibc's, with the calling thread marked as forking while it runs (prepare handlers
/// included), so that the spinlocks it takes there can be repaired in the child (module docs).
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    NOTED_LEN.store(0, Ordering::Relaxed);
    FORKING.store(crate::sys::tid(), Ordering::Relaxed);
    // SAFETY: forwarded.
    let pid = unsafe { real::fork() };
    // The child handler cleared both already; the parent (or a failed fork) clears them here.
    FORKING.store(0, Ordering::Relaxed);
    NOTED_LEN.store(0, Ordering::Relaxed);
    pid
}

/// `pthread_spin_lock`.
///
/// # Safety
/// `s` points to a valid `pthread_spinlock_t`.
#[inline]
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
    note_if_forking(s);
    0
}

/// `pthread_spin_trylock`: `EBUSY` if held.
///
/// # Safety
/// `s` points to a valid `pthread_spinlock_t`.
#[inline]
pub(crate) unsafe extern "C" fn pthread_spin_trylock(s: *mut pthread_spinlock_t) -> c_int {
    let ok = match config::spin() {
        // SAFETY: forwarded.
        SpinAlgo::Glibc => return unsafe { real::pthread_spin_trylock(s) },
        SpinAlgo::QSpinLock if shared_qspin(s) => try_byte(s),
        SpinAlgo::QSpinLock => qspin(s).try_lock(),
        SpinAlgo::Tas => tas(s).try_lock(),
        SpinAlgo::Ticket => try_ticket(s),
    };
    if ok {
        note_if_forking(s);
        0
    } else {
        libc::EBUSY
    }
}

/// `pthread_spin_unlock`.
///
/// # Safety
/// `s` points to a `pthread_spinlock_t` the caller holds.
#[inline]
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
