//! Copying pages into records: shared by the background writer, early sweeps and the
//! blocking incremental mode.

use crate::error::{IncrError, StoreError};
use crate::geometry::LINES_PER_PAGE;
use crate::pages::{COPYING, DIRTY};
use crate::record::{changed_lines, lines_len, RecordBuilder};
use crate::region::Region;
use crate::store::Store;
use std::sync::atomic::{AtomicU64, Ordering};

/// Records being filled for one interval, and the objects already written for it.
pub struct Batch {
    /// The interval.
    pub interval: u32,
    /// The record being filled.
    pub builder: RecordBuilder,
    /// Finished records not yet stored.
    pub segment: Vec<u8>,
    /// Objects written, in order.
    pub objects: Vec<String>,
    /// Next record sequence number.
    pub seq: u32,
    /// Name prefix of the segments ("seg" or "mrg-<generation>").
    pub prefix: String,
    /// Bytes of the objects written.
    pub bytes: u64,
    /// Store a segment once it holds this many bytes.
    pub segment_bytes: usize,
    /// Pages being copied (at most [`RUN_PAGES`](crate::constants::RUN_PAGES)).
    pub scratch: Vec<u8>,
}

impl Batch {
    /// An empty batch.
    pub fn new(interval: u32, record_bytes: usize, segment_bytes: usize) -> Batch {
        Batch {
            interval,
            builder: RecordBuilder::new(record_bytes),
            segment: Vec::new(),
            segment_bytes,
            objects: Vec::new(),
            seq: 0,
            prefix: "seg".into(),
            bytes: 0,
            scratch: Vec::new(),
        }
    }

    /// Closes the record being filled; stores the segment once it is full.
    pub fn next_record(&mut self, store: &dyn Store, written: &AtomicU64) -> Result<(), StoreError> {
        if !self.builder.is_empty() {
            self.builder.finish_into(self.interval, self.seq, &mut self.segment);
        }
        if self.segment.len() + self.builder.capacity() > self.segment_bytes {
            self.store_segment(store, written)?;
        }
        Ok(())
    }

    /// Stores everything gathered so far.
    pub fn flush(&mut self, store: &dyn Store, written: &AtomicU64) -> Result<(), StoreError> {
        if !self.builder.is_empty() {
            self.builder.finish_into(self.interval, self.seq, &mut self.segment);
        }
        self.store_segment(store, written)
    }

    fn store_segment(&mut self, store: &dyn Store, written: &AtomicU64) -> Result<(), StoreError> {
        if self.segment.is_empty() {
            return Ok(());
        }
        let name = format!("{}-{:010}-{:06}", self.prefix, self.interval, self.seq);
        store.put(&name, &self.segment)?;
        written.fetch_add(self.segment.len() as u64, Ordering::Relaxed);
        self.bytes += self.segment.len() as u64;
        self.segment.clear();
        self.objects.push(name);
        self.seq += 1;
        Ok(())
    }
}

/// What copying one page needs to know.
pub struct CopyParams<'a> {
    /// The store.
    pub store: &'a dyn Store,
    /// Byte counter.
    pub written: &'a AtomicU64,
    /// Store every present line, not only changed ones.
    pub all_lines: bool,
    /// Store only changed lines (else whole pages once any line changed).
    pub consolidate: bool,
}

/// Copies pages `first..first + count` of region `index`, which the caller moved to
/// `COPYING`, into `batch`: [`read_run`], then [`add_run`].
pub fn copy_run(
    params: &CopyParams<'_>,
    (index, region): (usize, &Region),
    (first, count): (usize, usize),
    held: bool,
    batch: &mut Batch,
) -> Result<(), IncrError> {
    read_run((index, region), (first, count), held, batch)?;
    add_run(params, (index, region), (first, count), batch)
}

/// Reads pages `first..first + count` of region `index`, which the caller moved to
/// `COPYING`, into `batch.scratch`; the pages end `CLEAN`. With `held` (they were `PENDING`)
/// and the asynchronous tracker they are made writable again before they become `CLEAN`, so
/// a write waiting for them goes on. On a read failure they end `DIRTY`.
pub fn read_run(
    (index, region): (usize, &Region),
    (first, count): (usize, usize),
    held: bool,
    batch: &mut Batch,
) -> Result<(), IncrError> {
    let table = region.table.expect("incremental modes track writes");
    let pages = first..first + count;
    let undo = || {
        for page in pages.clone() {
            table.transition(page, COPYING, DIRTY);
            table.clear_urgent(page);
        }
    };
    if region.is_removed() {
        undo();
        return Err(IncrError::RegionRemoved(index, batch.interval));
    }
    let start = region.geometry.page_range(first).start;
    let end = region.geometry.page_range(first + count - 1).end;
    batch.scratch.resize(end - start, 0);
    if let Err(source) = region.read(start, &mut batch.scratch) {
        undo();
        return Err(IncrError::RegionUnreadable { region: index, offset: start, source });
    }
    // The copy is in our buffer: the application may write the pages again.
    if held && table.is_async() {
        // A failure leaves them read-only; a write then faults, finds them CLEAN and retries,
        // so only speed is lost. It cannot fail for a mapped range we protected ourselves.
        let _ = table.unprotect(first, count);
    }
    for page in pages {
        table.transition(page, COPYING, crate::pages::CLEAN);
        table.clear_urgent(page);
    }
    Ok(())
}

/// Adds the pages [`read_run`] read to `batch` (their changed lines).
pub fn add_run(
    params: &CopyParams<'_>,
    (index, region): (usize, &Region),
    (first, count): (usize, usize),
    batch: &mut Batch,
) -> Result<(), IncrError> {
    let buf = std::mem::take(&mut batch.scratch);
    let start = region.geometry.page_range(first).start;
    let mut result = Ok(());
    for page in first..first + count {
        let range = region.geometry.page_range(page);
        let bytes = &buf[range.start - start..range.end - start];
        result = result.and_then(|()| add_page(params, index, region, page, bytes, batch));
    }
    batch.scratch = buf;
    result
}

/// Adds page `page`'s bytes (already read) to `batch`: the lines changed since the last copy,
/// or the whole page without consolidation.
pub fn add_page(
    params: &CopyParams<'_>,
    index: usize,
    region: &Region,
    page: usize,
    bytes: &[u8],
    batch: &mut Batch,
) -> Result<(), IncrError> {
    let mut bitmap = {
        let mut hashes = region.hashes.lock();
        let slots = &mut hashes[page * LINES_PER_PAGE..(page + 1) * LINES_PER_PAGE];
        changed_lines(&region.geometry, page, bytes, slots, params.all_lines)
    };
    if bitmap != 0 && !params.consolidate {
        bitmap = region.geometry.lines_present(page);
    }
    if bitmap == 0 {
        return Ok(());
    }
    if !batch.builder.fits(lines_len(&region.geometry, page, bitmap)) {
        batch.next_record(params.store, params.written)?;
    }
    batch.builder.add(index as u32, &region.geometry, page as u32, bitmap, bytes);
    Ok(())
}
