//! Memory regions mapped with UCX, and remote keys to reach a peer's region.

use crate::context::Context;
use crate::endpoint::EndpointInner;
use crate::error::{check, Result};
use crate::ffi;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// Memory mapped for RMA with `ucp_mem_map`: either allocated by UCX (shared-memory capable,
/// so same-host peers can map it directly) or registered from memory this process owns.
pub struct MemRegion {
    memh: ffi::ucp_mem_h,
    address: *mut u8,
    length: usize,
    context: Context,
}

// SAFETY: the region is plain memory plus a UCX handle that is only unmapped on drop.
unsafe impl Send for MemRegion {}
unsafe impl Sync for MemRegion {}

impl MemRegion {
    /// Lets UCX allocate `length` bytes (its allocation order prefers shared memory, so
    /// peers on this host can reach the region with loads and stores).
    pub fn allocate(context: &Context, length: usize) -> Result<MemRegion> {
        Self::map(context, ptr::null_mut(), length, ffi::UCP_MEM_MAP_ALLOCATE)
    }

    /// Registers `length` bytes at `address` that the caller owns (for example a mapped file).
    ///
    /// # Safety
    /// The memory must stay mapped for the life of the region.
    pub unsafe fn register(context: &Context, address: *mut u8, length: usize) -> Result<MemRegion> {
        Self::map(context, address, length, 0)
    }

    fn map(context: &Context, address: *mut u8, length: usize, flags: u32) -> Result<MemRegion> {
        let mut field_mask = ffi::UCP_MEM_MAP_PARAM_FIELD_LENGTH | ffi::UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        if !address.is_null() {
            field_mask |= ffi::UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
        }
        let params = ffi::ucp_mem_map_params_t {
            field_mask: field_mask as u64,
            address: address as *mut c_void,
            length,
            flags,
            ..Default::default()
        };
        let mut memh: ffi::ucp_mem_h = ptr::null_mut();
        // SAFETY: params valid for the call; memh is an out-pointer.
        check("ucp_mem_map", unsafe { ffi::ucp_mem_map(context.inner.raw, &params, &mut memh) })?;
        let mut attr = ffi::ucp_mem_attr_t {
            field_mask: (ffi::UCP_MEM_ATTR_FIELD_ADDRESS | ffi::UCP_MEM_ATTR_FIELD_LENGTH) as u64,
            ..Default::default()
        };
        // SAFETY: memh was just created.
        let status = unsafe { ffi::ucp_mem_query(memh, &mut attr) };
        let region =
            MemRegion { memh, address: attr.address as *mut u8, length: attr.length, context: context.clone() };
        check("ucp_mem_query", status)?;
        Ok(region)
    }

    /// Start of the mapped memory in this process.
    pub fn address(&self) -> *mut u8 {
        self.address
    }

    /// Length in bytes (at least what was asked for).
    pub fn len(&self) -> usize {
        self.length
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Packs the remote key that lets a peer reach this region.
    pub fn pack_rkey(&self) -> Result<Vec<u8>> {
        let mut buffer: *mut c_void = ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: memh is live; out-pointers are valid.
        check("ucp_rkey_pack", unsafe {
            ffi::ucp_rkey_pack(self.context.inner.raw, self.memh, &mut buffer, &mut size)
        })?;
        // SAFETY: UCX returned a buffer of `size` bytes, released right after copying.
        let packed = unsafe { std::slice::from_raw_parts(buffer as *const u8, size).to_vec() };
        unsafe { ffi::ucp_rkey_buffer_release(buffer) };
        Ok(packed)
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: memh is live and unmapped exactly once.
        unsafe { ffi::ucp_mem_unmap(self.context.inner.raw, self.memh) };
    }
}

/// A peer's remote key unpacked on one endpoint (`ucp_rkey_h`).
pub struct RemoteKey {
    raw: ffi::ucp_rkey_h,
    _endpoint: Arc<EndpointInner>,
}

// SAFETY: used under the serialization of the endpoint's worker.
unsafe impl Send for RemoteKey {}
unsafe impl Sync for RemoteKey {}

impl RemoteKey {
    pub(crate) fn new(raw: ffi::ucp_rkey_h, endpoint: Arc<EndpointInner>) -> RemoteKey {
        RemoteKey { raw, _endpoint: endpoint }
    }

    #[inline]
    pub(crate) fn raw(&self) -> ffi::ucp_rkey_h {
        self.raw
    }

    /// A local pointer to `remote_addr` when the peer's memory is mapped into this process
    /// (same host, shared memory), else `None`.
    pub fn local_ptr(&self, remote_addr: u64) -> Option<*mut u8> {
        let mut local: *mut c_void = ptr::null_mut();
        // SAFETY: rkey is live; local is an out-pointer.
        let status = unsafe { ffi::ucp_rkey_ptr(self.raw, remote_addr, &mut local) };
        (status == ffi::UCS_OK && !local.is_null()).then_some(local as *mut u8)
    }
}

impl Drop for RemoteKey {
    fn drop(&mut self) {
        // SAFETY: raw is live and destroyed exactly once, before its endpoint.
        unsafe { ffi::ucp_rkey_destroy(self.raw) };
    }
}
