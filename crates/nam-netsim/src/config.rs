//! Simulation parameters and results.

pub use crate::alloc::AllocatorKind;
use crate::constants::{
    ALLOC_ITERS_DEFAULT, ALLOC_ITERS_MAX, CONVERGE_TOLERANCE_DEFAULT, DEADLOCK_CYCLES_DEFAULT,
    DRAIN_CYCLES_MAX_DEFAULT, LATENCY_BOUND_FACTOR_DEFAULT, MEASURE_CYCLES_DEFAULT, PACKET_FLITS_DEFAULT,
    PIPELINE_DELAY_MAX, TERMINAL_DELAY_CYCLES_DEFAULT, VCS_DEFAULT, VC_DEPTH_DEFAULT, WARMUP_CYCLES_DEFAULT,
};
pub use crate::constants::{PACKET_FLITS_MAX, RUN_CYCLES_MAX, VCS_MAX, VC_DEPTH_MAX};
use crate::error::{invalid, Result};
use crate::traffic::TrafficPattern;
use serde::Serialize;

/// Offered load per node.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Injection {
    /// Packets per nanosecond per node (the unit of Abeyratne 2017's figures).
    PacketsPerNsPerNode(f64),
    /// Flits per node per cycle of the reference clock (the fastest router nodes attach to).
    FlitsPerNodePerCycle(f64),
}

/// How each node's packets are spread in time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub enum InjectionProcess {
    /// A packet with the same probability every cycle (BookSim2 `injection_process = bernoulli`).
    #[default]
    Bernoulli,
    /// Bursts: each node is off or on; it turns on with probability `alpha` and off with
    /// probability `beta` per cycle of its router, and sends only while on, at the rate that
    /// keeps its average at the configured injection (BookSim2 `injection_process = on_off`,
    /// `burst_alpha`, `burst_beta`). Nodes start in the long-run share of the on state.
    OnOff {
        /// Probability per cycle of turning on.
        alpha: f64,
        /// Probability per cycle of turning off.
        beta: f64,
    },
}

impl InjectionProcess {
    /// Long-run share of cycles a node is on (1 for Bernoulli).
    pub fn on_share(&self) -> f64 {
        match *self {
            InjectionProcess::Bernoulli => 1.0,
            InjectionProcess::OnOff { alpha, beta } => alpha / (alpha + beta),
        }
    }
}

