//! Records the compiler version for the lab's machine info, and builds the C and C++ shims of the
//! peers found with pkg-config: liburcu (the `liburcu-*` rows, cfg `liburcu`), Concurrency Kit
//! (`ck-*`, cfg `ck`), oneTBB (`tbb-*`, cfg `tbb`) and Abseil (`absl-*`, cfg `absl`). A peer whose
//! library is missing is listed as unavailable with the package to install. `LOCKLAB_NO_LIBURCU=1`
//! and `LOCKLAB_NO_PEERS=1` (every C/C++ peer) build without them on purpose.
//!
//! Last, it builds `liblocklab_pthread.so` (the preload library the `run`, `apps` and `try` commands
//! and the default job's preload rows need), so that `cargo run --release` on a fresh clone gives the
//! whole toolset: see [`preload_library`]. And it builds the simulator's runner `locklab-sim` with
//! `--cfg locklab_sim` (what `locklab predict` runs): see [`simulator`].
fn main() {
    c_peers();
    preload_library();
    simulator();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "rustc (unknown)".into());
    println!("cargo:rustc-env=LOCKLAB_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");

    println!("cargo::rustc-check-cfg=cfg(liburcu)");
    println!("cargo:rerun-if-env-changed=LOCKLAB_NO_LIBURCU");
    println!("cargo:rerun-if-changed=csrc");
    if off("LOCKLAB_NO_LIBURCU") || off("LOCKLAB_NO_PEERS") {
        return;
    }
    let probe = |name: &str| {
        pkg_config::Config::new()
            .atleast_version("0.11") // the urcu_memb_* / urcu_qsbr_* names
            .cargo_metadata(false)
            .probe(name)
    };
    let (memb, qsbr) = match (probe("liburcu-memb"), probe("liburcu-qsbr")) {
        (Ok(m), Ok(q)) => (m, q),
        (m, q) => {
            let why = m
                .err()
                .or(q.err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            let why = why.lines().next().unwrap_or("").to_string();
            println!(
                "cargo:warning=liburcu not found (install liburcu-dev for the liburcu rows): {why}"
            );
            return;
        }
    };
    for (file, lib) in [("csrc/urcu_memb.c", &memb), ("csrc/urcu_qsbr.c", &qsbr)] {
        let name = file.trim_start_matches("csrc/").trim_end_matches(".c");
        let built = cc::Build::new()
            .file(file)
            .includes(&lib.include_paths)
            .opt_level(2)
            .warnings(true)
            .try_compile(&format!("locklab_{name}"));
        // Without a working C compiler the rows stay unavailable rather than the build failing.
        if let Err(e) = built {
            println!("cargo:warning=the liburcu shim did not build (a C compiler?): {e}");
            return;
        }
    }
    // After the shims, so the linker sees the libraries the shims need after the shims themselves.
    for lib in [&memb, &qsbr] {
        for dir in &lib.link_paths {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
        for l in &lib.libs {
            println!("cargo:rustc-link-lib={l}");
        }
    }
    println!("cargo:rustc-cfg=liburcu");
}

/// Whether the variable asks to build without some peers.
fn off(var: &str) -> bool {
    println!("cargo:rerun-if-env-changed={var}");
    std::env::var_os(var).is_some_and(|v| v != "0")
}

/// Passes a found library's link flags on to the final link (after the shim that needs them).
fn link(lib: &pkg_config::Library) {
    for dir in &lib.link_paths {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for l in &lib.libs {
        println!("cargo:rustc-link-lib={l}");
    }
}

/// Concurrency Kit (C), oneTBB and Abseil (C++): each shim built when pkg-config finds its library.
fn c_peers() {
    for c in ["ck", "tbb", "absl"] {
        println!("cargo::rustc-check-cfg=cfg({c})");
    }
    if off("LOCKLAB_NO_PEERS") {
        return;
    }
    let probe = |name: &str, package: &str| match pkg_config::Config::new()
        .cargo_metadata(false)
        .probe(name)
    {
        Ok(l) => Some(l),
        Err(e) => {
            let why = e.to_string();
            let why = why.lines().next().unwrap_or("");
            println!("cargo:warning={name} not found (install {package} for its rows): {why}");
            None
        }
    };
    if let Some(ck) = probe("ck", "libck-dev") {
        let built = cc::Build::new()
            .file("csrc/ck.c")
            .includes(&ck.include_paths)
            .opt_level(2)
            .warnings(true)
            .try_compile("locklab_ck");
        match built {
            Ok(()) => {
                link(&ck);
                println!("cargo:rustc-cfg=ck");
            }
            Err(e) => println!("cargo:warning=the Concurrency Kit shim did not build: {e}"),
        }
    }
    let tbb = probe("tbb", "libtbb-dev");
    let absl = probe("absl_synchronization", "libabsl-dev");
    if tbb.is_none() && absl.is_none() {
        return;
    }
    let mut b = cc::Build::new();
    b.cpp(true)
        .file("csrc/tbb_absl.cc")
        .std("c++17")
        .opt_level(2)
        .warnings(true);
    for (lib, define) in [(&tbb, "LL_HAVE_TBB"), (&absl, "LL_HAVE_ABSL")] {
        if let Some(l) = lib {
            b.includes(&l.include_paths).define(define, None);
        }
    }
    // Without a working C++ compiler the rows stay unavailable rather than the build failing.
    if let Err(e) = b.try_compile("locklab_tbb_absl") {
        println!("cargo:warning=the oneTBB/Abseil shim did not build (a C++ compiler?): {e}");
        return;
    }
    for (lib, cfg) in [(&tbb, "tbb"), (&absl, "absl")] {
        if let Some(l) = lib {
            link(l);
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}

/// Builds the preload library (`crates/locklab-pthread`, always in release) with a nested cargo into
/// `<target dir>/preload/` and hands its path to the lab as `LOCKLAB_PRELOAD_BUILT`.
///
/// `cargo run` builds only the package of the binary it runs, so without this a user's first
/// command would list the preload rows as unavailable and ask for a second build. A separate target
/// directory, because the outer cargo holds the lock of its own for the whole build (the same one
/// would deadlock); one for every profile, so `cargo test`, `cargo clippy` and `cargo build --release`
/// share it and only the first pays (~1 minute on 2 cores). The nested cargo shares the outer one's
/// jobserver (`CARGO_MAKEFLAGS`), so it never runs more jobs than asked for. Skipped for a cross
/// target or off Linux/glibc (no preload there), and with `LOCKLAB_NO_PRELOAD_BUILD=1`; a failure is
/// a warning, never a failed build: the lab then says how to build the library itself.
fn preload_library() {
    println!("cargo:rerun-if-env-changed=LOCKLAB_NO_PRELOAD_BUILD");
    let Some(target_dir) =
        nested_target("LOCKLAB_NO_PRELOAD_BUILD", "crates/locklab-pthread", true)
    else {
        return;
    };
    match nested_build("locklab-pthread", &target_dir.join("preload"), None) {
        Ok(dir) => {
            let lib = dir.join("liblocklab_pthread.so");
            println!("cargo:rustc-env=LOCKLAB_PRELOAD_BUILT={}", lib.display());
        }
        Err(first) => println!(
            "cargo:warning=liblocklab_pthread.so did not build (`cargo build --release -p locklab-pthread` says why): {first}"
        ),
    }
}

/// Builds `locklab-sim` (locklab's locks on the simulated machine: `--cfg locklab_sim`) with a nested
/// cargo into `<target>/sim/`, its own target directory since every crate in it is built with that
/// cfg; `LOCKLAB_SIM_BUILT` names the binary. Skipped for cross builds and with
/// `LOCKLAB_NO_SIM_BUILD=1`; a failure is a warning (`predict` then says how to build it).
fn simulator() {
    println!("cargo:rerun-if-env-changed=LOCKLAB_NO_SIM_BUILD");
    let Some(target_dir) = nested_target("LOCKLAB_NO_SIM_BUILD", "crates/locklab-sim", false)
    else {
        return;
    };
    match nested_build(
        "locklab-sim",
        &target_dir.join("sim"),
        Some("--cfg\x1flocklab_sim"),
    ) {
        Ok(dir) => {
            let bin = dir.join("locklab-sim");
            println!("cargo:rustc-env=LOCKLAB_SIM_BUILT={}", bin.display());
        }
        Err(first) => println!(
            "cargo:warning=the simulator (locklab-sim, for `locklab predict`) did not build: {first}"
        ),
    }
}

/// The outer build's target directory, if a nested build of the workspace crate at `crate_dir`
/// should run: not when `skip_var` is set, not for a cross build (nor off glibc Linux if
/// `linux_gnu_only`), not outside the workspace (a packaged crate). Registers the sources it reads.
fn nested_target(
    skip_var: &str,
    crate_dir: &str,
    linux_gnu_only: bool,
) -> Option<std::path::PathBuf> {
    let (Ok(target), Ok(host)) = (std::env::var("TARGET"), std::env::var("HOST")) else {
        return None;
    };
    if off(skip_var) || target != host || (linux_gnu_only && !target.ends_with("-linux-gnu")) {
        return None;
    }
    let manifest_dir = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest_dir.join("../..");
    if !workspace.join(crate_dir).join("Cargo.toml").is_file() {
        return None; // not built from the workspace (a packaged crate): nothing to build
    }
    for p in [
        &format!("{crate_dir}/src"),
        &format!("{crate_dir}/Cargo.toml"),
        "crates/locklab/src",
        "crates/locklab/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }
    // OUT_DIR is <target dir>/<profile>/build/<package>-<hash>/out.
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    out.ancestors().nth(4).map(|p| p.to_path_buf())
}

/// `cargo build --release -p package` of the workspace into `target_dir` (its own: the outer cargo
/// holds the lock on ours), with `rustflags` (encoded, as `CARGO_ENCODED_RUSTFLAGS`) or none; the
/// release directory, or the first error line.
fn nested_build(
    package: &str,
    target_dir: &std::path::Path,
    rustflags: Option<&str>,
) -> Result<std::path::PathBuf, String> {
    let manifest_dir = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = std::process::Command::new(cargo);
    c.args([
        "build",
        "--release",
        "--quiet",
        "-p",
        package,
        "--manifest-path",
    ])
    .arg(manifest_dir.join("../../Cargo.toml"))
    .arg("--target-dir")
    .arg(target_dir)
    // What the outer cargo set for this build script, not for a build of another package:
    // clippy's wrapper, the outer target's flags and features.
    .env_remove("RUSTC_WORKSPACE_WRAPPER")
    .env_remove("CARGO_ENCODED_RUSTFLAGS")
    .env_remove("CARGO_TARGET_DIR")
    .env_remove("CARGO_BUILD_TARGET_DIR");
    if let Some(flags) = rustflags {
        c.env_remove("RUSTFLAGS")
            .env("CARGO_ENCODED_RUSTFLAGS", flags);
    }
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k.starts_with("CARGO_FEATURE_") || k.starts_with("CARGO_CFG_"))
        {
            c.env_remove(k);
        }
    }
    match c.output() {
        Ok(o) if o.status.success() => Ok(target_dir.join("release")),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            Err(err
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("")
                .to_string())
        }
        Err(e) => Err(format!("could not run cargo: {e}")),
    }
}
