//! P+Q parity across the chunks of a stripe (RAID-6, as Linux md computes it): the code the
//! RAM level uses for one or two parity chunks per stripe.
//!
//! Over GF(2^8) with the polynomial x^8+x^4+x^3+x^2+1 (0x11D) and generator g = 2, a stripe
//! of data chunks D_0..D_{n-1} has P = XOR of all D_i and Q = sum of g^(n-1-i) * D_i, computed
//! by Horner's rule as the chunks stream by (Q = 2*Q ^ D_i), so each byte of data costs an
//! XOR, a multiply by 2 (a shift and a conditional XOR) and an XOR, all on words, in the
//! same pass that copies and checksums it. Reed-Solomon through `reed_solomon_simd` costs
//! about as much as the copy itself on this machine (4-6 GB/s for 16+2 on cached data);
//! P+Q keeps the RAM level's writer at the speed of its memory traffic. Up to two lost
//! chunks of a stripe (whose CRC32C fails) are rebuilt, as with any MDS code of two
//! parities; the coefficients are distinct for stripes of up to [`MAX_DATA`] chunks.

/// Most data chunks per stripe (g^i are distinct for i < 255; [`crate::constants`]).
pub use crate::constants::PQ_MAX_DATA as MAX_DATA;

/// Multiplies every byte lane of `w` by 2 in GF(2^8)/0x11D.
#[inline(always)]
fn times2(w: u64) -> u64 {
    let high = (w >> 7) & 0x0101_0101_0101_0101;
    ((w << 1) & 0xfefe_fefe_fefe_fefe) ^ (high * 0x1d)
}

/// Folds one chunk's words into P and Q (missing bytes of the last word are zeros).
#[inline(always)]
fn fold_words(p: &mut [u64], q: &mut [u64], data: &[u8]) {
    let words = data.chunks_exact(8);
    let tail = words.remainder();
    let n = words.len();
    for ((p, q), d) in p.iter_mut().zip(q.iter_mut()).zip(words) {
        let w = u64::from_ne_bytes(d.try_into().expect("8 bytes"));
        *p ^= w;
        *q = times2(*q) ^ w;
    }
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        let w = u64::from_ne_bytes(last);
        p[n] ^= w;
        q[n] = times2(q[n]) ^ w;
    }
}

/// [`fold_words`] with AVX2: 32 byte lanes at a time, times 2 as add, compare and mask.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fold_avx2(p: &mut [u64], q: &mut [u64], data: &[u8]) {
    use core::arch::x86_64::*;
    assert!(p.len() * 8 >= data.len() && q.len() * 8 >= data.len(), "fold within the chunk");
    let vectors = data.len() / 32;
    let (poly, zero) = (_mm256_set1_epi8(0x1d), _mm256_setzero_si256());
    for i in 0..vectors {
        // SAFETY: `i * 32 + 32 <= data.len()`, within p and q too (asserted); unaligned
        // loads and stores; AVX2 is enabled on this function.
        unsafe {
            let d = _mm256_loadu_si256(data.as_ptr().add(i * 32).cast());
            let (pp, qp) = (p.as_mut_ptr().add(i * 4).cast::<__m256i>(), q.as_mut_ptr().add(i * 4).cast::<__m256i>());
            _mm256_storeu_si256(pp, _mm256_xor_si256(_mm256_loadu_si256(pp), d));
            let qv = _mm256_loadu_si256(qp);
            let reduce = _mm256_and_si256(_mm256_cmpgt_epi8(zero, qv), poly);
            _mm256_storeu_si256(qp, _mm256_xor_si256(_mm256_xor_si256(_mm256_add_epi8(qv, qv), reduce), d));
        }
    }
    fold_words(&mut p[vectors * 4..], &mut q[vectors * 4..], &data[vectors * 32..])
}

use crate::constants::PQ_SKEW_WORDS as SKEW;

/// P and Q of one stripe, accumulated chunk by chunk in stripe order.
pub struct Accumulator {
    /// P, then [`SKEW`] unused words, then Q.
    words: Vec<u64>,
    chunk: usize,
    avx2: bool,
}

impl Accumulator {
    /// For chunks of `chunk` bytes (a multiple of 8).
    pub fn new(chunk: usize) -> Accumulator {
        assert!(chunk.is_multiple_of(8), "P+Q chunks are whole words");
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        Accumulator { words: vec![0; chunk / 4 + SKEW], chunk, avx2 }
    }

    /// Folds `bytes` found at byte `offset` (a multiple of 8) of the current chunk. Every word
    /// of every chunk of the stripe is folded once, chunk after chunk: bytes a chunk lacks
    /// (a short last chunk, chunks past the end of the data) through [`Accumulator::zeros`].
    pub fn fold(&mut self, offset: usize, bytes: &[u8]) {
        debug_assert!(offset.is_multiple_of(8) && offset + bytes.len() <= self.chunk);
        let avx2 = self.avx2;
        let (p, q) = self.split_mut();
        let (p, q) = (&mut p[offset / 8..], &mut q[offset / 8..]);
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: AVX2 is present (checked at run time).
            return unsafe { fold_avx2(p, q, bytes) };
        }
        fold_words(p, q, bytes)
    }

    /// Folds zeros into the words from byte `offset` (rounded up to a word) to the chunk's end.
    pub fn zeros(&mut self, offset: usize) {
        for q in &mut self.split_mut().1[offset.div_ceil(8)..] {
            *q = times2(*q);
        }
    }

    /// The parity chunks, P then Q (as many as asked, at most 2).
    pub fn chunks(&self, parity: usize) -> impl Iterator<Item = &[u8]> {
        let n = self.chunk / 8;
        [&self.words[..n], &self.words[n + SKEW..]].into_iter().take(parity).map(|w| {
            // SAFETY: viewing initialized u64 words as bytes (alignment 1, same length).
            unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len() * 8) }
        })
    }

    /// (P, Q).
    fn split_mut(&mut self) -> (&mut [u64], &mut [u64]) {
        let (p, q) = self.words.split_at_mut(self.chunk / 8);
        (p, &mut q[SKEW..])
    }

    /// Starts the next stripe.
    pub fn reset(&mut self) {
        self.words.fill(0);
    }
}

