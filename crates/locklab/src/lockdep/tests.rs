//! The validator's rules on synthetic objects (addresses that are only names), each test with
//! classes of its own so that tests running in parallel do not see each other's reports.

use super::*;

fn class(name: &'static LockClass) -> u32 {
    set_mode(Action::Report);
    name.id()
}

fn count(kind: ReportKind, a: &str, b: &str) -> usize {
    reports()
        .iter()
        .filter(|r| {
            r.kind == kind
                && r.classes.iter().any(|c| c.contains(a))
                && r.classes.iter().any(|c| c.contains(b))
        })
        .count()
}

#[track_caller]
fn lock(obj: usize, c: u32) {
    acquire(obj, c, Mode::Write, Site::caller(), Flags::NONE);
}
#[track_caller]
fn unlock(obj: usize) {
    assert!(release(obj, Site::caller()));
}

#[test]
fn ab_ba_in_threads_that_never_overlap() {
    static A: LockClass = LockClass::new("t-abba-a");
    static B: LockClass = LockClass::new("t-abba-b");
    let (a, b) = (class(&A), class(&B));
    std::thread::spawn(move || {
        lock(0x100, a);
        lock(0x200, b);
        unlock(0x200);
        unlock(0x100);
    })
    .join()
    .unwrap();
    assert_eq!(count(ReportKind::Cycle, "t-abba-a", "t-abba-b"), 0);
    std::thread::spawn(move || {
        lock(0x200, b);
        lock(0x100, a);
        unlock(0x100);
        unlock(0x200);
    })
    .join()
    .unwrap();
    assert_eq!(count(ReportKind::Cycle, "t-abba-a", "t-abba-b"), 1);
    // Seen again: not reported again.
    lock(0x200, b);
    lock(0x100, a);
    unlock(0x100);
    unlock(0x200);
    assert_eq!(count(ReportKind::Cycle, "t-abba-a", "t-abba-b"), 1);
}

#[test]
fn three_lock_cycle_and_consistent_orders() {
    static A: LockClass = LockClass::new("t-c3-a");
    static B: LockClass = LockClass::new("t-c3-b");
    static C: LockClass = LockClass::new("t-c3-c");
    let (a, b, c) = (class(&A), class(&B), class(&C));
    for (x, y) in [(a, b), (b, c), (a, c), (a, b)] {
        lock(0x10 + x as usize, x);
        lock(0x10 + y as usize, y);
        unlock(0x10 + y as usize);
        unlock(0x10 + x as usize);
    }
    assert_eq!(
        count(ReportKind::Cycle, "t-c3-a", "t-c3-c"),
        0,
        "consistent: a<b<c"
    );
    lock(0x10 + c as usize, c);
    lock(0x10 + a as usize, a);
    unlock(0x10 + a as usize);
    unlock(0x10 + c as usize);
    assert_eq!(count(ReportKind::Cycle, "t-c3-c", "t-c3-a"), 1);
}

#[test]
fn trylock_inversions_add_nothing() {
    static A: LockClass = LockClass::new("t-try-a");
    static B: LockClass = LockClass::new("t-try-b");
    let (a, b) = (class(&A), class(&B));
    lock(0x300, a);
    lock(0x400, b);
    unlock(0x400);
    unlock(0x300);
    lock(0x400, b);
    acquire(0x300, a, Mode::Write, Site::caller(), Flags::TRY);
    unlock(0x300);
    unlock(0x400);
    assert_eq!(count(ReportKind::Cycle, "t-try-a", "t-try-b"), 0);
}

