//! `RwSem`: the kernel's reader-writer semaphore after the 2019-2020 rewrites, in userspace: optimistic
//! spinning for writers (on writer-owned *and*, for a bounded time, on reader-owned locks), reader lock
//! stealing, a FIFO wait list, hand-off, and batched reader wake-ups.
//!
//! # Why (seed 003)
//! Before v5.3 a writer that found the lock reader-owned could not tell whether the readers were running,
//! so it went to sleep; with a mixed load the CPUs idled 90% where a mutex idled 15-20%. The fix, kept
//! here: a writer at the head of the OSQ spins on a reader-owned lock for a bounded time (kernel: 10 us +
//! 0.5 us per reader, capped at 25 us), and on timeout marks the lock NONSPINNABLE so later writers sleep
//! at once, until a writer owns it again.
//!
//! # Algorithm (after the kernel's `kernel/locking/rwsem.c`)
//! - `down_read`: `fetch_add(READER_BIAS)`; in if no writer, waiters or hand-off. Else the slow path:
//!   **steal** the lock if no writer holds it, no hand-off is pending and no other reader is in (the
//!   bias stays); else, once, if a writer holds it and nobody is queued, **spin**: undo the bias, watch
//!   the word (loads only) for up to [`READER_SPIN_ON_WRITER_NS`] until it admits readers, then add
//!   the bias again and re-check (the kernel's readers spun on writers from v5.3 to v5.10; in
//!   userspace a futex sleep and wake-up cost more than most write sections: without it a reader
//!   behind a 100 ns write slept, and seed 003's model left a quarter of the CPUs idle); otherwise
//!   undo the bias, queue, and sleep until a waker grants the read lock (it adds our bias for us).
//! - `down_write`: `cas(0 -> WRITER_LOCKED)`. Else spin through the OSQ while spinning is promising
//!   (below), then queue and sleep; a woken writer retries, and a first waiter past [`HANDOFF_NS`] sets
//!   HANDOFF, after which only it may take the lock.
//! - `up_read`: `fetch_sub(READER_BIAS)`; the last reader out wakes the wait list if it is non-empty.
//!   `up_write`: `fetch_sub(WRITER_LOCKED)`; wakes if the list is non-empty.
//! - Wake: a writer at the front is woken alone (it retries). Readers at the front are **granted** in a
//!   batch: one bias is added first (backed out if a writer stole the lock meanwhile); then up to
//!   [`MAX_READERS_WAKEUP`] readers are taken from anywhere in the queue and all their biases are added
//!   in one atomic op before any of them is woken, so no woken reader can `up_read` before the others'
//!   biases are in.
//! - `downgrade`: `WRITER_LOCKED -> READER_BIAS` in one op, then grant queued readers at the front.
//!
//! # Upgradable reads (not in the kernel, which has no upgrade)
//! An upgradable reader is a reader that also holds the UPGRADABLE bit: readers share with it, writers
//! and other upgradable readers are excluded (a writer needs the reader count at zero; UPGRADABLE is
//! held by one thread at a time). Because it is already in, its upgrade cannot be overtaken by a
//! writer, and it sees no write between its reads and its writes.
//! - `read_upgradable`: an ordinary `read`, then `fetch_or(UPGRADABLE)`. If another thread holds the
//!   bit, give the read hold back (holding it while waiting could block that thread's upgrade
//!   forever), announce UPGRADE_WAITERS, sleep on `upgrade_seq` until the bit clears, and start over.
//! - `upgrade`: if ours is the only read hold, `READER_BIAS | UPGRADABLE -> WRITER_LOCKED` in one CAS.
//!   Else set UPGRADING, which is in the readers' fast-path mask: new readers go to the slow path,
//!   cannot steal (the count is not zero) and queue (a waker does not grant readers while UPGRADING
//!   is set); then sleep on `upgrade_seq` until the count is ours alone and convert. Every decrement
//!   of the reader count that leaves exactly one reader while UPGRADING is set bumps `upgrade_seq`
//!   and wakes it. A timed upgrade that gives up clears UPGRADING and grants the readers it held back.
//! - Clearing UPGRADABLE (unlock, `downgrade_upgradable`, the upgrade's CAS) also clears
//!   UPGRADE_WAITERS in the same operation and, if it was set, bumps `upgrade_seq` and wakes every
//!   sleeper on it (they re-check: a sleeper whose `upgrade_seq` load came before the bump returns at
//!   once from its futex wait, so no announcement is lost).
//! - `downgrade_to_upgradable`: `WRITER_LOCKED -> READER_BIAS | UPGRADABLE` in one op (no other
//!   upgradable holder can exist while a writer holds the lock), then grant queued readers.
//!
//! # Reader bias (opt-in: [`RawRwSem::with_reader_bias`]; BRAVO, Dice & Kogan, USENIX ATC 2019)
//! Every read above is an RMW on the count's line, which then moves between the readers' CPUs even when
//! no writer is in sight. With the bias, a reader publishes itself in a slot of a **global
//! visible-readers table** instead, and only a writer pays: it revokes the bias and waits for the
//! lock's slots to drain.
//! - Table: 64 cache lines x 8 slots (`AtomicU64`), shared by every biased rwsem in the process. A
//!   slot holds 0 or the **id** of the lock one reader holds through it; the slot is chosen by a hash
//!   of (lock id, thread tag). Ids come from a global 64-bit counter when the bias is first enabled and
//!   are never reused: a slot left behind (a forgotten token, a thread that exited holding, a fork
//!   child without the thread) can never be taken for a hold of a later lock, even one at the same
//!   address.
//! - Bias word (`bias`, its own cache line): `id << 1 | ENABLED`, beside the inhibit deadline, the
//!   time it was enabled, the inhibit multiplier and the last inhibit period.
//! - Read (the `lock_api` paths only: `read`, `try_read`, the timed reads): if ENABLED, CAS the slot
//!   `0 -> id`, then re-check ENABLED; still on: the reader is in, and its token records the slot,
//!   which its unlock clears (a Release store). Off, or the slot taken (another lock's reader, or this
//!   thread's own read interrupted by a signal handler that reads the same lock): clear our slot if we
//!   took it and read through the count as above.
//! - Re-enable: a reader that holds the lock **in the count** and finds the bias off and the inhibit
//!   deadline past turns it on (assigning the id the first time). It looks at the clock (`rdtsc` on
//!   x86-64) on one in 64 such reads per thread: the clock cost as much as the rest of the read. Only a reader holding the lock does:
//!   no writer can hold it meanwhile, and the next writer acquires after its release, so sees it.
//! - Revoke: every writer, once it holds WRITER_LOCKED (write, try, timed, upgrade, and a writer
//!   handed the lock), checks ENABLED; if set, it clears it, then scans the table and waits (spin,
//!   yield, then naps up to 1 ms) until no slot holds the id. New readers meanwhile see the bias off
//!   and take the count, which WRITER_LOCKED closes: writer preference and hand-off work as without the
//!   bias. The inhibit deadline is set to 9x the revocation's duration (BRAVO's N = 9), the multiplier
//!   doubling (to 4096x) while the bias gets revoked within the previous inhibit period of being
//!   enabled, so a write-heavy load soon stops paying for scans.
//! - Giving up (try_write, a timed write or upgrade past its deadline, try_upgrade) with table readers
//!   still in: turn ENABLED back on (so the next writer scans again: with the bias off it would find
//!   no reason to), then give the hold back as any unlock does (`write_unlock`, or back to upgradable
//!   with `downgrade_to_upgradable`), waking whoever queued behind it.
//! - Upgradable reads, the raw [`read`](RawRwSem::read) and the holds made by `downgrade` use the count.
//! - Leaks are as without the bias: a table read that is never released (forgotten, or its thread
//!   exited or is absent in a fork child) keeps writers out for good, as a count read would. A thread
//!   stalled between its slot CAS and its re-check holds a writer's revocation up until it runs, as a
//!   reader's transient count bias does.
//!
//! Bias invariants:
//! 7. ENABLED is set only by a thread holding a read hold in the count, or by a writer undoing its own
//!    revocation before it releases; so while a writer that has completed its scan holds the lock it
//!    stays clear.
//! 8. A slot holds a lock's id only while a reader of that lock holds it through the slot, or is
//!    between its CAS and its re-check (then it backs out if ENABLED is clear).
//! 9. ENABLED clear implies no reader holds the lock through the table, except while the writer that
//!    cleared it is still scanning (which it finishes, or undoes, before anyone else can write).
//!
//! Orderings: the reader's slot CAS and re-check, and the writer's clearing store and slot loads,
//! are SeqCst: all four in the single total order, so either the writer sees the slot or the reader
//! sees ENABLED clear (store-load; Dekker). Loom models SeqCst accesses as AcqRel only, so under loom
//! SeqCst fences follow the CAS and the clearing store (the models fail without them). The re-check's
//! Acquire pairs with the enabling reader's Release: the table reader sees the last writer's writes.
//! The reader's Release clearing of its slot pairs with the writer's SeqCst (Acquire) slot load. A
//! reader backing out clears its slot with Release too: a slot is shared (later reads, other locks'
//! readers), and a writer may read the back-out's 0 as the first change after an earlier reader's
//! unlock of it; the chain (unlock, the backing-out reader's Acquire CAS, its Release store) keeps
//! that reader's section before the write (`tests/rwsem_bias_backout.rs`, a data race under Miri
//! with a Relaxed store).
//!
//! # Writer spinning (the owner hint)
//! `owner` holds the writer's tag, or the last reader's tag with READER_OWNED (a hint only: `up_read`
//! does not clear it), plus NONSPINNABLE. A spinning writer (OSQ head):
//! - writer-owned: spins while the owner is unchanged, at most [`OWNER_SPIN_NS`] per owner (as the Mutex);
//! - reader-owned: spins until a deadline of `READER_SPIN_BASE_NS + READER_SPIN_PER_READER_NS x readers`,
//!   capped at [`READER_SPIN_MAX_NS`], re-armed when the owner changes kind (only the first reader
//!   after a writer stores its tag: every reader storing made the owner line bounce between
//!   readers); on timeout it sets NONSPINNABLE and queues.
//!
//! **When to yield between looks.** `owner` also carries a **writer generation** (bits 40-63),
//! bumped by each write acquisition and kept by unlocks and reader phases, and a **RELOCKING** hint
//! (bit 34). A spinning writer backs off 1, 2, 4 ... 32 `pause`s between its first looks, then
//! yields between looks. But once two consecutive looks find a writer holding the lock, named in
//! `owner`, with different generations, the lock was released (or handed over) and taken again in
//! between without it (the holder re-locking at once, or another writer barging in): from then on
//! it yields between every two looks, and sets RELOCKING so the next spinner starts that way. Two
//! consecutive looks, across a yield, that find the same generation mean a hold that lasts: the
//! spinner starts its `pause`s again from the first step and clears RELOCKING. Why: each look takes
//! the line from a holder that re-locks at once. When every spin began with those six quick looks,
//! the spinner took the lock about every fourteenth operation (hand-over 7%), moving the line twice
//! each time, and at 2 threads with 10% reads and no work the RwSem ran at 0.57-0.71x parking_lot's
//! RwLock. While the spinner yields (half a microsecond with nothing else to run) the holder keeps
//! its line, as parking_lot's waiters leave it after three rounds of `pause`s. Yielding from the
//! first look in every case cost 9-12% where sections last hundreds of nanoseconds (seed 003's
//! model: a yielding spinner sees the release late), hence the two rhythms. Both are hints on the
//! spinner's rhythm only: a lost or stale RELOCKING (a holder's owner store may overwrite a
//! spinner's update) costs a few early or late looks, never a wait beyond the budgets above.
//! Figures: `docs/results/2026-12-07-rwsem-writer-yield.md`. (Not in the kernel, whose spinners
//! have CPUs of their own.)
//!
//! Two constructors build the kernel's older rwsems for experiments (`locklab reproduce`):
//! [`RawRwSem::without_reader_spinning`] (v3.16-v5.2, seed 003: writers spin only on writer owners and
//! queue as soon as they see readers in) and [`RawRwSem::without_spinning`] (before v3.16, seed 001:
//! writers never spin). The default spins on both; the options cost one test on the spinning path.
//!
//! # State word (`count`, 64 bits)
//! | bits  | name           | meaning                                                        |
//! |-------|----------------|----------------------------------------------------------------|
//! | 0     | WRITER_LOCKED  | a writer holds it                                              |
//! | 1     | WAITERS        | the wait list is non-empty                                     |
//! | 2     | HANDOFF        | the first waiter asked for the lock: nobody else may take it   |
//! | 3     | UPGRADABLE     | an upgradable reader holds it (one of the readers counted)     |
//! | 4     | UPGRADING      | that reader waits to upgrade: new readers queue                |
//! | 5     | UPGRADE_WAITERS| threads sleep on `upgrade_seq` until UPGRADABLE clears         |
//! | 8-63  | reader count   | READER_BIAS = 256 each (includes readers backing out)          |
//!
//! The OSQ tail sits on a cache line of its own (the count, owner hint and wait list share another):
//! a spinning writer's queue operations then leave the running holder's line alone. The bias state
//! has a third line (every rwsem carries it; only biased ones use it): 192 bytes in all.
//!
//! The reader count is bounded ([`MAX_READERS`]): a reader whose `fetch_add` lands on a count with bit
//! 62 or 63 set backs its bias out and panics, and `try_read` refuses. That check costs nothing (the
//! two bits are in the mask the fast path tests anyway) and keeps `mem::forget`-ed read guards from
//! ever wrapping the count into the flag bits, with room for every thread's in-flight bias above it.
//!
//! # Invariants
//! 1. WRITER_LOCKED is set only by a CAS from a word with no readers, no writer, and (unless the setter
//!    is the first waiter) no HANDOFF.
//! 2. A reader holds the lock iff its bias is in the count and WRITER_LOCKED was clear when it was
//!    added (fast path, steal) or a waker granted it while no writer held the lock.
//! 3. WAITERS is set iff the list is non-empty, as observed under `wait_lock`.
//! 4. A sleeping waiter is woken by the unlock that leaves the lock free of writers (readers: the last
//!    one out) while WAITERS is set; a granted reader is removed from the list before it is woken.
//! 5. A waiter returns only after it is out of the list; a waker's HANDED/WOKEN store is its last access.
//! 6. UPGRADABLE is set only by a thread with a read bias in the count, and cleared only by that
//!    thread; UPGRADING only while UPGRADABLE is set, by its holder. So while UPGRADABLE is set the
//!    count has a reader and no writer can enter; WRITER_LOCKED is also set by the holder's upgrade
//!    CAS from a word whose only reader is the holder (the exception to invariant 1; HANDOFF does not
//!    stop it: the holder was in first).
//!
//! # Memory orderings
//! Every acquisition (reader `fetch_add`, also after a reader's spin; writer CAS) is Acquire; `up_read`/`up_write`/`downgrade` are
//! Release; a granted reader's bias is added (Acquire+Release) by the waker before the HANDED store
//! (Release), which the reader reads with Acquire. Flag updates are Relaxed (the list is under
//! `wait_lock`). The owner field is a Relaxed hint: it decides only whether and how to spin.

