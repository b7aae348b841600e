//! Properties the cited works state (Abeyratne 2017, Ploumidis et al. 2023), checked on the full 24x24-tile, 576-node layout with the
//! analytic models (cheap) and one short simulation, plus bad-input errors.

use nam_netsim::analytic::analyze;
use nam_netsim::*;

fn full(name: &str) -> Topology {
    build(name, &TopologyParams::default()).unwrap()
}

#[test]
fn table_3_2_router_counts_and_radices() {
    // (name, local routers, global routers, local radix, global radix) from Abeyratne 2017 Table 3.2.
    let rows = [
        ("mesh", 576, 0, 5, 0),
        ("cmesh-low", 144, 0, 8, 0),
        ("cmesh-high", 16, 0, 52, 0),
        ("fbfly", 16, 0, 42, 0),
        ("superstar", 36, 8, 24, 36),
        ("superstarx", 36, 8, 28, 36),
        ("superring", 36, 4, 17, 11),
    ];
    for (name, lr, gr, lrad, grad) in rows {
        let s = full(name).summary();
        assert_eq!((s.local_routers, s.global_routers), (lr, gr), "{name}");
        assert_eq!((s.local_radix, s.global_radix), (lrad, grad), "{name}");
        assert_eq!(s.nodes, 576);
    }
    // Abeyratne 2017 Table 3.3: mesh and Super-Star bisection wires at a 128-bit datapath.
    assert_eq!(full("mesh").summary().bisection_wires, 6144);
    assert_eq!(full("superstar").summary().bisection_wires, 36_864);
    // Abeyratne 2017 §3.3.1: cmesh-high routers at 1.8 GHz, fbfly at 2.1 GHz.
    assert_eq!(full("cmesh-high").routers[0].freq_ghz, 1.8);
    assert_eq!(full("fbfly").routers[0].freq_ghz, 2.1);
}

#[test]
fn uniform_saturation_bound_ordering_and_superstar_latency() {
    let u = TrafficPattern::Uniform;
    let a = |n: &str| analyze(&full(n), &u, 4, 4).unwrap();
    let (mesh, ss, ssx, ring) = (a("mesh"), a("superstar"), a("superstarx"), a("superring"));
    let (cl, ch, fb) = (a("cmesh-low"), a("cmesh-high"), a("fbfly"));
    let b = |m: &analytic::AnalyticModel| m.channel_load_bound_packets_per_ns_per_node;
    assert!(b(&ssx) >= b(&ss));
    assert!(b(&ss) > b(&mesh));
    for other in [&cl, &ch, &fb] {
        assert!(b(&mesh) > b(other));
        assert!(b(&ring) < b(other));
    }
    // Abeyratne 2017 §3.5.1: Super-Star's latency beats mesh by ~45% (9.3 vs 16.8 ns).
    assert!(ss.zero_load_latency_ns < 0.7 * mesh.zero_load_latency_ns);
}

#[test]
fn superstar_bound_grows_with_global_routers() {
    let mut last = 0.0;
    for g in [1, 2, 4, 8] {
        let t = build("superstar", &TopologyParams { global_routers: Some(g), ..Default::default() }).unwrap();
        let m = analyze(&t, &TrafficPattern::Uniform, 4, 4).unwrap();
        assert!(m.channel_load_bound_packets_per_ns_per_node > last, "GR{g}");
        last = m.channel_load_bound_packets_per_ns_per_node;
    }
}

#[test]
fn superstarx_neighbour_links_cut_clustered_latency() {
    // Abeyratne 2017 Fig. 3.13: with clustered traffic Super-StarX has lower latency than Super-Star.
    let c = TrafficPattern::Clustered;
    let ss = analyze(&full("superstar"), &c, 4, 4).unwrap();
    let ssx = analyze(&full("superstarx"), &c, 4, 4).unwrap();
    assert!(ssx.zero_load_latency_ns < ss.zero_load_latency_ns);
}

