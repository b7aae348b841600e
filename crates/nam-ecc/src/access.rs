//! The three codes of Abeyratne 2017 applied to whole rank accesses (64-byte lines).

use std::fmt;
use std::str::FromStr;

use crate::error::{DecodeError, ParseError};
use crate::layout::{symbol_index, RankAccess, BEAT_PAIRS, CHIPS, DATA_CHIPS, LINE_BYTES};
use crate::rs::{DecodePolicy, RsCode};
use crate::strong::StrongCode;

/// The codes of Abeyratne 2017 §4.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum CodeKind {
    /// Normal ECC: two RS(36,32) codewords per access, SSC-TSD by default.
    #[serde(rename = "rs36_32")]
    Rs36_32,
    /// Strong ECC tier 1: four RS(18,16) codewords per access, detect-only by default.
    #[serde(rename = "rs18_16")]
    Rs18_16,
    /// Strong ECC tier 2: RS(18,16) detection escalating to RS(19,16) SSC-DSD with the third
    /// check symbol kept apart.
    #[serde(rename = "rs19_16")]
    Rs19_16,
}

impl CodeKind {
    /// All codes, in the column order of Abeyratne 2017's Table 4.4.
    pub const ALL: [CodeKind; 3] = [CodeKind::Rs36_32, CodeKind::Rs18_16, CodeKind::Rs19_16];

    /// Command-line name: `rs36_32`, `rs18_16`, `rs19_16`.
    pub fn name(self) -> &'static str {
        match self {
            CodeKind::Rs36_32 => "rs36_32",
            CodeKind::Rs18_16 => "rs18_16",
            CodeKind::Rs19_16 => "rs19_16",
        }
    }

    /// Printed name: `RS(36,32)` etc.
    pub fn label(self) -> &'static str {
        match self {
            CodeKind::Rs36_32 => "RS(36,32)",
            CodeKind::Rs18_16 => "RS(18,16)",
            CodeKind::Rs19_16 => "RS(19,16)",
        }
    }

    /// Abeyratne 2017's decoding policy: SSC-TSD for RS(36,32) (§4.4.1 setup (iii)), detection only for
    /// RS(18,16), SSC-DSD for RS(19,16) (§4.4.2).
    pub fn seed_policy(self) -> DecodePolicy {
        match self {
            CodeKind::Rs36_32 | CodeKind::Rs19_16 => DecodePolicy::correct(1),
            CodeKind::Rs18_16 => DecodePolicy::DETECT_ONLY,
        }
    }

    /// Largest correction radius: floor(check symbols / 2).
    pub fn correct_up_to_max(self) -> usize {
        match self {
            CodeKind::Rs36_32 => 2,
            CodeKind::Rs18_16 | CodeKind::Rs19_16 => 1,
        }
    }

    /// Codewords per access.
    pub fn codewords_per_access(self) -> usize {
        match self {
            CodeKind::Rs36_32 => 2,
            CodeKind::Rs18_16 | CodeKind::Rs19_16 => BEAT_PAIRS,
        }
    }

    /// Beat pairs covered by codeword `w` of an access.
    pub fn codeword_beat_pairs(self, w: usize) -> std::ops::Range<usize> {
        match self {
            CodeKind::Rs36_32 => 2 * w..2 * w + 2,
            CodeKind::Rs18_16 | CodeKind::Rs19_16 => w..w + 1,
        }
    }
}

impl fmt::Display for CodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CodeKind {
    type Err = ParseError;

    /// Accepts `rs36_32` or `RS(36,32)` (any case), likewise for the other codes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        CodeKind::ALL
            .into_iter()
            .find(|kind| lower == kind.name() || lower == kind.label().to_ascii_lowercase())
            .ok_or_else(|| ParseError::UnknownCode(s.to_string()))
    }
}

/// An encoded access: the rank's 72 symbols and, for RS(19,16), the third check symbol of each
/// of the four codewords (kept outside the rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoredLine {
    /// What the rank holds.
    pub rank: RankAccess,
    /// Third check symbols (RS(19,16) only; zero otherwise).
    pub apart: [u8; BEAT_PAIRS],
}

