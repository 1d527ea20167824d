//! The rw-semaphore's upgradable readers: a shared hold that excludes writers and other upgradable
//! readers, so that it can become a write hold without letting a writer in between.

use super::*;

impl RawRwSem {
    /// Takes the lock shared and upgradable: it shares with readers and excludes writers and other
    /// upgradable readers, and can become a write hold with [`upgrade`](Self::upgrade) with no writer
    /// in between.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let t = l.read_upgradable();
    /// assert!(l.try_read().is_some(), "readers share with it");
    /// # unsafe { l.read_unlock() };
    /// assert!(l.try_read_upgradable().is_none(), "one upgradable reader at a time");
    /// let w = unsafe { l.upgrade(t) };
    /// assert!(l.try_read().is_none(), "now a writer");
    /// unsafe { l.write_unlock() };
    /// # let _ = w;
    /// ```
    pub fn read_upgradable(&self) -> RwSemToken {
        self.read_upgradable_until(None)
            .expect("no deadline: the upgradable read lock is taken")
    }

    /// Takes the lock shared and upgradable if that needs no waiting.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _u = l.try_read_upgradable().expect("free");
    /// assert!(l.try_read_upgradable().is_none()); // one upgradable reader at a time
    /// // SAFETY: the `try_read_upgradable` above took an upgradable hold.
    /// unsafe { l.upgradable_unlock() };
    /// ```
    pub fn try_read_upgradable(&self) -> Option<RwSemToken> {
        let t = self.try_read()?;
        if self.mark_upgradable() {
            return Some(t);
        }
        // SAFETY: the read hold just taken.
        unsafe { self.read_unlock() };
        None
    }

    /// [`read_upgradable`](Self::read_upgradable), giving up at `deadline` (if any).
    pub(crate) fn read_upgradable_until(&self, deadline: Option<&Deadline>) -> Option<RwSemToken> {
        loop {
            let t = match deadline {
                None => self.read(),
                Some(d) => self.read_until(d)?,
            };
            if self.mark_upgradable() {
                return Some(t);
            }
            // Another thread holds UPGRADABLE: give our read hold back (keeping it could block that
            // thread's upgrade), wait for the bit to clear, and start over.
            // SAFETY: the read hold just taken.
            unsafe { self.read_unlock() };
            if !self.wait_upgradable_clear(deadline) {
                return None;
            }
        }
    }

    /// Claims UPGRADABLE for a thread that holds a read bias; `false` if another thread has it.
    pub(super) fn mark_upgradable(&self) -> bool {
        // Acquire pairs with the Release that cleared the bit: what the previous holder did (as an
        // upgrader, a writer) happens before our upgradable section.
        self.count.fetch_or(UPGRADABLE, Ordering::Acquire) & UPGRADABLE == 0
    }

    /// Sleeps until UPGRADABLE is clear (or `deadline`: `false`).
    pub(super) fn wait_upgradable_clear(&self, deadline: Option<&Deadline>) -> bool {
        loop {
            // Acquire pairs with `bump_upgrade_seq`'s Release: if this load sees the old value, the
            // clearing below is not yet visible to us only if its bump is still to come, and then the
            // futex wait returns at once (module docs).
            let s = self.upgrade_seq.load(Ordering::Acquire);
            // AcqRel: announces us to whoever clears the bit (it sees UPGRADE_WAITERS and bumps).
            let c = self.count.fetch_or(UPGRADE_WAITERS, Ordering::AcqRel);
            if c & UPGRADABLE == 0 {
                return true;
            }
            let Some(left) = crate::clock::time_left(deadline) else {
                return false;
            };
            crate::sys::futex_wait(&self.upgrade_seq, s, left);
        }
    }

