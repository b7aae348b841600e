//! Generates the UCP bindings from the UCX headers pkg-config finds (UCX 1.22, which
//! scripts/setup.sh installs in /opt/nam/ucx and .cargo/config.toml points pkg-config at).

use std::env;
use std::path::PathBuf;

fn main() {
    let ucx = pkg_config::Config::new()
        // The release whose packed layouts `peer.rs` checks (and whose fixes the server
        // needs: docs/architecture.md, "UCX version").
        .range_version("1.22".."1.23")
        .probe("ucx")
        .expect("UCX 1.22 not found by pkg-config: run scripts/setup.sh (it installs it in /opt/nam/ucx)");
    let mut builder = bindgen::Builder::default()
        .header_contents("wrapper.h", "#include <ucp/api/ucp.h>\n")
        .allowlist_function("ucp_.*")
        .allowlist_function("ucs_status_string")
        .allowlist_type("ucp_.*")
        .allowlist_type("ucs_.*")
        .allowlist_var("UCP_.*")
        .allowlist_var("UCS_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        // UCX 1.22's header comments hold C code blocks that rustdoc would run as doctests;
        // the UCX documentation is the reference for these raw bindings.
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    // Where the UCX nam links keeps its tools (ucx_perftest, the benchmarks' baseline):
    // `nam_ucx::UCX_BIN_DIR`.
    let bindir = pkg_config::get_variable("ucx", "bindir").unwrap_or_default();
    println!("cargo:rustc-env=NAM_UCX_BINDIR={bindir}");
    for path in &ucx.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder.generate().expect("bindgen failed on ucp/api/ucp.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("ucp_bindings.rs");
    bindings.write_to_file(out).expect("cannot write UCP bindings");
}
