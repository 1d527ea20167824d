//! The dump: every shard's records summed per (lock, site), call sites named with `dladdr`, and
//! the JSON written through a fixed buffer with `pwrite` (no allocation: it runs at exit, before an
//! `exec` and from lock operations after a signal), its keys from [`super::schema`].

use super::*;

/// A merged record.
#[derive(Clone, Copy)]
pub(super) struct Rec {
    pub(super) lock: usize,
    pub(super) site: usize,
    pub(super) info: u32,
    pub(super) c: [u64; c::N],
}

/// Memory from `mmap` for `n` records (no allocation: a dump may run inside the program's `malloc`).
pub(super) struct Scratch {
    pub(super) p: *mut Rec,
    pub(super) len: usize,
}

impl Scratch {
    pub(super) fn new(n: usize) -> Option<Scratch> {
        let bytes = n.max(1) * core::mem::size_of::<Rec>();
        // SAFETY: an anonymous private mapping.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| Scratch {
            p: p.cast(),
            len: n.max(1),
        })
    }
    pub(super) fn slice(&mut self) -> &mut [Rec] {
        // SAFETY: zero-filled memory for `len` records (all-zero is a valid Rec), ours alone.
        unsafe { core::slice::from_raw_parts_mut(self.p, self.len) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.p.cast(), self.len * core::mem::size_of::<Rec>()) };
    }
}

/// Writes the JSON file. Never allocates and never fails loudly; one dump at a time.
pub(super) fn dump(reason: &[u8]) {
    if DUMPING.swap(true, Ordering::Acquire) {
        return;
    }
    let e = sys::errno();
    write_dump(reason);
    sys::set_errno(e);
    DUMPING.store(false, Ordering::Release);
}

