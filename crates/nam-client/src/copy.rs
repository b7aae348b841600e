//! The copy a direct put or get makes between the caller's buffer and the mapped pool.
//!
//! It is `memcpy`, except where `memcpy` is pathologically slow: glibc copies from about
//! 2 KiB up to the size of a core's L2 with `rep movsb`, and on AMD Zen cores (which report
//! fast `rep movsb`, FSRM) that instruction runs some 20 times slower when the destination
//! lies 1 to 63 bytes after the source modulo a 4 KiB page: the microcode compares only
//! the address bits within a page, takes the copy for an overlapping one and falls back to
//! small steps (measured on the development machine, AMD EPYC, glibc 2.36: 32 KiB in
//! 14 µs instead of 0.7 µs). The relation is an accident of two allocators: a get from a
//! page-aligned allocation into a `Vec` (whose heap block starts 16 bytes into its page)
//! hits it at every size from 4 KiB to 256 KiB, which made such gets 16 times slower than
//! OpenSHMEM's. For those relations this copies with a vector loop instead (unaligned
//! loads, aligned stores), as fast as `rep movsb` at its best.
//!
//! The same loop, with 32-byte AVX2 registers, also beats `rep movsb` where it is merely
//! slow: 1.3 to 1.6 times faster from 2 KiB to 16 KiB when source and destination are not
//! 32-byte aligned alike (a put from a `Vec` into the page-aligned pool), a few percent
//! faster up to 128 KiB, even at 256 KiB (same machine, best of nine runs). So with AVX2
//! every copy from 2 KiB to [`VECTOR_BYTES_MAX`] takes it. Larger copies are `memcpy`'s
//! (past a core's L2 glibc stops using `rep movsb` on AMD and runs a loop like this one),
//! as are copies without AVX2 outside the pathological relation.

/// Copies of fewer bytes never reach `rep movsb` (glibc's threshold is above 2 KiB): always
/// `memcpy`.
const VECTOR_BYTES_MIN: usize = 2048;

/// With AVX2, copies of up to this many bytes take the vector loop whatever the relation.
const VECTOR_BYTES_MAX: usize = 256 << 10;

/// Destinations this many bytes or fewer past the source, modulo a page, are the slow ones.
const ALIASED_BYTES_MAX: usize = 63;

/// Whether `memcpy` would copy `len` bytes from `src` to `dst` pathologically slowly (module
/// docs).
#[inline]
fn aliased(dst: *const u8, src: *const u8, len: usize) -> bool {
    let ahead = (dst as usize).wrapping_sub(src as usize) % 4096;
    len >= VECTOR_BYTES_MIN && ahead != 0 && ahead <= ALIASED_BYTES_MAX
}

/// Whether the vector loop copies `len` bytes from `src` to `dst` (module docs).
#[inline]
fn vector(dst: *const u8, src: *const u8, len: usize) -> bool {
    ((VECTOR_BYTES_MIN..=VECTOR_BYTES_MAX).contains(&len) && has_avx2()) || aliased(dst, src, len)
}

/// Whether the CPU has AVX2 (detected once; a load after that).
#[inline]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for `len` bytes of reads, `dst` for
/// `len` bytes of writes, not overlapping.
#[inline]
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    if vector(dst, src, len) {
        copy_vector(dst, src, len);
    } else {
        std::ptr::copy_nonoverlapping(src, dst, len);
    }
}

/// The vector loop: 32-byte AVX2 or 16-byte SSE2 registers, whichever the CPU has.
///
/// # Safety
/// As [`copy`], and `len >= 32`.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_vector(dst: *mut u8, src: *const u8, len: usize) {
    if has_avx2() {
        x86::copy_avx2(dst, src, len);
    } else {
        x86::copy_sse2(dst, src, len);
    }
}

/// Elsewhere `memcpy` has no such case.
///
/// # Safety
/// As [`copy`].
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_vector(dst: *mut u8, src: *const u8, len: usize) {
    std::ptr::copy_nonoverlapping(src, dst, len);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// One loop for both register widths: `$load`/`$store`/`$store_aligned` on `$width`-byte
    /// registers, four per step. The first and last `$width` bytes are copied with
    /// unaligned stores; between them every store is aligned, which is what keeps the loop
    /// at full speed whatever the source's alignment.
    macro_rules! vector_copy {
        ($name:ident, $feature:literal, $reg:ty, $width:expr, $load:ident, $store:ident, $store_aligned:ident) => {
            /// # Safety
            /// As [`super::copy`], `len >= width`, and the CPU has the target feature.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name(dst: *mut u8, src: *const u8, len: usize) {
                const W: usize = $width;
                debug_assert!(len >= W);
                $store(dst.cast::<$reg>(), $load(src.cast::<$reg>()));
                // From the first aligned destination byte after `dst` (at most W - 1 on).
                let mut at = dst.align_offset(W);
                while at + 4 * W <= len {
                    let (s, d) = (src.add(at), dst.add(at));
                    let a = $load(s.cast::<$reg>());
                    let b = $load(s.add(W).cast::<$reg>());
                    let c = $load(s.add(2 * W).cast::<$reg>());
                    let e = $load(s.add(3 * W).cast::<$reg>());
                    $store_aligned(d.cast::<$reg>(), a);
                    $store_aligned(d.add(W).cast::<$reg>(), b);
                    $store_aligned(d.add(2 * W).cast::<$reg>(), c);
                    $store_aligned(d.add(3 * W).cast::<$reg>(), e);
                    at += 4 * W;
                }
                while at + W <= len {
                    $store_aligned(dst.add(at).cast::<$reg>(), $load(src.add(at).cast::<$reg>()));
                    at += W;
                }
                $store(dst.add(len - W).cast::<$reg>(), $load(src.add(len - W).cast::<$reg>()));
            }
        };
    }

    vector_copy!(copy_avx2, "avx2", __m256i, 32, _mm256_loadu_si256, _mm256_storeu_si256, _mm256_store_si256);
    vector_copy!(copy_sse2, "sse2", __m128i, 16, _mm_loadu_si128, _mm_storeu_si128, _mm_store_si128);
}

