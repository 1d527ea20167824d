//! `dlopen` and `dlmopen`: a plugin loaded with `RTLD_DEEPBIND`, or into another link-map namespace,
//! binds glibc's own pthread functions ahead of ours, and would run glibc's algorithms on the locks
//! it shares with the program (a hang, or a glibc assertion). Nothing can redirect its bindings, so
//! the library says so, once, on stderr (not when every choice is glibc's), and the call goes on
//! unchanged. The exports are trampolines that jump (not call) to glibc's function: glibc finds the
//! calling object from the return address (its `RUNPATH`, its namespace), which must stay the
//! program's.
//!
//! With lockdep on, `dlclose` first has the validator forget the lock objects in the closed object's
//! writable segments (its static locks): a plugin loaded at the same addresses later gets classes and
//! orders of its own, not those of the one closed.
//!
//! ```c
//! void *h = dlopen("plugin.so", RTLD_NOW | RTLD_DEEPBIND);   /* one warning line on stderr */
//! ```

use crate::{config, real};
use libc::{c_char, c_int};

mod check {
    use super::*;
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    static WARNED: AtomicBool = AtomicBool::new(false);

    fn glibc_everywhere() -> bool {
        config::mutex_is_glibc()
            && config::rwlock() == config::RwAlgo::Glibc
            && config::spin() == config::SpinAlgo::Glibc
    }

    /// One line on stderr naming the plugin and how it was loaded.
    fn warn(file: *const c_char, how: &[u8]) {
        if glibc_everywhere() || WARNED.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut line = [0u8; 600];
        let mut n = 0;
        let mut put = |b: &[u8]| {
            let k = b.len().min(line.len() - n);
            line[n..n + k].copy_from_slice(&b[..k]);
            n += k;
        };
        put(b"liblocklab_pthread: warning: ");
        if file.is_null() {
            put(b"the program");
        } else {
            // SAFETY: a NUL-terminated path (glibc's contract for the argument).
            let name = unsafe { core::ffi::CStr::from_ptr(file) }.to_bytes();
            put(&name[..name.len().min(300)]);
        }
        put(b" is loaded ");
        put(how);
        put(
            b": its pthread calls bind glibc's functions, which cannot run locklab's locks, so a \
lock it shares with the program can hang; run it with LOCKLAB_MUTEX=glibc LOCKLAB_RWLOCK=glibc \
LOCKLAB_SPIN=glibc, or without the library\n",
        );
        crate::sys::write_stderr(&line[..n]);
    }

    /// glibc's function `name`, found once.
    fn real_fn(cell: &AtomicUsize, name: &core::ffi::CStr) -> usize {
        let mut p = cell.load(Ordering::Relaxed);
        if p == 0 {
            p = real::find(name) as usize;
            if p == 0 {
                crate::sys::write_stderr(
                    b"liblocklab_pthread: glibc's dlopen was not found; aborting\n",
                );
                std::process::abort();
            }
            cell.store(p, Ordering::Relaxed);
        }
        p
    }

    /// `dlopen`'s check: returns glibc's `dlopen`.
    pub(super) extern "C" fn check_dlopen(file: *const c_char, flags: c_int) -> usize {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        if flags & libc::RTLD_DEEPBIND != 0 {
            warn(file, b"with RTLD_DEEPBIND");
        }
        real_fn(&REAL, c"dlopen")
    }

    /// `dlclose`'s check: with lockdep on, the plugin's static locks are forgotten (a plugin loaded
    /// where this one was gets classes of its own); returns glibc's `dlclose`.
    pub(super) extern "C" fn check_dlclose(handle: *mut libc::c_void) -> usize {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        crate::dep::closing(handle);
        real_fn(&REAL, c"dlclose")
    }

    /// `dlmopen`'s check: returns glibc's `dlmopen`.
    pub(super) extern "C" fn check_dlmopen(
        lmid: libc::Lmid_t,
        file: *const c_char,
        flags: c_int,
    ) -> usize {
        static REAL: AtomicUsize = AtomicUsize::new(0);
        if lmid != libc::LM_ID_BASE {
            warn(file, b"into another namespace (dlmopen)");
        } else if flags & libc::RTLD_DEEPBIND != 0 {
            warn(file, b"with RTLD_DEEPBIND");
        }
        real_fn(&REAL, c"dlmopen")
    }
}

/// Defines an export that calls `$check` with the caller's first three argument registers intact
/// (the check's own arguments), then jumps to the address it returns with every argument register
/// restored: glibc's function returns straight to the program's caller (module docs).
macro_rules! checked_jump {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) => $check:path;) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> *mut libc::c_void {
            // Three pushes keep the stack 16-aligned for the call (it is 8 off at entry).
            // The CFI directives describe each push and pop (for unwinders).
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rdi", ".cfi_adjust_cfa_offset 8", "push rsi", ".cfi_adjust_cfa_offset 8",
                "push rdx", ".cfi_adjust_cfa_offset 8",
                "call {check}",
                "mov r11, rax",
                "pop rdx", ".cfi_adjust_cfa_offset -8", "pop rsi", ".cfi_adjust_cfa_offset -8",
                "pop rdi", ".cfi_adjust_cfa_offset -8",
                "jmp r11",
                ".cfi_endproc",
                check = sym $check,
            )
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As glibc's.
        #[cfg(target_arch = "aarch64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> *mut libc::c_void {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "stp x0, x1, [sp, #-32]!", ".cfi_adjust_cfa_offset 32",
                "stp x2, x30, [sp, #16]", ".cfi_offset x30, -8",
                "bl {check}",
                "mov x16, x0",
                "ldp x2, x30, [sp, #16]", ".cfi_restore x30", "ldp x0, x1, [sp], #32",
                ".cfi_adjust_cfa_offset -32",
                "br x16",
                ".cfi_endproc",
                check = sym $check,
            )
        }
    };
}

checked_jump! {
    /// `dlopen`: glibc's, after a warning for `RTLD_DEEPBIND` (module docs).
    dlopen(file: *const c_char, flags: c_int) => check::check_dlopen;
}

checked_jump! {
    /// `dlmopen`: glibc's, after a warning for a new namespace or `RTLD_DEEPBIND`.
    dlmopen(lmid: libc::Lmid_t, file: *const c_char, flags: c_int) => check::check_dlmopen;
}

checked_jump! {
    /// `dlclose`: glibc's, after lockdep forgets the locks in the object's writable segments.
    dlclose(handle: *mut libc::c_void) => check::check_dlclose;
}
