//! The two-tier strong mode of §4.4.2: RS(18,16) detection in the rank, RS(19,16) correction
//! with a third check symbol kept apart.
//!
//! > "18 out of the 19 symbols are stored in one rank and the 19th symbol (the third parity
//! > symbol) is stored in another rank … The parity check matrix of RS(18,16) is embedded in the
//! > parity check matrix of RS(19,16) … The two symbols in the syndrome vector of RS(18,16) are
//! > identical to the first two symbols in the syndrome vector of RS(19,16)." (§4.4.2)
//!
//! # Construction
//!
//! The 18 symbols in the rank form an ordinary RS(18,16) codeword (roots α^0, α^1, see
//! [`crate::rs`]). The third check symbol is `p = Σ_i c_i α^(2·(17-i))`, the value of the stored
//! word at α^2. The parity-check matrix of the resulting RS(19,16) is
//!
//! ```text
//!     [ 1        1        ···  1   | 0 ]   row of S_0 (RS(18,16))
//! H = [ α^17     α^16     ···  α^0 | 0 ]   row of S_1 (RS(18,16))
//!     [ α^34     α^32     ···  α^0 | 1 ]   row of S_2 (third symbol)
//! ```
//!
//! Any three columns are independent (Vandermonde, or a 2×2 Vandermonde minor next to the unit
//! column), so the minimum distance is 4: single-symbol correct, double-symbol detect (SSC-DSD),
//! and S_0, S_1 are exactly RS(18,16)'s syndromes.
//!
//! # Reading
//!
//! Tier 1 computes S_0, S_1 from the 18 stored symbols. Zero means no error seen and the third
//! symbol is never fetched. Otherwise tier 2 fetches the third symbol (Abeyratne 2017's ECC cache or a
//! second access), forms S_2 and runs the SSC-DSD decoder of [`crate::rs`]. The third symbol is
//! assumed intact: it lives outside the rank whose faults are injected.

use crate::error::{CodeError, DecodeError};
use crate::gf;
use crate::rs::{locate_errors, DecodePolicy, Decoded, PackedSyndromes, RsCode};

/// Symbols stored in the rank per codeword.
pub const STORED_SYMBOLS: usize = 18;
/// Data symbols per codeword.
pub const DATA_SYMBOLS: usize = 16;

/// What reading one strong codeword did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrongRead {
    /// Tier 1 saw zero syndromes; the third symbol was not needed.
    Clean,
    /// Tier 2 ran (third symbol fetched) and corrected this many symbols.
    Corrected {
        /// Symbols corrected.
        symbols: usize,
    },
}

/// Counts of a buffer decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferReport {
    /// Codewords read.
    pub codewords: usize,
    /// Codewords that needed tier 2 (the third symbol was fetched).
    pub tier2_reads: usize,
    /// Codewords corrected by tier 2.
    pub corrected: usize,
    /// Codewords with a detected uncorrectable error; their data is copied out as stored.
    pub uncorrectable: usize,
    /// Index of the first uncorrectable codeword.
    pub first_uncorrectable: Option<usize>,
}

/// RS(19,16) in the two-tier layout: RS(18,16) in the rank plus a third check symbol apart.
#[derive(Clone, Debug)]
pub struct StrongCode {
    inner: RsCode,
    /// `encode_table[i][v]`: packed (check 0, check 1, third symbol) of data byte i = v.
    encode_table: Vec<[u32; 256]>,
    /// `syndrome_table[i][v]`: packed (S_0, S_1, partial S_2) contributed by stored byte i = v.
    syndrome_table: Vec<[u32; 256]>,
}

