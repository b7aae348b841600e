//! Typed far arrays: `FarArray<T>` is a range of far memory holding `len` values of a
//! plain type, read and written element by element or in slices through a [`FarMemory`].

use crate::error::{Error, Result};
use crate::far::{DestMode, FarMemory};
use std::marker::PhantomData;

/// Types that are plain bytes: any bit pattern is a valid value, no padding, no pointers.
///
/// # Safety
/// Implement only for types without padding or invalid bit patterns.
pub unsafe trait Plain: Copy + Default + 'static {}

macro_rules! plain {
    ($($t:ty),*) => { $(unsafe impl Plain for $t {})* };
}
plain!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64, usize, isize);

fn bytes_of<T: Plain>(values: &[T]) -> &[u8] {
    // SAFETY: Plain types have no padding, so every byte is initialized.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

fn bytes_of_mut<T: Plain>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: Plain types accept any bit pattern.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), std::mem::size_of_val(values)) }
}

/// `len` values of `T` in far memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FarArray<T: Plain> {
    addr: u64,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> FarArray<T> {
    /// The array at far address `addr` (no check until used).
    pub fn at(addr: u64, len: usize) -> FarArray<T> {
        FarArray { addr, len, _t: PhantomData }
    }

    /// Its far address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, index: usize, count: usize) -> Result<u64> {
        let size = std::mem::size_of::<T>() as u64;
        if index.checked_add(count).is_none_or(|end| end > self.len) {
            return Err(Error::OutOfRange {
                addr: self.addr + index as u64 * size,
                len: count as u64 * size,
                size: self.addr + self.len as u64 * size,
            });
        }
        Ok(self.addr + index as u64 * size)
    }

    /// Element `index`.
    #[inline]
    pub fn get(&self, far: &mut FarMemory, index: usize) -> Result<T> {
        let mut value = [T::default()];
        far.read(self.check(index, 1)?, bytes_of_mut(&mut value))?;
        Ok(value[0])
    }

    /// Sets element `index`.
    #[inline]
    pub fn set(&self, far: &mut FarMemory, index: usize, value: T) -> Result<()> {
        far.write(self.check(index, 1)?, bytes_of(&[value]))
    }

    /// Reads `out.len()` elements from `index`.
    pub fn read(&self, far: &mut FarMemory, index: usize, out: &mut [T]) -> Result<()> {
        far.read(self.check(index, out.len())?, bytes_of_mut(out))
    }

    /// Writes `values` from `index`.
    pub fn write(&self, far: &mut FarMemory, index: usize, values: &[T]) -> Result<()> {
        far.write(self.check(index, values.len())?, bytes_of(values))
    }

    /// Calls `f(first index, elements)` for consecutive chunks of `range`, each a slice of
    /// one line or of a run of adjacent lines, viewed in place (see
    /// [`FarMemory::for_each_piece`]).
    pub fn for_each_chunk(
        &self,
        far: &mut FarMemory,
        range: std::ops::Range<usize>,
        mut f: impl FnMut(usize, &[T]),
    ) -> Result<()> {
        let addr = self.viewable(far, range.start, range.len())?;
        let size = std::mem::size_of::<T>();
        far.for_each_piece(addr, range.len() * size, |at, bytes| f(range.start + at / size, view(bytes)))
    }

    /// Calls `f(first index, src elements, self's elements)` for consecutive chunks of
    /// `range` of `src` and of this array, both in place (one line or a run of adjacent
    /// lines each; see [`FarMemory::zip_pieces_mut`]); this array's
    /// lines are marked dirty (`mode`: whether `f` reads them first or overwrites them).
    pub fn zip_chunks_mut(
        &self,
        far: &mut FarMemory,
        src: &FarArray<T>,
        range: std::ops::Range<usize>,
        mode: DestMode,
        mut f: impl FnMut(usize, &[T], &mut [T]),
    ) -> Result<()> {
        let s = src.viewable(far, range.start, range.len())?;
        let d = self.viewable(far, range.start, range.len())?;
        let size = std::mem::size_of::<T>();
        let mut at = range.start;
        far.zip_pieces_mut((s, d), range.len() * size, mode, |x, y| {
            let ys = view_mut(y);
            f(at, view(x), ys);
            at += ys.len();
        })
    }

    /// The far address of `index`, checking that views in place can hold whole elements.
    fn viewable(&self, far: &FarMemory, index: usize, count: usize) -> Result<u64> {
        let size = std::mem::size_of::<T>();
        let line = far.config().line_bytes;
        if size == 0 || !line.is_multiple_of(size as u64) || !self.addr.is_multiple_of(size as u64) {
            return Err(Error::NotViewable { addr: self.addr, elem_bytes: size, line_bytes: line });
        }
        self.check(index, count)
    }
}

fn view<T: Plain>(bytes: &[u8]) -> &[T] {
    assert!(bytes.as_ptr().cast::<T>().is_aligned() && bytes.len().is_multiple_of(std::mem::size_of::<T>()));
    // SAFETY: aligned (asserted; lines are 64-byte aligned and pieces start at multiples of
    // the element size), whole elements, and Plain accepts any bits.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len() / std::mem::size_of::<T>()) }
}

fn view_mut<T: Plain>(bytes: &mut [u8]) -> &mut [T] {
    assert!(bytes.as_ptr().cast::<T>().is_aligned() && bytes.len().is_multiple_of(std::mem::size_of::<T>()));
    // SAFETY: as in `view`, and exclusive through `bytes`.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len() / std::mem::size_of::<T>()) }
}

impl FarMemory {
    /// Reserves a far array of `len` zeroed values (never-written far memory reads as 0).
    pub fn alloc_array<T: Plain>(&mut self, len: usize) -> Result<FarArray<T>> {
        let bytes = (len as u64).checked_mul(std::mem::size_of::<T>() as u64).ok_or(Error::OutOfRange {
            addr: 0,
            len: u64::MAX,
            size: self.far_bytes(),
        })?;
        Ok(FarArray::at(self.reserve(bytes)?, len))
    }
}