#[cfg(not(loom))]
mod api;
mod bias;
mod upgradable;
mod waiters;

use crate::clock::{Deadline, SpinBudget};
use crate::primitive::{AtomicU32, AtomicU64, Backoff, Ordering};
use crate::sleep::mutex::current_tag;
use crate::sleep::osq::Osq;
use crate::sleep::wait_list::{HANDED, ListLock, LockedList, SLEEPING, WOKEN, WaitList, Waiter};
use crate::sys::futex_wake;
use core::cell::UnsafeCell;
use core::marker::PhantomData;

const WRITER_LOCKED: u64 = 1 << 0;
const WAITERS: u64 = 1 << 1;
const HANDOFF: u64 = 1 << 2;
const UPGRADABLE: u64 = 1 << 3;
const UPGRADING: u64 = 1 << 4;
const UPGRADE_WAITERS: u64 = 1 << 5;
const READER_SHIFT: u32 = 8;
const READER_BIAS: u64 = 1 << READER_SHIFT;
/// Reader counts from here on are refused (module docs): bits 62-63 of the word.
const READER_OVERFLOW: u64 = 0b11 << 62;
/// Most read holds at once: a read lock beyond this panics (`try_read` fails).
///
/// ```
/// use locklab::rw::rwsem::MAX_READERS;
/// assert!(MAX_READERS > u64::from(u32::MAX)); // no real program gets near it
/// ```
pub const MAX_READERS: u64 = (1 << 62) >> READER_SHIFT;
/// What makes a reader's fast path fail.
const READ_FAILED_MASK: u64 = WRITER_LOCKED | WAITERS | HANDOFF | UPGRADING | READER_OVERFLOW;

