//! The memory pool: the segments of the tenants' arenas (module `manager`'s `arena`), each
//! mapped and registered with UCX on its own with its own remote key, either UCX-allocated
//! (shared memory, so same-host clients load and store directly) or a range of a mapped file
//! that survives restarts. The server's engines address the pool by offset in one address
//! space, `[0, capacity)`; each offset lies in exactly one segment.

use crate::constants::{BACKING_FILE_MODE, PAGE_BYTES as PAGE};
use crate::manager::SegmentMapper;
use nam_ucx::{Context, MemRegion};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

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
    /// A shared-memory segment could not be made private to the server's user.
    #[error("{message}")]
    Private {
        /// What failed.
        message: String,
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

/// One arena segment. Field order matters: the UCX registration goes before the mapping.
struct Segment {
    region: MemRegion,
    _mapping: Option<FileMapping>,
    rkey: Vec<u8>,
}

// SAFETY: the mapping is plain memory owned by the segment for its whole life.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

/// Where the segments' memory comes from.
enum Backing {
    /// UCX allocates each segment (shared memory when it can).
    Ucx,
    /// Each segment maps its range of this file.
    File { file: File, path: PathBuf },
}

/// The server's memory: the arenas' segments by their first offset. Segments are only ever
/// added while the server runs, so a pointer into one stays valid as long as the pool.
pub(crate) struct Pool {
    segments: RwLock<BTreeMap<u64, Segment>>,
    backing: Backing,
    capacity: u64,
    context: Context,
}

impl Pool {
    /// A pool of at least `capacity` bytes whose segments UCX allocates.
    pub(crate) fn allocate(context: &Context, capacity: u64) -> Result<Pool, PoolError> {
        Ok(Pool::new(context, Backing::Ucx, round_to_page(capacity)))
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
        Ok(Pool::new(context, Backing::File { file, path: path.into() }, length))
    }

    /// Writes a file-backed pool's bytes to its file and waits for the disk (`fdatasync`,
    /// which on Linux covers pages dirtied through the shared mappings); nothing for a pool
    /// in memory.
    pub(crate) fn sync(&self) -> Result<(), PoolError> {
        match &self.backing {
            Backing::Ucx => Ok(()),
            Backing::File { file, path } => file
                .sync_data()
                .map_err(|e| PoolError::Backing { path: path.clone(), message: format!("cannot write to disk: {e}") }),
        }
    }

    fn new(context: &Context, backing: Backing, capacity: u64) -> Pool {
        Pool { segments: RwLock::default(), backing, capacity, context: context.clone() }
    }

    /// Maps and registers `[base, base + len)` (page-aligned, inside the pool) as a segment
    /// of `tenant`'s arena, with a remote key of its own.
    pub(crate) fn map_segment(&self, tenant: &str, base: u64, len: u64) -> Result<(), PoolError> {
        assert!(base.is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && len > 0, "segments are whole pages");
        assert!(base.checked_add(len).is_some_and(|end| end <= self.capacity), "segment outside the pool");
        let map_error = |source| PoolError::Map { capacity: len, source };
        let (region, mapping) = match &self.backing {
            Backing::Ucx => (MemRegion::allocate(&self.context, len as usize).map_err(map_error)?, None),
            Backing::File { file, path } => {
                use std::os::fd::AsRawFd;
                // SAFETY: a fresh shared mapping of an open file's range, page-aligned (asserted
                // above); checked for MAP_FAILED below.
                let address = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        file.as_raw_fd(),
                        base as libc::off_t,
                    )
                };
                if address == libc::MAP_FAILED {
                    return Err(PoolError::Backing {
                        path: path.clone(),
                        message: format!(
                            "mmap of {len} bytes at {base} for tenant {tenant:?} failed: {}",
                            std::io::Error::last_os_error()
                        ),
                    });
                }
                let mapping = FileMapping { address: address as *mut u8, length: len as usize };
                // SAFETY: the mapping outlives the region (field order in Segment).
                let region = unsafe { MemRegion::register(&self.context, mapping.address, mapping.length) }
                    .map_err(map_error)?;
                (region, Some(mapping))
            }
        };
        let rkey = region.pack_rkey().map_err(map_error)?;
        if let Backing::Ucx = self.backing {
            make_shared_memory_private().map_err(|message| PoolError::Private { message })?;
        }
        log::debug!("mapped a {len}-byte segment at {base} for tenant {tenant:?}");
        self.segments.write().unwrap().insert(base, Segment { region, _mapping: mapping, rkey });
        Ok(())
    }

    /// Unmaps the segment at `base` (it holds no live allocation). Clients that still map it
    /// keep their mapping of the old memory until they drop its key; nothing of it is
    /// reachable through a later segment.
    pub(crate) fn unmap_segment(&self, base: u64) {
        self.segments.write().unwrap().remove(&base);
    }

    /// This process's address of byte `offset`, after checking that `len` bytes from it lie
    /// in one segment.
    fn locate(&self, offset: u64, len: u64, what: &str) -> *mut u8 {
        let segments = self.segments.read().unwrap();
        let found = segments
            .range(..=offset)
            .next_back()
            .filter(|(&base, s)| offset.checked_add(len).is_some_and(|end| end <= base + s.region.len() as u64));
        let Some((&base, segment)) = found else {
            panic!("{what} of {len} bytes at {offset} outside every segment of the pool");
        };
        // SAFETY: inside the segment's mapping (checked above).
        unsafe { segment.region.address().add((offset - base) as usize) }
    }

    /// Where a client reaches byte `offset`: the remote address and the packed key of the
    /// segment holding it (that segment's only).
    pub(crate) fn remote(&self, offset: u64) -> (u64, Vec<u8>) {
        let segments = self.segments.read().unwrap();
        let (&base, segment) = segments
            .range(..=offset)
            .next_back()
            .filter(|(&base, s)| offset < base + s.region.len() as u64)
            .expect("granted offsets lie in a mapped segment");
        (segment.region.address() as u64 + (offset - base), segment.rkey.clone())
    }

    /// Zeroes `[offset, offset + size)`, so a new allocation never shows what a previous
    /// holder left there.
    pub(crate) fn zero(&self, offset: u64, size: u64) {
        let at = self.locate(offset, size, "zero");
        // SAFETY: the range lies inside one segment (checked by locate); no client can
        // reach it yet because its allocation has not been handed out.
        unsafe { std::ptr::write_bytes(at, 0, size as usize) };
    }

    /// Copies `data` into the pool at `offset` (bounds checked by the caller against the
    /// allocation; asserted here against the segment).
    pub(crate) fn write(&self, offset: u64, data: &[u8]) {
        let at = self.locate(offset, data.len() as u64, "write");
        // SAFETY: the range lies inside one segment (checked by locate).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
    }

    /// Copies `len` bytes at `offset` out of the pool.
    pub(crate) fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let at = self.locate(offset, len as u64, "read");
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside one segment (checked by locate).
        unsafe { std::ptr::copy_nonoverlapping(at, out.as_mut_ptr(), len) };
        out
    }

    /// The 64-bit word at `offset` (a multiple of 8), as an atomic shared with every other
    /// way clients reach it: same-host clients' CPU atomics through shared memory and UCX's
    /// atomics both operate on the same aligned word.
    pub(crate) fn word(&self, offset: u64) -> &std::sync::atomic::AtomicU64 {
        assert!(offset.is_multiple_of(8), "unaligned word");
        let at = self.locate(offset, 8, "word");
        // SAFETY: in bounds and 8-byte aligned (segments are page aligned); AtomicU64 has
        // the layout of u64, and segments live as long as the pool.
        unsafe { &*(at as *const std::sync::atomic::AtomicU64) }
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
        std::slice::from_raw_parts_mut(self.locate(offset, len as u64, "bytes_mut"), len)
    }

    /// This process's address of byte `offset`, for engines that work in place on an
    /// allocation of `len` bytes there (the allreduce kernel, restores into the pool).
    pub(crate) fn ptr(&self, offset: u64, len: u64) -> *mut u8 {
        self.locate(offset, len, "ptr")
    }

    /// The local address ranges `[start, end)` of every segment, so the checkpoint engine can
    /// refuse a rank's key that names the pool.
    pub(crate) fn local_ranges(&self) -> Vec<(u64, u64)> {
        let segments = self.segments.read().unwrap();
        segments
            .values()
            .map(|s| (s.region.address() as u64, s.region.address() as u64 + s.region.len() as u64))
            .collect()
    }
}

