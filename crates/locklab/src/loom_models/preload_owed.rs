//! The model `sys` functions both preload models share: the word a thread records before it sleeps
//! (the real library keeps it in a table by TID, for its signal-handler wrapper to pass a wake-up
//! on), and errno, which the models do not read.

use loom::sync::atomic::AtomicU32;

loom::thread_local! {
    static OWED: core::cell::Cell<*const AtomicU32> = core::cell::Cell::new(core::ptr::null());
}

/// The word this thread sleeps on (what a signal handler's wrapper would pass on).
pub fn owed_word() -> *const AtomicU32 {
    OWED.with(|o| o.get())
}

/// Records the word this thread is about to sleep on.
pub fn set_owed_word(w: &AtomicU32) {
    OWED.with(|o| o.set(w));
}

/// Records a value read by [`owed_word`].
pub fn set_owed_word_ptr(w: *const AtomicU32) {
    OWED.with(|o| o.set(w));
}

/// errno: not read by the models.
pub fn errno() -> i32 {
    0
}

/// errno: not read by the models.
pub fn set_errno(_: i32) {}
