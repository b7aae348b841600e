//! Keeping the resident set within the budget: batched eviction and write-back.
//!
//! Every `madvise(MADV_DONTNEED)` and every `UFFDIO_WRITEPROTECT` of a present page flushes
//! the TLBs of the cores running the program, so both are done for runs of pages: a
//! victim is a random resident page (other than the most recently faulted one) with the
//! resident pages that follow it, and eviction frees a batch at once rather than exactly
//! the room asked for.

use super::{Pages, Shared, CLEAN, DIRTY, EVICT_RUN_MAX, MISSING, PAGE_BYTES};
use crate::error::{Error, Result};
use rand::Rng;

impl Shared {
    /// Evicts until `room` more pages fit in the budget, in runs of up to [`EVICT_RUN_MAX`]
    /// pages; when it must evict, it frees up to an eighth of the budget beyond the room.
    pub(super) fn make_room(&self, pages: &mut Pages, room: usize) -> Result<()> {
        if pages.resident.len() + room <= self.budget_pages {
            return Ok(());
        }
        let target = self.budget_pages.saturating_sub(self.slack()).max(room.min(self.budget_pages));
        while pages.resident.len() + room > target {
            let need = pages.resident.len() + room - target;
            if !self.evict_victim(pages, need)? {
                if pages.resident.len() + room <= self.budget_pages {
                    return Ok(());
                }
                return Err(Error::BudgetTooSmall { budget_bytes: PAGE_BYTES, unit_bytes: 2 * PAGE_BYTES });
            }
        }
        Ok(())
    }

    /// The free budget eviction leaves behind it: an eighth of the budget, at most a run.
    fn slack(&self) -> usize {
        (self.budget_pages / 8).min(EVICT_RUN_MAX as usize)
    }

    /// Between faults (the handler thread when it has nothing else to do): evicts one run if
    /// less than the slack of the budget is free, so that the next misses install without
    /// evicting first and the faulting thread does not wait for the write-back and the
    /// `madvise`. Only once the region has had to evict (its pages do not all fit), and not
    /// for budgets under two runs, which are left to [`Shared::make_room`]. Returns whether
    /// it evicted.
    pub(super) fn evict_ahead(&self) -> Result<bool> {
        let small = self.budget_pages < 2 * EVICT_RUN_MAX as usize || self.budget_pages as u64 >= self.pages;
        if !self.evict_ahead || small {
            return Ok(false);
        }
        let mut pages = self.state.lock();
        if pages.stats.evictions == 0 {
            return Ok(false);
        }
        let free = self.budget_pages.saturating_sub(pages.resident.len());
        let slack = self.slack();
        if free >= slack {
            return Ok(false);
        }
        self.evict_victim(&mut pages, slack - free)
    }

    /// Evicts a run of up to `need` (at most [`EVICT_RUN_MAX`]) resident pages starting at a
    /// random one other than the most recently faulted; false if there is none.
    fn evict_victim(&self, pages: &mut Pages, need: usize) -> Result<bool> {
        let len = pages.resident.len();
        if len == 0 || (len == 1 && pages.resident[0] == pages.last_fault) {
            return Ok(false);
        }
        let mut k = pages.rng.gen_range(0..len);
        if pages.resident[k] == pages.last_fault {
            k = (k + 1) % len;
        }
        let first = pages.resident[k] as u64;
        let need = need.clamp(1, EVICT_RUN_MAX as usize) as u64;
        let mut end = first + 1;
        while end < self.pages
            && end - first < need
            && pages.state[end as usize] != MISSING
            && end != pages.last_fault as u64
        {
            end += 1;
        }
        self.evict_run(pages, first, end)?;
        Ok(true)
    }

    /// Writes back the dirty pages of the resident run `first..end` and drops the run.
    pub(super) fn evict_run(&self, pages: &mut Pages, first: u64, end: u64) -> Result<()> {
        for page in first..end {
            if pages.state[page as usize] == CLEAN {
                pages.writes.unwritten(page);
            }
        }
        self.write_back_run(pages, first, end)?;
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
            pages.accuracy.evicted(page);
            pages.stats.evictions += 1;
        }
        Ok(())
    }

    /// Write-protects the resident run `first..end` (writers now wait) if it has dirty
    /// pages, writes each contiguous dirty stretch back with one span write, and marks them
    /// clean. On error the unwritten pages stay dirty, resident and writable.
    pub(super) fn write_back_run(&self, pages: &mut Pages, first: u64, end: u64) -> Result<()> {
        if !(first..end).any(|p| pages.state[p as usize] == DIRTY) {
            return Ok(());
        }
        let addr = |p: u64| self.base + p * PAGE_BYTES;
        self.uffd.write_protect(addr(first), (end - first) * PAGE_BYTES, true)?;
        let mut p = first;
        while p < end {
            if pages.state[p as usize] != DIRTY {
                p += 1;
                continue;
            }
            let mut q = p + 1;
            while q < end && pages.state[q as usize] == DIRTY {
                q += 1;
            }
            let len = (q - p) * PAGE_BYTES;
            // SAFETY: resident and write-protected: nobody changes these pages meanwhile.
            let data = unsafe { std::slice::from_raw_parts(addr(p) as *const u8, len as usize) };
            if let Err(e) = self.span.write(p * PAGE_BYTES, data) {
                for r in p..end {
                    if pages.state[r as usize] == DIRTY {
                        let _ = self.uffd.write_protect(addr(r), PAGE_BYTES, false);
                    }
                }
                return Err(e);
            }
            for r in p..q {
                pages.state[r as usize] = CLEAN;
            }
            pages.stats.writebacks += q - p;
            p = q;
        }
        Ok(())
    }
}
