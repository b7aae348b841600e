//! [`FarMemory`]: the explicit way in. Reads and writes at far addresses go through a
//! set-associative cache in a local-memory budget (write-back, write-allocate, full-line
//! writes skip the fetch), misses are fetched in batches of non-blocking span reads (at
//! most `outstanding_max` in flight, a line asked for twice is fetched once), and the
//! stream prefetcher adds the lines ahead of a detected stream to the same batches.

use crate::cache::{LineStore, Lookup, DIRTY, PREFETCHED, VALID};
use crate::config::FarConfig;
use crate::constants::{FLUSH_SPLIT_BYTES, STAGING_BYTES, WRITE_BACK_RUN_BYTES};
use crate::error::{Error, Result};
use crate::prefetch::StreamPrefetcher;
use crate::span::SpanService;
use crate::stats::Stats;
use nam_client::Client;
use std::sync::Arc;

mod bulk;
mod chunks;

pub use chunks::DestMode;

/// Why a line is in a fetch batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A demand access that needs the line's contents.
    Fetch,
    /// A demand write that covers the whole line: no fetch.
    Overwrite,
    /// The prefetcher's.
    Prefetch,
    /// A streaming read (`far/chunks.rs`): fetched like a demand miss but inserted without
    /// becoming its set's most recently used way, so the next miss of the set may replace it
    /// rather than a line that is being reused (scan-resistant insertion).
    Stream,
}

/// Far memory reached through a client-side cache. See the crate documentation.
pub struct FarMemory {
    span: SpanService,
    config: FarConfig,
    store: LineStore,
    prefetcher: StreamPrefetcher,
    stats: Stats,
    lines: u64,
    /// Demand lines of one group map to distinct sets.
    group_lines: usize,
    /// Next free far address for [`FarMemory::alloc_array`].
    next_free: u64,
    batch: Vec<(u64, usize, Want)>,
    /// Slots handed to a caller as views in place (`far/chunks.rs`): never victims.
    pinned: Vec<usize>,
    /// Copies of lines read without allocating (streaming reads of full sets), and which
    /// lines they are (first, count); valid during one in-place call only.
    staging: Vec<u8>,
    staged: (u64, u64),
    /// A stretch of lines readable in place in a mapped server pool (first line, count,
    /// address of the first); valid during one in-place call only.
    mapped: (u64, u64, usize),
    /// The same for the destination lines of [`FarMemory::zip_pieces_mut`].
    mapped_dst: (u64, u64, usize),
    /// Scratch: slots a victim must not be chosen from.
    exclude: Vec<usize>,
    /// Scratch: the destination slots of one call of the computation in
    /// [`FarMemory::zip_pieces_mut`] (one line, or a run of them).
    run_slots: Vec<usize>,
}

impl FarMemory {
    /// Far memory of `config.far_bytes` striped over every server of `client`.
    pub fn new(client: Arc<Client>, config: FarConfig) -> Result<FarMemory> {
        let sets = config.validate()?;
        let line = config.line_bytes;
        let span = SpanService::new(client, config.far_bytes, line, config.interleave_bytes.max(line));
        let store = LineStore::new(sets, config.ways, line as usize, config.metadata_cache_entries, config.seed);
        Ok(FarMemory {
            span,
            prefetcher: StreamPrefetcher::new(config.prefetch),
            stats: Stats::default(),
            lines: config.far_bytes.div_ceil(line),
            group_lines: sets.min(config.outstanding_max),
            next_free: 0,
            batch: Vec::with_capacity(config.outstanding_max),
            pinned: Vec::with_capacity(2),
            staging: vec![0; (line as usize).max(STAGING_BYTES)],
            staged: (0, 0),
            mapped: (0, 0, 0),
            mapped_dst: (0, 0, 0),
            exclude: Vec::with_capacity(config.outstanding_max + 2),
            run_slots: Vec::with_capacity(chunks::run_lines_max(line) as usize),
            store,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FarConfig {
        &self.config
    }

    /// Size of the far address space.
    pub fn far_bytes(&self) -> u64 {
        self.config.far_bytes
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The span service underneath (span reads and writes bypass the cache).
    pub fn spans(&self) -> &SpanService {
        &self.span
    }

    /// Reserves `bytes` of the far address space aligned to a line; returns its address.
    pub fn reserve(&mut self, bytes: u64) -> Result<u64> {
        let addr = self.next_free.next_multiple_of(self.config.line_bytes);
        let end = addr.checked_add(bytes).filter(|&e| e <= self.config.far_bytes);
        let Some(end) = end else {
            return Err(Error::OutOfRange { addr, len: bytes, size: self.config.far_bytes });
        };
        self.next_free = end;
        Ok(addr)
    }

    fn check(&self, addr: u64, len: usize) -> Result<()> {
        let size = self.config.far_bytes;
        match addr.checked_add(len as u64) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfRange { addr, len: len as u64, size }),
        }
    }

    /// Reads `buf.len()` bytes at far address `addr`.
    #[inline]
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.check(addr, buf.len())?;
        let lb = self.config.line_bytes;
        let line = addr / lb;
        let off = (addr % lb) as usize;
        if off + buf.len() <= lb as usize {
            if let Some(slot) = self.hit(line)? {
                buf.copy_from_slice(&self.store.data(slot)[off..off + buf.len()]);
                return Ok(());
            }
        }
        self.access(addr, buf.len(), |store, slot, line_off, at| {
            let n = (buf.len() - at).min(lb as usize - line_off);
            buf[at..at + n].copy_from_slice(&store.data(slot)[line_off..line_off + n]);
        })
    }

    /// Writes `data` at far address `addr` (into the cache; [`FarMemory::flush`] makes it
    /// reach the servers).
    #[inline]
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.check(addr, data.len())?;
        let lb = self.config.line_bytes;
        let line = addr / lb;
        let off = (addr % lb) as usize;
        if off + data.len() <= lb as usize {
            if let Some(slot) = self.hit(line)? {
                self.store.data_mut(slot)[off..off + data.len()].copy_from_slice(data);
                self.store.set_state(slot, VALID | DIRTY);
                return Ok(());
            }
        }
        self.access_write(addr, data)
    }