/// The manager's way to map the segments it carves: the pool, shared with the server.
pub(crate) struct PoolMapper(pub(crate) Arc<Pool>);

impl SegmentMapper for PoolMapper {
    fn map(&self, tenant: &str, base: u64, len: u64) -> Result<(), String> {
        self.0.map_segment(tenant, base, len).map_err(|e| e.to_string())
    }

    fn unmap(&self, base: u64) {
        self.0.unmap_segment(base);
    }
}

fn round_to_page(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}

/// Makes every shared-memory segment this process created readable and writable by its
/// user only; returns how many it changed. UCX 1.13 creates System V segments (its first
/// choice for UCX-allocated memory, and its receive FIFOs) with mode 0660, so any process of
/// the server's group could attach one by its (small, guessable) id; its POSIX segments are
/// 0600 already, and are checked here too. Called after every segment is made, before any
/// allocation in it is handed out.
pub(crate) fn make_shared_memory_private() -> Result<usize, String> {
    let mut changed = 0;
    let me = std::process::id().to_string();
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap_or_default();
    for row in table.lines().skip(1) {
        let fields: Vec<&str> = row.split_whitespace().collect();
        // key shmid perms size cpid ...; perms in octal.
        let (Some(shmid), Some(perms), Some(cpid)) = (fields.get(1), fields.get(2), fields.get(4)) else { continue };
        let (Ok(shmid), Ok(perms)) = (shmid.parse::<i32>(), u32::from_str_radix(perms, 8)) else { continue };
        if *cpid != me || perms & 0o077 == 0 {
            continue;
        }
        // SAFETY: shmctl on a segment id with a zeroed, then kernel-filled, shmid_ds.
        unsafe {
            let mut ds: libc::shmid_ds = std::mem::zeroed();
            if libc::shmctl(shmid, libc::IPC_STAT, &mut ds) != 0 {
                continue; // removed meanwhile
            }
            ds.shm_perm.mode = (ds.shm_perm.mode & !0o777) | 0o600;
            if libc::shmctl(shmid, libc::IPC_SET, &mut ds) != 0 {
                return Err(format!(
                    "cannot make System V segment {shmid} private: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        changed += 1;
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return Ok(changed) };
    for entry in fds.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if !target.starts_with("/dev/shm") {
            continue;
        }
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        // SAFETY: fstat/fchmod on a descriptor this process holds open.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & 0o077 != 0 {
                if libc::fchmod(fd, 0o600) != 0 {
                    return Err(format!(
                        "cannot make {} private: {}",
                        target.display(),
                        std::io::Error::last_os_error()
                    ));
                }
                changed += 1;
            }
        }
    }
    Ok(changed)
}
