//! Work on far data in place: the caller's computation gets views of resident cache lines
//! (no per-element lookup, no copy out of the cache), and many misses are fetched as one
//! batch before the work that needs them.
//!
//! - [`FarMemory::fetch_ranges`] makes the lines of many ranges resident with their misses
//!   in flight together (seed 004's MSHRs: a graph query issues every neighbour list of a
//!   frontier, then waits once).
//! - [`FarMemory::for_each_piece`] walks a range line by line, handing out each line's
//!   bytes in place. A miss whose set has no clean way to replace is **not allocated**: the
//!   line is read into a staging copy instead (a streaming read never forces a write-back,
//!   as prefetches never do), together with the missing lines after it in the range, up to
//!   [`STAGING_BYTES`] (one request instead of one per line), and a line it does allocate is not made its set's most
//!   recently used way, so the next miss of the set replaces it first: a sweep larger than
//!   the budget keeps the dirty lines it found resident instead of cycling everything
//!   through the cache.
//! - [`FarMemory::zip_pieces_mut`] walks a source and a destination range together (SAXPY's
//!   `y += a * x`): the source as above, the destination allocated (write-allocate, fetched
//!   unless the piece covers the whole line and the caller overwrites it) and marked dirty.

use super::{FarMemory, Want, WRITE_BACK_RUN_BYTES};
use crate::cache::{Lookup, DIRTY, VALID};
use crate::error::Result;

/// Most bytes of missing lines one bypassing read fetches into the staging buffer: 16 KiB,
/// inside L1/L2 while the computation reads it, four 4 KiB lines per request.
pub const STAGING_BYTES: usize = 16 << 10;

/// Bytes of destination lines one miss of [`FarMemory::zip_pieces_mut`] fetches (in
/// `DestMode::Update`): 4 KiB, the line that missed and the missing ones after it in the
/// range. Small, so that the fetched lines are still in L1 when the computation updates
/// them: measured on the development machine (one pass over 128 MiB, the copy from the
/// server's mapped pool followed by `y += a * x` on the copied piece, best of 7 in thread
/// CPU time), 14.3 ms in 4 KiB pieces, 17.3 ms in 16 KiB and 17.9 ms in 64 KiB, against
/// 9.8 ms for the pass in local memory.
pub const UPDATE_FETCH_BYTES: u64 = 4 << 10;

/// How [`FarMemory::zip_pieces_mut`] treats the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestMode {
    /// The computation reads the destination before writing it (`y += a * x`).
    Update,
    /// The computation overwrites every byte of the destination: whole lines are not fetched.
    Overwrite,
}

impl FarMemory {
    /// Makes the lines of every `(addr, len)` range resident, fetching all their misses as
    /// batches of at most `outstanding_max` reads in flight. Lines fetched early in a long
    /// list may be evicted by later ones when the ranges exceed the budget; later accesses
    /// then miss again (correct, only slower). Only the first line of each range trains the
    /// prefetcher: the lines after it are part of the request, not evidence of a stream.
    pub fn fetch_ranges(&mut self, ranges: &[(u64, usize)]) -> Result<()> {
        let lb = self.config.line_bytes;
        for &(addr, len) in ranges {
            self.check(addr, len)?;
            if len == 0 {
                continue;
            }
            let first = addr / lb;
            for line in first..=(addr + len as u64 - 1) / lb {
                if self.store.lookup(line) == Lookup::Missing {
                    self.want_trained(line, Want::Fetch, line == first)?;
                }
            }
        }
        self.issue()
    }

    /// Calls `f(offset in range, bytes)` for consecutive pieces of `[addr, addr + len)`,
    /// each inside one line and viewed in place in the cache (or in the staging copy of a
    /// line that was not allocated; see the module docs).
    pub fn for_each_piece(&mut self, addr: u64, len: usize, mut f: impl FnMut(usize, &[u8])) -> Result<()> {
        self.check(addr, len)?;
        let lb = self.config.line_bytes;
        let last = (addr + len.max(1) as u64 - 1) / lb;
        self.staged = (0, 0);
        self.mapped = (0, 0, 0);
        let mut at = 0usize;
        while at < len {
            let a = addr + at as u64;
            let off = (a % lb) as usize;
            let n = (lb as usize - off).min(len - at);
            let view = self.read_view(a / lb, last);
            self.pinned.clear();
            // SAFETY: `view` points at a whole line (a slot or the staging copy) that nothing
            // changes until the next call on `self`.
            f(at, unsafe { std::slice::from_raw_parts(view?.add(off), n) });
            at += n;
        }
        Ok(())
    }

