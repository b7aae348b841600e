//! [`PagedRegion`]: the transparent way in. An anonymous mapping registered with
//! userfaultfd. By default ([`FaultMode::Signal`]) the faulting thread serves its own fault
//! in a SIGBUS handler, prefetches included, and a handler thread only evicts ahead now and
//! then; in [`FaultMode::Thread`] the handler thread serves the faults and does the rest:
//!
//! - a **missing** page is fetched from the servers (span read of one page) and installed
//!   with `UFFDIO_COPY`, read-only unless the fault was a write, and the stream prefetcher
//!   installs the pages ahead of a detected stream;
//! - a run of pages to be installed writable goes in on **recycled pages** where the kernel
//!   can move pages (Linux 6.8+): fetched into a small pool that evicted stream runs were
//!   moved into, then moved in, with no page allocated or freed (`pool.rs`);
//! - a **write to a read-only** page marks it dirty and lifts the protection (so only pages
//!   written since they were fetched are written back); in 1 MiB zones where reads are
//!   usually followed by writes, read misses are installed writable at once (`writes.rs`);
//! - the **resident set** stays within the budget: before installing, the pages a stream
//!   brought in most recently and has gone through are evicted first (drop-behind: a loop
//!   over more than the budget keeps the pages it came in with first), then runs of resident
//!   pages starting at random ones (other than the most recently faulted), in batches: write-protected, dirty pages written back, then dropped with one
//!   `MADV_DONTNEED` (their next access faults again); a run only takes pages that came in
//!   with a stream, so random victims stay random (`evict.rs`); between faults the handler
//!   evicts ahead, so that the next misses find room;
//! - the handler **busy-polls** the descriptor after its last work while faults come close
//!   together (adaptive, at most `spin_us`), so a fault in a busy phase is served without a
//!   wake-up of the handler, and sleeps when they come far apart, leaving the cores to the
//!   program; between faults it installs the prefetcher's pages in the background, ahead of
//!   the faulting streams;
//! - in [`FaultMode::Signal`] the faulting thread serves its own fault in a SIGBUS handler
//!   (no thread switch per fault; see `signal.rs` for what it costs, and [`FaultMode`] for
//!   when a region falls back to thread mode), and installs the prefetch windows itself, a
//!   run at a time as its demand reaches them: waking the handler thread for them put the
//!   memory map on a second core, and every eviction then cost a TLB-shootdown IPI.
//!
//! A region can have the kernel's **huge pages** instead of 4 KiB pages
//! ([`PagerConfig::with_huge_pages`]): then every one of the steps above moves 2 MiB.
//!
//! A fault that cannot be served (its server died) cannot be returned to the program as an
//! error: the handler prints what failed, naming the server, and ends the process with
//! [`crate::FATAL_EXIT_STATUS`] rather than let the faulting thread hang or read wrong data.

use crate::config::PrefetchConfig;
use crate::constants::{
    BUDGET_PAGES_MIN, EVICT_RUN_BYTES, FAR_BYTES_MAX, HUGE_PREFETCH_DEPTH, INSTALL_SPARE_PAGES, PAGER_PREFETCH_DEPTH,
    PAGER_SPIN_US, PAGE_BYTES, PREFETCH_RUN_BYTES, RECENT_MISSES, RECLAIM_HIGH_PAGES_MIN, RECLAIM_HIGH_PER_MILLE,
    RECLAIM_LOW_PAGES_MIN, RECLAIM_LOW_PER_MILLE, WAIT_SETTLED_POLL,
};
use crate::cpu_latency::CpuLatencyBound;
use crate::error::{Error, Result};
use crate::prefetch::StreamPrefetcher;
use crate::span::SpanService;
use crate::stats::Stats;
use crate::throttle::ThrottleConfig;
use crate::uffd::Uffd;
use nam_client::Client;
use parking_lot::Mutex;
use rand::SeedableRng;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

mod accuracy;
mod evict;
mod handler;
mod hints;
mod huge;
mod pool;
mod signal;
mod writes;

pub use huge::{free_huge_pages, huge_page_bytes};

