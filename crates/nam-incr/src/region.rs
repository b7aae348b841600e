//! A protected region: where it is, its page table, and the line hashes of its last copy.

use crate::geometry::{Geometry, LINES_PER_PAGE, PAGE_BYTES};
use crate::pages::PageTable;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One protected region.
pub struct Region {
    /// Address of its first byte.
    pub addr: usize,
    /// Its geometry.
    pub geometry: Geometry,
    /// Page states (`None` when the mode does not track writes).
    pub table: Option<&'static PageTable>,
    /// Hash of every line at its last copy.
    pub hashes: Mutex<Vec<u64>>,
    /// Unprotected by the application.
    pub removed: AtomicBool,
}

impl Region {
    /// Page-aligned start of the span the region's pages cover.
    pub fn span_start(&self) -> usize {
        self.addr - self.geometry.lead
    }

    /// Bytes of that span.
    pub fn span_len(&self) -> usize {
        self.geometry.pages() * PAGE_BYTES
    }

    /// Whether `page` is shared with memory outside the region (its first or last page when
    /// the region is not page aligned). Edge pages are never write-protected: other data
    /// there (a heap allocator's metadata, the writer's own buffers) must not block on a
    /// checkpoint. They are copied at every checkpoint instead, inside the call (at most two
    /// pages per region), and line-level detection keeps what is stored small.
    pub fn is_edge(&self, page: usize) -> bool {
        self.geometry.page_range(page).len() < PAGE_BYTES
    }

    /// Whether the application unprotected it.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Bytes of tracking metadata: line hashes and page states.
    pub fn metadata_bytes(&self) -> usize {
        self.geometry.pages() * (LINES_PER_PAGE * 8 + 6)
    }

    /// Reads region bytes `[offset, offset + buf.len())` with process_vm_readv, so memory
    /// that was unmapped under us is an error (EFAULT), not a crash.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> std::io::Result<()> {
        let local = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        let remote = libc::iovec { iov_base: (self.addr + offset) as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: `local` is our buffer; the kernel checks `remote` against our own mappings
        // and fails with EFAULT instead of faulting.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        Ok(())
    }
}
