//! Simulated cycles per CPU-second on the 8x8 mesh at 0.3 flits/node/cycle (2000 warm-up and
//! 40000 measured cycles): the configuration of the speed row of `nam sim bench`, run five
//! times; prints the median, so that old and new builds can be compared without the rest of
//! the benchmark suite (`cargo run --release -p nam-netsim --example sim_speed`).

use nam_netsim::{build, run, Injection, SimConfig, TopologyParams};
use std::time::Instant;

fn main() -> Result<(), nam_netsim::NetsimError> {
    let mesh = build("mesh", &TopologyParams { tiles: 8, ..TopologyParams::default() })?;
    let cfg = SimConfig {
        injection: Injection::FlitsPerNodePerCycle(0.3),
        warmup_cycles: 2000,
        measure_cycles: 40_000,
        ..SimConfig::default()
    };
    let mut rates = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        let r = run(&mesh, &cfg)?;
        rates.push(r.simulated_cycles as f64 / t0.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    println!("simulated cycles per second: median {:.0} (min {:.0}, max {:.0})", rates[2], rates[0], rates[4]);
    Ok(())
}
