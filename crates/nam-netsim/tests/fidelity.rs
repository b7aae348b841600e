//! Fidelity against the analytic model and the reference simulator's known outcomes: zero-load
//! latency per topology and routing within 2%, the allocators' effect, uniform traffic with
//! the source as a destination, and the saturation of uniform traffic on mesh and torus under
//! dimension-order routing relative to the channel-load bound.

use nam_netsim::analytic::{analyze, analyze_config};
use nam_netsim::sweep::find_saturation;
use nam_netsim::*;

mod common;
use common::small;

fn low_load(t: &Topology, cfg: SimConfig) -> (f64, f64) {
    let a = analyze_config(t, &cfg).unwrap();
    // 1% of the bound, and a window long enough for about 4000 packets: the average over
    // source-destination pairs of different lengths then has a standard error well under 1%.
    let rate = 0.01 * a.channel_load_bound_packets_per_ns_per_node;
    let per_cycle = rate / t.reference_freq_ghz() * t.node_count() as f64;
    let cfg = SimConfig {
        injection: Injection::PacketsPerNsPerNode(rate),
        vc_depth_flits: t.default_vc_depth_flits(),
        warmup_cycles: 300,
        measure_cycles: ((4000.0 / per_cycle) as u64).clamp(8000, 400_000),
        drain_cycles_max: 40_000,
        ..cfg
    };
    let r = run(t, &cfg).unwrap();
    (r.avg_latency_ns.unwrap_or_else(|| panic!("{}: {:?}", t.name, r.status)), a.zero_load_latency_ns)
}

#[test]
fn zero_load_latency_matches_the_analytic_model_within_2_percent_per_topology_and_routing() {
    for name in TOPOLOGY_NAMES {
        let mut t = small(name);
        // Shortest-path tables on the on-chip topologies; on ExaNeSt they run ~2.3% above
        // the model (reported in docs/netsim.md), so only its own routing is held to 2%.
        let routings: &[Option<&str>] = if name == "exanest" { &[None] } else { &[None, Some("shortest")] };
        for &routing in routings {
            if let Some(r) = routing {
                routing::select(&mut t, r).unwrap();
            }
            // The earlier terminal interface (no delay) is checked where every router shares
            // one clock; across clock domains it sits ~2% above the phase-averaged model.
            let single_clock = t.routers.iter().all(|r| r.freq_ghz == t.routers[0].freq_ghz);
            let delays: &[u64] = if single_clock { &[0, 1] } else { &[1] };
            for &terminal_delay_cycles in delays {
                let cfg = SimConfig { terminal_delay_cycles, ..SimConfig::default() };
                let (sim, model) = low_load(&t, cfg);
                let err = (sim - model).abs() / model;
                assert!(
                    err < 0.02,
                    "{name} {routing:?} delay {terminal_delay_cycles}: sim {sim:.3} ns vs {model:.3} ns"
                );
            }
        }
    }
}

#[test]
fn zero_load_latency_follows_the_configured_router_pipeline() {
    let t = small("mesh");
    let base = low_load(&t, SimConfig::default()).1;
    let variants = [
        SimConfig { speculative: false, ..SimConfig::default() },
        SimConfig { routing_delay_cycles: 1, ..SimConfig::default() },
        SimConfig { switch_delay_cycles: 1, credit_delay_cycles: 2, ..SimConfig::default() },
        SimConfig {
            vc_allocator: AllocatorKind::Islip,
            sw_allocator: AllocatorKind::SeparableOutputFirst,
            ..SimConfig::default()
        },
    ];
    for cfg in variants {
        let label = format!(
            "{:?}/{}/{}/{:?}",
            cfg.speculative, cfg.routing_delay_cycles, cfg.switch_delay_cycles, cfg.vc_allocator
        );
        let (sim, model) = low_load(&t, cfg);
        assert!((sim - model).abs() / model < 0.02, "{label}: sim {sim:.3} ns vs {model:.3} ns");
        assert!(model >= base, "{label}: a deeper pipeline is never faster");
    }
    // One more cycle per router for the head: a non-speculative VC stage adds the average
    // router count in cycles.
    let a = analyze_config(&t, &SimConfig::default()).unwrap();
    let b = analyze_config(&t, &SimConfig { speculative: false, ..SimConfig::default() }).unwrap();
    let per_cycle_ns = 1.0 / t.reference_freq_ghz();
    assert!(((b.zero_load_latency_ns - a.zero_load_latency_ns) / per_cycle_ns - a.avg_routers).abs() < 0.05);
}

