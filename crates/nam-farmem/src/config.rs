//! Knobs of the cache, the prefetcher and the extent table, with defaults chosen by
//! measurement (see `docs/farmem.md`); their limits are in [`crate::constants`].

use crate::constants::{
    FAR_BYTES_MAX, INTERLEAVE_BYTES_DEFAULT, LINE_BYTES_DEFAULT, LINE_BYTES_MAX, LINE_BYTES_MIN, OUTSTANDING_DEFAULT,
    OUTSTANDING_MAX, PREFETCH_DEPTH_DEFAULT, STREAMS_DEFAULT, STREAMS_MAX, STREAM_THRESHOLD_DEFAULT,
    STREAM_TIMEOUT_MISSES_DEFAULT, WAYS_DEFAULT, WAYS_MAX,
};
use crate::error::{Error, Result};

/// The stream prefetcher (Mao 2020 §7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchConfig {
    /// Whether it runs.
    pub enabled: bool,
    /// Entries of the fully associative stream table.
    pub streams: usize,
    /// Consecutive hits on a stream before it prefetches.
    pub threshold: u32,
    /// Demand misses without a match after which a stream is retrained.
    pub timeout_misses: u32,
    /// Lines (or pages) fetched ahead of the demand stream.
    pub depth: usize,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            enabled: true,
            streams: STREAMS_DEFAULT,
            threshold: STREAM_THRESHOLD_DEFAULT,
            timeout_misses: STREAM_TIMEOUT_MISSES_DEFAULT,
            depth: PREFETCH_DEPTH_DEFAULT,
        }
    }
}

/// Configuration of a [`crate::FarMemory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FarConfig {
    /// Bytes of far address space.
    pub far_bytes: u64,
    /// Local memory the cache (or the pager's resident set) may use for data.
    pub budget_bytes: u64,
    /// Cache line size, a power of two in 64 B..=64 KiB.
    pub line_bytes: u64,
    /// Ways per set.
    pub ways: usize,
    /// Entries of the metadata cache (0 turns it off); a power of two.
    pub metadata_cache_entries: usize,
    /// Misses in flight at once (MSHRs).
    pub outstanding_max: usize,
    /// Bytes of one interleaving granule: consecutive granules go to consecutive servers.
    pub interleave_bytes: u64,
    /// The prefetcher.
    pub prefetch: PrefetchConfig,
    /// Seed of the replacement policy's random choice.
    pub seed: u64,
}

impl FarConfig {
    /// `far_bytes` of far memory cached in `budget_bytes` of local memory, with the defaults.
    pub fn new(far_bytes: u64, budget_bytes: u64) -> FarConfig {
        FarConfig {
            far_bytes,
            budget_bytes,
            line_bytes: LINE_BYTES_DEFAULT,
            ways: WAYS_DEFAULT,
            metadata_cache_entries: 0,
            outstanding_max: OUTSTANDING_DEFAULT,
            interleave_bytes: INTERLEAVE_BYTES_DEFAULT,
            prefetch: PrefetchConfig::default(),
            seed: 0x6e61_6d66,
        }
    }

    /// Checks every value and returns the number of sets.
    pub fn validate(&self) -> Result<usize> {
        let bad = |m: String| Err(Error::Config(m));
        if self.far_bytes == 0 || self.far_bytes > FAR_BYTES_MAX {
            return bad(format!("far_bytes {} must be in 1..={FAR_BYTES_MAX}", self.far_bytes));
        }
        if !self.line_bytes.is_power_of_two() || !(LINE_BYTES_MIN..=LINE_BYTES_MAX).contains(&self.line_bytes) {
            return bad(format!(
                "line_bytes {} must be a power of two in {LINE_BYTES_MIN}..={LINE_BYTES_MAX}",
                self.line_bytes
            ));
        }
        if !self.interleave_bytes.is_power_of_two() || self.interleave_bytes < LINE_BYTES_MIN {
            return bad(format!(
                "interleave_bytes {} must be a power of two >= {LINE_BYTES_MIN}",
                self.interleave_bytes
            ));
        }
        if self.ways == 0 || self.ways > WAYS_MAX {
            return bad(format!("ways {} must be in 1..={WAYS_MAX}", self.ways));
        }
        if self.outstanding_max == 0 || self.outstanding_max > OUTSTANDING_MAX {
            return bad(format!("outstanding_max {} must be in 1..={OUTSTANDING_MAX}", self.outstanding_max));
        }
        if self.metadata_cache_entries != 0 && !self.metadata_cache_entries.is_power_of_two() {
            return bad(format!("metadata_cache_entries {} must be 0 or a power of two", self.metadata_cache_entries));
        }
        let p = &self.prefetch;
        if p.streams == 0 || p.streams > STREAMS_MAX || p.depth > OUTSTANDING_MAX || p.threshold == 0 {
            return bad(format!(
                "prefetch streams 1..={STREAMS_MAX}, depth <= {OUTSTANDING_MAX}, threshold >= 1: {p:?}"
            ));
        }
        let set_bytes = self.line_bytes * self.ways as u64;
        if self.budget_bytes < set_bytes {
            return Err(Error::BudgetTooSmall { budget_bytes: self.budget_bytes, unit_bytes: set_bytes });
        }
        Ok((self.budget_bytes / set_bytes) as usize)
    }
}
