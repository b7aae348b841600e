//! OpenSHMEM's remaining one-sided calls: single-element put/get (`shmem_p`, `shmem_g`),
//! strided put/get (`shmem_iput`, `shmem_iget`), the non-blocking fetching atomics
//! (`shmem_atomic_fetch_*_nbi`), and a group's barrier and broadcast.

use crate::alloc::nam_alloc_t;
use crate::amo::{nam_amo_op_t, nam_amo_type_t, NamAmoOpArg, NamAmoTypeArg};
use crate::collective::nam_reduce_t;
use crate::ffi::{deref, deref_mut, guard, sink, source, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{AtomicWord, Client};
use std::ffi::c_void;

/// Checks a single element's size: the widths of C's integer and floating types.
fn element_size(size: usize) -> Result<usize, Failure> {
    match size {
        1 | 2 | 4 | 8 | 16 => Ok(size),
        _ => Err(Failure::Invalid(format!("element size {size} is not 1, 2, 4, 8 or 16 bytes"))),
    }
}

/// Bytes of a local strided buffer: up to the end of its last element.
fn strided_len(count: usize, stride: u64, elem_size: usize) -> Result<usize, Failure> {
    if count == 0 {
        return Ok(0);
    }
    let len = ((count - 1) as u64)
        .checked_mul(stride)
        .and_then(|s| s.checked_add(1))
        .and_then(|s| s.checked_mul(elem_size as u64))
        .and_then(|s| usize::try_from(s).ok());
    len.ok_or_else(|| Failure::Invalid("strided buffer larger than the address space".into()))
}

/// Writes one element of `size` bytes (1, 2, 4, 8 or 16) from `*value` at byte `offset` of the
/// allocation (OpenSHMEM's `shmem_p`; no alignment needed). Completion as `nam_put`: returns
/// when `*value` may be reused (local completion); the next `nam_flush` completes it at the
/// server (`shmem_quiet`). Errors: `NAM_ERR_INVALID_ARGUMENT` (size), `NAM_ERR_OUT_OF_BOUNDS`,
/// `NAM_ERR_FREED`; nothing is written then.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `value` is NULL or readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_p(
    alloc: *mut nam_alloc_t,
    offset: u64,
    value: *const c_void,
    size: usize,
) -> nam_status_t {
    guard("nam_p", || {
        let alloc = deref(alloc, "alloc")?;
        let size = element_size(size)?;
        alloc.nam().client.put(&alloc.allocation, offset, source(value, size)?)?;
        Ok(NAM_OK)
    })
}

/// Reads one element of `size` bytes (1, 2, 4, 8 or 16) at byte `offset` of the allocation
/// into `*value_out` (OpenSHMEM's `shmem_g`). Blocking: returns with the element, at most the
/// client's timeout. Errors as `nam_p`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `value_out` is NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_g(
    alloc: *mut nam_alloc_t,
    offset: u64,
    value_out: *mut c_void,
    size: usize,
) -> nam_status_t {
    guard("nam_g", || {
        let alloc = deref(alloc, "alloc")?;
        let size = element_size(size)?;
        alloc.nam().client.get(&alloc.allocation, offset, sink(value_out, size)?)?;
        Ok(NAM_OK)
    })
}

/// Strided put (OpenSHMEM's `shmem_iput` with elements of `elem_size` bytes): for `i` in
/// `0..count`, element `i * src_stride` of `src` goes to element `i * dst_stride` of the
/// allocation counted from byte `offset`. Strides count elements and are at least 1. Every
/// element's range is checked before anything is sent. Completion as `nam_put`: `src` may be
/// reused on return; the next `nam_flush` completes the puts at the server (`shmem_quiet`).
/// Errors: `NAM_ERR_INVALID_ARGUMENT` (a zero stride or element size),
/// `NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_FREED`; nothing is written then.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `src` is NULL (only when `count` is 0) or
/// readable up to the end of its last strided element.
#[no_mangle]
pub unsafe extern "C" fn nam_iput(
    alloc: *mut nam_alloc_t,
    offset: u64,
    dst_stride: u64,
    src: *const c_void,
    src_stride: u64,
    elem_size: usize,
    count: usize,
) -> nam_status_t {
    guard("nam_iput", || {
        let alloc = deref(alloc, "alloc")?;
        let src = source(src, strided_len(count, src_stride, elem_size)?)?;
        alloc.nam().client.iput_raw(&alloc.allocation, offset, dst_stride, src, src_stride, elem_size, count)?;
        Ok(NAM_OK)
    })
}

