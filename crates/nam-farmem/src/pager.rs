//! [`PagedRegion`]: the transparent way in. An anonymous mapping registered with
//! userfaultfd; a handler thread serves its faults:
//!
//! - a **missing** page is fetched from the servers (span read of one page) and installed
//!   with `UFFDIO_COPY`, read-only unless the fault was a write, and the stream prefetcher
//!   installs the pages ahead of a detected stream;
//! - a **write to a read-only** page marks it dirty and lifts the protection (so only pages
//!   written since they were fetched are written back);
//! - the **resident set** stays within the budget: before installing, a random resident
//!   page other than the most recently faulted one is evicted: write-protected, written back
//!   if dirty, then dropped with `MADV_DONTNEED` (its next access faults again).
//!
//! A fault that cannot be served (its server died) cannot be returned to the program as an
//! error: the handler prints what failed, naming the server, and aborts the process rather
//! than let the faulting thread hang or read wrong data.

use crate::config::{PrefetchConfig, FAR_BYTES_MAX};
use crate::error::{Error, Result};
use crate::prefetch::StreamPrefetcher;
use crate::span::SpanService;
use crate::stats::Stats;
use crate::uffd::{Fault, Uffd, FAULT_WP, FAULT_WRITE};
use nam_client::Client;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Page size of the pager.
pub const PAGE_BYTES: u64 = 4096;
/// Most pages one eviction drops at once.
pub const EVICT_RUN_MAX: u64 = 16;

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
}

impl PagerConfig {
    /// A region of `bytes` with `budget_bytes` resident at most, and the default prefetcher.
    pub fn new(bytes: u64, budget_bytes: u64) -> PagerConfig {
        PagerConfig { bytes, budget_bytes, prefetch: PrefetchConfig::default(), interleave_bytes: PAGE_BYTES }
    }
}

const MISSING: u8 = 0;
const CLEAN: u8 = 1;
const DIRTY: u8 = 2;

/// Pages and their states; locked by the handler for each fault and by `flush`.
struct Pages {
    state: Vec<u8>,
    /// Resident pages, and each page's index in it (u32::MAX when not resident).
    resident: Vec<u32>,
    position: Vec<u32>,
    last_fault: u32,
    prefetcher: StreamPrefetcher,
    stats: Stats,
    rng: rand::rngs::SmallRng,
    bounce: Vec<u8>,
}

struct Shared {
    uffd: Uffd,
    span: SpanService,
    base: u64,
    pages: u64,
    budget_pages: usize,
    state: Mutex<Pages>,
    stop: AtomicBool,
}

/// A far-memory region reached with plain loads and stores. See the module documentation.
pub struct PagedRegion {
    shared: Arc<Shared>,
    len: u64,
    handler: Option<std::thread::JoinHandle<()>>,
}

impl PagedRegion {
    /// Maps a region over every server of `client` and starts its fault handler.
    pub fn new(client: Arc<Client>, config: PagerConfig) -> Result<PagedRegion> {
        if config.budget_bytes < PAGE_BYTES {
            return Err(Error::BudgetTooSmall { budget_bytes: config.budget_bytes, unit_bytes: PAGE_BYTES });
        }
        let len = config.bytes.next_multiple_of(PAGE_BYTES);
        if len == 0 || len > FAR_BYTES_MAX {
            return Err(Error::Config(format!("region of {} bytes must be in 1..={FAR_BYTES_MAX}", config.bytes)));
        }
        let uffd = Uffd::open()?;
        if uffd.user_mode_only {
            log::warn!("userfaultfd is user-mode only here: system calls that write into missing pages fail");
        }
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
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
        let pages = len / PAGE_BYTES;
        let span = SpanService::new(client, len, PAGE_BYTES, config.interleave_bytes.max(PAGE_BYTES));
        let state = Pages {
            state: vec![MISSING; pages as usize],
            resident: Vec::new(),
            position: vec![u32::MAX; pages as usize],
            last_fault: u32::MAX,
            prefetcher: StreamPrefetcher::new(config.prefetch),
            stats: Stats::default(),
            rng: rand::rngs::SmallRng::seed_from_u64(base),
            bounce: vec![0; (PAGE_BYTES as usize) * (config.prefetch.depth + 1)],
        };
        let budget_pages = (config.budget_bytes / PAGE_BYTES) as usize;
        let shared = Arc::new(Shared {
            uffd,
            span,
            base,
            pages,
            budget_pages,
            state: Mutex::new(state),
            stop: AtomicBool::new(false),
        });
        let worker = shared.clone();
        let handler = std::thread::Builder::new()
            .name("nam-farmem-pager".into())
            .spawn(move || worker.serve())
            .map_err(|e| Error::System { what: "spawning the pager thread", source: Arc::new(e) })?;
        Ok(PagedRegion { shared, len, handler: Some(handler) })
    }

