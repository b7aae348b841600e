//! Puts and gets without a handle, completed all at once by the next flush: OpenSHMEM's
//! `shmem_putmem_nbi`, `shmem_getmem_nbi` and `shmem_quiet` (`nam_flush`).

use crate::alloc::nam_alloc_t;
use crate::ffi::{deref, guard, sink, source};
use crate::status::nam_status_t::{self, NAM_OK};
use std::ffi::c_void;

/// Starts writing `len` bytes from `buf` at `offset` of the allocation and returns at once,
/// without a request (OpenSHMEM's `shmem_putmem_nbi`). **`buf` must stay valid and unmodified
/// until the next `nam_flush` of the client returns**, which completes the put at the server
/// (remote completion). The range is checked before anything is sent: `NAM_ERR_OUT_OF_BOUNDS`
/// or `NAM_ERR_FREED` means nothing is in flight.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `buf` is NULL or readable for `len` bytes
/// until the next `nam_flush` returns.
#[no_mangle]
pub unsafe extern "C" fn nam_put_nbi(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_put_nbi", || {
        let alloc = deref(alloc, "alloc")?;
        alloc.nam().client.put_nbi(&alloc.allocation, offset, source(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Starts reading `len` bytes at `offset` of the allocation into `buf` and returns at once,
/// without a request (OpenSHMEM's `shmem_getmem_nbi`). **`buf` must stay valid, and must not
/// be read, until the next `nam_flush` of the client returns**; then it holds the data.
/// Checked as `nam_put_nbi`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `buf` is NULL or writable for `len` bytes
/// until the next `nam_flush` returns.
#[no_mangle]
pub unsafe extern "C" fn nam_get_nbi(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_get_nbi", || {
        let alloc = deref(alloc, "alloc")?;
        alloc.nam().client.get_nbi(&alloc.allocation, offset, sink(buf, len)?)?;
        Ok(NAM_OK)
    })
}
