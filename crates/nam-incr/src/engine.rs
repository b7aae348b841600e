//! The engine: protect regions, take checkpoints in the configured mode, report errors of
//! background work at the next call.

use crate::commit::{self, Chain};
use crate::error::IncrError;
use crate::geometry::{Geometry, LINES_PER_PAGE, PAGE_BYTES};
use crate::mode::{Config, Mode};
use crate::pages::{self, PageTable, CLEAN, DIRTY, PENDING, PROBATION};
use crate::region::Region;
use crate::store::Store;
use crate::tracker::{Tracker, TrackerKind};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Closes `region`'s interval: dirty pages (every page when `full`) become `PENDING`, tagged
/// `interval`, and are write-protected, one system call per run of adjacent pages. Edge pages
/// are read now instead. The asynchronous tracker first collects the pages written since
/// its last scan.
fn close_region(
    index: usize,
    region: &Region,
    interval: u32,
    full: bool,
    pages: &mut Vec<(usize, usize)>,
    snapshots: &mut Vec<(usize, usize, Vec<u8>)>,
) -> std::io::Result<()> {
    let table = region.table.expect("incremental modes track writes");
    let _scan = table.scan_lock.lock();
    if table.is_async() {
        table.absorb_writes(&mut Vec::new())?;
    }
    let mut run: Option<(usize, usize)> = None;
    for page in 0..=table.pages {
        let taken = page < table.pages && !region.is_edge(page) && {
            let from = [DIRTY, PROBATION].into_iter().chain(full.then_some(CLEAN));
            from.into_iter().any(|s| table.transition(page, s, PENDING))
        };
        if taken {
            table.tags[page].store(interval, Ordering::Release);
            pages.push((index, page));
            run = Some(run.map_or((page, 1), |(first, n)| (first, n + 1)));
        } else if let Some((first, n)) = run.take() {
            table.protect(first, n)?;
        }
        if page < table.pages && region.is_edge(page) {
            let range = region.geometry.page_range(page);
            let mut bytes = vec![0u8; range.len()];
            region.read(range.start, &mut bytes)?;
            snapshots.push((index, page, bytes));
        }
    }
    Ok(())
}

/// Counters of an engine, for benchmarks and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Checkpoints committed.
    pub committed: Option<u32>,
    /// Bytes written to the store (objects, headers and checksums included).
    pub bytes_written: u64,
    /// Nanoseconds the application spent inside `checkpoint` and waiting on pages.
    pub stall_ns: u64,
    /// Write faults taken.
    pub faults: u64,
    /// Most memory the engine held beyond the regions at any time.
    pub peak_extra_bytes: u64,
}

/// One unit of background work: an interval's pages to persist.
pub(crate) struct Work {
    pub interval: u32,
    pub pages: Vec<(usize, usize)>,
    pub full: bool,
    /// Edge pages, read during the checkpoint call: (region, page, bytes).
    pub snapshots: Vec<(usize, usize, Vec<u8>)>,
    /// The caller's metadata for the commit.
    pub meta: Vec<u8>,
}

pub(crate) struct Shared {
    /// The interval the next `checkpoint` closes.
    pub interval: u32,
    pub queue: VecDeque<Work>,
    pub busy: bool,
    pub chain: Chain,
    /// Older complete checkpoints kept for restart.
    pub retention: commit::Retention,
    pub error: Option<IncrError>,
    pub need_full: bool,
    pub stop: bool,
    pub fork: Option<crate::fork::Child>,
}

pub(crate) struct Inner {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub regions: RwLock<Vec<Arc<Region>>>,
    pub shared: Mutex<Shared>,
    pub cv: Condvar,
    pub written: AtomicU64,
    pub stall_ns: AtomicU64,
    pub extra_peak: AtomicU64,
    /// Fault injection: the writer commits no interval from this one on ([`Engine::hold_next_commit`]).
    pub held_from: AtomicU32,
    /// The interval the writer is parked before committing, `u32::MAX` when none
    /// ([`Engine::commit_held`]).
    pub parked: AtomicU32,
}

