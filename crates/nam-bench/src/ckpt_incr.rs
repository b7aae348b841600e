//! `nam-bench ckpt-incr`: every incremental-checkpoint mode on the write patterns of Abeyratne 2017
//! Table 5.2 / Fig. 5.8, against the same workload run without checkpoints in the same
//! invocation: overhead, bytes written, peak extra memory and stall time.

use crate::harness::plot;
use crate::harness::stats::middle_by;
use anyhow::{bail, Context, Result};
use nam_incr::{Config, DirStore, Engine, Mode, Store};
use serde::Serialize;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `nam-bench ckpt-incr`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  nam-bench ckpt-incr --mib 32 --intervals 6 --plot ckpt-incr.png")]
pub struct CkptIncrBenchArgs {
    /// Size of the protected region per workload, MiB.
    #[arg(long, default_value_t = 16)]
    mib: usize,
    /// Checkpoint intervals per run (a checkpoint closes each one but the last). The first
    /// checkpoint of an incremental chain stores everything, so few intervals overweight it.
    #[arg(long, default_value_t = 10)]
    intervals: usize,
    /// Repetitions; each mode's overhead is the median over them (the machine is shared).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Compute per interval, in millions of spin iterations (the application's work).
    #[arg(long, default_value_t = 20)]
    compute: u64,
    /// Directory of the store (the SSD level: files with fsync; `--ram` for tmpfs semantics).
    #[arg(long, default_value = "/var/tmp/nam-ckpt-incr-bench")]
    dir: PathBuf,
    /// Write without fsync (the RAM level; use a tmpfs directory such as /dev/shm/x).
    #[arg(long)]
    ram: bool,
    /// Workloads to run (default all).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// Modes to run (default all; the verdicts need stop-and-copy and early-late+cons).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<String>,
    /// One JSON object per workload and mode instead of the table.
    #[arg(long)]
    json: bool,
    /// Write a PNG plot of the overheads.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write a Markdown report (`--report` is the older name).
    #[arg(long, alias = "report")]
    markdown: Option<PathBuf>,
}

const WORKLOADS: [&str; 5] = ["streaming", "sparse-random", "hot-reuse", "sweep-cold", "heat-stencil"];
const SLICES: usize = 64;
const WORD_PER_PAGE: usize = 512;

/// The modes compared: (label, mode, consolidate).
const VARIANTS: [(&str, Mode, bool); 6] = [
    ("stop-and-copy", Mode::StopAndCopy, false),
    ("fork", Mode::Fork, false),
    ("consolidate", Mode::Incremental, true),
    ("non-blocking", Mode::PartiallyNonBlocking, false),
    ("early-late", Mode::EarlyLate, false),
    ("early-late+cons", Mode::EarlyLate, true),
];

#[derive(Debug, Clone, Serialize)]
struct Row {
    workload: String,
    mode: String,
    overhead: f64,
    /// Lowest and highest paired overhead over the repetitions.
    spread: (f64, f64),
    /// Every repetition's paired overhead.
    repetitions: Vec<f64>,
    bytes_written: u64,
    peak_extra_bytes: u64,
    stall_ms: f64,
    /// Pages the tracker saw written (first writes per interval, or per early sweep).
    faults: u64,
    seconds: f64,
    /// CPU time of the whole process (application, writer, fault handler) during the run.
    cpu_seconds: f64,
    /// The same for the paired baseline runs.
    baseline_cpu_seconds: f64,
    baseline_seconds: f64,
    region_bytes: u64,
    tracker: String,
}

/// A page-aligned anonymous mapping of u64 words.
struct Region {
    ptr: *mut u64,
    words: usize,
}

impl Region {
    fn new(bytes: usize) -> Result<Region> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: anonymous private mapping, checked below.
        let p =
            unsafe { libc::mmap(std::ptr::null_mut(), bytes, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            bail!("cannot map {bytes} bytes: {}", std::io::Error::last_os_error());
        }
        let mut region = Region { ptr: p as *mut u64, words: bytes / 8 };
        region.words().iter_mut().enumerate().for_each(|(i, w)| *w = i as u64);
        Ok(region)
    }

