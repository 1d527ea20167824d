//! The exported lock, unlock, wait and signal calls: each knows its caller (the return address, for
//! the lock statistics' call sites) and, when statistics are kept, counts around the family's own
//! implementation ([`crate::stat`]); otherwise it is that implementation, one branch later.
//!
//! On x86-64 and aarch64 each export is a two-instruction trampoline (a naked function) that passes
//! its return address as one more argument to the Rust function behind it: a load of `[rsp]` (x86-64)
//! or a copy of the link register (aarch64), then a jump. Elsewhere the call site is unknown (0).
//!
//! On x86-64, `pthread_mutex_lock` and `pthread_mutex_unlock` (and their `__` aliases) run their
//! uncontended case first, in a small frameless naked function (`x86_mutex_entry!`): one armed flag
//! (`sys::MUTEX_FAST`: the default choice, no statistics, no lockdep), a normal mutex, one `lock
//! cmpxchg`, the owner TID (one `%fs`-relative load) or its clearing; anything else is the same
//! load of `[rsp]` and a jump to the general function. `pthread_rwlock_rdlock` and
//! `pthread_rwlock_unlock` do the same for a read hold of the default rwlock (`sys::RWLOCK_FAST`):
//! a few field checks and one `lock xadd` (the read lock) or `lock cmpxchg` (the unlock).
//!
//! ```
//! let mut m: libc::pthread_mutex_t = libc::PTHREAD_MUTEX_INITIALIZER;
//! unsafe {
//!     assert_eq!(locklab_pthread::entry::pthread_mutex_lock(&mut m), 0);
//!     assert_eq!(locklab_pthread::entry::pthread_mutex_trylock(&mut m), libc::EBUSY);
//!     assert_eq!(locklab_pthread::entry::pthread_mutex_unlock(&mut m), 0);
//! }
//! ```

use crate::c11::result;
use crate::mutex::{self, M};
use crate::rwlock::{self, L};
use crate::stat::{self, Obj};
use crate::{cond, dep, real, spin};
use libc::{c_char, c_int, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t};
use libc::{pthread_mutexattr_t, pthread_rwlockattr_t};
use libc::{pthread_spinlock_t, timespec};
use locklab::lockdep::hooks::Kind;

