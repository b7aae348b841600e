//! `nam-bench allreduce`: allreduce at the memory server beside Open MPI's `MPI_Allreduce`,
//! both measured in the same `mpirun` job (the MPI driver `bench/allreduce.c`, built here
//! with `mpicc` against the libnam.so beside this binary), osu_allreduce style: average
//! latency over ranks per vector size, for each rank count; each the median of several
//! repeats (each repeat times MPI and then nam), so one run is stable on a loaded machine.

use super::Transport;
use crate::harness::server::LocalServer;
use crate::limits::ALLREDUCE_JOB_DEADLINE as JOB_DEADLINE;
use anyhow::{bail, Context, Result};
use nam_proto::size::{format_size, parse_size};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DRIVER_SOURCE: &str = include_str!("../../../../bench/allreduce.c");
const HEADER: &str = include_str!("../../../../include/nam.h");

/// Arguments of `nam-bench allreduce`.
#[derive(clap::Args, Debug)]
pub struct AllreduceArgs {
    /// Rank counts, comma-separated (each a job of its own under mpirun).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16")]
    ranks: Vec<u32>,
    /// Server to reduce at, HOST:PORT; without it a local `nam serve` is started.
    #[arg(long)]
    server: Option<String>,
    /// Sweep vector sizes from --min-size to --max-size instead of 4 B to 16 MiB.
    #[arg(long)]
    sweep: bool,
    /// Smallest vector of a sweep.
    #[arg(long, default_value = "8")]
    min_size: String,
    /// Largest vector of a sweep.
    #[arg(long, default_value = "64MiB")]
    max_size: String,
    /// UCX transport of the ranks' clients and a local server.
    #[arg(long, value_enum, default_value = "shm")]
    transport: Transport,
    /// Print one JSON object per point instead of the table.
    #[arg(long)]
    json: bool,
    /// Write a Markdown report (command, table, target).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Exit with an error when the target is missed.
    #[arg(long)]
    check: bool,
}

/// One size at one rank count.
pub struct Point {
    size: u64,
    ranks: u32,
    nam_us: f64,
    mpi_us: f64,
    /// Timed repeats (medians are reported) and calls per repeat.
    repeats: u32,
    iters: u32,
}

impl Point {
    fn ratio(&self) -> f64 {
        self.nam_us / self.mpi_us
    }
    fn json(&self, transport: Transport) -> serde_json::Value {
        serde_json::json!({
            "op": "allreduce", "dtype": "float", "reduce": "sum", "transport": transport.ucx_tls(),
            "size": self.size, "ranks": self.ranks, "nam_latency_us": self.nam_us,
            "mpi_latency_us": self.mpi_us, "ratio": self.ratio(), "repeats": self.repeats, "iters": self.iters,
        })
    }
}

/// The directory holding libnam.so: beside this binary (`target/<profile>`), or `../lib`.
fn libnam_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe.parent().context("binary has no directory")?;
    for dir in [bin.to_path_buf(), bin.join("../lib")] {
        if dir.join("libnam.so").exists() {
            return Ok(dir);
        }
    }
    bail!("no libnam.so beside {} (build it: cargo build --release -p nam-capi)", exe.display())
}

