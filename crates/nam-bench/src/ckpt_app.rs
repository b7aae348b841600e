//! `nam-bench ckpt-check app`: a small MPI application on the checkpoint library, for tests and
//! for trying a configuration. Each rank iterates a deterministic update of its state
//! (sizes differ per rank), checkpoints every K steps, can be killed or lose its data, and
//! restarts; the final digest is the same as an uninterrupted run's.

use anyhow::{bail, Context, Result};
use nam_ckpt::{Checkpointer, Comm, Config, LevelKind};
use nam_proto::size::parse_size;
use std::path::PathBuf;

/// Arguments of `nam-bench ckpt-check app`.
#[derive(clap::Args, Debug)]
pub struct AppArgs {
    /// Configuration file (TOML); NAM_CKPT_* variables override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// State bytes per rank (rank r has size + 8*r).
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    size_per_rank: u64,
    /// Steps to run.
    #[arg(long, default_value_t = 10)]
    steps: u64,
    /// Checkpoint every K steps.
    #[arg(long, default_value_t = 2)]
    every: u64,
    /// Restart from the newest version before running.
    #[arg(long)]
    restart: bool,
    /// Restart exactly this version.
    #[arg(long)]
    restart_version: Option<u64>,
    /// Before restarting, rank 0 prints `latest version=V level=L skipped=N` (or `latest
    /// error: ...`) from `Checkpointer::latest_restorable`.
    #[arg(long)]
    print_latest: bool,
    /// Restart only the state region (id 1), not the step counter (id 2).
    #[arg(long)]
    restart_state_only: bool,
    /// Fail unless the restart comes from this level (ram, ssd, pfs).
    #[arg(long)]
    expect_level: Option<String>,
    /// Kill this rank (SIGKILL) after the step given by --die-after.
    #[arg(long)]
    die_rank: Option<usize>,
    /// Step after which --die-rank dies.
    #[arg(long, default_value_t = 0)]
    die_after: u64,
    /// Print the resolved configuration (rank 0) and exit.
    #[arg(long)]
    dump_config: bool,
    /// Protect overlapping regions, unprotect, and restart an unprotected id; print errors.
    #[arg(long)]
    region_errors: bool,
    /// Also keep a routed file (`route_file`) rewritten every step; print its content after
    /// a restart.
    #[arg(long)]
    routed_file: bool,
    /// Reserve the RAM level's files after protecting (`Checkpointer::reserve`) and print
    /// the inode of each reserved file.
    #[arg(long)]
    reserve: bool,
    /// Rank 0 also prints `checkpointing version=V` when it starts each checkpoint (a fault
    /// test times a cut link with it).
    #[arg(long)]
    progress: bool,
    /// Wait for this rank's L3 flush after every checkpoint (so flushes of consecutive
    /// versions never overlap across ranks).
    #[arg(long)]
    wait_flush: bool,
    /// Write each rank's final state (the state region, then the step counter) to
    /// `<DIR>/rank-<r>.state`, for tests that compare restored bytes one by one.
    #[arg(long)]
    dump_state: Option<PathBuf>,
}

fn step(state: &mut [u8], rank: usize, step: u64) {
    let mut x = (rank as u64 + 1) ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, b) in state.iter_mut().enumerate() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i as u64 | 1);
        *b = b.wrapping_add((x >> 56) as u8);
    }
}

/// Runs the application.
pub fn run(args: AppArgs) -> Result<()> {
    crate::mpi_tool::run_ranks("ckpt-check app", |universe| app(args, universe))
}

fn app(args: AppArgs, universe: &mpi::environment::Universe) -> Result<()> {
    let comm = Comm::new(&universe.world());
    let rank = comm.rank();
    let config = Config::load(args.config.as_deref())?;
    if args.dump_config {
        if rank == 0 {
            print!("{}", config.dump());
        }
        return Ok(());
    }
    let mut ckpt = Checkpointer::init(comm, config)?;
    // The regions live for the whole run and are reached only through these pointers, as a
    // C application's arrays are.
    let state_len = args.size_per_rank as usize + 8 * rank;
    let state_ptr = Box::leak(vec![0u8; state_len].into_boxed_slice()).as_mut_ptr();
    let counter_ptr = Box::leak(Box::new(0u64)) as *mut u64;
    // SAFETY: both buffers are leaked (valid for the whole run) and not touched during
    // the library's calls.
    unsafe {
        ckpt.protect(1, state_ptr, state_len)?;
        ckpt.protect(2, counter_ptr.cast(), 8)?;
    }
    // SAFETY: as above; the library reads these only inside its calls.
    let state = unsafe { std::slice::from_raw_parts_mut(state_ptr, state_len) };
    if args.reserve {
        reserve(&mut ckpt)?;
    }
    if args.region_errors {
        return region_errors(&mut ckpt, state);
    }
    if args.print_latest {
        let latest = ckpt.latest_restorable(None);
        if rank == 0 {
            match latest {
                Ok(l) => println!(
                    "latest version={} level={} skipped={}",
                    l.version,
                    l.level.map_or("none", |k| k.name()),
                    l.skipped.len()
                ),
                Err(e) => println!("latest error: {e}"),
            }
        }
    }
    if args.restart || args.restart_version.is_some() {
        let version = restart(&mut ckpt, &args)?;
        if args.routed_file {
            let path = ckpt.route_file("progress.txt")?;
            let text = std::fs::read_to_string(&path).with_context(|| format!("routed file {}", path.display()))?;
            println!("routed rank {rank}: {}", text.trim());
        }
        if args.restart_state_only {
            // SAFETY: see above.
            unsafe { counter_ptr.write(version) };
        }
    }
    // SAFETY: see above.
    let first = unsafe { counter_ptr.read() };
    for s in first + 1..=args.steps {
        step(state, rank, s);
        // SAFETY: see above.
        unsafe { counter_ptr.write(s) };
        after_step(&mut ckpt, &args, rank, s)?;
    }
    if let Some(dir) = &args.dump_state {
        let path = dir.join(format!("rank-{rank}.state"));
        // SAFETY: see above.
        let counter = unsafe { counter_ptr.read() };
        let dumped = std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(&path, [state, &counter.to_le_bytes()[..]].concat()))
            .with_context(|| format!("writing {}", path.display()));
        ckpt.comm().agree(dumped, "dumping the state")?;
    }
    let digest = crc32c_of(state) as u64;
    let digests = ckpt.comm().all_gather_u64(digest);
    let flush = ckpt.finalize();
    if rank == 0 {
        let all: Vec<String> = digests.iter().map(|d| format!("{d:08x}")).collect();
        println!("final steps={} digest={}", args.steps, all.join(","));
    }
    flush.context("flush")?;
    Ok(())
}