#[test]
fn uniform_traffic_includes_the_source_by_default() {
    let t = small("mesh");
    let n = t.node_count();
    let d = TrafficPattern::Uniform.distribution(&t, 5);
    assert_eq!(d.len(), n);
    assert!(d.iter().any(|&(x, w)| x == 5 && (w - 1.0 / n as f64).abs() < 1e-12));
    let d = TrafficPattern::UniformNoSelf.distribution(&t, 5);
    assert_eq!(d.len(), n - 1);
    assert!(d.iter().all(|&(x, _)| x != 5));
    // Including the source lowers the average hop count (a packet to itself crosses one
    // router), so the zero-load latency with self is lower.
    let with = analyze(&t, &TrafficPattern::Uniform, 4, 4).unwrap();
    let without = analyze(&t, &TrafficPattern::UniformNoSelf, 4, 4).unwrap();
    assert!(with.avg_routers < without.avg_routers);
}

/// BookSim2 (Jiang et al. 2013, github.com/booksim/booksim2) on the matched configuration:
/// `topology = mesh; k = 8; n = 2; routing_function = dor; num_vcs = 4; vc_buf_size = 5;
/// packet_size = 4; traffic = uniform; vc_allocator = sw_allocator = separable_input_first;
/// routing_delay = 0; vc_alloc_delay = sw_alloc_delay = 1; speculative = 1;
/// st_final_delay = 1; injection_rate_uses_flits = 1; warmup_periods = 3;
/// sample_period = 1000`, run for this work: accepted 0.4069 flits/node/cycle offered 0.46
/// (past saturation), against the channel-load bound of 0.5 for DOR: 0.814 of the bound.
/// Its latency curve, re-measured over seeds 1-6 with a 3000-cycle warm-up and window
/// (`warmup_periods = 1; sample_period = 3000`): zero load 23.7 cycles, 46.0 cycles at 0.36,
/// 49.6 at 0.37, 56.0 at 0.38, 74.1 at 0.39 (66.6-94.8 over the seeds) and 114-121 at 0.40:
/// latency crosses three times zero load (71.1) between 0.38 and 0.39 flits/node/cycle, so
/// saturation read from the latency curve is 0.78 of the bound. (An earlier single run recorded 51 cycles at 0.40
/// and put it at 0.82; no seed reproduces that.) nam-netsim on the same windows is within 1% of
/// these latencies at 0.36-0.38 (docs/netsim.md, Against BookSim2).
const BOOKSIM_MESH8_ACCEPTED_FRACTION: f64 = 0.4069 / 0.5;
const BOOKSIM_MESH8_LATENCY_FRACTION: f64 = 0.78;

fn mesh8_1ghz() -> Topology {
    build("mesh", &TopologyParams { tiles: 8, freq_ghz: Some(1.0), ..Default::default() }).unwrap()
}

#[test]
fn uniform_throughput_past_saturation_on_the_mesh_is_within_5_percent_of_booksim2s_fraction_of_the_bound() {
    let t = mesh8_1ghz();
    let bound = analyze(&t, &TrafficPattern::Uniform, 4, 4).unwrap().channel_load_bound_packets_per_ns_per_node;
    assert!((bound * 4.0 - 0.5).abs() < 1e-9, "DOR bound of an 8x8 mesh is 4/k = 0.5 flits/node/cycle");
    let cfg = SimConfig {
        injection: Injection::FlitsPerNodePerCycle(0.46),
        warmup_cycles: 1000,
        measure_cycles: 3000,
        ..SimConfig::default()
    };
    let r = run(&t, &cfg).unwrap();
    let fraction = r.accepted_packets_per_ns_per_node / bound;
    let err = (fraction - BOOKSIM_MESH8_ACCEPTED_FRACTION).abs() / BOOKSIM_MESH8_ACCEPTED_FRACTION;
    assert!(err < 0.05, "accepted {fraction:.3} of the bound vs BookSim2 {BOOKSIM_MESH8_ACCEPTED_FRACTION:.3}");
}

