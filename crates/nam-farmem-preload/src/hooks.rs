//! The interposed C allocation functions. Large requests go to the far arena unless this
//! thread is already inside the library (making the region allocates through these very
//! functions) or is serving the region's page faults (the pager's handler thread, whose
//! UCX calls allocate buffers too: a page of those would fault on the only thread that
//! serves faults); all others go to glibc.

use crate::arena;
use crate::libc_alloc::{__libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_realloc};
use std::cell::Cell;
use std::ffi::c_void;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread marked as inside the library.
fn guarded(f: impl FnOnce() -> *mut u8) -> *mut u8 {
    INSIDE.with(|inside| {
        if inside.get() {
            return std::ptr::null_mut();
        }
        inside.set(true);
        let p = f();
        inside.set(false);
        p
    })
}

fn far(size: usize, align: usize) -> *mut c_void {
    if size < arena::threshold() || nam_farmem::serving_faults() {
        return std::ptr::null_mut();
    }
    guarded(|| arena::allocate(size, align)).cast()
}

/// `malloc(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    let p = far(size, 16);
    if p.is_null() {
        __libc_malloc(size)
    } else {
        p
    }
}

/// `calloc(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        return __libc_calloc(count, size);
    };
    let p = far(total, 16);
    if p.is_null() {
        return __libc_calloc(count, size);
    }
    std::ptr::write_bytes(p.cast::<u8>(), 0, total);
    p
}

/// `free(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if arena::contains(ptr.cast()) {
        arena::release(ptr.cast());
    } else {
        __libc_free(ptr)
    }
}

/// `realloc(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return malloc(size);
    }
    let old_far = arena::contains(ptr.cast());
    if !old_far && size < arena::threshold() {
        return __libc_realloc(ptr, size);
    }
    let old_size = if old_far { arena::usable_size(ptr.cast()) } else { malloc_usable_size(ptr) };
    if old_far && size <= old_size && size >= arena::threshold() {
        return ptr;
    }
    let new = malloc(size);
    if !new.is_null() {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), new.cast::<u8>(), old_size.min(size));
        free(ptr);
    }
    new
}

/// `posix_memalign(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> libc::c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    let mut p = far(size, align);
    if p.is_null() {
        p = __libc_memalign(align, size);
    }
    if p.is_null() {
        return libc::ENOMEM;
    }
    *out = p;
    0
}

/// `aligned_alloc(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    memalign(align, size)
}

/// `memalign(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    let p = far(size, align);
    if p.is_null() {
        __libc_memalign(align, size)
    } else {
        p
    }
}

/// glibc's `malloc_usable_size`, found past this library with `dlsym(RTLD_NEXT)`.
unsafe fn libc_malloc_usable_size(ptr: *mut c_void) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut f = NEXT.load(Ordering::Acquire);
    if f == 0 {
        f = libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) as usize;
        assert!(f != 0, "glibc has no malloc_usable_size");
        NEXT.store(f, Ordering::Release);
    }
    // SAFETY: the address of glibc's `size_t malloc_usable_size(void *)`.
    let f: unsafe extern "C" fn(*mut c_void) -> usize = std::mem::transmute(f);
    f(ptr)
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if arena::contains(ptr.cast()) {
        arena::usable_size(ptr.cast())
    } else {
        libc_malloc_usable_size(ptr)
    }
}
