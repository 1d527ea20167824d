//! `RwSpinLock`: a reader-writer spinlock shaped like the kernel's queued rwlock (`qrwlock`).
//!
//! # Algorithm (after the kernel's `kernel/locking/qrwlock.c`)
//! One 32-bit count word: reader count above a writer byte. Readers `fetch_add` a reader bias and are in
//! if no writer holds or waits. Writers `cas(0 -> LOCKED)`. Contended lockers of either kind queue on an
//! internal [`RawQueuedSpinLock`] (`wait_lock`), so they are served in arrival order: a waiting writer
//! sets WAITING, which turns new readers away from the fast path into the queue behind it, and then
//! waits for the readers already in to leave. Writers are therefore not starved by a stream of readers.
//!
//! Seed 000's point is visible here: a reader pays a locked RMW to lock *and* to unlock, where a
//! spinlock's unlock is a plain store.
//!
//! # State word
//! | bits  | field                                             |
//! |-------|---------------------------------------------------|
//! | 0-7   | LOCKED (0xff): a writer holds the lock            |
//! | 8     | WAITING: a writer at the queue head waits         |
//! | 9-31  | reader count (READER_BIAS = 1 << 9)               |
//!
//! The reader count is bounded ([`MAX_READERS`], 2^21): the fast path's mask also tests bits 30-31,
//! so a reader whose `fetch_add` lands on a count at the bound backs its bias out and panics (and
//! `try_read` refuses). Without it, 2^23 forgotten read guards wrap the count to zero and a writer gets
//! in beside them. Between the bound and the top of the word there is room for
//! 6 million in-flight biases, more than Linux allows threads (`PID_MAX_LIMIT` = 2^22).
//!
//! Transitions, as (readers, waiting, locked):
//! - read fast: `(r,0,0) -> (r+1,0,0)`; a reader that sees W or L backs its bias out and queues
//! - read unlock: `(r,w,l) -> (r-1,w,l)`
//! - recursive read (`read_recursive`, the kernel's reader in interrupt context): `(r,w,l) -> (r+1,w,l)`
//!   at once, then waits (bias kept) while `l`; a WAITING writer cannot pass `(0,1,0) -> (0,0,1)` while
//!   the bias is in, so the reader is in as soon as the holder leaves
//! - write fast: `(0,0,0) -> (0,0,1)`; queued writer: `(r,0,0) -> (r,1,0)`, waits for `(0,1,0) -> (0,0,1)`
//! - write unlock: `(r,w,1) -> (r,w,0)` (an RMW: queued readers' biases may be in the word)
//!
//! # Invariants
//! 1. LOCKED is set only by a CAS from a word with no readers and no writer.
//! 2. Only the `wait_lock` holder sets WAITING or turns it into LOCKED, so at most one writer waits.
//! 3. A reader in the queue adds its bias and waits only for LOCKED to clear: a WAITING writer behind it
//!    in the queue cannot pass it (it does not hold `wait_lock` yet).
//!
//! # Memory orderings
//! Successful read and write acquisitions are Acquire and pair with the Release of `read_unlock` /
//! `write_unlock`. The backed-out bias and WAITING are Relaxed: they are ordered by `wait_lock`.

#[cfg(not(loom))]
use crate::dep::{LockdepHooks as _, M};
use crate::primitive::{AtomicU32, Ordering, SpinWait};
use crate::spin::qspinlock::RawQueuedSpinLock;

const LOCKED: u32 = 0xff;
const WAITING: u32 = 0x100;
const WMASK: u32 = LOCKED | WAITING;
const READER_BIAS: u32 = 1 << 9;
/// Reader counts from here on are refused (module docs).
const READER_OVERFLOW: u32 = 0b11 << 30;
/// Most read holds at once: a read lock beyond this panics (`try_read` fails).
///
/// ```
/// use locklab::rw::rwspinlock::MAX_READERS;
/// assert!(MAX_READERS >= 1 << 20); // over a million read holds at once
/// ```
pub const MAX_READERS: u32 = (1 << 30) >> 9;
/// What sends a reader off the fast path.
const READ_FAILED_MASK: u32 = WMASK | READER_OVERFLOW;

/// A read lock past [`MAX_READERS`] (forgotten guards): refuse loudly; the count was restored.
#[cold]
#[inline(never)]
fn reader_overflow() -> ! {
    panic!(
        "locklab::RwSpinLock: more than {MAX_READERS} read holds at once (forgotten read guards?)"
    );
}

