//! Sweeps over injection rates, run in parallel with rayon, plus the zero-load and saturation
//! figures derived from them.

use crate::analytic::{analyze_config, AnalyticModel};
use crate::config::{Injection, RunStatus, SimConfig, SimResult};
pub use crate::constants::{BEFORE_SATURATION_FRACTION, SWEEP_POINTS_MAX};
use crate::error::{invalid, Result};
use crate::sim;
use crate::topology::{Topology, TopologySummary};
use rayon::prelude::*;
use serde::Serialize;

/// A latency-throughput curve of one topology, with the analytic figures beside it.
#[derive(Debug, Clone, Serialize)]
pub struct SweepResult {
    /// Topology name.
    pub topology: String,
    /// Traffic pattern.
    pub traffic: String,
    /// Simulated average latency at a load of 2% of the channel-load bound, ns.
    pub zero_load_latency_ns: Option<f64>,
    /// The same, reference cycles.
    pub zero_load_latency_cycles: Option<f64>,
    /// Analytic models (zero-load latency, channel-load bound).
    pub analytic: AnalyticModel,
    /// |simulated - analytic| / analytic zero-load latency.
    pub zero_load_error: Option<f64>,
    /// Highest accepted throughput seen in the sweep, packets/ns/node.
    pub saturation_packets_per_ns_per_node: f64,
    /// Highest offered rate whose run was stable.
    pub last_stable_packets_per_ns_per_node: Option<f64>,
    /// Average latency over the stable points offered at most [`BEFORE_SATURATION_FRACTION`] of
    /// the saturation throughput ("before saturation"), ns.
    pub avg_latency_before_saturation_ns: Option<f64>,
    /// One point per offered rate, in increasing order.
    pub curve: Vec<SimResult>,
    /// Static properties.
    pub summary: TopologySummary,
}

/// The highest offered load (packets/ns/node) every node can inject: one flit per cycle of
/// its router while on, over the average packet size.
fn injection_limit(topo: &Topology, cfg: &SimConfig) -> f64 {
    topo.injection_limit_packets_per_ns(1) / cfg.mean_packet_flits() * cfg.injection_process.on_share()
}

/// Offered rates at `points` evenly spaced fractions of `bound` from `bound / points` to
/// `max_fraction * bound`.
pub fn auto_rates(bound: f64, points: usize, max_fraction: f64) -> Vec<f64> {
    let points = points.max(1);
    (1..=points).map(|i| bound * max_fraction * i as f64 / points as f64).collect()
}

/// Runs `cfg` at every rate (packets/ns/node) in parallel and a low-load run for the zero-load
/// latency; `rates` empty means `auto_points` rates up to 1.2x the channel-load bound.
pub fn sweep(topo: &Topology, cfg: &SimConfig, rates: &[f64], auto_points: usize) -> Result<SweepResult> {
    if rates.len() > SWEEP_POINTS_MAX || auto_points > SWEEP_POINTS_MAX {
        return Err(invalid("rates", format!("at most {SWEEP_POINTS_MAX} points")));
    }
    cfg.validate()?;
    let analytic = analyze_config(topo, cfg)?;
    let mut cfg = cfg.clone();
    if cfg.zero_load_latency_ns.is_none() && !matches!(cfg.traffic, crate::traffic::TrafficPattern::Trace(_)) {
        cfg.zero_load_latency_ns = Some(analytic.zero_load_latency_ns);
    }
    let cfg = &cfg;
    let bound = analytic.channel_load_bound_packets_per_ns_per_node;
    let rates: Vec<f64> = if rates.is_empty() {
        let limit = 0.99 * injection_limit(topo, cfg);
        auto_rates(bound, auto_points.max(1), 1.2).into_iter().map(|r| r.min(limit)).collect()
    } else {
        rates.to_vec()
    };
    let mut zero_cfg = cfg.clone();
    zero_cfg.injection = Injection::PacketsPerNsPerNode(bound * 0.02);
    zero_cfg.measure_cycles = cfg.measure_cycles.max(2000);
    let mut jobs: Vec<SimConfig> = vec![zero_cfg];
    for &r in &rates {
        let mut c = cfg.clone();
        c.injection = Injection::PacketsPerNsPerNode(r);
        c.validate()?;
        jobs.push(c);
    }
    let results: Vec<Result<SimResult>> = jobs.par_iter().map(|c| sim::run(topo, c)).collect();
    let mut results = results.into_iter().collect::<Result<Vec<_>>>()?;
    let zero = results.remove(0);
    let curve = results;
    let saturation = curve.iter().map(|p| p.accepted_packets_per_ns_per_node).fold(0.0, f64::max);
    let stable: Vec<&SimResult> = curve.iter().filter(|p| p.status == RunStatus::Stable).collect();
    let below: Vec<f64> = stable
        .iter()
        .filter(|p| p.offered_packets_per_ns_per_node <= BEFORE_SATURATION_FRACTION * saturation)
        .filter_map(|p| p.avg_latency_ns)
        .collect();
    let before = (!below.is_empty()).then(|| below.iter().sum::<f64>() / below.len() as f64);
    let zl = zero.avg_latency_ns;
    Ok(SweepResult {
        topology: topo.name.clone(),
        traffic: cfg.traffic.name().to_string(),
        zero_load_latency_ns: zl,
        zero_load_latency_cycles: zero.avg_latency_cycles,
        zero_load_error: zl.map(|z| (z - analytic.zero_load_latency_ns).abs() / analytic.zero_load_latency_ns),
        analytic,
        saturation_packets_per_ns_per_node: saturation,
        last_stable_packets_per_ns_per_node: stable.last().map(|p| p.offered_packets_per_ns_per_node),
        avg_latency_before_saturation_ns: before,
        curve,
        summary: topo.summary(),
    })
}

