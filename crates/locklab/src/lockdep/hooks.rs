//! The validator's hook interface: the calls a lock implementation makes from its lock, trylock and
//! unlock paths, for embedders that check locks the library's `lockdep` feature does not see.
//!
//! `liblocklab_pthread.so` is the embedder this interface is written for: its pthread and C11 entry
//! points name each object by its address, classify it ([`class_for_chain`], [`object_class_or_new`],
//! [`instance_class`]), and report each acquisition and release ([`acquire`], [`acquire_object`],
//! [`release`]), the misuse it sees ([`unlock_not_held`], [`destroyed`]), the signal handlers it
//! wraps ([`signal_enter`]) and the forks and thread exits it observes. A Rust program using the
//! library's locks calls none of this: the `lockdep` feature makes the locks call it, and the
//! program's own interface is the parent module ([`set_class`](super::set_class),
//! [`with_subclass`](super::with_subclass), [`reports`](super::reports)).
//!
//! Objects are plain addresses: any distinct values name distinct objects, and one object must keep
//! its address from its first acquisition until [`forget`], [`forget_object`] or [`destroy_done`].
//!
//! ```
//! # if cfg!(miri) { return; } // Miri: too slow for the validator's tables
//! use locklab::lockdep::{self, LockClass, hooks::{self, Flags, Mode, Site}};
//! static A: LockClass = LockClass::new("hooks-doc-a");
//! static B: LockClass = LockClass::new("hooks-doc-b");
//! lockdep::set_mode(lockdep::Action::Report);
//! let (a, b) = (A.id(), B.id());
//! let (oa, ob) = (1usize, 2usize); // any distinct addresses name the two objects
//! // One thread: a then b.
//! hooks::acquire(oa, a, Mode::Write, Site::caller(), Flags::NONE);
//! hooks::acquire(ob, b, Mode::Write, Site::caller(), Flags::NONE);
//! hooks::release(ob, Site::caller());
//! hooks::release(oa, Site::caller());
//! // Later, b then a: never deadlocked here, but it could have.
//! hooks::acquire(ob, b, Mode::Write, Site::caller(), Flags::NONE);
//! hooks::acquire(oa, a, Mode::Write, Site::caller(), Flags::NONE);
//! hooks::release(oa, Site::caller());
//! hooks::release(ob, Site::caller());
//! let named = |r: &lockdep::Report, n: &str| r.classes.iter().any(|c| c.contains(n));
//! assert!(lockdep::reports().iter().any(|r| r.kind == lockdep::ReportKind::Cycle
//!     && named(r, "hooks-doc-a") && named(r, "hooks-doc-b")));
//! ```

// Classes.
pub use super::classes::{Kind, Origin, class_for, class_for_chain, instance_class, subclass_of};
// The object table.
pub use super::objects::{
    acquire_object, forget_object, forget_range, object_class, object_class_or_new,
    set_object_class,
};
// The held stack: acquisitions, releases and misuse.
pub use super::held::{
    Flags, Mode, acquire, cond_wait, destroy_done, destroyed, forget, held_count, holds, release,
    release_owned, set_exit_hook, thread_exit, unlock_free, unlock_not_held,
};
// The search's work counter.
pub use super::graph::search_steps;
// Signal handlers.
pub use super::signals::{
    signal_enter, signal_handler, signal_leave, signal_mask_changed, track_signal_mask,
    watch_signal,
};
// Fork.
pub use super::fork::{after_fork_child, install_fork_handlers};
// Reports: where they go, and how sites are named.
pub use super::report::{Site, set_address_formatter};
#[cfg(unix)]
pub use super::report::{set_abort_hook, write_json_fd};
