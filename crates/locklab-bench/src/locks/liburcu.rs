//! liburcu, the C reference implementation of userspace RCU, as a peer: its memb flavour
//! (`liburcu-memb`: `rcu-read` and `call-rcu`, with liburcu's default `call_rcu`: one process-wide
//! queue and worker) and its QSBR flavour (`liburcu-qsbr`: `rcu-read`).
//!
//! Built through the C shims in `csrc/` when pkg-config finds liburcu at build time (Debian's
//! `liburcu-dev`; `.ci/run` installs it). Without it the two names stay in the registry, listed as
//! unavailable with the reason, and the lab runs everything else.
//!
//! What the rows cost that a C program would not pay: memb's read lock and unlock are each a call into
//! the shim (a Rust program cannot inline liburcu's static inline fast paths without cross-language
//! LTO), about 1 ns per call on current x86. QSBR's read side is empty in liburcu too, so its rows make
//! no call per read (only one per [`QS_EVERY`](crate::locks::rcu::QS_EVERY) reads, the quiescent state).

#[cfg(not(liburcu))]
use super::{LockInfo, Unavailable};
#[cfg(not(liburcu))]
use crate::engine::workload::Workload;

/// Why the liburcu rows are missing from this build, if they are.
#[cfg(not(liburcu))]
const WHY: &str = "built without liburcu (install liburcu-dev so pkg-config finds liburcu-memb and liburcu-qsbr, then rebuild)";

/// The liburcu rows, unavailable in this build.
#[cfg(not(liburcu))]
pub fn peers() -> Vec<LockInfo> {
    vec![
        super::unavailable(
            "liburcu-memb",
            "liburcu's memb flavour and its default call_rcu",
            Unavailable {
                why: WHY,
                workloads: &[
                    Workload::RcuRead,
                    Workload::CallRcu,
                    Workload::RcuUpdate,
                    Workload::RcuSync,
                ],
            },
        ),
        super::unavailable(
            "liburcu-qsbr",
            "liburcu's QSBR flavour (rcu-read only)",
            Unavailable {
                why: WHY,
                workloads: &[Workload::RcuRead],
            },
        ),
    ]
}

#[cfg(liburcu)]
pub use built::*;

#[cfg(liburcu)]
mod built {
    use super::super::{Kind, LockInfo, RcuUnderTest, Unavailable, rcu, unavailable};
    use crate::engine::workload::{Shared, Workload};
    use crate::locks::rcu::{QS_EVERY, object};
    use crossbeam_utils::CachePadded;
    use std::sync::atomic::{AtomicPtr, Ordering};

    /// liburcu's `struct rcu_head`: a wait-free queue link and the callback. Checked against the C
    /// side's `sizeof` before any row uses it ([`peers`]).
    #[repr(C)]
    pub struct RcuHead {
        next: *mut RcuHead,
        func: Option<unsafe extern "C" fn(*mut RcuHead)>,
    }

    // The shims in csrc/: see their header comments.
    unsafe extern "C" {
        fn ll_memb_read_lock();
        fn ll_memb_read_unlock();
        fn ll_memb_call_rcu(head: *mut RcuHead, func: unsafe extern "C" fn(*mut RcuHead));
        fn ll_memb_barrier();
        fn ll_memb_synchronize();
        fn ll_urcu_head_size() -> usize;
        fn ll_qsbr_register();
        fn ll_qsbr_quiescent_state();
    }

    /// An object as liburcu wants it: the `rcu_head` inside the object it frees (first, so a
    /// pointer to the head is a pointer to the object).
    #[repr(C)]
    struct Obj {
        head: RcuHead,
        data: Shared,
    }

    fn new_obj(v: u64) -> *mut Obj {
        Box::into_raw(Box::new(Obj {
            head: RcuHead {
                next: std::ptr::null_mut(),
                func: None,
            },
            data: object(v),
        }))
    }

    /// The callback liburcu's worker runs after a grace period.
    ///
    /// # Safety
    /// `head` is the head of an `Obj` from [`new_obj`] that was unpublished and then passed to
    /// `call_rcu` once: nothing else refers to it.
    unsafe extern "C" fn free_obj(head: *mut RcuHead) {
        // SAFETY: the contract above; `head` is at offset 0 of a `repr(C)` `Obj`, so the cast
        // gives back the `Box`'s pointer.
        drop(unsafe { Box::from_raw(head.cast::<Obj>()) });
    }

    /// `liburcu-memb`: read = `rcu_read_lock`, load, `rcu_read_unlock` (two calls into the shim);
    /// retire = swap the thread's slot + `call_rcu` (liburcu's default: one shared queue per process).
    pub struct Memb {
        obj: AtomicPtr<Obj>,
        slots: Vec<CachePadded<AtomicPtr<Obj>>>,
    }

