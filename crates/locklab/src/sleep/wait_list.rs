//! The FIFO wait list of sleeping waiters shared by the sleeping locks ([`crate::raw::RawMutex`],
//! [`crate::raw::RawCondvar`]).
//!
//! Each waiter is a [`Waiter`] node on the waiting thread's stack, sleeping on *its own* futex word. That
//! is what makes hand-off possible: a waker can tell one chosen waiter "the lock is yours" by writing its
//! word, which a single shared futex word cannot express.
//!
//! The list is intrusive and doubly linked, so a timed-out waiter removes itself in O(1). It is protected
//! by its owner's internal lock (a small spinlock, held for a few instructions); all link fields are
//! read and written only with that lock held.
//!
//! # A waiter's word
//! | `futex`    | meaning                                                                    |
//! |------------|----------------------------------------------------------------------------|
//! | `SLEEPING` | asleep, or about to sleep; set by the waiter itself under the list lock      |
//! | `WOKEN`    | woken to retry: dequeued by the waker (mutex) or still queued (rwsem)        |
//! | `HANDED`   | the lock was handed to this waiter, which has been removed from the list   |
//! | `NOTIFIED` | (condvar) notified and dequeued: it re-locks with `lock()`                    |
//! | `WATCHING` | (condvar) queued on the condvar, running and watching its word: it will not sleep before a compare-and-swap to `SLEEPING` |
//!
//! # Lifetime rule
//! A waker's store to a waiter's `futex` is its *last access* to the node: after it the waiter may
//! return and free its stack frame. The waker may still pass the word's address to `futex_wake`, which
//! never dereferences it (see [`crate::sys::futex_wake`]).

use crate::clock::{Deadline, Stamp, time_left};
use crate::primitive::{AtomicU32, Ordering};
use crate::primitive::{SpinWait, spin_loop};
use crate::sys::futex_wait;
use core::cell::{Cell, UnsafeCell};
use core::ptr;

/// Asleep or about to sleep.
pub(crate) const SLEEPING: u32 = 0;
/// Woken to retry, still queued.
pub(crate) const WOKEN: u32 = 1;
/// Handed the lock, dequeued by the waker.
pub(crate) const HANDED: u32 = 2;
/// A notified condvar waiter, dequeued: in no list; it takes the mutex like any locker.
pub(crate) const NOTIFIED: u32 = 3;
/// A condvar waiter still queued on the condvar and watching its word (running, not asleep): a notifier
/// moves it with a compare-and-swap to `NOTIFIED` and no futex wake; the waiter goes to sleep only
/// after its own compare-and-swap to `SLEEPING`.
pub(crate) const WATCHING: u32 = 4;

/// One sleeping thread. Lives on its thread's stack while the thread waits.
pub(crate) struct Waiter {
    /// What the waker says; see the module table.
    pub(crate) futex: AtomicU32,
    /// The thread's owner tag, written into the lock word when the lock is handed to it.
    pub(crate) tag: u32,
    /// When it joined its current list: decides when it may ask for hand-off.
    pub(crate) since: Stamp,
    /// Condvar bookkeeping: still in the condvar's list (not yet moved to the mutex's).
    pub(crate) in_condvar: Cell<bool>,
    /// RwSem: a reader (else a writer).
    pub(crate) reader: bool,
    /// Condvar: the CPU the waiter queued on (`u32::MAX`: unknown), for `notify_one`'s choice.
    pub(crate) cpu: Cell<u32>,
    prev: Cell<*const Waiter>,
    next: Cell<*const Waiter>,
}

impl Waiter {
    pub(crate) fn new(tag: u32) -> Self {
        Self::with_kind(tag, false)
    }

    /// A waiter for an rwsem: `reader` or writer.
    pub(crate) fn with_kind(tag: u32, reader: bool) -> Self {
        Waiter {
            futex: AtomicU32::new(SLEEPING),
            tag,
            since: Stamp::now(),
            in_condvar: Cell::new(false),
            reader,
            cpu: Cell::new(u32::MAX),
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
        }
    }
}

