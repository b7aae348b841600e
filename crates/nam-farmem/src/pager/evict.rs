//! Keeping the resident set within the budget: batched eviction and write-back.
//!
//! Every `madvise(MADV_DONTNEED)` and every `UFFDIO_WRITEPROTECT` of a present page flushes
//! the TLBs of the cores running the program, so both are done for runs of pages: a
//! victim is a random resident page (other than the most recently faulted one) with the
//! resident pages of its stream that follow it, and eviction frees a batch
//! at once rather than exactly the room asked for. A batch takes several such runs and
//! drops them with one `process_madvise(2)`: one system call and one TLB flush for the
//! batch (measured: 16 scattered pages in 13 us against 28-31 us with one `madvise` each,
//! with a second thread alive).
//!
//! **Runs are a stream's pages.** A run used to take every resident page after its random
//! first one. Under random access that is not random replacement: where the pages are
//! resident densely, which is where the program works most (the popular users' lists at
//! the front of friends-of-friends' graph), a run took up to 16 of them at once, and
//! sparse, cold stretches gave short runs. In a simulation of that benchmark's page trace
//! (scale 0.5, budget 1514 pages) such runs missed 20,200 times a round against 17,700 for
//! single random victims. A page now continues a run only if it and the page before it
//! came in with a stream (prefetched, or a demand miss that a stream matched or that
//! followed one of the last few misses): pages faulted in
//! one by one at random leave one by one, and a stream's pages still leave in runs, which
//! keeps the resident set in long stretches that the next pass streams through (with
//! single victims everywhere the paged SAXPY missed twice as often: its missing pages lay
//! scattered between resident ones, and its streams kept breaking).
//!
//! **Pages the program keeps coming back to stay.** The pager sees faults, not accesses, but
//! how often a page was installed tells the same story over a long run: of two random pages
//! that came in one by one, the victim is the one installed less often so far
//! ([`VICTIM_SAMPLE`]). A stream's pages are left out of the comparison: a loop over more
//! than the budget installs each of its pages once per pass, and the pages that stayed
//! resident, installed less often, would go first, which turns replacement into LRU, the
//! worst policy for such a loop.
//!
//! **Streams drop behind.** Before any random draw, eviction takes the pages a stream brought
//! in most recently that the demand has gone through ([`Shared::drop_behind`]): for a loop
//! over more than the budget that is MRU replacement, which keeps the pages the loop came in
//! with first until its next pass comes back to them, where random victims kept few of them
//! and first-in-first-out none.

use super::{Pages, Shared, CLEAN, DIRTY, MISSING};
use crate::constants::{BEHIND_KEEP, BEHIND_SCAN, VICTIM_SAMPLE};
use crate::error::{Error, Result};
use rand::Rng;

/// `PIDFD_SELF` (Linux 6.15): the calling process for `process_madvise(2)`, without a pidfd
/// that a forked child would inherit pointing at its parent.
const PIDFD_SELF: libc::c_int = -10000;

