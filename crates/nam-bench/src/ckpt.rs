//! `nam-bench ckpt`: Schmidt 2017 §5.2's comparison of checkpoint redundancy schemes, run under
//! `mpirun`. An iPic3D-like mockup alternates a compute phase (a particle push over the
//! rank's state) with a checkpoint: write the state to node-local storage (`--dir`), then add
//! redundancy with the scheme: partner copies, XOR on the nodes, or NAM-XOR (the memory server
//! pulls the buffers and keeps the parity). The mockup keeps its particle arrays in the memory
//! it checkpoints, as FTI and VeloC protect an application's arrays in place: with a NAM-XOR
//! row that is the registered group buffer the server pulls (the way
//! [`NamXor::buffer_mut`] offers), and partner and XOR write and send the same arrays, so no
//! scheme pays a copy into a staging buffer.
//! After the last checkpoint one rank loses its node-local directory and the job restarts
//! from local storage plus redundancy; every byte is compared. All schemes run in one
//! invocation, their checkpoints interleaved round by round, so the ratios compare like with
//! like; a plain in-memory XOR loop measured in the same run is the yardstick for the
//! server's parity throughput.

use crate::ckpt_lib;
use anyhow::{bail, Context, Result};
use nam_ckpt::comm::Comm;
use nam_ckpt::redundancy::{self, NamXor, Redundancy, RedundancyConfig, Scheme, ServerWork, Target};
use nam_ckpt::CkptError;
use nam_proto::size::{format_size, parse_size};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Instant;

/// Arguments of `nam-bench ckpt`.
#[derive(clap::Args, Debug)]
pub struct CkptBenchArgs {
    /// all (partner, xor, nam-xor and, with fsync, nam-xor-write-first, compared in one run
    /// with ratios), or a comma-separated list of rows. NAM-XOR writes the local copy, flags
    /// its buffer ready and fsyncs while the server pulls, as the checkpoint library does;
    /// nam-xor-write-first flags it after the fsync, in the order partner and XOR (and the
    /// seed) work; nam-xor-flag-first flags it before the write.
    #[arg(long, default_value = "all")]
    scheme: String,
    /// Checkpoint bytes per rank (weak scaling), or in total (strong scaling).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    size_per_rank: u64,
    /// weak: every rank checkpoints --size-per-rank; strong: the size is split over the ranks.
    #[arg(long, default_value = "weak")]
    scaling: String,
    /// Timed rounds (after one untimed warm-up round): each computes, then every scheme
    /// checkpoints the same state; per-checkpoint figures are medians over the rounds.
    #[arg(long, default_value_t = 2)]
    checkpoints: u32,
    /// Compute phase before each checkpoint, in milliseconds.
    #[arg(long, default_value_t = 100)]
    compute_ms: u64,
    /// Node-local storage root (each rank uses `<dir>/rank-<r>`); disk or tmpfs.
    #[arg(long)]
    dir: PathBuf,
    /// Write local checkpoints without fsync (tmpfs, or to show the page-cache case).
    #[arg(long)]
    no_fsync: bool,
    /// Memory servers for NAM-XOR; without, rank 0 starts one on this host.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Largest XOR / NAM-XOR set (ranks on distinct nodes).
    #[arg(long, default_value_t = 8)]
    set_size: usize,
    /// Bytes per pipelined message of the partner and XOR schemes.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block: u64,
    /// NAM-XOR: bytes per server GET segment (0: the server's default).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    segment: u64,
    /// NAM-XOR: server GETs in flight per rank (0: the server's default).
    #[arg(long, default_value_t = 0)]
    in_flight: u32,
    /// NAM-XOR's checkpoint buffer, which holds the mockup's arrays: `library` (UCX allocates
    /// it in shared memory, and the server reads it in place) or `in-place` (the
    /// application's own array registered where it is, `Client::ckpt_join_in`; over shared
    /// memory the server reads it with CMA, or with GETs emulated by messages the rank
    /// answers where CMA is not permitted).
    #[arg(long, value_enum, default_value = "library")]
    nam_buffer: NamBuffer,
    /// The rank that loses its node-local data before the restart.
    #[arg(long, default_value_t = 1)]
    lose: usize,
    /// Restarts per scheme, each after erasing `--lose`'s data (the median is reported).
    #[arg(long, default_value_t = 3)]
    restores: u32,
    /// One JSON object per scheme instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the table as Markdown here (rank 0).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Also write the JSON objects (one per line) here (rank 0).
    #[arg(long)]
    json_file: Option<PathBuf>,
    /// Leave NAM-XOR's groups on the memory servers when the run ends (as a job that may be
    /// restarted does); by default the benchmark drops them, so a run leaves nothing behind.
    #[arg(long)]
    keep_groups: bool,
    /// Rank 0 prints to stderr when each checkpoint starts and ends, and each restart ends
    /// (a fault test times a cut link with these).
    #[arg(long)]
    progress: bool,
}

/// Where NAM-XOR's checkpoint buffer comes from (`--nam-buffer`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum NamBuffer {
    /// Allocated by the library (UCX, in shared memory where it can).
    Library,
    /// The application's own array, registered in place.
    InPlace,
}