impl Waiter {
    /// Sleeps until a waker changes our word (WOKEN or HANDED); returns `true` if `deadline` passed
    /// first. Spurious futex returns are absorbed here.
    pub(crate) fn sleep(&self, deadline: Option<&Deadline>) -> bool {
        loop {
            // Acquire pairs with the wakers' Release stores of WOKEN/HANDED.
            if self.futex.load(Ordering::Acquire) != SLEEPING {
                return false;
            }
            match time_left(deadline) {
                None => return true,
                Some(left) => {
                    futex_wait(&self.futex, SLEEPING, left);
                }
            }
        }
    }
}

/// The list lock: a test-and-set spinlock held for a few instructions, whose word also keeps the
/// fork epoch ([`crate::sys::fork_epoch`]) of its last holder.
///
/// | bits  | meaning                                  |
/// |-------|------------------------------------------|
/// | 0     | held                                     |
/// | 1-31  | fork epoch of the last (or current) holder |
///
/// Taking it in a later epoch than its last holder's means a `fork` came between: the list (and the
/// lock itself, if it was held then) belongs to threads the child does not have. The taker then takes
/// the lock whatever its held bit says and drops the list ([`LockedList::lock`] reports it, so the owner
/// can also clear its waiter flags).
pub(crate) struct ListLock {
    word: AtomicU32,
}

/// Busy looks at a held list lock before yielding: held for a few instructions unless its holder
/// was preempted, and a woken waiter that finds its waker holding it must give the CPU back at once
/// (the waker is probably waiting for this very CPU), not after a thousand rounds of backoff.
const LIST_SPINS: u32 = 16;

impl ListLock {
    crate::primitive::const_unless_loom! {
        /// A free lock of epoch 0.
        pub(crate) fn new() -> Self {
            ListLock {
                word: AtomicU32::new(0),
            }
        }
    }

    /// Takes the lock; `true` if the protected state is from an earlier fork epoch (stale).
    #[inline]
    pub(crate) fn lock(&self) -> bool {
        let epoch = crate::sys::fork_epoch() & (u32::MAX >> 1);
        let mine = (epoch << 1) | 1;
        let mut wait = SpinWait::with_spins(LIST_SPINS);
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            let stale = w >> 1 != epoch;
            if w & 1 == 0 || stale {
                // Acquire pairs with the Release store of the previous holder's unlock.
                match self
                    .word
                    .compare_exchange(w, mine, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => return stale,
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            spin_loop();
            wait.wait();
            w = self.word.load(Ordering::Relaxed);
        }
    }

    /// Whether the lock was last taken before the latest `fork` (a look, without taking it): the
    /// state it protects, and any flag its users set under it, is a parent's. A lock taken in this
    /// epoch since stays fresh, so a `true` here means no thread of this process has used the list.
    #[inline]
    pub(crate) fn is_stale(&self) -> bool {
        let epoch = crate::sys::fork_epoch() & (u32::MAX >> 1);
        // Relaxed: a hint for the caller, which takes the lock (and re-decides under it) if set.
        self.word.load(Ordering::Relaxed) >> 1 != epoch
    }

    /// Releases the lock, keeping the holder's epoch in the word.
    ///
    /// # Safety
    /// The caller holds the lock.
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        // Only the holder writes the word while it is held. Release pairs with the next holder's
        // Acquire CAS: publishes the list changes.
        let w = self.word.load(Ordering::Relaxed);
        self.word.store(w & !1, Ordering::Release);
    }
}

/// A wait list held under its owner's [`ListLock`]: the lock is released when this drops, and
/// then the futex wake-up queued with [`wake_after_unlock`](Self::wake_after_unlock) (if any) is made.
pub(crate) struct LockedList<'a> {
    lock: &'a ListLock,
    list: &'a UnsafeCell<WaitList>,
    /// A waiter's word to `futex_wake` once the lock is released.
    wake: *const AtomicU32,
    /// The list was from an earlier fork epoch and has been emptied.
    pub(crate) was_stale: bool,
}