/// The saturation point of one topology, found by bisection on the offered load.
#[derive(Debug, Clone, Serialize)]
pub struct Saturation {
    /// Highest offered load found stable, packets/ns/node.
    pub offered_packets_per_ns_per_node: f64,
    /// Accepted throughput at that load, packets/ns/node.
    pub accepted_packets_per_ns_per_node: f64,
    /// The channel-load bound, packets/ns/node.
    pub channel_load_bound_packets_per_ns_per_node: f64,
    /// Offered saturation load over the channel-load bound.
    pub fraction_of_bound: f64,
    /// Runs simulated.
    pub runs: usize,
}

/// Finds the highest stable offered load by bisection between zero and the smaller of the
/// channel-load bound and the injection limit, to `precision` (a fraction of that range):
/// saturation read from the latency curve and convergence tests of each run.
pub fn find_saturation(topo: &Topology, cfg: &SimConfig, precision: f64) -> Result<Saturation> {
    if !(precision > 0.0 && precision < 1.0) {
        return Err(invalid("precision", format!("{precision} is outside (0, 1)")));
    }
    let analytic = analyze_config(topo, cfg)?;
    let bound = analytic.channel_load_bound_packets_per_ns_per_node;
    let mut cfg = cfg.clone();
    cfg.zero_load_latency_ns = cfg.zero_load_latency_ns.or(Some(analytic.zero_load_latency_ns));
    let top = bound.min(0.999 * injection_limit(topo, &cfg));
    let at = |rate: f64| -> Result<SimResult> {
        let mut c = cfg.clone();
        c.injection = Injection::PacketsPerNsPerNode(rate);
        sim::run(topo, &c)
    };
    let (mut lo, mut hi) = (0.0, top);
    let mut best: Option<SimResult> = None;
    let mut runs = 0;
    let top_run = at(top)?;
    runs += 1;
    if top_run.status == RunStatus::Stable {
        lo = top;
        best = Some(top_run);
    }
    while hi - lo > precision * top {
        let mid = 0.5 * (lo + hi);
        let r = at(mid)?;
        runs += 1;
        if r.status == RunStatus::Stable {
            lo = mid;
            best = Some(r);
        } else {
            hi = mid;
        }
    }
    Ok(Saturation {
        offered_packets_per_ns_per_node: lo,
        accepted_packets_per_ns_per_node: best.map(|r| r.accepted_packets_per_ns_per_node).unwrap_or(0.0),
        channel_load_bound_packets_per_ns_per_node: bound,
        fraction_of_bound: lo / bound,
        runs,
    })
}
