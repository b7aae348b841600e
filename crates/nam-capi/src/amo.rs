//! OpenSHMEM's atomics on 32- and 64-bit, signed and unsigned words through one call,
//! `nam_atomic`, and `nam_test_word` (the word against a value, without waiting).

use crate::alloc::nam_alloc_t;
use crate::atomic::NamCmpArg;
use crate::ffi::{deref, guard, write_optional, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{Allocation, AtomicWord, Client};

/// The operation of `nam_atomic`, with the OpenSHMEM call it corresponds to. Every one is
/// blocking: it returns when done at the server's memory (as OpenSHMEM's atomics return
/// with the operation performed); the `FETCH` forms store the word's previous value in
/// `*old_out`, the others leave it untouched.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nam_amo_op_t {
    /// word += value; old word out (`shmem_atomic_fetch_add`).
    NAM_AMO_FETCH_ADD = 0,
    /// word += value (`shmem_atomic_add`).
    NAM_AMO_ADD = 1,
    /// word += 1; old word out (`shmem_atomic_fetch_inc`).
    NAM_AMO_FETCH_INC = 2,
    /// word += 1 (`shmem_atomic_inc`).
    NAM_AMO_INC = 3,
    /// Reads the word (`shmem_atomic_fetch`).
    NAM_AMO_FETCH = 4,
    /// word = value (`shmem_atomic_set`).
    NAM_AMO_SET = 5,
    /// word = value; old word out (`shmem_atomic_swap`).
    NAM_AMO_SWAP = 6,
    /// word = value if word == compare; old word out (`shmem_atomic_compare_swap`).
    NAM_AMO_CSWAP = 7,
    /// word &= value; old word out (`shmem_atomic_fetch_and`).
    NAM_AMO_FETCH_AND = 8,
    /// word &= value (`shmem_atomic_and`).
    NAM_AMO_AND = 9,
    /// word |= value; old word out (`shmem_atomic_fetch_or`).
    NAM_AMO_FETCH_OR = 10,
    /// word |= value (`shmem_atomic_or`).
    NAM_AMO_OR = 11,
    /// word ^= value; old word out (`shmem_atomic_fetch_xor`).
    NAM_AMO_FETCH_XOR = 12,
    /// word ^= value (`shmem_atomic_xor`).
    NAM_AMO_XOR = 13,
}

/// The word type of `nam_atomic` and `nam_test_word`: its width (and alignment) and, for
/// comparisons, its signedness.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum nam_amo_type_t {
    /// `uint32_t`
    NAM_AMO_UINT32 = 0,
    /// `int32_t`
    NAM_AMO_INT32 = 1,
    /// `uint64_t`
    NAM_AMO_UINT64 = 2,
    /// `int64_t`
    NAM_AMO_INT64 = 3,
}

/// Type of a `nam_amo_op_t` argument (an `int` in Rust, checked; see `NamCmpArg`).
pub type NamAmoOpArg = i32;
/// Type of a `nam_amo_type_t` argument, as `NamAmoOpArg`.
pub type NamAmoTypeArg = i32;

/// The atomics of a stream of operations: a client's or a context's (`nam_ctx_atomic`).
pub(crate) trait Atomics {
    fn fetch_add<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T>;
    fn fetch_inc<T: AtomicWord>(&self, a: &Allocation, offset: u64) -> nam_client::Result<T>;
    fn fetch<T: AtomicWord>(&self, a: &Allocation, offset: u64) -> nam_client::Result<T>;
    fn swap<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T>;
    fn compare_swap<T: AtomicWord>(&self, a: &Allocation, offset: u64, compare: T, value: T) -> nam_client::Result<T>;
    fn fetch_and<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T>;
    fn fetch_or<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T>;
    fn fetch_xor<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T>;
}

