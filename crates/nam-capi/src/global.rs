//! `nam_gaddr_t`: global addresses, passed between processes (through MPI, say) and used
//! directly: put, get, fetch-add.

use crate::alloc::nam_alloc_t;
use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, sink, source, write_optional};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::GlobalAddress;
use std::ffi::c_void;

/// A 128-bit global address naming (server, protection domain, allocation, offset): plain
/// data, so send it as two `uint64_t` (e.g. `MPI_Bcast(&a, 2, MPI_UINT64_T, ...)`). Any
/// client of the same tenant can use it; another tenant's gets `NAM_ERR_DOMAIN`.
/// `docs/protocol.md` gives the layout of `lo` and `hi`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct nam_gaddr_t {
    /// Bits 0..64: offset (40 bits) and the low 24 bits of the handle.
    pub lo: u64,
    /// Bits 64..128: the rest of the handle, the domain (16 bits), the server tag (32 bits).
    pub hi: u64,
}

impl From<nam_gaddr_t> for GlobalAddress {
    fn from(a: nam_gaddr_t) -> GlobalAddress {
        GlobalAddress(a.lo as u128 | (a.hi as u128) << 64)
    }
}

impl From<GlobalAddress> for nam_gaddr_t {
    fn from(a: GlobalAddress) -> nam_gaddr_t {
        nam_gaddr_t { lo: a.0 as u64, hi: (a.0 >> 64) as u64 }
    }
}

/// The global address of byte `offset` of `alloc`. Blocking the first time a server is
/// used this way (one request for its tag and the caller's domain), local afterwards.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_gaddr_of(alloc: *const nam_alloc_t, offset: u64, out: *mut nam_gaddr_t) -> nam_status_t {
    guard("nam_gaddr_of", || {
        let out = deref_mut(out, "out")?;
        let alloc = deref(alloc, "alloc")?;
        *out = alloc.nam().client.global_address(&alloc.allocation, offset)?.into();
        Ok(NAM_OK)
    })
}

/// Puts `len` bytes at `addr` with remote completion (visible at the server on return).
/// The first use of an allocation's address asks its server, which checks the domain.
///
/// # Safety
/// `nam` is NULL or a live client; `buf` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_gaddr_put(
    nam: *mut nam_t,
    addr: nam_gaddr_t,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_gaddr_put", || {
        let nam = deref(nam, "nam")?;
        nam.client.put_global_sync(addr.into(), source(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Gets `len` bytes from `addr` into `buf`.
///
/// # Safety
/// `nam` is NULL or a live client; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_gaddr_get(
    nam: *mut nam_t,
    addr: nam_gaddr_t,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_gaddr_get", || {
        let nam = deref(nam, "nam")?;
        nam.client.get_global(addr.into(), sink(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Atomically adds `value` to the 64-bit word at `addr` (8-byte aligned); `*old` (if not
/// NULL) receives the previous value.
///
/// # Safety
/// `nam` is NULL or a live client; `old` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_gaddr_fetch_add(
    nam: *mut nam_t,
    addr: nam_gaddr_t,
    value: u64,
    old: *mut u64,
) -> nam_status_t {
    guard("nam_gaddr_fetch_add", || {
        let nam = deref(nam, "nam")?;
        let previous = nam.client.fetch_add_global(addr.into(), value)?;
        write_optional(old, previous);
        Ok(NAM_OK)
    })
}