/// What follows step `s`: the routed file rewritten, a checkpoint every `--every` steps
/// (waiting for its flush with `--wait-flush`), and this rank's death if `--die-rank` says so.
fn after_step(ckpt: &mut Checkpointer, args: &AppArgs, rank: usize, s: u64) -> Result<()> {
    if args.routed_file {
        // Written every step: a restart must bring back the content of its version.
        let path = ckpt.route_file("progress.txt")?;
        std::fs::write(&path, format!("step {s} of rank {rank}\n"))?;
    }
    // `%`, not `is_multiple_of`: the workspace's rust-version is 1.75.
    #[allow(clippy::manual_is_multiple_of)]
    let due = s % args.every == 0;
    if due {
        if args.progress && rank == 0 {
            println!("checkpointing version={s}");
        }
        let out = ckpt.checkpoint(None, s)?;
        if rank == 0 {
            let level = out.level.map(LevelKind::name).unwrap_or("skipped");
            println!("checkpoint version={s} level={level} seconds={:.4}", out.seconds);
        }
        if args.wait_flush {
            ckpt.wait_flush(crate::limits::FLUSH_WAIT)?;
        }
    }
    if args.die_rank == Some(rank) && s == args.die_after {
        // SAFETY: the rank ends here, as a crashed rank does.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    Ok(())
}

/// Reserves the RAM level's files and prints, rank by rank, the bytes and the inodes.
fn reserve(ckpt: &mut Checkpointer) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let bytes = ckpt.reserve(None)?;
    let dir = ckpt.config().ram.dir.join(&ckpt.config().name);
    let prefix = format!("spare-rank-{}.", ckpt.comm().rank());
    let mut inodes: Vec<u64> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|e| e.metadata().ok().map(|m| m.ino()))
        .collect();
    inodes.sort_unstable();
    let line = format!("reserved rank={} bytes={bytes} inodes={inodes:?}", ckpt.comm().rank());
    let lines = ckpt.comm().all_gather_bytes(line.as_bytes());
    if ckpt.comm().rank() == 0 {
        lines.iter().for_each(|l| println!("{}", String::from_utf8_lossy(l)));
    }
    Ok(())
}

/// Restarts as the arguments ask; returns the version restored.
fn restart(ckpt: &mut Checkpointer, args: &AppArgs) -> Result<u64> {
    let ids = [1];
    let selected = args.restart_state_only.then_some(&ids[..]);
    let out = ckpt.restart(None, args.restart_version, selected)?;
    if ckpt.comm().rank() == 0 {
        println!(
            "restart version={} level={} rebuilt={:?} repaired_chunks={} fell_back={}",
            out.version,
            out.level.name(),
            out.rebuilt_ranks,
            out.repaired_chunks,
            out.fell_back.len()
        );
        for (v, l, why) in &out.fell_back {
            println!("fell back from v{v}/{}: {why}", l.name());
        }
    }
    if let Some(want) = &args.expect_level {
        if out.level.name() != want {
            bail!("restarted from {} but expected {want}", out.level.name());
        }
    }
    Ok(out.version)
}

fn crc32c_of(bytes: &[u8]) -> u32 {
    // A plain CRC-32C (Castagnoli), bitwise: the app checks results independently of the library.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

fn region_errors(ckpt: &mut Checkpointer, state: &mut [u8]) -> Result<()> {
    // SAFETY: the pointers stay inside `state`; nothing is checkpointed after these calls.
    let overlap = unsafe { ckpt.protect(3, state.as_mut_ptr().add(16), 64) };
    let twice = unsafe { ckpt.protect(1, state.as_mut_ptr(), 8) };
    let null = unsafe { ckpt.protect(4, std::ptr::null_mut(), 8) };
    ckpt.unprotect(2)?;
    let freed = ckpt.unprotect(2);
    let restart_freed = ckpt.restart(None, None, Some(&[2]));
    if ckpt.comm().rank() == 0 {
        println!("overlap: {}", overlap.unwrap_err());
        println!("twice: {}", twice.unwrap_err());
        println!("null: {}", null.unwrap_err());
        println!("unprotect freed: {}", freed.unwrap_err());
        println!("restart freed: {}", restart_freed.unwrap_err());
    }
    Ok(())
}
