//! Sleeping on a control word of a server's pool that is mapped into this process (same
//! host, shared memory). The server wakes a word's sleepers (`FUTEX_WAKE`) right after it
//! changes the word, so a rank waiting seconds for its checkpoint to be pulled sleeps once
//! instead of waking every few milliseconds to poll: the CPU a waiting rank spends on
//! redundancy is what issue 3 bounds. A process that maps the pool privately, or a server
//! that does not wake, only costs the timeout: callers re-check the word after every return.

use std::time::Duration;

/// Sleeps until the 64-bit word at `word` may differ from `seen`, its waker calls, or
/// `timeout` passes (spurious returns are allowed).
///
/// The kernel compares 32 bits: the word's low half, where the epoch's low bits live, so
/// every new epoch or status changes it.
pub(crate) fn wait(word: *const u64, seen: u64, timeout: Duration) {
    let low = low_half(word);
    let timeout = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: `word` points into the mapped pool for as long as the control allocation
    // lives (the caller holds it); FUTEX_WAIT only reads the 32 bits and sleeps.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low,
            libc::FUTEX_WAIT,
            seen as u32,
            &timeout as *const libc::timespec,
            0usize,
            0u32,
        )
    };
}

/// The address of the low 32 bits of the word at `word`.
fn low_half(word: *const u64) -> *const u32 {
    if cfg!(target_endian = "little") {
        word as *const u32
    } else {
        (word as *const u32).wrapping_add(1)
    }
}
