//! Put and get: blocking (`*_sync`) and non-blocking with `nam_request_t`.

use crate::alloc::nam_alloc_t;
use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, sink, source, Outcome};
use crate::status::nam_status_t::{self, NAM_IN_PROGRESS, NAM_OK};
use nam_client::{Error, Op};
use std::ffi::c_void;

/// A non-blocking put or get in flight (opaque), from `nam_put` or `nam_get`. Poll it
/// with `nam_test`; release it with `nam_wait`, which every request needs exactly once
/// (a request never waited for is leaked until `nam_finalize`). Use one request from one
/// thread at a time.
pub struct nam_request_t {
    nam: *const nam_t,
    /// The operation while it is in flight. Its lifetime is erased: it borrows the client
    /// (released by `nam_finalize` only after every request) and the caller's buffer (which
    /// the C contract keeps valid until completion).
    op: Option<Op<'static>>,
    /// An atomic in flight (`nam_atomic_nb`), instead of `op`.
    amo: Option<Box<dyn crate::amo_nb::PendingAmo>>,
    /// How it ended, once `nam_test` saw the end.
    outcome: Option<Result<(), Error>>,
}

impl nam_request_t {
    /// A request for an atomic in flight.
    pub(crate) fn for_atomic(nam: *const nam_t, amo: Box<dyn crate::amo_nb::PendingAmo>) -> nam_request_t {
        nam_request_t { nam, op: None, amo: Some(amo), outcome: None }
    }

    /// Waits for completion (at most the client's timeout) and releases the request.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        if let (None, Some(amo)) = (&self.outcome, self.amo.take()) {
            return amo.wait();
        }
        match (self.outcome.take(), self.op.take()) {
            (Some(outcome), _) => outcome,
            (None, Some(op)) => op.wait(),
            (None, None) => Ok(()),
        }
    }

    /// Progresses once: whether it completed (`Err`: it failed).
    fn test(&mut self) -> Result<bool, Error> {
        if let Some(amo) = self.amo.as_mut() {
            return amo.test();
        }
        match self.op.as_mut() {
            Some(op) => op.test(),
            None => Ok(true),
        }
    }
}

/// Returns `NAM_OK` with `*request = NULL` if `op` completed at once, else hands it out.
fn hand_out(nam: &nam_t, mut op: Op<'static>, request: &mut *mut nam_request_t) -> Outcome {
    if op.test()? {
        return Ok(NAM_OK);
    }
    let boxed = Box::into_raw(Box::new(nam_request_t { nam, op: Some(op), amo: None, outcome: None }));
    nam.track_request(boxed);
    *request = boxed;
    Ok(NAM_IN_PROGRESS)
}

