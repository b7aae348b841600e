//! `nam_reduce_t`: allreduce at the memory server, for MPI programs (one group per
//! communicator: every rank creates it with the same name, rank count and chunk size).

use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, required_str, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{DataType, ReduceGroup, ReduceOp, REDUCE_CHUNK_DEFAULT};
use std::ffi::{c_char, c_void};

/// The operation of `nam_allreduce`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nam_op_t {
    /// Elementwise sum.
    NAM_OP_SUM = 1,
    /// Elementwise minimum.
    NAM_OP_MIN = 2,
    /// Elementwise maximum.
    NAM_OP_MAX = 3,
}

/// The element type of `nam_allreduce`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nam_dtype_t {
    /// `int32_t`.
    NAM_INT32 = 1,
    /// `int64_t`.
    NAM_INT64 = 2,
    /// `float`.
    NAM_FLOAT = 3,
    /// `double`.
    NAM_DOUBLE = 4,
}

/// Type of a `nam_op_t` argument (an `int` in Rust, checked; see cbindgen.toml).
pub type NamOpArg = i32;
/// Type of a `nam_dtype_t` argument, as `NamOpArg`.
pub type NamDtypeArg = i32;

/// One rank's membership in an allreduce group at a memory server (opaque). Destroy it
/// with `nam_reduce_destroy` before `nam_finalize`.
pub struct nam_reduce_t {
    nam: *const nam_t,
    group: ReduceGroup,
}

impl nam_reduce_t {
    /// The group and its client.
    ///
    /// # Safety
    /// The client outlives the reduce object (documented at `nam_reduce_destroy`).
    pub(crate) unsafe fn parts(&mut self) -> (&mut ReduceGroup, &nam_client::Client) {
        (&mut self.group, &(*self.nam).client)
    }
}

/// Joins allreduce group `name` of `ranks` ranks as `rank` on the first configured server,
/// with `chunk_bytes` of server memory per rank and round (0: 1 MiB; longer vectors go in
/// several rounds). Blocking, at most the client's timeout.
///
/// # Safety
/// `nam` is NULL or a live client; `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_reduce_create(
    nam: *mut nam_t,
    name: *const c_char,
    ranks: u32,
    rank: u32,
    chunk_bytes: u64,
    out: *mut *mut nam_reduce_t,
) -> nam_status_t {
    guard("nam_reduce_create", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let nam = deref(nam, "nam")?;
        let name = required_str(name, "name")?;
        let chunk = if chunk_bytes == 0 { REDUCE_CHUNK_DEFAULT } else { chunk_bytes };
        let group = ReduceGroup::attach(&nam.client, name, ranks, rank, chunk, 0)?;
        *out = Box::into_raw(Box::new(nam_reduce_t { nam, group }));
        Ok(NAM_OK)
    })
}

/// Reduces `count` elements of `send` over every rank into `recv` (may not overlap `send`).
/// Blocking: returns when the result is in `recv`, or with `NAM_ERR_REDUCE_MISMATCH` (the
/// ranks disagree on count, type or operation; every rank gets it and `recv` is untouched),
/// `NAM_ERR_REDUCE_ABORTED` (a rank died or left) or a timeout.
///
/// # Safety
/// `reduce` is NULL or live and not used by another thread; `send` and `recv` are valid
/// for `count` elements.
#[no_mangle]
pub unsafe extern "C" fn nam_allreduce(
    reduce: *mut nam_reduce_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: NamDtypeArg,
    op: NamOpArg,
) -> nam_status_t {
    guard("nam_allreduce", || {
        let reduce = deref_mut(reduce, "reduce")?;
        let dtype = u8::try_from(dtype)
            .ok()
            .and_then(DataType::from_code)
            .ok_or_else(|| Failure::Invalid(format!("dtype {dtype} is not a nam_dtype_t")))?;
        let op = u8::try_from(op)
            .ok()
            .and_then(ReduceOp::from_code)
            .ok_or_else(|| Failure::Invalid(format!("op {op} is not a nam_op_t")))?;
        let len = count.checked_mul(dtype.size()).ok_or_else(|| Failure::Invalid("count too large".into()))?;
        let send = crate::ffi::source(send, len)?;
        let recv = crate::ffi::sink(recv, len)?;
        // SAFETY: a reduce object is destroyed no later than its client (documented).
        let nam = unsafe { &*reduce.nam };
        reduce.group.allreduce(&nam.client, op, dtype, send, recv)?;
        Ok(NAM_OK)
    })
}

/// Leaves the group and frees the object.
///
/// # Safety
/// `reduce` is NULL or live; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_reduce_destroy(reduce: *mut nam_reduce_t) -> nam_status_t {
    guard("nam_reduce_destroy", || {
        deref(reduce, "reduce")?;
        let reduce = Box::from_raw(reduce);
        let nam = &*reduce.nam;
        reduce.group.detach(&nam.client)?;
        Ok(NAM_OK)
    })
}
