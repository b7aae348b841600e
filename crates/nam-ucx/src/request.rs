//! Outstanding UCP requests and deadline-bounded waiting.

use crate::error::{op_error, Error, Result};
use crate::ffi;
use std::ffi::c_void;

/// `UCS_PTR_IS_ERR`: UCX encodes an error status in the returned pointer.
#[inline]
pub(crate) fn ptr_is_err(ptr: ffi::ucs_status_ptr_t) -> bool {
    (ptr as usize) >= (ffi::UCS_ERR_LAST as isize as usize)
}

/// `UCS_PTR_STATUS`.
pub(crate) fn ptr_status(ptr: ffi::ucs_status_ptr_t) -> ffi::ucs_status_t {
    ptr as isize as ffi::ucs_status_t
}

/// The state of a non-blocking operation right after it was posted.
#[derive(Debug)]
pub enum Posted {
    /// Completed immediately (UCX returned `UCS_OK`); nothing to wait for.
    Done,
    /// Still in flight: test or wait on the request.
    InFlight(Request),
}

impl Posted {
    /// Interprets the `ucs_status_ptr_t` a `*_nbx` call returned.
    #[inline]
    pub(crate) fn from_status_ptr(op: &'static str, ptr: ffi::ucs_status_ptr_t) -> Result<Posted> {
        if ptr.is_null() {
            Ok(Posted::Done)
        } else if ptr_is_err(ptr) {
            Err(op_error(op, ptr_status(ptr)))
        } else {
            Ok(Posted::InFlight(Request { raw: ptr, op }))
        }
    }

    /// Whether the operation completed at posting time.
    pub fn is_done(&self) -> bool {
        matches!(self, Posted::Done)
    }
}

/// An in-flight UCP request. Dropping it before completion hands it back to UCX, which
/// releases it when it completes; the buffers it uses must then stay valid until that
/// happens (the layers above guarantee this by waiting or by closing the endpoint).
#[derive(Debug)]
pub struct Request {
    raw: *mut c_void,
    op: &'static str,
}

// SAFETY: a request is only a token for UCX state owned by its worker; nam touches it only
// while holding the worker's serialization.
unsafe impl Send for Request {}

impl Request {
    /// Checks completion without progressing: `None` while in flight.
    pub fn check(&self) -> Option<Result<()>> {
        // SAFETY: raw is a live request pointer returned by UCX and not yet freed.
        let status = unsafe { ffi::ucp_request_check_status(self.raw) };
        if status == ffi::UCS_INPROGRESS {
            None
        } else if status == ffi::UCS_OK {
            Some(Ok(()))
        } else {
            Some(Err(op_error(self.op, status)))
        }
    }

    /// The operation this request belongs to, for error messages.
    pub fn op(&self) -> &'static str {
        self.op
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        // SAFETY: raw is a live request; ucp_request_free releases it now if complete or
        // when it completes.
        unsafe { ffi::ucp_request_free(self.raw) };
    }
}

/// Error for a request that outlived its deadline.
pub(crate) fn timed_out(op: &'static str, timeout_ms: u64) -> Error {
    Error::TimedOut { op, timeout_ms }
}
