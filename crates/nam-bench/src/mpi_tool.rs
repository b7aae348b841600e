//! How the MPI suites (`ckpt`, `ckpt-check`, `ckpt-policy`) start and end:
//! every rank that fails prints its own error, naming its rank and host, before it finalizes
//! MPI, and no rank waits for ever in `MPI_Finalize`.
//!
//! The tools agree on every step that can fail on some ranks only
//! ([`nam_ckpt::comm::Comm::agree`]), so when one rank fails every rank returns an error
//! from the same step: its own, or the failed peer's (which rank, on which node, and why).
//! [`run_ranks`] prints it at once (a rank's output must not wait for a finalize that other
//! ranks may hold up), then finalizes, with a deadline in case a peer is stuck somewhere no
//! agreement reaches (a wait on a memory server, say): past it the rank exits without
//! finalizing, and mpirun ends the job.

use anyhow::{Context, Result};
use mpi::environment::Universe;
use mpi::traits::Communicator;

use crate::limits::FINALIZE_DEADLINE;

/// Initializes MPI, runs `body`, and finalizes. A rank whose `body` fails prints
/// `nam-bench <tool>: rank R on HOST: error: ...` (with the whole chain of causes) to stderr,
/// finalizes within [`FINALIZE_DEADLINE`] and exits with status 1.
pub fn run_ranks(tool: &str, body: impl FnOnce(&Universe) -> Result<()>) -> Result<()> {
    let universe = mpi::initialize().context("MPI is already initialized")?;
    let rank = universe.world().rank();
    let Err(error) = body(&universe) else {
        return Ok(());
    };
    // One write, so that the ranks' lines, which mpirun forwards to one stream, stay whole.
    let line = format!("nam-bench {tool}: rank {rank} on {}: error: {error:#}\n", nam_ckpt::node::hostname());
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    std::thread::spawn(|| {
        std::thread::sleep(FINALIZE_DEADLINE);
        eprintln!("nam-bench: MPI_Finalize did not return within {FINALIZE_DEADLINE:?}; exiting without it");
        std::process::exit(1);
    });
    drop(universe);
    std::process::exit(1);
}