macro_rules! atomics {
    ($t:ty) => {
        impl Atomics for $t {
            fn fetch_add<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T> {
                self.atomic_fetch_add(a, offset, value)
            }
            fn fetch_inc<T: AtomicWord>(&self, a: &Allocation, offset: u64) -> nam_client::Result<T> {
                self.atomic_fetch_inc(a, offset)
            }
            fn fetch<T: AtomicWord>(&self, a: &Allocation, offset: u64) -> nam_client::Result<T> {
                self.atomic_fetch(a, offset)
            }
            fn swap<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T> {
                self.atomic_swap(a, offset, value)
            }
            fn compare_swap<T: AtomicWord>(
                &self,
                a: &Allocation,
                offset: u64,
                compare: T,
                value: T,
            ) -> nam_client::Result<T> {
                self.atomic_compare_swap(a, offset, compare, value)
            }
            fn fetch_and<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T> {
                self.atomic_fetch_and(a, offset, value)
            }
            fn fetch_or<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T> {
                self.atomic_fetch_or(a, offset, value)
            }
            fn fetch_xor<T: AtomicWord>(&self, a: &Allocation, offset: u64, value: T) -> nam_client::Result<T> {
                self.atomic_fetch_xor(a, offset, value)
            }
        }
    };
}
atomics!(Client);
atomics!(nam_client::Context<'_>);

/// Runs `op` on a `T` word through `client` (a client or a context); the old word as 64 bits
/// (sign-extended for signed types).
fn run<T: AtomicWord + Into<i128>>(
    client: &impl Atomics,
    a: &nam_client::Allocation,
    offset: u64,
    op: NamAmoOpArg,
    (value, compare): (u64, u64),
) -> Result<u64, Failure> {
    use nam_amo_op_t::*;
    let (v, c) = (T::from_bits(value), T::from_bits(compare));
    let old = match op {
        x if x == NAM_AMO_FETCH_ADD as i32 || x == NAM_AMO_ADD as i32 => client.fetch_add(a, offset, v)?,
        x if x == NAM_AMO_FETCH_INC as i32 || x == NAM_AMO_INC as i32 => client.fetch_inc::<T>(a, offset)?,
        x if x == NAM_AMO_FETCH as i32 => client.fetch::<T>(a, offset)?,
        x if x == NAM_AMO_SET as i32 || x == NAM_AMO_SWAP as i32 => client.swap(a, offset, v)?,
        x if x == NAM_AMO_CSWAP as i32 => client.compare_swap(a, offset, c, v)?,
        x if x == NAM_AMO_FETCH_AND as i32 || x == NAM_AMO_AND as i32 => client.fetch_and(a, offset, v)?,
        x if x == NAM_AMO_FETCH_OR as i32 || x == NAM_AMO_OR as i32 => client.fetch_or(a, offset, v)?,
        x if x == NAM_AMO_FETCH_XOR as i32 || x == NAM_AMO_XOR as i32 => client.fetch_xor(a, offset, v)?,
        x => return Err(Failure::Invalid(format!("atomic op {x} is not a nam_amo_op_t"))),
    };
    Ok(old.into() as i64 as u64)
}

/// Runs `op` on the word of type `ty` through `client` (a client or a context).
pub(crate) fn run_typed(
    client: &impl Atomics,
    a: &Allocation,
    offset: u64,
    (ty, op): (NamAmoTypeArg, NamAmoOpArg),
    operands: (u64, u64),
) -> Result<u64, Failure> {
    use nam_amo_type_t::*;
    match ty {
        x if x == NAM_AMO_UINT32 as i32 => run::<u32>(client, a, offset, op, operands),
        x if x == NAM_AMO_INT32 as i32 => run::<i32>(client, a, offset, op, operands),
        x if x == NAM_AMO_UINT64 as i32 => run::<u64>(client, a, offset, op, operands),
        x if x == NAM_AMO_INT64 as i32 => run::<i64>(client, a, offset, op, operands),
        x => Err(Failure::Invalid(format!("word type {x} is not a nam_amo_type_t"))),
    }
}

/// One atomic operation `op` on the word of type `type` at `offset` of the allocation
/// (aligned to the word's width). `value` (and `compare`, for `NAM_AMO_CSWAP`) are taken at
/// the word's width: pass a 32-bit word's value cast to `uint64_t` (sign-extension does not
/// matter). The previous value goes to `*old_out` (if not NULL) for every operation, as 64
/// bits: zero-extended for unsigned types, sign-extended for signed ones, so that casting it
/// to the word's type gives the word. Blocking: returns when done at the server, at most the
/// client's timeout. Errors: `NAM_ERR_INVALID_ARGUMENT` (unknown op or type),
/// `NAM_ERR_MISALIGNED`, `NAM_ERR_OUT_OF_BOUNDS`, `NAM_ERR_FREED`, `NAM_ERR_TRANSPORT`;
/// nothing is changed then.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `old_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_atomic(
    alloc: *mut nam_alloc_t,
    offset: u64,
    r#type: NamAmoTypeArg,
    op: NamAmoOpArg,
    value: u64,
    compare: u64,
    old_out: *mut u64,
) -> nam_status_t {
    guard("nam_atomic", || {
        let alloc = deref(alloc, "alloc")?;
        let (client, a, operands) = (&alloc.nam().client, &alloc.allocation, (value, compare));
        write_optional(old_out, run_typed(client, a, offset, (r#type, op), operands)?);
        Ok(NAM_OK)
    })
}

/// Whether the word of type `type` at `offset` satisfies `cmp` against `value` now
/// (`shmem_test`): `*result_out` (if not NULL) becomes 1 or 0. Never sleeps; one read of
/// the word (a load on the direct path, one round trip elsewhere). Ordering comparisons are
/// signed for the signed types. Errors as `nam_atomic`.
///
/// # Safety
/// `alloc` is NULL or a live allocation object; `result_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_test_word(
    alloc: *mut nam_alloc_t,
    offset: u64,
    r#type: NamAmoTypeArg,
    cmp: NamCmpArg,
    value: u64,
    result_out: *mut i32,
) -> nam_status_t {
    guard("nam_test_word", || {
        let alloc = deref(alloc, "alloc")?;
        let (client, a, cmp) = (&alloc.nam().client, &alloc.allocation, crate::atomic::compare(cmp)?);
        use nam_amo_type_t::*;
        let holds = match r#type {
            x if x == NAM_AMO_UINT32 as i32 => client.test_as::<u32>(a, offset, cmp, value as u32)?,
            x if x == NAM_AMO_INT32 as i32 => client.test_as::<i32>(a, offset, cmp, value as i32)?,
            x if x == NAM_AMO_UINT64 as i32 => client.test_as::<u64>(a, offset, cmp, value)?,
            x if x == NAM_AMO_INT64 as i32 => client.test_as::<i64>(a, offset, cmp, value as i64)?,
            x => return Err(Failure::Invalid(format!("word type {x} is not a nam_amo_type_t"))),
        };
        write_optional(result_out, i32::from(holds));
        Ok(NAM_OK)
    })
}

/// This process's address of byte `offset` of the allocation when its server's memory is
/// mapped here (a server on the same host reached through shared memory: loads and stores
/// through the pointer are the direct path), or NULL otherwise (a server reached over the
/// network or through messages, `alloc` NULL or freed, `offset` outside the allocation):
/// OpenSHMEM's `shmem_ptr`. The pointer stays valid until the allocation is freed or the
/// client finalized; stores through it are visible to the server and other clients when they
/// retire, like direct-path puts.
///
/// # Safety
/// `alloc` is NULL or a live allocation object.
#[no_mangle]
pub unsafe extern "C" fn nam_ptr(alloc: *mut nam_alloc_t, offset: u64) -> *mut std::ffi::c_void {
    let Some(alloc) = alloc.as_ref() else { return std::ptr::null_mut() };
    match alloc.nam().client.mapped(&alloc.allocation, offset, 1) {
        Ok(Some(ptr)) => ptr as *mut std::ffi::c_void,
        _ => std::ptr::null_mut(),
    }
}