impl<'a> LockedList<'a> {
    /// Takes `lock`, which must be the lock that protects `list` (every access to `list` goes through a
    /// `LockedList` made with the same lock). A list from an earlier fork epoch is emptied first
    /// (`was_stale`): its waiters did not survive the fork.
    pub(crate) fn lock(lock: &'a ListLock, list: &'a UnsafeCell<WaitList>) -> Self {
        let was_stale = lock.lock();
        if was_stale {
            // SAFETY: the lock is ours; the nodes named are copies of vanished threads' stack frames,
            // never touched again.
            unsafe { *list.get() = WaitList::new() };
        }
        LockedList {
            lock,
            list,
            wake: ptr::null(),
            was_stale,
        }
    }

    /// Makes the `futex_wake` of `word` (a waiter's word whose WOKEN/HANDED store the caller just
    /// made, its last access to the node) after the list lock is released. Waking while holding it
    /// made the woken thread, which needs the list lock first, run in place of the waker and spin on a
    /// lock whose holder was off the CPU. Only the address is kept: `futex_wake`
    /// never dereferences it (the lifetime rule above).
    pub(crate) fn wake_after_unlock(&mut self, word: *const AtomicU32) {
        if !self.wake.is_null() {
            crate::sys::futex_wake(self.wake, 1);
        }
        self.wake = word;
    }
}

impl core::ops::Deref for LockedList<'_> {
    type Target = WaitList;
    fn deref(&self) -> &WaitList {
        // SAFETY: `lock` is held for this guard's life and protects `list`.
        unsafe { &*self.list.get() }
    }
}

impl core::ops::DerefMut for LockedList<'_> {
    fn deref_mut(&mut self) -> &mut WaitList {
        // SAFETY: as above, and `&mut self` makes this access unique.
        unsafe { &mut *self.list.get() }
    }
}

impl Drop for LockedList<'_> {
    fn drop(&mut self) {
        // SAFETY: taken in `LockedList::lock`.
        unsafe { self.lock.unlock() }
        if !self.wake.is_null() {
            crate::sys::futex_wake(self.wake, 1);
        }
    }
}

/// A FIFO of [`Waiter`]s. Every method requires the owner's list lock (enforced by the owner handing
/// out `&mut WaitList` only under it).
pub(crate) struct WaitList {
    head: *const Waiter,
    tail: *const Waiter,
}

