//! `nam`: the command-line front end of network-attached memory.

mod bench;
mod child;
mod ckpt_app;
mod ckpt_bench;
mod ckpt_check;
mod ckpt_incr_bench;
mod ckpt_policy_bench;
mod demo;
mod ecc_sim;
mod farmem_bench;
mod mpi_tool;
mod plot;
mod serve;
mod sim;
mod status;
mod status_path;

use clap::{Parser, Subcommand};

/// Network-attached memory: memory servers, clients, checkpointing, far memory, models.
#[derive(Parser)]
#[command(name = "nam", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a memory server.
    Serve(serve::ServeArgs),
    /// Show a server's capacity, usage, clients and traffic.
    Status(status::StatusArgs),
    /// Measure put, get and fetch-add, optionally beside ucx_perftest.
    Bench(bench::BenchArgs),
    /// Start a local server and show allocation, put/get, atomics, signals and a benchmark.
    Demo(demo::DemoArgs),
    /// Rerun the DRAM fault-injection study of Abeyratne 2017 (Table 4.4) or benchmark its codes.
    #[command(name = "ecc-sim")]
    EccSim(ecc_sim::EccSimArgs),
    /// Interconnect simulator: on-chip topologies (Abeyratne 2017 Ch. III) and the ExaNeSt torus.
    Sim(sim::SimArgs),
    /// Far memory against local memory: pointer chase, SAXPY, friends-of-friends, page faults.
    #[command(name = "farmem-bench")]
    FarmemBench(farmem_bench::FarmemBenchArgs),
    /// Under mpirun: check L2 redundancy (erase, rebuild, compare) or run a checkpointing app.
    /// Compare checkpoint redundancy schemes under mpirun: NAM-XOR, partner, XOR on nodes.
    #[command(name = "ckpt-bench")]
    CkptBench(ckpt_bench::CkptBenchArgs),
    #[command(name = "ckpt-check")]
    CkptCheck(ckpt_check::CkptCheckArgs),
    /// Under mpirun: Abeyratne 2017's RAM/SSD placement microbenchmark over every policy.
    #[command(name = "ckpt-policy-bench")]
    CkptPolicyBench(ckpt_policy_bench::PolicyBenchArgs),
    /// Incremental checkpointing modes (Abeyratne 2017 Ch. V) against runs without checkpoints.
    #[command(name = "ckpt-incr-bench")]
    CkptIncrBench(ckpt_incr_bench::CkptIncrBenchArgs),
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("NAM_LOG", "warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Status(args) => status::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Demo(args) => demo::run(args),
        Command::EccSim(args) => ecc_sim::run(args),
        Command::Sim(args) => sim::run(args),
        Command::FarmemBench(args) => farmem_bench::run(args),
        Command::CkptBench(args) => ckpt_bench::run(args),
        Command::CkptCheck(args) => ckpt_check::run(args),
        Command::CkptPolicyBench(args) => ckpt_policy_bench::run(args),
        Command::CkptIncrBench(args) => ckpt_incr_bench::run(args),
    }
}
