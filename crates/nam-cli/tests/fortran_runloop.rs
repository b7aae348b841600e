//! The run loop of the Fortran module `nam_ckpt` (`fortran/nam.f90`) under `mpirun` (4 ranks
//! on 4 emulated nodes): `tests/ckpt_runloop.f90` checkpoints when `nam_ckpt_need_checkpoint`
//! says so, is stopped through `nam_ckpt_should_exit` by a halt file from `nam ckpt halt`,
//! takes a last checkpoint with a named redundancy descriptor
//! (`nam_ckpt_checkpoint_descriptor`, XOR on the SSD level), and a second run restores it,
//! checking every element.

mod common;

use common::{lib_dir, repo, temp_dir};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mpifort(args: &[&std::ffi::OsStr]) {
    let out = Command::new("mpifort").args(args).output().expect("mpifort (scripts/setup.sh installs it)");
    assert!(out.status.success(), "mpifort {args:?}:\n{}", String::from_utf8_lossy(&out.stderr));
}

fn run(program: &Path, config: &Path, mode: &str) -> (bool, String) {
    let mut child = common::mpi::mpirun_command()
        .args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", "4", "-x", "NAM_EMULATE_NODES=4"])
        .args(["-x", &format!("NAM_CKPT_CONFIG={}", config.display())])
        .arg(program)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mpirun {mode} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn fortran_run_loop_stops_on_halt_checkpoints_with_a_descriptor_and_restarts() {
    let lib = lib_dir();
    assert!(lib.join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test` (no libnam.so)");
    let dir = temp_dir("fortran-runloop");
    let flags = ["-O2", "-g", "-Wall", "-Werror", "-std=f2008"].map(std::ffi::OsStr::new);
    let module = dir.join("nam.o");
    let j = format!("-J{}", dir.display());
    let source = repo().join("fortran/nam.f90");
    mpifort(
        &[&flags[..], &[j.as_ref(), "-c".as_ref(), "-o".as_ref(), module.as_os_str(), source.as_os_str()]].concat(),
    );
    let program = dir.join("ckpt_runloop");
    let test_source = repo().join("crates/nam-cli/tests/ckpt_runloop.f90");
    let (include, link, rpath) =
        (format!("-I{}", dir.display()), format!("-L{}", lib.display()), format!("-Wl,-rpath,{}", lib.display()));
    mpifort(
        &[
            &flags[..],
            &[include.as_ref(), "-o".as_ref(), program.as_os_str(), test_source.as_os_str(), module.as_os_str()],
            &[link.as_ref(), "-lnam".as_ref(), rpath.as_ref()],
        ]
        .concat(),
    );
    let d = dir.display();
    let config = dir.join("ckpt.toml");
    std::fs::write(
        &config,
        format!(
            "[ram]\ndir = \"{d}/ram\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n[redundancy]\nscheme = \"partner\"\n\
             [policy]\nkind = \"always-ram\"\n[runloop]\ninterval = 0.3\n\
             [descriptors.xor]\nscheme = \"xor\"\nset_size = 4\nlevel = \"ssd\"\nevery = 0\n"
        ),
    )
    .unwrap();
    let halt = Command::new(env!("CARGO_BIN_EXE_nam"))
        .args(["ckpt", "halt"])
        .arg(dir.join("ssd"))
        .args(["--reason", "fortran-halt", "--after", "1.5"])
        .output()
        .unwrap();
    assert!(halt.status.success(), "{}", String::from_utf8_lossy(&halt.stderr));

    let (ok, out) = run(&program, &config, "loop");
    assert!(ok, "{out}");
    let line = out.lines().find(|l| l.starts_with("stopping at step ")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(" level 2: halted by ") && line.contains("fortran-halt"), "{line}");
    let step: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    let (ok, out) = run(&program, &config, "restart");
    assert!(ok && out.contains(&format!("restored {} wrong=0", step + 1000)), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
