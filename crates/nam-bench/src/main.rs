//! `nam-bench <suite>`: every benchmark of nam, each beside its baseline in the same run, on
//! one shared harness ([`harness`]); the simulators' studies; and the checkpoint checks that
//! run under `mpirun`. This binary links MPI and plotting libraries; the `nam` binary that
//! serves memory links neither.
//!
//! Options are the same across suites where they mean something: `--json` prints JSON
//! instead of the table, `--markdown FILE` writes the report page, `--plot FILE` (or a
//! directory, for suites that draw several charts) writes PNG charts.

mod ckpt;
mod ckpt_app;
mod ckpt_check;
mod ckpt_incr;
mod ckpt_lib;
mod ckpt_policy;
mod ecc;
mod farmem;
mod gas;
mod harness;
mod limits;
mod mpi_tool;
mod shmem;
mod sim;

use clap::{Parser, Subcommand};

/// The benchmarks of nam (each beside its baseline, measured in the same run), the
/// simulators' studies, and the checkpoint library's checks under mpirun.
#[derive(Parser)]
#[command(name = "nam-bench", version)]
struct Cli {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
enum Suite {
    /// Put, get and fetch-add through the client library, optionally beside ucx_perftest
    /// (--vs-ucx), or the transfer paths compared (--path direct,rma,auto).
    Gas(gas::BenchArgs),
    /// Allreduce at the memory server beside Open MPI's MPI_Allreduce (starts mpirun itself).
    Allreduce(gas::AllreduceArgs),
    /// Mailbox message round trip beside an 8-byte put+signal round trip.
    Mailbox(gas::MailboxArgs),
    /// nam's one-sided operations (put, put + quiet, get, fetch-add, put-signal ping-pong,
    /// 64-put bursts, wake-up of a sleeping waiter), beside OpenSHMEM's with --vs-shmem.
    Shmem(shmem::ShmemArgs),
    /// Under mpirun: checkpoint redundancy schemes compared (NAM-XOR, partner, XOR on nodes).
    Ckpt(ckpt::CkptBenchArgs),
    /// Under mpirun: Abeyratne 2017's RAM/SSD placement microbenchmark over every policy.
    #[command(name = "ckpt-policy")]
    CkptPolicy(ckpt_policy::PolicyBenchArgs),
    /// Incremental checkpointing modes (Abeyratne 2017 Ch. V) against runs without checkpoints.
    #[command(name = "ckpt-incr")]
    CkptIncr(ckpt_incr::CkptIncrBenchArgs),
    /// Far memory against local memory: pointer chase, SAXPY, friends-of-friends, page faults.
    Farmem(farmem::FarmemBenchArgs),
    /// The interconnect simulator's fidelity and speed (without a subcommand), or the
    /// simulator itself: on-chip topologies (Abeyratne 2017 Ch. III) and the ExaNeSt torus.
    Sim(sim::SimArgs),
    /// Abeyratne 2017's Table 4.4 on every core against one thread, and RS(19,16) throughput
    /// against a textbook bit-serial implementation.
    Ecc(ecc::EccBenchArgs),
    /// Under mpirun: check the checkpoint library on this job's layout (L2 redundancy erased
    /// and rebuilt, or a small application that checkpoints and restarts).
    #[command(name = "ckpt-check")]
    CkptCheck(ckpt_check::CkptCheckArgs),
    /// The memory server the suites start (the same code as `nam serve`), so that a run never
    /// depends on a separately built `nam`.
    #[command(hide = true)]
    Serve(nam_cli::serve::ServeArgs),
    /// A server's status (the same code as `nam status`), for the tests that run only this binary.
    #[command(hide = true)]
    Status(nam_cli::status::StatusArgs),
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("NAM_LOG", "warn")).init();
    match Cli::parse().suite {
        Suite::Gas(args) => gas::run(args),
        Suite::Allreduce(args) => gas::run_allreduce(args),
        Suite::Mailbox(args) => gas::run_mailbox(args),
        Suite::Shmem(args) => shmem::run(args),
        Suite::Ckpt(args) => ckpt::run(args),
        Suite::CkptPolicy(args) => ckpt_policy::run(args),
        Suite::CkptIncr(args) => ckpt_incr::run(args),
        Suite::Farmem(args) => farmem::run(args),
        Suite::Sim(args) => sim::run(args),
        Suite::Ecc(args) => ecc::run(args),
        Suite::CkptCheck(args) => ckpt_check::run(args),
        Suite::Serve(args) => nam_cli::serve::run(args),
        Suite::Status(args) => nam_cli::status::run(args),
    }
}
