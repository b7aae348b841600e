//! Behaviour of the cycle-level model: conservation, flow control, deadlock freedom,
//! determinism, analytic zero-load agreement.

use nam_netsim::analytic::analyze;
use nam_netsim::traffic::TraceEvent;
use nam_netsim::*;

mod common;

/// Small versions of every named topology (8x8 tiles, ExaNeSt 3x2x2).
fn small_topologies() -> Vec<Topology> {
    TOPOLOGY_NAMES.iter().map(|name| common::small(name)).collect()
}

fn cfg_for(t: &Topology, injection: Injection) -> SimConfig {
    SimConfig {
        injection,
        vc_depth_flits: t.default_vc_depth_flits(),
        warmup_cycles: 300,
        measure_cycles: 800,
        drain_cycles_max: 40_000,
        ..SimConfig::default()
    }
}

fn bound(t: &Topology) -> f64 {
    analyze(t, &TrafficPattern::Uniform, 4, 4).unwrap().channel_load_bound_packets_per_ns_per_node
}

#[test]
fn every_flit_is_delivered_exactly_once_and_buffers_never_overflow() {
    for t in small_topologies() {
        let b = bound(&t);
        let mut cfg = cfg_for(&t, Injection::PacketsPerNsPerNode(0.6 * b));
        cfg.generate_during_drain = false;
        let r = run(&t, &cfg).unwrap();
        assert_ne!(r.status, RunStatus::Deadlock, "{}", t.name);
        assert!(r.flits_injected > 0, "{}", t.name);
        assert_eq!(r.flits_injected, r.flits_ejected, "{}: flits lost or duplicated", t.name);
        assert_eq!(r.packets_malformed, 0, "{}", t.name);
        assert_eq!(r.packets_measured, r.packets_measured_delivered, "{}", t.name);
        assert!(r.max_vc_occupancy_flits <= cfg.vc_depth_flits, "{}", t.name);
    }
}

#[test]
fn no_deadlock_under_saturation_for_each_topology_and_routing() {
    for t in small_topologies() {
        let b = bound(&t);
        for traffic in [TrafficPattern::Uniform, TrafficPattern::BitComplement] {
            let rate = (1.5 * b).min(0.99 * t.injection_limit_packets_per_ns(4));
            let mut cfg = cfg_for(&t, Injection::PacketsPerNsPerNode(rate));
            cfg.traffic = traffic.clone();
            cfg.generate_during_drain = false;
            let r = run(&t, &cfg).unwrap();
            assert_ne!(r.status, RunStatus::Deadlock, "{} {:?}", t.name, traffic);
            assert_eq!(r.flits_injected, r.flits_ejected, "{}: network did not drain", t.name);
            assert!(r.max_vc_occupancy_flits <= cfg.vc_depth_flits);
        }
    }
}

#[test]
fn torus_dateline_survives_heavy_load_with_minimal_vcs() {
    let t = build("torus", &TopologyParams { tiles: 6, ..TopologyParams::default() }).unwrap();
    let mut cfg = cfg_for(&t, Injection::FlitsPerNodePerCycle(0.9));
    cfg.vcs = 2;
    cfg.vc_depth_flits = 2;
    cfg.generate_during_drain = false;
    let r = run(&t, &cfg).unwrap();
    assert_ne!(r.status, RunStatus::Deadlock);
    assert_eq!(r.flits_injected, r.flits_ejected);
}

#[test]
fn deadlock_is_detected_on_a_ring_without_dateline() {
    let text = "router a\nrouter b\nrouter c\nrouter d\n\
                link a b length_mm=1 oneway\nlink b c length_mm=1 oneway\n\
                link c d length_mm=1 oneway\nlink d a length_mm=1 oneway\n\
                node a count=4\nnode b count=4\nnode c count=4\nnode d count=4\n";
    let t = topofile::parse(text).unwrap();
    let mut cfg = cfg_for(&t, Injection::FlitsPerNodePerCycle(1.0));
    cfg.vcs = 1;
    cfg.vc_depth_flits = 1;
    cfg.traffic = TrafficPattern::BitComplement;
    cfg.deadlock_cycles = 500;
    let r = run(&t, &cfg).unwrap();
    assert_eq!(r.status, RunStatus::Deadlock);
    assert!(r.avg_latency_ns.is_none());
}

#[test]
fn same_seed_same_result_other_seed_other_result() {
    let t = build("superstarx", &TopologyParams { tiles: 8, global_routers: Some(2), ..Default::default() }).unwrap();
    let cfg = cfg_for(&t, Injection::PacketsPerNsPerNode(0.5 * bound(&t)));
    let a = run(&t, &cfg).unwrap();
    let b = run(&t, &cfg).unwrap();
    assert_eq!(a, b);
    let c = run(&t, &SimConfig { seed: 99, ..cfg }).unwrap();
    assert_ne!(a.avg_latency_ns, c.avg_latency_ns);
}