    impl RcuUnderTest for Memb {
        fn new(threads: usize) -> Self {
            Memb {
                obj: AtomicPtr::new(new_obj(1)),
                slots: (0..threads)
                    .map(|_| CachePadded::new(AtomicPtr::new(new_obj(0))))
                    .collect(),
            }
        }
        #[inline(always)]
        fn read<R>(&self, _: usize, _: u64, f: impl FnOnce(&Shared) -> R) -> R {
            /// Ends the section when dropped, so a panicking `f` cannot leave this thread inside
            /// it (which would hold every later grace period of the process).
            struct Section;
            impl Drop for Section {
                #[inline(always)]
                fn drop(&mut self) {
                    // SAFETY: ends the section begun in `read`, on the same thread (the guard is
                    // a local of that call).
                    unsafe { ll_memb_read_unlock() };
                }
            }
            // SAFETY: the shim registers the thread on its first call; the section ends when
            // `_section` drops, on this thread, after the dereference.
            unsafe { ll_memb_read_lock() };
            let _section = Section;
            // Acquire: rcu_dereference (pairs with `update`'s AcqRel swap).
            let p = self.obj.load(Ordering::Acquire);
            // SAFETY: the published object is freed by `update`'s call_rcu after a grace period
            // (which waits for this section), or in `Drop`, after every reader is gone.
            f(unsafe { &(*p).data })
        }
        #[inline(always)]
        fn retire(&self, t: usize, v: u64) {
            // AcqRel: publishes the new object; takes the old one, now unpublished.
            let old = self.slots[t].swap(new_obj(v), Ordering::AcqRel);
            // SAFETY: `old` came from `new_obj` and the swap unpublished it: it is ours to hand to
            // call_rcu, once, with the callback that frees it.
            unsafe { ll_memb_call_rcu(old.cast::<RcuHead>(), free_obj) };
        }
        #[inline(always)]
        fn update(&self, _t: usize, v: u64) {
            // AcqRel: publishes the new object to readers' Acquire loads; takes the old one.
            let old = self.obj.swap(new_obj(v), Ordering::AcqRel);
            // SAFETY: as in `retire`: unpublished by the swap, handed to call_rcu once.
            unsafe { ll_memb_call_rcu(old.cast::<RcuHead>(), free_obj) };
        }
        fn synchronize(&self) {
            // SAFETY: synchronize_rcu from a thread outside any read-side section.
            unsafe { ll_memb_synchronize() };
        }
        fn drain(&self) {
            // SAFETY: rcu_barrier from a thread outside any read-side section.
            unsafe { ll_memb_barrier() };
        }
    }

    impl Drop for Memb {
        fn drop(&mut self) {
            for p in std::iter::once(&mut self.obj).chain(self.slots.iter_mut().map(|s| &mut **s)) {
                // SAFETY: current objects came from `new_obj` and were never retired; `&mut self`:
                // no reader is left.
                drop(unsafe { Box::from_raw(*p.get_mut()) });
            }
        }
    }

    /// `liburcu-qsbr` (`rcu-read` only): no code per read; each thread registers on its first read
    /// and announces a quiescent state every [`QS_EVERY`] reads, as our `rcu-qsbr` rows do.
    pub struct Qsbr {
        obj: Box<Shared>,
    }

    std::thread_local! {
        /// Whether this thread has registered with liburcu-qsbr (per thread, as liburcu's own
        /// registration is: a worker index may be served by another thread in another trial).
        static REGISTERED: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    }

    impl RcuUnderTest for Qsbr {
        fn new(_threads: usize) -> Self {
            Qsbr {
                obj: Box::new(object(1)),
            }
        }
        #[inline(always)]
        fn read<R>(&self, _t: usize, i: u64, f: impl FnOnce(&Shared) -> R) -> R {
            if !REGISTERED.get() {
                // SAFETY: registers this thread (idempotent; unregistered at thread exit).
                unsafe { ll_qsbr_register() };
                REGISTERED.set(true);
            }
            let r = f(&self.obj); // never replaced: the read side's cost is what is measured
            if i.is_multiple_of(QS_EVERY) {
                // SAFETY: a registered, online thread outside any read-side section.
                unsafe { ll_qsbr_quiescent_state() };
            }
            r
        }
        fn retire(&self, _: usize, _: u64) {
            unreachable!("liburcu-qsbr runs rcu-read only")
        }
        fn update(&self, _: usize, _: u64) {
            unreachable!("liburcu-qsbr runs rcu-read only")
        }
    }

    /// The liburcu rows (unavailable if the C side's `rcu_head` is not the one declared here).
    pub fn peers() -> Vec<LockInfo> {
        // SAFETY: a pure function of the C shim.
        if unsafe { ll_urcu_head_size() } != std::mem::size_of::<RcuHead>() {
            let why = "liburcu's struct rcu_head is not two pointers in this build";
            return vec![
                unavailable(
                    "liburcu-memb",
                    "liburcu's memb flavour and its default call_rcu",
                    Unavailable {
                        why,
                        workloads: &[
                            Workload::RcuRead,
                            Workload::CallRcu,
                            Workload::RcuUpdate,
                            Workload::RcuSync,
                        ],
                    },
                ),
                unavailable(
                    "liburcu-qsbr",
                    "liburcu's QSBR flavour (rcu-read only)",
                    Unavailable {
                        why,
                        workloads: &[Workload::RcuRead],
                    },
                ),
            ];
        }
        vec![
            LockInfo {
                rcu_sync: Some(crate::engine::runner::run_rcu_sync::<Memb>),
                ..rcu::<Memb>(
                    "liburcu-memb",
                    Kind::Peer,
                    "liburcu (C) memb flavour: read lock/unlock via the FFI; retire = its default call_rcu (one shared queue + worker)",
                )
            },
            LockInfo {
                call_rcu: None,
                rcu_update: None,
                ..rcu::<Qsbr>(
                    "liburcu-qsbr",
                    Kind::Peer,
                    "liburcu (C) QSBR flavour (rcu-read only): no code per read; a quiescent state every 256 reads",
                )
            },
        ]
    }
}
