//! The heap of the library's own threads: the C allocations (UCX's, the pager's client's)
//! made on a thread that serves the region's page faults or is inside the library, when the
//! program's allocator is not glibc's.
//!
//! Such requests used to go to the program's allocator. For a program on jemalloc (Redis)
//! that allocator's heap is far memory itself (its extents are mapped through this library's
//! `mmap`), so a block it handed to the pager's handler thread could be a far page, evicted:
//! the handler's next UCX send grew a memory pool there, faulted on its own region, and
//! waited for ever for the only thread that serves the region's faults, itself (Redis under
//! `redis-benchmark` on one core hung on its first request every time). glibc's allocator is
//! local (its mappings never reach this library's `mmap`), so a glibc program keeps using
//! it; for any other allocator these requests come from here instead.
//!
//! A segregated-fit allocator over one reserved local mapping of [`INTERNAL_HEAP_BYTES`]
//! (address space: only pages written cost memory): each block is a power of two of bytes,
//! aligned to its size, cut from the front of the mapping or reused from its size's free
//! list. Its range tells its blocks from every other allocator's, so a block made here is
//! freed here whichever thread frees it. The requests are few (UCX pools its buffers), so
//! one lock serves them.

use crate::constants::{INTERNAL_CLASS_MAX, INTERNAL_CLASS_MIN, INTERNAL_HEAP_BYTES};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const CLASSES: usize = (INTERNAL_CLASS_MAX - INTERNAL_CLASS_MIN + 1) as usize;

/// Where the next never-used block starts, and each size's freed blocks (a list threaded
/// through their first word).
struct Heap {
    bump: usize,
    free: [usize; CLASSES],
}

/// The reserved mapping's start (0 until made).
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Each block's class, a byte per smallest block of the heap, indexed by the block's start
/// (a second reserved mapping: blocks keep their natural alignment, with no header).
static TABLE: AtomicUsize = AtomicUsize::new(0);
static HEAP: Mutex<Heap> = Mutex::new(Heap { bump: 0, free: [0; CLASSES] });

/// Whether `ptr` is a block of this heap.
#[inline]
pub fn contains(ptr: *const c_void) -> bool {
    let base = BASE.load(Ordering::Acquire);
    base != 0 && (ptr as usize).wrapping_sub(base) < INTERNAL_HEAP_BYTES
}

/// The size class (log2 of the block's bytes) for `size` bytes aligned to `align`.
fn class(size: usize, align: usize) -> Option<u32> {
    let bytes = size.max(align).max(1 << INTERNAL_CLASS_MIN).checked_next_power_of_two()?;
    let class = bytes.trailing_zeros();
    (class <= INTERNAL_CLASS_MAX).then_some(class)
}

/// Reserves the mapping on first use (by the kernel's `mmap`, never this library's, so it
/// is local); false if it cannot be had.
fn reserve(heap: &mut Heap) -> bool {
    if BASE.load(Ordering::Relaxed) != 0 {
        return true;
    }
    let (Some(heap_start), Some(table)) =
        (reserve_mapping(INTERNAL_HEAP_BYTES), reserve_mapping(INTERNAL_HEAP_BYTES >> INTERNAL_CLASS_MIN))
    else {
        return false;
    };
    heap.bump = heap_start;
    TABLE.store(table, Ordering::Release);
    BASE.store(heap_start, Ordering::Release);
    true
}

/// A private anonymous mapping of `len` bytes, reserved only (`MAP_NORESERVE`), made with
/// the system call itself so that it never reaches this library's `mmap`.
fn reserve_mapping(len: usize) -> Option<usize> {
    // SAFETY: a new mapping; nothing refers to it yet.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<c_void>(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p > 0).then_some(p as usize)
}

/// A block of at least `size` bytes aligned to `align` (a power of two), or null when the
/// request is larger than the largest class or the heap is spent.
pub fn allocate(size: usize, align: usize) -> *mut c_void {
    let Some(class) = class(size, align) else { return std::ptr::null_mut() };
    let slot = (class - INTERNAL_CLASS_MIN) as usize;
    let mut heap = HEAP.lock().unwrap_or_else(|e| e.into_inner());
    if !reserve(&mut heap) {
        return std::ptr::null_mut();
    }
    let head = heap.free[slot];
    if head != 0 {
        // SAFETY: a freed block of this heap, whose first word links the list.
        heap.free[slot] = unsafe { *(head as *const usize) };
        return head as *mut c_void;
    }
    let bytes = 1usize << class;
    let start = heap.bump.next_multiple_of(bytes);
    let end = BASE.load(Ordering::Relaxed) + INTERNAL_HEAP_BYTES;
    if start.checked_add(bytes).is_none_or(|block_end| block_end > end) {
        return std::ptr::null_mut();
    }
    heap.bump = start + bytes;
    let table = TABLE.load(Ordering::Relaxed) as *mut u8;
    // SAFETY: the block is in the heap, so its entry is in the table.
    unsafe { *table.add((start - BASE.load(Ordering::Relaxed)) >> INTERNAL_CLASS_MIN) = class as u8 };
    start as *mut c_void
}

/// Bytes usable in the block at `ptr` (one of this heap's): its whole size class.
pub fn usable_size(ptr: *const c_void) -> usize {
    1 << class_of(ptr as usize)
}

/// The class of the block at `ptr`, from the table beside the heap.
fn class_of(ptr: usize) -> u32 {
    let table = TABLE.load(Ordering::Acquire) as *const u8;
    // SAFETY: `ptr` is in the heap (checked by the caller), so its entry is in the table.
    u32::from(unsafe { *table.add((ptr - BASE.load(Ordering::Acquire)) >> INTERNAL_CLASS_MIN) })
}

/// Returns the block at `ptr` (one of this heap's) to its size's free list.
pub fn release(ptr: *mut c_void) {
    let class = class_of(ptr as usize);
    let slot = (class - INTERNAL_CLASS_MIN) as usize;
    let mut heap = HEAP.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a block of this heap, at least a word, no longer in use.
    unsafe { *(ptr as *mut usize) = heap.free[slot] };
    heap.free[slot] = ptr as usize;
}

#[cfg(test)]
mod tests {
    use super::{allocate, contains, release, usable_size};

    #[test]
    fn blocks_are_aligned_to_their_class_known_by_address_and_reused_after_free() {
        let a = allocate(100, 16);
        let b = allocate(5000, 4096);
        assert!(!a.is_null() && !b.is_null());
        assert!(contains(a) && contains(b) && !contains(std::ptr::null()) && !contains(&a as *const _ as *const _));
        assert_eq!((usable_size(a), usable_size(b)), (128, 8192));
        assert_eq!(b as usize % 8192, 0, "a block is aligned to its size");
        // SAFETY: blocks just allocated, of at least their asked sizes.
        unsafe {
            std::ptr::write_bytes(a.cast::<u8>(), 0xa5, 100);
            std::ptr::write_bytes(b.cast::<u8>(), 0x5a, 5000);
        }
        release(a);
        let c = allocate(120, 8);
        assert_eq!(c, a, "a freed block of the class is handed out again");
        assert!(allocate(1 << 29, 16).is_null(), "larger than the largest class: the caller's allocator");
        release(b);
        release(c);
    }
}
