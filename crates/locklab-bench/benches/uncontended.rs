//! `cargo bench`: the uncontended, single-thread cost of one lock+unlock (or get+put) for every
//! primitive and peer, with criterion: the standard second view next to `locklab bench`.

use criterion::{Criterion, criterion_group, criterion_main};
use locklab_bench::locks::{LockUnderTest, RefCountUnderTest, ours, peers};
use std::hint::black_box;

fn lock<L: LockUnderTest>(c: &mut Criterion, name: &str) {
    let l = L::new();
    c.bench_function(&format!("lock+unlock/{name}"), |b| {
        b.iter(|| l.exclusive(|d| black_box(d.words[0])))
    });
}

fn read<L: LockUnderTest>(c: &mut Criterion, name: &str) {
    let l = L::new();
    c.bench_function(&format!("read lock+unlock/{name}"), |b| {
        b.iter(|| l.shared(|d| black_box(d.words[0])))
    });
    // What a user's code sees: the read lock taken inside an ordinary function (not inlined into the
    // measuring loop), so nothing it looks up (the thread slot, the counter) is hoisted out of a loop.
    #[inline(never)]
    fn in_a_function<L: LockUnderTest>(l: &L) -> u64 {
        l.shared(|d| d.words[0])
    }
    c.bench_function(&format!("read lock+unlock in a function/{name}"), |b| {
        b.iter(|| black_box(in_a_function(black_box(&l))))
    });
}

fn count<R: RefCountUnderTest>(c: &mut Criterion, name: &str) {
    let r = R::new();
    c.bench_function(&format!("get+put/{name}"), |b| {
        b.iter(|| {
            r.get();
            r.put();
        })
    });
}

fn all(c: &mut Criterion) {
    lock::<ours::Tas>(c, "tas");
    lock::<ours::Ticket>(c, "ticket");
    lock::<ours::Mcs>(c, "mcs");
    lock::<ours::QSpin>(c, "qspinlock");
    lock::<ours::Mutex>(c, "mutex");
    lock::<peers::StdMutex>(c, "std-mutex");
    lock::<peers::PlMutex>(c, "parking-lot-mutex");
    lock::<peers::PlFairMutex>(c, "parking-lot-fair-mutex");
    lock::<peers::SpinMutex>(c, "spin-mutex");
    lock::<peers::SpinTicket>(c, "spin-ticket");
    lock::<peers::PthreadMutex>(c, "pthread-mutex");
    read::<ours::RwSpin>(c, "rwspinlock");
    read::<ours::RwSem>(c, "rwsem");
    read::<ours::PercpuRwSem>(c, "percpu-rwsem");
    read::<ours::Br>(c, "brlock");
    read::<ours::Seq>(c, "seqlock");
    read::<peers::StdRwLock>(c, "std-rwlock");
    read::<peers::PlRwLock>(c, "parking-lot-rwlock");
    read::<peers::PthreadRwLock>(c, "pthread-rwlock");
    read::<peers::CrossbeamSharded>(c, "crossbeam-sharded");
    count::<ours::LockRefCount>(c, "lockref");
    count::<ours::AtomicCount>(c, "atomic-count");
    count::<ours::SpinlockCount>(c, "spinlock-count");
    count::<peers::StdMutexCount>(c, "std-mutex-count");
    count::<peers::PlMutexCount>(c, "parking-lot-mutex-count");
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = all
}
criterion_main!(benches);
