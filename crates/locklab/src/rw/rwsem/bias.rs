//! The rw-semaphore's opt-in reader bias (BRAVO, Dice & Kogan 2019): readers of a reader-biased lock
//! publish themselves in a slot of a global visible-readers table instead of adding to the shared
//! count; a writer revokes the bias and waits for the lock's slots to drain. The protocol, its
//! invariants and orderings are in the module docs ("Reader bias").

use super::*;

/// Slots per cache line of the visible-readers table.
const SLOTS_PER_LINE: usize = 8;
/// Cache lines of the table (64 x 8 slots of 8 bytes: 4 KiB). Under loom, two slots on one line, so
/// that the models also meet an occupied slot.
#[cfg(not(loom))]
const LINES: usize = 64;
#[cfg(not(loom))]
const LINE_SLOTS: usize = SLOTS_PER_LINE;
#[cfg(loom)]
const LINES: usize = 1;
#[cfg(loom)]
const LINE_SLOTS: usize = 2;
/// Slots in the table.
const SLOTS: usize = LINES * LINE_SLOTS;

/// The bias word's flag: readers may take the lock through the table. The lock id sits above it.
pub(super) const ENABLED: u64 = 1;
/// The revocation-time multiplier of the inhibit period after a revocation (BRAVO's N = 9) ...
const INHIBIT_MULT_MIN: u64 = 9;
/// ... doubled on each revocation that came within the previous inhibit period, up to this.
const INHIBIT_MULT_MAX: u64 = 4096;

/// One cache line of slots. A slot holds 0 (free) or the id of the lock one reader holds through it.
#[repr(align(64))]
struct Line([AtomicU64; SLOTS_PER_LINE]);

#[cfg(not(loom))]
static TABLE: [Line; LINES] =
    [const { Line([const { AtomicU64::new(0) }; SLOTS_PER_LINE]) }; LINES];
/// Lock ids: never reused, so a slot left behind by a forgotten guard or an exited thread can never be
/// taken for a hold of a later lock (even one at the same address). Starts at 1 (0 means "none yet").
#[cfg(not(loom))]
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[cfg(loom)]
loom::lazy_static! {
    static ref TABLE: [Line; LINES] =
        core::array::from_fn(|_| Line(core::array::from_fn(|_| AtomicU64::new(0))));
    static ref NEXT_ID: AtomicU64 = AtomicU64::new(1);
}

#[inline]
fn slot(i: usize) -> &'static AtomicU64 {
    &TABLE[i / LINE_SLOTS].0[i % LINE_SLOTS]
}

/// The slot a thread (`tag`) uses for lock `id`: a multiplicative hash, so that threads of one lock
/// spread over the lines and one thread's locks spread too.
#[inline]
fn slot_index(id: u64, tag: u32) -> usize {
    let h = (id ^ (u64::from(tag) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 40) as usize) % SLOTS
}

/// Under loom, SeqCst *accesses* are modelled as AcqRel only (loom's README), so the store-load order
/// the protocol needs is made explicit there with SeqCst fences, which loom models. On hardware the
/// SeqCst accesses themselves give it (all four are in the single total order), at no fence's cost.
#[inline(always)]
fn loom_sc_fence() {
    #[cfg(loom)]
    crate::primitive::fence(Ordering::SeqCst);
}

/// A cheap monotonic tick count for the inhibit period (only ever compared with itself): the TSC on
/// x86-64, else nanoseconds of the monotonic clock (0 under loom, which skips the inhibit period).
#[inline]
fn ticks() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri), not(locklab_sim)))]
    // SAFETY: `rdtsc` exists on every x86-64 CPU and has no side effects.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(loom)]
    return 0;
    #[cfg(locklab_sim)]
    return crate::sim::now() as u64;
    #[cfg(all(
        not(all(target_arch = "x86_64", not(miri))),
        not(loom),
        not(locklab_sim)
    ))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// Count reads of biased locks with the bias off between two looks at the clock (per thread): the
