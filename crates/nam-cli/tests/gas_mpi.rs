//! Global addresses and allreduce at the memory server from an MPI program through the C
//! API: `examples/c/allreduce_mpi.c` is built with `mpicc` against the workspace's libnam
//! and run under `mpirun` (3 ranks) against a real `nam serve`, over UCX TCP and shared
//! memory. It passes an address through `MPI_Bcast`, checks `nam_allreduce` against
//! `MPI_Allreduce` for every op and type, and that a length mismatch fails every rank; rank
//! 0's mailbox gets every other rank's messages in per-sender order through back-pressure.

mod common;

use common::{lib_dir, repo, temp_dir, ServerProcess, TRANSPORTS};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn build(dir: &Path) -> PathBuf {
    let lib = lib_dir();
    assert!(lib.join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test` (no libnam.so)");
    let program = dir.join("allreduce_mpi");
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&program)
        .arg(repo().join("examples/c/allreduce_mpi.c"))
        .arg(format!("-I{}", repo().join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnam")
        .output()
        .expect("mpicc (Open MPI) is installed by scripts/setup.sh");
    assert!(out.status.success(), "mpicc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    program
}

#[test]
fn mpi_ranks_share_global_addresses_and_allreduce_at_the_server() {
    let program = build(&temp_dir("gas-mpi"));
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "16MiB"]);
        let mut child = common::mpi::mpirun_command()
            .args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", "3"])
            .args(["-x", "NAM_SERVERS", "-x", "NAM_TRANSPORTS", "-x", "NAM_TIMEOUT_MS"])
            .arg(&program)
            .env("NAM_SERVERS", server.addr.to_string())
            .env("NAM_TRANSPORTS", transports)
            .env("NAM_TIMEOUT_MS", "10000")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mpirun");
        let deadline = Instant::now() + Duration::from_secs(90);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{transports}: mpirun did not finish in 90 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("allreduce_mpi: all checks passed"), "{transports}:\n{text}");
    }
}