/// One scheme's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
struct SchemeResult {
    scheme: String,
    ranks: usize,
    nodes: usize,
    bytes_per_rank: u64,
    storage: String,
    /// NAM-XOR's segment size (0: the server's default).
    segment_bytes: u64,
    /// NAM-XOR's checkpoint buffer (`None` for partner and XOR).
    nam_buffer: Option<NamBuffer>,
    /// Median wall time of one checkpoint (local write, redundancy), slowest rank.
    checkpoint_s: f64,
    /// Of which redundancy alone.
    redundancy_s: f64,
    /// Restart after one rank lost its data: local reads, rebuild, compare (median of
    /// `--restores`).
    restart_s: f64,
    /// The rebuild on every rank, from the moment every survivor has reloaded its local
    /// checkpoint to the lost rank holding its bytes again (slowest rank; median of
    /// `--restores`): the ranks agreeing who was lost and on what, and the restore.
    rebuild_s: f64,
    /// Lost rank's bytes over its restore time, median of `--restores` restarts. NAM-XOR: on
    /// the lost rank, from asking the memory server for its bytes to holding them verified in
    /// its buffer; partner and XOR: the collective rebuild (`rebuild_s`), which is their
    /// restore.
    restore_gbps: f64,
    /// Checkpoint bytes of all ranks over the checkpoint time.
    aggregate_gbps: f64,
    /// Restart with nothing lost (every rank reads its node-local copy back, the scheme
    /// checks that nobody needs a rebuild), slowest rank, median of `--restores`.
    restart_noloss_s: f64,
    /// A rank's bytes over that restart's time: restore bandwidth without loss.
    restore_noloss_gbps: f64,
    /// NAM-XOR on the lost rank (median of `--restores`): asking the server, the server's
    /// rebuild, bringing the bytes into the rank's buffer (0 when the server wrote them
    /// there itself), and of the rebuild the server's own work.
    restore_profile_s: Option<[f64; 4]>,
    /// CPU seconds the compute ranks spent on redundancy, summed over ranks, per checkpoint
    /// (median over the checkpoints).
    rank_cpu_s: f64,
    /// NAM-XOR only: bytes the server folds into parity per CPU second of its work
    /// (pulling, XOR, checksums; every thread), over the bytes per CPU second of a plain
    /// in-memory XOR loop measured in the same run. CPU time, because here the server
    /// shares two cores with the ranks, which a memory server on its own node does not.
    server_xor_ratio: Option<f64>,
    /// The same with the server's wall time (inflated by the ranks sharing its cores).
    server_xor_wall_ratio: Option<f64>,
    bytes_match: bool,
}

/// When NAM-XOR flags its buffer ready, relative to writing the rank's node-local copy.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flag {
    /// Once the copy is written and fsynced (Schmidt 2017's order; partner and XOR always start
    /// their redundancy there, since it needs the rank's CPU).
    AfterFsync,
    /// Once the bytes are in the page cache: the server pulls during the fsync (the library).
    BeforeFsync,
    /// Before the write: the server pulls while the rank copies into the page cache too.
    BeforeWrite,
}

/// One scheme as the benchmark runs it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    scheme: Scheme,
    flag: Flag,
}

impl Run {
    /// Every row name `--scheme` takes, with its run.
    const ROWS: [(&'static str, Run); 5] = [
        ("partner", Run { scheme: Scheme::Partner, flag: Flag::AfterFsync }),
        ("xor", Run { scheme: Scheme::Xor, flag: Flag::AfterFsync }),
        ("nam-xor", Run { scheme: Scheme::NamXor, flag: Flag::BeforeFsync }),
        ("nam-xor-write-first", Run { scheme: Scheme::NamXor, flag: Flag::AfterFsync }),
        ("nam-xor-flag-first", Run { scheme: Scheme::NamXor, flag: Flag::BeforeWrite }),
    ];

    fn parse(name: &str) -> Result<Run> {
        match Run::ROWS.iter().find(|(n, _)| *n == name) {
            Some(&(_, run)) => Ok(run),
            None => {
                let names: Vec<&str> = Run::ROWS.iter().map(|(n, _)| *n).collect();
                bail!("--scheme {name}: use all or a comma-separated list of {}", names.join(", "))
            }
        }
    }

    fn name(self) -> &'static str {
        Run::ROWS.iter().find(|(_, r)| *r == self).map(|(n, _)| *n).expect("every run has a row")
    }

    /// The rows `--scheme` asks for.
    fn list(scheme: &str, no_fsync: bool) -> Result<Vec<Run>> {
        let runs: Vec<Run> = match scheme {
            // Without fsync the write-first row is left out: the overlap it measures is mostly
            // the disk's, and the tmpfs runs would hold a fourth lane's files in memory.
            "all" if no_fsync => Run::ROWS[..3].iter().map(|r| r.1).collect(),
            "all" => Run::ROWS[..4].iter().map(|r| r.1).collect(),
            list => list.split(',').map(Run::parse).collect::<Result<_>>()?,
        };
        if runs.iter().filter(|r| r.scheme == Scheme::NamXor).count() > 2 {
            // Each lane restarts from its own last checkpoint at the end of the run.
            bail!("--scheme {scheme}: at most two NAM-XOR rows per run (they share one group, whose ping-pong parity keeps the last two epochs)");
        }
        Ok(runs)
    }
}

/// Runs `nam-bench ckpt` (under mpirun).
pub fn run(args: CkptBenchArgs) -> Result<()> {
    crate::mpi_tool::run_ranks("ckpt", |universe| bench(args, universe))
}

