//! `madvise(2)` and `posix_madvise(3)` on far memory: the pager owns the far arena's pages,
//! so advice on them goes to it instead of the kernel.
//!
//! - `MADV_WILLNEED`, `MADV_POPULATE_READ`, `MADV_POPULATE_WRITE` (and
//!   `POSIX_MADV_WILLNEED`): the pages are fetched now
//!   ([`nam_farmem::PagedRegion::fetch_ranges`], half the local budget at most), so that the
//!   reads that follow do not fault.
//! - `MADV_PAGEOUT`: dirty pages are written back and the range is dropped from local memory
//!   ([`nam_farmem::PagedRegion::evict_range`]).
//! - `MADV_DONTNEED`, `MADV_DONTNEED_LOCKED`: the range reads as zeros afterwards, as
//!   anonymous memory does ([`nam_farmem::PagedRegion::zero_range`]: resident pages are
//!   zeroed in place and stay, missing ones come from zeros when next touched, none is
//!   fetched; allocators give ranges up this way and soon use them again). Passed to the
//!   kernel, the pages would come back from the servers with their old contents instead.
//! - `MADV_FREE`, `MADV_COLD`: nothing (the kernel may keep the contents too; the pager
//!   chooses what to evict).
//! - `MADV_HUGEPAGE`, `MADV_NOHUGEPAGE`, `MADV_COLLAPSE`, `MADV_MERGEABLE`,
//!   `MADV_UNMERGEABLE`, `MADV_WIPEONFORK`, `MADV_KEEPONFORK`: accepted and not passed on.
//!   The pager installs the pages itself, 4 KiB at a time; huge-page advice reaching the
//!   kernel made it back the range with huge pages, and the pager's next `UFFDIO_COPY` there
//!   failed (`ENOENT`: numpy advises `MADV_HUGEPAGE` on its large arrays).
//! - `MADV_REMOVE`: `EINVAL`, as the kernel answers for private anonymous memory.
//! - `MADV_NORMAL`, `MADV_RANDOM`, `MADV_SEQUENTIAL`, `MADV_DONTFORK`, `MADV_DOFORK`,
//!   `MADV_DONTDUMP`, `MADV_DODUMP`, and the privileged `MADV_HWPOISON` and
//!   `MADV_SOFT_OFFLINE`, go to the kernel: they change nothing the pager relies on.
//! - Any other advice on far memory fails with `EINVAL` rather than reach the kernel.
//!
//! The parts of a range outside the arena go to the kernel as without this library; so does
//! a range that does not start on a page (the kernel refuses it). A pager that fails (a
//! server died) makes the call fail with `EIO`.
//!
//! **UCX's memory hooks would come first.** With `UCX_MEM_EVENTS` on, UCX patches the
//! `madvise` that the program's calls reach (this library's) into a jump to its own hook,
//! which makes the system call itself, so the library starts the program again with
//! `UCX_MEM_EVENTS=no` unless the user set it (see the crate documentation). A user who sets
//! `UCX_MEM_EVENTS=yes` gets the kernel's behaviour: pages that `MADV_DONTNEED` drops come
//! back from the servers as of their last write-back (the pager notices, see
//! `PagedRegion`), and huge-page advice can break the pager.

use crate::arena;
use crate::constants::PAGE;
use crate::syscalls::next;
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;

static MADVISE: AtomicUsize = AtomicUsize::new(0);
static POSIX_MADVISE: AtomicUsize = AtomicUsize::new(0);

/// `madvise(2)`; see the module documentation.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    // SAFETY: glibc's function of the same signature.
    let kernel: unsafe extern "C" fn(*mut c_void, usize, c_int) -> c_int =
        std::mem::transmute(next(&MADVISE, c"madvise"));
    let Some(far) = far_part(addr, len) else {
        return kernel(addr, len, advice);
    };
    match taken(advice) {
        Taken::Kernel => return kernel(addr, len, advice),
        Taken::Refused => {
            *libc::__errno_location() = libc::EINVAL;
            return -1;
        }
        Taken::Library => {}
    }
    for (start, end) in outside(addr as usize, len, far) {
        if kernel(start as *mut c_void, end - start, advice) != 0 {
            return -1;
        }
    }
    match advise_far(far, advice) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("nam-farmem-preload: madvise of far memory failed: {e}");
            *libc::__errno_location() = libc::EIO;
            -1
        }
    }
}

