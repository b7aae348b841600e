//! The file format of stored redundancy data (partner copies, XOR and Reed-Solomon parity).
//!
//! ```text
//! "NAMRED01"  u32 LE header length  header (JSON)  payload  u32 LE CRC32C(payload)  "NAMREDOK"
//! ```
//! Files are written to `<path>.tmp` and renamed when complete, so a file under its final name
//! is never half written; the trailer catches truncation and the CRC catches corruption.

use crate::error::{CkptError, Result};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"NAMRED01";
const TRAILER: &[u8; 8] = b"NAMREDOK";

/// What a redundancy file holds, beside its payload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RedHeader {
    /// Scheme that wrote it (`partner`, `xor`, `rs`).
    pub scheme: String,
    /// Checkpoint name (with version) it protects.
    pub name: String,
    /// Rank (in the library's communicator) that wrote the file.
    pub rank: usize,
    /// Ranks of the set (XOR/RS) or the rank whose copy this is (partner).
    pub set: Vec<usize>,
    /// Data bytes of each rank of `set`.
    pub sizes: Vec<u64>,
    /// Segment bytes (XOR/RS), or 0.
    pub segment: u64,
    /// Payload bytes.
    pub payload: u64,
}

/// Streams one redundancy file to disk.
pub struct RedWriter {
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    crc: nam_proto::checksum::RunningCrc,
    written: u64,
    expected: u64,
}

impl RedWriter {
    /// Creates `<path>.tmp` and writes the header.
    pub fn create(path: &Path, header: &RedHeader) -> Result<Self> {
        let tmp = path.with_extension("tmp");
        let mut file = File::create(&tmp).map_err(|e| CkptError::io("create", &tmp, e))?;
        let json = serde_json::to_vec(header).expect("header serializes");
        let mut head = Vec::with_capacity(12 + json.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(json.len() as u32).to_le_bytes());
        head.extend_from_slice(&json);
        file.write_all(&head).map_err(|e| CkptError::io("write", &tmp, e))?;
        Ok(RedWriter {
            file,
            tmp,
            path: path.to_path_buf(),
            crc: Default::default(),
            written: 0,
            expected: header.payload,
        })
    }

    /// Appends payload bytes.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        self.written += bytes.len() as u64;
        self.file.write_all(bytes).map_err(|e| CkptError::io("write", &self.tmp, e))
    }

    /// Writes the trailer, optionally fsyncs, and renames the file to its final name.
    pub fn finish(mut self, fsync: bool) -> Result<()> {
        assert_eq!(self.written, self.expected, "redundancy payload length");
        let mut tail = Vec::with_capacity(12);
        tail.extend_from_slice(&self.crc.value().to_le_bytes());
        tail.extend_from_slice(TRAILER);
        self.file.write_all(&tail).map_err(|e| CkptError::io("write", &self.tmp, e))?;
        if fsync {
            self.file.sync_all().map_err(|e| CkptError::io("fsync", &self.tmp, e))?;
        }
        std::fs::rename(&self.tmp, &self.path).map_err(|e| CkptError::io("rename", &self.path, e))
    }
}

/// Writes a whole redundancy file.
pub fn write(path: &Path, header: &RedHeader, payload: &[u8], fsync: bool) -> Result<()> {
    let mut w = RedWriter::create(path, header)?;
    w.write(payload)?;
    w.finish(fsync)
}

/// Reads and verifies a redundancy file: Err([`CkptError::Corrupt`]) when the magic, the
/// header, the length or the CRC32C does not match. The payload is read once, into a buffer
/// of its size, and checked as it arrives ([`RedReader`]).
pub fn read(path: &Path) -> Result<(RedHeader, Vec<u8>)> {
    let mut reader = RedReader::open(path)?;
    let mut payload = vec![0u8; reader.header().payload as usize];
    for piece in payload.chunks_mut(READ_PIECE) {
        reader.read(piece)?;
    }
    let header = reader.header().clone();
    reader.finish()?;
    Ok((header, payload))
}

/// Bytes [`read`] reads at a time: the CRC32C runs over each piece while it is in the cache.
const READ_PIECE: usize = 1 << 20;

/// Reads one redundancy file's payload in pieces, checking it as it goes: the header and
/// the file's length when opened, the CRC32C and trailer at [`RedReader::finish`]. For a
/// payload that is sent on as it is read (a partner copy), so that no buffer of the whole
/// payload is needed and no second pass checks it.
pub struct RedReader {
    file: File,
    path: PathBuf,
    header: RedHeader,
    crc: nam_proto::checksum::RunningCrc,
    left: u64,
}

