//! Non-blocking atomics completed one at a time through a `nam_request_t`: `nam_atomic_nb`
//! and `nam_ctx_atomic_nb` (OpenSHMEM's `shmem_atomic_*_nbi` and `shmem_ctx_atomic_*_nbi`,
//! whose completion `nam_test` / `nam_wait` report one by one, besides `nam_flush` /
//! `nam_ctx_quiet` for all of them).

use crate::alloc::nam_alloc_t;
use crate::amo::{nam_amo_op_t, nam_amo_type_t, NamAmoOpArg, NamAmoTypeArg};
use crate::ctx::nam_ctx_t;
use crate::ffi::{deref, deref_mut, guard, write_optional, Failure, Outcome};
use crate::rma::nam_request_t;
use crate::status::nam_status_t::{self, NAM_IN_PROGRESS, NAM_OK};
use nam_client::{AmoKind, AtomicOp, AtomicWord};

/// An atomic behind a request: polled and waited for as its word type demands.
pub(crate) trait PendingAmo {
    /// Progresses once; true (and the old word written out) once it completed.
    fn test(&mut self) -> nam_client::Result<bool>;
    /// Waits for it (at most the client's timeout) and writes the old word out.
    fn wait(self: Box<Self>) -> nam_client::Result<()>;
}

/// An atomic on a `T` word whose old word goes to `out` (if not NULL) as 64 bits,
/// sign-extended for signed types (as `nam_atomic`'s `*old_out`).
struct Typed<T: AtomicWord> {
    op: AtomicOp<'static, T>,
    out: *mut u64,
}