/// clock costs about as much as the rest of the read (a `rdtsc` took 10 ns on the lab's VM), and the
/// inhibit period is a heuristic that a few reads' delay does not change.
#[cfg(not(loom))]
const CLOCK_POLL_EVERY: u32 = 64;

/// Whether this count read should look at the clock (every [`CLOCK_POLL_EVERY`]th of the thread's).
#[cfg(not(loom))]
#[inline]
fn clock_poll_due() -> bool {
    std::thread_local! {
        // A `const`-initialised `Cell` with no destructor: usable at any point of a thread's life,
        // signal handlers included.
        static POLL: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    }
    POLL.with(|p| {
        let n = p.get();
        p.set(if n == 0 { CLOCK_POLL_EVERY - 1 } else { n - 1 });
        n == 0
    })
}

/// The bias state of one rwsem, on a cache line of its own (readers only load it while the bias is
/// on; writers and re-enabling readers write it rarely).
#[repr(align(64))]
pub(super) struct BiasLine {
    /// `id << 1 | ENABLED`; the id is 0 until the bias is first enabled, then fixed.
    pub(super) word: AtomicU64,
    /// Readers re-enable the bias only from this tick on.
    inhibit_until: AtomicU64,
    /// When the bias was last enabled.
    enabled_at: AtomicU64,
    /// The current inhibit multiplier (`INHIBIT_MULT_MIN..=INHIBIT_MULT_MAX`).
    mult: AtomicU64,
    /// The length of the last inhibit period.
    period: AtomicU64,
}

impl BiasLine {
    crate::primitive::const_unless_loom! {
        pub(super) fn new() -> Self {
            BiasLine {
                word: AtomicU64::new(0),
                inhibit_until: AtomicU64::new(0),
                enabled_at: AtomicU64::new(0),
                mult: AtomicU64::new(INHIBIT_MULT_MIN),
                period: AtomicU64::new(0),
            }
        }
    }
}

impl RawRwSem {
    /// A read hold for the `lock_api` paths: through the table if the bias is on, else the count
    /// (then re-enabling the bias if its inhibit period is over).
    #[inline]
    pub(crate) fn read_biased(&self) -> RwSemToken {
        if self.biased {
            if let Some(t) = self.try_read_through_table() {
                return t;
            }
            let t = self.read();
            self.maybe_enable_bias();
            return t;
        }
        self.read()
    }

    /// `try_read` for the `lock_api` paths (as [`read_biased`](Self::read_biased)).
    #[inline]
    pub(crate) fn try_read_biased(&self) -> Option<RwSemToken> {
        self.read_biased_or(|| self.try_read())
    }

    /// `read_until` for the `lock_api` paths (as [`read_biased`](Self::read_biased)).
    pub(crate) fn read_biased_until(&self, deadline: &Deadline) -> Option<RwSemToken> {
        self.read_biased_or(|| self.read_until(deadline))
    }

    /// [`read_biased`](Self::read_biased) with an attempt in the count that may fail (`in_count`).
    #[inline(always)]
    fn read_biased_or(&self, in_count: impl FnOnce() -> Option<RwSemToken>) -> Option<RwSemToken> {
        if self.biased {
            if let Some(t) = self.try_read_through_table() {
                return Some(t);
            }
            let t = in_count()?;
            self.maybe_enable_bias();
            return Some(t);
        }
        in_count()
    }

    /// Releases a hold taken by one of the `*_biased` read paths.
    ///
    /// # Safety
    /// `t` is a shared hold of this lock.
    #[inline]
    pub(crate) unsafe fn read_unlock_biased(&self, t: &RwSemToken) {
        if t.slot == NO_SLOT {
            // SAFETY: a hold in the count (caller).
            unsafe { self.read_unlock() }
        } else {
            // Release pairs with the revoking writer's SeqCst (so also Acquire) load of the slot:
            // our read section happens before its write section.
            slot(t.slot as usize).store(0, Ordering::Release);
        }
    }

