//! The RAM level's writer: one pass over the data through a shared mapping of the file.
//!
//! A RAM-level checkpoint is a copy into tmpfs. Through `write(2)` every page of a new file
//! is allocated and zeroed before the copy, and CRC and parity then read the data again;
//! here a retired file of the level is reused (its pages already exist), the data is copied
//! chunk by chunk into the mapping, and each chunk's CRC32C and each stripe's parity are
//! computed while the chunk is still in cache. Setting up and tearing down a mapping of a
//! large file costs as much as the copy (page-table entries for every page), so the mapping
//! of the last file is kept and reused when the recycled file is that same file (same inode
//! and size): it survives the renames between versions.

use crate::error::{CkptError, Result};
use crate::format::{footer_bytes, parity_len, Footer, WriteOptions};
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

/// Mappings kept: the RAM level cycles through `keep` + 1 files, and a file being flushed
/// adds one more.
const CACHED_MAX: usize = 4;

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

/// Copies the parts into `out` chunk by chunk, computing CRCs and parity on the fly.
fn fill(out: &mut [u8], parts: &[&[u8]], total: usize, opts: &WriteOptions) -> (Vec<u32>, Vec<u32>) {
    let chunk = opts.chunk;
    let (data, parity) = out.split_at_mut(total);
    let mut crcs = Vec::with_capacity(total.div_ceil(chunk));
    let (mut part, mut in_part) = (0usize, 0usize);
    for dst in data.chunks_mut(chunk) {
        let mut at = 0;
        while at < dst.len() {
            let src = &parts[part][in_part..];
            let n = src.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&src[..n]);
            (at, in_part) = (at + n, in_part + n);
            if in_part == parts[part].len() {
                (part, in_part) = (part + 1, 0);
            }
        }
        crcs.push(crc32c::crc32c(dst));
    }
    let Some(par) = opts.parity else {
        return (crcs, Vec::new());
    };
    let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(par.data, par.parity, chunk).expect("validated");
    let mut pad = vec![0u8; chunk];
    let stripes = data.chunks(chunk * par.data).zip(parity.chunks_mut(chunk * par.parity));
    for (stripe, out) in stripes {
        for c in 0..par.data {
            let bytes = stripe.get(c * chunk..).map(|b| &b[..b.len().min(chunk)]).unwrap_or(&[]);
            if bytes.len() == chunk {
                enc.add_original_shard(bytes).expect("shard fits");
            } else {
                pad[..bytes.len()].copy_from_slice(bytes);
                pad[bytes.len()..].fill(0);
                enc.add_original_shard(&pad).expect("shard fits");
            }
        }
        let result = enc.encode().expect("all shards added");
        for (dst, shard) in out.chunks_mut(chunk).zip(result.recovery_iter()) {
            dst.copy_from_slice(shard);
        }
    }
    let parity_crcs = parity.chunks(chunk).map(crc32c::crc32c).collect();
    (crcs, parity_crcs)
}

/// Writes a checkpoint file through a mapping (see the module doc).
pub(crate) fn write(path: &Path, parts: &[&[u8]], mut footer: Footer, opts: &WriteOptions) -> Result<u64> {
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
    let (crcs, parity_crcs) = {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().map_err(|e| io("stat", e))?;
        let key = (meta.dev(), meta.ino());
        let mut cache = CACHE.lock().expect("mapping cache");
        // A mapping of another size is of no use, and one of a deleted file pins its pages.
        cache.retain(|c| (c.key != key || c.map.len == body) && c.file.metadata().is_ok_and(|m| m.nlink() > 0));
        let at = match cache.iter().position(|c| c.key == key) {
            Some(at) => at,
            None => {
                if cache.len() == CACHED_MAX {
                    cache.remove(0);
                }
                let map = Mapping::new(&file, body).map_err(|e| io("mmap", e))?;
                let file = file.try_clone().map_err(|e| io("dup", e))?;
                cache.push(Cached { key, map, file });
                cache.len() - 1
            }
        };
        let cached = cache.remove(at);
        let result = {
            let mut cached = cached;
            let r = fill(cached.map.bytes(), parts, total, opts);
            cache.push(cached);
            r
        };
        result
    };
    footer.chunk = opts.chunk as u64;
    footer.crcs = crcs;
    footer.parity = opts.parity;
    footer.parity_crcs = parity_crcs;
    let tail = footer_bytes(&footer);
    file.write_all_at(&tail, body as u64).map_err(|e| io("write", e))?;
    if opts.fsync {
        file.sync_all().map_err(|e| io("fsync", e))?;
    }
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| CkptError::io("rename", path, e))?;
    Ok((body + tail.len()) as u64)
}
