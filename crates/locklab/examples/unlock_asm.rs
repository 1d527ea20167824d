//! Unlock paths exported under fixed symbol names, so `.ci/check-unlock-asm.sh` can disassemble them
//! from a release build and check which ones contain a `lock`-prefixed instruction.
//! Run it to see the symbols exist: `cargo run --release -p locklab --example unlock_asm`.

use locklab::raw::{RawMutex, RawQueuedSpinLock, RawTicketLock};

/// Ticket unlock: must be a plain store.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn locklab_asm_ticket_unlock(l: &RawTicketLock) {
    // SAFETY: only called below, on a lock this thread holds.
    unsafe { l.unlock() }
}

/// Queued spinlock unlock: must be a plain store.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn locklab_asm_qspinlock_unlock(l: &RawQueuedSpinLock) {
    // SAFETY: only called below, on a lock this thread holds.
    unsafe { l.unlock() }
}

/// Control: the mutex unlock is an RMW (a `lock xadd`), so the checker must find a `lock` here; if it
/// does not, the check itself is broken.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn locklab_asm_mutex_unlock(l: &RawMutex, t: locklab::raw::MutexToken) {
    // SAFETY: only called below, with the token of the current acquisition.
    unsafe { l.unlock(t) }
}

fn main() {
    let t = RawTicketLock::new();
    t.lock();
    locklab_asm_ticket_unlock(&t);
    let q = RawQueuedSpinLock::new();
    q.lock();
    locklab_asm_qspinlock_unlock(&q);
    let m = RawMutex::new();
    let tok = m.lock();
    locklab_asm_mutex_unlock(&m, tok);
    assert!(!t.is_locked() && !q.is_locked() && !m.is_locked());
    println!(
        "locklab_asm_ticket_unlock, locklab_asm_qspinlock_unlock, locklab_asm_mutex_unlock: ok"
    );
}
