//! The checkpoint file of one rank at one level, with its integrity data.
//!
//! ```text
//! data (the protected regions, concatenated in id order)
//! parity chunks (RAM level: p Reed-Solomon chunks per stripe of d data chunks), or none
//! footer (JSON: name, version, ranks, regions, chunk size, CRC32C of every chunk)
//! u32 LE footer length, "NAMCKPT1"
//! ```
//! Every data and parity chunk carries a CRC32C. A chunk that fails it is an erasure: the
//! stripe's parity rebuilds up to p of them in place (the software counterpart of seed 001's
//! strong ECC for checkpoint pages). More than that is [`CkptError::Corrupt`], never data.
//! Files are written under a temporary name and renamed when complete, so a torn write leaves
//! no file that looks complete; a truncated file lacks its magic and is refused.

use crate::error::{CkptError, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 8] = b"NAMCKPT1";

/// Erasure parity across a file's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkParity {
    /// Data chunks per stripe.
    pub data: usize,
    /// Parity chunks per stripe (chunks per stripe that can be rebuilt).
    pub parity: usize,
}

/// What the footer of a checkpoint file records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footer {
    /// Checkpoint name.
    pub name: String,
    /// Checkpoint version.
    pub version: u64,
    /// Rank that wrote the file.
    pub rank: usize,
    /// Ranks of the job that wrote it.
    pub ranks: usize,
    /// `(region id, bytes)` in file order.
    pub regions: Vec<(i32, u64)>,
    /// `(routed file name, bytes)`, stored after the regions.
    #[serde(default)]
    pub files: Vec<(String, u64)>,
    /// Chunk bytes.
    pub chunk: u64,
    /// CRC32C of every data chunk.
    pub crcs: Vec<u32>,
    /// Erasure parity, if any.
    pub parity: Option<ChunkParity>,
    /// CRC32C of every parity chunk.
    pub parity_crcs: Vec<u32>,
}

impl Footer {
    /// Data bytes.
    pub fn data_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.1).sum::<u64>() + self.files.iter().map(|f| f.1).sum::<u64>()
    }
}

/// How to write a file.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// Chunk bytes (even).
    pub chunk: usize,
    /// Erasure parity across chunks, or none.
    pub parity: Option<ChunkParity>,
    /// fsync before the rename.
    pub fsync: bool,
}

/// The concatenation of the regions, read chunk by chunk without copying where a chunk lies
/// in one region.
struct Stream<'a> {
    parts: &'a [&'a [u8]],
    total: usize,
}

impl<'a> Stream<'a> {
    /// Bytes `start..start+len` (clipped to the end) as a slice: borrowed if in one part,
    /// else copied into `scratch`.
    fn range<'s>(&self, start: usize, len: usize, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        let end = (start + len).min(self.total);
        let mut at = 0;
        for p in self.parts {
            if start >= at && end <= at + p.len() {
                return &p[start - at..end - at];
            }
            at += p.len();
        }
        scratch.clear();
        let mut at = 0;
        for p in self.parts {
            let (lo, hi) = (start.max(at), end.min(at + p.len()));
            if lo < hi {
                scratch.extend_from_slice(&p[lo - at..hi - at]);
            }
            at += p.len();
        }
        scratch
    }
}

/// CRCs of the data chunks and the parity chunks of the stream.
fn integrity(stream: &Stream, opts: &WriteOptions) -> Result<(Vec<u32>, Vec<u8>, Vec<u32>)> {
    let chunk = opts.chunk;
    let nchunks = stream.total.div_ceil(chunk);
    let mut scratch = Vec::with_capacity(chunk);
    let crcs: Vec<u32> = (0..nchunks).map(|c| crc32c::crc32c(stream.range(c * chunk, chunk, &mut scratch))).collect();
    let Some(par) = opts.parity else {
        return Ok((crcs, Vec::new(), Vec::new()));
    };
    let mut parity = Vec::with_capacity(nchunks.div_ceil(par.data) * par.parity * chunk);
    let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(par.data, par.parity, chunk)
        .map_err(|e| CkptError::Config(format!("chunk parity: {e}")))?;
    let mut padded = vec![0u8; chunk];
    for stripe in 0..nchunks.div_ceil(par.data) {
        for c in stripe * par.data..(stripe + 1) * par.data {
            let bytes = if c < nchunks { stream.range(c * chunk, chunk, &mut scratch) } else { &[][..] };
            if bytes.len() == chunk {
                enc.add_original_shard(bytes).expect("shard count and size fit");
            } else {
                padded[..bytes.len()].copy_from_slice(bytes);
                padded[bytes.len()..].fill(0);
                enc.add_original_shard(&padded).expect("shard count and size fit");
            }
        }
        let result = enc.encode().expect("all shards added");
        for shard in result.recovery_iter() {
            parity.extend_from_slice(shard);
        }
    }
    let parity_crcs = parity.chunks(chunk).map(crc32c::crc32c).collect();
    Ok((crcs, parity, parity_crcs))
}

