//! Work on far data in place: the caller's computation gets views of resident cache lines
//! (no per-element lookup, no copy out of the cache), and many misses are fetched as one
//! batch before the work that needs them.
//!
//! - [`FarMemory::fetch_ranges`] makes the lines of many ranges resident with their misses
//!   in flight together (Mao 2020's MSHRs: a graph query issues every neighbour list of a
//!   frontier, then waits once).
//! - [`FarMemory::for_each_piece`] walks a range line by line, handing out each line's
//!   bytes in place. A miss whose set has no clean way to replace is **not allocated**: the
//!   line is read into a staging copy instead (a streaming read never forces a write-back,
//!   as prefetches never do), together with the missing lines after it in the range, up to
//!   [`STAGING_BYTES`](crate::constants::STAGING_BYTES) (one request instead of one per line), and a line it does allocate is not made its set's most
//!   recently used way, so the next miss of the set replaces it first: a sweep larger than
//!   the budget keeps the dirty lines it found resident instead of cycling everything
//!   through the cache.
//! - [`FarMemory::zip_pieces_mut`] walks a source and a destination range together (SAXPY's
//!   `y += a * x`): the source as above, the destination allocated (write-allocate, fetched
//!   unless the piece covers the whole line and the caller overwrites it) and marked dirty.

use super::{FarMemory, Want};
use crate::cache::{Lookup, DIRTY, PREFETCHED, VALID};
use crate::constants::{RUN_BYTES, UPDATE_FETCH_BYTES, WRITE_BACK_RUN_BYTES};
use crate::error::Result;

/// Most lines of one run (`RUN_BYTES` of them, at least one).
pub(super) fn run_lines_max(line_bytes: u64) -> u64 {
    (RUN_BYTES / line_bytes).max(1)
}

