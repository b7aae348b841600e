//! Every limit and tuning value of nam-netsim, in one place (the model is TigerBeetle's
//! `constants.zig`): the bounds checked on input, the defaults of [`crate::SimConfig`], and the
//! measurement's tuning. Where one bounds another, a compile-time assertion at the end says so.
//! The physical and network models' parameters (`crate::physical`, `crate::builders`,
//! `crate::exanest`) are data taken from the cited works, not choices, and stay with their
//! models.

// Bounds checked on input.

/// Most virtual channels per port: bounds the per-port VC state and allocator work.
pub const VCS_MAX: usize = 16;

/// Largest VC depth accepted, in flits: the 64-flit VC buffers of the ExaNeSt switch
/// (Ploumidis et al. 2023 §4.2) are the deepest the modelled designs use.
pub const VC_DEPTH_MAX: usize = 64;

/// Largest packet accepted, in flits (no longer than the deepest VC accepted).
pub const PACKET_FLITS_MAX: usize = 64;

/// Longest run accepted, in reference cycles (warm-up, window and drain): bounds a run's
/// time and its latency samples.
pub const RUN_CYCLES_MAX: u64 = 50_000_000;

/// Most points accepted in one sweep: each point is a whole simulation run.
pub const SWEEP_POINTS_MAX: usize = 256;

/// Largest number of routers accepted from a topology file: bounds the routing tables built
/// for it, well beyond the 576-node layouts of Abeyratne 2017 §3.2.1.
pub const FILE_ROUTERS_MAX: usize = 4096;

/// Largest number of nodes accepted from a topology file.
pub const FILE_NODES_MAX: usize = 16384;

/// Most dimensions of a k-ary n-cube (`TopologyParams::dims`).
pub const CUBE_DIMS_MAX: usize = 3;

/// Longest channel accepted in cycles (`TopologyParams::link_cycles`).
pub const LINK_CYCLES_MAX: u64 = 64;

// Defaults of `SimConfig`.

/// Default virtual channels per port: 4, as in Abeyratne 2017 §3.4.1.
pub const VCS_DEFAULT: usize = 4;

/// Default VC depth in flits: 5, as in Abeyratne 2017 §3.4.1.
pub const VC_DEPTH_DEFAULT: usize = 5;

/// Default packet length in flits.
pub const PACKET_FLITS_DEFAULT: usize = 4;

/// Default warm-up, in reference cycles, before the measured window opens.
pub const WARMUP_CYCLES_DEFAULT: u64 = 1000;

/// Default measured window, in reference cycles.
pub const MEASURE_CYCLES_DEFAULT: u64 = 3000;

/// Default longest drain after the window, in reference cycles: four windows, so that a
/// network near saturation still delivers the window's packets.
pub const DRAIN_CYCLES_MAX_DEFAULT: u64 = 12_000;

/// Default cycles without a flit moving, while flits are in the network, after which a run
/// is declared deadlocked.
pub const DEADLOCK_CYCLES_DEFAULT: u64 = 5000;

/// Default cycles the network interface takes from a packet's generation to its head flit
/// entering the injection link: one, so that a packet generated at cycle `t` enters the
/// router's input buffer at `t + 2` over a one-cycle link, as in the usual terminal model
/// (BookSim2's source queue writes the flit onto the injection channel one step after the
/// packet is created); 0 gives nam-netsim's earlier, one cycle shorter terminal interface.
pub const TERMINAL_DELAY_CYCLES_DEFAULT: u64 = 1;

/// Largest configurable pipeline delay (terminal, routing, switch, credit), in cycles: deeper
/// than any router pipeline in use, and it keeps delays far from overflowing the ps clock.
pub const PIPELINE_DELAY_MAX: u64 = 64;

/// Default iterations of an iSLIP allocator (BookSim2's `alloc_iters` default).
pub const ALLOC_ITERS_DEFAULT: usize = 1;

/// Most iterations accepted for an iSLIP allocator: more than the widest router's ports
/// cannot add matches.
pub const ALLOC_ITERS_MAX: usize = 64;

// Measurement.

/// Default bound on a stable run's average latency, as a multiple of the zero-load latency:
/// the point where the latency curve has clearly left its zero-load plateau (a saturated
/// network's latency grows without bound; three times zero load is the common definition of
/// the knee in NoC evaluations).
pub const LATENCY_BOUND_FACTOR_DEFAULT: f64 = 3.0;

