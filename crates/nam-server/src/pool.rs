//! The memory pool: one region mapped once with UCX, either UCX-allocated (shared memory,
//! so same-host clients load and store directly) or a mapped file that survives restarts.

use nam_ucx::{Context, MemRegion};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// Why the pool could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// UCX refused to allocate or register the memory.
    #[error("cannot map a {capacity}-byte pool with UCX: {source}")]
    Map {
        /// Requested size.
        capacity: u64,
        /// UCX's error.
        source: nam_ucx::Error,
    },
    /// The backing file could not be opened, sized or mapped.
    #[error("backing file {path}: {message}")]
    Backing {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

struct FileMapping {
    address: *mut u8,
    length: usize,
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: address/length came from a successful mmap; flush then unmap once.
        unsafe {
            libc::msync(self.address as *mut libc::c_void, self.length, libc::MS_SYNC);
            libc::munmap(self.address as *mut libc::c_void, self.length);
        }
    }
}

/// The server's memory. Field order matters: the UCX registration goes before the mapping.
pub struct Pool {
    region: MemRegion,
    _mapping: Option<FileMapping>,
    rkey: Vec<u8>,
}

// SAFETY: the mapping is plain memory owned by the pool for its whole life.
unsafe impl Send for Pool {}

const PAGE: u64 = 4096;

impl Pool {
    /// A UCX-allocated pool of at least `capacity` bytes.
    pub fn allocate(context: &Context, capacity: u64) -> Result<Pool, PoolError> {
        let length = round_to_page(capacity);
        let region =
            MemRegion::allocate(context, length as usize).map_err(|source| PoolError::Map { capacity, source })?;
        Self::finish(region, None, capacity)
    }

    /// A pool backed by `path` (created or extended to `capacity`; contents kept).
    pub fn file_backed(context: &Context, path: &Path, capacity: u64) -> Result<Pool, PoolError> {
        let backing = |message: String| PoolError::Backing { path: path.into(), message };
        let length = round_to_page(capacity);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| backing(format!("cannot open: {e}")))?;
        let current = file.metadata().map_err(|e| backing(format!("cannot stat: {e}")))?.len();
        if current < length {
            file.set_len(length).map_err(|e| backing(format!("cannot extend to {length} bytes: {e}")))?;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of an open file; checked for MAP_FAILED below.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(backing(format!("mmap failed: {}", std::io::Error::last_os_error())));
        }
        let mapping = FileMapping { address: address as *mut u8, length: length as usize };
        // SAFETY: the mapping outlives the region (field order in Pool).
        let region = unsafe { MemRegion::register(context, mapping.address, mapping.length) }
            .map_err(|source| PoolError::Map { capacity, source })?;
        Self::finish(region, Some(mapping), capacity)
    }

    fn finish(region: MemRegion, mapping: Option<FileMapping>, capacity: u64) -> Result<Pool, PoolError> {
        let rkey = region.pack_rkey().map_err(|source| PoolError::Map { capacity, source })?;
        Ok(Pool { region, _mapping: mapping, rkey })
    }

    /// Remote address of byte `offset`.
    pub fn remote_addr(&self, offset: u64) -> u64 {
        self.region.address() as u64 + offset
    }

    /// Zeroes `[offset, offset + size)`, so a new allocation never shows what a previous
    /// holder (possibly another tenant) left there.
    pub fn zero(&self, offset: u64, size: u64) {
        assert!(offset.checked_add(size).is_some_and(|end| end <= self.len()), "zero outside the pool");
        // SAFETY: the range lies inside the mapped pool (asserted above); no client can
        // reach it yet because its allocation has not been handed out.
        unsafe { std::ptr::write_bytes(self.region.address().add(offset as usize), 0, size as usize) };
    }

    /// The packed remote key of the whole pool.
    pub fn rkey(&self) -> &[u8] {
        &self.rkey
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> u64 {
        self.region.len() as u64
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }
}

fn round_to_page(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}
