//! A parking table: futex semantics (sleep while a 32-bit word holds a value; wake sleepers by the
//! word's address) built on std alone, for systems with no wait-on-address call. The design follows
//! std's own generic thread parker and parking_lot_core's hashed buckets: a fixed table of 64 buckets,
//! each a small test-and-set lock over the sleepers whose address hashes there; a sleeper is an `Arc` of a flag, a
//! `Mutex` and a `Condvar` (no `thread::current()`, which a thread may not call from a late
//! thread-local destructor, where a lock may still be taken).
//!
//! # Why no wake-up is lost
//! A sleeper checks the word and enqueues itself under its bucket's lock; a waker changes the word
//! first and then takes the same lock to dequeue and wake. If the sleeper's critical section came
//! first, the waker finds it in the queue; if the waker's came first, the lock hands the word's new
//! value to the sleeper's check, which then returns at once. A sleeper that times out removes itself
//! under the lock; if it is no longer there, a waker took it, and the wait counts as woken.
//!
//! Each wait allocates its sleeper (one `Arc`): this path is the portable fallback, not Linux's.
//!
//! # fork
//! A child of `fork` has only the forking thread: the sleepers queued by the others are ghosts (a wake
//! given to one would be lost to a real sleeper), and a bucket another thread held at the fork stays
//! held. A `pthread_atfork` child handler (registered on first use) therefore empties every bucket
//! and frees its lock. A list another thread was changing may be torn: it is leaked, not dropped.
//! Nothing is held across the fork (a prepare handler that locked the buckets would deadlock with
//! other fork handlers that wake sleepers).
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! let word = AtomicU32::new(0);
//! assert!(!locklab::sys::parking::wait(&word, 0, Some(Duration::from_millis(1))), "timed out");
//! assert!(locklab::sys::parking::wait(&word, 1, None), "the value differs: at once");
//! assert_eq!(locklab::sys::parking::wake(&word, 1), 0, "nobody sleeps there");
//! ```

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

const BUCKETS: usize = 64;

/// A bucket: a test-and-set lock over its list (held for a push or a scan only).
struct Bucket {
    locked: AtomicBool,
    list: UnsafeCell<Vec<Entry>>,
}

// SAFETY: `list` is accessed only with `locked` held (or by the fork child handler, alone).
unsafe impl Sync for Bucket {}

impl Bucket {
    const fn new() -> Self {
        Bucket {
            locked: AtomicBool::new(false),
            list: UnsafeCell::new(Vec::new()),
        }
    }
}