/// Who serves a page fault of a [`PagedRegion`].
///
/// [`FaultMode::Signal`] is the default: it serves a fault in about a quarter of the time
/// (no thread switch; docs/benchmarks-farmem-paging.md). A region asked for signal mode
/// falls back to thread mode, with a warning naming the reason, when the kernel lacks
/// `UFFD_FEATURE_SIGBUS`, when the SIGBUS handler cannot be installed, or when
/// [`SIGNAL_REGIONS_MAX`](crate::constants::SIGNAL_REGIONS_MAX) signal-mode regions exist already; [`PagedRegion::fault_mode`]
/// says which mode a region got. Choose [`FaultMode::Thread`] when region memory is passed
/// to system calls (`read(fd, region, n)`, `recv`, `write` of a page not resident): in
/// signal mode those fail with `EFAULT` instead of waiting for the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultMode {
    /// The region's handler thread, woken by the kernel; the faulting thread sleeps until
    /// the page is installed. System calls that touch missing pages wait like the program.
    Thread,
    /// The faulting thread itself, in a SIGBUS handler (`UFFD_FEATURE_SIGBUS`): no thread
    /// switch per fault, but a system call that touches a missing page fails with
    /// `EFAULT` (see the `signal` module for the other conditions).
    #[default]
    Signal,
}

/// Configuration of a [`PagedRegion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagerConfig {
    /// Size of the region (rounded up to pages).
    pub bytes: u64,
    /// Most bytes of the region resident in local memory at once.
    pub budget_bytes: u64,
    /// Prefetcher (units are pages).
    pub prefetch: PrefetchConfig,
    /// Interleaving granule across servers.
    pub interleave_bytes: u64,
    /// Most microseconds the handler busy-polls for faults after its last work before it
    /// sleeps in `poll(2)` (0: always sleep). Spinning saves the handler's wake-up on every
    /// fault of a busy phase, at the price of a core: the handler spins only while the
    /// recent gaps between faults are short (a few gaps' worth, capped by this).
    pub spin_us: u64,
    /// Who serves faults (default [`FaultMode::Signal`], see there for the fallback).
    pub fault_mode: FaultMode,
    /// Install a read miss writable (and dirty) when reads in its 1 MiB zone have mostly
    /// been followed by writes (`pager/writes.rs`): spares the write-protect fault that
    /// would follow, at the price of writing the page back at eviction even if unchanged.
    pub predict_writes: bool,
    /// Background reclaim: the handler thread evicts between the [`PagerConfig::watermarks`],
    /// so that a faulting thread normally finds a free page and does not evict (nor write
    /// back) itself. Off, a fault that finds the budget full evicts a run itself.
    pub evict_ahead: bool,
    /// How much of the budget background reclaim keeps free ([`Watermarks`]).
    pub watermarks: Watermarks,
    /// Feedback-directed throttling of the prefetcher by its measured accuracy
    /// (`crate::throttle`, `pager/accuracy.rs`).
    pub throttle: ThrottleConfig,
    /// While the region lives, keep idle cores within this many microseconds of waking
    /// ([`crate::CpuLatencyBound`]; `None`, the default, leaves the machine as it is). In
    /// thread mode a faulting thread sleeps and its core idles until the page is in: with
    /// `Some(0)` a thread-mode fault over shared memory took 6.0 us instead of 15.9 us on
    /// the benchmark machine. Needs root or write access to `/dev/cpu_dma_latency`, and
    /// costs power (idle cores poll).
    pub cpu_latency_us: Option<u32>,
    /// Back the region with the kernel's huge pages (hugetlb; 2 MiB on x86-64) instead of
    /// 4 KiB pages: the pager's unit becomes the huge page, so a fault, an install, an
    /// eviction and a write-back each move 2 MiB. Streaming work pays the kernel's per-page
    /// costs 512 times less often; random access fetches 2 MiB for every miss. The budget
    /// must fit in the huge pages reserved and free (`vm.nr_hugepages`), checked when the
    /// region is made ([`crate::Error::HugePagesUnavailable`]). Set it with
    /// [`PagerConfig::with_huge_pages`], which also picks the prefetch depth for them.
    pub huge_pages: bool,
}