    fn words(&mut self) -> &mut [u64] {
        // SAFETY: our mapping of `words` words.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.words) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.words * 8) };
    }
}

fn spin(iterations: u64) {
    let mut x = 1.0f64;
    for i in 0..iterations {
        x = black_box(x * 1.000_000_1 + (i & 7) as f64 * 1e-9);
    }
    black_box(x);
}

/// One slice of interval `interval` of `workload` (writes only; compute is separate).
fn slice_writes(workload: &str, words: &mut [u64], interval: usize, intervals: usize, slice: usize, rng: &mut u64) {
    let pages = words.len() / WORD_PER_PAGE;
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    match workload {
        // bwaves: each interval streams through a fresh part; pages are never rewritten soon.
        "streaming" => {
            let chunk = words.len() / intervals;
            let part = chunk / SLICES;
            let start = interval * chunk + slice * part;
            words[start..start + part].iter_mut().for_each(|w| *w = w.wrapping_mul(3).wrapping_add(1));
        }
        // mcf/omnetpp: scattered single-word writes over the whole region.
        "sparse-random" => {
            for _ in 0..pages / 2 / SLICES + 1 {
                let at = (next() as usize) % words.len();
                words[at] = words[at].wrapping_add(1);
            }
        }
        // bzip2: the same few pages over and over.
        "hot-reuse" => {
            let hot = 32.min(pages) * WORD_PER_PAGE;
            words[..hot].iter_mut().for_each(|w| *w = w.wrapping_add(slice as u64));
        }
        // lbm: sweep everything early in the interval, then a long cold period.
        "sweep-cold" => {
            if slice < SLICES / 4 {
                let part = words.len() / (SLICES / 4);
                words[slice * part..(slice + 1) * part].iter_mut().for_each(|w| *w = w.rotate_left(1) ^ 5);
            }
        }
        // Heat equation: an in-place Jacobi-like sweep of a 2D grid, 1/SLICES of it per slice.
        "heat-stencil" => {
            let n = (words.len() as f64).sqrt() as usize;
            let rows = (n - 2) / SLICES + 1;
            let first = 1 + slice * rows;
            for r in first..(first + rows).min(n - 1) {
                for c in 1..n - 1 {
                    let f = |i: usize| f64::from_bits(words[i]);
                    let v = 0.25 * (f(r * n + c - 1) + f(r * n + c + 1) + f((r - 1) * n + c) + f((r + 1) * n + c));
                    words[r * n + c] = (v + 1e-3).to_bits();
                }
            }
        }
        other => unreachable!("unknown workload {other}"),
    }
}

/// Runs `workload`; with an engine, checkpoints close every interval but the last, and the
/// time includes waiting for the last background copy.
fn run_workload(
    args: &CkptIncrBenchArgs,
    workload: &str,
    engine: Option<&Engine>,
    region: &mut Region,
) -> Result<(f64, f64)> {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let spin_per_slice = args.compute * 1_000_000 / SLICES as u64;
    let cpu = process_cpu_seconds();
    let started = Instant::now();
    for interval in 0..args.intervals {
        for slice in 0..SLICES {
            slice_writes(workload, region.words(), interval, args.intervals, slice, &mut rng);
            spin(spin_per_slice);
        }
        if let (Some(engine), true) = (engine, interval + 1 < args.intervals) {
            engine.checkpoint().with_context(|| format!("{workload}: checkpoint {interval}"))?;
        }
    }
    if let Some(engine) = engine {
        engine.wait().context("waiting for the last checkpoint")?;
    }
    Ok((started.elapsed().as_secs_f64(), process_cpu_seconds() - cpu))
}

/// User and system CPU seconds of this process so far (every thread).
fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn store(args: &CkptIncrBenchArgs) -> Result<Arc<dyn Store>> {
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(if args.ram { Arc::new(DirStore::ram(&args.dir)?) } else { Arc::new(DirStore::ssd(&args.dir)?) })
}