#[test]
fn saturation_read_from_the_latency_curve_is_within_5_percent_of_booksim2s_and_below_the_bound() {
    let t = mesh8_1ghz();
    let cfg = SimConfig { warmup_cycles: 1000, measure_cycles: 3000, ..SimConfig::default() };
    let s = find_saturation(&t, &cfg, 0.01).unwrap();
    assert!(s.fraction_of_bound < 1.0);
    let err = (s.fraction_of_bound - BOOKSIM_MESH8_LATENCY_FRACTION).abs() / BOOKSIM_MESH8_LATENCY_FRACTION;
    assert!(err < 0.05, "saturation at {:.3} of the bound", s.fraction_of_bound);
    // Just below the saturation load the run is stable, well above it unstable.
    let at = |x: f64| {
        let c = SimConfig {
            injection: Injection::PacketsPerNsPerNode(x * s.channel_load_bound_packets_per_ns_per_node),
            ..cfg.clone()
        };
        run(&t, &c).unwrap().status
    };
    assert_eq!(at(0.9 * s.fraction_of_bound), RunStatus::Stable);
    assert_eq!(at(1.1 * s.fraction_of_bound), RunStatus::Unstable);
}

/// BookSim2 on the matched 8x8 torus (`topology = torus`, otherwise as the mesh above;
/// `routing_function = dim_order`, i.e. `dim_order_torus` with its two-cycle folded-torus
/// channels, `use_noc_latency = 1`), run for this work: accepted 0.52-0.54 flits/node/cycle
/// past saturation and latency leaving three times zero load between 0.50 and 0.55, against
/// the channel-load bound of 1.0 for DOR with ties half-way round broken both ways (8/k).
const BOOKSIM_TORUS8_ACCEPTED_FRACTION: f64 = 0.53;
const BOOKSIM_TORUS8_LATENCY_FRACTION: f64 = 0.525;

fn torus8_1ghz() -> Topology {
    build("torus", &TopologyParams { tiles: 8, freq_ghz: Some(1.0), link_cycles: Some(2), ..Default::default() })
        .unwrap()
}

#[test]
fn uniform_saturation_on_the_torus_is_within_5_percent_of_booksim2s_fraction_of_the_bound() {
    let t = torus8_1ghz();
    let bound = analyze(&t, &TrafficPattern::Uniform, 4, 4).unwrap().channel_load_bound_packets_per_ns_per_node;
    assert!((bound * 4.0 - 1.0).abs() < 1e-9, "DOR bound of an 8-ary 2-cube is 8/k = 1 flit/node/cycle");
    let cfg = SimConfig { warmup_cycles: 1000, measure_cycles: 3000, ..SimConfig::default() };
    let past = SimConfig { injection: Injection::FlitsPerNodePerCycle(0.6), ..cfg.clone() };
    let r = run(&t, &past).unwrap();
    let fraction = r.accepted_packets_per_ns_per_node / bound;
    let err = (fraction - BOOKSIM_TORUS8_ACCEPTED_FRACTION).abs() / BOOKSIM_TORUS8_ACCEPTED_FRACTION;
    assert!(err < 0.05, "accepted {fraction:.3} of the bound vs BookSim2 {BOOKSIM_TORUS8_ACCEPTED_FRACTION}");
    let s = find_saturation(&t, &cfg, 0.01).unwrap();
    let err = (s.fraction_of_bound - BOOKSIM_TORUS8_LATENCY_FRACTION).abs() / BOOKSIM_TORUS8_LATENCY_FRACTION;
    assert!(err < 0.05, "saturation at {:.3} of the bound", s.fraction_of_bound);
}