    /// Writes every dirty line back and waits until the servers have it. Dirty lines of
    /// consecutive far addresses that also lie one after the other in the cache (the same
    /// way of consecutive sets: a stream's lines) go back together, one span write of up to
    /// [`WRITE_BACK_RUN_BYTES`] instead of one per line. From [`FLUSH_SPLIT_BYTES`] of dirty
    /// data on, a second thread writes back half of the runs (over shared memory a write-back
    /// is a copy by the writing core, so two cores copy about twice as fast when the machine
    /// has one to spare). On error the lines not written back stay dirty.
    pub fn flush(&mut self) -> Result<()> {
        let mut dirty: Vec<(u64, usize)> =
            self.store.dirty_slots().into_iter().map(|s| (self.store.tag(s), s)).collect();
        dirty.sort_unstable();
        let slots: Vec<usize> = dirty.iter().map(|d| d.1).collect();
        let runs: Vec<&[usize]> = self.adjacent_runs(&dirty).into_iter().map(|(at, n)| &slots[at..at + n]).collect();
        let bytes = dirty.len() as u64 * self.config.line_bytes;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (first, second) = if bytes >= FLUSH_SPLIT_BYTES && cores > 1 {
            runs.split_at(runs.len() / 2)
        } else {
            (&runs[..], &runs[..0])
        };
        let (store, span, line_bytes) = (&self.store, &self.span, self.config.line_bytes);
        let write = |runs: &[&[usize]]| -> (usize, Result<()>) {
            for (k, run) in runs.iter().enumerate() {
                let addr = store.tag(run[0]) * line_bytes;
                let data = store.data_run(run).expect("adjacent_runs makes adjacent runs");
                if let Err(e) = span.write(addr, data) {
                    return (k, Err(e));
                }
            }
            (runs.len(), Ok(()))
        };
        let ((done_a, result_a), (done_b, result_b)) = std::thread::scope(|scope| {
            let helper = (!second.is_empty()).then(|| scope.spawn(|| write(second)));
            let mine = write(first);
            (mine, helper.map_or((0, Ok(())), |h| h.join().expect("write-back thread panicked")))
        });
        for run in first[..done_a].iter().chain(&second[..done_b]) {
            self.mark_clean(run);
        }
        result_a.and(result_b)?;
        self.span.flush()
    }

    /// Cuts `lines` ((line, slot) sorted by line) into runs (first index, count) of
    /// consecutive lines whose slots lie one after the other in the cache, of at most
    /// [`WRITE_BACK_RUN_BYTES`]: each run is one span read or write.
    fn adjacent_runs(&self, lines: &[(u64, usize)]) -> Vec<(usize, usize)> {
        let most = (WRITE_BACK_RUN_BYTES / self.config.line_bytes).max(1) as usize;
        let mut runs = Vec::new();
        let mut at = 0;
        while at < lines.len() {
            let mut n = 1;
            while at + n < lines.len()
                && n < most
                && lines[at + n].0 == lines[at].0 + n as u64
                && self.store.data_run(&[lines[at + n - 1].1, lines[at + n].1]).is_some()
            {
                n += 1;
            }
            runs.push((at, n));
            at += n;
        }
        runs
    }

