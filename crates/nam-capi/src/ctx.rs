//! `nam_ctx_t`: contexts (OpenSHMEM's `shmem_ctx_t`), independent streams of operations
//! with their own ordering (`nam_ctx_fence`) and completion (`nam_ctx_quiet`), so that
//! threads that each use their own context share no lock on the UCX RMA path.

use crate::alloc::nam_alloc_t;
use crate::amo::{run_typed, NamAmoOpArg, NamAmoTypeArg};
use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, sink, source, write_optional, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::Context;
use std::ffi::c_void;

/// A context of a client (opaque). Destroy it with `nam_ctx_destroy` before `nam_finalize`
/// of its client. One thread at a time may use it (OpenSHMEM's `SHMEM_CTX_PRIVATE`).
pub struct nam_ctx_t {
    /// Borrows the client behind `nam`, which outlives it (documented).
    context: Context<'static>,
    nam: *const nam_t,
}

impl nam_ctx_t {
    /// The context, checked to belong to the client of `alloc`.
    pub(crate) fn for_alloc(&self, alloc: &nam_alloc_t) -> Result<&Context<'static>, Failure> {
        if !std::ptr::eq(alloc.nam(), self.nam) {
            return Err(Failure::Invalid("the allocation belongs to another client than the context".into()));
        }
        Ok(&self.context)
    }
}

/// Creates a context of `nam` (`shmem_ctx_create`): on servers reached through UCX RMA it
/// has its own UCX worker and data endpoints, so its operations are ordered and completed
/// apart from the client's and other contexts'; on the direct path (same-host shared memory)
/// operations take no lock at all; on the message path (TCP) they share the client's
/// connection but form a stream of their own: `nam_ctx_quiet` waits for this context's
/// operations only, never for the client's or another context's (OpenSHMEM's
/// `shmem_ctx_quiet`).
///
/// # Safety
/// `nam` is NULL or a live client that outlives the context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_create(nam: *mut nam_t, out: *mut *mut nam_ctx_t) -> nam_status_t {
    guard("nam_ctx_create", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let nam_ref: &'static nam_t = &*(deref(nam, "nam")? as *const nam_t);
        let context = nam_ref.client.context()?;
        *out = Box::into_raw(Box::new(nam_ctx_t { context, nam }));
        Ok(NAM_OK)
    })
}

/// Completes the context's operations (as `nam_ctx_quiet`) and frees it
/// (`shmem_ctx_destroy`); a completion failure is returned, the context is freed either way.
///
/// # Safety
/// `ctx` is NULL or live; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_destroy(ctx: *mut nam_ctx_t) -> nam_status_t {
    guard("nam_ctx_destroy", || {
        deref(ctx, "ctx")?;
        let ctx = Box::from_raw(ctx);
        let result = ctx.context.quiet();
        drop(ctx);
        result?;
        Ok(NAM_OK)
    })
}

/// `nam_put_sync` without its flush, on the context: writes `len` bytes from `buf` at
/// `offset` of the allocation and returns when `buf` may be reused (local completion,
/// `shmem_ctx_putmem`); `nam_ctx_quiet` completes it at the server. Errors as `nam_put_sync`,
/// and `NAM_ERR_INVALID_ARGUMENT` when the allocation is another client's.
///
/// # Safety
/// `ctx` and `alloc` are NULL or live; `buf` is NULL or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_put(
    ctx: *mut nam_ctx_t,
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_ctx_put", || {
        let (ctx, alloc) = (deref(ctx, "ctx")?, deref(alloc, "alloc")?);
        ctx.for_alloc(alloc)?.put(&alloc.allocation, offset, source(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// Reads `len` bytes at `offset` of the allocation into `buf` on the context
/// (`shmem_ctx_getmem`): returns with the data. Errors as `nam_ctx_put`.
///
/// # Safety
/// `ctx` and `alloc` are NULL or live; `buf` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_get(
    ctx: *mut nam_ctx_t,
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_ctx_get", || {
        let (ctx, alloc) = (deref(ctx, "ctx")?, deref(alloc, "alloc")?);
        ctx.for_alloc(alloc)?.get(&alloc.allocation, offset, sink(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// `nam_put_nbi` on the context (`shmem_ctx_putmem_nbi`): returns at once; **`buf` must stay
/// valid and unmodified until the next `nam_ctx_quiet` of this context returns**, which
/// completes the put at the server.
///
/// # Safety
/// `ctx` and `alloc` are NULL or live; `buf` is NULL or readable for `len` bytes until that quiet.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_put_nbi(
    ctx: *mut nam_ctx_t,
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_ctx_put_nbi", || {
        let (ctx, alloc) = (deref(ctx, "ctx")?, deref(alloc, "alloc")?);
        ctx.for_alloc(alloc)?.put_nbi(&alloc.allocation, offset, source(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// `nam_get_nbi` on the context (`shmem_ctx_getmem_nbi`): `buf` holds the data once the
/// next `nam_ctx_quiet` of this context returns; do not read it before.
///
/// # Safety
/// `ctx` and `alloc` are NULL or live; `buf` is NULL or writable for `len` bytes until that quiet.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_get_nbi(
    ctx: *mut nam_ctx_t,
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_ctx_get_nbi", || {
        let (ctx, alloc) = (deref(ctx, "ctx")?, deref(alloc, "alloc")?);
        ctx.for_alloc(alloc)?.get_nbi(&alloc.allocation, offset, sink(buf, len)?)?;
        Ok(NAM_OK)
    })
}

/// `nam_atomic` on the context (`shmem_ctx_atomic_*`): every `nam_amo_op_t` on every
/// `nam_amo_type_t`, blocking (done at the server on return), the previous value in
/// `*old_out` (if not NULL). Errors as `nam_atomic`.
///
/// # Safety
/// `ctx` and `alloc` are NULL or live; `old_out` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nam_ctx_atomic(
    ctx: *mut nam_ctx_t,
    alloc: *mut nam_alloc_t,
    offset: u64,
    r#type: NamAmoTypeArg,
    op: NamAmoOpArg,
    value: u64,
    compare: u64,
    old_out: *mut u64,
) -> nam_status_t {
    guard("nam_ctx_atomic", || {
        let (ctx, alloc) = (deref(ctx, "ctx")?, deref(alloc, "alloc")?);
        let context = ctx.for_alloc(alloc)?;
        write_optional(old_out, run_typed(context, &alloc.allocation, offset, (r#type, op), (value, compare))?);
        Ok(NAM_OK)
    })
}

/// Orders the context's operations (`shmem_ctx_fence`): those issued before complete at
/// their targets before those issued after; other contexts are not ordered by it.
///
/// # Safety
/// `ctx` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_fence(ctx: *mut nam_ctx_t) -> nam_status_t {
    guard("nam_ctx_fence", || {
        deref(ctx, "ctx")?.context.fence()?;
        Ok(NAM_OK)
    })
}

/// Remote completion of every operation issued on the context (`shmem_ctx_quiet`): its puts
/// are visible at the server, its `_nbi` buffers reusable or filled, its `nam_ctx_atomic_nb`
/// requests complete (they then report at once). It waits for this context's operations
/// only: not for the client's nor another context's, even on the message path (TCP), where
/// they share a connection. Blocking, at most the client's timeout per server.
///
/// # Safety
/// `ctx` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nam_ctx_quiet(ctx: *mut nam_ctx_t) -> nam_status_t {
    guard("nam_ctx_quiet", || {
        deref(ctx, "ctx")?.context.quiet()?;
        Ok(NAM_OK)
    })
}