impl PagerConfig {
    /// A region of `bytes` with `budget_bytes` resident at most, and the default prefetcher.
    pub fn new(bytes: u64, budget_bytes: u64) -> PagerConfig {
        let prefetch = PrefetchConfig { depth: PAGER_PREFETCH_DEPTH, ..PrefetchConfig::default() };
        PagerConfig {
            bytes,
            budget_bytes,
            prefetch,
            interleave_bytes: PAGE_BYTES,
            spin_us: PAGER_SPIN_US,
            fault_mode: FaultMode::default(),
            predict_writes: true,
            evict_ahead: true,
            watermarks: Watermarks::default(),
            throttle: ThrottleConfig::default(),
            cpu_latency_us: None,
            huge_pages: false,
        }
    }

    /// The same region on huge pages ([`PagerConfig::huge_pages`]), prefetching
    /// [`HUGE_PREFETCH_DEPTH`] pages ahead, and interleaved across servers by the huge page.
    pub fn with_huge_pages(self) -> PagerConfig {
        let prefetch = PrefetchConfig { depth: HUGE_PREFETCH_DEPTH, ..self.prefetch };
        PagerConfig { huge_pages: true, prefetch, ..self }
    }
}

/// The free part of the budget that background reclaim keeps (Linux's `kswapd` between
/// its low and high watermarks, Gorman 2004, §2.2.1): when a fault leaves fewer than `low` pages of
/// the budget free, the handler thread is woken and evicts, a run at a time, until `high`
/// pages are free; a fault finds the budget full (and evicts itself, as a last resort) only
/// when faults came faster than the handler could evict.
///
/// Both are per mille of the budget, and each is at least [`RECLAIM_LOW_PAGES_MIN`] or
/// [`RECLAIM_HIGH_PAGES_MIN`] pages (a burst of faults between two wake-ups of the handler
/// must find room), and at most a quarter of the budget (free pages are local memory the
/// program cannot use). The gap between them makes the handler evict in runs
/// ([`EVICT_RUN_BYTES`]) rather than a page per fault: one `madvise` and one TLB flush per
/// run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermarks {
    /// Below this many free pages (per mille of the budget) the handler starts evicting.
    pub low_per_mille: u32,
    /// The handler evicts until this many pages (per mille of the budget) are free.
    pub high_per_mille: u32,
}

impl Default for Watermarks {
    fn default() -> Self {
        Watermarks { low_per_mille: RECLAIM_LOW_PER_MILLE, high_per_mille: RECLAIM_HIGH_PER_MILLE }
    }
}

impl Watermarks {
    /// The low and high watermarks in pages for a budget of `budget_pages` (see the type's
    /// documentation for the bounds); `high > low` unless the budget is too small to keep
    /// any page free (then both are 0 and faults evict themselves).
    pub fn pages(&self, budget_pages: u64) -> (u64, u64) {
        let cap = budget_pages / 4;
        let of = |per_mille: u32, min: u64| (budget_pages * per_mille.min(1000) as u64 / 1000).max(min).min(cap);
        let high = of(self.high_per_mille.max(self.low_per_mille), RECLAIM_HIGH_PAGES_MIN);
        let low = of(self.low_per_mille, RECLAIM_LOW_PAGES_MIN).min(high.saturating_sub(1));
        (low, high)
    }
}

const MISSING: u8 = 0;
const CLEAN: u8 = 1;
const DIRTY: u8 = 2;

