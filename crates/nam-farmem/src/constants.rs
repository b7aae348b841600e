//! Every limit and tuning value of nam-farmem, in one place (the model is TigerBeetle's
//! `constants.zig`): what each bounds and why it has its value. Where one bounds another, a
//! compile-time assertion at the end says so, so a change that breaks the relation does not
//! build. Values a caller chooses per cache or region live in the config types
//! ([`crate::FarConfig`], [`crate::PrefetchConfig`], [`crate::PagerConfig`],
//! [`crate::ThrottleConfig`]); their limits and defaults are here.

use std::time::Duration;

// The far address space and the cache ([`crate::FarMemory`]).

/// Largest far address space one client maps (1 TiB): the extent table's size in extents
/// stays small, and it is the largest single allocation a server grants
/// (`nam_proto::limits::ALLOC_SIZE_MAX`).
pub const FAR_BYTES_MAX: u64 = 1 << 40;

/// Size of one extent of the far address space (Mao 2020 maps memory in large extents),
/// unless its interleaving granules across the servers need more
/// ([`crate::ExtentTable::extent_bytes`]). Each server's chunk of an extent is allocated,
/// and zeroed by the server, on the first write into it, while the write waits: with 1 GiB
/// extents that first write-back stalled for the zeroing of 512 MiB per server (seconds on
/// a loaded machine, past the client's reply timeout). 4 MiB keeps that stall near a
/// millisecond, and a region of the preload library's default size a few thousand chunks.
pub const EXTENT_BYTES: u64 = 4 << 20;

/// Smallest cache line: one CPU cache line; smaller lines would cost more in per-line
/// metadata than they save in transfer.
pub const LINE_BYTES_MIN: u64 = 64;

/// Largest cache line (64 KiB): no larger than one data chunk of the message path
/// (`nam_proto::limits::DATA_CHUNK_MAX`), so a line moves in one message there.
pub const LINE_BYTES_MAX: u64 = 64 * 1024;

/// Most outstanding misses (MSHRs, Mao 2020 §7.2) one cache may have: bounds the miss table
/// the cache scans on every miss.
pub const OUTSTANDING_MAX: usize = 256;

/// Most ways per set: the set is searched linearly on every access.
pub const WAYS_MAX: usize = 64;

/// Most streams the prefetcher's table tracks (Mao 2020 §7.3): the table is fully
/// associative and searched on every miss, so it stays small.
pub const STREAMS_MAX: usize = 64;

/// First window of a confirmed stream, in lines or pages; it doubles on each further hit up
/// to the configured depth, so a short stream does not fetch a whole depth it never reads.
pub const WINDOW_START: u64 = 4;

/// Most bytes of adjacent lines one span read (a batch of misses) or write ([`crate::FarMemory::flush`])
/// moves: a 64 KiB span costs one copy (shared memory) or one GET or PUT, the per-request
/// work spread over 16 lines of 4 KiB.
pub const WRITE_BACK_RUN_BYTES: u64 = 64 << 10;

/// Dirty bytes from which [`crate::FarMemory::flush`] writes back on two threads (8 MiB: well
/// above the cost of starting a thread).
pub const FLUSH_SPLIT_BYTES: u64 = 8 << 20;

/// Most bytes of missing lines one bypassing read fetches into the staging buffer: 16 KiB,
/// inside L1/L2 while the computation reads it, four 4 KiB lines per request.
pub const STAGING_BYTES: usize = 16 << 10;

/// Bytes of destination lines one miss of `FarMemory::zip_pieces_mut` fetches (in
/// `DestMode::Update`): 4 KiB, the line that missed and the missing ones after it in the
/// range. Small, so that the fetched lines are still in L1 when the computation updates
/// them: measured on the development machine (one pass over 128 MiB, the copy from the
/// server's mapped pool followed by `y += a * x` on the copied piece, best of 7 in thread
/// CPU time), 14.3 ms in 4 KiB pieces, 17.3 ms in 16 KiB and 17.9 ms in 64 KiB, against
/// 9.8 ms for the pass in local memory.
pub const UPDATE_FETCH_BYTES: u64 = 4 << 10;

/// Most bytes one call of the computation in `FarMemory::zip_pieces_mut` gets when the
/// lines continue a run in both places (`extend_run`): 256 KiB, long enough that the
/// per-call work is spread over 64 lines of 4 KiB, short enough to stay within one stretch
/// of a mapped pool and a few hundred microseconds of work.
pub const RUN_BYTES: u64 = 256 << 10;

// Defaults of `FarConfig`, `PrefetchConfig` and `ThrottleConfig` (`docs/farmem.md` lists them
// with their ranges).