#[test]
fn simulated_superstar_beats_mesh_at_low_load() {
    let cfg = SimConfig {
        injection: Injection::PacketsPerNsPerNode(0.01),
        warmup_cycles: 200,
        measure_cycles: 600,
        ..SimConfig::default()
    };
    let mesh = run(&full("mesh"), &cfg).unwrap().avg_latency_ns.unwrap();
    let ss = run(&full("superstar"), &cfg).unwrap().avg_latency_ns.unwrap();
    assert!(ss < 0.7 * mesh, "superstar {ss} ns vs mesh {mesh} ns");
}

#[test]
fn bad_names_and_parameters_are_errors_naming_the_field() {
    assert!(matches!(build("hypercube", &TopologyParams::default()), Err(NetsimError::UnknownTopology { .. })));
    let mut t = full("mesh");
    // Valiant is a mesh routing now; an unknown name, or a mesh routing on another
    // topology, is still an error.
    assert!(matches!(routing::select(&mut t, "planar-adaptive"), Err(NetsimError::UnknownRouting { .. })));
    let mut ss = full("superstar");
    assert!(matches!(routing::select(&mut ss, "valiant"), Err(NetsimError::UnknownRouting { .. })));
    assert!(routing::select(&mut t, "shortest").is_ok());
    assert!(matches!(TrafficPattern::from_name("zigzag"), Err(NetsimError::UnknownTraffic { .. })));
    let field = |e: NetsimError| match e {
        NetsimError::InvalidParameter { field, .. } => field,
        other => panic!("unexpected {other:?}"),
    };
    let p = |c: Option<usize>| TopologyParams { concentration: c, ..Default::default() };
    assert_eq!(field(build("cmesh", &p(Some(25))).unwrap_err()), "concentration");
    assert_eq!(field(build("cmesh", &p(Some(8))).unwrap_err()), "concentration");
    let g = TopologyParams { global_routers: Some(0), ..Default::default() };
    assert_eq!(field(build("superstar", &g).unwrap_err()), "global_routers");
    let small = TopologyParams { tiles: 4, ..Default::default() };
    let mesh = build("mesh", &small).unwrap();
    let bad_rate = SimConfig { injection: Injection::FlitsPerNodePerCycle(1.5), ..Default::default() };
    assert_eq!(field(run(&mesh, &bad_rate).unwrap_err()), "injection_rate");
    let too_fast = SimConfig { injection: Injection::PacketsPerNsPerNode(5.0), ..Default::default() };
    assert_eq!(field(run(&mesh, &too_fast).unwrap_err()), "injection_rate");
    let torus = build("torus", &small).unwrap();
    let one_vc = SimConfig { vcs: 1, ..Default::default() };
    assert_eq!(field(run(&torus, &one_vc).unwrap_err()), "vcs");
}

#[test]
fn malformed_files_are_errors_naming_line_and_field() {
    let parse_err = |text: &str| match topofile::parse(text).unwrap_err() {
        NetsimError::Parse { line, field, .. } => (line, field),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(parse_err("router a freq_ghz=fast\n"), (1, "freq_ghz".into()));
    assert_eq!(parse_err("router a\nlink a b length_mm=1\n"), (2, "b".into()));
    assert_eq!(parse_err("router a\nrouter b\nlink a b\n"), (3, "length_mm".into()));
    assert_eq!(parse_err("switch a\n"), (1, "directive".into()));
    assert_eq!(parse_err("router a\nrouter a\n"), (2, "router".into()));
    assert_eq!(parse_err("router a colour=red\n"), (1, "colour".into()));
    // A disconnected graph is an invalid topology.
    let split = "router a\nrouter b\nnode a\nnode b\n";
    assert!(matches!(topofile::parse(split), Err(NetsimError::InvalidTopology { .. })));
    let trace_err = |text: &str| match traffic::parse_trace(text).unwrap_err() {
        NetsimError::Parse { line, field, .. } => (line, field),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(trace_err("0 1\n"), (1, "line".into()));
    assert_eq!(trace_err("# c\nsoon 1 2\n"), (2, "time_ns".into()));
    assert_eq!(trace_err("1 x 2\n"), (1, "src".into()));
    assert_eq!(trace_err("1 2 2\n"), (1, "dst".into()));
}
