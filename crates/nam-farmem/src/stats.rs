//! Counters of a cache or pager.

/// What a [`crate::FarMemory`] or [`crate::PagedRegion`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Demand accesses found in local memory.
    pub hits: u64,
    /// Demand accesses that had to fetch (or, for the pager, page faults on missing pages).
    pub misses: u64,
    /// Demand misses merged into a fetch already in flight for the same line.
    pub merged: u64,
    /// Lines or pages fetched ahead by the prefetcher.
    pub prefetches: u64,
    /// Demand accesses that hit a prefetched line before anything else touched it (pager:
    /// prefetched or shadow pages the demand reached, as the throttle counts them).
    pub prefetch_hits: u64,
    /// Prefetched lines or pages that left local memory untouched (pager: also shadow pages
    /// the demand never reached; `pager/accuracy.rs`).
    pub prefetch_wasted: u64,
    /// Lines or pages removed from local memory.
    pub evictions: u64,
    /// Dirty lines or pages written back to the servers.
    pub writebacks: u64,
    /// Streaming reads of missing lines served from a staging copy without allocating a
    /// line, because every way of the set that could be replaced was dirty.
    pub bypassed: u64,
    /// Streaming reads of missing lines read in place in the server's memory, without a
    /// copy or a line (the server's pool is mapped here: UCX shared memory's direct path).
    pub in_place: u64,
    /// Full-line writes that skipped the fetch.
    pub full_line_writes: u64,
    /// Lookups answered by the metadata cache.
    pub metadata_hits: u64,
    /// Lookups that scanned the set's tags.
    pub metadata_misses: u64,
    /// Write faults on write-protected pages (pager: first write to a clean page).
    pub write_faults: u64,
    /// Read misses installed writable because their zone is usually written after a read
    /// (pager; `PagerConfig::predict_writes`).
    pub predicted_writes: u64,
    /// Pages installed by moving recycled pages in rather than by copying into new ones
    /// (pager, Linux 6.8+; `pager/pool.rs`).
    pub recycled: u64,
    /// Pages the pager's background reclaim evicted (its handler thread, between the
    /// watermarks: `PagerConfig::watermarks`).
    pub reclaim_evictions: u64,
    /// Pages evicted because an install found the budget full: by the faulting thread
    /// itself in signal mode (what background reclaim is there to avoid), or by the handler
    /// before a fault or prefetch it serves in thread mode.
    pub full_evictions: u64,
    /// Pages the pager installed from zeros instead of fetching them: never written back
    /// (a program's first touch of new memory), or their servers' copy dead (given up with
    /// `MADV_DONTNEED`, or freed: `PagedRegion::discard_range`).
    pub zero_fills: u64,
    /// Resident pages the pager dropped without a write-back because the program gave
    /// them up (unmapped: `PagedRegion::discard_range`); not counted in `evictions`.
    pub given_up: u64,
    /// Misses in flight now.
    pub inflight: u64,
    /// Most misses that were ever in flight at once.
    pub inflight_max: u64,
}