fn bench(args: CkptBenchArgs, universe: &mpi::environment::Universe) -> Result<()> {
    let comm = Comm::new(&universe.world());
    let schemes = Run::list(&args.scheme, args.no_fsync)?;
    let len = match args.scaling.as_str() {
        "weak" => args.size_per_rank,
        "strong" => args.size_per_rank / comm.size() as u64,
        other => bail!("--scaling {other}: use weak or strong"),
    } as usize;
    if comm.size() < 2 || args.lose >= comm.size() {
        bail!("ckpt-bench needs at least 2 ranks and --lose below the rank count");
    }
    let xor_loop_gbps = if comm.rank() == 0 { xor_loop_gbps(len.min(64 << 20), comm.size()) } else { 0.0 };
    let mut server = None;
    let servers = if schemes.iter().any(|r| r.scheme == Scheme::NamXor) && args.servers.is_empty() {
        let (child, addr) = start_local_server(&comm, len, args.set_size)?;
        server = child;
        vec![addr]
    } else {
        args.servers.clone()
    };
    // An error names its rank already (crate::mpi_tool).
    let (results, expected) = compare(&comm, &args, &schemes, len, &servers, xor_loop_gbps)?;
    let library = library_rows(&comm, &args, &schemes, &servers, &expected);
    if let Some(mut child) = server {
        let _ = child.kill();
        let _ = child.wait();
    }
    let library = library?;
    if comm.rank() == 0 {
        report(&args, &results, &library, xor_loop_gbps)?;
    }
    Ok(())
}

/// The restarts through the checkpoint library, one row per scheme ([`crate::ckpt_lib`]),
/// from the state the last checkpoint of the comparison saw.
fn library_rows(
    comm: &Comm,
    args: &CkptBenchArgs,
    runs: &[Run],
    servers: &[String],
    expected: &[u8],
) -> Result<Vec<ckpt_lib::LibraryResult>> {
    let setup = ckpt_lib::Setup {
        dir: &args.dir,
        fsync: !args.no_fsync,
        set_size: args.set_size,
        block: args.block,
        servers,
        lose: args.lose,
        rounds: args.restores,
    };
    let rows: Vec<Scheme> = runs.iter().map(|r| r.scheme).collect();
    let mut out = Vec::new();
    for scheme in ckpt_lib::schemes(&rows, args.keep_groups) {
        let measured = ckpt_lib::measure(comm, &setup, scheme, expected);
        out.push(measured.with_context(|| format!("scheme {}: restart through the library", scheme.name()))?);
        if args.progress && comm.rank() == 0 {
            eprintln!("nam-bench ckpt: scheme {} library restarts done", scheme.name());
        }
    }
    Ok(out)
}

/// Rank 0 starts `nam serve` on this host with room for every set's two parity slots.
fn start_local_server(comm: &Comm, len: usize, set_size: usize) -> Result<(Option<Child>, String)> {
    let mut child = None;
    let mut addr = String::new();
    if comm.rank() == 0 {
        let sets = comm.size().div_ceil(set_size.max(2) - 1);
        let capacity = (2 * len as u64 + (8 << 20)) * sets as u64 + (64 << 20);
        let (c, line) = nam_cli::local::spawn_serve(&["--capacity", &capacity.to_string()], None)?;
        addr = nam_cli::local::banner_addr(&line).map(|a| a.to_string()).unwrap_or_default();
        child = Some(c);
    }
    let addr = String::from_utf8(comm.broadcast_bytes(0, addr.as_bytes()))?;
    if addr.is_empty() {
        bail!("the local memory server did not start");
    }
    Ok((child, addr))
}

/// The mockup's state: particles whose positions move with their velocities, as `f64`s in
/// the bytes of the memory the schemes checkpoint (`len` bytes; a tail shorter than one
/// `f64` stays as initialized).
mod mockup {
    use std::time::{Duration, Instant};

    fn particles(state: &mut [u8]) -> &mut [f64] {
        // SAFETY: every bit pattern is a valid f64; align_to_mut leaves unaligned ends out.
        let (_, particles, _) = unsafe { state.align_to_mut::<f64>() };
        particles
    }

    /// Fills `state` with `rank`'s initial particles.
    pub fn init(state: &mut [u8], rank: usize) {
        state.fill(0);
        for (i, x) in particles(state).iter_mut().enumerate() {
            *x = ((i * 31 + rank * 7) % 1000) as f64 * 1e-3;
        }
    }

    /// Pushes the particles for `ms` milliseconds (at least one sweep).
    pub fn compute(state: &mut [u8], ms: u64) {
        let until = Instant::now() + Duration::from_millis(ms);
        let particles = particles(state);
        loop {
            let half = particles.len() / 2;
            let (pos, vel) = particles.split_at_mut(half);
            for (p, v) in pos.iter_mut().zip(vel.iter_mut()) {
                *p += 1e-3 * *v;
                *v = 0.999 * *v + 1e-6;
            }
            if Instant::now() >= until {
                return;
            }
        }
    }
}

/// What one scheme checkpoints from: partner and XOR take any slice (the application's
/// arrays; on a restart they read into a scratch buffer), NAM-XOR its registered buffer, the
/// one the server pulls.
enum Protector {
    Generic(Box<dyn Redundancy>),
    Nam(Box<NamXor>),
}

impl Protector {
    fn build(comm: &Comm, args: &CkptBenchArgs, scheme: Scheme, servers: &[String]) -> Result<Self> {
        Ok(match scheme {
            Scheme::NamXor => Protector::Nam(Box::new(NamXor::with_tuning(
                comm,
                args.set_size,
                servers,
                args.segment as u32,
                args.in_flight,
            )?)),
            _ => {
                let config = RedundancyConfig {
                    scheme,
                    set_size: args.set_size,
                    block_bytes: args.block as usize,
                    servers: Vec::new(),
                    ..Default::default()
                };
                Protector::Generic(redundancy::build(comm, &config)?)
            }
        })
    }

