//! The memory-map calls: the anonymous mappings allocators build their heaps from go to
//! far memory, and every call a program may make on far memory behaves as on local memory
//! without breaking the pager.
//!
//! - `mmap` (and `mmap64`): a private anonymous read-write mapping of at least
//!   `NAM_FARMEM_THRESHOLD` bytes, not fixed, not a stack, is a zeroed block of the far
//!   arena once the region is up. jemalloc (Redis), mimalloc and Python's object arenas
//!   map their heaps this way, so their small objects page too. Mappings the kernel must
//!   keep (files, shared memory, `PROT_NONE` reservations, stacks, executable, huge-page and
//!   fixed mappings) and those made by the library or the pager stay local; so does every
//!   mapping made before the region is up; the region is made by an `mmap` only when the
//!   program's allocator is glibc's (other allocators call `mmap` holding their locks,
//!   and making the region allocates), else by the first large `malloc`. glibc's `malloc` maps its heaps with internal
//!   calls no library can interpose; its large blocks reach far memory through `malloc`
//!   ([`crate::hooks`]). `NAM_FARMEM_STATS=1` counts what stayed local and why
//!   ([`crate::report`]).
//! - `munmap`: far pages go back to the arena (any page-aligned part of a mapping).
//!   `MAP_FIXED` over far pages makes them zeros again, with the protection asked for.
//! - `mremap`: a far mapping shrinks in place, grows in place when the pages after it are
//!   free, or moves (`MREMAP_MAYMOVE`) to a new far block, or a local one when the arena is
//!   full. `MREMAP_FIXED` and `MREMAP_DONTUNMAP` of far memory fail with `EINVAL`.
//! - `mprotect`: goes to the kernel (the pager's `UFFDIO_COPY` honours the protection); the
//!   dirty pages of a range made unreadable are written back first, so that the pager never
//!   reads a page the program forbade (clean pages are dropped without a read). They stay
//!   resident, clean: made readable again, the range is not fetched again.
//! - `mlock`, `mlock2`, `mlockall`: far pages are fetched but not pinned (a pinned page could
//!   not be evicted, and the budget is what keeps the program's local memory bounded); the
//!   rest is locked by the kernel. `mlockall(MCL_CURRENT)` locks every mapping but those
//!   registered with a userfaultfd, the far arena and the pager's page pool (the kernel's
//!   would fault them in whole).
//! - `fork`: the pager does not follow a child (its thread, its connections). A child may
//!   use the far pages that were resident when it was forked, and the memory it maps
//!   itself, which is local; touching any other far page ends the child with the library's
//!   fatal message and status (a userfaultfd guard over the arena), never with zeros in
//!   place of data. `fork` followed by `exec`, the usual case, is unaffected.
//!
//! System calls are made directly (`syscall(2)`), not through `dlsym`, which may itself map
//! memory.

use crate::advice::{far_part, outside};
use crate::arena;
use crate::constants::PAGE;
use crate::report::{self, Local};
use std::ffi::{c_int, c_void};

fn errno(e: c_int) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

unsafe fn kernel_mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void {
    libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void
}

unsafe fn kernel_munmap(addr: usize, len: usize) -> c_int {
    libc::syscall(libc::SYS_munmap, addr, len) as c_int
}

/// Whether a mapping of these arguments may be far: a plain private anonymous read-write
/// mapping (see the module documentation), counted as local otherwise.
fn placeable(len: usize, prot: c_int, flags: c_int, fd: c_int) -> bool {
    let kept = libc::MAP_SHARED
        | libc::MAP_FIXED
        | libc::MAP_FIXED_NOREPLACE
        | libc::MAP_STACK
        | libc::MAP_GROWSDOWN
        | libc::MAP_HUGETLB
        | libc::MAP_LOCKED;
    let plain = flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_PRIVATE != 0
        && flags & kept == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
        && fd == -1;
    if !plain {
        report::local(Local::OtherMapping, len);
        return false;
    }
    if len < arena::threshold() {
        report::local(Local::SmallMapping, len);
        return false;
    }
    if crate::hooks::inside() || nam_farmem::serving_faults() {
        report::local(Local::Internal, len);
        return false;
    }
    true
}

/// `mmap(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if len > 0 && (arena::ready() || may_make()) {
        if flags & libc::MAP_FIXED != 0 && far_part(addr, len).is_some() {
            return fixed_over_far(addr, len, prot, flags, fd, off);
        }
        if placeable(len, prot, flags, fd) && (arena::ready() || crate::hooks::make_region()) {
            let p = arena::allocate_zeroed(len);
            if !p.is_null() {
                report::far_mapping(len);
                return p.cast();
            }
            report::local(Local::Unavailable, len);
        }
    }
    kernel_mmap(addr, len, prot, flags, fd, off)
}

