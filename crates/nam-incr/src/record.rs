//! Consolidated records (Abeyratne 2017 §5.3.2): the changed 64-byte lines of many pages packed into one
//! fixed-size record with a small header per page, plus the line-level change detection that
//! decides which lines changed. Software has no per-line dirty bits, so each line's 64-bit
//! hash from the last copy is kept (8 bytes per 64, an eighth of the region, instead of a
//! second copy of it) and a line is stored when its hash differs.

pub use crate::constants::{RECORD_BYTES_DEFAULT, RECORD_BYTES_MIN};
use crate::error::StoreError;
use crate::format::{self, Reader, ENTRY_BYTES, RECORD_HEADER_BYTES, RECORD_MAGIC};
use crate::geometry::{Geometry, LINES_PER_PAGE};

/// 64-bit hash of one line (multiply-rotate mixing of its 8-byte words).
pub fn line_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(K).rotate_left(31);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(K).rotate_left(31);
    }
    h ^ (h >> 29)
}

/// Which lines of `page` changed since `hashes` (one per line) were taken, updating them.
/// `bytes` is the page's region bytes (`geometry.page_range(page)`). With `all`, every line
/// present counts as changed (full pages, or the first copy of a chain).
pub fn changed_lines(geometry: &Geometry, page: usize, bytes: &[u8], hashes: &mut [u64], all: bool) -> u64 {
    let base = geometry.page_range(page).start;
    let mut bitmap = 0u64;
    for (line, slot) in hashes.iter_mut().enumerate().take(LINES_PER_PAGE) {
        let range = geometry.line_range(page, line);
        if range.is_empty() {
            continue;
        }
        let h = line_hash(&bytes[range.start - base..range.end - base]);
        if all || h != *slot {
            bitmap |= 1 << line;
        }
        *slot = h;
    }
    bitmap
}

/// One page's entry in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Region index.
    pub region: u32,
    /// Page index in the region.
    pub page: u32,
    /// Lines stored.
    pub bitmap: u64,
    /// Where the lines start in the record's data area.
    pub offset: u32,
    /// Bytes of lines stored.
    pub len: u32,
}

/// Packs pages into one record of at most `capacity` bytes.
pub struct RecordBuilder {
    capacity: usize,
    entries: Vec<Entry>,
    data: Vec<u8>,
}

impl RecordBuilder {
    /// An empty record of at most `capacity` bytes.
    pub fn new(capacity: usize) -> RecordBuilder {
        assert!(capacity >= RECORD_BYTES_MIN, "checked by Engine::new");
        RecordBuilder { capacity, entries: Vec::new(), data: Vec::with_capacity(capacity) }
    }

    /// Bytes the record would take now.
    pub fn size(&self) -> usize {
        RECORD_HEADER_BYTES + self.entries.len() * ENTRY_BYTES + self.data.len() + 4
    }

    /// The record size limit.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a page with `data_len` bytes of lines still fits.
    pub fn fits(&self, data_len: usize) -> bool {
        self.size() + ENTRY_BYTES + data_len <= self.capacity
    }

    /// Adds the lines `bitmap` of page `page` of a region (`page_bytes` = the page's region
    /// bytes). The caller checked [`RecordBuilder::fits`].
    pub fn add(&mut self, region: u32, geometry: &Geometry, page: u32, bitmap: u64, page_bytes: &[u8]) {
        let start = self.data.len();
        let base = geometry.page_range(page as usize).start;
        // Runs of adjacent lines are adjacent bytes: one copy per run (one per page when
        // every line changed).
        let mut rest = bitmap;
        while rest != 0 {
            let first = rest.trailing_zeros() as usize;
            let count = (!(rest >> first)).trailing_zeros() as usize;
            let (from, to) =
                (geometry.line_range(page as usize, first), geometry.line_range(page as usize, first + count - 1));
            self.data.extend_from_slice(&page_bytes[from.start - base..to.end - base]);
            rest &= !(u64::MAX >> (64 - count) << first);
        }
        let len = (self.data.len() - start) as u32;
        self.entries.push(Entry { region, page, bitmap, offset: start as u32, len });
    }

    /// Encodes the record and empties the builder.
    pub fn finish(&mut self, interval: u32, seq: u32) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.size());
        self.finish_into(interval, seq, &mut b);
        b
    }

    /// [`RecordBuilder::finish`], appending the record to `out` (a segment being filled)
    /// instead of a buffer of its own: one copy of the lines less.
    pub fn finish_into(&mut self, interval: u32, seq: u32, out: &mut Vec<u8>) {
        let start = out.len();
        out.reserve(self.size());
        out.extend_from_slice(RECORD_MAGIC);
        for v in [interval, seq, self.entries.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for e in self.entries.drain(..) {
            for v in [e.region, e.page] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&e.bitmap.to_le_bytes());
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.len.to_le_bytes());
        }
        out.extend_from_slice(&self.data);
        self.data.clear();
        let crc = nam_proto::checksum::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }
}

