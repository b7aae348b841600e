//! Analytic models beside the simulator: zero-load latency of a topology under a traffic
//! pattern and the channel-load bound on saturation throughput.
//!
//! The zero-load latency follows each flit of a packet through the same pipeline the simulator
//! models (injection link, two router stages, pipelined links, clock-domain crossings at the
//! next tick of the receiving router, one flit per cycle) without any other traffic. Paths
//! inside one clock domain are exact; paths that cross domains are averaged over 16 start phases.
//! It is summed over every source and destination weighted by the traffic pattern (and over the
//! global routers Super-Star's round-robin rotates through).

use crate::config::SimConfig;
use crate::constants::{CLOCK_PHASES, TERMINAL_DELAY_CYCLES_DEFAULT};
use crate::error::Result;
use crate::physical;
use crate::routing::{RouteState, Router};
use crate::topology::{RoutingKind, Topology};
use crate::traffic::TrafficPattern;
use serde::Serialize;

/// Analytic figures for one topology and traffic pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalyticModel {
    /// Topology name.
    pub topology: String,
    /// Average zero-load packet latency, ns.
    pub zero_load_latency_ns: f64,
    /// The same in reference-clock cycles.
    pub zero_load_latency_cycles: f64,
    /// Average routers traversed.
    pub avg_routers: f64,
    /// Injection rate (packets/ns/node) at which the most loaded channel reaches one flit per
    /// cycle: no routing can sustain more.
    pub channel_load_bound_packets_per_ns_per_node: f64,
    /// The bottleneck channel.
    pub bottleneck: String,
}

fn period_ps(f: f64) -> u64 {
    ((1000.0 / f).round() as u64).max(1)
}

fn cycles(delay_ps: f64, period: u64) -> u64 {
    ((delay_ps / period as f64).ceil() as u64).max(1)
}

/// One router on a zero-load path: its period and the delay from its switch-allocation tick to
/// the write into the next buffer (two pipeline stages plus the link's pipeline depth).
struct Stage {
    period: u64,
    offset: u64,
    /// Extra wait of the head flit before its switch allocation (routing delay, and a VC
    /// allocation stage of its own when not speculative).
    head_delay: u64,
}

/// The routers and wires from `src` to `dst`: (injection offset, stages, wires used).
fn path(
    topo: &Topology,
    router: &Router,
    periods: &[u64],
    src: usize,
    dst: usize,
    pick: usize,
    pipe: &Pipeline,
) -> (u64, Vec<Stage>, Vec<usize>) {
    let terminal = pipe.terminal;
    let head_cycles = pipe.routing + u64::from(!pipe.speculative);
    let st = 2 + pipe.switch;
    let nch = topo.channels.len();
    let mut r = topo.nodes[src].router;
    let inj_delay = physical::wire_delay_ps(topo.nodes[src].link_length_mm);
    let inj = periods[r] * (terminal + cycles(inj_delay, periods[r]));
    let mut rst = RouteState::new();
    let mut wires = vec![nch + 2 * src];
    let mut stages = Vec::new();
    loop {
        let p = periods[r];
        let hop = router.route(topo, r, dst, &mut rst, pick, &|_| 0);
        match topo.port_channel(r, hop.port) {
            None => {
                let d = physical::wire_delay_ps(topo.nodes[dst].link_length_mm);
                stages.push(Stage { period: p, offset: p * (st + cycles(d, p)), head_delay: p * head_cycles });
                wires.push(nch + 2 * dst + 1);
                break;
            }
            Some(c) => {
                stages.push(Stage {
                    period: p,
                    offset: p * (st + cycles(topo.channel_delay_ps(c), p)),
                    head_delay: p * head_cycles,
                });
                wires.push(c);
                r = topo.channels[c].to;
            }
        }
        assert!(stages.len() <= 4 * topo.router_count() + 4, "routing loops between {src} and {dst}");
    }
    (inj, stages, wires)
}

/// Contention-free latency (ps) of a packet of `flits` flits generated at `t0` (a tick of the
/// source router): each router handles a flit at its first own tick at or after the flit's
/// arrival, one flit per cycle.
fn time_packet(t0: u64, src_period: u64, inj: u64, stages: &[Stage], flits: usize) -> u64 {
    let mut arrivals: Vec<u64> = (0..flits as u64).map(|j| t0 + j * src_period + inj).collect();
    for s in stages {
        let mut prev: Option<u64> = None;
        for a in arrivals.iter_mut() {
            let mut tick = a.div_ceil(s.period) * s.period;
            match prev {
                Some(p) => tick = tick.max(p + s.period),
                None => tick += s.head_delay,
            }
            prev = Some(tick);
            *a = tick + s.offset;
        }
    }
    arrivals[flits - 1] - t0
}

/// The router and interface parameters the zero-load model follows.
struct Pipeline {
    /// Packet sizes (flits) with their probabilities.
    sizes: Vec<(usize, f64)>,
    terminal: u64,
    routing: u64,
    speculative: bool,
    switch: u64,
}