impl StrongCode {
    /// Build the code.
    pub fn new() -> StrongCode {
        let inner = match RsCode::new(STORED_SYMBOLS, DATA_SYMBOLS) {
            Ok(code) => code,
            Err(e) => unreachable!("RS(18,16) parameters are valid: {e}"),
        };
        let s2_weight = |i: usize| gf::alpha_pow(2 * (STORED_SYMBOLS - 1 - i));
        let mut syndrome_table = Vec::with_capacity(STORED_SYMBOLS);
        for i in 0..STORED_SYMBOLS {
            let degree = STORED_SYMBOLS - 1 - i;
            let mut row = [0u32; 256];
            for (v, slot) in row.iter_mut().enumerate() {
                let v = v as u8;
                let s0 = v as u32;
                let s1 = gf::mul(v, gf::alpha_pow(degree)) as u32;
                let s2 = gf::mul(v, s2_weight(i)) as u32;
                *slot = s0 | s1 << 8 | s2 << 16;
            }
            syndrome_table.push(row);
        }
        let mut encode_table = Vec::with_capacity(DATA_SYMBOLS);
        let mut unit = [0u8; DATA_SYMBOLS];
        for i in 0..DATA_SYMBOLS {
            unit.iter_mut().for_each(|b| *b = 0);
            unit[i] = 1;
            let checks = inner.checks_packed(&unit).to_le_bytes();
            let third = gf::mul(1, s2_weight(i))
                ^ gf::mul(checks[0], s2_weight(DATA_SYMBOLS))
                ^ gf::mul(checks[1], s2_weight(DATA_SYMBOLS + 1));
            let mut row = [0u32; 256];
            for (v, slot) in row.iter_mut().enumerate() {
                let v = v as u8;
                *slot = gf::mul(v, checks[0]) as u32
                    | (gf::mul(v, checks[1]) as u32) << 8
                    | (gf::mul(v, third) as u32) << 16;
            }
            encode_table.push(row);
        }
        StrongCode { inner, encode_table, syndrome_table }
    }

    /// The RS(18,16) code of tier 1.
    pub fn tier1(&self) -> &RsCode {
        &self.inner
    }

    /// Encode 16 data bytes: returns the two check symbols stored in the rank and the third
    /// symbol kept apart.
    #[inline]
    pub fn encode(&self, data: &[u8; DATA_SYMBOLS]) -> ([u8; 2], u8) {
        let packed = data.iter().zip(&self.encode_table).fold(0u32, |acc, (&v, row)| acc ^ row[v as usize]);
        let b = packed.to_le_bytes();
        ([b[0], b[1]], b[2])
    }

    /// Packed (S_0, S_1, partial S_2) of the 18 stored symbols (third symbol not added).
    #[inline]
    pub(crate) fn stored_syndromes(&self, stored: &[u8]) -> PackedSyndromes {
        debug_assert_eq!(stored.len(), STORED_SYMBOLS);
        stored.iter().zip(&self.syndrome_table).fold(0u32, |acc, (&v, row)| acc ^ row[v as usize])
    }

    /// Tier 1 alone, as RS(18,16) under `policy` (Abeyratne 2017 runs it detect-only).
    #[inline]
    pub(crate) fn read_tier1(
        &self,
        stored: &mut [u8],
        packed: PackedSyndromes,
        policy: &DecodePolicy,
    ) -> Result<Decoded, DecodeError> {
        self.inner.decode_with_syndromes(stored, packed & 0xFFFF, policy)
    }

    /// Both tiers: correct `stored` in place using `third` when tier 1 sees an error.
    /// `policy.correct_up_to` may be 0 or 1 (RS(19,16) corrects at most one symbol).
    pub fn read(&self, stored: &mut [u8], third: u8, policy: &DecodePolicy) -> Result<StrongRead, DecodeError> {
        if stored.len() != STORED_SYMBOLS {
            return Err(DecodeError::WrongLength {
                what: "stored codeword",
                expected: STORED_SYMBOLS,
                actual: stored.len(),
            });
        }
        check_policy(policy)?;
        let packed = self.stored_syndromes(stored);
        self.read_with_syndromes(stored, third, packed, policy)
    }