/// Where the lines of a run that one call of the computation gets are read.
#[derive(Debug, Clone, Copy)]
enum RunSource {
    /// In place in a mapped server pool (the stretch in `FarMemory::mapped`).
    Mapped,
    /// From cache slots whose data lies one after the other from this address.
    Slots(usize),
}

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
    /// viewed in place in the cache, in a mapped server pool, or in the staging copy of a
    /// line that was not allocated (see the module docs). A piece is inside one line, or a
    /// run of whole lines that lie one after the other where they are read (resident lines
    /// in adjacent slots, or lines read in place).
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
            // A whole line read in place or from its slot may start a run (`read_run`).
            let from = match view {
                Ok(view) if n == lb as usize => self.run_source(a / lb, view),
                _ => None,
            };
            self.pinned.clear();
            let view = view?;
            let lines = match from {
                Some(from) => self.read_run(a / lb, from, ((len - at) as u64 / lb).min(run_lines_max(lb))),
                None => 1,
            };
            let n = n + (lines - 1) as usize * lb as usize;
            // SAFETY: `view` points at `lines` whole lines (slots whose data lies one after
            // the other, the mapped pool, or the staging copy) that nothing changes until the
            // next call on `self`.
            f(at, unsafe { std::slice::from_raw_parts(view.add(off), n) });
            at += n;
        }
        Ok(())
    }

    /// Calls `f(source piece, destination piece)` for consecutive equal-length pieces of
    /// `[src, src + len)` and `[dst, dst + len)`; the destination lines are marked dirty.
    /// A piece is inside one line of either range, or a run of whole lines that lie next
    /// to each other both where the source is read and in the cache (resident destination
    /// lines and a source read in place; see `extend_run`). Pieces are cut at line
    /// boundaries of both ranges, so callers that view them as elements keep both ranges
    /// aligned to the element size.
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
            // A whole line whose source is read in place: the lines after it may continue
            // the run in both places (see `extend_run`), and `f` gets them all at once.
            let lines = if n == lb as usize && !same && self.in_mapped_stretch(s / lb, view) {
                self.extend_run((s / lb, d / lb), slot, (len - at) as u64 / lb)
            } else {
                self.run_slots.clear();
                self.run_slots.push(slot);
                1
            };
            let n = n + (lines - 1) * lb as usize;
            // SAFETY: the source view is `lines` whole lines (staging, the mapped pool, or a
            // slot other than the destination's, which were pinned while the source was
            // found), the destination `lines` whole lines of adjacent slots (`extend_run`);
            // they are disjoint and nothing moves them during `f`.
            unsafe {
                f(std::slice::from_raw_parts(view.add(s_off), n), std::slice::from_raw_parts_mut(out.add(d_off), n))
            };
            for i in 0..self.run_slots.len() {
                self.store.set_state(self.run_slots[i], VALID | DIRTY);
            }
            let (first, count) = self.staged;
            if (d / lb..d / lb + lines as u64).any(|line| (first..first + count).contains(&line)) {
                self.staged = (0, 0); // a staged copy of these lines is stale now
            }
            at += n;
        }
        Ok(())
    }

    /// Whether `view`, the source view of `line`, is that line in the mapped stretch that
    /// [`FarMemory::in_place_view`] found (and not a cached copy or a staging copy).
    fn in_mapped_stretch(&self, line: u64, view: *const u8) -> bool {
        let (first, count, at) = self.mapped;
        (first..first + count).contains(&line)
            && view as usize == at + ((line - first) * self.config.line_bytes) as usize
    }

    /// Where the view of a whole line that [`FarMemory::read_view`] returned lies, if the
    /// lines after it may continue it as one run: the mapped pool (read in place) or the
    /// line's slot (a hit). A staging copy ends a run at its first line.
    fn run_source(&mut self, line: u64, view: *const u8) -> Option<RunSource> {
        if self.in_mapped_stretch(line, view) {
            return (!self.span.loads_need_flush()).then_some(RunSource::Mapped);
        }
        let slot = *self.pinned.last()?;
        (self.store.data_ptr(slot).cast_const() == view).then_some(RunSource::Slots(view as usize))
    }

    /// Whether `line` continues a run of lines read in place: it lies next in the same
    /// mapped stretch and is not cached (a cached copy may be newer).
    fn mapped_continues(&self, line: u64) -> bool {
        let (first, count, _) = self.mapped;
        line < first + count && self.store.lookup(line) == Lookup::Missing
    }

    /// The slot of `line` if it continues a run of cached lines whose data starts at
    /// `base`, `line` being the `k`-th after the first: resident, in the slot whose data
    /// follows the run's, and not a prefetch yet to be counted (a hit on it has work to do).
    fn slot_continues(&mut self, line: u64, base: usize, k: u64) -> Option<usize> {
        let slot = match self.store.lookup(line) {
            Lookup::MetaHit(slot) | Lookup::Found(slot) => slot,
            Lookup::Missing => return None,
        };
        let adjacent = self.store.data_ptr(slot) as usize == base + (k * self.config.line_bytes) as usize;
        (adjacent && self.store.state(slot) & PREFETCHED == 0).then_some(slot)
    }

    /// How many whole lines from `line` (at most `most`) one call of the computation in
    /// [`FarMemory::for_each_piece`] gets, the first read from `from`; the lines after the
    /// first are counted (and touched, when cached) here.
    fn read_run(&mut self, line: u64, from: RunSource, most: u64) -> u64 {
        let mut k = 1;
        while k < most {
            match from {
                RunSource::Mapped if self.mapped_continues(line + k) => {
                    self.stats.misses += 1;
                    self.stats.in_place += 1;
                }
                RunSource::Slots(base) => match self.slot_continues(line + k, base, k) {
                    Some(slot) => {
                        self.store.touch(slot);
                        self.stats.hits += 1;
                    }
                    None => break,
                },
                RunSource::Mapped => break,
            }
            k += 1;
        }
        k
    }

    /// A run of whole lines for one call of the computation in
    /// [`FarMemory::zip_pieces_mut`]: starting at `src` (a line read in place in the mapped
    /// pool) and `dst` (resident in `slot`), it continues while the source continues a run
    /// read in place and the destination a run of cached lines. A sweep over resident lines
    /// (the cache's way-by-way layout keeps a stream's lines adjacent) then pays one call
    /// and two tag checks per line instead of the whole per-line path, and the
    /// computation's loop runs over up to [`RUN_BYTES`] at once. The run's slots are left
    /// in `self.run_slots`; returns how many lines it has (at most `most`).
    fn extend_run(&mut self, (src, dst): (u64, u64), slot: usize, most: u64) -> usize {
        self.run_slots.clear();
        self.run_slots.push(slot);
        let most = most.min(run_lines_max(self.config.line_bytes));
        // Overlapping ranges would let a source line be a destination line of the same run.
        let disjoint = src + most <= dst || dst + most <= src;
        if !disjoint || self.span.loads_need_flush() {
            return 1;
        }
        let base = self.store.data_ptr(slot) as usize;
        let mut k = 1;
        while k < most && self.mapped_continues(src + k) {
            let Some(next) = self.slot_continues(dst + k, base, k) else { break };
            self.store.touch(next);
            self.run_slots.push(next);
            k += 1;
        }
        let more = k - 1;
        self.stats.hits += more;
        self.stats.misses += more;
        self.stats.in_place += more;
        k as usize
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
