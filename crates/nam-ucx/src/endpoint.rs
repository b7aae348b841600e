//! Endpoints: connections to one peer, with peer-failure detection, RMA, atomics, active
//! messages, flush and close. Every blocking call takes a timeout.

use crate::constants::{CLOSE_TIMEOUT, WATCH_EVERY_SPINS};
use crate::error::{check, op_error, status_message, Error, Result};
use crate::ffi;
use crate::memory::RemoteKey;
use crate::request::{timed_out, Posted, Request};
use crate::sockaddr::CSockAddr;
use crate::worker::{EndpointId, Worker};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 64-bit atomic operations on remote memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// `*remote += value`; fetching when a reply buffer is given.
    Add,
    /// Atomically replace `*remote` with `value`, returning the old value.
    Swap,
    /// If `*remote == compare` (passed in the reply buffer) store `value`; returns the old value.
    CompareSwap,
    /// `*remote &= value`.
    And,
    /// `*remote |= value`.
    Or,
    /// `*remote ^= value`.
    Xor,
}

impl AtomicOp {
    fn raw(self) -> ffi::ucp_atomic_op_t {
        match self {
            AtomicOp::Add => ffi::UCP_ATOMIC_OP_ADD,
            AtomicOp::Swap => ffi::UCP_ATOMIC_OP_SWAP,
            AtomicOp::CompareSwap => ffi::UCP_ATOMIC_OP_CSWAP,
            AtomicOp::And => ffi::UCP_ATOMIC_OP_AND,
            AtomicOp::Or => ffi::UCP_ATOMIC_OP_OR,
            AtomicOp::Xor => ffi::UCP_ATOMIC_OP_XOR,
        }
    }
}

/// Written by UCX's error handler when the peer fails; read before every operation.
struct Health {
    failure: AtomicI32,
}

unsafe extern "C" fn ep_error_handler(arg: *mut c_void, _ep: ffi::ucp_ep_h, status: ffi::ucs_status_t) {
    // SAFETY: arg is the Health pointer leaked in Endpoint::create; it outlives the endpoint.
    let health = &*(arg as *const Health);
    let code = if status == ffi::UCS_OK { ffi::UCS_ERR_CONNECTION_RESET } else { status };
    health.failure.store(code as i32, Ordering::Release);
}

pub(crate) struct EndpointInner {
    raw: AtomicPtr<ffi::ucp_ep>,
    health: *const Health,
    /// Created with UCX peer error handling, so it can be force-closed.
    detects_failure: bool,
    /// Set by [`Endpoint::abort`] on an endpoint that cannot be force-closed: operations
    /// are refused, and UCX closes it gently when it is dropped.
    refused: AtomicBool,
    pub(crate) worker: Worker,
}

// SAFETY: the endpoint is used under the serialization of its worker.
unsafe impl Send for EndpointInner {}
unsafe impl Sync for EndpointInner {}

impl Drop for EndpointInner {
    fn drop(&mut self) {
        let raw = self.raw.swap(ptr::null_mut(), Ordering::AcqRel);
        if !raw.is_null() {
            let force = self.health().failure.load(Ordering::Acquire) != 0;
            close_raw(&self.worker, raw, force);
        }
        // SAFETY: health came from Box::into_raw; the endpoint is closed, so UCX will not
        // call the error handler any more.
        drop(unsafe { Box::from_raw(self.health as *mut Health) });
    }
}

impl EndpointInner {
    fn health(&self) -> &Health {
        // SAFETY: health lives as long as self.
        unsafe { &*self.health }
    }
}

/// Closes `raw`, progressing the worker until done or [`CLOSE_TIMEOUT`] passes.
fn close_raw(worker: &Worker, raw: ffi::ucp_ep_h, force: bool) {
    let params = ffi::ucp_request_param_t {
        op_attr_mask: ffi::UCP_OP_ATTR_FIELD_FLAGS,
        flags: if force { ffi::UCP_EP_CLOSE_FLAG_FORCE } else { 0 },
        ..Default::default()
    };
    // SAFETY: raw is a live endpoint that nobody else will use after this call.
    let ptr = unsafe { ffi::ucp_ep_close_nbx(raw, &params) };
    if let Ok(Posted::InFlight(request)) = Posted::from_status_ptr("ucp_ep_close_nbx", ptr) {
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        while request.check().is_none() && Instant::now() < deadline {
            worker.progress();
        }
        if request.check().is_none() {
            worker.inner.unfinished.store(true, Ordering::Release);
        }
    }
}

