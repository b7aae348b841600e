//! `nam-bench ckpt-check`, run under `mpirun`: checks the checkpoint library on this job's layout.
//! `redundancy` checks the L2 schemes end to end: Every rank writes a checkpoint (sizes may differ), the
//! scheme protects it, the chosen ranks lose their node-local directory (data and stored
//! redundancy, as a lost node does), the scheme rebuilds, and every byte is compared.

use anyhow::{bail, Context, Result};
use nam_ckpt::{redundancy, Comm, RedundancyConfig, Scheme, Target};
use nam_proto::size::parse_size;
use std::path::PathBuf;

/// Subcommands of `nam-bench ckpt-check`.
#[derive(clap::Subcommand, Debug)]
pub enum CkptCheck {
    /// Protect with an L2 scheme, erase ranks' data, rebuild, compare every byte.
    Redundancy(RedundancyArgs),
    /// A small application that checkpoints and restarts through the library.
    App(crate::ckpt_app::AppArgs),
}

/// Arguments of `nam-bench ckpt-check`.
#[derive(clap::Args, Debug)]
pub struct CkptCheckArgs {
    #[command(subcommand)]
    check: CkptCheck,
}

/// Arguments of `nam-bench ckpt-check redundancy`.
#[derive(clap::Args, Debug)]
pub struct RedundancyArgs {
    /// L2 scheme: none, partner, xor, nam-xor, rs.
    #[arg(long, default_value = "xor")]
    scheme: String,
    /// Checkpoint bytes per rank (with --uneven, rank r writes size*(r+1)/ranks + r).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    size_per_rank: u64,
    /// Give every rank a different size.
    #[arg(long)]
    uneven: bool,
    /// Ranks that lose their node-local directory before the rebuild (comma-separated).
    #[arg(long, value_delimiter = ',')]
    lose: Vec<usize>,
    /// Flip a byte of this rank's stored redundancy before the rebuild.
    #[arg(long)]
    corrupt_redundancy_of: Option<usize>,
    /// Node-local directory root (each rank uses `<dir>/rank-<r>`).
    #[arg(long)]
    dir: PathBuf,
    /// Largest XOR / RS set.
    #[arg(long, default_value_t = 8)]
    set_size: usize,
    /// Parity segments per RS set.
    #[arg(long, default_value_t = 2)]
    rs_parity: usize,
    /// Bytes per pipelined message.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block: u64,
    /// Memory servers for nam-xor (`host:port`, comma-separated).
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Rebuild with `Redundancy::rebuild_into`: a lost rank's data goes straight into three
    /// arrays of uneven sizes, as into an application's registered regions, which are filled
    /// with other bytes first.
    #[arg(long)]
    into_pieces: bool,
}

fn pattern(rank: usize, len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (rank as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Runs `nam-bench ckpt-check`.
pub fn run(args: CkptCheckArgs) -> Result<()> {
    match args.check {
        CkptCheck::Redundancy(a) => redundancy_check(a),
        CkptCheck::App(a) => crate::ckpt_app::run(a),
    }
}

fn redundancy_check(args: RedundancyArgs) -> Result<()> {
    crate::mpi_tool::run_ranks("ckpt-check redundancy", |universe| check_redundancy(args, universe))
}

fn check_redundancy(args: RedundancyArgs, universe: &mpi::environment::Universe) -> Result<()> {
    let comm = Comm::new(&universe.world());
    let (rank, ranks) = (comm.rank(), comm.size());
    let size = if args.uneven {
        (args.size_per_rank * (rank as u64 + 1) / ranks as u64 + rank as u64) as usize
    } else {
        args.size_per_rank as usize
    };
    let dir = args.dir.join(format!("rank-{rank}"));
    // Every step that can fail on some ranks only is agreed (crate::mpi_tool).
    let created = std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()));
    comm.agree(created, "creating the rank's directory")?;
    let config = RedundancyConfig {
        scheme: Scheme::parse(&args.scheme)?,
        set_size: args.set_size,
        rs_parity: args.rs_parity,
        block_bytes: args.block as usize,
        servers: args.servers.clone(),
    };
    let mut scheme = comm.agree(redundancy::build(&comm, &config), "setting up the scheme")?;
    let data = pattern(rank, size);
    let target = Target { dir: &dir, name: "check.1", fsync: false };
    comm.agree(std::fs::write(dir.join("check.1.data"), &data).map_err(anyhow::Error::from), "writing the data")?;
    let stats = comm.agree(scheme.protect(&data, &target), "protecting")?;
    let total_s = comm.max_f64(stats.seconds);
    let cpu_s = comm.sum_f64(stats.cpu_seconds);
    let lost = || -> Result<()> {
        if args.lose.contains(&rank) {
            std::fs::remove_dir_all(&dir)?;
            std::fs::create_dir_all(&dir)?;
        }
        if args.corrupt_redundancy_of == Some(rank) {
            corrupt_one(&dir)?;
        }
        Ok(())
    };
    comm.agree(lost(), "losing the data")?;
    let local = std::fs::read(dir.join("check.1.data")).ok();
    // With --into-pieces, a lost rank's three arrays: cut where no block boundary falls.
    let cuts = [size / 3, size / 3 + size / 4 + 7].map(|c| c.min(size));
    let mut arrays = [vec![0xA5u8; cuts[0]], vec![0xA5u8; cuts[1] - cuts[0]], vec![0xA5u8; size - cuts[1]]];
    let rebuilt = if args.into_pieces {
        let mut into: Vec<&mut [u8]> = match local {
            Some(_) => Vec::new(),
            None => arrays.iter_mut().map(|a| &mut a[..]).collect(),
        };
        comm.agree(scheme.rebuild_into(local.as_deref(), &mut into, &target), "the rebuild into the arrays")
    } else {
        comm.agree(scheme.rebuild(local.as_deref(), &target), "the rebuild")
    };
    let rebuilt = match rebuilt {
        Ok(r) => r,
        Err(e) => {
            if rank == 0 {
                println!("rebuild failed: {e}");
            }
            bail!("rank {rank}: rebuild failed: {e}");
        }
    };
    let back = match (local, rebuilt.data) {
        (Some(local), _) => local,
        (None, Some(_)) if args.into_pieces => bail!("rank {rank}: rebuild_into returned the data instead"),
        (None, Some(data)) => data,
        (None, None) if args.into_pieces => arrays.concat(),
        (None, None) => bail!("rank {rank}: no data after rebuild"),
    };
    let ok = comm.all_agree(back == data);
    let restore_s = comm.max_f64(rebuilt.seconds);
    if rank == 0 {
        println!(
            "scheme={} ranks={ranks} nodes={} lost={:?} protect_s={total_s:.4} rank_cpu_s={cpu_s:.4} rebuild_s={restore_s:.4} bytes_match={ok}",
            config.scheme.name(),
            comm.nodes().nodes(),
            rebuilt.lost,
        );
    }
    if !ok {
        bail!("rank {rank}: rebuilt bytes differ");
    }
    Ok(())
}

fn corrupt_one(dir: &std::path::Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !name.ends_with(".data") {
            let mut bytes = std::fs::read(&path)?;
            let at = bytes.len() / 2;
            bytes[at] ^= 0x5a;
            std::fs::write(&path, bytes)?;
            return Ok(());
        }
    }
    bail!("no redundancy file in {} to corrupt", dir.display())
}
