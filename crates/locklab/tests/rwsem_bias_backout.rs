//! The reader bias's back-out under the language's memory model (run it under Miri, which CI does):
//! a reader that publishes in a slot, finds the bias revoked and clears the slot again must not
//! break the chain from an earlier reader's unlock of that slot to the revoking writer, who may read
//! the back-out's 0 as the first change after that unlock. With a Relaxed back-out store Miri
//! reports the earlier reader's section and the writer's write as a data race.

use locklab::RwSem;
use locklab::raw::RawRwSem;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn a_readers_back_out_keeps_an_earlier_reader_before_the_writer() {
    let rounds = if cfg!(miri) { 3 } else { 200 };
    for _ in 0..rounds {
        let lock = Arc::new(RwSem::from_raw(RawRwSem::with_reader_bias(), 0u64));
        // Count reads past the (zero) inhibit period turn the bias on.
        for _ in 0..64 {
            drop(lock.read());
        }
        let holding = Arc::new(AtomicBool::new(false));
        let (l, h) = (lock.clone(), holding.clone());
        let reader = std::thread::spawn(move || {
            let g = l.read();
            // SeqCst: a flag only, ordered before the section's read below (not after it).
            h.store(true, Ordering::SeqCst);
            while !l.is_locked_exclusive() {
                std::thread::yield_now();
            }
            // Give the writer time to revoke and start waiting on our slot.
            for _ in 0..20 {
                std::thread::yield_now();
            }
            let v = *g;
            drop(g);
            // May still see the bias on, publish, find it revoked and back out.
            drop(l.read());
            v
        });
        while !holding.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        *lock.write() += 1;
        assert_eq!(reader.join().unwrap(), 0);
        assert_eq!(*lock.read(), 1);
    }
}