    /// The reader fast path through the table: `None` if the bias is off, the slot is taken (by
    /// another lock's reader, or by this thread's own interrupted read), or a writer revoked the
    /// bias between our publication and our re-check.
    #[inline]
    fn try_read_through_table(&self) -> Option<RwSemToken> {
        // Relaxed: a first look; the re-check below is the one that counts.
        let b = self.bias.word.load(Ordering::Relaxed);
        if b & ENABLED == 0 {
            return None;
        }
        let id = b >> 1;
        let tag = current_tag();
        let i = slot_index(id, tag);
        let s = slot(i);
        // SeqCst: our publication and the re-check below are ordered against a revoking writer's
        // clearing of ENABLED and its scan (`revoke_bias_slow`): either it sees our slot, or we see
        // ENABLED clear. Relaxed on failure: we do nothing with the slot then.
        if s.compare_exchange(0, id, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        loom_sc_fence();
        // SeqCst: the re-check (above). Its Acquire part pairs with the Release of the reader that
        // enabled the bias while it held the lock in the count (or of a writer that undid its
        // revocation): we see the last writer's writes.
        if self.bias.word.load(Ordering::SeqCst) & ENABLED != 0 {
            return Some(RwSemToken::in_slot(tag, i as u32));
        }
        // Revoked meanwhile: we were never in. Release, not Relaxed, although this hold protected
        // nothing: the slot is shared (later reads of this lock, readers of other locks hashed
        // here), and a revoking writer may read this 0 as the first change after an earlier
        // reader's unlock of the slot. Its Acquire load then synchronises with this store, and
        // through our Acquire CAS (which read that unlock's 0) with the earlier reader's section.
        // A Relaxed store would end that chain (a release sequence continues only through RMWs).
        s.store(0, Ordering::Release);
        None
    }

    /// A reader holding the lock in the count turns the bias back on once the inhibit period is over.
    #[inline]
    fn maybe_enable_bias(&self) {
        // Relaxed: we hold the lock in the count, so no writer runs, and the last writer's bias and
        // inhibit stores happened before our acquisition.
        let b = self.bias.word.load(Ordering::Relaxed);
        if b & ENABLED != 0 {
            return;
        }
        // Under loom the inhibit period is skipped, so that the models explore re-enabling.
        #[cfg(not(loom))]
        if !clock_poll_due() || ticks() < self.bias.inhibit_until.load(Ordering::Relaxed) {
            return;
        }
        self.enable_bias(b);
    }

    #[cold]
    #[inline(never)]
    fn enable_bias(&self, b: u64) {
        let id = match b >> 1 {
            // Relaxed: ids need only be distinct.
            0 => NEXT_ID.fetch_add(1, Ordering::Relaxed),
            id => id,
        };
        // Relaxed: read by the next revoking writer, which acquires the lock after our release.
        self.bias.enabled_at.store(ticks(), Ordering::Relaxed);
        // Release pairs with the table readers' SeqCst re-check: they see what we saw (the last
        // writer's writes). A CAS, so that of two readers enabling at once (one assigning the id)
        // one wins.
        let _ = self.bias.word.compare_exchange(
            b,
            (id << 1) | ENABLED,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// A writer that holds WRITER_LOCKED revokes the reader bias: waits (without a deadline if
    /// `can_wait` and `deadline` is `None`; not at all if `!can_wait`) until no slot holds the lock's
    /// id. `false` if it gave up with readers still in the table: the bias is then on again (the
    /// revocation is undone) and the caller gives the write hold back. On success the bias stays off
    /// until a reader turns it on after the inhibit period.
    #[inline]
    pub(super) fn revoke_bias(&self, deadline: Option<&Deadline>, can_wait: bool) -> bool {
        if !self.biased {
            return true;
        }
        // Relaxed: nobody can turn the bias on while we hold WRITER_LOCKED (only a reader holding
        // the lock does), and any enabling happened before our acquisition.
        let b = self.bias.word.load(Ordering::Relaxed);
        if b & ENABLED == 0 {
            return true;
        }
        self.revoke_bias_slow(b, deadline, can_wait)
    }

    #[cold]
    #[inline(never)]
    fn revoke_bias_slow(&self, b: u64, deadline: Option<&Deadline>, can_wait: bool) -> bool {
        let id = b >> 1;
        let t0 = ticks();
        // SeqCst: ordered before our scan against the readers' slot CAS and re-check (see there).
        self.bias.word.store(b & !ENABLED, Ordering::SeqCst);
        loom_sc_fence();
        let mut drained = true;
        'scan: for i in 0..SLOTS {
            let s = slot(i);
            let mut backoff = Backoff::new(MAX_SPIN_BACKOFF);
            #[cfg(not(any(loom, locklab_sim)))]
            let mut budget = SpinBudget::new(SPIN_MAX_NS);
            #[cfg(not(any(loom, locklab_sim)))]
            let mut nap_us = 1u64;
            // SeqCst: after our clearing of ENABLED (above). Its Acquire part pairs with the reader's
            // Release clearing of the slot: its read section happens before our write section.
            while s.load(Ordering::SeqCst) == id {
                if !can_wait || crate::clock::time_left(deadline).is_none() {
                    drained = false;
                    break 'scan;
                }
                // Spin, then yield, then (outside the models) nap, doubling up to 1 ms: a reader
                // can hold the lock for long, and its unlock wakes nobody.
                #[cfg(not(any(loom, locklab_sim)))]
                if budget.expired() {
                    std::thread::sleep(std::time::Duration::from_micros(nap_us));
                    nap_us = (nap_us * 2).min(1000);
                    continue;
                }
                backoff.wait();
            }
        }
        if !drained {
            // Giving up with table readers in: turn the bias back on, so that the next writer scans
            // again (with the bias off it would take the lock over their heads). Release pairs with
            // the table readers' re-check, as a re-enabling reader's does: we wrote nothing, and our
            // acquisition saw the last writer's writes.
            self.bias.word.store(b, Ordering::Release);
            return false;
        }
        self.note_revocation(t0, ticks());
        true
    }

    /// Sets the inhibit period after a revocation that ran from `t0` to `t1`: the revocation time
    /// times the multiplier, which doubles (up to [`INHIBIT_MULT_MAX`]) when the bias had been on for
    /// less than the previous inhibit period (writes come too often for the bias to pay), and starts
    /// again at [`INHIBIT_MULT_MIN`] otherwise.
    fn note_revocation(&self, t0: u64, t1: u64) {
        // Relaxed all through: written by writers holding WRITER_LOCKED (and `enabled_at` by a
        // reader holding the lock), read under the lock; they order no data.
        let took = t1.saturating_sub(t0).max(1);
        let lived = t1.saturating_sub(self.bias.enabled_at.load(Ordering::Relaxed));
        let mult = if lived < self.bias.period.load(Ordering::Relaxed) {
            (self.bias.mult.load(Ordering::Relaxed) * 2).min(INHIBIT_MULT_MAX)
        } else {
            INHIBIT_MULT_MIN
        };
        let period = took.saturating_mul(mult);
        self.bias.mult.store(mult, Ordering::Relaxed);
        self.bias.period.store(period, Ordering::Relaxed);
        self.bias
            .inhibit_until
            .store(t1.saturating_add(period), Ordering::Relaxed);
    }

    /// Whether a reader holds the lock through the table (a snapshot).
    pub(super) fn held_through_table(&self) -> bool {
        if !self.biased {
            return false;
        }
        // Relaxed: a snapshot.
        let id = self.bias.word.load(Ordering::Relaxed) >> 1;
        id != 0 && (0..SLOTS).any(|i| slot(i).load(Ordering::Relaxed) == id)
    }
}

#[cfg(all(test, not(loom)))]
#[path = "bias_tests.rs"]
mod tests;
