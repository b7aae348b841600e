//! The direct path: on a shared-memory data path the server's pool is mapped into this
//! process (UCX's `ucp_rkey_ptr`), so puts and gets are plain copies and atomics are CPU
//! atomics on the mapped words, with neither the client lock nor a UCX request: the native
//! load/store path of Schmidt 2017 and the Unimem MPhil thesis. It is coherent with every other way a word is
//! reached: UCX's shared-memory atomics and the server's message path use the same CPU
//! atomics on the same memory.

use crate::allocation::Allocation;
use crate::client::{Client, HEALTH_CHECK_OPS};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// One-sided traffic of the direct path, counted without the client lock.
#[derive(Default)]
pub(crate) struct DirectTraffic {
    pub(crate) puts: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) atomics: AtomicU64,
    pub(crate) bytes_put: AtomicU64,
    pub(crate) bytes_got: AtomicU64,
}

impl DirectTraffic {
    /// `report` plus the direct path's counts.
    pub(crate) fn add_to(&self, mut report: nam_proto::TrafficReport) -> nam_proto::TrafficReport {
        report.puts += self.puts.load(Ordering::Relaxed);
        report.gets += self.gets.load(Ordering::Relaxed);
        report.atomics += self.atomics.load(Ordering::Relaxed);
        report.bytes_put += self.bytes_put.load(Ordering::Relaxed);
        report.bytes_got += self.bytes_got.load(Ordering::Relaxed);
        report
    }
}

impl Client {
    /// The local address of `allocation`'s first byte if it can be reached directly and its
    /// server is alive as far as this client knows.
    #[inline]
    pub(crate) fn direct_base(&self, allocation: &Allocation, what: &'static str) -> Result<Option<usize>> {
        if allocation.local == 0 {
            return Ok(None);
        }
        let control = &self.controls[allocation.server];
        if let Some(source) = control.failure() {
            return Err(Error::Transport { addr: self.config.servers[allocation.server], what, source });
        }
        Ok(Some(allocation.local))
    }

    /// Where bytes `[offset, offset + len)` of `allocation` lie in this process, for reading
    /// them in place without a copy (whatever the size; [`Client::read_in_place`] follows a
    /// get's choice of path instead), when its server's pool is mapped here (a same-host
    /// server on the shared-memory data path); `None` otherwise (network, messages). Counted
    /// as a direct get of `len` bytes. The pointer stays valid while the client lives and the
    /// allocation is not freed; what it reads are plain loads of the server's memory, as
    /// racy against other writers as a get (readers that need a consistent snapshot copy).
    pub fn mapped(&self, allocation: &Allocation, offset: u64, len: usize) -> Result<Option<*const u8>> {
        allocation.target(offset, len)?;
        let Some(base) = self.direct_base(allocation, "get")? else { return Ok(None) };
        self.count(&self.direct.gets, &self.direct.bytes_got, len);
        Ok(Some((base + offset as usize) as *const u8))
    }

    /// Copies `data` to `base + offset` (range checked by the caller).
    #[inline]
    pub(crate) fn direct_put(&self, base: usize, offset: u64, data: &[u8]) {
        // SAFETY: the caller checked offset + len against the allocation, which lies inside
        // the pool mapping that this client's remote key keeps mapped.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (base + offset as usize) as *mut u8, data.len()) };
        self.count(&self.direct.puts, &self.direct.bytes_put, data.len());
    }

    /// Copies from `base + offset` into `buffer` (range checked by the caller).
    #[inline]
    pub(crate) fn direct_get(&self, base: usize, offset: u64, buffer: &mut [u8]) {
        // SAFETY: as in direct_put.
        unsafe {
            std::ptr::copy_nonoverlapping((base + offset as usize) as *const u8, buffer.as_mut_ptr(), buffer.len())
        };
        self.count(&self.direct.gets, &self.direct.bytes_got, buffer.len());
    }

    /// Reads `len` bytes at `offset` of `allocation` where they lie, when a get of that size
    /// would take the direct path: calls `read` with this process's address of the first
    /// byte (valid for `len` bytes during the call), counts a get of `len` bytes, and returns
    /// `Some` of what `read` returned. Returns `Ok(None)` without calling `read` when the
    /// allocation is reached through UCX; use [`Client::get`] then.
    ///
    /// For a consumer that copies the bytes once more anyway (a page-fault handler that
    /// installs them with `UFFDIO_COPY`, a checksum): it saves the copy into a buffer that a
    /// get would make. The server's memory may change under a concurrent writer exactly as
    /// it may during a get; `read` must copy what it needs before it returns.
    #[inline]
    pub fn read_in_place<R>(
        &self,
        allocation: &Allocation,
        offset: u64,
        len: usize,
        read: impl FnOnce(*const u8) -> R,
    ) -> Result<Option<R>> {
        if !self.takes_direct_path(allocation, len) {
            allocation.target(offset, len)?;
            return Ok(None);
        }
        Ok(self.mapped(allocation, offset, len)?.map(read))
    }

    /// The 64-bit word at `base + offset` (8-byte aligned, range checked by the caller).
    #[inline]
    pub(crate) fn direct_word(&self, base: usize, offset: u64) -> &AtomicU64 {
        self.count_direct_atomic();
        // SAFETY: aligned (pool and allocations are 64-byte aligned, offset % 8 == 0) and in
        // bounds; AtomicU64 has u64's layout; the mapping outlives the client.
        unsafe { &*((base + offset as usize) as *const AtomicU64) }
    }

    /// Counts one atomic made on a mapped word without [`Client::direct_word`].
    #[inline]
    pub(crate) fn count_direct_atomic(&self) {
        let ops = self.direct.atomics.fetch_add(1, Ordering::Relaxed);
        self.maybe_check_health(ops);
    }

    /// Counts a `len`-byte write to a mapped allocation made without [`Client::direct_put`].
    #[inline]
    pub(crate) fn count_direct_put(&self, len: usize) {
        self.count(&self.direct.puts, &self.direct.bytes_put, len);
    }

    /// Counts a `len`-byte read from a mapped allocation made without [`Client::direct_get`].
    #[inline]
    pub(crate) fn count_direct_get(&self, len: usize) {
        self.count(&self.direct.gets, &self.direct.bytes_got, len);
    }

    /// Progresses the worker so that a dead server's failure is noticed: for loops that
    /// only read mapped memory and so never reach UCX.
    pub(crate) fn check_health(&self) {
        self.lock().worker.progress();
    }

    #[inline]
    fn count(&self, ops: &AtomicU64, bytes: &AtomicU64, len: usize) {
        let n = ops.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.maybe_check_health(n);
    }

    #[inline]
    fn maybe_check_health(&self, ops: u64) {
        if ops % HEALTH_CHECK_OPS as u64 == HEALTH_CHECK_OPS as u64 - 1 {
            self.lock().worker.progress();
        }
    }
}
