//! OpenSHMEM's remaining one-sided calls over the client's paths: single-element put and
//! get (`shmem_p`, `shmem_g`), strided put and get (`shmem_iput`, `shmem_iget`) and the
//! non-blocking fetching atomics (`shmem_atomic_fetch_*_nbi`). Each is a bounds check and
//! calls on the [`crate::path::Path`] the client already has; nothing here branches on the path.
//!
//! Completion, in OpenSHMEM's terms: [`Client::put_value`] and [`Client::iput`] return when
//! their source may be reused (local completion, as `shmem_p`/`shmem_iput`), and the next
//! [`Client::quiet`] completes them remotely; [`Client::get_value`] and [`Client::iget`]
//! return with the data. A `_nbi` fetching atomic returns at once; its old word is in the
//! caller's location once the next [`Client::quiet`] (or flush of the server) returns.

use crate::allocation::Allocation;
use crate::amo::AtomicWord;
use crate::client::Client;
use crate::constants::STRIDED_SPAN_FACTOR;
use crate::error::{Error, Result};
use crate::path::Atomic;
use crate::pending::FetchSink;
use nam_proto::AtomicKind;

mod sealed {
    pub trait Sealed {}
    macro_rules! sealed {
        ($($t:ty),*) => { $(impl Sealed for $t {})* };
    }
    sealed!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, f32, f64);
}

/// An element type of the single-element and strided calls: the fixed-width integers and
/// floats, whose bytes (little-endian, no padding) are what is put and got.
pub trait Element: Copy + Default + sealed::Sealed {}
macro_rules! element {
    ($($t:ty),*) => { $(impl Element for $t {})* };
}
element!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, f32, f64);

/// The bytes of `elements` (sound: every [`Element`] is plain old data without padding).
fn bytes_of<T: Element>(elements: &[T]) -> &[u8] {
    // SAFETY: see above; the length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(elements.as_ptr() as *const u8, std::mem::size_of_val(elements)) }
}

/// The bytes of `elements`, writable (every bit pattern is a valid [`Element`]).
fn bytes_of_mut<T: Element>(elements: &mut [T]) -> &mut [u8] {
    // SAFETY: as `bytes_of`; any bytes written make valid integers and floats.
    unsafe { std::slice::from_raw_parts_mut(elements.as_mut_ptr() as *mut u8, std::mem::size_of_val(elements)) }
}

/// A strided access: `count` elements of `elem_bytes` each, the `i`-th at element `i *
/// stride` of the allocation (from `offset`) and at element `i * local_stride` of the
/// caller's buffer. Strides count elements, as in OpenSHMEM, and are at least 1.
#[derive(Debug, Clone, Copy)]
struct Strided {
    offset: u64,
    stride: u64,
    local_stride: u64,
    elem_bytes: usize,
    count: usize,
}

impl Strided {
    /// Checks the access against an allocation and a local buffer of `local_len` bytes
    /// before anything moves; the bytes the remote side spans (first to last element).
    fn check(&self, allocation: &Allocation, local_len: usize) -> Result<u64> {
        if self.stride == 0 || self.local_stride == 0 {
            return Err(Error::InvalidArgument("strides count elements and must be at least 1"));
        }
        if self.count == 0 {
            return Ok(0);
        }
        let last = self.count as u64 - 1;
        let elem = self.elem_bytes as u64;
        let overflow = Error::InvalidArgument("strided range overflows");
        let span = last
            .checked_mul(self.stride)
            .and_then(|s| s.checked_mul(elem))
            .and_then(|s| s.checked_add(elem))
            .ok_or(overflow)?;
        let local_end = last
            .checked_mul(self.local_stride)
            .and_then(|s| s.checked_mul(elem))
            .and_then(|s| s.checked_add(elem))
            .ok_or(Error::InvalidArgument("strided range overflows"))?;
        if local_end > local_len as u64 {
            return Err(Error::InvalidArgument("local buffer shorter than its strided elements"));
        }
        let span_len = usize::try_from(span).map_err(|_| Error::InvalidArgument("strided range overflows"))?;
        allocation.target(self.offset, span_len)?;
        Ok(span)
    }

    /// Remote byte offset and local byte index of element `i`.
    fn at(&self, i: usize) -> (u64, usize) {
        let elem = self.elem_bytes;
        (self.offset + i as u64 * self.stride * elem as u64, i * self.local_stride as usize * elem)
    }
}

