//! The latency of a 4 KiB remote page fault: every page written (so it lives on the
//! servers), then all evicted, then touched once each in random order with each touch
//! timed, the prefetcher off. The baseline is the same touch once the pages are resident.

use super::{Run, Transport, WorkloadKind};
use anyhow::Result;
use nam_client::Client;
use nam_farmem::{PagedRegion, PagerConfig, PrefetchConfig};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Instant;

const PAGE: usize = 4096;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Touches each page in `order`, timing each touch in microseconds; returns them sorted.
fn touch_all(mem: &[u8], order: &[usize]) -> (Vec<f64>, u64) {
    let mut times = Vec::with_capacity(order.len());
    let mut sum = 0u64;
    for &p in order {
        let t = Instant::now();
        // SAFETY: in bounds; volatile so the load is not hoisted out of the timing.
        sum += unsafe { std::ptr::read_volatile(mem.as_ptr().add(p * PAGE + 8)) } as u64;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    (times, sum)
}

/// Measures remote page faults over `client`.
pub fn measure(client: Arc<Client>, transport: Transport, servers: usize, scale: f64) -> Result<Run> {
    let pages = ((4096.0 * scale) as usize).max(256);
    let bytes = (pages * PAGE) as u64;
    let mut config = PagerConfig::new(bytes, bytes);
    config.prefetch = PrefetchConfig { enabled: false, ..Default::default() };
    let region = PagedRegion::new(client, config)?;
    // SAFETY: the only view of the region, dropped before it.
    let mem = unsafe { region.as_slice_mut() };
    for p in 0..pages {
        mem[p * PAGE + 8] = p as u8;
    }
    region.evict_all()?;
    let mut order: Vec<usize> = (0..pages).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(4096));
    let (faults, far_sum) = touch_all(mem, &order);
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(4097));
    let (local, local_sum) = touch_all(mem, &order);
    anyhow::ensure!(far_sum == local_sum, "fault-latency: pages read back wrong after the faults");
    let stats = region.stats();
    let (p50, p99, local_p50) = (percentile(&faults, 0.5), percentile(&faults, 0.99), percentile(&local, 0.5));
    Ok(Run {
        workload: WorkloadKind::FaultLatency,
        way_in: "paged",
        repeats: None,
        bypassed: None,
        local_fraction: 1.0,
        prefetch: false,
        servers,
        transport,
        slowdown: p50 / local_p50,
        throughput_ratio: local_p50 / p50,
        local_ms: local.iter().sum::<f64>() / 1e3,
        far_ms: faults.iter().sum::<f64>() / 1e3,
        far_ns_per_item: p50 * 1e3,
        local_ns_per_item: local_p50 * 1e3,
        misses: stats.misses,
        prefetches: stats.prefetches,
        evictions: stats.evictions,
        p50_us: Some(p50),
        p99_us: Some(p99),
        far_bytes: None,
        far_resident_bytes: None,
        rss_bytes: None,
        values_checked: None,
        line_bytes: None,
        metadata_cache: None,
    })
}
