//! [`RcuCell`]: a published value that readers load without locks and writers replace, freeing the
//! old value only after a grace period.
//!
//! The cell holds a pointer to a boxed `T` (never null). Readers load it (Acquire, pairing with the
//! writer's Release swap, so they see the value fully built) under a read guard, and the reference
//! they get lives no longer than the guard and the cell. Writers swap a new box in, wait a grace period
//! of the cell's domain (every reader that could hold the old pointer has finished), and only then
//! free or return the old box.

use super::{RcuDomain, RcuReadGuard};
use core::sync::atomic::{AtomicPtr, Ordering};

/// An RCU-protected value: lock-free reads under an [`RcuReadGuard`], replacement that waits for
/// readers before the old value is dropped.
///
/// ```
/// use locklab::rcu::{RcuCell, read_lock};
/// let config = RcuCell::new(String::from("v1"));
/// {
///     let g = read_lock();
///     assert_eq!(config.load(&g), "v1");
/// }
/// let old = config.replace(String::from("v2")); // waits for readers of "v1"
/// assert_eq!(*old, "v1");
/// config.update(|s| format!("{s}+"));
/// assert_eq!(config.load(&read_lock()), "v2+");
/// ```
pub struct RcuCell<T> {
    ptr: AtomicPtr<T>,
    domain: &'static RcuDomain,
}

// SAFETY: readers on any thread get `&T` (needs `T: Sync`); the old value is dropped or returned on a
// writer's thread (needs `T: Send`). The pointer itself is shared through an atomic.
unsafe impl<T: Send + Sync> Sync for RcuCell<T> {}
// SAFETY: moving the cell moves ownership of the boxed `T` (needs `T: Send`); a `&T` handed out
// earlier cannot outlive the borrow of the cell, so no reader on another thread can be left behind.
unsafe impl<T: Send + Sync> Send for RcuCell<T> {}

impl<T> RcuCell<T> {
    /// A cell in the global domain.
    ///
    /// ```
    /// let c = locklab::rcu::RcuCell::new(5);
    /// assert_eq!(*c.load(&locklab::rcu::read_lock()), 5);
    /// ```
    pub fn new(value: T) -> Self {
        Self::with_domain(value, RcuDomain::global())
    }

    /// A cell whose readers and grace periods belong to `domain`.
    ///
    /// ```
    /// use locklab::rcu::{RcuCell, RcuDomain};
    /// static D: RcuDomain = RcuDomain::new();
    /// let c = RcuCell::with_domain(1u32, &D);
    /// assert_eq!(*c.load(&D.read_lock()), 1);
    /// ```
    pub fn with_domain(value: T, domain: &'static RcuDomain) -> Self {
        RcuCell {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
            domain,
        }
    }

    /// The current value, valid while both the guard and the cell are.
    ///
    /// Panics if the guard belongs to another domain (it would not hold off this cell's writers).
    ///
    /// ```
    /// let c = locklab::rcu::RcuCell::new(vec![1, 2]);
    /// let g = locklab::rcu::read_lock();
    /// assert_eq!(c.load(&g).len(), 2);
    /// ```
    #[inline]
    pub fn load<'a>(&'a self, guard: &'a RcuReadGuard) -> &'a T {
        assert!(
            core::ptr::eq(guard.domain(), self.domain),
            "locklab::rcu: RcuCell::load with a guard of another domain"
        );
        // Acquire pairs with the Release half of the writer's swap: the value is fully written.
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: `p` came from `Box::into_raw` and is never null. It is freed only after a grace
        // period that began after it was unpublished; `guard` is a read-side section of this cell's
        // domain that began before this load, so that grace period waits for it, and the returned
        // reference cannot outlive `guard` (nor the cell, whose drop frees the current value).
        unsafe { &*p }
    }

    /// Publishes `value`, waits for a grace period, and returns the old value (no reader holds it).
    ///
    /// Panics inside a read-side section of the cell's domain (the grace period would wait for it).
    ///
    /// ```
    /// let c = locklab::rcu::RcuCell::new(1);
    /// assert_eq!(*c.replace(2), 1);
    /// ```
    pub fn replace(&self, value: T) -> Box<T> {
        let new = Box::into_raw(Box::new(value));
        // AcqRel: Release publishes the new value to readers' Acquire loads; Acquire makes the old
        // value's contents ours to drop.
        let old = self.ptr.swap(new, Ordering::AcqRel);
        self.domain.synchronize();
        // SAFETY: `old` came from `Box::into_raw`, was unpublished by the swap (no one else got it from
        // a swap: each swap returns a distinct pointer), and the grace period above waited for every
        // reader that could have loaded it.
        unsafe { Box::from_raw(old) }
    }

    /// Publishes `value` and drops the old one after a grace period.
    ///
    /// ```
    /// let c = locklab::rcu::RcuCell::new("a");
    /// c.store("b");
    /// assert_eq!(*c.load(&locklab::rcu::read_lock()), "b");
    /// ```
    pub fn store(&self, value: T) {
        drop(self.replace(value));
    }

    /// Publishes `value` and returns at once: the old value is dropped after a grace period, on the
    /// domain's grace-period thread (`defer_drop`), so writers never wait for readers.
    ///
    /// ```
    /// let c = locklab::rcu::RcuCell::new(String::from("a"));
    /// c.store_deferred(String::from("b"));
    /// assert_eq!(c.load(&locklab::rcu::read_lock()), "b");
    /// ```
    pub fn store_deferred(&self, value: T)
    where
        T: Send + 'static,
    {
        let new = Box::into_raw(Box::new(value));
        // AcqRel as in `replace`.
        let old = self.ptr.swap(new, Ordering::AcqRel);
        // SAFETY: `old` came from `Box::into_raw` and was unpublished by the swap (ours alone);
        // `defer_drop` drops it only after a grace period, when no reader can hold it.
        self.domain.defer_drop(unsafe { Box::from_raw(old) });
    }

    /// Replaces the value with `f(old)` atomically (retrying if another writer got in between), then
    /// drops the old value after a grace period. `f` may run more than once.
    ///
    /// ```
    /// let c = locklab::rcu::RcuCell::new(1u64);
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| for _ in 0..10 { c.update(|v| v + 1) });
    ///     }
    /// });
    /// assert_eq!(*c.load(&locklab::rcu::read_lock()), 41);
    /// ```
    pub fn update(&self, mut f: impl FnMut(&T) -> T) {
        loop {
            let guard = self.domain.read_lock();
            let cur = self.ptr.load(Ordering::Acquire);
            // SAFETY: as in `load`: `cur` is protected by `guard` until it drops below.
            let new = Box::into_raw(Box::new(f(unsafe { &*cur })));
            // AcqRel as in `replace`; Relaxed on failure: we retry from a fresh Acquire load.
            match self
                .ptr
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    drop(guard);
                    self.domain.synchronize();
                    // SAFETY: as in `replace`: our CAS unpublished `cur`, and the grace period waited
                    // for its readers.
                    drop(unsafe { Box::from_raw(cur) });
                    return;
                }
                Err(_) => {
                    // SAFETY: `new` was never published; we still own it.
                    drop(unsafe { Box::from_raw(new) });
                }
            }
        }
    }
}

impl<T> Drop for RcuCell<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reference from `load` is alive (they borrow the cell), and the
        // pointer came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(*self.ptr.get_mut()) });
    }
}
