//! `LockRef`: a spinlock and a reference count in one 64-bit word, so the common get/put is one
//! compare-exchange instead of a lock/unlock pair (seed 002: "serializing instructions are really
//! expensive" even single-threaded).
//!
//! # Algorithm (after the kernel's `lib/lockref.c`)
//! Get/put read the word and, **while the embedded lock reads unlocked**, compute the new count and
//! `cas` the whole word. After [`CMPXCHG_LOOPS`] failed attempts, or as soon as the lock is seen held, they
//! fall back to lock; modify; unlock. Holding the lock therefore freezes the count against lockless
//! updates: the lock holder may inspect the count and act on it (e.g. run a release path when it is the
//! last reference) knowing nobody changes it behind its back.
//!
//! # State word
//! | bits  | field                                                                   |
//! |-------|-------------------------------------------------------------------------|
//! | 0-15  | spinlock: ticket now served                                             |
//! | 16-31 | spinlock: next ticket (unlocked iff next == served; queued waiters count as locked) |
//! | 32-63 | count, `i32` (negative: dead, see [`LockRef::mark_dead`])               |
//!
//! The lock is a ticket lock operated on the whole 64-bit word (Rust forbids mixing 32- and 64-bit
//! atomic accesses to the same bytes): lock = CAS that takes a ticket; unlock = `fetch_add(1)` on the
//! served half (a CAS on the rare wrap from 0xffff). While it is held the holder changes the count with
//! `fetch_add` on the high half, since waiters keep taking tickets in the low half.
//!
//! # Invariants
//! 1. The count changes only by a lockless CAS that saw the lock unlocked, or by the lock holder.
//! 2. So while the lock is held the count never changes except by the holder (a lockless CAS needs an
//!    unlocked word, and every word it could compare against has the lock taken).
//!
//! # Memory orderings
//! - Lockless gets are Relaxed: taking a reference publishes nothing.
//! - Lockless puts are Release, and the lock acquisition is Acquire: every RMW on the word continues the
//!   release sequence, so a thread that takes the lock to run a release path (after the last put) sees
//!   everything every earlier holder of a reference did (as `Arc`'s drop does with its fence).
//! - Lock: the ticket CAS is Relaxed, the wait for `served` is Acquire; unlock's `fetch_add` is Release.

use crate::primitive::{AtomicU64, Ordering, SpinWait};

/// Lockless attempts before falling back to the lock.
pub const CMPXCHG_LOOPS: u32 = 100;
/// The count a dead lockref holds (`mark_dead`).
pub const DEAD: i32 = -128;

const SERVED_MASK: u64 = 0xffff;
const NEXT_SHIFT: u32 = 16;
const COUNT_SHIFT: u32 = 32;

#[inline]
const fn served(w: u64) -> u16 {
    (w & SERVED_MASK) as u16
}
#[inline]
const fn next(w: u64) -> u16 {
    ((w >> NEXT_SHIFT) & SERVED_MASK) as u16
}
#[inline]
const fn unlocked(w: u64) -> bool {
    served(w) == next(w)
}
#[inline]
const fn count(w: u64) -> i32 {
    (w >> COUNT_SHIFT) as u32 as i32
}
#[inline]
const fn with_count(w: u64, c: i32) -> u64 {
    (w & 0xffff_ffff) | ((c as u32 as u64) << COUNT_SHIFT)
}

/// A spinlock and a count in one word. See the [module documentation](self).
pub struct LockRef {
    word: AtomicU64,
}

/// What a lockless attempt concluded.
enum Lockless<R> {
    /// Done, with this result.
    Done(R),
    /// The lock was held, or the retries ran out: use the lock.
    Fallback,
}

impl LockRef {
    /// A lockref holding `count`, unlocked.
    #[cfg(not(loom))]
    pub const fn new(count: i32) -> Self {
        LockRef {
            word: AtomicU64::new(with_count(0, count)),
        }
    }