/// A held bucket.
struct Held(&'static Bucket);

impl core::ops::Deref for Held {
    type Target = Vec<Entry>;
    fn deref(&self) -> &Vec<Entry> {
        // SAFETY: the bucket's lock is held.
        unsafe { &*self.0.list.get() }
    }
}

impl core::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Vec<Entry> {
        // SAFETY: the bucket's lock is held, by this guard alone.
        unsafe { &mut *self.0.list.get() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Release pairs with the next holder's Acquire.
        self.0.locked.store(false, Ordering::Release);
    }
}

struct Sleeper {
    woken: Mutex<bool>,
    cv: Condvar,
}

struct Entry {
    addr: usize,
    sleeper: Arc<Sleeper>,
}

static TABLE: [Bucket; BUCKETS] = [const { Bucket::new() }; BUCKETS];

fn bucket(addr: usize) -> Held {
    #[cfg(all(unix, not(miri)))]
    watch_fork();
    // Fibonacci hashing of the address (4-aligned: the low bits carry nothing).
    let i = ((addr >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> 7) % BUCKETS;
    let b = &TABLE[i];
    let mut spins = 0u32;
    // Acquire pairs with the Release in `Held::drop`.
    while b
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    Held(b)
}

/// Registers the fork child handler once (module docs).
#[cfg(all(unix, not(miri)))]
fn watch_fork() {
    static REGISTRATION: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
    extern "C" fn child() {
        super::registered_here(&REGISTRATION);
        for b in &TABLE {
            // SAFETY: the child has one thread, which is not inside a bucket (it called fork). The
            // old list may be torn: it is overwritten without being dropped (leaked).
            unsafe { core::ptr::write(b.list.get(), Vec::new()) };
            // Relaxed: one thread.
            b.locked.store(false, Ordering::Relaxed);
        }
    }
    super::once_per_process(&REGISTRATION, || {
        // SAFETY: a handler that only resets our own statics.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    });
}

/// Sleeps while `*word == expected`, at most `timeout`; `false` if it timed out.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let addr = word as *const AtomicU32 as usize;
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let sleeper = Arc::new(Sleeper {
        woken: Mutex::new(false),
        cv: Condvar::new(),
    });
    {
        let mut q = bucket(addr);
        // Relaxed: the bucket lock orders this load against the waker's store (module docs).
        if word.load(Ordering::Relaxed) != expected {
            return true;
        }
        q.push(Entry {
            addr,
            sleeper: sleeper.clone(),
        });
    }
    let mut woken = sleeper.woken.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if *woken {
            return true;
        }
        match deadline {
            None if timeout.is_none() => {
                woken = sleeper
                    .cv
                    .wait(woken)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            // A timeout too long for an `Instant`: sleep as if forever, in long steps.
            None => {
                woken = sleeper
                    .cv
                    .wait_timeout(woken, Duration::from_secs(1 << 20))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    break;
                }
                woken = sleeper
                    .cv
                    .wait_timeout(woken, d - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
    }
    drop(woken);
    // Timed out: leave the queue, unless a waker already took us out (then we were woken).
    let mut q = bucket(addr);
    match q.iter().position(|e| Arc::ptr_eq(&e.sleeper, &sleeper)) {
        Some(i) => {
            q.swap_remove(i);
            false
        }
        None => true,
    }
}

/// Wakes up to `n` sleepers on `word`'s address; returns how many. The address is only compared,
/// never dereferenced.
pub fn wake(word: *const AtomicU32, n: u32) -> usize {
    let addr = word as usize;
    let mut taken = Vec::new();
    {
        let mut q = bucket(addr);
        let mut i = 0;
        // Oldest first: the queue is in arrival order until a timed-out sleeper's `swap_remove`.
        while i < q.len() && (taken.len() as u32) < n {
            if q[i].addr == addr {
                taken.push(q.remove(i).sleeper);
            } else {
                i += 1;
            }
        }
    }
    for s in &taken {
        *s.woken.lock().unwrap_or_else(PoisonError::into_inner) = true;
        s.cv.notify_one();
    }
    taken.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Locks a given bucket (tests only).
    fn bucket_at(b: &'static Bucket) -> Held {
        while b.locked.swap(true, Ordering::Acquire) {
            std::thread::yield_now();
        }
        Held(b)
    }

    #[test]
    fn wakes_only_the_address_and_count_asked() {
        let a = Arc::new(AtomicU32::new(0));
        let b = Arc::new(AtomicU32::new(0));
        let sleepers: Vec<_> = (0..4)
            .map(|i| {
                let w = if i < 3 { a.clone() } else { b.clone() };
                std::thread::spawn(move || wait(&w, 0, Some(Duration::from_secs(20))))
            })
            .collect();
        // Wait until all four are queued (counting only ours: under `--cfg locklab_fallback` every
        // lock of the other tests sleeps in this table too).
        let queued = |w: &AtomicU32| {
            let addr = w as *const AtomicU32 as usize;
            TABLE
                .iter()
                .map(|b| {
                    let held = bucket_at(b);
                    held.iter().filter(|e| e.addr == addr).count()
                })
                .sum::<usize>()
        };
        while queued(&a) < 3 || queued(&b) < 1 {
            std::thread::yield_now();
        }
        assert_eq!(wake(&*a, 2), 2);
        assert_eq!(wake(&*a, 5), 1);
        assert_eq!(wake(&*b, 1), 1);
        for s in sleepers {
            assert!(s.join().unwrap(), "woken, not timed out");
        }
        assert_eq!(wake(&*a, 1), 0);
    }

    #[test]
    fn a_timed_out_sleeper_leaves_the_queue() {
        let w = AtomicU32::new(7);
        assert!(!wait(&w, 7, Some(Duration::from_millis(5))));
        assert_eq!(wake(&w, 1), 0, "nobody left behind");
    }
}
