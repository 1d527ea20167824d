//! Sequence locks: [`SeqCount`] (a bare sequence counter) and [`SeqLock<T>`] (a counter, a writer
//! spinlock and the data).
//!
//! # Algorithm (after the kernel's `include/linux/seqlock.h`)
//! Writer (serialised by a spinlock): sequence += 1 (odd: a write is in progress); update the data;
//! sequence += 1 (even). Reader: read the sequence (waiting while it is odd), read the data, read the
//! sequence again; if it changed, a writer overlapped: retry. Readers never write shared memory, so any
//! number of them run in parallel without moving a cache line; writers never wait for readers; readers
//! can starve under a constant stream of writes.
//!
//! # Soundness under the Rust memory model
//! A racing plain read is a data race (UB), and `read_volatile` does not fix that. So the protected data
//! is only ever accessed through atomics, Relaxed: in 8-byte words when `T`'s size and alignment allow,
//! else in bytes (always the same width for a given `T`, so no mixed-size accesses). A reader assembles
//! the words into a `MaybeUninit<T>` and turns it into a `T` only after the sequence check has proved
//! that no writer overlapped: a torn image, which could be an invalid `T`, is never materialised.
//! `T: NoUninit` (from `bytemuck`) guarantees `T` has no padding, so writers never read uninitialised bytes.
//!
//! # Memory orderings (kernel-primitives.md section 6)
//! ```text
//! writer                                 reader
//! seq.store(odd, Relaxed)                s1 = seq.load(Acquire)      (pairs with the even Release)
//! fence(Release)  ─┐                     data.load(Relaxed) ...
//! data.store(Relaxed) ...  └─pairs with─ fence(Acquire)
//! seq.store(even, Release)               s2 = seq.load(Relaxed); valid iff s1 == s2 and s1 even
//! ```
//! If a reader's data load sees a store made after the writer's Release fence, its Acquire fence
//! synchronises with that fence, so its second sequence load sees at least the odd value: it retries.
//! If its first load saw the even value of a finished write (Acquire/Release), it sees all that write's data.

use crate::primitive::{AtomicU64, Ordering, SpinWait, fence};
#[cfg(not(loom))]
use core::cell::UnsafeCell;
#[cfg(not(loom))]
use core::mem::{MaybeUninit, align_of, size_of};
// The data words of `SeqLock` are plain std atomics made over its bytes (`from_ptr`); `SeqLock` is not
// built under loom (its protocol is `SeqCount`'s, which the loom model checks with loom data atomics).
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU8 as DataU8, AtomicU64 as DataU64};

/// A bare sequence counter, for callers that protect their own (atomically accessed) data.
///
/// The sequence is 64-bit: a reader stalled while the counter comes back to the value it started with
/// would accept a torn read, and with 32 bits that took 2^31 writes (seconds); 2^63 take centuries
///.
///
/// ```
/// use locklab::SeqCount;
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// let (seq, x, y) = (SeqCount::new(), AtomicU64::new(0), AtomicU64::new(0));
/// unsafe { seq.write_begin() }; // writers are serialised by the caller
/// x.store(1, Relaxed);
/// y.store(1, Relaxed);
/// unsafe { seq.write_end() };
/// let (a, b) = loop {
///     let s = seq.read_begin();
///     let v = (x.load(Relaxed), y.load(Relaxed));
///     if !seq.read_retry(s) {
///         break v;
///     }
/// };
/// assert_eq!(a, b);
/// ```
pub struct SeqCount {
    seq: AtomicU64,
}

impl SeqCount {
    crate::primitive::const_unless_loom! {
        /// A counter at 0 (even: no write in progress).
        ///
        /// ```
        /// let seq = locklab::SeqCount::new();
        /// assert_eq!(seq.sequence(), 0);
        /// ```
        pub fn new() -> Self {
            SeqCount {
                seq: AtomicU64::new(0),
            }
        }
    }

    /// Starts a read section: waits out a write in progress and returns the (even) sequence.
    ///
    /// ```
    /// let seq = locklab::SeqCount::new();
    /// let s = seq.read_begin();
    /// assert_eq!(s % 2, 0); // never inside a write
    /// assert!(!seq.read_retry(s));
    /// ```
    #[inline]
    pub fn read_begin(&self) -> u64 {
        // Acquire pairs with the Release store in `write_end`.
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 { s } else { self.wait_even() }
    }