#[test]
fn recursive_readers_do_not_cycle_but_writer_preferring_ones_do() {
    static A: LockClass = LockClass::new("t-rr-a");
    static B: LockClass = LockClass::new("t-rr-b");
    let (a, b) = (class(&A), class(&B));
    // read(A) -> B, then B -> read(A): recursive readers of A never wait for a writer, and B's
    // holder only reads A: no deadlock.
    acquire(0x500, a, Mode::RecursiveRead, Site::caller(), Flags::NONE);
    lock(0x600, b);
    unlock(0x600);
    unlock(0x500);
    lock(0x600, b);
    acquire(0x500, a, Mode::RecursiveRead, Site::caller(), Flags::NONE);
    unlock(0x500);
    unlock(0x600);
    assert_eq!(count(ReportKind::Cycle, "t-rr-a", "t-rr-b"), 0);
    // A writer of A under B closes it: B -> A(write), A(read) -> B.
    lock(0x600, b);
    lock(0x500, a);
    unlock(0x500);
    unlock(0x600);
    assert_eq!(count(ReportKind::Cycle, "t-rr-a", "t-rr-b"), 1);
}

#[test]
fn writer_preferring_read_ab_ba() {
    static A: LockClass = LockClass::new("t-wp-a");
    static B: LockClass = LockClass::new("t-wp-b");
    let (a, b) = (class(&A), class(&B));
    acquire(0x700, a, Mode::Read, Site::caller(), Flags::NONE);
    lock(0x800, b);
    unlock(0x800);
    unlock(0x700);
    lock(0x800, b);
    acquire(0x700, a, Mode::Read, Site::caller(), Flags::NONE);
    unlock(0x700);
    unlock(0x800);
    assert_eq!(count(ReportKind::Cycle, "t-wp-a", "t-wp-b"), 1);
}

#[test]
fn recursive_read_of_a_writer_preferring_class() {
    static A: LockClass = LockClass::new("t-rrw-a");
    let a = class(&A);
    acquire(0x900, a, Mode::Read, Site::caller(), Flags::NONE);
    acquire(0x900, a, Mode::Read, Site::caller(), Flags::NONE);
    unlock(0x900);
    unlock(0x900);
    assert_eq!(
        count(ReportKind::RecursiveRead, "t-rrw-a", "t-rrw-a"),
        1,
        "reported at once: the writer may come in another run"
    );
    lock(0x900, a);
    unlock(0x900);
    assert_eq!(
        count(ReportKind::RecursiveRead, "t-rrw-a", "t-rrw-a"),
        1,
        "once"
    );
    // Recursive readers may nest.
    static B: LockClass = LockClass::new("t-rrw-b");
    let b = class(&B);
    lock(0x901, b);
    unlock(0x901);
    acquire(0x901, b, Mode::RecursiveRead, Site::caller(), Flags::NONE);
    acquire(0x901, b, Mode::RecursiveRead, Site::caller(), Flags::NONE);
    unlock(0x901);
    unlock(0x901);
    assert_eq!(count(ReportKind::RecursiveRead, "t-rrw-b", "t-rrw-b"), 0);
}

#[test]
fn recursion_and_relock_rules() {
    static A: LockClass = LockClass::new("t-rec-a");
    static B: LockClass = LockClass::new("t-rec-b");
    let (a, b) = (class(&A), class(&B));
    lock(0xa00, a);
    acquire(0xa00, a, Mode::Write, Site::caller(), Flags::RECURSIVE);
    unlock(0xa00);
    unlock(0xa00);
    assert!(!holds(0xa00));
    lock(0xa00, a);
    acquire(0xa00, a, Mode::Write, Site::caller(), Flags::RELOCK_ERRORS);
    forget(0xa00);
    unlock(0xa00);
    assert_eq!(count(ReportKind::Recursion, "t-rec-a", "t-rec-a"), 0);
    lock(0xb00, b);
    lock(0xb00, b);
    unlock(0xb00);
    unlock(0xb00);
    assert_eq!(count(ReportKind::Recursion, "t-rec-b", "t-rec-b"), 1);
}

