//! The checks every critical section runs: the protected data and what a writer and a reader must
//! find in it (see the module docs of `torture`).

use super::*;

/// The protected data of every exclusive/shared lock under test.
#[derive(Default)]
pub struct Data {
    pub(super) owner: AtomicUsize,
    pub(super) readers: AtomicUsize,
    pub(super) a: AtomicU64,
    pub(super) b: AtomicU64,
}

/// A busy loop of about `n` spin hints (the critical section's work).
pub(super) fn work(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// The writer's checks, around a write of the canary (see the module docs).
pub fn write_section(d: &Data, me: usize, hold: Option<Duration>) -> Result<(), String> {
    let prev = d.owner.swap(me, Relaxed);
    if prev != 0 {
        return Err(format!("writer {me} entered while {prev} was inside"));
    }
    let r = d.readers.load(Relaxed);
    if r != 0 {
        d.owner.store(0, Relaxed);
        return Err(format!("writer {me} entered beside {r} reader(s)"));
    }
    let a = d.a.load(Relaxed);
    let b = d.b.load(Relaxed);
    if a != b {
        d.owner.store(0, Relaxed);
        return Err(format!("writer {me} found a torn canary {a}/{b}"));
    }
    d.a.store(a + 1, Relaxed);
    match hold {
        Some(t) => std::thread::sleep(t),
        None => work(20),
    }
    d.b.store(a + 1, Relaxed);
    let now = d.owner.swap(0, Relaxed);
    if now != me {
        return Err(format!("writer {me}: {now} took over mid-section"));
    }
    Ok(())
}

/// The reader's checks (see the module docs).
pub fn read_section(d: &Data) -> Result<(), String> {
    d.readers.fetch_add(1, Relaxed);
    let o = d.owner.load(Relaxed);
    let (a, b) = (d.a.load(Relaxed), d.b.load(Relaxed));
    work(10);
    let o2 = d.owner.load(Relaxed);
    d.readers.fetch_sub(1, Relaxed);
    if o != 0 || o2 != 0 {
        return Err(format!("reader beside writer {}", o.max(o2)));
    }
    if a != b {
        return Err(format!("reader saw a torn canary {a}/{b}"));
    }
    Ok(())
}

pub(super) const SEQ_WORDS: usize = 4;

pub(super) fn torn(v: &[u64; SEQ_WORDS]) -> Result<(), String> {
    if v.iter().all(|&x| x == v[0]) {
        Ok(())
    } else {
        Err(format!("seqlock reader accepted a torn value {v:?}"))
    }
}
