//! Recycled pages (Linux 6.8+, `UFFDIO_MOVE`): evicted stream runs are moved out of the
//! region into a small pool instead of being freed, and runs installed writable are fetched
//! into pool pages and moved in, instead of `UFFDIO_COPY` allocating, charging and filling
//! new pages that eviction then frees again.
//!
//! `bench/farmem-move.c` measured paging in runs of 16 pages without nam at 2.2-2.6 us a page
//! with copies against 0.9-1.0 us with moves. Moves are used only where they are safe and
//! pay:
//! - **only for pages installed writable** (write faults, and read misses the write
//!   predictor installs writable; they are dirty, written back at eviction anyway). The
//!   kernel makes a moved page writable and does not carry write protection over, so a page
//!   that must stay write-protected would need a `UFFDIO_WRITEPROTECT` after the move, and
//!   another thread of the program could write it unnoticed in between (its write would be
//!   lost at eviction);
//! - **only for runs** (two pages or more): for single random pages the move saves little,
//!   and evicting them one move at a time would cost a TLB flush per page, where the batched
//!   `process_madvise` of random victims costs one per batch.
//!
//! The pool is a stack of [`POOL_PAGES`] pages in its own private mapping, registered for
//! missing-page faults with the region's descriptor (a move's destination must be): the
//! pages `0..filled` are present (recycled, holding stale data of some evicted page), the
//! rest are missing and never touched. Its pages are outside the budget, as the bounce
//! buffer is: at most 128 KiB per region. Regions on huge pages have none (the kernel moves
//! 4 KiB pages only).

use super::handler::mark_installed;
use super::Shared;
use crate::constants::{PAGE_BYTES, POOL_PAGES};
use crate::error::{Error, Result};

/// The recycled pages of a region; see the module documentation.
pub(super) struct Pool {
    base: u64,
    /// Pages `0..filled` are present.
    filled: u64,
}

impl Pool {
    /// Maps and registers the pool with `shared`'s descriptor; `None` where the kernel cannot
    /// move pages (the pager then copies, as before Linux 6.8).
    pub(super) fn new(uffd: &crate::uffd::Uffd) -> Result<Option<Pool>> {
        if !uffd.can_move {
            return Ok(None);
        }
        let len = (POOL_PAGES * PAGE_BYTES) as usize;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("mmap of the pager's page pool"));
        }
        // Moves take 4 KiB pages only: no huge page may form here.
        // SAFETY: the mapping made above.
        unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
        if let Err(e) = uffd.register_missing(base as u64, len as u64) {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(base, len) };
            return Err(e);
        }
        Ok(Some(Pool { base: base as u64, filled: 0 }))
    }

    /// Takes the `count` present pages at the top of the stack and returns their address,
    /// or `None` if fewer are there. The caller moves them away, or gives the range back to
    /// [`Pool::drop_taken`] if it cannot.
    pub(super) fn take(&mut self, count: u64) -> Option<u64> {
        if self.filled < count {
            return None;
        }
        self.filled -= count;
        Some(self.base + self.filled * PAGE_BYTES)
    }

    /// Makes the pages of a taken range missing again, whichever of them did not move (a
    /// failed move): the stack stays a present prefix.
    pub(super) fn drop_taken(&self, addr: u64, count: u64) {
        // SAFETY: a range of the pool's own mapping above its present prefix.
        unsafe { libc::madvise(addr as *mut libc::c_void, (count * PAGE_BYTES) as usize, libc::MADV_DONTNEED) };
    }

    /// Where `count` pages can be moved onto the stack, or `None` if it has no room.
    pub(super) fn room(&self, count: u64) -> Option<u64> {
        (self.filled + count <= POOL_PAGES).then(|| self.base + self.filled * PAGE_BYTES)
    }

    /// `count` pages were moved to [`Pool::room`]'s address.
    pub(super) fn pushed(&mut self, count: u64) {
        self.filled += count;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the pool's own mapping; unmapping also ends its registration.
        unsafe { libc::munmap(self.base as *mut libc::c_void, (POOL_PAGES * PAGE_BYTES) as usize) };
    }
}

impl Shared {
    /// Installs the missing run `first..first + count` (two pages or more, to be writable)
    /// through recycled pages: fetched into pool pages, then moved in. Returns false, having
    /// done nothing, when the pool has too few pages; the caller then copies.
    pub(super) fn install_recycled(&self, pages: &mut super::Pages, first: u64, count: usize) -> Result<bool> {
        let Some(pool) = pages.pool.as_mut() else { return Ok(false) };
        let Some(src) = pool.take(count as u64) else { return Ok(false) };
        let len = count as u64 * self.page_bytes;
        // SAFETY: `count` present pages of the pool, ours alone while the state is locked.
        let buf = unsafe { std::slice::from_raw_parts_mut(src as *mut u8, len as usize) };
        if let Err(e) = self.span.read(first * self.page_bytes, buf) {
            // Back on the stack: still present (whatever the failed read left in them does
            // not matter, a recycled page's contents are always overwritten before use).
            pool.pushed(count as u64);
            return Err(e);
        }
        let wake = !self.signal_mode;
        match self.uffd.move_pages(self.base + first * self.page_bytes, src, len, wake) {
            Ok(()) => {
                pages.stats.recycled += count as u64;
                (first..first + count as u64).for_each(|p| mark_installed(pages, p, super::DIRTY));
            }
            Err(e) => {
                // The pages that did not move still hold the data: copy them, then leave
                // the taken range missing.
                let moved = e.moved / self.page_bytes;
                pages.stats.recycled += moved;
                (first..first + moved).for_each(|p| mark_installed(pages, p, super::DIRTY));
                let rest = first + moved;
                let left = count - moved as usize;
                let copied = self.install(pages, rest, left, true, (src + e.moved) as *const u8);
                pages.pool.as_ref().expect("taken above").drop_taken(src, count as u64);
                copied?;
                log::debug!("UFFDIO_MOVE of {count} pages stopped after {moved}: {}", e.source);
            }
        }
        Ok(true)
    }

    /// Moves the resident run `first..end` (written back already) into the pool if it has
    /// room. Returns the first page that did not move (`end` when all did; a move can stop
    /// early), or `None` when nothing was tried (no pool, no room): the caller drops the
    /// rest. The moved pages still have to be forgotten by the caller.
    pub(super) fn recycle_run(&self, pages: &mut super::Pages, first: u64, end: u64) -> Option<u64> {
        let pool = pages.pool.as_mut()?;
        let count = end - first;
        let dst = pool.room(count)?;
        match self.uffd.move_pages(dst, self.base + first * self.page_bytes, count * self.page_bytes, false) {
            Ok(()) => {
                pool.pushed(count);
                Some(end)
            }
            Err(e) => {
                let moved = e.moved / self.page_bytes;
                pool.pushed(moved);
                log::debug!("UFFDIO_MOVE of an evicted run stopped after {moved} pages: {}", e.source);
                Some(first + moved)
            }
        }
    }
}
