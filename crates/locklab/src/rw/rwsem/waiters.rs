//! The rw-semaphore's wait list: sleeping until the lock is granted or handed over, queueing, and
//! the wake-ups (a writer, or a batch of readers) an unlock owes the sleepers.

use super::*;

impl RawRwSem {
    /// Sleeps until the lock is granted (`HANDED`) or, for a writer, taken after a wake-up; `false`
    /// if `deadline` passed first (then the waiter has left the list).
    ///
    /// # Safety
    /// `w` is queued on this rwsem and stays alive until this returns.
    pub(super) unsafe fn sleep_queued(&self, w: &Waiter, deadline: Option<&Deadline>) -> bool {
        loop {
            let timed_out = w.sleep(deadline);
            // Acquire pairs with the waker's Release store of HANDED (a granted reader needs no lock).
            if w.futex.load(Ordering::Acquire) == HANDED {
                return true;
            }
            let mut list = self.waiters();
            // Acquire pairs with the waker's Release store of HANDED.
            if w.futex.load(Ordering::Acquire) == HANDED {
                return true;
            }
            w.futex.store(SLEEPING, Ordering::Relaxed);
            let first = list.front().is_some_and(|f| core::ptr::eq(f, w));
            if !w.reader && self.try_take_write(w.tag, first) {
                // SAFETY: `w` is in this list.
                unsafe { list.remove(w) };
                if list.is_empty() {
                    // Relaxed: flag under wait_lock (invariant 3).
                    self.count.fetch_and(!WAITERS, Ordering::Relaxed);
                }
                return true;
            }
            if w.reader
                && first
                && self.count.load(Ordering::Relaxed) & (WRITER_LOCKED | UPGRADING) == 0
            {
                // Free of writers with a reader at the front: grant (ourselves included).
                self.grant_readers(&mut list);
                continue;
            }
            if timed_out {
                let was_first = first;
                // SAFETY: `w` is in this list (not handed: checked above under wait_lock).
                unsafe { list.remove(w) };
                let clear =
                    if list.is_empty() { WAITERS } else { 0 } | if was_first { HANDOFF } else { 0 };
                // Relaxed: flags under wait_lock.
                let c = self.count.fetch_and(!clear, Ordering::Relaxed);
                // If we were first and the lock is free of writers, the next waiter may be startable.
                if was_first && c & WRITER_LOCKED == 0 && (readers(c) == 0 || !list.is_empty()) {
                    self.wake_locked(&mut list, false);
                }
                return false;
            }
            if first && w.since.older_than(HANDOFF_NS) {
                self.request_handoff();
            }
            // Sleep again only if the lock is still held in a way that blocks us: re-checked by the
            // loop after a wake; a wake cannot be lost because every unlock that frees the lock while
            // WAITERS is set wakes the front (invariant 4), and the front re-checks under wait_lock.
            drop(list);
        }
    }

    /// `HANDOFF` on, if the lock is held (so nobody else can take it once it is free).
    pub(super) fn request_handoff(&self) {
        let mut c = self.count.load(Ordering::Relaxed);
        while c & HANDOFF == 0 && (c & WRITER_LOCKED != 0 || readers(c) != 0) {
            // Relaxed: flag under wait_lock.
            match self.count.compare_exchange_weak(
                c,
                c | HANDOFF,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => c = now,
            }
        }
    }

    /// Wakes the front of the list (see the module docs). `downgraded`: we hold it as a reader.
    #[cold]
    pub(super) fn wake(&self, downgraded: bool) {
        let mut list = self.waiters();
        self.wake_locked(&mut list, downgraded);
    }

    pub(super) fn wake_locked(&self, list: &mut Waiters<'_>, downgraded: bool) {
        let Some(first) = list.front() else { return };
        if first.reader {
            self.grant_readers(list);
        } else if !downgraded {
            let word = &first.futex as *const _;
            // Release: uniform waker store (the writer re-reads under wait_lock).
            if first.futex.swap(WOKEN, Ordering::Release) == SLEEPING {
                // After `wait_lock` is released: the woken writer's first step is to take it.
                list.wake_after_unlock(word);
            }
        }
    }

    /// Grants the read lock to up to [`MAX_READERS_WAKEUP`] queued readers in one batch (module docs).
    pub(super) fn grant_readers(&self, list: &mut Waiters<'_>) {
        // Speculative bias for the first reader, so a writer cannot slip in while we collect.
        // Acquire: the readers we grant read what the last writer wrote.
        let c = self.count.fetch_add(READER_BIAS, Ordering::Acquire);
        if c & (WRITER_LOCKED | UPGRADING) != 0 {
            // A writer stole it, or an upgrade holds readers back: back out (Relaxed: we held
            // nothing). The upgrade's end (its write unlock, or giving up) wakes the queue.
            let after = self.count.fetch_sub(READER_BIAS, Ordering::Relaxed) - READER_BIAS;
            self.readers_left(after);
            if c & WRITER_LOCKED != 0
                && list.front().is_some_and(|f| f.since.older_than(HANDOFF_NS))
            {
                self.request_handoff();
            }
            return;
        }
        let granted = list.take_readers(MAX_READERS_WAKEUP);
        let mut n = 0u64;
        let mut tag = 0;
        granted.for_each(|w| {
            n += 1;
            tag = w.tag;
        });
        if n == 0 {
            // Nobody to grant after all: return the speculative bias (Relaxed: we granted nothing).
            let after = self.count.fetch_sub(READER_BIAS, Ordering::Relaxed) - READER_BIAS;
            self.readers_left(after);
            return;
        }
        // The other n - 1 biases, and WAITERS off if the list emptied, in one op. Release: pairs with
        // nothing new (the readers sync with the HANDED store), kept so the word's history is ordered.
        let adjust =
            ((n - 1) * READER_BIAS).wrapping_sub(if list.is_empty() { WAITERS } else { 0 });
        let c = self
            .count
            .fetch_add(adjust, Ordering::Release)
            .wrapping_add(adjust);
        if c & HANDOFF != 0 {
            // A reader at the front asked for the lock: it is served now. Relaxed: flag under wait_lock.
            self.count.fetch_and(!HANDOFF, Ordering::Relaxed);
        }
        self.set_reader_owned(tag);
        // Second pass: all biases are in; now wake them (HANDED is the last access to each node).
        granted.hand_all();
    }

    /// Whether anyone holds the lock (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// assert!(!l.is_locked());
    /// let _r = l.read();
    /// assert!(l.is_locked());
    /// // SAFETY: the `read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// ```
    pub fn is_locked(&self) -> bool {
        let c = self.count.load(Ordering::Relaxed);
        c & WRITER_LOCKED != 0 || readers(c) != 0 || self.held_through_table()
    }

    /// Whether a writer holds the lock (a snapshot).
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _r = l.read();
    /// assert!(!l.is_locked_exclusive()); // held, but shared
    /// // SAFETY: the `read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// let _w = l.write();
    /// assert!(l.is_locked_exclusive());
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    pub fn is_locked_exclusive(&self) -> bool {
        self.count.load(Ordering::Relaxed) & WRITER_LOCKED != 0
    }

    /// Whether anyone is queued (a snapshot; for the loom models).
    #[cfg(loom)]
    pub(crate) fn has_waiters(&self) -> bool {
        self.count.load(Ordering::Relaxed) & WAITERS != 0
    }
}
