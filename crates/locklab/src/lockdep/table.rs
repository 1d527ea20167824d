//! The validator's memory: zeroed, fixed-size arrays from the operating system (never the program's
//! allocator: the preload library's validator runs inside `pthread_mutex_lock`, which a program's
//! own `malloc` may call), and an insert-only open-addressed hash table over them.
//!
//! # The table
//! Slots of `(key: AtomicU64, val: AtomicU64)`; key 0 is an empty slot (callers never use key 0).
//! Linear probing over a power-of-two capacity. Insertion claims an empty slot with a CAS on its key
//! and then publishes the value with a Release store; a lookup that finds the key with value 0 (the
//! claimer between its two stores) waits for the value. Nothing is ever removed (a caller that needs
//! to forget marks the value), so a probe sequence never breaks and lookups take no lock and write
//! nothing.

use core::sync::atomic::{AtomicU64, Ordering};

/// `n` zeroed `T`s that live for the rest of the process, or `None` if the system has no memory
/// for them. `T` must be valid all-zero (atomics and integers only).
pub(super) fn zeroed_array<T>(n: usize) -> Option<&'static [T]> {
    let bytes = n.checked_mul(core::mem::size_of::<T>())?;
    #[cfg(all(unix, not(miri)))]
    let p = {
        // The tables are large and sparse: only the pages touched are ever backed (Linux also
        // reserves no swap for them).
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let noreserve = libc::MAP_NORESERVE;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let noreserve = 0;
        // SAFETY: an anonymous private mapping; no pointer is passed in.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | noreserve,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        p.cast::<T>()
    };
    #[cfg(not(all(unix, not(miri))))]
    let p = {
        let layout = std::alloc::Layout::from_size_align(bytes, 64).ok()?;
        // SAFETY: a non-zero size (every caller asks for at least one element).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return None;
        }
        p.cast::<T>()
    };
    // SAFETY: `bytes` zeroed, writable, suitably aligned bytes that are never freed; all-zero is a
    // valid `T` (the callers' types are atomics and integers).
    Some(unsafe { core::slice::from_raw_parts(p, n) })
}

/// Gives back an array from [`zeroed_array`] (tests only: the validator's arrays live for ever).
#[cfg(test)]
pub(super) fn free_array<T>(a: &'static [T]) {
    let bytes = core::mem::size_of_val(a);
    #[cfg(all(unix, not(miri)))]
    // SAFETY: a mapping of `bytes` made by `zeroed_array`, no longer used (the caller's contract).
    unsafe {
        libc::munmap(a.as_ptr() as *mut libc::c_void, bytes);
    }
    #[cfg(not(all(unix, not(miri))))]
    // SAFETY: allocated by `zeroed_array` with this layout, no longer used.
    unsafe {
        std::alloc::dealloc(
            a.as_ptr() as *mut u8,
            std::alloc::Layout::from_size_align(bytes, 64).unwrap(),
        );
    }
}

/// One slot of a [`Table`].
pub(super) struct Slot {
    key: AtomicU64,
    val: AtomicU64,
}

/// An insert-only hash map from non-zero `u64` keys to non-zero `u64` values (see the module docs).
pub(super) struct Table {
    slots: &'static [Slot],
}

/// How far a probe goes before the table counts as full.
const MAX_PROBE: usize = 4096;

