//! The preload library under the programs a demanding user writes: each C program in tests/c
//! behaves correctly under glibc (it runs there first, so it tests the contract), then runs with the
//! library under every choice it concerns. Each names the defect it guards against in its header:
//! a cancelled condvar waiter that swallowed a signal, a condvar wake-up lost in a fork child, a condvar destroyed under a late waiter,
//! timed lockers that never got a busy lock, the atfork pattern with waiters queued, a
//! prefer-writer rwlock whose readers starved writers, a mutex used as a binary semaphore, and the
//! smaller deviations from glibc (past and absent deadlines, an unheld mutex in a wait, keys), and a
//! process-shared condvar shared with a process that does not have the library.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;
use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn matrix(src: &str, name: &str, choices: &[Vec<(&str, &str)>]) {
    common::matrix(src, name, choices, LIMIT);
}

#[test]
fn a_cancelled_condvar_waiter_passes_its_wake_up_on() {
    matrix("cond_cancel.c", "cond_cancel_c", &mutex_choices());
}

/// Every kind of condvar pair ping-pongs at once (mutex types x private, process-shared and across a
/// fork, a process-shared condvar with a private mutex x both clocks) and each must finish: a fork
/// that copied the library's process-shared-condvar shadow while another thread held it hung the
/// child's first broadcast.
#[test]
fn condvar_ping_pong_loses_no_wake_up_in_any_scenario() {
    matrix("cond_pingpong.c", "cond_pingpong_c", &mutex_choices());
}

#[test]
fn condvar_destroy_waits_for_a_late_woken_waiter_without_spinning() {
    matrix("cond_destroy.c", "cond_destroy_c", &mutex_choices());
}

#[test]
fn timed_locks_get_a_busy_mutex() {
    matrix("timed_busy.c", "timed_busy_c", &mutex_choices());
}

#[test]
fn a_mutex_used_as_a_binary_semaphore() {
    matrix("binary_sem.c", "binary_sem_c", &mutex_choices());
}

#[test]
fn the_atfork_pattern_with_waiters_queued() {
    let mut choices = mutex_choices();
    for spin in ["qspinlock", "ticket", "tas", "glibc"] {
        choices.push(vec![("LOCKLAB_SPIN", spin), ("FORK_QUEUED_SPIN", "1")]);
    }
    matrix("fork_queued.c", "fork_queued_c", &choices);
}

#[test]
fn prefer_writer_rwlocks_let_writers_in() {
    let choices: Vec<_> = ["rwsem", "rwspinlock", "glibc"]
        .iter()
        .map(|rw| vec![("LOCKLAB_RWLOCK", *rw)])
        .collect();
    matrix("rw_prefer_writer.c", "rw_prefer_writer_c", &choices);
}

#[test]
fn deadlines_unheld_mutexes_and_keys_as_glibc() {
    let mut choices = mutex_choices();
    choices.push(vec![("LOCKLAB_RWLOCK", "rwspinlock")]);
    choices.push(vec![("LOCKLAB_STAT", "/dev/null")]);
    matrix("deviations.c", "deviations_c", &choices);
    // The statistics went to /dev/null, which their dump must have written, never replaced.
    use std::os::unix::fs::FileTypeExt;
    let null = std::fs::metadata("/dev/null").unwrap().file_type();
    assert!(null.is_char_device(), "/dev/null is no longer a device");
}

#[test]
fn process_shared_condvars_work_with_a_process_without_the_library() {
    matrix("cond_pshared.c", "cond_pshared_c", &mutex_choices());
}

/// A signal handler that takes the mutex its thread is blocked on, and `siglongjmp` out of a blocked
/// lock: the choices with no queue (the default `adaptive`, `tas`) survive both, as glibc's does; the
/// queued spinlock choices cannot (docs/preload.md).
#[test]
fn signal_handlers_and_siglongjmp_in_a_blocked_lock() {
    let choices: Vec<_> = ["mutex", "tas", "glibc"]
        .iter()
        .map(|m| vec![("LOCKLAB_MUTEX", *m)])
        .collect();
    matrix("signal_lock.c", "signal_lock_c", &choices);
}

