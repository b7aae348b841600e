//! The fold kernels: XOR many buffers into one and checksum every input and the result on
//! the way, so each byte crosses the memory bus once.
//!
//! A parity segment is built (or a lost segment rebuilt) a sub-block at a time: the
//! sources' sub-blocks are checksummed and XORed into the output sub-block while they sit in
//! the core's L2 cache, and the output sub-block is checksummed before it leaves. Doing the
//! checksums as separate passes over whole segments read every source twice from memory and
//! made the checksums, not the XOR, the server's bottleneck (CRC-32C through the scalar
//! `crc32` instruction runs at about the speed of memory; `nam_proto::checksum` computes it
//! with carry-less multiplication, about twice as fast).

pub(super) use crate::constants::CKPT_FOLD_SUB_BLOCK_BYTES as SUB_BLOCK;
use nam_proto::checksum::RunningCrc;

/// The checksums one [`fold_segment`] call computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FoldSums {
    /// CRC-32C of each source's own bytes, in the order given (empty unless asked for).
    pub(super) sources: Vec<u32>,
    /// CRC-32C of the output after the fold (`None` unless asked for).
    pub(super) output: Option<u32>,
}

/// Folds `sources` into `out`: `out ^= s0 ^ s1 ^ ...` when `accumulate`, otherwise
/// `out = s0 ^ s1 ^ ...`. A source shorter than `out` counts as zero-padded; none may be
/// longer. Checksums each source when `sum_sources` and the result when `sum_output`.
pub(super) fn fold_segment(
    out: &mut [u8],
    accumulate: bool,
    sources: &[&[u8]],
    sum_sources: bool,
    sum_output: bool,
) -> FoldSums {
    assert!(sources.iter().all(|s| s.len() <= out.len()), "a source is longer than the fold's output");
    let mut source_crcs: Vec<RunningCrc> =
        if sum_sources { sources.iter().map(|_| RunningCrc::new()).collect() } else { Vec::new() };
    let mut output_crc = sum_output.then(RunningCrc::new);
    let mut whole: Vec<&[u8]> = Vec::with_capacity(sources.len());
    for (b, block) in out.chunks_mut(SUB_BLOCK).enumerate() {
        let (at, end) = (b * SUB_BLOCK, b * SUB_BLOCK + block.len());
        whole.clear();
        whole.extend(sources.iter().filter(|s| s.len() >= end).map(|s| &s[at..end]));
        xor_block(block, accumulate, &whole);
        // Sources ending inside this block: their bytes, zero-padded after.
        for s in sources.iter().filter(|s| s.len() > at && s.len() < end) {
            xor_into(&mut block[..s.len() - at], &s[at..]);
        }
        for (crc, s) in source_crcs.iter_mut().zip(sources) {
            if s.len() > at {
                crc.update(&s[at..s.len().min(end)]);
            }
        }
        if let Some(crc) = output_crc.as_mut() {
            crc.update(block);
        }
    }
    FoldSums { sources: source_crcs.iter().map(RunningCrc::value).collect(), output: output_crc.map(|c| c.value()) }
}

/// `dst (^)= srcs[0] ^ srcs[1] ^ ...` over equal lengths, 64 bytes at a time in registers:
/// each source is read once and `dst` written once, instead of one read-modify-write pass
/// over `dst` per source. With no sources and no `accumulate`, `dst` becomes zeros.
pub(super) fn xor_block(dst: &mut [u8], accumulate: bool, srcs: &[&[u8]]) {
    const LANE: usize = 64;
    let blocks = dst.len() / LANE;
    for (b, out) in dst.chunks_exact_mut(LANE).enumerate() {
        let at = b * LANE;
        let mut acc = [0u64; LANE / 8];
        if accumulate {
            for (k, word) in acc.iter_mut().enumerate() {
                *word = u64::from_ne_bytes(out[8 * k..8 * k + 8].try_into().expect("8 bytes"));
            }
        }
        for src in srcs {
            let lane: &[u8; LANE] = src[at..at + LANE].try_into().expect("a whole lane");
            for (k, word) in acc.iter_mut().enumerate() {
                *word ^= u64::from_ne_bytes(lane[8 * k..8 * k + 8].try_into().expect("8 bytes"));
            }
        }
        for (k, word) in acc.iter().enumerate() {
            out[8 * k..8 * k + 8].copy_from_slice(&word.to_ne_bytes());
        }
    }
    let tail = &mut dst[blocks * LANE..];
    if !accumulate {
        tail.fill(0);
    }
    for src in srcs {
        xor_into(tail, &src[blocks * LANE..]);
    }
}

/// `dst ^= src`, a word at a time (the compiler vectorises the loop).
pub(super) fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    let (d_words, d_tail) = dst.split_at_mut(dst.len() / 8 * 8);
    let (s_words, s_tail) = src.split_at(d_words.len());
    for (d, s) in d_words.chunks_exact_mut(8).zip(s_words.chunks_exact(8)) {
        let x = u64::from_ne_bytes(d.try_into().unwrap()) ^ u64::from_ne_bytes(s.try_into().unwrap());
        d.copy_from_slice(&x.to_ne_bytes());
    }
    for (d, s) in d_tail.iter_mut().zip(s_tail) {
        *d ^= s;
    }
}

#[cfg(test)]
mod tests {
    use super::{fold_segment, xor_into, SUB_BLOCK};
    use nam_proto::checksum::crc32c;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed.wrapping_mul(77) ^ (i >> 9) as u8).collect()
    }

    /// The reference: zero-padded sources XORed one after another.
    fn reference(start: &[u8], accumulate: bool, sources: &[Vec<u8>]) -> Vec<u8> {
        let mut out = if accumulate { start.to_vec() } else { vec![0; start.len()] };
        for s in sources {
            xor_into(&mut out[..s.len()], s);
        }
        out
    }

    #[test]
    fn fold_matches_reference_with_uneven_sources_and_tails() {
        let out_len = 2 * SUB_BLOCK + 100;
        let lengths = [out_len, 0, 7, SUB_BLOCK, SUB_BLOCK + 1, out_len - 3, 64];
        let sources: Vec<Vec<u8>> = lengths.iter().enumerate().map(|(k, &n)| pattern(n, k as u8)).collect();
        let views: Vec<&[u8]> = sources.iter().map(|s| &s[..]).collect();
        for accumulate in [false, true] {
            let start = pattern(out_len, 200);
            let mut out = start.clone();
            let sums = fold_segment(&mut out, accumulate, &views, true, true);
            assert_eq!(out, reference(&start, accumulate, &sources), "accumulate {accumulate}");
            let want: Vec<u32> = sources.iter().map(|s| crc32c(s)).collect();
            assert_eq!(sums.sources, want);
            assert_eq!(sums.output, Some(crc32c(&out)));
        }
    }

    #[test]
    fn fold_of_nothing_zeroes_or_keeps() {
        let mut out = pattern(1000, 1);
        let sums = fold_segment(&mut out, true, &[], false, false);
        assert_eq!(out, pattern(1000, 1));
        assert_eq!(sums.sources, Vec::<u32>::new());
        assert_eq!(sums.output, None);
        fold_segment(&mut out, false, &[], false, false);
        assert!(out.iter().all(|&b| b == 0));
    }
}
