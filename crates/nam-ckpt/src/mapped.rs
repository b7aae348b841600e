//! The RAM level's writer: one pass over the data through a shared mapping of the file.
//!
//! A RAM-level checkpoint is a copy into tmpfs, and its speed is set by the bytes it moves
//! over the memory bus; the target is `memcpy`'s traffic (read the source once, write the
//! file once). Through `write(2)` every page of a new file is allocated and zeroed before the
//! copy, and separate CRC and parity passes read the data again. Here:
//! - a retired file of the level is reused (its pages already exist) and overwritten in
//!   place; the version is committed only by its marker, after the file is complete;
//! - the data goes stripe by stripe, chunk by chunk: the source chunk is read once (for its
//!   CRC32C, hardware-accelerated), then copied from the cache into the file with
//!   non-temporal stores ([`crate::stream_copy`]: no read-for-ownership of the destination)
//!   and handed to the stripe's parity encoder, which encodes from the cache;
//! - setting up and tearing down a mapping of a large file costs as much as the copy
//!   (page-table entries for every page), so the mapping of the last files is kept and reused
//!   when the recycled file is that same file (same inode and size): it survives the renames
//!   between versions.

use crate::error::{CkptError, Result};
use crate::format::{footer_bytes, parity_len, ChunkParity, Footer, ParityCode, Unsynced, WriteOptions};
use crate::pq;
use crate::stream_copy;
use nam_proto::checksum::RunningCrc;
use std::borrow::Cow;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this struct; it is only used under
// the cache's lock.
unsafe impl Send for Mapping {}

/// The mapping of a written file, by (device, inode). The open file keeps the inode alive,
/// so its number cannot be reused by another file while it is cached; entries of files that
/// were deleted (no links left) are dropped.
struct Cached {
    key: (u64, u64),
    map: Mapping,
    file: std::fs::File,
}

use crate::constants::MAPPINGS_CACHED_MAX as CACHED_MAX;

static CACHE: std::sync::Mutex<Vec<Cached>> = std::sync::Mutex::new(Vec::new());

impl Mapping {
    fn new(file: &std::fs::File, len: usize) -> std::io::Result<Mapping> {
        if len == 0 {
            return Ok(Mapping { ptr: std::ptr::NonNull::dangling().as_ptr(), len });
        }
        // SAFETY: a fresh shared mapping of `len` bytes of a file we own, unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { ptr: ptr.cast(), len })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable, and lives as long as self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly what `new` mapped.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// Reads the concatenation of the regions front to back, chunk by chunk.
struct Source<'a> {
    parts: &'a [&'a [u8]],
    part: usize,
    at: usize,
}

impl<'a> Source<'a> {
    /// The next `len` bytes: borrowed when they lie in one part, else gathered.
    fn next(&mut self, len: usize) -> Cow<'a, [u8]> {
        while self.part < self.parts.len() && self.at == self.parts[self.part].len() {
            (self.part, self.at) = (self.part + 1, 0);
        }
        if let Some(bytes) = self.parts.get(self.part).and_then(|p| p.get(self.at..self.at + len)) {
            self.at += len;
            return Cow::Borrowed(bytes);
        }
        let mut gathered = Vec::with_capacity(len);
        while gathered.len() < len {
            let p = self.parts[self.part];
            let n = (p.len() - self.at).min(len - gathered.len());
            gathered.extend_from_slice(&p[self.at..self.at + n]);
            self.at += n;
            if self.at == p.len() {
                (self.part, self.at) = (self.part + 1, 0);
            }
        }
        Cow::Owned(gathered)
    }
}

use crate::constants::COPY_BLOCK as BLOCK;

/// Copies `src` into `dst` and returns its CRC32C: block by block, the CRC reads the
/// source from memory, then the copy streams it from the cache to the file and the P+Q
/// accumulator (if any) folds it in.
fn copy_crc(dst: &mut [u8], src: &[u8], mut pq: Option<&mut pq::Accumulator>) -> u32 {
    let mut crc = RunningCrc::new();
    for (at, (d, s)) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)).enumerate() {
        crc.update(s);
        stream_copy::copy(d, s);
        if let Some(acc) = pq.as_deref_mut() {
            acc.fold(at * BLOCK, s);
        }
    }
    crc.value()
}