/// Everything a run needs besides the topology.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Virtual channels per port (Abeyratne 2017 §3.4.1: 4).
    pub vcs: usize,
    /// Buffer depth per VC in flits (Abeyratne 2017 §3.4.1: 5).
    pub vc_depth_flits: usize,
    /// Flits per packet (Abeyratne 2017 §3.4.3: 4 flits of 128 bits).
    pub packet_flits: usize,
    /// Offered load.
    pub injection: Injection,
    /// Traffic pattern.
    pub traffic: TrafficPattern,
    /// Warm-up length in reference-clock cycles.
    pub warmup_cycles: u64,
    /// Measurement window in reference-clock cycles.
    pub measure_cycles: u64,
    /// Longest drain after the window before a run is declared unstable.
    pub drain_cycles_max: u64,
    /// Cycles without any flit moving, while flits are in the network, that count as deadlock.
    pub deadlock_cycles: u64,
    /// Keep generating packets while draining (steady load); `false` empties the network.
    pub generate_during_drain: bool,
    /// Random seed; the same seed gives the same result.
    pub seed: u64,
    /// VC allocator (BookSim2 `vc_allocator`); default separable input-first.
    pub vc_allocator: AllocatorKind,
    /// Switch allocator (BookSim2 `sw_allocator`); default separable input-first
    /// ([`AllocatorKind::IndexPreferred`] is a VC allocator only).
    pub sw_allocator: AllocatorKind,
    /// Iterations of an iSLIP allocator (BookSim2 `alloc_iters`).
    pub alloc_iters: usize,
    /// Cycles of the source router's clock from a packet's generation to its head flit
    /// entering the injection link (default 1, the usual terminal model; 0 is nam-netsim's
    /// earlier, one cycle shorter terminal interface).
    pub terminal_delay_cycles: u64,
    /// A stable run's average latency must stay within this multiple of the zero-load latency.
    pub latency_bound_factor: f64,
    /// Zero-load latency (ns) the latency bound is relative to; `None`: the run computes it
    /// from the analytic model (a sweep passes the figure it already has).
    pub zero_load_latency_ns: Option<f64>,
    /// Injection process (BookSim2 `injection_process`).
    pub injection_process: InjectionProcess,
    /// Speculative switch allocation (BookSim2 `speculative`): a head that wins its output VC
    /// requests the switch in the same cycle, at lower priority than flits that already hold
    /// an output VC; `false` gives VC allocation a pipeline stage of its own (the head asks for
    /// the switch one cycle later).
    pub speculative: bool,
    /// Cycles between a head's route computation and its VC allocation (BookSim2
    /// `routing_delay`; 0: both in the router's first stage).
    pub routing_delay_cycles: u64,
    /// Extra cycles between switch allocation and the link (BookSim2 `sw_alloc_delay` +
    /// `st_final_delay` beyond the 2-stage pipeline's one each).
    pub switch_delay_cycles: u64,
    /// Extra cycles a credit takes back upstream beyond the link's pipeline (BookSim2
    /// `credit_delay`).
    pub credit_delay_cycles: u64,
    /// Packet sizes in flits with their relative weights (BookSim2 `packet_size` and
    /// `packet_size_rate`); empty: every packet has `packet_flits` flits.
    pub packet_size_mix: Vec<(usize, f64)>,
    /// Request/reply traffic: every delivered request makes its destination queue a reply of
    /// this many flits back to the source (BookSim2 `use_read_write` with one reply size);
    /// `None`: no replies. Replies are measured like requests; the offered load counts
    /// requests only.
    pub reply_flits: Option<usize>,
    /// Adaptive measurement window: up to this many more windows of `measure_cycles` are
    /// added until the statistics converge (0: a fixed window).
    pub max_window_extensions: u32,
    /// Relative standard error of the average latency (from batch means) at which an
    /// adaptive window stops growing.
    pub converge_tolerance: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            vcs: VCS_DEFAULT,
            vc_depth_flits: VC_DEPTH_DEFAULT,
            packet_flits: PACKET_FLITS_DEFAULT,
            injection: Injection::PacketsPerNsPerNode(0.01),
            traffic: TrafficPattern::Uniform,
            warmup_cycles: WARMUP_CYCLES_DEFAULT,
            measure_cycles: MEASURE_CYCLES_DEFAULT,
            drain_cycles_max: DRAIN_CYCLES_MAX_DEFAULT,
            deadlock_cycles: DEADLOCK_CYCLES_DEFAULT,
            generate_during_drain: true,
            seed: 1,
            vc_allocator: AllocatorKind::SeparableInputFirst,
            sw_allocator: AllocatorKind::SeparableInputFirst,
            alloc_iters: ALLOC_ITERS_DEFAULT,
            terminal_delay_cycles: TERMINAL_DELAY_CYCLES_DEFAULT,
            latency_bound_factor: LATENCY_BOUND_FACTOR_DEFAULT,
            zero_load_latency_ns: None,
            injection_process: InjectionProcess::Bernoulli,
            packet_size_mix: Vec::new(),
            speculative: true,
            routing_delay_cycles: 0,
            switch_delay_cycles: 0,
            credit_delay_cycles: 0,
            reply_flits: None,
            max_window_extensions: 0,
            converge_tolerance: CONVERGE_TOLERANCE_DEFAULT,
        }
    }
}

impl SimConfig {
    /// Packet sizes (flits) with their probabilities, summing to 1.
    pub fn packet_sizes(&self) -> Vec<(usize, f64)> {
        if self.packet_size_mix.is_empty() {
            return vec![(self.packet_flits, 1.0)];
        }
        let total: f64 = self.packet_size_mix.iter().map(|x| x.1).sum();
        self.packet_size_mix.iter().map(|&(s, w)| (s, w / total)).collect()
    }

