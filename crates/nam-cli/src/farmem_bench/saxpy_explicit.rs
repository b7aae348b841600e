//! SAXPY through the explicit API's streaming bulk reads and writes (`FarMemory::read_bulk`,
//! `write_bulk`): chunks of x and y are read into two small local buffers, computed on, and
//! y written back, against the paged workload's local baseline (the same `Saxpy` loop over
//! a `Vec`). The cache's budget is the local fraction of the footprint, as for paging; the
//! bulk path does not fill it, so the chunk buffers are the only local copies of the data.

use super::{workloads::Saxpy, Run, Transport, WorkloadKind};
use anyhow::{ensure, Result};
use nam_client::Client;
use nam_farmem::{FarConfig, FarMemory, PrefetchConfig};
use std::sync::Arc;
use std::time::Instant;

/// Elements per chunk: 16 KiB of x and of y, well inside the L2 cache.
const CHUNK: usize = 4096;

fn as_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding; the byte view covers the same memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4) }
}

fn as_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as above; any bytes are a valid f32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 4) }
}

/// Writes SAXPY's initial x and y (the values `Saxpy::init` writes) into far memory.
fn init(far: &mut FarMemory, n: usize) -> Result<()> {
    let mut buf = vec![0f32; CHUNK];
    for start in (0..n).step_by(CHUNK) {
        let len = CHUNK.min(n - start);
        for (i, v) in buf[..len].iter_mut().enumerate() {
            *v = ((start + i) % 1000) as f32 * 0.001;
        }
        far.write_bulk(start as u64 * 4, as_bytes(&buf[..len]))?;
        buf[..len].fill(1.0);
        far.write_bulk((n + start) as u64 * 4, as_bytes(&buf[..len]))?;
    }
    far.flush()?;
    far.invalidate()?;
    Ok(())
}

/// The passes and the checksum `Saxpy::run` computes.
fn run(far: &mut FarMemory, n: usize, passes: usize) -> Result<u64> {
    let (mut x, mut y) = (vec![0f32; CHUNK], vec![0f32; CHUNK]);
    let y_at = n as u64 * 4;
    for _ in 0..passes {
        for start in (0..n).step_by(CHUNK) {
            let len = CHUNK.min(n - start);
            far.read_bulk(start as u64 * 4, as_bytes_mut(&mut x[..len]))?;
            far.read_bulk(y_at + start as u64 * 4, as_bytes_mut(&mut y[..len]))?;
            for (y, x) in y[..len].iter_mut().zip(&x[..len]) {
                *y += 0.5 * *x;
            }
            far.write_bulk(y_at + start as u64 * 4, as_bytes(&y[..len]))?;
        }
    }
    let mut sum = 0u64;
    for start in (0..n).step_by(CHUNK) {
        let len = CHUNK.min(n - start);
        far.read_bulk(y_at + start as u64 * 4, as_bytes_mut(&mut y[..len]))?;
        // Elements at multiples of 97, as the local checksum takes them.
        for i in (start.next_multiple_of(97)..start + len).step_by(97) {
            sum = sum.wrapping_mul(31).wrapping_add(y[i - start].to_bits() as u64);
        }
    }
    Ok(sum)
}

/// Measures SAXPY over the explicit API against `local` (the local run of `w`).
pub fn measure(
    client: Arc<Client>,
    (transport, servers): (Transport, usize),
    w: &Saxpy,
    (local_ms, local_sum): (f64, u64),
    (fraction, prefetch): (f64, bool),
) -> Result<Run> {
    let bytes = (w.n * 8) as u64;
    let mut config = FarConfig::new(bytes, ((bytes as f64 * fraction) as u64).max(1 << 20));
    config.prefetch = PrefetchConfig { enabled: prefetch, ..PrefetchConfig::default() };
    let mut far = FarMemory::new(client, config)?;
    init(&mut far, w.n)?;
    let t = Instant::now();
    let sum = run(&mut far, w.n, w.passes)?;
    let far_ms = t.elapsed().as_secs_f64() * 1e3;
    ensure!(sum == local_sum, "explicit SAXPY computed {sum:#x} but {local_sum:#x} locally: data corrupted");
    let stats = far.stats();
    far.spans().release()?;
    let items = (w.n * w.passes) as f64;
    let mut r =
        Run::basic(WorkloadKind::SaxpyExplicit, fraction, prefetch, servers, transport, local_ms, far_ms, items);
    r.misses = stats.misses;
    r.prefetches = stats.prefetches;
    r.evictions = stats.evictions;
    Ok(r)
}
