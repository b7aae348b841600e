//! The textbook Reed-Solomon encoder and syndrome calculator, generic over the field multiply.
//!
//! This is the obvious implementation: the generator polynomial, polynomial division for the
//! check symbols and Horner's rule for the syndromes, one field multiply per symbol and check
//! symbol. The table-driven [`crate::rs::RsCode`] is built from it and tested against it, and with
//! [`crate::gf::mul_naive`] plugged in it is the baseline of the throughput benchmark.

use crate::gf;

/// Generator polynomial g(x) = (x - α^0)(x - α^1)···(x - α^(r-1)), highest degree first
/// (so `g[0] == 1` and `g.len() == r + 1`).
pub fn generator_poly(r: usize, mul: impl Fn(u8, u8) -> u8) -> Vec<u8> {
    let mut g = vec![1u8];
    for j in 0..r {
        let root = gf::alpha_pow(j);
        // g(x) · (x + root): shift up one degree, add root · g.
        let mut next = vec![0u8; g.len() + 1];
        for (i, &coef) in g.iter().enumerate() {
            next[i] ^= coef;
            next[i + 1] ^= mul(coef, root);
        }
        g = next;
    }
    g
}

/// Check symbols of `data` (message first, highest degree first): the remainder of
/// data(x) · x^r divided by `generator` (as returned by [`generator_poly`]).
pub fn encode_checks(data: &[u8], generator: &[u8], mul: impl Fn(u8, u8) -> u8) -> Vec<u8> {
    let r = generator.len().saturating_sub(1);
    let mut remainder = vec![0u8; r];
    if r == 0 {
        return remainder;
    }
    for &symbol in data {
        let feedback = symbol ^ remainder[0];
        remainder.rotate_left(1);
        remainder[r - 1] = 0;
        if feedback != 0 {
            for (slot, &g) in remainder.iter_mut().zip(&generator[1..]) {
                *slot ^= mul(feedback, g);
            }
        }
    }
    remainder
}

/// Syndromes S_j = word(α^j), j = 0..r, by Horner's rule (word highest degree first).
pub fn syndromes(word: &[u8], r: usize, mul: impl Fn(u8, u8) -> u8) -> Vec<u8> {
    (0..r)
        .map(|j| {
            let x = gf::alpha_pow(j);
            word.iter().fold(0u8, |acc, &c| mul(acc, x) ^ c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ISO/IEC 18004 (QR code) worked example, version 1-M: 16 data codewords, 10 EC codewords.
    /// Widely published (e.g. the Wikiversity article "Reed–Solomon codes for coders").
    const QR_DATA: [u8; 16] =
        [0x40, 0xd2, 0x75, 0x47, 0x76, 0x17, 0x32, 0x06, 0x27, 0x26, 0x96, 0xc6, 0xc6, 0x96, 0x70, 0xec];
    const QR_CHECKS: [u8; 10] = [0xbc, 0x2a, 0x90, 0x13, 0x6b, 0xaf, 0xef, 0xfd, 0x4b, 0xe0];
    /// Published generator polynomial for 10 EC codewords.
    const QR_GENERATOR_10: [u8; 11] = [1, 216, 194, 159, 111, 199, 94, 95, 113, 157, 193];

    #[test]
    fn known_answer_generator_polynomial() {
        assert_eq!(generator_poly(10, gf::mul), QR_GENERATOR_10);
        assert_eq!(generator_poly(10, gf::mul_naive), QR_GENERATOR_10);
    }

    #[test]
    fn known_answer_qr_encoding() {
        let g = generator_poly(10, gf::mul);
        assert_eq!(encode_checks(&QR_DATA, &g, gf::mul), QR_CHECKS);
        assert_eq!(encode_checks(&QR_DATA, &g, gf::mul_naive), QR_CHECKS);
        let mut word = QR_DATA.to_vec();
        word.extend_from_slice(&QR_CHECKS);
        assert_eq!(syndromes(&word, 10, gf::mul), vec![0; 10]);
    }
}
