//! Listeners accept client-server connections on a socket address.

use crate::error::{check, Result};
use crate::ffi;
use crate::sockaddr::{from_storage, CSockAddr};
use crate::worker::Worker;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::ptr;
use std::sync::{Arc, Mutex};

/// A connection request waiting to be accepted with [`crate::Endpoint::accept`] or rejected.
pub struct ConnRequest {
    raw: ffi::ucp_conn_request_h,
    listener: ffi::ucp_listener_h,
}

// SAFETY: a token handled under the worker's serialization.
unsafe impl Send for ConnRequest {}

impl ConnRequest {
    pub(crate) fn into_raw(self) -> ffi::ucp_conn_request_h {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// The address the connection came from, if UCX can tell (it always can over TCP).
    pub fn client_addr(&self) -> Option<SocketAddr> {
        let mut attr = ffi::ucp_conn_request_attr_t {
            field_mask: ffi::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR as u64,
            ..Default::default()
        };
        // SAFETY: the request is live until accepted or rejected; attr is an out-parameter.
        if unsafe { ffi::ucp_conn_request_query(self.raw, &mut attr) } != ffi::UCS_OK {
            return None;
        }
        // SAFETY: ucp sockaddr storage has the layout of libc's sockaddr_storage.
        let storage = unsafe { &*(&attr.client_address as *const _ as *const libc::sockaddr_storage) };
        from_storage(storage).ok()
    }

    /// Refuses the connection; the peer sees a rejection error.
    pub fn reject(self) {
        // SAFETY: the request came from this listener and is consumed here.
        unsafe { ffi::ucp_listener_reject(self.listener, self.raw) };
        std::mem::forget(self);
    }
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        // SAFETY: an unaccepted request must be rejected to release it.
        unsafe { ffi::ucp_listener_reject(self.listener, self.raw) };
    }
}

/// A connection-request token that UCX hands to the callback; moved between threads only
/// under the worker's serialization.
struct PendingRequest(ffi::ucp_conn_request_h);

// SAFETY: see above; the pointer is an opaque token owned by the listener's worker.
unsafe impl Send for PendingRequest {}

type Pending = Mutex<Vec<PendingRequest>>;

unsafe extern "C" fn on_conn_request(request: ffi::ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: arg is the Pending leaked in Listener::bind, alive until the listener is destroyed.
    let pending = &*(arg as *const Pending);
    pending.lock().unwrap().push(PendingRequest(request));
}

/// A UCP listener (`ucp_listener_h`). Requests queue up during [`Worker::progress`] and
/// are collected with [`Listener::take_requests`].
pub struct Listener {
    raw: ffi::ucp_listener_h,
    pending: *const Pending,
    address: SocketAddr,
    _worker: Worker,
}

// SAFETY: used under the serialization of its worker.
unsafe impl Send for Listener {}

impl Listener {
    /// Listens on `addr` (port 0 picks a free port; see [`Listener::address`]).
    pub fn bind(worker: &Worker, addr: SocketAddr) -> Result<Listener> {
        let pending: *const Pending = Arc::into_raw(Arc::new(Mutex::new(Vec::new())));
        let sockaddr = CSockAddr::new(addr);
        let params = ffi::ucp_listener_params_t {
            field_mask: (ffi::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | ffi::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER) as u64,
            sockaddr: sockaddr.as_ucs(),
            conn_handler: ffi::ucp_listener_conn_handler_t { cb: Some(on_conn_request), arg: pending as *mut c_void },
            ..Default::default()
        };
        let mut raw: ffi::ucp_listener_h = ptr::null_mut();
        // SAFETY: params valid for the call.
        let status = unsafe { ffi::ucp_listener_create(worker.raw(), &params, &mut raw) };
        if status != ffi::UCS_OK {
            // SAFETY: no listener holds the pointer.
            drop(unsafe { Arc::from_raw(pending) });
            check("ucp_listener_create", status)?;
        }
        let mut attr =
            ffi::ucp_listener_attr_t { field_mask: ffi::UCP_LISTENER_ATTR_FIELD_SOCKADDR as u64, ..Default::default() };
        // SAFETY: raw is live.
        check("ucp_listener_query", unsafe { ffi::ucp_listener_query(raw, &mut attr) })?;
        // SAFETY: ucp sockaddr storage has the layout of libc's sockaddr_storage.
        let storage = unsafe { &*(&attr.sockaddr as *const _ as *const libc::sockaddr_storage) };
        let address = from_storage(storage)?;
        Ok(Listener { raw, pending, address, _worker: worker.clone() })
    }

    /// The address actually bound.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Connection requests that arrived since the last call.
    pub fn take_requests(&self) -> Vec<ConnRequest> {
        // SAFETY: pending lives as long as self.
        let pending = unsafe { &*self.pending };
        pending.lock().unwrap().drain(..).map(|p| ConnRequest { raw: p.0, listener: self.raw }).collect()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        for request in self.take_requests() {
            request.reject();
        }
        // SAFETY: raw is live and destroyed once; afterwards no callback uses pending.
        unsafe {
            ffi::ucp_listener_destroy(self.raw);
            drop(Arc::from_raw(self.pending));
        }
    }
}
