//! A copy that bypasses the cache on its stores (non-temporal stores on x86-64).
//!
//! The RAM level copies each chunk of the application's data into tmpfs pages that nobody
//! reads soon. Ordinary stores first read every destination line into the cache (a
//! read-for-ownership), so a copy moves three bytes over the memory bus per byte copied;
//! non-temporal stores write whole lines straight to memory, as glibc's `memcpy` does for
//! copies larger than the cache, so the level's writer moves no more bytes than `memcpy`.
//! The source is read normally: the writer has just read it for the chunk's CRC32C, so it
//! comes from the cache. Other targets fall back to `copy_from_slice`.

/// Copies `src` into `dst` (same length) with non-temporal stores where the target has them.
/// Call [`fence`] before the copied bytes are published to other threads or processes.
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "stream copy of equal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        // Unaligned head, so that the body's stores are 16-byte aligned.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let body = (dst.len() - head) / 64 * 64;
        // SAFETY: both ranges are in bounds (`head + body <= len`), the stores are 16-byte
        // aligned by construction, and SSE2 is part of the x86-64 baseline.
        unsafe { stream64(dst[head..].as_mut_ptr(), src[head..].as_ptr(), body) };
        dst[head + body..].copy_from_slice(&src[head + body..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Orders the non-temporal stores of earlier [`copy`] calls before later stores.
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions (SSE, part of the x86-64 baseline).
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
}

/// Streams `len` bytes (a multiple of 64) from `src` to the 16-byte aligned `dst`.
#[cfg(target_arch = "x86_64")]
unsafe fn stream64(dst: *mut u8, src: *const u8, len: usize) {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let mut at = 0;
    while at < len {
        // SAFETY: (the caller's) `at + 64 <= len`, so the four loads and stores are in bounds.
        unsafe {
            let s = src.add(at).cast::<__m128i>();
            let d = dst.add(at).cast::<__m128i>();
            let v =
                [_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3))];
            for (i, v) in v.into_iter().enumerate() {
                _mm_stream_si128(d.add(i), v);
            }
        }
        at += 64;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_every_alignment_and_length() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 31 + 7) as u8).collect();
        for offset in 0..20 {
            for len in [0, 1, 15, 16, 63, 64, 65, 200, 900] {
                let mut dst = vec![0u8; 1000];
                super::copy(&mut dst[offset..offset + len], &src[3..3 + len]);
                super::fence();
                assert_eq!(&dst[offset..offset + len], &src[3..3 + len]);
                assert!(dst[..offset].iter().chain(&dst[offset + len..]).all(|&b| b == 0));
            }
        }
    }
}
