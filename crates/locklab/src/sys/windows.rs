//! Windows: `WaitOnAddress` / `WakeByAddressSingle` / `WakeByAddressAll` (Windows 8+), the
//! process-wide barrier `FlushProcessWriteBuffers`, `SwitchToThread`, `GetCurrentThreadId`,
//! `GetCurrentProcessorNumber`.

use core::sync::atomic::AtomicU32;
use std::time::Duration;
use windows_sys::Win32::Foundation::{ERROR_TIMEOUT, GetLastError};
use windows_sys::Win32::System::Threading::{
    FlushProcessWriteBuffers, GetCurrentProcessorNumber, GetCurrentThreadId, INFINITE,
    SwitchToThread, WaitOnAddress, WakeByAddressAll, WakeByAddressSingle,
};

pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    // Milliseconds, rounded up (a wait never ends early), below INFINITE.
    let ms = timeout.map_or(INFINITE, |d| {
        let ms = d.as_nanos().div_ceil(1_000_000);
        ms.min(INFINITE as u128 - 1) as u32
    });
    // SAFETY: both addresses are valid 4-byte objects for the call: the word (a reference) and the
    // comparand on this stack.
    let ok = unsafe { WaitOnAddress(word.as_ptr().cast(), (&raw const expected).cast(), 4, ms) };
    // SAFETY: no arguments.
    ok != 0 || unsafe { GetLastError() } != ERROR_TIMEOUT
}

pub(super) fn wake(word: *const AtomicU32, n: u32) -> usize {
    // SAFETY: the address is only a key (never dereferenced by the wake calls).
    unsafe {
        if n == 1 {
            WakeByAddressSingle(word.cast());
        } else {
            WakeByAddressAll(word.cast());
        }
    }
    0
}

pub(super) fn yield_now() {
    // SAFETY: no arguments.
    unsafe { SwitchToThread() };
}

pub(super) fn membarrier_register() -> bool {
    true
}

pub(super) fn membarrier() -> bool {
    // SAFETY: no arguments; a full barrier on every processor running a thread of this process.
    unsafe { FlushProcessWriteBuffers() };
    true
}

pub(super) fn cpu_walk_barrier() -> bool {
    false
}

pub(super) fn use_process_affinity() -> bool {
    false
}

pub(super) fn thread_id() -> u32 {
    // SAFETY: no arguments.
    unsafe { GetCurrentThreadId() }
}

pub(super) fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments.
    Some(unsafe { GetCurrentProcessorNumber() } as usize)
}
