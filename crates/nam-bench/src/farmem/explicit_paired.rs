//! Paired, repeated measurements for the explicit-API rows (the paged rows have theirs in
//! `paired.rs`): every repetition runs the local baseline and then each setting's far-memory
//! run back to back (so all see the same machine load), checks that they computed the same
//! checksum, and each row reports the medians.

use super::paired::median;
use anyhow::{ensure, Result};
use nam_farmem::Stats;

/// Medians over the repetitions.
pub struct Paired {
    /// Median local time, ms.
    pub local_ms: f64,
    /// Median far time, ms.
    pub far_ms: f64,
    /// Median of the per-repetition ratios far / local.
    pub slowdown: f64,
    /// Those ratios, repetition by repetition.
    pub round_slowdowns: Vec<f64>,
    /// Counters of the last far run.
    pub stats: Stats,
    /// Runs that write their dirty lines back after the timed part ([`FarRun::flush_ms`]):
    /// the median flush time, ms, and the median of the per-repetition ratios
    /// (far + flush) / local.
    pub flush: Option<(f64, f64)>,
}

/// One far-memory run of an explicit workload.
pub struct FarRun {
    /// Time of the timed part, ms.
    pub ms: f64,
    /// Checksum of what it computed (must equal the local run's).
    pub sum: u64,
    /// Counters of the timed part.
    pub stats: Stats,
    /// Time of writing the dirty lines back to the servers after the timed part, ms, for
    /// workloads that leave dirty lines.
    pub flush_ms: Option<f64>,
}

/// Runs `local` and then `far(i)` for each of `settings` settings, `repeats` times (the
/// settings take turns going first, so none always inherits the local run's caches); each
/// returns (ms, checksum[, stats]). Settings compared with each other (prefetch on and off)
/// are so timed in the same rounds, after the same local run, and their ratio is not moved
/// by load that came and went between two measurements.
pub fn paired(
    what: &str,
    repeats: usize,
    settings: usize,
    mut local: impl FnMut() -> (f64, u64),
    mut far: impl FnMut(usize) -> Result<FarRun>,
) -> Result<Vec<Paired>> {
    let mut locals = Vec::new();
    let (mut fars, mut ratios) = (vec![Vec::new(); settings], vec![Vec::new(); settings]);
    let (mut flushes, mut flushed_ratios) = (vec![Vec::new(); settings], vec![Vec::new(); settings]);
    let mut stats = vec![Stats::default(); settings];
    for round in 0..repeats.max(1) {
        let (l_ms, l_sum) = local();
        locals.push(l_ms);
        for k in 0..settings {
            let i = (k + round) % settings;
            let FarRun { ms: f_ms, sum: f_sum, stats: s, flush_ms } = far(i)?;
            ensure!(f_sum == l_sum, "{what} computed {f_sum:#x} in far memory but {l_sum:#x} locally: data corrupted");
            fars[i].push(f_ms);
            ratios[i].push(f_ms / l_ms);
            if let Some(flush) = flush_ms {
                flushes[i].push(flush);
                flushed_ratios[i].push((f_ms + flush) / l_ms);
            }
            stats[i] = s;
        }
    }
    let local_ms = median(locals);
    Ok((0..settings)
        .map(|i| Paired {
            local_ms,
            far_ms: median(std::mem::take(&mut fars[i])),
            slowdown: median(ratios[i].clone()),
            round_slowdowns: std::mem::take(&mut ratios[i]),
            stats: stats[i],
            flush: (!flushes[i].is_empty())
                .then(|| (median(std::mem::take(&mut flushes[i])), median(std::mem::take(&mut flushed_ratios[i])))),
        })
        .collect())
}