    /// A lockref holding `count`, unlocked (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new(count: i32) -> Self {
        LockRef {
            word: AtomicU64::new(with_count(0, count)),
        }
    }

    /// The lockless loop: while unlocked, `f(count)` says the new count (`Ok`) or a final answer
    /// without change (`Err`); `put` selects Release for the CAS.
    #[inline]
    fn cmpxchg_loop<R>(&self, put: bool, f: impl Fn(i32) -> Result<(i32, R), R>) -> Lockless<R> {
        let success = if put {
            Ordering::Release
        } else {
            Ordering::Relaxed
        };
        let mut old = self.word.load(Ordering::Relaxed);
        for _ in 0..CMPXCHG_LOOPS {
            if !unlocked(old) {
                break;
            }
            match f(count(old)) {
                Err(r) => return Lockless::Done(r),
                Ok((c, r)) => match self.word.compare_exchange_weak(
                    old,
                    with_count(old, c),
                    success,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Lockless::Done(r),
                    Err(now) => old = now,
                },
            }
        }
        Lockless::Fallback
    }

    /// The holder's count update (invariant 1): an RMW on the high half, as waiters change the low half.
    #[inline]
    fn add_locked(&self, delta: i32) {
        // Relaxed: ordered by the lock we hold.
        self.word
            .fetch_add((delta as u32 as u64) << COUNT_SHIFT, Ordering::Relaxed);
    }

    /// Takes a reference (the caller already holds one, or otherwise knows the object is live).
    #[inline]
    pub fn get(&self) {
        if let Lockless::Done(()) = self.cmpxchg_loop(false, |c| Ok((c.wrapping_add(1), ()))) {
            return;
        }
        self.lock();
        self.add_locked(1);
        // SAFETY: taken just above.
        unsafe { self.unlock() };
    }

    /// Takes a reference unless the count is zero or less. Returns whether it did.
    #[inline]
    pub fn get_not_zero(&self) -> bool {
        let f = |c: i32| {
            if c <= 0 {
                Err(false)
            } else {
                Ok((c + 1, true))
            }
        };
        if let Lockless::Done(r) = self.cmpxchg_loop(false, f) {
            return r;
        }
        self.locked_op(f)
    }

    /// Takes a reference unless the lockref is dead (count < 0). Returns whether it did.
    #[inline]
    pub fn get_not_dead(&self) -> bool {
        let f = |c: i32| if c < 0 { Err(false) } else { Ok((c + 1, true)) };
        if let Lockless::Done(r) = self.cmpxchg_loop(false, f) {
            return r;
        }
        self.locked_op(f)
    }

    /// Drops a reference unless it is the last one (count <= 1). Returns whether it did.
    #[inline]
    pub fn put_not_zero(&self) -> bool {
        let f = |c: i32| {
            if c <= 1 {
                Err(false)
            } else {
                Ok((c - 1, true))
            }
        };
        if let Lockless::Done(r) = self.cmpxchg_loop(true, f) {
            return r;
        }
        self.locked_op(f)
    }

    /// Drops a reference locklessly and returns the new count; `-1` (and no change) if the count is
    /// <= 0, the lock is held, or the retries ran out. Never takes the lock: the caller has a slow path.
    #[inline]
    pub fn put_return(&self) -> i32 {
        match self.cmpxchg_loop(true, |c| if c <= 0 { Err(-1) } else { Ok((c - 1, c - 1)) }) {
            Lockless::Done(r) => r,
            Lockless::Fallback => -1,
        }
    }

    /// Drops a reference if it is not the last (count > 1) and returns `false`; otherwise returns `true`
    /// **with the lock held** and the count unchanged, so the caller can run its release path.
    #[inline]
    pub fn put_or_lock(&self) -> bool {
        let lockless = self.cmpxchg_loop(true, |c| {
            if c <= 1 {
                Err(true)
            } else {
                Ok((c - 1, false))
            }
        });
        if let Lockless::Done(false) = lockless {
            return false;
        }
        self.lock();
        if count(self.word.load(Ordering::Relaxed)) <= 1 {
            return true;
        }
        self.add_locked(-1);
        // SAFETY: taken just above.
        unsafe { self.unlock() };
        false
    }

    /// Runs `f` on the count under the lock: `Ok((new, r))` stores `new`, `Err(r)` changes nothing.
    #[cold]
    fn locked_op<R>(&self, f: impl Fn(i32) -> Result<(i32, R), R>) -> R {
        self.lock();
        let c = count(self.word.load(Ordering::Relaxed));
        let r = match f(c) {
            Ok((new, r)) => {
                self.add_locked(new.wrapping_sub(c));
                r
            }
            Err(r) => r,
        };
        // SAFETY: taken just above.
        unsafe { self.unlock() };
        r
    }

    /// Marks the lockref dead (count = [`DEAD`]): `get_not_dead` fails from now on.
    ///
    /// # Safety
    /// The caller holds the lock.
    pub unsafe fn mark_dead(&self) {
        let c = count(self.word.load(Ordering::Relaxed));
        self.add_locked(DEAD.wrapping_sub(c));
    }

    /// Takes the embedded ticket lock.
    pub fn lock(&self) {
        let mut old = self.word.load(Ordering::Relaxed);
        let ticket = loop {
            let t = next(old);
            let new =
                (old & !(SERVED_MASK << NEXT_SHIFT)) | ((t.wrapping_add(1) as u64) << NEXT_SHIFT);
            // Relaxed: the ticket is all we take here; the Acquire is the wait for `served` below.
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break t,
                Err(now) => old = now,
            }
        };
        let mut wait = SpinWait::new();
        // Acquire pairs with the Release `fetch_add` in `unlock` (and, through the word's release
        // sequence, with the Release puts).
        while served(self.word.load(Ordering::Acquire)) != ticket {
            wait.wait();
        }
    }

    /// Releases the embedded lock.
    ///
    /// # Safety
    /// The caller holds the lock.
    pub unsafe fn unlock(&self) {
        let w = self.word.load(Ordering::Relaxed);
        if served(w) != u16::MAX {
            // Release pairs with the Acquire wait in `lock`. No carry: served < 0xffff.
            self.word.fetch_add(1, Ordering::Release);
            return;
        }
        let mut old = w;
        loop {
            let new = old & !SERVED_MASK; // 0xffff + 1 wraps to 0 within the half
            // Release as above.
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => old = now,
            }
        }
    }

    /// The count (a snapshot).
    pub fn count(&self) -> i32 {
        count(self.word.load(Ordering::Relaxed))
    }

    /// Whether the embedded lock is held (a snapshot).
    pub fn is_locked(&self) -> bool {
        !unlocked(self.word.load(Ordering::Relaxed))
    }
}

