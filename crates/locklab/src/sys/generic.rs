//! Any other system with `std`: waiting through the parking table ([`super::parking`]), no
//! process-wide barrier (PercpuRwSem and memb RCU fence their readers), no CPU or affinity calls, and
//! thread ids from a counter. Selected everywhere by `--cfg locklab_fallback`.

pub(super) use super::no_barrier::*;
use core::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    super::parking::wait(word, expected, timeout)
}

pub(super) fn wake(word: *const AtomicU32, n: u32) -> usize {
    super::parking::wake(word, n)
}

pub(super) fn yield_now() {
    std::thread::yield_now();
}

pub(super) fn thread_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    std::thread_local! {
        // No destructor: readable from any other thread-local's destructor.
        static ID: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    }
    let fresh = || NEXT.fetch_add(1, Ordering::Relaxed);
    ID.try_with(|id| {
        if id.get() == 0 {
            id.set(fresh());
        }
        id.get()
    })
    .unwrap_or_else(|_| fresh())
}

pub(super) fn current_cpu() -> Option<usize> {
    None
}