#[test]
fn zero_load_latency_matches_the_analytic_model_on_k_ary_n_cubes_with_every_routing() {
    let cubes: [(&str, &[usize]); 6] = [
        ("mesh", &[6]),
        ("torus", &[6]),
        ("mesh", &[4, 3]),
        ("torus", &[4, 4]),
        ("mesh", &[3, 3, 2]),
        ("torus", &[3, 3, 3]),
    ];
    for (name, dims) in cubes {
        for routing in CubeAlgo::NAMES {
            let mut t =
                build(name, &TopologyParams { dims: Some(dims.to_vec()), freq_ghz: Some(1.0), ..Default::default() })
                    .unwrap();
            routing::select(&mut t, routing).unwrap();
            let (sim, model) = low_load(&t, SimConfig::default());
            let err = (sim - model).abs() / model;
            assert!(err < 0.02, "{name} {dims:?} {routing}: sim {sim:.3} ns vs {model:.3} ns");
        }
    }
}

#[test]
fn valiant_and_romm_take_longer_paths_and_spread_adversarial_load() {
    let t0 = build("mesh", &TopologyParams { dims: Some(vec![4, 4]), ..Default::default() }).unwrap();
    let hops = |routing: &str, traffic: TrafficPattern| {
        let mut t = t0.clone();
        routing::select(&mut t, routing).unwrap();
        analyze(&t, &traffic, 4, 4).unwrap()
    };
    let (dor, romm, val) = (
        hops("dor", TrafficPattern::Uniform),
        hops("romm", TrafficPattern::Uniform),
        hops("valiant", TrafficPattern::Uniform),
    );
    // ROMM stays minimal; Valiant's detour through a random router doubles the hops (less the
    // shortcut when it passes the destination early).
    assert!((romm.avg_routers - dor.avg_routers).abs() < 1e-9);
    assert!(val.avg_routers > 1.5 * dor.avg_routers);
    // Transpose concentrates DOR's load on a few channels; Valiant spreads it.
    let (dor_t, val_t) = (hops("dor", TrafficPattern::Transpose), hops("valiant", TrafficPattern::Transpose));
    assert!(val_t.channel_load_bound_packets_per_ns_per_node > dor_t.channel_load_bound_packets_per_ns_per_node);
    // Too few VCs for the classes is an error naming the field.
    let mut t = build("torus", &TopologyParams { dims: Some(vec![4, 4]), ..Default::default() }).unwrap();
    routing::select(&mut t, "valiant").unwrap();
    let cfg = SimConfig { vcs: 2, ..SimConfig::default() };
    assert!(matches!(run(&t, &cfg), Err(NetsimError::InvalidParameter { field, .. }) if field == "vcs"));
}

/// Runs `cfg` without generating packets after the window and checks that the network drained:
/// no deadlock and every injected flit ejected.
fn delivers_everything(t: &Topology, cfg: SimConfig, label: &str) -> SimResult {
    let cfg = SimConfig { drain_cycles_max: 20_000, generate_during_drain: false, ..cfg };
    let r = run(t, &cfg).unwrap();
    assert_ne!(r.status, RunStatus::Deadlock, "{label}");
    assert_eq!(r.flits_injected, r.flits_ejected, "{label}");
    r
}

#[test]
fn minimal_adaptive_routing_delivers_every_packet_under_adversarial_load() {
    for name in ["mesh", "torus"] {
        let mut t = build(name, &TopologyParams { dims: Some(vec![4, 4]), ..Default::default() }).unwrap();
        routing::select(&mut t, "min-adaptive").unwrap();
        let cfg = SimConfig {
            traffic: TrafficPattern::Transpose,
            injection: Injection::FlitsPerNodePerCycle(0.9),
            warmup_cycles: 500,
            measure_cycles: 2000,
            ..SimConfig::default()
        };
        let r = delivers_everything(&t, cfg, name);
        assert_eq!(r.packets_malformed, 0);
    }
}