    /// Average packet size in flits.
    pub fn mean_packet_flits(&self) -> f64 {
        self.packet_sizes().iter().map(|&(s, p)| s as f64 * p).sum()
    }

    /// Checks every field; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if self.vcs == 0 || self.vcs > VCS_MAX {
            return Err(invalid("vcs", format!("{} is outside 1..={VCS_MAX}", self.vcs)));
        }
        if self.vc_depth_flits == 0 || self.vc_depth_flits > VC_DEPTH_MAX {
            return Err(invalid("vc_depth_flits", format!("{} is outside 1..={VC_DEPTH_MAX}", self.vc_depth_flits)));
        }
        if self.packet_flits == 0 || self.packet_flits > PACKET_FLITS_MAX {
            return Err(invalid("packet_flits", format!("{} is outside 1..={PACKET_FLITS_MAX}", self.packet_flits)));
        }
        for &(size, w) in &self.packet_size_mix {
            if size == 0 || size > PACKET_FLITS_MAX {
                return Err(invalid("packet_size_mix", format!("size {size} is outside 1..={PACKET_FLITS_MAX}")));
            }
            if !(w > 0.0 && w.is_finite()) {
                return Err(invalid("packet_size_mix", format!("weight {w} of size {size} is not > 0")));
            }
        }
        if let Some(f) = self.reply_flits {
            if f == 0 || f > PACKET_FLITS_MAX {
                return Err(invalid("reply_flits", format!("{f} is outside 1..={PACKET_FLITS_MAX}")));
            }
        }
        if !(self.converge_tolerance > 0.0 && self.converge_tolerance < 1.0) {
            return Err(invalid("converge_tolerance", format!("{} is outside (0, 1)", self.converge_tolerance)));
        }
        let longest = self.measure_cycles.saturating_mul(1 + self.max_window_extensions as u64);
        if self.warmup_cycles.saturating_add(longest).saturating_add(self.drain_cycles_max) > RUN_CYCLES_MAX {
            return Err(invalid(
                "max_window_extensions",
                format!("the extended run would pass {RUN_CYCLES_MAX} cycles"),
            ));
        }
        if let InjectionProcess::OnOff { alpha, beta } = self.injection_process {
            if !(alpha > 0.0 && alpha <= 1.0 && (0.0..=1.0).contains(&beta)) {
                return Err(invalid(
                    "injection_process",
                    format!("alpha {alpha} must be in (0, 1], beta {beta} in [0, 1]"),
                ));
            }
        }
        let total = self.warmup_cycles + self.measure_cycles + self.drain_cycles_max;
        if self.measure_cycles == 0 || total > RUN_CYCLES_MAX {
            return Err(invalid(
                "measure_cycles",
                format!("window must be > 0 and the run at most {RUN_CYCLES_MAX} cycles"),
            ));
        }
        if self.deadlock_cycles == 0 {
            return Err(invalid("deadlock_cycles", "must be > 0"));
        }
        if self.sw_allocator == AllocatorKind::IndexPreferred {
            return Err(invalid("sw_allocator", "index_preferred is a VC allocator only"));
        }
        if self.alloc_iters == 0 || self.alloc_iters > ALLOC_ITERS_MAX {
            return Err(invalid("alloc_iters", format!("{} is outside 1..={ALLOC_ITERS_MAX}", self.alloc_iters)));
        }
        for (field, x) in [
            ("terminal_delay_cycles", self.terminal_delay_cycles),
            ("routing_delay_cycles", self.routing_delay_cycles),
            ("switch_delay_cycles", self.switch_delay_cycles),
            ("credit_delay_cycles", self.credit_delay_cycles),
        ] {
            if x > PIPELINE_DELAY_MAX {
                return Err(invalid(field, format!("{x} is above {PIPELINE_DELAY_MAX} cycles")));
            }
        }
        if !(self.latency_bound_factor > 1.0 && self.latency_bound_factor.is_finite()) {
            return Err(invalid("latency_bound_factor", format!("{} is not a factor > 1", self.latency_bound_factor)));
        }
        if let Some(z) = self.zero_load_latency_ns {
            if !(z > 0.0 && z.is_finite()) {
                return Err(invalid("zero_load_latency_ns", format!("{z} is not a latency > 0")));
            }
        }
        match self.injection {
            Injection::FlitsPerNodePerCycle(x) if !(0.0..=1.0).contains(&x) => {
                Err(invalid("injection_rate", format!("{x} flits/node/cycle is outside 0-1")))
            }
            Injection::PacketsPerNsPerNode(x) if !(x >= 0.0 && x.is_finite()) => {
                Err(invalid("injection_rate", format!("{x} packets/ns/node is not a rate >= 0")))
            }
            _ => Ok(()),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// All measured packets were delivered, the accepted rate matched the offered load, the
    /// latency stayed within its bound relative to zero load and did not drift upward.
    Stable,
    /// The network did not reach steady state (saturated): no latency number is reported.
    Unstable,
    /// No flit moved for `deadlock_cycles` while flits were in the network.
    Deadlock,
}

