//! The program's own allocator: the `malloc` family that the program would have called
//! without this library, that is each function's next definition past this library in
//! symbol lookup order (`dlsym(RTLD_NEXT)`): jemalloc's, tcmalloc's or mimalloc's when the
//! program is linked with one of them (Debian's `redis-server` needs `libjemalloc.so.2`),
//! glibc's otherwise.
//!
//! Every block that is not far is the program's allocator's, and every question about it
//! (`free`, `realloc`, `malloc_usable_size`) goes to that same allocator: asking one
//! allocator about another's block is undefined (jemalloc's `malloc_usable_size` of a
//! glibc block crashed Redis at startup). Allocator functions this library does not
//! interpose (`valloc`, `reallocarray`, jemalloc's `mallocx`, C++ `operator new` of an
//! allocator that replaces it) then hand out blocks that the interposed `free` and
//! `malloc_usable_size` pass on to the right allocator too.
//!
//! Looking the functions up may itself allocate (the dynamic linker's bookkeeping, older
//! glibc's `dlerror` buffer); while it runs, requests are served from a small static
//! bootstrap buffer, whose blocks are never reused (`in_bootstrap`).

use crate::constants::{BOOTSTRAP_ALIGN, BOOTSTRAP_BYTES};
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

type AllocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type AlignedFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> libc::c_int;
type UsableSizeFn = unsafe extern "C" fn(*mut c_void) -> usize;

/// The program allocator's functions.
pub(crate) struct Next {
    pub malloc: AllocFn,
    pub calloc: CallocFn,
    pub realloc: ReallocFn,
    pub free: FreeFn,
    pub memalign: AlignedFn,
    pub aligned_alloc: AlignedFn,
    pub posix_memalign: PosixMemalignFn,
    pub malloc_usable_size: UsableSizeFn,
    /// Whether `malloc_usable_size` is defined where `malloc` is (it may not be when the
    /// program brings a `malloc` of its own without one): only then may this library ask
    /// it how large a block is, to move the block into far memory.
    pub sizes_known: bool,
    /// Whether the program's allocator is glibc's, whose own mappings are made with
    /// internal calls that never reach this library's `mmap`: an `mmap` that does comes
    /// from the program, never from inside the allocator holding its locks.
    pub glibc: bool,
}

const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
const RESOLVED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);
static mut NEXT: Option<Next> = None;

/// The program's allocator, or `None` while it is being looked up (by this thread, whose
/// lookup allocates, or by another one): then the caller uses the bootstrap buffer.
#[inline]
pub(crate) fn next() -> Option<&'static Next> {
    if STATE.load(Ordering::Acquire) == RESOLVED {
        // SAFETY: written once before RESOLVED was published with Release; never again.
        return unsafe { (*std::ptr::addr_of!(NEXT)).as_ref() };
    }
    resolve()
}

/// The program's allocator if it was looked up already; never looks it up (for callers
/// inside an allocator, such as `mmap`, where the lookup's own allocations could re-enter
/// it half made).
pub(crate) fn resolved() -> Option<&'static Next> {
    if STATE.load(Ordering::Acquire) == RESOLVED {
        // SAFETY: as in `next`.
        return unsafe { (*std::ptr::addr_of!(NEXT)).as_ref() };
    }
    None
}

#[cold]
fn resolve() -> Option<&'static Next> {
    if STATE.compare_exchange(UNRESOLVED, RESOLVING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return None; // resolving now; RESOLVED was checked by the caller
    }
    // SAFETY: each name is looked up as the C function of that name and type.
    let next = unsafe {
        Next {
            malloc: std::mem::transmute::<usize, AllocFn>(lookup(c"malloc")),
            calloc: std::mem::transmute::<usize, CallocFn>(lookup(c"calloc")),
            realloc: std::mem::transmute::<usize, ReallocFn>(lookup(c"realloc")),
            free: std::mem::transmute::<usize, FreeFn>(lookup(c"free")),
            memalign: std::mem::transmute::<usize, AlignedFn>(lookup(c"memalign")),
            aligned_alloc: std::mem::transmute::<usize, AlignedFn>(lookup(c"aligned_alloc")),
            posix_memalign: std::mem::transmute::<usize, PosixMemalignFn>(lookup(c"posix_memalign")),
            malloc_usable_size: std::mem::transmute::<usize, UsableSizeFn>(lookup(c"malloc_usable_size")),
            sizes_known: same_object(lookup(c"malloc"), lookup(c"malloc_usable_size")),
            glibc: in_glibc(lookup(c"malloc")),
        }
    };
    // SAFETY: only this thread got past RESOLVING; readers wait for RESOLVED.
    unsafe { NEXT = Some(next) };
    STATE.store(RESOLVED, Ordering::Release);
    // SAFETY: just written.
    unsafe { (*std::ptr::addr_of!(NEXT)).as_ref() }
}