impl<T: AtomicWord + Into<i128>> PendingAmo for Typed<T> {
    fn test(&mut self) -> nam_client::Result<bool> {
        match self.op.value()? {
            Some(old) => {
                // SAFETY: the caller of `nam_atomic_nb` keeps `out` writable until completion.
                unsafe { write_optional(self.out, old.into() as i64 as u64) };
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn wait(self: Box<Self>) -> nam_client::Result<()> {
        let Typed { op, out } = *self;
        let old = op.wait()?;
        // SAFETY: as in `test`.
        unsafe { write_optional(out, old.into() as i64 as u64) };
        Ok(())
    }
}

/// The `AmoKind` of a `nam_amo_op_t` argument.
fn kind(op: NamAmoOpArg) -> Result<AmoKind, Failure> {
    use nam_amo_op_t::*;
    const KINDS: [(nam_amo_op_t, AmoKind); 14] = [
        (NAM_AMO_FETCH_ADD, AmoKind::FetchAdd),
        (NAM_AMO_ADD, AmoKind::Add),
        (NAM_AMO_FETCH_INC, AmoKind::FetchInc),
        (NAM_AMO_INC, AmoKind::Inc),
        (NAM_AMO_FETCH, AmoKind::Fetch),
        (NAM_AMO_SET, AmoKind::Set),
        (NAM_AMO_SWAP, AmoKind::Swap),
        (NAM_AMO_CSWAP, AmoKind::CompareSwap),
        (NAM_AMO_FETCH_AND, AmoKind::FetchAnd),
        (NAM_AMO_AND, AmoKind::And),
        (NAM_AMO_FETCH_OR, AmoKind::FetchOr),
        (NAM_AMO_OR, AmoKind::Or),
        (NAM_AMO_FETCH_XOR, AmoKind::FetchXor),
        (NAM_AMO_XOR, AmoKind::Xor),
    ];
    KINDS
        .iter()
        .find(|(code, _)| *code as i32 == op)
        .map(|(_, kind)| *kind)
        .ok_or_else(|| Failure::Invalid(format!("atomic op {op} is not a nam_amo_op_t")))
}

/// Where an atomic is posted: the client's stream or a context's.
#[derive(Clone, Copy)]
enum Stream {
    Client(&'static nam_client::Client),
    Context(&'static nam_client::Context<'static>),
}

/// Posts a `T` atomic and boxes it for a request.
fn post<T: AtomicWord + Into<i128> + 'static>(
    stream: Stream,
    (a, offset): (&nam_client::Allocation, u64),
    kind: AmoKind,
    (value, compare): (u64, u64),
    out: *mut u64,
) -> Result<Box<dyn PendingAmo>, Failure> {
    let (v, c) = (T::from_bits(value), T::from_bits(compare));
    let op = match stream {
        Stream::Client(client) => client.atomic_nb(a, offset, kind, v, c)?,
        Stream::Context(context) => context.atomic_nb(a, offset, kind, v, c)?,
    };
    Ok(Box::new(Typed { op, out }))
}

/// Posts the atomic and hands out its request, or completes it at once.
#[allow(clippy::too_many_arguments)]
unsafe fn start(
    stream: Stream,
    alloc: &nam_alloc_t,
    offset: u64,
    (ty, op): (NamAmoTypeArg, NamAmoOpArg),
    operands: (u64, u64),
    out: *mut u64,
    request: &mut *mut nam_request_t,
) -> Outcome {
    use nam_amo_type_t::*;
    let kind = kind(op)?;
    let a = (&alloc.allocation, offset);
    let mut pending = match ty {
        x if x == NAM_AMO_UINT32 as i32 => post::<u32>(stream, a, kind, operands, out)?,
        x if x == NAM_AMO_INT32 as i32 => post::<i32>(stream, a, kind, operands, out)?,
        x if x == NAM_AMO_UINT64 as i32 => post::<u64>(stream, a, kind, operands, out)?,
        x if x == NAM_AMO_INT64 as i32 => post::<i64>(stream, a, kind, operands, out)?,
        x => return Err(Failure::Invalid(format!("word type {x} is not a nam_amo_type_t"))),
    };
    if pending.test()? {
        return Ok(NAM_OK);
    }
    let nam = alloc.nam();
    let boxed = Box::into_raw(Box::new(nam_request_t::for_atomic(nam, pending)));
    nam.track_request(boxed);
    *request = boxed;
    Ok(NAM_IN_PROGRESS)
}

/// A non-blocking atomic with a request (OpenSHMEM's `shmem_atomic_*_nbi`, completable one
/// at a time): any `nam_amo_op_t` on any `nam_amo_type_t`, operands as `nam_atomic`.
///
/// - `NAM_OK` with `*request = NULL`: it completed before the call returned (the direct
///   path, same-host shared memory; 32-bit words over UCX RMA); `*old_out` (if not NULL)
///   holds the previous value, as `nam_atomic` writes it.
/// - `NAM_IN_PROGRESS` with `*request` set: in flight. **`old_out` must stay writable, and
///   must not be read, until `nam_test` returns `NAM_OK` for the request or `nam_wait`
///   returns**; then the atomic is done at the server's memory (remote completion, as a
///   blocking OpenSHMEM atomic on return) and `*old_out` holds the previous value. Release
///   the request with `nam_wait` exactly once. `nam_flush` also completes it (`shmem_quiet`);
///   its request then reports the outcome at once, including a refusal by the server,
///   which `nam_flush` does not report for it.
/// - an error with `*request = NULL` (`NAM_ERR_INVALID_ARGUMENT`, `NAM_ERR_MISALIGNED`,
///   `NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_FREED`, `NAM_ERR_TRANSPORT`): nothing is in flight.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `old_out` is NULL or writable until the
/// request completes; `request` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nam_atomic_nb(
    alloc: *mut nam_alloc_t,
    offset: u64,
    r#type: NamAmoTypeArg,
    op: NamAmoOpArg,
    value: u64,
    compare: u64,
    old_out: *mut u64,
    request: *mut *mut nam_request_t,
) -> nam_status_t {
    guard("nam_atomic_nb", || {
        let request = deref_mut(request, "request")?;
        *request = std::ptr::null_mut();
        let alloc = deref(alloc, "alloc")?;
        // SAFETY of the 'static borrow: the client outlives its requests (`nam_finalize`
        // waits for them first).
        let client: &'static nam_client::Client = &*(&alloc.nam().client as *const nam_client::Client);
        start(Stream::Client(client), alloc, offset, (r#type, op), (value, compare), old_out, request)
    })
}

/// `nam_atomic_nb` on the context (`shmem_ctx_atomic_*_nbi`, completable one at a time):
/// `nam_ctx_quiet` of this context completes it too (not `nam_flush`, nor another context's
/// quiet). **Release every request of a context with `nam_wait` before `nam_ctx_destroy`.**
/// Errors as `nam_atomic_nb`, and `NAM_ERR_INVALID_ARGUMENT` when the allocation is another
/// client's.
///
/// # Safety
/// `ctx` and `alloc` are NULL or live, and `ctx` outlives the request; `old_out` and
/// `request` as `nam_atomic_nb`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nam_ctx_atomic_nb(
    ctx: *mut nam_ctx_t,
    alloc: *mut nam_alloc_t,
    offset: u64,
    r#type: NamAmoTypeArg,
    op: NamAmoOpArg,
    value: u64,
    compare: u64,
    old_out: *mut u64,
    request: *mut *mut nam_request_t,
) -> nam_status_t {
    guard("nam_ctx_atomic_nb", || {
        let request = deref_mut(request, "request")?;
        *request = std::ptr::null_mut();
        let (ctx, alloc) = (deref(ctx, "ctx")?, deref(alloc, "alloc")?);
        // SAFETY of the 'static borrow: the caller keeps the context until the request is
        // released (documented above).
        let context: &'static nam_client::Context<'static> =
            &*(ctx.for_alloc(alloc)? as *const nam_client::Context<'static>);
        start(Stream::Context(context), alloc, offset, (r#type, op), (value, compare), old_out, request)
    })
}