    #[inline]
    pub(crate) fn read_with_syndromes(
        &self,
        stored: &mut [u8],
        third: u8,
        packed: PackedSyndromes,
        policy: &DecodePolicy,
    ) -> Result<StrongRead, DecodeError> {
        if packed & 0xFFFF == 0 {
            return Ok(StrongRead::Clean);
        }
        let b = packed.to_le_bytes();
        let syndromes = [b[0], b[1], b[2] ^ third];
        let found = locate_errors(&syndromes, policy.correct_up_to, STORED_SYMBOLS, policy.location_check)
            .ok_or(DecodeError::Uncorrectable)?;
        for &(degree, value) in found.iter() {
            if degree < STORED_SYMBOLS {
                stored[STORED_SYMBOLS - 1 - degree] ^= value;
            }
        }
        Ok(StrongRead::Corrected { symbols: found.len() })
    }

    /// Encode a buffer: `data` is a multiple of 16 bytes; `stored` gets 18 bytes and `third`
    /// one byte per 16 data bytes.
    pub fn encode_buffer(&self, data: &[u8], stored: &mut [u8], third: &mut [u8]) -> Result<(), CodeError> {
        let codewords = check_buffers(data.len(), stored.len(), third.len())
            .map_err(|(what, expected, actual)| CodeError::WrongLength { what, expected, actual })?;
        for i in 0..codewords {
            let chunk = &data[i * DATA_SYMBOLS..(i + 1) * DATA_SYMBOLS];
            let mut block = [0u8; DATA_SYMBOLS];
            block.copy_from_slice(chunk);
            let (checks, t) = self.encode(&block);
            let out = &mut stored[i * STORED_SYMBOLS..(i + 1) * STORED_SYMBOLS];
            out[..DATA_SYMBOLS].copy_from_slice(chunk);
            out[DATA_SYMBOLS..].copy_from_slice(&checks);
            third[i] = t;
        }
        Ok(())
    }

    /// Decode a buffer written by [`StrongCode::encode_buffer`] into `data` (corrected). The
    /// stored buffer is not modified. Uncorrectable codewords are counted in the report and
    /// copied out as stored; a caller that keeps checkpoints discards the whole buffer then.
    pub fn decode_buffer(
        &self,
        stored: &[u8],
        third: &[u8],
        data: &mut [u8],
        policy: &DecodePolicy,
    ) -> Result<BufferReport, DecodeError> {
        let codewords = check_buffers(data.len(), stored.len(), third.len())
            .map_err(|(what, expected, actual)| DecodeError::WrongLength { what, expected, actual })?;
        check_policy(policy)?;
        let mut report = BufferReport { codewords, ..BufferReport::default() };
        for i in 0..codewords {
            let word = &stored[i * STORED_SYMBOLS..(i + 1) * STORED_SYMBOLS];
            let out = &mut data[i * DATA_SYMBOLS..(i + 1) * DATA_SYMBOLS];
            let packed = self.stored_syndromes(word);
            if packed & 0xFFFF == 0 {
                out.copy_from_slice(&word[..DATA_SYMBOLS]);
                continue;
            }
            report.tier2_reads += 1;
            let mut copy = [0u8; STORED_SYMBOLS];
            copy.copy_from_slice(word);
            match self.read_with_syndromes(&mut copy, third[i], packed, policy) {
                Ok(_) => report.corrected += 1,
                Err(_) => {
                    report.uncorrectable += 1;
                    report.first_uncorrectable.get_or_insert(i);
                }
            }
            out.copy_from_slice(&copy[..DATA_SYMBOLS]);
        }
        Ok(report)
    }
}

impl Default for StrongCode {
    fn default() -> Self {
        StrongCode::new()
    }
}

fn check_policy(policy: &DecodePolicy) -> Result<(), DecodeError> {
    if policy.correct_up_to > 1 {
        return Err(DecodeError::PolicyTooStrong { code: "RS(19,16)", requested: policy.correct_up_to, max: 1 });
    }
    Ok(())
}