/// A connection to one peer (`ucp_ep_h`). Cloning shares it.
///
/// Completion semantics: `*_nbx` calls return [`Posted`]; [`Posted::Done`] or a completed
/// request means *local* completion (the source buffer may be reused, a get's data has
/// arrived). Remote visibility of puts needs [`Endpoint::flush`].
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EndpointInner>,
}

impl Endpoint {
    fn create(worker: &Worker, mut params: ffi::ucp_ep_params_t, detect_peer_failure: bool) -> Result<Endpoint> {
        let health = Box::into_raw(Box::new(Health { failure: AtomicI32::new(0) }));
        params.field_mask |= (ffi::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | ffi::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64;
        params.err_mode =
            if detect_peer_failure { ffi::UCP_ERR_HANDLING_MODE_PEER } else { ffi::UCP_ERR_HANDLING_MODE_NONE };
        params.err_handler = ffi::ucp_err_handler_t { cb: Some(ep_error_handler), arg: health as *mut c_void };
        let mut raw: ffi::ucp_ep_h = ptr::null_mut();
        // SAFETY: params and everything they point to are valid for the call.
        let status = unsafe { ffi::ucp_ep_create(worker.raw(), &params, &mut raw) };
        if status != ffi::UCS_OK {
            // SAFETY: no endpoint was created, so nobody else holds health.
            drop(unsafe { Box::from_raw(health) });
            return Err(op_error("ucp_ep_create", status));
        }
        Ok(Endpoint {
            inner: Arc::new(EndpointInner {
                raw: AtomicPtr::new(raw),
                health,
                detects_failure: detect_peer_failure,
                refused: AtomicBool::new(false),
                worker: worker.clone(),
            }),
        })
    }

    /// Starts a client-server connection to a listener at `addr`, with peer-failure
    /// detection (UCX's connection manager notices a peer that dies). The connection completes
    /// asynchronously; a refused or unreachable peer shows up as [`Error::PeerFailed`] on
    /// the first operation that needs it.
    pub fn connect(worker: &Worker, addr: SocketAddr) -> Result<Endpoint> {
        let sockaddr = CSockAddr::new(addr);
        let params = ffi::ucp_ep_params_t {
            field_mask: (ffi::UCP_EP_PARAM_FIELD_FLAGS | ffi::UCP_EP_PARAM_FIELD_SOCK_ADDR) as u64,
            flags: ffi::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
            sockaddr: sockaddr.as_ucs(),
            ..Default::default()
        };
        Endpoint::create(worker, params, true)
    }

    /// Connects to a peer worker by the address from its [`Worker::address`]. UCX picks the
    /// best transports both sides share (shared memory on the same host, RDMA or TCP
    /// between hosts).
    ///
    /// With `detect_peer_failure`, the endpoint uses UCX's peer error handling, which
    /// UCX 1.13's shared-memory transports do not support, so they are not chosen. A data
    /// endpoint that wants shared memory passes `false` and relies on a companion
    /// sockaddr endpoint (which always detects failure) to learn that the peer is gone.
    pub fn connect_to_worker(worker: &Worker, address: &[u8], detect_peer_failure: bool) -> Result<Endpoint> {
        if address.is_empty() {
            return Err(Error::InvalidArgument("empty worker address"));
        }
        let params = ffi::ucp_ep_params_t {
            field_mask: ffi::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS as u64,
            address: address.as_ptr() as *const ffi::ucp_address_t,
            ..Default::default()
        };
        Endpoint::create(worker, params, detect_peer_failure)
    }

    /// [`Endpoint::connect_to_worker`] for an address a peer sent: it reaches UCX only after
    /// [`crate::check_worker_address`] against `own_address` (an address of a worker of this
    /// host on the devices the peer may list; a peer whose address is used this way runs on
    /// this host, with this UCX) accepts it.
    pub fn connect_to_peer_worker(
        worker: &Worker,
        address: &[u8],
        own_address: &[u8],
        detect_peer_failure: bool,
    ) -> Result<Endpoint> {
        crate::peer::check_worker_address(address, own_address)?;
        Endpoint::connect_to_worker(worker, address, detect_peer_failure)
    }

    /// Accepts a connection request that arrived on a [`crate::Listener`].
    pub fn accept(worker: &Worker, request: crate::listener::ConnRequest) -> Result<Endpoint> {
        let params = ffi::ucp_ep_params_t {
            field_mask: ffi::UCP_EP_PARAM_FIELD_CONN_REQUEST as u64,
            conn_request: request.into_raw(),
            ..Default::default()
        };
        Endpoint::create(worker, params, true)
    }

    /// The identity of this endpoint, as reported in [`crate::AmMessage::reply_ep`].
    pub fn id(&self) -> EndpointId {
        EndpointId(self.inner.raw.load(Ordering::Relaxed) as usize)
    }

    /// The worker this endpoint progresses on.
    pub fn worker(&self) -> &Worker {
        &self.inner.worker
    }

    /// The failure UCX reported for the peer, if any.
    #[inline]
    pub fn failure(&self) -> Option<Error> {
        match self.inner.health().failure.load(Ordering::Acquire) {
            0 => None,
            code => Some(Error::PeerFailed { status: code as i8, message: status_message(code as i8) }),
        }
    }

    /// The live raw endpoint, or the reason there is none.
    #[inline]
    fn live(&self) -> Result<ffi::ucp_ep_h> {
        let raw = self.inner.raw.load(Ordering::Relaxed);
        if raw.is_null() || self.inner.refused.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        if let Some(err) = self.failure() {
            return Err(err);
        }
        Ok(raw)
    }

    /// Stops the endpoint; later operations return [`Error::Closed`]. An endpoint with
    /// peer-failure detection is force-closed, which completes every outstanding request
    /// with an error so no buffer stays in use. UCX does not support force-closing one
    /// without it, so that kind is only marked refused (its operations are the synchronous
    /// shared-memory kind; see `connect_to_worker`) and closed gently on drop.
    pub fn abort(&self) {
        if !self.inner.detects_failure {
            self.inner.refused.store(true, Ordering::Release);
            return;
        }
        let raw = self.inner.raw.swap(ptr::null_mut(), Ordering::AcqRel);
        if !raw.is_null() {
            close_raw(&self.inner.worker, raw, true);
        }
    }

    /// Whether this endpoint was created with peer-failure detection.
    #[inline]
    pub fn detects_failure(&self) -> bool {
        self.inner.detects_failure
    }

    /// Waits for `posted` by progressing the worker, at most `timeout`. On timeout the
    /// endpoint is aborted (see [`Endpoint::abort`]) and [`Error::TimedOut`] is returned.
    pub fn wait(&self, posted: Posted, timeout: Duration) -> Result<()> {
        match posted {
            Posted::Done => Ok(()),
            Posted::InFlight(request) => self.wait_request(&request, timeout),
        }
    }

    /// Waits for one in-flight request; see [`Endpoint::wait`].
    pub fn wait_request(&self, request: &Request, timeout: Duration) -> Result<()> {
        self.wait_request_watching(request, timeout, None)
    }

    /// Like [`Endpoint::wait`], and also gives up (aborting this endpoint) as soon as
    /// `watch` reports a peer failure: the way a data endpoint without failure detection
    /// learns from its control endpoint that the peer died.
    pub fn wait_watching(&self, posted: Posted, timeout: Duration, watch: &Endpoint) -> Result<()> {
        match posted {
            Posted::Done => Ok(()),
            Posted::InFlight(request) => self.wait_request_watching(&request, timeout, Some(watch)),
        }
    }

    fn wait_request_watching(&self, request: &Request, timeout: Duration, watch: Option<&Endpoint>) -> Result<()> {
        let worker = &self.inner.worker;
        let mut deadline: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            if let Some(result) = request.check() {
                return result;
            }
            worker.progress();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(WATCH_EVERY_SPINS) {
                if let Some(failure) = watch.and_then(Endpoint::failure) {
                    self.abort();
                    self.drain(request);
                    return Err(failure);
                }
                let now = Instant::now();
                let limit = *deadline.get_or_insert(now + timeout);
                if now >= limit {
                    return self.abandon(request, timeout);
                }
            }
        }
    }