/// Pages and their states; locked by the handler for each fault and by `flush`.
struct Pages {
    state: Vec<u8>,
    /// Resident pages, and each page's index in it plus one (0 when not resident: the
    /// vector starts as zeros the allocator need not write, so the address space of a large
    /// region costs no local memory for it until its pages are used).
    resident: Vec<u32>,
    position: Vec<u32>,
    /// Pages whose contents the servers hold: written back since the region was made, and
    /// not given up since (to read as zeros, `madvise(MADV_DONTNEED)`, or freed by the
    /// program, [`PagedRegion::discard_range`]). A missing page the servers do not hold
    /// reads as zeros, as a fresh anonymous page does in the kernel: it is installed from
    /// zeros without a fetch (`handler.rs`), clean for a read (then dropped at eviction
    /// without a write-back, and installed from zeros again). Fetching it would read
    /// zeros, or dead contents, over the network only to be overwritten: a program's first
    /// touch of new memory, the commonest miss of all, would cost a round trip whenever an
    /// earlier write-back had allocated its chunk. Starts as zeros (held by none), which the
    /// allocator need not write.
    held: Vec<bool>,
    /// Resident pages of space the program freed and has not been handed again
    /// ([`PagedRegion::free_range`]): their contents are dead, so eviction drops them without
    /// a write-back (`evict.rs`); handed out again ([`PagedRegion::reuse_range`]), they are
    /// live again, resident, with no fault. Eviction does not take them first: a heap hands
    /// freed space out again soon (first fit), and Redis with 128 KiB values, whose blocks
    /// are this library's, missed a fifth more often when the freed blocks went first.
    dead: Vec<bool>,
    /// Whether each page came in with a stream when it was last installed: prefetched, or
    /// a demand miss that a stream matched or that followed one of the last few misses
    /// (eviction runs only continue over such pages).
    streamed: Vec<bool>,
    /// How often each page was installed so far (saturating): of two random victims that
    /// came in one by one, the one installed less often goes (`evict.rs`).
    installs: Vec<u16>,
    /// The last [`RECENT_MISSES`] demand misses (a miss right after one of them is a
    /// stream's).
    recent_misses: [u32; RECENT_MISSES],
    last_fault: u32,
    prefetcher: StreamPrefetcher,
    /// What became of the prefetches, and the throttle it feeds.
    accuracy: accuracy::Accuracy,
    /// Which zones' read misses are installed writable.
    writes: writes::WritePredictor,
    /// Prefetch windows not installed yet, served between faults.
    pending: VecDeque<Pending>,
    /// Pages that came in with a stream, in the order they came in, with their install
    /// count then (an entry whose page has come in again since is stale): the victims taken
    /// first, the most recent the demand has gone through first (`evict.rs`, drop-behind).
    behind: VecDeque<(u32, u16)>,
    /// How many of drop-behind's victims come from the oldest stream pages instead, learnt
    /// from whether those come back (`evict.rs`, "Kept pages age out").
    aging: evict::Aging,
    stats: Stats,
    rng: rand::rngs::SmallRng,
    bounce: Vec<u8>,
    /// Recycled pages for writable runs, where the kernel can move pages (`pool.rs`).
    pool: Option<pool::Pool>,
    /// Background reclaim is evicting: fewer than the low watermark's pages were free, and
    /// not yet the high watermark's (`evict.rs`).
    reclaiming: bool,
}

/// Pages `next..end` to prefetch; `dirty` when the stream writes (installed writable).
#[derive(Debug, Clone, Copy)]
struct Pending {
    next: u64,
    end: u64,
    dirty: bool,
}

struct Shared {
    uffd: Uffd,
    span: SpanService,
    base: u64,
    pages: u64,
    /// Bytes per page: [`PAGE_BYTES`], or the huge page size.
    page_bytes: u64,
    /// Most pages one prefetch installs ([`PREFETCH_RUN_BYTES`]) and one eviction drops
    /// ([`EVICT_RUN_BYTES`]) at once, one at least.
    prefetch_run_max: u64,
    evict_run_max: u64,
    fault_mode: FaultMode,
    budget_pages: usize,
    evict_ahead: bool,
    /// Background reclaim's watermarks in free pages ([`Watermarks::pages`]).
    free_low: usize,
    free_high: usize,
    /// An eventfd that wakes the handler thread to reclaim (signal mode: the faulting
    /// threads write it when a fault leaves fewer than `free_low` pages free).
    reclaim_fd: std::os::fd::OwnedFd,
    /// The eventfd was written and the handler has not taken the wake-up yet: one write
    /// per wake-up, not one per fault.
    reclaim_kicked: AtomicBool,
    spin: std::time::Duration,
    state: Mutex<Pages>,
    stop: AtomicBool,
    /// Rounds of the handler's loop that found nothing to do ([`PagedRegion::wait_settled`]).
    idle_rounds: AtomicU64,
    /// Faults are served by the faulting threads (SIGBUS), which also install the prefetch
    /// windows as their demand reaches them; the handler thread only evicts ahead when its
    /// poll times out.
    signal_mode: bool,
}

/// A far-memory region reached with plain loads and stores. See the module documentation.
pub struct PagedRegion {
    shared: Arc<Shared>,
    len: u64,
    handler: Option<std::thread::JoinHandle<()>>,
    /// [`PagerConfig::cpu_latency_us`], held while the region lives.
    _cpu_latency: Option<CpuLatencyBound>,
}

