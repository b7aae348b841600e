//! The interposed C allocation functions. Large requests go to the far arena unless this
//! thread is already inside the library (making the region allocates through these very
//! functions) or is serving the region's page faults (the pager's handler thread, whose
//! UCX calls allocate buffers too: a page of those would fault on the only thread that
//! serves faults); all others go to the program's own allocator ([`crate::program_alloc`]:
//! jemalloc's when the program is linked with it, glibc's by default).
//!
//! Which allocator a block belongs to is decided by its address: the far arena's range,
//! then the bootstrap buffer's, and everything else is the program allocator's. No block is
//! ever handed to an allocator that did not make it.

use crate::arena;
use crate::program_alloc::{bootstrap_alloc, bootstrap_size, in_bootstrap, next};
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
    let Some(next) = next() else {
        return bootstrap_alloc(size, 16);
    };
    let p = far(size, 16);
    if p.is_null() {
        (next.malloc)(size)
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
    let Some(next) = next() else {
        // Bootstrap memory is never reused, so it is still zero.
        return count.checked_mul(size).map_or(std::ptr::null_mut(), |total| bootstrap_alloc(total, 16));
    };
    let Some(total) = count.checked_mul(size) else {
        return (next.calloc)(count, size);
    };
    let p = far(total, 16);
    if p.is_null() {
        return (next.calloc)(count, size);
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
    } else if in_bootstrap(ptr) {
        // Never reused: the buffer only serves the few blocks of the allocator's lookup.
    } else if let Some(next) = next() {
        (next.free)(ptr)
    }
    // Otherwise another thread is looking the allocator up: this block (made by the
    // program's allocator without passing through this library) is left allocated.
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
    if in_bootstrap(ptr) {
        return moved(ptr, bootstrap_size(ptr), malloc(size), size);
    }
    let old_far = arena::contains(ptr.cast());
    if old_far {
        let old_size = arena::usable_size(ptr.cast());
        if size <= old_size && size >= arena::threshold() {
            return ptr;
        }
        return moved(ptr, old_size, malloc(size), size);
    }
    let Some(next) = next() else {
        return std::ptr::null_mut(); // a block of the program's allocator while it is looked up
    };
    // A block of the program's allocator grown past the threshold moves into far memory
    // when its size can be asked for; everything else stays with the program's allocator.
    if size >= arena::threshold() && next.sizes_known {
        let new = far(size, 16);
        if !new.is_null() {
            return moved(ptr, (next.malloc_usable_size)(ptr), new, size);
        }
    }
    (next.realloc)(ptr, size)
}

/// Copies the block `old` of `old_size` bytes into `new` (of `size` bytes) and frees it,
/// or leaves it alone if `new` is null (out of memory): `realloc`'s end.
unsafe fn moved(old: *mut c_void, old_size: usize, new: *mut c_void, size: usize) -> *mut c_void {
    if !new.is_null() {
        std::ptr::copy_nonoverlapping(old.cast::<u8>(), new.cast::<u8>(), old_size.min(size));
        free(old);
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
    let Some(next) = next() else {
        let p = bootstrap_alloc(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        *out = p;
        return 0;
    };
    let p = far(size, align);
    if p.is_null() {
        return (next.posix_memalign)(out, align, size);
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
    let Some(next) = next() else {
        return bootstrap_alloc(size, align);
    };
    let p = far(size, align);
    if p.is_null() {
        (next.aligned_alloc)(align, size)
    } else {
        p
    }
}

/// `memalign(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    let Some(next) = next() else {
        return bootstrap_alloc(size, align);
    };
    let p = far(size, align);
    if p.is_null() {
        (next.memalign)(align, size)
    } else {
        p
    }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if arena::contains(ptr.cast()) {
        arena::usable_size(ptr.cast())
    } else if in_bootstrap(ptr) {
        bootstrap_size(ptr)
    } else {
        next().map_or(0, |next| (next.malloc_usable_size)(ptr))
    }
}
