//! `nam_alloc_t`: allocations; malloc, open, free, release, size.

use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, optional_str, required_str, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{AllocOptions, Allocation, Error};
use std::ffi::c_char;

/// Flag of `nam_alloc_params_t`: other clients of the tenant may `nam_open` the
/// allocation by its name.
pub const NAM_ALLOC_SHARED: u32 = 1 << 0;
/// Flag of `nam_alloc_params_t`: the allocation survives the disconnect of every holder
/// until it is freed explicitly (it needs a name to be found again).
pub const NAM_ALLOC_PERSISTENT: u32 = 1 << 1;
/// Value of `nam_alloc_params_t::server`: let the client choose (round-robin).
pub const NAM_SERVER_ANY: i32 = -1;

/// An allocation on a memory server (opaque), from `nam_malloc` or `nam_open`. It knows
/// its client, so data calls take only the allocation. The object outlives `nam_free` (so
/// that a second free reports `NAM_ERR_FREED`) until `nam_alloc_release` or
/// `nam_finalize` releases it.
pub struct nam_alloc_t {
    pub(crate) nam: *const nam_t,
    pub(crate) allocation: Allocation,
}

impl nam_alloc_t {
    /// The client this allocation belongs to.
    pub(crate) fn nam(&self) -> &nam_t {
        // SAFETY: an allocation object is released no later than its client (nam_finalize
        // releases the ones still tracked before it destroys the client).
        unsafe { &*self.nam }
    }
}

/// How `nam_malloc` allocates. Passing NULL instead means: default alignment, no flags,
/// no name, any server.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nam_alloc_params_t {
    /// Alignment in bytes, a power of two; 0 means the server's default (64).
    pub align: u64,
    /// `NAM_ALLOC_SHARED` and/or `NAM_ALLOC_PERSISTENT`, or 0.
    pub flags: u32,
    /// Name for `nam_open` (at most 255 bytes of UTF-8), or NULL for an anonymous
    /// allocation.
    pub name: *const c_char,
    /// Index of the server in the configured list, or `NAM_SERVER_ANY` (-1).
    pub server: i32,
}

unsafe fn alloc_options(params: Option<&nam_alloc_params_t>) -> Result<AllocOptions, Failure> {
    let Some(params) = params else { return Ok(AllocOptions::default()) };
    if params.flags & !(NAM_ALLOC_SHARED | NAM_ALLOC_PERSISTENT) != 0 {
        return Err(Failure::Invalid(format!("params->flags 0x{:x} has unknown bits", params.flags)));
    }
    let server = match params.server {
        NAM_SERVER_ANY => None,
        s if s >= 0 => Some(s as usize),
        s => return Err(Failure::Invalid(format!("params->server {s} is neither an index nor NAM_SERVER_ANY"))),
    };
    Ok(AllocOptions {
        align: params.align,
        shared: params.flags & NAM_ALLOC_SHARED != 0,
        persistent: params.flags & NAM_ALLOC_PERSISTENT != 0,
        name: optional_str(params.name, "params->name")?.map(Into::into),
        server,
    })
}

pub(crate) fn hand_out(nam: &nam_t, allocation: Allocation, out: &mut *mut nam_alloc_t) {
    let alloc = Box::into_raw(Box::new(nam_alloc_t { nam, allocation }));
    nam.track_alloc(alloc);
    *out = alloc;
}

/// Allocates `size` bytes on a memory server.
///
/// Blocking: returns when the server has granted the allocation (`NAM_OK`, `*out` is the
/// new allocation) or refused it (`NAM_ERR_INVALID_ARGUMENT` for a zero size or a bad
/// alignment, `NAM_ERR_TOO_LARGE`, `NAM_ERR_POOL_EXHAUSTED`, `NAM_ERR_QUOTA_EXCEEDED`,
/// `NAM_ERR_NAME_EXISTS`, ...), at most the client's timeout; on error `*out` is NULL.
///
/// # Safety
/// `nam` is NULL or a live client; `params` is NULL or valid with a NULL or NUL-terminated
/// name; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_malloc(
    nam: *mut nam_t,
    size: u64,
    params: *const nam_alloc_params_t,
    out: *mut *mut nam_alloc_t,
) -> nam_status_t {
    guard("nam_malloc", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let nam = deref(nam, "nam")?;
        let allocation = nam.client.alloc(size, &alloc_options(params.as_ref())?)?;
        hand_out(nam, allocation, out);
        Ok(NAM_OK)
    })
}

/// Opens the shared allocation `name` of this client's tenant (searching the servers in
/// order), as another process created it with `NAM_ALLOC_SHARED`.
///
/// Blocking: returns when a server granted it (`NAM_OK`, `*out` is a new allocation object
/// this client must free too), or with `NAM_ERR_NAME_NOT_FOUND`, `NAM_ERR_NOT_SHARED`, ...;
/// on error `*out` is NULL.
///
/// # Safety
/// `nam` is NULL or a live client; `name` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn nam_open(nam: *mut nam_t, name: *const c_char, out: *mut *mut nam_alloc_t) -> nam_status_t {
    guard("nam_open", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let nam = deref(nam, "nam")?;
        let allocation = nam.client.open(required_str(name, "name")?)?;
        hand_out(nam, allocation, out);
        Ok(NAM_OK)
    })
}

/// Releases this client's reference to the allocation; the server returns the memory when
/// no client holds it any more. Afterwards every data call on `alloc` gives `NAM_ERR_FREED`
/// and a second `nam_free` gives `NAM_ERR_FREED`; the object itself stays valid until
/// `nam_alloc_release` or `nam_finalize`.
///
/// Blocking: returns when the server has answered, at most the client's timeout. Wait for
/// (or flush) outstanding operations on the allocation first.
///
/// # Safety
/// `alloc` is NULL or an allocation object not yet released.
#[no_mangle]
pub unsafe extern "C" fn nam_free(alloc: *mut nam_alloc_t) -> nam_status_t {
    guard("nam_free", || {
        let alloc = deref(alloc, "alloc")?;
        alloc.nam().client.free(&alloc.allocation)?;
        Ok(NAM_OK)
    })
}

/// Releases the allocation object: frees the allocation first if it is still live (as
/// `nam_free`; an already freed one is fine), then destroys the object, which is invalid
/// afterwards even when the free failed. Returns the free's status (`NAM_OK` if it was
/// already freed). Blocking like `nam_free`.
///
/// # Safety
/// `alloc` is NULL or an allocation object not yet released, not used by another thread.
#[no_mangle]
pub unsafe extern "C" fn nam_alloc_release(alloc: *mut nam_alloc_t) -> nam_status_t {
    guard("nam_alloc_release", || {
        if alloc.is_null() {
            return Err(Failure::Null("alloc"));
        }
        let object = Box::from_raw(alloc);
        let nam = object.nam();
        nam.untrack_alloc(alloc);
        match nam.client.free(&object.allocation) {
            Ok(()) | Err(Error::Freed { .. }) => Ok(NAM_OK),
            Err(error) => Err(error.into()),
        }
    })
}

/// Size of the allocation in bytes, or 0 when `alloc` is NULL. Completes immediately.
///
/// # Safety
/// `alloc` is NULL or an allocation object not yet released.
#[no_mangle]
pub unsafe extern "C" fn nam_alloc_size(alloc: *const nam_alloc_t) -> u64 {
    alloc.as_ref().map_or(0, |alloc| alloc.allocation.size())
}