/// Writers spin on writer and reader owners (the default, v5.3 on).
const SPIN_ALL: u8 = 0;
/// Writers spin on writer owners only (v3.16-v5.2).
const SPIN_WRITERS: u8 = 1;
/// Writers never spin (before v3.16).
const SPIN_NONE: u8 = 2;

const READER_OWNED: u64 = 1 << 0;
const NONSPINNABLE: u64 = 1 << 1;
const OWNER_TAG_SHIFT: u32 = 2;
/// Bits 40-63 of `owner`: the writer generation, bumped by every write acquisition (wrapping) and
/// kept by unlocks and reader phases. A spinner that finds a writer holding the lock at two looks
/// with different generations knows the lock was released (or handed over) and taken again in
/// between without it.
const OWNER_GEN_SHIFT: u32 = 40;
const OWNER_GEN_ONE: u64 = 1 << OWNER_GEN_SHIFT;
const OWNER_GEN_MASK: u64 = !(OWNER_GEN_ONE - 1);
/// Bits 2-33 of `owner`: the holder's tag (never 0).
const OWNER_TAG_BITS: u64 = (u32::MAX as u64) << OWNER_TAG_SHIFT;
/// Bit 34 of `owner`: the last spinner found the holder re-locking (it saw the generation move
/// between two looks and had not seen it stay across a yield since): the next spinner starts by
/// yielding between looks.
const RELOCKING: u64 = 1 << 34;
/// What the owner stores keep.
const OWNER_KEEP: u64 = OWNER_GEN_MASK | RELOCKING;
const _: () = assert!(
    OWNER_TAG_BITS & OWNER_KEEP == 0
        && (READER_OWNED | NONSPINNABLE) & (OWNER_TAG_BITS | OWNER_KEEP) == 0
        && (crate::sleep::mutex::TAG_MASK as u64) << OWNER_TAG_SHIFT & !OWNER_TAG_BITS == 0,
    "the owner hint's fields overlap"
);

/// Readers granted per wake-up batch (the kernel's `MAX_READERS_WAKEUP`).
///
/// ```
/// use locklab::rw::rwsem::MAX_READERS_WAKEUP;
/// assert_eq!(MAX_READERS_WAKEUP, 256);
/// ```
pub const MAX_READERS_WAKEUP: usize = 256;
/// A first waiter that has waited this long asks for hand-off (the kernel: 4 ms).
///
/// ```
/// use locklab::rw::rwsem::HANDOFF_NS;
/// assert_eq!(std::time::Duration::from_nanos(HANDOFF_NS).as_millis(), 4);
/// ```
pub const HANDOFF_NS: u64 = 4_000_000;
/// Writer spinning on a writer owner: at most this long per owner.
///
/// ```
/// use locklab::rw::rwsem::{OWNER_SPIN_NS, SPIN_MAX_NS};
/// assert!(OWNER_SPIN_NS <= SPIN_MAX_NS);
/// ```
pub const OWNER_SPIN_NS: u64 = 10_000;
/// Writer spinning on reader owners: base of the deadline.
///
/// ```
/// use locklab::rw::rwsem::{READER_SPIN_BASE_NS, READER_SPIN_MAX_NS};
/// assert!(READER_SPIN_BASE_NS <= READER_SPIN_MAX_NS);
/// ```
pub const READER_SPIN_BASE_NS: u64 = 10_000;
/// Writer spinning on reader owners: added per reader.
///
/// ```
/// use locklab::rw::rwsem::*;
/// // Readers past this many no longer lengthen a writer's spin on them.
/// let readers = (READER_SPIN_MAX_NS - READER_SPIN_BASE_NS) / READER_SPIN_PER_READER_NS;
/// assert_eq!(readers, 30);
/// ```
pub const READER_SPIN_PER_READER_NS: u64 = 500;
/// Writer spinning on reader owners: cap of the deadline.
///
/// ```
/// use locklab::rw::rwsem::{READER_SPIN_MAX_NS, SPIN_MAX_NS};
/// assert!(READER_SPIN_MAX_NS <= SPIN_MAX_NS);
/// ```
pub const READER_SPIN_MAX_NS: u64 = 25_000;
/// A reader that finds a writer holding the lock (and nobody queued) watches the word this long before
/// it queues and sleeps (default rwsem only).
///
/// ```
/// use locklab::rw::rwsem::READER_SPIN_ON_WRITER_NS;
/// assert!(READER_SPIN_ON_WRITER_NS < 1_000_000); // well under a millisecond
/// ```
pub const READER_SPIN_ON_WRITER_NS: u64 = 10_000;
/// Overall cap on one writer's spinning, OSQ wait included.
///
/// ```
/// use locklab::rw::rwsem::{HANDOFF_NS, SPIN_MAX_NS};
/// assert!(SPIN_MAX_NS < HANDOFF_NS); // a spinner gives up long before anyone asks for hand-off
/// ```
pub const SPIN_MAX_NS: u64 = 50_000;
/// Most `pause`s between two looks while spinning; at the cap the spinner yields instead ([`Backoff`]).
const MAX_SPIN_BACKOFF: u32 = 64;

/// A read lock past [`MAX_READERS`] (forgotten guards): refuse loudly; the count was restored.
#[cold]
#[inline(never)]
fn reader_overflow() -> ! {
    panic!("locklab::RwSem: more than {MAX_READERS} read holds at once (forgotten read guards?)");
}

#[inline]
const fn readers(c: u64) -> u64 {
    c >> READER_SHIFT
}

/// Guard state of a hold of [`RawRwSem`]: the holder's tag. Not `Send` (the owner hint names the thread).
///
/// ```
/// let l = locklab::raw::RawRwSem::new();
/// let t: locklab::raw::RwSemToken = l.write();
/// unsafe { l.write_unlock_fair(&t) };
/// ```
pub struct RwSemToken {
    tag: u32,
    /// The visible-readers slot of a read hold taken through the table ([`NO_SLOT`]: none).
    slot: u32,
    _not_send: PhantomData<*mut ()>,
}

/// A token's `slot` when the hold is in the count.
const NO_SLOT: u32 = u32::MAX;

// SAFETY: `&RwSemToken` exposes only an integer.
unsafe impl Sync for RwSemToken {}

// SAFETY (`send_guard` only): the tag is the owner hint writers spin on; an unlock from another
// thread releases the count as the locking thread's would.
#[cfg(feature = "send_guard")]
unsafe impl Send for RwSemToken {}

impl RwSemToken {
    fn new(tag: u32) -> Self {
        RwSemToken {
            tag,
            slot: NO_SLOT,
            _not_send: PhantomData,
        }
    }

    fn in_slot(tag: u32, slot: u32) -> Self {
        RwSemToken {
            tag,
            slot,
            _not_send: PhantomData,
        }
    }
}

