//! Every traffic pattern's destination distribution (sampled against the distribution the
//! analytic model uses and against the pattern's definition), bursty on/off injection and
//! packet-size mixes.

use nam_netsim::traffic::random_permutation;
use nam_netsim::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn mesh8() -> Topology {
    build("mesh", &TopologyParams { tiles: 8, ..Default::default() }).unwrap()
}

fn all_patterns() -> Vec<TrafficPattern> {
    let mut v: Vec<TrafficPattern> =
        traffic::TRAFFIC_NAMES.iter().map(|n| TrafficPattern::from_name(n).unwrap()).collect();
    v.push(TrafficPattern::RandomPermutation { seed: 7 });
    v.push(TrafficPattern::HotSpot { nodes: vec![9, 54], fraction: 0.3 });
    v
}

/// Samples `draws` destinations of `src` and compares each destination's share with the
/// pattern's distribution: within 5 standard deviations of a binomial share.
fn check_sampled(t: &Topology, p: &TrafficPattern, src: usize, draws: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(src as u64 + 1);
    let mut count = vec![0usize; t.node_count()];
    let mut none = 0;
    for _ in 0..draws {
        match p.dest(t, src, &mut rng) {
            Some(d) => count[d] += 1,
            None => none += 1,
        }
    }
    let dist = p.distribution(t, src);
    if dist.is_empty() {
        assert_eq!(none, draws, "{} from {src}: sends nothing", p.name());
        return;
    }
    let total: f64 = dist.iter().map(|x| x.1).sum();
    assert!((total - 1.0).abs() < 1e-9, "{}: distribution sums to {total}", p.name());
    let mut want = vec![0.0; t.node_count()];
    for (d, w) in dist {
        want[d] += w;
    }
    for (d, (&c, &w)) in count.iter().zip(&want).enumerate() {
        let share = c as f64 / draws as f64;
        let sd = (w * (1.0 - w) / draws as f64).sqrt().max(1e-9);
        assert!((share - w).abs() <= 5.0 * sd + 1e-12, "{} from {src} to {d}: {share} vs {w}", p.name());
    }
}

#[test]
fn every_pattern_draws_its_distribution() {
    let t = mesh8();
    for p in all_patterns() {
        p.validate(&t).unwrap();
        for src in [0, 9, 27, 63] {
            check_sampled(&t, &p, src, 20_000);
        }
    }
}

#[test]
fn permutations_follow_their_definitions() {
    let t = mesh8(); // 64 nodes: node y*8+x is (x, y), 6 address bits.
    let d = |p: &TrafficPattern, s: usize| p.distribution(&t, s);
    // Bit reverse: 000001 -> 100000, 000110 -> 011000; palindromes send to themselves.
    assert_eq!(d(&TrafficPattern::BitReverse, 1), vec![(32, 1.0)]);
    assert_eq!(d(&TrafficPattern::BitReverse, 6), vec![(24, 1.0)]);
    assert_eq!(d(&TrafficPattern::BitReverse, 33), vec![(33, 1.0)]);
    // Shuffle: rotate left by one bit.
    assert_eq!(d(&TrafficPattern::Shuffle, 1), vec![(2, 1.0)]);
    assert_eq!(d(&TrafficPattern::Shuffle, 32), vec![(1, 1.0)]);
    assert_eq!(d(&TrafficPattern::Shuffle, 63), vec![(63, 1.0)]);
    // Tornado on 8x8: (x + 3, y + 3) mod 8.
    assert_eq!(d(&TrafficPattern::Tornado, 0), vec![(27, 1.0)]);
    assert_eq!(d(&TrafficPattern::Tornado, 7 * 8 + 6), vec![(2 * 8 + 1, 1.0)]);
    // Neighbour: (x + 1, y + 1) mod 8.
    assert_eq!(d(&TrafficPattern::Neighbor, 0), vec![(9, 1.0)]);
    assert_eq!(d(&TrafficPattern::Neighbor, 63), vec![(0, 1.0)]);
    // Transpose and bit complement as before; transpose's diagonal sends nothing.
    assert_eq!(d(&TrafficPattern::Transpose, 1), vec![(8, 1.0)]);
    assert!(d(&TrafficPattern::Transpose, 9).is_empty());
    assert_eq!(d(&TrafficPattern::BitComplement, 0), vec![(63, 1.0)]);
    // Every permutation pattern is one: each node is the destination of exactly one source.
    for p in [
        TrafficPattern::BitReverse,
        TrafficPattern::Shuffle,
        TrafficPattern::Tornado,
        TrafficPattern::Neighbor,
        TrafficPattern::BitComplement,
        TrafficPattern::RandomPermutation { seed: 3 },
    ] {
        let mut hit = vec![0; 64];
        for s in 0..64 {
            for (dst, _) in d(&p, s) {
                hit[dst] += 1;
            }
        }
        assert!(hit.iter().all(|&h| h == 1), "{}", p.name());
    }
    // A random permutation is fixed by its seed and changes with it.
    assert_eq!(random_permutation(64, 3), random_permutation(64, 3));
    assert_ne!(random_permutation(64, 3), random_permutation(64, 4));
    // Hotspot: 30% to nodes 9 and 54 (15% each), the rest uniform over all 64.
    let h = TrafficPattern::HotSpot { nodes: vec![9, 54], fraction: 0.3 };
    let w: Vec<f64> = d(&h, 0).into_iter().map(|x| x.1).collect();
    assert!((w[9] - (0.15 + 0.7 / 64.0)).abs() < 1e-12 && (w[1] - 0.7 / 64.0).abs() < 1e-12);
}

