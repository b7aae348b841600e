//! The checkpoint file of one rank at one level, with its integrity data.
//!
//! ```text
//! data (the protected regions, concatenated in id order)
//! parity chunks (RAM level: p chunks per stripe of d data chunks, P+Q for p <= 2 and
//!               d <= 255, else Reed-Solomon), or none
//! footer (JSON: name, version, ranks, regions, chunk size, parity code, CRC32C of every chunk)
//! u32 LE footer length, "NAMCKPT1"
//! ```
//! Every data and parity chunk carries a CRC32C. A chunk that fails it is an erasure: the
//! stripe's parity rebuilds up to p of them in place (the software counterpart of Abeyratne 2017's
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

/// The erasure code of a file's chunk parity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParityCode {
    /// Reed-Solomon (`reed_solomon_simd`): more than two parity chunks per stripe, or
    /// stripes of more than [`crate::pq::MAX_DATA`] chunks (and files whose footer names no code).
    #[default]
    ReedSolomon,
    /// P+Q ([`crate::pq`]): one or two parity chunks per stripe.
    Pq,
}

impl ParityCode {
    /// The code a writer uses for `parity`: P+Q where it applies, as it is several times cheaper.
    pub fn for_parity(parity: ChunkParity) -> ParityCode {
        if parity.parity <= 2 && parity.data <= crate::pq::MAX_DATA {
            ParityCode::Pq
        } else {
            ParityCode::ReedSolomon
        }
    }
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
    /// The code of the parity.
    #[serde(default)]
    pub parity_code: ParityCode,
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
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Write through a shared memory mapping (for the RAM level: copy, CRC and parity in one
    /// cache-friendly pass), reusing `recycle` (a retired file of the same level, whose pages
    /// tmpfs already holds) when it exists.
    pub mapped: bool,
    /// A retired file to reuse instead of allocating new pages.
    pub recycle: Option<std::path::PathBuf>,
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

/// The parity chunks of the stream and their CRCs (none without chunk parity).
fn parity(stream: &Stream, opts: &WriteOptions) -> Result<(Vec<u8>, Vec<u32>)> {
    let Some(par) = opts.parity else {
        return Ok((Vec::new(), Vec::new()));
    };
    let chunk = opts.chunk;
    let nchunks = stream.total.div_ceil(chunk);
    let mut scratch = Vec::with_capacity(chunk);
    let mut parity = Vec::with_capacity(nchunks.div_ceil(par.data) * par.parity * chunk);
    for stripe in 0..nchunks.div_ceil(par.data) {
        let chunks = stripe * par.data..((stripe + 1) * par.data).min(nchunks);
        let data: Vec<Vec<u8>> = chunks.map(|c| stream.range(c * chunk, chunk, &mut scratch).to_vec()).collect();
        let mut views: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        views.resize(par.data, &[]);
        match ParityCode::for_parity(par) {
            ParityCode::Pq => {
                crate::pq::encode(chunk, &views).chunks(par.parity).for_each(|c| parity.extend_from_slice(c))
            }
            ParityCode::ReedSolomon => rs_encode(par, chunk, &views, &mut parity)?,
        }
    }
    let parity_crcs = parity.chunks(chunk).map(nam_proto::checksum::crc32c).collect();
    Ok((parity, parity_crcs))
}

/// Appends the Reed-Solomon parity of one stripe of (zero-padded) chunks to `out`.
fn rs_encode(par: ChunkParity, chunk: usize, data: &[&[u8]], out: &mut Vec<u8>) -> Result<()> {
    let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(par.data, par.parity, chunk)
        .map_err(|e| CkptError::Config(format!("chunk parity: {e}")))?;
    let mut padded = vec![0u8; chunk];
    for bytes in data {
        padded[..bytes.len()].copy_from_slice(bytes);
        padded[bytes.len()..].fill(0);
        enc.add_original_shard(&padded).expect("shard count and size fit");
    }
    let result = enc.encode().expect("all shards added");
    result.recovery_iter().for_each(|shard| out.extend_from_slice(shard));
    Ok(())
}

/// Writes one checkpoint file from the regions `parts` (with `footer` filled in here).
/// Returns the bytes written.
pub fn write(path: &Path, parts: &[&[u8]], footer: Footer, opts: &WriteOptions) -> Result<u64> {
    write_unsynced(path, parts, footer, opts)?.finish()
}

/// [`write`](fn@write)'s first half: the whole file under its temporary name, not yet fsynced; its
/// [`Unsynced::finish`] makes it durable and gives it its name. Between the two the caller
/// may do other work while the disk catches up (NAM-XOR flags its buffer ready there).
pub fn write_unsynced(path: &Path, parts: &[&[u8]], footer: Footer, opts: &WriteOptions) -> Result<Unsynced> {
    assert!(opts.chunk >= 2 && opts.chunk.is_multiple_of(2), "chunk size is even");
    if opts.mapped {
        return crate::mapped::write(path, parts, footer, opts);
    }
    write_stream(path, parts, footer, opts)
}

/// A checkpoint file written under its temporary name (see [`write_unsynced`]).
#[must_use = "the file only gets its name in finish"]
pub struct Unsynced {
    file: std::fs::File,
    tmp: std::path::PathBuf,
    path: std::path::PathBuf,
    fsync: bool,
    bytes: u64,
}

impl Unsynced {
    pub(crate) fn new(file: std::fs::File, tmp: &Path, path: &Path, fsync: bool, bytes: u64) -> Unsynced {
        Unsynced { file, tmp: tmp.to_path_buf(), path: path.to_path_buf(), fsync, bytes }
    }

    /// fsyncs the file when the options asked for it, then renames it to its name (so a
    /// file under its name is always complete). Returns the bytes written.
    pub fn finish(self) -> Result<u64> {
        if self.fsync {
            self.file.sync_all().map_err(|e| CkptError::io("fsync", &self.tmp, e))?;
        }
        drop(self.file);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| CkptError::io("rename", &self.path, e))?;
        Ok(self.bytes)
    }
}

/// The parity chunks of a file of `total` data bytes.
pub(crate) fn parity_len(total: usize, opts: &WriteOptions) -> usize {
    opts.parity.map(|p| total.div_ceil(opts.chunk).div_ceil(p.data) * p.parity * opts.chunk).unwrap_or(0)
}

/// Appends the footer and trailer of a file.
pub(crate) fn footer_bytes(footer: &Footer) -> Vec<u8> {
    let json = serde_json::to_vec(footer).expect("footer serializes");
    let mut out = json.clone();
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(MAGIC);
    out
}

/// Writes the data in batches of whole chunks (about [`READ_BATCH`] bytes), each chunk's
/// CRC32C computed right before its batch is written, on bytes the write then copies from
/// the cache: one pass over the data instead of a checksum pass and a write pass.
fn write_stream(path: &Path, parts: &[&[u8]], mut footer: Footer, opts: &WriteOptions) -> Result<Unsynced> {
    let stream = Stream { parts, total: parts.iter().map(|p| p.len()).sum() };
    let (parity, parity_crcs) = parity(&stream, opts)?;
    let tmp = path.with_extension("tmp");
    let io = |op, e| CkptError::io(op, &tmp, e);
    let mut file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
    let chunk = opts.chunk;
    let batch = (READ_BATCH / chunk).max(1) * chunk;
    let mut crcs = Vec::with_capacity(stream.total.div_ceil(chunk));
    let mut scratch = Vec::new();
    let mut start = 0;
    while start < stream.total {
        let bytes = stream.range(start, batch, &mut scratch);
        crcs.extend(bytes.chunks(chunk).map(nam_proto::checksum::crc32c));
        file.write_all(bytes).map_err(|e| io("write", e))?;
        start += bytes.len();
    }
    footer.chunk = chunk as u64;
    footer.crcs = crcs;
    footer.parity = opts.parity;
    footer.parity_code = opts.parity.map(ParityCode::for_parity).unwrap_or_default();
    footer.parity_crcs = parity_crcs;
    let tail = footer_bytes(&footer);
    file.write_all(&parity).map_err(|e| io("write", e))?;
    file.write_all(&tail).map_err(|e| io("write", e))?;
    let written = (stream.total + parity.len() + tail.len()) as u64;
    Ok(Unsynced::new(file, &tmp, path, opts.fsync, written))
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
    let file = open(path)?;
    let mut data = vec![0u8; file.footer.data_bytes() as usize];
    let repaired_chunks = file.read_into(&mut [data.as_mut_slice()])?;
    Ok(Loaded { footer: file.footer, data, repaired_chunks })
}

/// Bytes [`read_into`](Opened::read_into) reads before it checks what it read: whole chunks
/// adding up to about this much, so each chunk's CRC runs on bytes the read just left in
/// the cache.
const READ_BATCH: usize = 1 << 20;

/// A checkpoint file whose footer is read and checked, its data not yet ([`open`]).
#[derive(Debug)]
pub struct Opened {
    /// The footer.
    pub footer: Footer,
    file: std::fs::File,
    path: std::path::PathBuf,
}

/// Opens a checkpoint file and reads and checks its footer (trailer, footer length, chunk
/// count and the data and parity sizes against the file's), without reading its data: the
/// caller learns the layout first and then says where the bytes go ([`Opened::read_into`]).
pub fn open(path: &Path) -> Result<Opened> {
    use std::os::unix::fs::FileExt;
    let corrupt = |what: String| CkptError::Corrupt(format!("{}: {what}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| CkptError::io("open", path, e))?;
    let len = file.metadata().map_err(|e| CkptError::io("stat", path, e))?.len();
    if len < 12 {
        return Err(corrupt("truncated (no trailer)".into()));
    }
    let mut trailer = [0u8; 12];
    file.read_exact_at(&mut trailer, len - 12).map_err(|e| CkptError::io("read", path, e))?;
    if &trailer[4..] != MAGIC {
        return Err(corrupt("truncated (no trailer)".into()));
    }
    let flen = u32::from_le_bytes(trailer[..4].try_into().expect("4")) as u64;
    let fstart = (len - 12).checked_sub(flen).ok_or_else(|| corrupt("footer length".into()))?;
    let mut json = vec![0u8; flen as usize];
    file.read_exact_at(&mut json, fstart).map_err(|e| CkptError::io("read", path, e))?;
    let footer: Footer = serde_json::from_slice(&json).map_err(|e| corrupt(format!("footer: {e}")))?;
    let total = footer.data_bytes();
    let chunk = footer.chunk;
    if chunk == 0 || footer.crcs.len() as u64 != total.div_ceil(chunk) {
        return Err(corrupt("footer does not match its data".into()));
    }
    let parity_len = (footer.parity_crcs.len() as u64).checked_mul(chunk);
    if parity_len.and_then(|p| p.checked_add(total)) != Some(fstart) {
        return Err(corrupt(format!(
            "{fstart} bytes before the footer, expected {total} of data and {} parity chunks of {chunk}",
            footer.parity_crcs.len()
        )));
    }
    Ok(Opened { footer, file, path: path.to_path_buf() })
}

impl Opened {
    /// Reads the data into `parts` (consecutive pieces of the data in file order, adding up
    /// to [`Footer::data_bytes`]: the application's regions themselves, so no buffer holds
    /// the bytes in between) and checks every chunk's CRC32C right after the read that
    /// brought it, while it is still in the cache: one pass over memory, not a read and then
    /// a second pass to check. Chunks that fail are rebuilt from the stripes' parity, in
    /// place; returns how many. More damage than the parity covers is
    /// [`CkptError::Corrupt`], and then `parts` hold what the file had (never reported as
    /// restored).
    pub fn read_into(&self, parts: &mut [&mut [u8]]) -> Result<usize> {
        use std::os::unix::fs::FileExt;
        let path = &self.path;
        let total = self.footer.data_bytes() as usize;
        let given: usize = parts.iter().map(|p| p.len()).sum();
        if given != total {
            return Err(CkptError::Corrupt(format!(
                "{}: {total} bytes of data, but the places to restore them hold {given}",
                path.display()
            )));
        }
        let chunk = self.footer.chunk as usize;
        let batch = (READ_BATCH / chunk).max(1) * chunk;
        let mut bad = Vec::new();
        let mut start = 0;
        while start < total {
            let end = (start + batch).min(total);
            for_each_piece(parts, start, end, |at, piece| {
                self.file.read_exact_at(piece, at as u64).map_err(|e| CkptError::io("read", path, e))
            })?;
            for c in start / chunk..end.div_ceil(chunk) {
                let mut crc = nam_proto::checksum::RunningCrc::new();
                for_each_piece(parts, c * chunk, ((c + 1) * chunk).min(total), |_, piece| {
                    crc.update(piece);
                    Ok(())
                })?;
                if crc.value() != self.footer.crcs[c] {
                    bad.push(c);
                }
            }
            start = end;
        }
        if bad.is_empty() {
            return Ok(0);
        }
        // Rare: gather, repair from the parity, and put the repaired bytes back.
        let mut data = Vec::with_capacity(total);
        parts.iter().for_each(|p| data.extend_from_slice(p));
        let mut parity = vec![0u8; self.footer.parity_crcs.len() * chunk];
        self.file.read_exact_at(&mut parity, total as u64).map_err(|e| CkptError::io("read", path, e))?;
        repair(&self.footer, &mut data, &parity, &bad)
            .map_err(|what| CkptError::Corrupt(format!("{}: {what}", path.display())))?;
        let mut at = 0;
        for p in parts.iter_mut() {
            p.copy_from_slice(&data[at..at + p.len()]);
            at += p.len();
        }
        Ok(bad.len())
    }
}

/// Calls `f(offset, piece)` for the pieces of `parts` (consecutive, in order) that cover
/// bytes `start..end` of their concatenation.
fn for_each_piece<F>(parts: &mut [&mut [u8]], start: usize, end: usize, mut f: F) -> Result<()>
where
    F: FnMut(usize, &mut [u8]) -> Result<()>,
{
    let mut at = 0;
    for p in parts.iter_mut() {
        let (lo, hi) = (start.max(at), end.min(at + p.len()));
        if lo < hi {
            f(lo, &mut p[lo - at..hi - at])?;
        }
        at += p.len();
        if at >= end {
            break;
        }
    }
    Ok(())
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
            .filter(|(i, p)| nam_proto::checksum::crc32c(p) == footer.parity_crcs[stripe * par.parity + i])
            .collect();
        let lost: Vec<usize> = bad.iter().copied().filter(|c| c / par.data == stripe).collect();
        if lost.len() > good_parity.len() {
            return Err(format!(
                "stripe {stripe}: {} chunks fail CRC32C, only {} good parity chunks",
                lost.len(),
                good_parity.len()
            ));
        }
        // The stripe's chunks, zero-padded as the writer padded them.
        let mut shards: Vec<Vec<u8>> = (first..first + par.data)
            .map(|c| {
                let mut shard = vec![0u8; chunk];
                if c < nchunks {
                    let end = ((c + 1) * chunk).min(total);
                    shard[..end - c * chunk].copy_from_slice(&data[c * chunk..end]);
                }
                shard
            })
            .collect();
        let local: Vec<usize> = lost.iter().map(|c| c - first).collect();
        rebuild(footer.parity_code, par, &mut shards, &local, good_parity)
            .map_err(|e| format!("stripe {stripe}: {e}"))?;
        let restored: std::collections::HashMap<usize, Vec<u8>> =
            local.iter().map(|&i| (i, std::mem::take(&mut shards[i]))).collect();
        for c in lost {
            let shard = &restored[&(c - first)];
            let end = ((c + 1) * chunk).min(total);
            data[c * chunk..end].copy_from_slice(&shard[..end - c * chunk]);
            if nam_proto::checksum::crc32c(&data[c * chunk..end]) != footer.crcs[c] {
                return Err(format!("chunk {c}: rebuilt bytes fail CRC32C"));
            }
        }
    }
    Ok(())
}

/// Rebuilds the `lost` shards of one stripe (indices into `shards`) from its good parity
/// chunks `(index, bytes)` with the file's code.
fn rebuild(
    code: ParityCode,
    par: ChunkParity,
    shards: &mut [Vec<u8>],
    lost: &[usize],
    good_parity: Vec<(usize, &[u8])>,
) -> Result<(), String> {
    let chunk = shards[0].len();
    match code {
        ParityCode::Pq => {
            let find = |i: usize| good_parity.iter().find(|g| g.0 == i).map(|g| g.1);
            crate::pq::rebuild(chunk, shards, lost, find(0), find(1))
        }
        ParityCode::ReedSolomon => {
            let originals: Vec<(usize, &[u8])> =
                (0..par.data).filter(|i| !lost.contains(i)).map(|i| (i, shards[i].as_slice())).collect();
            let restored =
                reed_solomon_simd::decode(par.data, par.parity, originals, good_parity).map_err(|e| e.to_string())?;
            for &i in lost {
                shards[i] = restored[&i].clone();
            }
            Ok(())
        }
    }
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
            parity_code: ParityCode::default(),
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
        let opts = WriteOptions {
            chunk: 256,
            parity: Some(ChunkParity { data: 4, parity: 2 }),
            fsync: false,
            mapped: false,
            recycle: None,
        };
        write(&path, &[&a, &b], footer(), &opts).unwrap();
        let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
        assert_eq!(read(&path).unwrap().data, whole);
        let streamed = std::fs::read(&path).unwrap();
        // The mapped writer makes the same bytes, also over a recycled larger file.
        let spare = dir.join("spare");
        std::fs::write(&spare, vec![0xeeu8; 10_000]).unwrap();
        let mapped = WriteOptions { mapped: true, recycle: Some(spare.clone()), ..opts.clone() };
        write(&path, &[&a, &b], footer(), &mapped).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), streamed);
        assert!(!spare.exists());
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
        let no_parity = WriteOptions { parity: None, ..opts.clone() };
        write(&path, &[&a, &b], footer(), &no_parity).unwrap();
        let mut raw = std::fs::read(&path).unwrap();
        raw[10] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        assert!(matches!(read(&path), Err(CkptError::Corrupt(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Both codes, through both writers (the mapped one encodes Reed-Solomon column by column
    /// and P+Q as the data streams by): the same bytes, and lost chunks come back.
    #[test]
    fn both_codes_agree_between_writers_and_repair() {
        let dir = std::env::temp_dir().join(format!("nam-format-codes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.ckpt");
        let chunk = 16384;
        // 6.5 chunks in two regions split inside a chunk: a short last chunk, a short last stripe.
        let a: Vec<u8> = (0..40_000u32).map(|i| (i * 31 + 7) as u8).collect();
        let b: Vec<u8> = (0..66_496u32).map(|i| (i * 17 + 3) as u8).collect();
        let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
        let mut footer = footer();
        footer.regions = vec![(1, a.len() as u64), (2, b.len() as u64)];
        for (par, code) in [
            (ChunkParity { data: 4, parity: 2 }, ParityCode::Pq),
            (ChunkParity { data: 4, parity: 1 }, ParityCode::Pq),
            (ChunkParity { data: 3, parity: 3 }, ParityCode::ReedSolomon),
        ] {
            let opts = WriteOptions { chunk, parity: Some(par), fsync: false, mapped: false, recycle: None };
            write(&path, &[&a, &b], footer.clone(), &opts).unwrap();
            let streamed = std::fs::read(&path).unwrap();
            write(&path, &[&a, &b], footer.clone(), &WriteOptions { mapped: true, ..opts }).unwrap();
            let raw = std::fs::read(&path).unwrap();
            assert!(raw == streamed, "{par:?}: the writers differ");
            let loaded = read(&path).unwrap();
            assert_eq!((loaded.footer.parity_code, &loaded.data), (code, &whole));
            // Lose `parity` chunks of the first stripe, and one of the short last stripe.
            let mut broken = raw.clone();
            for c in 0..par.parity {
                broken[c * chunk + 100] ^= 0x40;
            }
            broken[whole.len() - 1] ^= 1;
            std::fs::write(&path, &broken).unwrap();
            let loaded = read(&path).unwrap();
            assert_eq!((loaded.data, loaded.repaired_chunks), (whole.clone(), par.parity + 1), "{par:?}");
            broken[whole.len() + 10] ^= 1; // and the first stripe's first parity chunk: too many
            std::fs::write(&path, &broken).unwrap();
            assert!(matches!(read(&path), Err(CkptError::Corrupt(_))), "{par:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