    /// Clears UPGRADABLE (and UPGRADE_WAITERS) while taking `leaving` (0, or our read bias) off the
    /// count, in one CAS with ordering `order`; wakes the threads waiting for the bit. Returns the new
    /// count.
    pub(super) fn clear_upgradable(&self, leaving: u64, order: Ordering) -> u64 {
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            let new = (c - leaving) & !(UPGRADABLE | UPGRADING | UPGRADE_WAITERS);
            match self
                .count
                .compare_exchange_weak(c, new, order, Ordering::Relaxed)
            {
                Ok(_) => {
                    if c & UPGRADE_WAITERS != 0 {
                        self.bump_upgrade_seq();
                    }
                    return new;
                }
                Err(now) => c = now,
            }
        }
    }

    /// Releases an upgradable hold.
    ///
    /// # Safety
    /// The caller holds the lock upgradable.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _u = l.read_upgradable();
    /// // SAFETY: the `read_upgradable` above took an upgradable hold.
    /// unsafe { l.upgradable_unlock() };
    /// assert!(!l.is_locked());
    /// let _next = l.try_read_upgradable().expect("free for the next one");
    /// // SAFETY: the `try_read_upgradable` above took an upgradable hold.
    /// unsafe { l.upgradable_unlock() };
    /// ```
    pub unsafe fn upgradable_unlock(&self) {
        // Release pairs with the Acquire of the next writer or upgradable reader.
        let c = self.clear_upgradable(READER_BIAS, Ordering::Release);
        if c & WAITERS != 0 {
            self.read_unlocked_slow(c);
        }
    }

    /// Turns an upgradable hold into a plain read hold.
    ///
    /// # Safety
    /// The caller holds the lock upgradable.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _u = l.read_upgradable();
    /// // SAFETY: the `read_upgradable` above took an upgradable hold.
    /// unsafe { l.downgrade_upgradable() };
    /// let _u2 = l.try_read_upgradable().expect("ours is a plain read hold now");
    /// // SAFETY: the second upgradable hold, then the plain read hold, each released once.
    /// unsafe { l.upgradable_unlock() };
    /// // SAFETY: as above.
    /// unsafe { l.read_unlock() };
    /// ```
    pub unsafe fn downgrade_upgradable(&self) {
        // Release pairs with the next upgradable reader's Acquire.
        self.clear_upgradable(0, Ordering::Release);
    }

    /// Turns an exclusive hold into an upgradable one without letting a writer in between.
    ///
    /// # Safety
    /// The caller holds the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let w = l.write();
    /// // SAFETY: `w` is this thread's exclusive hold of `l`.
    /// unsafe { l.downgrade_to_upgradable(&w) };
    /// assert!(!l.is_locked_exclusive());
    /// assert!(l.try_read_upgradable().is_none()); // ours is the upgradable hold
    /// // SAFETY: the downgrade left this thread an upgradable hold.
    /// unsafe { l.upgradable_unlock() };
    /// ```
    pub unsafe fn downgrade_to_upgradable(&self, token: &RwSemToken) {
        self.set_reader_owned(token.tag);
        // `WRITER_LOCKED -> one reader, UPGRADABLE` (no upgradable reader can exist while a writer
        // holds the lock: invariant 6). Release: readers let in now see our writes.
        let c = self.count.fetch_add(
            (READER_BIAS | UPGRADABLE).wrapping_sub(WRITER_LOCKED),
            Ordering::Release,
        );
        if c & WAITERS != 0 {
            self.wake(true);
        }
    }

    /// Turns the caller's upgradable hold into an exclusive one, waiting for the other readers to
    /// leave (new readers wait meanwhile). No writer can come in between.
    ///
    /// # Safety
    /// The caller holds the lock upgradable, with `token`, and no other read hold of it (it would
    /// wait for itself).
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let u = l.read_upgradable();
    /// // SAFETY: `u` is this thread's upgradable hold and its only hold of `l`.
    /// let _w = unsafe { l.upgrade(u) };
    /// assert!(l.is_locked_exclusive());
    /// // SAFETY: the upgrade made it an exclusive hold.
    /// unsafe { l.write_unlock() };
    /// ```
    pub unsafe fn upgrade(&self, token: RwSemToken) -> RwSemToken {
        let ok = self.upgrade_until(&token, None);
        debug_assert!(ok, "no deadline");
        token
    }

    /// Upgrades if ours is the only read hold now.
    ///
    /// # Safety
    /// The caller holds the lock upgradable, with `token`.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let u = l.read_upgradable();
    /// let _r = l.read(); // another read hold: no upgrade yet
    /// // SAFETY: `u` is this thread's upgradable hold of `l`.
    /// assert!(!unsafe { l.try_upgrade(&u) });
    /// // SAFETY: the plain read hold taken above.
    /// unsafe { l.read_unlock() };
    /// // SAFETY: as above; ours is now the only read hold.
    /// assert!(unsafe { l.try_upgrade(&u) });
    /// // SAFETY: the upgrade made it an exclusive hold.
    /// unsafe { l.write_unlock() };
    /// ```
    pub unsafe fn try_upgrade(&self, token: &RwSemToken) -> bool {
        self.convert_upgradable(token.tag) && self.revoke_after_upgrade(token, None, false)
    }

    /// [`upgrade`](Self::upgrade) giving up at `deadline` (`false`: still upgradable).
    pub(crate) fn upgrade_until(&self, token: &RwSemToken, deadline: Option<&Deadline>) -> bool {
        if self.convert_upgradable(token.tag) {
            return self.revoke_after_upgrade(token, deadline, true);
        }
        // Turn new readers away (they queue), then wait for the others to leave. Relaxed: a flag;
        // the conversion's CAS orders the hold.
        self.count.fetch_or(UPGRADING, Ordering::Relaxed);
        loop {
            // Acquire pairs with `bump_upgrade_seq` (module docs: no lost wake-up).
            let s = self.upgrade_seq.load(Ordering::Acquire);
            if self.convert_upgradable(token.tag) {
                return self.revoke_after_upgrade(token, deadline, true);
            }
            let Some(left) = crate::clock::time_left(deadline) else {
                // Give up: let the readers we held back in (we still read).
                let c = self.count.fetch_and(!UPGRADING, Ordering::Relaxed);
                if c & WAITERS != 0 {
                    self.wake(true);
                }
                return false;
            };
            crate::sys::futex_wait(&self.upgrade_seq, s, left);
        }
    }

    /// After the conversion to a write hold: revokes the reader bias (as any writer does); if that
    /// gives up with readers in through the table, turns the hold back into an upgradable one (which
    /// also lets in the readers queued meanwhile) and returns `false`.
    fn revoke_after_upgrade(
        &self,
        token: &RwSemToken,
        deadline: Option<&Deadline>,
        can_wait: bool,
    ) -> bool {
        if self.revoke_bias(deadline, can_wait) {
            return true;
        }
        // SAFETY: the conversion made this thread's hold exclusive.
        unsafe { self.downgrade_to_upgradable(token) };
        false
    }

    /// `our READER_BIAS | UPGRADABLE -> WRITER_LOCKED` if ours is the only read hold.
    pub(super) fn convert_upgradable(&self, tag: u32) -> bool {
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            if readers(c) != 1 {
                return false;
            }
            let new =
                (c - READER_BIAS + WRITER_LOCKED) & !(UPGRADABLE | UPGRADING | UPGRADE_WAITERS);
            // Acquire pairs with the other readers' Release unlocks (as a writer's take does).
            match self
                .count
                .compare_exchange_weak(c, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.set_writer_owned(tag);
                    if c & UPGRADE_WAITERS != 0 {
                        self.bump_upgrade_seq();
                    }
                    return true;
                }
                Err(now) => c = now,
            }
        }
    }
}
