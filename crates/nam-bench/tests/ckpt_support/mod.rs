//! Runs `nam` subcommands under `mpirun` for the checkpoint tests, with a deadline.

#![allow(dead_code)]

// Test files that use only this module do not have `common`; the ones with both get two
// copies of this small trait, which is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "../../../nam-cli/tests/common/fds.rs"]
mod fds;
#[allow(clippy::duplicate_mod)]
#[path = "../../../nam-cli/tests/common/mpi.rs"]
pub mod mpi;

use fds::NoInheritedFds;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Deadline of one mpirun job; the tests use small sizes, so this is generous.
pub const MPIRUN_DEADLINE: Duration = Duration::from_secs(120);

/// A fresh empty directory for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nam-ckpt-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The command `mpirun -np <ranks> nam <args>`, ranks spread over `nodes` emulated nodes.
pub fn mpirun(ranks: usize, nodes: usize, args: &[&str]) -> Command {
    let mut cmd = mpi::mpirun_command();
    cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", &ranks.to_string()])
        .args(["-x", &format!("NAM_EMULATE_NODES={nodes}")])
        .arg(env!("CARGO_BIN_EXE_nam-bench"))
        .args(args)
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .no_inherited_fds();
    cmd
}

/// Runs a command to completion within [`MPIRUN_DEADLINE`] (killed and failed past it).
pub fn run(mut cmd: Command) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mpirun starts");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > MPIRUN_DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "mpirun exceeded {MPIRUN_DEADLINE:?}: {cmd:?}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stdout and stderr of a run, for assertions and failure messages.
pub fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