pub(super) fn write_dump(reason: &[u8]) {
    let Some(fd) = output_fd() else { return };
    let shards = SHARD_COUNT.load(Ordering::Acquire).min(MAX_SHARDS);
    // Count the records to size the merge table.
    let mut used = 0usize;
    let mut dropped = 0u64;
    let (mut olookups, mut oprobes) = (0u64, 0u64);
    for cell in &SHARDS[..shards] {
        // SAFETY: published shards are never freed.
        let Some(s) = (unsafe { cell.load(Ordering::Acquire).as_ref() }) else {
            continue;
        };
        dropped += s.dropped.load(Ordering::Relaxed);
        olookups += s.olookups.load(Ordering::Relaxed);
        oprobes += s.oprobes.load(Ordering::Relaxed);
        used += tables(s)
            .flatten()
            .filter(|e| e.lock.load(Ordering::Relaxed) != 0)
            .count();
    }
    let cap = (used * 2).next_power_of_two().max(16);
    let Some(mut table) = Scratch::new(cap) else {
        return;
    };
    let t = table.slice();
    let mut records = 0usize;
    for cell in &SHARDS[..shards] {
        // SAFETY: as above.
        let Some(s) = (unsafe { cell.load(Ordering::Acquire).as_ref() }) else {
            continue;
        };
        for e in tables(s).flatten() {
            // Acquire pairs with the Release store that published the entry.
            let lock = e.lock.load(Ordering::Acquire);
            if lock == 0 {
                continue;
            }
            let site = e.site.load(Ordering::Relaxed);
            let h = (lock ^ site.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            // The top bits: the low bits of a product of aligned addresses barely vary, which made
            // every probe sequence long (a dump quadratic in its records).
            let mut i = h >> (64 - cap.trailing_zeros());
            let mut placed = false;
            for _ in 0..cap {
                let r = &mut t[i];
                if r.lock == 0 {
                    if records >= used {
                        break;
                    }
                    r.lock = lock;
                    r.site = site;
                    r.info = e.info.load(Ordering::Relaxed);
                    records += 1;
                }
                if r.lock == lock && r.site == site {
                    for k in 0..c::N {
                        let v = e.c[k].load(Ordering::Relaxed);
                        if c::MAXES.contains(&k) {
                            r.c[k] = r.c[k].max(v);
                        } else if c::MINS.contains(&k) {
                            if v != 0 && (r.c[k] == 0 || v < r.c[k]) {
                                r.c[k] = v;
                            }
                        } else {
                            r.c[k] = r.c[k].wrapping_add(v);
                        }
                    }
                    placed = true;
                    break;
                }
                i = (i + 1) & (cap - 1);
            }
            if !placed {
                dropped += 1;
            }
        }
    }
    // Compact, then sort by total wait (exclusive + read + condvar), the table's order.
    let mut k = 0;
    for i in 0..cap {
        if t[i].lock != 0 {
            t.swap(k, i);
            k += 1;
        }
    }
    let recs = &mut t[..k];
    let locks = count_locks(recs);
    let wait = |r: &Rec| r.c[c::WAIT_TOTAL] + r.c[c::RD_WAIT_TOTAL];
    recs.sort_unstable_by(|a, b| wait(b).cmp(&wait(a)).then(b.c[c::ACQ].cmp(&a.c[c::ACQ])));
    let scale = ns_per_tick();
    // Into a temporary file beside ours, renamed over it once complete: a process that ends in the
    // middle of a dump (another thread exits during a SIGUSR1 snapshot) leaves the last complete
    // table, never a truncated one. Where no file can be created any more (privileges dropped),
    // the table is rewritten in place.
    let dump = |to: c_int| {
        let mut w = Writer::new(to);
        write_json(
            &mut w,
            reason,
            recs,
            scale,
            (dropped, olookups, oprobes),
            locks,
        );
        w.finish();
        w.ok
    };
    if let Some((tmp_fd, tmp_name)) = open_temp(fd) {
        // SAFETY: NUL-terminated names (ours).
        let renamed = dump(tmp_fd)
            && unsafe { libc::rename(tmp_name.as_ptr().cast(), OUT_NAME.get().as_ptr().cast()) }
                == 0;
        if renamed {
            adopt(tmp_fd);
            // SAFETY: our previous descriptor, whose file the rename replaced.
            unsafe { libc::close(fd) };
            return;
        }
        // SAFETY: our temporary file and descriptor.
        unsafe {
            libc::unlink(tmp_name.as_ptr().cast());
            libc::close(tmp_fd);
        }
    }
    dump(fd);
}

/// Creates `<our file>.tmp` for a dump: its descriptor and NUL-terminated name. Only when the name
/// is absolute and names, itself (no symbolic link), the regular file `fd` has open: anything else
/// (`/dev/null`, a pipe, a link the user made) is rewritten in place, never replaced.
pub(super) fn open_temp(fd: c_int) -> Option<(c_int, [u8; PATH_MAX + 40])> {
    // SAFETY: the name is written only by `open_output`, which runs in a dump (one at a time:
    // `DUMPING`) or before any.
    let name = unsafe { &*OUT_NAME.get() };
    let len = name.iter().position(|&b| b == 0)?;
    // A relative name would resolve against the program's current directory, which it may have
    // changed since the file was opened: such a file is rewritten in place.
    if name.first() != Some(&b'/') {
        return None;
    }
    // SAFETY: all-zero is a valid `struct stat` (integers only); valid pointers.
    let (mut st, mut lst): (libc::stat, libc::stat) = unsafe { core::mem::zeroed() };
    // SAFETY: our descriptor, a NUL-terminated name, valid out-pointers.
    let same_regular = unsafe {
        libc::fstat(fd, &mut st) == 0 && libc::lstat(name.as_ptr().cast(), &mut lst) == 0
    } && st.st_mode & libc::S_IFMT == libc::S_IFREG
        && lst.st_mode & libc::S_IFMT == libc::S_IFREG
        && (st.st_dev, st.st_ino) == (lst.st_dev, lst.st_ino);
    if !same_regular {
        return None;
    }
    let mut tmp = [0u8; PATH_MAX + 40];
    let mut n = 0;
    put(&mut tmp, &mut n, &name[..len]);
    put(&mut tmp, &mut n, b".tmp");
    if n >= tmp.len() {
        return None;
    }
    tmp[n] = 0;
    // SAFETY: a NUL-terminated name.
    let fd = unsafe {
        libc::open(
            tmp.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o644,
        )
    };
    (fd >= 0).then_some((fd, tmp))
}

/// Makes `fd` (now at our file's name) the descriptor of our file.
pub(super) fn adopt(fd: c_int) {
    // SAFETY: all-zero is a valid `struct stat` (integers only).
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: our descriptor and a valid out-pointer.
    unsafe { libc::fstat(fd, &mut st) };
    OUT_DEV.store(st.st_dev, Ordering::Relaxed);
    OUT_INO.store(st.st_ino, Ordering::Relaxed);
    OUT_FD.store(fd, Ordering::Relaxed);
}

/// A buffered writer to a descriptor, from the start of the file; errors end the writing quietly.
pub(super) struct Writer {
    pub(super) fd: c_int,
    pub(super) buf: [u8; 8192],
    pub(super) n: usize,
    pub(super) off: i64,
    /// Every write so far succeeded.
    pub(super) ok: bool,
}

impl Writer {
    pub(super) fn new(fd: c_int) -> Writer {
        // SAFETY: our descriptor: the file is rewritten from the start.
        let ok = unsafe { libc::ftruncate(fd, 0) } == 0;
        Writer {
            fd,
            buf: [0; 8192],
            n: 0,
            off: 0,
            ok,
        }
    }
    pub(super) fn flush(&mut self) {
        let mut done = 0;
        while self.ok && done < self.n {
            // SAFETY: a valid buffer range; our descriptor.
            let r = unsafe {
                libc::pwrite(
                    self.fd,
                    self.buf[done..self.n].as_ptr().cast(),
                    self.n - done,
                    self.off,
                )
            };
            if r <= 0 {
                self.ok = false;
                break;
            }
            done += r as usize;
            self.off += r as i64;
        }
        self.n = 0;
    }
    pub(super) fn s(&mut self, b: &[u8]) -> &mut Self {
        for chunk in b.chunks(4096) {
            if self.n + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.n..self.n + chunk.len()].copy_from_slice(chunk);
            self.n += chunk.len();
        }
        self
    }
    pub(super) fn u(&mut self, v: u64) -> &mut Self {
        let mut tmp = [0u8; 20];
        let mut n = 0;
        put_u64(&mut tmp, &mut n, v);
        self.s(&tmp[..n])
    }
    pub(super) fn hex(&mut self, v: usize) -> &mut Self {
        let mut tmp = [0u8; 18];
        tmp[0] = b'0';
        tmp[1] = b'x';
        let mut n = 2;
        let digits = (usize::BITS - v.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            tmp[n] = b"0123456789abcdef"[(v >> (i * 4)) & 15];
            n += 1;
        }
        self.s(&tmp[..n])
    }
    /// A JSON string (escaped).
    pub(super) fn q(&mut self, b: &[u8]) -> &mut Self {
        self.s(b"\"");
        for &ch in b {
            match ch {
                b'"' => self.s(b"\\\""),
                b'\\' => self.s(b"\\\\"),
                0..=0x1f | 0x7f..=0xff => {
                    let hx = b"0123456789abcdef";
                    self.s(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        hx[(ch >> 4) as usize],
                        hx[(ch & 15) as usize],
                    ])
                }
                _ => self.s(&[ch]),
            };
        }
        self.s(b"\"")
    }
    /// `,"name":`, a field's key after the first.
    pub(super) fn key(&mut self, name: &str) -> &mut Self {
        self.s(b",\"").s(name.as_bytes()).s(b"\":")
    }
    /// `{"name":`, an object's first key.
    pub(super) fn first_key(&mut self, name: &str) -> &mut Self {
        self.s(b"{\"").s(name.as_bytes()).s(b"\":")
    }
    pub(super) fn finish(&mut self) {
        self.flush();
    }
}