/// Writes `len` bytes from `buf` at `offset` of the allocation, with **remote completion**:
/// when it returns `NAM_OK` the data is visible at the server to every client (put, then
/// flush of the server; OpenSHMEM's `shmem_putmem` then `shmem_quiet`, for this server).
/// The flush costs nothing more after direct-path (same-host shared memory) stores.
/// Blocking, at most twice the client's timeout. An out-of-bounds
/// range gives `NAM_ERR_OUT_OF_BOUNDS` and transfers nothing (the target is unchanged); a
/// freed allocation gives `NAM_ERR_FREED`. `buf` may be NULL only when `len` is 0.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `buf` is NULL or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_put_sync(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_put_sync", || {
        let alloc = deref(alloc, "alloc")?;
        alloc.nam().client.put_sync(&alloc.allocation, offset, source(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Reads `len` bytes at `offset` of the allocation into `buf`. Blocking: when it returns
/// `NAM_OK` the data is in `buf`; at most the client's timeout. It sees every put of this
/// client that completed remotely (`nam_put_sync`, or `nam_flush` after `nam_put`) and
/// every put of other clients that did. Errors as `nam_put_sync`; on error `buf` holds
/// no defined data.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `buf` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_get_sync(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_get_sync", || {
        let alloc = deref(alloc, "alloc")?;
        alloc.nam().client.get(&alloc.allocation, offset, sink(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Starts writing `len` bytes from `buf` at `offset` of the allocation and returns without
/// waiting.
///
/// - `NAM_OK` with `*request = NULL`: the put completed locally before the call returned;
///   `buf` may be reused at once.
/// - `NAM_IN_PROGRESS` with `*request` set: the put is in flight. **`buf` must stay valid and
///   unmodified until `nam_test` returns `NAM_OK` for it or `nam_wait` returns**; then
///   `buf` may be reused. Release the request with `nam_wait` exactly once.
/// - an error (`NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_FREED`, `NAM_ERR_TRANSPORT`, ...) with
///   `*request = NULL`: nothing is in flight.
///
/// Completion of a request is local (the source buffer is free); the data is visible at the
/// server after a later `nam_flush`. In OpenSHMEM's terms: `NAM_OK` without a request is
/// `shmem_putmem` (the source is reusable, remote completion comes with `nam_flush`, which is
/// `shmem_quiet`); a request is `shmem_putmem_nbi` whose local completion `nam_test` /
/// `nam_wait` report. Over the message path (TCP) the call returns once the data is sent,
/// before the server has stored it; `nam_flush` waits for the server's answers and reports a
/// put it refused.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `buf` is NULL or readable for `len` bytes
/// until the request completes; `request` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_put(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
    request: *mut *mut nam_request_t,
) -> nam_status_t {
    guard("nam_put", || {
        let request = deref_mut(request, "request")?;
        *request = std::ptr::null_mut();
        let alloc = deref(alloc, "alloc")?;
        let nam = alloc.nam();
        // SAFETY of the 'static borrow: see `nam_request_t::op`.
        let op = (*alloc.nam).client.put_nb(&alloc.allocation, offset, source(buf, len)?)?;
        hand_out(nam, op, request)
    })
}

/// Starts reading `len` bytes at `offset` of the allocation into `buf` and returns without
/// waiting (OpenSHMEM's `shmem_getmem_nbi`; `nam_get_sync` is `shmem_getmem`). Returns as
/// `nam_put`: `NAM_OK` with `*request = NULL` when the data is already in `buf`; `NAM_IN_PROGRESS` with a request, after which **`buf` must stay valid
/// and must not be read until `nam_test` returns `NAM_OK` for it or `nam_wait`
/// returns `NAM_OK`**; or an error with `*request = NULL`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `buf` is NULL or writable for `len` bytes
/// until the request completes; `request` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_get(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
    request: *mut *mut nam_request_t,
) -> nam_status_t {
    guard("nam_get", || {
        let request = deref_mut(request, "request")?;
        *request = std::ptr::null_mut();
        let alloc = deref(alloc, "alloc")?;
        let nam = alloc.nam();
        // SAFETY of the 'static borrow: see `nam_request_t::op`.
        let op = (*alloc.nam).client.get_nb(&alloc.allocation, offset, sink(buf, len)?)?;
        hand_out(nam, op, request)
    })
}

/// Progresses the client once and reports the request's state without blocking:
/// `NAM_IN_PROGRESS` while in flight; `NAM_OK` once it completed (a put's buffer may be
/// reused, a get's buffer holds the data); or the error it failed with. Once it reported an
/// end it reports the same end again. It does **not** release the request: call
/// `nam_wait` afterwards (which then returns at once). A NULL request (an operation that
/// completed at once) gives `NAM_OK`.
///
/// # Safety
/// `request` is NULL or a request not yet released by `nam_wait`.
#[no_mangle]
pub unsafe extern "C" fn nam_test(request: *mut nam_request_t) -> nam_status_t {
    guard("nam_test", || {
        let Some(request) = request.as_mut() else { return Ok(NAM_OK) };
        if request.outcome.is_none() {
            match request.test() {
                Ok(false) => return Ok(NAM_IN_PROGRESS),
                Ok(true) => request.outcome = Some(Ok(())),
                Err(error) => request.outcome = Some(Err(error)),
            }
            request.op = None;
            request.amo = None;
        }
        match request.outcome.clone().expect("set above") {
            Ok(()) => Ok(NAM_OK),
            Err(error) => Err(error.into()),
        }
    })
}

/// Waits until the request completes, at most the client's timeout, and **releases** it
/// (the pointer is invalid afterwards, whatever the result). Returns `NAM_OK` (a put's
/// buffer may be reused, a get's buffer holds the data) or the error the operation failed
/// with (`NAM_ERR_TRANSPORT` when the server failed or the deadline passed; the buffer is
/// no longer used by libnam either way). A NULL request (an operation that completed at
/// once) gives `NAM_OK`, so `nam_wait(req)` is always safe after `nam_put`/`nam_get`.
///
/// # Safety
/// `request` is NULL or a request not yet released, not used by another thread.
#[no_mangle]
pub unsafe extern "C" fn nam_wait(request: *mut nam_request_t) -> nam_status_t {
    guard("nam_wait", || {
        if request.is_null() {
            return Ok(NAM_OK);
        }
        let boxed = Box::from_raw(request);
        (*boxed.nam).untrack_request(request);
        boxed.finish()?;
        Ok(NAM_OK)
    })
}
