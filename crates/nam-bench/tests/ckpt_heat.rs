//! The C MPI example `examples/mpi/heat.c` (a 2-D heat stencil) built with `mpicc` against
//! `nam.pc`, checkpointing through the C API: a run killed mid-way, whose killed rank's
//! newest checkpoint is also deleted, restarts (XOR rebuilds that rank) and ends with the
//! same answer as an uninterrupted run.

mod ckpt_support;

use ckpt_support::{run, temp_dir, text};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// The profile directory with libnam.so (the parent of this test binary's `deps/`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("<target>/<profile>/deps").to_path_buf()
}

fn build_heat(dir: &Path) -> PathBuf {
    assert!(lib_dir().join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test`");
    let gen = Command::new("sh")
        .arg(repo().join("scripts/gen-pc.sh"))
        .args(["--libdir", lib_dir().to_str().unwrap(), "--includedir", repo().join("include").to_str().unwrap()])
        .arg(dir)
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", text(&gen));
    let make = Command::new("make")
        .arg("-C")
        .arg(repo().join("examples/mpi"))
        .arg(format!("OUT={}", dir.display()))
        .arg("CFLAGS=-O2 -g -Wall -Wextra -Werror -std=c11")
        .env("PKG_CONFIG_PATH", dir)
        .output()
        .unwrap();
    assert!(make.status.success(), "{}", text(&make));
    dir.join("heat")
}

fn heat(program: &Path, config: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = ckpt_support::mpi::mpirun_command();
    cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", "4", "-x", "NAM_EMULATE_NODES=4"])
        .args(["-x", &format!("NAM_CKPT_CONFIG={}", config.display())])
        .args(["-x", &format!("LD_LIBRARY_PATH={}", lib_dir().display())])
        .arg(program)
        .args(args);
    let out = run(cmd);
    (out.status.success(), text(&out))
}

fn answer(out: &str) -> &str {
    out.lines().find(|l| l.starts_with("final ")).unwrap_or_else(|| panic!("no answer in:\n{out}"))
}

#[test]
fn heat_stencil_killed_restarts_to_the_same_answer() {
    let dir = temp_dir("heat");
    let program = build_heat(&dir);
    let d = dir.display();
    let config = dir.join("ckpt.toml");
    let toml = format!(
        "[ram]\ndir = \"{d}/ram\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n[redundancy]\nscheme = \"xor\"\n\
         [policy]\nkind = \"ratio\"\nratio = 1\n"
    );
    std::fs::write(&config, toml).unwrap();
    let (ok, clean) = heat(&program, &config, &["200", "20"]);
    assert!(ok, "{clean}");
    for level in ["ram", "ssd"] {
        std::fs::remove_dir_all(dir.join(level)).unwrap();
    }
    // Rank 1 dies after step 130; the newest checkpoint is step 120 (on the SSD level).
    let (ok, killed) = heat(&program, &config, &["200", "20", "1", "130"]);
    assert!(!ok && !killed.contains("final "), "{killed}");
    let v120 = dir.join("ssd/heat/v120");
    let mut deleted = 0;
    for entry in std::fs::read_dir(&v120).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("rank-1.") {
            std::fs::remove_file(path).unwrap();
            deleted += 1;
        }
    }
    assert!(deleted >= 2, "rank 1's checkpoint, parity and marker of step 120");
    let (ok, restarted) = heat(&program, &config, &["200", "20"]);
    assert!(ok && restarted.contains("restarted from version 120 at step 120"), "{restarted}");
    assert_eq!(answer(&restarted), answer(&clean));
    std::fs::remove_dir_all(&dir).unwrap();
}