    /// Aborts the endpoint after `request` outlived its deadline and waits for UCX to
    /// complete it with an error, so its buffers are free when this returns.
    fn abandon(&self, request: &Request, timeout: Duration) -> Result<()> {
        self.abort();
        self.drain(request);
        Err(timed_out(request.op(), timeout.as_millis() as u64))
    }

    /// After an abort, progresses until UCX completes `request`, at most [`CLOSE_TIMEOUT`].
    fn drain(&self, request: &Request) {
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        while request.check().is_none() && Instant::now() < deadline {
            self.inner.worker.progress();
        }
        if request.check().is_none() {
            log::error!("{} still in flight {CLOSE_TIMEOUT:?} after its endpoint was stopped", request.op());
        }
    }

    /// Request parameters for an operation on host memory. Naming the memory type spares
    /// UCX a memory-type lookup per call (measured: it doubled 8-byte atomic latency).
    #[inline]
    fn params(attr: u32) -> ffi::ucp_request_param_t {
        ffi::ucp_request_param_t {
            op_attr_mask: attr | ffi::UCP_OP_ATTR_FIELD_MEMORY_TYPE,
            memory_type: ffi::UCS_MEMORY_TYPE_HOST,
            ..Default::default()
        }
    }

    /// Posts a put of `len` bytes at `src` to `remote_addr`.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unchanged until the operation completes locally.
    #[inline]
    pub unsafe fn put_nbx(&self, src: *const u8, len: usize, remote_addr: u64, rkey: &RemoteKey) -> Result<Posted> {
        let ep = self.live()?;
        let params = Self::params(0);
        let ptr = ffi::ucp_put_nbx(ep, src as *const c_void, len, remote_addr, rkey.raw(), &params);
        Posted::from_status_ptr("ucp_put_nbx", ptr)
    }