/// Average contention-free latency (ps) over start phases, and routers traversed.
fn walk(
    topo: &Topology,
    router: &Router,
    periods: &[u64],
    pipe: &Pipeline,
    src: usize,
    dst: usize,
    pick: usize,
) -> (f64, usize, Vec<usize>) {
    let (inj, stages, wires) = path(topo, router, periods, src, dst, pick, pipe);
    let p0 = periods[topo.nodes[src].router];
    let single_clock = stages.iter().all(|s| s.period == p0);
    let phases = if single_clock { 1 } else { CLOCK_PHASES };
    let mut lat = 0.0;
    for &(flits, p) in &pipe.sizes {
        let total: u64 = (0..phases).map(|k| time_packet(k * 7 * p0, p0, inj, &stages, flits)).sum();
        lat += p * total as f64 / phases as f64;
    }
    (lat, stages.len(), wires)
}

/// Number of distinct round-robin choices the routing rotates through.
fn picks(topo: &Topology) -> usize {
    let parallel = (0..topo.router_count())
        .flat_map(|r| topo.out_channels(r).iter().map(move |&c| (r, c)))
        .map(|(r, c)| topo.ports_toward(r, topo.channels[c].to).len())
        .max()
        .unwrap_or(1);
    match &topo.routing {
        RoutingKind::SuperStar { globals, .. } => globals.len().max(parallel),
        _ => parallel.max(1),
    }
}

/// Computes the zero-load latency and channel-load bound of `topo` under `traffic`, with the
/// default router pipeline and terminal interface.
pub fn analyze(topo: &Topology, traffic: &TrafficPattern, vcs: usize, packet_flits: usize) -> Result<AnalyticModel> {
    let pipe = Pipeline {
        sizes: vec![(packet_flits, 1.0)],
        terminal: TERMINAL_DELAY_CYCLES_DEFAULT,
        routing: 0,
        speculative: true,
        switch: 0,
    };
    analyze_pipeline(topo, traffic, vcs, &pipe)
}

/// [`analyze`] for the traffic, VCs, packet size and pipeline of `cfg`.
pub fn analyze_config(topo: &Topology, cfg: &SimConfig) -> Result<AnalyticModel> {
    let pipe = Pipeline {
        sizes: cfg.packet_sizes(),
        terminal: cfg.terminal_delay_cycles,
        routing: cfg.routing_delay_cycles,
        speculative: cfg.speculative,
        switch: cfg.switch_delay_cycles,
    };
    analyze_pipeline(topo, &cfg.traffic, cfg.vcs, &pipe)
}

fn analyze_pipeline(topo: &Topology, traffic: &TrafficPattern, vcs: usize, pipe: &Pipeline) -> Result<AnalyticModel> {
    let packet_flits: f64 = pipe.sizes.iter().map(|&(f, p)| f as f64 * p).sum();
    let router = Router::new(topo, vcs)?;
    let periods: Vec<u64> = topo.routers.iter().map(|r| period_ps(r.freq_ghz)).collect();
    let nch = topo.channels.len();
    let mut load = vec![0.0f64; nch + 2 * topo.node_count()];
    let (mut lat_sum, mut routers_sum, mut weight_sum) = (0.0, 0.0, 0.0);
    let npick = picks(topo);
    for src in 0..topo.node_count() {
        for (dst, w) in traffic.distribution(topo, src) {
            // Per-packet choices (intermediate routers, tie-breaks) times the rotations.
            let choices = router.choices(topo, topo.nodes[src].router, topo.nodes[dst].router);
            let npick = npick * choices;
            for pick in 0..npick {
                let wp = w / npick as f64;
                let (lat, routers, wires) = walk(topo, &router, &periods, pipe, src, dst, pick);
                lat_sum += wp * lat;
                routers_sum += wp * routers as f64;
                weight_sum += wp;
                for w in wires {
                    load[w] += wp * packet_flits;
                }
            }
        }
    }
    let weight_sum = weight_sum.max(1e-12);
    let mut bound = f64::INFINITY;
    let mut bottleneck = String::from("none");
    for (wi, &l) in load.iter().enumerate() {
        if l <= 0.0 {
            continue;
        }
        let (up_period, name) = if wi < nch {
            let ch = &topo.channels[wi];
            let name = format!("{} -> {}", topo.routers[ch.from].label, topo.routers[ch.to].label);
            (periods[ch.from], name)
        } else {
            let n = (wi - nch) / 2;
            let r = topo.nodes[n].router;
            let dir = if (wi - nch).is_multiple_of(2) { "injection" } else { "ejection" };
            (periods[r], format!("node {n} {dir}"))
        };
        let cap_flits_per_ns = 1000.0 / up_period as f64;
        let b = cap_flits_per_ns / l;
        if b < bound {
            bound = b;
            bottleneck = name;
        }
    }
    let zl_ns = lat_sum / weight_sum / 1000.0;
    Ok(AnalyticModel {
        topology: topo.name.clone(),
        zero_load_latency_ns: zl_ns,
        zero_load_latency_cycles: zl_ns * 1000.0 / period_ps(topo.reference_freq_ghz()) as f64,
        avg_routers: routers_sum / weight_sum,
        channel_load_bound_packets_per_ns_per_node: bound,
        bottleneck,
    })
}