impl PagedRegion {
    /// Maps a region over every server of `client` and starts its fault handler.
    pub fn new(client: Arc<Client>, config: PagerConfig) -> Result<PagedRegion> {
        let page_bytes = if config.huge_pages { huge::page_bytes_or_err()? } else { PAGE_BYTES };
        // Two pages at least: the page just faulted stays while the next one comes in (with
        // one page, the second fault would find nothing it may evict).
        if config.budget_bytes < BUDGET_PAGES_MIN * page_bytes {
            return Err(Error::BudgetTooSmall {
                budget_bytes: config.budget_bytes,
                unit_bytes: BUDGET_PAGES_MIN * page_bytes,
            });
        }
        let len = config.bytes.next_multiple_of(page_bytes);
        if len == 0 || len > FAR_BYTES_MAX {
            return Err(Error::Config(format!("region of {} bytes must be in 1..={FAR_BYTES_MAX}", config.bytes)));
        }
        let budget_pages = (config.budget_bytes / page_bytes).min(len / page_bytes);
        if config.huge_pages {
            huge::check_free(budget_pages + INSTALL_SPARE_PAGES, page_bytes)?;
        }
        // First, so that a refused bound fails the region before anything is set up.
        let cpu_latency = config.cpu_latency_us.map(CpuLatencyBound::hold).transpose()?;
        let (uffd, fault_mode) = open_uffd(config.fault_mode)?;
        let signal_mode = fault_mode == FaultMode::Signal;
        if uffd.user_mode_only {
            log::warn!("userfaultfd is user-mode only here: system calls that write into missing pages fail");
        }
        // No reservation: only the budget's pages are ever present (for huge pages,
        // `check_free` above looked for them in the reserved pool).
        let huge = if config.huge_pages { libc::MAP_HUGETLB } else { 0 };
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | huge,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("mmap of the paged region"));
        }
        let base = base as u64;
        if let Err(e) = uffd.register(base, len) {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(base as *mut libc::c_void, len as usize) };
            return Err(e);
        }
        let pages = len / page_bytes;
        // The kernel moves 4 KiB pages only.
        let pool = if config.huge_pages {
            None
        } else {
            pool::Pool::new(&uffd).unwrap_or_else(|e| {
                log::warn!("far-memory region: no page pool, pages are copied in: {e}");
                None
            })
        };
        let interleave_bytes = config.interleave_bytes.max(page_bytes).next_multiple_of(page_bytes);
        let span = SpanService::new(client, len, page_bytes, interleave_bytes);
        let prefetch_run_max = (PREFETCH_RUN_BYTES / page_bytes).max(1);
        let evict_run_max = (EVICT_RUN_BYTES / page_bytes).max(1);
        let state = Pages {
            state: vec![MISSING; pages as usize],
            resident: Vec::new(),
            position: vec![0; pages as usize],
            held: vec![false; pages as usize],
            dead: vec![false; pages as usize],
            streamed: vec![false; pages as usize],
            installs: vec![0; pages as usize],
            recent_misses: [u32::MAX; RECENT_MISSES],
            last_fault: u32::MAX,
            prefetcher: StreamPrefetcher::new(config.prefetch),
            accuracy: accuracy::Accuracy::new(pages, config.throttle),
            writes: writes::WritePredictor::new(pages, page_bytes, config.predict_writes),
            pending: VecDeque::new(),
            behind: VecDeque::new(),
            aging: evict::Aging::new(pages),
            stats: Stats::default(),
            rng: rand::rngs::SmallRng::seed_from_u64(base),
            bounce: vec![0; (page_bytes * prefetch_run_max) as usize],
            pool,
            reclaiming: false,
        };
        let (free_low, free_high) = config.watermarks.pages(budget_pages);
        let reclaim_fd = evict::reclaim_eventfd()?;
        let shared = Arc::new(Shared {
            uffd,
            span,
            base,
            pages,
            page_bytes,
            prefetch_run_max,
            evict_run_max,
            fault_mode,
            budget_pages: budget_pages as usize,
            evict_ahead: config.evict_ahead,
            free_low: free_low as usize,
            free_high: free_high as usize,
            reclaim_fd,
            reclaim_kicked: AtomicBool::new(false),
            // Signal-mode faults never show up on the descriptor: nothing to spin for.
            spin: std::time::Duration::from_micros(if signal_mode { 0 } else { config.spin_us }),
            state: Mutex::new(state),
            stop: AtomicBool::new(false),
            idle_rounds: AtomicU64::new(0),
            signal_mode,
        });
        if signal_mode {
            // Unregistered in Drop before `shared` can go away.
            signal::register(Arc::as_ptr(&shared))?;
        }
        let worker = shared.clone();
        let handler = std::thread::Builder::new()
            .name("nam-farmem-pager".into())
            .spawn(move || serving(|| worker.serve_or_exit()))
            .map_err(|e| Error::System { what: "spawning the pager thread", source: Arc::new(e) })?;
        Ok(PagedRegion { shared, len, handler: Some(handler), _cpu_latency: cpu_latency })
    }

    /// Who serves this region's faults: the configured mode, or [`FaultMode::Thread`] if
    /// signal mode was not available (see [`FaultMode`]).
    pub fn fault_mode(&self) -> FaultMode {
        self.shared.fault_mode
    }

    /// First byte of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.shared.base as *mut u8
    }

    /// Bytes per page: 4 KiB, or the huge page size ([`PagerConfig::huge_pages`]).
    pub fn page_bytes(&self) -> u64 {
        self.shared.page_bytes
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty (never: regions have at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region as a byte slice.
    ///
    /// # Safety
    /// The caller must not let it outlive the region nor alias it with a mutable view.
    #[allow(clippy::mut_from_ref)] // the region is memory shared with the handler, like a raw mapping
    pub unsafe fn as_slice_mut(&self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.as_ptr(), self.len as usize)
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        let pages = self.shared.state.lock();
        let mut stats = pages.stats;
        stats.inflight_max = stats.inflight_max.max(1);
        let totals = pages.accuracy.throttle.totals;
        (stats.prefetch_hits, stats.prefetch_wasted) = (totals.used, totals.wasted);
        stats
    }

    /// Waits until the fault handler has done the work it does on its own (the prefetch
    /// windows queued for it in thread mode, evictions ahead of the next misses), so that
    /// counters read next are stable; false if it still had work after `timeout`.
    ///
    /// Settled means a whole round of the handler's loop, begun after this call, found
    /// nothing to do. In signal mode the faulting threads install the prefetch windows, so
    /// windows no fault has reached stay queued.
    pub fn wait_settled(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        // The first idle round counted after this call may have begun before it; the second
        // began after the first ended.
        let target = self.shared.idle_rounds.load(Ordering::Acquire) + 2;
        while self.shared.idle_rounds.load(Ordering::Acquire) < target {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(WAIT_SETTLED_POLL);
        }
        true
    }

    /// Pages resident now.
    pub fn resident_pages(&self) -> usize {
        self.shared.state.lock().resident.len()
    }

    /// Writes every dirty page back (they stay resident, read-only) and waits until the
    /// servers have them.
    pub fn flush(&self) -> Result<()> {
        let mut pages = self.shared.state.lock();
        for i in 0..pages.resident.len() {
            let page = pages.resident[i] as u64;
            self.shared.write_back_run(&mut pages, page, page + 1)?;
        }
        self.shared.span.flush()
    }
}