    /// The buffer a restart reads the local checkpoint into: `scratch` for partner and XOR,
    /// the registered buffer for NAM-XOR.
    fn buffer<'a>(&'a mut self, scratch: &'a mut [u8], len: usize) -> Result<&'a mut [u8]> {
        Ok(match self {
            Protector::Generic(_) => &mut scratch[..len],
            Protector::Nam(n) => n.buffer_mut(len)?,
        })
    }

    /// Writes the checkpoint to `local` and adds the scheme's redundancy: partner and XOR
    /// checkpoint `state` (the application's arrays), NAM-XOR its registered buffer, which
    /// holds them. Partner and XOR start the redundancy once the local copy is written and
    /// fsynced, as in SCR (their redundancy needs the rank's CPU); NAM-XOR flags its buffer
    /// ready where `flag` says.
    fn checkpoint(
        &mut self,
        state: Option<&[u8]>,
        len: usize,
        local: &Path,
        target: &Target,
        flag: Flag,
    ) -> Result<redundancy::ProtectStats> {
        let fsync = target.fsync;
        Ok(match self {
            Protector::Generic(r) => {
                let state = state.context("partner and XOR checkpoint the application's arrays")?;
                write_local(local, &state[..len], fsync)?;
                r.protect(&state[..len], target)?
            }
            // A failed write surfaces through the protect, so every rank learns of it.
            Protector::Nam(n) => match flag {
                Flag::AfterFsync => {
                    write_local(local, n.buffer_mut(len)?, fsync)?;
                    n.protect_buffer(len, target)?
                }
                Flag::BeforeFsync => {
                    let written = write_unsynced(local, n.buffer_mut(len)?);
                    n.protect_buffer_while(len, target, |_| written.and_then(|file| sync_local(local, file, fsync)))?
                }
                Flag::BeforeWrite => n.protect_buffer_while(len, target, |data| write_local(local, data, fsync))?,
            },
        })
    }

    /// Rebuild after a restart: survivors have read their local checkpoint into the buffer.
    /// The server's work on the last epoch (NAM-XOR only).
    fn server_work(&self) -> Result<Option<ServerWork>> {
        Ok(match self {
            Protector::Generic(..) => None,
            Protector::Nam(n) => Some(n.server_work()?),
        })
    }

    /// NAM-XOR's restore proper on the lost rank ([`NamXor::restore_seconds`]).
    fn restore_seconds(&self) -> Option<f64> {
        match self {
            Protector::Generic(..) => None,
            Protector::Nam(n) => Some(n.restore_seconds().unwrap_or(0.0)),
        }
    }

    fn rebuild(&mut self, scratch: &[u8], have: bool, len: usize, target: &Target) -> Result<redundancy::Rebuilt> {
        Ok(match self {
            Protector::Generic(r) => r.rebuild(have.then_some(&scratch[..len]), target)?,
            Protector::Nam(n) => n.rebuild_buffer(have, target)?,
        })
    }

    /// Deletes the scheme's redundancy for an older checkpoint (the node-local file goes
    /// separately).
    fn discard(&mut self, target: &Target) -> Result<()> {
        match self {
            Protector::Generic(r) => r.discard(target)?,
            Protector::Nam(n) => n.discard(target)?,
        }
        Ok(())
    }
}

/// One row of the comparison as it runs: its scheme, node-local directory, protector (the
/// two NAM-XOR rows share one) and timed checkpoints.
struct Lane {
    run: Run,
    dir: PathBuf,
    protector: usize,
    samples: Vec<CheckpointSample>,
}

