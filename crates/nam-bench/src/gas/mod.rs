//! `nam-bench gas`: the perftest of nam. Measures put, get and fetch-add through the client
//! library against a real server and, with `--vs-ucx`, runs `ucx_perftest` on the same
//! transport in the same invocation and prints the ratios. `nam-bench allreduce` and
//! `nam-bench mailbox` share its options.

mod allreduce;
mod clock;
mod mailbox;
mod measure;
mod paths;
mod perftest;
mod report;

use crate::harness::server;
use anyhow::{bail, Context, Result};
use clock::Clock;
use measure::{iterations_for, measure, Op};
use nam_client::{AllocOptions, Client, ClientConfig};
use nam_proto::size::parse_size;
use report::Row;
use std::path::PathBuf;

pub use crate::harness::Transport;

/// Arguments of `nam-bench gas`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Transfer paths to compare on the same host (direct,rma,auto), each over the sweep.
    #[arg(long, value_enum, value_delimiter = ',')]
    path: Vec<paths::PathChoice>,
    /// Server to measure, HOST:PORT; without it a local `nam serve` is started.
    #[arg(long)]
    server: Option<String>,
    /// Operations, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "get")]
    op: Vec<Op>,
    /// Bytes per operation (e.g. 8, 4KiB, 1MiB); ignored by --sweep.
    #[arg(long, default_value = "8")]
    size: String,
    /// Timed iterations per size (default: scaled so each size takes a fraction of a second).
    #[arg(long)]
    iters: Option<u64>,
    /// Sweep sizes from --min-size to --max-size, times 4 per step.
    #[arg(long)]
    sweep: bool,
    /// Smallest size of a sweep.
    #[arg(long, default_value = "8")]
    min_size: String,
    /// Largest size of a sweep.
    #[arg(long, default_value = "64MiB")]
    max_size: String,
    /// UCX transport for the client, a local server and ucx_perftest.
    #[arg(long, value_enum, default_value = "shm")]
    transport: Transport,
    /// Operations in flight in the bandwidth phase.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Run ucx_perftest on the same transport for every point and print the ratios.
    #[arg(long)]
    vs_ucx: bool,
    /// Measure each point this many times, alternating nam and ucx_perftest, and report
    /// the median of each (shared machines are noisy; a ratio of medians is stable).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Print one JSON object per point instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the points as CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write a PNG plot of latency and bandwidth against size.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write a Markdown report (command, machine, table, targets).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Also start this many client processes at once against the server, check that every
    /// operation succeeds and that nothing leaks once they exit.
    #[arg(long)]
    clients: Option<usize>,
    /// Also measure the CPU use of the idle local server over this many seconds.
    #[arg(long)]
    idle_secs: Option<u64>,
    /// Exit with an error when a target is missed.
    #[arg(long)]
    check: bool,
    /// Internal: run as one of the --clients processes.
    #[arg(long, hide = true)]
    child: bool,
}

pub use allreduce::{run as run_allreduce, AllreduceArgs};
pub use mailbox::{run as run_mailbox, MailboxArgs};

/// Runs `nam-bench gas`.
pub fn run(args: BenchArgs) -> Result<()> {
    if !args.path.is_empty() {
        return paths::run(&args);
    }
    let sizes = sizes(&args)?;
    let local = match &args.server {
        Some(_) => None,
        None => {
            Some(server::LocalServer::start(args.transport, 2 * sizes.iter().max().copied().unwrap_or(8) + (64 << 20))?)
        }
    };
    let addr = match (&args.server, &local) {
        (Some(s), _) => nam_client::config::parse_servers(s)?[0],
        (None, Some(l)) => l.addr,
        (None, None) => unreachable!("a local server is started when none is given"),
    };
    if args.child {
        return child_workload(addr, args.transport, &args.op);
    }
    let mut config = ClientConfig::new(vec![addr]);
    config.transports = Some(args.transport.ucx_tls().to_string());
    let client = Client::connect(config).with_context(|| format!("connecting to {addr}"))?;
    let largest = sizes.iter().max().copied().unwrap_or(8).max(8);
    let target = client.alloc(largest, &AllocOptions { align: 4096, ..Default::default() })?;
    let (rows, baseline_failures) = measure_rows(&args, &client, &target, &sizes)?;
    client.free(&target)?;
    drop(client);
    let mut extras = baseline_failures;
    if let Some(n) = args.clients {
        extras.push(server::many_clients(addr, args.transport, n)?);
    }
    if let (Some(secs), Some(l)) = (args.idle_secs, &local) {
        extras.push(l.idle_cpu(secs)?);
    }
    report_rows(&args, &rows, &extras)
}