/// Default cache line: one 4 KiB page, the pager's unit too.
pub const LINE_BYTES_DEFAULT: u64 = 4096;

/// Default ways per set.
pub const WAYS_DEFAULT: usize = 8;

/// Default misses in flight at once (MSHRs).
pub const OUTSTANDING_DEFAULT: usize = 32;

/// Default interleaving granule: one page, so consecutive pages go to consecutive servers.
pub const INTERLEAVE_BYTES_DEFAULT: u64 = 4096;

/// Default entries of the prefetcher's stream table.
pub const STREAMS_DEFAULT: usize = 8;

/// Default consecutive hits on a stream before it prefetches.
pub const STREAM_THRESHOLD_DEFAULT: u32 = 2;

/// Default demand misses without a match after which a stream is retrained.
pub const STREAM_TIMEOUT_MISSES_DEFAULT: u32 = 64;

/// Default lines fetched ahead of the demand stream (the cache's prefetcher; the pager's is
/// [`PAGER_PREFETCH_DEPTH`]).
pub const PREFETCH_DEPTH_DEFAULT: usize = 16;

/// Default resolved prefetch units per throttle interval.
pub const THROTTLE_INTERVAL_DEFAULT: u32 = 64;

/// Default accuracy (percent) below which the throttle steps one level down.
pub const THROTTLE_LOW_PERCENT_DEFAULT: u32 = 40;

/// Default accuracy (percent) above which the throttle steps one level up.
pub const THROTTLE_HIGH_PERCENT_DEFAULT: u32 = 60;

// The pager ([`crate::PagedRegion`]).

/// Page size of the pager (unless the region has huge pages, [`crate::PagerConfig::huge_pages`]).
pub const PAGE_BYTES: u64 = 4096;

/// Smallest local-memory budget of a region, in pages: the page just faulted stays while the
/// next one comes in (with one page, the second fault would find nothing it may evict).
pub const BUDGET_PAGES_MIN: u64 = 2;

/// Huge pages a region needs free beyond its budget. An install (`UFFDIO_COPY`) whose
/// source the kernel cannot read with page faults disabled copies into a temporary huge page
/// first and then into a second one it maps (`mfill_atomic_hugetlb` in Linux's
/// `mm/userfaultfd.c`), so one install may hold two pages for a moment: with exactly the
/// budget free, such an install fails with ENOMEM.
pub const INSTALL_SPARE_PAGES: u64 = 1;

/// Most bytes one eviction drops at once (one `madvise`, one TLB shootdown): 16 pages of
/// 4 KiB; one page where pages are larger.
pub const EVICT_RUN_BYTES: u64 = 16 * PAGE_BYTES;

/// Most bytes one prefetch installs with one `UFFDIO_COPY` before it looks for new faults
/// again: 16 pages of 4 KiB; one page where pages are larger.
pub const PREFETCH_RUN_BYTES: u64 = 16 * PAGE_BYTES;

/// Default low watermark of background reclaim, per mille of the budget
/// ([`crate::Watermarks`]): 2%.
pub const RECLAIM_LOW_PER_MILLE: u32 = 20;

/// Default high watermark of background reclaim, per mille of the budget: 5%, so that the
/// handler evicts a few runs per wake-up and a fault seldom finds the budget full.
pub const RECLAIM_HIGH_PER_MILLE: u32 = 50;

/// Fewest pages the low watermark keeps free: two eviction runs, for the faults that come
/// while the woken handler is being scheduled.
pub const RECLAIM_LOW_PAGES_MIN: u64 = 2 * EVICT_RUN_BYTES / PAGE_BYTES;

/// Fewest pages the high watermark keeps free: four eviction runs.
pub const RECLAIM_HIGH_PAGES_MIN: u64 = 4 * EVICT_RUN_BYTES / PAGE_BYTES;

/// Pages the pool of recycled pages holds at most: two eviction runs, so one run's pages
/// can be reused while the next is being dropped.
pub const POOL_PAGES: u64 = 2 * EVICT_RUN_BYTES / PAGE_BYTES;

/// Demand misses remembered to tell a stream's misses from random ones: as many as the
/// prefetcher has streams.
pub const RECENT_MISSES: usize = 8;

/// Pager prefetch depth (pages ahead of a stream's demand), chosen by measurement.
pub const PAGER_PREFETCH_DEPTH: usize = 64;

/// Pager prefetch depth with huge pages ([`crate::PagerConfig::with_huge_pages`]).
pub const HUGE_PREFETCH_DEPTH: usize = 2;