/// The next definition of `name`. glibc defines them all, so a miss means a broken process.
fn lookup(name: &CStr) -> usize {
    // SAFETY: dlsym with a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if f == 0 {
        nam_farmem::exit_fatal(&format!("no {} past the far-memory library", name.to_string_lossy()));
    }
    f
}

/// Whether the function at `f` is defined in glibc's `libc.so.6` (mimalloc, say, defines
/// `__libc_malloc` too, so comparing with that name would not tell).
fn in_glibc(f: usize) -> bool {
    // SAFETY: a zeroed Dl_info is a valid out-buffer; dladdr only reads the address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; dli_fname, when set, is a NUL-terminated path the loader owns.
    unsafe {
        libc::dladdr(f as *const c_void, &mut info) != 0
            && !info.dli_fname.is_null()
            && CStr::from_ptr(info.dli_fname).to_bytes().ends_with(b"/libc.so.6")
    }
}

/// Whether the functions at `a` and `b` are defined in the same loaded object.
fn same_object(a: usize, b: usize) -> bool {
    let base = |f: usize| {
        // SAFETY: a zeroed Dl_info is a valid out-buffer; dladdr only reads the address.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        (unsafe { libc::dladdr(f as *const c_void, &mut info) } != 0).then_some(info.dli_fbase as usize)
    };
    matches!((base(a), base(b)), (Some(x), Some(y)) if x == y)
}

#[repr(C, align(4096))]
struct Bootstrap([u8; BOOTSTRAP_BYTES]);
static mut BOOTSTRAP: Bootstrap = Bootstrap([0; BOOTSTRAP_BYTES]);
static BOOTSTRAP_USED: AtomicUsize = AtomicUsize::new(0);

fn bootstrap_base() -> usize {
    std::ptr::addr_of!(BOOTSTRAP) as usize
}

/// A zeroed block of the bootstrap buffer (its memory is never handed out twice), or null
/// when the buffer is used up.
pub(crate) fn bootstrap_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(BOOTSTRAP_ALIGN);
    let mut used = BOOTSTRAP_USED.load(Ordering::Relaxed);
    loop {
        let start = (bootstrap_base() + used + BOOTSTRAP_ALIGN).next_multiple_of(align);
        let end = start.saturating_add(size);
        if end > bootstrap_base() + BOOTSTRAP_BYTES {
            return std::ptr::null_mut();
        }
        match BOOTSTRAP_USED.compare_exchange_weak(used, end - bootstrap_base(), Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                // SAFETY: the header lies inside the part of the buffer just claimed.
                unsafe { ((start - BOOTSTRAP_ALIGN) as *mut usize).write(size) };
                return start as *mut c_void;
            }
            Err(now) => used = now,
        }
    }
}

/// Whether `ptr` is a block of the bootstrap buffer (freeing one does nothing).
#[inline]
pub(crate) fn in_bootstrap(ptr: *const c_void) -> bool {
    let p = ptr as usize;
    p >= bootstrap_base() && p < bootstrap_base() + BOOTSTRAP_BYTES
}

/// The size asked for of the bootstrap block at `ptr`.
pub(crate) fn bootstrap_size(ptr: *const c_void) -> usize {
    // SAFETY: a bootstrap block is preceded by its header ([`bootstrap_alloc`]).
    unsafe { ((ptr as usize - BOOTSTRAP_ALIGN) as *const usize).read() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_blocks_are_aligned_zeroed_sized_and_recognised() {
        let mut last_end = 0;
        for (size, align) in [(1, 1), (24, 16), (100, 64), (3000, 4096), (7, 0)] {
            let p = bootstrap_alloc(size, align);
            assert!(!p.is_null());
            assert!(in_bootstrap(p) && in_bootstrap(p.cast::<u8>().wrapping_add(size - 1).cast()));
            assert_eq!(p as usize % align.max(BOOTSTRAP_ALIGN), 0);
            assert_eq!(bootstrap_size(p), size);
            assert!(p as usize > last_end, "blocks overlap");
            last_end = p as usize + size;
            // SAFETY: `size` bytes were just handed out.
            assert!(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size) }.iter().all(|&b| b == 0));
        }
        assert!(bootstrap_alloc(BOOTSTRAP_BYTES, 16).is_null(), "more than the buffer holds");
        let local = 0u64;
        assert!(!in_bootstrap((&local as *const u64).cast()));
    }

    #[test]
    fn the_next_allocator_is_found_with_its_own_size_function() {
        let next = next().expect("resolved on first use");
        assert!(next.sizes_known, "glibc defines malloc and malloc_usable_size together");
        // SAFETY: the program allocator's own functions, used as C would.
        unsafe {
            let p = (next.malloc)(100);
            assert!(!p.is_null() && !in_bootstrap(p));
            assert!((next.malloc_usable_size)(p) >= 100);
            (next.free)(p);
        }
    }
}
