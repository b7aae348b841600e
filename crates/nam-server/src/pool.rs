//! The memory pool: one region mapped once with UCX, either UCX-allocated (shared memory,
//! so same-host clients load and store directly) or a mapped file that survives restarts.

use crate::constants::{BACKING_FILE_MODE, PAGE_BYTES as PAGE};
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
pub(crate) struct Pool {
    region: MemRegion,
    _mapping: Option<FileMapping>,
    rkey: Vec<u8>,
}

// SAFETY: the mapping is plain memory owned by the pool for its whole life.
unsafe impl Send for Pool {}

impl Pool {
    /// A UCX-allocated pool of at least `capacity` bytes.
    pub(crate) fn allocate(context: &Context, capacity: u64) -> Result<Pool, PoolError> {
        let length = round_to_page(capacity);
        let region =
            MemRegion::allocate(context, length as usize).map_err(|source| PoolError::Map { capacity, source })?;
        Self::finish(region, None, capacity)
    }

    /// A pool backed by `path` (created or extended to `capacity`; contents kept unless
    /// `discard`). The file is readable and writable by the server's user only: it holds
    /// every tenant's data.
    pub(crate) fn file_backed(context: &Context, path: &Path, capacity: u64, discard: bool) -> Result<Pool, PoolError> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let backing = |message: String| PoolError::Backing { path: path.into(), message };
        let length = round_to_page(capacity);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(discard)
            .mode(BACKING_FILE_MODE)
            .open(path)
            .map_err(|e| backing(format!("cannot open: {e}")))?;
        // A file made before (or by someone else) may be readable by others: close it.
        file.set_permissions(std::fs::Permissions::from_mode(BACKING_FILE_MODE))
            .map_err(|e| backing(format!("cannot make it private (mode 0600): {e}")))?;
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
    pub(crate) fn remote_addr(&self, offset: u64) -> u64 {
        self.region.address() as u64 + offset
    }

    /// Zeroes `[offset, offset + size)`, so a new allocation never shows what a previous
    /// holder (possibly another tenant) left there.
    pub(crate) fn zero(&self, offset: u64, size: u64) {
        assert!(offset.checked_add(size).is_some_and(|end| end <= self.len()), "zero outside the pool");
        // SAFETY: the range lies inside the mapped pool (asserted above); no client can
        // reach it yet because its allocation has not been handed out.
        unsafe { std::ptr::write_bytes(self.region.address().add(offset as usize), 0, size as usize) };
    }

    /// Copies `data` into the pool at `offset` (bounds checked by the caller against the
    /// allocation; asserted here against the pool).
    pub(crate) fn write(&self, offset: u64, data: &[u8]) {
        assert!(offset.checked_add(data.len() as u64).is_some_and(|end| end <= self.len()), "write outside the pool");
        // SAFETY: the range lies inside the mapped pool (asserted above).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.region.address().add(offset as usize), data.len()) };
    }

    /// Copies `len` bytes at `offset` out of the pool.
    pub(crate) fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        assert!(offset.checked_add(len as u64).is_some_and(|end| end <= self.len()), "read outside the pool");
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside the mapped pool (asserted above).
        unsafe { std::ptr::copy_nonoverlapping(self.region.address().add(offset as usize), out.as_mut_ptr(), len) };
        out
    }

    /// The 64-bit word at `offset` (a multiple of 8), as an atomic shared with every other
    /// way clients reach it: same-host clients' CPU atomics through shared memory and UCX's
    /// atomics both operate on the same aligned word.
    pub(crate) fn word(&self, offset: u64) -> &std::sync::atomic::AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.len(), "word outside the pool or unaligned");
        // SAFETY: in bounds and 8-byte aligned (the pool base is page aligned); AtomicU64 has
        // the layout of u64, and the pool outlives the reference.
        unsafe { &*(self.region.address().add(offset as usize) as *const std::sync::atomic::AtomicU64) }
    }

    /// The bytes `[offset, offset + len)` for the checkpoint engine to compute in place.
    ///
    /// # Safety
    /// The range must belong to an allocation the caller owns for the life of the slice
    /// (the engine's parity slots and restore targets), so no other Rust reference to it
    /// exists; clients reaching it one-sided at the same time only see torn data, which
    /// the engine's checksums detect.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, offset: u64, len: usize) -> &mut [u8] {
        assert!(offset.checked_add(len as u64).is_some_and(|end| end <= self.len()), "range outside the pool");
        std::slice::from_raw_parts_mut(self.region.address().add(offset as usize), len)
    }

    /// The first byte of the pool, for engines that work in place (the allreduce kernel).
    pub(crate) fn base_ptr(&self) -> *mut u8 {
        self.region.address()
    }

    /// The packed remote key of the whole pool.
    pub(crate) fn rkey(&self) -> &[u8] {
        &self.rkey
    }

    /// Mapped length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.region.len() as u64
    }
}

fn round_to_page(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}