    /// Waits out a write in progress, yielding the CPU after a while: the writer may be preempted and
    /// need this very CPU to finish.
    #[cold]
    fn wait_even(&self) -> u64 {
        let mut wait = SpinWait::new();
        loop {
            // Acquire pairs with the Release store in `write_end`.
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                return s;
            }
            wait.wait();
        }
    }

    /// Ends a read section started at `start`: `true` if a writer overlapped and the read must be retried.
    ///
    /// ```
    /// let seq = locklab::SeqCount::new();
    /// let s = seq.read_begin();
    /// // SAFETY: the only writer (nothing else writes `seq`).
    /// unsafe { seq.write_begin() };
    /// // SAFETY: pairs with the `write_begin` above.
    /// unsafe { seq.write_end() };
    /// assert!(seq.read_retry(s)); // a write overlapped: read again
    /// assert!(!seq.read_retry(seq.read_begin()));
    /// ```
    #[inline]
    pub fn read_retry(&self, start: u64) -> bool {
        // Acquire fence: pairs with the writer's Release fence in `write_begin` (see the module docs).
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// Starts a write section (sequence becomes odd).
    ///
    /// # Safety
    /// Writers are serialised by the caller (no two write sections overlap).
    ///
    /// ```
    /// let seq = locklab::SeqCount::new();
    /// // SAFETY: the only writer (nothing else writes `seq`).
    /// unsafe { seq.write_begin() };
    /// assert_eq!(seq.sequence(), 1); // odd: a write in progress
    /// // SAFETY: pairs with the `write_begin` above.
    /// unsafe { seq.write_end() };
    /// ```
    #[inline]
    pub unsafe fn write_begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert_eq!(s & 1, 0, "nested or concurrent write sections");
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        // Release fence: orders the odd store before the data stores that follow (pairs with the
        // reader's Acquire fence in `read_retry`).
        fence(Ordering::Release);
    }

    /// Ends a write section (sequence becomes even again).
    ///
    /// # Safety
    /// Pairs with the caller's `write_begin`.
    ///
    /// ```
    /// let seq = locklab::SeqCount::new();
    /// // SAFETY: the only writer (nothing else writes `seq`).
    /// unsafe { seq.write_begin() };
    /// // SAFETY: pairs with the `write_begin` above.
    /// unsafe { seq.write_end() };
    /// assert_eq!(seq.sequence(), 2); // even again
    /// ```
    #[inline]
    pub unsafe fn write_end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert_eq!(s & 1, 1, "write_end without write_begin");
        // Release pairs with the reader's Acquire load in `read_begin`: publishes the data stores.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
    }

    /// The raw sequence (a snapshot).
    ///
    /// ```
    /// let seq = locklab::SeqCount::new();
    /// assert_eq!(seq.sequence(), 0);
    /// // SAFETY: the only writer (nothing else writes `seq`).
    /// unsafe { seq.write_begin() };
    /// // SAFETY: pairs with the `write_begin` above.
    /// unsafe { seq.write_end() };
    /// assert_eq!(seq.sequence(), 2);
    /// ```
    pub fn sequence(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }
}

#[cfg(not(loom))]
impl Default for SeqCount {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
/// A sequence lock protecting a `T`. See the [module documentation](self). Readers copy the value and
/// never write shared memory; writers never wait for readers. `T: NoUninit` (no padding) is required,
/// since readers copy bytes that a writer may be changing.
///
/// ```
/// use locklab::SeqLock;
/// static POS: SeqLock<[f64; 3]> = SeqLock::new([0.0; 3]);
/// POS.set([1.0, 2.0, 3.0]);
/// {
///     let mut w = POS.write(); // a copy, stored back when the guard drops
///     w[0] += 1.0;
/// }
/// assert_eq!(POS.read(), [2.0, 2.0, 3.0]);
/// ```
pub struct SeqLock<T: bytemuck::NoUninit> {
    seq: SeqCount,
    writer: crate::spin::qspinlock::RawQueuedSpinLock,
    data: UnsafeCell<MaybeUninit<T>>,
    /// The writer side's lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

#[cfg(not(loom))]
// SAFETY: the data is only accessed through atomics (see the module docs), writers are serialised by
// `writer`, and readers get copies of `T`, so sharing needs `T: Send` (values move between threads).
unsafe impl<T: bytemuck::NoUninit + Send> Sync for SeqLock<T> {}
#[cfg(not(loom))]
// SAFETY: owning a SeqLock owns a `T`.
unsafe impl<T: bytemuck::NoUninit + Send> Send for SeqLock<T> {}

#[cfg(not(loom))]
impl<T: bytemuck::NoUninit> SeqLock<T> {
    /// Whether `T` is accessed in 8-byte words (else in bytes).
    const WORDS: bool = size_of::<T>().is_multiple_of(8) && align_of::<T>() >= 8;

