//! Request/reply traffic, per-node injection and acceptance statistics, and the adaptive
//! measurement window.

use nam_netsim::*;

fn mesh4() -> Topology {
    build("mesh", &TopologyParams { dims: Some(vec![4, 4]), freq_ghz: Some(1.0), ..Default::default() }).unwrap()
}

#[test]
fn every_delivered_request_draws_one_reply_back_to_its_source() {
    let t = mesh4();
    let cfg = SimConfig {
        injection: Injection::FlitsPerNodePerCycle(0.1),
        reply_flits: Some(2),
        warmup_cycles: 200,
        measure_cycles: 2000,
        generate_during_drain: false,
        ..SimConfig::default()
    };
    let r = run(&t, &cfg).unwrap();
    assert_eq!(r.status, RunStatus::Stable);
    assert_eq!(r.flits_injected, r.flits_ejected);
    // Requests of 4 flits and replies of 2, one reply per request: a third of the flits are
    // replies.
    assert_eq!(r.flits_ejected % 6, 0, "{} flits is not whole request/reply pairs", r.flits_ejected);
    assert_eq!(r.packets_malformed, 0);
    let plain = run(&t, &SimConfig { reply_flits: None, ..cfg.clone() }).unwrap();
    assert!(r.flits_ejected > plain.flits_ejected);
    assert!(matches!(
        run(&t, &SimConfig { reply_flits: Some(0), ..cfg }),
        Err(NetsimError::InvalidParameter { field, .. }) if field == "reply_flits"
    ));
}

#[test]
fn per_node_rates_add_up_to_the_network_and_show_a_hotspot() {
    let t = mesh4();
    let cfg = SimConfig {
        injection: Injection::FlitsPerNodePerCycle(0.1),
        traffic: TrafficPattern::HotSpot { nodes: vec![5], fraction: 0.5 },
        warmup_cycles: 300,
        measure_cycles: 3000,
        ..SimConfig::default()
    };
    let r = run(&t, &cfg).unwrap();
    let n = t.node_count() as f64;
    assert_eq!(r.per_node_injected_packets_per_ns.len(), t.node_count());
    let total: f64 = r.per_node_accepted_packets_per_ns.iter().sum();
    assert!((total / n - r.accepted_packets_per_ns_per_node).abs() < 1e-9);
    let injected: f64 = r.per_node_injected_packets_per_ns.iter().sum::<f64>() / n;
    assert!((injected - r.offered_packets_per_ns_per_node).abs() / r.offered_packets_per_ns_per_node < 0.1);
    // The hotspot accepts about half of all packets.
    let hot = r.per_node_accepted_packets_per_ns[5];
    assert!(hot > 0.4 * total && hot < 0.6 * total, "hotspot {hot} of {total}");
}

#[test]
fn the_adaptive_window_grows_until_the_latency_converges() {
    let t = mesh4();
    let base = SimConfig {
        injection: Injection::FlitsPerNodePerCycle(0.2),
        warmup_cycles: 300,
        measure_cycles: 500,
        max_window_extensions: 4,
        ..SimConfig::default()
    };
    // A loose tolerance holds after the first window, an impossible one uses every extension.
    let loose = run(&t, &SimConfig { converge_tolerance: 0.5, ..base.clone() }).unwrap();
    assert_eq!(loose.window_extensions, 0);
    let tight = run(&t, &SimConfig { converge_tolerance: 1e-6, ..base.clone() }).unwrap();
    assert_eq!(tight.window_extensions, 4);
    assert!(tight.packets_measured > 3 * loose.packets_measured);
    assert_eq!(tight.status, RunStatus::Stable);
    // A fixed window never grows.
    let fixed = run(&t, &SimConfig { max_window_extensions: 0, converge_tolerance: 1e-6, ..base }).unwrap();
    assert_eq!(fixed.window_extensions, 0);
}
