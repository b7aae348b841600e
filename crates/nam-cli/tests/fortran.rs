//! The Fortran interface (module `nam_ckpt`, `fortran/nam.f90`): `examples/fortran` is built
//! with `mpifort` against the workspace's libnam (through `nam.pc`, warnings are errors,
//! standard Fortran 2008), then
//! - `hello` runs the core client calls (init, malloc, put, get, fetch-add, a refused put,
//!   free, finalize) against a real `nam serve`;
//! - `heat`, an MPI stencil, runs under `mpirun` (4 ranks on 4 emulated nodes, XOR): once
//!   uninterrupted; once killed after step 130, whose rank 1 then also loses its files of the
//!   newest checkpoint (step 120); and once more, which restarts from step 120 (XOR rebuilds
//!   rank 1) and ends with the uninterrupted run's answer.

mod common;

use common::{lib_dir, repo, temp_dir, ServerProcess};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `command` to completion within `timeout`; (success, stdout and stderr).
fn run(mut command: Command, timeout: Duration) -> (bool, String) {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start");
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{command:?} did not finish in {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Builds `examples/fortran` into `dir`.
fn build(dir: &Path) {
    assert!(lib_dir().join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test` (no libnam.so)");
    let mut gen = Command::new("sh");
    gen.arg(repo().join("scripts/gen-pc.sh"))
        .arg("--libdir")
        .arg(lib_dir())
        .arg("--includedir")
        .arg(repo().join("include"))
        .arg(dir);
    let (ok, out) = run(gen, Duration::from_secs(30));
    assert!(ok, "gen-pc.sh: {out}");
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(repo().join("examples/fortran"))
        .arg(format!("OUT={}", dir.display()))
        .arg("FFLAGS=-O2 -g -Wall -Wextra -Werror -std=f2008")
        .env("PKG_CONFIG_PATH", dir);
    let (ok, out) = run(make, Duration::from_secs(300));
    assert!(ok, "make -C examples/fortran (mpifort and gfortran: scripts/setup.sh installs them):\n{out}");
}

fn heat(program: &Path, config: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = common::mpi::mpirun_command();
    cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", "4", "-x", "NAM_EMULATE_NODES=4"])
        .args(["-x", &format!("NAM_CKPT_CONFIG={}", config.display())])
        .arg(program)
        .args(args);
    run(cmd, Duration::from_secs(180))
}

fn answer(out: &str) -> &str {
    out.lines().find(|l| l.starts_with("final ")).unwrap_or_else(|| panic!("no answer in:\n{out}"))
}

#[test]
fn the_programs_of_the_fortran_page_are_there_verbatim() {
    let page = std::fs::read_to_string(repo().join("docs/fortran.md")).unwrap();
    for source in ["examples/fortran/hello.f90", "examples/fortran/heat.f90"] {
        let text = std::fs::read_to_string(repo().join(source)).unwrap();
        assert!(page.contains(&format!("```fortran\n{text}```")), "docs/fortran.md does not show {source} as it is");
    }
}

#[test]
fn fortran_examples_build_with_mpifort_and_heat_restarts_after_losing_a_rank() {
    let dir = temp_dir("fortran");
    build(&dir);

    let server = ServerProcess::start("tcp", &["--capacity", "16MiB"]);
    let mut hello = Command::new(dir.join("hello"));
    hello.env("NAM_SERVERS", server.addr.to_string()).env("NAM_TRANSPORTS", "tcp").env("NAM_TIMEOUT_MS", "10000");
    let (ok, out) = run(hello, Duration::from_secs(60));
    assert!(ok && !out.contains("FAIL") && out.contains("hello: all checks passed"), "{out}");
    assert!(out.contains("ok   refused: nam_put_sync"), "the refusal names its call:\n{out}");

    let program: PathBuf = dir.join("heat");
    let d = dir.display();
    let config = dir.join("ckpt.toml");
    let toml = format!(
        "[ram]\ndir = \"{d}/ram\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n[redundancy]\nscheme = \"xor\"\n\
         [policy]\nkind = \"ratio\"\nratio = 1\n"
    );
    std::fs::write(&config, toml).unwrap();
    let (ok, clean) = heat(&program, &config, &["200", "20"]);
    assert!(ok && !clean.contains("restarted"), "{clean}");
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
    assert!(deleted >= 3, "rank 1's checkpoint, parity and marker of step 120");
    let (ok, restarted) = heat(&program, &config, &["200", "20"]);
    assert!(ok && restarted.contains("restarted from version 120 at step 120"), "{restarted}");
    assert_eq!(answer(&restarted), answer(&clean));
    let _ = std::fs::remove_dir_all(&dir);
}
