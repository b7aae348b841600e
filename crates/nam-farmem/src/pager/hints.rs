//! What the program tells the pager: fetch these ranges now, or drop those now.
//!
//! A program that knows what it reads next (a graph query holds its friends' ids before it
//! reads their lists) can have the pages installed in one call instead of taking a fault for
//! each: `madvise(MADV_WILLNEED)` and UMap's `umap_prefetch` do the same. A fault costs the
//! signal's delivery and return, or two thread switches, on top of the install; a call pays
//! one lock and installs every missing page of its ranges, contiguous ones with one fetch and
//! one `UFFDIO_COPY`. Dropping a range (`MADV_PAGEOUT`) writes its dirty pages back and frees
//! the budget for what comes next, instead of leaving random replacement to find out.

use super::{Pages, Shared, CLEAN, DIRTY, MISSING};
use crate::constants::RUNS_PER_BATCH;
use crate::error::{Error, Result};

impl Shared {
    /// Serves a missing-page fault of `page`, which the pager holds resident, if the program
    /// dropped it itself (`madvise(MADV_DONTNEED)` of region memory): the pager forgets it
    /// and serves the fault as a miss, from the servers as of the page's last write-back (as
    /// for a file-backed mapping; the changes since are gone, as the madvise said they may
    /// be). Without this the access would fault again forever: the pager would take each
    /// fault for one that a concurrent install had served already. Returns false if the page
    /// is there (installed meanwhile: retry the access).
    pub(super) fn serve_dropped(&self, pages: &mut Pages, page: u64, write: bool) -> Result<bool> {
        if present(self.base + page * self.page_bytes, self.page_bytes)? {
            return Ok(false);
        }
        self.forget_run(pages, page, page + 1);
        self.serve_missing(pages, page, write)?;
        Ok(true)
    }

    /// Installs the missing pages of the byte ranges `ranges` (each `(offset, len)`, checked
    /// by the caller), contiguous ones in runs of up to [`super::PREFETCH_RUN_BYTES`], and
    /// returns how many it installed. At most half the budget per call: more would evict
    /// pages the same call brought in. Room for them all is made first, so installing one
    /// run never evicts another; the random victims may still be resident pages of the
    /// ranges (rarely: they are a few of the budget's pages). The prefetcher does not learn
    /// from these pages (they were asked for, not guessed) and they count as prefetches.
    pub(super) fn fetch_ranges(&self, pages: &mut Pages, ranges: &[(u64, u64)]) -> Result<u64> {
        let runs = self.missing_runs(pages, ranges);
        let total: u64 = runs.iter().map(|&(first, end)| end - first).sum();
        if total == 0 {
            return Ok(0);
        }
        self.make_room(pages, total as usize)?;
        for &(first, end) in &runs {
            let count = end - first;
            self.fetch_install(pages, first, count as usize, false)?;
            for page in first..end {
                pages.streamed[page as usize] = count > 1;
            }
            pages.stats.prefetches += count;
        }
        Ok(total)
    }

    /// The missing pages of `ranges`, merged and in order, as runs of at most
    /// `prefetch_run_max` pages, half the budget in all at most.
    fn missing_runs(&self, pages: &Pages, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let page_bytes = self.page_bytes;
        let mut spans: Vec<(u64, u64)> = (ranges.iter())
            .filter(|&&(_, len)| len > 0)
            .map(|&(offset, len)| (offset / page_bytes, (offset + len).div_ceil(page_bytes)))
            .collect();
        spans.sort_unstable();
        let limit = (self.budget_pages as u64 / 2).max(1);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut total = 0;
        let mut next = 0; // pages before this one were looked at already (spans overlap)
        for (first, end) in spans {
            let mut page = first.max(next);
            while page < end && total < limit {
                if pages.state[page as usize] != MISSING {
                    page += 1;
                    continue;
                }
                let mut run_end = page + 1;
                while run_end < end
                    && run_end - page < self.prefetch_run_max
                    && total + (run_end - page) < limit
                    && pages.state[run_end as usize] == MISSING
                {
                    run_end += 1;
                }
                total += run_end - page;
                runs.push((page, run_end));
                page = run_end;
            }
            next = next.max(end);
        }
        runs
    }

    /// Writes back the dirty resident pages of `first..end` and drops every resident page
    /// there, in batches of runs (one `process_madvise` each). Returns how many it dropped.
    /// On error the pages not yet written back stay resident and dirty.
    pub(super) fn evict_pages(&self, pages: &mut Pages, first: u64, end: u64) -> Result<u64> {
        self.resident_batches(pages, first, end, |shared, pages, batch| shared.evict_runs(pages, batch))
    }

