//! The fault handler thread: serves faults first, installs prefetched pages between them,
//! and busy-polls the descriptor for a while after its last work before it sleeps (thread
//! mode; in signal mode it only evicts ahead when its poll times out). Also the miss path
//! both modes share ([`Shared::serve_missing`]).
//!
//! The busy-poll is adaptive. Spinning spares the handler's wake-up (a few microseconds)
//! when the next fault comes soon, but on a machine with few cores the spinning thread takes
//! the core the program (or its other threads) would run on. So the handler keeps an average
//! of the gaps between the end of its work and the next fault, and spins only while that
//! average is short ([`SPIN_GAP_MAX`]): then for a few gaps' worth, at most `spin_us`. A
//! program faulting page after page (a stream, a fault-latency loop) gets the spinning
//! handler; one faulting every hundred microseconds from several threads (memcached) gets a
//! sleeping one and keeps its cores. Faults of two threads in turn also stop the spinning
//! for a while ([`SPIN_BACKOFF`]): the program's threads then have work for every core.

use super::{fatal, Pages, Pending, Shared, CLEAN, DIRTY, MISSING};
use crate::constants::{
    HANDLER_POLL_MS, PENDING_MAX, RECENT_MISSES, SPIN_BACKOFF, SPIN_GAP_MAX, SPIN_WINDOW_GAPS, SPIN_WINDOW_SLACK_US,
};
use crate::error::Result;
use crate::uffd::{Fault, FAULT_WP, FAULT_WRITE};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The adaptive busy-poll window (see the module documentation).
struct Spin {
    cap: Duration,
    /// Average gap from the end of the handler's work to the next fault, µs.
    gap_us: f64,
    /// The thread of the last fault (0: unknown).
    last_thread: u32,
    /// No spinning before this instant.
    backoff_until: Option<Instant>,
}

impl Spin {
    fn new(cap: Duration) -> Spin {
        Spin { cap, gap_us: 0.0, last_thread: 0, backoff_until: None }
    }

    /// A fault of `thread`. When another thread faulted last, several of the program's
    /// threads are at work, and they are better served by a handler that sleeps and leaves
    /// them the cores than by one that spins on one: memcached under its load generator
    /// (two worker threads, both cores busy) served 5-30% more requests with the handler
    /// never spinning (five alternating pairs), while one faulting thread with a core to
    /// spare needs the spin (a thread-mode fault took 59 µs instead of 17 µs without it).
    /// So the handler does not spin for [`SPIN_BACKOFF`] after faults of two threads.
    fn fault_from(&mut self, thread: u32) {
        if thread != 0 && self.last_thread != 0 && thread != self.last_thread {
            self.backoff_until = Some(Instant::now() + SPIN_BACKOFF);
        }
        self.last_thread = thread;
    }

    /// Whether to busy-poll once more, `since_work` after the handler's last work.
    fn may_spin(&self, since_work: Duration) -> bool {
        since_work < self.window() && self.backoff_until.is_none_or(|t| Instant::now() >= t)
    }

    fn fault_after(&mut self, idle: Duration) {
        // A long sleep counts as a long gap, not as one that outweighs many short ones.
        let idle_us = (idle.as_secs_f64() * 1e6).min(4.0 * SPIN_GAP_MAX);
        self.gap_us = 0.75 * self.gap_us + 0.25 * idle_us;
    }

