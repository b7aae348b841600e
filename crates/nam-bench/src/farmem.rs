//! `nam-bench farmem`: far memory against local memory. Each workload runs once on local
//! memory (the baseline, measured in the same invocation) and then on a paged far-memory
//! region over 1-3 memory servers, with a local-memory budget that is a fraction of its
//! footprint, the prefetcher on or off, over UCX shared memory or TCP. It prints the
//! slowdown (far time / local time), checks that both runs computed the same result, and
//! measures the latency of a 4 KiB remote page fault.

mod cache_sweep;
mod explicit_paired;
mod fault;
mod fault_floor;
mod fof_explicit;
mod memcached;
mod paired;
mod report;
mod saxpy_explicit;
mod workloads;

use crate::harness::server::LocalServer;
use anyhow::{bail, Context, Result};
use nam_client::{Client, ClientConfig};
use nam_farmem::FaultMode;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use workloads::Workload;

/// Workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Dependent loads over a random cycle (hit and miss latency).
    PointerChase,
    /// y = a*x + y (bandwidth).
    Saxpy,
    /// SAXPY through the explicit API, computed in place on cache lines.
    SaxpyExplicit,
    /// Friends-of-friends on a power-law graph (Mao 2020 Fig. 8.7).
    Fof,
    /// Friends-of-friends through the explicit API with batched misses.
    FofExplicit,
    /// Friends-of-friends in a paged region, asking for each query's pages first
    /// (`PagedRegion::fetch_ranges`).
    FofHinted,
    /// A 4 KiB remote page fault, one page at a time.
    FaultLatency,
    /// memcached through the LD_PRELOAD library under a load generator.
    Memcached,
    /// Explicit API: line-size and metadata-cache sweep (runs both explicit rows).
    CacheSweep,
    /// Explicit API sequential read (a row of cache-sweep).
    ExplicitSeq,
    /// Explicit API pointer chase (a row of cache-sweep).
    ExplicitChase,
}

/// Prefetcher setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

pub use crate::harness::Transport;