#[test]
fn the_index_preferred_vc_allocator_is_kept_as_an_option() {
    let t = mesh8_1ghz();
    let cfg = SimConfig {
        injection: Injection::FlitsPerNodePerCycle(0.2),
        vc_allocator: AllocatorKind::IndexPreferred,
        generate_during_drain: false,
        ..SimConfig::default()
    };
    let r = run(&t, &cfg).unwrap();
    assert_eq!(r.status, RunStatus::Stable);
    assert_eq!(r.flits_injected, r.flits_ejected);
    let sw = SimConfig { sw_allocator: AllocatorKind::IndexPreferred, ..cfg };
    assert!(matches!(run(&t, &sw), Err(NetsimError::InvalidParameter { field, .. }) if field == "sw_allocator"));
}

#[test]
fn statistics_split_network_and_total_latency_with_percentiles() {
    let t = mesh8_1ghz();
    // One packet: no source queueing, so network and total latency agree (26 cycles).
    let trace = vec![traffic::TraceEvent { time_ns: 0.0, src: 0, dst: 63 }];
    let r = run(&t, &SimConfig { traffic: TrafficPattern::Trace(trace), ..SimConfig::default() }).unwrap();
    assert_eq!(r.avg_network_latency_ns, r.avg_latency_ns);
    assert_eq!((r.min_latency_ns, r.max_latency_ns), (r.avg_latency_ns, r.avg_latency_ns));
    // Near saturation packets wait in their source queues: total latency exceeds network
    // latency, and the percentiles are ordered.
    let cfg = SimConfig { injection: Injection::FlitsPerNodePerCycle(0.34), ..SimConfig::default() };
    let r = run(&t, &cfg).unwrap();
    assert_eq!(r.status, RunStatus::Stable);
    let (net, total) = (r.avg_network_latency_ns.unwrap(), r.avg_latency_ns.unwrap());
    assert!(net < total, "network {net} vs total {total}");
    let q =
        [r.min_latency_ns, r.p50_latency_ns, r.p95_latency_ns, r.p99_latency_ns, r.max_latency_ns].map(Option::unwrap);
    assert!(q.windows(2).all(|w| w[0] <= w[1]), "{q:?}");
    assert!(q[0] <= total && total <= q[4]);
}

#[test]
fn dragonfly_and_fat_tree_route_minimally_and_deliver_everything_under_load() {
    for name in ["dragonfly", "fattree"] {
        let t = build(name, &TopologyParams::default()).unwrap();
        // Dragonfly: at most local, global, local; fat tree: up to the common ancestor and down.
        let a = analyze(&t, &TrafficPattern::Uniform, 4, 4).unwrap();
        let most = if name == "dragonfly" { 4.0 } else { 5.0 };
        assert!(a.avg_routers > 1.0 && a.avg_routers <= most, "{name}: {}", a.avg_routers);
        let cfg = SimConfig {
            injection: Injection::PacketsPerNsPerNode(0.9 * a.channel_load_bound_packets_per_ns_per_node),
            warmup_cycles: 300,
            measure_cycles: 1500,
            ..SimConfig::default()
        };
        delivers_everything(&t, cfg, name);
    }
    let fc =
        build("fattree", &TopologyParams { concentration: Some(2), levels: Some(4), ..Default::default() }).unwrap();
    assert_eq!((fc.node_count(), fc.router_count()), (16, 32));
    let df = build("dragonfly", &TopologyParams { concentration: Some(1), ..Default::default() }).unwrap();
    // p = 1: groups of 2 routers with 1 global link each, 3 groups.
    assert_eq!((df.node_count(), df.router_count()), (6, 6));
}