/// `siglongjmp` out of a lock just after the unlock woke the thread, another thread asleep behind
/// it and nobody else contending: the sleeper behind it still gets the free mutex (the handler
/// wrapper passes the wake-up on). Under the default choice only: glibc's own mutex leaves it asleep.
#[test]
fn a_wait_jumped_out_of_after_its_wake_up_strands_nobody() {
    matrix(
        "jump_out_of_wait.c",
        "jump_out_of_wait_c",
        &[vec![("LOCKLAB_MUTEX", "mutex")]],
    );
}

/// Installing handlers as glibc does, with the library's wrapper in between: a handler always runs
/// with the flags and mask installed with it while another installation replaces it, concurrent
/// installations report one chain of old actions, an action copied with the raw system call runs
/// its handler, and a handler that interrupts `malloc` after the program loaded libraries with
/// thread-locals returns (the wrapper reads its thread-local without `__tls_get_addr`, which may
/// allocate). Under every mutex choice; the last case without lockdep, whose own per-thread state
/// is a Rust thread-local (docs/lockdep.md).
#[test]
fn handlers_install_as_under_glibc() {
    let lib = compile_with("tls_lib.c", "libtls_lib.so", &["-shared", "-fPIC"]);
    let exe = compile("handler_install.c", "handler_install_c");
    let glibc = {
        let mut c = command(&exe, false, &[]);
        c.arg(&lib);
        run_limited(c, LIMIT)
    };
    assert_ok(&glibc, "handler_install under glibc alone");
    for mutex in ["mutex", "tas", "glibc"] {
        let mut c = command(&exe, true, &[("LOCKLAB_MUTEX", mutex)]);
        c.arg(&lib);
        let out = run_limited(c, LIMIT);
        assert_ok(&out, &format!("handler_install with the library, {mutex}"));
    }
    let out = run_limited(command(&exe, true, &[("LOCKLAB_LOCKDEP", "1")]), LIMIT);
    assert_ok(&out, "handler_install with lockdep");
}