/// Per-codeword results of reading one access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRead {
    /// Codewords in this access (2 or 4).
    pub codewords: usize,
    /// Result per codeword: `Ok(symbols corrected)` or the detected uncorrectable error.
    pub results: [Result<usize, DecodeError>; BEAT_PAIRS],
}

impl LineRead {
    /// True when some codeword was detected uncorrectable.
    pub fn any_uncorrectable(&self) -> bool {
        self.results[..self.codewords].iter().any(|r| r.is_err())
    }
}

/// One of Abeyratne 2017's codes with a decoding policy, applied to whole accesses.
#[derive(Debug, Clone)]
pub struct LineCodec {
    kind: CodeKind,
    policy: DecodePolicy,
    normal: RsCode,
    strong: StrongCode,
}

const RS36_DATA: usize = 32;
const RS36_N: usize = 36;

impl LineCodec {
    /// Build `kind` with `policy`; fails if the policy corrects more than the code can.
    pub fn new(kind: CodeKind, policy: DecodePolicy) -> Result<LineCodec, DecodeError> {
        if policy.correct_up_to > kind.correct_up_to_max() {
            return Err(DecodeError::PolicyTooStrong {
                code: kind.label(),
                requested: policy.correct_up_to,
                max: kind.correct_up_to_max(),
            });
        }
        let normal = match RsCode::new(RS36_N, RS36_DATA) {
            Ok(code) => code,
            Err(e) => unreachable!("RS(36,32) parameters are valid: {e}"),
        };
        Ok(LineCodec { kind, policy, normal, strong: StrongCode::new() })
    }

    /// `kind` with Abeyratne 2017's policy.
    pub fn seed(kind: CodeKind) -> LineCodec {
        match LineCodec::new(kind, kind.seed_policy()) {
            Ok(codec) => codec,
            Err(e) => unreachable!("the published policies are valid: {e}"),
        }
    }

    /// The code.
    pub fn kind(&self) -> CodeKind {
        self.kind
    }

    /// The decoding policy.
    pub fn policy(&self) -> DecodePolicy {
        self.policy
    }

    /// Encode a 64-byte line into an access.
    pub fn encode(&self, line: &[u8; LINE_BYTES]) -> StoredLine {
        let mut stored = StoredLine::default();
        stored.rank.set_line(line);
        match self.kind {
            CodeKind::Rs36_32 => {
                for w in 0..2 {
                    let mut word = gather_rs36(&stored.rank, w);
                    let checks = self.normal.checks_packed(&word[..RS36_DATA]).to_le_bytes();
                    word[RS36_DATA..].copy_from_slice(&checks);
                    scatter_rs36(&mut stored.rank, w, &word);
                }
            }
            CodeKind::Rs18_16 | CodeKind::Rs19_16 => {
                for p in 0..BEAT_PAIRS {
                    let mut data = [0u8; DATA_CHIPS];
                    data.copy_from_slice(&line[p * DATA_CHIPS..(p + 1) * DATA_CHIPS]);
                    let (checks, third) = self.strong.encode(&data);
                    let base = symbol_index(p, DATA_CHIPS);
                    stored.rank.symbols[base..base + 2].copy_from_slice(&checks);
                    if self.kind == CodeKind::Rs19_16 {
                        stored.apart[p] = third;
                    }
                }
            }
        }
        stored
    }

    /// Read an access: correct it in place where the policy allows and report per codeword.
    /// Never panics.
    pub fn read(&self, stored: &mut StoredLine) -> LineRead {
        let mut out = LineRead { codewords: self.kind.codewords_per_access(), results: [Ok(0); BEAT_PAIRS] };
        match self.kind {
            CodeKind::Rs36_32 => {
                for w in 0..2 {
                    let mut word = gather_rs36(&stored.rank, w);
                    let packed = self.normal.syndromes_packed(&word);
                    out.results[w] =
                        self.normal.decode_with_syndromes(&mut word, packed, &self.policy).map(corrected_count);
                    if packed != 0 && out.results[w].is_ok() {
                        scatter_rs36(&mut stored.rank, w, &word);
                    }
                }
            }
            CodeKind::Rs18_16 | CodeKind::Rs19_16 => {
                for p in 0..BEAT_PAIRS {
                    let base = symbol_index(p, 0);
                    let word = &mut stored.rank.symbols[base..base + CHIPS];
                    let packed = self.strong.stored_syndromes(word);
                    out.results[p] = if self.kind == CodeKind::Rs18_16 {
                        self.strong.read_tier1(word, packed, &self.policy).map(corrected_count)
                    } else {
                        self.strong.read_with_syndromes(word, stored.apart[p], packed, &self.policy).map(|r| match r {
                            crate::strong::StrongRead::Clean => 0,
                            crate::strong::StrongRead::Corrected { symbols } => symbols,
                        })
                    };
                }
            }
        }
        out
    }
}

