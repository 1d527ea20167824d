//! The sleeping locks: the adaptive [`mutex`] and its [`condvar`], and what they share: the optimistic
//! spin queue (`osq`, one spinner at a time spins on the owner, the rest queue) and the FIFO wait list
//! (`wait_list`, sleepers in arrival order, woken by a futex each, with hand-off). `RwSem` (in `rw`)
//! builds on the same two.

pub mod condvar;
pub mod mutex;
pub(crate) mod osq;
#[cfg(not(loom))]
pub mod variants;
pub(crate) mod wait_list;