/// Incremental checkpointing of protected memory regions.
pub struct Engine {
    inner: Arc<Inner>,
    tracker: Option<Tracker>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Engine {
    /// An engine writing to `store`. The writer thread starts for the background modes.
    pub fn new(config: Config, store: Arc<dyn Store>) -> Result<Engine, IncrError> {
        if config.mode == Mode::Fork && store.level() == "nam" {
            return Err(IncrError::Unsupported {
                mode: "fork",
                level: store.level().into(),
                why: "a forked child cannot use the parent's UCX connection",
            });
        }
        if !config.fault_around_pages.is_power_of_two() {
            return Err(IncrError::InvalidConfig("fault_around_pages must be a power of two"));
        }
        if config.record_bytes < crate::record::RECORD_BYTES_MIN || config.segment_bytes < config.record_bytes {
            return Err(IncrError::InvalidConfig("record_bytes must hold a whole page and segment_bytes a record"));
        }
        // A used store (a restarted job's): continue after its checkpoints, and keep them as
        // the older ones, collected once newer ones are complete.
        let adopted = crate::restore::chains(&*store)?;
        // Fork counts duplicated pages from faults, so it needs faults it can see.
        let tracker = config.mode.tracks().then(|| Tracker::start(config.tracker, config.mode.incremental()));
        let shared = Shared {
            interval: adopted.last().map_or(1, |c| c.interval + 1),
            queue: VecDeque::new(),
            busy: false,
            chain: Chain::default(),
            retention: commit::Retention { keep: config.keep, pin: None, older: adopted },
            error: None,
            need_full: true,
            stop: false,
            fork: None,
        };
        let inner = Arc::new(Inner {
            config,
            store,
            regions: RwLock::new(Vec::new()),
            shared: Mutex::new(shared),
            cv: Condvar::new(),
            written: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
            extra_peak: AtomicU64::new(0),
            held_from: AtomicU32::new(u32::MAX),
            parked: AtomicU32::new(u32::MAX),
        });
        let background = matches!(inner.config.mode, Mode::PartiallyNonBlocking | Mode::EarlyLate);
        let writer = background.then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("nam-incr-writer".into())
                .spawn(move || crate::writer::run(&inner))
                .expect("spawn the checkpoint writer thread")
        });
        Ok(Engine { inner, tracker, writer })
    }

    /// The tracker in use (`None` for stop-and-copy, which tracks nothing).
    pub fn tracker(&self) -> Option<TrackerKind> {
        self.tracker.as_ref().map(Tracker::kind)
    }

    /// Why the tracker fell back from userfaultfd, if it did.
    pub fn tracker_fallback(&self) -> Option<&str> {
        self.tracker.as_ref().and_then(Tracker::fallback_reason)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Protects `[ptr, ptr + len)` and returns its region index. Any alignment is accepted;
    /// writes elsewhere in the region's first and last page are tracked too (harmlessly).
    ///
    /// # Safety
    /// The range must be mapped readable and writable and stay so until [`Engine::unprotect`]
    /// or the engine is dropped; nothing else may change its page protection meanwhile.
    pub unsafe fn protect(&self, ptr: *mut u8, len: usize) -> Result<usize, IncrError> {
        if len == 0 {
            return Err(IncrError::EmptyRegion);
        }
        let addr = ptr as usize;
        let geometry = Geometry::of(addr, len);
        let (start, span) = (addr - geometry.lead, geometry.pages() * PAGE_BYTES);
        let mut quiet = self.wait_idle()?;
        if pages::overlaps(start, start + span) {
            return Err(IncrError::Overlap { start: addr, len });
        }
        let table = match &self.tracker {
            None => None,
            Some(tracker) => {
                let track_error = |source| IncrError::Track { start: addr, len, tracker: tracker.kind(), source };
                tracker.register(start, span).map_err(track_error)?;
                // Fork mode counts duplicated pages from faults, so it tracks page by page.
                let around =
                    if self.inner.config.mode == Mode::Fork { 1 } else { self.inner.config.fault_around_pages };
                let fds = (tracker.uffd(), tracker.pagemap());
                let table = PageTable::new(start, geometry.pages(), fds, DIRTY, around);
                match pages::publish(table) {
                    Some(t) => Some(t),
                    None => {
                        tracker.unregister(start, span);
                        return Err(IncrError::TooManyRegions { max: crate::constants::REGIONS_MAX });
                    }
                }
            }
        };
        let hashes = if self.inner.config.mode.incremental() { geometry.pages() * LINES_PER_PAGE } else { 0 };
        let region =
            Region { addr, geometry, table, hashes: Mutex::new(vec![0; hashes]), removed: AtomicBool::new(false) };
        let mut regions = self.inner.regions.write();
        regions.push(Arc::new(region));
        quiet.need_full = true;
        Ok(regions.len() - 1)
    }

    /// Stops protecting region `index`; the memory stays as it is and writable. A copy of it
    /// in flight is abandoned and reported by the next call.
    pub fn unprotect(&self, index: usize) -> Result<(), IncrError> {
        let region = self.inner.regions.read().get(index).cloned().ok_or(IncrError::UnknownRegion(index))?;
        if region.removed.swap(true, Ordering::AcqRel) {
            return Err(IncrError::UnknownRegion(index));
        }
        if let (Some(table), Some(tracker)) = (region.table, &self.tracker) {
            // Writable and unregistered first, so a write held meanwhile goes on and none
            // faults after the table is gone.
            tracker.unregister(region.span_start(), region.span_len());
            for page in 0..table.pages {
                for state in [CLEAN, PROBATION, PENDING] {
                    table.transition(page, state, DIRTY);
                }
            }
            pages::withdraw(table);
        }
        self.inner.shared.lock().need_full = true;
        Ok(())
    }

    /// Takes a checkpoint of every protected region. Returns the interval number it closes.
    /// In the background modes it returns once the pages are write-protected; the data is
    /// persisted later ([`Engine::wait`]). An error of earlier background work is returned
    /// here first (and the next checkpoint then writes everything anew).
    pub fn checkpoint(&self) -> Result<u32, IncrError> {
        self.checkpoint_with(Vec::new())
    }

    /// [`Engine::checkpoint`], storing `meta` in the checkpoint's commit (so it is complete
    /// exactly when the checkpoint is): a caller's version number, its region ids.
    /// [`crate::checkpoints`] lists it back.
    pub fn checkpoint_with(&self, meta: Vec<u8>) -> Result<u32, IncrError> {
        let started = Instant::now();
        let result = self.checkpoint_inner(meta);
        self.inner.stall_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }

    fn checkpoint_inner(&self, meta: Vec<u8>) -> Result<u32, IncrError> {
        if let Some(e) = self.inner.shared.lock().error.take() {
            return Err(e);
        }
        match self.inner.config.mode {
            Mode::StopAndCopy => self.image_checkpoint(meta),
            Mode::Fork => crate::fork::checkpoint(&self.inner, meta),
            Mode::Incremental => {
                let work = self.collect(meta)?;
                let interval = work.interval;
                let result = crate::writer::write_interval(&self.inner, work, None);
                crate::writer::finish(&self.inner, interval, result)?;
                Ok(interval)
            }
            Mode::PartiallyNonBlocking | Mode::EarlyLate => {
                if self.inner.config.mode == Mode::PartiallyNonBlocking {
                    self.wait()?;
                }
                let work = self.collect(meta)?;
                let interval = work.interval;
                self.inner.shared.lock().queue.push_back(work);
                self.inner.cv.notify_all();
                Ok(interval)
            }
        }
    }

    fn image_checkpoint(&self, meta: Vec<u8>) -> Result<u32, IncrError> {
        let interval = {
            let mut shared = self.inner.shared.lock();
            shared.interval += 1;
            shared.interval - 1
        };
        let regions = self.inner.regions.read().clone();
        let result = crate::image::write(&*self.inner.store, interval, &regions, &self.inner.written);
        let result = result.and_then(|name| {
            let (previous, mut retention) = {
                let shared = self.inner.shared.lock();
                (shared.chain.clone(), shared.retention.clone())
            };
            let chain = Chain { interval, generation: 0, objects: vec![name], bytes: 0, meta };
            let store = &*self.inner.store;
            commit::publish(store, &chain, &regions, (&previous, false), &mut retention, &self.inner.written)?;
            let mut shared = self.inner.shared.lock();
            (shared.chain, shared.retention.older) = (chain, retention.older);
            Ok(())
        });
        crate::writer::finish(&self.inner, interval, result.map_err(IncrError::from))?;
        Ok(interval)
    }

    /// Closes the interval: its dirty pages become `PENDING` (write-protected), tagged with it.
    fn collect(&self, meta: Vec<u8>) -> Result<Work, IncrError> {
        let full = self.inner.shared.lock().need_full;
        if full {
            self.wait()?;
        }
        let mut shared = self.inner.shared.lock();
        let interval = shared.interval;
        shared.interval += 1;
        shared.need_full = false;
        drop(shared);
        let regions = self.inner.regions.read().clone();
        let mut pages = Vec::new();
        let mut snapshots = Vec::new();
        for (index, region) in regions.iter().enumerate().filter(|(_, r)| !r.is_removed()) {
            close_region(index, region, interval, full, &mut pages, &mut snapshots).map_err(|source| {
                let tracker = self.tracker().unwrap_or(TrackerKind::Mprotect);
                IncrError::Track { start: region.addr, len: region.geometry.len, tracker, source }
            })?;
        }
        if full {
            // A fresh chain re-learns every line's hash.
            for region in regions.iter() {
                region.hashes.lock().iter_mut().for_each(|h| *h = 0);
            }
        }
        Ok(Work { interval, pages, full, snapshots, meta })
    }

    /// Waits until every checkpoint taken so far is persisted (or failed) and returns the
    /// newest complete one; an error of the background work is returned (once).
    pub fn wait(&self) -> Result<Option<u32>, IncrError> {
        let shared = self.wait_idle()?;
        let committed = shared.chain.committed();
        let mut shared = shared;
        match shared.error.take() {
            Some(e) => Err(e),
            None => Ok(committed),
        }
    }

    fn wait_idle(&self) -> Result<parking_lot::MutexGuard<'_, Shared>, IncrError> {
        let deadline = Instant::now() + self.inner.config.timeout;
        let mut shared = self.inner.shared.lock();
        while shared.busy || !shared.queue.is_empty() {
            if self.inner.cv.wait_until(&mut shared, deadline).timed_out() {
                let interval = shared.interval.saturating_sub(1);
                return Err(IncrError::Timeout { interval, timeout_ms: self.inner.config.timeout.as_millis() as u64 });
            }
        }
        if self.inner.config.mode == Mode::Fork {
            drop(shared);
            crate::fork::reap(&self.inner, deadline)?;
            shared = self.inner.shared.lock();
        }
        Ok(shared)
    }

    /// Keeps every checkpoint from `interval` on, whatever [`Config::keep`] says, until called
    /// again: a job whose ranks finish their background copies at different times pins the
    /// newest checkpoint complete on all of them, so that a restart finds it on every rank.
    pub fn keep_from(&self, interval: u32) {
        self.inner.shared.lock().retention.pin = Some(interval);
    }

    /// Fault injection for tests of a crash in the middle of a background copy: the background
    /// writer never commits the interval the next [`Engine::checkpoint`] closes, nor any later
    /// one; it parks before the commit until the engine is dropped, and the interval stays uncommitted. Without it, a test that kills
    /// the process right after `checkpoint` returns races the writer, which may commit first.
    /// Returns false (and holds nothing) in the modes that copy inside `checkpoint`.
    pub fn hold_next_commit(&self) -> bool {
        if !matches!(self.inner.config.mode, Mode::PartiallyNonBlocking | Mode::EarlyLate) {
            return false;
        }
        let shared = self.inner.shared.lock();
        self.inner.held_from.store(shared.interval, Ordering::Release);
        true
    }

    /// The interval whose copy is done and whose commit the writer holds now (after
    /// [`Engine::hold_next_commit`]), if it has got that far.
    pub fn commit_held(&self) -> Option<u32> {
        Some(self.inner.parked.load(Ordering::Acquire)).filter(|&i| i != u32::MAX)
    }

    /// Pages a write of the application is waiting for now (they are still to be persisted
    /// by the writer, which copies them first).
    pub fn pages_awaited(&self) -> usize {
        let regions = self.inner.regions.read();
        regions.iter().filter_map(|r| r.table).map(|t| t.urgent_count.load(Ordering::Acquire)).sum()
    }

    /// The newest complete checkpoint.
    pub fn committed(&self) -> Option<u32> {
        self.inner.shared.lock().chain.committed()
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        let regions = self.inner.regions.read();
        let tables = regions.iter().filter_map(|r| r.table);
        let (faults, fault_stall) = tables
            .fold((0, 0), |(f, s), t| (f + t.faults.load(Ordering::Relaxed), s + t.stall_ns.load(Ordering::Relaxed)));
        let region_bytes: usize = regions.iter().map(|r| r.geometry.len).sum();
        let metadata: usize = if self.inner.config.mode.incremental() {
            // Line hashes and page states, plus at most two batches (the early one and the
            // late one), each a record and a segment buffer (which grows only as filled).
            // Plus a run of pages being read (and the early sweep's bitmap of written pages).
            let run = crate::constants::RUN_PAGES * PAGE_BYTES + region_bytes / PAGE_BYTES;
            let buffers = self.inner.config.record_bytes + self.inner.config.segment_bytes.min(region_bytes) + run;
            regions.iter().map(|r| r.metadata_bytes()).sum::<usize>() + 2 * buffers
        } else if self.inner.config.mode == Mode::Fork {
            regions.iter().map(|r| r.geometry.pages() * 6).sum()
        } else {
            0
        };
        Stats {
            committed: self.committed(),
            bytes_written: self.inner.written.load(Ordering::Relaxed),
            stall_ns: self.inner.stall_ns.load(Ordering::Relaxed) + fault_stall,
            faults,
            peak_extra_bytes: metadata as u64 + self.inner.extra_peak.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.inner.held_from.load(Ordering::Acquire) == u32::MAX {
            drop(self.wait_idle());
        }
        self.inner.shared.lock().stop = true;
        self.inner.cv.notify_all();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        for region in self.inner.regions.read().iter().filter(|r| !r.is_removed()) {
            if let (Some(table), Some(tracker)) = (region.table, &self.tracker) {
                pages::withdraw(table);
                tracker.unregister(region.span_start(), region.span_len());
            }
        }
    }
}