    /// Posts a get of `len` bytes from `remote_addr` into `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` must stay valid, and not be read, until the operation completes.
    #[inline]
    pub unsafe fn get_nbx(&self, dst: *mut u8, len: usize, remote_addr: u64, rkey: &RemoteKey) -> Result<Posted> {
        let ep = self.live()?;
        let params = Self::params(0);
        let ptr = ffi::ucp_get_nbx(ep, dst as *mut c_void, len, remote_addr, rkey.raw(), &params);
        Posted::from_status_ptr("ucp_get_nbx", ptr)
    }

    /// Posts a 64-bit atomic with UCX's operand convention. `reply` is null for a
    /// non-fetching [`AtomicOp::Add`]/`And`/`Or`/`Xor`; for fetching ops it receives the old
    /// value. For [`AtomicOp::CompareSwap`], `value` holds the *compare* value and `reply`
    /// holds the *new* value on input (UCX: `result = *remote; if (value == *remote)
    /// *remote = reply`). [`Endpoint::atomic_fetch`] hides this.
    ///
    /// # Safety
    /// `value` and `reply` (if not null) must stay valid until the operation completes.
    #[inline]
    pub unsafe fn atomic_nbx(
        &self,
        op: AtomicOp,
        value: *const u64,
        reply: *mut u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Posted> {
        if !remote_addr.is_multiple_of(8) {
            return Err(Error::InvalidArgument("64-bit atomics need an 8-byte aligned address"));
        }
        let ep = self.live()?;
        let mut params = Self::params(ffi::UCP_OP_ATTR_FIELD_DATATYPE);
        params.datatype = ucp_dt_make_contig(8);
        if !reply.is_null() {
            params.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_REPLY_BUFFER;
            params.reply_buffer = reply as *mut c_void;
        } else if matches!(op, AtomicOp::Swap | AtomicOp::CompareSwap) {
            return Err(Error::InvalidArgument("swap and compare-swap need a reply buffer"));
        }
        let ptr = ffi::ucp_atomic_op_nbx(ep, op.raw(), value as *const c_void, 1, remote_addr, rkey.raw(), &params);
        Posted::from_status_ptr("ucp_atomic_op_nbx", ptr)
    }

    /// Posts a flush: completes when every operation issued before it on this endpoint is
    /// complete at the target (remote completion).
    pub fn flush_nbx(&self) -> Result<Posted> {
        let ep = self.live()?;
        let params = Self::params(0);
        // SAFETY: ep is live; params valid for the call.
        let ptr = unsafe { ffi::ucp_ep_flush_nbx(ep, &params) };
        Posted::from_status_ptr("ucp_ep_flush_nbx", ptr)
    }

    /// Blocking put with local completion.
    pub fn put(&self, src: &[u8], remote_addr: u64, rkey: &RemoteKey, timeout: Duration) -> Result<()> {
        // SAFETY: src is borrowed until wait returns, and wait returns only after completion.
        let posted = unsafe { self.put_nbx(src.as_ptr(), src.len(), remote_addr, rkey)? };
        self.wait(posted, timeout)
    }

    /// Blocking get.
    pub fn get(&self, dst: &mut [u8], remote_addr: u64, rkey: &RemoteKey, timeout: Duration) -> Result<()> {
        // SAFETY: dst is borrowed mutably until the operation has completed.
        let posted = unsafe { self.get_nbx(dst.as_mut_ptr(), dst.len(), remote_addr, rkey)? };
        self.wait(posted, timeout)
    }

    /// Blocking 64-bit atomic that returns the old value (for `Add`, fetch-add).
    /// `compare` is used only by [`AtomicOp::CompareSwap`].
    pub fn atomic_fetch(
        &self,
        op: AtomicOp,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        timeout: Duration,
    ) -> Result<u64> {
        let (operand, mut reply) = match op {
            AtomicOp::CompareSwap => (compare, value),
            _ => (value, 0),
        };
        // SAFETY: operand and reply live on this stack frame until wait returns.
        let posted = unsafe { self.atomic_nbx(op, &operand, &mut reply, remote_addr, rkey)? };
        self.wait(posted, timeout)?;
        Ok(reply)
    }

    /// Blocking non-fetching atomic (`Add`, `And`, `Or`, `Xor`).
    pub fn atomic_post(
        &self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        timeout: Duration,
    ) -> Result<()> {
        // SAFETY: value lives on this stack frame until wait returns.
        let posted = unsafe { self.atomic_nbx(op, &value, ptr::null_mut(), remote_addr, rkey)? };
        self.wait(posted, timeout)
    }

    /// Blocking flush (remote completion of everything issued before).
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        let posted = self.flush_nbx()?;
        self.wait(posted, timeout)
    }