impl RedReader {
    /// Opens `path` and reads its header: Err([`CkptError::Corrupt`]) when the magic, the
    /// header or the file's length does not match.
    pub fn open(path: &Path) -> Result<Self> {
        let mut file = File::open(path).map_err(|e| CkptError::io("open", path, e))?;
        let size = file.metadata().map_err(|e| CkptError::io("stat", path, e))?.len();
        let corrupt = |what: &str| CkptError::Corrupt(format!("{}: {what}", path.display()));
        let mut head = [0u8; 12];
        if size < 24 || file.read_exact(&mut head).is_err() || &head[..8] != MAGIC {
            return Err(corrupt("not a redundancy file (bad magic or too short)"));
        }
        let hlen = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as u64;
        if hlen > size - 24 {
            return Err(corrupt("truncated header"));
        }
        let mut json = vec![0u8; hlen as usize];
        file.read_exact(&mut json).map_err(|e| CkptError::io("read", path, e))?;
        let header: RedHeader = serde_json::from_slice(&json).map_err(|e| corrupt(&e.to_string()))?;
        if header.payload.checked_add(24 + hlen) != Some(size) {
            return Err(corrupt("truncated or extended payload"));
        }
        let left = header.payload;
        Ok(RedReader { file, path: path.to_path_buf(), header, crc: Default::default(), left })
    }

    /// The file's header.
    pub fn header(&self) -> &RedHeader {
        &self.header
    }

    /// Reads the next `into.len()` payload bytes (no more than are left).
    pub fn read(&mut self, into: &mut [u8]) -> Result<()> {
        if into.len() as u64 > self.left {
            return Err(CkptError::Corrupt(format!("{}: read past the payload", self.path.display())));
        }
        self.file.read_exact(into).map_err(|e| CkptError::io("read", &self.path, e))?;
        self.crc.update(into);
        self.left -= into.len() as u64;
        Ok(())
    }

    /// Checks, once the whole payload was read, its CRC32C and the trailer.
    pub fn finish(mut self) -> Result<()> {
        let corrupt = |what: &str| CkptError::Corrupt(format!("{}: {what}", self.path.display()));
        if self.left != 0 {
            return Err(corrupt("payload not read to its end"));
        }
        let mut tail = [0u8; 12];
        self.file.read_exact(&mut tail).map_err(|e| CkptError::io("read", &self.path, e))?;
        if &tail[4..] != TRAILER {
            return Err(corrupt("missing trailer"));
        }
        if u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) != self.crc.value() {
            return Err(corrupt("CRC32C mismatch"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_read_in_pieces_is_checked_at_its_end() {
        let dir = std::env::temp_dir().join(format!("nam-redreader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.partner-1");
        let h = RedHeader {
            scheme: "partner".into(),
            name: "c.1".into(),
            rank: 1,
            set: vec![1],
            sizes: vec![10],
            segment: 0,
            payload: 10,
        };
        write(&path, &h, b"0123456789", false).unwrap();
        let mut reader = RedReader::open(&path).unwrap();
        assert_eq!(reader.header(), &h);
        let (mut a, mut b) = ([0u8; 4], [0u8; 6]);
        reader.read(&mut a).unwrap();
        reader.read(&mut b).unwrap();
        assert!(reader.read(&mut [0u8; 1]).is_err(), "read past the payload");
        reader.finish().unwrap();
        assert_eq!((&a, &b), (b"0123", b"456789"));
        // One flipped payload byte: the pieces read, the end refuses them.
        let mut raw = std::fs::read(&path).unwrap();
        let at = raw.len() - 14;
        raw[at] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        let mut reader = RedReader::open(&path).unwrap();
        reader.read(&mut [0u8; 10]).unwrap();
        assert!(matches!(reader.finish(), Err(CkptError::Corrupt(_))));
        // A file cut short is refused when opened, before any byte is sent on.
        std::fs::write(&path, &raw[..raw.len() - 3]).unwrap();
        assert!(matches!(RedReader::open(&path), Err(CkptError::Corrupt(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn round_trip_and_corruption() {
        let dir = std::env::temp_dir().join(format!("nam-redfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.xor");
        let h = RedHeader {
            scheme: "xor".into(),
            name: "c.1".into(),
            rank: 0,
            set: vec![0, 1],
            sizes: vec![3, 5],
            segment: 5,
            payload: 5,
        };
        write(&path, &h, b"hello", false).unwrap();
        assert_eq!(read(&path).unwrap(), (h, b"hello".to_vec()));
        let mut raw = std::fs::read(&path).unwrap();
        let at = raw.len() - 14;
        raw[at] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        assert!(matches!(read(&path), Err(CkptError::Corrupt(_))));
        std::fs::write(&path, &raw[..raw.len() - 3]).unwrap();
        assert!(matches!(read(&path), Err(CkptError::Corrupt(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
