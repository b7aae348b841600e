//! The latency of a 4 KiB remote page fault: every page written (so it lives on the
//! servers), then all evicted (written back and dropped), then read once each in random
//! order with each read timed, the prefetcher off. Each timed read is a real first touch of
//! a page whose data is only on the servers: the run checks that the pager counted exactly
//! one miss per page and that every page read back its own value. The baseline is the same
//! read once the pages are resident. Both fault modes (handler thread, SIGBUS in the
//! faulting thread) are measured the same way.
//!
//! The floor is measured in the same run, before the faults: as many bare 4 KiB blocking
//! `Client::get`s through the same client, at random pages of allocations on the same
//! servers (round robin over them, as the pages are interleaved). A fault cannot cost less
//! than that transfer; the report gives both medians and their difference, what the fault
//! itself (kernel delivery, install, wake-up) adds. The kernel's part alone is measured in
//! the same run too (`fault_floor.rs`: an empty handler of the same mode installing pages
//! from local memory), so the report can say what is left for nam's own work per fault.
//!
//! With a local fraction under 1 (`--fault-local-fraction`), the region's budget is that
//! fraction of its pages: once the budget is full every fault needs a free page, which the
//! pager's background reclaim is to have ready (issue 27: p99 within 3x the median at 25%).
//! The baseline is then the same touch of a local buffer, and the row says how many pages
//! reclaim evicted in the background and how many the faults had to evict themselves.

use super::{Run, Transport, WorkloadKind};
use anyhow::Result;
use nam_client::{AllocOptions, Client};
use nam_farmem::{FaultMode, PagedRegion, PagerConfig, PrefetchConfig};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Instant;

const PAGE: usize = 4096;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Reads each page in `order`, timing each read in microseconds; returns the times sorted
/// and the number of pages that did not hold their own value.
pub(super) fn touch_all(mem: &[u8], order: &[usize]) -> (Vec<f64>, usize) {
    let mut times = Vec::with_capacity(order.len());
    let mut wrong = 0;
    for &p in order {
        let t = Instant::now();
        // SAFETY: in bounds; volatile so the load is not hoisted out of the timing.
        let v = unsafe { std::ptr::read_volatile(mem.as_ptr().add(p * PAGE + 8)) };
        times.push(t.elapsed().as_secs_f64() * 1e6);
        wrong += (v != p as u8) as usize;
    }
    times.sort_by(f64::total_cmp);
    (times, wrong)
}

/// Times `count` blocking 4 KiB gets at random pages of `pages` pages spread over every
/// server of `client`; returns the times in microseconds, sorted.
fn bare_gets(client: &Client, pages: usize, count: usize) -> Result<Vec<f64>> {
    let servers = client.server_count();
    let per_server = pages.div_ceil(servers);
    let allocs = (0..servers)
        .map(|s| {
            client
                .alloc((per_server * PAGE) as u64, &AllocOptions { align: 4096, server: Some(s), ..Default::default() })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut buffer = vec![1u8; PAGE];
    for a in &allocs {
        for p in 0..per_server {
            client.put(a, (p * PAGE) as u64, &buffer)?;
        }
    }
    client.flush()?;
    let mut order: Vec<usize> = (0..per_server * servers).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(4095));
    let mut times = Vec::with_capacity(count);
    for &p in order.iter().cycle().take(count) {
        let t = Instant::now();
        client.get(&allocs[p % servers], ((p / servers) * PAGE) as u64, &mut buffer)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    for a in &allocs {
        client.free(a)?;
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// Measures remote page faults over `client`, served as `mode` says.
pub fn measure(
    client: Arc<Client>,
    (transport, servers): (Transport, usize),
    scale: f64,
    mode: FaultMode,
    spin_us: Option<u64>,
    (fraction, reclaim): (f64, bool),
) -> Result<Run> {
    let pages = ((4096.0 * scale) as usize).max(256);
    let bytes = (pages * PAGE) as u64;
    let budget = if fraction >= 1.0 { bytes } else { ((bytes as f64 * fraction) as u64).max(2 * PAGE as u64) };
    let mut config = PagerConfig::new(bytes, budget);
    config.prefetch = PrefetchConfig { enabled: false, ..Default::default() };
    config.fault_mode = mode;
    config.evict_ahead = reclaim;
    config.spin_us = spin_us.unwrap_or(config.spin_us);
    let gets = bare_gets(&client, pages, pages)?;
    let region = PagedRegion::new(client, config)?;
    let fault_mode = region.fault_mode(); // signal mode may have fallen back to thread mode
    let kernel_floor = super::fault_floor::median_us(fault_mode, pages)?;
    // SAFETY: the only view of the region, dropped before it.
    let mem = unsafe { region.as_slice_mut() };
    for p in 0..pages {
        mem[p * PAGE + 8] = p as u8;
    }
    region.evict_all()?;
    anyhow::ensure!(region.resident_pages() == 0, "fault-latency: pages still resident after evict_all");
    region.wait_settled(std::time::Duration::from_secs(1));
    let before = region.stats();
    let mut order: Vec<usize> = (0..pages).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(4096));
    let (faults, wrong) = touch_all(mem, &order);
    let misses = region.stats().misses - before.misses;
    anyhow::ensure!(wrong == 0, "fault-latency: {wrong} pages read back wrong after their fault");
    anyhow::ensure!(misses == pages as u64, "fault-latency: {misses} misses for {pages} first touches");
    let stats = region.stats();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(4097));
    // With a budget under the region, a second pass would fault again: the baseline touches
    // a local copy instead.
    let local_copy: Vec<u8> = if fraction >= 1.0 { Vec::new() } else { mem.to_vec() };
    let (local, _) = touch_all(if fraction >= 1.0 { mem } else { &local_copy }, &order);
    let (p50, p99, local_p50) = (percentile(&faults, 0.5), percentile(&faults, 0.99), percentile(&local, 0.5));
    let mut run = Run::basic(
        WorkloadKind::FaultLatency,
        fraction.min(1.0),
        false,
        servers,
        transport,
        local.iter().sum::<f64>() / 1e3,
        faults.iter().sum::<f64>() / 1e3,
        pages as f64,
    );
    run.slowdown = p50 / local_p50;
    run.throughput_ratio = local_p50 / p50;
    run.far_ns_per_item = p50 * 1e3;
    run.local_ns_per_item = local_p50 * 1e3;
    run.misses = misses;
    run.prefetches = stats.prefetches;
    run.evictions = stats.evictions - before.evictions;
    run.reclaim_evictions = Some(stats.reclaim_evictions - before.reclaim_evictions);
    run.full_evictions = Some(stats.full_evictions - before.full_evictions);
    run.reclaim = Some(reclaim);
    run.p50_us = Some(p50);
    run.p99_us = Some(p99);
    run.get_p50_us = Some(percentile(&gets, 0.5));
    run.get_p99_us = Some(percentile(&gets, 0.99));
    run.kernel_floor_p50_us = Some(kernel_floor);
    run.fault_mode = Some(super::mode_name(fault_mode));
    Ok(run)
}
