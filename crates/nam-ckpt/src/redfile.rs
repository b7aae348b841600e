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
/// header, the length or the CRC32C does not match.
pub fn read(path: &Path) -> Result<(RedHeader, Vec<u8>)> {
    let mut file = File::open(path).map_err(|e| CkptError::io("open", path, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| CkptError::io("read", path, e))?;
    let corrupt = |what: &str| CkptError::Corrupt(format!("{}: {what}", path.display()));
    if bytes.len() < 24 || &bytes[..8] != MAGIC {
        return Err(corrupt("not a redundancy file (bad magic or too short)"));
    }
    let hlen = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let body = bytes.len() - 12;
    if hlen > body - 12 {
        return Err(corrupt("truncated header"));
    }
    let header: RedHeader = serde_json::from_slice(&bytes[12..12 + hlen]).map_err(|e| corrupt(&e.to_string()))?;
    let start = 12 + hlen;
    if bytes.len() != start + header.payload as usize + 12 {
        return Err(corrupt("truncated or extended payload"));
    }
    let end = start + header.payload as usize;
    if &bytes[end + 4..] != TRAILER {
        return Err(corrupt("missing trailer"));
    }
    let crc = u32::from_le_bytes(bytes[end..end + 4].try_into().expect("4 bytes"));
    if nam_proto::checksum::crc32c(&bytes[start..end]) != crc {
        return Err(corrupt("CRC32C mismatch"));
    }
    bytes.truncate(end);
    bytes.drain(..start);
    Ok((header, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

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