/// Defines exported functions that pass their caller's return address to `$imp` as one more
/// argument (in `$x86` on x86-64, `$arm` on aarch64: the register after the last argument).
macro_rules! with_site {
    ($($(#[$doc:meta])* $abi:literal fn $name:ident ( $($a:ident : $t:ty),* ) => $imp:ident, $x86:literal, $arm:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's function of this name.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern $abi fn $name($($a: $t),*) -> c_int {
            core::arch::naked_asm!(
                ".cfi_startproc",
                concat!("mov ", $x86, ", qword ptr [rsp]"),
                "jmp {f}",
                ".cfi_endproc",
                f = sym $imp,
            )
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's function of this name.
        #[cfg(target_arch = "aarch64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern $abi fn $name($($a: $t),*) -> c_int {
            core::arch::naked_asm!(
                ".cfi_startproc",
                concat!("mov ", $arm, ", x30"),
                "b {f}",
                ".cfi_endproc",
                f = sym $imp,
            )
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's function of this name.
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        #[unsafe(no_mangle)]
        pub unsafe extern $abi fn $name($($a: $t),*) -> c_int {
            // SAFETY: forwarded; the call site is unknown here.
            unsafe { $imp($($a,)* 0) }
        }
    )*};
}

with_site! {
    /// `pthread_mutex_trylock`.
    "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) => mutex_trylock, "rsi", "x1";
    /// `__pthread_mutex_trylock`, the old alias.
    "C" fn __pthread_mutex_trylock(m: *mut pthread_mutex_t) => mutex_trylock, "rsi", "x1";
    /// `pthread_mutex_timedlock`: `CLOCK_REALTIME`.
    "C" fn pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) => mutex_timedlock, "rdx", "x2";
    /// `pthread_mutex_clocklock`.
    "C" fn pthread_mutex_clocklock(m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec) => mutex_clocklock, "rcx", "x3";
    /// `mtx_lock`.
    "C" fn mtx_lock(m: *mut pthread_mutex_t) => c11_lock, "rsi", "x1";
    /// `mtx_trylock`: `thrd_busy` if held.
    "C" fn mtx_trylock(m: *mut pthread_mutex_t) => c11_trylock, "rsi", "x1";
    /// `mtx_timedlock`: `TIME_UTC` (`CLOCK_REALTIME`).
    "C" fn mtx_timedlock(m: *mut pthread_mutex_t, t: *const timespec) => c11_timedlock, "rdx", "x2";

    /// `pthread_cond_wait`.
    "C-unwind" fn pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) => cond_wait, "rdx", "x2";
    /// `pthread_cond_timedwait`: the time-out is on the condvar's clock.
    "C-unwind" fn pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec) => cond_timedwait, "rcx", "x3";
    /// `pthread_cond_clockwait`.
    "C-unwind" fn pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec) => cond_clockwait, "r8", "x4";
    /// `pthread_cond_signal`.
    "C" fn pthread_cond_signal(c: *mut pthread_cond_t) => cond_signal, "rsi", "x1";
    /// `pthread_cond_broadcast`.
    "C" fn pthread_cond_broadcast(c: *mut pthread_cond_t) => cond_broadcast, "rsi", "x1";
    /// `cnd_wait`.
    "C-unwind" fn cnd_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) => c11_wait, "rdx", "x2";
    /// `cnd_timedwait`: `TIME_UTC` (`CLOCK_REALTIME`).
    "C-unwind" fn cnd_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec) => c11_timedwait, "rcx", "x3";
    /// `cnd_signal`.
    "C" fn cnd_signal(c: *mut pthread_cond_t) => c11_signal, "rsi", "x1";
    /// `cnd_broadcast`.
    "C" fn cnd_broadcast(c: *mut pthread_cond_t) => c11_broadcast, "rsi", "x1";

    /// `pthread_rwlock_tryrdlock`.
    "C" fn pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) => rw_tryrdlock, "rsi", "x1";
    /// `__pthread_rwlock_tryrdlock`, the old alias.
    "C" fn __pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) => rw_tryrdlock, "rsi", "x1";
    /// `pthread_rwlock_timedrdlock`.
    "C" fn pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: *const timespec) => rw_timedrdlock, "rdx", "x2";
    /// `pthread_rwlock_clockrdlock`.
    "C" fn pthread_rwlock_clockrdlock(l: *mut pthread_rwlock_t, k: clockid_t, t: *const timespec) => rw_clockrdlock, "rcx", "x3";
    /// `pthread_rwlock_wrlock`.
    "C" fn pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) => rw_wrlock, "rsi", "x1";
    /// `__pthread_rwlock_wrlock`, the old alias.
    "C" fn __pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) => rw_wrlock, "rsi", "x1";
    /// `pthread_rwlock_trywrlock`.
    "C" fn pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) => rw_trywrlock, "rsi", "x1";
    /// `__pthread_rwlock_trywrlock`, the old alias.
    "C" fn __pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) => rw_trywrlock, "rsi", "x1";
    /// `pthread_rwlock_timedwrlock`.
    "C" fn pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: *const timespec) => rw_timedwrlock, "rdx", "x2";
    /// `pthread_rwlock_clockwrlock`.
    "C" fn pthread_rwlock_clockwrlock(l: *mut pthread_rwlock_t, k: clockid_t, t: *const timespec) => rw_clockwrlock, "rcx", "x3";

    /// `pthread_mutex_init`.
    "C" fn pthread_mutex_init(m: *mut pthread_mutex_t, a: *const pthread_mutexattr_t) => mutex_init, "rdx", "x2";
    /// `__pthread_mutex_init`, the old alias.
    "C" fn __pthread_mutex_init(m: *mut pthread_mutex_t, a: *const pthread_mutexattr_t) => mutex_init, "rdx", "x2";
    /// `pthread_mutex_destroy`.
    "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) => mutex_destroy, "rsi", "x1";
    /// `__pthread_mutex_destroy`, the old alias.
    "C" fn __pthread_mutex_destroy(m: *mut pthread_mutex_t) => mutex_destroy, "rsi", "x1";
    /// `mtx_init`.
    "C" fn mtx_init(m: *mut pthread_mutex_t, ty: c_int) => c11_init, "rdx", "x2";
    /// `pthread_rwlock_init`.
    "C" fn pthread_rwlock_init(l: *mut pthread_rwlock_t, a: *const pthread_rwlockattr_t) => rw_init, "rdx", "x2";
    /// `__pthread_rwlock_init`, the old alias.
    "C" fn __pthread_rwlock_init(l: *mut pthread_rwlock_t, a: *const pthread_rwlockattr_t) => rw_init, "rdx", "x2";
    /// `pthread_rwlock_destroy`.
    "C" fn pthread_rwlock_destroy(l: *mut pthread_rwlock_t) => rw_destroy, "rsi", "x1";
    /// `__pthread_rwlock_destroy`, the old alias.
    "C" fn __pthread_rwlock_destroy(l: *mut pthread_rwlock_t) => rw_destroy, "rsi", "x1";
    /// `pthread_spin_init`.
    "C" fn pthread_spin_init(s: *mut pthread_spinlock_t, pshared: c_int) => spin_init, "rdx", "x2";
    /// `pthread_spin_destroy`.
    "C" fn pthread_spin_destroy(s: *mut pthread_spinlock_t) => spin_destroy, "rsi", "x1";

    /// `mtx_unlock`.
    "C" fn mtx_unlock(m: *mut pthread_mutex_t) => c11_unlock, "rsi", "x1";
    /// `pthread_spin_unlock`.
    "C" fn pthread_spin_unlock(s: *mut pthread_spinlock_t) => spin_unlock, "rsi", "x1";

    /// `pthread_spin_lock`.
    "C" fn pthread_spin_lock(s: *mut pthread_spinlock_t) => spin_lock, "rsi", "x1";
    /// `pthread_spin_trylock`: `EBUSY` if held.
    "C" fn pthread_spin_trylock(s: *mut pthread_spinlock_t) => spin_trylock, "rsi", "x1";
}

/// Defines the exported mutex lock and unlock on x86-64: each a small frameless function, the
/// common case inline (`sys::MUTEX_FAST` set, a normal mutex, free for the lock, held and not
/// marked by a sleeper for the unlock), everything else a tail call to `$general` with the caller's return
/// address (the call site), as [`with_site`]'s trampolines pass it. Other targets export
/// [`with_site`]'s trampolines to [`mutex_lock`] and [`mutex_unlock`] (below), whose Rust fast path
/// is the same test.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_mutex_entry {
    ($($(#[$doc:meta])* fn $name:ident => $x86:ident, $general:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's function of this name.
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(m: *mut pthread_mutex_t) -> c_int {
            $x86!($general)
        }
    )*};
}

