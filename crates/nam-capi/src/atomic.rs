//! 64-bit atomics and signals: fetch-add, compare-swap, swap, fetch, put-signal, wait-until.

use crate::alloc::nam_alloc_t;
use crate::ffi::{deref, guard, source, write_optional, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{Compare, Error, SignalOp};
use std::ffi::c_void;
use std::time::Duration;

/// How `nam_put_signal` updates the signal word.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nam_signal_op_t {
    /// The word becomes the value.
    NAM_SIGNAL_SET = 0,
    /// The value is added to the word.
    NAM_SIGNAL_ADD = 1,
}

/// The comparison `nam_wait_until` waits for, of the word against the value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nam_cmp_t {
    /// word == value
    NAM_CMP_EQ = 0,
    /// word != value
    NAM_CMP_NE = 1,
    /// word >= value
    NAM_CMP_GE = 2,
    /// word > value
    NAM_CMP_GT = 3,
    /// word <= value
    NAM_CMP_LE = 4,
    /// word < value
    NAM_CMP_LT = 5,
}

/// Type of a `nam_signal_op_t` argument: an `int` in Rust, so that any value C passes is
/// defined behaviour (an unknown one is `NAM_ERR_INVALID_ARGUMENT`); shown as
/// `nam_signal_op_t` in nam.h (see cbindgen.toml).
pub type NamSignalOpArg = i32;
/// Type of a `nam_cmp_t` argument, as `NamSignalOpArg`.
pub type NamCmpArg = i32;

fn signal_op(op: NamSignalOpArg) -> Result<SignalOp, Failure> {
    match op {
        x if x == nam_signal_op_t::NAM_SIGNAL_SET as i32 => Ok(SignalOp::Set),
        x if x == nam_signal_op_t::NAM_SIGNAL_ADD as i32 => Ok(SignalOp::Add),
        x => Err(Failure::Invalid(format!("signal op {x} is neither NAM_SIGNAL_SET nor NAM_SIGNAL_ADD"))),
    }
}

pub(crate) fn compare(cmp: NamCmpArg) -> Result<Compare, Failure> {
    use nam_cmp_t::*;
    let all = [
        (NAM_CMP_EQ, Compare::Eq),
        (NAM_CMP_NE, Compare::Ne),
        (NAM_CMP_GE, Compare::Ge),
        (NAM_CMP_GT, Compare::Gt),
        (NAM_CMP_LE, Compare::Le),
        (NAM_CMP_LT, Compare::Lt),
    ];
    all.iter()
        .find(|(c, _)| *c as i32 == cmp)
        .map(|(_, compare)| *compare)
        .ok_or_else(|| Failure::Invalid(format!("comparison {cmp} is not a nam_cmp_t")))
}

/// Atomically adds `value` to the 64-bit word at `offset` (8-byte aligned) of the
/// allocation and stores the word's previous value in `*old_out` (if not NULL)
/// (`shmem_atomic_fetch_add` on a `uint64_t`; `nam_atomic` has every type and operation). Blocking:
/// returns when the add is done at the server, at most the client's timeout. Errors:
/// `NAM_ERR_MISALIGNED`, `NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_FREED`, `NAM_ERR_TRANSPORT`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `old_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_atomic_fetch_add(
    alloc: *mut nam_alloc_t,
    offset: u64,
    value: u64,
    old_out: *mut u64,
) -> nam_status_t {
    guard("nam_atomic_fetch_add", || {
        let alloc = deref(alloc, "alloc")?;
        write_optional(old_out, alloc.nam().client.fetch_add(&alloc.allocation, offset, value)?);
        Ok(NAM_OK)
    })
}

/// Compare-and-swap on the 64-bit word at `offset`: stores `value` if the word equals
/// `compare`, and stores the word's previous value in `*old_out` (if not NULL) either way
/// (the swap happened exactly when `*old_out == compare`). Blocking and errors as
/// `nam_atomic_fetch_add`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `old_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_atomic_cswap(
    alloc: *mut nam_alloc_t,
    offset: u64,
    compare: u64,
    value: u64,
    old_out: *mut u64,
) -> nam_status_t {
    guard("nam_atomic_cswap", || {
        let alloc = deref(alloc, "alloc")?;
        write_optional(old_out, alloc.nam().client.compare_swap(&alloc.allocation, offset, compare, value)?);
        Ok(NAM_OK)
    })
}