/// `dladdr` of an address: (object path, object base, symbol name, symbol address, symbol size if
/// known).
/// A symbol: its name, address and size (0 if unknown).
pub(crate) type Sym = (&'static [u8], usize, usize);

pub(crate) fn symbolise(addr: usize) -> Option<(&'static [u8], usize, Option<Sym>)> {
    if addr == 0 {
        return None;
    }
    // SAFETY: all-zero is a valid `Dl_info` (null pointers).
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let mut sym: *const libc::Elf64_Sym = core::ptr::null();
    // SAFETY: valid out-pointers; RTLD_DL_SYMENT (2) stores the symbol's table entry.
    let ok = unsafe {
        dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&raw mut sym).cast(),
            2,
        )
    };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's strings live as long as the object stays loaded (a dump runs before unload).
    let mut fname = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    if !fname.starts_with(b"/") {
        // The main program is named as it was started (`./t`, or empty): name it by its path.
        fname = exe_path();
    }
    let s = if info.dli_sname.is_null() {
        None
    } else {
        // SAFETY: as above.
        let name = unsafe { core::ffi::CStr::from_ptr(info.dli_sname) }.to_bytes();
        // SAFETY: the symbol entry dladdr1 gave, if any.
        let size = unsafe { sym.as_ref() }.map_or(0, |s| s.st_size as usize);
        Some((name, info.dli_saddr as usize, size))
    };
    Some((fname, info.dli_fbase as usize, s))
}