/// Strided get (OpenSHMEM's `shmem_iget`): for `i` in `0..count`, element `i * src_stride`
/// of the allocation counted from byte `offset` goes to element `i * dst_stride` of `dst`;
/// the elements of `dst` between them are left as they are. Blocking: returns with the data,
/// at most the client's timeout per get. Checked and failing as `nam_iput`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `dst` is NULL (only when `count` is 0) or
/// writable up to the end of its last strided element.
#[no_mangle]
pub unsafe extern "C" fn nam_iget(
    alloc: *mut nam_alloc_t,
    offset: u64,
    src_stride: u64,
    dst: *mut c_void,
    dst_stride: u64,
    elem_size: usize,
    count: usize,
) -> nam_status_t {
    guard("nam_iget", || {
        let alloc = deref(alloc, "alloc")?;
        let dst = sink(dst, strided_len(count, dst_stride, elem_size)?)?;
        alloc.nam().client.iget_raw(&alloc.allocation, offset, src_stride, dst, dst_stride, elem_size, count)?;
        Ok(NAM_OK)
    })
}

/// Posts fetching atomic `op` on a `T` word; its old word goes to `fetch`.
unsafe fn post<T: AtomicWord>(
    client: &Client,
    a: &nam_client::Allocation,
    offset: u64,
    op: NamAmoOpArg,
    (value, compare): (u64, u64),
    fetch: *mut c_void,
) -> Result<(), Failure> {
    use nam_amo_op_t::*;
    if fetch.is_null() {
        return Err(Failure::Null("fetch"));
    }
    if !(fetch as usize).is_multiple_of(T::WIDTH_BYTES as usize) {
        return Err(Failure::Invalid(format!("fetch is not aligned to its {}-byte word", T::WIDTH_BYTES)));
    }
    let fetch = &mut *(fetch as *mut T);
    let (v, c) = (T::from_bits(value), T::from_bits(compare));
    match op {
        x if x == NAM_AMO_FETCH_ADD as i32 => client.atomic_fetch_add_nbi(fetch, a, offset, v)?,
        x if x == NAM_AMO_FETCH_INC as i32 => client.atomic_fetch_inc_nbi(fetch, a, offset)?,
        x if x == NAM_AMO_FETCH as i32 => client.atomic_fetch_nbi(fetch, a, offset)?,
        x if x == NAM_AMO_SWAP as i32 => client.atomic_swap_nbi(fetch, a, offset, v)?,
        x if x == NAM_AMO_CSWAP as i32 => client.atomic_compare_swap_nbi(fetch, a, offset, c, v)?,
        x if x == NAM_AMO_FETCH_AND as i32 => client.atomic_fetch_and_nbi(fetch, a, offset, v)?,
        x if x == NAM_AMO_FETCH_OR as i32 => client.atomic_fetch_or_nbi(fetch, a, offset, v)?,
        x if x == NAM_AMO_FETCH_XOR as i32 => client.atomic_fetch_xor_nbi(fetch, a, offset, v)?,
        x => {
            return Err(Failure::Invalid(format!(
                "atomic op {x} is not a fetching nam_amo_op_t (the others complete at once through nam_atomic)"
            )))
        }
    };
    Ok(())
}