/// Writes one checkpoint file from the regions `parts` (with `footer` filled in here).
/// Returns the bytes written.
pub fn write(path: &Path, parts: &[&[u8]], mut footer: Footer, opts: &WriteOptions) -> Result<u64> {
    assert!(opts.chunk >= 2 && opts.chunk % 2 == 0, "chunk size is even");
    let stream = Stream { parts, total: parts.iter().map(|p| p.len()).sum() };
    let (crcs, parity, parity_crcs) = integrity(&stream, opts)?;
    footer.chunk = opts.chunk as u64;
    footer.crcs = crcs;
    footer.parity = opts.parity;
    footer.parity_crcs = parity_crcs;
    let json = serde_json::to_vec(&footer).expect("footer serializes");
    let tmp = path.with_extension("tmp");
    let io = |op, e| CkptError::io(op, &tmp, e);
    let mut file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
    let mut written = 0u64;
    let mut put = |bytes: &[u8]| -> Result<()> {
        written += bytes.len() as u64;
        file.write_all(bytes).map_err(|e| io("write", e))
    };
    for p in parts {
        put(p)?;
    }
    put(&parity)?;
    put(&json)?;
    put(&(json.len() as u32).to_le_bytes())?;
    put(MAGIC)?;
    if opts.fsync {
        file.sync_all().map_err(|e| io("fsync", e))?;
    }
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| CkptError::io("rename", path, e))?;
    Ok(written)
}

/// A verified checkpoint file: its footer and data (repaired where parity allowed).
#[derive(Debug)]
pub struct Loaded {
    /// The footer.
    pub footer: Footer,
    /// The data (regions concatenated).
    pub data: Vec<u8>,
    /// Chunks that failed their checksum and were rebuilt from parity.
    pub repaired_chunks: usize,
}

/// Reads and verifies a checkpoint file.
pub fn read(path: &Path) -> Result<Loaded> {
    let bytes = std::fs::read(path).map_err(|e| CkptError::io("read", path, e))?;
    let corrupt = |what: String| CkptError::Corrupt(format!("{}: {what}", path.display()));
    if bytes.len() < 12 || &bytes[bytes.len() - 8..] != MAGIC {
        return Err(corrupt("truncated (no trailer)".into()));
    }
    let flen = u32::from_le_bytes(bytes[bytes.len() - 12..bytes.len() - 8].try_into().expect("4")) as usize;
    let fstart = bytes.len().checked_sub(12 + flen).ok_or_else(|| corrupt("footer length".into()))?;
    let footer: Footer =
        serde_json::from_slice(&bytes[fstart..bytes.len() - 12]).map_err(|e| corrupt(format!("footer: {e}")))?;
    let total = footer.data_bytes() as usize;
    let chunk = footer.chunk as usize;
    if chunk == 0 || footer.crcs.len() != total.div_ceil(chunk) {
        return Err(corrupt("footer does not match its data".into()));
    }
    let parity_len = footer.parity_crcs.len() * chunk;
    if fstart != total + parity_len {
        return Err(corrupt(format!("{} bytes before the footer, expected {}", fstart, total + parity_len)));
    }
    let mut data = bytes;
    data.truncate(fstart);
    let parity = data.split_off(total);
    let bad: Vec<usize> = (0..footer.crcs.len())
        .filter(|&c| crc32c::crc32c(&data[c * chunk..((c + 1) * chunk).min(total)]) != footer.crcs[c])
        .collect();
    let repaired_chunks = bad.len();
    if !bad.is_empty() {
        repair(&footer, &mut data, &parity, &bad).map_err(corrupt)?;
    }
    Ok(Loaded { footer, data, repaired_chunks })
}