/// Builds the MPI driver into a fresh directory; returns the program.
fn build_driver(dir: &Path) -> Result<PathBuf> {
    let lib = libnam_dir()?;
    std::fs::create_dir_all(dir.join("include"))?;
    std::fs::write(dir.join("include/nam.h"), HEADER)?;
    std::fs::write(dir.join("allreduce.c"), DRIVER_SOURCE)?;
    let program = dir.join("allreduce");
    let out = Command::new("mpicc")
        .args(["-O2", "-std=c11", "-o"])
        .arg(&program)
        .arg(dir.join("allreduce.c"))
        .arg(format!("-I{}", dir.join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnam")
        .output()
        .context("cannot run mpicc (Open MPI; scripts/setup.sh installs it)")?;
    if !out.status.success() {
        bail!("mpicc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(program)
}

/// Runs the driver on `ranks` ranks; returns its RESULT lines as points.
fn run_job(program: &Path, ranks: u32, server: &str, transport: Transport, min: u64, max: u64) -> Result<Vec<Point>> {
    let log = program.with_extension(format!("{ranks}.log"));
    // A session directory of the job's own: concurrent or leftover Open MPI sessions in
    // /tmp make mpirun abort (orte_session_dir failed).
    let session = program.with_extension(format!("{ranks}.session"));
    std::fs::create_dir_all(&session)?;
    let mut child = Command::new("mpirun")
        .env("OMPI_MCA_orte_tmpdir_base", &session)
        .args(["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader,tcp"])
        .args(["-np", &ranks.to_string(), "-x", "NAM_SERVERS", "-x", "NAM_TRANSPORTS", "-x", "NAM_TIMEOUT_MS"])
        .arg(program)
        .args([min.to_string(), max.to_string()])
        .env("NAM_SERVERS", server)
        .env("NAM_TRANSPORTS", transport.ucx_tls())
        .env("NAM_TIMEOUT_MS", "120000")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("cannot run mpirun")?;
    let started = Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > JOB_DEADLINE {
            let _ = child.kill();
            bail!("mpirun -np {ranks} did not finish within {JOB_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("mpirun -np {ranks} failed ({}): {}", out.status, std::fs::read_to_string(&log).unwrap_or_default());
    }
    let parse = |line: &str| -> Option<Point> {
        let f: Vec<&str> = line.strip_prefix("RESULT ")?.split_whitespace().collect();
        Some(Point {
            size: f[0].parse().ok()?,
            ranks: f[1].parse().ok()?,
            nam_us: f[2].parse().ok()?,
            mpi_us: f[3].parse().ok()?,
            repeats: f.get(4)?.parse().ok()?,
            iters: f.get(5)?.parse().ok()?,
        })
    };
    let points: Vec<Point> = String::from_utf8_lossy(&out.stdout).lines().filter_map(parse).collect();
    if points.is_empty() {
        bail!("mpirun -np {ranks} printed no results");
    }
    Ok(points)
}

/// osu_allreduce-style table of one rank count.
fn table(ranks: u32, points: &[Point]) -> String {
    let mut s = format!(
        "# {ranks} ranks\n# {:<10} {:>22} {:>26} {:>9}\n",
        "Size", "nam Avg Latency(us)", "MPI_Allreduce Avg Latency(us)", "nam/MPI"
    );
    for p in points.iter().filter(|p| p.ranks == ranks) {
        let _ = writeln!(s, "{:<12} {:>22.2} {:>26.2} {:>9.2}", p.size, p.nam_us, p.mpi_us, p.ratio());
    }
    s
}

/// The target of issue 9: ≤ 1.0× MPI for vectors ≤ 4 KiB on 8 ranks.
fn verdict(points: &[Point]) -> Option<String> {
    let small: Vec<&Point> = points.iter().filter(|p| p.ranks == 8 && p.size <= 4096).collect();
    let worst = small.iter().map(|p| p.ratio()).fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))?;
    let met = if worst <= 1.0 { "met" } else { "MISSED" };
    Some(format!("allreduce ≤ 4 KiB on 8 ranks: worst nam/MPI latency ratio {worst:.2} (target ≤ 1.0: {met})"))
}

/// Runs `nam-bench allreduce`.
pub fn run(args: AllreduceArgs) -> Result<()> {
    let args = &args;
    let (min, max) =
        if args.sweep { (parse_size(&args.min_size)?, parse_size(&args.max_size)?) } else { (4, 16 << 20) };
    if min < 4 || min > max {
        bail!("allreduce sizes must be at least 4 bytes and --min-size ≤ --max-size");
    }
    let dir = std::env::temp_dir().join(format!("nam-bench-allreduce-{}", std::process::id()));
    let program = build_driver(&dir)?;
    let ranks_max = args.ranks.iter().copied().max().unwrap_or(2) as u64;
    let local;
    let server = match &args.server {
        Some(s) => s.clone(),
        None => {
            local = LocalServer::start(args.transport, (ranks_max + 2) * max.min(4 << 20) + (64 << 20))?;
            local.addr.to_string()
        }
    };
    let mut points = Vec::new();
    for &ranks in &args.ranks {
        let job = run_job(&program, ranks, &server, args.transport, min, max)?;
        if args.json {
            for p in &job {
                println!("{}", serde_json::to_string(&p.json(args.transport))?);
            }
        } else {
            print!("{}", table(ranks, &job));
        }
        points.extend(job);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let verdict = verdict(&points);
    if let (Some(v), false) = (&verdict, args.json) {
        println!("{v}");
    }
    if let Some(path) = &args.markdown {
        write_markdown(path, args, &points, verdict.as_deref(), min, max)?;
    }
    if args.check && verdict.is_some_and(|v| v.contains("MISSED")) {
        bail!("a benchmark target was missed");
    }
    Ok(())
}

fn write_markdown(
    path: &Path,
    args: &AllreduceArgs,
    points: &[Point],
    verdict: Option<&str>,
    min: u64,
    max: u64,
) -> Result<()> {
    let mut s = format!(
        "### Allreduce at the memory server vs `MPI_Allreduce` ({} to {}, float sum, UCX_TLS={})\n\nCommand: `{}`\n\nLatency: average over ranks of the mean time per call, median of the repeats.\n\n",
        format_size(min),
        format_size(max),
        args.transport.ucx_tls(),
        crate::harness::docs::command_line()
    );
    s.push_str(
        "| ranks | size (B) | nam (us) | MPI_Allreduce (us) | nam/MPI | repeats × calls |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for p in points {
        let (n, m, r) = (p.nam_us, p.mpi_us, p.ratio());
        let _ = writeln!(s, "| {} | {} | {n:.2} | {m:.2} | {r:.2} | {} × {} |", p.ranks, p.size, p.repeats, p.iters);
    }
    if let Some(v) = verdict {
        let _ = writeln!(s, "\nTarget: {v}");
    }
    std::fs::write(path, s)?;
    Ok(())
}