/// Packets of every node of a dragonfly group to the node at the same place in the next group
/// (Kim et al. 2008's adversarial pattern: minimal routing puts a whole group's load on one
/// global link), Bernoulli at `packets_per_cycle` for `cycles` cycles, as a trace.
fn dragonfly_group_shift(t: &Topology, packets_per_cycle: f64, cycles: u64) -> TrafficPattern {
    use rand::{Rng, SeedableRng};
    let RoutingKind::Dragonfly { routers, .. } = t.routing else { panic!("not a dragonfly") };
    let (n, per_group) = (t.node_count(), routers * t.router_nodes(0).len());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut events = Vec::new();
    for c in 0..cycles {
        for src in 0..n {
            if rng.gen::<f64>() < packets_per_cycle {
                let time_ns = c as f64 / t.reference_freq_ghz();
                events.push(traffic::TraceEvent { time_ns, src, dst: (src + per_group) % n });
            }
        }
    }
    TrafficPattern::Trace(events)
}

#[test]
fn dragonfly_ugal_and_valiant_beat_minimal_routing_under_adversarial_traffic_and_ugal_stays_near_it_under_uniform() {
    // Two VCs per class for the non-minimal routings' four classes (BookSim2's UGAL runs one
    // VC per phase with 256-flit buffers).
    let cfg = SimConfig { vcs: 8, warmup_cycles: 1000, measure_cycles: 3000, ..SimConfig::default() };
    let with = |name: &str| {
        let mut t = build("dragonfly", &TopologyParams::default()).unwrap();
        routing::select(&mut t, name).unwrap();
        t
    };
    let per_flit = |t: &Topology, r: &SimResult| r.accepted_packets_per_ns_per_node * 4.0 / t.reference_freq_ghz();
    let (mut adversarial, mut uniform) = ([0.0; 3], [0.0; 3]);
    for (i, name) in ["dragonfly-min", "valiant", "ugal"].into_iter().enumerate() {
        let t = with(name);
        assert_eq!(t.routing.name(), name);
        // Group shift at 0.4 flits/node/cycle: minimal routing's bound is one global link per
        // group of 8 nodes, 0.125 flits/node/cycle.
        let c = SimConfig { traffic: dragonfly_group_shift(&t, 0.1, 2000), drain_cycles_max: 100_000, ..cfg.clone() };
        let r = run(&t, &c).unwrap();
        assert_eq!(r.flits_injected, r.flits_ejected, "{name}");
        adversarial[i] = per_flit(&t, &r);
        // Uniform past minimal routing's saturation.
        let c = SimConfig { injection: Injection::FlitsPerNodePerCycle(0.8), ..cfg.clone() };
        uniform[i] = per_flit(&t, &run(&t, &c).unwrap());
    }
    let ([min_a, val_a, ugal_a], [min_u, val_u, ugal_u]) = (adversarial, uniform);
    assert!(min_a < 0.13, "minimal: {min_a:.3} flits/node/cycle above its one-link bound");
    assert!(
        val_a > 1.5 * min_a && ugal_a > 1.5 * min_a,
        "adversarial: min {min_a:.3} valiant {val_a:.3} ugal {ugal_a:.3}"
    );
    // Valiant's detour doubles the global hops of uniform traffic; UGAL keeps most packets
    // minimal.
    assert!(val_u < 0.7 * min_u, "uniform: min {min_u:.3} valiant {val_u:.3}");
    assert!(ugal_u > 0.85 * min_u, "uniform: min {min_u:.3} ugal {ugal_u:.3}");
    // At zero load UGAL routes minimally: the analytic model gives the same latency.
    let (a, b) = (
        analyze(&with("dragonfly-min"), &TrafficPattern::Uniform, 8, 4).unwrap(),
        analyze(&with("ugal"), &TrafficPattern::Uniform, 8, 4).unwrap(),
    );
    assert_eq!(a.zero_load_latency_ns, b.zero_load_latency_ns);
    // Too few VCs for the four classes is an error naming the field.
    let t = with("ugal");
    let few = SimConfig { vcs: 3, ..SimConfig::default() };
    assert!(matches!(run(&t, &few), Err(NetsimError::InvalidParameter { field, .. }) if field == "vcs"));
}
