//! `locklab run -- CMD`: the program runs with the preload library and the choices, its exit status
//! passed through; bad flags and missing programs get one clear line and the usual status.

mod common;
use common::*;
use std::path::Path;

/// The library beside the test's `locklab` binary: built by `cargo test --workspace` (and by CI);
/// a bare `cargo test -p locklab-bench` may not have built it, and then only the error is checked.
fn library_built() -> bool {
    let exe = assert_cmd::cargo::cargo_bin("locklab");
    let built = locklab_bench::preload::find_library(&exe).is_ok();
    if !built {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI builds the whole workspace: the preload library must be there"
        );
    }
    built
}

#[test]
fn runs_the_program_on_the_library_with_its_exit_status() {
    if !library_built() {
        let (code, _, err) = run(&["run", "--", "true"]);
        assert_eq!(code, 1);
        assert!(
            err.contains("cargo build --release -p locklab-pthread"),
            "{err}"
        );
        return;
    }
    let (code, out, _) = run(&[
        "run",
        "--mutex",
        "mcs",
        "--rwlock",
        "rwspinlock",
        "--",
        "sh",
        "-c",
        "echo $LOCKLAB_MUTEX $LOCKLAB_RWLOCK; grep -c liblocklab_pthread /proc/self/maps; exit 7",
    ]);
    assert_eq!(code, 7, "the program's own exit status");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("mcs rwspinlock"));
    let mapped: u32 = lines.next().unwrap().trim().parse().unwrap();
    assert!(mapped >= 1, "the library is mapped into the program: {out}");
}

#[test]
fn keeps_what_was_already_preloaded() {
    let lib = Path::new("/x/liblocklab_pthread.so");
    let v = locklab_bench::preload::preload_value(lib, Some("libother.so".into()));
    assert_eq!(v, "/x/liblocklab_pthread.so:libother.so");
    assert_eq!(
        locklab_bench::preload::preload_value(lib, Some("".into())),
        "/x/liblocklab_pthread.so"
    );
}

#[test]
fn bad_input_gets_one_line() {
    let (code, _, err) = run(&["run", "--mutex", "mcss", "--", "true"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown --mutex `mcss` (valid: mutex, mcs, ticket, qspinlock, tas, glibc)"),
        "{err}"
    );
    let (code, _, err) = run(&["run", "--spin", "x", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = run(&["run"]);
    assert_eq!(code, 2, "a command is required");
    if library_built() {
        let (code, _, err) = run(&["run", "--", "/nonexistent/program"]);
        assert_eq!(code, 127);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("cannot run `/nonexistent/program`"), "{err}");
    }
}