/// Arguments of `nam-bench farmem`.
#[derive(clap::Args, Debug)]
pub struct FarmemBenchArgs {
    /// Workloads, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["pointer-chase", "saxpy", "fof", "fault-latency"])]
    workload: Vec<WorkloadKind>,
    /// Local memory as a fraction of each workload's footprint, comma-separated (0.1 to 1).
    #[arg(long, value_delimiter = ',', default_value = "0.5")]
    local_fraction: Vec<f64>,
    /// Local memory of the fault-latency rows as a fraction of their pages, comma-separated
    /// (1: every page fits, no eviction; 0.25: a fault needs a free page, which background
    /// reclaim is to have ready).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    fault_local_fraction: Vec<f64>,
    /// The pager's background reclaim (`PagerConfig::evict_ahead`) in the fault-latency
    /// rows, on and/or off (off: a fault that finds the budget full evicts itself).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    reclaim: Vec<OnOff>,
    /// Prefetcher on and/or off, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    prefetch: Vec<OnOff>,
    /// Feedback-directed throttling of the paged prefetcher by its accuracy
    /// (`PagerConfig::throttle`).
    #[arg(long, value_enum, default_value = "on")]
    throttle: OnOff,
    /// Memory servers HOST:PORT,...; without it, local `nam serve` processes are started.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Numbers of local servers to run over (ignored with --servers), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    server_count: Vec<usize>,
    /// UCX transports, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "shm")]
    transport: Vec<Transport>,
    /// Scale of the workloads' footprints (1 = ~32 MiB each).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Timed rounds of each paged run (pointer chase, SAXPY, FoF) and paired repetitions of
    /// the explicit rows; each times the local baseline and the far run right after each
    /// other, and the medians are reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Least milliseconds the local side of a round runs (the workload is iterated).
    #[arg(long, default_value_t = 0.0)]
    min_ms: f64,
    /// Who serves the page faults of paged runs (memcached: `NAM_FARMEM_FAULT_MODE` of the
    /// LD_PRELOAD library), comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "signal")]
    fault_mode: Vec<FaultModeArg>,
    /// Page size of the paged regions (pointer chase, SAXPY, FoF), comma-separated: `base`
    /// (4 KiB) and/or `huge` (the kernel's huge pages, `PagerConfig::with_huge_pages`; needs
    /// `vm.nr_hugepages` reserved for the budget). With `huge`, the local baseline asks for
    /// transparent huge pages too (`MADV_HUGEPAGE`), so both sides have them.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "base")]
    page_size: Vec<PageSizeArg>,
    /// memcached's LRU, the same for the local and the far memcached: `classic` (one LRU per
    /// slab class, memcached 1.4's, the one Mao 2020 measured) or `segmented` (1.5's default, whose
    /// maintainer thread keeps moving items between its hot, warm and cold lists).
    #[arg(long, value_enum, default_value = "classic")]
    memcached_lru: memcached::Lru,
    /// Pager handler busy-poll after its last work, microseconds (default: the pager's).
    #[arg(long)]
    spin_us: Option<u64>,
    /// Hold a CPU latency bound of this many microseconds for the whole benchmark, local
    /// runs included (`nam_farmem::CpuLatencyBound`, `/dev/cpu_dma_latency`; 0: idle cores
    /// poll instead of sleeping). Default: the machine as it is.
    #[arg(long)]
    cpu_latency_us: Option<u32>,
    /// Cache line sizes of the explicit rows, comma-separated (default: the cache's default).
    #[arg(long, value_delimiter = ',')]
    line_bytes: Vec<u64>,
    /// Print one JSON object per run instead of the table.
    #[arg(long)]
    json: bool,
    /// Append the runs as Markdown (with the targets) to this file.
    #[arg(long, alias = "out")]
    markdown: Option<PathBuf>,
    /// Write PNG plots of slowdown against local fraction into this directory.
    #[arg(long = "plot", alias = "plot-dir", value_name = "DIR")]
    plot_dir: Option<PathBuf>,
}

/// One measured configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    workload: WorkloadKind,
    local_fraction: f64,
    prefetch: bool,
    servers: usize,
    transport: Transport,
    /// Far time / local time (for fault-latency: median fault / local page touch).
    slowdown: f64,
    /// Local throughput / far throughput inverse: local time / far time.
    throughput_ratio: f64,
    local_ms: f64,
    far_ms: f64,
    /// Per work item, nanoseconds, far memory.
    far_ns_per_item: f64,
    /// Per work item, nanoseconds, local memory.
    local_ns_per_item: f64,
    /// Page faults on missing pages, pages prefetched, evictions.
    misses: u64,
    prefetches: u64,
    evictions: u64,
    /// Fault latency percentiles (fault-latency only), microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_us: Option<f64>,
    /// Fault-latency only: a bare 4 KiB get through the same client in the same run (the
    /// floor of a remote fault), median and p99, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    get_p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    get_p99_us: Option<f64>,
    /// Fault-latency only: the kernel's part alone, an empty handler installing pages from
    /// local memory in the same fault mode and run (`fault_floor.rs`), median, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_floor_p50_us: Option<f64>,
    /// Fault-latency only: pages evicted by the pager's background reclaim during the timed
    /// faults, and pages evicted because an install found the budget full.
    #[serde(skip_serializing_if = "Option::is_none")]
    reclaim_evictions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    full_evictions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reclaim: Option<bool>,
    /// memcached only: bytes it allocated in far memory, its resident set, values checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    far_bytes: Option<u64>,
    /// memcached only: bytes of its far region resident in local memory at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    far_resident_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    values_checked: Option<u64>,
    /// memcached only: write-protect faults, and read misses the pager installed writable
    /// because their zone is written after reads (whole run, fill included).
    #[serde(skip_serializing_if = "Option::is_none")]
    write_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    predicted_writes: Option<u64>,
    /// Explicit-API rows: cache line size and metadata-cache entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    line_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata_cache: Option<usize>,
    /// Which way into far memory the row uses: "paged" or "explicit".
    way_in: &'static str,
    /// Explicit rows: paired repetitions whose medians the row reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    repeats: Option<usize>,
    /// Explicit rows: streaming reads served without allocating a line.
    #[serde(skip_serializing_if = "Option::is_none")]
    bypassed: Option<u64>,
    /// Explicit rows: streaming reads served in place in a mapped server pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_place: Option<u64>,
    /// Explicit rows that leave dirty lines (SAXPY): median time of the flush after the
    /// timed part, ms, and the median slowdown with it counted too.
    #[serde(skip_serializing_if = "Option::is_none")]
    flush_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slowdown_with_flush: Option<f64>,
    /// The slowdown of each paired round (the rows that have rounds), in round order: rows
    /// measured in the same rounds (prefetch on and off) are compared round by round.
    #[serde(skip)]
    round_slowdowns: Vec<f64>,
    /// Paged rows: who served the faults ("thread" or "signal").
    #[serde(skip_serializing_if = "Option::is_none")]
    fault_mode: Option<&'static str>,
    /// memcached only: its LRU ("classic" or "segmented").
    #[serde(skip_serializing_if = "Option::is_none")]
    memcached_lru: Option<&'static str>,
    /// The CPU latency bound held during the run (`--cpu-latency-us`), microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_latency_us: Option<u32>,
    /// Paged rows of `--page-size`: the region's page size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    page_bytes: Option<u64>,
}