/// The parity of whole chunks (each zero-padded to `chunk`), P then Q.
pub fn encode(chunk: usize, data: &[&[u8]]) -> Accumulator {
    let mut acc = Accumulator::new(chunk);
    for d in data {
        acc.fold(0, d);
        acc.zeros(d.len());
    }
    acc
}

/// GF(2^8)/0x11D: (exp, log) tables of g = 2.
fn tables() -> &'static ([u8; 512], [u8; 256]) {
    static TABLES: std::sync::OnceLock<([u8; 512], [u8; 256])> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let (mut exp, mut log) = ([0u8; 512], [0u8; 256]);
        let mut x = 1u16;
        for i in 0..255 {
            exp[i] = x as u8;
            exp[i + 255] = x as u8;
            log[x as usize] = i as u8;
            x <<= 1;
            if x & 0x100 != 0 {
                x ^= 0x11d;
            }
        }
        (exp, log)
    })
}

fn mul(a: u8, b: u8) -> u8 {
    let (exp, log) = tables();
    if a == 0 || b == 0 {
        0
    } else {
        exp[log[a as usize] as usize + log[b as usize] as usize]
    }
}

fn div(a: u8, b: u8) -> u8 {
    let (exp, log) = tables();
    if a == 0 {
        0
    } else {
        exp[log[a as usize] as usize + 255 - log[b as usize] as usize]
    }
}

/// Rebuilds the `lost` data chunks (indices into `data`, whose chunks are zero-padded to
/// `chunk`; lost ones may hold anything) from the stripe's good parity chunks `p` and `q`.
/// Err says why not (more chunks lost than good parity chunks).
pub fn rebuild(
    chunk: usize,
    data: &mut [Vec<u8>],
    lost: &[usize],
    p: Option<&[u8]>,
    q: Option<&[u8]>,
) -> Result<(), String> {
    let n = data.len();
    for &x in lost {
        data[x].fill(0);
    }
    let views: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let partial = encode(chunk, &views);
    let mut partial = partial.chunks(2);
    let (pp, qp) = (partial.next().expect("P"), partial.next().expect("Q"));
    let coef = |i: usize| tables().0[n - 1 - i];
    match (lost, p, q) {
        ([x], Some(p), _) => data[*x] = p.iter().zip(pp).map(|(a, b)| a ^ b).collect(),
        ([x], None, Some(q)) => data[*x] = q.iter().zip(qp).map(|(a, b)| div(a ^ b, coef(*x))).collect(),
        ([x, y], Some(p), Some(q)) => {
            // P' = D_x ^ D_y and Q' = c_x D_x ^ c_y D_y, so D_x = (Q' ^ c_y P') / (c_x ^ c_y).
            let (cx, cy) = (coef(*x), coef(*y));
            let pxy: Vec<u8> = p.iter().zip(pp).map(|(a, b)| a ^ b).collect();
            let qxy = q.iter().zip(qp).map(|(a, b)| a ^ b);
            let dx: Vec<u8> = qxy.zip(&pxy).map(|(qxy, &pxy)| div(qxy ^ mul(cy, pxy), cx ^ cy)).collect();
            data[*y] = pxy.iter().zip(&dx).map(|(a, b)| a ^ b).collect();
            data[*x] = dx;
        }
        _ => {
            let good = usize::from(p.is_some()) + usize::from(q.is_some());
            return Err(format!("{} chunks lost, only {good} good parity chunks", lost.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_two_lost_chunks_are_rebuilt() {
        let chunk = 64;
        let data: Vec<Vec<u8>> =
            (0..5u32).map(|c| (0..chunk as u32).map(|i| (i * 13 + c * 101) as u8).collect()).collect();
        let views: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let acc = encode(chunk, &views);
        let parity: Vec<Vec<u8>> = acc.chunks(2).map(|c| c.to_vec()).collect();
        assert_eq!(parity[0], (0..chunk).map(|i| data.iter().fold(0, |a, d| a ^ d[i])).collect::<Vec<_>>());
        for x in 0..5 {
            for y in x..5 {
                let lost: Vec<usize> = if x == y { vec![x] } else { vec![x, y] };
                for (p, q) in [(true, true), (false, true), (true, false)] {
                    if lost.len() == 2 && !(p && q) {
                        continue;
                    }
                    let mut broken = data.clone();
                    for &l in &lost {
                        broken[l].fill(0xa5);
                    }
                    let (p, q) = (p.then_some(&parity[0][..]), q.then_some(&parity[1][..]));
                    rebuild(chunk, &mut broken, &lost, p, q).unwrap();
                    assert_eq!(broken, data, "lost {lost:?}");
                }
            }
        }
        let mut broken = data.clone();
        assert!(rebuild(chunk, &mut broken, &[0, 1, 2], Some(&parity[0]), Some(&parity[1])).is_err());
    }
}