/// Runs every scheme of `runs` on the same application state, interleaved: each round the
/// mockup computes, then every scheme checkpoints that state, in an order rotated by one each
/// round. The disk's and the shared cores' drift over the minutes of a run then hits every
/// scheme alike, where running the schemes one after another let a slow minute decide a
/// ratio. Then each scheme restarts `--restores` times after the lost rank's data is erased.
fn compare(
    comm: &Comm,
    args: &CkptBenchArgs,
    runs: &[Run],
    len: usize,
    servers: &[String],
    xor_loop_gbps: f64,
) -> Result<(Vec<SchemeResult>, Vec<u8>)> {
    let rank = comm.rank();
    let (mut protectors, mut lanes) = set_up_lanes(comm, args, runs, servers)?;
    // NAM-XOR joins its group with the buffer here, and the application's arrays live in
    // it; every rank must learn if one failed (a rank that returned alone would leave the
    // others in the next collective).
    let home = protectors.iter().position(|(s, _)| *s == Scheme::NamXor);
    let joined: Result<()> = home.map_or(Ok(()), |h| join_nam_xor(&mut protectors[h].1, args.nam_buffer, len));
    comm.agree(joined, "joining NAM-XOR's group with the buffer")?;
    let mut own = if home.is_some() { Vec::new() } else { vec![0u8; len] };
    mockup::init(app_state(&mut own, &mut protectors, home, len)?, rank);
    let mut name = String::new();
    // Round 0 is a warm-up for every scheme alike (buffers joined and mapped, files and MPI
    // connections set up), as osu-style benchmarks skip their first iterations.
    for n in 0..=args.checkpoints as usize {
        mockup::compute(app_state(&mut own, &mut protectors, home, len)?, args.compute_ms);
        name = format!("ckpt.{n}");
        let count = lanes.len();
        for k in 0..count {
            let lane = &mut lanes[(k + n) % count];
            let (state, protector) = state_and_protector(&mut own, &mut protectors, home, lane.protector, len)?;
            checkpoint_lane(comm, args, lane, protector, state, len, n)?;
        }
    }
    // What every restart must give back: the arrays as the last checkpoint saw them (a
    // NAM-XOR restart overwrites the lost rank's, which live in its buffer).
    let expected =
        comm.agree(app_state(&mut own, &mut protectors, home, len).map(|s| s.to_vec()), "reading the state")?;
    drop(own);
    let mut scratch = vec![0u8; len];
    let mut results = Vec::new();
    for lane in &lanes {
        let protector = &mut protectors[lane.protector].1;
        let (mut restarts, mut intact) = (Vec::new(), Vec::new());
        // Restarts with nothing lost first: a restart with a loss rewrites the lost rank's
        // files, which must then be what the next restart reads.
        for _ in 0..args.restores.max(1) {
            let restarted = restart(comm, args, protector, &mut scratch, &expected, (&lane.dir, &name, false))
                .with_context(|| format!("scheme {}: restart with nothing lost", lane.run.name()))?;
            intact.push(restarted);
        }
        for _ in 0..args.restores.max(1) {
            let restarted = restart(comm, args, protector, &mut scratch, &expected, (&lane.dir, &name, true))
                .with_context(|| format!("scheme {}: restart", lane.run.name()))?;
            if args.progress && comm.rank() == 0 {
                eprintln!("nam-bench ckpt: scheme {} restart done", lane.run.name());
            }
            restarts.push(restarted);
        }
        // Node-local storage may be tmpfs: give the space back before the next restarts.
        comm.barrier();
        let _ = std::fs::remove_dir_all(&lane.dir);
        results.push(lane_result(comm, args, lane, (&restarts, &intact), len, xor_loop_gbps));
    }
    // The run is over: its groups hold parity no job will restore from.
    if !args.keep_groups {
        for (_, protector) in &mut protectors {
            if let Protector::Nam(n) = protector {
                comm.agree(n.drop_group(), "dropping NAM-XOR's group")?;
            }
        }
    }
    Ok((results, expected))
}

/// One protector per scheme, with the scheme it protects with.
type Protectors = Vec<(Scheme, Protector)>;

/// One protector per scheme and one lane (directory, samples) per row of `runs`. Both
/// NAM-XOR rows use one group, as one job would: a group stays on the server (for restarts)
/// with its members' buffers attached while their clients are connected.
fn set_up_lanes(
    comm: &Comm,
    args: &CkptBenchArgs,
    runs: &[Run],
    servers: &[String],
) -> Result<(Protectors, Vec<Lane>)> {
    let mut protectors: Protectors = Vec::new();
    let mut lanes = Vec::new();
    for &run in runs {
        let protector = match protectors.iter().position(|(s, _)| *s == run.scheme) {
            Some(p) => p,
            None => {
                // Set up in sets (NAM-XOR's on different servers): every rank learns of a failure.
                let built = Protector::build(comm, args, run.scheme, servers);
                let built = comm.agree(built, &format!("setting up {}", run.name()))?;
                protectors.push((run.scheme, built));
                protectors.len() - 1
            }
        };
        let dir = args.dir.join(run.name()).join(format!("rank-{}", comm.rank()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        lanes.push(Lane { run, dir, protector, samples: Vec::new() });
    }
    Ok((protectors, lanes))
}

/// Checkpoint `n` (`ckpt.<n>`) of one lane, timed from the barrier of the agreement before it;
/// round 0 is the warm-up and keeps no sample.
fn checkpoint_lane(
    comm: &Comm,
    args: &CkptBenchArgs,
    lane: &mut Lane,
    protector: &mut Protector,
    state: Option<&[u8]>,
    len: usize,
    n: usize,
) -> Result<()> {
    let name = format!("ckpt.{n}");
    // The previous checkpoint goes before the next is written, so that every
    // scheme's files fit in tmpfs at once (a job would keep it until the new one is
    // complete; the space, not the time, differs).
    let discarded = match n {
        0 => Ok(()),
        _ => {
            let old = format!("ckpt.{}", n - 1);
            let _ = std::fs::remove_file(lane.dir.join(format!("{old}.data")));
            protector.discard(&Target { dir: &lane.dir, name: &old, fsync: false })
        }
    };
    // The agreement's allreduce is also the barrier the checkpoint is timed from.
    comm.agree(discarded, &format!("scheme {}: discarding checkpoint {}", lane.run.name(), n.max(1) - 1))?;
    let target = Target { dir: &lane.dir, name: &name, fsync: !args.no_fsync };
    if args.progress && comm.rank() == 0 {
        eprintln!("nam-bench ckpt: scheme {} checkpoint {n} started", lane.run.name());
    }
    let start = Instant::now();
    let stats = protector.checkpoint(state, len, &lane.dir.join(format!("{name}.data")), &target, lane.run.flag);
    // A scheme agrees within its sets only (NAM-XOR's sets may live on different
    // servers): every rank must learn of a failed set before the next collective.
    let stats = comm.agree(stats, &format!("scheme {}: checkpoint {n}", lane.run.name()))?;
    if args.progress && comm.rank() == 0 {
        eprintln!("nam-bench ckpt: scheme {} checkpoint {n} done", lane.run.name());
    }
    let elapsed = comm.max_f64(start.elapsed().as_secs_f64());
    let (red, cpu) = (comm.max_f64(stats.seconds), comm.sum_f64(stats.cpu_seconds));
    let work = comm.agree(protector.server_work(), "asking the memory server for its work")?.unwrap_or_default();
    if n > 0 {
        lane.samples.push(CheckpointSample { seconds: elapsed, redundancy: red, cpu, server: work });
    }
    Ok(())
}

/// Joins NAM-XOR's group with a buffer of `len` bytes that holds the application's arrays:
/// one the library allocates, or (`in-place`) an array of the application's registered where
/// it is.
fn join_nam_xor(protector: &mut Protector, buffer: NamBuffer, len: usize) -> Result<()> {
    match (protector, buffer) {
        (Protector::Nam(n), NamBuffer::InPlace) => {
            // The member borrows the array for the life of the process, as the scheme's
            // client lives that long.
            Ok(n.join_in(Box::leak(vec![0u8; len].into_boxed_slice()))?)
        }
        (protector, _) => protector.buffer(&mut [], len).map(drop),
    }
}

/// The application's arrays: in the registered buffer of NAM-XOR's protector (`home`) when a
/// NAM-XOR row runs, else in `own`.
fn app_state<'a>(
    own: &'a mut [u8],
    protectors: &'a mut [(Scheme, Protector)],
    home: Option<usize>,
    len: usize,
) -> Result<&'a mut [u8]> {
    match home {
        Some(h) => protectors[h].1.buffer(&mut [], len),
        None => Ok(&mut own[..len]),
    }
}