/// The library runs every handler the program installs behind its wrapper: a C++ exception thrown
/// from a `SIGSEGV` handler still reaches the faulting code's `catch`, and `backtrace()` from a
/// handler reaches `main`, under every mutex choice and with lockdep; with lockdep off (the wrapper
/// jumps to the handler) on x86-64 the backtrace has glibc's depth.
#[test]
fn exceptions_and_backtraces_cross_the_handler_wrapper() {
    let exe = compile_with(
        "handler_throw.cpp",
        "handler_throw_cpp",
        &["-fnon-call-exceptions", "-rdynamic"],
    );
    let depth = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("depth ").map(str::to_owned))
    };
    let glibc = run_limited(command(&exe, false, &[]), LIMIT);
    assert_ok(&glibc, "handler_throw under glibc alone");
    let envs: [&[(&str, &str)]; 4] = [
        &[("LOCKLAB_MUTEX", "mutex")],
        &[("LOCKLAB_MUTEX", "tas")],
        &[("LOCKLAB_MUTEX", "glibc")],
        &[("LOCKLAB_MUTEX", "mutex"), ("LOCKLAB_LOCKDEP", "1")],
    ];
    for env in envs {
        let out = run_limited(command(&exe, true, env), LIMIT);
        assert_ok(&out, &format!("handler_throw with the library, {env:?}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("0 failure(s)"), "{env:?}: {text}");
        if cfg!(target_arch = "x86_64") && env.len() == 1 {
            assert_eq!(depth(&out), depth(&glibc), "backtrace depth, {env:?}");
        }
    }
}

/// A signal handler that leaves a blocked lock by `setcontext` (not glibc's `longjmp`), after which
/// the thread ends by `pthread_exit`, a `siglongjmp` or asynchronous cancellation: nothing of the
/// abandoned wait may be left where those walk (glibc's cleanup list).
#[test]
fn a_wait_left_by_setcontext_leaves_nothing_behind() {
    let choices: Vec<_> = ["mutex", "tas", "glibc"]
        .iter()
        .map(|m| vec![("LOCKLAB_MUTEX", *m)])
        .collect();
    matrix("setcontext_out.c", "setcontext_out_c", &choices);
}

/// Spinlocks in memory shared by two processes: private-marked ones (glibc's work there) under
/// `ticket` and `tas`, and shared-marked ones under every choice. The queued spinlock names its
/// waiters by their slot in one process, so a private-marked one shared between processes is not
/// supported (docs/preload.md); it no longer panics (a unit test in the library covers the foreign tail).
#[test]
fn spinlocks_in_memory_shared_by_processes() {
    let choices: Vec<_> = ["qspinlock", "ticket", "tas", "glibc"]
        .iter()
        .map(|s| vec![("LOCKLAB_SPIN", *s)])
        .collect();
    matrix("spin_shared.c", "spin_shared_c", &choices);
}

/// Plugins: a plugin found through the program's own RUNPATH still loads by bare name under the
/// library (its `dlopen` keeps glibc's view of the caller), and one loaded with `RTLD_DEEPBIND`
/// (whose pthread calls bind glibc's) draws exactly one warning line, unless every choice is glibc.
#[test]
fn plugins_load_as_before_and_deepbind_warns_once() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    compile_with("plugin.c", "plugins/libplug.so", &["-shared", "-fPIC"]);
    let exe = compile_with(
        "plugin_host.c",
        "plugin_host_c",
        &["-Wl,-rpath,$ORIGIN/plugins"],
    );
    let warning = "is loaded with RTLD_DEEPBIND";
    let out = run_limited(command(&exe, false, &[]), LIMIT);
    assert_ok(&out, "plugin_host under glibc alone");
    for (env, warns) in [
        (vec![("LOCKLAB_MUTEX", "mutex")], true),
        (vec![("LOCKLAB_MUTEX", "mcs")], true),
        (
            vec![
                ("LOCKLAB_MUTEX", "glibc"),
                ("LOCKLAB_RWLOCK", "glibc"),
                ("LOCKLAB_SPIN", "glibc"),
            ],
            false,
        ),
    ] {
        let out = run_limited(command(&exe, true, &env), LIMIT);
        assert_ok(&out, &format!("plugin_host {env:?}"));
        let err = String::from_utf8_lossy(&out.stderr);
        let (before, after) = err.split_once("-- deepbind --").unwrap();
        assert!(!before.contains("liblocklab_pthread"), "{env:?}: {err}");
        assert_eq!(
            after.matches(warning).count(),
            warns as usize,
            "{env:?}: {err}"
        );
    }
}

#[test]
fn glibc_adaptive_turns_normal_mutexes_adaptive_and_keeps_the_rest() {
    // Under glibc alone (the contract: the kinds stay as initialised), then under every choice but
    // `glibc-adaptive` (no kind changes), then under it (normal mutexes read as adaptive).
    let mut choices: Vec<_> = MUTEXES
        .iter()
        .filter(|m| **m != "glibc-adaptive")
        .map(|m| vec![("LOCKLAB_MUTEX", *m)])
        .collect();
    choices.push(vec![
        ("LOCKLAB_MUTEX", "glibc-adaptive"),
        ("EXPECT_ADAPTIVE", "1"),
    ]);
    matrix("glibc_adaptive.c", "glibc_adaptive_c", &choices);
}

/// An unlock touches nothing after its release (the last user of a reference-counted object
/// destroys the mutex and reuses the memory at once), and a timed locker in a fork child whose
/// parent forked while a woken sleeper had not yet run is woken by the unlock, not its deadline.
#[test]
fn unlock_leaves_the_memory_alone_and_wakes_timed_lockers_after_fork() {
    matrix(
        "unlock_then_reuse.c",
        "unlock_then_reuse_c",
        &mutex_choices(),
    );
}
