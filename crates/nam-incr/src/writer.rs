//! The background writer: persists closed intervals (late copying, urgent pages first) and,
//! in early/late mode, copies pages that turned cold while the interval is still open.

use crate::commit::{self, Chain};
use crate::constants::RUN_PAGES;
use crate::copy::{add_page, add_run, copy_run, read_run, Batch, CopyParams};
use crate::engine::{Inner, Work};
use crate::error::IncrError;
use crate::mode::Mode;
use crate::pages::{COPYING, DIRTY, PENDING, PROBATION};
use crate::region::Region;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The writer thread's loop.
pub fn run(inner: &Arc<Inner>) {
    if inner.config.writer_nice != 0 {
        // SAFETY: setpriority on this thread's own id changes only this thread's nice value.
        let rc =
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, inner.config.writer_nice) };
        if rc != 0 {
            log::debug!("writer nice {}: {}", inner.config.writer_nice, std::io::Error::last_os_error());
        }
    }
    let mut early: Option<Batch> = None;
    loop {
        let mut shared = inner.shared.lock();
        if shared.stop {
            return;
        }
        match shared.queue.pop_front() {
            Some(work) => {
                shared.busy = true;
                drop(shared);
                let interval = work.interval;
                let batch = early.take().filter(|b| b.interval == interval && !work.full);
                let result = write_interval(inner, work, batch);
                let failed = result.is_err();
                let _ = finish(inner, interval, result);
                if failed {
                    // Later intervals build on the one that failed: drop them too (their pages
                    // become plain dirty; the next checkpoint rewrites everything).
                    let dropped: Vec<Work> = inner.shared.lock().queue.drain(..).collect();
                    let regions = inner.regions.read().clone();
                    for work in dropped {
                        release(&regions, &work.pages);
                    }
                }
                inner.shared.lock().busy = false;
                inner.cv.notify_all();
            }
            None if inner.config.mode == Mode::EarlyLate => {
                let open = shared.interval;
                let full = shared.need_full || shared.error.is_some();
                inner.cv.wait_for(&mut shared, inner.config.early_sweep);
                let stale = shared.interval != open || !shared.queue.is_empty() || full || shared.stop;
                if stale {
                    continue;
                }
                // Busy while sweeping: a checkpoint that rewrites everything waits for the
                // sweep, so no page is half-way between an early copy and the full interval.
                shared.busy = true;
                drop(shared);
                early = early_sweep(inner, open, early.take());
                inner.shared.lock().busy = false;
                inner.cv.notify_all();
            }
            None => {
                inner.cv.wait(&mut shared);
            }
        }
    }
}

/// Persists `work` (after the early copies in `early`) and commits it.
pub fn write_interval(inner: &Inner, work: Work, early: Option<Batch>) -> Result<(), IncrError> {
    let regions = inner.regions.read().clone();
    let mut batch =
        early.unwrap_or_else(|| Batch::new(work.interval, inner.config.record_bytes, inner.config.segment_bytes));
    let params = CopyParams {
        store: &*inner.store,
        written: &inner.written,
        all_lines: work.full,
        consolidate: inner.config.consolidate,
    };
    let mut pages = work.pages;
    let mut next = 0;
    let result = (|| {
        for (index, page, bytes) in &work.snapshots {
            if regions[*index].is_removed() {
                return Err(IncrError::RegionRemoved(*index, work.interval));
            }
            add_page(&params, *index, &regions[*index], *page, bytes, &mut batch)?;
        }
        while next < pages.len() {
            jump_queue(&regions, &mut pages, next);
            let (index, first) = pages[next];
            let region = &regions[index];
            let table = region.table.expect("incremental modes track writes");
            // A run: the pages that follow `first` in the list and in the region.
            let mut count = 0;
            while count < RUN_PAGES && next + count < pages.len() && pages[next + count] == (index, first + count) {
                let page = first + count;
                debug_assert_eq!(table.tags[page].load(Ordering::Acquire), work.interval);
                if !table.transition(page, PENDING, COPYING) {
                    break;
                }
                count += 1;
            }
            if count == 0 {
                if region.is_removed() {
                    return Err(IncrError::RegionRemoved(index, work.interval));
                }
                return Err(IncrError::WaitExpired(work.interval));
            }
            next += count;
            copy_run(&params, (index, region), (first, count), true, &mut batch)?;
        }
        batch.flush(&*inner.store, &inner.written)?;
        let (previous, mut retention) = {
            let shared = inner.shared.lock();
            (shared.chain.clone(), shared.retention.clone())
        };
        let (mut objects, before) =
            if work.full { (Vec::new(), 0) } else { (previous.objects.clone(), previous.bytes) };
        objects.append(&mut batch.objects);
        let meta = work.meta.clone();
        let chain = Chain { interval: work.interval, generation: 0, objects, bytes: before + batch.bytes, meta };
        park_if_held(inner, work.interval)?;
        commit::publish(&*inner.store, &chain, &regions, (&previous, false), &mut retention, &inner.written)?;
        let chain = crate::merge::maybe_merge(inner, chain, &regions, &mut retention)?;
        let mut shared = inner.shared.lock();
        (shared.chain, shared.retention.older) = (chain, retention.older);
        Ok(())
    })();
    if result.is_err() {
        // Pages of a run that failed went back to DIRTY already; the rest still wait.
        release(&regions, &pages[next.saturating_sub(RUN_PAGES)..]);
        for name in batch.objects {
            let _ = inner.store.remove(&name);
        }
    }
    result
}