/// The x86-64 lock entry (`rdi`: the mutex). With the fast path armed and a normal mutex (kind 0):
/// the caller's TID is read (one `%fs`-relative load at glibc's offset), then the take: while the
/// process has one thread (glibc's flag, or a zero byte when glibc has none) a plain load and
/// store, as glibc's; else `lock cmpxchg` 0 -> `LOCKED` (the adaptive mutex's fast path, Acquire
/// and more); then the owner store and 0. Any other case, a failed take included, goes to the
/// general function, which looks at the word before any CAS of its own.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_mutex_lock {
    ($general:ident) => {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "cmp byte ptr [rip + {fast}], 0",
            "je 4f",
            "cmp dword ptr [rdi + 16], 0",
            "jne 4f",
            "mov rcx, qword ptr [rip + {tid_off}]",
            "mov rax, qword ptr [rip + {single}]",
            "mov ecx, dword ptr fs:[rcx]",
            "cmp byte ptr [rax], 0",
            "jne 3f",
            "xor eax, eax",
            "mov edx, 1",
            "lock cmpxchg dword ptr [rdi], edx",
            "jne 4f",
            "2:",
            "mov dword ptr [rdi + 8], ecx",
            "xor eax, eax",
            "ret",
            "3:",
            "cmp dword ptr [rdi], 0",
            "jne 4f",
            "mov dword ptr [rdi], 1",
            "jmp 2b",
            "4:",
            "mov rsi, qword ptr [rsp]",
            "jmp {general}",
            ".cfi_endproc",
            fast = sym crate::sys::MUTEX_FAST,
            tid_off = sym crate::sys::TID_OFFSET,
            single = sym crate::sys::SINGLE,
            general = sym $general,
        )
    };
}

/// The x86-64 unlock entry: with the fast path armed and a normal mutex, the owner cleared, then
/// the release of a word that is exactly `LOCKED` (no sleeper's mark): a plain
/// load and store while the process has one thread, else `lock cmpxchg` `LOCKED` -> 0 (Release and
/// more; the adaptive mutex's `unlock_quiet`); 0. Any other word goes to the general function
/// (which clears the owner too), and nothing here touches the mutex after the release.
///
/// A marked word (`SLEEPERS`: a sleeper may wait) goes to the general unlock, whose swap to 0 and
/// wake-up are glibc's. The word holds nothing but `LOCKED` and the mark, so glibc's single `xchg`
/// here would be correct too (not measured against the CAS).
#[cfg(target_arch = "x86_64")]
macro_rules! x86_mutex_unlock {
    ($general:ident) => {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "cmp byte ptr [rip + {fast}], 0",
            "je 4f",
            "cmp dword ptr [rdi + 16], 0",
            "jne 4f",
            "mov rax, qword ptr [rip + {single}]",
            "mov dword ptr [rdi + 8], 0",
            "cmp byte ptr [rax], 0",
            "jne 3f",
            "mov eax, 1",
            "xor ecx, ecx",
            "lock cmpxchg dword ptr [rdi], ecx",
            "jne 4f",
            "xor eax, eax",
            "ret",
            "3:",
            "cmp dword ptr [rdi], 1",
            "jne 4f",
            "mov dword ptr [rdi], 0",
            "xor eax, eax",
            "ret",
            "4:",
            "mov rsi, qword ptr [rsp]",
            "jmp {general}",
            ".cfi_endproc",
            fast = sym crate::sys::MUTEX_FAST,
            single = sym crate::sys::SINGLE,
            general = sym $general,
        )
    };
}

#[cfg(target_arch = "x86_64")]
x86_mutex_entry! {
    /// `pthread_mutex_lock`.
    fn pthread_mutex_lock => x86_mutex_lock, mutex_lock_general;
    /// `__pthread_mutex_lock`, the old alias.
    fn __pthread_mutex_lock => x86_mutex_lock, mutex_lock_general;
    /// `pthread_mutex_unlock`.
    fn pthread_mutex_unlock => x86_mutex_unlock, mutex_unlock_general;
    /// `__pthread_mutex_unlock`, the old alias.
    fn __pthread_mutex_unlock => x86_mutex_unlock, mutex_unlock_general;
}

#[cfg(not(target_arch = "x86_64"))]
with_site! {
    /// `pthread_mutex_lock`.
    "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) => mutex_lock, "rsi", "x1";
    /// `__pthread_mutex_lock`, the old alias.
    "C" fn __pthread_mutex_lock(m: *mut pthread_mutex_t) => mutex_lock, "rsi", "x1";
    /// `pthread_mutex_unlock`.
    "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) => mutex_unlock, "rsi", "x1";
    /// `__pthread_mutex_unlock`, the old alias.
    "C" fn __pthread_mutex_unlock(m: *mut pthread_mutex_t) => mutex_unlock, "rsi", "x1";
}

#[cfg(not(target_arch = "x86_64"))]
with_site! {
    /// `pthread_rwlock_rdlock`.
    "C" fn pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) => rw_rdlock, "rsi", "x1";
    /// `__pthread_rwlock_rdlock`, the old alias.
    "C" fn __pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) => rw_rdlock, "rsi", "x1";
    /// `pthread_rwlock_unlock`: the write lock if the caller holds it, else one read hold.
    "C" fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) => rw_unlock, "rsi", "x1";
    /// `__pthread_rwlock_unlock`, the old alias.
    "C" fn __pthread_rwlock_unlock(l: *mut pthread_rwlock_t) => rw_unlock, "rsi", "x1";
}