/// The reader-writer semaphore. See the [module documentation](self).
///
/// ```
/// use locklab::RwSem;
/// let config = RwSem::new(vec![1, 2, 3]);
/// std::thread::scope(|s| {
///     s.spawn(|| assert!(config.read().len() >= 3)); // readers share (before or after the push)
///     s.spawn(|| config.write().push(4)); // writers exclude
/// });
/// assert_eq!(config.read().len(), 4);
/// ```
///
/// The sharp edge: readers do not nest across a waiting writer. Once a writer queues behind a read
/// hold, new readers queue behind the writer (so writers are not starved), so a thread that holds a
/// read lock and read-locks again then waits for the writer, which waits for it: a deadlock, as with
/// std's and parking_lot's `RwLock`. `try_read` shows the moment it would happen:
///
/// ```
/// use locklab::RwSem;
/// use std::time::Duration;
/// let l = RwSem::new(0);
/// std::thread::scope(|s| {
///     let first = l.read();
///     s.spawn(|| *l.write() += 1); // spins briefly on the readers, then queues
///     // Wait until the writer is queued: then a second read lock must wait behind it.
///     while let Some(g) = l.try_read() {
///         drop(g);
///         std::thread::sleep(Duration::from_millis(1));
///     }
///     // `l.read()` here would never return: the writer waits for `first`, which waits for us.
///     drop(first);
/// });
/// assert_eq!(*l.read(), 1);
/// ```
pub struct RawRwSem {
    count: AtomicU64,
    owner: AtomicU64,
    osq: OsqLine,
    wait_lock: ListLock,
    waiters: UnsafeCell<WaitList>,
    /// Futex word of upgrades waiting for the other readers to leave and of threads waiting for
    /// UPGRADABLE to clear: bumped at each such event (module docs, "Upgradable reads").
    upgrade_seq: AtomicU32,
    /// Which owners a writer spins on: [`SPIN_ALL`], [`SPIN_WRITERS`] or [`SPIN_NONE`] (set once, at
    /// construction).
    spin: u8,
    /// Whether readers may take it through the visible-readers table (set once, at construction).
    biased: bool,
    /// The reader bias state (used only if `biased`).
    bias: bias::BiasLine,
    /// Its lockdep class (the `lockdep` feature; zero-sized without it).
    dep: crate::dep::Dep,
}

// SAFETY: `waiters` is accessed only with `wait_lock` held; `spin` and `biased` are never written after
// construction; the rest is atomic.
unsafe impl Sync for RawRwSem {}
// SAFETY: waiters borrow the rwsem, so none exist when it moves.
unsafe impl Send for RawRwSem {}

/// The OSQ tail on a cache line of its own. Beside the count it put two more line transfers in each
/// writer hand-over (a spinner's OSQ `xchg` and its release take the count's line from a running
/// holder): 2 threads, 10% reads, empty sections, 0.86-0.90x parking_lot's RwLock before, 1.02-1.21x
/// after (docs/results/2026-12-06-rwsem-read-side.md). The rwsem grows to two cache lines (three with
/// the bias line).
#[repr(align(64))]
struct OsqLine(Osq);

/// `wait_lock` held.
type Waiters<'a> = LockedList<'a>;

impl RawRwSem {
    crate::primitive::const_unless_loom! {
        /// A new, unlocked rwsem.
        ///
        /// ```
        /// let l = locklab::raw::RawRwSem::new();
        /// assert!(!l.is_locked());
        /// ```
        pub fn new() -> Self {
            Self::build(SPIN_ALL, false)
        }
    }

    crate::primitive::const_unless_loom! {
        /// A new, unlocked rwsem with the **reader bias** (BRAVO): while readers dominate, the
        /// `lock_api` read paths (`read`, `try_read`, the timed reads of [`RwSem`](crate::RwSem))
        /// publish the reader in a slot of a global table instead of adding to the shared count, so
        /// readers on different CPUs write no common cache line. A writer turns the bias off and
        /// waits for those readers to leave; the bias stays off for 9x (up to 4096x, under frequent
        /// writes) the time that took, so write-heavy loads stop paying for it. See the module docs,
        /// "Reader bias". Upgradable reads and the raw [`read`](Self::read) use the count.
        ///
        /// ```
        /// use locklab::raw::RawRwSem;
        /// let l = locklab::RwSem::from_raw(RawRwSem::with_reader_bias(), 0u64);
        /// std::thread::scope(|s| {
        ///     for _ in 0..2 {
        ///         s.spawn(|| assert!(*l.read() <= 1));
        ///     }
        ///     s.spawn(|| *l.write() += 1);
        /// });
        /// assert_eq!(*l.read(), 1);
        /// ```
        pub fn with_reader_bias() -> Self {
            Self::build(SPIN_ALL, true)
        }
    }

    /// A new, unlocked rwsem whose writers do **not** spin on a reader-owned lock: the kernel's rwsem
    /// before v5.3, whose writers went to sleep as soon as readers held the lock (seed 003: with
    /// readers and writers mixed, CPUs idled where a mutex kept them busy). For experiments and
    /// comparisons; [`new`](Self::new) is the one to use.
    ///
    /// ```
    /// use locklab::raw::RawRwSem;
    /// let old_style = locklab::RwSem::from_raw(RawRwSem::without_reader_spinning(), 0u64);
    /// *old_style.write() += 1;
    /// assert_eq!(*old_style.read(), 1);
    /// ```
    #[cfg(not(loom))]
    pub const fn without_reader_spinning() -> Self {
        Self::build(SPIN_WRITERS, false)
    }

    /// A new, unlocked rwsem whose writers never spin: they queue and sleep whenever the lock is
    /// taken (the kernel's rwsem before v3.16, the one seed 001 measured against mutex-based locks).
    /// For experiments and comparisons, as [`without_reader_spinning`](Self::without_reader_spinning).
    ///
    /// ```
    /// use locklab::raw::RawRwSem;
    /// let old_style = locklab::RwSem::from_raw(RawRwSem::without_spinning(), 0u64);
    /// *old_style.write() += 1;
    /// assert_eq!(*old_style.read(), 1);
    /// ```
    #[cfg(not(loom))]
    pub const fn without_spinning() -> Self {
        Self::build(SPIN_NONE, false)
    }

    crate::primitive::const_unless_loom! {
        fn build(spin: u8, biased: bool) -> Self {
            RawRwSem {
                dep: crate::dep::Dep::new(),
                count: AtomicU64::new(0),
                owner: AtomicU64::new(0),
                osq: OsqLine(Osq::new()),
                wait_lock: ListLock::new(),
                waiters: UnsafeCell::new(WaitList::new()),
                upgrade_seq: AtomicU32::new(0),
                spin,
                biased,
                bias: bias::BiasLine::new(),
            }
        }
    }

