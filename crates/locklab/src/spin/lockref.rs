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
//! 3. The count never passes [`MAX_COUNT`]: every increment (lockless or locked) checks the value it
//!    replaces and aborts the process instead, as `Arc` does, before anything is written. Abort, not
//!    panic: a caught panic would let the caller go on, and on the locked path would leave the embedded
//!    lock held forever. A count driven there by `mem::forget` of handles can therefore never wrap.
//! 4. At most 65,535 tickets are outstanding: a locker that finds `next - served == 0xffff` waits for
//!    room instead of taking a ticket that would equal `served` (the CAS sees both halves at once).
//!
//! # Who may change the count
//! [`LockRef`] is a counter with public get/put operations; its count means what its owner makes it
//! mean. [`LockRefArc`] frees its value when its count drops to zero, so it keeps its `LockRef`
//! private: no safe call can change the count behind its handles' backs.
//!
//! # Memory orderings
//! - Lockless gets are Relaxed: taking a reference publishes nothing.
//! - Lockless puts are Release, and the lock acquisition is Acquire: every RMW on the word continues the
//!   release sequence, so a thread that takes the lock to run a release path (after the last put) sees
//!   everything every earlier holder of a reference did (as `Arc`'s drop does with its fence).
//! - Lock: the ticket CAS is Relaxed, the wait for `served` is Acquire; unlock's `fetch_add` is Release.

use crate::primitive::{AtomicU64, Ordering, SpinWait};

/// Lockless attempts before falling back to the lock.
///
/// ```
/// use locklab::spin::lockref::CMPXCHG_LOOPS;
/// assert!(CMPXCHG_LOOPS > 0); // then the lock is taken instead
/// ```
pub const CMPXCHG_LOOPS: u32 = 100;
/// The count a dead lockref holds (`mark_dead`).
///
/// ```
/// use locklab::{LockRef, spin::lockref::DEAD};
/// let r = LockRef::new(0);
/// r.lock();
/// // SAFETY: the `lock` above took the embedded lock.
/// unsafe { r.mark_dead() };
/// // SAFETY: still held from the `lock` above.
/// unsafe { r.unlock() };
/// assert_eq!(r.count(), DEAD);
/// ```
pub const DEAD: i32 = -128;
/// The largest count: an increment from here aborts the process (invariant 3). Half of `i32::MAX`,
/// as `Arc`'s bound is half of `usize::MAX`: far beyond any real count, and checked exactly.
///
/// ```
/// use locklab::{LockRef, spin::lockref::MAX_COUNT};
/// let r = LockRef::new(MAX_COUNT - 1);
/// r.get(); // reaches the bound; one more `get` would abort the process
/// assert_eq!(r.count(), MAX_COUNT);
/// ```
pub const MAX_COUNT: i32 = i32::MAX / 2;

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
///
/// ```
/// use locklab::LockRef;
/// let r = LockRef::new(1);
/// r.get(); // lockless: one compare-exchange
/// assert!(r.put_not_zero()); // 2 -> 1
/// // The last reference: returns with the embedded lock held and the count frozen, so the owner can
/// // tear the object down knowing nobody takes a new reference meanwhile.
/// assert!(r.put_or_lock());
/// assert!(r.is_locked() && r.count() == 1);
/// unsafe {
///     r.mark_dead(); // get_not_dead fails from now on
///     r.unlock();
/// }
/// assert!(!r.get_not_dead());
/// ```
pub struct LockRef {
    word: AtomicU64,
}

/// Aborts if the count moving by `delta` from `c` would pass [`MAX_COUNT`] (invariant 3).
#[inline(always)]
fn check_room(c: i32, delta: i32) {
    if delta > 0 && c >= MAX_COUNT {
        count_overflow();
    }
}

#[cold]
#[inline(never)]
fn count_overflow() -> ! {
    #[cfg(not(loom))]
    {
        eprintln!("locklab: LockRef count overflow (more than {MAX_COUNT} references): aborting");
        std::process::abort();
    }
    #[cfg(loom)]
    panic!("LockRef count overflow");
}

/// What a lockless attempt concluded.
enum Lockless<R> {
    /// Done, with this result.
    Done(R),
    /// The lock was held, or the retries ran out: use the lock.
    Fallback,
}

impl LockRef {
    crate::primitive::const_unless_loom! {
        /// A lockref holding `count`, unlocked.
        ///
        /// ```
        /// let r = locklab::LockRef::new(1);
        /// assert_eq!(r.count(), 1);
        /// assert!(!r.is_locked());
        /// ```
        pub fn new(count: i32) -> Self {
            LockRef {
                word: AtomicU64::new(with_count(0, count)),
            }
        }
    }