/// Defines the exported rwlock read lock and unlock on x86-64, as [`x86_mutex_entry`] does the
/// mutex's: each a small frameless function with the common case inline, everything else a tail
/// call with the call site.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_rwlock_entry {
    ($($(#[$doc:meta])* fn $name:ident => $x86:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's function of this name.
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(l: *mut pthread_rwlock_t) -> c_int {
            $x86!()
        }
    )*};
}

/// The x86-64 read lock entry (`rdi`: the rwlock). With the fast path armed
/// (`sys::RWLOCK_FAST`: the default choice, no statistics, no lockdep), a lock that is not
/// process-shared (glibc's then) and of a kind that reads recursively: one `lock xadd` of a read
/// hold (the `RecursiveRwSem`'s fast path, Acquire and more), kept if no writer held the lock and
/// the count was under the library's limit, and 0. A refused add goes to `rw_rdlock_refused`,
/// which gives it back and takes the general path (`EDEADLK` for the writer itself, `EAGAIN` at
/// the limit, a wait otherwise); anything else goes straight to the general function.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_rwlock_rdlock {
    () => {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "cmp byte ptr [rip + {fast}], 0",
            "je 4f",
            "cmp dword ptr [rdi + {shared}], 0",
            "jne 4f",
            "cmp byte ptr [rdi + {flags}], {writers_first}",
            "je 4f",
            "mov eax, 1",
            "lock xadd dword ptr [rdi], eax",
            "test eax, {writer}",
            "jne 5f",
            "and eax, {count}",
            "cmp eax, {limit}",
            "jae 5f",
            "xor eax, eax",
            "ret",
            "5:",
            "mov rsi, qword ptr [rsp]",
            "jmp {refused}",
            "4:",
            "mov rsi, qword ptr [rsp]",
            "jmp {general}",
            ".cfi_endproc",
            fast = sym crate::sys::RWLOCK_FAST,
            shared = const rwlock::OFF_SHARED,
            flags = const rwlock::OFF_FLAGS,
            writers_first = const rwlock::PREFER_WRITER_NONRECURSIVE,
            writer = const locklab::rw::recursive_rwsem::HELD_FOR_WRITING,
            count = const locklab::rw::recursive_rwsem::COUNT_MASK,
            limit = const rwlock::RWSEM_READ_LIMIT,
            refused = sym rw_rdlock_refused,
            general = sym rw_rdlock,
        )
    };
}

/// The x86-64 unlock entry. With the fast path armed, a lock that is not process-shared, no writer
/// recorded (`__cur_writer` 0: the caller cannot hold it for writing), a read hold in the count (an
/// unlock of a lock nobody holds is left to the general function, which leaves it alone) and no
/// writer waiting: one `lock cmpxchg` from the word seen to one hold less (Release and more), and
/// 0. That compare-and-swap is the unlock's only write, and nothing touches the lock after it: the
/// moment the count reaches 0 a writer may take the lock, release it and free its memory. A waiting
/// writer (the last reader out must clear its flag in the same compare-and-swap and wake it), a
/// failed compare-and-swap and anything else go to the general function.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_rwlock_unlock {
    () => {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "cmp byte ptr [rip + {fast}], 0",
            "je 4f",
            "cmp dword ptr [rdi + {shared}], 0",
            "jne 4f",
            "cmp dword ptr [rdi + {writer}], 0",
            "jne 4f",
            "mov eax, dword ptr [rdi]",
            "test eax, {count}",
            "je 4f",
            "test eax, {writer_waiting}",
            "jne 4f",
            "lea ecx, [rax - 1]",
            "lock cmpxchg dword ptr [rdi], ecx",
            "jne 4f",
            "xor eax, eax",
            "ret",
            "4:",
            "mov rsi, qword ptr [rsp]",
            "jmp {general}",
            ".cfi_endproc",
            fast = sym crate::sys::RWLOCK_FAST,
            shared = const rwlock::OFF_SHARED,
            writer = const rwlock::OFF_WRITER,
            count = const locklab::rw::recursive_rwsem::COUNT_MASK,
            writer_waiting = const locklab::rw::recursive_rwsem::WRITER_WAITING,
            general = sym rw_unlock,
        )
    };
}

#[cfg(target_arch = "x86_64")]
x86_rwlock_entry! {
    /// `pthread_rwlock_rdlock`.
    fn pthread_rwlock_rdlock => x86_rwlock_rdlock;
    /// `__pthread_rwlock_rdlock`, the old alias.
    fn __pthread_rwlock_rdlock => x86_rwlock_rdlock;
    /// `pthread_rwlock_unlock`: the write lock if the caller holds it, else one read hold.
    fn pthread_rwlock_unlock => x86_rwlock_unlock;
    /// `__pthread_rwlock_unlock`, the old alias.
    fn __pthread_rwlock_unlock => x86_rwlock_unlock;
}

/// The x86-64 read lock entry's refused add: given back, then the general read path.
///
/// # Safety
/// `l` is one of our rwlocks to which the entry has just added a read hold.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn rw_rdlock_refused(l: *mut pthread_rwlock_t, _site: usize) -> c_int {
    // SAFETY: the entry's add is ours to give back (no statistics or lockdep to count it: the
    // entry's flag says so).
    unsafe { rwlock::read_after_refused_add(l) }
}

// --- counted acquisitions ------------------------------------------------------------------------------