#[test]
fn same_class_instances() {
    static S: LockClass = LockClass::new("t-same");
    let s = class(&S);
    // Many instances one at a time, and nested in one order: nothing.
    for i in 0..100 {
        lock(0xc000 + i, s);
        unlock(0xc000 + i);
    }
    for i in 0..10 {
        lock(0xc000 + i, s);
        lock(0xc000 + i + 1, s);
        unlock(0xc000 + i + 1);
        unlock(0xc000 + i);
    }
    assert_eq!(count(ReportKind::SameClassOrder, "t-same", "t-same"), 0);
    lock(0xc001, s);
    lock(0xc000, s);
    unlock(0xc000);
    unlock(0xc001);
    assert_eq!(count(ReportKind::SameClassOrder, "t-same", "t-same"), 1);
    // A destroyed instance takes its orders with it.
    lock(0xc005, s);
    lock(0xc006, s);
    unlock(0xc006);
    unlock(0xc005);
    destroyed(0xc005, Site::caller());
    destroy_done(0xc005);
    lock(0xc006, s);
    lock(0xc005, s);
    unlock(0xc005);
    unlock(0xc006);
    assert_eq!(count(ReportKind::SameClassOrder, "t-same", "t-same"), 1);
}

#[test]
fn rcu_synchronize_rules() {
    static D: LockClass = LockClass::new("t-rcu-domain");
    static L: LockClass = LockClass::new("t-rcu-lock");
    let (d, l) = (class(&D), class(&L));
    // A reader takes L; an updater holds L across synchronize.
    acquire(0xd00, d, Mode::RecursiveRead, Site::caller(), Flags::NONE);
    lock(0xe00, l);
    unlock(0xe00);
    unlock(0xd00);
    lock(0xe00, l);
    acquire(0xd00, d, Mode::Write, Site::caller(), Flags::NONE);
    unlock(0xd00);
    unlock(0xe00);
    assert_eq!(count(ReportKind::Cycle, "t-rcu-domain", "t-rcu-lock"), 1);
    // synchronize inside a reader of the same domain.
    static D2: LockClass = LockClass::new("t-rcu-d2");
    let d2 = class(&D2);
    acquire(0xd01, d2, Mode::RecursiveRead, Site::caller(), Flags::NONE);
    acquire(0xd01, d2, Mode::Write, Site::caller(), Flags::NONE);
    unlock(0xd01);
    unlock(0xd01);
    assert_eq!(count(ReportKind::Recursion, "t-rcu-d2", "t-rcu-d2"), 1);
}

#[test]
fn misuse_and_condvar_warnings() {
    static A: LockClass = LockClass::new("t-mis-a");
    static M: LockClass = LockClass::new("t-mis-m");
    let (a, m) = (class(&A), class(&M));
    unlock_not_held(0xf00, a, Site::caller());
    assert_eq!(count(ReportKind::UnlockNotHeld, "t-mis-a", "t-mis-a"), 1);
    lock(0xf00, a);
    destroyed(0xf00, Site::caller());
    assert_eq!(count(ReportKind::DestroyHeld, "t-mis-a", "t-mis-a"), 1);
    assert!(holds(0xf00), "a destroy that fails (EBUSY) leaves it held");
    destroy_done(0xf00);
    assert!(!holds(0xf00));
    lock(0xf10, a);
    lock(0xf20, m);
    cond_wait(0xf30, 0xf20, Site::caller());
    unlock(0xf20);
    unlock(0xf10);
    assert_eq!(count(ReportKind::CondWaitHolding, "t-mis-a", "t-mis-m"), 1);
    std::thread::spawn(move || {
        lock(0xf40, a);
        thread_exit();
    })
    .join()
    .unwrap();
    assert_eq!(count(ReportKind::ExitHolding, "t-mis-a", "t-mis-a"), 1);
}