unsafe extern "C" {
    pub(super) fn dladdr1(
        addr: *const libc::c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut libc::c_void,
        flags: c_int,
    ) -> c_int;
}

/// `/proc/self/exe`, read once per dump (a dump at a time).
pub(super) fn exe_path() -> &'static [u8] {
    static EXE: Buf<1024> = Buf::new();
    static LEN: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: written only here, during a dump (one at a time: `DUMPING`).
    let buf = unsafe { EXE.get() };
    let mut n = LEN.load(Ordering::Relaxed);
    if n == 0 {
        // SAFETY: a NUL-terminated path and a valid buffer.
        let r = unsafe {
            libc::readlink(
                c"/proc/self/exe".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        n = r.max(0) as usize;
        LEN.store(n, Ordering::Relaxed);
    }
    &buf[..n]
}

pub(super) fn basename(p: &[u8]) -> &[u8] {
    p.rsplit(|&b| b == b'/').next().unwrap_or(p)
}

/// Distinct locks (condvars aside) among `recs`, and how many of them were contended: sorted by
/// lock first, so one pass counts them.
pub(super) fn count_locks(recs: &mut [Rec]) -> (u64, u64) {
    recs.sort_unstable_by_key(|r| r.lock);
    let (mut used, mut contended) = (0u64, 0u64);
    let mut i = 0;
    while i < recs.len() {
        let lock = recs[i].lock;
        let (mut lock_seen, mut lock_contended) = (false, false);
        while i < recs.len() && recs[i].lock == lock {
            let r = &recs[i];
            if r.info & 15 != 3 {
                lock_seen = true;
                lock_contended |= r.c[c::CONT] + r.c[c::RD_CONT] > 0;
            }
            i += 1;
        }
        used += lock_seen as u64;
        contended += lock_contended as u64;
    }
    (used, contended)
}

pub(super) fn write_json(
    w: &mut Writer,
    reason: &[u8],
    recs: &[Rec],
    scale: f64,
    (dropped, olookups, oprobes): (u64, u64, u64),
    (locks_used, locks_contended): (u64, u64),
) {
    let ns = |t: u64| (t as f64 * scale).round() as u64;
    let exe = exe_path();
    // SAFETY: no arguments.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    w.first_key(schema::PID)
        .u(pid as u64)
        .key(schema::PPID)
        .u(ppid as u64)
        .key(schema::EXE)
        .q(exe);
    w.key(schema::REASON).q(reason);
    for (key, names, code) in [
        (
            schema::MUTEX,
            &config::MUTEX_STAT_NAMES[..],
            config::mutex() as u8,
        ),
        (
            schema::RWLOCK,
            &config::RWLOCK_STAT_NAMES[..],
            config::rwlock() as u8,
        ),
        (schema::SPIN, &config::SPIN_NAMES[..], config::spin() as u8),
    ] {
        w.key(key).q(config::name_of(names, code).as_bytes());
    }
    w.key(schema::NS_PER_TICK);
    // Six decimals, without float formatting machinery that might allocate.
    let micro = (scale * 1e6).round() as u64;
    w.u(micro / 1_000_000).s(b".");
    let frac = micro % 1_000_000;
    let mut tmp = [b'0'; 6];
    let mut f = frac;
    for i in (0..6).rev() {
        tmp[i] = b'0' + (f % 10) as u8;
        f /= 10;
    }
    w.s(&tmp);
    w.key(schema::LOCKS_USED)
        .u(locks_used)
        .key(schema::LOCKS_CONTENDED)
        .u(locks_contended);
    // Shards are reused when their thread exits, so their count is the most threads that had
    // taken a lock and were alive at once (the advice's thread count).
    w.key(schema::THREADS_PEAK)
        .u(SHARD_COUNT.load(Ordering::Relaxed).min(MAX_SHARDS) as u64);
    w.key(schema::DROPPED)
        .u(dropped)
        .key(schema::UNCOUNTED)
        .u(UNCOUNTED.load(Ordering::Relaxed));
    w.key(schema::OVERFLOW_LOOKUPS)
        .u(olookups)
        .key(schema::OVERFLOW_PROBES)
        .u(oprobes);
    w.key(schema::RECORDS).s(b"[");
    for (i, r) in recs.iter().enumerate() {
        if i > 0 {
            w.s(b",");
        }
        let (kind, algo) = describe(r.info);
        w.s(b"\n")
            .first_key(schema::LOCK)
            .s(b"\"")
            .hex(r.lock)
            .s(b"\"");
        w.key(schema::LOCK_NAME);
        match symbolise(r.lock) {
            Some((_, _, Some((name, at, size)))) if r.lock >= at && r.lock < at + size.max(1) => {
                w.s(b"\"");
                w.s(&json_safe(name));
                if r.lock > at {
                    w.s(b"+").hex(r.lock - at);
                }
                w.s(b"\"");
            }
            _ => {
                w.s(b"null");
            }
        }
        w.key(schema::KIND)
            .q(kind.as_bytes())
            .key(schema::ALGORITHM)
            .q(algo.as_bytes());
        w.key(schema::SITE_ADDR).s(b"\"").hex(r.site).s(b"\"");
        w.key(schema::SITE);
        match symbolise(r.site) {
            Some((obj, base, sym)) => {
                w.s(b"\"");
                match sym {
                    Some((name, at, _)) => {
                        w.s(&json_safe(name)).s(b"+").hex(r.site - at);
                        w.s(b" (").s(&json_safe(basename(obj))).s(b")\"");
                    }
                    None => {
                        w.s(&json_safe(basename(obj)))
                            .s(b"+")
                            .hex(r.site - base)
                            .s(b"\"");
                    }
                }
                w.key(schema::OBJECT)
                    .q(obj)
                    .key(schema::OBJECT_OFFSET)
                    .u((r.site - base) as u64);
            }
            None => {
                w.s(b"null")
                    .key(schema::OBJECT)
                    .s(b"null")
                    .key(schema::OBJECT_OFFSET)
                    .s(b"null");
            }
        }
        for (name, k) in schema::RECORD_COUNTERS.into_iter().zip(c::WRITTEN) {
            let mut v = r.c[k];
            if c::MINS.contains(&k) {
                v = v.saturating_sub(1);
            }
            if c::TIMES.contains(&k) {
                v = ns(v);
            }
            w.key(name).u(v);
        }
        w.s(b"}");
    }
    w.s(b"\n]}\n");
}

/// A name's bytes with anything JSON would need escaped replaced by `?` (symbol names never have
/// such characters; this keeps the writer simple where names are spliced into a string).
pub(super) fn json_safe(b: &[u8]) -> JsonSafe<'_> {
    JsonSafe(b)
}

pub(super) struct JsonSafe<'a>(&'a [u8]);

impl core::ops::Deref for JsonSafe<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self
            .0
            .iter()
            .all(|&c| (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\')
        {
            self.0
        } else {
            b"?"
        }
    }
}
