//! Records the compiler version for the lab's machine info, and builds the liburcu shim (the
//! `liburcu-memb` and `liburcu-qsbr` rows) when pkg-config finds liburcu; without it those rows are
//! listed as unavailable (cfg `liburcu` unset). `LOCKLAB_NO_LIBURCU=1` builds without it on purpose.
fn main() {
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
    if std::env::var_os("LOCKLAB_NO_LIBURCU").is_some_and(|v| v != "0") {
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
        cc::Build::new()
            .file(file)
            .includes(&lib.include_paths)
            .opt_level(2)
            .warnings(true)
            .compile(&format!("locklab_{name}"));
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
