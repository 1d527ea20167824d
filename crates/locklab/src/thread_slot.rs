//! Per-thread queue nodes, registered in a global table so that a lock word can name them.
//!
//! Queued locks need a node per waiting thread. The kernel keeps them per CPU, which does not work in
//! userspace (a thread can migrate while it waits), so each thread gets a [`ThreadSlot`]: its OSQ node,
//! its queued-spinlock nodes (one per nesting level) and its MCS nodes (used only when an MCS lock is
//! contended: the uncontended holder needs none). A slot is found by index in
//! [`TABLE`], which is how the queued spinlock's 14-bit tail names a waiter.
//!
//! # Lifetime
//! Slots are allocated once and never freed: the protocols may look at a node after its thread has
//! moved on (the OSQ unqueue reads a predecessor's fields that way, as the kernel does with per-CPU
//! nodes), so node memory must stay valid forever ("type-stable"). When a thread exits, its slot goes back
//! to the pool for the next new thread, unless one of its nodes is still in use (an MCS guard leaked with
//! `mem::forget`, or a thread exiting from inside a queued-spinlock wait, which safe code cannot do):
//! then the slot is kept out of the pool for good, so a queue never points at a node that someone else
//! reuses.
//!
//! Memory is bounded by the largest number of threads alive at once (at most [`MAX_SLOTS`]); past that,
//! [`current`] returns `None` and the locks fall back to paths that need no node (documented on each).

use crate::primitive::{AtomicBool, AtomicPtr, Ordering};
use crate::sleep::osq::node::OsqNode;
use crate::spin::node::McsNode;
use core::cell::Cell;
use core::ptr;
use std::sync::atomic::AtomicUsize;

/// Slots that can be named: the queued spinlock's tail holds `index + 1` in 14 bits.
pub(crate) const MAX_SLOTS: usize = (1 << 14) - 1;
/// Queued-spinlock nodes per thread: a thread waits for one queued spinlock at a time; the second level
/// serves a signal handler that interrupts a wait.
pub(crate) const QNODE_LEVELS: usize = 2;
/// MCS nodes per thread: how many MCS locks one thread can hold (or wait for) at once without falling
/// back to a heap-allocated node.
pub(crate) const MCS_LEVELS: usize = 8;

/// One thread's queue nodes. Fields in `Cell`s are touched only by the thread that owns the slot.
pub(crate) struct ThreadSlot {
    /// Position in [`TABLE`].
    pub(crate) index: u32,
    /// Node for optimistic spin queues (one: a thread spins on one lock at a time).
    pub(crate) osq: OsqNode,
    /// `osq` is in a queue (owner thread only; a signal handler on this thread sees it set and skips
    /// spinning).
    pub(crate) osq_busy: Cell<bool>,
    /// The mutex whose spin (as OSQ head) by this slot's last thread ended yielding between looks
    /// (its address), or 0: a hint, kept when the slot passes to a new thread.
    pub(crate) relocking: Cell<usize>,
    /// Nodes for queued spinlocks, by nesting level.
    pub(crate) qnodes: [McsNode; QNODE_LEVELS],
    /// How many of `qnodes` are in use (owner thread only).
    pub(crate) qdepth: Cell<usize>,
    /// Nodes for MCS locks.
    pub(crate) mcs: [McsNode; MCS_LEVELS],
    /// Bit i set: `mcs[i]` is in a queue (owner thread only).
    pub(crate) mcs_busy: Cell<u8>,
    /// Whether a live thread owns this slot.
    in_use: AtomicBool,
}

impl ThreadSlot {
    fn new(index: u32) -> Self {
        ThreadSlot {
            index,
            osq: OsqNode::with_id(index + 1),
            osq_busy: Cell::new(false),
            relocking: Cell::new(0),
            qnodes: [const { McsNode::new() }; QNODE_LEVELS],
            qdepth: Cell::new(0),
            mcs: [const { McsNode::new() }; MCS_LEVELS],
            mcs_busy: Cell::new(0),
            in_use: AtomicBool::new(true),
        }
    }
}

/// Every slot ever allocated, by index.
static TABLE: [AtomicPtr<ThreadSlot>; MAX_SLOTS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_SLOTS];
/// Indices handed out so far.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, or null. No destructor, so it can be read at any point of thread exit.
    static CURRENT: Cell<*const ThreadSlot> = const { Cell::new(ptr::null()) };
    /// The slot was given back: the thread is exiting, and takes no new one (it could not return it).
    static RELEASED: Cell<bool> = const { Cell::new(false) };
}

