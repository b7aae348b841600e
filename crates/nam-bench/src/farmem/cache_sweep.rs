//! The explicit API's cache over line sizes (64 B to 64 KiB) with and without the metadata
//! cache: a sequential read pass (bandwidth) and a random pointer chase (latency) through
//! `FarArray`, at 50% local memory, against the same loops over a local `Vec`. This is the
//! measurement behind the default line size and the metadata-cache default.

use super::{Run, Transport, WorkloadKind};
use anyhow::{ensure, Result};
use nam_client::Client;
use nam_farmem::{FarArray, FarConfig, FarMemory};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;

/// Line sizes swept.
pub const LINES: [u64; 6] = [64, 256, 1024, 4096, 16384, 65536];

fn permutation(n: usize) -> Vec<u64> {
    let mut next: Vec<u64> = (0..n as u64).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    for i in (1..n).rev() {
        let j = rng.gen_range(0..i);
        next.swap(i, j);
    }
    next
}

fn far_seq(far: &mut FarMemory, a: &FarArray<u64>, n: usize) -> Result<(f64, u64)> {
    let mut chunk = [0u64; 64];
    let t = Instant::now();
    let mut sum = 0u64;
    for i in (0..n).step_by(64) {
        a.read(far, i, &mut chunk)?;
        sum = chunk.iter().fold(sum, |s, v| s.wrapping_add(*v));
    }
    Ok((t.elapsed().as_secs_f64() * 1e3, sum))
}

fn far_chase(far: &mut FarMemory, a: &FarArray<u64>, steps: u64) -> Result<(f64, u64)> {
    let t = Instant::now();
    let mut p = 0usize;
    for _ in 0..steps {
        p = a.get(far, p)? as usize;
    }
    Ok((t.elapsed().as_secs_f64() * 1e3, p as u64))
}

/// Runs the sweep over `client`.
pub fn measure(client: Arc<Client>, transport: Transport, servers: usize, scale: f64) -> Result<Vec<Run>> {
    let n = ((1 << 20) as f64 * scale) as usize & !63;
    let steps = (n / 4) as u64;
    let data = permutation(n);
    let t = Instant::now();
    let local_sum = data.iter().fold(0u64, |s, v| s.wrapping_add(*v));
    let local_seq_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let mut p = 0usize;
    for _ in 0..steps {
        p = data[p] as usize;
    }
    let (local_chase_ms, local_p) = (t.elapsed().as_secs_f64() * 1e3, p as u64);
    let mut runs = Vec::new();
    for line in LINES {
        for meta in [0usize, 1024] {
            let bytes = (n * 8) as u64;
            let mut config = FarConfig::new(bytes, bytes / 2);
            config.line_bytes = line;
            config.metadata_cache_entries = meta;
            let mut far = FarMemory::new(client.clone(), config)?;
            let a = far.alloc_array::<u64>(n)?;
            a.write(&mut far, 0, &data)?;
            far.invalidate()?;
            let (seq_ms, sum) = far_seq(&mut far, &a, n)?;
            let (chase_ms, q) = far_chase(&mut far, &a, steps)?;
            ensure!(sum == local_sum && q == local_p, "explicit API read back wrong data (line {line})");
            let stats = far.stats();
            far.spans().release()?;
            for (kind, far_ms, local_ms, items) in [
                (WorkloadKind::ExplicitSeq, seq_ms, local_seq_ms, n as f64),
                (WorkloadKind::ExplicitChase, chase_ms, local_chase_ms, steps as f64),
            ] {
                let mut run = Run::basic(kind, 0.5, true, servers, transport, local_ms, far_ms, items);
                run.line_bytes = Some(line);
                run.metadata_cache = Some(meta);
                run.misses = stats.misses;
                run.prefetches = stats.prefetches;
                run.evictions = stats.evictions;
                runs.push(run);
            }
        }
    }
    Ok(runs)
}