#[test]
fn released_by_another_thread_is_not_held() {
    static A: LockClass = LockClass::new("t-else-a");
    static B: LockClass = LockClass::new("t-else-b");
    let (a, b) = (class(&A), class(&B));
    lock(0x1100, a);
    std::thread::spawn(|| assert!(!release(0x1100, Site::caller())))
        .join()
        .unwrap();
    lock(0x1200, b);
    unlock(0x1200);
    // The next order b -> a would be a cycle only if a had still been held.
    lock(0x1200, b);
    lock(0x1100, a);
    unlock(0x1100);
    unlock(0x1200);
    assert_eq!(count(ReportKind::Cycle, "t-else-a", "t-else-b"), 0);
}

#[test]
fn signal_handler_rule() {
    static A: LockClass = LockClass::new("t-sig-a");
    let a = class(&A);
    signal_handler(10, || {
        lock(0x1300, a);
        unlock(0x1300);
    });
    lock(0x1300, a);
    unlock(0x1300);
    #[cfg(unix)]
    assert_eq!(count(ReportKind::SignalUnsafe, "t-sig-a", "t-sig-a"), 1);
}

/// Blocks (or unblocks) signal `sig` on this thread.
#[cfg(unix)]
fn block(sig: i32, on: bool) {
    // SAFETY: a valid set, built and passed to this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        let how = if on {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, core::ptr::null_mut());
    }
}

#[cfg(unix)]
#[test]
fn every_hold_counts_for_the_signal_rule() {
    // Held with the signal blocked first, unblocked later: the later hold counts.
    static B: LockClass = LockClass::new("t-sig-later");
    let b = class(&B);
    watch_signal(40);
    block(40, true);
    lock(0x1310, b);
    unlock(0x1310);
    block(40, false);
    signal_handler(40, || {
        lock(0x1310, b);
        unlock(0x1310);
    });
    assert_eq!(
        count(ReportKind::SignalUnsafe, "t-sig-later", "t-sig-later"),
        0
    );
    lock(0x1310, b);
    unlock(0x1310);
    assert_eq!(
        count(ReportKind::SignalUnsafe, "t-sig-later", "t-sig-later"),
        1
    );
    // Held unblocked only before the signal had a handler, blocked since: safe.
    static C: LockClass = LockClass::new("t-sig-before");
    let c = class(&C);
    lock(0x1320, c);
    unlock(0x1320);
    watch_signal(41);
    signal_handler(41, || {
        lock(0x1320, c);
        unlock(0x1320);
    });
    block(41, true);
    for _ in 0..3 {
        lock(0x1320, c);
        unlock(0x1320);
    }
    block(41, false);
    assert_eq!(
        count(ReportKind::SignalUnsafe, "t-sig-before", "t-sig-before"),
        0
    );
}

#[test]
fn json_is_an_array_of_reports() {
    static A: LockClass = LockClass::new("t-json-a");
    static B: LockClass = LockClass::new("t-json-b");
    let (a, b) = (class(&A), class(&B));
    lock(0x1400, a);
    lock(0x1500, b);
    unlock(0x1500);
    unlock(0x1400);
    lock(0x1500, b);
    lock(0x1400, a);
    unlock(0x1400);
    unlock(0x1500);
    let j = reports_json();
    assert!(j.contains("\"kind\":\"circular-dependency\""));
    assert!(j.contains("t-json-a") && j.contains("t-json-b"));
    assert!(j.contains("tests.rs"), "sites are source locations: {j}");
}

#[test]
fn five_philosophers_of_one_class() {
    static F: LockClass = LockClass::new("t-fork");
    let f = class(&F);
    let fork = |i: usize| 0x2_0000 + (i % 5) * 40;
    for i in 0..4 {
        std::thread::spawn(move || {
            lock(fork(i), f);
            lock(fork(i + 1), f);
            unlock(fork(i + 1));
            unlock(fork(i));
        })
        .join()
        .unwrap();
    }
    assert_eq!(count(ReportKind::SameClassOrder, "t-fork", "t-fork"), 0);
    // The fifth takes fork 4, then fork 0: a cycle through all five.
    std::thread::spawn(move || {
        lock(fork(4), f);
        lock(fork(5), f);
        unlock(fork(5));
        unlock(fork(4));
    })
    .join()
    .unwrap();
    let r: Vec<_> = reports()
        .into_iter()
        .filter(|r| {
            r.kind == ReportKind::SameClassOrder && r.classes.iter().any(|c| c.contains("t-fork"))
        })
        .collect();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].text.matches("[seen]").count(), 4, "{}", r[0].text);
}

