//! Paired, repeated measurements for the explicit-API rows (the paged rows have theirs in
//! `paired.rs`): every repetition runs the local
//! baseline and then the far-memory run back to back (so both see the same machine load),
//! checks that they computed the same checksum, and the row reports the medians.

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
    /// Counters of the last far run.
    pub stats: Stats,
}

/// Runs `local` then `far` `repeats` times; each returns (ms, checksum[, stats]).
pub fn paired(
    what: &str,
    repeats: usize,
    mut local: impl FnMut() -> (f64, u64),
    mut far: impl FnMut() -> Result<(f64, u64, Stats)>,
) -> Result<Paired> {
    let (mut locals, mut fars, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut stats = Stats::default();
    for _ in 0..repeats.max(1) {
        let (l_ms, l_sum) = local();
        let (f_ms, f_sum, s) = far()?;
        ensure!(f_sum == l_sum, "{what} computed {f_sum:#x} in far memory but {l_sum:#x} locally: data corrupted");
        locals.push(l_ms);
        fars.push(f_ms);
        ratios.push(f_ms / l_ms);
        stats = s;
    }
    Ok(Paired { local_ms: median(locals), far_ms: median(fars), slowdown: median(ratios), stats })
}
