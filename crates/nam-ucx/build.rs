//! Generates the UCP bindings from the system UCX headers found by pkg-config.

use std::env;
use std::path::PathBuf;

fn main() {
    let ucx = pkg_config::Config::new()
        .atleast_version("1.10")
        .probe("ucx")
        .expect("UCX (libucx-dev) not found by pkg-config: run scripts/setup.sh");
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
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &ucx.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder.generate().expect("bindgen failed on ucp/api/ucp.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("ucp_bindings.rs");
    bindings.write_to_file(out).expect("cannot write UCP bindings");
}
