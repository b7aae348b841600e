//! The interposed C allocation functions. Large requests go to the far arena unless this
//! thread is already inside the library (making the region allocates through these very
//! functions) or is serving the region's page faults (the pager's handler thread, whose
//! UCX calls allocate buffers too: a page of those would fault on the only thread that
//! serves faults). Those threads' requests go to the library's own local heap
//! ([`crate::internal`]) when the program's allocator is not glibc's (jemalloc's heap is far
//! memory itself); all others go to the program's own allocator ([`crate::program_alloc`]:
//! jemalloc's when the program is linked with it, glibc's by default).
//!
//! Which allocator a block belongs to is decided by its address: the far arena's range,
//! then the bootstrap buffer's, and everything else is the program allocator's. No block is
//! ever handed to an allocator that did not make it.

use crate::arena;
use crate::internal;
use crate::program_alloc::{bootstrap_alloc, bootstrap_size, in_bootstrap, next, Next};
use crate::report::{self, Local};
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

/// Whether this thread is inside the library now (its own allocations and mappings stay
/// local).
pub(crate) fn inside() -> bool {
    INSIDE.with(|inside| inside.get())
}

/// Makes the far region from this thread, marked inside the library (its own allocations
/// and mappings stay local); false if it is not ready afterwards.
pub(crate) fn make_region() -> bool {
    !guarded(|| if arena::make() { std::ptr::dangling_mut::<u8>() } else { std::ptr::null_mut() }).is_null()
}

fn far(size: usize, align: usize) -> *mut c_void {
    if size < arena::threshold() {
        report::local(Local::SmallBlock, size);
        return std::ptr::null_mut();
    }
    if nam_farmem::serving_faults() || inside() {
        report::local(Local::Internal, size);
        return std::ptr::null_mut();
    }
    let p: *mut c_void = guarded(|| arena::allocate(size, align)).cast();
    if p.is_null() {
        report::local(Local::Unavailable, size);
    } else {
        report::far_block(size);
    }
    p
}

/// A block of the library's own heap ([`crate::internal`]) when this thread serves the
/// region's faults or is inside the library and the program's allocator is not glibc's
/// (whose heap is far memory then, where such a thread must never fault); null otherwise,
/// or when that heap cannot take the request (then the program's allocator does, as before).
fn internal_block(next: &Next, size: usize, align: usize) -> *mut c_void {
    if next.glibc || !(nam_farmem::serving_faults() || inside()) {
        return std::ptr::null_mut();
    }
    internal::allocate(size, align)
}

/// `pthread_create(3)`: a thread started from inside the library (the pager's handler,
/// UCX's progress and event threads) is marked inside it for its whole life, from its first
/// instruction, so that nothing it allocates or maps is far: a fault on the thread that
/// serves faults, or on one the pager waits for, would never be served. (The pager marks
/// its handler too, but only once the thread's start-up code, which allocates, has run.)
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> libc::c_int {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    type Create = unsafe extern "C" fn(
        *mut libc::pthread_t,
        *const libc::pthread_attr_t,
        extern "C" fn(*mut c_void) -> *mut c_void,
        *mut c_void,
    ) -> libc::c_int;
    // SAFETY: glibc's function of the same signature.
    let create: Create = std::mem::transmute(crate::syscalls::next(&NEXT, c"pthread_create"));
    if !inside() && !nam_farmem::serving_faults() {
        return create(thread, attr, start, arg);
    }
    let boxed = Box::into_raw(Box::new((start, arg))).cast::<c_void>();
    let status = create(thread, attr, library_thread, boxed);
    if status != 0 {
        drop(Box::from_raw(boxed.cast::<(extern "C" fn(*mut c_void) -> *mut c_void, *mut c_void)>()));
    }
    status
}

extern "C" fn library_thread(boxed: *mut c_void) -> *mut c_void {
    INSIDE.with(|inside| inside.set(true));
    // SAFETY: made by `pthread_create` above for this thread alone.
    let (start, arg) =
        *unsafe { Box::from_raw(boxed.cast::<(extern "C" fn(*mut c_void) -> *mut c_void, *mut c_void)>()) };
    start(arg)
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
    let p = internal_block(next, size, 16);
    if !p.is_null() {
        return p;
    }
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
    let p = internal_block(next, total, 16);
    if !p.is_null() {
        std::ptr::write_bytes(p.cast::<u8>(), 0, total); // a reused block is not zeros
        return p;
    }
    let p = far(total, 16);
    if p.is_null() {
        return (next.calloc)(count, size);
    }
    // Through the pager, which fetches and touches nothing (the pages come from zeros when
    // first touched), rather than by writing zeros, which would fault every page in now
    // and write it back at eviction.
    arena::zero_block(p.cast(), total);
    p
}

/// `free(3)`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if internal::contains(ptr) {
        internal::release(ptr);
    } else if arena::contains(ptr.cast()) {
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
    if internal::contains(ptr) {
        let old_size = internal::usable_size(ptr);
        if size <= old_size {
            return ptr;
        }
        return moved(ptr, old_size, malloc(size), size);
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
    // A thread that must not fault on far memory moves its block out of the program's heap.
    if next.sizes_known {
        let new = internal_block(next, size, 16);
        if !new.is_null() {
            return moved(ptr, (next.malloc_usable_size)(ptr), new, size);
        }
    }
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
    let mut p = internal_block(next, size, align);
    if p.is_null() {
        p = far(size, align);
    }
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
    let mut p = internal_block(next, size, align);
    if p.is_null() {
        p = far(size, align);
    }
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
    let mut p = internal_block(next, size, align);
    if p.is_null() {
        p = far(size, align);
    }
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
    if internal::contains(ptr) {
        internal::usable_size(ptr)
    } else if arena::contains(ptr.cast()) {
        arena::usable_size(ptr.cast())
    } else if in_bootstrap(ptr) {
        bootstrap_size(ptr)
    } else {
        next().map_or(0, |next| (next.malloc_usable_size)(ptr))
    }
}