impl PagedRegion {
    /// Fetches the missing pages of the byte ranges `ranges` (each `(offset, len)` in the
    /// region) now, as `madvise(MADV_WILLNEED)` would, so that the accesses that follow do
    /// not fault: for a program that knows what it reads next (the neighbour lists of a
    /// query's friends), one call instead of a fault per page. Contiguous missing pages come
    /// with one fetch and one `UFFDIO_COPY`. Installs at most half the budget per call (more
    /// would evict pages it just brought in) and returns how many pages it installed; the
    /// pages already resident are left as they are.
    ///
    /// Errors: [`Error::OutOfRange`] if a range leaves the region (nothing is fetched), or the
    /// failure of a server ([`Error::Server`], naming it): the pages installed before it stay,
    /// and nothing stored changes.
    pub fn fetch_ranges(&self, ranges: &[(u64, u64)]) -> Result<u64> {
        for &(offset, len) in ranges {
            self.check_range(offset, len)?;
        }
        serving(|| self.shared.fetch_ranges(&mut self.shared.state.lock(), ranges))
    }

    /// Writes the dirty pages of `offset..offset + len` back and drops every resident page
    /// there from local memory, as `madvise(MADV_PAGEOUT)` would: for a program done with a
    /// range, which leaves the budget to what it reads next. Returns how many pages it
    /// dropped. Errors: [`Error::OutOfRange`], or a server's failure, after which the pages not
    /// yet written back stay resident and dirty (nothing is lost).
    pub fn evict_range(&self, offset: u64, len: u64) -> Result<u64> {
        self.check_range(offset, len)?;
        let page_bytes = self.shared.page_bytes;
        let (first, end) = (offset / page_bytes, (offset + len).div_ceil(page_bytes));
        let dropped = serving(|| self.shared.evict_pages(&mut self.shared.state.lock(), first, end))?;
        self.shared.span.flush()?;
        Ok(dropped)
    }

