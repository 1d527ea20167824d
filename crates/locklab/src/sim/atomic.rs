//! The atomics of a simulated build: each is `core`'s atomic with the simulator consulted before
//! every access (for its turn and its cost) and, for loads, told the value read afterwards. Outside a
//! simulation (a thread that is not a virtual thread) they are `core`'s atomics and nothing more.
//! Their methods are `core`'s, with `core`'s documentation (the subset locklab uses), except that a
//! weak compare-exchange never fails spuriously (runs stay deterministic).
//!
//! ```
//! use locklab::sim::atomic::{AtomicU64, Ordering};
//! let a = AtomicU64::new(1);
//! a.fetch_add(2, Ordering::Relaxed);
//! assert_eq!(a.load(Ordering::Relaxed), 3);
//! ```

use super::{Access, loaded, mem};
pub use core::sync::atomic::Ordering;

/// A fence: a full (SeqCst) one costs the machine's `fence_ns`; the others cost nothing on the
/// total-store-order machines the descriptions model.
///
/// ```
/// locklab::sim::atomic::fence(locklab::sim::atomic::Ordering::SeqCst);
/// ```
#[inline]
pub fn fence(order: Ordering) {
    super::fence(order == Ordering::SeqCst);
    core::sync::atomic::fence(order);
}

fn store_kind(order: Ordering) -> Access {
    if order == Ordering::SeqCst {
        Access::Rmw
    } else {
        Access::Store
    }
}

macro_rules! sim_int {
    ($name:ident, $int:ty, $doc:literal, $zero:literal, $one:literal) => {
        #[doc = concat!("`core`'s `", stringify!($name), "` (", $doc, ") with every access simulated.")]
        ///
        /// ```
        #[doc = concat!("let a = locklab::sim::atomic::", stringify!($name), "::new(", stringify!($zero), ");")]
        #[doc = concat!("assert_eq!(a.swap(", stringify!($one), ", locklab::sim::atomic::Ordering::AcqRel), ", stringify!($zero), ");")]
        /// ```
        #[repr(transparent)]
        #[derive(Default)]
        pub struct $name(core::sync::atomic::$name);

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<$int> for $name {
            fn from(v: $int) -> Self {
                Self::new(v)
            }
        }

        #[allow(missing_docs)]
        impl $name {
            #[inline]
            pub const fn new(v: $int) -> Self {
                Self(core::sync::atomic::$name::new(v))
            }
            #[inline]
            fn addr(&self) -> usize {
                self as *const Self as usize
            }
            /// The `core` atomic underneath (accessed without the simulator).
            #[inline]
            pub fn inner(&self) -> &core::sync::atomic::$name {
                &self.0
            }
            #[inline]
            pub fn load(&self, order: Ordering) -> $int {
                mem(self.addr(), Access::Load);
                let v = self.0.load(order);
                loaded(self.addr(), v as u64);
                v
            }
            #[inline]
            pub fn store(&self, v: $int, order: Ordering) {
                mem(self.addr(), store_kind(order));
                self.0.store(v, order)
            }
            #[inline]
            pub fn swap(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.swap(v, order)
            }
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                mem(self.addr(), Access::Rmw);
                self.0.compare_exchange(current, new, success, failure)
            }
            #[inline]
            pub fn compare_exchange_weak(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                // Never fails spuriously here: the simulation stays deterministic.
                self.compare_exchange(current, new, success, failure)
            }
            #[inline]
            pub fn fetch_update<F: FnMut($int) -> Option<$int>>(
                &self,
                set: Ordering,
                fetch: Ordering,
                f: F,
            ) -> Result<$int, $int> {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_update(set, fetch, f)
            }
            #[inline]
            pub fn get_mut(&mut self) -> &mut $int {
                self.0.get_mut()
            }
            #[inline]
            pub fn into_inner(self) -> $int {
                self.0.into_inner()
            }
            #[inline]
            pub const fn as_ptr(&self) -> *mut $int {
                self.0.as_ptr()
            }
        }
    };
}

