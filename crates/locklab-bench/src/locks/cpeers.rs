//! The strongest C and C++ locks as peers: Concurrency Kit's spinlocks, rwlock, big-reader lock and
//! epoch reclamation (`ck-*`), oneTBB's mutexes (`tbb-*`) and Abseil's `Mutex` (`absl-*`).
//!
//! Built through the shims in `csrc/` (`ck.c`, `tbb_absl.cc`) when pkg-config finds the library at
//! build time (Debian's `libck-dev`, `libtbb-dev`, `libabsl-dev`; `.ci/run` installs them). Without
//! it a library's names stay in the registry, listed as unavailable with the package to install.
//!
//! What the rows cost that a C or C++ program would not pay: each lock and unlock is a call into the
//! shim (the libraries' fast paths are inline functions in their headers, compiled into the shim, not
//! into the lab's loop), about 1 ns per call on current x86; the locks live in their own 128-byte
//! allocations, as ours do in their adapters. MCS, CLH and TBB's queuing locks keep their per-thread
//! queue node in a thread-local (the lab's threads hold one lock at a time).

#[cfg(any(ck, tbb, absl))]
use super::Kind;
use super::{LockInfo, Unavailable, unavailable};
use crate::engine::workload::Workload;

/// One peer: its name, the workloads it runs, and its summary.
struct Row {
    name: &'static str,
    summary: &'static str,
    workloads: &'static [Workload],
}

const MUTEX: &[Workload] = &[Workload::Mutex];
const RW: &[Workload] = &[Workload::Mutex, Workload::Rw];
const EPOCH: &[Workload] = &[Workload::RcuRead, Workload::CallRcu, Workload::RcuUpdate];

const CK: &[Row] = &[
    Row {
        name: "ck-mcs",
        summary: "Concurrency Kit's MCS queue spinlock (C, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "ck-clh",
        summary: "Concurrency Kit's CLH queue spinlock (C, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "ck-ticket",
        summary: "Concurrency Kit's ticket spinlock (C, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "ck-tas",
        summary: "Concurrency Kit's test-and-set (fetch-and-store) spinlock (C, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "ck-rwlock",
        summary: "Concurrency Kit's reader-writer spinlock (C, via the FFI)",
        workloads: RW,
    },
    Row {
        name: "ck-brlock",
        summary: "Concurrency Kit's big-reader lock: a registered reader per thread (C, via the FFI)",
        workloads: RW,
    },
    Row {
        name: "ck-epoch",
        summary: "Concurrency Kit's epoch reclamation: begin/end sections; ck_epoch_call, polled every 32 retires (C, via the FFI)",
        workloads: EPOCH,
    },
];

const TBB: &[Row] = &[
    Row {
        name: "tbb-spin-mutex",
        summary: "oneTBB's spin_mutex: test-and-set with backoff, then yield (C++, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "tbb-queuing-mutex",
        summary: "oneTBB's queuing_mutex: an MCS-style fair queue (C++, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "tbb-spin-rw-mutex",
        summary: "oneTBB's spin_rw_mutex: writer-preferring reader-writer spinlock (C++, via the FFI)",
        workloads: RW,
    },
    Row {
        name: "tbb-queuing-rw-mutex",
        summary: "oneTBB's queuing_rw_mutex: a fair queue of readers and writers (C++, via the FFI)",
        workloads: RW,
    },
];

const ABSL: &[Row] = &[
    Row {
        name: "absl-mutex",
        summary: "Abseil's absl::Mutex, exclusive only: one word, spin then per-thread wait (C++, via the FFI)",
        workloads: MUTEX,
    },
    Row {
        name: "absl-rwlock",
        summary: "Abseil's absl::Mutex with ReaderLock for shared sections (C++, via the FFI)",
        workloads: RW,
    },
];

/// The registry entries of one library's rows, unavailable ones listed with `why`.
#[cfg_attr(all(ck, tbb, absl), allow(dead_code))] // every library found: nothing to list
fn listed(rows: &'static [Row], why: &'static str) -> Vec<LockInfo> {
    rows.iter()
        .map(|r| {
            unavailable(
                r.name,
                r.summary,
                Unavailable {
                    why,
                    workloads: r.workloads,
                },
            )
        })
        .collect()
}

