//! When the statistics are written and where: the start (at load or in a fork's child), `SIGUSR1`,
//! exit and `exec`, the output file's name (`%p`) and its descriptor, kept valid across a program
//! that closes or reuses it.

use super::*;

/// Longest path template kept.
pub(super) const PATH_MAX: usize = 4096;
/// A byte buffer in a static, written by one thread at a time (each use says why).
pub(super) struct Buf<const N: usize>(core::cell::UnsafeCell<[u8; N]>);

// SAFETY: every access is serialised by its users (see each `get`).
unsafe impl<const N: usize> Sync for Buf<N> {}

impl<const N: usize> Buf<N> {
    pub(super) const fn new() -> Self {
        Buf(core::cell::UnsafeCell::new([0; N]))
    }
    /// # Safety
    /// No other reference to the buffer is live.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn get(&self) -> &mut [u8; N] {
        // SAFETY: the caller's exclusivity.
        unsafe { &mut *self.0.get() }
    }
}

/// The path template (`LOCKLAB_STAT`), NUL-terminated.
pub(super) static TEMPLATE: Buf<PATH_MAX> = Buf::new();
/// The file this process writes: its name (NUL-terminated), descriptor, device and inode.
pub(super) static OUT_NAME: Buf<{ PATH_MAX + 32 }> = Buf::new();
pub(super) static OUT_FD: AtomicI32 = AtomicI32::new(-1);
pub(super) static OUT_DEV: AtomicU64 = AtomicU64::new(0);
pub(super) static OUT_INO: AtomicU64 = AtomicU64::new(0);
/// The process that opened the file (a `vfork` child, which shares our memory, must not write it).
pub(super) static OUT_PID: AtomicI32 = AtomicI32::new(0);
/// SIGUSR1 asked for a dump.
pub(super) static DUMP_ASKED: AtomicBool = AtomicBool::new(false);
/// A dump is being written (another request meanwhile is dropped).
pub(super) static DUMPING: AtomicBool = AtomicBool::new(false);
/// 0: not started; 1: started.
pub(super) static STARTED: AtomicU8 = AtomicU8::new(0);

/// Starts counting with `path` as the template (from `config::load`, once, when `LOCKLAB_STAT` is
/// set and non-empty).
pub(super) fn start(path: &[u8]) {
    if STARTED.swap(1, Ordering::Relaxed) != 0 {
        return;
    }
    let n = path.len().min(PATH_MAX - 1);
    // SAFETY: written once, here, before `on()` turns true (config stores the flag after this call).
    unsafe {
        let t = TEMPLATE.get();
        t[..n].copy_from_slice(&path[..n]);
        t[n] = 0;
    }
    START_TICKS.store(ticks(), Ordering::Relaxed);
    START_NS.store(monotonic_ns(), Ordering::Relaxed);
    open_output(false);
}

/// Gives the statistics' thread-exit key back to a process that ran out of keys (shards of threads
/// that exit afterwards are not reused; their counts stay in the dump). `true` if one was freed.
pub(crate) fn give_up_key() -> bool {
    let k = KEY.swap(-2, Ordering::Relaxed);
    // SAFETY: our key; glibc runs no destructor of a deleted key.
    k >= 0 && unsafe { libc::pthread_key_delete(k as libc::pthread_key_t) } == 0
}

/// The constructor's part: the thread-exit key, the SIGUSR1 handler (only if the program's
/// disposition is the default) and the destructor's registration are done once libc is up.
pub(crate) fn init() {
    if !on() {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and destructor.
    if unsafe { libc::pthread_key_create(&mut key, Some(shard_exit)) } == 0 {
        KEY.store(key as i32, Ordering::Relaxed);
    }
    // SAFETY: querying, then installing, a handler that only stores to an atomic.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(libc::SIGUSR1, core::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_DFL
        {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_sigusr1 as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, core::ptr::null_mut());
        }
    }
}

pub(super) extern "C" fn on_sigusr1(_: c_int) {
    DUMP_ASKED.store(true, Ordering::Relaxed);
}

#[inline(always)]
pub(super) fn poll_dump() {
    if DUMP_ASKED.load(Ordering::Relaxed) {
        asked_dump();
    }
}

#[cold]
#[inline(never)]
pub(super) fn asked_dump() {
    if DUMP_ASKED.swap(false, Ordering::Relaxed) {
        dump(b"signal");
    }
}

/// The destructor: the table at exit.
pub(crate) fn at_exit() {
    if on() {
        dump(b"exit");
    }
}

/// Before an `exec*`: the table of the image about to be replaced (not from a child of `vfork`,
/// which runs in our memory until it execs).
pub(crate) fn before_exec() {
    // SAFETY: no arguments.
    if on() && unsafe { libc::getpid() } == OUT_PID.load(Ordering::Relaxed) {
        dump(b"exec");
    }
}

