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
//!
//! **Kept pages age out.** Drop-behind alone keeps the pages a program streamed through
//! first for ever: a numpy job that fills two arrays it then leaves idle kept their first
//! pages resident through the whole matrix multiply that followed, which thrashed in what
//! was left of the budget (issue 27). The pager cannot tell a loop's kept pages from idle
//! ones by their faults (neither faults while resident), but it can tell by what happens when
//! they leave: a loop's come back on its next pass, idle ones never. So a share of
//! drop-behind's victims ([`Aging`]; 1/8 at first) comes from the oldest stream pages still
//! resident (in the older half of the list), and the share
//! adapts to whether they come back: every [`AGING_WINDOW`] such evictions it doubles (up to
//! half) if fewer than half as many aged-out pages were installed again meanwhile, and halves
//! (down to 1/64) otherwise. A loop over more than the budget keeps its drop-behind
//! behaviour at a small cost, and idle data drains out of the budget within a few budgets'
//! worth of evictions. This is Linux's refault distance (a page that comes back soon after
//! eviction was in the working set) reduced to one bit per page.

use super::{Pages, Shared, CLEAN, DIRTY, MISSING};
use crate::constants::{AGING_SHARE_MAX, AGING_SHARE_START, AGING_WINDOW, BEHIND_KEEP, BEHIND_SCAN, VICTIM_SAMPLE};
use crate::error::{Error, Result};
use parking_lot::MutexGuard;
use rand::Rng;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

/// The ageing of the stream pages drop-behind keeps (see the module documentation, "Kept
/// pages age out").
pub(super) struct Aging {
    /// Of 64 drop-behind victims, how many come from the oldest stream pages.
    share: u32,
    /// The fraction of a victim owed to the old end by earlier evictions, in 64ths.
    carry: u32,
    /// Old stream pages evicted, and evicted old pages installed again, since the share was
    /// last adapted.
    evicted: u32,
    came_back: u32,
    /// Per page: evicted from the old end and not installed since.
    aged_out: Vec<bool>,
}

impl Aging {
    pub(super) fn new(pages: u64) -> Aging {
        Aging { share: AGING_SHARE_START, carry: 0, evicted: 0, came_back: 0, aged_out: vec![false; pages as usize] }
    }

    /// Page `p` was installed: if it had aged out, the program still used it.
    pub(super) fn installed(&mut self, p: u64) {
        if std::mem::take(&mut self.aged_out[p as usize]) {
            self.came_back += 1;
        }
    }

    /// How many of `need` victims to take from the old end now.
    fn owed(&mut self, need: u64) -> u64 {
        let owed = need as u32 * self.share + self.carry;
        self.carry = owed % 64;
        (owed / 64) as u64
    }

    fn aged_out(&mut self, p: u64) {
        self.aged_out[p as usize] = true;
        self.evicted += 1;
        if self.evicted >= AGING_WINDOW {
            self.share = if 2 * self.came_back < self.evicted {
                (self.share * 2).min(AGING_SHARE_MAX)
            } else {
                (self.share / 2).max(1)
            };
            (self.evicted, self.came_back) = (0, 0);
        }
    }
}

/// What an entry of the stream list (`Pages::behind`) is to an eviction.
enum Behind {
    /// Its page was installed again since, or is gone: the entry is dropped.
    Stale,
    /// Left alone this time: prefetched and not reached yet, where a stream is now, or
    /// chosen already.
    Passed,
    /// This page may go.
    Victim(u64),
}

/// The entry `at` of the stream list, for an eviction that has chosen `runs` so far.
fn behind_at(pages: &Pages, at: usize, runs: &[(u64, u64)]) -> Behind {
    let (q, installs) = pages.behind[at];
    let q = q as u64;
    if pages.installs[q as usize] != installs || pages.position[q as usize] == 0 {
        return Behind::Stale;
    }
    let streams_are_here = pages.recent_misses.contains(&(q as u32));
    if pages.accuracy.awaiting_use(q) || streams_are_here || runs.iter().any(|&(a, b)| (a..b).contains(&q)) {
        return Behind::Passed;
    }
    Behind::Victim(q)
}