    /// The lockless loop: while unlocked, `refuse(count)` may give a final answer without a change
    /// (`Some`); otherwise the count moves by `delta` (+1 or -1) with one CAS and the answer is
    /// `done(old count)`. A put (`delta < 0`) is Release.
    ///
    /// The new word is `old + (delta << 32)` (the count is the top half, so the lock halves are
    /// untouched and `delta` folds into a constant): on x86-64 that keeps one `add` between the load
    /// and the `lock cmpxchg` instead of an extract-and-reinsert of the count; the retry countdown
    /// after the CAS keeps a flag off the hot path (criterion, both: get+put 8.5 -> 5.7 ns).
    #[inline(always)]
    fn cmpxchg_loop<R>(
        &self,
        delta: i32,
        refuse: impl Fn(i32) -> Option<R>,
        done: impl Fn(i32) -> R,
    ) -> Lockless<R> {
        let success = if delta < 0 {
            Ordering::Release
        } else {
            Ordering::Relaxed
        };
        let step = (delta as u32 as u64) << COUNT_SHIFT;
        let mut old = self.word.load(Ordering::Relaxed);
        let mut tries = CMPXCHG_LOOPS;
        while unlocked(old) {
            let c = count(old);
            if let Some(r) = refuse(c) {
                return Lockless::Done(r);
            }
            check_room(c, delta); // before anything is written
            match self.word.compare_exchange_weak(
                old,
                old.wrapping_add(step),
                success,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Lockless::Done(done(c)),
                Err(now) => old = now,
            }
            tries -= 1;
            if tries == 0 {
                break;
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
    ///
    /// ```
    /// let r = locklab::LockRef::new(1);
    /// r.get();
    /// assert_eq!(r.count(), 2);
    /// ```
    #[inline]
    pub fn get(&self) {
        self.op(1, |_| None, |_| ())
    }

    /// Takes a reference unless the count is zero or less. Returns whether it did.
    ///
    /// ```
    /// let r = locklab::LockRef::new(1);
    /// assert!(r.get_not_zero());
    /// assert_eq!(r.count(), 2);
    /// let gone = locklab::LockRef::new(0);
    /// assert!(!gone.get_not_zero());
    /// assert_eq!(gone.count(), 0);
    /// ```
    #[inline]
    pub fn get_not_zero(&self) -> bool {
        self.op(1, |c| (c <= 0).then_some(false), |_| true)
    }

    /// Takes a reference unless the lockref is dead (count < 0). Returns whether it did.
    ///
    /// ```
    /// let r = locklab::LockRef::new(0);
    /// assert!(r.get_not_dead()); // zero is not dead
    /// r.lock();
    /// // SAFETY: the `lock` above took the embedded lock.
    /// unsafe { r.mark_dead() };
    /// // SAFETY: still held from the `lock` above.
    /// unsafe { r.unlock() };
    /// assert!(!r.get_not_dead());
    /// ```
    #[inline]
    pub fn get_not_dead(&self) -> bool {
        self.op(1, |c| (c < 0).then_some(false), |_| true)
    }

    /// Drops a reference unless it is the last one (count <= 1). Returns whether it did.
    ///
    /// ```
    /// let r = locklab::LockRef::new(2);
    /// assert!(r.put_not_zero());
    /// assert_eq!(r.count(), 1);
    /// assert!(!r.put_not_zero()); // the last reference stays
    /// assert_eq!(r.count(), 1);
    /// ```
    #[inline]
    pub fn put_not_zero(&self) -> bool {
        self.op(-1, |c| (c <= 1).then_some(false), |_| true)
    }

    /// Drops a reference locklessly and returns the new count; `-1` (and no change) if the count is
    /// <= 0, the lock is held, or the retries ran out. Never takes the lock: the caller has a slow path.
    ///
    /// ```
    /// let r = locklab::LockRef::new(2);
    /// assert_eq!(r.put_return(), 1);
    /// assert_eq!(r.put_return(), 0);
    /// assert_eq!(r.put_return(), -1); // nothing left: no change
    /// assert_eq!(r.count(), 0);
    /// ```
    #[inline]
    pub fn put_return(&self) -> i32 {
        match self.cmpxchg_loop(-1, |c| (c <= 0).then_some(-1), |c| c - 1) {
            Lockless::Done(r) => r,
            Lockless::Fallback => -1,
        }
    }

    /// Drops a reference if it is not the last (count > 1) and returns `false`; otherwise returns `true`
    /// **with the lock held** and the count unchanged, so the caller can run its release path.
    ///
    /// ```
    /// let r = locklab::LockRef::new(2);
    /// assert!(!r.put_or_lock()); // not the last: dropped
    /// assert_eq!(r.count(), 1);
    /// assert!(r.put_or_lock()); // the last: the lock is held, the count unchanged
    /// assert!(r.is_locked());
    /// assert_eq!(r.count(), 1);
    /// // SAFETY: `put_or_lock` returned `true`, so this thread holds the lock.
    /// unsafe { r.mark_dead() };
    /// // SAFETY: as above.
    /// unsafe { r.unlock() };
    /// ```
    #[inline]
    pub fn put_or_lock(&self) -> bool {
        let lockless = self.cmpxchg_loop(-1, |c| (c <= 1).then_some(true), |_| false);
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

    /// The lockless loop, then the same operation under the lock if it fell back.
    #[inline(always)]
    fn op<R>(&self, delta: i32, refuse: impl Fn(i32) -> Option<R>, done: impl Fn(i32) -> R) -> R {
        match self.cmpxchg_loop(delta, &refuse, &done) {
            Lockless::Done(r) => r,
            Lockless::Fallback => self.locked_op(delta, refuse, done),
        }
    }

    /// The operation under the lock: `refuse(count)` answers without a change, else the count moves
    /// by `delta`.
    #[cold]
    fn locked_op<R>(
        &self,
        delta: i32,
        refuse: impl Fn(i32) -> Option<R>,
        done: impl Fn(i32) -> R,
    ) -> R {
        self.lock();
        let c = count(self.word.load(Ordering::Relaxed));
        let r = match refuse(c) {
            Some(r) => r,
            None => {
                check_room(c, delta); // aborts with the lock held, nothing written
                self.add_locked(delta);
                done(c)
            }
        };
        // SAFETY: taken just above.
        unsafe { self.unlock() };
        r
    }

    /// Marks the lockref dead (count = [`DEAD`]): `get_not_dead` fails from now on.
    ///
    /// # Safety
    /// The caller holds the lock.
    ///
    /// ```
    /// let r = locklab::LockRef::new(1);
    /// r.lock();
    /// // SAFETY: the `lock` above took the embedded lock.
    /// unsafe { r.mark_dead() };
    /// // SAFETY: still held from the `lock` above.
    /// unsafe { r.unlock() };
    /// assert_eq!(r.count(), locklab::spin::lockref::DEAD);
    /// assert!(!r.get_not_dead());
    /// ```
    pub unsafe fn mark_dead(&self) {
        let c = count(self.word.load(Ordering::Relaxed));
        self.add_locked(DEAD.wrapping_sub(c));
    }

    /// Takes the embedded ticket lock.
    ///
    /// ```
    /// let r = locklab::LockRef::new(1);
    /// r.lock();
    /// assert!(r.is_locked());
    /// assert_eq!(r.put_return(), -1); // the lockless paths stand back while it is held
    /// assert_eq!(r.count(), 1);
    /// // SAFETY: the `lock` above took the embedded lock.
    /// unsafe { r.unlock() };
    /// ```
    pub fn lock(&self) {
        let mut old = self.word.load(Ordering::Relaxed);
        let mut room = SpinWait::new();
        let ticket = loop {
            let t = next(old);
            if t.wrapping_sub(served(old)) == u16::MAX {
                // 65,535 tickets out: one more would equal `served` (invariant 4). Wait for room.
                room.wait();
                old = self.word.load(Ordering::Relaxed);
                continue;
            }
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
    ///
    /// ```
    /// let r = locklab::LockRef::new(1);
    /// r.lock();
    /// // SAFETY: the `lock` above took the embedded lock.
    /// unsafe { r.unlock() };
    /// assert!(!r.is_locked());
    /// ```
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
    ///
    /// ```
    /// let r = locklab::LockRef::new(3);
    /// assert_eq!(r.count(), 3);
    /// ```
    pub fn count(&self) -> i32 {
        count(self.word.load(Ordering::Relaxed))
    }

    /// Whether the embedded lock is held (a snapshot).
    ///
    /// ```
    /// let r = locklab::LockRef::new(1);
    /// assert!(!r.is_locked());
    /// r.lock();
    /// assert!(r.is_locked());
    /// // SAFETY: the `lock` above took the embedded lock.
    /// unsafe { r.unlock() };
    /// ```
    pub fn is_locked(&self) -> bool {
        !unlocked(self.word.load(Ordering::Relaxed))
    }
}

/// A reference-counted `T` whose count is a [`LockRef`]: clones are one lockless CAS; the last drop
/// decides under the lock (`put_or_lock`), marks the count dead and frees the value.
///
/// ```
/// use locklab::LockRefArc;
/// let a = LockRefArc::new(String::from("shared"));
/// let b = a.clone();
/// assert_eq!(LockRefArc::count(&a), 2);
/// std::thread::spawn(move || assert_eq!(*b, "shared")).join().unwrap();
/// assert_eq!(LockRefArc::count(&a), 1);
/// ```
///
/// Its count is private: nothing outside can drop a reference that a handle still owns. This does
/// not compile:
///
/// ```compile_fail
/// let a = locklab::LockRefArc::new(1);
/// locklab::LockRefArc::lockref(&a).put_return();
/// ```
///
/// Like `Arc`, it aborts the process rather than let a count driven up by `mem::forget` wrap
/// ([`MAX_COUNT`]).
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
    ///
    /// ```
    /// let a = locklab::LockRefArc::new(5);
    /// assert_eq!(*a, 5);
    /// assert_eq!(locklab::LockRefArc::count(&a), 1);
    /// ```
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
    ///
    /// ```
    /// use locklab::LockRefArc;
    /// let a = LockRefArc::new(());
    /// let b = a.clone();
    /// assert_eq!(LockRefArc::count(&a), 2);
    /// drop(b);
    /// assert_eq!(LockRefArc::count(&a), 1);
    /// ```
    pub fn count(this: &Self) -> i32 {
        this.inner().count.count()
    }

    // No accessor to the inner `LockRef`: its safe `put_*`/`get` would change the count that `Drop`
    // relies on (the `compile_fail` example on the type checks it stays so).
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

#[cfg(all(test, not(loom), not(miri)))]
mod overflow_tests {
    //! A count driven to the bound aborts the process on every increment path. Each
    //! case runs in a child process (this test binary, re-run with the case named in the environment).
    use super::*;
    use std::process::Command;

    const CASE: &str = "LOCKLAB_LOCKREF_OVERFLOW_CASE";

    /// A lockref at the bound; `locked`: with the embedded lock held by a helper thread, so the
    /// increment takes the locked path.
    fn at_bound() -> LockRef {
        let l = LockRef::new(0);
        l.word.store(with_count(0, MAX_COUNT), Ordering::Relaxed);
        l
    }

    fn run_case(name: &str) {
        let l: &'static LockRef = Box::leak(Box::new(at_bound()));
        let locked = name.ends_with("locked");
        if locked {
            // Hold the embedded lock for a moment so the increment falls back to the locked path.
            l.lock();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                unsafe { l.unlock() };
            });
        }
        match name.trim_end_matches("_locked") {
            "get" => l.get(),
            "get_not_zero" => {
                l.get_not_zero();
            }
            "get_not_dead" => {
                l.get_not_dead();
            }
            "arc_clone" => {
                let a = LockRefArc::new(5u8);
                // SAFETY (test): the only handle; set its count to the bound as if MAX_COUNT - 1
                // clones had been forgotten.
                a.inner()
                    .count
                    .word
                    .store(with_count(0, MAX_COUNT), Ordering::Relaxed);
                std::mem::forget(a.clone());
            }
            other => panic!("unknown case {other}"),
        }
        // Reaching here means the increment did not abort: report it distinctly.
        std::process::exit(3);
    }

    #[test]
    fn child() {
        if let Ok(name) = std::env::var(CASE) {
            run_case(&name);
        }
    }

    #[test]
    fn every_increment_aborts_at_the_bound() {
        let exe = std::env::current_exe().unwrap();
        // This module's test path without the crate name: where `child` is, wherever the file moves.
        let child = format!("{}::child", module_path!().split_once("::").unwrap().1);
        for case in [
            "get",
            "get_locked",
            "get_not_zero",
            "get_not_zero_locked",
            "get_not_dead",
            "get_not_dead_locked",
            "arc_clone",
        ] {
            let out = Command::new(&exe)
                .args(["--exact", &child, "--nocapture"])
                .env(CASE, case)
                .output()
                .unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGABRT),
                "{case}: expected an abort, got {:?}; stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("LockRef count overflow"),
                "{case}: the abort says why"
            );
        }
        // Below the bound everything still works, locked or not.
        let l = LockRef::new(MAX_COUNT - 2);
        l.get();
        assert!(l.get_not_zero());
        assert_eq!(l.count(), MAX_COUNT);
    }

    #[test]
    fn tickets_wait_for_room_instead_of_wrapping() {
        // 65,535 tickets out (as if that many threads queued): a new locker must not take ticket
        // `served` again. It waits; when one ticket is served it gets in line.
        let l: &'static LockRef = Box::leak(Box::new(LockRef::new(1)));
        l.word.store(
            (0xffffu64 << NEXT_SHIFT) | with_count(0, 1),
            Ordering::Relaxed,
        );
        let t = std::thread::spawn(move || l.lock());
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(!t.is_finished(), "a locker took a ticket equal to `served`");
        assert_eq!(
            next(l.word.load(Ordering::Relaxed)),
            0xffff,
            "no ticket taken"
        );
        // Serve every outstanding ticket (as their holders would, one after another).
        for _ in 0..0xffff {
            unsafe { l.unlock() };
        }
        t.join().unwrap();
        assert!(l.is_locked());
    }
}
