//! glibc's own functions, for the objects we hand to glibc (robust, priority-inherit,
//! priority-protect and process-shared ones, and every object under a `glibc` choice).
//!
//! Each is resolved once, on first use, by reading glibc's own dynamic symbol table: the objects are
//! listed with `dl_iterate_phdr`, and the name is looked up in `libpthread.so.0` (glibc before 2.34)
//! and `libc.so.6` through their GNU hash tables, taking the **default** version (the one `dlsym`
//! gives since glibc 2.36: `pthread_cond_wait@@GLIBC_2.3.2`, not the compatibility `@GLIBC_2.2.5`).
//! Not `dlsym`/`dlvsym`: they work only once libc is initialised (a lock in `.preinit_array` comes
//! before), and a failed lookup allocates its error message, re-entering a `malloc` that locks.
//! Nothing here allocates or takes a lock of ours. A racing first use resolves twice and stores the
//! same address.

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// An entry of the dynamic section (`Elf64_Dyn`; 64-bit targets only, as the layouts here).
#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_un: u64,
}

/// What the `dl_iterate_phdr` callback looks for, and what it found.
struct Search<'a> {
    name: &'a [u8],
    /// Object name suffix: `libpthread.so.0`, then `libc.so.6`.
    object: &'a [u8],
    found: *mut c_void,
}

/// The GNU hash of a symbol name.
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter()
        .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
}

/// Looks `s.name` up in one loaded object's dynamic symbol table.
///
/// # Safety
/// `info` describes a loaded object (as `dl_iterate_phdr` passes it).
unsafe fn lookup_in(info: &libc::dl_phdr_info, s: &mut Search<'_>) {
    let base = info.dlpi_addr as usize;
    // SAFETY: the program headers of a loaded object.
    let phdrs = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC) else {
        return;
    };
    let (mut strtab, mut symtab, mut gnu_hash_tab, mut versym) = (0usize, 0usize, 0usize, 0usize);
    let mut d = (base + dynamic.p_vaddr as usize) as *const Dyn;
    // The loader relocates these addresses in place on x86-64 and aarch64; an unrelocated one is
    // below the load base.
    let fix = |v: u64| -> usize {
        let v = v as usize;
        if v < base { v + base } else { v }
    };
    loop {
        // SAFETY: the dynamic section of a loaded object, ended by DT_NULL.
        let e = unsafe { &*d };
        match e.d_tag as u64 {
            0 => break,
            5 => strtab = fix(e.d_un),                 // DT_STRTAB
            6 => symtab = fix(e.d_un),                 // DT_SYMTAB
            0x6fff_fef5 => gnu_hash_tab = fix(e.d_un), // DT_GNU_HASH
            0x6fff_fff0 => versym = fix(e.d_un),       // DT_VERSYM
            _ => {}
        }
        // SAFETY: still inside the dynamic section (DT_NULL not reached).
        d = unsafe { d.add(1) };
    }
    if strtab == 0 || symtab == 0 || gnu_hash_tab == 0 {
        return;
    }
    let h = gnu_hash(s.name);
    // SAFETY: the GNU hash table layout: nbuckets, symoffset, bloom_size, bloom_shift, bloom words
    // (pointer-sized), buckets, chains.
    unsafe {
        let hdr = gnu_hash_tab as *const u32;
        let (nbuckets, symoffset, bloom_size) = (*hdr, *hdr.add(1), *hdr.add(2));
        if nbuckets == 0 {
            return;
        }
        let buckets = (hdr.add(4) as *const usize).add(bloom_size as usize) as *const u32;
        let chains = buckets.add(nbuckets as usize);
        let mut ix = *buckets.add((h % nbuckets) as usize);
        if ix < symoffset {
            return;
        }
        loop {
            let ch = *chains.add((ix - symoffset) as usize);
            if ch | 1 == h | 1 {
                let sym = &*(symtab as *const libc::Elf64_Sym).add(ix as usize);
                let name = CStr::from_ptr((strtab + sym.st_name as usize) as *const libc::c_char);
                // The default version: versym's hidden bit (0x8000) marks the others.
                let hidden = versym != 0 && *(versym as *const u16).add(ix as usize) & 0x8000 != 0;
                if name.to_bytes() == s.name && !hidden && sym.st_value != 0 && sym.st_shndx != 0 {
                    s.found = (base + sym.st_value as usize) as *mut c_void;
                    return;
                }
            }
            if ch & 1 != 0 {
                return;
            }
            ix += 1;
        }
    }
}