/// A queued reader-writer spinlock. See the [module documentation](self).
///
/// ```
/// let l = locklab::raw::RawRwSpinLock::new();
/// l.read();
/// assert!(!l.try_write());
/// unsafe { l.read_unlock() };
/// l.write();
/// assert!(l.is_locked_exclusive());
/// unsafe { l.write_unlock() };
/// ```
pub struct RawRwSpinLock {
    cnts: AtomicU32,
    wait_lock: RawQueuedSpinLock,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

#[cfg(not(loom))]
impl RawRwSpinLock {
    /// A new, unlocked lock.
    ///
    /// ```
    /// static L: locklab::raw::RawRwSpinLock = locklab::raw::RawRwSpinLock::new();
    /// assert!(!L.is_locked());
    /// ```
    pub const fn new() -> Self {
        RawRwSpinLock {
            dep: crate::dep::Dep::new(),
            cnts: AtomicU32::new(0),
            wait_lock: RawQueuedSpinLock::new(),
        }
    }
}

impl RawRwSpinLock {
    /// A new, unlocked lock (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawRwSpinLock {
            dep: crate::dep::Dep::new(),
            cnts: AtomicU32::new(0),
            wait_lock: RawQueuedSpinLock::new(),
        }
    }

    /// Takes the lock shared.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// l.read();
    /// l.read(); // readers share it
    /// assert!(l.is_locked() && !l.is_locked_exclusive());
    /// // SAFETY: this thread took two shared holds above; each unlock releases one.
    /// unsafe { l.read_unlock() };
    /// // SAFETY: as above.
    /// unsafe { l.read_unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn read(&self) {
        // Acquire pairs with the Release of `write_unlock`.
        let c = self.cnts.fetch_add(READER_BIAS, Ordering::Acquire);
        if c & READ_FAILED_MASK != 0 {
            self.read_slow(c);
        }
    }

    #[cold]
    #[inline(never)]
    fn read_slow(&self, c: u32) {
        // Relaxed: we are not in; `wait_lock` orders what follows.
        self.cnts.fetch_sub(READER_BIAS, Ordering::Relaxed);
        if c & READER_OVERFLOW != 0 {
            reader_overflow();
        }
        self.lock_wait_lock();
        // Relaxed: under `wait_lock`; the Acquire is the wait for LOCKED below.
        let c = self.cnts.fetch_add(READER_BIAS, Ordering::Relaxed);
        if c & READER_OVERFLOW != 0 {
            self.cnts.fetch_sub(READER_BIAS, Ordering::Relaxed);
            // SAFETY: taken above.
            unsafe { self.wait_lock.unlock() };
            reader_overflow();
        }
        let mut wait = SpinWait::new();
        // Acquire pairs with the Release of `write_unlock` (invariant 3: only LOCKED matters).
        while self.cnts.load(Ordering::Acquire) & LOCKED != 0 {
            wait.wait();
        }
        // SAFETY: taken above.
        unsafe { self.wait_lock.unlock() };
    }

    /// Takes the lock shared, waiting only while a writer *holds* it, never behind a waiting writer:
    /// the kernel's reader in interrupt context. A thread that already reads may read again without
    /// deadlocking behind a queued writer (glibc's default `pthread_rwlock_t` promises that); the
    /// price is that a stream of such readers can keep a writer waiting.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// l.read();
    /// l.read_recursive();
    /// unsafe { l.read_unlock(); l.read_unlock() };
    /// ```
    #[inline]
    pub fn read_recursive(&self) {
        // Acquire pairs with the Release of `write_unlock`.
        let c = self.cnts.fetch_add(READER_BIAS, Ordering::Acquire);
        if c & (LOCKED | READER_OVERFLOW) != 0 {
            self.read_recursive_slow(c);
        }
    }

    #[cold]
    #[inline(never)]
    fn read_recursive_slow(&self, c: u32) {
        if c & READER_OVERFLOW != 0 {
            self.cnts.fetch_sub(READER_BIAS, Ordering::Relaxed);
            reader_overflow();
        }
        // Our bias stays in: a waiting writer cannot turn WAITING into LOCKED while it is, so once
        // LOCKED clears we are in. Acquire pairs with the Release of `write_unlock`.
        let mut wait = SpinWait::new();
        while self.cnts.load(Ordering::Acquire) & LOCKED != 0 {
            wait.wait();
        }
    }

    /// Takes the lock shared if no writer holds it (waiting writers do not refuse it, as with
    /// [`read_recursive`](Self::read_recursive)).
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// assert!(l.try_read_recursive());
    /// unsafe { l.read_unlock() };
    /// ```
    #[inline]
    pub fn try_read_recursive(&self) -> bool {
        self.try_read_unless(LOCKED | READER_OVERFLOW)
    }

    /// Takes the lock shared if no writer holds or waits.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// assert!(l.try_read());
    /// // SAFETY: the `try_read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// l.write();
    /// assert!(!l.try_read()); // a writer holds it
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn try_read(&self) -> bool {
        self.try_read_unless(READ_FAILED_MASK)
    }

    /// Adds a reader bias unless the word has a bit of `mask`.
    #[inline]
    fn try_read_unless(&self, mask: u32) -> bool {
        let mut c = self.cnts.load(Ordering::Relaxed);
        while c & mask == 0 {
            // Acquire pairs with the Release of `write_unlock`.
            match self.cnts.compare_exchange_weak(
                c,
                c + READER_BIAS,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
        false
    }

    /// Releases a shared hold.
    ///
    /// # Safety
    /// The caller holds the lock shared.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// l.read();
    /// // SAFETY: the `read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// assert!(l.try_write()); // free again
    /// // SAFETY: the `try_write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub unsafe fn read_unlock(&self) {
        // Release pairs with the Acquire of the next writer.
        self.cnts.fetch_sub(READER_BIAS, Ordering::Release);
    }

    /// Takes the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// l.write();
    /// assert!(l.is_locked_exclusive());
    /// assert!(!l.try_read());
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn write(&self) {
        if !self.try_write() {
            self.write_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn write_slow(&self) {
        self.lock_wait_lock();
        if !self.try_write() {
            // `(r,0,0) -> (r,1,0)`. Relaxed: ordered by `wait_lock` (invariant 2).
            self.cnts.fetch_or(WAITING, Ordering::Relaxed);
            let mut wait = SpinWait::new();
            loop {
                // `(0,1,0) -> (0,0,1)`. Acquire pairs with the readers' Release unlocks.
                if self.cnts.load(Ordering::Relaxed) == WAITING
                    && self
                        .cnts
                        .compare_exchange(WAITING, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    break;
                }
                wait.wait();
            }
        }
        // SAFETY: taken above.
        unsafe { self.wait_lock.unlock() };
    }

    /// Takes the lock exclusively if it is free.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// assert!(l.try_write());
    /// assert!(!l.try_write());
    /// // SAFETY: the first `try_write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn try_write(&self) -> bool {
        // Acquire pairs with the Release unlocks.
        self.cnts.load(Ordering::Relaxed) == 0
            && self
                .cnts
                .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Releases an exclusive hold.
    ///
    /// # Safety
    /// The caller holds the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// l.write();
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub unsafe fn write_unlock(&self) {
        // Release pairs with the next acquirer's Acquire.
        self.cnts.fetch_sub(LOCKED, Ordering::Release);
    }

    /// Whether anyone holds the lock (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// assert!(!l.is_locked());
    /// l.read();
    /// assert!(l.is_locked());
    /// // SAFETY: the `read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// ```
    pub fn is_locked(&self) -> bool {
        let c = self.cnts.load(Ordering::Relaxed);
        c & LOCKED != 0 || c >= READER_BIAS
    }

    /// Whether a writer holds the lock (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawRwSpinLock::new();
    /// l.read();
    /// assert!(!l.is_locked_exclusive()); // held, but shared
    /// // SAFETY: the `read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// l.write();
    /// assert!(l.is_locked_exclusive());
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    pub fn is_locked_exclusive(&self) -> bool {
        self.cnts.load(Ordering::Relaxed) & LOCKED != 0
    }

    #[cfg(not(loom))]
    fn lock_wait_lock(&self) {
        self.wait_lock.lock();
    }

    /// Under loom the queue lock runs its model path with a node per call (loom has no thread slots).
    #[cfg(loom)]
    fn lock_wait_lock(&self) {
        let node: &'static crate::spin::mcs::McsNode =
            Box::leak(Box::new(crate::spin::mcs::McsNode::new()));
        let tail = crate::spin::qspinlock::encode_tail(loom_slot(node), 0);
        // SAFETY: leaked nodes live forever; the decoder maps each tail back to its node.
        unsafe { self.wait_lock.lock_model(node, tail, decode_loom) };
    }
}

#[cfg(loom)]
loom::lazy_static! {
    static ref LOOM_NODES: std::sync::Mutex<Vec<&'static crate::spin::mcs::McsNode>> = std::sync::Mutex::new(Vec::new());
}

#[cfg(loom)]
fn loom_slot(node: &'static crate::spin::mcs::McsNode) -> u32 {
    let mut v = LOOM_NODES.lock().unwrap();
    v.push(node);
    (v.len() - 1) as u32
}

#[cfg(loom)]
fn decode_loom(t: u16) -> &'static crate::spin::mcs::McsNode {
    LOOM_NODES.lock().unwrap()[crate::spin::qspinlock::decode_tail(t).0 as usize]
}

#[cfg(not(loom))]
impl Default for RawRwSpinLock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
// SAFETY: readers exclude writers and writers exclude everyone (invariant 1 and the WMASK checks),
// Acquire on every acquisition, Release on every unlock. No thread affinity: guards may be sent.
unsafe impl lock_api::RawRwLock for RawRwSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self::new();
    type SharedGuard = lock_api::GuardSend;
    type ExclusiveGuard = lock_api::GuardSend;

    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_shared(&self) -> Self::SharedGuard {
        self.lockdep_before_lock(M::Read);
        self.read();
        lock_api::GuardSend::new()
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        self.lockdep_after_trylock(M::Read, self.try_read().then(lock_api::GuardSend::new))
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_shared(&self, _g: Self::SharedGuard) {
        self.lockdep_before_unlock();
        // SAFETY: the guard proves a shared hold.
        unsafe { self.read_unlock() }
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        self.lockdep_before_lock(M::Write);
        self.write();
        lock_api::GuardSend::new()
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        self.lockdep_after_trylock(M::Write, self.try_write().then(lock_api::GuardSend::new))
    }
    #[inline]
    #[cfg_attr(feature = "lockdep", track_caller)]
    unsafe fn unlock_exclusive(&self, _g: Self::ExclusiveGuard) {
        self.lockdep_before_unlock();
        // SAFETY: the guard proves an exclusive hold.
        unsafe { self.write_unlock() }
    }
    fn is_locked(&self) -> bool {
        RawRwSpinLock::is_locked(self)
    }
    fn is_locked_exclusive(&self) -> bool {
        RawRwSpinLock::is_locked_exclusive(self)
    }
}

#[cfg(not(loom))]
// SAFETY: a timed attempt is a sequence of `try_read` / `try_write` until one succeeds (then it holds
// as they do) or the deadline passes (then it holds nothing).
unsafe impl lock_api::RawRwLockTimed for RawRwSpinLock {
    type Duration = std::time::Duration;
    type Instant = std::time::Instant;

    /// A spinlock has no sleeping path: the timed forms poll `try_read` / `try_write` (spinning, then
    /// yielding) until the deadline. Unlike `read`/`write` they do not queue, so they may lose the
    /// lock to queued threads meanwhile; the deadline bounds that.
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_for(&self, timeout: Self::Duration) -> Option<Self::SharedGuard> {
        // Through the (checked) `_until` or blocking call: checked once, there.
        match crate::primitive::deadline_after(timeout) {
            Some(d) => self.try_lock_shared_until(d),
            None => Some(lock_api::RawRwLock::lock_shared(self)),
        }
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_shared_until(&self, deadline: Self::Instant) -> Option<Self::SharedGuard> {
        self.lockdep_timed(M::Read, || {
            crate::primitive::spin_until(deadline, || self.try_read())
                .then(lock_api::GuardSend::new)
        })
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_for(&self, timeout: Self::Duration) -> Option<Self::ExclusiveGuard> {
        // Through the (checked) `_until` or blocking call: checked once, there.
        match crate::primitive::deadline_after(timeout) {
            Some(d) => self.try_lock_exclusive_until(d),
            None => Some(lock_api::RawRwLock::lock_exclusive(self)),
        }
    }
    #[cfg_attr(feature = "lockdep", track_caller)]
    fn try_lock_exclusive_until(&self, deadline: Self::Instant) -> Option<Self::ExclusiveGuard> {
        self.lockdep_timed(M::Write, || {
            crate::primitive::spin_until(deadline, || self.try_write())
                .then(lock_api::GuardSend::new)
        })
    }
}

#[cfg(not(loom))]
crate::dep::lockdep_hooks!(RawRwSpinLock, RwLock);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// At the bound a read lock panics with the count restored, `try_read` refuses,
    /// and no writer gets in beside the readers.
    #[test]
    fn reader_count_is_bounded() {
        let l = RawRwSpinLock::new();
        // As if MAX_READERS read guards had been forgotten (the tests/ suite forgets them for real).
        l.cnts.store(MAX_READERS * READER_BIAS, Ordering::Relaxed);
        assert!(!l.try_read(), "try_read refuses at the bound");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.read()));
        assert!(r.is_err(), "a read lock past the bound panics");
        assert_eq!(l.cnts.load(Ordering::Relaxed), MAX_READERS * READER_BIAS);
        assert!(!l.try_write(), "the readers still hold it");
        // One reader leaves: the next one gets in again.
        unsafe { l.read_unlock() };
        assert!(l.try_read());
    }
}