    fn window(&self) -> Duration {
        if self.gap_us > SPIN_GAP_MAX {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((SPIN_WINDOW_GAPS * self.gap_us + SPIN_WINDOW_SLACK_US) * 1e-6).min(self.cap)
    }
}

impl Shared {
    /// [`Shared::serve`] on the handler thread: a panic there would end the only thread that
    /// serves this region's faults and leave every later fault waiting for ever, so it ends
    /// the process instead, saying what panicked.
    pub(super) fn serve_or_exit(&self) {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve())) {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            fatal(&format!("panic on the pager's handler thread: {what}"));
        }
    }

    pub(super) fn serve(&self) {
        let mut faults: Vec<Fault> = Vec::with_capacity(64);
        let mut last_work = Instant::now();
        let mut spin = Spin::new(self.spin);
        let mut idle = false;
        while !self.stop.load(Ordering::Acquire) {
            faults.clear();
            if let Err(e) = self.uffd.read_faults(&mut faults) {
                fatal(&format!("reading page faults: {e}"));
            }
            if !faults.is_empty() && idle {
                spin.fault_after(last_work.elapsed());
            }
            for f in &faults {
                spin.fault_from(f.thread);
                if let Err(e) = self.handle(f) {
                    fatal(&format!("cannot serve the page fault at {:#x} of a far-memory region: {e}", f.address));
                }
            }
            // In signal mode the faulting threads install the windows themselves.
            let prefetched = !self.signal_mode
                && match self.prefetch_step() {
                    Ok(any) => any,
                    Err(e) => fatal(&format!("cannot prefetch pages of a far-memory region: {e}")),
                };
            // Then room for the next misses, so that they need not evict first.
            let evicted = !prefetched
                && match self.evict_ahead() {
                    Ok(any) => any,
                    Err(e) => fatal(&format!("cannot evict pages of a far-memory region: {e}")),
                };
            if !faults.is_empty() || prefetched || evicted {
                last_work = Instant::now();
                idle = false;
            } else if spin.may_spin(last_work.elapsed()) {
                idle = true;
                self.idle_rounds.fetch_add(1, Ordering::Release);
                std::hint::spin_loop();
            } else {
                idle = true;
                self.idle_rounds.fetch_add(1, Ordering::Release);
                if self.uffd.poll_also(self.reclaim_fd.as_raw_fd(), HANDLER_POLL_MS) {
                    self.reclaim_woken();
                }
            }
        }
    }

    fn handle(&self, fault: &Fault) -> Result<()> {
        let page = self.fault_page(fault.address)?;
        let addr = self.base + page * self.page_bytes;
        let mut pages = self.state.lock();
        let state = pages.state[page as usize];
        if fault.flags & FAULT_WP != 0 {
            return self.handle_write_protect(&mut pages, page, state);
        }
        if state != MISSING {
            // Installed by a prefetch meanwhile, or dropped by the program's own madvise.
            if !self.serve_dropped(&mut pages, page, fault.flags & FAULT_WRITE != 0)? {
                self.uffd.wake(addr, self.page_bytes);
            }
            return Ok(());
        }
        self.serve_missing(&mut pages, page, fault.flags & FAULT_WRITE != 0)
    }

    /// The page of this region that the fault at `address` is in, or
    /// [`crate::Error::OutOfRange`] (the offset from the region's base, wrapped when below it)
    /// for an address outside the region: a fault the kernel reports there is a bug or a
    /// race with an unregistration, to be named, not an index past the page tables.
    pub(super) fn fault_page(&self, address: u64) -> Result<u64> {
        fault_page(self.base, self.pages, self.page_bytes, address)
    }

    /// Fetches and installs the missing `page` (thread and signal mode) and trains the
    /// prefetcher on the miss.
    pub(super) fn serve_missing(&self, pages: &mut Pages, page: u64, write: bool) -> Result<()> {
        pages.stats.misses += 1;
        // A miss right after one of the last few continues a stream, prefetcher or not
        // (several streams interleave their misses: SAXPY's x and y).
        let sequential = page > 0 && pages.recent_misses.contains(&(page as u32 - 1));
        let slot = pages.stats.misses as usize % RECENT_MISSES;
        pages.recent_misses[slot] = page as u32;
        pages.last_fault = page as u32;
        pages.accuracy.demand_miss(page);
        // The demand overtook a waiting window: its pages before this one were faulted in
        // already, and refetching those that were evicted since would be wasted work.
        let mut overtaken_end = None;
        for p in pages.pending.iter_mut() {
            if (p.next..p.end).contains(&page) {
                p.next = page + 1;
                overtaken_end = overtaken_end.max(Some(p.end));
            }
        }
        // Only a write, or a zone whose reads are followed by writes (`writes.rs`), installs
        // a page writable. "The page before is dirty" used to as well, but a page installed
        // dirty so made the next read miss dirty too: a read stream that started right after
        // a written page was written back page by page at eviction, never having been
        // written (twice the traffic of its evictions).
        let mut dirty = write;
        if !dirty && pages.writes.install_writable(page) {
            dirty = true;
            pages.stats.predicted_writes += 1;
        }
        let window = pages.prefetcher.on_miss(page, self.pages);
        let in_stream = sequential || !window.is_empty() || overtaken_end.is_some();
        let mut ahead = if window.is_empty() {
            window
        } else {
            let state = &pages.state;
            pages.accuracy.admit(window, |p| state[p as usize] == MISSING)
        };
        // Pages the prefetcher wants right after this one: the new window when it starts
        // there, or the rest of a window the demand just overtook (its pages are wanted now;
        // in signal mode nobody else installs them).
        let wanted_next = match overtaken_end {
            Some(end) => page + 1..end.max(ahead.end),
            None => ahead.clone(),
        };
        let count = self.inline_run(pages, page, &wanted_next);
        self.fetch_install(pages, page, count as usize, dirty)?;
        pages.streamed[page as usize] = in_stream || count > 1;
        if in_stream || count > 1 {
            (page..page + count).for_each(|q| streamed_in(pages, q));
        }
        if sequential {
            // The miss before was this stream's first, taken for a random one then.
            pages.streamed[page as usize - 1] = true;
        }
        for q in page + 1..page + count {
            pages.accuracy.prefetched(q);
            pages.streamed[q as usize] = true;
        }
        pages.stats.prefetches += count - 1;
        ahead.start = ahead.start.max(page + count);
        if !ahead.is_empty() {
            queue(pages, Pending { next: ahead.start, end: ahead.end, dirty });
        }
        Ok(())
    }

    /// How many pages a miss of `page` installs itself: in signal mode, the start of the
    /// prefetch window `ahead` when it follows the page (up to [`super::PREFETCH_RUN_BYTES`] of missing
    /// pages in all, one fetch and one copy), since in signal mode the faulting threads
    /// install the windows (the rest stays queued for the next fault that reaches it);
    /// otherwise 1.
    fn inline_run(&self, pages: &Pages, page: u64, ahead: &std::ops::Range<u64>) -> u64 {
        let mut count = 1;
        if self.signal_mode && ahead.start == page + 1 {
            // At most half the budget, as for background prefetches: a run larger than the
            // budget could not be installed at all (the region would have to evict the page
            // just faulted).
            let room = (self.budget_pages as u64 / 2).max(1);
            let limit = ahead.end.min(page + self.prefetch_run_max.min(room));
            while page + count < limit && pages.state[(page + count) as usize] == MISSING {
                count += 1;
            }
        }
        count
    }

    pub(super) fn handle_write_protect(&self, pages: &mut Pages, page: u64, state: u8) -> Result<()> {
        let addr = self.base + page * self.page_bytes;
        if state != CLEAN {
            self.uffd.wake(addr, self.page_bytes); // evicted or already dirty: retry the access
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
        pages.writes.written(page);
        pages.accuracy.written(page);
        pages.stats.write_faults += 1;
        self.uffd.write_protect(addr, (end - page) * self.page_bytes, false)
    }

    /// Installs the next run of the oldest waiting prefetch window, at most
    /// [`super::PREFETCH_RUN_BYTES`], never evicting for it the page just faulted. Returns
    /// whether there was anything to do.
    fn prefetch_step(&self) -> Result<bool> {
        let mut pages = self.state.lock();
        let room = (self.budget_pages / 2) as u64;
        while let Some(mut p) = pages.pending.pop_front() {
            while p.next < p.end && pages.state[p.next as usize] != MISSING {
                p.next += 1;
            }
            if p.next >= p.end {
                continue;
            }
            let mut end = p.next + 1;
            let limit = p.end.min(p.next + self.prefetch_run_max.min(room.max(1)));
            while end < limit && pages.state[end as usize] == MISSING {
                end += 1;
            }
            let count = (end - p.next) as usize;
            self.fetch_install(&mut pages, p.next, count, p.dirty)?;
            pages.stats.prefetches += count as u64;
            for q in p.next..end {
                pages.accuracy.prefetched(q);
                pages.streamed[q as usize] = true;
                streamed_in(&mut pages, q);
            }
            p.next = end;
            if p.next < p.end {
                pages.pending.push_front(p);
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Fetches the contiguous missing pages `first..first + count` and installs them with
    /// one copy, read-only unless `dirty` (then they are dirty already).
    pub(super) fn fetch_install(&self, pages: &mut Pages, first: u64, count: usize, dirty: bool) -> Result<()> {
        let bytes = count * self.page_bytes as usize;
        self.make_room(pages, count)?;
        let end = first + count as u64;
        if (first..end).any(|p| !pages.held[p as usize]) {
            // Pages the servers do not hold come from zeros, the others from the servers,
            // each stretch at once.
            let mut p = first;
            while p < end {
                let zeros = !pages.held[p as usize];
                let mut q = p + 1;
                while q < end && pages.held[q as usize] != zeros {
                    q += 1;
                }
                if zeros {
                    self.install_zeros(pages, p, (q - p) as usize, dirty)?;
                } else {
                    self.fetch_install(pages, p, (q - p) as usize, dirty)?;
                }
                p = q;
            }
            return Ok(());
        }
        // A run to be writable goes in on recycled pages where the pool has them (`pool.rs`).
        if dirty && count >= 2 && self.install_recycled(pages, first, count)? {
            self.kick_reclaim(pages);
            return Ok(());
        }
        let mut bounce = std::mem::take(&mut pages.bounce);
        let result = self.fetch_install_with(pages, first, count, dirty, &mut bounce[..bytes]);
        pages.bounce = bounce;
        self.kick_reclaim(pages);
        result
    }

    /// Installs the missing pages `first..first + count`, which the servers do not hold
    /// (`Pages::held`), from zeros (no fetch), read-only unless `dirty`. Until written back,
    /// a clean one is dropped at eviction and comes from zeros again.
    fn install_zeros(&self, pages: &mut Pages, first: u64, count: usize, dirty: bool) -> Result<()> {
        let mut bounce = std::mem::take(&mut pages.bounce);
        let zeros = &mut bounce[..count * self.page_bytes as usize];
        zeros.fill(0);
        let result = self.install(pages, first, count, dirty, zeros.as_ptr());
        pages.bounce = bounce;
        pages.stats.zero_fills += count as u64;
        self.kick_reclaim(pages);
        result
    }

    fn fetch_install_with(
        &self,
        pages: &mut Pages,
        first: u64,
        count: usize,
        dirty: bool,
        bounce: &mut [u8],
    ) -> Result<()> {
        // Over shared memory the pages are installed straight from the server's pool mapping
        // (one copy, by UFFDIO_COPY); otherwise fetched into the bounce buffer first.
        let far = first * self.page_bytes;
        if let Some(installed) =
            self.span.read_in_place(far, bounce.len(), |src| self.install(pages, first, count, dirty, src))?
        {
            return installed;
        }
        self.span.read(far, bounce)?;
        self.install(pages, first, count, dirty, bounce.as_ptr())
    }

    /// Installs the missing pages `first..first + count` from `src` (their contents, one
    /// after the other) with one `UFFDIO_COPY`, or page by page if some were there already.
    pub(super) fn install(
        &self,
        pages: &mut Pages,
        first: u64,
        count: usize,
        dirty: bool,
        src: *const u8,
    ) -> Result<()> {
        let state = if dirty { DIRTY } else { CLEAN };
        let dst = self.base + first * self.page_bytes;
        // In signal mode no thread ever sleeps on a fault: nothing to wake.
        let wake = !self.signal_mode;
        let all = self.uffd.copy(dst, src, count as u64 * self.page_bytes, !dirty, wake)?;
        for (i, p) in (first..first + count as u64).enumerate() {
            if pages.state[p as usize] != MISSING {
                continue;
            }
            // Some page of the run was already there: install the others one by one.
            let page_src = src.wrapping_add(i * self.page_bytes as usize);
            if all || self.uffd.copy(self.base + p * self.page_bytes, page_src, self.page_bytes, !dirty, wake)? {
                mark_installed(pages, p, state);
            }
        }
        Ok(())
    }
}

/// The page of the region of `pages` pages of `page_bytes` at `base` that `address` is in
/// (see [`Shared::fault_page`]).
fn fault_page(base: u64, pages: u64, page_bytes: u64, address: u64) -> Result<u64> {
    let offset = address.wrapping_sub(base);
    let size = pages * page_bytes;
    if address < base || offset >= size {
        return Err(crate::error::Error::OutOfRange { addr: offset, len: 1, size });
    }
    Ok(offset / page_bytes)
}

/// Records the missing page `p` as installed in `state` (resident, counted).
pub(super) fn mark_installed(pages: &mut Pages, p: u64, state: u8) {
    pages.state[p as usize] = state;
    pages.dead[p as usize] = false;
    pages.position[p as usize] = pages.resident.len() as u32 + 1;
    pages.resident.push(p as u32);
    pages.installs[p as usize] = pages.installs[p as usize].saturating_add(1);
    pages.aging.installed(p);
}

/// Records that page `q` came in with a stream (a victim for drop-behind, `evict.rs`).
fn streamed_in(pages: &mut Pages, q: u64) {
    if pages.behind.len() >= pages.position.len() {
        pages.behind.pop_front();
    }
    pages.behind.push_back((q as u32, pages.installs[q as usize]));
}

/// Adds a prefetch window, merged with a waiting one it continues or overlaps.
fn queue(pages: &mut Pages, new: Pending) {
    if let Some(p) = pages.pending.iter_mut().find(|p| new.next <= p.end && new.end >= p.next) {
        p.next = p.next.min(new.next);
        p.end = p.end.max(new.end);
        p.dirty |= new.dirty;
        return;
    }
    if pages.pending.len() >= PENDING_MAX {
        pages.pending.pop_front();
    }
    pages.pending.push_back(new);
}

#[cfg(test)]
mod tests {
    use super::{fault_page, Duration, Spin};
    use crate::error::Error;

    #[test]
    fn a_fault_outside_the_region_is_a_typed_error_not_an_index_out_of_range() {
        let (base, pages, page) = (0x7000_0000u64, 16u64, 4096u64);
        assert_eq!(fault_page(base, pages, page, base).unwrap(), 0);
        assert_eq!(fault_page(base, pages, page, base + 5 * page + 17).unwrap(), 5);
        assert_eq!(fault_page(base, pages, page, base + pages * page - 1).unwrap(), pages - 1);
        for outside in [base + pages * page, base + (1 << 40), base - 1, 0, u64::MAX] {
            match fault_page(base, pages, page, outside) {
                Err(Error::OutOfRange { addr, size, .. }) => {
                    assert_eq!(addr, outside.wrapping_sub(base), "names the offset of {outside:#x}");
                    assert_eq!(size, pages * page);
                }
                other => panic!("a fault at {outside:#x} gave {other:?}"),
            }
        }
    }

    #[test]
    fn the_handler_stops_spinning_once_two_threads_take_turns_faulting() {
        let mut spin = Spin::new(Duration::from_micros(1000));
        spin.fault_from(7);
        spin.fault_from(7);
        assert!(spin.may_spin(Duration::ZERO), "one faulting thread: spin");
        spin.fault_from(0); // thread unknown (no FEATURE_THREAD_ID): no evidence either way
        spin.fault_from(7);
        assert!(spin.may_spin(Duration::ZERO));
        spin.fault_from(8);
        assert!(!spin.may_spin(Duration::ZERO), "two threads: sleep for the back-off");
    }
}