/// A fork child in which another thread was inside the validator at the fork (its lock held, what
/// it wrote maybe half done): `after_fork_child` turns the validator off there, frees its lock, and
/// the child's locks go on without it.
#[test]
#[cfg(unix)]
fn a_fork_child_with_the_validator_busy_turns_it_off() {
    static A: LockClass = LockClass::new("t-fork-busy");
    let a = class(&A);
    let g = graph().expect("the validator's tables");
    let status = crate::fork_tests::status_of_child(10, || {
        // As if a thread of the parent held it at the fork.
        g.lock.store(true, Ordering::Relaxed);
        after_fork_child();
        let off = !enabled() && !g.lock.load(Ordering::Relaxed);
        lock(0x3_0000, a);
        unlock(0x3_0000);
        off
    });
    assert!(crate::fork_tests::exited_0(status), "wait status {status}");
    assert!(enabled(), "the parent's validator is unchanged");
}

/// Accounts of one class, locked two at a time in address order (`transfer(lo, hi)` on random
/// pairs): the consistent order is never reported, and the work of checking new pairs grows about
/// linearly with the pairs, not with their square (each new pair used to search every pair seen).
#[test]
fn ordered_pairs_of_one_class_cost_about_linear_work() {
    static ACC: LockClass = LockClass::new("t-accounts");
    let c = class(&ACC);
    let run = |base: usize, n: usize, transfers: usize| -> u64 {
        let before = search_steps();
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
        for _ in 0..transfers {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (i, j) = ((x % n as u64) as usize, ((x >> 32) % n as u64) as usize);
            if i == j {
                continue;
            }
            let (lo, hi) = (base + i.min(j) * 64, base + i.max(j) * 64);
            lock(lo, c);
            lock(hi, c);
            unlock(hi);
            unlock(lo);
        }
        search_steps() - before
    };
    let small = run(0x4000_0000, 200, 2_000);
    let big = run(0x5000_0000, 1_600, 16_000);
    assert_eq!(
        count(ReportKind::SameClassOrder, "t-accounts", "t-accounts"),
        0
    );
    // Eight times the accounts and the transfers: about eight times the work (64 if quadratic).
    eprintln!("200 accounts: {small} steps, 1600: {big}");
    assert!(
        big < 24 * small.max(1_000),
        "200 accounts: {small} steps, 1600: {big}"
    );
    // An inversion among them is still found.
    lock(0x5000_0000, c);
    lock(0x5000_0000 + 64, c);
    unlock(0x5000_0000 + 64);
    unlock(0x5000_0000);
    lock(0x5000_0000 + 64, c);
    lock(0x5000_0000, c);
    unlock(0x5000_0000);
    unlock(0x5000_0000 + 64);
    assert_eq!(
        count(ReportKind::SameClassOrder, "t-accounts", "t-accounts"),
        1
    );
}