#[cfg(test)]
mod tests {
    use super::{aliased, copy, has_avx2, vector, VECTOR_BYTES_MAX, VECTOR_BYTES_MIN};

    #[test]
    fn copies_every_byte_at_every_relation_and_length() {
        // Source and destination in one buffer at known page offsets: the destination
        // region starts 320 KiB (a whole number of pages) after the source region.
        const REGION: usize = 320 << 10;
        let mut buffer = vec![0u8; 2 * REGION + 8192];
        let page = buffer.as_ptr().align_offset(4096);
        let (src_region, dst_region) = buffer[page..page + 2 * REGION].split_at_mut(REGION);
        for (i, b) in src_region.iter_mut().enumerate() {
            *b = (i * 7 + i / 251) as u8;
        }
        let mut vector = 0;
        for len in [0, 1, 31, 32, 63, 64, 2047, 2048, 2049, 4096, 4097, 32_768 + 5, 70_001, 300_001] {
            for (src_off, dst_off) in [(0, 0), (0, 16), (16, 0), (3, 40), (64, 127), (5, 4096 + 68), (0, 8), (0, 63)] {
                dst_region.iter_mut().for_each(|b| *b = 0xee);
                let (s, d) = (&src_region[src_off..src_off + len], dst_region[dst_off..].as_mut_ptr());
                vector += usize::from(aliased(d, s.as_ptr(), len));
                // SAFETY: the destination region has room for len bytes from dst_off and
                // does not overlap the source region.
                unsafe { copy(d, s.as_ptr(), len) };
                assert_eq!(&dst_region[dst_off..dst_off + len], s, "len {len}, offsets ({src_off}, {dst_off})");
                let outside = dst_region[..dst_off].iter().chain(&dst_region[dst_off + len..]);
                assert!(outside.into_iter().all(|&b| b == 0xee), "wrote outside");
            }
        }
        // Six of the offset pairs (all but (0, 0) and (16, 0)) at the seven lengths from 2048 up.
        assert_eq!(vector, 42, "the vector loop took the aliased copies");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn both_register_widths_copy_every_byte() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 13 + 1) as u8).collect();
        for len in [32, 33, 127, 128, 129, 4096, 9_999] {
            for dst_off in [0, 1, 15, 16, 31] {
                let mut dst = vec![0u8; 10_100];
                // SAFETY: room for len bytes from dst_off; SSE2 is baseline on x86-64 and
                // AVX2 is checked.
                unsafe { super::x86::copy_sse2(dst.as_mut_ptr().add(dst_off), src.as_ptr(), len) };
                assert_eq!(&dst[dst_off..dst_off + len], &src[..len], "sse2, len {len}, dst +{dst_off}");
                if std::is_x86_feature_detected!("avx2") {
                    let mut dst = vec![0u8; 10_100];
                    // SAFETY: as above.
                    unsafe { super::x86::copy_avx2(dst.as_mut_ptr().add(dst_off), src.as_ptr(), len) };
                    assert_eq!(&dst[dst_off..dst_off + len], &src[..len], "avx2, len {len}, dst +{dst_off}");
                }
            }
        }
    }

    #[test]
    fn with_avx2_every_copy_from_2_to_256_kib_takes_the_loop() {
        let (dst, src) = ((1usize << 20) as *const u8, (3usize << 20) as *const u8);
        assert_eq!(vector(dst, src, VECTOR_BYTES_MIN), has_avx2());
        assert_eq!(vector(dst, src, VECTOR_BYTES_MAX), has_avx2());
        assert!(!vector(dst, src, VECTOR_BYTES_MIN - 1));
        assert!(!vector(dst, src, VECTOR_BYTES_MAX + 1), "memcpy's own loop past L2");
        assert!(vector(dst.wrapping_add(16), src, VECTOR_BYTES_MAX + 1), "aliased at any size");
    }

    #[test]
    fn only_short_forward_distances_within_a_page_count_as_aliased() {
        let base = 1 << 20;
        let at = |dst: usize, src: usize, len| aliased(dst as *const u8, src as *const u8, len);
        assert!(at(base + 16, base, VECTOR_BYTES_MIN));
        assert!(at(base + 4096 * 3 + 63, base, 1 << 16));
        assert!(!at(base + 16, base, VECTOR_BYTES_MIN - 1), "short copies stay memcpy's");
        assert!(!at(base, base, 1 << 16), "same offset in the page");
        assert!(!at(base + 64, base, 1 << 16));
        assert!(!at(base, base + 16, 1 << 16), "destination before the source");
    }
}