    /// Writes back dirty lines and drops every line from the cache.
    pub fn invalidate(&mut self) -> Result<()> {
        self.flush()?;
        for slot in 0..self.store.slots() {
            self.store.set_state(slot, 0);
        }
        Ok(())
    }

    /// A demand hit on `line`, or `None`.
    #[inline]
    fn hit(&mut self, line: u64) -> Result<Option<usize>> {
        let slot = match self.store.lookup(line) {
            Lookup::MetaHit(s) => {
                self.stats.metadata_hits += 1;
                s
            }
            Lookup::Found(s) => {
                self.stats.metadata_misses += 1;
                s
            }
            Lookup::Missing => return Ok(None),
        };
        self.stats.hits += 1;
        self.store.touch(slot);
        let state = self.store.state(slot);
        if state & PREFETCHED != 0 {
            self.store.set_state(slot, state & !PREFETCHED);
            self.stats.prefetch_hits += 1;
            let ahead = self.prefetcher.on_prefetch_hit(line, self.lines);
            if !ahead.is_empty() {
                self.prefetch_range(ahead, slot)?;
            }
        }
        Ok(Some(slot))
    }

    /// Walks the lines of `[addr, addr + len)` in groups, fetching each group's missing
    /// lines in one batch, then calls `each(store, slot, offset in line, offset in range)`.
    fn access(
        &mut self,
        addr: u64,
        len: usize,
        mut each: impl FnMut(&crate::cache::LineStore, usize, usize, usize),
    ) -> Result<()> {
        let lb = self.config.line_bytes;
        let (first, last) = (addr / lb, (addr + len.max(1) as u64 - 1) / lb);
        let mut group = first;
        while group <= last {
            let end = (group + self.group_lines as u64 - 1).min(last);
            for line in group..=end {
                if self.hit(line)?.is_none() {
                    self.want(line, Want::Fetch)?;
                }
            }
            self.issue()?;
            for line in group..=end {
                let slot = self.slot_of(line)?;
                let line_start = line * lb;
                let line_off = addr.saturating_sub(line_start) as usize;
                let at = (line_start + line_off as u64 - addr) as usize;
                each(&self.store, slot, line_off, at);
            }
            group = end + 1;
        }
        Ok(())
    }