/// Whether an `mmap` may make the region: only when the program's allocator is glibc's,
/// whose own mappings never come through here, so that the call cannot come from inside an
/// allocator holding its locks (making the region allocates). With another allocator the
/// region is made by the first large `malloc`, as before it existed.
fn may_make() -> bool {
    arena::unmade() && crate::program_alloc::resolved().is_some_and(|next| next.glibc)
}

/// `mmap64(2)`: `mmap` (the same call on 64-bit Linux).
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    mmap(addr, len, prot, flags, fd, off)
}

/// `MAP_FIXED` over far pages: a private anonymous mapping there is zeros again, with the
/// protection asked for; anything else would take the pages from the pager's registered
/// mapping (its next `UFFDIO_COPY` there fails), so it is refused with `EINVAL`.
unsafe fn fixed_over_far(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    _off: i64,
) -> *mut c_void {
    let anon_private = flags & libc::MAP_ANONYMOUS != 0 && flags & libc::MAP_PRIVATE != 0 && fd == -1;
    let start = addr as usize;
    let Some(far) = far_part(addr, len).filter(|&f| anon_private && f == (start, (start + len).next_multiple_of(PAGE)))
    else {
        errno(libc::EINVAL);
        return libc::MAP_FAILED;
    };
    if crate::advice::madvise(addr, far.1 - far.0, libc::MADV_DONTNEED) != 0
        || libc::syscall(libc::SYS_mprotect, addr, far.1 - far.0, prot) != 0
    {
        return libc::MAP_FAILED;
    }
    addr
}

/// `munmap(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    let Some(far) = far_part(addr, len) else {
        return kernel_munmap(addr as usize, len);
    };
    for (start, end) in outside(addr as usize, len, far) {
        if kernel_munmap(start, end - start) != 0 {
            return -1;
        }
    }
    if !arena::in_child() {
        arena::release_range(far.0, far.1 - far.0);
    }
    0
}

/// `mremap(2)`; see the module documentation. Declared with its optional fifth argument,
/// which the C calling convention passes in a register either way and which is read only
/// with `MREMAP_FIXED`.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if !arena::bounds().is_some_and(|(base, end)| (base..end).contains(&(old as usize))) {
        return libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void;
    }
    let (old_len, new_len) = (old_len.next_multiple_of(PAGE), new_len.next_multiple_of(PAGE));
    let refused = flags & (libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0
        || !(old as usize).is_multiple_of(PAGE)
        || old_len == 0
        || new_len == 0
        || far_part(old, old_len) != Some((old as usize, old as usize + old_len));
    if refused {
        errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    if arena::in_child() {
        errno(libc::ENOMEM); // the arena cannot change in a child (see `fork`)
        return libc::MAP_FAILED;
    }
    if new_len <= old_len {
        if new_len < old_len {
            arena::release_range(old as usize + new_len, old_len - new_len);
        }
        return old;
    }
    if arena::grow_in_place(old as usize, old_len, new_len) {
        return old;
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    }
    let mut new = arena::allocate_zeroed(new_len).cast::<c_void>();
    if new.is_null() {
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        new = kernel_mmap(std::ptr::null_mut(), new_len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0);
        if new == libc::MAP_FAILED {
            return new;
        }
    }
    std::ptr::copy_nonoverlapping(old.cast::<u8>(), new.cast::<u8>(), old_len);
    arena::release_range(old as usize, old_len);
    new
}

/// `mprotect(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int {
    if prot & libc::PROT_READ == 0 {
        if let (Some(far), Some(region)) = (far_part(addr, len), arena::region()) {
            let base = region.as_ptr() as usize;
            if let Err(e) = region.write_back_range((far.0 - base) as u64, (far.1 - far.0) as u64) {
                eprintln!("nam-farmem-preload: mprotect of far memory failed: {e}");
                errno(libc::ENOMEM);
                return -1;
            }
        }
    }
    libc::syscall(libc::SYS_mprotect, addr, len, prot) as c_int
}

/// Fetches the far part of a range to be locked and locks the rest with `lock`.
unsafe fn lock_range(addr: *const c_void, len: usize, lock: impl Fn(usize, usize) -> c_int) -> c_int {
    let Some(far) = far_part(addr as *mut c_void, len) else {
        return lock(addr as usize, len);
    };
    for (start, end) in outside(addr as usize, len, far) {
        if lock(start, end - start) != 0 {
            return -1;
        }
    }
    if crate::advice::madvise(far.0 as *mut c_void, far.1 - far.0, libc::MADV_WILLNEED) != 0 {
        errno(libc::EAGAIN);
        return -1;
    }
    0
}

