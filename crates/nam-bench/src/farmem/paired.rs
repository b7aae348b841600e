//! Paired, repeated runs of a workload on local memory and in a paged far-memory region.
//!
//! One run of a few milliseconds says little on a shared 2-core machine: a compiler
//! starting elsewhere changes it by tens of percent. So both sides are set up once, a
//! warm-up round brings the region to its steady state (the pages a pass leaves resident,
//! no prefetches left over from the initialisation), and then every round times the local
//! side and the far side right after each other, each iterating the workload enough times
//! that the local side takes at least `min_ms`. The slowdown is the median of the rounds'
//! ratios; a load spike that hits one round moves one ratio, not the result. Every round
//! checks that both sides computed the same checksum. Settings compared with each other
//! (prefetch on and off) get one region each, timed in the same rounds after the same local
//! run, so their ratio is not moved by load that came and went between two measurements.

use super::workloads::Workload;
use super::FarSetting;
use anyhow::{bail, Result};
use nam_client::Client;
use nam_farmem::{FaultMode, PagedRegion, PagerConfig, Stats};
use std::sync::Arc;
use std::time::Instant;

/// How many rounds, and how long each side of a round runs at least.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Timed rounds (the median is taken over them).
    pub repeat: usize,
    /// Least local milliseconds per round (the workload is iterated to reach it).
    pub min_ms: f64,
}

/// The medians of a paired measurement.
#[derive(Debug, Clone)]
pub struct Paired {
    /// Median local milliseconds per round.
    pub local_ms: f64,
    /// Median far milliseconds per round.
    pub far_ms: f64,
    /// Median of the rounds' far / local ratios.
    pub slowdown: f64,
    /// Those ratios, round by round.
    pub round_slowdowns: Vec<f64>,
    /// Workload iterations per round.
    pub iterations: usize,
    /// Pager counters per round (averaged over the timed rounds).
    pub stats: Stats,
    /// Who served the faults (signal mode may have fallen back to the handler thread).
    pub fault_mode: FaultMode,
    /// The region's page size.
    pub page_bytes: u64,
}

pub use crate::harness::stats::median;

fn timed(w: &dyn Workload, mem: &mut [u8], iterations: usize) -> (f64, u64) {
    let t = Instant::now();
    let mut sum = 0;
    for _ in 0..iterations {
        sum = w.run(mem);
    }
    (t.elapsed().as_secs_f64() * 1e3, sum)
}