/// A non-blocking fetching atomic (OpenSHMEM's `shmem_atomic_fetch_add_nbi`,
/// `_fetch_inc_nbi`, `_fetch_nbi`, `_swap_nbi`, `_compare_swap_nbi`, `_fetch_and_nbi`,
/// `_fetch_or_nbi`, `_fetch_xor_nbi`): `op` is one of the fetching `nam_amo_op_t`s
/// (`NAM_AMO_FETCH_ADD`, `NAM_AMO_FETCH_INC`, `NAM_AMO_FETCH`, `NAM_AMO_SWAP`,
/// `NAM_AMO_CSWAP`, `NAM_AMO_FETCH_AND`, `NAM_AMO_FETCH_OR`, `NAM_AMO_FETCH_XOR`) on the word
/// of type `type` at `offset`, with operands as `nam_atomic`. Returns at once; the word's
/// previous value is in `*fetch` (a word of `type`, aligned to its width) **once the next
/// `nam_flush` of the client returns** (`shmem_quiet`), which also reports a refusal by the
/// server. Over the network and the message path the atomic is in flight until then; on the
/// direct path it is done on return. Checked (op, type, bounds, alignment) before anything is
/// sent: `NAM_ERR_INVALID_ARGUMENT`, `NAM_ERR_MISALIGNED`, `NAM_ERR_OUT_OF_BOUNDS`,
/// `NAM_ERR_FREED` mean nothing is in flight.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `fetch` is NULL or writable for the word,
/// and neither read nor written by the program until the next `nam_flush` returns.
#[no_mangle]
pub unsafe extern "C" fn nam_atomic_nbi(
    alloc: *mut nam_alloc_t,
    offset: u64,
    r#type: NamAmoTypeArg,
    op: NamAmoOpArg,
    value: u64,
    compare: u64,
    fetch: *mut c_void,
) -> nam_status_t {
    guard("nam_atomic_nbi", || {
        let alloc = deref(alloc, "alloc")?;
        let (client, a, operands) = (&alloc.nam().client, &alloc.allocation, (value, compare));
        use nam_amo_type_t::*;
        match r#type {
            x if x == NAM_AMO_UINT32 as i32 => post::<u32>(client, a, offset, op, operands, fetch)?,
            x if x == NAM_AMO_INT32 as i32 => post::<i32>(client, a, offset, op, operands, fetch)?,
            x if x == NAM_AMO_UINT64 as i32 => post::<u64>(client, a, offset, op, operands, fetch)?,
            x if x == NAM_AMO_INT64 as i32 => post::<i64>(client, a, offset, op, operands, fetch)?,
            x => return Err(Failure::Invalid(format!("word type {x} is not a nam_amo_type_t"))),
        }
        Ok(NAM_OK)
    })
}

/// Waits until every rank of the group has called `nam_barrier` (OpenSHMEM's
/// `shmem_barrier_all` over the group's ranks; `MPI_Barrier`): one empty round of the group
/// at the server. Unlike `shmem_barrier_all` it completes nothing by itself: call `nam_flush`
/// first so that this rank's puts are at the server before the others pass. Errors:
/// `NAM_ERR_WAIT_TIMEOUT` at the client's deadline (a rank did not come),
/// `NAM_ERR_REDUCE_ABORTED` (a rank left or died).
///
/// # Safety
/// `reduce` is NULL or live and not used by another thread.
#[no_mangle]
pub unsafe extern "C" fn nam_barrier(reduce: *mut nam_reduce_t) -> nam_status_t {
    guard("nam_barrier", || {
        let reduce = deref_mut(reduce, "reduce")?;
        let (group, client) = reduce.parts();
        group.barrier(client)?;
        Ok(NAM_OK)
    })
}

/// Broadcasts `len` bytes of `buf` from rank `root` to `buf` of every rank of the group
/// (OpenSHMEM's `shmem_broadcastmem` over the group's ranks, root included; `MPI_Bcast`):
/// every rank passes the same `len` and `root`. Blocking: returns when `buf` holds the root's
/// bytes. At the server, as `nam_allreduce` of the same length (the other ranks contribute
/// zeros). Errors: `NAM_ERR_INVALID_ARGUMENT` (root outside the group, before anything is
/// sent), `NAM_ERR_REDUCE_MISMATCH` on every rank when lengths or roots disagree (no `buf`
/// is written), otherwise as `nam_barrier`.
///
/// # Safety
/// `reduce` is NULL or live and not used by another thread; `buf` is NULL (only when `len`
/// is 0) or readable and writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_broadcast(
    reduce: *mut nam_reduce_t,
    root: u32,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_broadcast", || {
        let reduce = deref_mut(reduce, "reduce")?;
        let buffer = sink(buf, len)?;
        let (group, client) = reduce.parts();
        group.broadcast(client, root, buffer)?;
        Ok(NAM_OK)
    })
}