/// Fault injection ([`crate::Engine::hold_next_commit`]): parks the writer before it commits
/// `interval` until the engine stops, then gives the interval up uncommitted.
fn park_if_held(inner: &Inner, interval: u32) -> Result<(), IncrError> {
    let mut shared = inner.shared.lock();
    if interval < inner.held_from.load(Ordering::Acquire) {
        return Ok(());
    }
    inner.parked.store(interval, Ordering::Release);
    while !shared.stop {
        inner.cv.wait(&mut shared);
    }
    Err(IncrError::CommitHeld(interval))
}

/// Moves the first urgent page (a write waits for it) of `pages[next..]` to `next`.
fn jump_queue(regions: &[Arc<Region>], pages: &mut [(usize, usize)], next: usize) {
    let any_urgent = regions.iter().filter_map(|r| r.table).any(|t| t.urgent_count.load(Ordering::Acquire) > 0);
    if !any_urgent {
        return;
    }
    let urgent =
        pages[next..].iter().position(|&(r, p)| regions[r].table.is_some_and(|t| t.urgent[p].load(Ordering::Acquire)));
    if let Some(offset) = urgent {
        pages.swap(next, next + offset);
    }
}

/// After a failure: pages still waiting become plain dirty (writable), so no write waits
/// for a copy that will not happen; the next checkpoint rewrites everything.
fn release(regions: &[Arc<Region>], pages: &[(usize, usize)]) {
    for &(index, page) in pages {
        if let Some(table) = regions[index].table {
            let state = table.states[page].load(Ordering::Acquire);
            if state == PENDING || state == COPYING {
                // Writable before DIRTY: a write held by mprotect must not find the page
                // released while it is still read-only.
                let _ = table.unprotect(page, 1);
                table.transition(page, state, DIRTY);
            }
            table.clear_urgent(page);
        }
    }
}

/// Records the outcome of `interval`: an error is kept for the application's next call and
/// forces the next checkpoint to start a fresh chain.
pub fn finish(inner: &Inner, interval: u32, result: Result<(), IncrError>) -> Result<(), IncrError> {
    let Err(error) = result else {
        return Ok(());
    };
    let mut shared = inner.shared.lock();
    shared.need_full = true;
    let previous = shared.chain.committed();
    log::error!("checkpoint {interval} failed ({error}); checkpoint {previous:?} stays the restart point");
    let error = match error {
        IncrError::Store(source) => IncrError::CheckpointFailed { interval, previous, source: Box::new(source) },
        other => other,
    };
    if inner.config.mode.incremental() && inner.config.mode != Mode::Incremental {
        // Background failure: reported at the next call, not here.
        shared.error = Some(error);
        return Ok(());
    }
    Err(error)
}