/// Atomically replaces the 64-bit word at `offset` with `value` and stores its previous
/// value in `*old_out` (if not NULL). Blocking and errors as `nam_atomic_fetch_add`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `old_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_atomic_swap(
    alloc: *mut nam_alloc_t,
    offset: u64,
    value: u64,
    old_out: *mut u64,
) -> nam_status_t {
    guard("nam_atomic_swap", || {
        let alloc = deref(alloc, "alloc")?;
        write_optional(old_out, alloc.nam().client.swap(&alloc.allocation, offset, value)?);
        Ok(NAM_OK)
    })
}

/// Atomically reads the 64-bit word at `offset` into `*value_out` (if not NULL). Blocking
/// and errors as `nam_atomic_fetch_add`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `value_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_atomic_fetch(alloc: *mut nam_alloc_t, offset: u64, value_out: *mut u64) -> nam_status_t {
    guard("nam_atomic_fetch", || {
        let alloc = deref(alloc, "alloc")?;
        write_optional(value_out, alloc.nam().client.fetch(&alloc.allocation, offset)?);
        Ok(NAM_OK)
    })
}

/// Puts `len` bytes from `buf` at `offset` of `alloc`, then updates the 64-bit signal word
/// at `signal_offset` of `signal_alloc` (`NAM_SIGNAL_SET`: the word becomes `value`;
/// `NAM_SIGNAL_ADD`: `value` is added), ordered so that a reader that sees the signal (for
/// example with `nam_wait_until`) also sees the data. Both allocations must belong to the
/// same client and server. Returns when `buf` may be reused (OpenSHMEM's
/// `shmem_putmem_signal`): on the direct path (same-host shared memory) and over RMA both are
/// then complete at the server; over the message path (TCP) both are sent, executed by the
/// server in order, and complete at the next `nam_flush`. A waiter asleep on the signal
/// word is woken. At most twice the client's timeout. Bounds, alignment and liveness are
/// checked before anything is sent: on `NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_MISALIGNED` or
/// `NAM_ERR_FREED` neither the data nor the signal was written.
///
/// # Safety
/// `alloc` and `signal_alloc` are NULL or live allocation objects; `buf` is NULL or
/// readable for `len` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn nam_put_signal(
    alloc: *mut nam_alloc_t,
    offset: u64,
    buf: *const c_void,
    len: usize,
    signal_alloc: *mut nam_alloc_t,
    signal_offset: u64,
    value: u64,
    op: NamSignalOpArg,
) -> nam_status_t {
    guard("nam_put_signal", || {
        let alloc = deref(alloc, "alloc")?;
        let signal = deref(signal_alloc, "signal_alloc")?;
        if !std::ptr::eq(alloc.nam, signal.nam) {
            return Err(Failure::Invalid("alloc and signal_alloc belong to different clients".into()));
        }
        let (data, op) = (source(buf, len)?, signal_op(op)?);
        let (target, word) = (&alloc.allocation, &signal.allocation);
        alloc.nam().client.put_signal(
            target,
            offset,
            data,
            nam_client::Signal { word, offset: signal_offset, value, op },
        )?;
        Ok(NAM_OK)
    })
}

/// Waits until the 64-bit word at `offset` of the allocation satisfies `cmp` against
/// `value` (for example `NAM_CMP_GE`: word >= value), or until `timeout_ms` milliseconds
/// pass (`shmem_wait_until` with a deadline). It reads the word for the client's wait spin
/// (`NAM_WAIT_SPIN_US`, default 20 us), then sleeps until the signalling side wakes it: a
/// futex that direct-path signallers (and the server, for message-path atomics) wake on a
/// same-host shared-memory server, a notification the server sends when the word satisfies
/// the comparison elsewhere; no wake-up is lost to a signal racing the sleep. Blocking: returns `NAM_OK` when the condition held, with
/// the word's value in `*value_out` (if not NULL); `NAM_ERR_WAIT_TIMEOUT` at the deadline,
/// with the last value read in `*value_out`; or the error of a read (`NAM_ERR_MISALIGNED`,
/// `NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_FREED`, `NAM_ERR_TRANSPORT`). Other threads may use the
/// client meanwhile.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `value_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_wait_until(
    alloc: *mut nam_alloc_t,
    offset: u64,
    cmp: NamCmpArg,
    value: u64,
    timeout_ms: u64,
    value_out: *mut u64,
) -> nam_status_t {
    guard("nam_wait_until", || {
        let alloc = deref(alloc, "alloc")?;
        let (client, cmp) = (&alloc.nam().client, compare(cmp)?);
        match client.wait_until(&alloc.allocation, offset, cmp, value, Duration::from_millis(timeout_ms)) {
            Ok(word) => {
                write_optional(value_out, word);
                Ok(NAM_OK)
            }
            Err(error) => {
                if let Error::WaitTimeout { last, .. } = error {
                    write_optional(value_out, last);
                }
                Err(error.into())
            }
        }
    })
}