    /// Calls `f(source piece, destination piece)` for consecutive equal-length pieces of
    /// `[src, src + len)` and `[dst, dst + len)`, each inside one line of either range; the
    /// destination lines are marked dirty. Pieces are cut at line boundaries of both ranges,
    /// so callers that view them as elements keep both ranges aligned to the element size.
    pub fn zip_pieces_mut(
        &mut self,
        (src, dst): (u64, u64),
        len: usize,
        mode: DestMode,
        mut f: impl FnMut(&[u8], &mut [u8]),
    ) -> Result<()> {
        self.check(src, len)?;
        self.check(dst, len)?;
        let lb = self.config.line_bytes;
        let last = (src + len.max(1) as u64 - 1) / lb;
        let dst_last = (dst + len.max(1) as u64 - 1) / lb;
        self.staged = (0, 0);
        self.mapped = (0, 0, 0);
        self.mapped_dst = (0, 0, 0);
        let mut at = 0usize;
        while at < len {
            let (s, d) = (src + at as u64, dst + at as u64);
            let (s_off, d_off) = ((s % lb) as usize, (d % lb) as usize);
            let n = (lb as usize - s_off).min(lb as usize - d_off).min(len - at);
            // The destination first, so the source's fill cannot push out a dirty line the
            // loop is about to update (the source is read-only: it may be bypassed instead).
            let same = s / lb == d / lb;
            let whole = mode == DestMode::Overwrite && d_off == 0 && n == lb as usize && !same;
            self.pinned.clear();
            let ahead = if mode == DestMode::Update { dst_last } else { d / lb };
            let slot = self.write_slot(d / lb, whole, ahead)?;
            self.pinned.push(slot);
            let view = match self.read_view(s / lb, last) {
                Ok(_) if same => {
                    // The source line is the destination line (overlapping ranges): read a copy.
                    self.staged = (0, 0);
                    let (store, staging) = (&self.store, &mut self.staging);
                    staging[..lb as usize].copy_from_slice(store.data(slot));
                    self.staging.as_ptr()
                }
                Ok(view) => view,
                Err(e) => {
                    self.pinned.clear();
                    if whole {
                        // Allocated without a fetch and never written: it must not stay valid.
                        self.store.set_state(slot, 0);
                    }
                    return Err(e);
                }
            };
            self.pinned.clear();
            let out = self.store.data_ptr(slot);
            // SAFETY: the source view is a whole line (staging or a slot other than `slot`,
            // which was pinned while the source was found), the destination a whole line;
            // they are disjoint and nothing moves them during `f`.
            unsafe {
                f(std::slice::from_raw_parts(view.add(s_off), n), std::slice::from_raw_parts_mut(out.add(d_off), n))
            };
            self.store.set_state(slot, VALID | DIRTY);
            if (self.staged.0..self.staged.0 + self.staged.1).contains(&(d / lb)) {
                self.staged = (0, 0); // a staged copy of this line is stale now
            }
            at += n;
        }
        Ok(())
    }

    /// A pointer to the bytes of `line` for reading: its slot (pinned in `self.pinned`
    /// until the caller clears it) or its staging copy when the set had no clean victim;
    /// `last` is the range's last line (staging reads ahead up to it). Slots already in
    /// `self.pinned` are not replaced.
    fn read_view(&mut self, line: u64, last: u64) -> Result<*const u8> {
        let lb = self.config.line_bytes;
        let (first, count) = self.staged;
        if (first..first + count).contains(&line) {
            // SAFETY: inside the staging buffer, which holds `count` lines from `first`.
            return Ok(unsafe { self.staging.as_ptr().add(((line - first) * lb) as usize) });
        }
        if let Some(slot) = self.hit(line)? {
            self.pinned.push(slot);
            return Ok(self.store.data_ptr(slot).cast_const());
        }
        if let Some(view) = self.in_place_view(line, last)? {
            // The line lies in this process already (the server's mapped pool): read it
            // there. No copy, no line taken from the budget, nothing evicted.
            self.stats.misses += 1;
            self.stats.in_place += 1;
            return Ok(view);
        }
        if self.store.victim(line, &self.pinned, true).is_none() {
            let room = self.staging.len() as u64 / lb;
            let mut count = 1;
            while count < room && line + count <= last && self.store.lookup(line + count) == Lookup::Missing {
                count += 1;
            }
            self.stats.misses += count;
            self.stats.bypassed += count;
            self.staged = (0, 0);
            let mut staging = std::mem::take(&mut self.staging);
            let result = self.span.read(line * lb, &mut staging[..(count * lb) as usize]);
            self.staging = staging;
            result?;
            self.staged = (line, count);
            return Ok(self.staging.as_ptr());
        }
        // A streaming read does not train the prefetcher: its lines go in without priority,
        // and fetching more of them ahead would only push out lines that are being reused.
        self.want_trained(line, Want::Stream, false)?;
        self.issue()?;
        let slot = self.slot_of(line)?;
        self.pinned.push(slot);
        Ok(self.store.data_ptr(slot).cast_const())
    }