impl Shared {
    /// Evicts until `room` more pages fit in the budget, in runs of up to
    /// [`super::EVICT_RUN_BYTES`]; when it must evict, it frees up to an eighth of the budget beyond the room.
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
                // Nothing left to evict but the page just faulted: the budget cannot hold it
                // and the pages to install beside it.
                return Err(Error::BudgetTooSmall {
                    budget_bytes: self.budget_pages as u64 * self.page_bytes,
                    unit_bytes: (pages.resident.len() + room) as u64 * self.page_bytes,
                });
            }
        }
        Ok(())
    }

    /// The free budget eviction leaves behind it: an eighth of the budget, at most a run.
    fn slack(&self) -> usize {
        (self.budget_pages / 8).min(self.evict_run_max as usize)
    }

    /// Between faults (the handler thread when it has nothing else to do): evicts one run if
    /// less than the slack of the budget is free, so that the next misses install without
    /// evicting first and the faulting thread does not wait for the write-back and the
    /// `madvise`. Only once the region has had to evict (its pages do not all fit), and not
    /// for budgets under two runs, which are left to [`Shared::make_room`]. Returns whether
    /// it evicted.
    pub(super) fn evict_ahead(&self) -> Result<bool> {
        let small = self.budget_pages < 2 * self.evict_run_max as usize || self.budget_pages as u64 >= self.pages;
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

    /// Evicts up to `need` resident pages (at most [`super::EVICT_RUN_BYTES`]) other than the
    /// most recently faulted: first a stream's pages dropped behind it
    /// ([`Shared::drop_behind`]), then runs of resident pages, each starting at a random one,
    /// until `need` pages are chosen (a stream gives one long run, random access several short ones), all
    /// dropped at once. False if there is none.
    fn evict_victim(&self, pages: &mut Pages, need: usize) -> Result<bool> {
        let need = need.clamp(1, self.evict_run_max as usize) as u64;
        let mut runs: Vec<(u64, u64)> = Vec::with_capacity(need as usize);
        let mut chosen = self.drop_behind(pages, need, &mut runs);
        let last = pages.last_fault as usize;
        let mru_resident = last < pages.position.len() && pages.position[last] != u32::MAX;
        let candidates = pages.resident.len() as u64 - mru_resident as u64;
        // A few more draws than pages: a draw may land on a page chosen already.
        for _ in 0..2 * need {
            let len = pages.resident.len();
            if chosen >= need.min(candidates) {
                break;
            }
            let mut first = pages.resident[pages.rng.gen_range(0..len)] as u64;
            let taken = |p: u64| runs.iter().any(|&(a, b)| (a..b).contains(&p));
            // Of a few random pages that came in one by one, the one installed least often so
            // far: a page the program keeps coming back to is worth keeping.
            for _ in 1..VICTIM_SAMPLE {
                let other = pages.resident[pages.rng.gen_range(0..len)] as u64;
                if !pages.streamed[first as usize]
                    && !pages.streamed[other as usize]
                    && pages.installs[other as usize] < pages.installs[first as usize]
                    && other != pages.last_fault as u64
                    && !taken(other)
                {
                    first = other;
                }
            }
            if first == pages.last_fault as u64 || taken(first) {
                continue;
            }
            let mut end = first + 1;
            while end < self.pages
                && chosen + (end - first) < need
                && pages.state[end as usize] != MISSING
                && end != pages.last_fault as u64
                && !taken(end)
                && pages.streamed[end as usize - 1]
                && pages.streamed[end as usize]
            {
                end += 1;
            }
            chosen += end - first;
            runs.push((first, end));
        }
        if runs.is_empty() && candidates > 0 {
            // Every draw landed on the page just faulted: likely when only a few pages are
            // resident (a budget of four pages, three resident: one call in nine). Any
            // other resident page will do, rather than reporting a budget too small.
            let last = pages.last_fault;
            if let Some(&p) = pages.resident.iter().find(|&&p| p != last) {
                runs.push((p as u64, p as u64 + 1));
            }
        }
        if runs.is_empty() {
            return Ok(false);
        }
        self.evict_runs(pages, &runs)?;
        Ok(true)
    }

    /// Drop-behind: takes up to `need` resident pages that came in with a stream and that
    /// the demand has gone through, the most recent first, as runs of adjacent pages into
    /// `runs`. Returns how many it took.
    ///
    /// The most recent, not the oldest: a loop over more data than the budget then keeps
    /// the pages it came in with first, and finds them again on its next pass, where taking
    /// the oldest (first in, first out) would evict each page just before the loop comes
    /// back to it. Left alone: prefetched pages the demand has not reached yet (evicting
    /// them would waste the prefetch, and the throttle would count it so and prefetch less),
    /// the last few misses' pages (where streams are now), and the newest [`BEHIND_KEEP`]
    /// entries. At most [`BEHIND_SCAN`] entries are looked at per eviction.
    fn drop_behind(&self, pages: &mut Pages, need: u64, runs: &mut Vec<(u64, u64)>) -> u64 {
        let mut chosen = 0;
        let mut at = pages.behind.len().saturating_sub(BEHIND_KEEP);
        let stop = at.saturating_sub(BEHIND_SCAN);
        while chosen < need && at > stop {
            at -= 1;
            let (q, installs) = pages.behind[at];
            let q = q as u64;
            if pages.installs[q as usize] != installs || pages.position[q as usize] == u32::MAX {
                pages.behind.remove(at); // installed again since, or gone: a stale entry
                continue;
            }
            let streams_are_here = pages.recent_misses.contains(&(q as u32));
            if pages.accuracy.awaiting_use(q) || streams_are_here || runs.iter().any(|&(a, b)| (a..b).contains(&q)) {
                continue;
            }
            pages.behind.remove(at);
            match runs.last_mut() {
                Some((first, _)) if *first == q + 1 => *first = q,
                _ => runs.push((q, q + 1)),
            }
            chosen += 1;
        }
        chosen
    }

    /// Evicts the resident runs `runs` (each `first..end`): writes their dirty pages back,
    /// then drops them all with one `process_madvise(2)` (one TLB flush for all of them,
    /// Linux 6.15 and later) or, where that is not available, one `madvise` per run.
    pub(super) fn evict_runs(&self, pages: &mut Pages, runs: &[(u64, u64)]) -> Result<()> {
        for &(first, end) in runs {
            for page in first..end {
                if pages.state[page as usize] == CLEAN {
                    pages.writes.unwritten(page); // read, never written, while resident
                }
            }
            self.write_back_run(pages, first, end)?;
        }
        // A stream's run goes to the page pool while it has room (`pool.rs`); the rest of
        // the runs are dropped together.
        let mut dropped_runs = Vec::with_capacity(runs.len());
        for &(first, end) in runs {
            let rest = if end - first >= 2 { self.recycle_run(pages, first, end).unwrap_or(first) } else { first };
            if rest < end {
                dropped_runs.push((rest, end));
            }
        }
        let iov: Vec<libc::iovec> = dropped_runs
            .iter()
            .map(|&(first, end)| libc::iovec {
                iov_base: (self.base + first * self.page_bytes) as *mut libc::c_void,
                iov_len: ((end - first) * self.page_bytes) as usize,
            })
            .collect();
        let total: usize = iov.iter().map(|v| v.iov_len).sum();
        // SAFETY: runs of our own mapping; dropping them makes their next access fault.
        let dropped = if iov.is_empty() {
            0
        } else {
            unsafe {
                libc::syscall(libc::SYS_process_madvise, PIDFD_SELF, iov.as_ptr(), iov.len(), libc::MADV_DONTNEED, 0)
            }
        };
        if dropped != total as i64 {
            for v in &iov {
                // SAFETY: as above.
                if unsafe { libc::madvise(v.iov_base, v.iov_len, libc::MADV_DONTNEED) } != 0 {
                    return Err(Error::last_os("madvise(MADV_DONTNEED) of evicted pages"));
                }
            }
        }
        for &(first, end) in runs {
            self.forget_run(pages, first, end);
        }
        Ok(())
    }

    /// Writes back the dirty pages of the resident run `first..end` and drops the run.
    pub(super) fn evict_run(&self, pages: &mut Pages, first: u64, end: u64) -> Result<()> {
        self.evict_runs(pages, &[(first, end)])
    }

    /// Marks the dropped run `first..end` missing and takes it out of the resident set.
    pub(super) fn forget_run(&self, pages: &mut Pages, first: u64, end: u64) {
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
    }

    /// Write-protects the resident run `first..end` (writers now wait) if it has dirty
    /// pages, writes each contiguous dirty stretch back with one span write, and marks them
    /// clean. On error the unwritten pages stay dirty, resident and writable.
    pub(super) fn write_back_run(&self, pages: &mut Pages, first: u64, end: u64) -> Result<()> {
        if !(first..end).any(|p| pages.state[p as usize] == DIRTY) {
            return Ok(());
        }
        let addr = |p: u64| self.base + p * self.page_bytes;
        self.uffd.write_protect(addr(first), (end - first) * self.page_bytes, true)?;
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
            let len = (q - p) * self.page_bytes;
            // SAFETY: resident and write-protected: nobody changes these pages meanwhile.
            let data = unsafe { std::slice::from_raw_parts(addr(p) as *const u8, len as usize) };
            if let Err(e) = self.span.write(p * self.page_bytes, data) {
                for r in p..end {
                    if pages.state[r as usize] == DIRTY {
                        let _ = self.uffd.write_protect(addr(r), self.page_bytes, false);
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
