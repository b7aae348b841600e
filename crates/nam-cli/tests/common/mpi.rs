//! The `mpirun` command every test starts its MPI jobs with.
//!
//! Open MPI keeps a job's session directory under `<tmpdir>/ompi.<host>.<uid>`; concurrent
//! `mpirun`s (test binaries run in parallel) race to create it and abort with
//! `orte_session_dir failed`, and a leftover of an earlier run can stop a new one. Each job
//! here gets a fresh base directory of its own, so neither matters.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// `mpirun`, allowed to run as root, with a fresh session directory base for this job.
pub fn mpirun_command() -> Command {
    static JOBS: AtomicU32 = AtomicU32::new(0);
    let job = JOBS.fetch_add(1, Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("nam-mpi-{}-{job}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("create the job's session directory base");
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_MCA_orte_tmpdir_base", &base)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}