/// One early-copy pass over the open interval `open`: dirty pages that turned cold are
/// copied now.
fn early_sweep(inner: &Inner, open: u32, batch: Option<Batch>) -> Option<Batch> {
    let regions = inner.regions.read().clone();
    let mut batch = batch
        .filter(|b| b.interval == open)
        .unwrap_or_else(|| Batch::new(open, inner.config.record_bytes, inner.config.segment_bytes));
    let params = CopyParams {
        store: &*inner.store,
        written: &inner.written,
        all_lines: false,
        consolidate: inner.config.consolidate,
    };
    for (index, region) in regions.iter().enumerate().filter(|(_, r)| !r.is_removed()) {
        let Some(table) = region.table else { continue };
        let swept = if table.is_async() {
            sweep_async(inner, &params, (index, region), open, &mut batch)
        } else {
            sweep_faults(inner, &params, (index, region), open, &mut batch)
        };
        if let Err(e) = swept {
            log::warn!("early copy of region {index} failed: {e}");
            inner.shared.lock().need_full = true;
            return None;
        }
    }
    Some(batch)
}

/// Early copies with the fault-based trackers: pages still on probation (protected at the
/// previous sweep and not written since) are copied; dirty pages go on probation.
fn sweep_faults(
    inner: &Inner,
    params: &CopyParams<'_>,
    (index, region): (usize, &Region),
    open: u32,
    batch: &mut Batch,
) -> Result<(), IncrError> {
    let table = region.table.expect("incremental modes track writes");
    let mut run: Option<(usize, usize)> = None;
    for page in (0..table.pages).filter(|&p| !region.is_edge(p)) {
        if inner.shared.lock().interval != open {
            break;
        }
        if table.transition(page, PROBATION, COPYING) {
            copy_run(params, (index, region), (page, 1), false, batch)?;
        } else if table.transition(page, DIRTY, PROBATION) {
            run = Some(match run {
                Some((first, n)) if first + n == page => (first, n + 1),
                Some((first, n)) => {
                    let _ = table.protect(first, n);
                    (page, 1)
                }
                None => (page, 1),
            });
        }
    }
    if let Some((first, n)) = run {
        let _ = table.protect(first, n);
    }
    Ok(())
}

/// Early copies with the asynchronous tracker: one PAGEMAP_SCAN tells which pages were
/// written since the last scan; dirty pages that were not are cold and copied now, without
/// protecting anything (a write during the copy clears the page's bit again, so the page is
/// copied again later). The pages are read under the scan lock, so an interval closed
/// meanwhile cannot take a write of the next interval into this one.
fn sweep_async(
    inner: &Inner,
    params: &CopyParams<'_>,
    (index, region): (usize, &Region),
    open: u32,
    batch: &mut Batch,
) -> Result<(), IncrError> {
    let table = region.table.expect("incremental modes track writes");
    let mut written = Vec::new();
    {
        let _scan = table.scan_lock.lock();
        if inner.shared.lock().interval != open {
            return Ok(());
        }
        table.absorb_writes(&mut written).map_err(|source| IncrError::Track {
            start: region.addr,
            len: region.geometry.len,
            tracker: crate::tracker::TrackerKind::UserfaultfdAsync,
            source,
        })?;
    }
    let mut hot = vec![false; table.pages];
    for &(first, end) in &written {
        hot[first..end].iter_mut().for_each(|h| *h = true);
    }
    let is_cold = |p: usize| !hot[p] && !region.is_edge(p) && table.states[p].load(Ordering::Acquire) == DIRTY;
    let mut page = 0;
    while page < table.pages {
        if !is_cold(page) {
            page += 1;
            continue;
        }
        let mut count = 1;
        while count < RUN_PAGES && page + count < table.pages && is_cold(page + count) {
            count += 1;
        }
        let taken = {
            let _scan = table.scan_lock.lock();
            if inner.shared.lock().interval != open {
                return Ok(());
            }
            let taken = (page..page + count).take_while(|&p| table.transition(p, DIRTY, COPYING)).count();
            if taken > 0 {
                read_run((index, region), (page, taken), false, batch)?;
            }
            taken
        };
        if taken > 0 {
            add_run(params, (index, region), (page, taken), batch)?;
        }
        page += taken.max(1);
    }
    Ok(())
}