/// Runs `workload` `--repeat` times; per mode, the overhead is the median of the
/// repetitions' paired overheads, and `spread` their range.
fn measure(args: &CkptIncrBenchArgs, workload: &str) -> Result<Vec<Row>> {
    let mut reps: Vec<Vec<Row>> = Vec::new();
    for _ in 0..args.repeat.max(1) {
        reps.push(measure_once(args, workload)?);
    }
    let mut rows = Vec::new();
    for i in 0..reps[0].len() {
        let runs: Vec<Row> = reps.iter().map(|r| r[i].clone()).collect();
        let overheads = runs.iter().map(|r| r.overhead);
        let spread = (overheads.clone().fold(f64::INFINITY, f64::min), overheads.fold(f64::NEG_INFINITY, f64::max));
        let mut row = middle_by(runs, |r| r.overhead);
        row.spread = spread;
        row.repetitions = reps.iter().map(|r| r[i].overhead).collect();
        rows.push(row);
    }
    Ok(rows)
}

/// One repetition: baseline, mode, baseline, mode, ..., baseline. Each mode is compared with
/// the mean of the baseline runs right before and right after it, so a slow phase of this
/// shared machine shifts both sides of a ratio alike.
fn measure_once(args: &CkptIncrBenchArgs, workload: &str) -> Result<Vec<Row>> {
    let bytes = args.mib << 20;
    let mut baseline = run_workload(args, workload, None, &mut Region::new(bytes)?)?;
    let mut rows = Vec::new();
    let picked = VARIANTS.iter().filter(|v| args.modes.is_empty() || args.modes.iter().any(|m| m == v.0));
    for &(label, mode, consolidate) in picked {
        let mut region = Region::new(bytes)?;
        let mut config = Config::new(mode);
        config.consolidate = consolidate;
        let engine = Engine::new(config, store(args)?)?;
        // SAFETY: the mapping outlives the engine, which is dropped first below.
        unsafe { engine.protect(region.ptr as *mut u8, bytes)? };
        let (seconds, cpu_seconds) = run_workload(args, workload, Some(&engine), &mut region)?;
        let stats = engine.stats();
        let tracker = engine.tracker().map_or("none".to_string(), |t| t.to_string());
        drop(engine);
        let after = run_workload(args, workload, None, &mut Region::new(bytes)?)?;
        let (paired, paired_cpu) = ((baseline.0 + after.0) / 2.0, (baseline.1 + after.1) / 2.0);
        baseline = after;
        rows.push(Row {
            workload: workload.into(),
            mode: label.into(),
            overhead: seconds / paired - 1.0,
            spread: (0.0, 0.0),
            repetitions: Vec::new(),
            bytes_written: stats.bytes_written,
            peak_extra_bytes: stats.peak_extra_bytes,
            stall_ms: stats.stall_ns as f64 / 1e6,
            faults: stats.faults,
            seconds,
            cpu_seconds,
            baseline_cpu_seconds: paired_cpu,
            baseline_seconds: paired,
            region_bytes: bytes as u64,
            tracker,
        });
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(rows)
}

/// Runs the benchmark.
pub fn run(args: CkptIncrBenchArgs) -> Result<()> {
    let workloads: Vec<String> = if args.workloads.is_empty() {
        WORKLOADS.iter().map(|s| s.to_string()).collect()
    } else {
        args.workloads.clone()
    };
    if let Some(bad) = workloads.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
        bail!("unknown workload {bad}; choose from {}", WORKLOADS.join(", "));
    }
    if let Some(bad) = args.modes.iter().find(|m| !VARIANTS.iter().any(|v| v.0 == m.as_str())) {
        let names: Vec<&str> = VARIANTS.iter().map(|v| v.0).collect();
        bail!("unknown mode {bad}; choose from {}", names.join(", "));
    }
    if args.intervals < 2 || args.mib == 0 {
        bail!("need --intervals >= 2 and --mib >= 1");
    }
    let mut rows = Vec::new();
    for workload in &workloads {
        let measured = measure(&args, workload)?;
        for row in &measured {
            if args.json {
                println!("{}", serde_json::to_string(row)?);
            }
        }
        rows.extend(measured);
    }
    let text = table(&rows) + &verdicts(&rows);
    if !args.json {
        print!("{text}");
    }
    if let Some(path) = &args.plot {
        plot_rows(path, &rows, &workloads)?;
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, report(&args, &text))?;
    }
    Ok(())
}

fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<14} {:<16} {:>9} {:>15} {:>12} {:>10} {:>9} {:>8} {:>7} {:>7}  tracker\n",
        "workload", "mode", "overhead", "spread", "written MiB", "extra MiB", "stall ms", "tracked", "run s", "cpu s"
    );
    for r in rows {
        out += &format!(
            "{:<14} {:<16} {:>8.1}% {:>15} {:>12.1} {:>10.2} {:>9.1} {:>8} {:>7.2} {:>7.2}  {}\n",
            r.workload,
            r.mode,
            r.overhead * 100.0,
            format!("{:.1}..{:.1}%", r.spread.0 * 100.0, r.spread.1 * 100.0),
            r.bytes_written as f64 / 1048576.0,
            r.peak_extra_bytes as f64 / 1048576.0,
            r.stall_ms,
            r.faults,
            r.seconds,
            r.cpu_seconds,
            r.tracker
        );
    }
    let workloads: Vec<&String> =
        rows.iter().map(|r| &r.workload).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    out += &format!(
        "\npaired baseline (no checkpoints) run seconds, median repetition: {}\n",
        workloads
            .iter()
            .map(|w| {
                let r = rows.iter().find(|r| &&r.workload == w).unwrap();
                format!("{w} {:.2} (cpu {:.2})", r.baseline_seconds, r.baseline_cpu_seconds)
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    out
}

fn mean_overhead(rows: &[Row], mode: &str) -> f64 {
    let picked: Vec<f64> = rows.iter().filter(|r| r.mode == mode).map(|r| r.overhead).collect();
    picked.iter().sum::<f64>() / picked.len().max(1) as f64
}

fn verdicts(rows: &[Row]) -> String {
    let (sc, el) = (mean_overhead(rows, "stop-and-copy"), mean_overhead(rows, "early-late+cons"));
    let mut out = String::from("\nmean overhead per mode: ");
    out += &VARIANTS
        .iter()
        .map(|v| format!("{} {:.1}%", v.0, mean_overhead(rows, v.0) * 100.0))
        .collect::<Vec<_>>()
        .join(", ");
    let ratio = if sc > 0.0 { el / sc } else { f64::NAN };
    out += &format!(
        "\ntarget 1: early-late+cons mean overhead {:.1}% vs stop-and-copy {:.1}%: ratio {:.2} (target <= 0.33): {}\n",
        el * 100.0,
        sc * 100.0,
        ratio,
        if ratio <= 1.0 / 3.0 { "MET" } else { "MISSED" }
    );
    // The same ratio within each repetition (its runs are adjacent in time), for the spread.
    let reps = rows.first().map_or(0, |r| r.repetitions.len());
    let per_rep: Vec<f64> = (0..reps)
        .map(|i| {
            let mean = |m: &str| {
                let v: Vec<f64> = rows.iter().filter(|r| r.mode == m).map(|r| r.repetitions[i]).collect();
                v.iter().sum::<f64>() / v.len().max(1) as f64
            };
            mean("early-late+cons") / mean("stop-and-copy")
        })
        .collect();
    out += &format!(
        "target 1 per repetition: ratios {}\n",
        per_rep.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ")
    );
    let duplicates = rows.iter().filter(|r| r.mode != "fork" && r.peak_extra_bytes >= r.region_bytes).count();
    out += &format!(
        "target 2a: modes other than fork with extra memory >= the region: {duplicates}: {}\n",
        if duplicates == 0 { "MET" } else { "MISSED" }
    );
    for sparse in ["sparse-random", "hot-reuse"] {
        let bytes = |m: &str| rows.iter().find(|r| r.workload == sparse && r.mode == m).map(|r| r.bytes_written);
        if let (Some(c), Some(s)) = (bytes("consolidate"), bytes("stop-and-copy")) {
            out += &format!(
                "target 2b: {sparse}: consolidate wrote {:.1} MiB vs stop-and-copy {:.1} MiB: {}\n",
                c as f64 / 1048576.0,
                s as f64 / 1048576.0,
                if c < s { "MET" } else { "MISSED" }
            );
        }
    }
    out
}

fn plot_rows(path: &std::path::Path, rows: &[Row], workloads: &[String]) -> Result<()> {
    let series: Vec<plot::Series> = VARIANTS
        .iter()
        .map(|(label, _, _)| {
            let points = workloads.iter().enumerate().filter_map(|(i, w)| {
                rows.iter()
                    .find(|r| &r.workload == w && r.mode == *label)
                    .map(|r| ((i + 1) as f64, r.overhead.max(0.0) * 100.0))
            });
            (label.to_string(), points.collect())
        })
        .collect();
    let x_label = format!(
        "workload: {}",
        workloads.iter().enumerate().map(|(i, w)| format!("{}={w}", i + 1)).collect::<Vec<_>>().join(" ")
    );
    plot::line_chart(
        path,
        "Checkpoint overhead vs no checkpoints",
        &x_label,
        "overhead (%)",
        &series,
        plot::Scales::default(),
    )
}

fn report(args: &CkptIncrBenchArgs, text: &str) -> String {
    let machine = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    format!(
        "# Benchmark: incremental checkpointing (nam-bench ckpt-incr)\n\nGenerated by `bench/ckpt-incr.sh`; do not edit by hand.\n\n\
         Command: `nam-bench ckpt-incr --mib {} --intervals {} --repeat {} --compute {} --dir {}{}`  \nMachine: Linux {}, {} CPUs (shared).\n\n\
         Overhead is the run time with checkpoints over the same workload without checkpoints, minus 1. Each repetition runs \
         baseline, mode, baseline, mode, ..., baseline, and compares each mode with the mean of the two baseline runs adjacent to it \
         (paired), so a slow phase of this shared machine moves both sides of the ratio; each row is the median over the repetitions, \
         `spread` the lowest and highest paired overhead (small negative overheads are noise). Load average at the start: {}. \
         A checkpoint closes every interval but the last; the time includes waiting for the last background copy. \
         `written` counts every byte stored (objects, headers, checksums); `extra` is memory held beyond the region \
         (line hashes, page states, record buffers; for fork, the pages the kernel duplicated). \
         `tracked` counts the pages the tracker saw written (write faults for the fault-based trackers, pages reported by \
         PAGEMAP_SCAN for the asynchronous one), `cpu s` the CPU time of the whole process over the run (every thread), \
         against the baseline's in the last line. \
         Parameters: the region is written to the SSD level (files with fsync, like Abeyratne 2017's SSD level); each interval is about \
         four times as long as a stop-and-copy checkpoint of the region on a quiet machine; {} intervals make {} checkpoints, \
         of which the first of every incremental chain is full (it has no previous version), as in a job that checkpoints \
         many times (with 5 intervals, a quarter of the checkpoints were full ones). Threads: the application runs on one thread in every mode; stop-and-copy \
         and consolidate copy in the application's thread and add none (the asynchronous tracker needs no thread); \
         non-blocking and early-late add one writer thread; fork adds a child process and a userfaultfd fault-handler \
         thread (it counts the pages the kernel duplicates from faults).\n\n```\n{}```\n\n![overheads](img/ckpt-incr.png)\n",
        args.mib,
        args.intervals,
        args.repeat,
        args.compute,
        args.dir.display(),
        if args.ram { " --ram" } else { "" },
        machine.trim(),
        cpus,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        args.intervals,
        args.intervals - 1,
        text
    )
}