/// Locks that each have a class of their own (never-initialised objects: [`instance_class`]) taken
/// in a consistent order cost as little to check as one class's instances.
#[test]
#[cfg(unix)]
fn ordered_pairs_of_objects_with_classes_of_their_own_cost_about_linear_work() {
    set_mode(Action::Report);
    // In a child with a graph of its own, so that the steps are this test's only.
    let status = crate::fork_tests::status_of_child(60, || {
        GRAPH.store(core::ptr::null_mut(), Ordering::Relaxed);
        GRAPH_STATE.store(0, Ordering::Relaxed);
        // First a cycle that is no deadlock (readers of a reader-preferring lock, in both orders
        // with a mutex): the graph now has a cycle, and its order must still hold for the rest.
        static R: LockClass = LockClass::new("t-scc-r");
        static A: LockClass = LockClass::new("t-scc-a");
        let (r, a) = (R.id(), A.id());
        acquire(
            0x7_0000,
            r,
            Mode::RecursiveRead,
            Site::caller(),
            Flags::NONE,
        );
        lock(0x7_0100, a);
        unlock(0x7_0100);
        unlock(0x7_0000);
        lock(0x7_0100, a);
        acquire(
            0x7_0000,
            r,
            Mode::RecursiveRead,
            Site::caller(),
            Flags::NONE,
        );
        unlock(0x7_0000);
        unlock(0x7_0100);
        let quiet = reports().is_empty();
        let small = classes_of_their_own(200, 2_000);
        let big = classes_of_their_own(1_600, 16_000);
        eprintln!("200 objects: {small} steps, 1600: {big}");
        // A writer of R under A closes a real cycle inside the component.
        lock(0x7_0100, a);
        lock(0x7_0000, r);
        unlock(0x7_0000);
        unlock(0x7_0100);
        let cycles = reports()
            .iter()
            .filter(|x| x.kind == ReportKind::Cycle)
            .count();
        quiet && big < 24 * small.max(1_000) && cycles == 1 && reports().len() == 1
    });
    assert!(crate::fork_tests::exited_0(status), "wait status {status}");
}

/// `transfers` ordered transfers between `n` locks of classes of their own: the search steps.
#[cfg(unix)]
fn classes_of_their_own(n: usize, transfers: usize) -> u64 {
    {
        // Made in a scrambled order, so that their numbers (the order's start) are not the index order.
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ n as u64;
        let mut perm: Vec<usize> = (0..n).collect();
        for k in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            perm.swap(k, (x % (k as u64 + 1)) as usize);
        }
        let mut classes = vec![0u32; n];
        for &k in &perm {
            classes[k] = instance_class(Kind::Mutex, Site::caller());
        }
        let before = search_steps();
        for _ in 0..transfers {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (i, j) = ((x % n as u64) as usize, ((x >> 32) % n as u64) as usize);
            if i == j {
                continue;
            }
            let (lo, hi) = (i.min(j), i.max(j));
            lock(0x6000_0000 + lo * 64, classes[lo]);
            lock(0x6000_0000 + hi * 64, classes[hi]);
            unlock(0x6000_0000 + hi * 64);
            unlock(0x6000_0000 + lo * 64);
        }
        search_steps() - before
    }
}

/// A fork while another thread is inside the validator (its lock held for a while): the fork waits
/// for it (the validator's prepare handler), and the child's validator is on, with its lock free, and
/// adds new dependencies without waiting.
#[test]
#[cfg(unix)]
fn a_fork_while_another_thread_validates_gives_the_child_a_working_validator() {
    static A: LockClass = LockClass::new("t-fork-held-a");
    static B: LockClass = LockClass::new("t-fork-held-b");
    let (a, b) = (class(&A), class(&B));
    let g = graph().expect("the validator's tables");
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        assert!(g.lock());
        tx.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        g.unlock();
    });
    rx.recv().unwrap();
    let status = crate::fork_tests::status_of_child(10, || {
        let on = enabled() && !g.lock.load(Ordering::Relaxed);
        lock(0x4_0000, a);
        lock(0x4_0040, b);
        unlock(0x4_0040);
        unlock(0x4_0000);
        lock(0x4_0040, b);
        lock(0x4_0000, a);
        unlock(0x4_0000);
        unlock(0x4_0040);
        // The inversion's report itself is not asserted: under the parallel test run the report
        // store may already be full of other tests' reports. What the fork promises is that the
        // child's validator is on with its lock free, and that its new dependencies (which take
        // that lock) do not wait for a thread the child does not have (the alarm catches a wait).
        on && enabled()
    });
    holder.join().unwrap();
    assert!(crate::fork_tests::exited_0(status), "wait status {status}");
}