impl Client {
    /// Puts one element at byte `offset` (OpenSHMEM's `shmem_p`): returns when it is sent
    /// (local completion); the next [`Client::quiet`] completes it at the server.
    pub fn put_value<T: Element>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.put(allocation, offset, bytes_of(std::slice::from_ref(&value)))
    }

    /// Gets one element from byte `offset` (OpenSHMEM's `shmem_g`).
    pub fn get_value<T: Element>(&self, allocation: &Allocation, offset: u64) -> Result<T> {
        let mut value = T::default();
        self.get(allocation, offset, bytes_of_mut(std::slice::from_mut(&mut value)))?;
        Ok(value)
    }

    /// Strided put (OpenSHMEM's `shmem_iput`): element `i * src_stride` of `src` goes to
    /// element `i * dst_stride` of the allocation counted from byte `offset`, for `count`
    /// elements. Strides count elements and are at least 1. Every element's range is checked
    /// before anything is sent ([`Error::OutOfBounds`], [`Error::InvalidArgument`] for a
    /// local buffer too short). Completion as [`Client::put`]: local on return, remote at
    /// the next [`Client::quiet`].
    pub fn iput<T: Element>(
        &self,
        allocation: &Allocation,
        offset: u64,
        dst_stride: u64,
        src: &[T],
        src_stride: u64,
        count: usize,
    ) -> Result<()> {
        let elem_bytes = std::mem::size_of::<T>();
        let access = Strided { offset, stride: dst_stride, local_stride: src_stride, elem_bytes, count };
        self.iput_bytes(allocation, access, bytes_of(src))
    }

    /// Strided get (OpenSHMEM's `shmem_iget`): element `i * src_stride` of the allocation
    /// counted from byte `offset` goes to element `i * dst_stride` of `dst`, for `count`
    /// elements; the other elements of `dst` are left as they are. Checked as [`Client::iput`];
    /// returns with the data.
    pub fn iget<T: Element>(
        &self,
        allocation: &Allocation,
        offset: u64,
        src_stride: u64,
        dst: &mut [T],
        dst_stride: u64,
        count: usize,
    ) -> Result<()> {
        let elem_bytes = std::mem::size_of::<T>();
        let access = Strided { offset, stride: src_stride, local_stride: dst_stride, elem_bytes, count };
        self.iget_bytes(allocation, access, bytes_of_mut(dst))
    }

    /// [`Client::iput`] of `elem_bytes`-byte elements given as bytes (for the C API).
    #[allow(clippy::too_many_arguments)]
    pub fn iput_raw(
        &self,
        allocation: &Allocation,
        offset: u64,
        dst_stride: u64,
        src: &[u8],
        src_stride: u64,
        elem_bytes: usize,
        count: usize,
    ) -> Result<()> {
        if elem_bytes == 0 {
            return Err(Error::InvalidArgument("element size must be at least 1 byte"));
        }
        let access = Strided { offset, stride: dst_stride, local_stride: src_stride, elem_bytes, count };
        self.iput_bytes(allocation, access, src)
    }

    /// [`Client::iget`] of `elem_bytes`-byte elements given as bytes (for the C API).
    #[allow(clippy::too_many_arguments)]
    pub fn iget_raw(
        &self,
        allocation: &Allocation,
        offset: u64,
        src_stride: u64,
        dst: &mut [u8],
        dst_stride: u64,
        elem_bytes: usize,
        count: usize,
    ) -> Result<()> {
        if elem_bytes == 0 {
            return Err(Error::InvalidArgument("element size must be at least 1 byte"));
        }
        let access = Strided { offset, stride: src_stride, local_stride: dst_stride, elem_bytes, count };
        self.iget_bytes(allocation, access, dst)
    }

    fn iput_bytes(&self, allocation: &Allocation, access: Strided, src: &[u8]) -> Result<()> {
        let span = access.check(allocation, src.len())?;
        if access.count == 0 {
            return Ok(());
        }
        let elem = access.elem_bytes;
        if access.stride == 1 && access.local_stride == 1 {
            return self.put(allocation, access.offset, &src[..span as usize]);
        }
        if access.stride == 1 {
            // Contiguous at the server: gather locally, one put.
            let mut packed = Vec::with_capacity(span as usize);
            for i in 0..access.count {
                let (_, local) = access.at(i);
                packed.extend_from_slice(&src[local..local + elem]);
            }
            return self.put(allocation, access.offset, &packed);
        }
        // Scattered at the server: one put per element (a read-modify-write of the span
        // would overwrite what others store between the elements).
        for i in 0..access.count {
            let (remote, local) = access.at(i);
            self.put(allocation, remote, &src[local..local + elem])?;
        }
        Ok(())
    }

    fn iget_bytes(&self, allocation: &Allocation, access: Strided, dst: &mut [u8]) -> Result<()> {
        let span = access.check(allocation, dst.len())?;
        if access.count == 0 {
            return Ok(());
        }
        let elem = access.elem_bytes;
        let wanted = (access.count * elem) as u64;
        // Reading the gaps too costs nothing but bytes: one get of the span when it is at
        // most STRIDED_SPAN_FACTOR times the elements, one get per element otherwise.
        if span <= wanted.saturating_mul(STRIDED_SPAN_FACTOR) {
            let mut whole = vec![0u8; span as usize];
            self.get(allocation, access.offset, &mut whole)?;
            for i in 0..access.count {
                let (remote, local) = access.at(i);
                let at = (remote - access.offset) as usize;
                dst[local..local + elem].copy_from_slice(&whole[at..at + elem]);
            }
            return Ok(());
        }
        for i in 0..access.count {
            let (remote, local) = access.at(i);
            self.get(allocation, remote, &mut dst[local..local + elem])?;
        }
        Ok(())
    }

    /// A fetching atomic without a handle on the `T` at `offset`; its old word goes to `fetch`.
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    unsafe fn amo_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        op: AtomicKind,
        (value, compare): (T, T),
    ) -> Result<()> {
        self.word_of::<T>(allocation, offset)?;
        let atomic = Atomic { op: op.with_width(T::WIDTH_BYTES), value: value.to_bits(), compare: compare.to_bits() };
        let sink = FetchSink::new(fetch as *mut T as *mut u8, T::WIDTH_BYTES);
        self.paths.word(allocation).atomic_nbi(&self.session, allocation, offset, atomic, sink)
    }

    /// Non-blocking fetch-and-add (`shmem_atomic_fetch_add_nbi`): returns at once; the word's
    /// old value is in `*fetch` once the next [`Client::quiet`] (or flush of the server)
    /// returns. Checked (bounds, alignment) before anything is sent; a refusal by the server
    /// (the allocation freed meanwhile) is reported by that quiet. The add itself is ordered
    /// as an atomic: a [`Client::fence`] orders it before later operations.
    ///
    /// # Safety
    /// `fetch` must stay valid, and must not be read or written, until that quiet returns
    /// (the transport writes it then or before).
    pub unsafe fn atomic_fetch_add_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        value: T,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::FetchAdd, (value, value))
    }

    /// Non-blocking fetch-and-increment (`shmem_atomic_fetch_inc_nbi`), as
    /// [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_fetch_inc_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::FetchAdd, (T::ONE, T::ONE))
    }

    /// Non-blocking atomic read (`shmem_atomic_fetch_nbi`), as [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_fetch_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
    ) -> Result<()> {
        let zero = T::from_bits(0);
        self.amo_nbi(fetch, allocation, offset, AtomicKind::FetchOr, (zero, zero))
    }

    /// Non-blocking swap (`shmem_atomic_swap_nbi`), as [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_swap_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        value: T,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::Swap, (value, value))
    }

    /// Non-blocking compare-and-swap (`shmem_atomic_compare_swap_nbi`): stores `value` if the
    /// word equals `compare`; the old word goes to `*fetch` either way, as
    /// [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_compare_swap_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        compare: T,
        value: T,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::CompareSwap, (value, compare))
    }

    /// Non-blocking fetch-and-AND (`shmem_atomic_fetch_and_nbi`), as
    /// [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_fetch_and_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        value: T,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::FetchAnd, (value, value))
    }

    /// Non-blocking fetch-and-OR (`shmem_atomic_fetch_or_nbi`), as
    /// [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_fetch_or_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        value: T,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::FetchOr, (value, value))
    }

    /// Non-blocking fetch-and-XOR (`shmem_atomic_fetch_xor_nbi`), as
    /// [`Client::atomic_fetch_add_nbi`].
    ///
    /// # Safety
    /// As [`Client::atomic_fetch_add_nbi`].
    pub unsafe fn atomic_fetch_xor_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        value: T,
    ) -> Result<()> {
        self.amo_nbi(fetch, allocation, offset, AtomicKind::FetchXor, (value, value))
    }
}
