//! Shortened Reed-Solomon codes RS(n, k) over GF(2^8), table-driven.
//!
//! # Convention
//!
//! A codeword is `n` bytes, **data first, check symbols last**. Byte `i` is the coefficient of
//! x^(n-1-i) of the codeword polynomial c(x), which is a multiple of the generator
//! g(x) = (x - α^0)(x - α^1)···(x - α^(r-1)), r = n - k. This is the layout of the classic
//! systematic encoder (`message · x^r + (message · x^r mod g)`), so the encoder reproduces
//! published known answers (see the tests). The syndromes are S_j = c(α^j), j = 0..r, and a
//! symbol at byte `i` has the error locator X = α^(n-1-i).
//!
//! # Decoding
//!
//! [`DecodePolicy`] sets the correction radius t (0 ..= r/2). The decoder is a bounded-distance
//! decoder: it corrects the received word iff some error pattern of at most t symbols explains
//! **all** r syndromes, and otherwise reports [`DecodeError::Uncorrectable`]. Since the minimum
//! distance is r + 1, every pattern of at most r - t symbol errors is then at least detected
//! ("correct up to t, detect beyond" — for RS(36,32), t = 1 gives SSC-TSD, Abeyratne 2017's
//! setup (iii)). The steps are Berlekamp–Massey on the first 2t syndromes (error locator),
//! Chien search over the n valid positions, Forney's formula (error values), and a final check
//! of the found pattern against all r syndromes.

pub use crate::constants::CHECK_SYMBOLS_MAX;
use crate::error::{CodeError, DecodeError};
use crate::gf;

/// Where the decoder may place an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocationCheck {
    /// Only at the n positions of the shortened code (the correct decoder; default).
    Shortened,
    /// Anywhere among the 255 positions of the unshortened mother code. A "correction" beyond
    /// position n changes nothing and is reported as corrected: this models a decoder that
    /// skips the range check, which turns some detectable errors into silent corruption.
    /// It exists to study Abeyratne 2017's SDC numbers (see docs/ecc.md), not for use on data.
    FullLength,
}

/// How a decoder treats a non-zero syndrome: correct up to `correct_up_to` symbols, detect beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodePolicy {
    /// Correction radius t in symbols; 0 means detect only. At most floor((n - k) / 2).
    pub correct_up_to: usize,
    /// Which error positions the decoder accepts.
    pub location_check: LocationCheck,
}

impl DecodePolicy {
    /// Detect only: any non-zero syndrome is a detected uncorrectable error.
    pub const DETECT_ONLY: DecodePolicy = DecodePolicy::correct(0);

    /// Correct up to `t` symbols at valid positions, detect beyond.
    pub const fn correct(t: usize) -> DecodePolicy {
        DecodePolicy { correct_up_to: t, location_check: LocationCheck::Shortened }
    }
}

/// Result of decoding a codeword that was not rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// All syndromes were zero; nothing changed.
    Clean,
    /// The decoder corrected this many symbols (under [`LocationCheck::FullLength`], corrections
    /// at positions beyond the codeword are counted but change no byte).
    Corrected {
        /// Number of symbols the decoder believes it corrected.
        symbols: usize,
    },
}

/// Syndromes S_0..S_(r-1) packed little-endian into a `u32` (byte j = S_j).
pub type PackedSyndromes = u32;

/// Unpack a [`PackedSyndromes`] into bytes.
#[inline]
pub fn unpack_syndromes(packed: PackedSyndromes) -> [u8; CHECK_SYMBOLS_MAX] {
    packed.to_le_bytes()
}

/// A shortened RS(n, k) code over GF(2^8) with table-driven encoder and syndromes.
#[derive(Clone)]
pub struct RsCode {
    n: usize,
    k: usize,
    /// `encode_table[i][v]`: check symbols (packed, byte q = check symbol q) of the word with
    /// data byte `i` equal to `v` and every other data byte 0.
    encode_table: Vec<[u32; 256]>,
    /// `syndrome_table[i][v]`: the packed syndromes contributed by value `v` at byte `i`.
    syndrome_table: Vec<[u32; 256]>,
}

impl std::fmt::Debug for RsCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RS({},{})", self.n, self.k)
    }
}