macro_rules! sim_arith {
    ($name:ident, $int:ty) => {
        #[allow(missing_docs)]
        impl $name {
            #[inline]
            pub fn fetch_add(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_add(v, order)
            }
            #[inline]
            pub fn fetch_sub(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_sub(v, order)
            }
            #[inline]
            pub fn fetch_max(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_max(v, order)
            }
            #[inline]
            pub fn fetch_min(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_min(v, order)
            }
        }
        sim_bits!($name, $int);
    };
}

macro_rules! sim_bits {
    ($name:ident, $int:ty) => {
        #[allow(missing_docs)]
        impl $name {
            #[inline]
            pub fn fetch_or(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_or(v, order)
            }
            #[inline]
            pub fn fetch_and(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_and(v, order)
            }
            #[inline]
            pub fn fetch_xor(&self, v: $int, order: Ordering) -> $int {
                mem(self.addr(), Access::Rmw);
                self.0.fetch_xor(v, order)
            }
        }
    };
}

sim_int!(AtomicU8, u8, "8 bits", 0, 1);
sim_int!(AtomicU16, u16, "16 bits", 0, 1);
sim_int!(AtomicU32, u32, "32 bits", 0, 1);
sim_int!(AtomicU64, u64, "64 bits", 0, 1);
sim_int!(AtomicUsize, usize, "a word", 0, 1);
sim_int!(AtomicBool, bool, "a flag", false, true);
sim_arith!(AtomicU8, u8);
sim_arith!(AtomicU16, u16);
sim_arith!(AtomicU32, u32);
sim_arith!(AtomicU64, u64);
sim_arith!(AtomicUsize, usize);
sim_bits!(AtomicBool, bool);

/// `core`'s `AtomicPtr` with every access simulated.
///
/// ```
/// let mut x = 5;
/// let p = locklab::sim::atomic::AtomicPtr::new(&mut x as *mut i32);
/// assert!(!p.load(locklab::sim::atomic::Ordering::Acquire).is_null());
/// ```
#[repr(transparent)]
pub struct AtomicPtr<T>(core::sync::atomic::AtomicPtr<T>);

impl<T> Default for AtomicPtr<T> {
    fn default() -> Self {
        Self::new(core::ptr::null_mut())
    }
}

impl<T> core::fmt::Debug for AtomicPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

#[allow(missing_docs)]
impl<T> AtomicPtr<T> {
    #[inline]
    pub const fn new(p: *mut T) -> Self {
        Self(core::sync::atomic::AtomicPtr::new(p))
    }
    #[inline]
    fn addr(&self) -> usize {
        self as *const Self as usize
    }
    #[inline]
    pub fn load(&self, order: Ordering) -> *mut T {
        mem(self.addr(), Access::Load);
        let v = self.0.load(order);
        loaded(self.addr(), v as usize as u64);
        v
    }
    #[inline]
    pub fn store(&self, p: *mut T, order: Ordering) {
        mem(self.addr(), store_kind(order));
        self.0.store(p, order)
    }
    #[inline]
    pub fn swap(&self, p: *mut T, order: Ordering) -> *mut T {
        mem(self.addr(), Access::Rmw);
        self.0.swap(p, order)
    }
    #[inline]
    pub fn compare_exchange(
        &self,
        current: *mut T,
        new: *mut T,
        success: Ordering,
        failure: Ordering,
    ) -> Result<*mut T, *mut T> {
        mem(self.addr(), Access::Rmw);
        self.0.compare_exchange(current, new, success, failure)
    }
    #[inline]
    pub fn compare_exchange_weak(
        &self,
        current: *mut T,
        new: *mut T,
        success: Ordering,
        failure: Ordering,
    ) -> Result<*mut T, *mut T> {
        self.compare_exchange(current, new, success, failure)
    }
    #[inline]
    pub fn fetch_update<F: FnMut(*mut T) -> Option<*mut T>>(
        &self,
        set: Ordering,
        fetch: Ordering,
        f: F,
    ) -> Result<*mut T, *mut T> {
        mem(self.addr(), Access::Rmw);
        self.0.fetch_update(set, fetch, f)
    }
    #[inline]
    pub fn get_mut(&mut self) -> &mut *mut T {
        self.0.get_mut()
    }
    #[inline]
    pub fn into_inner(self) -> *mut T {
        self.0.into_inner()
    }
}