/// The parity of the stripes being written.
enum Parity {
    /// P+Q, folded in as the data is copied.
    Pq(pq::Accumulator, ChunkParity),
    /// Reed-Solomon, encoded per stripe.
    Rs(Columns),
}

/// Fills `out` (data, then parity) from the parts in one pass, stripe by stripe: each
/// chunk's source is read from memory once, for its CRC32C, and, from the cache, streamed
/// to the file and folded into the stripe's P+Q parity (Reed-Solomon parity, for more than
/// two parity chunks, is encoded per stripe from the cache). Returns the CRC32C of every
/// data and parity chunk.
fn fill(out: &mut [u8], parts: &[&[u8]], total: usize, opts: &WriteOptions) -> (Vec<u32>, Vec<u32>) {
    let chunk = opts.chunk;
    let (data, parity) = out.split_at_mut(total);
    let mut crcs = Vec::with_capacity(total.div_ceil(chunk));
    let mut parity_crcs = Vec::new();
    let mut src = Source { parts, part: 0, at: 0 };
    let per_stripe = opts.parity.map_or(1, |p| p.data);
    let mut encoder = opts.parity.map(|p| match ParityCode::for_parity(p) {
        ParityCode::Pq => Parity::Pq(pq::Accumulator::new(chunk), p),
        ParityCode::ReedSolomon => Parity::Rs(Columns::new(p, chunk)),
    });
    let mut parity_out = parity.chunks_mut(chunk * opts.parity.map_or(1, |p| p.parity));
    let mut sources = Vec::with_capacity(per_stripe);
    for stripe in data.chunks_mut(chunk * per_stripe) {
        sources.clear();
        for dst in stripe.chunks_mut(chunk) {
            let bytes = src.next(dst.len());
            let acc = match encoder.as_mut() {
                Some(Parity::Pq(acc, _)) => Some(acc),
                _ => None,
            };
            crcs.push(copy_crc(dst, &bytes, acc));
            sources.push(bytes);
        }
        match encoder.as_mut() {
            Some(Parity::Pq(acc, par)) => {
                let out = parity_out.next().expect("parity space for every stripe");
                finish_pq(acc, *par, &sources, out, &mut parity_crcs);
            }
            Some(Parity::Rs(enc)) => {
                let out = parity_out.next().expect("parity space for every stripe");
                enc.encode(&sources, out, &mut parity_crcs);
            }
            None => {}
        }
    }
    stream_copy::fence();
    (crcs, parity_crcs)
}

/// Completes a stripe's P+Q (zeros for the bytes its chunks lack), writes it to `out` and
/// appends its CRC32C, and starts the next stripe.
fn finish_pq(acc: &mut pq::Accumulator, par: ChunkParity, sources: &[Cow<[u8]>], out: &mut [u8], crcs: &mut Vec<u32>) {
    for i in 0..par.data {
        acc.zeros(sources.get(i).map_or(0, |s| s.len()));
    }
    for (dst, p) in out.chunks_mut(out.len() / par.parity).zip(acc.chunks(par.parity)) {
        crcs.push(nam_proto::checksum::crc32c(p));
        stream_copy::copy(dst, p);
    }
    acc.reset();
}

/// The stripe parity encoder. Reed-Solomon (as `reed_solomon_simd` implements it) works on
/// each 64-byte column of the shards independently, so a stripe is encoded a column of
/// `width` bytes at a time: the encoder's working set stays in the L1/L2 cache instead of
/// holding a copy of the whole stripe, and the parity is the same as a whole-chunk encoding
/// (the reader decodes whole chunks).
struct Columns {
    par: ChunkParity,
    enc: reed_solomon_simd::ReedSolomonEncoder,
    chunk: usize,
    width: usize,
    pad: Vec<u8>,
}

impl Columns {
    fn new(par: ChunkParity, chunk: usize) -> Columns {
        // A power of two of at least 64 that divides the chunk; the whole chunk when it is
        // not a multiple of 64 (the code is column-wise only in whole 64-byte columns).
        let width = if chunk.is_multiple_of(64) { 1 << chunk.trailing_zeros().min(13) } else { chunk };
        let enc = reed_solomon_simd::ReedSolomonEncoder::new(par.data, par.parity, width).expect("validated");
        Columns { par, enc, chunk, width, pad: vec![0u8; width] }
    }