/// Largest relative shortfall of the window's accepted packets against the packets generated
/// in it that still counts as a stable accepted rate (beyond the sampling noise allowance of
/// [`ACCEPTED_RATE_SIGMAS`]).
pub const ACCEPTED_RATE_TOLERANCE: f64 = 0.02;

/// Sampling noise allowance of the accepted-rate and latency-drift tests, in standard
/// deviations (of a Poisson count, or of a mean latency): three, so that a stable run is
/// misjudged about once in a thousand.
pub const ACCEPTED_RATE_SIGMAS: f64 = 3.0;

/// Largest relative growth of the average latency of packets generated in the second half of
/// the window over those of the first half that still counts as converged (beyond the noise
/// allowance): a saturated network's source queues, and so its latency, keep growing.
pub const LATENCY_DRIFT_TOLERANCE: f64 = 0.05;

/// Batches (equal spans of generation time) the window's latencies are grouped in for the
/// latency-drift test's batch-means standard error: eight, half on each side of the middle,
/// enough for a variance estimate with six degrees of freedom.
pub const LATENCY_BATCHES: usize = 8;

/// Default relative standard error of the average latency at which an adaptive measurement
/// window stops growing: 2%, the precision the fidelity tests hold zero-load latency to.
pub const CONVERGE_TOLERANCE_DEFAULT: f64 = 0.02;

/// Points counted as "before saturation": offered load at most this fraction of the saturation
/// throughput.
pub const BEFORE_SATURATION_FRACTION: f64 = 0.75;

/// UGAL-L's bias toward the minimal path on a dragonfly, in flits buffered downstream
/// ([`crate::topology::DragonflyAlgo::Ugal`]). BookSim2 hard-codes 30 for its example's
/// 256-flit VCs, more than a whole port of nam-netsim's default buffers (4 VCs x 5 flits)
/// holds, so it would never leave the minimal path; 4 flits (one packet) keeps the same
/// bias relative to these buffers: a packet goes non-minimally once the minimal port's queue
/// is more than a packet longer than twice the other's.
pub const UGAL_THRESHOLD_FLITS_DEFAULT: u32 = 4;

/// Start phases (in source-router cycles) the analytic zero-load latency averages over for
/// paths that cross clock domains.
pub const CLOCK_PHASES: u64 = 16;

// BookSim2-style configuration files (`crate::bookconfig`).

/// BookSim2's default `sample_period`, in cycles, used when a file sets only some of
/// `warmup_periods`, `sample_period` and `max_samples`.
pub const BOOKSIM_SAMPLE_PERIOD_DEFAULT: u64 = 1000;

/// BookSim2's default `k` (routers per dimension).
pub const BOOKSIM_K_DEFAULT: usize = 8;

/// BookSim2's default `warmup_periods`.
pub const BOOKSIM_WARMUP_PERIODS_DEFAULT: u64 = 3;

/// BookSim2's default `max_samples`.
pub const BOOKSIM_MAX_SAMPLES_DEFAULT: u64 = 10;

// The defaults lie within the bounds checked on input.
const _: () = assert!(1 <= ALLOC_ITERS_DEFAULT && ALLOC_ITERS_DEFAULT <= ALLOC_ITERS_MAX);
const _: () = assert!(1 <= VCS_DEFAULT && VCS_DEFAULT <= VCS_MAX);
const _: () = assert!(1 <= VC_DEPTH_DEFAULT && VC_DEPTH_DEFAULT <= VC_DEPTH_MAX);
const _: () = assert!(1 <= PACKET_FLITS_DEFAULT && PACKET_FLITS_DEFAULT <= PACKET_FLITS_MAX);
const _: () = assert!(WARMUP_CYCLES_DEFAULT + MEASURE_CYCLES_DEFAULT + DRAIN_CYCLES_MAX_DEFAULT <= RUN_CYCLES_MAX);
// The largest packet fits the deepest VC; a file topology has no more routers than nodes.
const _: () = assert!(PACKET_FLITS_MAX <= VC_DEPTH_MAX && FILE_ROUTERS_MAX <= FILE_NODES_MAX);
