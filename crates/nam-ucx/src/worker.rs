//! The UCP worker: the progress engine, active-message dispatch and event-fd wake-up.

use crate::context::Context;
use crate::error::{check, Error, Result};
use crate::ffi;
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

/// Identifies the endpoint a message came from; equal to [`crate::Endpoint::id`] of the
/// endpoint this process holds to that peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub usize);

/// One received active message, valid for the duration of the handler call.
#[derive(Debug)]
pub struct AmMessage<'a> {
    /// The user header.
    pub header: &'a [u8],
    /// The payload; `None` if the sender used rendezvous (nam always sends eagerly, so a
    /// `None` marks a message this process must reject).
    pub data: Option<&'a [u8]>,
    /// The endpoint to reply on, if the sender asked for replies.
    pub reply_ep: Option<EndpointId>,
}

type AmHandler = Box<dyn FnMut(AmMessage<'_>) + Send>;

pub(crate) struct WorkerInner {
    pub(crate) raw: ffi::ucp_worker_h,
    handlers: std::sync::Mutex<Vec<*mut AmHandler>>,
    /// An operation of this worker (an endpoint's close) did not finish by its deadline:
    /// UCX still holds it, so the worker must not be destroyed under it.
    pub(crate) unfinished: std::sync::atomic::AtomicBool,
    _context: Context,
}

// SAFETY: UCP workers are created SERIALIZED: any thread may use one, one at a time. nam
// keeps that rule by owning each worker from one thread or behind one lock.
unsafe impl Send for WorkerInner {}
unsafe impl Sync for WorkerInner {}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        if self.unfinished.load(std::sync::atomic::Ordering::Acquire) {
            // UCX expects every operation of a worker finished before ucp_worker_destroy; one
            // still in flight would be left pointing into freed transport state. Leaking one
            // worker, on this rare path, is the safe choice; its handlers stay with it.
            log::warn!("leaving a UCX worker undestroyed: an endpoint close did not finish in time");
            // Its context stays too: ucp_cleanup under a live worker asserts (memory regions
            // the worker's transports still reference).
            std::mem::forget(self._context.clone());
            return;
        }
        // SAFETY: endpoints and listeners hold an Arc to this inner, so none is alive.
        unsafe { ffi::ucp_worker_destroy(self.raw) };
        for handler in self.handlers.lock().unwrap().drain(..) {
            // SAFETY: each pointer came from Box::into_raw in set_am_handler; the worker that
            // could call it is destroyed.
            drop(unsafe { Box::from_raw(handler) });
        }
    }
}

/// A UCP worker (`ucp_worker_h`). All communication progresses through [`Worker::progress`];
/// active-message handlers run inside it, on the calling thread.
#[derive(Clone)]
pub struct Worker {
    pub(crate) inner: Arc<WorkerInner>,
}

unsafe extern "C" fn am_trampoline(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ffi::ucp_am_recv_param_t,
) -> ffi::ucs_status_t {
    // SAFETY: arg is the *mut AmHandler registered for this id; UCX passes valid pointers
    // and lengths for the duration of this call.
    let handler = &mut *(arg as *mut AmHandler);
    let param = &*param;
    let header =
        if header_length == 0 { &[][..] } else { std::slice::from_raw_parts(header as *const u8, header_length) };
    // Eager data is readable for the duration of the callback (the DATA flag only says it
    // may also be retained); rendezvous data would need ucp_am_recv_data_nbx.
    let is_rndv = param.recv_attr & ffi::UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
    let data = if is_rndv {
        None
    } else if length == 0 {
        Some(&[][..])
    } else {
        Some(std::slice::from_raw_parts(data as *const u8, length))
    };
    let reply_ep = (!param.reply_ep.is_null()).then_some(EndpointId(param.reply_ep as usize));
    handler(AmMessage { header, data, reply_ep });
    ffi::UCS_OK
}

impl Worker {
    /// Creates a worker on `context`, usable by one thread at a time.
    pub fn new(context: &Context) -> Result<Worker> {
        let params = ffi::ucp_worker_params_t {
            field_mask: ffi::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64,
            thread_mode: ffi::UCS_THREAD_MODE_SERIALIZED,
            ..Default::default()
        };
        let mut raw: ffi::ucp_worker_h = ptr::null_mut();
        // SAFETY: context is alive; params valid for the call; raw is an out-pointer.
        check("ucp_worker_create", unsafe { ffi::ucp_worker_create(context.inner.raw, &params, &mut raw) })?;
        Ok(Worker {
            inner: Arc::new(WorkerInner {
                raw,
                handlers: std::sync::Mutex::new(Vec::new()),
                unfinished: std::sync::atomic::AtomicBool::new(false),
                _context: context.clone(),
            }),
        })
    }

