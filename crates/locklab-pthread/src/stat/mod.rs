//! Lock statistics for any program (`LOCKLAB_STAT=PATH`, or `locklab run --stat`): the kernel's
//! `lock_stat` for pthread locks, per lock object and per acquiring call site.
//!
//! # What is counted
//! For each (lock, call site) pair: acquisitions; contentions (the first try failed, so the caller
//! waited) with wait time (total, min, max); hold time of exclusive holds (mutexes, spinlocks,
//! rwlock writers: total, min, max, and how many holds were timed); read acquisitions, contentions and
//! wait time of rwlocks; condvar waits (count, time blocked, time-outs), signals and broadcasts. The
//! call site is the return address of the call into this library; it is named at the end with
//! `dladdr` (`function+0xoff`, or `object+0xoff` when the object exports no symbol there).
//!
//! # How
//! - **Per-thread shards, no shared line**: each thread counts into its own shard, an open-addressed
//!   table keyed by (lock, site) in `mmap`ed memory (no allocation on a lock path), probed through a
//!   tag per slot; pairs that find no slot there are appended to an overflow arena found through a
//!   growable index, so a lookup costs a bounded number of slots whatever the number of pairs. A thread's shard
//!   goes back to a free list when it exits (a pthread key destructor) and a later thread keeps adding
//!   to it: the dump sums every shard, so which thread counted is irrelevant. Counters are atomics that
//!   only the shard's owner writes (a load and a store, no locked instruction); the dump reads them
//!   with Relaxed loads while threads run, so a figure may miss the last few operations, never tear.
//! - **Time in ticks**: the TSC on x86-64 (`rdtsc`), the virtual counter on aarch64, converted to
//!   nanoseconds at the dump by the ratio of ticks to `CLOCK_MONOTONIC` since the start. An
//!   uncontended acquisition reads the clock once (for the hold time) and its release once.
//! - **Contention without touching the algorithms**: every acquisition first tries (the family's own
//!   `trylock`); only if that fails is the clock read and the blocking call made. So the figures are
//!   the same whichever algorithm, glibc's included, is behind the lock.
//! - **Holds** are matched by a small per-thread stack of held locks (lock, entry, start): a release
//!   that finds no entry (a mutex unlocked by another thread, or a hold deeper than the stack) counts
//!   no hold time. A recursive mutex's hold runs from its first lock to its last unlock.
//!
//! # When the table is written
//! At exit (a destructor, after the program's own), before the process image is replaced by an
//! `exec*` call, and on `SIGUSR1` when the program has no handler of its own (the signal sets a flag;
//! the next lock operation of any thread writes the file, outside any signal handler). A child of
//! `fork` starts from zero and writes its own file. The file is opened when counting starts (at load,
//! or in the child), so a server that drops privileges can still write it; if the descriptor was
//! closed or reused meanwhile (checked by device and inode), the path is opened again.
//!
//! # File names
//! `%p` in the path becomes the process id; if that file exists (the image before an `exec`, or an
//! earlier process with the same id), `-1`, `-2`, ... is appended to the id. A path without `%p` is
//! overwritten by every process that writes it.
//!
//! # Files
//! This file has the calls the entry points make (`acquire`, `release`, `cond_wait`, `notify`);
//! `clock` the ticks, `table` the shards and their records, `output` the start, fork, exec, signal
//! and the output file, `dump` the JSON, `schema` its field names.

mod clock;
mod dump;
mod output;
pub mod schema;
mod table;

pub(crate) use clock::*;
pub(crate) use dump::*;
pub(crate) use output::*;
pub(crate) use table::*;

use crate::config;
use crate::sys;
use core::cell::Cell;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use libc::c_int;

// --- the wrappers the entry points call ------------------------------------------------------------------

/// Whether statistics are being kept.
#[inline(always)]
pub(crate) fn on() -> bool {
    config::stat() && (STARTED.load(Ordering::Relaxed) != 0 || start_now())
}

/// Starts the statistics from the configured path on their first use.
#[cold]
#[inline(never)]
fn start_now() -> bool {
    start(config::stat_path());
    true
}

/// An exclusive (`write`) or shared acquisition, timed when it must wait. `try_once` is the family's
/// trylock; `block` its blocking (or timed) call, made only when `try_once` answered `EBUSY`.
#[inline(never)]
pub(crate) fn acquire(
    lock: usize,
    site: usize,
    obj: Obj,
    exclusive: bool,
    try_once: impl FnOnce() -> c_int,
    block: impl FnOnce() -> c_int,
) -> c_int {
    poll_dump();
    let mut r = try_once();
    let mut waited = None;
    let now;
    if r == libc::EBUSY {
        let t0 = ticks();
        r = block();
        now = ticks();
        waited = Some(now.saturating_sub(t0));
    } else {
        now = ticks();
    }
    record(lock, site, obj, exclusive, waited, r, now);
    r
}