/// `--cpu-latency-us` of this benchmark, once held: every row records it (`Run::basic`).
static CPU_LATENCY_US: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

impl Run {
    /// A row with the common fields; the optional ones empty.
    #[allow(clippy::too_many_arguments)]
    fn basic(
        workload: WorkloadKind,
        local_fraction: f64,
        prefetch: bool,
        servers: usize,
        transport: Transport,
        local_ms: f64,
        far_ms: f64,
        items: f64,
    ) -> Run {
        Run {
            workload,
            local_fraction,
            prefetch,
            servers,
            transport,
            slowdown: far_ms / local_ms,
            throughput_ratio: local_ms / far_ms,
            local_ms,
            far_ms,
            far_ns_per_item: far_ms * 1e6 / items,
            local_ns_per_item: local_ms * 1e6 / items,
            misses: 0,
            prefetches: 0,
            evictions: 0,
            p50_us: None,
            p99_us: None,
            get_p50_us: None,
            get_p99_us: None,
            kernel_floor_p50_us: None,
            reclaim_evictions: None,
            full_evictions: None,
            reclaim: None,
            far_bytes: None,
            far_resident_bytes: None,
            rss_bytes: None,
            values_checked: None,
            write_faults: None,
            predicted_writes: None,
            line_bytes: None,
            metadata_cache: None,
            way_in: match workload {
                WorkloadKind::SaxpyExplicit
                | WorkloadKind::FofExplicit
                | WorkloadKind::CacheSweep
                | WorkloadKind::ExplicitSeq
                | WorkloadKind::ExplicitChase => "explicit",
                WorkloadKind::FofHinted => "hinted paging",
                _ => "paged",
            },
            repeats: None,
            bypassed: None,
            in_place: None,
            flush_ms: None,
            slowdown_with_flush: None,
            round_slowdowns: Vec::new(),
            fault_mode: None,
            memcached_lru: None,
            cpu_latency_us: CPU_LATENCY_US.get().copied(),
            page_bytes: None,
        }
    }

    /// Fills an explicit row from its paired medians.
    fn explicit(&mut self, m: &explicit_paired::Paired, s: &saxpy_explicit::Setting) {
        self.slowdown = m.slowdown;
        self.round_slowdowns = m.round_slowdowns.clone();
        self.throughput_ratio = 1.0 / m.slowdown;
        self.misses = m.stats.misses;
        self.prefetches = m.stats.prefetches;
        self.evictions = m.stats.evictions;
        self.bypassed = Some(m.stats.bypassed);
        self.in_place = Some(m.stats.in_place);
        (self.flush_ms, self.slowdown_with_flush) = (m.flush.map(|f| f.0), m.flush.map(|f| f.1));
        self.repeats = Some(s.repeats);
        self.line_bytes = s.line_bytes;
    }
}