/// A reference-counted `T` whose count is a [`LockRef`]: clones are one lockless CAS; the last drop
/// decides under the lock (`put_or_lock`), marks the count dead and frees the value.
#[cfg(not(loom))]
pub struct LockRefArc<T> {
    ptr: core::ptr::NonNull<LockRefInner<T>>,
}

#[cfg(not(loom))]
struct LockRefInner<T> {
    count: LockRef,
    value: T,
}

// SAFETY: as `Arc<T>`: handles share `&T` across threads (needs Sync) and the last one drops `T`
// wherever it is (needs Send).
#[cfg(not(loom))]
unsafe impl<T: Send + Sync> Send for LockRefArc<T> {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl<T: Send + Sync> Sync for LockRefArc<T> {}

#[cfg(not(loom))]
impl<T> LockRefArc<T> {
    /// A new value with one reference.
    pub fn new(value: T) -> Self {
        let inner = Box::new(LockRefInner {
            count: LockRef::new(1),
            value,
        });
        LockRefArc {
            ptr: core::ptr::NonNull::from(Box::leak(inner)),
        }
    }

    fn inner(&self) -> &LockRefInner<T> {
        // SAFETY: the allocation lives while any handle does (we hold one).
        unsafe { self.ptr.as_ref() }
    }

    /// How many handles exist (a snapshot).
    pub fn count(this: &Self) -> i32 {
        this.inner().count.count()
    }