/// Defines counted acquisitions: `$try` first, then `$call` (blocking or timed) if it answered
/// `EBUSY`, timed by [`stat::acquire`] when statistics are kept; else just `$call`. `$obj` describes
/// the object for the records.
macro_rules! counted {
    ($($name:ident ( $o:ident : $ot:ty $(, $a:ident : $t:ty)* ) as $obj:ident, $dep:path => $try:path, $call:path, $excl:expr $(, check $check:expr)?;)*) => {$(
        unsafe extern "C" fn $name($o: $ot, $($a: $t,)* site: usize) -> c_int {
            // The counted path out of line: the uncounted one then needs no stack frame and
            // tail-calls the implementation.
            #[cold]
            #[inline(never)]
            unsafe fn counted($o: $ot, $($a: $t,)* site: usize) -> c_int {
                // The arguments glibc checks before it tries the lock: the counted path tries first.
                $(
                    // SAFETY: the caller's time pointer, null or valid (not every check reads it).
                    #[allow(unused_unsafe)]
                    let bad = unsafe { $check };
                    if let Some(e) = bad {
                        return e;
                    }
                )?
                // SAFETY (both closures): the caller's object, and time if any.
                stat::acquire(
                    $o as usize,
                    site,
                    $obj($o),
                    $excl,
                    || unsafe { $try($o) },
                    || unsafe { $call($o $(, $a)*) },
                )
            }
            // Lockdep: announced before the call can block, undone if it fails.
            #[cold]
            #[inline(never)]
            unsafe fn checked($o: $ot, $($a: $t,)* site: usize) -> c_int {
                $dep($o, site, false);
                let r = if stat::on() {
                    // SAFETY: forwarded.
                    unsafe { counted($o, $($a,)* site) }
                } else {
                    // SAFETY: forwarded.
                    unsafe { $call($o $(, $a)*) }
                };
                dep::settle($o as usize, r)
            }
            if dep::on() {
                // SAFETY: forwarded.
                return unsafe { checked($o, $($a,)* site) };
            }
            if stat::on() {
                // SAFETY: forwarded.
                return unsafe { counted($o, $($a,)* site) };
            }
            // SAFETY: forwarded.
            unsafe { $call($o $(, $a)*) }
        }
    )*};
}

/// Defines counted trylocks: counted by [`stat::try_acquire`] when they succeed.
macro_rules! counted_try {
    ($($name:ident ( $o:ident : $ot:ty ) as $obj:ident, $dep:path => $try:path, $excl:expr;)*) => {$(
        unsafe extern "C" fn $name($o: $ot, site: usize) -> c_int {
            #[cold]
            #[inline(never)]
            fn counted($o: $ot, site: usize) -> c_int {
                // SAFETY: the caller's object.
                stat::try_acquire($o as usize, site, $obj($o), $excl, || unsafe { $try($o) })
            }
            #[cold]
            #[inline(never)]
            fn checked($o: $ot, site: usize) -> c_int {
                let r = if stat::on() {
                    counted($o, site)
                } else {
                    // SAFETY: the caller's object.
                    unsafe { $try($o) }
                };
                if dep::took(r) {
                    $dep($o, site, true);
                }
                r
            }
            if dep::on() {
                return checked($o, site);
            }
            if stat::on() {
                return counted($o, site);
            }
            // SAFETY: forwarded.
            unsafe { $try($o) }
        }
    )*};
}

fn mutex_obj(m: *mut pthread_mutex_t) -> Obj {
    mutex::stat_obj(M(m))
}

fn rw_obj(l: *mut pthread_rwlock_t) -> Obj {
    Obj::RwLock {
        glibc: L(l).is_glibc(),
    }
}

fn spin_obj(_: *mut pthread_spinlock_t) -> Obj {
    Obj::Spin
}

fn dep_rw_read(l: *mut pthread_rwlock_t, site: usize, tried: bool) {
    dep::rw_lock(l, site, false, tried);
}

fn dep_rw_write(l: *mut pthread_rwlock_t, site: usize, tried: bool) {
    dep::rw_lock(l, site, true, tried);
}

fn dep_rw_read_timed(l: *mut pthread_rwlock_t, site: usize, _: bool) {
    dep::rw_timed(l, site, false);
}

fn dep_rw_write_timed(l: *mut pthread_rwlock_t, site: usize, _: bool) {
    dep::rw_timed(l, site, true);
}

// --- init and destroy: the class of an initialised object is its init call site ---------------------

unsafe extern "C" fn mutex_init(
    m: *mut pthread_mutex_t,
    a: *const pthread_mutexattr_t,
    site: usize,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { mutex::pthread_mutex_init(m, a) };
    if r == 0 && dep::on() {
        dep::created(m as usize, Kind::Mutex, site);
    }
    r
}

unsafe extern "C" fn mutex_destroy(m: *mut pthread_mutex_t, site: usize) -> c_int {
    if !dep::on() {
        // SAFETY: forwarded.
        return unsafe { mutex::pthread_mutex_destroy(m) };
    }
    dep::destroying(m as usize, site);
    // SAFETY: forwarded.
    dep::destroyed(m as usize, unsafe { mutex::pthread_mutex_destroy(m) })
}

unsafe extern "C" fn c11_init(m: *mut pthread_mutex_t, ty: c_int, site: usize) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { crate::c11::mtx_init(m, ty) };
    if r == crate::c11::THRD_SUCCESS && dep::on() {
        dep::created(m as usize, Kind::Mutex, site);
    }
    r
}

/// `mtx_destroy`.
///
/// # Safety
/// `m` points to a valid `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_destroy(m: *mut pthread_mutex_t) {
    // Through the exported `pthread_mutex_destroy` (lockdep forgets the object there).
    // SAFETY: forwarded.
    unsafe { pthread_mutex_destroy(m) };
}