/// The protector `lane` checkpoints with, and the application's arrays when they live
/// elsewhere than in that protector's own buffer (`None` when they are its buffer).
fn state_and_protector<'a>(
    own: &'a mut [u8],
    protectors: &'a mut [(Scheme, Protector)],
    home: Option<usize>,
    lane: usize,
    len: usize,
) -> Result<(Option<&'a [u8]>, &'a mut Protector)> {
    Ok(match home {
        None => (Some(&own[..len]), &mut protectors[lane].1),
        Some(h) if h == lane => (None, &mut protectors[lane].1),
        Some(h) => {
            let [(_, holder), (_, protector)] = protectors.get_disjoint_mut([h, lane]).expect("distinct protectors");
            (Some(&*holder.buffer(&mut [], len)?), protector)
        }
    })
}

/// The row of one lane from its checkpoints and restarts.
fn lane_result(
    comm: &Comm,
    args: &CkptBenchArgs,
    lane: &Lane,
    (restarts, intact): (&[Restart], &[Restart]),
    len: usize,
    xor_loop_gbps: f64,
) -> SchemeResult {
    let median_of = |f: &dyn Fn(&CheckpointSample) -> f64| median(lane.samples.iter().map(f).collect());
    let restart_s = median(restarts.iter().map(|r| r.restart_s).collect());
    let rebuild_s = median(restarts.iter().map(|r| r.rebuild_s).collect());
    let restore_s = median(restarts.iter().map(|r| r.restore_s).collect());
    let restart_noloss_s = median(intact.iter().map(|r| r.restart_s).collect());
    let profile = |i: usize| median(restarts.iter().filter_map(|r| r.profile).map(|p| p[i]).collect());
    let scheme = lane.run.scheme;
    let total = (len * comm.size()) as f64;
    // Every set's server works on its own set; rank 0's set is representative.
    let set_bytes = (len * comm.size().min(args.set_size)) as f64;
    let nam_rank0 = scheme == Scheme::NamXor && comm.rank() == 0;
    let folded_gb = set_bytes / 1e9;
    let checkpoint_s = median_of(&|c| c.seconds);
    SchemeResult {
        scheme: lane.run.name().into(),
        ranks: comm.size(),
        nodes: comm.nodes().nodes(),
        bytes_per_rank: len as u64,
        storage: storage_kind(&args.dir),
        segment_bytes: if scheme == Scheme::NamXor { args.segment } else { 0 },
        nam_buffer: (scheme == Scheme::NamXor).then_some(args.nam_buffer),
        checkpoint_s,
        redundancy_s: median_of(&|c| c.redundancy),
        restart_s,
        rebuild_s,
        restore_gbps: len as f64 / restore_s / 1e9,
        aggregate_gbps: total / checkpoint_s / 1e9,
        restart_noloss_s,
        restore_noloss_gbps: len as f64 / restart_noloss_s / 1e9,
        restore_profile_s: (scheme == Scheme::NamXor).then(|| [profile(0), profile(1), profile(2), profile(3)]),
        rank_cpu_s: median_of(&|c| c.cpu),
        server_xor_ratio: nam_rank0.then(|| folded_gb / median_of(&|c| c.server.cpu_seconds) / xor_loop_gbps),
        server_xor_wall_ratio: nam_rank0.then(|| folded_gb / median_of(&|c| c.server.wall_seconds) / xor_loop_gbps),
        bytes_match: restarts.iter().chain(intact).all(|r| r.ok),
    }
}

/// One timed checkpoint: slowest rank's wall time and redundancy time, the ranks' summed
/// CPU seconds on redundancy, and the server's work (NAM-XOR).
struct CheckpointSample {
    seconds: f64,
    redundancy: f64,
    cpu: f64,
    server: ServerWork,
}

use crate::harness::stats::median;

