//! `nam`: the command-line front end of network-attached memory. The benchmarks and the MPI
//! tools (`ckpt-check`) are the `nam-bench` binary of crate `nam-bench`.

use clap::{Parser, Subcommand};
use nam_cli::{ckpt, demo, ecc_sim, serve, status};

/// Network-attached memory: memory servers, clients, and the DRAM fault-code study.
/// Benchmarks, simulators and the checkpoint checks under mpirun are `nam-bench`.
#[derive(Parser)]
#[command(name = "nam", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a memory server.
    Serve(serve::ServeArgs),
    /// Show a server's capacity, usage, clients and traffic: everything with NAM_ADMIN_TOKEN set
    /// to the server's admin token, a tenant's own figures with NAM_TENANT and NAM_TOKEN, and
    /// only liveness without credentials.
    Status(status::StatusArgs),
    /// Checkpoint datasets and halt requests (`nam ckpt list|current|forget|delete|halt DIR ...`),
    /// the checkpoint groups jobs leave on a server (`nam ckpt drop GROUP --server ...`), and
    /// the copy of a node's checkpoints to the file-system level after a job (`nam ckpt scavenge`).
    Ckpt(ckpt::CkptArgs),
    /// Start a local server and show allocation, put/get, atomics, signals and a short measurement.
    Demo(demo::DemoArgs),
    /// Rerun the DRAM fault-injection study of Abeyratne 2017 (Table 4.4) with nam-ecc's codes.
    #[command(name = "ecc-sim")]
    EccSim(ecc_sim::EccSimArgs),
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("NAM_LOG", "warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Status(args) => status::run(args),
        Command::Ckpt(args) => ckpt::run(args),
        Command::Demo(args) => demo::run(args),
        Command::EccSim(args) => ecc_sim::run(args),
    }
}
