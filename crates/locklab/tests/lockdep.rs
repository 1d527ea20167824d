//! Lockdep over the library's own locks (the `lockdep` feature): potential deadlocks reported from
//! runs where nothing deadlocked, with the source locations of every acquisition; good orders not.
//! Each test uses locks of its own, so tests running in parallel do not see each other's reports.
#![cfg(feature = "lockdep")]

use locklab::lockdep::{self, LockClass, ReportKind};
use locklab::{Mutex, RecursiveRwSem, RwSem, TicketLock};

/// Reports of `kind` whose text mentions `needle` (a class name or a source line).
fn reports(kind: ReportKind, needle: &str) -> Vec<lockdep::Report> {
    lockdep::reports()
        .into_iter()
        .filter(|r| r.kind == kind && r.text.contains(needle))
        .collect()
}

#[test]
fn ab_ba_between_threads_that_never_overlap() {
    static A: Mutex<u32> = Mutex::new(0);
    static B: Mutex<u32> = Mutex::new(0);
    let before = lockdep::reports().len();
    std::thread::spawn(|| {
        let _a = A.lock();
        let _b = B.lock();
    })
    .join()
    .unwrap();
    std::thread::spawn(|| {
        let _b = B.lock();
        let _a = A.lock(); // line of interest
    })
    .join()
    .unwrap();
    let r = reports(ReportKind::Cycle, "tests/lockdep.rs");
    assert!(lockdep::reports().len() > before);
    assert!(
        r.iter()
            .any(|r| r.text.matches("tests/lockdep.rs:").count() >= 6),
        "every acquisition named by its source line: {r:#?}"
    );
}

#[test]
fn an_inversion_of_two_locks_in_one_helper() {
    // Two instances of one "kind" of object, locked in one helper: both orders of the pair are an
    // AB-BA of instances within the class.
    struct Account {
        m: Mutex<i64>,
    }
    fn transfer(from: &Account, to: &Account) {
        let _f = from.m.lock();
        let _t = to.m.lock();
    }
    let (x, y) = (Account { m: Mutex::new(1) }, Account { m: Mutex::new(2) });
    transfer(&x, &y);
    let before = lockdep::reports().len();
    transfer(&y, &x);
    let after: Vec<_> = lockdep::reports().into_iter().skip(before).collect();
    assert!(
        after
            .iter()
            .any(|r| r.kind == ReportKind::Cycle || r.kind == ReportKind::SameClassOrder),
        "{after:#?}"
    );
}

#[test]
fn a_vec_of_locks_taken_two_at_a_time_in_index_order_is_not_a_cycle() {
    // Each lock is first taken by whichever of the two acquisitions below reached it first; a class
    // per first-acquisition site would make 1 -> 2 (second site -> first site) close a cycle with
    // 0 -> 1 (first site -> second site).
    struct Account {
        m: Mutex<i64>,
    }
    #[rustfmt::skip]
    fn transfer(v: &[Account], i: usize, j: usize) -> u32 {
        let (lo, hi) = (i.min(j), i.max(j));
        let mut a = v[lo].m.lock(); let mut b = v[hi].m.lock(); *a -= 1; *b += 1; line!()
    }
    let v: Vec<Account> = (0..64).map(|_| Account { m: Mutex::new(0) }).collect();
    let mut line = transfer(&v, 0, 1);
    transfer(&v, 2, 3);
    transfer(&v, 1, 2);
    let mut x = 7u64;
    for _ in 0..2000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        let (i, j) = ((x >> 33) as usize % 64, (x >> 45) as usize % 64);
        if i != j {
            line = transfer(&v, i, j);
        }
    }
    let here = format!("tests/lockdep.rs:{line}:");
    let bad: Vec<_> = lockdep::reports()
        .into_iter()
        .filter(|r| r.text.contains(&here))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(v.iter().map(|a| *a.m.lock()).sum::<i64>(), 0);
    // The same helper with the order reversed for one pair is an inversion of those two locks.
    #[rustfmt::skip]
    fn unordered(v: &[Account], i: usize, j: usize) -> u32 {
        let _a = v[i].m.lock(); let _b = v[j].m.lock(); line!()
    }
    unordered(&v, 5, 6);
    let line = unordered(&v, 6, 5);
    let here = format!("tests/lockdep.rs:{line}:");
    assert!(
        reports(ReportKind::Cycle, &here).len() == 1,
        "{:#?}",
        lockdep::reports()
    );
}

#[test]
fn named_classes_and_consistent_orders() {
    static OUTER: LockClass = LockClass::new("lib-outer");
    static INNER: LockClass = LockClass::new("lib-inner");
    let outers: Vec<_> = (0..8).map(|_| TicketLock::new(())).collect();
    let inners: Vec<_> = (0..8).map(|_| Mutex::new(())).collect();
    for (o, i) in outers.iter().zip(&inners) {
        lockdep::set_class(o, &OUTER);
        lockdep::set_class(i, &INNER);
    }
    for (o, i) in outers.iter().zip(&inners) {
        let _o = o.lock();
        let _i = i.lock();
    }
    // Many instances of one class, one at a time.
    for i in &inners {
        drop(i.lock());
    }
    assert!(reports(ReportKind::Cycle, "lib-outer").is_empty());
    assert!(reports(ReportKind::SameClassOrder, "lib-inner").is_empty());
    // Now the opposite order on a fresh pair of the same classes.
    let (o, i) = (TicketLock::new(()), Mutex::new(()));
    lockdep::set_class(&o, &OUTER);
    lockdep::set_class(&i, &INNER);
    let _i = i.lock();
    let _o = o.lock();
    assert_eq!(reports(ReportKind::Cycle, "lib-outer").len(), 1);
}