/// Every operation and size, `--repeat` times each, alternating nam and (with `--vs-ucx`)
/// ucx_perftest so that the machine's drift hits both alike; the middle run of each is kept.
/// Returns the rows and the points whose baseline could not be measured.
fn measure_rows(
    args: &BenchArgs,
    client: &Client,
    target: &nam_client::Allocation,
    sizes: &[u64],
) -> Result<(Vec<Row>, Vec<String>)> {
    let clock = Clock::calibrate();
    let mut rows = Vec::new();
    let mut baseline_failures = Vec::new();
    for &op in &args.op {
        for &size in sizes {
            let size = if op == Op::Fadd { 8 } else { size };
            if rows.iter().any(|r: &Row| r.point.op == op && r.point.size == size) {
                continue;
            }
            let iters = iterations_for(size, args.iters);
            let mut points = Vec::new();
            let mut baselines = Vec::new();
            for _ in 0..args.repeat.max(1) {
                points.push(measure(client, target, op, size, iters, args.window, &clock)?);
                if args.vs_ucx {
                    match perftest::run(op, size, iters, args.transport.ucx_tls()) {
                        Ok(baseline) => baselines.push(baseline),
                        Err(e) => baseline_failures.push(format!("baseline missing for {} {size} B: {e:#}", op.name())),
                    }
                }
            }
            let point = measure::median(points);
            let baseline = (!baselines.is_empty()).then(|| perftest::median(baselines));
            let row = Row { point, baseline, transport: args.transport.name() };
            if args.json {
                println!("{}", serde_json::to_string(&row.json())?);
            }
            rows.push(row);
        }
    }
    Ok((rows, baseline_failures))
}

/// Prints the table (or nothing after `--json`) and writes the CSV, plot and Markdown asked for.
fn report_rows(args: &BenchArgs, rows: &[Row], extras: &[String]) -> Result<()> {
    let verdicts = report::targets(rows, args.transport);
    if !args.json {
        report::print_table(rows, &verdicts, extras);
    }
    if let Some(path) = &args.csv {
        report::write_csv(path, rows)?;
    }
    if let Some(path) = &args.plot {
        report::plot(path, rows, args.transport)?;
    }
    if let Some(path) = &args.markdown {
        report::write_markdown(path, rows, &verdicts, extras, args.transport)?;
    }
    if args.check && verdicts.iter().any(|v| !v.met) {
        bail!("a benchmark target was missed");
    }
    Ok(())
}

fn sizes(args: &BenchArgs) -> Result<Vec<u64>> {
    if !args.sweep {
        let size = parse_size(&args.size).context("--size")?;
        if size == 0 {
            bail!("--size must be at least 1 byte");
        }
        return Ok(vec![size]);
    }
    let (min, max) =
        (parse_size(&args.min_size).context("--min-size")?, parse_size(&args.max_size).context("--max-size")?);
    if min == 0 || min > max {
        bail!("--min-size must be between 1 and --max-size");
    }
    let mut sizes = Vec::new();
    let mut size = min;
    while size <= max {
        sizes.push(size);
        size *= 4;
    }
    Ok(sizes)
}

/// The workload of one `--clients` process: allocate, every op a few hundred times, verify,
/// free, leave.
fn child_workload(addr: std::net::SocketAddr, transport: Transport, ops: &[Op]) -> Result<()> {
    let mut config = ClientConfig::new(vec![addr]);
    config.transports = Some(transport.ucx_tls().to_string());
    config.timeout = crate::limits::CLIENT_PROCESS_TIMEOUT;
    config.connect_timeout = crate::limits::CLIENT_PROCESS_TIMEOUT;
    let client = Client::connect(config)?;
    let a = client.alloc(64 * 1024, &AllocOptions::default())?;
    let shared = client.open("bench-shared-counter")?;
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 31 + std::process::id()) as u8).collect();
    for round in 0..200u64 {
        for op in ops {
            match op {
                Op::Put => client.put(&a, (round % 8) * 4096, &pattern)?,
                Op::Get => {
                    let mut back = vec![0u8; 4096];
                    client.flush()?;
                    client.get(&a, (round % 8) * 4096, &mut back)?;
                    if round >= 8 && back != pattern {
                        bail!("process {}: read back different bytes", std::process::id());
                    }
                }
                Op::Fadd => {
                    client.fetch_add(&shared, 0, 1)?;
                }
            }
        }
    }
    client.free(&a)?;
    client.free(&shared)?;
    Ok(())
}