/// Page size of paged regions (`--page-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PageSizeArg {
    /// 4 KiB pages.
    Base,
    /// The kernel's huge pages (hugetlb, 2 MiB on x86-64).
    Huge,
}

/// Who serves page faults (`--fault-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultModeArg {
    /// The pager's handler thread (the default; system calls may touch missing pages).
    Thread,
    /// The faulting thread, in a SIGBUS handler.
    Signal,
}

impl From<FaultModeArg> for FaultMode {
    fn from(m: FaultModeArg) -> FaultMode {
        match m {
            FaultModeArg::Thread => FaultMode::Thread,
            FaultModeArg::Signal => FaultMode::Signal,
        }
    }
}

/// The `--fault-mode` name of `mode`.
pub fn mode_name(mode: FaultMode) -> &'static str {
    match mode {
        FaultMode::Thread => "thread",
        FaultMode::Signal => "signal",
    }
}

/// Local `nam serve` processes of one transport, stopped when dropped.
struct LocalServers {
    // Held for their Drop, which stops the processes.
    _servers: Vec<LocalServer>,
    addrs: Vec<SocketAddr>,
}

impl LocalServers {
    fn start(count: usize, transport: Transport) -> Result<LocalServers> {
        let servers = (0..count)
            // 4 GiB each (the pool is sparse until allocated): memcached's rows run one far
            // memcached per setting side by side, and a stopped one's extents stay allocated
            // for the server's lease (10 s) while the next fraction's instances start.
            .map(|i| LocalServer::start_named(transport.ucx_tls(), 4 << 30, &format!("blade{i}")))
            .collect::<Result<Vec<_>>>()?;
        let addrs = servers.iter().map(|s| s.addr).collect();
        Ok(LocalServers { _servers: servers, addrs })
    }
}

fn connect(addrs: &[SocketAddr], transport: Transport) -> Result<Arc<Client>> {
    let mut config = ClientConfig::new(addrs.to_vec());
    config.transports = Some(transport.ucx_tls().into());
    config.timeout = crate::limits::FARMEM_CLIENT_TIMEOUT;
    Ok(Arc::new(Client::connect(config).context("connecting to the memory servers")?))
}

fn saxpy(scale: f64) -> workloads::Saxpy {
    workloads::Saxpy { n: ((4.0 * 1048576.0 * scale) as usize).max(1024), passes: 4 }
}

fn fof(scale: f64) -> workloads::FriendsOfFriends {
    let s = |n: f64| ((n * scale) as usize).max(1024);
    workloads::FriendsOfFriends { vertices: s(200_000.0), edges: s(3_000_000.0), queries: s(2_000.0) }
}

fn workload(kind: WorkloadKind, scale: f64) -> Box<dyn Workload> {
    let s = |n: f64| ((n * scale) as usize).max(1024);
    match kind {
        // Steps scale too, so a sweep over small budgets (a miss per step) stays minutes long.
        WorkloadKind::PointerChase => {
            Box::new(workloads::PointerChase { slots: s(4.0 * 1048576.0), steps: s(1048576.0) as u64 })
        }
        WorkloadKind::Saxpy => Box::new(saxpy(scale)),
        WorkloadKind::Fof => Box::new(fof(scale)),
        WorkloadKind::FofHinted => Box::new(workloads::HintedFriendsOfFriends(fof(scale))),
        _ => unreachable!("measured by their own modules"),
    }
}

