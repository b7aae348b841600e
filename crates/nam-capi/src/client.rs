//! `nam_t`: a client of one or several memory servers; init, finalize, flush, fence.

use crate::alloc::nam_alloc_t;
use crate::ffi::{deref, deref_mut, guard, optional_str, required_str, Failure};
use crate::rma::nam_request_t;
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{config::parse_servers, Client, ClientConfig};
use std::collections::HashSet;
use std::ffi::c_char;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A client connected to one or several memory servers (opaque). Safe to share between
/// threads: calls on one `nam_t` serialize on its internal lock. Created by `nam_init`,
/// destroyed by `nam_finalize`.
pub struct nam_t {
    pub(crate) client: Client,
    /// Requests handed out by `nam_put` / `nam_get` and not yet released by `nam_wait`.
    requests: Mutex<HashSet<usize>>,
    /// Allocation objects handed out and not yet released by `nam_alloc_release`.
    allocs: Mutex<HashSet<usize>>,
}

fn locked(set: &Mutex<HashSet<usize>>) -> MutexGuard<'_, HashSet<usize>> {
    set.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl nam_t {
    pub(crate) fn track_request(&self, request: *mut nam_request_t) {
        locked(&self.requests).insert(request as usize);
    }
    pub(crate) fn untrack_request(&self, request: *mut nam_request_t) {
        locked(&self.requests).remove(&(request as usize));
    }
    pub(crate) fn track_alloc(&self, alloc: *mut nam_alloc_t) {
        locked(&self.allocs).insert(alloc as usize);
    }
    pub(crate) fn untrack_alloc(&self, alloc: *mut nam_alloc_t) {
        locked(&self.allocs).remove(&(alloc as usize));
    }
}

/// How `nam_init` connects. Zero-initialise it (`nam_config_t config = {0};`) and set
/// what you need: NULL strings and 0 numbers take the defaults given for each field (the
/// environment is not read when a config is given).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nam_config_t {
    /// Memory servers, `host:port[,host:port...]`. Required.
    pub servers: *const c_char,
    /// Tenant to act for; NULL means "default".
    pub tenant: *const c_char,
    /// The tenant's token; NULL means empty.
    pub token: *const c_char,
    /// UCX transports (`UCX_TLS`) for this client, e.g. "tcp"; NULL keeps the environment's.
    pub transports: *const c_char,
    /// Label shown by `nam status`; NULL means the program name.
    pub name: *const c_char,
    /// Deadline of every operation in milliseconds; 0 means 10000. A call made of several
    /// steps (`nam_put_sync`: put, then flush; a flush over several servers; a put with
    /// signal) has one deadline for all of them. A call that misses it stops its transfers
    /// before returning, so its buffers are free: that takes at most 2 s more.
    pub timeout_ms: u64,
    /// Deadline for connecting in milliseconds; 0 means 5000.
    pub connect_timeout_ms: u64,
}

pub(crate) unsafe fn client_config(config: &nam_config_t) -> Result<ClientConfig, Failure> {
    let mut out = ClientConfig::new(parse_servers(required_str(config.servers, "config->servers")?)?);
    if let Some(tenant) = optional_str(config.tenant, "config->tenant")? {
        out.tenant = tenant.into();
    }
    if let Some(token) = optional_str(config.token, "config->token")? {
        out.token = token.into();
    }
    out.transports = optional_str(config.transports, "config->transports")?.map(Into::into);
    if let Some(name) = optional_str(config.name, "config->name")? {
        out.name = name.into();
    }
    if config.timeout_ms != 0 {
        out.timeout = Duration::from_millis(config.timeout_ms);
    }
    if config.connect_timeout_ms != 0 {
        out.connect_timeout = Duration::from_millis(config.connect_timeout_ms);
    }
    Ok(out)
}