/// Looks up a row's summary (so the built entries and the unavailable ones say the same).
#[cfg_attr(not(any(ck, tbb, absl)), allow(dead_code))] // no library found: no built rows
fn summary(rows: &'static [Row], name: &str) -> &'static str {
    rows.iter()
        .find(|r| r.name == name)
        .map(|r| r.summary)
        .unwrap_or("")
}

/// Every C/C++ peer row: built, or unavailable with its reason.
pub fn peers() -> Vec<LockInfo> {
    let mut v = Vec::new();
    #[cfg(ck)]
    v.extend(built::ck());
    #[cfg(not(ck))]
    v.extend(listed(
        CK,
        "built without Concurrency Kit (install libck-dev, then rebuild)",
    ));
    #[cfg(tbb)]
    v.extend(built::tbb());
    #[cfg(not(tbb))]
    v.extend(listed(
        TBB,
        "built without oneTBB (install libtbb-dev, then rebuild)",
    ));
    #[cfg(absl)]
    v.extend(built::absl());
    #[cfg(not(absl))]
    v.extend(listed(
        ABSL,
        "built without Abseil (install libabsl-dev, then rebuild)",
    ));
    v
}

/// An adapter over a shim's lock: `new`/`free` make and free the C object, `lock`/`unlock` take
/// it exclusively, and `read`/`read_unlock` (if given) shared.
#[cfg(any(ck, tbb, absl))]
macro_rules! ffi_lock {
    ($adapter:ident, new = $new:expr, free = $free:path, lock = $lock:path, unlock = $unlock:path
     $(, read = $rl:path, read_unlock = $ru:path)? $(,)?) => {
        /// Adapter over a shim's lock (see the registry for its summary).
        pub struct $adapter {
            l: std::ptr::NonNull<core::ffi::c_void>,
            data: std::cell::UnsafeCell<$crate::engine::workload::Shared>,
        }
        // SAFETY: `data` is touched only with the C lock held (exclusively for `&mut`); the C lock
        // is made to be shared by threads.
        unsafe impl Sync for $adapter {}
        // SAFETY: as above; no thread holds the lock when the adapter moves.
        unsafe impl Send for $adapter {}
        impl $crate::locks::LockUnderTest for $adapter {
            const HAS_SHARED_MODE: bool = ffi_lock!(@shared $($rl)?);
            fn new() -> Self {
                // SAFETY: the shim's constructor: a new, unheld lock, or null if out of memory.
                let p = unsafe { $new };
                let l = std::ptr::NonNull::new(p).unwrap_or_else(|| {
                    std::alloc::handle_alloc_error(std::alloc::Layout::new::<[u8; 128]>())
                });
                $adapter {
                    l,
                    data: Default::default(),
                }
            }
            #[inline(always)]
            fn exclusive<R>(&self, f: impl FnOnce(&mut $crate::engine::workload::Shared) -> R) -> R {
                /// Unlocks when dropped, so a panicking section cannot leave the lock held.
                struct Held(*mut core::ffi::c_void);
                impl Drop for Held {
                    #[inline(always)]
                    fn drop(&mut self) {
                        // SAFETY: taken by `exclusive` on this thread, released once.
                        unsafe { $unlock(self.0) };
                    }
                }
                // SAFETY: a live lock from `new`; released by `_held` on this thread.
                unsafe { $lock(self.l.as_ptr()) };
                let _held = Held(self.l.as_ptr());
                // SAFETY: the lock is held exclusively: no other reference to `data` exists.
                f(unsafe { &mut *self.data.get() })
            }
            $(
            #[inline(always)]
            fn shared<R>(&self, f: impl FnOnce(&$crate::engine::workload::Shared) -> R) -> R {
                /// Unlocks when dropped.
                struct Held(*mut core::ffi::c_void);
                impl Drop for Held {
                    #[inline(always)]
                    fn drop(&mut self) {
                        // SAFETY: taken shared by `shared` on this thread, released once.
                        unsafe { $ru(self.0) };
                    }
                }
                // SAFETY: a live lock from `new`; released by `_held` on this thread.
                unsafe { $rl(self.l.as_ptr()) };
                let _held = Held(self.l.as_ptr());
                // SAFETY: held shared: only shared references to `data` exist.
                f(unsafe { &*self.data.get() })
            }
            )?
        }
        impl Drop for $adapter {
            fn drop(&mut self) {
                // SAFETY: from `new`, unheld (no section outlives its call), freed once.
                unsafe { $free(self.l.as_ptr()) };
            }
        }
    };
    (@shared $rl:path) => { true };
    (@shared) => { false };
}

#[cfg(ck)]
mod ck {
    use core::ffi::c_void;
    unsafe extern "C" {
        pub fn ll_ck_new(kind: i32) -> *mut c_void;
        pub fn ll_ck_free(l: *mut c_void);
        pub fn ll_ck_mcs_lock(l: *mut c_void);
        pub fn ll_ck_mcs_unlock(l: *mut c_void);
        pub fn ll_ck_clh_lock(l: *mut c_void);
        pub fn ll_ck_clh_unlock(l: *mut c_void);
        pub fn ll_ck_ticket_lock(l: *mut c_void);
        pub fn ll_ck_ticket_unlock(l: *mut c_void);
        pub fn ll_ck_tas_lock(l: *mut c_void);
        pub fn ll_ck_tas_unlock(l: *mut c_void);
        pub fn ll_ck_rwlock_write_lock(l: *mut c_void);
        pub fn ll_ck_rwlock_write_unlock(l: *mut c_void);
        pub fn ll_ck_rwlock_read_lock(l: *mut c_void);
        pub fn ll_ck_rwlock_read_unlock(l: *mut c_void);
        pub fn ll_ck_brlock_write_lock(l: *mut c_void);
        pub fn ll_ck_brlock_write_unlock(l: *mut c_void);
        pub fn ll_ck_brlock_read_lock(l: *mut c_void);
        pub fn ll_ck_brlock_read_unlock(l: *mut c_void);
        pub fn ll_ck_epoch_begin();
        pub fn ll_ck_epoch_end();
        pub fn ll_ck_epoch_call(e: *mut super::epoch::Entry, cb: super::epoch::Callback);
        pub fn ll_ck_epoch_barrier();
        pub fn ll_ck_entry_size() -> usize;
    }
    // The kinds ll_ck_new makes (csrc/ck.c).
    pub const MCS: i32 = 1;
    pub const CLH: i32 = 2;
    pub const TICKET: i32 = 3;
    pub const TAS: i32 = 4;
    pub const RWLOCK: i32 = 5;
    pub const BRLOCK: i32 = 6;
}

#[cfg(ck)]
use ck::*;

#[cfg(ck)]
ffi_lock!(
    CkMcs,
    new = ll_ck_new(MCS),
    free = ll_ck_free,
    lock = ll_ck_mcs_lock,
    unlock = ll_ck_mcs_unlock
);
#[cfg(ck)]
ffi_lock!(
    CkClh,
    new = ll_ck_new(CLH),
    free = ll_ck_free,
    lock = ll_ck_clh_lock,
    unlock = ll_ck_clh_unlock
);
#[cfg(ck)]
ffi_lock!(
    CkTicket,
    new = ll_ck_new(TICKET),
    free = ll_ck_free,
    lock = ll_ck_ticket_lock,
    unlock = ll_ck_ticket_unlock
);
#[cfg(ck)]
ffi_lock!(
    CkTas,
    new = ll_ck_new(TAS),
    free = ll_ck_free,
    lock = ll_ck_tas_lock,
    unlock = ll_ck_tas_unlock
);
#[cfg(ck)]
ffi_lock!(
    CkRwLock,
    new = ll_ck_new(RWLOCK),
    free = ll_ck_free,
    lock = ll_ck_rwlock_write_lock,
    unlock = ll_ck_rwlock_write_unlock,
    read = ll_ck_rwlock_read_lock,
    read_unlock = ll_ck_rwlock_read_unlock
);
#[cfg(ck)]
ffi_lock!(
    CkBrLock,
    new = ll_ck_new(BRLOCK),
    free = ll_ck_free,
    lock = ll_ck_brlock_write_lock,
    unlock = ll_ck_brlock_write_unlock,
    read = ll_ck_brlock_read_lock,
    read_unlock = ll_ck_brlock_read_unlock
);

#[cfg(any(tbb, absl))]
mod cpp {
    use core::ffi::c_void;
    unsafe extern "C" {
        #[cfg(tbb)]
        pub fn ll_tbb_spin_new() -> *mut c_void;
        #[cfg(tbb)]
        pub fn ll_tbb_spin_free(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_lock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_unlock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_new() -> *mut c_void;
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_free(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_lock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_unlock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_rw_new() -> *mut c_void;
        #[cfg(tbb)]
        pub fn ll_tbb_spin_rw_free(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_rw_lock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_rw_unlock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_rw_read_lock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_spin_rw_read_unlock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_rw_new() -> *mut c_void;
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_rw_free(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_rw_lock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_rw_unlock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_rw_read_lock(l: *mut c_void);
        #[cfg(tbb)]
        pub fn ll_tbb_queuing_rw_read_unlock(l: *mut c_void);
        #[cfg(absl)]
        pub fn ll_absl_new() -> *mut c_void;
        #[cfg(absl)]
        pub fn ll_absl_free(l: *mut c_void);
        #[cfg(absl)]
        pub fn ll_absl_lock(l: *mut c_void);
        #[cfg(absl)]
        pub fn ll_absl_unlock(l: *mut c_void);
        #[cfg(absl)]
        pub fn ll_absl_read_lock(l: *mut c_void);
        #[cfg(absl)]
        pub fn ll_absl_read_unlock(l: *mut c_void);
    }
}

#[cfg(any(tbb, absl))]
use cpp::*;

#[cfg(tbb)]
ffi_lock!(
    TbbSpin,
    new = ll_tbb_spin_new(),
    free = ll_tbb_spin_free,
    lock = ll_tbb_spin_lock,
    unlock = ll_tbb_spin_unlock
);
#[cfg(tbb)]
ffi_lock!(
    TbbQueuing,
    new = ll_tbb_queuing_new(),
    free = ll_tbb_queuing_free,
    lock = ll_tbb_queuing_lock,
    unlock = ll_tbb_queuing_unlock
);
#[cfg(tbb)]
ffi_lock!(
    TbbSpinRw,
    new = ll_tbb_spin_rw_new(),
    free = ll_tbb_spin_rw_free,
    lock = ll_tbb_spin_rw_lock,
    unlock = ll_tbb_spin_rw_unlock,
    read = ll_tbb_spin_rw_read_lock,
    read_unlock = ll_tbb_spin_rw_read_unlock
);
#[cfg(tbb)]
ffi_lock!(
    TbbQueuingRw,
    new = ll_tbb_queuing_rw_new(),
    free = ll_tbb_queuing_rw_free,
    lock = ll_tbb_queuing_rw_lock,
    unlock = ll_tbb_queuing_rw_unlock,
    read = ll_tbb_queuing_rw_read_lock,
    read_unlock = ll_tbb_queuing_rw_read_unlock
);
#[cfg(absl)]
ffi_lock!(
    AbslMutex,
    new = ll_absl_new(),
    free = ll_absl_free,
    lock = ll_absl_lock,
    unlock = ll_absl_unlock
);
#[cfg(absl)]
ffi_lock!(
    AbslRwLock,
    new = ll_absl_new(),
    free = ll_absl_free,
    lock = ll_absl_lock,
    unlock = ll_absl_unlock,
    read = ll_absl_read_lock,
    read_unlock = ll_absl_read_unlock
);

/// `ck-epoch` as an RCU scheme: a read is `ck_epoch_begin`, load, `ck_epoch_end`; a retire is a
/// swap and `ck_epoch_call` (the thread polls every 32 retires).
#[cfg(ck)]
pub mod epoch {
    use super::ck::{ll_ck_epoch_barrier, ll_ck_epoch_begin, ll_ck_epoch_call, ll_ck_epoch_end};
    use crate::engine::workload::Shared;
    use crate::locks::RcuUnderTest;
    use crate::locks::rcu::object;
    use crossbeam_utils::CachePadded;
    use std::sync::atomic::{AtomicPtr, Ordering};

    /// CK's `ck_epoch_entry_t`: the callback and a stack link. Checked against the C side's size
    /// before any row uses it.
    #[repr(C)]
    pub struct Entry {
        function: Option<Callback>,
        next: *mut Entry,
    }

    /// A CK epoch callback.
    pub type Callback = unsafe extern "C" fn(*mut Entry);

    /// An object with its entry first (a pointer to the entry is a pointer to the object).
    #[repr(C)]
    struct Obj {
        entry: Entry,
        data: Shared,
    }

    fn new_obj(v: u64) -> *mut Obj {
        Box::into_raw(Box::new(Obj {
            entry: Entry {
                function: None,
                next: std::ptr::null_mut(),
            },
            data: object(v),
        }))
    }

    /// Run by CK after a grace period.
    ///
    /// # Safety
    /// `e` is the entry of an `Obj` from [`new_obj`], unpublished and handed to `ck_epoch_call`
    /// once.
    unsafe extern "C" fn free_obj(e: *mut Entry) {
        // SAFETY: the contract above; the entry is at offset 0 of a `repr(C)` `Obj`.
        drop(unsafe { Box::from_raw(e.cast::<Obj>()) });
    }

    /// Whether the C side's entry is the one declared here.
    pub fn layout_matches() -> bool {
        // SAFETY: a pure function of the shim.
        unsafe { super::ck::ll_ck_entry_size() == std::mem::size_of::<Entry>() }
    }

    /// The `ck-epoch` rows' scheme.
    pub struct CkEpoch {
        obj: AtomicPtr<Obj>,
        slots: Vec<CachePadded<AtomicPtr<Obj>>>,
    }

    impl CkEpoch {
        fn retire_obj(old: *mut Obj) {
            // SAFETY: `old` came from `new_obj` and was unpublished by the caller's swap: it is
            // handed to CK once, with the callback that frees it.
            unsafe { ll_ck_epoch_call(old.cast::<Entry>(), free_obj) };
        }
    }

    impl RcuUnderTest for CkEpoch {
        fn new(threads: usize) -> Self {
            CkEpoch {
                obj: AtomicPtr::new(new_obj(1)),
                slots: (0..threads)
                    .map(|_| CachePadded::new(AtomicPtr::new(new_obj(0))))
                    .collect(),
            }
        }
        #[inline(always)]
        fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
            /// Ends the section when dropped (a panicking `f` must not stall every grace period).
            struct Section;
            impl Drop for Section {
                #[inline(always)]
                fn drop(&mut self) {
                    // SAFETY: ends the section begun in `read`, on the same thread.
                    unsafe { ll_ck_epoch_end() };
                }
            }
            // SAFETY: the shim registers the thread first; `_section` ends it on this thread.
            unsafe { ll_ck_epoch_begin() };
            let _section = Section;
            // Acquire: pairs with `update`'s AcqRel swap (the object's contents are visible).
            let p = self.obj.load(Ordering::Acquire);
            // SAFETY: a published object is freed only after a grace period that waits for this
            // section, or in `Drop`, when no reader is left.
            f(unsafe { &(*p).data })
        }
        #[inline(always)]
        fn retire(&self, t: usize, v: u64) {
            // AcqRel: publishes the new object, takes the old one.
            Self::retire_obj(self.slots[t].swap(new_obj(v), Ordering::AcqRel));
        }
        #[inline(always)]
        fn update(&self, _: usize, v: u64) {
            // AcqRel: publishes the new object to readers' Acquire loads; takes the old one.
            Self::retire_obj(self.obj.swap(new_obj(v), Ordering::AcqRel));
        }
        fn drain(&self) {
            // SAFETY: a barrier from a thread outside any section. Worker threads' own pending
            // callbacks run at their exit (the shim's key destructor) or next poll.
            unsafe { ll_ck_epoch_barrier() };
        }
    }

    impl Drop for CkEpoch {
        fn drop(&mut self) {
            for p in std::iter::once(&mut self.obj).chain(self.slots.iter_mut().map(|s| &mut **s)) {
                // SAFETY: current objects came from `new_obj` and were never retired; `&mut self`:
                // no reader is left.
                drop(unsafe { Box::from_raw(*p.get_mut()) });
            }
        }
    }
}

#[cfg(ck)]
mod built_ck {
    use super::*;
    use crate::locks::{lock, rcu};
    pub fn ck() -> Vec<LockInfo> {
        let s = |n| summary(CK, n);
        let mut v = vec![
            lock::<CkMcs>("ck-mcs", Kind::Peer, s("ck-mcs")),
            lock::<CkClh>("ck-clh", Kind::Peer, s("ck-clh")),
            lock::<CkTicket>("ck-ticket", Kind::Peer, s("ck-ticket")),
            lock::<CkTas>("ck-tas", Kind::Peer, s("ck-tas")),
            lock::<CkRwLock>("ck-rwlock", Kind::Peer, s("ck-rwlock")),
            lock::<CkBrLock>("ck-brlock", Kind::Peer, s("ck-brlock")),
        ];
        if epoch::layout_matches() {
            v.push(rcu::<epoch::CkEpoch>("ck-epoch", Kind::Peer, s("ck-epoch")));
        } else {
            v.push(unavailable(
                "ck-epoch",
                s("ck-epoch"),
                Unavailable {
                    why: "Concurrency Kit's ck_epoch_entry_t is not two pointers in this build",
                    workloads: EPOCH,
                },
            ));
        }
        v
    }
}

#[cfg(any(ck, tbb, absl))]
mod built {
    #[cfg(ck)]
    pub use super::built_ck::ck;
    #[allow(unused_imports)] // with `ck` alone, nothing else here uses the parent's items
    use super::*;
    #[allow(unused_imports)]
    use crate::locks::lock;
    #[cfg(tbb)]
    pub fn tbb() -> Vec<LockInfo> {
        let s = |n| summary(TBB, n);
        vec![
            lock::<TbbSpin>("tbb-spin-mutex", Kind::Peer, s("tbb-spin-mutex")),
            lock::<TbbQueuing>("tbb-queuing-mutex", Kind::Peer, s("tbb-queuing-mutex")),
            lock::<TbbSpinRw>("tbb-spin-rw-mutex", Kind::Peer, s("tbb-spin-rw-mutex")),
            lock::<TbbQueuingRw>(
                "tbb-queuing-rw-mutex",
                Kind::Peer,
                s("tbb-queuing-rw-mutex"),
            ),
        ]
    }
    #[cfg(absl)]
    pub fn absl() -> Vec<LockInfo> {
        let s = |n| summary(ABSL, n);
        vec![
            lock::<AbslMutex>("absl-mutex", Kind::Peer, s("absl-mutex")),
            lock::<AbslRwLock>("absl-rwlock", Kind::Peer, s("absl-rwlock")),
        ]
    }
}

#[cfg(all(test, any(ck, tbb, absl)))]
mod tests {
    #[allow(unused_imports)]
    use super::*;
    use crate::locks::LockUnderTest;
    use std::sync::Arc;

    /// Two threads (this machine has two CPUs: a queue spinlock with more threads than CPUs can
    /// take a scheduler tick per hand-over) increment a plain counter in the exclusive section with
    /// a window between the load and the store, and read two words a writer keeps equal in the
    /// shared section: a lost update or a torn read fails.
    fn excludes<L: LockUnderTest>() {
        const OPS: u64 = 5_000;
        let l = Arc::new(L::new());
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for i in 0..OPS {
                        if L::HAS_SHARED_MODE && t == 1 && i % 2 == 0 {
                            l.shared(|d| assert_eq!(d.words[2], d.words[3], "torn read"));
                            continue;
                        }
                        l.exclusive(|d| {
                            let v = d.words[0];
                            d.words[2] = v;
                            for _ in 0..20 {
                                std::hint::spin_loop();
                            }
                            d.words[0] = v + 1;
                            d.words[3] = v;
                        });
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let want = if L::HAS_SHARED_MODE {
            OPS + OPS / 2
        } else {
            2 * OPS
        };
        l.exclusive(|d| assert_eq!(d.words[0], want, "lost updates"));
    }

    #[cfg(ck)]
    #[test]
    fn ck_locks_exclude() {
        excludes::<CkMcs>();
        excludes::<CkClh>();
        excludes::<CkTicket>();
        excludes::<CkTas>();
        excludes::<CkRwLock>();
        excludes::<CkBrLock>();
        // Many locks made and freed: the brlock's per-thread readers and CLH's recycled nodes stay
        // consistent across lock lifetimes (a new lock at a freed one's address).
        for _ in 0..50 {
            let a = CkBrLock::new();
            a.shared(|_| ());
            a.exclusive(|_| ());
            let c = CkClh::new();
            c.exclusive(|_| ());
        }
    }

    #[cfg(tbb)]
    #[test]
    fn tbb_locks_exclude() {
        excludes::<TbbSpin>();
        excludes::<TbbQueuing>();
        excludes::<TbbSpinRw>();
        excludes::<TbbQueuingRw>();
    }

    #[cfg(absl)]
    #[test]
    fn absl_locks_exclude() {
        excludes::<AbslMutex>();
        excludes::<AbslRwLock>();
    }

    #[cfg(ck)]
    #[test]
    fn ck_epoch_reads_and_retires() {
        use crate::locks::RcuUnderTest;
        let e = Arc::new(epoch::CkEpoch::new(2));
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let e = Arc::clone(&e);
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        if t == 0 {
                            e.update(0, i + 2);
                        } else {
                            let v = e.read(1, i, |d| d.words[0]);
                            assert!(v >= 1, "read a freed or unpublished object: {v}");
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        e.drain();
    }
}

#[cfg(test)]
mod listing {
    #[test]
    fn every_c_peer_is_listed_built_or_with_its_package() {
        let rows = super::peers();
        assert_eq!(
            rows.len(),
            super::CK.len() + super::TBB.len() + super::ABSL.len()
        );
        for r in rows {
            if let Some(u) = r.unavailable {
                assert!(u.why.contains("install lib"), "{}: {}", r.name, u.why);
            }
        }
    }
}
