//! Conformance of the preload library: C programs (tests/c) that check the pthread and C11 contract
//! (every entry point, error code, kind, static initializer, clock and time-out; robust and
//! process-shared objects across fork; condvar wake-ups under load; recursive reads with a waiting
//! writer), a C++ program on the standard library's locks, and a stress program (more threads than
//! CPUs, a malloc that takes a mutex, locks before any constructor). Each program first runs under
//! glibc alone (so it tests the contract, not our implementation), then with the library under every
//! choice; with the library it also checks that the library really is the one answering.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;
use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

fn matrix(src: &str, name: &str, choices: &[Vec<(&str, &str)>]) {
    common::matrix(src, name, choices, LIMIT);
}

#[test]
fn mutexes() {
    matrix("mutex.c", "mutex_c", &mutex_choices());
}

#[test]
fn condvars_and_c11() {
    matrix("cond.c", "cond_c", &mutex_choices());
}

#[test]
fn rwlocks_and_spinlocks() {
    let mut choices = Vec::new();
    for rw in ["recursive-rwsem", "rwspinlock", "glibc"] {
        for spin in ["qspinlock", "ticket", "tas", "glibc"] {
            choices.push(vec![("LOCKLAB_RWLOCK", rw), ("LOCKLAB_SPIN", spin)]);
        }
    }
    matrix("rwlock.c", "rwlock_c", &choices);
}

/// Read locks to the limit under every rwlock choice: `EAGAIN`, then every hold given back.
#[test]
fn rwlock_read_hold_limit() {
    let choices: Vec<_> = ["recursive-rwsem", "rwspinlock", "glibc"]
        .into_iter()
        .map(|rw| vec![("LOCKLAB_RWLOCK", rw)])
        .collect();
    matrix("rw_read_limit.c", "rw_read_limit_c", &choices);
}

/// A read unlock leaves the rwlock alone once its hold is released (the next owner destroys and
/// reuses the memory), under every rwlock choice.
#[test]
fn rwlock_unlock_then_reuse() {
    let choices: Vec<_> = ["recursive-rwsem", "rwspinlock", "glibc"]
        .into_iter()
        .map(|rw| vec![("LOCKLAB_RWLOCK", rw)])
        .collect();
    matrix("rw_unlock_then_reuse.c", "rw_unlock_then_reuse_c", &choices);
}

#[test]
fn stress_early_locks_and_a_locking_malloc() {
    matrix("stress.c", "stress_c", &mutex_choices());
}

#[test]
fn cpp_standard_library_locks() {
    let mut choices = mutex_choices();
    choices.push(vec![("LOCKLAB_RWLOCK", "rwspinlock")]);
    matrix("std.cpp", "std_cpp", &choices);
}

/// Unwinding through the entry points (their unwind information): a profiler's `backtrace()` from
/// a signal handler reaches the caller from inside a lock or unlock, with one thread and with two.
#[test]
fn backtraces_through_the_entry_points() {
    let exe = compile_with("unwind.c", "unwind_c", &["-rdynamic"]);
    let out = run_limited(command(&exe, false, &[]), LIMIT);
    assert_ok(&out, "unwind_c under glibc alone");
    for env in mutex_choices() {
        let out = run_limited(command(&exe, true, &env), LIMIT);
        assert_ok(&out, &format!("unwind_c with the library, {env:?}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("0 failure(s)"), "unwind_c {env:?}: {text}");
    }
}

/// An unknown choice: one clear line on stderr, the default used, the program unharmed.
#[test]
fn an_unknown_choice_warns_once_and_uses_the_default() {
    let exe = compile("stress.c", "stress_unknown_c");
    let out = run_limited(
        command(
            &exe,
            true,
            &[("LOCKLAB_MUTEX", "bogus"), ("LOCKLAB_SPIN", "")],
        ),
        LIMIT,
    );
    assert_ok(&out, "unknown LOCKLAB_MUTEX");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().filter(|l| l.contains("LOCKLAB_MUTEX")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains(
            "unknown LOCKLAB_MUTEX (valid: adaptive|mcs|ticket|qspinlock|tas|glibc|glibc-adaptive, mutex for adaptive); using adaptive"
        ),
        "{err}"
    );
    assert!(
        !err.contains("LOCKLAB_SPIN"),
        "an empty value is the default: {err}"
    );
}