#[test]
fn trylock_inversions_add_nothing() {
    static A: LockClass = LockClass::new("lib-try-a");
    static B: LockClass = LockClass::new("lib-try-b");
    let (a, b) = (Mutex::new(()), Mutex::new(()));
    lockdep::set_class(&a, &A);
    lockdep::set_class(&b, &B);
    {
        let _a = a.lock();
        let _b = b.lock();
    }
    {
        let _b = b.lock();
        let _a = a.try_lock().unwrap();
    }
    assert!(reports(ReportKind::Cycle, "lib-try-a").is_empty());
}

#[test]
fn recursive_read_of_a_writer_preferring_rwsem() {
    static S: LockClass = LockClass::new("lib-rwsem");
    static R: LockClass = LockClass::new("lib-recursive-rwsem");
    let s = RwSem::new(0);
    let r = RecursiveRwSem::new(0);
    lockdep::set_class(&s, &S);
    lockdep::set_class(&r, &R);
    {
        let _g1 = r.read();
        let _g2 = r.read(); // fine: readers never wait for a queued writer
    }
    drop(r.write());
    {
        let _g1 = s.read();
        let _g2 = s.read(); // a writer queued between the two would deadlock
    }
    drop(s.write());
    assert_eq!(reports(ReportKind::RecursiveRead, "lib-rwsem").len(), 1);
    assert!(reports(ReportKind::RecursiveRead, "lib-recursive-rwsem").is_empty());
}

#[test]
fn rcu_synchronize_under_a_lock_also_taken_in_a_reader() {
    use locklab::rcu::RcuDomain;
    static D: RcuDomain = RcuDomain::new();
    static L: LockClass = LockClass::new("lib-rcu-lock");
    let l = Mutex::new(());
    lockdep::set_class(&l, &L);
    {
        let _r = D.read_lock();
        let _l = l.lock();
    }
    {
        let _l = l.lock();
        D.synchronize();
    }
    let r = reports(ReportKind::Cycle, "lib-rcu-lock");
    assert_eq!(r.len(), 1, "{r:#?}");
    assert!(r[0].text.contains("RCU"), "{}", r[0].text);
}

#[test]
fn rcu_synchronize_inside_a_reader_is_reported_before_it_panics() {
    use locklab::rcu::RcuDomain;
    static D: RcuDomain = RcuDomain::new();
    let r = std::panic::catch_unwind(|| {
        let _r = D.read_lock();
        D.synchronize();
    });
    assert!(r.is_err(), "the domain refuses it");
    assert!(
        lockdep::reports()
            .iter()
            .any(|r| r.kind == ReportKind::RcuSyncInReader && r.text.contains("tests/lockdep.rs"))
    );
}

#[test]
fn condvar_wait_holding_another_lock_is_a_warning() {
    static OTHER: LockClass = LockClass::new("lib-cv-other");
    let other = Mutex::new(());
    lockdep::set_class(&other, &OTHER);
    let m = Mutex::new(false);
    let cv = locklab::Condvar::new();
    let _o = other.lock();
    let mut g = m.lock();
    let _ = cv.wait_for(&mut g, std::time::Duration::from_millis(1));
    assert_eq!(
        reports(ReportKind::CondWaitHolding, "lib-cv-other").len(),
        1
    );
}

#[test]
fn nesting_annotations_order_one_class() {
    static NODE: LockClass = LockClass::new("lib-node");
    let (parent, child) = (Mutex::new(()), Mutex::new(()));
    lockdep::set_class(&parent, &NODE);
    lockdep::set_class(&child, &NODE);
    {
        let _p = parent.lock();
        let _c = lockdep::with_subclass(1, || child.lock());
    }
    {
        let _p = child.lock();
        let _c = lockdep::with_subclass(1, || parent.lock());
    }
    // Subclass 0 -> 1 both times: consistent.
    assert!(reports(ReportKind::Cycle, "lib-node").is_empty());
    assert!(reports(ReportKind::SameClassOrder, "lib-node").is_empty());
}

#[test]
fn guards_released_on_another_thread_are_not_held() {
    static A: LockClass = LockClass::new("lib-send-a");
    static B: LockClass = LockClass::new("lib-send-b");
    static MA: locklab::TasLock<()> = locklab::TasLock::new(());
    let b = Mutex::new(());
    lockdep::set_class(&MA, &A);
    lockdep::set_class(&b, &B);
    let g = MA.lock();
    // The spinlocks' guards are Send: released on another thread.
    std::thread::spawn(move || drop(g)).join().unwrap();
    // Taken again right away: not a recursion.
    drop(MA.lock());
    assert!(
        lockdep::reports()
            .iter()
            .all(|r| !(r.kind == ReportKind::Recursion && r.text.contains("lib-send-a"))),
        "a lock released on another thread is not held"
    );
    {
        let _b = b.lock();
        let _a = MA.lock();
    }
    {
        let _a = MA.lock();
        let _b2 = b.try_lock();
    }
    assert!(reports(ReportKind::Cycle, "lib-send-a").is_empty());
}