/// Rebuilds the `bad` chunks from the stripes' parity; Err names what could not be.
fn repair(footer: &Footer, data: &mut [u8], parity: &[u8], bad: &[usize]) -> Result<(), String> {
    let Some(par) = footer.parity else {
        return Err(format!(
            "{} chunk(s) fail CRC32C (first: chunk {}) and the level has no parity",
            bad.len(),
            bad[0]
        ));
    };
    let chunk = footer.chunk as usize;
    let total = data.len();
    let nchunks = footer.crcs.len();
    let mut stripes: Vec<usize> = bad.iter().map(|c| c / par.data).collect();
    stripes.dedup();
    for stripe in stripes {
        let first = stripe * par.data;
        let good_parity: Vec<(usize, &[u8])> = (0..par.parity)
            .map(|i| (i, &parity[(stripe * par.parity + i) * chunk..][..chunk]))
            .filter(|(i, p)| crc32c::crc32c(p) == footer.parity_crcs[stripe * par.parity + i])
            .collect();
        let lost: Vec<usize> = bad.iter().copied().filter(|c| c / par.data == stripe).collect();
        if lost.len() > good_parity.len() {
            return Err(format!(
                "stripe {stripe}: {} chunks fail CRC32C, only {} good parity chunks",
                lost.len(),
                good_parity.len()
            ));
        }
        let mut originals = Vec::new();
        for c in first..first + par.data {
            if lost.contains(&c) {
                continue;
            }
            let mut shard = vec![0u8; chunk];
            if c < nchunks {
                let end = ((c + 1) * chunk).min(total);
                shard[..end - c * chunk].copy_from_slice(&data[c * chunk..end]);
            }
            originals.push((c - first, shard));
        }
        let restored = reed_solomon_simd::decode(par.data, par.parity, originals, good_parity)
            .map_err(|e| format!("stripe {stripe}: {e}"))?;
        for c in lost {
            let shard = &restored[&(c - first)];
            let end = ((c + 1) * chunk).min(total);
            data[c * chunk..end].copy_from_slice(&shard[..end - c * chunk]);
            if crc32c::crc32c(&data[c * chunk..end]) != footer.crcs[c] {
                return Err(format!("chunk {c}: rebuilt bytes fail CRC32C"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footer() -> Footer {
        Footer {
            name: "t".into(),
            version: 1,
            rank: 0,
            ranks: 1,
            regions: vec![(1, 1000), (2, 3000)],
            files: vec![],
            chunk: 0,
            crcs: vec![],
            parity: None,
            parity_crcs: vec![],
        }
    }

    #[test]
    fn chunks_are_checked_and_rebuilt_from_parity() {
        let dir = std::env::temp_dir().join(format!("nam-format-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.ckpt");
        let a: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let opts = WriteOptions { chunk: 256, parity: Some(ChunkParity { data: 4, parity: 2 }), fsync: false };
        write(&path, &[&a, &b], footer(), &opts).unwrap();
        let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
        assert_eq!(read(&path).unwrap().data, whole);
        let mut raw = std::fs::read(&path).unwrap();
        raw[10] ^= 1; // chunk 0
        raw[300] ^= 1; // chunk 1, same stripe
        raw[3999] ^= 1; // last chunk
        std::fs::write(&path, &raw).unwrap();
        let loaded = read(&path).unwrap();
        assert_eq!((loaded.data, loaded.repaired_chunks), (whole.clone(), 3));
        raw[600] ^= 1; // third bad chunk in stripe 0: beyond 2 parity chunks
        std::fs::write(&path, &raw).unwrap();
        assert!(matches!(read(&path), Err(CkptError::Corrupt(_))));
        std::fs::write(&path, &raw[..raw.len() - 5]).unwrap();
        assert!(matches!(read(&path), Err(CkptError::Corrupt(_))));
        let no_parity = WriteOptions { parity: None, ..opts };
        write(&path, &[&a, &b], footer(), &no_parity).unwrap();
        let mut raw = std::fs::read(&path).unwrap();
        raw[10] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        assert!(matches!(read(&path), Err(CkptError::Corrupt(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
