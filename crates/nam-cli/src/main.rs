//! `nam`: the command-line front end of network-attached memory.

use clap::{Parser, Subcommand};

/// Network-attached memory: memory servers, clients, checkpointing, far memory, models.
#[derive(Parser)]
#[command(name = "nam", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {}
}
