//! The direct path: on a shared-memory data path the server's pool is mapped into this
//! process (UCX's `ucp_rkey_ptr`), so puts and gets are plain copies and atomics are CPU
//! atomics on the mapped words, with neither the client lock nor a UCX request: the native
//! load/store path of Schmidt 2017 and the Unimem MPhil thesis. It is coherent with every
//! other way a word is reached: UCX's shared-memory atomics and the server's message path
//! use the same CPU atomics on the same memory.
//!
//! Every function here is called only for an allocation that is mapped (the path table
//! chooses this path only then) and whose range the caller checked.

use super::{Atomic, SignalPut, Store};
use crate::allocation::Allocation;
use crate::constants::STREAMING_BYTES_MIN;
use crate::error::Result;
use crate::session::Session;
use crate::signal::SignalOp;
use std::sync::atomic::Ordering::{Acquire, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The local address of `allocation`'s first byte if it is mapped here and its server is
/// alive as far as this client knows; `None` if it is not mapped.
#[inline]
pub(crate) fn base(session: &Session, allocation: &Allocation, what: &'static str) -> Result<Option<usize>> {
    if allocation.local == 0 {
        return Ok(None);
    }
    session.alive(allocation.server, what)?;
    Ok(Some(allocation.local))
}

/// This process's address of byte `offset` of a mapped allocation.
#[inline]
fn at(allocation: &Allocation, offset: u64) -> usize {
    debug_assert!(allocation.local != 0, "the direct path is chosen only for mapped allocations");
    allocation.local + offset as usize
}

/// Copies `data` to byte `offset`.
#[inline]
pub(crate) fn put(session: &Session, a: &Allocation, offset: u64, data: &[u8], store: Store) -> Result<()> {
    session.alive(a.server, "put")?;
    let dst = at(a, offset) as *mut u8;
    // SAFETY: the caller checked offset + len against the allocation, which lies inside
    // the pool mapping that this client's remote key keeps mapped.
    unsafe {
        match store {
            Store::Cached => crate::copy::copy(dst, data.as_ptr(), data.len()),
            Store::Streaming => copy_streaming(dst, data),
        }
    }
    let at = a.remote_addr + offset;
    session.wake_direct(a, (at, at + data.len() as u64), false);
    session.count_direct_put(data.len());
    Ok(())
}

/// Copies from byte `offset` into `buffer`.
#[inline]
pub(crate) fn get(session: &Session, a: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
    session.alive(a.server, "get")?;
    // SAFETY: as in `put`.
    unsafe { crate::copy::copy(buffer.as_mut_ptr(), at(a, offset) as *const u8, buffer.len()) };
    session.count_direct_get(buffer.len());
    Ok(())
}

/// The 64-bit word at `offset` (8-byte aligned, checked by the caller), counted as one
/// atomic.
#[inline]
pub(crate) fn word<'a>(session: &Session, a: &'a Allocation, offset: u64, what: &'static str) -> Result<&'a AtomicU64> {
    session.alive(a.server, what)?;
    session.count_direct_atomic();
    // SAFETY: aligned (pool and allocations are 64-byte aligned, offset % 8 == 0) and in
    // bounds; AtomicU64 has u64's layout; the mapping outlives the allocation's use.
    Ok(unsafe { &*(at(a, offset) as *const AtomicU64) })
}

/// A CPU atomic on the 64- or 32-bit word at `offset`; returns the old value
/// (zero-extended). Wakes whoever sleeps on the word ([`crate::wake`]).
#[inline]
pub(crate) fn atomic(session: &Session, a: &Allocation, offset: u64, atomic: Atomic) -> Result<u64> {
    let Atomic { op, value, compare } = atomic;
    let word = word(session, a, offset & !7, "atomic")?;
    let old = if op.width_bytes() == 8 {
        op.apply64(word, value, compare)
    } else {
        // SAFETY: the 4-byte aligned half of the aligned word `word`; AtomicU32 has u32's layout.
        let half = unsafe { &*((word.as_ptr() as *const u8).add((offset & 4) as usize) as *const AtomicU32) };
        op.apply32(half, value as u32, compare as u32).into()
    };
    let at = a.remote_addr + offset;
    session.wake_direct(a, (at, at + op.width_bytes()), true);
    Ok(old)
}

/// A plain acquire load of the word at `offset` (not a read-modify-write: a poller must not
/// take the line away from the writer), counted as an 8-byte get.
#[inline]
pub(crate) fn load(session: &Session, a: &Allocation, offset: u64) -> Result<u64> {
    session.alive(a.server, "get")?;
    // SAFETY: as in `word`.
    let word = unsafe { &*(at(a, offset) as *const AtomicU64) };
    let value = word.load(Acquire);
    session.count_direct_get(8);
    Ok(value)
}

/// Sleeps on the futex of the word at `offset` while it holds `seen` (registered in the wake
/// table so that signallers wake it; see [`crate::wake`]), at most until `until`.
pub(crate) fn sleep(
    session: &Session,
    a: &Allocation,
    offset: u64,
    watch: crate::wait::WordWatch,
    seen: u64,
    until: std::time::Instant,
) -> Result<()> {
    session.alive(a.server, "wait")?;
    // The kernel compares 32 bits: the low half of a 64-bit word (little-endian).
    let futex_offset = if cfg!(target_endian = "little") || watch.width_bytes == 4 { offset } else { offset + 4 };
    let key = a.remote_addr + futex_offset;
    let sleeper = session.sleep_on(a.server, key);
    // Registered: read again, so that a signal stored before the registration is not missed.
    // SAFETY: in bounds and aligned (checked by the caller); the mapping outlives the call.
    let word: u64 = unsafe {
        if watch.width_bytes == 8 {
            (*(at(a, offset) as *const AtomicU64)).load(SeqCst)
        } else {
            (*(at(a, offset) as *const AtomicU32)).load(SeqCst).into()
        }
    };
    if word != seen || watch.holds(word) {
        return Ok(());
    }
    let now = std::time::Instant::now();
    let mut nap = until.saturating_duration_since(now);
    if sleeper.is_none() {
        nap = nap.min(crate::constants::WAIT_SLEEP_UNREGISTERED);
    }
    let low = if watch.width_bytes == 8 && cfg!(target_endian = "big") { (seen >> 32) as u32 } else { seen as u32 };
    crate::wake::futex_wait(at(a, futex_offset), low, nap);
    drop(sleeper);
    Ok(())
}

/// Copies `data`, then updates the signal word; the SeqCst atomic orders the copy before the
/// signal for every observer.
#[inline]
pub(crate) fn put_signal(session: &Session, put_signal: SignalPut<'_>) -> Result<()> {
    let SignalPut { data, offset, bytes, word: signal, word_offset, value, op } = put_signal;
    put(session, data, offset, bytes, Store::Cached)?;
    let word = word(session, signal, word_offset, "put_signal")?;
    match op {
        SignalOp::Set => word.store(value, SeqCst),
        SignalOp::Add => {
            word.fetch_add(value, SeqCst);
        }
    }
    let at = signal.remote_addr + word_offset;
    session.wake_direct(signal, (at, at + 8), true);
    Ok(())
}

/// Copies `src` to `dst` with non-temporal stores for the 16-byte aligned middle and plain
/// copies for the ends, then fences the streaming stores so that they are ordered before
/// every later store (a flag the reader polls, say), as ordinary stores are. See
/// [`crate::Client::put_streaming`] for why.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn copy_streaming(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let len = src.len();
    if len < STREAMING_BYTES_MIN {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, len);
        return;
    }
    let head = dst.align_offset(16).min(len);
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
    let mut at = head;
    while at + 64 <= len {
        // Four 16-byte streaming stores per 64-byte line: the line is written whole, so the
        // write-combining buffer sends it to memory without reading it first.
        for k in (0..64).step_by(16) {
            let v = _mm_loadu_si128(src.as_ptr().add(at + k).cast::<__m128i>());
            _mm_stream_si128(dst.add(at + k).cast::<__m128i>(), v);
        }
        at += 64;
    }
    std::ptr::copy_nonoverlapping(src.as_ptr().add(at), dst.add(at), len - at);
    _mm_sfence();
}

/// Elsewhere: a plain copy.
///
/// # Safety
/// As on x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn copy_streaming(dst: *mut u8, src: &[u8]) {
    let _ = STREAMING_BYTES_MIN;
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
}

#[cfg(test)]
mod tests {
    use super::copy_streaming;

    #[test]
    fn streaming_copies_every_byte_whatever_the_alignment() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for (dst_off, src_off, len) in [(0, 0, 20_000 - 8), (3, 5, 9_001), (13, 0, 4_096), (1, 1, 100), (0, 7, 0)] {
            let mut dst = vec![0xeeu8; 20_016];
            // SAFETY: dst has room for len bytes from dst_off; distinct vectors.
            unsafe { copy_streaming(dst.as_mut_ptr().add(dst_off), &src[src_off..src_off + len]) };
            assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..src_off + len], "({dst_off}, {src_off}, {len})");
            assert!(dst[..dst_off].iter().chain(&dst[dst_off + len..]).all(|&b| b == 0xee), "wrote outside");
        }
    }
}
