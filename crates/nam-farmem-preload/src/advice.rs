//! `madvise(2)` and `posix_madvise(3)` on far memory: the pager owns the far arena's pages,
//! so advice on them goes to it instead of the kernel.
//!
//! - `MADV_WILLNEED` (and `POSIX_MADV_WILLNEED`): the pages are fetched now
//!   ([`nam_farmem::PagedRegion::fetch_ranges`], half the local budget at most), so that the
//!   reads that follow do not fault.
//! - `MADV_PAGEOUT`: dirty pages are written back and the range is dropped from local memory
//!   ([`nam_farmem::PagedRegion::evict_range`]).
//! - `MADV_DONTNEED`: the range reads as zeros afterwards, as anonymous memory does (it is
//!   zeroed and then dropped like `MADV_PAGEOUT`). Passed to the kernel, the pages would come
//!   back from the servers with their old contents instead.
//! - `MADV_FREE`: nothing (the kernel may keep the contents too).
//!
//! Other advice, and the parts of a range outside the arena, go to the kernel as without
//! this library; so does a range that does not start on a page (the kernel refuses it). A
//! pager that fails (a server died) makes the call fail with `EIO`.
//!
//! **UCX's memory hooks come first.** Unless `UCX_MEM_EVENTS=no` is set, UCX patches the
//! `madvise` that the program's calls reach (this library's) into a jump to its own hook,
//! which makes the system call itself: the advice then reaches the kernel as without this
//! library. `MADV_WILLNEED` and `MADV_PAGEOUT` are then left to the kernel, and pages that
//! `MADV_DONTNEED` drops come back from the servers as of their last write-back (the pager
//! notices, see `PagedRegion`), not as zeros. `UCX_MEM_EVENTS=no` costs UCX its
//! registration cache, which only RDMA transports use.

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
    let Some(far) = far_part(addr, len).filter(|_| owned(advice)) else {
        return kernel(addr, len, advice);
    };
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

/// Whether the library takes `advice` for far memory (the rest goes to the kernel).
fn owned(advice: c_int) -> bool {
    matches!(advice, libc::MADV_WILLNEED | libc::MADV_PAGEOUT | libc::MADV_DONTNEED | libc::MADV_FREE)
}

/// The part of `addr..addr + len` in the far arena, if the range starts on a page and has
/// one.
fn far_part(addr: *mut c_void, len: usize) -> Option<(usize, usize)> {
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
fn outside(addr: usize, len: usize, far: (usize, usize)) -> impl Iterator<Item = (usize, usize)> {
    let end = addr + len;
    [(addr, far.0), (far.1, end)].into_iter().filter(|(a, b)| a < b)
}

/// Carries `advice` out on the far pages `far.0..far.1`.
fn advise_far(far: (usize, usize), advice: c_int) -> nam_farmem::Result<()> {
    let Some(region) = arena::region() else { return Ok(()) };
    let base = region.as_ptr() as usize;
    let (offset, len) = ((far.0 - base) as u64, (far.1 - far.0) as u64);
    match advice {
        libc::MADV_WILLNEED => region.fetch_ranges(&[(offset, len)]).map(drop),
        libc::MADV_PAGEOUT => region.evict_range(offset, len).map(drop),
        libc::MADV_DONTNEED => {
            // SAFETY: pages of the far arena, which the caller gives up.
            unsafe { std::ptr::write_bytes(far.0 as *mut u8, 0, far.1 - far.0) };
            region.evict_range(offset, len).map(drop)
        }
        _ => Ok(()), // MADV_FREE: the contents may stay
    }
}