/// Gives the calling thread's slot back (its thread is exiting).
fn release_current() {
    RELEASED.with(|r| r.set(true));
    let slot = CURRENT.with(|c| c.replace(ptr::null()));
    if slot.is_null() {
        return;
    }
    // SAFETY: slots are never freed.
    let slot = unsafe { &*slot };
    if slot.qdepth.get() == 0 && slot.mcs_busy.get() == 0 {
        // Release pairs with the Acquire CAS in `claim`: the next owner sees our last node writes.
        slot.in_use.store(false, Ordering::Release);
    }
}

/// Runs [`release_current`] when the thread exits.
///
/// On Unix this is a POSIX thread-specific key's destructor, not a Rust thread-local destructor: the
/// latter is registered through `__cxa_thread_atexit_impl`, which calls `calloc`, and a lock taken
/// inside a `malloc` (an allocator that uses `pthread_mutex_t`, under `liblocklab_pthread.so`) must not
/// allocate. `pthread_setspecific` does not allocate for the first 32 keys of a process, and the key
/// is created early (the first registration, or the preload library's constructor). Key destructors
/// also run after every Rust and C++ thread-local destructor, so a lock taken in one of those still
/// finds its slot.
#[cfg(all(unix, not(miri)))]
mod exit_hook {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The key plus one; 0 until created; [`GIVEN_UP`] once given back to the process.
    static KEY: AtomicUsize = AtomicUsize::new(0);
    /// The key was given back ([`give_up`]): no thread arms an exit hook any more.
    const GIVEN_UP: usize = usize::MAX;

    extern "C" fn on_exit(_value: *mut libc::c_void) {
        super::release_current();
    }

    /// The process's key, created on first use.
    pub(super) fn key() -> Option<libc::pthread_key_t> {
        // Acquire pairs with the Release CAS below (the key is a plain integer; the ordering keeps
        // the creation before its use for tools that check it).
        let k = KEY.load(Ordering::Acquire);
        if k == GIVEN_UP {
            return None;
        }
        if k != 0 {
            return Some((k - 1) as libc::pthread_key_t);
        }
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: a valid out-pointer and an `extern "C"` destructor that never unwinds.
        if unsafe { libc::pthread_key_create(&mut key, Some(on_exit)) } != 0 {
            return None;
        }
        match KEY.compare_exchange(0, key as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(key),
            Err(GIVEN_UP) => {
                // SAFETY: our key was never used.
                unsafe { libc::pthread_key_delete(key) };
                None
            }
            Err(winner) => {
                // SAFETY: our key was never used.
                unsafe { libc::pthread_key_delete(key) };
                Some((winner - 1) as libc::pthread_key_t)
            }
        }
    }

    /// Gives the key back to the process for good (see [`super::give_up_exit_key`]).
    pub(super) fn give_up() -> bool {
        let k = KEY.swap(GIVEN_UP, Ordering::AcqRel);
        if k == 0 || k == GIVEN_UP {
            return false;
        }
        // SAFETY: our key; glibc runs no destructor of a deleted key.
        unsafe { libc::pthread_key_delete((k - 1) as libc::pthread_key_t) == 0 }
    }

    /// Arms the destructor for this thread (its value is the slot, any non-null pointer).
    pub(super) fn arm(slot: *const super::ThreadSlot) -> bool {
        let Some(key) = key() else { return false };
        // SAFETY: a key of this process; the value is only compared with null by glibc.
        unsafe { libc::pthread_setspecific(key, slot.cast()) == 0 }
    }
}

#[cfg(not(all(unix, not(miri))))]
mod exit_hook {
    struct Releaser;

    impl Drop for Releaser {
        fn drop(&mut self) {
            super::release_current();
        }
    }

    std::thread_local! {
        static RELEASER: Releaser = const { Releaser };
    }

    /// Arms the destructor for this thread; `false` if its thread-locals are already being torn down.
    pub(super) fn arm(_slot: *const super::ThreadSlot) -> bool {
        RELEASER.try_with(|_| ()).is_ok()
    }
}

/// Gives the thread-exit key back to the process (a program that needs every one of its
/// `PTHREAD_KEYS_MAX` keys): from then on no thread arms the exit hook, so a thread that registers a
/// slot afterwards gives it straight back (its locks take their node-less paths), and threads that
/// already hold one keep it when they exit (the slot is not reused). `true` if a key was freed.
pub(crate) fn give_up_exit_key() -> bool {
    #[cfg(all(unix, not(miri)))]
    return exit_hook::give_up();
    #[cfg(not(all(unix, not(miri))))]
    return false;
}