    fn access_write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        let lb = self.config.line_bytes;
        let (first, last) = (addr / lb, (addr + data.len().max(1) as u64 - 1) / lb);
        let mut group = first;
        while group <= last {
            let end = (group + self.group_lines as u64 - 1).min(last);
            for line in group..=end {
                let full = line * lb >= addr && (line + 1) * lb <= addr + data.len() as u64;
                if self.hit(line)?.is_none() {
                    self.want(line, if full { Want::Overwrite } else { Want::Fetch })?;
                }
            }
            self.issue()?;
            for line in group..=end {
                let slot = self.slot_of(line)?;
                let line_start = line * lb;
                let line_off = addr.saturating_sub(line_start) as usize;
                let at = (line_start + line_off as u64 - addr) as usize;
                let n = (data.len() - at).min(lb as usize - line_off);
                self.store.data_mut(slot)[line_off..line_off + n].copy_from_slice(&data[at..at + n]);
                self.store.set_state(slot, VALID | DIRTY);
            }
            group = end + 1;
        }
        Ok(())
    }

    /// The slot of a line this group filled. A direct-mapped cache may have lost it to a
    /// prefetch of the same group: then it is fetched again.
    fn slot_of(&mut self, line: u64) -> Result<usize> {
        loop {
            if let Lookup::MetaHit(s) | Lookup::Found(s) = self.store.lookup(line) {
                return Ok(s);
            }
            self.want(line, Want::Fetch)?;
            self.issue()?;
        }
    }

    /// Adds a demand miss of `line` to the batch, with the prefetches it triggers.
    fn want(&mut self, line: u64, want: Want) -> Result<()> {
        self.want_trained(line, want, true)
    }

    /// [`FarMemory::want`]; `train`: whether the miss trains the prefetcher (not for the
    /// lines after the first of one requested range: they are the request, not a stream).
    fn want_trained(&mut self, line: u64, want: Want, train: bool) -> Result<()> {
        if let Some(entry) = self.batch.iter_mut().find(|b| b.0 == line) {
            self.stats.merged += 1;
            if entry.2 == Want::Prefetch {
                entry.2 = want;
            }
            return Ok(());
        }
        self.stats.misses += 1;
        if want == Want::Overwrite {
            self.stats.full_line_writes += 1;
        }
        let slot = match self.pick_victim(line, false) {
            Some(s) => s,
            None => {
                self.issue()?;
                self.pick_victim(line, false).expect("an empty batch excludes nothing")
            }
        };
        self.evict(slot)?;
        self.batch.push((line, slot, want));
        if self.batch.len() >= self.config.outstanding_max {
            self.issue()?;
        }
        if train {
            let ahead = self.prefetcher.on_miss(line, self.lines);
            self.add_prefetches(ahead);
        }
        Ok(())
    }

    fn prefetch_range(&mut self, ahead: std::ops::Range<u64>, keep: usize) -> Result<()> {
        let before = self.batch.len();
        // The slot being hit must survive the prefetch batch.
        self.batch.push((u64::MAX, keep, Want::Prefetch));
        self.add_prefetches(ahead);
        self.batch.remove(before);
        self.issue()
    }

    fn add_prefetches(&mut self, ahead: std::ops::Range<u64>) {
        for p in ahead {
            if self.batch.len() >= self.config.outstanding_max {
                break;
            }
            if self.batch.iter().any(|b| b.0 == p) || self.store.lookup(p) != Lookup::Missing {
                continue;
            }
            let Some(slot) = self.pick_victim(p, true) else { continue };
            if self.store.state(slot) & VALID != 0 {
                self.stats.evictions += 1;
            }
            self.store.set_state(slot, 0);
            self.batch.push((p, slot, Want::Prefetch));
        }
    }

    fn pick_victim(&mut self, line: u64, clean_only: bool) -> Option<usize> {
        // A scratch list reused across misses: no allocation per miss.
        let mut exclude = std::mem::take(&mut self.exclude);
        exclude.clear();
        exclude.extend(self.batch.iter().map(|b| b.1).chain(self.pinned.iter().copied()));
        let victim = self.store.victim(line, &exclude, clean_only);
        self.exclude = exclude;
        victim
    }

    /// Empties `slot`, writing it back first if dirty. On error the line stays, dirty.
    fn evict(&mut self, slot: usize) -> Result<()> {
        let state = self.store.state(slot);
        if state & VALID == 0 {
            return Ok(());
        }
        if state & DIRTY != 0 {
            self.write_back(slot)?;
        }
        self.stats.evictions += 1;
        self.store.set_state(slot, 0);
        Ok(())
    }

    fn write_back(&mut self, slot: usize) -> Result<()> {
        self.write_back_run(&[slot])
    }

    /// Writes back the dirty lines of `slots`: consecutive far lines whose data lies one
    /// after the other in the cache (checked), as one span write. On error they stay dirty.
    fn write_back_run(&mut self, slots: &[usize]) -> Result<()> {
        let addr = self.store.tag(slots[0]) * self.config.line_bytes;
        let data = self.store.data_run(slots).expect("the caller passes adjacent slots");
        self.span.write(addr, data)?;
        self.mark_clean(slots);
        Ok(())
    }

    fn mark_clean(&mut self, slots: &[usize]) {
        self.stats.writebacks += slots.len() as u64;
        for &slot in slots {
            let state = self.store.state(slot);
            self.store.set_state(slot, state & !DIRTY);
        }
    }

    /// Fetches every line of the batch with all reads in flight, then installs them.
    fn issue(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let lb = self.config.line_bytes;
        let mut fetch: Vec<(u64, usize)> =
            batch.iter().filter(|b| b.2 != Want::Overwrite).map(|b| (b.0, b.1)).collect();
        fetch.sort_unstable();
        self.stats.inflight = fetch.len() as u64;
        self.stats.inflight_max = self.stats.inflight_max.max(self.stats.inflight);
        let slots: Vec<usize> = fetch.iter().map(|f| f.1).collect();
        // Consecutive lines whose slots are neighbours in memory (a stream's lines, often)
        // are read with one span read into their slots.
        let runs = self.adjacent_runs(&fetch);
        let result = {
            let bufs = self.store.data_runs_mut(&runs.iter().map(|&(at, n)| &slots[at..at + n]).collect::<Vec<_>>());
            let mut requests: Vec<(u64, &mut [u8])> = runs.iter().map(|&(at, _)| fetch[at].0 * lb).zip(bufs).collect();
            self.span.read_many(&mut requests)
        };
        self.stats.inflight = 0;
        let mut batch = batch;
        if let Err(e) = result {
            batch.clear();
            self.batch = batch;
            return Err(e);
        }
        for &(line, slot, want) in &batch {
            let state = if want == Want::Prefetch { VALID | PREFETCHED } else { VALID };
            self.stats.prefetches += (want == Want::Prefetch) as u64;
            self.store.install(slot, line, state);
            if want == Want::Fetch || want == Want::Overwrite {
                self.store.touch(slot);
            }
        }
        batch.clear();
        self.batch = batch;
        Ok(())
    }
}