    /// First byte of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.shared.base as *mut u8
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
        stats
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
            let page = pages.resident[i];
            if pages.state[page as usize] == DIRTY {
                self.shared.write_back(&mut pages, page)?;
            }
        }
        self.shared.span.flush()
    }
}

impl PagedRegion {
    /// Writes every dirty page back and drops every page from local memory: the next
    /// access to any page fetches it from the servers.
    pub fn evict_all(&self) -> Result<()> {
        let mut pages = self.shared.state.lock();
        while let Some(&page) = pages.resident.last() {
            self.shared.evict(&mut pages, page)?;
        }
        drop(pages);
        self.shared.span.flush()
    }
}

impl Drop for PagedRegion {
    fn drop(&mut self) {
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

impl Shared {
    fn serve(&self) {
        let mut faults: Vec<Fault> = Vec::with_capacity(64);
        while !self.stop.load(Ordering::Acquire) {
            if !self.uffd.poll(100) {
                continue;
            }
            faults.clear();
            if let Err(e) = self.uffd.read_faults(&mut faults) {
                fatal(&format!("reading page faults: {e}"));
            }
            for f in &faults {
                if let Err(e) = self.handle(f) {
                    fatal(&format!("cannot serve the page fault at {:#x} of a far-memory region: {e}", f.address));
                }
            }
        }
    }

    fn handle(&self, fault: &Fault) -> Result<()> {
        let page = (fault.address - self.base) / PAGE_BYTES;
        let addr = self.base + page * PAGE_BYTES;
        let mut pages = self.state.lock();
        let state = pages.state[page as usize];
        if fault.flags & FAULT_WP != 0 {
            if state != CLEAN {
                self.uffd.wake(addr, PAGE_BYTES); // evicted or already dirty: retry the access
                return Ok(());
            }
            // A writer moving sequentially (the page before is dirty) will write the clean
            // pages after this one too: lift their protection with the same call.
            let mut end = page + 1;
            if page > 0 && pages.state[page as usize - 1] == DIRTY {
                let limit = (page + pages.prefetcher.config().depth as u64).min(self.pages);
                while end < limit && pages.state[end as usize] == CLEAN {
                    end += 1;
                }
            }
            for p in page..end {
                pages.state[p as usize] = DIRTY;
            }
            pages.stats.write_faults += 1;
            return self.uffd.write_protect(addr, (end - page) * PAGE_BYTES, false);
        }
        if state != MISSING {
            self.uffd.wake(addr, PAGE_BYTES); // installed by a prefetch meanwhile
            return Ok(());
        }
        pages.stats.misses += 1;
        pages.last_fault = page as u32;
        let mut bounce = std::mem::take(&mut pages.bounce);
        let write = fault.flags & FAULT_WRITE != 0;
        let result = self.fetch_install(&mut pages, page, 1, &mut bounce, write);
        let ahead = pages.prefetcher.on_miss(page, self.pages);
        let result = result.and_then(|()| self.prefetch(&mut pages, ahead, &mut bounce));
        pages.bounce = bounce;
        result
    }

    /// Fetches the contiguous missing pages `first..first + count` and installs them with
    /// one copy, read-only unless `dirty`.
    fn fetch_install(&self, pages: &mut Pages, first: u64, count: usize, bounce: &mut [u8], dirty: bool) -> Result<()> {
        let bytes = count * PAGE_BYTES as usize;
        self.make_room(pages, count)?;
        self.span.read(first * PAGE_BYTES, &mut bounce[..bytes])?;
        let dst = self.base + first * PAGE_BYTES;
        if self.uffd.copy(dst, bounce.as_ptr(), bytes as u64, !dirty, true)? {
            for p in first..first + count as u64 {
                pages.state[p as usize] = if dirty { DIRTY } else { CLEAN };
                pages.position[p as usize] = pages.resident.len() as u32;
                pages.resident.push(p as u32);
            }
        } else {
            // Some page of the run was already there: install one by one.
            for (i, p) in (first..first + count as u64).enumerate() {
                if pages.state[p as usize] == MISSING {
                    let src = bounce[i * PAGE_BYTES as usize..].as_ptr();
                    if self.uffd.copy(self.base + p * PAGE_BYTES, src, PAGE_BYTES, !dirty, true)? {
                        pages.state[p as usize] = if dirty { DIRTY } else { CLEAN };
                        pages.position[p as usize] = pages.resident.len() as u32;
                        pages.resident.push(p as u32);
                    }
                }
            }
        }
        Ok(())
    }

    /// Installs the missing pages of `ahead` in contiguous runs, as far as the budget allows
    /// without evicting the page just faulted.
    fn prefetch(&self, pages: &mut Pages, ahead: std::ops::Range<u64>, bounce: &mut [u8]) -> Result<()> {
        let room = self.budget_pages.saturating_sub(1);
        let mut p = ahead.start;
        let mut budget = (ahead.end - ahead.start).min(room as u64);
        while p < ahead.end && budget > 0 {
            if pages.state[p as usize] != MISSING {
                p += 1;
                continue;
            }
            let mut end = p + 1;
            while end < ahead.end && end - p < budget && pages.state[end as usize] == MISSING {
                end += 1;
            }
            let count = (end - p) as usize;
            self.fetch_install(pages, p, count, bounce, false)?;
            pages.stats.prefetches += count as u64;
            budget -= count as u64;
            p = end;
        }
        Ok(())
    }

    /// Evicts until `room` more pages fit in the budget. Victims are random resident pages
    /// other than the most recently faulted one, each taken with the resident pages that
    /// follow it (up to [`EVICT_RUN_MAX`]), so one `madvise` drops a run.
    fn make_room(&self, pages: &mut Pages, room: usize) -> Result<()> {
        while pages.resident.len() + room > self.budget_pages {
            let len = pages.resident.len();
            if len == 0 || (len == 1 && pages.resident[0] == pages.last_fault) {
                return Err(Error::BudgetTooSmall { budget_bytes: PAGE_BYTES, unit_bytes: 2 * PAGE_BYTES });
            }
            let mut k = pages.rng.gen_range(0..len);
            if pages.resident[k] == pages.last_fault {
                k = (k + 1) % len;
            }
            let first = pages.resident[k] as u64;
            let need = (pages.resident.len() + room - self.budget_pages).min(EVICT_RUN_MAX as usize) as u64;
            let mut end = first + 1;
            while end < self.pages
                && end - first < need
                && pages.state[end as usize] != MISSING
                && end != pages.last_fault as u64
            {
                end += 1;
            }
            self.evict_run(pages, first, end)?;
        }
        Ok(())
    }

    fn evict(&self, pages: &mut Pages, page: u32) -> Result<()> {
        self.evict_run(pages, page as u64, page as u64 + 1)
    }

    /// Writes back the dirty pages of the resident run `first..end` and drops the run.
    fn evict_run(&self, pages: &mut Pages, first: u64, end: u64) -> Result<()> {
        for p in first..end {
            if pages.state[p as usize] == DIRTY {
                self.write_back(pages, p as u32)?;
            }
        }
        let addr = self.base + first * PAGE_BYTES;
        let len = ((end - first) * PAGE_BYTES) as usize;
        // SAFETY: pages of our mapping; dropping them makes the next access fault.
        if unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
            return Err(Error::last_os("madvise(MADV_DONTNEED) of evicted pages"));
        }
        for page in first..end {
            pages.state[page as usize] = MISSING;
            let k = pages.position[page as usize] as usize;
            pages.resident.swap_remove(k);
            if k < pages.resident.len() {
                let moved = pages.resident[k];
                pages.position[moved as usize] = k as u32;
            }
            pages.position[page as usize] = u32::MAX;
            pages.stats.evictions += 1;
        }
        Ok(())
    }

    /// Write-protects a dirty page (writers now wait), writes it back and marks it clean.
    /// On error the page stays dirty and resident.
    fn write_back(&self, pages: &mut Pages, page: u32) -> Result<()> {
        let addr = self.base + page as u64 * PAGE_BYTES;
        self.uffd.write_protect(addr, PAGE_BYTES, true)?;
        // SAFETY: the page is resident and write-protected: nobody changes it meanwhile.
        let data = unsafe { std::slice::from_raw_parts(addr as *const u8, PAGE_BYTES as usize) };
        if let Err(e) = self.span.write(page as u64 * PAGE_BYTES, data) {
            let _ = self.uffd.write_protect(addr, PAGE_BYTES, false);
            return Err(e);
        }
        pages.state[page as usize] = CLEAN;
        pages.stats.writebacks += 1;
        Ok(())
    }
}

/// A page fault that cannot be served: say why and stop the process.
fn fatal(message: &str) -> ! {
    eprintln!("nam-farmem: fatal: {message}; the program cannot continue");
    std::process::abort()
}
