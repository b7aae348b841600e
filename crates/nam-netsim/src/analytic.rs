//! Analytic models beside the simulator: zero-load latency of a topology under a traffic
//! pattern (the same pipeline the simulator models, without contention) and the channel-load
//! bound on saturation throughput.

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

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Wire index as used in the load vector: channels first, then per node injection, ejection.
struct PathStep {
    wire: usize,
}

/// Walks the zero-load path from `src` to `dst`, returning latency (ps), routers and wires.
fn walk(
    topo: &Topology,
    router: &Router,
    periods: &[u64],
    flits: usize,
    src: usize,
    dst: usize,
    pick: usize,
) -> (f64, usize, Vec<PathStep>) {
    let nch = topo.channels.len();
    let mut r = topo.nodes[src].router;
    let mut p = periods[r];
    let inj_delay = physical::wire_delay_ps(topo.nodes[src].link_length_mm);
    let mut arrival = (p * cycles(inj_delay, p)) as f64;
    let mut prev = p;
    let mut p_max = p;
    let mut st = RouteState::new();
    let mut steps = vec![PathStep {
        wire: nch + 2 * src,
    }];
    let mut routers = 0;
    loop {
        p = periods[r];
        p_max = p_max.max(p);
        if p != prev {
            arrival += (p - gcd(p, prev)) as f64 / 2.0;
        }
        routers += 1;
        let hop = router.route(topo, r, dst, &mut st, pick, &|_| 0);
        match topo.port_channel(r, hop.port) {
            None => {
                let d = physical::wire_delay_ps(topo.nodes[dst].link_length_mm);
                arrival += (p * (2 + cycles(d, p))) as f64;
                steps.push(PathStep {
                    wire: nch + 2 * dst + 1,
                });
                break;
            }
            Some(c) => {
                arrival += (p * (2 + cycles(topo.channel_delay_ps(c), p))) as f64;
                steps.push(PathStep { wire: c });
                prev = p;
                r = topo.channels[c].to;
            }
        }
        assert!(
            routers <= 4 * topo.router_count() + 4,
            "routing loops between {src} and {dst}"
        );
    }
    arrival += ((flits - 1) as u64 * p_max) as f64;
    (arrival, routers, steps)
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

/// Computes the zero-load latency and channel-load bound of `topo` under `traffic`.
pub fn analyze(
    topo: &Topology,
    traffic: &TrafficPattern,
    vcs: usize,
    packet_flits: usize,
) -> Result<AnalyticModel> {
    let router = Router::new(topo, vcs)?;
    let periods: Vec<u64> = topo.routers.iter().map(|r| period_ps(r.freq_ghz)).collect();
    let nch = topo.channels.len();
    let mut load = vec![0.0f64; nch + 2 * topo.node_count()];
    let (mut lat_sum, mut routers_sum, mut weight_sum) = (0.0, 0.0, 0.0);
    let npick = picks(topo);
    for src in 0..topo.node_count() {
        for (dst, w) in traffic.distribution(topo, src) {
            for pick in 0..npick {
                let wp = w / npick as f64;
                let (lat, routers, steps) =
                    walk(topo, &router, &periods, packet_flits, src, dst, pick);
                lat_sum += wp * lat;
                routers_sum += wp * routers as f64;
                weight_sum += wp;
                for s in steps {
                    load[s.wire] += wp * packet_flits as f64;
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
            let name = format!(
                "{} -> {}",
                topo.routers[ch.from].label, topo.routers[ch.to].label
            );
            (periods[ch.from], name)
        } else {
            let n = (wi - nch) / 2;
            let r = topo.nodes[n].router;
            let dir = if (wi - nch) % 2 == 0 {
                "injection"
            } else {
                "ejection"
            };
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