unsafe extern "C" fn rw_init(
    l: *mut pthread_rwlock_t,
    a: *const pthread_rwlockattr_t,
    site: usize,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { rwlock::pthread_rwlock_init(l, a) };
    if r == 0 && dep::on() {
        dep::created(l as usize, Kind::RwLock, site);
    }
    r
}

unsafe extern "C" fn rw_destroy(l: *mut pthread_rwlock_t, site: usize) -> c_int {
    if !dep::on() {
        // SAFETY: forwarded.
        return unsafe { rwlock::pthread_rwlock_destroy(l) };
    }
    dep::destroying(l as usize, site);
    // SAFETY: forwarded.
    dep::destroyed(l as usize, unsafe { rwlock::pthread_rwlock_destroy(l) })
}

unsafe extern "C" fn spin_init(s: *mut pthread_spinlock_t, pshared: c_int, site: usize) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { spin::pthread_spin_init(s, pshared) };
    if r == 0 && dep::on() {
        dep::created(s as usize, Kind::SpinLock, site);
    }
    r
}

unsafe extern "C" fn spin_destroy(s: *mut pthread_spinlock_t, site: usize) -> c_int {
    if !dep::on() {
        // SAFETY: forwarded.
        return unsafe { spin::pthread_spin_destroy(s) };
    }
    dep::destroying(s as usize, site);
    // SAFETY: forwarded.
    dep::destroyed(s as usize, unsafe { spin::pthread_spin_destroy(s) })
}

counted! {
    mutex_lock_general(m: *mut pthread_mutex_t) as mutex_obj, dep::mutex_lock
        => mutex::pthread_mutex_trylock, mutex::pthread_mutex_lock_general, true;
    mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) as mutex_obj, dep::mutex_timed
        => mutex::pthread_mutex_trylock, mutex::pthread_mutex_timedlock, true;
    mutex_clocklock(m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec) as mutex_obj, dep::mutex_timed
        => mutex::pthread_mutex_trylock, mutex::pthread_mutex_clocklock, true,
        check (!crate::sys::valid_clock(k)).then_some(libc::EINVAL);
    rw_rdlock(l: *mut pthread_rwlock_t) as rw_obj, dep_rw_read
        => rwlock::pthread_rwlock_tryrdlock, rwlock::pthread_rwlock_rdlock, false;
    rw_timedrdlock(l: *mut pthread_rwlock_t, t: *const timespec) as rw_obj, dep_rw_read_timed
        => rwlock::pthread_rwlock_tryrdlock, rwlock::pthread_rwlock_timedrdlock, false,
        check rwlock::bad_time(libc::CLOCK_REALTIME, t);
    rw_clockrdlock(l: *mut pthread_rwlock_t, k: clockid_t, t: *const timespec) as rw_obj, dep_rw_read_timed
        => rwlock::pthread_rwlock_tryrdlock, rwlock::pthread_rwlock_clockrdlock, false,
        check rwlock::bad_time(k, t);
    rw_wrlock(l: *mut pthread_rwlock_t) as rw_obj, dep_rw_write
        => rwlock::pthread_rwlock_trywrlock, rwlock::pthread_rwlock_wrlock, true;
    rw_timedwrlock(l: *mut pthread_rwlock_t, t: *const timespec) as rw_obj, dep_rw_write_timed
        => rwlock::pthread_rwlock_trywrlock, rwlock::pthread_rwlock_timedwrlock, true,
        check rwlock::bad_time(libc::CLOCK_REALTIME, t);
    rw_clockwrlock(l: *mut pthread_rwlock_t, k: clockid_t, t: *const timespec) as rw_obj, dep_rw_write_timed
        => rwlock::pthread_rwlock_trywrlock, rwlock::pthread_rwlock_clockwrlock, true,
        check rwlock::bad_time(k, t);
    spin_lock(s: *mut pthread_spinlock_t) as spin_obj, dep::spin_lock
        => spin::pthread_spin_trylock, spin::pthread_spin_lock, true;
}

counted_try! {
    mutex_trylock(m: *mut pthread_mutex_t) as mutex_obj, dep::mutex_lock => mutex::pthread_mutex_trylock, true;
    rw_tryrdlock(l: *mut pthread_rwlock_t) as rw_obj, dep_rw_read => rwlock::pthread_rwlock_tryrdlock, false;
    rw_trywrlock(l: *mut pthread_rwlock_t) as rw_obj, dep_rw_write => rwlock::pthread_rwlock_trywrlock, true;
    spin_trylock(s: *mut pthread_spinlock_t) as spin_obj, dep::spin_lock => spin::pthread_spin_trylock, true;
}

// --- mutexes ---------------------------------------------------------------------------------------------

/// `pthread_mutex_lock` where the entry is not the x86-64 assembly, and `mtx_lock`: the same fast
/// path in Rust ([`mutex::lock_fast`]), then the general function.
unsafe extern "C" fn mutex_lock(m: *mut pthread_mutex_t, site: usize) -> c_int {
    // SAFETY: the caller's mutex.
    if unsafe { mutex::lock_fast(M(m)) } {
        return 0;
    }
    // SAFETY: forwarded.
    unsafe { mutex_lock_general(m, site) }
}