    /// Sends an active message `id` carrying `payload`, eagerly and with a reply endpoint,
    /// and waits for local completion.
    pub fn am_send(&self, id: u16, payload: &[u8], timeout: Duration) -> Result<()> {
        // SAFETY: payload is borrowed until wait returns.
        let posted = unsafe { self.am_send_nbx(id, payload.as_ptr(), payload.len())? };
        self.wait(posted, timeout)
    }

    /// Posts an active message; see [`Endpoint::am_send`].
    ///
    /// # Safety
    /// `payload..payload+len` must stay valid until the operation completes.
    pub unsafe fn am_send_nbx(&self, id: u16, payload: *const u8, len: usize) -> Result<Posted> {
        let ep = self.live()?;
        let mut params = Self::params(ffi::UCP_OP_ATTR_FIELD_FLAGS);
        params.flags = ffi::UCP_AM_SEND_FLAG_REPLY | ffi::UCP_AM_SEND_FLAG_EAGER;
        let ptr = ffi::ucp_am_send_nbx(ep, id as u32, ptr::null(), 0, payload as *const c_void, len, &params);
        Posted::from_status_ptr("ucp_am_send_nbx", ptr)
    }

    /// [`Endpoint::unpack_rkey`] for a key an untrusted peer sent: it reaches UCX (which
    /// reads it without a length) only after `layout` accepts it ([`crate::RkeyLayout::check`]),
    /// followed by zeros. The layout fixes every length; the contents of a memory domain's
    /// blob (a shared-memory segment's id, owner address) are the peer's (`docs/security.md`).
    pub fn unpack_peer_rkey(&self, packed: &[u8], layout: &crate::RkeyLayout) -> Result<RemoteKey> {
        layout.check(packed)?;
        // A memory domain's unpack reads a blob of the size its own UCX packs, at most 255
        // bytes: followed by that many zeros, no read leaves the buffer.
        let mut padded = Vec::with_capacity(packed.len() + 256);
        padded.extend_from_slice(packed);
        padded.resize(packed.len() + 256, 0);
        self.unpack_rkey(&padded)
    }

    /// Unpacks a remote key that a trusted peer packed with [`crate::MemRegion::pack_rkey`].
    /// UCX reads the bytes without a length and trusts them: keys from untrusted peers go
    /// through [`Endpoint::unpack_peer_rkey`].
    pub fn unpack_rkey(&self, packed: &[u8]) -> Result<RemoteKey> {
        let ep = self.live()?;
        let mut raw: ffi::ucp_rkey_h = ptr::null_mut();
        // SAFETY: packed is a readable buffer that a trusted peer packed (UCX does not check it).
        check("ucp_ep_rkey_unpack", unsafe {
            ffi::ucp_ep_rkey_unpack(ep, packed.as_ptr() as *const c_void, &mut raw)
        })?;
        Ok(RemoteKey::new(raw, self.inner.clone()))
    }
}

/// `ucp_dt_make_contig(elem_size)` from ucp.h (a macro, so bindgen cannot see it).
const fn ucp_dt_make_contig(elem_size: u64) -> ffi::ucp_datatype_t {
    (elem_size << ffi::UCP_DATATYPE_SHIFT) | ffi::UCP_DATATYPE_CONTIG as u64
}