/// A trylock: counted when it succeeds (a failed try is no contention: the caller did not wait).
#[inline(never)]
pub(crate) fn try_acquire(
    lock: usize,
    site: usize,
    obj: Obj,
    exclusive: bool,
    try_once: impl FnOnce() -> c_int,
) -> c_int {
    poll_dump();
    let r = try_once();
    if r == 0 || r == libc::EOWNERDEAD {
        record(lock, site, obj, exclusive, None, r, ticks());
    }
    r
}

/// Counts one acquisition attempt that returned `r` at `now`, after waiting `waited` ticks if it
/// had to wait.
#[inline(always)]
fn record(
    lock: usize,
    site: usize,
    obj: Obj,
    exclusive: bool,
    waited: Option<u64>,
    r: c_int,
    now: u64,
) {
    let Some(s) = shard() else { return };
    let Some(e) = entry(s, lock, site, obj) else {
        return;
    };
    if let Some(w) = waited
        && matches!(r, 0 | libc::EOWNERDEAD | libc::ETIMEDOUT)
    {
        if exclusive {
            e.add(c::CONT, 1);
            e.add(c::WAIT_TOTAL, w);
            e.max(c::WAIT_MAX, w);
            e.min1(c::WAIT_MIN1, w);
        } else {
            e.add(c::RD_CONT, 1);
            e.add(c::RD_WAIT_TOTAL, w);
            e.max(c::RD_WAIT_MAX, w);
        }
    }
    if r == 0 || r == libc::EOWNERDEAD {
        if exclusive {
            e.add(c::ACQ, 1);
            push_held(s, lock, e, now);
        } else {
            e.add(c::RD_ACQ, 1);
        }
    }
}

/// The end of an exclusive hold of `lock`, if this thread's stack has it (call before the unlock).
#[inline(never)]
pub(crate) fn release(lock: usize) {
    poll_dump();
    let Some(s) = MINE.try_with(Cell::get).ok().filter(|p| !p.is_null()) else {
        return;
    };
    // SAFETY: shards are never freed.
    let s = unsafe { &*s };
    let n = s.held_len.get();
    for i in (0..n).rev() {
        let h = s.held[i].replace(HeldLock {
            lock: 0,
            entry: core::ptr::null(),
            since: 0,
        });
        if h.lock != lock {
            s.held[i].set(h);
            continue;
        }
        // Close the gap.
        for j in i..n - 1 {
            s.held[j].set(s.held[j + 1].replace(HeldLock {
                lock: 0,
                entry: core::ptr::null(),
                since: 0,
            }));
        }
        s.held_len.set(n - 1);
        // SAFETY: entries live in never-freed shards.
        let e = unsafe { &*h.entry };
        // A fork in between may have cleared the record (then it belongs to no lock).
        if e.lock.load(Ordering::Relaxed) == lock {
            let d = ticks().saturating_sub(h.since);
            e.add(c::HOLDS, 1);
            e.add(c::HOLD_TOTAL, d);
            e.max(c::HOLD_MAX, d);
            e.min1(c::HOLD_MIN1, d);
        }
        return;
    }
}

/// A condvar wait on `cond` with `mutex`: the mutex's hold ends before, a new one starts after (an
/// acquisition at this site), and the time blocked is the condvar's.
pub(crate) fn cond_wait(
    cond: usize,
    mutex: usize,
    mutex_obj: Obj,
    site: usize,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    release(mutex);
    let t0 = ticks();
    let r = wait();
    let now = ticks();
    if let Some(s) = shard() {
        if let Some(e) = entry(s, cond, site, Obj::Cond) {
            e.add(c::COND_WAITS, 1);
            e.add(c::COND_WAIT_TOTAL, now.saturating_sub(t0));
            if r == libc::ETIMEDOUT {
                e.add(c::COND_TIMEOUTS, 1);
            }
        }
        if (r == 0 || r == libc::ETIMEDOUT || r == libc::EOWNERDEAD)
            && let Some(e) = entry(s, mutex, site, mutex_obj)
        {
            e.add(c::ACQ, 1);
            push_held(s, mutex, e, now);
        }
    }
    r
}

/// A `signal` (`all`: a broadcast) of `cond` at `site`.
pub(crate) fn notify(cond: usize, site: usize, all: bool) {
    poll_dump();
    if let Some(s) = shard()
        && let Some(e) = entry(s, cond, site, Obj::Cond)
    {
        e.add(if all { c::BROADCASTS } else { c::SIGNALS }, 1);
    }
}