    /// Writes the dirty pages of `offset..offset + len` back and keeps every page there
    /// resident, clean and write-protected: for a program about to make the range
    /// unreadable (`mprotect(PROT_NONE)`), after which the pager must not read those pages,
    /// and finds them again without a fetch once it is readable again. Returns how many pages
    /// it wrote back. Errors: [`Error::OutOfRange`], or a server's failure, after which the
    /// pages not yet written back stay dirty (nothing is lost).
    pub fn write_back_range(&self, offset: u64, len: u64) -> Result<u64> {
        self.check_range(offset, len)?;
        let page_bytes = self.shared.page_bytes;
        let (first, end) = (offset / page_bytes, (offset + len).div_ceil(page_bytes));
        let written = serving(|| self.shared.write_back_pages(&mut self.shared.state.lock(), first, end))?;
        self.shared.span.flush()?;
        Ok(written)
    }

    /// Makes `offset..offset + len` (whole pages) read as zeros, as `madvise(MADV_DONTNEED)`
    /// makes anonymous memory, without fetching a page: resident pages are zeroed in place
    /// and stay (dirty; an allocator that gives memory up this way usually refills it
    /// soon), the others come from zeros when next touched, without a fetch. Returns how
    /// many pages were resident. Errors: [`Error::Unaligned`] for a range not made of whole
    /// pages, [`Error::OutOfRange`], or the failure to lift write protection (the range's
    /// contents are then unspecified, as the program gave them up).
    pub fn zero_range(&self, offset: u64, len: u64) -> Result<u64> {
        self.check_range(offset, len)?;
        let page_bytes = self.shared.page_bytes;
        if !offset.is_multiple_of(page_bytes) || !len.is_multiple_of(page_bytes) {
            return Err(Error::Unaligned { addr: offset, len, span_bytes: page_bytes });
        }
        serving(|| {
            self.shared.zero_pages(&mut self.shared.state.lock(), offset / page_bytes, (offset + len) / page_bytes)
        })
    }

