//! The few system calls the checkpoint engine makes: waking ranks that sleep on a control
//! word, faulting in memory ahead of use, and the process's CPU clock.

use crate::constants::PAGE_BYTES;
use std::time::Duration;

/// CPU time of this process so far, every thread (the engine folds with a thread pool).
pub(super) fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wakes the ranks sleeping on a control word (mapped into their processes through shared
/// memory, see nam-client's `futex` module) after it changed. A shared futex: the word's
/// page is shared memory, so the kernel matches sleepers in other processes; with none the
/// call costs a syscall, once per rank per epoch.
pub(super) fn wake_sleepers(word: &std::sync::atomic::AtomicU64) {
    let low = if cfg!(target_endian = "little") {
        word.as_ptr() as *const u32
    } else {
        (word.as_ptr() as *const u32).wrapping_add(1)
    };
    // SAFETY: FUTEX_WAKE only looks the address up; it stays mapped (the control block).
    unsafe { libc::syscall(libc::SYS_futex, low, libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// Faults in the pages of `[base, base + len)` ahead of use (`MADV_POPULATE_*`, Linux 5.14):
/// a rank's mapped buffer and a new parity slot are read or written whole at every epoch,
/// and taking their page faults one by one inside the first epoch cost about half its time.
/// Best effort: an older kernel just faults them in later.
pub(super) fn prefault(base: *mut u8, len: usize, advice: libc::c_int) {
    const PAGE: usize = PAGE_BYTES as usize;
    let start = base as usize / PAGE * PAGE;
    let end = (base as usize + len).div_ceil(PAGE) * PAGE;
    // SAFETY: the range covers memory mapped into this process (a rank's buffer mapped by
    // UCX, or the pool); MADV_POPULATE_* only faults pages in, it never changes contents.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
    if rc != 0 {
        log::debug!("madvise(MADV_POPULATE) failed: {}", std::io::Error::last_os_error());
    }
}
