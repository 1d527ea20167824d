//! An [`OsqNode`]: one spinner's place in an OSQ, kept apart from the queue's protocol so that the
//! thread slots that own the nodes ([`crate::thread_slot`]) and the queue that names them by slot
//! do not import each other.

use crate::primitive::{AtomicBool, AtomicPtr};
use core::ptr;

/// One spinner's place in an [`Osq`].
#[repr(align(64))]
pub struct OsqNode {
    pub(super) next: AtomicPtr<OsqNode>,
    pub(super) prev: AtomicPtr<OsqNode>,
    pub(super) locked: AtomicBool,
    /// The value `tail` holds when this node is last: set once, before the node is ever queued
    /// (by its slot's creation, or `register` under loom), never 0 for a queued node.
    pub(super) id: core::sync::atomic::AtomicU32,
}

impl OsqNode {
    /// A fresh node.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        OsqNode {
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
            id: core::sync::atomic::AtomicU32::new(0),
        }
    }

    /// A fresh node with the given id (a thread slot's index plus one).
    #[cfg(not(loom))]
    pub const fn with_id(id: u32) -> Self {
        OsqNode {
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
            id: core::sync::atomic::AtomicU32::new(id),
        }
    }

    /// A fresh node (loom atomics cannot be built in const context).
    #[cfg(loom)]
    pub fn new() -> Self {
        OsqNode {
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
            id: core::sync::atomic::AtomicU32::new(0),
        }
    }

    pub(super) fn as_ptr(&self) -> *mut OsqNode {
        self as *const OsqNode as *mut OsqNode
    }

    /// The id `tail` names this node by (Relaxed: set before the node was first handed to a queue, by
    /// the thread that queues it, or published with the slot's Release store).
    pub(super) fn id(&self) -> u32 {
        self.id.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Gives a model's node an id (loom: nodes live in the model's own memory, not in thread slots).
    #[cfg(loom)]
    pub fn register(&'static self) {
        let mut nodes = LOOM_NODES.lock().unwrap();
        nodes.push(self.as_ptr() as usize);
        self.id
            .store(nodes.len() as u32, core::sync::atomic::Ordering::Relaxed);
    }
}

/// Loom's id table: index `id - 1` holds a registered node's address (never freed while a model runs).
#[cfg(loom)]
pub(super) static LOOM_NODES: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