/// Energy from activity counts during the measurement window (estimate; see `physical`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Energy {
    /// Switch energy, pJ.
    pub router_pj: f64,
    /// Wire energy, pJ.
    pub link_pj: f64,
    /// Average network power over the window, W.
    pub power_w: f64,
    /// Energy per delivered payload bit, pJ (0 when nothing was delivered).
    pub pj_per_bit: f64,
}

/// The outcome of one run at one injection rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// Topology name.
    pub topology: String,
    /// Traffic pattern name.
    pub traffic: String,
    /// Offered load, packets/ns/node.
    pub offered_packets_per_ns_per_node: f64,
    /// Accepted throughput during the window, packets/ns/node.
    pub accepted_packets_per_ns_per_node: f64,
    /// Stable, unstable or deadlock.
    pub status: RunStatus,
    /// Average packet latency (generation to tail delivery), ns; `None` unless stable.
    pub avg_latency_ns: Option<f64>,
    /// 99th percentile latency, ns; `None` unless stable.
    pub p99_latency_ns: Option<f64>,
    /// Average latency in reference-clock cycles; `None` unless stable.
    pub avg_latency_cycles: Option<f64>,
    /// 99th percentile latency in reference-clock cycles; `None` unless stable.
    pub p99_latency_cycles: Option<f64>,
    /// Average network latency (head entering the injection link to tail delivery, without
    /// the source queue: BookSim2's "network latency"), ns; `None` unless stable.
    pub avg_network_latency_ns: Option<f64>,
    /// Smallest latency, ns; `None` unless stable.
    pub min_latency_ns: Option<f64>,
    /// Median latency, ns; `None` unless stable.
    pub p50_latency_ns: Option<f64>,
    /// 95th percentile latency, ns; `None` unless stable.
    pub p95_latency_ns: Option<f64>,
    /// Largest latency, ns; `None` unless stable.
    pub max_latency_ns: Option<f64>,
    /// Reference clock (GHz) used for the cycle figures.
    pub reference_freq_ghz: f64,
    /// Average routers traversed by measured packets.
    pub avg_routers_traversed: f64,
    /// Packets generated inside the window.
    pub packets_measured: u64,
    /// Of those, delivered before the run ended.
    pub packets_measured_delivered: u64,
    /// Flits that entered the network.
    pub flits_injected: u64,
    /// Flits delivered to nodes.
    pub flits_ejected: u64,
    /// Packets whose tail arrived with a flit count other than `packet_flits` (must be 0).
    pub packets_malformed: u64,
    /// Largest occupancy seen in any VC buffer (never above `vc_depth_flits`).
    pub max_vc_occupancy_flits: usize,
    /// Energy estimate.
    pub energy: Energy,
    /// Simulated time, reference-clock cycles.
    pub simulated_cycles: u64,
    /// Router clock ticks simulated (all routers).
    pub router_ticks: u64,
    /// Per node: packets it generated in the window, per ns (its injection rate).
    pub per_node_injected_packets_per_ns: Vec<f64>,
    /// Per node: packets delivered to it in the window, per ns (its acceptance rate).
    pub per_node_accepted_packets_per_ns: Vec<f64>,
    /// Windows the adaptive measurement window added.
    pub window_extensions: u32,
}