/// Most prefetch windows waiting at once (one per stream is the usual case).
pub const PENDING_MAX: usize = 16;

/// How long the handler busy-polls after its last work by default, chosen by measurement.
pub const PAGER_SPIN_US: u64 = 1000;

/// Longest average gap between faults for which the handler still busy-polls, µs: beyond
/// it, waking from `poll` costs less than the spinning it saves.
pub const SPIN_GAP_MAX: f64 = 50.0;

/// How long the handler does not busy-poll after two threads of the program took turns
/// faulting (see `Spin::fault_from` in the pager's handler): the threads then have work for
/// every core, and a spinning handler would take one from them.
pub const SPIN_BACKOFF: Duration = Duration::from_millis(50);

/// Average fault gaps the handler busy-polls for after its last work: a few, so that the
/// next fault of a steady stream finds it spinning, the window still capped by `spin_us`.
pub const SPIN_WINDOW_GAPS: f64 = 4.0;

/// Microseconds added to the busy-poll window, so that gaps near zero (faults back to back)
/// still leave the handler a moment to catch the next one.
pub const SPIN_WINDOW_SLACK_US: f64 = 10.0;

/// How long the idle handler thread (thread mode, not spinning) waits in `poll(2)` for a
/// fault before it runs its loop again, to see a request to stop and work that arrives
/// without a fault: 100 ms; a fault wakes it at once.
pub const HANDLER_POLL_MS: i32 = 100;

/// How often [`crate::PagedRegion::wait_settled`] looks whether the handler went idle: 1 ms,
/// fine enough for tests and benchmarks waiting on it, coarse enough not to compete with
/// the handler for a core.
pub const WAIT_SETTLED_POLL: Duration = Duration::from_millis(1);

/// Most signal-mode regions alive at once in a process: the SIGBUS handler finds its
/// region in a fixed table of this size, since it may not allocate or lock.
pub const SIGNAL_REGIONS_MAX: usize = 64;

/// Random resident pages drawn for each victim that came in one by one (the one installed
/// least often is taken). Two: paged FoF at 50% local memory missed 17,850-17,900 times a
/// round with two and 17,900-18,000 with four, against 19,400-19,600 with one.
pub const VICTIM_SAMPLE: usize = 2;

/// The newest stream pages drop-behind leaves alone (a stream may step back onto them).
pub const BEHIND_KEEP: usize = 4;

/// Most entries of the stream list one eviction looks at (prefetched pages not reached yet
/// are passed over and stay listed).
pub const BEHIND_SCAN: usize = 512;

/// Of 64 drop-behind victims, how many the pager takes from the oldest stream pages at
/// first ([`AGING_SHARE_MAX`] when they do not come back, 1 when they do; `pager/evict.rs`,
/// "Kept pages age out").
pub const AGING_SHARE_START: u32 = 8;

/// Most of 64 drop-behind victims taken from the oldest stream pages: half, so that a loop
/// that turns out to come back to them keeps most of its pages while the share adapts down.
pub const AGING_SHARE_MAX: u32 = 32;

/// Evictions of old stream pages after which the share is adapted: doubled if fewer than
/// half as many old pages came back meanwhile, else halved.
pub const AGING_WINDOW: u32 = 64;

/// Runs of pages one `process_madvise` call of an explicit eviction drops: one system call
/// for up to 64 runs, each run an `iovec` of the call.
pub const RUNS_PER_BATCH: usize = 64;

/// Bytes per zone of the write predictor (1 MiB; one page where pages are larger): coarse
/// enough that a zone learns from many pages, fine enough to tell a written array from a
/// read one.
pub const ZONE_BYTES: u64 = 1 << 20;

/// One in this many predicted-writable read misses is installed write-protected anyway, so
/// the zone's counter keeps learning when the zone's use changes.
pub const SAMPLE_EVERY: u32 = 16;

/// Shadow windows remembered at once by the prefetch accuracy count: a window that ages
/// out of the last this many with pages unreached counts them as wasted.
pub const SHADOW_WINDOWS: usize = 32;

/// Most prefetched pages one demand miss marks as used when it walks back over them: bounds
/// the work of one fault.
pub const WALK_MAX: u64 = 256;

/// Highest level of the prefetch throttle ([`crate::Throttle`]): the whole window is issued;
/// each level below halves it, and level 0 issues nothing, so four steps span whole to an
/// eighth.
pub const LEVEL_MAX: u32 = 4;