    fn waiters(&self) -> Waiters<'_> {
        let w = LockedList::lock(&self.wait_lock, &self.waiters);
        if w.was_stale {
            // The list was a parent's (a fork came between), now emptied: its flags go too (both are
            // set only under `wait_lock`, so none is this epoch's yet). Relaxed: under `wait_lock`.
            self.count
                .fetch_and(!(WAITERS | HANDOFF), Ordering::Relaxed);
        }
        w
    }

    /// Marks the lock reader-owned, once per reader phase: only the first reader after a writer
    /// stores (every reader storing made the owner line bounce between concurrent readers).
    #[inline]
    fn set_reader_owned(&self, tag: u32) {
        // Relaxed: a hint. Keeps NONSPINNABLE (it lasts until a writer owns the lock) and the
        // writer generation.
        let o = self.owner.load(Ordering::Relaxed);
        if o & READER_OWNED == 0 {
            self.owner.store(
                ((tag as u64) << OWNER_TAG_SHIFT)
                    | READER_OWNED
                    | (o & (NONSPINNABLE | OWNER_KEEP)),
                Ordering::Relaxed,
            );
        }
    }

    /// Marks the lock writer-owned by `tag` and bumps the writer generation (the holder has the
    /// line: the load costs nothing next to the store).
    #[inline]
    fn set_writer_owned(&self, tag: u32) {
        // Relaxed (both): a hint; only the holder stores it (spinners set and clear single bits:
        // NONSPINNABLE, which this clears as a writer owner does, and RELOCKING, which it keeps).
        let o = self.owner.load(Ordering::Relaxed);
        self.owner.store(
            ((tag as u64) << OWNER_TAG_SHIFT)
                | (o & RELOCKING)
                | (o & OWNER_GEN_MASK).wrapping_add(OWNER_GEN_ONE),
            Ordering::Relaxed,
        );
    }

    // ----- readers ------------------------------------------------------------------------------

    /// Takes the lock shared.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _a = l.read();
    /// let _b = l.read(); // readers share it
    /// assert!(l.is_locked() && !l.is_locked_exclusive());
    /// // SAFETY: this thread took two shared holds above; each unlock releases one.
    /// unsafe { l.read_unlock() };
    /// // SAFETY: as above.
    /// unsafe { l.read_unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub fn read(&self) -> RwSemToken {
        let tag = current_tag();
        // Acquire pairs with the Release of `up_write` / `downgrade`.
        let c = self.count.fetch_add(READER_BIAS, Ordering::Acquire);
        if c & READ_FAILED_MASK == 0 {
            self.set_reader_owned(tag);
        } else {
            self.read_slow(c, tag, None);
        }
        RwSemToken::new(tag)
    }

    /// Takes the lock shared if that needs no waiting.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _r = l.try_read().expect("no writer");
    /// // SAFETY: the `try_read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// let _w = l.write();
    /// assert!(l.try_read().is_none()); // a writer holds it
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn try_read(&self) -> Option<RwSemToken> {
        let tag = current_tag();
        let mut c = self.count.load(Ordering::Relaxed);
        while c & READ_FAILED_MASK == 0 {
            // Acquire pairs with the Release of `up_write` / `downgrade`.
            match self.count.compare_exchange_weak(
                c,
                c + READER_BIAS,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.set_reader_owned(tag);
                    return Some(RwSemToken::new(tag));
                }
                Err(now) => c = now,
            }
        }
        None
    }

    /// Takes the lock shared, giving up at `deadline`.
    pub(crate) fn read_until(&self, deadline: &Deadline) -> Option<RwSemToken> {
        let tag = current_tag();
        // Acquire as in `read`.
        let c = self.count.fetch_add(READER_BIAS, Ordering::Acquire);
        if c & READ_FAILED_MASK == 0 {
            self.set_reader_owned(tag);
            return Some(RwSemToken::new(tag));
        }
        self.read_slow(c, tag, Some(deadline))
            .then(|| RwSemToken::new(tag))
    }

    /// The reader slow path; our bias is in the count. Returns `false` only on timeout.
    #[cold]
    #[inline(never)]
    fn read_slow(&self, mut c: u64, tag: u32, deadline: Option<&Deadline>) -> bool {
        let mut spun = self.spin != SPIN_ALL;
        loop {
            if c & READ_FAILED_MASK == 0 {
                // In, as on the fast path (after a spin: the bias went back in on a readable word).
                self.set_reader_owned(tag);
                return true;
            }
            if c & READER_OVERFLOW != 0 {
                // Relaxed: we were never in. Other readers hold it, so their last unlock does any
                // wake-up.
                let c = self.count.fetch_sub(READER_BIAS, Ordering::Relaxed) - READER_BIAS;
                self.readers_left(c);
                reader_overflow();
            }
            // Reader lock stealing: no writer holds it, no hand-off is pending, and no other reader is
            // in (so the lock was just freed): our bias makes us a reader (invariant 2) even with
            // waiters queued. With other readers in we queue instead, as the kernel does: else a
            // stream of overlapping readers would keep the count from ever draining and a queued
            // writer asleep.
            if c & (WRITER_LOCKED | HANDOFF) == 0 && readers(c) == 0 {
                self.set_reader_owned(tag);
                return true;
            }
            // Reader spinning (once): a writer holds the lock and nobody is queued. A futex sleep and
            // wake-up cost microseconds, more than most write sections: back our bias out, watch the
            // word with plain loads for up to READER_SPIN_ON_WRITER_NS, and try again.
            if spun || c & WRITER_LOCKED == 0 || c & (WAITERS | HANDOFF) != 0 {
                break;
            }
            spun = true;
            c = self.spin_for_read(deadline);
        }
        let w = Waiter::with_kind(tag, true);
        let mut list = self.waiters();
        let was_empty = list.is_empty();
        // SAFETY: `w` lives on this frame until it is out of the list (invariant 5).
        unsafe { list.push_back(&w) };
        // Undo our bias and announce waiters in one op. Relaxed: under wait_lock; the lock itself is
        // not taken here.
        let adjust = if was_empty {
            WAITERS.wrapping_sub(READER_BIAS)
        } else {
            READER_BIAS.wrapping_neg()
        };
        let c = self
            .count
            .fetch_add(adjust, Ordering::Relaxed)
            .wrapping_add(adjust);
        self.readers_left(c);
        // Wake the front ourselves (as the kernel does) if (a) nothing is held any more: an unlock may
        // have seen our transient bias as an active reader and so woken nobody; or (b) no writer holds it
        // and we are first in line: nobody else would wake us, and we can join the readers in.
        if c & WRITER_LOCKED == 0 && (readers(c) == 0 || was_empty) {
            self.wake_locked(&mut list, false);
        }
        drop(list);
        // SAFETY: `w` is queued on this rwsem and lives until this returns.
        unsafe { self.sleep_queued(&w, deadline) }
    }

    /// A reader's spin while a writer holds the lock: takes our bias out, waits (loads only) until the
    /// word would admit a reader, waiters appear, or the budget (or `deadline`) runs out, then puts
    /// the bias back (Acquire: pairs with the Release of `up_write` / `downgrade`, as in `read`) and
    /// returns the count it added to, for the caller's checks (invariant 2 holds as in `read`).
    fn spin_for_read(&self, deadline: Option<&Deadline>) -> u64 {
        // Relaxed: we were never in. A writer holds the lock, so no unlock can have counted on our
        // transient bias: its `up_write` wakes the queue (if any) whatever the reader count.
        self.count.fetch_sub(READER_BIAS, Ordering::Relaxed);
        let mut budget = SpinBudget::new(READER_SPIN_ON_WRITER_NS);
        let mut backoff = Backoff::new(MAX_SPIN_BACKOFF);
        loop {
            let c = self.count.load(Ordering::Relaxed);
            if c & READ_FAILED_MASK == 0
                || c & (WAITERS | HANDOFF) != 0
                || budget.expired()
                || crate::clock::time_left(deadline).is_none()
            {
                break;
            }
            backoff.wait();
        }
        self.count.fetch_add(READER_BIAS, Ordering::Acquire)
    }

    /// Releases a shared hold.
    ///
    /// # Safety
    /// The caller holds the lock shared.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _r = l.read();
    /// // SAFETY: the `read` above took a shared hold.
    /// unsafe { l.read_unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub unsafe fn read_unlock(&self) {
        // Release pairs with the Acquire of the next writer.
        let c = self.count.fetch_sub(READER_BIAS, Ordering::Release) - READER_BIAS;
        if c & (WAITERS | UPGRADING) != 0 {
            self.read_unlocked_slow(c);
        }
    }

    /// After a read hold ended leaving `c`: wake the queue if the lock is free of holders and someone
    /// waits, and an upgrading reader if it is now the only one.
    #[cold]
    fn read_unlocked_slow(&self, c: u64) {
        if readers(c) == 0 && c & (WAITERS | WRITER_LOCKED) == WAITERS {
            self.wake(false);
        }
        self.readers_left(c);
    }

    /// A reader count went down to `c`: if only the upgrading reader is left, wake it.
    #[inline]
    fn readers_left(&self, c: u64) {
        if c & UPGRADING != 0 && readers(c) == 1 {
            self.bump_upgrade_seq();
        }
    }

    /// Bumps `upgrade_seq` and wakes everyone sleeping on it (they re-check their condition).
    #[cold]
    fn bump_upgrade_seq(&self) {
        // Release pairs with the Acquire load of `upgrade_seq` before a sleeper's check: a sleeper
        // that read the old value sees the count change that caused this bump.
        self.upgrade_seq.fetch_add(1, Ordering::Release);
        futex_wake(&self.upgrade_seq, u32::MAX);
    }

    // ----- writers ------------------------------------------------------------------------------

    /// Takes the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _w = l.write();
    /// assert!(l.is_locked_exclusive());
    /// assert!(l.try_read().is_none());
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn write(&self) -> RwSemToken {
        let tag = current_tag();
        // Acquire pairs with the Release unlocks.
        if self
            .count
            .compare_exchange(0, WRITER_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.set_writer_owned(tag);
        } else {
            self.write_slow(tag, None);
        }
        // Without a deadline the revocation waits until the table readers have left.
        self.revoke_bias(None, true);
        RwSemToken::new(tag)
    }

    /// Takes the lock exclusively if it is free.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _w = l.try_write().expect("free");
    /// assert!(l.try_write().is_none());
    /// // SAFETY: the `try_write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// ```
    #[inline]
    pub fn try_write(&self) -> Option<RwSemToken> {
        let tag = current_tag();
        if !self.try_take_write(tag, false) {
            return None;
        }
        if !self.revoke_bias(None, false) {
            // Readers are in through the table: give the write hold back (waking whoever queued
            // behind it meanwhile). SAFETY: we took it exclusively just above.
            unsafe { self.write_unlock() };
            return None;
        }
        Some(RwSemToken::new(tag))
    }

    /// Takes the lock exclusively, giving up at `deadline`.
    pub(crate) fn write_until(&self, deadline: &Deadline) -> Option<RwSemToken> {
        let tag = current_tag();
        // Acquire as in `write`.
        if self
            .count
            .compare_exchange(0, WRITER_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.set_writer_owned(tag);
        } else if !self.write_slow(tag, Some(deadline)) {
            return None;
        }
        if !self.revoke_bias(Some(deadline), true) {
            // The deadline passed with readers still in through the table: give the write hold
            // back (the revocation turned the bias back on before it gave up); queued readers and
            // writers are woken as by any write unlock. SAFETY: we hold it exclusively.
            unsafe { self.write_unlock() };
            return None;
        }
        Some(RwSemToken::new(tag))
    }

    /// `(no writer, no readers, no hand-off unless first) -> WRITER_LOCKED`, keeping WAITERS.
    #[inline]
    fn try_take_write(&self, tag: u32, first_waiter: bool) -> bool {
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            if c & WRITER_LOCKED != 0 || readers(c) != 0 || (c & HANDOFF != 0 && !first_waiter) {
                return false;
            }
            // Acquire pairs with the Release unlocks. The first waiter's take consumes HANDOFF.
            let new = (c | WRITER_LOCKED) & !HANDOFF;
            match self
                .count
                .compare_exchange_weak(c, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.set_writer_owned(tag);
                    return true;
                }
                Err(now) => c = now,
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn write_slow(&self, tag: u32, deadline: Option<&Deadline>) -> bool {
        if self.spin_for_write(tag) {
            return true;
        }
        let w = Waiter::with_kind(tag, false);
        // Start "woken": the first pass of `sleep_queued` re-checks the lock under `wait_lock` before
        // any sleep. Needed because an unlock between our failed spin and the WAITERS store below saw
        // no waiters and woke nobody (a regression test caught exactly that: `rwsem::stress` hung).
        w.futex.store(WOKEN, Ordering::Relaxed);
        let mut list = self.waiters();
        // SAFETY: `w` lives on this frame until it is out of the list (invariant 5).
        unsafe { list.push_back(&w) };
        // Relaxed: flag under wait_lock.
        self.count.fetch_or(WAITERS, Ordering::Relaxed);
        drop(list);
        // SAFETY: `w` is queued on this rwsem and lives until this returns.
        unsafe { self.sleep_queued(&w, deadline) }
    }

    /// Optimistic spinning for a writer (see "Writer spinning"). `true` with the lock held.
    fn spin_for_write(&self, tag: u32) -> bool {
        let c = self.count.load(Ordering::Relaxed);
        if self.spin == SPIN_NONE
            || self.owner.load(Ordering::Relaxed) & NONSPINNABLE != 0
            || c & HANDOFF != 0
            || (self.spin == SPIN_WRITERS && c & WRITER_LOCKED == 0 && readers(c) != 0)
        {
            return false;
        }
        let Some(claim) = crate::sleep::mutex::osq_node() else {
            return false;
        };
        let node: &crate::sleep::osq::OsqNode = &claim;
        let mut budget = SpinBudget::new(SPIN_MAX_NS);
        // SAFETY: OSQ nodes are type-stable (thread slots / leaked under loom); the claim keeps ours out
        // of any other queue until it drops, after `osq.unlock`.
        if !unsafe { self.osq.0.lock(node, &mut budget) } {
            return false;
        }
        let mut last_owner = u64::MAX;
        let mut phase_budget = SpinBudget::new(OWNER_SPIN_NS);
        let mut backoff = Backoff::new(MAX_SPIN_BACKOFF);
        // The writer generation at our last look, if a named writer held the lock then; and
        // whether we have seen it released and re-taken between two consecutive looks (then we
        // yield between looks: see "Writer spinning").
        let mut last_gen = None;
        // Relaxed: a hint on our rhythm only.
        let mut relocked = self.owner.load(Ordering::Relaxed) & RELOCKING != 0;
        let got = loop {
            if self.try_take_write(tag, false) {
                break true;
            }
            let c = self.count.load(Ordering::Relaxed);
            if c & HANDOFF != 0 {
                break false;
            }
            let owner = self.owner.load(Ordering::Relaxed);
            if owner & NONSPINNABLE != 0 {
                break false;
            }
            let reader_owned = c & WRITER_LOCKED == 0 && readers(c) != 0;
            if reader_owned && self.spin == SPIN_WRITERS {
                // The pre-v5.3 rwsem: readers in, so the writer cannot tell whether they run; sleep.
                break false;
            }
            // A writer holds it and has named itself (between its compare-and-swap and its owner
            // store, `owner` still shows the previous generation: such a look tells nothing).
            if c & WRITER_LOCKED != 0 && owner & READER_OWNED == 0 && owner & OWNER_TAG_BITS != 0 {
                let generation = owner & OWNER_GEN_MASK;
                if let Some(g) = last_gen {
                    // Relaxed (both RMWs): RELOCKING is a hint; a holder's owner store may undo
                    // either, which costs a few early or late looks.
                    if g != generation {
                        // Released (or handed over) and taken again since our last look: looking
                        // sooner would only take the line from the holder. From now on we yield
                        // between looks; the hint goes (back) on for the next spinner.
                        relocked = true;
                        if owner & RELOCKING == 0 {
                            self.owner.fetch_or(RELOCKING, Ordering::Relaxed);
                        }
                    } else if relocked {
                        // The same hold across a yield: its holder does not re-lock at once.
                        // Quick looks again, from the first step.
                        relocked = false;
                        backoff = Backoff::new(MAX_SPIN_BACKOFF);
                        if owner & RELOCKING != 0 {
                            self.owner.fetch_and(!RELOCKING, Ordering::Relaxed);
                        }
                    }
                }
                last_gen = Some(generation);
            } else {
                last_gen = None;
            }
            // A new owner (or a new reader phase) re-arms the deadline; a writer re-taking the lock
            // is the same owner (the generation is not part of the key).
            let owner = owner & !OWNER_KEEP;
            let key = if reader_owned {
                owner | READER_OWNED
            } else {
                owner & !READER_OWNED
            };
            if key != last_owner {
                last_owner = key;
                phase_budget = SpinBudget::new(if reader_owned {
                    (READER_SPIN_BASE_NS + READER_SPIN_PER_READER_NS * readers(c))
                        .min(READER_SPIN_MAX_NS)
                } else {
                    OWNER_SPIN_NS
                });
            }
            if phase_budget.expired() || budget.expired() {
                if reader_owned {
                    // Readers held it past the deadline: later writers should not spin on them.
                    // Relaxed: the owner word is a hint deciding only whether to spin; it orders no data.
                    self.owner.fetch_or(NONSPINNABLE, Ordering::Relaxed);
                }
                break false;
            }
            if relocked {
                crate::primitive::yield_now();
            } else {
                backoff.wait();
            }
        };
        // SAFETY: we are the OSQ head with this node.
        unsafe { self.osq.0.unlock(node) };
        got
    }

    /// Releases an exclusive hold.
    ///
    /// # Safety
    /// The caller holds the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let _w = l.write();
    /// // SAFETY: the `write` above took the lock exclusively.
    /// unsafe { l.write_unlock() };
    /// assert!(!l.is_locked());
    /// ```
    #[inline]
    pub unsafe fn write_unlock(&self) {
        // Relaxed: a hint. No owner, the generation kept.
        let kept = self.owner.load(Ordering::Relaxed) & OWNER_KEEP;
        self.owner.store(kept, Ordering::Relaxed);
        // Release pairs with the next acquirer's Acquire.
        let c = self.count.fetch_sub(WRITER_LOCKED, Ordering::Release);
        if c & WAITERS != 0 {
            self.wake(false);
        }
    }

    /// Releases an exclusive hold *fairly*: the lock goes straight to the longest waiter instead of being
    /// freed for whoever comes first. A writer at the front is handed the lock (WRITER_LOCKED never
    /// clears, so nobody can barge); readers at the front are granted by downgrading to a read hold
    /// first (so no writer can slip in) and then releasing it.
    ///
    /// # Safety
    /// The caller holds the lock exclusively, with `token`.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let w = l.write();
    /// // SAFETY: `w` is this thread's exclusive hold of `l`.
    /// unsafe { l.write_unlock_fair(&w) }; // nobody waits: the lock is simply freed
    /// assert!(!l.is_locked());
    /// ```
    pub unsafe fn write_unlock_fair(&self, token: &RwSemToken) {
        // Relaxed: a hint; a waiter that queues after this load is woken by `write_unlock` as usual.
        if self.count.load(Ordering::Relaxed) & WAITERS == 0 {
            // SAFETY: forwarded from the caller.
            return unsafe { self.write_unlock() };
        }
        let mut list = self.waiters();
        let Some(first) = list.front() else {
            drop(list);
            // SAFETY: forwarded from the caller.
            return unsafe { self.write_unlock() };
        };
        if first.reader {
            drop(list);
            // SAFETY: we hold it exclusively (caller); then we hold one read bias, which we drop.
            unsafe {
                self.downgrade(token);
                self.read_unlock();
            }
            return;
        }
        let first = first as *const Waiter;
        // SAFETY: `first` is queued, hence alive until we store HANDED (invariant 5).
        let first = unsafe { &*first };
        // SAFETY: `first` is in this list.
        unsafe { list.remove(first) };
        // WRITER_LOCKED stays set: the lock passes to `first` without ever being free. Its hand-off
        // request, if any, is served. Relaxed: flags under wait_lock (invariant 3).
        let clear = HANDOFF | if list.is_empty() { WAITERS } else { 0 };
        self.count.fetch_and(!clear, Ordering::Relaxed);
        self.set_writer_owned(first.tag);
        let word = &first.futex as *const crate::primitive::AtomicU32;
        // Release pairs with the waiter's Acquire load of HANDED: it sees our critical section. Last
        // access to `first`.
        first.futex.store(HANDED, Ordering::Release);
        drop(list);
        futex_wake(word, 1);
    }

    /// Turns an exclusive hold into a shared one without letting a writer in between.
    ///
    /// # Safety
    /// The caller holds the lock exclusively.
    ///
    /// ```
    /// let l = locklab::raw::RawRwSem::new();
    /// let w = l.write();
    /// // SAFETY: `w` is this thread's exclusive hold of `l`.
    /// unsafe { l.downgrade(&w) };
    /// assert!(l.is_locked() && !l.is_locked_exclusive());
    /// assert!(l.try_write().is_none()); // still a reader in
    /// // SAFETY: the downgrade left this thread a shared hold.
    /// unsafe { l.read_unlock() };
    /// ```
    pub unsafe fn downgrade(&self, token: &RwSemToken) {
        self.set_reader_owned(token.tag);
        // `WRITER_LOCKED -> one reader`. Release: readers let in now see our writes.
        let c = self
            .count
            .fetch_add(READER_BIAS.wrapping_sub(WRITER_LOCKED), Ordering::Release);
        if c & WAITERS != 0 {
            self.wake(true);
        }
    }
}