    /// Tells the pager that the contents of `offset..offset + len` are dead (the program
    /// freed the memory), as unmapping anonymous memory tells the kernel: the pages wholly
    /// inside are never fetched nor written back again; the resident ones leave local
    /// memory at once, which frees their part of the budget, and every one is installed
    /// from zeros when next touched, as a fresh page would be (a new allocation's contents
    /// are unspecified). Errors: [`Error::OutOfRange`], or the failure to drop pages
    /// (`madvise`).
    pub fn discard_range(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len)?;
        let page_bytes = self.shared.page_bytes;
        let (first, end) = (offset.div_ceil(page_bytes), (offset + len) / page_bytes);
        if first < end {
            serving(|| self.shared.give_up_pages(&mut self.shared.state.lock(), first, end))?;
        }
        Ok(())
    }

    /// Tells the pager that the contents of `offset..offset + len` are dead but the space
    /// will likely be handed out again (a heap's `free`), as `madvise(MADV_FREE)` tells the
    /// kernel: the pages wholly inside are never fetched nor written back again. The
    /// resident ones stay, so that the next block there is written without a fault per page
    /// (numpy's next array of the same size), until [`PagedRegion::reuse_range`] says the
    /// space is in use again; evicted before that, they are dropped without a write-back.
    /// Every page not resident comes from zeros when touched. Returns how many pages were
    /// resident. Errors: [`Error::OutOfRange`].
    ///
    /// The caller must call [`PagedRegion::reuse_range`] before anything writes the range
    /// again: a write in between may be dropped at eviction.
    pub fn free_range(&self, offset: u64, len: u64) -> Result<u64> {
        self.check_range(offset, len)?;
        let page_bytes = self.shared.page_bytes;
        let (first, end) = (offset.div_ceil(page_bytes), (offset + len) / page_bytes);
        if first >= end {
            return Ok(0);
        }
        Ok(self.shared.free_pages(&mut self.shared.state.lock(), first, end))
    }

    /// Tells the pager that `offset..offset + len`, freed with [`PagedRegion::free_range`],
    /// is in use again (the heap handed it out): its resident pages are live again, kept
    /// as they are (their contents are unspecified to the new owner, as a new allocation's
    /// are), and written back at eviction once written. Errors: [`Error::OutOfRange`].
    pub fn reuse_range(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len)?;
        let page_bytes = self.shared.page_bytes;
        let (first, end) = (offset / page_bytes, (offset + len).div_ceil(page_bytes));
        let mut pages = self.shared.state.lock();
        pages.dead[first as usize..end as usize].fill(false);
        Ok(())
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange { addr: offset, len, size: self.len }),
        }
    }

    /// Writes every dirty page back and drops every page from local memory: the next
    /// access to any page fetches it from the servers.
    pub fn evict_all(&self) -> Result<()> {
        let mut pages = self.shared.state.lock();
        while let Some(&page) = pages.resident.last() {
            self.shared.evict_run(&mut pages, page as u64, page as u64 + 1)?;
        }
        drop(pages);
        self.shared.span.flush()
    }
}

impl Drop for PagedRegion {
    fn drop(&mut self) {
        signal::unregister(Arc::as_ptr(&self.shared));
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.handler.take() {
            let _ = h.join();
        }
        self.shared.uffd.unregister(self.shared.base, self.len);
        // SAFETY: the mapping made in `new`; the handler has stopped.
        unsafe { libc::munmap(self.shared.base as *mut libc::c_void, self.len as usize) };
        if let Err(e) = self.shared.span.release() {
            log::warn!("releasing a paged region's far memory: {e}");
        }
    }
}

/// Opens the userfaultfd for `mode`, falling back from signal to thread mode (with a
/// warning that says why) where signal mode is not available.
fn open_uffd(mode: FaultMode) -> Result<(Uffd, FaultMode)> {
    if mode == FaultMode::Thread {
        return Ok((Uffd::open(false)?, FaultMode::Thread));
    }
    if let Err(reason) = signal::available() {
        log::warn!("far-memory region: {reason}; serving its page faults in a handler thread instead");
        return Ok((Uffd::open(false)?, FaultMode::Thread));
    }
    match Uffd::open(true) {
        Ok(uffd) => Ok((uffd, FaultMode::Signal)),
        Err(e @ Error::UserfaultfdNotPermitted { .. }) => Err(e),
        Err(e) => {
            log::warn!(
                "far-memory region: userfaultfd without UFFD_FEATURE_SIGBUS here ({e}); \
                 serving its page faults in a handler thread instead"
            );
            Ok((Uffd::open(false)?, FaultMode::Thread))
        }
    }
}

thread_local! {
    static SERVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is serving page faults now (a pager's handler thread, or a thread
/// inside a signal-mode fault). Memory it allocates must not come from a paged region: a
/// fault it took there would wait for itself. The `LD_PRELOAD` library asks this before it
/// places an allocation (UCX's own buffers, say) in far memory.
pub fn serving_faults() -> bool {
    SERVING.with(|s| s.get())
}

/// Runs `f` marked as serving faults (see [`serving_faults`]).
fn serving<T>(f: impl FnOnce() -> T) -> T {
    SERVING.with(|s| {
        let was = s.replace(true);
        let out = f();
        s.set(was);
        out
    })
}

/// A page fault that cannot be served: say why and end the process (see
/// [`crate::exit_fatal`] for why it cannot be `abort()`).
fn fatal(message: &str) -> ! {
    crate::fatal::exit_fatal(message)
}