impl RsCode {
    /// Build RS(n, k): 1 <= k < n <= 255, n - k <= [`CHECK_SYMBOLS_MAX`].
    pub fn new(n: usize, k: usize) -> Result<RsCode, CodeError> {
        let valid = k >= 1 && k < n && n <= gf::GROUP_ORDER && n - k <= CHECK_SYMBOLS_MAX;
        if !valid {
            return Err(CodeError::InvalidParameters { n, k, check_symbols_max: CHECK_SYMBOLS_MAX });
        }
        let r = n - k;
        let generator = crate::reference::generator_poly(r, gf::mul);
        let mut encode_table = Vec::with_capacity(k);
        let mut unit = vec![0u8; k];
        for i in 0..k {
            unit.iter_mut().for_each(|b| *b = 0);
            unit[i] = 1;
            let checks = crate::reference::encode_checks(&unit, &generator, gf::mul);
            let mut row = [0u32; 256];
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = pack(checks.iter().map(|&c| gf::mul(c, v as u8)));
            }
            encode_table.push(row);
        }
        let mut syndrome_table = Vec::with_capacity(n);
        for i in 0..n {
            let degree = n - 1 - i;
            let mut row = [0u32; 256];
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = pack((0..r).map(|j| gf::mul(v as u8, gf::alpha_pow(j * degree))));
            }
            syndrome_table.push(row);
        }
        Ok(RsCode { n, k, encode_table, syndrome_table })
    }

    /// Codeword length in symbols (bytes).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Data symbols per codeword.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Check symbols per codeword, r = n - k.
    pub fn check_symbols(&self) -> usize {
        self.n - self.k
    }

    /// Largest correction radius the code allows, floor(r / 2).
    pub fn correct_up_to_max(&self) -> usize {
        self.check_symbols() / 2
    }

    /// Packed check symbols of `data` (exactly k bytes; not checked — internal fast path).
    #[inline]
    pub(crate) fn checks_packed(&self, data: &[u8]) -> u32 {
        debug_assert_eq!(data.len(), self.k);
        data.iter().zip(&self.encode_table).fold(0u32, |acc, (&v, row)| acc ^ row[v as usize])
    }

    /// Encode in place: read the first k bytes of `codeword`, write its last r bytes.
    pub fn encode(&self, codeword: &mut [u8]) -> Result<(), CodeError> {
        if codeword.len() != self.n {
            return Err(CodeError::WrongLength { what: "codeword", expected: self.n, actual: codeword.len() });
        }
        let checks = self.checks_packed(&codeword[..self.k]).to_le_bytes();
        codeword[self.k..].copy_from_slice(&checks[..self.check_symbols()]);
        Ok(())
    }

    /// Packed syndromes of a received word (exactly n bytes; not checked — internal fast path).
    #[inline]
    pub(crate) fn syndromes_packed(&self, word: &[u8]) -> PackedSyndromes {
        debug_assert_eq!(word.len(), self.n);
        word.iter().zip(&self.syndrome_table).fold(0u32, |acc, (&v, row)| acc ^ row[v as usize])
    }

    /// Syndromes S_0..S_(r-1) of a received word; all zero iff it is a codeword.
    pub fn syndromes(&self, word: &[u8]) -> Result<Vec<u8>, DecodeError> {
        self.check_len(word)?;
        let packed = unpack_syndromes(self.syndromes_packed(word));
        Ok(packed[..self.check_symbols()].to_vec())
    }

    /// Check that `policy` is possible for this code.
    pub fn check_policy(&self, policy: &DecodePolicy) -> Result<(), DecodeError> {
        if policy.correct_up_to > self.correct_up_to_max() {
            return Err(DecodeError::PolicyTooStrong {
                code: code_name(self.n, self.k),
                requested: policy.correct_up_to,
                max: self.correct_up_to_max(),
            });
        }
        Ok(())
    }

    fn check_len(&self, word: &[u8]) -> Result<(), DecodeError> {
        if word.len() != self.n {
            return Err(DecodeError::WrongLength { what: "codeword", expected: self.n, actual: word.len() });
        }
        Ok(())
    }

    /// Decode in place under `policy`. On [`DecodeError::Uncorrectable`] the word is unchanged.
    /// Never panics, whatever the bytes.
    pub fn decode(&self, word: &mut [u8], policy: &DecodePolicy) -> Result<Decoded, DecodeError> {
        self.check_len(word)?;
        self.check_policy(policy)?;
        let packed = self.syndromes_packed(word);
        self.decode_with_syndromes(word, packed, policy)
    }

    /// Decode given already computed syndromes (policy already checked).
    #[inline]
    pub(crate) fn decode_with_syndromes(
        &self,
        word: &mut [u8],
        packed: PackedSyndromes,
        policy: &DecodePolicy,
    ) -> Result<Decoded, DecodeError> {
        if packed == 0 {
            return Ok(Decoded::Clean);
        }
        let syndromes = unpack_syndromes(packed);
        let found =
            locate_errors(&syndromes[..self.check_symbols()], policy.correct_up_to, self.n, policy.location_check)
                .ok_or(DecodeError::Uncorrectable)?;
        for &(degree, value) in found.iter() {
            if degree < self.n {
                word[self.n - 1 - degree] ^= value;
            }
        }
        Ok(Decoded::Corrected { symbols: found.len() })
    }
}