/// The explicit rows: every server count, fraction, prefetch setting and line size.
fn run_explicit(
    args: &FarmemBenchArgs,
    kind: WorkloadKind,
    transport: Transport,
    addrs: &[SocketAddr],
    counts: &[usize],
) -> Result<Vec<Run>> {
    let lines: Vec<Option<u64>> =
        if args.line_bytes.is_empty() { vec![None] } else { args.line_bytes.iter().map(|&l| Some(l)).collect() };
    let saxpy_w = saxpy(args.scale);
    let fof_w = fof(args.scale);
    let mut runs = Vec::new();
    for &n in counts {
        for &fraction in &args.local_fraction {
            // Every prefetch setting and line size of this fraction in the same rounds.
            let settings: Vec<saxpy_explicit::Setting> = (args.prefetch.iter())
                .flat_map(|&p| {
                    lines.iter().map(move |&line_bytes| saxpy_explicit::Setting {
                        fraction,
                        prefetch: p == OnOff::On,
                        repeats: args.repeat,
                        line_bytes,
                    })
                })
                .collect();
            let client = connect(&addrs[..n], transport)?;
            let measured = if kind == WorkloadKind::SaxpyExplicit {
                saxpy_explicit::measure(client, (transport, n), &saxpy_w, &settings)?
            } else {
                fof_explicit::measure(client, (transport, n), &fof_w, &settings)?
            };
            for run in measured {
                report::progress(args, &run);
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// Runs `w` on local memory: (milliseconds, checksum).
fn run_local(w: &dyn Workload) -> (f64, u64) {
    let mut mem = vec![0u64; w.footprint().div_ceil(8)];
    // SAFETY: viewing the u64 buffer as bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast::<u8>(), mem.len() * 8) };
    w.init(bytes);
    let t = Instant::now();
    let sum = w.run(bytes);
    (t.elapsed().as_secs_f64() * 1e3, sum)
}

struct FarSetting {
    fraction: f64,
    prefetch: bool,
    throttle: bool,
    mode: FaultMode,
    spin_us: Option<u64>,
    huge_pages: bool,
}

/// Entry point.
pub fn run(args: FarmemBenchArgs) -> Result<()> {
    for &f in &args.local_fraction {
        if !(0.01..=1.0).contains(&f) {
            bail!("--local-fraction {f} must be in 0.01..=1");
        }
    }
    // Held until the report is out: the local baselines run under the same bound as the
    // far runs, so the ratios compare like with like.
    let _cpu_latency = match args.cpu_latency_us {
        Some(us) => {
            let bound = nam_farmem::CpuLatencyBound::hold(us)?;
            let _ = CPU_LATENCY_US.set(us);
            Some(bound)
        }
        None => None,
    };
    let mut runs = Vec::new();
    for &transport in &args.transport {
        let (_local, addrs) = if args.servers.is_empty() {
            let max = *args.server_count.iter().max().unwrap_or(&1);
            let local = LocalServers::start(max, transport)?;
            let addrs = local.addrs.clone();
            (Some(local), addrs)
        } else {
            (None, nam_client::config::parse_servers(&args.servers.join(","))?)
        };
        let counts: Vec<usize> = if args.servers.is_empty() { args.server_count.clone() } else { vec![addrs.len()] };
        for &kind in &args.workload {
            runs.extend(run_workload(&args, kind, transport, &addrs, &counts)?);
        }
    }
    report::emit(&args, &runs)
}

fn run_workload(
    args: &FarmemBenchArgs,
    kind: WorkloadKind,
    transport: Transport,
    addrs: &[SocketAddr],
    counts: &[usize],
) -> Result<Vec<Run>> {
    match kind {
        WorkloadKind::FaultLatency => run_fault_latency(args, transport, addrs, counts),
        WorkloadKind::CacheSweep => run_cache_sweep(args, transport, addrs, counts),
        WorkloadKind::Memcached => run_memcached(args, transport, addrs, counts),
        WorkloadKind::SaxpyExplicit | WorkloadKind::FofExplicit => run_explicit(args, kind, transport, addrs, counts),
        _ => run_paired(args, kind, transport, addrs, counts),
    }
}

/// Remote page-fault latency per server count and fault mode.
fn run_fault_latency(
    args: &FarmemBenchArgs,
    transport: Transport,
    addrs: &[SocketAddr],
    counts: &[usize],
) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for &n in counts {
        for &fraction in &args.fault_local_fraction {
            for (&mode, &reclaim) in args.fault_mode.iter().flat_map(|m| args.reclaim.iter().map(move |r| (m, r))) {
                let run = fault::measure(
                    connect(&addrs[..n], transport)?,
                    (transport, n),
                    args.scale,
                    mode.into(),
                    args.spin_us,
                    (fraction, reclaim == OnOff::On),
                )?;
                report::progress(args, &run);
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// The cache's line size swept per server count.
fn run_cache_sweep(
    args: &FarmemBenchArgs,
    transport: Transport,
    addrs: &[SocketAddr],
    counts: &[usize],
) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for &n in counts {
        for run in cache_sweep::measure(connect(&addrs[..n], transport)?, transport, n, args.scale)? {
            report::progress(args, &run);
            runs.push(run);
        }
    }
    Ok(runs)
}

/// Unmodified memcached on far memory (preloaded) against memcached on local memory.
fn run_memcached(
    args: &FarmemBenchArgs,
    transport: Transport,
    addrs: &[SocketAddr],
    counts: &[usize],
) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    let preload = memcached::preload_path()?;
    for &n in counts {
        for &fraction in &args.local_fraction {
            // Every prefetch setting and fault mode of this fraction in the same rounds.
            let fars: Vec<memcached::FarSide> = (args.prefetch.iter())
                .flat_map(|p| args.fault_mode.iter().map(move |m| (p, m)))
                .map(|(&p, &mode)| memcached::FarSide {
                    servers: &addrs[..n],
                    transport,
                    fraction,
                    prefetch: p == OnOff::On,
                    mode: mode.into(),
                    throttle: args.throttle == OnOff::On,
                    preload: &preload,
                    spin_us: args.spin_us,
                })
                .collect();
            for run in memcached::measure(&fars, args.scale, args.repeat, args.memcached_lru)? {
                report::progress(args, &run);
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// A transparently paged workload against the same workload on local memory, in paired rounds.
fn run_paired(
    args: &FarmemBenchArgs,
    kind: WorkloadKind,
    transport: Transport,
    addrs: &[SocketAddr],
    counts: &[usize],
) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    let w = workload(kind, args.scale);
    let rounds = paired::Rounds { repeat: args.repeat, min_ms: args.min_ms };
    for &n in counts {
        for &fraction in &args.local_fraction {
            for &mode in &args.fault_mode {
                // Every page size and prefetch setting in the same rounds.
                let settings: Vec<FarSetting> = (args.page_size.iter())
                    .flat_map(|&size| args.prefetch.iter().map(move |&p| (size, p)))
                    .map(|(size, p)| FarSetting {
                        fraction,
                        prefetch: p == OnOff::On,
                        throttle: args.throttle == OnOff::On,
                        mode: mode.into(),
                        spin_us: args.spin_us,
                        huge_pages: size == PageSizeArg::Huge,
                    })
                    .collect();
                let measured = paired::measure(w.as_ref(), connect(&addrs[..n], transport)?, &settings, rounds)
                    .with_context(|| format!("{kind:?}"))?;
                for (setting, m) in settings.iter().zip(measured) {
                    let items = (w.items() * m.iterations as u64) as f64;
                    let mut run =
                        Run::basic(kind, fraction, setting.prefetch, n, transport, m.local_ms, m.far_ms, items);
                    run.slowdown = m.slowdown;
                    run.round_slowdowns = m.round_slowdowns;
                    run.throughput_ratio = 1.0 / m.slowdown;
                    run.misses = m.stats.misses;
                    run.prefetches = m.stats.prefetches;
                    run.evictions = m.stats.evictions;
                    run.fault_mode = Some(mode_name(m.fault_mode));
                    run.page_bytes = Some(m.page_bytes);
                    report::progress(args, &run);
                    runs.push(run);
                }
            }
        }
    }
    Ok(runs)
}