/// `pthread_mutex_unlock` where the entry is not the x86-64 assembly, and `mtx_unlock`: as
/// [`mutex_lock`].
unsafe extern "C" fn mutex_unlock(m: *mut pthread_mutex_t, site: usize) -> c_int {
    // SAFETY: the caller's mutex.
    if unsafe { mutex::unlock_fast(M(m)) } {
        return 0;
    }
    // SAFETY: forwarded.
    unsafe { mutex_unlock_general(m, site) }
}

/// The unlock past the fast path (x86-64's assembly or [`mutex_unlock`]): lockdep and statistics
/// when on, then the general unlock (not the fast path's try again).
unsafe extern "C" fn mutex_unlock_general(m: *mut pthread_mutex_t, site: usize) -> c_int {
    if dep::on() {
        dep::mutex_unlock(m, site);
    }
    if stat::on() && mutex::releases(M(m)) {
        stat::release(m as usize);
    }
    // SAFETY: forwarded.
    unsafe { mutex::pthread_mutex_unlock_general(m) }
}

unsafe extern "C" fn c11_unlock(m: *mut pthread_mutex_t, site: usize) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { mutex_unlock(m, site) })
}

unsafe extern "C" fn c11_lock(m: *mut pthread_mutex_t, site: usize) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { mutex_lock(m, site) })
}

unsafe extern "C" fn c11_trylock(m: *mut pthread_mutex_t, site: usize) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { mutex_trylock(m, site) })
}

unsafe extern "C" fn c11_timedlock(
    m: *mut pthread_mutex_t,
    t: *const timespec,
    site: usize,
) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { mutex_timedlock(m, t, site) })
}

// --- condvars --------------------------------------------------------------------------------------------

unsafe extern "C-unwind" fn cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    site: usize,
) -> c_int {
    if dep::on() {
        dep::cond_wait(c as usize, m as usize, site);
    }
    if stat::on() {
        // SAFETY: the caller's objects.
        return stat::cond_wait(c as usize, m as usize, mutex_obj(m), site, || unsafe {
            cond::pthread_cond_wait(c, m)
        });
    }
    // SAFETY: forwarded.
    unsafe { cond::pthread_cond_wait(c, m) }
}

unsafe extern "C-unwind" fn cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
    site: usize,
) -> c_int {
    if dep::on() {
        dep::cond_wait(c as usize, m as usize, site);
    }
    if stat::on() {
        // SAFETY: the caller's objects.
        return stat::cond_wait(c as usize, m as usize, mutex_obj(m), site, || unsafe {
            cond::pthread_cond_timedwait(c, m, t)
        });
    }
    // SAFETY: forwarded.
    unsafe { cond::pthread_cond_timedwait(c, m, t) }
}

unsafe extern "C-unwind" fn cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    k: clockid_t,
    t: *const timespec,
    site: usize,
) -> c_int {
    if dep::on() {
        dep::cond_wait(c as usize, m as usize, site);
    }
    if stat::on() {
        // SAFETY: the caller's objects.
        return stat::cond_wait(c as usize, m as usize, mutex_obj(m), site, || unsafe {
            cond::pthread_cond_clockwait(c, m, k, t)
        });
    }
    // SAFETY: forwarded.
    unsafe { cond::pthread_cond_clockwait(c, m, k, t) }
}

unsafe extern "C" fn cond_signal(c: *mut pthread_cond_t, site: usize) -> c_int {
    if stat::on() {
        stat::notify(c as usize, site, false);
    }
    // SAFETY: forwarded.
    unsafe { cond::pthread_cond_signal(c) }
}

unsafe extern "C" fn cond_broadcast(c: *mut pthread_cond_t, site: usize) -> c_int {
    if stat::on() {
        stat::notify(c as usize, site, true);
    }
    // SAFETY: forwarded.
    unsafe { cond::pthread_cond_broadcast(c) }
}

unsafe extern "C-unwind" fn c11_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    site: usize,
) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { cond_wait(c, m, site) })
}

unsafe extern "C-unwind" fn c11_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
    site: usize,
) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { cond_clockwait(c, m, libc::CLOCK_REALTIME, t, site) })
}

unsafe extern "C" fn c11_signal(c: *mut pthread_cond_t, site: usize) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { cond_signal(c, site) })
}

unsafe extern "C" fn c11_broadcast(c: *mut pthread_cond_t, site: usize) -> c_int {
    // SAFETY: forwarded.
    result(unsafe { cond_broadcast(c, site) })
}

// --- rwlocks ---------------------------------------------------------------------------------------------

unsafe extern "C" fn rw_unlock(l: *mut pthread_rwlock_t, site: usize) -> c_int {
    if dep::on() {
        dep::unlock(l as usize, site);
    }
    if stat::on() {
        stat::release(l as usize);
    }
    // SAFETY: forwarded.
    unsafe { rwlock::pthread_rwlock_unlock(l) }
}

// --- spinlocks -------------------------------------------------------------------------------------------

unsafe extern "C" fn spin_unlock(s: *mut pthread_spinlock_t, site: usize) -> c_int {
    if dep::on() {
        dep::unlock(s as usize, site);
    }
    if stat::on() {
        stat::release(s as usize);
    }
    // SAFETY: forwarded.
    unsafe { spin::pthread_spin_unlock(s) }
}

// --- exec: the statistics of the image about to be replaced ----------------------------------------------

type Argv = *const *const c_char;