fn corrected_count(d: crate::rs::Decoded) -> usize {
    match d {
        crate::rs::Decoded::Clean => 0,
        crate::rs::Decoded::Corrected { symbols } => symbols,
    }
}

/// RS(36,32) codeword `w` in code order: data symbols of beat pairs 2w, 2w+1 (chips 0..16
/// each), then the check symbols (chips 16, 17 of beat pair 2w, then of 2w+1).
fn gather_rs36(rank: &RankAccess, w: usize) -> [u8; RS36_N] {
    let mut word = [0u8; RS36_N];
    for (half, p) in (2 * w..2 * w + 2).enumerate() {
        let base = symbol_index(p, 0);
        word[half * DATA_CHIPS..(half + 1) * DATA_CHIPS].copy_from_slice(&rank.symbols[base..base + DATA_CHIPS]);
        word[RS36_DATA + 2 * half] = rank.symbols[base + DATA_CHIPS];
        word[RS36_DATA + 2 * half + 1] = rank.symbols[base + DATA_CHIPS + 1];
    }
    word
}

fn scatter_rs36(rank: &mut RankAccess, w: usize, word: &[u8; RS36_N]) {
    for (half, p) in (2 * w..2 * w + 2).enumerate() {
        let base = symbol_index(p, 0);
        rank.symbols[base..base + DATA_CHIPS].copy_from_slice(&word[half * DATA_CHIPS..(half + 1) * DATA_CHIPS]);
        rank.symbols[base + DATA_CHIPS] = word[RS36_DATA + 2 * half];
        rank.symbols[base + DATA_CHIPS + 1] = word[RS36_DATA + 2 * half + 1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_code_names() {
        for kind in CodeKind::ALL {
            assert_eq!(kind.name().parse::<CodeKind>(), Ok(kind));
            assert_eq!(kind.label().parse::<CodeKind>(), Ok(kind));
        }
        assert_eq!("RS36_32".parse::<CodeKind>(), Ok(CodeKind::Rs36_32));
        for bad in ["rs37_32", "", "rs3632x", "chipkill", "36_32"] {
            assert!(bad.parse::<CodeKind>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_code_round_trips_a_line_and_fixes_one_symbol() {
        let mut line = [0u8; LINE_BYTES];
        for (i, b) in line.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(151) ^ 0x3C;
        }
        for kind in CodeKind::ALL {
            let codec = LineCodec::seed(kind);
            let clean = codec.encode(&line);
            let mut copy = clean;
            let read = codec.read(&mut copy);
            assert!(!read.any_uncorrectable());
            assert_eq!(copy.rank.line(), line);
            let mut hit = clean;
            hit.rank.symbols[symbol_index(1, 7)] ^= 0xA5;
            let read = codec.read(&mut hit);
            if kind == CodeKind::Rs18_16 {
                assert!(read.any_uncorrectable(), "{kind}: detect-only");
            } else {
                assert!(!read.any_uncorrectable(), "{kind}");
                assert_eq!(hit, clean, "{kind}");
            }
        }
    }

    #[test]
    fn policy_too_strong_is_refused() {
        assert!(LineCodec::new(CodeKind::Rs19_16, DecodePolicy::correct(2)).is_err());
        assert!(LineCodec::new(CodeKind::Rs36_32, DecodePolicy::correct(3)).is_err());
        assert!(LineCodec::new(CodeKind::Rs36_32, DecodePolicy::correct(2)).is_ok());
    }
}