    /// The lockref itself.
    pub fn lockref(this: &Self) -> &LockRef {
        &this.inner().count
    }
}

#[cfg(not(loom))]
impl<T> Clone for LockRefArc<T> {
    fn clone(&self) -> Self {
        self.inner().count.get();
        LockRefArc { ptr: self.ptr }
    }
}

#[cfg(not(loom))]
impl<T> core::ops::Deref for LockRefArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

#[cfg(not(loom))]
impl<T> Drop for LockRefArc<T> {
    fn drop(&mut self) {
        let c = &self.inner().count;
        if !c.put_or_lock() {
            return;
        }
        // The release path, under the lock: ours is the last reference (count 1 and frozen), and the
        // Acquire lock acquisition saw every other handle's Release put.
        // SAFETY: `put_or_lock` returned with the lock held.
        unsafe {
            c.mark_dead();
            c.unlock();
            drop(Box::from_raw(self.ptr.as_ptr()));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn operations() {
        let l = LockRef::new(1);
        l.get();
        assert_eq!(l.count(), 2);
        assert!(l.put_not_zero());
        assert!(
            !l.put_not_zero(),
            "the last reference is not dropped by put_not_zero"
        );
        assert_eq!(l.put_return(), 0);
        assert_eq!(l.put_return(), -1, "count 0: no change");
        assert!(!l.get_not_zero());
        assert!(l.get_not_dead());
        assert!(l.get_not_zero());
        assert_eq!(l.count(), 2);
        assert!(!l.put_or_lock());
        assert!(l.put_or_lock(), "count 1: returns with the lock held");
        assert!(l.is_locked());
        assert_eq!(l.put_return(), -1, "lock held: no lockless put");
        unsafe {
            l.mark_dead();
            l.unlock();
        }
        assert_eq!(l.count(), DEAD);
        assert!(!l.get_not_dead());
        assert!(!l.get_not_zero());
    }

    #[test]
    fn lock_freezes_the_count_and_wraps_tickets() {
        let l = LockRef::new(5);
        for _ in 0..70_000 {
            l.lock();
            unsafe { l.unlock() };
        }
        assert!(!l.is_locked());
        assert_eq!(
            l.count(),
            5,
            "65536+ lock/unlock cycles wrap the ticket halves without touching the count"
        );
    }

    #[test]
    fn no_lost_updates_under_contention() {
        let l = Arc::new(LockRef::new(0));
        let n = if cfg!(miri) { 50 } else { 10_000 };
        let hs: Vec<_> = (0..6)
            .map(|i| {
                let l = l.clone();
                std::thread::spawn(move || {
                    let mut net = 0i64;
                    for j in 0..n {
                        l.get();
                        net += 1;
                        if (i + j) % 97 == 0 {
                            // a holder sees a frozen count
                            l.lock();
                            let c = l.count();
                            for _ in 0..10 {
                                std::hint::spin_loop();
                            }
                            assert_eq!(l.count(), c, "the count changed while the lock was held");
                            unsafe { l.unlock() };
                        }
                        if l.put_return() >= 0 {
                            net -= 1;
                        }
                        l.get();
                        net += 1;
                        if l.put_not_zero() {
                            net -= 1;
                        }
                        if !l.put_or_lock() {
                            net -= 1;
                        } else {
                            unsafe { l.unlock() };
                        }
                    }
                    net
                })
            })
            .collect();
        let total: i64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(
            l.count() as i64,
            total,
            "every successful get and put is counted exactly once"
        );
    }

    #[test]
    fn arc_drops_the_value_once() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct D;
        impl Drop for D {
            fn drop(&mut self) {
                DROPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let a = LockRefArc::new(D);
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for _ in 0..if cfg!(miri) { 10 } else { 10_000 } {
                        drop(a.clone());
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(LockRefArc::count(&a), 1);
        assert_eq!(DROPS.load(std::sync::atomic::Ordering::SeqCst), 0);
        drop(a);
        assert_eq!(DROPS.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