    /// A seqlock holding `value`.
    ///
    /// ```
    /// static P: locklab::SeqLock<[u32; 2]> = locklab::SeqLock::new([1, 2]);
    /// assert_eq!(P.read(), [1, 2]);
    /// ```
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        SeqLock {
            seq: SeqCount::new(),
            writer: crate::spin::qspinlock::RawQueuedSpinLock::new(),
            data: UnsafeCell::new(MaybeUninit::new(value)),
            dep: crate::dep::Dep::new(),
        }
    }

    /// Copies the data out, retrying while writers overlap.
    ///
    /// ```
    /// let l = std::sync::Arc::new(locklab::SeqLock::new([0u64; 2]));
    /// let w = l.clone();
    /// let writer = std::thread::spawn(move || {
    ///     for i in 1..=100 {
    ///         w.set([i, i]);
    ///     }
    /// });
    /// for _ in 0..100 {
    ///     let [a, b] = l.read();
    ///     assert_eq!(a, b); // never a torn copy
    /// }
    /// writer.join().unwrap();
    /// assert_eq!(l.read(), [100, 100]);
    /// ```
    #[inline]
    pub fn read(&self) -> T {
        loop {
            let start = self.seq.read_begin();
            let image = self.load_image();
            if !self.seq.read_retry(start) {
                // SAFETY: no writer overlapped the loads (the sequence check), so the image is exactly the
                // bytes of a `T` that a writer stored whole.
                return unsafe { image.assume_init() };
            }
        }
    }

    /// Starts a write: takes the writer lock, makes the sequence odd, and returns a guard holding a copy
    /// of the current value; changes to it are stored when the guard drops.
    ///
    /// ```
    /// let l = locklab::SeqLock::new(1u32);
    /// {
    ///     let mut w = l.write();
    ///     assert_eq!(l.sequence() % 2, 1); // readers now retry
    ///     *w += 1;
    /// } // stored here
    /// assert_eq!(l.read(), 2);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn write(&self) -> SeqLockWriteGuard<'_, T> {
        // Lockdep: the writer side is a spinlock (readers take nothing).
        self.dep.lock(
            self as *const Self as *const (),
            crate::dep::K::Spin,
            crate::dep::M::Write,
        );
        self.writer.lock();
        // SAFETY: writers are serialised by `writer`, held until the guard drops.
        unsafe { self.seq.write_begin() };
        // SAFETY: we are the only writer, so the image is a whole `T` (the last writer stored it whole).
        let value = unsafe { self.load_image().assume_init() };
        SeqLockWriteGuard { lock: self, value }
    }

    /// Replaces the value.
    ///
    /// ```
    /// let l = locklab::SeqLock::new(0i64);
    /// l.set(-3);
    /// assert_eq!(l.read(), -3);
    /// ```
    #[cfg_attr(feature = "lockdep", track_caller)]
    pub fn set(&self, value: T) {
        *self.write() = value;
    }

    /// The raw sequence (even when no write is in progress).
    ///
    /// ```
    /// let l = locklab::SeqLock::new(0u8);
    /// assert_eq!(l.sequence(), 0);
    /// l.set(1);
    /// assert_eq!(l.sequence(), 2); // one whole write
    /// ```
    pub fn sequence(&self) -> u64 {
        self.seq.sequence()
    }

