//! `pthread_spin_*` in glibc's 4-byte `pthread_spinlock_t`.
//!
//! - `tas` (default): [`locklab::raw::RawTasLock`] in the first byte: test-and-test-and-set with
//!   backoff, then yielding, as glibc's. A FIFO spinlock cannot be the default where threads
//!   outnumber CPUs: it hands the lock to the queue's head even when that thread is preempted, and
//!   every waiter behind it waits out the head's time slice (4 threads x 100,000 lock/unlock on 2
//!   CPUs: `qspinlock` 4-14 s, `ticket` 0.7-1.2 s, `tas` 0.01 s, glibc 0.003-0.1 s).
//! - `qspinlock`: [`locklab::raw::RawQueuedSpinLock`] (its locked byte at 0, its tail half-word at
//!   2; byte 1 is padding it never touches).
//! - `ticket`: a ticket lock in the whole word, every access 32 bits wide: the next ticket in the
//!   upper half, the owner's ticket XOR `0x8000` in the lower half.
//! - `glibc`: glibc's own.
//!
//! # glibc's encoding, and process-shared locks
//! glibc 2.36 on x86-64 encodes free as 1 and held as 0 or below: `pthread_spin_init` and
//! `pthread_spin_unlock` store 1, `pthread_spin_lock` is `lock decl` and, on a result other than 0,
//! waits for a positive value and tries again (so a held lock goes below 0 by one per waiter that saw
//! it free and lost the race); `pthread_spin_trylock` is a compare-exchange 1 -> 0. The `pshared`
//! argument is ignored: a zero-filled lock is *held* under glibc.
//!
//! A process-shared lock may be shared with a process that runs without the library, which runs
//! glibc's protocol on it; so a lock initialised with any `pshared` other than
//! `PTHREAD_PROCESS_PRIVATE` is glibc's (its `pthread_spin_init` stores 1), and so is every lock whose
//! memory is not in one of ours: every call on it is glibc's. Which is decided on every call from
//! the object itself, since the other process may have initialised it: ours are told from glibc's
//! values, which are 1 or in `[-32768, 0]` (glibc's value goes below 0 only by one per racing waiter):
//! - `tas` and `qspinlock`: byte 1 is `MARK` (`0x4c`), written by our `pthread_spin_init` and
//!   never again; glibc's values have 0 or `0x80..=0xff` there.
//! - `ticket`: glibc's range holds no state of ours with fewer than 32,767 tickets taken and not yet
//!   served (the owner half's XOR moves its values there: a free lock at ticket 0 is `0x8000`).
//!
//! So a lock that was never initialised (all zero) behaves as under glibc (held), a lock initialised
//! by glibc (1) is glibc's wherever it was initialised, and a lock initialised here as private and
//! then used by a process without the library is not supported (POSIX leaves it undefined; glibc's
//! works there). A private lock shared between two processes that both have the library works under
//! `tas` and `ticket`; not under `qspinlock`, whose queue names waiting threads by their slot in one
//! process.
//!
//! Like glibc's, these locks never sleep: a holder preempted while threads outnumber CPUs costs the
//! waiters their time slices (they yield after a short spin).
//!
//! # Fork
//! The atfork pattern (the prepare handler locks, parent and child handlers unlock) with threads
//! queued on the lock: in the child, the queued spinlock's tail and the ticket lock's later tickets
//! name threads that do not exist there, and the child's unlock would hand the lock to one of them.
//! The 4-byte object has no room for a fork epoch, so [`fork`] is interposed: while a thread is in
//! `fork` (prepare handlers included), the spinlocks it takes are noted (one relaxed load of a global
//! on every lock: nothing else); the child handler, which runs before the program's (registered
//! first), drops the queue of each noted lock of ours still held (the queued spinlock keeps only its
//! locked byte; the ticket lock's next ticket becomes its owner's plus one), so the program's own
//! child handler frees it. A lock taken outside `fork` by the thread that forks keeps the parent's
//! queue (not covered). glibc's locks have no queue.
//!
//! ```c
//! pthread_spin_init(&s, 0); pthread_spin_lock(&s); pthread_spin_unlock(&s);
//! ```