impl WaitList {
    pub(crate) const fn new() -> Self {
        WaitList {
            head: ptr::null(),
            tail: ptr::null(),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// The longest waiter.
    #[inline]
    pub(crate) fn front(&self) -> Option<&Waiter> {
        // SAFETY: queued nodes stay alive until removed (the lifetime rule: a waiter never returns while
        // queued), and we are under the list lock.
        unsafe { self.head.as_ref() }
    }

    /// Appends `w`.
    ///
    /// # Safety
    /// `w` is in no list and stays alive and unmoved until it is removed from this one.
    pub(crate) unsafe fn push_back(&mut self, w: &Waiter) {
        w.next.set(ptr::null());
        w.prev.set(self.tail);
        // SAFETY: the old tail is queued, hence alive.
        match unsafe { self.tail.as_ref() } {
            Some(t) => t.next.set(w),
            None => self.head = w,
        }
        self.tail = w;
    }

    /// Puts `w` first (a mutex waiter that was woken and lost the race keeps its place).
    ///
    /// # Safety
    /// As [`push_back`](Self::push_back).
    pub(crate) unsafe fn push_front(&mut self, w: &Waiter) {
        w.prev.set(ptr::null());
        w.next.set(self.head);
        // SAFETY: the old head is queued, hence alive.
        match unsafe { self.head.as_ref() } {
            Some(h) => h.prev.set(w),
            None => self.tail = w,
        }
        self.head = w;
    }

    /// Unlinks `w`.
    ///
    /// # Safety
    /// `w` is in this list.
    pub(crate) unsafe fn remove(&mut self, w: &Waiter) {
        let (prev, next) = (w.prev.get(), w.next.get());
        // SAFETY: neighbours of a queued node are queued, hence alive.
        unsafe {
            match prev.as_ref() {
                Some(p) => p.next.set(next),
                None => self.head = next,
            }
            match next.as_ref() {
                Some(n) => n.prev.set(prev),
                None => self.tail = prev,
            }
        }
        w.prev.set(ptr::null());
        w.next.set(ptr::null());
    }

    /// Removes and returns the first `n` waiters as a list of their own (in order).
    pub(crate) fn split_front(&mut self, n: usize) -> WaitList {
        let mut taken = WaitList::new();
        for _ in 0..n {
            let Some(w) = self.front() else { break };
            let w = w as *const Waiter;
            // SAFETY: `w` is this list's front; it is queued, hence alive, and moves list to list.
            unsafe {
                self.remove(&*w);
                taken.push_back(&*w);
            }
        }
        taken
    }

    /// Moves every waiter of `other` to the back of this list, in order.
    pub(crate) fn append(&mut self, other: &mut WaitList) {
        // SAFETY: both lists' nodes are alive while queued; we relink only their ends.
        unsafe {
            match (self.tail.as_ref(), other.head.as_ref()) {
                (_, None) => return,
                (Some(t), Some(h)) => {
                    t.next.set(h);
                    h.prev.set(t);
                }
                (None, Some(_)) => self.head = other.head,
            }
        }
        self.tail = other.tail;
        *other = WaitList::new();
    }

    /// Removes and returns up to `max` readers from anywhere in the list, in order (writers stay).
    pub(crate) fn take_readers(&mut self, max: usize) -> WaitList {
        let mut taken = WaitList::new();
        let mut n = 0;
        let mut p = self.head;
        // SAFETY: queued nodes are alive; we read `next` before relinking a node.
        while let Some(w) = unsafe { p.as_ref() } {
            if n == max {
                break;
            }
            p = w.next.get();
            if w.reader {
                // SAFETY: `w` is in this list; it moves list to list.
                unsafe {
                    self.remove(w);
                    taken.push_back(w);
                }
                n += 1;
            }
        }
        taken
    }

    /// Hands the lock to every waiter of this (detached) list: stores HANDED into each and wakes it.
    /// Each store is the last access to its node (the waiter may free it at once), so nodes are reached
    /// through raw pointers only, never through a `&Waiter` that would outlive the store.
    pub(crate) fn hand_all(self) {
        let mut p = self.head;
        while !p.is_null() {
            // SAFETY: `p` is queued in this list, so alive until its HANDED store below; we read its
            // successor first, and touch only its atomic word afterwards (by raw place, no `&Waiter`).
            unsafe {
                let next = (*p).next.get();
                let word: *const AtomicU32 = ptr::addr_of!((*p).futex);
                // Release pairs with the waiter's Acquire load of HANDED.
                (*word).store(HANDED, Ordering::Release);
                crate::sys::futex_wake(word, 1);
                p = next;
            }
        }
    }

    /// The waiter nearest the back, among the last `max`, for which `f` holds.
    pub(crate) fn find_from_back(
        &self,
        max: usize,
        f: impl Fn(&Waiter) -> bool,
    ) -> Option<&Waiter> {
        let mut p = self.tail;
        for _ in 0..max {
            // SAFETY: queued nodes are alive while the list lock is held (the caller's `&self`).
            let w = unsafe { p.as_ref() }?;
            if f(w) {
                return Some(w);
            }
            p = w.prev.get();
        }
        None
    }

    /// Unlinks and returns the front waiter, as a raw pointer: the caller's next store to it may be
    /// its last access (the lifetime rule), so no `&Waiter` is handed out.
    pub(crate) fn pop_front(&mut self) -> Option<*const Waiter> {
        let w = self.head;
        // SAFETY: the front is queued, hence alive; `remove` only relinks.
        unsafe { self.remove(w.as_ref()?) };
        Some(w)
    }

    /// Calls `f` on every waiter, front to back.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Waiter)) {
        let mut p = self.head;
        // SAFETY: queued nodes are alive; `f` does not unlink (it only sees `&Waiter`, and the links are
        // private to this module).
        while let Some(w) = unsafe { p.as_ref() } {
            p = w.next.get();
            f(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(l: &WaitList) -> Vec<u32> {
        let mut v = vec![];
        l.for_each(|w| v.push(w.tag));
        v
    }

    #[test]
    fn push_remove_split_append() {
        let ws: Vec<Waiter> = (0..5).map(Waiter::new).collect();
        let mut l = WaitList::new();
        assert!(l.is_empty());
        for w in &ws {
            unsafe { l.push_back(w) };
        }
        assert_eq!(order(&l), [0, 1, 2, 3, 4]);
        unsafe { l.remove(&ws[2]) };
        unsafe { l.remove(&ws[0]) };
        unsafe { l.remove(&ws[4]) };
        assert_eq!(order(&l), [1, 3]);
        assert_eq!(l.front().unwrap().tag, 1);
        let mut front = l.split_front(1);
        assert_eq!(order(&front), [1]);
        assert_eq!(order(&l), [3]);
        front.append(&mut l);
        assert!(l.is_empty());
        assert_eq!(order(&front), [1, 3]);
        let mut empty = WaitList::new();
        empty.append(&mut front);
        assert_eq!(order(&empty), [1, 3]);
        unsafe { empty.remove(&ws[1]) };
        unsafe { empty.remove(&ws[3]) };
        assert!(empty.is_empty());
    }

    /// `find_from_back` looks at no more than `max` waiters from the tail, nearest first;
    /// `pop_front` unlinks in order and leaves the list empty at the end.
    #[test]
    fn find_from_back_and_pop_front() {
        let ws: Vec<Waiter> = (0..5).map(Waiter::new).collect();
        let mut l = WaitList::new();
        assert!(l.find_from_back(4, |_| true).is_none());
        for w in &ws {
            unsafe { l.push_back(w) };
        }
        assert_eq!(l.find_from_back(4, |_| true).unwrap().tag, 4);
        assert_eq!(l.find_from_back(4, |w| w.tag < 3).unwrap().tag, 2);
        assert_eq!(l.find_from_back(4, |w| w.tag == 1).unwrap().tag, 1);
        assert!(
            l.find_from_back(4, |w| w.tag == 0).is_none(),
            "beyond `max`"
        );
        assert!(l.find_from_back(0, |_| true).is_none());
        let mut popped = vec![];
        while let Some(w) = l.pop_front() {
            popped.push(unsafe { (*w).tag });
        }
        assert_eq!(popped, [0, 1, 2, 3, 4]);
        assert!(l.is_empty());
        unsafe { l.push_back(&ws[3]) };
        assert_eq!(order(&l), [3], "relinked cleanly after popping");
    }

    /// `push_front` on an empty and a non-empty list keeps both ends linked: removals from either
    /// end and a later `push_back` see the right neighbours.
    #[test]
    fn push_front_links_both_ends() {
        let ws: Vec<Waiter> = (0..4).map(Waiter::new).collect();
        let mut l = WaitList::new();
        // SAFETY (every block below): the waiters outlive the list, and each is pushed only while in no
        // list and removed only while in this one.
        unsafe { l.push_front(&ws[1]) };
        assert_eq!(order(&l), [1]);
        unsafe {
            l.push_front(&ws[0]);
            l.push_back(&ws[2]);
        }
        assert_eq!(order(&l), [0, 1, 2]);
        unsafe {
            l.remove(&ws[2]);
            l.push_back(&ws[3]);
        }
        assert_eq!(order(&l), [0, 1, 3]);
        unsafe { l.remove(&ws[0]) };
        assert_eq!(l.front().unwrap().tag, 1);
        unsafe { l.push_front(&ws[2]) };
        assert_eq!(order(&l), [2, 1, 3]);
        for i in [1, 3, 2] {
            unsafe { l.remove(&ws[i]) };
        }
        assert!(l.is_empty());
        unsafe {
            l.push_front(&ws[0]);
            l.push_back(&ws[1]);
        }
        assert_eq!(order(&l), [0, 1]);
    }
}