    /// Mutable access without synchronisation (we have `&mut self`).
    ///
    /// ```
    /// let mut l = locklab::SeqLock::new(1u16);
    /// *l.get_mut() = 7;
    /// assert_eq!(l.read(), 7);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` excludes every other access; the data is always an initialised `T`.
        unsafe { (*self.data.get()).assume_init_mut() }
    }

    /// The value.
    ///
    /// ```
    /// let l = locklab::SeqLock::new([1u8, 2, 3]);
    /// l.set([4, 5, 6]);
    /// assert_eq!(l.into_inner(), [4, 5, 6]);
    /// ```
    pub fn into_inner(self) -> T {
        // SAFETY: the data is always an initialised `T`.
        unsafe { self.data.into_inner().assume_init() }
    }

    /// Loads the data, Relaxed, chunk by chunk.
    #[inline]
    fn load_image(&self) -> MaybeUninit<T> {
        let mut out = MaybeUninit::<T>::uninit();
        let src = self.data.get() as *mut u8;
        let dst = out.as_mut_ptr() as *mut u8;
        if Self::WORDS {
            for i in 0..size_of::<T>() / 8 {
                // SAFETY: `src` is 8-aligned (WORDS) and the word lies inside `data`; every access to
                // `data` while shared is an atomic one of this same width (module docs).
                let w =
                    unsafe { DataU64::from_ptr((src as *mut u64).add(i)) }.load(Ordering::Relaxed);
                // SAFETY: `dst` is a `T`-sized, `T`-aligned local buffer.
                unsafe { (dst as *mut u64).add(i).write(w) };
            }
        } else {
            for i in 0..size_of::<T>() {
                // SAFETY: as above, with bytes.
                let b = unsafe { DataU8::from_ptr(src.add(i)) }.load(Ordering::Relaxed);
                // SAFETY: inside the local buffer.
                unsafe { dst.add(i).write(b) };
            }
        }
        out
    }

    /// Stores `value` into the data, Relaxed, chunk by chunk. Called only by the serialised writer.
    #[inline]
    fn store_image(&self, value: &T) {
        let bytes: &[u8] = bytemuck::bytes_of(value);
        let dst = self.data.get() as *mut u8;
        if Self::WORDS {
            for (i, chunk) in bytes.chunks_exact(8).enumerate() {
                let w = u64::from_ne_bytes(chunk.try_into().expect("8-byte chunk"));
                // SAFETY: 8-aligned word inside `data`, accessed atomically at this width only.
                unsafe { DataU64::from_ptr((dst as *mut u64).add(i)) }.store(w, Ordering::Relaxed);
            }
        } else {
            for (i, &b) in bytes.iter().enumerate() {
                // SAFETY: byte inside `data`, accessed atomically at this width only.
                unsafe { DataU8::from_ptr(dst.add(i)) }.store(b, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(not(loom))]
impl<T: bytemuck::NoUninit + Default> Default for SeqLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

#[cfg(not(loom))]
/// A write in progress: derefs to a copy of the value, stored back (and the sequence made even, and the
/// writer lock released) on drop.
///
/// ```
/// let s = locklab::SeqLock::new(1u64);
/// let mut g: locklab::SeqLockWriteGuard<'_, u64> = s.write();
/// *g += 1;
/// drop(g);
/// assert_eq!((s.read(), s.sequence()), (2, 2));
/// ```
pub struct SeqLockWriteGuard<'a, T: bytemuck::NoUninit> {
    lock: &'a SeqLock<T>,
    value: T,
}

#[cfg(not(loom))]
impl<T: bytemuck::NoUninit> core::ops::Deref for SeqLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(not(loom))]
impl<T: bytemuck::NoUninit> core::ops::DerefMut for SeqLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

#[cfg(not(loom))]
impl<T: bytemuck::NoUninit> Drop for SeqLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.store_image(&self.value);
        // SAFETY: this guard's `write_begin` is the open write section.
        unsafe { self.lock.seq.write_end() };
        self.lock
            .dep
            .unlock(self.lock as *const SeqLock<T> as *const ());
        // SAFETY: taken in `write`.
        unsafe { self.lock.writer.unlock() };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// A reader that started at sequence `s` and stalled while 2^31 writes
    /// completed (the sequence advanced by 2^32) must retry: with a 32-bit sequence it read `s` again.
    #[test]
    fn a_reader_stalled_across_2_pow_31_writes_retries() {
        let c = SeqCount::new();
        let start = c.read_begin();
        c.seq.store(start + (1 << 32), Ordering::Relaxed);
        assert!(
            c.read_retry(start),
            "the sequence came back to the start value"
        );
    }

    #[test]
    fn read_write_set_words_and_bytes() {
        let s = SeqLock::new([1u64, 2, 3]);
        assert_eq!(s.read(), [1, 2, 3]);
        s.write()[1] = 20;
        assert_eq!(s.read(), [1, 20, 3]);
        assert_eq!(s.sequence(), 2);
        s.set([7, 8, 9]);
        assert_eq!(s.read(), [7, 8, 9]);
        let b = SeqLock::new([1u8, 2, 3]);
        b.write()[0] = 9;
        assert_eq!(b.read(), [9, 2, 3]);
        let mut m = SeqLock::new(5u32);
        *m.get_mut() += 1;
        assert_eq!(m.into_inner(), 6);
    }

    /// Readers never see a torn value: writers keep every word equal; 4 readers and 2 writers.
    #[test]
    fn readers_never_see_torn_values() {
        const W: usize = 4;
        let s = Arc::new(SeqLock::new([0u64; W]));
        let stop = Arc::new(AtomicBool::new(false));
        let iters = if cfg!(miri) { 20 } else { 20_000 };
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..iters {
                        let mut g = s.write();
                        let v = g[0] + 1;
                        *g = [v; W];
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (s, stop) = (s.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n == 0 {
                        let v = s.read();
                        assert!(v.iter().all(|&x| x == v[0]), "torn read: {v:?}");
                        n += 1;
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(s.read(), [2 * iters as u64; W]);
        assert_eq!(s.sequence(), 4 * iters as u64);
    }
}