    /// Encodes the stripe of `sources` (the last may be short or missing: zeros, as the reader
    /// pads) into `out` (the stripe's parity chunks) and appends their CRC32C to `crcs`.
    fn encode(&mut self, sources: &[Cow<[u8]>], out: &mut [u8], crcs: &mut Vec<u32>) {
        let mut parity_crcs: Vec<RunningCrc> = (0..self.par.parity).map(|_| RunningCrc::new()).collect();
        for at in (0..self.chunk).step_by(self.width) {
            for i in 0..self.par.data {
                let column = sources.get(i).and_then(|s| s.get(at..)).unwrap_or(&[]);
                let column = &column[..column.len().min(self.width)];
                if column.len() == self.width {
                    self.enc.add_original_shard(column).expect("shard fits");
                } else {
                    self.pad[..column.len()].copy_from_slice(column);
                    self.pad[column.len()..].fill(0);
                    self.enc.add_original_shard(&self.pad).expect("shard fits");
                }
            }
            let result = self.enc.encode().expect("all shards added");
            for (p, shard) in result.recovery_iter().enumerate() {
                parity_crcs[p].update(shard);
                stream_copy::copy(&mut out[p * self.chunk + at..][..self.width], shard);
            }
        }
        crcs.extend(parity_crcs.iter().map(RunningCrc::value));
    }
}

/// Runs `f` on a shared mapping of the first `len` bytes of `file`: the cached one of this
/// file when there is one of that size, else a new one, which is then cached.
fn with_mapping<R>(file: &std::fs::File, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> std::io::Result<R> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    let key = (meta.dev(), meta.ino());
    let mut cache = CACHE.lock().expect("mapping cache");
    // A mapping of another size is of no use, and one of a deleted file pins its pages.
    cache.retain(|c| (c.key != key || c.map.len == len) && c.file.metadata().is_ok_and(|m| m.nlink() > 0));
    let mut cached = match cache.iter().position(|c| c.key == key) {
        Some(at) => cache.remove(at),
        None => {
            if cache.len() == CACHED_MAX {
                cache.remove(0);
            }
            Cached { key, map: Mapping::new(file, len)?, file: file.try_clone()? }
        }
    };
    let result = f(cached.map.bytes());
    cache.push(cached);
    Ok(result)
}

/// Reserves a file of `len` bytes at `path` for a later [`write`] to recycle: tmpfs
/// allocates (and zeroes) its pages now (or fails with ENOSPC now, not during a
/// checkpoint), and its mapping is set up and cached, so the checkpoint that reuses it
/// neither allocates pages nor builds page tables.
pub(crate) fn reserve(path: &Path, len: usize) -> Result<()> {
    let io = |op, e| CkptError::io(op, path, e);
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path);
    let file = file.map_err(|e| io("create", e))?;
    if len > 0 {
        // SAFETY: fallocate on a file descriptor we own, within i64 range (a file's size).
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(io("reserve", err));
        }
    }
    file.set_len(len as u64).map_err(|e| io("resize", e))?;
    with_mapping(&file, len, |_| ()).map_err(|e| io("mmap", e))
}

/// Writes a checkpoint file through a mapping (see the module doc), under its temporary name.
pub(crate) fn write(path: &Path, parts: &[&[u8]], mut footer: Footer, opts: &WriteOptions) -> Result<Unsynced> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let body = total + parity_len(total, opts);
    let tmp = path.with_extension("tmp");
    let io = |op, e| CkptError::io(op, &tmp, e);
    if let Some(spare) = opts.recycle.as_ref().filter(|s| s.exists()) {
        std::fs::rename(spare, &tmp).map_err(|e| io("recycle", e))?;
    }
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&tmp);
    let file = file.map_err(|e| io("open", e))?;
    file.set_len(body as u64).map_err(|e| io("resize", e))?;
    let (crcs, parity_crcs) =
        with_mapping(&file, body, |bytes| fill(bytes, parts, total, opts)).map_err(|e| io("mmap", e))?;
    footer.chunk = opts.chunk as u64;
    footer.crcs = crcs;
    footer.parity = opts.parity;
    footer.parity_code = opts.parity.map(ParityCode::for_parity).unwrap_or_default();
    footer.parity_crcs = parity_crcs;
    let tail = footer_bytes(&footer);
    file.write_all_at(&tail, body as u64).map_err(|e| io("write", e))?;
    Ok(Unsynced::new(file, &tmp, path, opts.fsync, (body + tail.len()) as u64))
}
