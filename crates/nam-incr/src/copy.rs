//! Copying pages into records: shared by the background writer, early sweeps and the
//! blocking incremental mode.

use crate::error::{IncrError, StoreError};
use crate::geometry::{LINES_PER_PAGE, PAGE_BYTES};
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
        }
    }

    /// Closes the record being filled; stores the segment once it is full.
    pub fn next_record(&mut self, store: &dyn Store, written: &AtomicU64) -> Result<(), StoreError> {
        if !self.builder.is_empty() {
            let record = self.builder.finish(self.interval, self.seq);
            self.segment.extend_from_slice(&record);
        }
        if self.segment.len() + self.builder.capacity() > self.segment_bytes {
            self.store_segment(store, written)?;
        }
        Ok(())
    }

    /// Stores everything gathered so far.
    pub fn flush(&mut self, store: &dyn Store, written: &AtomicU64) -> Result<(), StoreError> {
        if !self.builder.is_empty() {
            let record = self.builder.finish(self.interval, self.seq);
            self.segment.extend_from_slice(&record);
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

/// Copies page `page` of region `index`, which the caller moved to `COPYING`, into `batch`;
/// the page ends `CLEAN` (still protected). On a read failure it ends `DIRTY`.
pub fn copy_page(
    params: &CopyParams<'_>,
    index: usize,
    region: &Region,
    page: usize,
    batch: &mut Batch,
) -> Result<(), IncrError> {
    let table = region.table.expect("incremental modes track writes");
    if region.is_removed() {
        table.transition(page, COPYING, DIRTY);
        return Err(IncrError::RegionRemoved(index, batch.interval));
    }
    let range = region.geometry.page_range(page);
    let mut buf = [0u8; PAGE_BYTES];
    let bytes = &mut buf[..range.len()];
    if let Err(source) = region.read(range.start, bytes) {
        table.transition(page, COPYING, DIRTY);
        table.clear_urgent(page);
        return Err(IncrError::RegionUnreadable { region: index, offset: range.start, source });
    }
    // The copy is in our buffer: the application may write the page again.
    table.transition(page, COPYING, crate::pages::CLEAN);
    table.clear_urgent(page);
    add_page(params, index, region, page, bytes, batch)
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