/// A 64-bit mix (the finaliser of MurmurHash3) so that aligned addresses spread over the slots.
#[inline]
pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl Table {
    /// A table of `cap` slots (a power of two), or `None` without memory.
    pub(super) fn new(cap: usize) -> Option<Self> {
        debug_assert!(cap.is_power_of_two());
        Some(Self {
            slots: zeroed_array(cap)?,
        })
    }

    /// The value of `key`, if present.
    #[inline]
    pub(super) fn get(&self, key: u64) -> Option<u64> {
        debug_assert_ne!(key, 0);
        let mask = self.slots.len() - 1;
        let mut i = mix(key) as usize & mask;
        for _ in 0..MAX_PROBE.min(self.slots.len()) {
            let s = &self.slots[i];
            // Acquire pairs with the Release store of the value (below): a found key's value is
            // published, or 0 for an instant.
            let k = s.key.load(Ordering::Acquire);
            if k == key {
                return Some(self.value(s)).filter(|&v| v != 0);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Waits out a claimer that has not yet stored its value (a few instructions away); 0 if it
    /// never does (in a child of `fork`, a claimer that was another thread of the parent).
    #[inline]
    fn value(&self, s: &Slot) -> u64 {
        for _ in 0..1 << 20 {
            // Acquire pairs with the claimer's Release store: what the value names was written first.
            let v = s.val.load(Ordering::Acquire);
            if v != 0 {
                return v;
            }
            core::hint::spin_loop();
        }
        0
    }

    /// The value of `key`, inserting `make()` if absent: `(value, inserted)`. `None` if the table is
    /// full, or the key's claimer never published its value. `make` runs only for the winner of a
    /// race to insert, before the value is published.
    pub(super) fn get_or_insert(
        &self,
        key: u64,
        make: impl FnOnce() -> u64,
    ) -> Option<(u64, bool)> {
        debug_assert_ne!(key, 0);
        let mask = self.slots.len() - 1;
        let mut i = mix(key) as usize & mask;
        for _ in 0..MAX_PROBE.min(self.slots.len()) {
            let s = &self.slots[i];
            // Acquire as in `get`.
            let k = s.key.load(Ordering::Acquire);
            if k == key {
                return Some((self.value(s), false)).filter(|&(v, _)| v != 0);
            }
            if k == 0 {
                // AcqRel: Acquire as the load above when it fails; the claim itself publishes nothing
                // (the value's Release store does).
                match s
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        let v = make();
                        debug_assert_ne!(v, 0);
                        // Release pairs with the Acquire loads of `value`: the record `v` names is
                        // complete before anyone can see `v`.
                        s.val.store(v, Ordering::Release);
                        return Some((v, true));
                    }
                    Err(other) if other == key => {
                        return Some((self.value(s), false)).filter(|&(v, _)| v != 0);
                    }
                    Err(_) => {}
                }
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Calls `f` with every key present and its value (a scan of the whole table: rare uses only;
    /// on Linux only its pages in memory are read: a page never written holds no key).
    pub(super) fn for_each(&self, mut f: impl FnMut(u64, u64)) {
        #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
        {
            // SAFETY: no pointer is passed.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let per_page = usize::try_from(page).unwrap_or(0) / core::mem::size_of::<Slot>();
            // The slots are an mmap'd mapping (`zeroed_array`): page-aligned.
            if per_page > 0 && self.slots.len().is_multiple_of(per_page) {
                let mut resident = [0u8; 4096];
                for chunk in self.slots.chunks(per_page * resident.len()) {
                    let pages = chunk.len() / per_page;
                    // SAFETY: `chunk` is page-aligned mapped memory of `pages` pages, and
                    // `resident` has room for one byte per page.
                    let r = unsafe {
                        libc::mincore(
                            chunk.as_ptr() as *mut libc::c_void,
                            pages * page as usize,
                            resident.as_mut_ptr().cast(),
                        )
                    };
                    for (i, slots) in chunk.chunks(per_page).enumerate() {
                        if r != 0 || resident[i] & 1 != 0 {
                            Self::scan(slots, &mut f);
                        }
                    }
                }
                return;
            }
        }
        Self::scan(self.slots, &mut f);
    }

    fn scan(slots: &[Slot], f: &mut impl FnMut(u64, u64)) {
        for s in slots {
            // Acquire as in `get`.
            let k = s.key.load(Ordering::Acquire);
            if k != 0 {
                // Acquire pairs with the Release store of the value.
                let v = s.val.load(Ordering::Acquire);
                if v != 0 {
                    f(k, v);
                }
            }
        }
    }

    /// Replaces the value of a present `key` if it is `old`: `true` if it was replaced.
    pub(super) fn replace(&self, key: u64, old: u64, new: u64) -> bool {
        debug_assert!(key != 0 && new != 0);
        let mask = self.slots.len() - 1;
        let mut i = mix(key) as usize & mask;
        for _ in 0..MAX_PROBE.min(self.slots.len()) {
            let s = &self.slots[i];
            // Acquire as in `get`.
            let k = s.key.load(Ordering::Acquire);
            if k == key {
                // AcqRel: Release as in `get_or_insert` (the new value's record is complete);
                // Acquire as in `get` when it fails.
                return s
                    .val
                    .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            }
            if k == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
        false
    }

    /// Replaces the value of a present `key` (the caller serialises replacements of one key).
    pub(super) fn set(&self, key: u64, val: u64) -> bool {
        debug_assert!(key != 0 && val != 0);
        let mask = self.slots.len() - 1;
        let mut i = mix(key) as usize & mask;
        for _ in 0..MAX_PROBE.min(self.slots.len()) {
            let s = &self.slots[i];
            // Acquire as in `get`.
            let k = s.key.load(Ordering::Acquire);
            if k == key {
                // Release as in `get_or_insert`.
                s.val.store(val, Ordering::Release);
                return true;
            }
            if k == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
        false
    }
}

#[cfg(test)]
impl Drop for Table {
    fn drop(&mut self) {
        free_array(self.slots);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_set_and_full() {
        let t = Table::new(8).unwrap();
        assert_eq!(t.get(5), None);
        assert_eq!(t.get_or_insert(5, || 50), Some((50, true)));
        assert_eq!(t.get_or_insert(5, || 51), Some((50, false)));
        assert_eq!(t.get(5), Some(50));
        assert!(t.set(5, 52));
        assert_eq!(t.get(5), Some(52));
        assert!(!t.set(6, 1));
        for k in 10..17 {
            assert!(t.get_or_insert(k, || k).is_some());
        }
        // Eight slots, eight keys: the ninth has nowhere to go.
        assert_eq!(t.get_or_insert(99, || 1), None);
        assert_eq!(t.get(99), None);
    }

    #[test]
    fn for_each_sees_every_key_in_a_large_sparse_table() {
        // Many pages, few written: the scan reads only those in memory, and misses no key.
        let t = Table::new(1 << 16).unwrap();
        let keys = [3u64, 77, 1 << 40, 123_456_789];
        for &k in &keys {
            t.get_or_insert(k, || k + 1).unwrap();
        }
        let mut seen = Vec::new();
        t.for_each(|k, v| seen.push((k, v)));
        seen.sort_unstable();
        let mut want: Vec<_> = keys.iter().map(|&k| (k, k + 1)).collect();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn racing_inserts_agree() {
        let t = Table::new(1024).unwrap();
        let n_keys = if cfg!(miri) { 20 } else { 200 };
        let rs: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|n| {
                    let t = &t;
                    s.spawn(move || {
                        (1..n_keys)
                            .map(|k| t.get_or_insert(k, || k * 10 + n).unwrap().0)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &rs[1..] {
            assert_eq!(r, &rs[0], "every thread sees the winner's value");
        }
        for (i, v) in rs[0].iter().enumerate() {
            assert_eq!(v / 10, i as u64 + 1);
        }
    }
}
