//! The allocator of this library's own Rust code: glibc's allocator called by its internal
//! names, so it never re-enters the interposed `malloc`.

use crate::constants::MALLOC_ALIGN;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

/// glibc malloc by its internal names.
pub struct LibcAllocator;

unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            __libc_malloc(layout.size()).cast()
        } else {
            __libc_memalign(layout.align(), layout.size()).cast()
        }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            __libc_calloc(1, layout.size()).cast()
        } else {
            let p = self.alloc(layout);
            if !p.is_null() {
                std::ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        __libc_free(ptr.cast())
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            __libc_realloc(ptr.cast(), new_size).cast()
        } else {
            let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}