/// In the child of `fork` (the only thread): counts start from zero, every other thread's shard is
/// free, and the child opens its own file.
pub(crate) fn after_fork_child() {
    if !on() {
        return;
    }
    let mine = MINE.try_with(Cell::get).unwrap_or(core::ptr::null());
    let n = SHARD_COUNT.load(Ordering::Relaxed).min(MAX_SHARDS);
    for cell in &SHARDS[..n] {
        let p = cell.load(Ordering::Relaxed);
        // SAFETY: published shards are never freed; the child has one thread.
        let Some(s) = (unsafe { p.as_ref() }) else {
            continue;
        };
        for e in tables(s).flatten() {
            if e.lock.load(Ordering::Relaxed) != 0 {
                e.lock.store(0, Ordering::Relaxed);
                e.site.store(0, Ordering::Relaxed);
                for x in &e.c {
                    x.store(0, Ordering::Relaxed);
                }
            }
        }
        s.dropped.store(0, Ordering::Relaxed);
        s.olookups.store(0, Ordering::Relaxed);
        s.oprobes.store(0, Ordering::Relaxed);
        // The arena's entries are cleared above: it refills from its first chunk.
        s.olen.set(0);
        drop_index(s);
        for t in &s.tags {
            t.set(0);
        }
        if !core::ptr::eq(p, mine) {
            s.held_len.set(0);
            s.in_use.store(false, Ordering::Relaxed);
        }
    }
    UNCOUNTED.store(0, Ordering::Relaxed);
    DUMPING.store(false, Ordering::Relaxed);
    DUMP_ASKED.store(false, Ordering::Relaxed);
    let fd = OUT_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the parent's descriptor, inherited; ours to close in the child.
        unsafe { libc::close(fd) };
    }
    open_output(false);
}

/// Appends `src` to `buf` at `*n`, truncating at the end.
pub(crate) fn put(buf: &mut [u8], n: &mut usize, src: &[u8]) {
    let k = src.len().min(buf.len().saturating_sub(*n));
    buf[*n..*n + k].copy_from_slice(&src[..k]);
    *n += k;
}

pub(crate) fn put_u64(buf: &mut [u8], n: &mut usize, v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut v = v;
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    put(buf, n, &tmp[i..]);
}

/// Opens this process's file (`again`: the earlier descriptor was lost; reuse the name).
pub(super) fn open_output(again: bool) {
    // SAFETY: the template is written once in `start`; the name only by this function, which runs in
    // `start`, in the child after fork, and in a dump (one at a time: `DUMPING`).
    let (template, name) = unsafe { (&*TEMPLATE.get(), OUT_NAME.get()) };
    let tlen = template.iter().position(|&b| b == 0).unwrap_or(0);
    let template = &template[..tlen];
    let has_pid = template.windows(2).any(|w| w == b"%p");
    let mut flags = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
    let fd = if again {
        // SAFETY: a NUL-terminated name.
        unsafe { libc::open(name.as_ptr().cast(), flags, 0o644) }
    } else {
        let mut fd = -1;
        for attempt in 0..100u64 {
            let mut n = 0;
            let mut i = 0;
            while i < template.len() {
                if template[i..].starts_with(b"%p") {
                    // SAFETY: no arguments.
                    put_u64(name, &mut n, unsafe { libc::getpid() } as u64);
                    if attempt > 0 {
                        put(name, &mut n, b"-");
                        put_u64(name, &mut n, attempt);
                    }
                    i += 2;
                } else {
                    put(name, &mut n, &template[i..i + 1]);
                    i += 1;
                }
            }
            let n = n.min(name.len() - 1);
            name[n] = 0;
            flags |= if has_pid { libc::O_EXCL } else { libc::O_TRUNC };
            // SAFETY: a NUL-terminated name.
            fd = unsafe { libc::open(name.as_ptr().cast(), flags, 0o644) };
            if fd >= 0 || !has_pid || sys::errno() != libc::EEXIST {
                break;
            }
        }
        fd
    };
    if fd < 0 {
        return;
    }
    // SAFETY: all-zero is a valid `struct stat` (integers only).
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: our descriptor and a valid out-pointer.
    unsafe { libc::fstat(fd, &mut st) };
    OUT_DEV.store(st.st_dev, Ordering::Relaxed);
    OUT_INO.store(st.st_ino, Ordering::Relaxed);
    OUT_FD.store(fd, Ordering::Relaxed);
    // SAFETY: no arguments.
    OUT_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// Our descriptor, if it is still our file (a program may close every descriptor it does not know,
/// and reuse the number).
pub(super) fn output_fd() -> Option<c_int> {
    let check = |fd: c_int| {
        // SAFETY: all-zero is a valid `struct stat` (integers only).
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: any descriptor number; a valid out-pointer.
        fd >= 0
            && unsafe { libc::fstat(fd, &mut st) } == 0
            && st.st_dev == OUT_DEV.load(Ordering::Relaxed)
            && st.st_ino == OUT_INO.load(Ordering::Relaxed)
    };
    let fd = OUT_FD.load(Ordering::Relaxed);
    if check(fd) {
        return Some(fd);
    }
    open_output(true);
    let fd = OUT_FD.load(Ordering::Relaxed);
    (fd >= 0).then_some(fd)
}
