//! Atomics on 32- and 64-bit words, signed and unsigned, in OpenSHMEM's set: fetching and
//! non-fetching add, inc, and, or, xor; set, swap, compare-and-swap; fetch. One generic
//! method per operation, typed by the word ([`AtomicWord`]: `u32`, `i32`, `u64`, `i64`);
//! each is a bounds and alignment check and one [`crate::path::Path::atomic`] call.
//!
//! Completion: every call returns when the operation is done at the server's memory
//! (OpenSHMEM's blocking atomics). The non-fetching forms differ only in not returning the
//! old word; signed and unsigned share the bits (two's complement wraps).

use crate::allocation::Allocation;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::path::Atomic;
use nam_proto::AtomicKind;

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
    impl Sealed for u64 {}
    impl Sealed for i64 {}
}

/// A word type atomics and waits act on: `u32`, `i32`, `u64` or `i64`.
pub trait AtomicWord: Copy + PartialEq + std::fmt::Debug + sealed::Sealed {
    /// Its width in bytes, also its alignment in an allocation.
    const WIDTH_BYTES: u64;
    /// Whether ordering comparisons of waits treat it as signed.
    const SIGNED: bool;
    /// Its bits, zero-extended.
    fn to_bits(self) -> u64;
    /// The word from (the low bits of) `bits`.
    fn from_bits(bits: u64) -> Self;
    /// One, for increments.
    const ONE: Self;
}

macro_rules! atomic_word {
    ($t:ty, $unsigned:ty, $signed:expr) => {
        impl AtomicWord for $t {
            const WIDTH_BYTES: u64 = std::mem::size_of::<$t>() as u64;
            const SIGNED: bool = $signed;
            const ONE: $t = 1;
            #[inline]
            fn to_bits(self) -> u64 {
                self as $unsigned as u64
            }
            #[inline]
            fn from_bits(bits: u64) -> $t {
                bits as $unsigned as $t
            }
        }
    };
}
atomic_word!(u32, u32, false);
atomic_word!(i32, u32, true);
atomic_word!(u64, u64, false);
atomic_word!(i64, u64, true);

impl Client {
    /// Checks that a `T` at `offset` lies inside `allocation`, aligned to its width.
    #[inline]
    pub(crate) fn word_of<T: AtomicWord>(&self, allocation: &Allocation, offset: u64) -> Result<()> {
        if !offset.is_multiple_of(T::WIDTH_BYTES) {
            return Err(Error::Misaligned { offset });
        }
        allocation.target(offset, T::WIDTH_BYTES as usize).map(drop)
    }

    /// `op` with `value` (and `compare`) on the `T` at `offset`; the old word.
    #[inline]
    fn amo<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        op: AtomicKind,
        value: T,
        compare: T,
    ) -> Result<T> {
        self.word_of::<T>(allocation, offset)?;
        let atomic = Atomic { op: op.with_width(T::WIDTH_BYTES), value: value.to_bits(), compare: compare.to_bits() };
        let old = self.paths.word(allocation).atomic(&self.session, allocation, offset, atomic)?;
        Ok(T::from_bits(old))
    }

    /// Atomically adds `value` to the word; returns the old word (`shmem_atomic_fetch_add`).
    pub fn atomic_fetch_add<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchAdd, value, value)
    }

    /// Atomically adds `value` to the word (`shmem_atomic_add`).
    pub fn atomic_add<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.amo(allocation, offset, AtomicKind::FetchAdd, value, value).map(drop)
    }

    /// Atomically adds one; returns the old word (`shmem_atomic_fetch_inc`).
    pub fn atomic_fetch_inc<T: AtomicWord>(&self, allocation: &Allocation, offset: u64) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchAdd, T::ONE, T::ONE)
    }

    /// Atomically adds one (`shmem_atomic_inc`).
    pub fn atomic_inc<T: AtomicWord>(&self, allocation: &Allocation, offset: u64) -> Result<()> {
        self.atomic_fetch_inc::<T>(allocation, offset).map(drop)
    }

    /// Atomically reads the word (`shmem_atomic_fetch`).
    pub fn atomic_fetch<T: AtomicWord>(&self, allocation: &Allocation, offset: u64) -> Result<T> {
        let zero = T::from_bits(0);
        self.amo(allocation, offset, AtomicKind::FetchOr, zero, zero)
    }

    /// Atomically stores `value` (`shmem_atomic_set`).
    pub fn atomic_set<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.amo(allocation, offset, AtomicKind::Swap, value, value).map(drop)
    }

    /// Atomically stores `value`; returns the old word (`shmem_atomic_swap`).
    pub fn atomic_swap<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::Swap, value, value)
    }

    /// Stores `value` if the word equals `compare`; returns the old word either way
    /// (`shmem_atomic_compare_swap`).
    pub fn atomic_compare_swap<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        compare: T,
        value: T,
    ) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::CompareSwap, value, compare)
    }

    /// Atomically ANDs `value` into the word; returns the old word (`shmem_atomic_fetch_and`).
    pub fn atomic_fetch_and<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchAnd, value, value)
    }

    /// Atomically ANDs `value` into the word (`shmem_atomic_and`).
    pub fn atomic_and<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.atomic_fetch_and(allocation, offset, value).map(drop)
    }

    /// Atomically ORs `value` into the word; returns the old word (`shmem_atomic_fetch_or`).
    pub fn atomic_fetch_or<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchOr, value, value)
    }

    /// Atomically ORs `value` into the word (`shmem_atomic_or`).
    pub fn atomic_or<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.atomic_fetch_or(allocation, offset, value).map(drop)
    }

    /// Atomically XORs `value` into the word; returns the old word (`shmem_atomic_fetch_xor`).
    pub fn atomic_fetch_xor<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchXor, value, value)
    }

    /// Atomically XORs `value` into the word (`shmem_atomic_xor`).
    pub fn atomic_xor<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.atomic_fetch_xor(allocation, offset, value).map(drop)
    }
}