/// `PIDFD_SELF` (Linux 6.15): the calling process for `process_madvise(2)`, without a pidfd
/// that a forked child would inherit pointing at its parent.
const PIDFD_SELF: libc::c_int = -10000;

/// A non-blocking eventfd for [`Shared::kick_reclaim`].
pub(super) fn reclaim_eventfd() -> Result<OwnedFd> {
    // SAFETY: eventfd takes an initial count and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::last_os("eventfd for the pager's background reclaim"));
    }
    // SAFETY: a descriptor just made and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Shared {
    /// Evicts until `room` more pages fit in the budget, in runs of up to
    /// [`super::EVICT_RUN_BYTES`]. With background reclaim this is the last resort: the
    /// handler keeps pages free between the watermarks, and an install finds the budget full
    /// only when faults came faster than it could evict
    /// ([`Stats::full_evictions`](crate::Stats)); then it evicts just the room. Without
    /// background reclaim it frees up to an eighth of the budget beyond the room.
    pub(super) fn make_room(&self, pages: &mut Pages, room: usize) -> Result<()> {
        if pages.resident.len() + room <= self.budget_pages {
            return Ok(());
        }
        let before = pages.stats.evictions;
        // With background reclaim, the handler fell behind (a busy machine did not run it in
        // time): evict only what this install needs, so that the fault waits for the fewest
        // pages and the handler's runs make the rest of the room. Without it, free a slack
        // beyond the room, so that the next misses do not each pay for a `madvise`.
        let slack = if self.reclaims() { 0 } else { self.slack() };
        let target = self.budget_pages.saturating_sub(slack).max(room.min(self.budget_pages));
        let result = self.make_room_to(pages, room, target);
        pages.stats.full_evictions += pages.stats.evictions - before;
        result
    }

    fn make_room_to(&self, pages: &mut Pages, room: usize, target: usize) -> Result<()> {
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

    /// The free budget eviction on the fault path leaves behind it: an eighth of the
    /// budget, at most a run.
    fn slack(&self) -> usize {
        (self.budget_pages / 8).min(self.evict_run_max as usize)
    }

    /// Whether background reclaim runs for this region: asked for, and a budget of two runs
    /// or more that does not hold the whole region (small budgets are left to
    /// [`Shared::make_room`]).
    fn reclaims(&self) -> bool {
        let small = self.budget_pages < 2 * self.evict_run_max as usize || self.budget_pages as u64 >= self.pages;
        self.evict_ahead && !small && self.free_high > 0
    }

    /// After an install (signal mode, on the faulting thread): wakes the handler thread to
    /// reclaim once fewer than the low watermark's pages are free. One write to its eventfd
    /// per wake-up; the fault itself evicts nothing.
    pub(super) fn kick_reclaim(&self, pages: &Pages) {
        let free = self.budget_pages.saturating_sub(pages.resident.len());
        if !self.signal_mode || free >= self.free_low || !self.reclaims() {
            return;
        }
        if !self.reclaim_kicked.swap(true, Ordering::AcqRel) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: an 8-byte write to our own eventfd; a full counter (never, it is
            // drained on every wake-up) would only fail the write, and the handler's poll
            // timeout still comes.
            unsafe { libc::write(self.reclaim_fd.as_raw_fd(), one.as_ptr().cast(), 8) };
        }
    }

    /// The handler took a wake-up: empties the eventfd, so that the next kick wakes it again.
    pub(super) fn reclaim_woken(&self) {
        let mut count = [0u8; 8];
        // SAFETY: an 8-byte read from our own non-blocking eventfd (EAGAIN when empty).
        unsafe { libc::read(self.reclaim_fd.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        self.reclaim_kicked.store(false, Ordering::Release);
    }

    /// Background reclaim, one step (the handler thread, between faults): when fewer than
    /// the low watermark's pages of the budget are free, evicts one run, and goes on with a
    /// run per call until the high watermark's pages are free. Holds the region's lock for
    /// one run only, and hands it straight to a faulting thread waiting for it. Returns
    /// whether it evicted.
    pub(super) fn evict_ahead(&self) -> Result<bool> {
        if !self.reclaims() {
            return Ok(false);
        }
        let mut pages = self.state.lock();
        let free = self.budget_pages.saturating_sub(pages.resident.len());
        if free >= self.free_high {
            pages.reclaiming = false;
            return Ok(false);
        }
        if free >= self.free_low && !pages.reclaiming {
            return Ok(false);
        }
        pages.reclaiming = true;
        let before = pages.stats.evictions;
        let evicted = self.evict_victim(&mut pages, self.free_high - free)?;
        pages.stats.reclaim_evictions += pages.stats.evictions - before;
        MutexGuard::unlock_fair(pages);
        Ok(evicted)
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
        let mru_resident = last < pages.position.len() && pages.position[last] != 0;
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
        let mut chosen = self.age_out(pages, need, runs);
        let mut at = pages.behind.len().saturating_sub(BEHIND_KEEP);
        let stop = at.saturating_sub(BEHIND_SCAN);
        while chosen < need && at > stop {
            at -= 1;
            let q = match behind_at(pages, at, runs) {
                Behind::Stale => {
                    pages.behind.remove(at);
                    continue;
                }
                Behind::Passed => continue,
                Behind::Victim(q) => q,
            };
            pages.behind.remove(at);
            match runs.last_mut() {
                Some((first, _)) if *first == q + 1 => *first = q,
                _ => runs.push((q, q + 1)),
            }
            chosen += 1;
        }
        chosen
    }

    /// Takes the share of `need` owed to the old end ([`Aging`]) from the oldest stream pages
    /// still resident (the older half of the list: never pages just streamed in), as runs
    /// into `runs`. Returns how many it took.
    fn age_out(&self, pages: &mut Pages, need: u64, runs: &mut Vec<(u64, u64)>) -> u64 {
        let owed = pages.aging.owed(need);
        let mut taken = 0;
        let mut at = 0;
        while taken < owed && at < BEHIND_SCAN && 2 * at + 1 < pages.behind.len() {
            let q = match behind_at(pages, at, runs) {
                Behind::Stale => {
                    pages.behind.remove(at);
                    continue;
                }
                Behind::Passed => {
                    at += 1;
                    continue;
                }
                Behind::Victim(q) => q,
            };
            pages.behind.remove(at);
            match runs.last_mut() {
                Some((_, end)) if *end == q => *end = q + 1,
                _ => runs.push((q, q + 1)),
            }
            pages.aging.aged_out(q);
            taken += 1;
        }
        taken
    }

    /// Evicts the resident runs `runs` (each `first..end`): writes their dirty pages back,
    /// then drops them all with one `process_madvise(2)` (one TLB flush for all of them,
    /// Linux 6.15 and later) or, where that is not available, one `madvise` per run.
    pub(super) fn evict_runs(&self, pages: &mut Pages, runs: &[(u64, u64)]) -> Result<()> {
        for &(first, end) in runs {
            for page in first..end {
                if pages.dead[page as usize] {
                    // Freed: nothing of it is worth a write-back, and nobody writes it
                    // before it is dropped below (the space is not handed out).
                    pages.state[page as usize] = CLEAN;
                    continue;
                }
                if pages.state[page as usize] == CLEAN {
                    pages.writes.unwritten(page); // read, never written, while resident
                }
            }
            self.write_back_run(pages, first, end)?;
        }
        self.drop_runs(pages, runs)
    }

    /// Drops the resident runs `runs` from local memory as they are, without a write-back
    /// (the caller wrote the dirty pages back, or their contents are dead): a stream's run
    /// goes to the page pool while it has room (`pool.rs`), the rest are dropped with one
    /// `process_madvise(2)`; every page is then missing.
    pub(super) fn drop_runs(&self, pages: &mut Pages, runs: &[(u64, u64)]) -> Result<()> {
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
            pages.dead[page as usize] = false;
            let k = pages.position[page as usize] as usize - 1;
            pages.resident.swap_remove(k);
            if k < pages.resident.len() {
                let moved = pages.resident[k];
                pages.position[moved as usize] = k as u32 + 1;
            }
            pages.position[page as usize] = 0;
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
                pages.held[r as usize] = true; // the servers hold its contents now
            }
            pages.stats.writebacks += q - p;
            p = q;
        }
        Ok(())
    }
}
