//! Unlock paths exported under fixed symbol names, so `.ci/check-unlock-asm.sh` can disassemble them
//! from a release build and check which ones contain a `lock`-prefixed instruction.
//! Run it to see the symbols exist: `cargo run --release -p locklab --example unlock_asm`.

use locklab::raw::{PercpuReadToken, RawMutex, RawPercpuRwSem, RawQueuedSpinLock, RawTicketLock};

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

/// PercpuRwSem read lock: no locked instruction and no fence on the fast path.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn locklab_asm_percpu_read_lock(l: &RawPercpuRwSem) -> PercpuReadToken {
    l.read()
}

/// PercpuRwSem read unlock: no locked instruction and no fence on the fast path.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn locklab_asm_percpu_read_unlock(l: &RawPercpuRwSem, t: PercpuReadToken) {
    // SAFETY: only called below, with the token of this thread's read lock.
    unsafe { l.read_unlock(t) }
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
    let p = RawPercpuRwSem::new();
    let r = locklab_asm_percpu_read_lock(&p);
    assert!(p.try_write().is_none());
    locklab_asm_percpu_read_unlock(&p, r);
    assert!(!t.is_locked() && !q.is_locked() && !m.is_locked() && !p.is_locked());
    println!(
        "locklab_asm_{{ticket_unlock, qspinlock_unlock, mutex_unlock, percpu_read_lock, percpu_read_unlock}}: ok"
    );
}