    /// A destination miss whose bytes lie in a server's pool mapped here (shared memory):
    /// the line is allocated and copied from there by this core right before the caller
    /// updates it, without a batch or a span read (whose bookkeeping, once per line, cost
    /// about as much as the copy in a `perf` profile of the SAXPY rows). `None` when the
    /// line is not mapped here. Like the look-ahead fetch, it does not train the prefetcher.
    fn write_slot_mapped(&mut self, line: u64) -> Result<Option<usize>> {
        let lb = self.config.line_bytes;
        let (first, count, at) = self.mapped_dst;
        let at = if (first..first + count).contains(&line) && !self.span.loads_need_flush() {
            (at + ((line - first) * lb) as usize) as *const u8
        } else {
            self.mapped_dst = (0, 0, 0);
            let Some((at, len)) = self.span.mapped(line * lb, lb as usize, WRITE_BACK_RUN_BYTES.max(lb) as usize)?
            else {
                return Ok(None);
            };
            self.mapped_dst = (line, len as u64 / lb, at as usize);
            at
        };
        let Some(slot) = self.pick_victim(line, false) else { return Ok(None) };
        self.evict(slot)?;
        self.stats.misses += 1;
        // SAFETY: `at` is `lb` readable bytes of the mapped pool (the stretch `mapped` found),
        // the slot `lb` writable bytes of the cache; they do not overlap.
        unsafe { copy_line(at, self.store.data_ptr(slot), lb as usize) };
        self.store.install(slot, line, VALID);
        self.store.touch(slot);
        Ok(Some(slot))
    }

    /// Where `line` lies in a server's pool mapped here, if it can be read in place. The
    /// stretch found (up to the range's last line `last`, within one chunk) is remembered,
    /// so a sweep asks the span service once per stretch, not once per line.
    fn in_place_view(&mut self, line: u64, last: u64) -> Result<Option<*const u8>> {
        let lb = self.config.line_bytes;
        let (first, count, at) = self.mapped;
        if (first..first + count).contains(&line) && !self.span.loads_need_flush() {
            return Ok(Some((at + ((line - first) * lb) as usize) as *const u8));
        }
        self.mapped = (0, 0, 0);
        let Some((at, len)) = self.span.mapped(line * lb, lb as usize, ((last + 1 - line) * lb) as usize)? else {
            return Ok(None);
        };
        self.mapped = (line, len as u64 / lb, at as usize);
        Ok(Some(at))
    }

    /// The slot of `line` for writing (allocated and, unless `whole`, fetched on a miss).
    /// `last` is the last line the caller will update after this one: a miss fetches the
    /// missing lines up to it as well, up to [`UPDATE_FETCH_BYTES`] (one span read into
    /// adjacent slots) and at most one per set of a group. Those lines are the request, not a guess: the caller asked for the range, so
    /// such a miss does not train the prefetcher, which has nothing left to find ahead of it
    /// (with or without it, a range update fetches the same lines the same way).
    fn write_slot(&mut self, line: u64, whole: bool, last: u64) -> Result<usize> {
        if let Some(slot) = self.hit(line)? {
            return Ok(slot);
        }
        if !whole {
            if let Some(slot) = self.write_slot_mapped(line)? {
                return Ok(slot);
            }
        }
        if last > line {
            let most = (UPDATE_FETCH_BYTES / self.config.line_bytes).clamp(1, self.group_lines as u64);
            self.want_trained(line, Want::Fetch, false)?;
            for next in line + 1..=last.min(line + most - 1) {
                if self.store.lookup(next) == Lookup::Missing {
                    self.want_trained(next, Want::Fetch, false)?;
                }
            }
        } else {
            self.want(line, if whole { Want::Overwrite } else { Want::Fetch })?;
        }
        self.issue()?;
        self.slot_of(line)
    }
}

/// Copies one line with 16-byte vector moves. Not `memcpy`: for 4 KiB it uses `rep movsb`
/// here, and the caller updates the destination right after the copy.
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes (a multiple of 16), not overlapping.
#[inline]
unsafe fn copy_line(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        for k in (0..len).step_by(16) {
            _mm_storeu_si128(dst.add(k).cast::<__m128i>(), _mm_loadu_si128(src.add(k).cast::<__m128i>()));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src, dst, len);
}