#[test]
fn patterns_that_need_a_grid_or_power_of_two_are_rejected_elsewhere() {
    let ring = topofile::parse("router a\nrouter b\nrouter c\nlink a b length_mm=1\nlink b c length_mm=1\nlink c a length_mm=1\nnode a\nnode b\nnode c\n").unwrap();
    for p in [TrafficPattern::BitReverse, TrafficPattern::Shuffle, TrafficPattern::Tornado, TrafficPattern::Neighbor] {
        assert!(matches!(p.validate(&ring), Err(NetsimError::InvalidParameter { .. })), "{}", p.name());
    }
    let bad = TrafficPattern::HotSpot { nodes: vec![64], fraction: 1.0 };
    assert!(bad.validate(&mesh8()).is_err());
}

fn cfg(rate: f64) -> SimConfig {
    SimConfig {
        injection: Injection::FlitsPerNodePerCycle(rate),
        warmup_cycles: 500,
        measure_cycles: 4000,
        ..SimConfig::default()
    }
}

#[test]
fn every_pattern_runs_and_delivers() {
    let t = mesh8();
    for p in all_patterns() {
        // Everything to one hotspot node: 64 senders share its one-flit-per-cycle ejection.
        let rate = if p == TrafficPattern::from_name("hotspot").unwrap() { 0.01 } else { 0.05 };
        let c = SimConfig { traffic: p.clone(), generate_during_drain: false, ..cfg(rate) };
        let r = run(&t, &c).unwrap();
        assert_eq!(r.status, RunStatus::Stable, "{}", p.name());
        assert_eq!(r.flits_injected, r.flits_ejected, "{}", p.name());
        assert_eq!(r.packets_malformed, 0);
    }
}

#[test]
fn on_off_injection_keeps_the_average_rate_and_raises_latency() {
    let t = mesh8();
    let steady = run(&t, &cfg(0.2)).unwrap();
    let bursty = SimConfig { injection_process: InjectionProcess::OnOff { alpha: 0.01, beta: 0.04 }, ..cfg(0.2) };
    assert!((bursty.injection_process.on_share() - 0.2).abs() < 1e-12);
    let b = run(&t, &bursty).unwrap();
    assert_eq!(b.status, RunStatus::Stable);
    // The same average load (within sampling noise of the bursts) ...
    let ratio = b.accepted_packets_per_ns_per_node / steady.accepted_packets_per_ns_per_node;
    assert!((0.85..1.15).contains(&ratio), "accepted ratio {ratio}");
    // ... sent in bursts at five times the rate waits longer in the source queues.
    assert!(b.avg_latency_ns.unwrap() > 1.2 * steady.avg_latency_ns.unwrap());
}

#[test]
fn packet_size_mixes_deliver_whole_packets_of_every_size() {
    let t = mesh8();
    let mix = SimConfig { packet_size_mix: vec![(1, 3.0), (8, 1.0)], generate_during_drain: false, ..cfg(0.1) };
    assert!((mix.mean_packet_flits() - 2.75).abs() < 1e-12);
    let r = run(&t, &mix).unwrap();
    assert_eq!(r.status, RunStatus::Stable);
    assert_eq!(r.packets_malformed, 0);
    assert_eq!(r.flits_injected, r.flits_ejected);
    // The flit rate is the configured one: packets arrive at 0.1 / 2.75 per node per cycle.
    let per_cycle = r.accepted_packets_per_ns_per_node / r.reference_freq_ghz;
    assert!((per_cycle * 2.75 / 0.1 - 1.0).abs() < 0.1, "{per_cycle}");
    // The analytic zero-load latency weighs both sizes: between the two single-size figures.
    let a = |sizes: Vec<(usize, f64)>| {
        let c = SimConfig { packet_size_mix: sizes, ..SimConfig::default() };
        analytic::analyze_config(&t, &c).unwrap().zero_load_latency_ns
    };
    let (one, eight, both) = (a(vec![(1, 1.0)]), a(vec![(8, 1.0)]), a(vec![(1, 3.0), (8, 1.0)]));
    assert!(one < both && both < eight);
    assert!((both - (0.75 * one + 0.25 * eight)).abs() < 1e-9);
}