/// `"RS(n,k)"` for the codes of this crate, `"RS(n,k)"`-like fallback otherwise.
pub(crate) fn code_name(n: usize, k: usize) -> &'static str {
    match (n, k) {
        (36, 32) => "RS(36,32)",
        (18, 16) => "RS(18,16)",
        (19, 16) => "RS(19,16)",
        _ => "RS(n,k)",
    }
}

fn pack(bytes: impl Iterator<Item = u8>) -> u32 {
    bytes.take(CHECK_SYMBOLS_MAX).enumerate().fold(0u32, |acc, (j, b)| acc | (b as u32) << (8 * j))
}

/// Up to [`CHECK_SYMBOLS_MAX`] / 2 errors as (locator exponent = degree, value) pairs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ErrorList {
    len: usize,
    items: [(usize, u8); CHECK_SYMBOLS_MAX / 2],
}

impl ErrorList {
    fn push(&mut self, item: (usize, u8)) -> bool {
        if self.len == self.items.len() {
            return false;
        }
        self.items[self.len] = item;
        self.len += 1;
        true
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(usize, u8)> {
        self.items[..self.len].iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Bounded-distance search: the unique pattern of at most `t` errors (positions = degrees in
/// `0..n`, or `0..255` for [`LocationCheck::FullLength`]) whose syndromes equal `syndromes`,
/// or `None`. `syndromes` holds S_0..S_(r-1) for roots α^0..α^(r-1); needs 2t <= r.
pub(crate) fn locate_errors(syndromes: &[u8], t: usize, n: usize, location_check: LocationCheck) -> Option<ErrorList> {
    let r = syndromes.len();
    if t == 0 || 2 * t > r || r > CHECK_SYMBOLS_MAX {
        return None;
    }
    let (lambda, degree) = berlekamp_massey(&syndromes[..2 * t]);
    if degree == 0 || degree > t {
        return None;
    }
    let positions = match location_check {
        LocationCheck::Shortened => n,
        LocationCheck::FullLength => gf::GROUP_ORDER,
    };
    let omega = error_evaluator(&syndromes[..2 * t], &lambda);
    let mut found = ErrorList::default();
    // One error: Λ(x) = 1 + X x has its root at X^-1 directly, no search needed.
    let candidates = if degree == 1 {
        let position = gf::log(lambda[1]).map_or(usize::MAX, usize::from);
        if position >= positions {
            return None;
        }
        position..position + 1
    } else {
        0..positions
    };
    for position in candidates {
        // X^-1 = α^(-position).
        let x_inv = gf::alpha_pow(gf::GROUP_ORDER - position % gf::GROUP_ORDER);
        if gf::poly_eval_low_first(&lambda[..=degree], x_inv) != 0 {
            continue;
        }
        let value = forney(&lambda[..=degree], &omega, position, x_inv)?;
        if !found.push((position, value)) {
            return None;
        }
    }
    if found.len() != degree {
        return None;
    }
    // The pattern must explain every syndrome, not only the 2t the locator was built from.
    let explains_all = syndromes
        .iter()
        .enumerate()
        .all(|(j, &s)| found.iter().fold(0u8, |acc, &(pos, v)| acc ^ gf::mul(v, gf::alpha_pow(j * pos))) == s);
    explains_all.then_some(found)
}

const BM_LEN: usize = 2 * CHECK_SYMBOLS_MAX + 2;

/// Berlekamp–Massey: shortest LFSR (error locator Λ, Λ_0 = 1) generating `s`, and its length.
fn berlekamp_massey(s: &[u8]) -> ([u8; BM_LEN], usize) {
    let mut c = [0u8; BM_LEN];
    let mut b = [0u8; BM_LEN];
    c[0] = 1;
    b[0] = 1;
    let (mut len, mut shift, mut b_disc) = (0usize, 1usize, 1u8);
    for idx in 0..s.len() {
        let discrepancy = (1..=len).fold(s[idx], |d, i| d ^ gf::mul(c[i], s[idx - i]));
        if discrepancy == 0 {
            shift += 1;
            continue;
        }
        let coef = gf::div(discrepancy, b_disc).unwrap_or(0);
        let previous = c;
        for i in 0..BM_LEN - shift {
            c[i + shift] ^= gf::mul(coef, b[i]);
        }
        if 2 * len <= idx {
            len = idx + 1 - len;
            b = previous;
            b_disc = discrepancy;
            shift = 1;
        } else {
            shift += 1;
        }
    }
    (c, len)
}

/// Ω(x) = S(x) Λ(x) mod x^(2t), lowest degree first.
fn error_evaluator(s: &[u8], lambda: &[u8; BM_LEN]) -> [u8; BM_LEN] {
    let mut omega = [0u8; BM_LEN];
    for (i, slot) in omega.iter_mut().enumerate().take(s.len()) {
        *slot = (0..=i).fold(0u8, |acc, j| acc ^ gf::mul(s[j], lambda[i - j]));
    }
    omega
}

/// Forney's formula for first consecutive root α^0: e = X · Ω(X^-1) / Λ'(X^-1).
fn forney(lambda: &[u8], omega: &[u8; BM_LEN], position: usize, x_inv: u8) -> Option<u8> {
    // Formal derivative in characteristic 2 keeps the odd terms: Λ'(x) = Σ_odd Λ_i x^(i-1).
    let mut derivative = 0u8;
    let mut x_pow = 1u8;
    for (i, &coef) in lambda.iter().enumerate().skip(1) {
        if i % 2 == 1 {
            derivative ^= gf::mul(coef, x_pow);
        }
        x_pow = gf::mul(x_pow, x_inv);
    }
    let numerator = gf::mul(gf::alpha_pow(position), gf::poly_eval_low_first(omega, x_inv));
    let value = gf::div(numerator, derivative)?;
    (value != 0).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_impossible_parameters() {
        for (n, k) in [(16, 16), (16, 0), (256, 250), (30, 20), (5, 6)] {
            assert!(RsCode::new(n, k).is_err(), "RS({n},{k})");
        }
        assert!(RsCode::new(255, 251).is_ok());
    }

    #[test]
    fn table_encoder_matches_reference_encoder() {
        for (n, k) in [(36, 32), (18, 16), (19, 16), (255, 251), (7, 4)] {
            let code = RsCode::new(n, k).unwrap();
            let g = crate::reference::generator_poly(n - k, gf::mul_naive);
            let mut word = vec![0u8; n];
            for seed in 0..50u32 {
                for (i, b) in word[..k].iter_mut().enumerate() {
                    *b = (seed.wrapping_mul(2654435761).wrapping_add(i as u32 * 40503) >> 13) as u8;
                }
                code.encode(&mut word).unwrap();
                let reference = crate::reference::encode_checks(&word[..k], &g, gf::mul_naive);
                assert_eq!(&word[k..], &reference[..], "RS({n},{k}) seed {seed}");
                assert_eq!(code.syndromes(&word).unwrap(), vec![0; n - k]);
            }
        }
    }

    #[test]
    fn corrects_every_single_error_in_rs36_32() {
        let code = RsCode::new(36, 32).unwrap();
        let mut clean = [0u8; 36];
        for (i, b) in clean[..32].iter_mut().enumerate() {
            *b = (i * 37 + 11) as u8;
        }
        code.encode(&mut clean).unwrap();
        for pos in 0..36 {
            for value in 1..=255u8 {
                let mut word = clean;
                word[pos] ^= value;
                let out = code.decode(&mut word, &DecodePolicy::correct(1));
                assert_eq!(out, Ok(Decoded::Corrected { symbols: 1 }));
                assert_eq!(word, clean);
            }
        }
    }

    #[test]
    fn double_errors_are_corrected_at_t2_and_detected_at_t1() {
        let code = RsCode::new(36, 32).unwrap();
        let clean = [0u8; 36];
        for a in 0..36 {
            for b in (a + 1)..36 {
                let mut word = clean;
                word[a] ^= (a * 7 + 1) as u8;
                word[b] ^= (b * 13 + 5) as u8 | 1;
                let mut copy = word;
                assert_eq!(code.decode(&mut copy, &DecodePolicy::correct(1)), Err(DecodeError::Uncorrectable));
                assert_eq!(copy, word, "a rejected word is left unchanged");
                assert_eq!(code.decode(&mut word, &DecodePolicy::correct(2)), Ok(Decoded::Corrected { symbols: 2 }));
                assert_eq!(word, clean);
            }
        }
    }

    #[test]
    fn policy_beyond_the_distance_is_refused() {
        let code = RsCode::new(18, 16).unwrap();
        let mut word = [0u8; 18];
        assert!(matches!(
            code.decode(&mut word, &DecodePolicy::correct(2)),
            Err(DecodeError::PolicyTooStrong { max: 1, .. })
        ));
        assert!(matches!(
            code.decode(&mut word[..17], &DecodePolicy::correct(1)),
            Err(DecodeError::WrongLength { .. })
        ));
    }
}
