//! The preload library's pthread objects as lab rows: `preload-mutex` and
//! `preload-rwlock` are glibc's `pthread_mutex_t` and `pthread_rwlock_t` ABI served by
//! `liblocklab_pthread.so` (its defaults: the adaptive mutex, the reader-preferring rwsem), beside
//! `pthread-mutex` and `pthread-rwlock` (glibc's own) in the same process and run. The library is
//! `dlopen`ed from beside the `locklab` binary with `RTLD_LOCAL` (so nothing else in the process binds
//! to it) and its exported functions are called through pointers, as a C program's PLT calls them.
//! Without the library (not built), the rows are listed as unavailable.

use super::{Kind, LockInfo, Unavailable, lock, unavailable};
use crate::engine::runner::LockUnderTest;
use crate::engine::workload::{Shared, Workload};
use core::cell::UnsafeCell;
use libc::{c_int, pthread_mutex_t, pthread_rwlock_t};
use std::sync::OnceLock;

type MutexFn = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
type RwFn = unsafe extern "C" fn(*mut pthread_rwlock_t) -> c_int;

/// The library's entry points the rows call.
struct Fns {
    lock: MutexFn,
    unlock: MutexFn,
    rdlock: RwFn,
    wrlock: RwFn,
    rwunlock: RwFn,
}

/// The library, loaded once; `None` if it is not beside the binary.
fn fns() -> Option<&'static Fns> {
    static FNS: OnceLock<Option<Fns>> = OnceLock::new();
    FNS.get_or_init(|| {
        let lib = crate::external::preload::find_library(&std::env::current_exe().ok()?).ok()?;
        let path = std::ffi::CString::new(lib.into_os_string().into_encoded_bytes()).ok()?;
        // SAFETY: a NUL-terminated path; the library's constructor only reads the environment and
        // registers a fork handler. Never closed: the pointers below stay valid.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return None;
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: a handle from dlopen and a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        // SAFETY: the library exports these with glibc's C signatures.
        unsafe {
            Some(Fns {
                lock: core::mem::transmute::<*mut libc::c_void, MutexFn>(sym(
                    c"pthread_mutex_lock",
                )?),
                unlock: core::mem::transmute::<*mut libc::c_void, MutexFn>(sym(
                    c"pthread_mutex_unlock",
                )?),
                rdlock: core::mem::transmute::<*mut libc::c_void, RwFn>(sym(
                    c"pthread_rwlock_rdlock",
                )?),
                wrlock: core::mem::transmute::<*mut libc::c_void, RwFn>(sym(
                    c"pthread_rwlock_wrlock",
                )?),
                rwunlock: core::mem::transmute::<*mut libc::c_void, RwFn>(sym(
                    c"pthread_rwlock_unlock",
                )?),
            })
        }
    })
    .as_ref()
}

fn the_fns() -> &'static Fns {
    fns().expect("the registry offers the preload rows only when the library loads")
}

/// `pthread_mutex_t` on the preload library. Boxed: a pthread mutex must not move once used.
pub struct PreloadMutex {
    m: Box<UnsafeCell<pthread_mutex_t>>,
    data: UnsafeCell<Shared>,
}

// SAFETY: `data` is accessed only with `m` held; the mutex is made for sharing between threads.
unsafe impl Sync for PreloadMutex {}
// SAFETY: as above; not held when the adapter moves.
unsafe impl Send for PreloadMutex {}

impl LockUnderTest for PreloadMutex {
    fn new() -> Self {
        PreloadMutex {
            m: Box::new(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER)),
            data: Default::default(),
        }
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        let fns = the_fns();
        // SAFETY: a pinned (boxed), all-zero-initialised mutex of the library's; `data` is only
        // touched between lock and unlock.
        unsafe {
            (fns.lock)(self.m.get());
            let r = f(&mut *self.data.get());
            (fns.unlock)(self.m.get());
            r
        }
    }
}

/// `pthread_rwlock_t` on the preload library. Boxed, as the mutex.
pub struct PreloadRwLock {
    l: Box<UnsafeCell<pthread_rwlock_t>>,
    data: UnsafeCell<Shared>,
}

// SAFETY: `data` is written only with `l` held exclusively and read with it held shared.
unsafe impl Sync for PreloadRwLock {}
// SAFETY: as above; not held when the adapter moves.
unsafe impl Send for PreloadRwLock {}

impl LockUnderTest for PreloadRwLock {
    const HAS_SHARED_MODE: bool = true;
    fn new() -> Self {
        PreloadRwLock {
            l: Box::new(UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER)),
            data: Default::default(),
        }
    }
    #[inline(always)]
    fn exclusive<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        let fns = the_fns();
        // SAFETY: a pinned, all-zero-initialised rwlock of the library's; exclusive mode.
        unsafe {
            (fns.wrlock)(self.l.get());
            let r = f(&mut *self.data.get());
            (fns.rwunlock)(self.l.get());
            r
        }
    }
    #[inline(always)]
    fn shared<R>(&self, f: impl FnOnce(&Shared) -> R) -> R {
        let fns = the_fns();
        // SAFETY: as above; shared mode excludes writers while we read.
        unsafe {
            (fns.rdlock)(self.l.get());
            let r = f(&*self.data.get());
            (fns.rwunlock)(self.l.get());
            r
        }
    }
}

const WHY: &str =
    "liblocklab_pthread.so was not built (cargo build --release -p locklab-pthread builds it)";

/// The two rows, or their unavailable entries.
pub fn entries() -> Vec<LockInfo> {
    if fns().is_some() {
        vec![
            lock::<PreloadMutex>(
                "preload-mutex",
                Kind::Ours,
                "pthread_mutex_t on liblocklab_pthread.so (its default: the adaptive mutex), called as C calls it",
            ),
            lock::<PreloadRwLock>(
                "preload-rwlock",
                Kind::Ours,
                "pthread_rwlock_t on liblocklab_pthread.so (its default: the reader-preferring rwsem)",
            ),
        ]
    } else {
        let u = |workloads: &'static [Workload]| Unavailable {
            why: WHY,
            workloads,
        };
        vec![
            LockInfo {
                kind: Kind::Ours,
                ..unavailable(
                    "preload-mutex",
                    "pthread_mutex_t on liblocklab_pthread.so",
                    u(&[Workload::Mutex, Workload::Rw]),
                )
            },
            LockInfo {
                kind: Kind::Ours,
                ..unavailable(
                    "preload-rwlock",
                    "pthread_rwlock_t on liblocklab_pthread.so",
                    u(&[Workload::Mutex, Workload::Rw]),
                )
            },
        ]
    }
}