// A budget leaves room for the spare page an install may need, and for two pages at once.
const _: () = assert!(INSTALL_SPARE_PAGES < BUDGET_PAGES_MIN);
// Line sizes are powers of two from a CPU cache line to one data chunk of the message path.
const _: () = assert!(LINE_BYTES_MIN.is_power_of_two() && LINE_BYTES_MAX.is_power_of_two());
const _: () = assert!(LINE_BYTES_MIN <= LINE_BYTES_MAX);
const _: () = assert!(LINE_BYTES_MAX as usize <= nam_proto::limits::DATA_CHUNK_MAX);
// The far address space is whole extents, and no larger than one server allocation.
const _: () = assert!(EXTENT_BYTES.is_power_of_two() && FAR_BYTES_MAX.is_multiple_of(EXTENT_BYTES));
const _: () = assert!(FAR_BYTES_MAX <= nam_proto::limits::ALLOC_SIZE_MAX);
// Runs and zones are whole pages; the pool holds at least one eviction run.
const _: () = assert!(EVICT_RUN_BYTES.is_multiple_of(PAGE_BYTES) && PREFETCH_RUN_BYTES.is_multiple_of(PAGE_BYTES));
const _: () = assert!(ZONE_BYTES.is_multiple_of(PAGE_BYTES));
const _: () = assert!(POOL_PAGES >= EVICT_RUN_BYTES / PAGE_BYTES);
// A span of the write-back path holds whole lines of the largest size.
const _: () = assert!(WRITE_BACK_RUN_BYTES.is_multiple_of(LINE_BYTES_MAX));
// The streams remembered do not exceed what the prefetcher's table can track.
// The way index of the most recently used line is a u8.
const _: () = assert!(WAYS_MAX <= u8::MAX as usize + 1);
const _: () = assert!(RECENT_MISSES <= STREAMS_MAX && PENDING_MAX <= STREAMS_MAX);
// Huge pages prefetch no deeper than small ones; drop-behind keeps fewer pages than it scans.
const _: () = assert!(HUGE_PREFETCH_DEPTH <= PAGER_PREFETCH_DEPTH);
const _: () = assert!(BEHIND_KEEP < BEHIND_SCAN);
// The ageing share is a share of 64.
const _: () = assert!(1 <= AGING_SHARE_START && AGING_SHARE_START <= AGING_SHARE_MAX && AGING_SHARE_MAX <= 64);
// Reclaim's watermarks are a band.
const _: () = assert!(RECLAIM_LOW_PER_MILLE < RECLAIM_HIGH_PER_MILLE && RECLAIM_HIGH_PER_MILLE <= 1000);
const _: () = assert!(RECLAIM_LOW_PAGES_MIN < RECLAIM_HIGH_PAGES_MIN);
// A sample of one in `SAMPLE_EVERY` is a real sample, and the throttle has levels to step.
const _: () = assert!(SAMPLE_EVERY >= 2 && LEVEL_MAX >= 1);
// A flush splits onto two threads only above one write-back span; a zip run holds whole
// update fetches.
const _: () = assert!(FLUSH_SPLIT_BYTES > WRITE_BACK_RUN_BYTES && RUN_BYTES.is_multiple_of(UPDATE_FETCH_BYTES));

// The defaults lie within the bounds `FarConfig::validate` checks.
const _: () = assert!(LINE_BYTES_DEFAULT.is_power_of_two());
const _: () = assert!(LINE_BYTES_MIN <= LINE_BYTES_DEFAULT && LINE_BYTES_DEFAULT <= LINE_BYTES_MAX);
const _: () = assert!(1 <= WAYS_DEFAULT && WAYS_DEFAULT <= WAYS_MAX);
const _: () = assert!(1 <= OUTSTANDING_DEFAULT && OUTSTANDING_DEFAULT <= OUTSTANDING_MAX);
const _: () = assert!(INTERLEAVE_BYTES_DEFAULT.is_power_of_two() && INTERLEAVE_BYTES_DEFAULT >= LINE_BYTES_MIN);
const _: () = assert!(1 <= STREAMS_DEFAULT && STREAMS_DEFAULT <= STREAMS_MAX && STREAM_THRESHOLD_DEFAULT >= 1);
const _: () = assert!(PREFETCH_DEPTH_DEFAULT <= OUTSTANDING_MAX && PAGER_PREFETCH_DEPTH <= OUTSTANDING_MAX);
// The pager remembers as many recent misses as the prefetcher has streams.
const _: () = assert!(RECENT_MISSES == STREAMS_DEFAULT);
// The throttle's band is a band.
const _: () =
    assert!(THROTTLE_LOW_PERCENT_DEFAULT < THROTTLE_HIGH_PERCENT_DEFAULT && THROTTLE_HIGH_PERCENT_DEFAULT <= 100);