/// Connects to the memory servers of `config`, or, when `config` is NULL, of the
/// environment: `NAM_SERVERS` (`host:port[,host:port...]`, required), `NAM_TENANT`,
/// `NAM_TOKEN`, `NAM_TRANSPORTS` (UCX_TLS for this client), `NAM_TIMEOUT_MS` and
/// `NAM_CONNECT_TIMEOUT_MS`.
///
/// Blocking: returns when every server has accepted the tenant's credentials (`NAM_OK`, and
/// `*out` is the new client), or with an error after at most the connect deadline per server
/// (`NAM_ERR_NO_SERVERS`, `NAM_ERR_CONFIG`, `NAM_ERR_CONNECT`, `NAM_ERR_TIMEOUT`,
/// `NAM_ERR_AUTH`, ...; `*out` is then NULL). Release the client with `nam_finalize`.
///
/// # Safety
/// `config` is NULL or points to a valid `nam_config_t` whose strings are NULL or
/// NUL-terminated; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn nam_init(config: *const nam_config_t, out: *mut *mut nam_t) -> nam_status_t {
    guard("nam_init", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let config = match config.as_ref() {
            Some(config) => client_config(config)?,
            None => ClientConfig::from_env()?,
        };
        let client = Client::connect(config)?;
        let nam = nam_t { client, requests: Mutex::default(), allocs: Mutex::default() };
        *out = Box::into_raw(Box::new(nam));
        Ok(NAM_OK)
    })
}

/// Disconnects and destroys `nam`.
///
/// Blocking: first waits for every request still outstanding (from `nam_put` / `nam_get`,
/// not yet released by `nam_wait`), each at most the client's timeout, and releases them;
/// then flushes (remote completion of every put, as `nam_flush`); then releases every
/// allocation object of this client; then says goodbye to each server, which frees every
/// allocation this client still holds (except persistent ones other clients or a later
/// `nam_open` may use). Returns `NAM_OK`, or the error of the first outstanding request or
/// of the flush that failed; `nam` and every request and allocation object of it are
/// invalid afterwards in either case.
///
/// # Safety
/// `nam` is NULL or a client from `nam_init` not yet finalized, not used by another thread
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn nam_finalize(nam: *mut nam_t) -> nam_status_t {
    guard("nam_finalize", || {
        if nam.is_null() {
            return Err(Failure::Null("nam"));
        }
        let nam = Box::from_raw(nam);
        let requests = std::mem::take(&mut *locked(&nam.requests));
        let mut first = Ok(NAM_OK);
        for request in requests {
            let result = Box::from_raw(request as *mut nam_request_t).finish();
            if let (Err(error), Ok(_)) = (result, &first) {
                first = Err(Failure::Client(error));
            }
        }
        // Everything this client put becomes visible before its goodbye releases anything.
        if let (Err(error), Ok(_)) = (nam.client.flush(), &first) {
            first = Err(Failure::Client(error));
        }
        for alloc in std::mem::take(&mut *locked(&nam.allocs)) {
            drop(Box::from_raw(alloc as *mut nam_alloc_t));
        }
        drop(nam);
        first
    })
}

/// Remote completion: returns when every put, atomic and signal this client issued before
/// the call (to any server) is complete at its server, visible to every other client:
/// OpenSHMEM's `shmem_quiet`. A message-path put (TCP) that the server refused after
/// `nam_put` returned is reported here. It also completes the calls without a handle:
/// `nam_put_nbi` and `nam_iput` sources may be reused, `nam_get_nbi` buffers hold their data,
/// and every `nam_atomic_nbi` has written its fetched word (or its refusal is reported).
/// Blocking, at most the client's timeout per server. Does not complete outstanding
/// `nam_request_t`s for the caller: their buffers are released only by `nam_test`/`nam_wait`.
///
/// # Safety
/// `nam` is NULL or a live client.
#[no_mangle]
pub unsafe extern "C" fn nam_flush(nam: *mut nam_t) -> nam_status_t {
    guard("nam_flush", || {
        deref(nam, "nam")?.client.flush()?;
        Ok(NAM_OK)
    })
}

/// Ordering: every operation this client issued before the fence completes at its target
/// before any operation issued after it (OpenSHMEM's `shmem_fence`). Returns immediately (it does not wait for
/// completion; use `nam_flush` for that).
///
/// # Safety
/// `nam` is NULL or a live client.
#[no_mangle]
pub unsafe extern "C" fn nam_fence(nam: *mut nam_t) -> nam_status_t {
    guard("nam_fence", || {
        deref(nam, "nam")?.client.fence()?;
        Ok(NAM_OK)
    })
}
