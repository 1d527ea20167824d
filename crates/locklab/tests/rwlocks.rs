//! Reader-writer locks: exclusion between writers and readers, readers in parallel, and no torn state,
//! with more threads than cores.
#![cfg(not(loom))]

use lock_api::RawRwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

const THREADS: usize = if cfg!(miri) { 3 } else { 10 };
const ITERS: usize = if cfg!(miri) { 20 } else { 20_000 };

/// Writers keep `a == b` and bump both; readers check `a == b` and count how many readers overlap.
fn stress<R: RawRwLock + Send + Sync + 'static>() -> usize {
    let l = Arc::new(lock_api::RwLock::<R, (u64, u64)>::new((0, 0)));
    let readers_in = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (l, readers_in, max_readers) = (l.clone(), readers_in.clone(), max_readers.clone());
            thread::spawn(move || {
                for i in 0..ITERS {
                    if (t + i) % 4 == 0 {
                        let mut g = l.write();
                        assert_eq!(
                            readers_in.load(Ordering::SeqCst),
                            0,
                            "a writer overlaps readers"
                        );
                        g.0 += 1;
                        std::hint::spin_loop();
                        g.1 += 1;
                    } else {
                        let g = l.read();
                        let n = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(n, Ordering::Relaxed);
                        assert_eq!(g.0, g.1, "a reader saw a half-done write");
                        readers_in.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let writes = (0..THREADS)
        .map(|t| (0..ITERS).filter(|i| (t + i) % 4 == 0).count())
        .sum::<usize>() as u64;
    assert_eq!(*l.read(), (writes, writes));
    assert!(!l.is_locked());
    max_readers.load(Ordering::Relaxed)
}

/// `nested_reads`: one thread may hold two read locks at once (not so for BrLock: readers on one CPU
/// share a spinlock).
fn basics<R: RawRwLock + Send + Sync + 'static>(nested_reads: bool) {
    let l = lock_api::RwLock::<R, u32>::new(1);
    {
        let a = l.read();
        if nested_reads {
            let b = l.try_read().expect("readers share");
            assert_eq!(*a + *b, 2);
        }
        assert!(l.try_write().is_none(), "no writer while readers hold it");
        assert!(l.is_locked() && !l.is_locked_exclusive());
    }
    {
        let mut w = l.write();
        *w = 5;
        assert!(l.try_read().is_none() && l.try_write().is_none());
        assert!(l.is_locked_exclusive());
    }
    assert!(!l.is_locked());
    assert_eq!(*l.read(), 5);
}

macro_rules! rw_tests {
    ($($name:ident: $raw:ty, $nested:expr),* $(,)?) => {$(
        mod $name {
            #[test] fn basics() { super::basics::<$raw>($nested) }
            #[test] fn stress() { super::stress::<$raw>(); }
        }
    )*};
}

rw_tests! {
    rwspinlock: locklab::raw::RawRwSpinLock, true,
    brlock: locklab::raw::RawBrLock, false,
}

#[test]
fn readers_run_in_parallel() {
    // With several readers and few writers, at some point two readers hold the lock together.
    let mut seen = 0;
    for _ in 0..5 {
        seen = seen.max(stress::<locklab::raw::RawRwSpinLock>());
        if seen >= 2 {
            break;
        }
    }
    assert!(seen >= 2 || cfg!(miri), "readers never overlapped");
}