#[cfg(not(loom))]
impl Default for RawRwSem {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Waits until `n` waiters are queued (the spinners have given up and slept).
    fn until_queued(s: &RawRwSem, n: usize) {
        loop {
            let mut k = 0;
            s.waiters().for_each(|_| k += 1);
            if k >= n {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// At the bound a read lock panics with the count restored and `try_read`
    /// refuses; the readers keep the lock and a writer stays out.
    #[test]
    fn reader_count_is_bounded() {
        let s = RawRwSem::new();
        // As if MAX_READERS read guards had been forgotten (2^54: no test can forget that many).
        s.count.store(MAX_READERS * READER_BIAS, Ordering::Relaxed);
        assert!(s.try_read().is_none(), "try_read refuses at the bound");
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.read())).is_err());
        assert_eq!(s.count.load(Ordering::Relaxed), MAX_READERS * READER_BIAS);
        assert!(s.try_write().is_none());
        unsafe { s.read_unlock() };
        assert!(s.try_read().is_some());
    }

    #[test]
    fn fair_unlock_hands_to_a_queued_writer() {
        let s = Arc::new(RawRwSem::new());
        let order = Arc::new(Mutex::new(vec![]));
        let t = s.write();
        let (s2, o2) = (s.clone(), order.clone());
        let h = std::thread::spawn(move || {
            let _t = s2.write();
            o2.lock().unwrap().push("waiter");
            unsafe { s2.write_unlock() };
        });
        until_queued(&s, 1);
        unsafe { s.write_unlock_fair(&t) };
        // The lock went to the waiter: it was never free, so this write queues behind it.
        assert!(s.is_locked_exclusive() || order.lock().unwrap().len() == 1);
        let _t = s.write();
        order.lock().unwrap().push("releaser");
        unsafe { s.write_unlock() };
        h.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["waiter", "releaser"]);
        assert_eq!(s.count.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn fair_unlock_grants_queued_readers_before_a_new_writer() {
        let s = Arc::new(RawRwSem::new());
        let order = Arc::new(Mutex::new(vec![]));
        let t = s.write();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (s2, o2) = (s.clone(), order.clone());
                std::thread::spawn(move || {
                    let _t = s2.read();
                    o2.lock().unwrap().push("reader");
                    unsafe { s2.read_unlock() };
                })
            })
            .collect();
        until_queued(&s, 2);
        unsafe { s.write_unlock_fair(&t) };
        let _t = s.write();
        order.lock().unwrap().push("writer");
        unsafe { s.write_unlock() };
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["reader", "reader", "writer"]);
        assert_eq!(s.count.load(Ordering::Relaxed), 0);
    }

    /// Seed 003's option: a writer finding readers in spins on them (default; it gives up after the
    /// deadline and marks the lock NONSPINNABLE) or, without reader spinning, queues at once.
    #[test]
    fn reader_spinning_can_be_turned_off() {
        for reader_spin in [true, false] {
            let s = Arc::new(if reader_spin {
                RawRwSem::new()
            } else {
                RawRwSem::without_reader_spinning()
            });
            assert_eq!(s.spin, if reader_spin { SPIN_ALL } else { SPIN_WRITERS });
            let _r = s.read();
            let s2 = s.clone();
            let h = std::thread::spawn(move || {
                let _t = s2.write();
                unsafe { s2.write_unlock() };
            });
            until_queued(&s, 1);
            let nonspinnable = s.owner.load(Ordering::Relaxed) & NONSPINNABLE != 0;
            assert_eq!(nonspinnable, reader_spin, "reader_spin = {reader_spin}");
            unsafe { s.read_unlock() };
            h.join().unwrap();
            assert_eq!(s.count.load(Ordering::Relaxed), 0);
        }
    }

    /// The pre-v3.16 option: a writer never spins. On a free lock the default spinner takes it at
    /// its first look; with spinning off `spin_for_write` refuses before looking, and the writer
    /// still gets the lock through the ordinary path.
    #[test]
    fn spinning_can_be_turned_off() {
        let s = RawRwSem::new();
        assert!(s.spin_for_write(current_tag()), "the default spins");
        unsafe { s.write_unlock() };
        let s = RawRwSem::without_spinning();
        assert_eq!(s.spin, SPIN_NONE);
        assert!(!s.spin_for_write(current_tag()), "no spinning at all");
        assert!(!s.is_locked());
        let t = s.write();
        assert!(s.is_locked_exclusive());
        unsafe { s.write_unlock_fair(&t) };
        assert_eq!(s.count.load(Ordering::Relaxed), 0);
    }

    /// The owner hint's fields: a write names its tag and bumps the generation; the write unlock
    /// leaves the generation alone; reader phases and downgrades keep it; a writer owner clears
    /// NONSPINNABLE and keeps RELOCKING.
    #[test]
    fn owner_hint_keeps_the_generation_and_the_relocking_hint() {
        let s = RawRwSem::new();
        let owner = || s.owner.load(Ordering::Relaxed);
        let generation = |o: u64| o >> OWNER_GEN_SHIFT;
        let tag = current_tag() as u64;
        let _w = s.write();
        assert_eq!(generation(owner()), 1);
        assert_eq!((owner() & OWNER_TAG_BITS) >> OWNER_TAG_SHIFT, tag);
        unsafe { s.write_unlock() };
        assert_eq!(owner(), OWNER_GEN_ONE, "no owner, the generation kept");
        let _r = s.read();
        assert_eq!(owner() & READER_OWNED, READER_OWNED);
        assert_eq!(generation(owner()), 1, "a reader phase keeps it");
        unsafe { s.read_unlock() };
        s.owner
            .fetch_or(NONSPINNABLE | RELOCKING, Ordering::Relaxed);
        let w = s.write();
        assert_eq!(generation(owner()), 2);
        assert_eq!(
            owner() & NONSPINNABLE,
            0,
            "a writer owner clears NONSPINNABLE"
        );
        assert_eq!(owner() & RELOCKING, RELOCKING, "and keeps RELOCKING");
        unsafe { s.downgrade(&w) };
        assert_eq!(generation(owner()), 2, "a downgrade keeps it");
        unsafe { s.read_unlock() };
        let _w = s.write();
        assert_eq!(generation(owner()), 3);
        unsafe { s.write_unlock() };
        assert_eq!(owner(), (3 * OWNER_GEN_ONE) | RELOCKING);
    }

    /// A spinner that starts yielding on the RELOCKING hint and then finds the same hold across a
    /// yield clears the hint (and still gives up at its budget); on reader owners the hint does not
    /// keep it from marking the lock NONSPINNABLE.
    #[test]
    fn a_hold_that_lasts_clears_the_relocking_hint() {
        let s = RawRwSem::new();
        let _w = s.write();
        s.owner.fetch_or(RELOCKING, Ordering::Relaxed);
        // The hold lasts through the whole spin (this thread keeps it).
        assert!(!s.spin_for_write(current_tag() ^ 1));
        assert_eq!(s.owner.load(Ordering::Relaxed) & RELOCKING, 0);
        unsafe { s.write_unlock() };
        let _r = s.read();
        s.owner.fetch_or(RELOCKING, Ordering::Relaxed);
        assert!(!s.spin_for_write(current_tag() ^ 1));
        assert_ne!(s.owner.load(Ordering::Relaxed) & NONSPINNABLE, 0);
        unsafe { s.read_unlock() };
    }

    /// A spinner that sees the generation move between two looks sets the hint. The holder here
    /// keeps the lock and bumps the generation as a writer re-locking at once would (so the spinner
    /// can never take it), and watches for the hint; retried until the two threads have run side by
    /// side (on a loaded machine they may not for a while).
    #[test]
    fn a_spinner_that_sees_the_generation_move_sets_the_hint() {
        let s = RawRwSem::new();
        let (stop, seen) = (
            std::sync::atomic::AtomicBool::new(false),
            std::sync::atomic::AtomicBool::new(false),
        );
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let tag = current_tag();
                let _w = s.write();
                while !stop.load(Ordering::Relaxed) {
                    s.set_writer_owned(tag);
                    if s.owner.load(Ordering::Relaxed) & RELOCKING != 0 {
                        seen.store(true, Ordering::Relaxed);
                    }
                    core::hint::spin_loop();
                }
                unsafe { s.write_unlock() };
            });
            while !s.is_locked_exclusive() {
                std::thread::yield_now();
            }
            let start = std::time::Instant::now();
            while !seen.load(Ordering::Relaxed)
                && start.elapsed() < std::time::Duration::from_secs(60)
            {
                assert!(!s.spin_for_write(current_tag() ^ 1), "the lock stays held");
            }
            stop.store(true, Ordering::Relaxed);
            assert!(seen.load(Ordering::Relaxed), "no hint in 60 s");
        });
    }

    /// A reader's spin on a writer-held lock: the bias is out while it watches and back in when it
    /// returns; it stops on a readable word, on queued waiters and at its deadline, and never queues.
    #[test]
    fn reader_spin_restores_its_bias_and_stops_when_it_should() {
        let s = RawRwSem::new();
        // Readable at once: returns the word it added to, bias in.
        s.count.store(READER_BIAS, Ordering::Relaxed);
        assert_eq!(s.spin_for_read(None), 0);
        assert_eq!(s.count.load(Ordering::Relaxed), READER_BIAS);
        // Writer-held with waiters: stops at once (it would queue behind them).
        s.count
            .store(WRITER_LOCKED | WAITERS | READER_BIAS, Ordering::Relaxed);
        assert_eq!(s.spin_for_read(None), WRITER_LOCKED | WAITERS);
        // Writer-held, nobody queued, deadline passed: stops at once.
        s.count
            .store(WRITER_LOCKED | READER_BIAS, Ordering::Relaxed);
        let past = std::time::Instant::now();
        assert_eq!(s.spin_for_read(Some(&past)), WRITER_LOCKED);
        assert_eq!(s.count.load(Ordering::Relaxed), WRITER_LOCKED | READER_BIAS);
        // Writer-held for longer than the budget: gives up after about READER_SPIN_ON_WRITER_NS.
        let t0 = std::time::Instant::now();
        assert_eq!(s.spin_for_read(None), WRITER_LOCKED);
        assert!(t0.elapsed() >= std::time::Duration::from_nanos(READER_SPIN_ON_WRITER_NS));
        assert!(s.waiters().is_empty(), "a spinning reader never queues");
    }

    #[test]
    fn readers_share_writers_exclude_downgrade() {
        let s = RawRwSem::new();
        let _a = s.read();
        let _b = s.try_read().expect("readers share");
        assert!(s.try_write().is_none());
        unsafe {
            s.read_unlock();
            s.read_unlock();
        }
        let w = s.write();
        assert!(s.try_read().is_none() && s.try_write().is_none());
        unsafe { s.downgrade(&w) };
        let _r2 = s.try_read().expect("after downgrade readers may enter");
        assert!(s.try_write().is_none());
        unsafe {
            s.read_unlock();
            s.read_unlock();
        }
        assert!(!s.is_locked());
        assert_eq!(s.count.load(Ordering::Relaxed), 0);
    }
}