#[test]
fn simulated_zero_load_latency_matches_the_analytic_model_within_5_percent() {
    for t in small_topologies() {
        let a = analyze(&t, &TrafficPattern::Uniform, 4, 4).unwrap();
        let mut cfg = cfg_for(&t, Injection::PacketsPerNsPerNode(0.02 * a.channel_load_bound_packets_per_ns_per_node));
        cfg.measure_cycles = 4000;
        let r = run(&t, &cfg).unwrap();
        let sim = r.avg_latency_ns.unwrap_or_else(|| panic!("{}: {:?}", t.name, r.status));
        let err = (sim - a.zero_load_latency_ns).abs() / a.zero_load_latency_ns;
        assert!(err < 0.05, "{}: sim {sim:.3} ns vs analytic {:.3} ns", t.name, a.zero_load_latency_ns);
    }
}

#[test]
fn single_packet_latency_is_exact() {
    // 4x4 mesh at 1 GHz, node 0 -> node 15: injection link 1 cycle, 7 routers x 2 stages,
    // 6 router links + ejection link of 1 cycle each, 3 more flits behind the head: 25 cycles
    // with the earlier terminal interface (no terminal delay).
    let p = TopologyParams { tiles: 4, freq_ghz: Some(1.0), ..Default::default() };
    let t = build("mesh", &p).unwrap();
    let trace = vec![TraceEvent { time_ns: 0.0, src: 0, dst: 15 }];
    let cfg = SimConfig { traffic: TrafficPattern::Trace(trace), terminal_delay_cycles: 0, ..SimConfig::default() };
    let r = run(&t, &cfg).unwrap();
    assert_eq!(r.avg_latency_ns, Some(25.0));
    assert_eq!(r.avg_latency_cycles, Some(25.0));
    assert_eq!(r.avg_routers_traversed, 7.0);
    // The default terminal interface takes one cycle more from generation to the injection
    // link (the usual model): 26 cycles.
    let r = run(&t, &SimConfig { terminal_delay_cycles: 1, ..cfg }).unwrap();
    assert_eq!(r.avg_latency_cycles, Some(26.0));
    assert_eq!(SimConfig::default().terminal_delay_cycles, 1);
}

#[test]
fn saturation_exists_and_stays_below_the_channel_load_bound() {
    let t = build("mesh", &TopologyParams { tiles: 8, ..Default::default() }).unwrap();
    let b = bound(&t);
    let low = run(&t, &cfg_for(&t, Injection::PacketsPerNsPerNode(0.3 * b))).unwrap();
    let high = run(&t, &cfg_for(&t, Injection::PacketsPerNsPerNode(1.3 * b))).unwrap();
    assert_eq!(low.status, RunStatus::Stable);
    assert_eq!(high.status, RunStatus::Unstable);
    assert!(high.avg_latency_ns.is_none());
    assert!(high.accepted_packets_per_ns_per_node < b);
    assert!(high.accepted_packets_per_ns_per_node > low.accepted_packets_per_ns_per_node);
}

#[test]
fn trace_replay_delivers_every_packet() {
    let t = build("superring", &TopologyParams { tiles: 8, ..Default::default() }).unwrap();
    let text = "# time src dst\n0 0 63\n0.5 63 0\n1 10 20\n2 5 6\n";
    let trace = traffic::parse_trace(text).unwrap();
    let cfg = SimConfig { traffic: TrafficPattern::Trace(trace), ..SimConfig::default() };
    let r = run(&t, &cfg).unwrap();
    assert_eq!(r.packets_measured, 4);
    assert_eq!(r.packets_measured_delivered, 4);
    assert_eq!(r.status, RunStatus::Stable);
}

#[test]
fn energy_and_power_are_counted() {
    let t = build("superstar", &TopologyParams { tiles: 8, global_routers: Some(2), ..Default::default() }).unwrap();
    let r = run(&t, &cfg_for(&t, Injection::PacketsPerNsPerNode(0.3 * bound(&t)))).unwrap();
    assert!(r.energy.router_pj > 0.0 && r.energy.link_pj > 0.0);
    assert!(r.energy.power_w > 0.0 && r.energy.pj_per_bit > 0.0);
}

#[test]
fn custom_topology_file_runs() {
    let text = "name square\nrouter a freq_ghz=2 x_mm=0\nrouter b x_mm=2\nrouter c x_mm=2 y_mm=2\nrouter d y_mm=2\n\
                link a b length_mm=2\nlink b c length_mm=2\nlink c d length_mm=2\nlink d a length_mm=2 delay_ns=0.3\n\
                node a count=2\nnode b count=2\nnode c count=2\nnode d count=2\n";
    let t = topofile::parse(text).unwrap();
    assert_eq!(t.name, "square");
    assert_eq!(t.node_count(), 8);
    assert_eq!(t.routers[0].freq_ghz, 2.0);
    let r = run(&t, &cfg_for(&t, Injection::FlitsPerNodePerCycle(0.1))).unwrap();
    assert_eq!(r.status, RunStatus::Stable);
    assert_eq!(r.packets_malformed, 0);
}