    /// Progresses all communication once; returns how many events were processed.
    #[inline]
    pub fn progress(&self) -> u32 {
        // SAFETY: the worker is alive and used under the caller's serialization.
        unsafe { ffi::ucp_worker_progress(self.inner.raw) }
    }

    /// Orders operations: those issued before the fence complete at the target before
    /// those issued after it (`ucp_worker_fence`).
    pub fn fence(&self) -> Result<()> {
        // SAFETY: the worker is alive.
        check("ucp_worker_fence", unsafe { ffi::ucp_worker_fence(self.inner.raw) })
    }

    /// Registers `handler` for active messages with `id`. It runs inside [`Worker::progress`].
    pub fn set_am_handler(&self, id: u16, handler: impl FnMut(AmMessage<'_>) + Send + 'static) -> Result<()> {
        let boxed: *mut AmHandler = Box::into_raw(Box::new(Box::new(handler)));
        let params = ffi::ucp_am_handler_param_t {
            field_mask: (ffi::UCP_AM_HANDLER_PARAM_FIELD_ID
                | ffi::UCP_AM_HANDLER_PARAM_FIELD_CB
                | ffi::UCP_AM_HANDLER_PARAM_FIELD_ARG) as u64,
            id: id as u32,
            cb: Some(am_trampoline),
            arg: boxed as *mut c_void,
            ..Default::default()
        };
        // SAFETY: params valid for the call; boxed lives until the worker is destroyed.
        let status = unsafe { ffi::ucp_worker_set_am_recv_handler(self.inner.raw, &params) };
        self.inner.handlers.lock().unwrap().push(boxed);
        check("ucp_worker_set_am_recv_handler", status)
    }

    /// The worker's event file descriptor (needs the `wakeup` feature).
    pub fn event_fd(&self) -> Result<RawFd> {
        let mut fd: RawFd = -1;
        // SAFETY: worker alive; fd is an out-pointer.
        check("ucp_worker_get_efd", unsafe { ffi::ucp_worker_get_efd(self.inner.raw, &mut fd) })?;
        Ok(fd)
    }

    /// Sleeps until the worker has events or `timeout` passes. Returns `true` if it slept
    /// (or was woken), `false` if events were already pending and the caller must progress.
    ///
    /// `poll` counts whole milliseconds, so a timeout under 1 ms does not sleep: the call
    /// arms the worker and returns at once, and the caller progresses again. nam-client's
    /// waits while a server pulls or pushes a rank's buffer over TCP (`CKPT_PULL_POLL_MAX`)
    /// rely on that: the server's emulated GETs and PUTs move only while the rank
    /// progresses, and a version that slept for real (`ppoll`) made a loopback restore's
    /// rebuild 2-3x slower, the woken rank waiting for a core before it could answer.
    pub fn wait_for_events(&self, timeout: Duration) -> Result<bool> {
        let fd = self.event_fd()?;
        // SAFETY: worker alive.
        let status = unsafe { ffi::ucp_worker_arm(self.inner.raw) };
        if status == ffi::UCS_ERR_BUSY {
            return Ok(false);
        }
        check("ucp_worker_arm", status)?;
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: pfd is a valid pollfd array of length 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::Ucx { op: "poll(worker efd)", status: -1, message: err.to_string() });
            }
        }
        Ok(true)
    }

    /// This worker's address: every transport it can be reached on. A peer connects to it
    /// with [`crate::Endpoint::connect_to_worker`], which lets UCX choose any transport,
    /// shared memory included (sockaddr connections are limited to socket-capable ones).
    pub fn address(&self) -> Result<Vec<u8>> {
        let mut address: *mut ffi::ucp_address_t = ptr::null_mut();
        let mut length = 0usize;
        // SAFETY: worker alive; out-pointers valid.
        check("ucp_worker_get_address", unsafe {
            ffi::ucp_worker_get_address(self.inner.raw, &mut address, &mut length)
        })?;
        // SAFETY: UCX returned `length` readable bytes, released right after copying.
        let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, length).to_vec() };
        unsafe { ffi::ucp_worker_release_address(self.inner.raw, address) };
        Ok(bytes)
    }

    pub(crate) fn raw(&self) -> ffi::ucp_worker_h {
        self.inner.raw
    }
}