unsafe extern "C" fn each_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `Search` passed to dl_iterate_phdr below; `info` is valid for the call.
    let (s, info) = unsafe { (&mut *data.cast::<Search<'_>>(), &*info) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: a NUL-terminated object name.
    let obj = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    if obj.ends_with(s.object) {
        // SAFETY: as dl_iterate_phdr describes it.
        unsafe { lookup_in(info, s) };
        return 1;
    }
    0
}

/// The address of `name` (default version) in glibc's objects, or null.
#[cold]
pub(crate) fn find(name: &CStr) -> *mut c_void {
    let mut p = core::ptr::null_mut();
    for object in [b"libpthread.so.0".as_slice(), b"libc.so.6"] {
        let mut s = Search {
            name: name.to_bytes(),
            object,
            found: core::ptr::null_mut(),
        };
        // SAFETY: a callback that only reads the objects' tables, with our `Search` as its data.
        unsafe { libc::dl_iterate_phdr(Some(each_object), (&raw mut s).cast()) };
        if !s.found.is_null() {
            p = s.found;
            break;
        }
    }
    p
}

/// Looks `name` up in glibc's objects, once (the caller caches it in `cell`); aborts with one line
/// if glibc has no such function.
#[cold]
pub(crate) fn resolve(name: &CStr, cell: &AtomicPtr<c_void>) -> *mut c_void {
    let p = find(name);
    if p.is_null() {
        let msg = b"liblocklab_pthread: a glibc function was not found; aborting\n";
        // SAFETY: a valid buffer; the result does not matter (the process aborts next).
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        std::process::abort();
    }
    // Release pairs with the Acquire load in `real!`.
    cell.store(p, Ordering::Release);
    p
}

/// Declares `fn $name(args) -> ret` calling glibc's function of the same C name.
macro_rules! real {
    ($($name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty;)*) => {
        $(
            #[allow(non_snake_case, clippy::missing_safety_doc)]
            pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
                static CELL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
                // Acquire pairs with the Release store in `resolve`.
                let mut p = CELL.load(Ordering::Acquire);
                if p.is_null() {
                    // SAFETY: the C string of the function's own name.
                    p = resolve(unsafe {
                        CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes())
                    }, &CELL);
                }
                // SAFETY: `p` is glibc's function of this name, with this C signature ("C-unwind":
                // a cancellation may unwind out of glibc's waits).
                let f: unsafe extern "C-unwind" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(p) };
                // SAFETY: the caller passes what glibc's function expects.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

use libc::{c_int, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t, timespec};
type MutexAttr = *const libc::pthread_mutexattr_t;
type RwAttr = *const libc::pthread_rwlockattr_t;
type CondAttr = *const libc::pthread_condattr_t;
type Ts = *const timespec;
type Argv = *const *const libc::c_char;
type KeyDtor = Option<unsafe extern "C" fn(*mut libc::c_void)>;

real! {
    pthread_mutex_init(m: *mut pthread_mutex_t, a: MutexAttr) -> c_int;
    pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: Ts) -> c_int;
    pthread_mutex_clocklock(m: *mut pthread_mutex_t, c: clockid_t, t: Ts) -> c_int;
    pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_consistent(m: *mut pthread_mutex_t) -> c_int;
    pthread_mutex_getprioceiling(m: *const pthread_mutex_t, p: *mut c_int) -> c_int;
    pthread_mutex_setprioceiling(m: *mut pthread_mutex_t, p: c_int, old: *mut c_int) -> c_int;

    pthread_cond_init(c: *mut pthread_cond_t, a: CondAttr) -> c_int;
    pthread_cond_destroy(c: *mut pthread_cond_t) -> c_int;
    pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int;
    pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: Ts) -> c_int;
    pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: Ts) -> c_int;
    pthread_cond_signal(c: *mut pthread_cond_t) -> c_int;
    pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int;

    pthread_rwlock_init(l: *mut pthread_rwlock_t, a: RwAttr) -> c_int;
    pthread_rwlock_destroy(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int;
    pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: Ts) -> c_int;
    pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: Ts) -> c_int;
    pthread_rwlock_clockrdlock(l: *mut pthread_rwlock_t, k: clockid_t, t: Ts) -> c_int;
    pthread_rwlock_clockwrlock(l: *mut pthread_rwlock_t, k: clockid_t, t: Ts) -> c_int;
    pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int;

    pthread_spin_init(l: *mut libc::pthread_spinlock_t, p: c_int) -> c_int;
    pthread_spin_destroy(l: *mut libc::pthread_spinlock_t) -> c_int;
    pthread_spin_lock(l: *mut libc::pthread_spinlock_t) -> c_int;
    pthread_spin_trylock(l: *mut libc::pthread_spinlock_t) -> c_int;
    pthread_spin_unlock(l: *mut libc::pthread_spinlock_t) -> c_int;

    pthread_key_create(k: *mut libc::pthread_key_t, d: KeyDtor) -> c_int;
    sigaction(s: c_int, a: *const libc::sigaction, o: *mut libc::sigaction) -> c_int;
    signal(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    bsd_signal(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    sysv_signal(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    __sysv_signal(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    ssignal(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    sigset(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    pthread_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int;
    sigprocmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int;
    fork() -> libc::pid_t;

    execve(p: *const libc::c_char, a: Argv, e: Argv) -> c_int;
    execv(p: *const libc::c_char, a: Argv) -> c_int;
    execvp(p: *const libc::c_char, a: Argv) -> c_int;
    execvpe(p: *const libc::c_char, a: Argv, e: Argv) -> c_int;
    fexecve(fd: c_int, a: Argv, e: Argv) -> c_int;
}