/// One restart's figures (slowest rank): the whole restart, the collective rebuild, and the
/// restore proper.
struct Restart {
    restart_s: f64,
    rebuild_s: f64,
    restore_s: f64,
    /// NAM-XOR's restore profile on the lost rank (request, rebuild, fetch), as every rank
    /// learns it.
    profile: Option<[f64; 4]>,
    ok: bool,
}

/// Loses `--lose`'s node-local directory (when `lose`; else nothing is lost), restarts every
/// rank from local storage plus the redundancy, and compares the bytes with the last
/// checkpoint. Returns the restart time, the rebuild time, and whether every rank got its
/// bytes back.
fn restart(
    comm: &Comm,
    args: &CkptBenchArgs,
    protector: &mut Protector,
    scratch: &mut [u8],
    expected: &[u8],
    (dir, name, lose): (&Path, &str, bool),
) -> Result<Restart> {
    let len = expected.len();
    let lost = lose && comm.rank() == args.lose;
    let erased = match lost {
        false => Ok(()),
        true => (|| {
            std::fs::remove_dir_all(dir)?;
            std::fs::create_dir_all(dir)?;
            // The lost rank's memory is gone too: whatever its buffer held must not pass the
            // comparison unless the rebuild wrote it.
            protector.buffer(scratch, len)?.fill(0xA5);
            anyhow::Ok(())
        })(),
    };
    comm.agree(erased, "erasing the lost rank's data")?;
    let start = Instant::now();
    let target = Target { dir, name, fsync: !args.no_fsync };
    let have = !lost;
    let read = match have {
        false => Ok(()),
        true => protector.buffer(scratch, len).and_then(|b| read_local(&dir.join(format!("{name}.data")), b)),
    };
    // The restore's own time starts when every survivor has its data back (the lost rank
    // would otherwise count the survivors' local reads); the restart time counts them.
    comm.agree(read, "reading the local checkpoint")?;
    let rebuilt = comm.agree(protector.rebuild(scratch, have, len, &target), "the rebuild")?;
    let ok = match rebuilt.data {
        Some(data) => data == expected,
        None => protector.buffer(scratch, len).is_ok_and(|b| *b == *expected),
    };
    let restart_s = comm.max_f64(start.elapsed().as_secs_f64());
    let rebuild_s = comm.max_f64(rebuilt.seconds);
    let restore_s = comm.max_f64(protector.restore_seconds().unwrap_or(rebuilt.seconds));
    let profile = match protector {
        Protector::Nam(n) => {
            let p = n.restore_profile().unwrap_or_default();
            let max = |v: f64| comm.max_f64(v);
            Some([max(p.request_s), max(p.rebuild_s), max(p.fetch_s), max(p.server_busy_s)])
        }
        Protector::Generic(_) => None,
    };
    Ok(Restart { restart_s, rebuild_s, restore_s, profile, ok: comm.all_agree(ok) })
}

/// The rank's node-local checkpoint file, fsynced unless `fsync` is off (a `CkptError`, as
/// NAM-XOR's overlapped protect takes it).
fn write_local(path: &Path, data: &[u8], fsync: bool) -> nam_ckpt::Result<()> {
    sync_local(path, write_unsynced(path, data)?, fsync)
}

/// [`write_local`]'s first half: the bytes in the page cache.
fn write_unsynced(path: &Path, data: &[u8]) -> nam_ckpt::Result<std::fs::File> {
    let mut file = std::fs::File::create(path).map_err(|e| CkptError::io("create", path, e))?;
    file.write_all(data).map_err(|e| CkptError::io("write", path, e))?;
    Ok(file)
}

/// [`write_local`]'s second half: the bytes on the disk.
fn sync_local(path: &Path, file: std::fs::File, fsync: bool) -> nam_ckpt::Result<()> {
    if fsync {
        file.sync_all().map_err(|e| CkptError::io("fsync", path, e))?;
    }
    Ok(())
}

fn read_local(path: &Path, into: &mut [u8]) -> Result<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.read_exact(into).with_context(|| format!("reading {}", path.display()))
}

fn storage_kind(dir: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut best = ("?".to_string(), 0usize);
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 2 && dir.starts_with(f[1]) && f[1].len() >= best.1 {
            best = (f[2].to_string(), f[1].len());
        }
    }
    best.0
}

/// Bytes per second a plain loop XORs `sources` buffers of `len` bytes into a parity buffer
/// (counting the bytes read from the sources), in GB/s.
fn xor_loop_gbps(len: usize, sources: usize) -> f64 {
    let bufs: Vec<Vec<u8>> = (0..sources).map(|s| vec![s as u8 + 1; len]).collect();
    let mut parity = vec![0u8; len];
    let mut best = f64::MAX;
    // CPU time of this thread, as the server's rate is: the other ranks share the cores.
    for _ in 0..3 {
        let start = thread_cpu_seconds();
        parity.copy_from_slice(&bufs[0]);
        for b in &bufs[1..] {
            nam_ckpt::redundancy::xor_into(&mut parity, b);
        }
        best = best.min(thread_cpu_seconds() - start);
    }
    std::hint::black_box(&parity);
    (len * sources) as f64 / best / 1e9
}

fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn report(
    args: &CkptBenchArgs,
    results: &[SchemeResult],
    library: &[ckpt_lib::LibraryResult],
    xor_loop_gbps: f64,
) -> Result<()> {
    if let Some(path) = &args.json_file {
        let mut lines: Vec<String> = results.iter().map(serde_json::to_string).collect::<Result<_, _>>()?;
        lines.extend(library.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?);
        std::fs::write(path, lines.join("\n") + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        for r in results {
            println!("{}", serde_json::to_string(r)?);
        }
        for r in library {
            println!("{}", serde_json::to_string(r)?);
        }
        return Ok(());
    }
    let first = &results[0];
    let mut md = format!(
        "### nam-bench ckpt: {} ranks on {} nodes, {} per rank, {} storage{}\n\n",
        first.ranks,
        first.nodes,
        format_size(first.bytes_per_rank),
        first.storage,
        if args.no_fsync { " (no fsync)" } else { " (fsync)" }
    );
    if args.nam_buffer == NamBuffer::InPlace {
        md += "NAM-XOR's buffer is the application's own array, registered in place (`--nam-buffer in-place`): over shared memory the server cannot map it and reads it with CMA, or (where `ptrace`, and so CMA, is not permitted) with GETs that UCX emulates with messages the rank answers.\n\n";
    }
    md += "| scheme | checkpoint s | redundancy s | restart s | restore GB/s | restart, no loss s | restore, no loss GB/s | aggregate GB/s | rank CPU s | bytes match |\n";
    md += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
    for r in results {
        md += &format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.3} | {:.2} | {:.2} | {:.3} | {} |\n",
            r.scheme,
            r.checkpoint_s,
            r.redundancy_s,
            r.restart_s,
            r.restore_gbps,
            r.restart_noloss_s,
            r.restore_noloss_gbps,
            r.aggregate_gbps,
            r.rank_cpu_s,
            r.bytes_match
        );
    }
    md += &nam_xor_findings(args, results, xor_loop_gbps);
    md += &ckpt_lib::markdown(library);
    print!("{md}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
    }
    if results.iter().any(|r| !r.bytes_match) || library.iter().any(|r| !r.bytes_match) {
        bail!("a restart did not give back the checkpointed bytes");
    }
    Ok(())
}

/// The findings under the table: NAM-XOR against the other schemes, its server's parity
/// throughput against a plain XOR loop measured in the same run, and its restore speed.
fn nam_xor_findings(args: &CkptBenchArgs, results: &[SchemeResult], xor_loop_gbps: f64) -> String {
    let by = |s: &str| results.iter().find(|r| r.scheme == s);
    let Some(nam) = by("nam-xor") else {
        return String::new();
    };
    let mut md = String::new();
    md += "\n";
    for other in ["partner", "xor"] {
        if let Some(o) = by(other) {
            md += &format!(
                "- NAM-XOR checkpoint is **{:.2}x** faster than {other}; rank CPU on redundancy is {:.1}% of {other}'s\n",
                o.checkpoint_s / nam.checkpoint_s,
                100.0 * nam.rank_cpu_s / o.rank_cpu_s.max(1e-9)
            );
        }
    }
    if let Some(first) = by("nam-xor-write-first") {
        md += &format!(
            "- flagging ready only after the local copy is written and fsynced (`nam-xor-write-first`, Schmidt 2017's order) takes **{:.2}x** NAM-XOR's checkpoint time{}\n",
            first.checkpoint_s / nam.checkpoint_s,
            by("partner").map_or(String::new(), |p| format!(" ({:.2}x faster than partner)", p.checkpoint_s / first.checkpoint_s))
        );
    }
    if let (Some(ratio), Some(wall)) = (nam.server_xor_ratio, nam.server_xor_wall_ratio) {
        md += &format!(
            "- server parity throughput is **{ratio:.2}x** of a plain in-memory XOR loop ({xor_loop_gbps:.2} GB/s read per CPU second) measured in this run, both per CPU second ({wall:.2}x by the server's wall time, which the ranks' processes on the same 2 cores stretch)\n"
        );
    }
    md += &format!(
        "- restore of one lost rank: **{:.2} GB/s** (median of {} restarts; from the lost rank's request to its verified bytes, {:.3} s; with the ranks agreeing who was lost and on the epoch, {:.3} s)\n",
        nam.restore_gbps,
        args.restores.max(1),
        nam.bytes_per_rank as f64 / nam.restore_gbps / 1e9,
        nam.rebuild_s
    );
    if let Some([request, rebuild, fetch, busy]) = nam.restore_profile_s {
        md += &format!(
            "- the lost rank's restore: {request:.3} s asking the server, {rebuild:.3} s the server's rebuild (pull, XOR, checksums; {busy:.3} s of it the server's own work, the rest waiting for the survivors' bytes), {fetch:.3} s bringing the bytes into its buffer (0 when the server writes it in place)\n"
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::Run;

    #[test]
    fn scheme_lists_name_their_rows_and_refuse_unknown_or_too_many_nam_xor_rows() {
        let names = |s: &str, no_fsync| Run::list(s, no_fsync).unwrap().into_iter().map(Run::name).collect::<Vec<_>>();
        assert_eq!(names("all", false), ["partner", "xor", "nam-xor", "nam-xor-write-first"]);
        assert_eq!(names("all", true), ["partner", "xor", "nam-xor"]);
        assert_eq!(names("partner,nam-xor-flag-first", false), ["partner", "nam-xor-flag-first"]);
        let unknown = Run::list("partner,raid5", false).unwrap_err().to_string();
        assert!(unknown.contains("--scheme raid5") && unknown.contains("nam-xor-write-first"), "{unknown}");
        let three = Run::list("nam-xor,nam-xor-write-first,nam-xor-flag-first", false).unwrap_err().to_string();
        assert!(three.contains("at most two NAM-XOR rows"), "{three}");
    }
}
