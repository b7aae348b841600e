//! Far memory is usable from C: `tests/farmem.c` is compiled against `include/nam.h` and
//! `libnam.so` (made by `cargo build --workspace`) and run against a real `nam serve`.

mod common;

use common::ServerProcess;
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("<target>/<profile>/deps").to_path_buf()
}

#[test]
fn the_c_api_reaches_far_memory_both_ways() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = lib_dir();
    assert!(lib.join("libnam.so").exists(), "libnam.so missing: run `cargo build --workspace` first");
    let exe = std::env::temp_dir().join(format!("nam-farmem-c-{}", std::process::id()));
    let cc = Command::new("cc")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/farmem.c"))
        .arg("-I")
        .arg(repo.join("include"))
        .arg("-L")
        .arg(&lib)
        .args(["-lnam", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .env("NAM_SERVERS", server.addr.to_string())
        .env("NAM_TRANSPORTS", "sm,self,tcp")
        .output()
        .expect("run the C program");
    let _ = std::fs::remove_file(&exe);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("farmem.c: ok"), "{text}");
}
