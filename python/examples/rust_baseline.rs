//! The Rust side of the Python benchmark (python/bench/bench.py): the same operations the
//! script times through `nam.Client`, timed here through `nam_client::Client` on the same
//! server, so the two are compared in one run. Prints one JSON object on stdout.
//!
//! Usage: rust_baseline HOST:PORT TRANSPORTS BANDWIDTH_ITERS LATENCY_ITERS

use nam_client::{AllocOptions, Client, ClientConfig};
use std::time::Instant;

/// Bytes of one bandwidth transfer: the 1 MiB of the target.
const BIG: usize = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, server, transports, bw_iters, lat_iters] = &args[..] else {
        return Err("usage: rust_baseline HOST:PORT TRANSPORTS BANDWIDTH_ITERS LATENCY_ITERS".into());
    };
    let (bw_iters, lat_iters): (u32, u32) = (bw_iters.parse()?, lat_iters.parse()?);
    let mut config = ClientConfig::new(vec![server.parse()?]);
    // The NAM_* variables apply as they do to the Python client (`nam.Client(address)`).
    config.apply_env()?;
    config.transports = Some(transports.clone());
    let client = Client::connect(config)?;
    let big = client.alloc(BIG as u64, &AllocOptions::default())?;
    let small = client.alloc(64, &AllocOptions::default())?;
    let data = vec![7u8; BIG];
    let mut back = vec![0u8; BIG];

    // Each figure: the time per operation, over `iters` operations after a warm-up.
    let time = |iters: u32, f: &mut dyn FnMut() -> nam_client::Result<()>| -> nam_client::Result<f64> {
        for _ in 0..iters.div_ceil(10) {
            f()?;
        }
        let start = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    };
    let put_big = time(bw_iters, &mut || client.put_sync(&big, 0, &data))?;
    let get_big = time(bw_iters, &mut || client.get(&big, 0, &mut back))?;
    let word = [1u8; 8];
    let mut out = [0u8; 8];
    let put_small = time(lat_iters, &mut || client.put(&small, 0, &word))?;
    let get_small = time(lat_iters, &mut || client.get(&small, 8, &mut out))?;
    let fetch_add = time(lat_iters, &mut || client.fetch_add(&small, 16, 1).map(drop))?;
    client.free(&big)?;
    client.free(&small)?;
    println!(
        "{{\"put_1MiB_s\": {put_big:e}, \"get_1MiB_s\": {get_big:e}, \"put_8B_s\": {put_small:e}, \
         \"get_8B_s\": {get_small:e}, \"fetch_add_s\": {fetch_add:e}}}"
    );
    Ok(())
}
