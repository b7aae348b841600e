use nam_netsim::*;
fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    for name in &names {
        let t = build(name, &TopologyParams::default()).unwrap();
        let s = t.summary();
        println!("{s:?}");
        let cfg = SimConfig {
            vc_depth_flits: t.default_vc_depth_flits(),
            ..SimConfig::default()
        };
        let start = std::time::Instant::now();
        let r = sweep::sweep(&t, &cfg, &[], 6).unwrap();
        println!("{} zl sim {:?} analytic {:.2} err {:?} bound {:.4} ({}) sat {:.4} lastStable {:?} before {:?}  [{:.1}s]",
            name, r.zero_load_latency_ns, r.analytic.zero_load_latency_ns, r.zero_load_error,
            r.analytic.channel_load_bound_packets_per_ns_per_node, r.analytic.bottleneck,
            r.saturation_packets_per_ns_per_node, r.last_stable_packets_per_ns_per_node, r.avg_latency_before_saturation_ns, start.elapsed().as_secs_f64());
        for p in &r.curve {
            println!(
                "   off {:.4} acc {:.4} {:?} lat {:?} p99 {:?} P {:.2}W",
                p.offered_packets_per_ns_per_node,
                p.accepted_packets_per_ns_per_node,
                p.status,
                p.avg_latency_ns,
                p.p99_latency_ns,
                p.energy.power_w
            );
        }
    }
}