    /// Calls `act` on the resident pages of `first..end`, as batches of up to
    /// [`RUNS_PER_BATCH`] runs of up to `evict_run_max` pages each (one `process_madvise` a
    /// batch when `act` drops them). Returns how many pages were resident.
    fn resident_batches(
        &self,
        pages: &mut Pages,
        first: u64,
        end: u64,
        mut act: impl FnMut(&Self, &mut Pages, &[(u64, u64)]) -> Result<()>,
    ) -> Result<u64> {
        let mut batch: Vec<(u64, u64)> = Vec::with_capacity(RUNS_PER_BATCH);
        let mut resident = 0;
        let mut page = first;
        while page < end {
            if pages.state[page as usize] == MISSING {
                page += 1;
                continue;
            }
            let mut run_end = page + 1;
            while run_end < end && run_end - page < self.evict_run_max && pages.state[run_end as usize] != MISSING {
                run_end += 1;
            }
            batch.push((page, run_end));
            resident += run_end - page;
            page = run_end;
            if batch.len() == RUNS_PER_BATCH {
                act(self, pages, &batch)?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            act(self, pages, &batch)?;
        }
        Ok(resident)
    }
}

impl Shared {
    /// Writes back the dirty resident pages of `first..end` and keeps them resident, clean
    /// and write-protected; returns how many it wrote. For a range the program is about to
    /// make unreadable (`mprotect(PROT_NONE)`): the pager must not read those pages later,
    /// and need not, since clean pages are dropped without a read; their copies stay, so
    /// that the program finds them again without a fetch when it makes the range readable.
    pub(super) fn write_back_pages(&self, pages: &mut Pages, first: u64, end: u64) -> Result<u64> {
        let before = pages.stats.writebacks;
        let mut page = first;
        while page < end {
            if pages.state[page as usize] != DIRTY {
                page += 1;
                continue;
            }
            let mut run_end = page + 1;
            while run_end < end && run_end - page < self.evict_run_max && pages.state[run_end as usize] == DIRTY {
                run_end += 1;
            }
            self.write_back_run(pages, page, run_end)?;
            page = run_end;
        }
        Ok(pages.stats.writebacks - before)
    }

    /// Gives the pages `first..end` up, as the kernel gives up anonymous memory that is
    /// unmapped: they read as zeros from now on, none is fetched and none written back. The
    /// resident ones are dropped from local memory at once (dirty ones too: their contents
    /// are dead), which frees their part of the budget for the pages the program still uses,
    /// instead of leaving them to be written back at eviction; the servers' copies are
    /// forgotten (`Pages::held`), so every page of the range comes from zeros when next
    /// touched. Returns how many pages were resident.
    pub(super) fn give_up_pages(&self, pages: &mut Pages, first: u64, end: u64) -> Result<u64> {
        pages.held[first as usize..end as usize].fill(false);
        self.resident_batches(pages, first, end, |shared, pages, batch| shared.drop_given_up(pages, batch))
    }

    /// Makes the pages `first..end` read as zeros, as `madvise(MADV_DONTNEED)` does to
    /// anonymous memory, without fetching any and without a request to the servers:
    /// resident pages are zeroed in place and stay resident (dirty: the servers still hold
    /// their old contents), missing ones are no longer held on the servers (installed from
    /// zeros when next touched). Returns how many pages were resident.
    ///
    /// The resident pages stay because allocators give memory up this way and soon use it
    /// again (jemalloc purges and refills its extents): dropped, each refill would fault
    /// page by page.
    pub(super) fn zero_pages(&self, pages: &mut Pages, first: u64, end: u64) -> Result<u64> {
        let mut resident_total = 0;
        let mut page = first;
        while page < end {
            let resident = pages.state[page as usize] != MISSING;
            let mut run_end = page + 1;
            while run_end < end
                && run_end - page < self.evict_run_max
                && (pages.state[run_end as usize] != MISSING) == resident
            {
                run_end += 1;
            }
            let (addr, len) = (self.base + page * self.page_bytes, (run_end - page) * self.page_bytes);
            if resident {
                if (page..run_end).any(|p| pages.state[p as usize] == CLEAN) {
                    self.uffd.write_protect(addr, len, false)?;
                }
                for p in page..run_end {
                    pages.state[p as usize] = DIRTY;
                    pages.dead[p as usize] = false; // its zeros are contents now
                }
                // SAFETY: resident pages of the region, writable now; the program gave their
                // contents up.
                unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len as usize) };
                resident_total += run_end - page;
            } else {
                pages.held[page as usize..run_end as usize].fill(false);
            }
            page = run_end;
        }
        Ok(resident_total)
    }

    /// Frees the pages `first..end` lazily (see [`super::PagedRegion::free_range`]): none
    /// is held on the servers any more, and the resident ones are dead until reused.
    /// Returns how many pages were resident.
    pub(super) fn free_pages(&self, pages: &mut Pages, first: u64, end: u64) -> u64 {
        let mut resident = 0;
        for p in first..end {
            pages.held[p as usize] = false;
            if pages.state[p as usize] != MISSING {
                pages.dead[p as usize] = true;
                resident += 1;
            }
        }
        resident
    }

    /// Drops the resident runs `runs`, whose contents the program gave up, without a
    /// write-back, counting them as given up rather than evicted.
    fn drop_given_up(&self, pages: &mut Pages, runs: &[(u64, u64)]) -> Result<()> {
        let evictions = pages.stats.evictions;
        self.drop_runs(pages, runs)?;
        pages.stats.given_up += pages.stats.evictions - evictions;
        pages.stats.evictions = evictions;
        Ok(())
    }
}

/// Whether the page at `addr` is in memory (`mincore(2)`; a page the program dropped with
/// `madvise(MADV_DONTNEED)` is not).
fn present(addr: u64, len: u64) -> Result<bool> {
    let mut vec = [0u8; 1];
    // SAFETY: a page of our own mapping; the kernel writes one byte per page (one page here).
    if unsafe { libc::mincore(addr as *mut libc::c_void, len.min(4096) as usize, vec.as_mut_ptr()) } != 0 {
        return Err(Error::last_os("mincore of a far-memory page"));
    }
    Ok(vec[0] & 1 != 0)
}
