//! `nam ckpt drop GROUP --server HOST:PORT`: removes a checkpoint group a finished job left
//! on a memory server. `nam ckpt scavenge`: copies a node's checkpoints to the file-system
//! level after a job ([`nam_ckpt::scavenge`]). (The datasets and halt request of the
//! checkpoint library, `nam ckpt list|current|forget|delete|halt`, are in `ckpt_datasets`.)
//!
//! NAM-XOR's groups (Schmidt 2017 §4.5) outlive the job that made them on purpose: a job
//! that fails restarts and has the server rebuild its lost rank from the group's parity.
//! A job that ends for good leaves its group behind unless it dropped it, so `nam status`
//! lists every group (tenant, bytes, ranks joined, last complete epoch) and this command
//! removes one. It authenticates as the tenant of `NAM_TENANT`/`NAM_TOKEN` (every `NAM_*`
//! client variable applies, `NAM_SERVERS` aside); the server refuses another tenant's group.

use anyhow::{Context, Result};
use nam_proto::size::format_size;

/// Arguments of `nam ckpt`.
#[derive(clap::Args, Debug)]
pub struct CkptArgs {
    #[command(subcommand)]
    command: CkptCommand,
}

#[derive(clap::Subcommand, Debug)]
enum CkptCommand {
    /// Remove a checkpoint group (its parity and control block) from a server.
    Drop(DropArgs),
    /// List the datasets (checkpoints and outputs) under a level directory.
    List(crate::ckpt_datasets::ListArgs),
    /// Choose the version the next restart of a checkpoint name uses.
    Current(crate::ckpt_datasets::CurrentArgs),
    /// Forget a dataset: never offer it for restart again (its files stay).
    Forget(crate::ckpt_datasets::DatasetArgs),
    /// Delete what a directory holds of a dataset, and forget it.
    Delete(crate::ckpt_datasets::DatasetArgs),
    /// Ask a job to stop at its next should-exit check (or withdraw the request).
    Halt(crate::ckpt_datasets::HaltArgs),
    /// Copy this node's checkpoints of a dataset to the file-system level (flush.dir) and
    /// record them, after a job: run one per node (`mpirun -np NODES --map-by node`, `srun`,
    /// `pdsh`).
    Scavenge(ScavengeArgs),
}

/// Arguments of `nam ckpt scavenge`.
#[derive(clap::Args, Debug)]
struct ScavengeArgs {
    /// The job's checkpoint configuration (TOML); NAM_CKPT_* variables override it.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Checkpoint name (the configuration's `name` when not given).
    #[arg(long)]
    name: Option<String>,
    /// Version to copy (the newest committed on this node when not given).
    #[arg(long)]
    version: Option<u64>,
    /// This node's name (default: NAM_NODE_ID, the node NAM_EMULATE_NODES gives the
    /// launcher's rank, else the host name).
    #[arg(long)]
    node: Option<String>,
}

/// Arguments of `nam ckpt drop`.
#[derive(clap::Args, Debug)]
struct DropArgs {
    /// The group's name, as `nam status` lists it.
    group: String,
    /// The server, HOST:PORT.
    #[arg(long)]
    server: String,
}

/// Runs `nam ckpt`. For datasets in node-local directories, `delete` must be run on each
/// node (e.g. under `mpirun` or `pdsh`), like SCR's scavenge.
pub fn run(args: CkptArgs) -> Result<()> {
    match args.command {
        CkptCommand::Drop(args) => drop_group(&args),
        CkptCommand::List(args) => crate::ckpt_datasets::run_list(&args),
        CkptCommand::Current(args) => crate::ckpt_datasets::run_current(&args),
        CkptCommand::Forget(args) => crate::ckpt_datasets::run_forget(&args),
        CkptCommand::Delete(args) => crate::ckpt_datasets::run_delete(&args),
        CkptCommand::Halt(args) => crate::ckpt_datasets::run_halt(&args),
        CkptCommand::Scavenge(args) => scavenge(&args),
    }
}

fn scavenge(args: &ScavengeArgs) -> Result<()> {
    let config = nam_ckpt::Config::load(args.config.as_deref()).context("reading the checkpoint configuration")?;
    let node = args.node.clone().unwrap_or_else(nam_ckpt::scavenge::this_node);
    let name = args.name.clone().unwrap_or_else(|| config.name.clone());
    let done = nam_ckpt::scavenge::scavenge(&config, &node, &name, args.version)
        .with_context(|| format!("scavenging `{name}` on node {node}"))?;
    let ranks = |r: &[usize]| r.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    println!(
        "scavenged node={} name={} version={} copied=[{}] already=[{}] bytes={} to {}",
        done.node,
        done.name,
        done.version,
        ranks(&done.copied),
        ranks(&done.already),
        done.bytes,
        done.target.display()
    );
    Ok(())
}

fn drop_group(args: &DropArgs) -> Result<()> {
    let addr = nam_client::config::parse_servers(&args.server)?[0];
    let mut config = nam_client::ClientConfig::new(vec![addr]);
    config.apply_env().context("reading the client settings (NAM_TENANT, NAM_TOKEN, ...)")?;
    let client = nam_client::Client::connect(config).with_context(|| format!("connecting to {addr}"))?;
    let group = client.ckpt_drop(0, &args.group).with_context(|| format!("dropping group {:?}", args.group))?;
    println!(
        "dropped checkpoint group {} of tenant {} on {addr}: {} freed ({} ranks, last complete epoch {})",
        group.name,
        group.tenant,
        format_size(group.bytes),
        group.ranks,
        group.complete_epoch
    );
    Ok(())
}