/// `_exit`: lockdep's reports are written first (when asked: `LOCKLAB_LOCKDEP_OUT`), as at `exit`;
/// then the process ends as glibc's would end it. A `fork` child that ends this way is checked to
/// its end (a `vfork` child writes nothing).
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    dep::write_out();
    // Acquire pairs with the Release in `find_exit`.
    let f = REAL_EXIT.load(core::sync::atomic::Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: glibc's `_exit`, found by `find_exit`; it does not return.
        unsafe {
            core::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(c_int) -> !>(f)(status)
        }
    }
    // Before the constructor: what glibc's `_exit` does (not a look-up of glibc's function: `_exit`
    // is async-signal-safe, and a look-up takes the dynamic linker's lock).
    loop {
        // SAFETY: a system call that ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// glibc's `_exit`, found by the constructor ([`find_exit`]).
static REAL_EXIT: core::sync::atomic::AtomicPtr<libc::c_void> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Finds glibc's `_exit` (the constructor: `_exit` may be called first inside a signal handler).
pub(crate) fn find_exit() {
    let p = crate::real::find(c"_exit");
    // Release pairs with the Acquire in `_exit`.
    REAL_EXIT.store(p, core::sync::atomic::Ordering::Release);
}

/// `_Exit`: as [`_exit`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: as `_exit`.
    unsafe { _exit(status) }
}

/// `execve`: writes the lock statistics first (when kept), then glibc's.
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    stat::before_exec();
    dep::write_out();
    // SAFETY: forwarded.
    unsafe { real::execve(path, argv, envp) }
}

/// `execv`: as [`execve`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    stat::before_exec();
    dep::write_out();
    // SAFETY: forwarded.
    unsafe { real::execv(path, argv) }
}

/// `execvp`: as [`execve`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    stat::before_exec();
    dep::write_out();
    // SAFETY: forwarded.
    unsafe { real::execvp(file, argv) }
}

/// `execvpe`: as [`execve`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    stat::before_exec();
    dep::write_out();
    // SAFETY: forwarded.
    unsafe { real::execvpe(file, argv, envp) }
}

/// `fexecve`: as [`execve`].
///
/// # Safety
/// As glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    stat::before_exec();
    dep::write_out();
    // SAFETY: forwarded.
    unsafe { real::fexecve(fd, argv, envp) }
}

/// The variadic `execl`, `execlp` and `execle` (glibc's call its internal `execve`, which no
/// interposition reaches): a trampoline saves the argument registers (and the stack they may spill
/// to stays untouched), calls `$hook` (which writes the statistics and returns glibc's function), then
/// jumps to it with every argument as the caller passed it.
macro_rules! variadic_exec {
    ($($(#[$doc:meta])* $name:ident => $hook:ident, $real:literal;)*) => {$(
        extern "C" fn $hook() -> usize {
            static CELL: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
            stat::before_exec();
    dep::write_out();
            let mut p = CELL.load(core::sync::atomic::Ordering::Relaxed);
            if p == 0 {
                p = real::find($real) as usize;
                if p == 0 {
                    crate::sys::write_stderr(b"liblocklab_pthread: glibc's exec function was not found; aborting\n");
                    std::process::abort();
                }
                CELL.store(p, core::sync::atomic::Ordering::Relaxed);
            }
            p
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(path: *const c_char, arg: *const c_char) -> c_int {
            // Seven pushes keep the stack 16-aligned for the call (it is 8 off at entry); %al is the
            // variadic call's vector-register count, kept too.
            // The CFI directives describe each push and pop, so unwinders (backtrace(), profilers)
            // walk through the hook's frame.
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rdi", ".cfi_adjust_cfa_offset 8", "push rsi", ".cfi_adjust_cfa_offset 8",
                "push rdx", ".cfi_adjust_cfa_offset 8", "push rcx", ".cfi_adjust_cfa_offset 8",
                "push r8", ".cfi_adjust_cfa_offset 8", "push r9", ".cfi_adjust_cfa_offset 8",
                "push rax", ".cfi_adjust_cfa_offset 8",
                "call {hook}",
                "mov r11, rax",
                "pop rax", ".cfi_adjust_cfa_offset -8", "pop r9", ".cfi_adjust_cfa_offset -8",
                "pop r8", ".cfi_adjust_cfa_offset -8", "pop rcx", ".cfi_adjust_cfa_offset -8",
                "pop rdx", ".cfi_adjust_cfa_offset -8", "pop rsi", ".cfi_adjust_cfa_offset -8",
                "pop rdi", ".cfi_adjust_cfa_offset -8",
                "jmp r11",
                ".cfi_endproc",
                hook = sym $hook,
            )
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's.
        #[cfg(target_arch = "aarch64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(path: *const c_char, arg: *const c_char) -> c_int {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "stp x0, x1, [sp, #-80]!", ".cfi_adjust_cfa_offset 80",
                "stp x2, x3, [sp, #16]", "stp x4, x5, [sp, #32]",
                "stp x6, x7, [sp, #48]", "stp x8, x30, [sp, #64]", ".cfi_offset x30, -8",
                "bl {hook}",
                "mov x16, x0",
                "ldp x8, x30, [sp, #64]", ".cfi_restore x30", "ldp x6, x7, [sp, #48]",
                "ldp x4, x5, [sp, #32]", "ldp x2, x3, [sp, #16]", "ldp x0, x1, [sp], #80",
                ".cfi_adjust_cfa_offset -80",
                "br x16",
                ".cfi_endproc",
                hook = sym $hook,
            )
        }
    )*};
}

variadic_exec! {
    /// `execl`: writes the lock statistics first (when kept), then glibc's.
    execl => before_execl, c"execl";
    /// `execlp`: as [`execl`].
    execlp => before_execlp, c"execlp";
    /// `execle`: as [`execl`].
    execle => before_execle, c"execle";
}