/// `posix_madvise(3)`: `POSIX_MADV_WILLNEED` on far memory fetches it; the rest goes to
/// glibc (whose `POSIX_MADV_DONTNEED` does nothing).
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn posix_madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    // SAFETY: glibc's function of the same signature.
    let glibc: unsafe extern "C" fn(*mut c_void, usize, c_int) -> c_int =
        std::mem::transmute(next(&POSIX_MADVISE, c"posix_madvise"));
    match far_part(addr, len) {
        Some(far) if advice == libc::POSIX_MADV_WILLNEED => match advise_far(far, libc::MADV_WILLNEED) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("nam-farmem-preload: posix_madvise of far memory failed: {e}");
                libc::EIO
            }
        },
        _ => glibc(addr, len, advice),
    }
}

/// Who carries out an advice on far memory (see the module documentation).
enum Taken {
    /// The library (some advice is accepted and does nothing).
    Library,
    /// The kernel: it changes nothing the pager relies on.
    Kernel,
    /// Nobody: `EINVAL`.
    Refused,
}

const MADV_COLD: c_int = 20;
const MADV_POPULATE_READ: c_int = 22;
const MADV_POPULATE_WRITE: c_int = 23;
const MADV_DONTNEED_LOCKED: c_int = 24;
const MADV_COLLAPSE: c_int = 25;

fn taken(advice: c_int) -> Taken {
    match advice {
        libc::MADV_WILLNEED
        | MADV_POPULATE_READ
        | MADV_POPULATE_WRITE
        | libc::MADV_PAGEOUT
        | libc::MADV_DONTNEED
        | MADV_DONTNEED_LOCKED
        | libc::MADV_FREE
        | MADV_COLD
        | libc::MADV_HUGEPAGE
        | libc::MADV_NOHUGEPAGE
        | MADV_COLLAPSE
        | libc::MADV_MERGEABLE
        | libc::MADV_UNMERGEABLE
        | libc::MADV_WIPEONFORK
        | libc::MADV_KEEPONFORK => Taken::Library,
        libc::MADV_NORMAL
        | libc::MADV_RANDOM
        | libc::MADV_SEQUENTIAL
        | libc::MADV_DONTFORK
        | libc::MADV_DOFORK
        | libc::MADV_DONTDUMP
        | libc::MADV_DODUMP
        | libc::MADV_HWPOISON
        | libc::MADV_SOFT_OFFLINE => Taken::Kernel,
        _ => Taken::Refused, // MADV_REMOVE (EINVAL on private memory too), and unknown advice
    }
}

/// The part of `addr..addr + len` in the far arena, if the range starts on a page and has
/// one.
pub(crate) fn far_part(addr: *mut c_void, len: usize) -> Option<(usize, usize)> {
    let (base, arena_end) = arena::bounds()?;
    let start = addr as usize;
    if !start.is_multiple_of(PAGE) || len == 0 {
        return None;
    }
    let end = start.checked_add(len)?.next_multiple_of(PAGE);
    let (far_start, far_end) = (start.max(base), end.min(arena_end));
    (far_start < far_end).then_some((far_start, far_end))
}

/// The parts of `addr..addr + len` before and after `far`.
pub(crate) fn outside(addr: usize, len: usize, far: (usize, usize)) -> impl Iterator<Item = (usize, usize)> {
    let end = addr + len;
    [(addr, far.0), (far.1, end)].into_iter().filter(|(a, b)| a < b)
}

/// Carries `advice` out on the far pages `far.0..far.1`.
fn advise_far(far: (usize, usize), advice: c_int) -> nam_farmem::Result<()> {
    let Some(region) = arena::region() else { return Ok(()) };
    let base = region.as_ptr() as usize;
    let (offset, len) = ((far.0 - base) as u64, (far.1 - far.0) as u64);
    match advice {
        libc::MADV_WILLNEED | MADV_POPULATE_READ | MADV_POPULATE_WRITE => {
            region.fetch_ranges(&[(offset, len)]).map(drop)
        }
        libc::MADV_PAGEOUT => region.evict_range(offset, len).map(drop),
        libc::MADV_DONTNEED | MADV_DONTNEED_LOCKED => {
            let page = region.page_bytes();
            if offset.is_multiple_of(page) && len.is_multiple_of(page) {
                // Zeroed without a fetch: resident pages in place (they stay, the allocator
                // that gave them up usually reuses them soon), missing ones from zeros.
                return region.zero_range(offset, len).map(drop);
            }
            // Parts of huge pages: the pager's unit is the huge page, so the range is
            // zeroed through the mapping and written back.
            // SAFETY: pages of the far arena, which the caller gives up.
            unsafe { std::ptr::write_bytes(far.0 as *mut u8, 0, far.1 - far.0) };
            region.evict_range(offset, len).map(drop)
        }
        _ => Ok(()), // MADV_FREE, MADV_COLD, and the advice accepted without effect
    }
}