/// Number of codewords, or (buffer, expected, actual) of the first buffer of the wrong size.
fn check_buffers(data: usize, stored: usize, third: usize) -> Result<usize, (&'static str, usize, usize)> {
    if data % DATA_SYMBOLS != 0 {
        return Err(("data buffer", data.next_multiple_of(DATA_SYMBOLS), data));
    }
    let codewords = data / DATA_SYMBOLS;
    if stored != codewords * STORED_SYMBOLS {
        return Err(("stored buffer", codewords * STORED_SYMBOLS, stored));
    }
    if third != codewords {
        return Err(("third-symbol buffer", codewords, third));
    }
    Ok(codewords)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;

    fn sample(seed: u8) -> [u8; DATA_SYMBOLS] {
        let mut d = [0u8; DATA_SYMBOLS];
        for (i, b) in d.iter_mut().enumerate() {
            *b = seed.wrapping_mul(31).wrapping_add((i as u8).wrapping_mul(17)) ^ 0x5A;
        }
        d
    }

    #[test]
    fn stored_part_is_an_rs18_16_codeword_and_third_symbol_closes_rs19_16() {
        for seed in 0..64u8 {
            let data = sample(seed);
            let (checks, third) = self::StrongCode::new().encode(&data);
            let mut stored = data.to_vec();
            stored.extend_from_slice(&checks);
            // Tier 1: an RS(18,16) codeword (roots α^0, α^1).
            assert_eq!(reference::syndromes(&stored, 2, gf::mul_naive), vec![0, 0]);
            // The third symbol is the stored word evaluated at α^2.
            assert_eq!(reference::syndromes(&stored, 3, gf::mul_naive)[2], third);
        }
    }

    #[test]
    fn corrects_every_single_symbol_error_and_detects_every_double() {
        let code = StrongCode::new();
        let data = sample(9);
        let (checks, third) = code.encode(&data);
        let mut clean = [0u8; STORED_SYMBOLS];
        clean[..16].copy_from_slice(&data);
        clean[16..].copy_from_slice(&checks);
        let policy = DecodePolicy::correct(1);
        for a in 0..STORED_SYMBOLS {
            for v in 1..=255u8 {
                let mut w = clean;
                w[a] ^= v;
                assert_eq!(code.read(&mut w, third, &policy), Ok(StrongRead::Corrected { symbols: 1 }));
                assert_eq!(w, clean);
                for b in (a + 1)..STORED_SYMBOLS {
                    let mut w2 = clean;
                    w2[a] ^= v;
                    w2[b] ^= v.rotate_left(3) | 1;
                    assert_eq!(code.read(&mut w2, third, &policy), Err(DecodeError::Uncorrectable));
                }
            }
        }
    }

    #[test]
    fn buffer_round_trip_with_errors() {
        let code = StrongCode::new();
        let data: Vec<u8> = (0..16 * 100).map(|i| (i * 7 + 3) as u8).collect();
        let mut stored = vec![0u8; 18 * 100];
        let mut third = vec![0u8; 100];
        code.encode_buffer(&data, &mut stored, &mut third).unwrap();
        stored[18 * 5 + 3] ^= 0xFF; // one symbol in codeword 5: corrected
        stored[18 * 7 + 1] ^= 1; // two symbols in codeword 7: detected
        stored[18 * 7 + 17] ^= 2;
        let mut out = vec![0u8; data.len()];
        let report = code.decode_buffer(&stored, &third, &mut out, &DecodePolicy::correct(1)).unwrap();
        assert_eq!(report.codewords, 100);
        assert_eq!(report.tier2_reads, 2);
        assert_eq!(report.corrected, 1);
        assert_eq!(report.uncorrectable, 1);
        assert_eq!(report.first_uncorrectable, Some(7));
        assert_eq!(out[..16 * 7], data[..16 * 7]);
        assert!(code.decode_buffer(&stored[1..], &third, &mut out, &DecodePolicy::correct(1)).is_err());
        assert!(code.decode_buffer(&stored, &third, &mut out, &DecodePolicy::correct(2)).is_err());
    }
}
