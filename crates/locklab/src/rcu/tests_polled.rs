//! Polled grace periods in every flavour, and `call_srcu` / QSBR `call_rcu` waiting for their
//! readers.

use super::tests_regressions::within;
use super::*;

/// The polled calls on all three flavours: a cookie is not done before a grace period that started
/// after it ended, is after, and `cond_synchronize` waits only when needed.
#[test]
fn polled_grace_periods_in_every_flavour() {
    static D: RcuDomain = RcuDomain::new();
    static Q: QsbrDomain = QsbrDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    let c = D.get_state_synchronize();
    assert!(!D.poll_state_synchronize(c));
    D.synchronize();
    assert!(D.poll_state_synchronize(c));
    let before = D.grace_periods();
    D.cond_synchronize(c);
    assert_eq!(
        D.grace_periods(),
        before,
        "no grace period for a done cookie"
    );
    let c = D.get_state_synchronize();
    D.cond_synchronize(c);
    assert!(D.poll_state_synchronize(c));

    let c = Q.get_state_synchronize();
    assert!(!Q.poll_state_synchronize(c));
    Q.cond_synchronize(c);
    assert!(Q.poll_state_synchronize(c));

    let c = S.get_state_synchronize();
    assert!(!S.poll_state_synchronize(c));
    S.cond_synchronize(c);
    assert!(S.poll_state_synchronize(c));
}

/// A polled grace period does not end while a reader that began before the cookie is inside, and
/// `start_poll_synchronize` ends it without anyone calling `synchronize`.
#[test]
#[cfg_attr(miri, ignore)] // no grace-period thread under Miri
fn start_poll_waits_for_earlier_readers_and_completes_alone() {
    static D: RcuDomain = RcuDomain::new();
    static S: SrcuDomain = SrcuDomain::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let (tx2, rx2) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let g = D.read_lock();
        let s = S.read_lock();
        tx.send(()).unwrap();
        rx2.recv().unwrap();
        drop((g, s));
    });
    rx.recv().unwrap();
    let c = D.start_poll_synchronize();
    let cs = S.start_poll_synchronize();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !D.poll_state_synchronize(c),
        "ended under an earlier reader"
    );
    assert!(
        !S.poll_state_synchronize(cs),
        "ended under an earlier reader"
    );
    tx2.send(()).unwrap();
    reader.join().unwrap();
    within(
        Duration::from_secs(30),
        "a started polled grace period",
        move || {
            while !D.poll_state_synchronize(c) || !S.poll_state_synchronize(cs) {
                std::thread::sleep(Duration::from_millis(1));
            }
        },
    );
}

#[test]
#[should_panic(expected = "another domain")]
fn a_cookie_of_another_domain_panics() {
    static A: RcuDomain = RcuDomain::new();
    static B: RcuDomain = RcuDomain::new();
    let c = A.get_state_synchronize();
    let _ = B.poll_state_synchronize(c);
}

/// call_srcu waits for a sleeping SRCU reader; QSBR call_rcu for an online thread's quiescent state.
#[test]
fn call_srcu_and_qsbr_call_rcu_wait_for_their_readers() {
    static S: SrcuDomain = SrcuDomain::new();
    static Q: QsbrDomain = QsbrDomain::new();
    static RAN_S: AtomicBool = AtomicBool::new(false);
    static RAN_Q: AtomicBool = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let (tx2, rx2) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut me = Q.register();
        let g = S.read_lock();
        tx.send(()).unwrap();
        rx2.recv().unwrap();
        assert!(
            !RAN_S.load(Ordering::SeqCst),
            "call_srcu ran under a reader"
        );
        assert!(
            !RAN_Q.load(Ordering::SeqCst),
            "call_rcu ran before our quiescent state"
        );
        drop(g);
        me.quiescent_state();
        drop(me);
    });
    rx.recv().unwrap();
    S.call_srcu(|| RAN_S.store(true, Ordering::SeqCst));
    Q.call_rcu(|| RAN_Q.store(true, Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
    tx2.send(()).unwrap();
    reader.join().unwrap();
    S.srcu_barrier();
    Q.rcu_barrier();
    assert!(RAN_S.load(Ordering::SeqCst) && RAN_Q.load(Ordering::SeqCst));
}