/// [`timed`] in `region` (whose memory `mem` is), serving the workload's requests for pages.
fn timed_far(w: &dyn Workload, region: &PagedRegion, mem: &mut [u8], iterations: usize) -> Result<(f64, u64)> {
    let mut failed = None;
    let mut fetch = |ranges: &[(u64, u64)]| {
        if let (None, Err(e)) = (&failed, region.fetch_ranges(ranges)) {
            failed = Some(e);
        }
    };
    let t = Instant::now();
    let mut sum = 0;
    for _ in 0..iterations {
        sum = w.run_paged(mem, &mut fetch);
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    match failed {
        Some(e) => bail!("asking the region for pages: {e}"),
        None => Ok((ms, sum)),
    }
}

/// Measures `w` locally and in one region over `client` per setting of `settings` (prefetch
/// on and off, say), all in the same rounds: each round times the local side and then every
/// region right after it, so the settings are compared under the same load and against the
/// same local runs.
pub fn measure(w: &dyn Workload, client: Arc<Client>, settings: &[FarSetting], rounds: Rounds) -> Result<Vec<Paired>> {
    let footprint = w.footprint();
    // Both sides on huge pages when some region is: the local side asks for transparent
    // huge pages, so that no row gains its fewer TLB misses over the baseline.
    let local_huge = settings.iter().any(|s| s.huge_pages);
    let mut local_buf = LocalBuffer::new(footprint, local_huge)?;
    let local = local_buf.as_mut_slice();
    w.init(local);
    let regions = settings.iter().map(|s| region(w, client.clone(), s)).collect::<Result<Vec<_>>>()?;
    // SAFETY: the only views of the regions, dropped before them.
    let mut fars: Vec<&mut [u8]> = regions.iter().map(|r| unsafe { &mut r.as_slice_mut()[..footprint] }).collect();
    for far in fars.iter_mut() {
        w.init(far);
    }
    let iterations = warm_up(w, local, &mut fars, &regions, rounds.min_ms)?;
    let before: Vec<Stats> = regions.iter().map(|r| r.stats()).collect();
    let mut locals = Vec::new();
    let (mut far_ms, mut ratios) = (vec![Vec::new(); fars.len()], vec![Vec::new(); fars.len()]);
    for round in 0..rounds.repeat.max(1) {
        let (lms, l) = timed(w, local, iterations);
        locals.push(lms);
        // The regions take turns going first, so that none always runs right after the
        // local side (whose caches and frequency it would inherit).
        for k in 0..fars.len() {
            let i = (k + round) % fars.len();
            let (fms, f) = timed_far(w, &regions[i], fars[i], iterations)?;
            check(&format!("round {round}"), l, f)?;
            far_ms[i].push(fms);
            ratios[i].push(fms / lms);
        }
    }
    let n = rounds.repeat.max(1) as u64;
    let mut out = Vec::new();
    for (i, region) in regions.iter().enumerate() {
        let after = region.stats();
        let stats = Stats {
            misses: (after.misses - before[i].misses) / n,
            prefetches: (after.prefetches - before[i].prefetches) / n,
            evictions: (after.evictions - before[i].evictions) / n,
            ..after
        };
        out.push(Paired {
            local_ms: median(locals.clone()),
            far_ms: median(std::mem::take(&mut far_ms[i])),
            slowdown: median(ratios[i].clone()),
            round_slowdowns: std::mem::take(&mut ratios[i]),
            iterations,
            stats,
            fault_mode: region.fault_mode(),
            page_bytes: region.page_bytes(),
        });
    }
    Ok(out)
}

/// Fails when the far side computed another checksum than the local side.
fn check(what: &str, l: u64, f: u64) -> Result<()> {
    if l != f {
        bail!("{what}: computed {f:#x} in far memory but {l:#x} locally: data corrupted");
    }
    Ok(())
}

/// Warm-up round: reaches the steady state and calibrates the iterations. A short
/// workload gets two more paired runs, and the fastest local run sets the count, so one
/// slow first run does not leave the rounds shorter than `min_ms`.
fn warm_up(
    w: &dyn Workload,
    local: &mut [u8],
    fars: &mut [&mut [u8]],
    regions: &[PagedRegion],
    min_ms: f64,
) -> Result<usize> {
    let mut warm_ms = f64::INFINITY;
    for pass in 0..3 {
        let (ms, l) = timed(w, local, 1);
        warm_ms = warm_ms.min(ms);
        for (far, region) in fars.iter_mut().zip(regions) {
            check("warm-up", l, timed_far(w, region, far, 1)?.1)?;
        }
        if pass == 0 && warm_ms >= min_ms {
            break;
        }
    }
    Ok(((min_ms / warm_ms.max(1e-3)).ceil() as usize).clamp(1, 1000))
}

fn region(w: &dyn Workload, client: Arc<Client>, s: &FarSetting) -> Result<PagedRegion> {
    let footprint = w.footprint();
    let mut config = PagerConfig::new(footprint as u64, ((footprint as f64 * s.fraction) as u64).max(64 * 4096));
    // The pager's own prefetch settings (its deeper window), only switched on or off: the
    // cache's defaults (a window of 16) are not the pager's.
    config.prefetch.enabled = s.prefetch;
    config.fault_mode = s.mode;
    config.throttle.enabled = s.throttle;
    config.spin_us = s.spin_us.unwrap_or(config.spin_us);
    if s.huge_pages {
        config = config.with_huge_pages();
    }
    Ok(PagedRegion::new(client, config)?)
}

/// The local side's memory: an anonymous mapping, with transparent huge pages asked for
/// (`MADV_HUGEPAGE`) when `huge`.
struct LocalBuffer {
    base: *mut u8,
    len: usize,
}

impl LocalBuffer {
    fn new(len: usize, huge: bool) -> Result<LocalBuffer> {
        let len = len.max(1);
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!("mmap of {len} bytes for the local side: {}", std::io::Error::last_os_error());
        }
        if huge {
            // SAFETY: advice on the mapping made above; refused advice changes nothing.
            unsafe { libc::madvise(base, len, libc::MADV_HUGEPAGE) };
        }
        Ok(LocalBuffer { base: base.cast(), len })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping of `len` bytes made in `new`, borrowed mutably from its owner.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

impl Drop for LocalBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer borrowed.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