/// Bytes needed to store `bitmap`'s lines of `page`.
pub fn lines_len(geometry: &Geometry, page: usize, bitmap: u64) -> usize {
    (0..LINES_PER_PAGE).filter(|l| bitmap & (1 << l) != 0).map(|l| geometry.line_range(page, l).len()).sum()
}

/// A decoded record: its entries and their data area.
pub struct Record<'a> {
    /// Interval the lines belong to.
    pub interval: u32,
    /// The per-page headers.
    pub entries: Vec<Entry>,
    /// The data area.
    pub data: &'a [u8],
}

impl<'a> Record<'a> {
    /// Checks and decodes a record object (checksum already verified by the caller's unseal).
    pub fn decode(name: &str, body: &'a [u8]) -> Result<Record<'a>, StoreError> {
        let mut r = Reader::new(name, body);
        r.magic(RECORD_MAGIC)?;
        let (interval, _seq, count) = (r.u32()?, r.u32()?, r.u32()? as usize);
        if count * ENTRY_BYTES > body.len() {
            return Err(StoreError::Corrupt { name: name.into(), why: format!("{count} entries cannot fit") });
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let (region, page, bitmap, offset, len) = (r.u32()?, r.u32()?, r.u64()?, r.u32()?, r.u32()?);
            entries.push(Entry { region, page, bitmap, offset, len });
        }
        let data = &body[RECORD_HEADER_BYTES + count * ENTRY_BYTES..];
        for e in &entries {
            if e.offset as usize + e.len as usize > data.len() {
                return Err(StoreError::Corrupt { name: name.into(), why: "entry past the data area".into() });
            }
        }
        Ok(Record { interval, entries, data })
    }

    /// Writes an entry's lines (restricted to `mask`) into `region` (the whole region's bytes).
    pub fn apply(&self, entry: &Entry, geometry: &Geometry, mask: u64, region: &mut [u8]) {
        let mut pos = entry.offset as usize;
        for line in (0..LINES_PER_PAGE).filter(|l| entry.bitmap & (1 << l) != 0) {
            let r = geometry.line_range(entry.page as usize, line);
            if mask & (1 << line) != 0 {
                region[r.clone()].copy_from_slice(&self.data[pos..pos + r.len()]);
            }
            pos += r.len();
        }
    }

    /// The bytes of `entry`'s lines in `mask`, in line order (for merging).
    pub fn lines(&self, entry: &Entry, geometry: &Geometry, mask: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut pos = entry.offset as usize;
        for line in (0..LINES_PER_PAGE).filter(|l| entry.bitmap & (1 << l) != 0) {
            let len = geometry.line_range(entry.page as usize, line).len();
            if mask & (1 << line) != 0 {
                out.extend_from_slice(&self.data[pos..pos + len]);
            }
            pos += len;
        }
        out
    }
}

/// Splits a segment (records back to back, each sealed with its own checksum) and decodes
/// every record.
pub fn decode_segment<'a>(name: &str, bytes: &'a [u8]) -> Result<Vec<Record<'a>>, StoreError> {
    let mut records = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let corrupt = |why: &str| StoreError::Corrupt { name: name.into(), why: format!("{why} at byte {pos}") };
        if rest.len() < RECORD_HEADER_BYTES + 4 {
            return Err(corrupt("truncated record"));
        }
        let count = u32::from_le_bytes(rest[12..16].try_into().unwrap()) as usize;
        let entries_end = RECORD_HEADER_BYTES + count.checked_mul(ENTRY_BYTES).ok_or_else(|| corrupt("bad count"))?;
        if rest.len() < entries_end + 4 {
            return Err(corrupt("truncated record"));
        }
        let data_len: usize = (0..count)
            .map(|i| {
                u32::from_le_bytes(rest[RECORD_HEADER_BYTES + i * ENTRY_BYTES + 20..][..4].try_into().unwrap()) as usize
            })
            .sum();
        let total = entries_end + data_len + 4;
        if rest.len() < total {
            return Err(corrupt("truncated record"));
        }
        let body = format::unseal(name, &rest[..total])?;
        records.push(Record::decode(name, body)?);
        pos += total;
    }
    Ok(records)
}

impl RecordBuilder {
    /// Adds lines already packed in line order (from [`Record::lines`]).
    pub fn add_packed(&mut self, region: u32, page: u32, bitmap: u64, packed: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(packed);
        self.entries.push(Entry { region, page, bitmap, offset: start as u32, len: packed.len() as u32 });
    }
}