/// `mlock(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: usize) -> c_int {
    lock_range(addr, len, |a, l| libc::syscall(libc::SYS_mlock, a, l) as c_int)
}

/// `mlock2(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mlock2(addr: *const c_void, len: usize, flags: libc::c_uint) -> c_int {
    lock_range(addr, len, |a, l| libc::syscall(libc::SYS_mlock2, a, l, flags) as c_int)
}

/// `munlock(2)`: far pages were never locked.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn munlock(addr: *const c_void, len: usize) -> c_int {
    let Some(far) = far_part(addr as *mut c_void, len) else {
        return libc::syscall(libc::SYS_munlock, addr, len) as c_int;
    };
    for (start, end) in outside(addr as usize, len, far) {
        if libc::syscall(libc::SYS_munlock, start, end - start) != 0 {
            return -1;
        }
    }
    0
}

/// `mlockall(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    let Some((base, end)) = arena::bounds() else {
        return libc::syscall(libc::SYS_mlockall, flags) as c_int;
    };
    if flags & libc::MCL_CURRENT != 0 {
        let onfault = if flags & libc::MCL_ONFAULT != 0 { libc::MLOCK_ONFAULT } else { 0 };
        let Ok(maps) = std::fs::read_to_string("/proc/self/smaps") else {
            errno(libc::ENOMEM);
            return -1;
        };
        let mut range: Option<(usize, usize)> = None;
        for line in maps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                // Mappings registered with a userfaultfd (the far arena, the pager's page
                // pool) are left out: locking populates them, every page a fault only the
                // pager may serve. So are the kernel's special mappings, which mlock
                // refuses. A failure elsewhere is the program's limit: reported.
                let registered = flags.split_whitespace().any(|f| matches!(f, "um" | "uw" | "ui"));
                if let Some((a, b)) = range.take().filter(|&(a, b)| !(registered || a < end && b > base)) {
                    if libc::syscall(libc::SYS_mlock2, a, b - a, onfault) != 0 {
                        let e = *libc::__errno_location();
                        if e == libc::EPERM || e == libc::EAGAIN {
                            return -1;
                        }
                    }
                }
                continue;
            }
            let Some((a, rest)) = line.split_once('-') else { continue };
            let Some(b) = rest.split_whitespace().next() else { continue };
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                range = (!line.ends_with("[vsyscall]")).then_some((a, b));
            }
        }
    }
    if flags & libc::MCL_FUTURE != 0 {
        return libc::syscall(libc::SYS_mlockall, flags & !libc::MCL_CURRENT) as c_int;
    }
    0
}

/// Registers the `fork` guard (see the module documentation); called once the region is up.
pub(crate) fn watch_forks() {
    // SAFETY: registers a plain extern "C" function for children only.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
}

extern "C" fn forked_child() {
    let Some((base, end)) = arena::bounds() else { return };
    if !arena::ready() {
        return;
    }
    arena::become_child();
    // The child's copy of the arena lost the parent's userfaultfd registration, so its
    // missing pages would read as zeros: register them with a descriptor of its own, whose
    // only reader ends the child at the first such fault.
    let guard = nam_uffd::Uffd::open(0, true).map_err(|e| e.to_string()).and_then(|uffd| {
        uffd.register(base as u64, (end - base) as u64, true, false).map(|()| uffd).map_err(|e| e.to_string())
    });
    let uffd = match guard {
        Ok(uffd) => uffd,
        Err(e) => nam_farmem::exit_fatal(&format!(
            "a child process made with fork cannot guard its copy of far memory ({e}): it would read zeros \
             where the parent's data is"
        )),
    };
    let spawned = std::thread::Builder::new().name("nam-farmem-fork-guard".into()).spawn(move || {
        let mut faults = Vec::new();
        loop {
            uffd.poll(None, -1);
            if nam_uffd::read_faults(uffd.raw(), &mut faults).is_err() {
                continue;
            }
            if let Some(fault) = faults.first() {
                nam_farmem::exit_fatal(&format!(
                    "process {} (a child made with fork) touched far memory at {:#x} that was not resident \
                     when it was forked; far memory does not follow fork, a child may only exec or use \
                     what it maps itself",
                    std::process::id(),
                    fault.address
                ));
            }
        }
    });
    if let Err(e) = spawned {
        nam_farmem::exit_fatal(&format!("a child process made with fork cannot guard its far memory: {e}"));
    }
}
