//! Byte formats of the stored objects. Every object ends with the CRC32C of all bytes before
//! it; integers are little-endian.
//!
//! - Image (`NIB1`, stop-and-copy and fork): magic, interval u32, region count u32, then per
//!   region len u64, then the regions' bytes back to back.
//! - Record (`NIR1`, incremental modes): magic, interval u32, seq u32, entry count u32, then
//!   per page a 24-byte header {region u32, page u32, line bitmap u64, data offset u32,
//!   data len u32}, then the changed lines of each page back to back (the consolidated flash page
//!   of Abeyratne 2017 §5.3.2: many sparse pages in one fixed-size record).
//! - Commit (`NIC1`): magic, interval u32, generation u32, region count u32, per region
//!   {len u64, lead u32}, object count u32, per object {name len u16, name}: the objects to
//!   apply, oldest first, to rebuild the regions at `interval`, then meta len u32 and the
//!   caller's metadata.
//! - Head (`NIH1`): magic, interval u32, generation u32: the newest commit (a hint; restart
//!   also probes past it).

use crate::error::StoreError;
use nam_proto::checksum::{crc32c, RunningCrc};

/// Magic of an image object.
pub const IMAGE_MAGIC: &[u8; 4] = b"NIB1";
/// Magic of a record object.
pub const RECORD_MAGIC: &[u8; 4] = b"NIR1";
const COMMIT_MAGIC: &[u8; 4] = b"NIC1";
const HEAD_MAGIC: &[u8; 4] = b"NIH1";
/// Bytes of a record's fixed header.
pub const RECORD_HEADER_BYTES: usize = 16;
/// Bytes of a record's per-page header.
pub const ENTRY_BYTES: usize = 24;

/// Appends the trailing checksum.
pub fn seal(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Checks the trailing checksum and returns the body.
pub fn unseal<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a [u8], StoreError> {
    let corrupt = |why: String| StoreError::Corrupt { name: name.into(), why };
    if bytes.len() < 8 {
        return Err(corrupt(format!("{} bytes is too short", bytes.len())));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap());
    let actual = crc32c(body);
    if stored != actual {
        return Err(corrupt(format!("CRC32C {actual:#010x} != stored {stored:#010x}")));
    }
    Ok(body)
}

/// A little-endian reader that reports truncation as corruption.
pub struct Reader<'a> {
    name: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `bytes`, naming `name` in errors.
    pub fn new(name: &'a str, bytes: &'a [u8]) -> Reader<'a> {
        Reader { name, bytes, pos: 0 }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.bytes.len() - self.pos < n {
            return Err(StoreError::Corrupt { name: self.name.into(), why: format!("truncated at byte {}", self.pos) });
        }
        self.pos += n;
        Ok(&self.bytes[self.pos - n..self.pos])
    }

    /// A u16.
    pub fn u16(&mut self) -> Result<u16, StoreError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }

    /// A u32.
    pub fn u32(&mut self) -> Result<u32, StoreError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    /// A u64.
    pub fn u64(&mut self) -> Result<u64, StoreError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    /// Checks a magic number.
    pub fn magic(&mut self, magic: &[u8; 4]) -> Result<(), StoreError> {
        let got = self.take(4)?;
        if got != magic {
            return Err(StoreError::Corrupt { name: self.name.into(), why: format!("bad magic {got:?}") });
        }
        Ok(())
    }
}

/// Header of an image; the regions' bytes follow, then the checksum of header + bytes.
pub fn image_header(interval: u32, lens: &[usize]) -> Vec<u8> {
    let mut h = IMAGE_MAGIC.to_vec();
    h.extend_from_slice(&interval.to_le_bytes());
    h.extend_from_slice(&(lens.len() as u32).to_le_bytes());
    for &len in lens {
        h.extend_from_slice(&(len as u64).to_le_bytes());
    }
    h
}

/// The trailing checksum of an image written in parts.
pub fn image_trailer(header: &[u8], parts: &[&[u8]]) -> [u8; 4] {
    let mut crc = RunningCrc::new();
    crc.update(header);
    parts.iter().for_each(|p| crc.update(p));
    crc.value().to_le_bytes()
}

/// A region's placement as a commit records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionShape {
    /// Bytes.
    pub len: usize,
    /// Offset of the first byte in its first page.
    pub lead: usize,
}

/// A commit: which objects rebuild the regions at `interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The checkpoint interval.
    pub interval: u32,
    /// Bumped when garbage collection rewrites the same interval's objects.
    pub generation: u32,
    /// The regions.
    pub regions: Vec<RegionShape>,
    /// Objects to apply, oldest first.
    pub objects: Vec<String>,
    /// The caller's metadata ([`crate::Engine::checkpoint_with`]).
    pub meta: Vec<u8>,
}

impl Commit {
    /// The commit's object name.
    pub fn name(interval: u32, generation: u32) -> String {
        format!("commit-{interval:010}-{generation:04}")
    }

    /// Encodes and seals.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = COMMIT_MAGIC.to_vec();
        for v in [self.interval, self.generation, self.regions.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for r in &self.regions {
            b.extend_from_slice(&(r.len as u64).to_le_bytes());
            b.extend_from_slice(&(r.lead as u32).to_le_bytes());
        }
        b.extend_from_slice(&(self.objects.len() as u32).to_le_bytes());
        for o in &self.objects {
            b.extend_from_slice(&(o.len() as u16).to_le_bytes());
            b.extend_from_slice(o.as_bytes());
        }
        b.extend_from_slice(&(self.meta.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.meta);
        seal(b)
    }

    /// Checks and decodes.
    pub fn decode(name: &str, bytes: &[u8]) -> Result<Commit, StoreError> {
        let mut r = Reader::new(name, unseal(name, bytes)?);
        r.magic(COMMIT_MAGIC)?;
        let (interval, generation, count) = (r.u32()?, r.u32()?, r.u32()?);
        let mut regions = Vec::new();
        for _ in 0..count {
            regions.push(RegionShape { len: r.u64()? as usize, lead: r.u32()? as usize });
        }
        let mut objects = Vec::new();
        for _ in 0..r.u32()? {
            let len = r.u16()? as usize;
            let raw = r.take(len)?;
            let corrupt = || StoreError::Corrupt { name: name.into(), why: "object name is not UTF-8".into() };
            objects.push(std::str::from_utf8(raw).map_err(|_| corrupt())?.to_string());
        }
        let len = r.u32()? as usize;
        let meta = r.take(len)?.to_vec();
        Ok(Commit { interval, generation, regions, objects, meta })
    }
}

/// Name of the head object.
pub const HEAD: &str = "head";

/// Encodes the head.
pub fn encode_head(interval: u32, generation: u32) -> Vec<u8> {
    let mut b = HEAD_MAGIC.to_vec();
    b.extend_from_slice(&interval.to_le_bytes());
    b.extend_from_slice(&generation.to_le_bytes());
    seal(b)
}

/// Decodes the head.
pub fn decode_head(bytes: &[u8]) -> Result<(u32, u32), StoreError> {
    let mut r = Reader::new(HEAD, unseal(HEAD, bytes)?);
    r.magic(HEAD_MAGIC)?;
    Ok((r.u32()?, r.u32()?))
}