use crate::config::{self, SpinAlgo};
use crate::real;
use core::sync::atomic::{AtomicI32, AtomicU8, AtomicU16, AtomicU32, AtomicUsize, Ordering};
use libc::{c_int, pthread_spinlock_t};
use locklab::raw::{RawQueuedSpinLock, RawTasLock};

/// Byte 1 of a `tas` or `qspinlock` spinlock of ours (module docs): outside every glibc value's
/// byte 1 (0 for 1 and 0, `0x80..=0xff` for `-32768..=-1`).
const MARK: u8 = 0x4c;
/// A free ticket lock: tickets 0 and 0 (the owner half XOR `0x8000`).
const TICKET_FREE: u32 = 0x8000;
/// The ticket lock's next-ticket unit (the upper half).
const TICKET_NEXT: u32 = 1 << 16;

fn word(s: *mut pthread_spinlock_t) -> &'static AtomicU32 {
    // SAFETY: the caller passes a valid, 4-aligned pthread_spinlock_t that outlives the call.
    unsafe { &*(s as *const AtomicU32) }
}
fn byte(s: *mut pthread_spinlock_t, i: usize) -> &'static AtomicU8 {
    // SAFETY: as `word`; byte 1 is read alone (only `pthread_spin_init` writes it, before the lock is
    // shared), byte 0 is the locked byte of the queued spinlock, which accesses it as a byte too.
    unsafe { &*((s as *const AtomicU8).add(i)) }
}
fn qspin(s: *mut pthread_spinlock_t) -> &'static RawQueuedSpinLock {
    // SAFETY: as `word`: the queued spinlock is one 4-byte, 4-aligned word.
    unsafe { &*(s as *const RawQueuedSpinLock) }
}
fn tas(s: *mut pthread_spinlock_t) -> &'static RawTasLock {
    // SAFETY: as `word`: the test-and-set lock is one byte.
    unsafe { &*(s as *const RawTasLock) }
}
/// The queued spinlock's tail half-word (it accesses the half-word as one atomic too).
fn tail(s: *mut pthread_spinlock_t) -> &'static AtomicU16 {
    // SAFETY: as `word`; the 2-aligned upper half of the word.
    unsafe { &*((s as *const AtomicU16).add(1)) }
}

/// Whether a word is one of glibc's (free 1, held `-32768..=0`; module docs).
#[inline]
fn glibc_value(w: u32) -> bool {
    (-32768..=1).contains(&(w as i32))
}

/// Whether `s` holds one of our locks under `algo` (else it is glibc's: module docs).
#[inline]
fn ours(s: *mut pthread_spinlock_t, algo: SpinAlgo) -> bool {
    match algo {
        SpinAlgo::Tas | SpinAlgo::QSpinLock => byte(s, 1).load(Ordering::Relaxed) == MARK,
        SpinAlgo::Ticket => !glibc_value(word(s).load(Ordering::Relaxed)),
        SpinAlgo::Glibc => false,
    }
}

/// The ticket lock's (next, owner) tickets of a word.
#[inline]
fn tickets(w: u32) -> (u16, u16) {
    ((w >> 16) as u16, (w as u16) ^ 0x8000)
}