/// Creates the thread-exit key now (the preload library's constructor calls this, so the key is
/// among a process's first 32 and `pthread_setspecific` never allocates for it).
pub(crate) fn prepare() {
    #[cfg(all(unix, not(miri)))]
    let _ = exit_hook::key();
}

/// The calling thread's slot, registering one on first use; `None` when every slot is taken or the
/// thread is already exiting.
#[inline]
pub(crate) fn current() -> Option<&'static ThreadSlot> {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return register();
    }
    // SAFETY: non-null values of CURRENT come from TABLE, whose slots are never freed.
    Some(unsafe { &*p })
}

#[cold]
#[inline(never)]
fn register() -> Option<&'static ThreadSlot> {
    if RELEASED.with(|r| r.get()) {
        return None;
    }
    let slot = claim()?;
    // Arm the release at thread exit. If that fails (this thread's thread-locals are already torn
    // down), give the slot straight back: we must not keep a slot we could never return.
    if !exit_hook::arm(slot) {
        // Release pairs with the Acquire CAS in `claim`.
        slot.in_use.store(false, Ordering::Release);
        return None;
    }
    CURRENT.with(|c| c.set(slot));
    Some(slot)
}

fn claim() -> Option<&'static ThreadSlot> {
    let allocated = ALLOCATED.load(Ordering::Relaxed).min(MAX_SLOTS);
    for entry in &TABLE[..allocated] {
        // Acquire pairs with the Release store that published the slot.
        let p = entry.load(Ordering::Acquire);
        // SAFETY: non-null entries point to leaked, never-freed slots.
        if let Some(slot) = unsafe { p.as_ref() } {
            // Acquire pairs with the Release store in `Releaser::drop`.
            if slot
                .in_use
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(slot);
            }
        }
    }
    let index = ALLOCATED.fetch_add(1, Ordering::Relaxed);
    if index >= MAX_SLOTS {
        return None;
    }
    let slot: &'static ThreadSlot = new_slot(index as u32)?;
    // Release pairs with the Acquire loads in `claim` and `slot`: the slot's initialisation is visible
    // to whoever finds it in the table.
    TABLE[index].store(
        slot as *const ThreadSlot as *mut ThreadSlot,
        Ordering::Release,
    );
    Some(slot)
}

/// A new slot that is never freed. On Unix its memory comes from `mmap`, not `malloc`: see
/// [`exit_hook`] for why the lock paths must not allocate.
#[cfg(all(unix, not(miri)))]
fn new_slot(index: u32) -> Option<&'static ThreadSlot> {
    let size = core::mem::size_of::<ThreadSlot>();
    // SAFETY: an anonymous private mapping; no pointer is passed in.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let p = p.cast::<ThreadSlot>();
    // SAFETY: page-aligned (so 64-aligned), writable memory of the right size, never unmapped.
    unsafe {
        p.write(ThreadSlot::new(index));
        Some(&*p)
    }
}

/// A new slot that is never freed.
#[cfg(not(all(unix, not(miri))))]
fn new_slot(index: u32) -> Option<&'static ThreadSlot> {
    Some(Box::leak(Box::new(ThreadSlot::new(index))))
}

/// The calling thread's slot as an identity, null if it has none (never registers one). After the
/// slot's releaser has run this is null, even if the slot was registered before.
#[inline(always)]
pub(crate) fn current_ptr() -> *const () {
    CURRENT.with(|c| c.get()) as *const ()
}

/// The slot with the given index, if it has been published.
#[inline]
pub(crate) fn slot(index: usize) -> Option<&'static ThreadSlot> {
    // Acquire pairs with the Release store in `claim`.
    let p = TABLE.get(index)?.load(Ordering::Acquire);
    // SAFETY: non-null entries point to leaked, never-freed slots.
    unsafe { p.as_ref() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_is_stable_per_thread_and_reused_after_exit() {
        let a = current().unwrap() as *const ThreadSlot;
        assert_eq!(a, current().unwrap() as *const ThreadSlot);
        let other = std::thread::spawn(|| current().unwrap().index)
            .join()
            .unwrap();
        assert_ne!(other, current().unwrap().index);
        assert!(slot(other as usize).is_some());
        // The exited thread's slot is free again: some new thread gets it (maybe not the very next one,
        // since other tests run threads concurrently), and the table does not grow without bound.
        let before = ALLOCATED.load(Ordering::Relaxed);
        for _ in 0..64 {
            std::thread::spawn(|| current().unwrap().index)
                .join()
                .unwrap();
        }
        assert!(ALLOCATED.load(Ordering::Relaxed) < before + 64);
    }
}