/// The ticket lock's try: if the owner has caught up with the next ticket, take ticket `next`
/// unless somebody took it first.
fn try_ticket(s: *mut pthread_spinlock_t) -> bool {
    let w = word(s).load(Ordering::Relaxed);
    let (next, owner) = tickets(w);
    // Acquire pairs with the unlock's Release RMW of the owner half.
    next == owner
        && word(s)
            .compare_exchange(
                w,
                w.wrapping_add(TICKET_NEXT),
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
    let free = match config::spin() {
        SpinAlgo::Tas | SpinAlgo::QSpinLock if pshared == libc::PTHREAD_PROCESS_PRIVATE => {
            (MARK as u32) << 8
        }
        SpinAlgo::Ticket if pshared == libc::PTHREAD_PROCESS_PRIVATE => TICKET_FREE,
        // SAFETY: forwarded: glibc's lock (module docs).
        _ => return unsafe { real::pthread_spin_init(s, pshared) },
    };
    // Relaxed: the program publishes the initialised lock to other threads by its own means.
    word(s).store(free, Ordering::Relaxed);
    0
}

/// `pthread_spin_destroy`.
///
/// # Safety
/// `s` points to a valid `pthread_spinlock_t`.
pub unsafe extern "C" fn pthread_spin_destroy(s: *mut pthread_spinlock_t) -> c_int {
    if ours(s, config::spin()) {
        0
    } else {
        // SAFETY: forwarded.
        unsafe { real::pthread_spin_destroy(s) }
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
    let algo = config::spin();
    for cell in &NOTED[..n] {
        let s = cell.load(Ordering::Relaxed) as *mut pthread_spinlock_t;
        if !ours(s, algo) {
            continue;
        }
        match algo {
            // The locked byte stays: only the dead waiters' pending bit and tail go.
            SpinAlgo::QSpinLock if qspin(s).is_locked() => tail(s).store(0, Ordering::Relaxed),
            // Held: the next ticket is the owner's plus one.
            SpinAlgo::Ticket => {
                let w = word(s).load(Ordering::Relaxed);
                let (next, owner) = tickets(w);
                if next != owner {
                    let next = owner.wrapping_add(1) as u32;
                    word(s).store((next << 16) | (w & 0xffff), Ordering::Relaxed);
                }
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
    let algo = config::spin();
    if !ours(s, algo) {
        // SAFETY: forwarded: glibc's lock (module docs).
        return unsafe { real::pthread_spin_lock(s) };
    }
    match algo {
        SpinAlgo::QSpinLock => qspin(s).lock(),
        SpinAlgo::Tas => tas(s).lock(),
        _ => {
            // Acquire pairs with the unlock's Release RMW of the owner half.
            let (me, owner) = tickets(word(s).fetch_add(TICKET_NEXT, Ordering::Acquire));
            if owner != me {
                crate::sys::spin_until(None, || tickets(word(s).load(Ordering::Acquire)).1 == me);
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
    let algo = config::spin();
    if !ours(s, algo) {
        // SAFETY: forwarded: glibc's lock (module docs).
        return unsafe { real::pthread_spin_trylock(s) };
    }
    let ok = match algo {
        SpinAlgo::QSpinLock => qspin(s).try_lock(),
        SpinAlgo::Tas => tas(s).try_lock(),
        _ => try_ticket(s),
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
    let algo = config::spin();
    if !ours(s, algo) {
        // SAFETY: forwarded: glibc's lock (module docs).
        return unsafe { real::pthread_spin_unlock(s) };
    }
    match algo {
        // SAFETY: held by the caller (POSIX's precondition); either lock may be released by any thread.
        SpinAlgo::QSpinLock => unsafe { qspin(s).unlock() },
        // SAFETY: as above.
        SpinAlgo::Tas => unsafe { tas(s).unlock() },
        _ => {
            // Only the holder changes the owner half; ticket takers add to the upper half at the same
            // time, hence an RMW that never carries out of the lower half (0xffff wraps to 0 by a
            // subtraction). Release pairs with the next holder's Acquire.
            let w = word(s);
            if w.load(Ordering::Relaxed) & 0xffff == 0xffff {
                w.fetch_sub(0xffff, Ordering::Release);
            } else {
                w.fetch_add(1, Ordering::Release);
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No state of ours is one of glibc's values (module docs): test-and-set and the queued
    /// spinlock by byte 1, the ticket lock with every owner ticket and up to 32,766 tickets
    /// outstanding.
    #[test]
    fn our_states_are_never_glibc_values() {
        for v in -32768i32..=1 {
            assert_ne!((v as u32 >> 8) as u8, MARK, "glibc's {v} has the mark");
            assert!(glibc_value(v as u32));
        }
        for owner in 0..=u16::MAX {
            for outstanding in [0u16, 1, 2, 3, 255, 256, 4096, 32766] {
                let next = owner.wrapping_add(outstanding) as u32;
                let w = (next << 16) | (owner ^ 0x8000) as u32;
                assert!(
                    !glibc_value(w),
                    "owner {owner}, {outstanding} outstanding: {w:#x}"
                );
                assert_eq!(tickets(w), (next as u16, owner));
            }
        }
        assert!(!glibc_value(TICKET_FREE) && tickets(TICKET_FREE) == (0, 0));
    }
}
