//! The five DRAM fault types of Abeyratne 2017 §4.4 and their injection into a rank access.
//!
//! > "A bit fault leads to a single bit error in a data block. A column failure also leads to a
//! > single bit error in a data block. A pin failure results in 8 bit errors and these errors are
//! > all located in the same data pin positions. A word failure corrupts 4 consecutive bit errors
//! > in a single beat. A whole chip failure leads to 32 bit errors (8 beats with 4 bits/beat) in a
//! > 512 bit data block." (§4.4)
//!
//! | fault | footprint in one access | symbols touched |
//! | --- | --- | --- |
//! | bit | one (beat, pin) of one chip | 1 |
//! | column | one (beat, pin) of one chip — the same footprint as a bit fault within one access (a column fault differs only in repeating across the rows of a bank, which a one-access trial does not see) | 1 |
//! | pin | one pin of one chip in all 8 beats | 4 (one per beat pair, 2 bits each) |
//! | word | all 4 pins of one chip in one beat | 1 (one nibble) |
//! | chip | all 32 bits of one chip | 4 |
//!
//! Every fault of a combination sits in its own chip ("Each fault type was injected into a single
//! chip or two chips", §4.6.2.2), chosen uniformly without replacement; pins and beats are
//! uniform. Two knobs, both documented in docs/ecc.md:
//!
//! * [`Placement`]: where the beats of beat-local faults (bit, column, word) fall relative to
//!   each other. `Coincident` (default) puts all of them in the same beat pair, so that
//!   multi-chip faults hit the same codeword — the only reading under which Abeyratne 2017's
//!   double-fault rows (e.g. RS(36,32) `1 bit + 1 bit`: 100 % DUE) are possible.
//!   `Independent` draws each beat on its own.
//! * [`ErrorValues`]: `Random` (default) gives every symbol a fault touches a uniformly random
//!   non-zero error confined to the fault's bits (so every touched symbol is wrong, as "8 bit
//!   errors"/"32 bit errors" require, with random values as a Monte-Carlo over data needs);
//!   `Invert` flips every bit of the footprint.

use std::fmt;
use std::str::FromStr;

use rand::Rng;

use crate::error::ParseError;
use crate::layout::{symbol_index, RankAccess, BEAT_PAIRS, CHIPS, PINS_PER_CHIP};

/// A fault type of Abeyratne 2017 §4.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Single bit.
    Bit,
    /// Column: a single bit within one access.
    Column,
    /// One DQ pin in all 8 beats.
    Pin,
    /// One chip's 4 bits in one beat.
    Word,
    /// A whole chip: 32 bits.
    Chip,
}

impl FaultKind {
    /// All fault types, in canonical order.
    pub const ALL: [FaultKind; 5] =
        [FaultKind::Bit, FaultKind::Column, FaultKind::Pin, FaultKind::Word, FaultKind::Chip];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Bit => "bit",
            FaultKind::Column => "column",
            FaultKind::Pin => "pin",
            FaultKind::Word => "word",
            FaultKind::Chip => "chip",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| ParseError::UnknownFault(s.trim().to_string()))
    }
}

/// Faults that strike one access together, each in its own chip (e.g. `pin+chip`).
/// Stored in canonical order, so `chip+pin` and `pin+chip` are the same combination.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultCombination {
    kinds: Vec<FaultKind>,
}

impl FaultCombination {
    /// A combination of 1 ..= [`CHIPS`] faults.
    pub fn new(kinds: &[FaultKind]) -> Result<FaultCombination, ParseError> {
        let mut kinds = kinds.to_vec();
        kinds.sort();
        let combination = FaultCombination { kinds };
        if combination.kinds.is_empty() {
            return Err(ParseError::EmptyFault(String::new()));
        }
        if combination.kinds.len() > CHIPS {
            return Err(ParseError::TooManyFaults {
                combination: combination.to_string(),
                count: combination.kinds.len(),
                chips: CHIPS,
            });
        }
        Ok(combination)
    }

    /// The faults, in canonical order.
    pub fn kinds(&self) -> &[FaultKind] {
        &self.kinds
    }

    /// Abeyratne 2017's Table 4.4 rows: 4 single-chip and 10 double-chip failure modes.
    pub fn seed_table_rows() -> Vec<FaultCombination> {
        use FaultKind::*;
        let rows: [&[FaultKind]; 14] = [
            &[Bit],
            &[Pin],
            &[Word],
            &[Chip],
            &[Bit, Bit],
            &[Bit, Pin],
            &[Bit, Word],
            &[Bit, Chip],
            &[Pin, Word],
            &[Pin, Pin],
            &[Pin, Chip],
            &[Word, Word],
            &[Word, Chip],
            &[Chip, Chip],
        ];
        rows.iter().map(|r| FaultCombination { kinds: r.to_vec() }).collect()
    }

    /// Every fault type alone and every pair of fault types (5 + 15 combinations).
    pub fn all_singles_and_pairs() -> Vec<FaultCombination> {
        let mut out: Vec<FaultCombination> =
            FaultKind::ALL.iter().map(|&k| FaultCombination { kinds: vec![k] }).collect();
        for (i, &a) in FaultKind::ALL.iter().enumerate() {
            for &b in &FaultKind::ALL[i..] {
                out.push(FaultCombination { kinds: vec![a, b] });
            }
        }
        out
    }

    /// Parse a comma-separated list of combinations, e.g. `bit,chip,pin+chip`. `all` stands for
    /// [`FaultCombination::all_singles_and_pairs`], `table` for
    /// [`FaultCombination::seed_table_rows`].
    pub fn parse_list(list: &str) -> Result<Vec<FaultCombination>, ParseError> {
        let mut out = Vec::new();
        for item in list.split(',') {
            match item.trim().to_ascii_lowercase().as_str() {
                "all" => out.extend(FaultCombination::all_singles_and_pairs()),
                "table" => out.extend(FaultCombination::seed_table_rows()),
                _ => out.push(item.parse()?),
            }
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|c| seen.insert(c.clone()));
        Ok(out)
    }

    /// `1 bit + 1 pin`, as Abeyratne 2017's table writes it.
    pub fn seed_label(&self) -> String {
        self.kinds.iter().map(|k| format!("1 {k}")).collect::<Vec<_>>().join(" + ")
    }
}

impl fmt::Display for FaultCombination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
        f.write_str(&names.join("+"))
    }
}

impl FromStr for FaultCombination {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut kinds = Vec::new();
        for part in s.split('+') {
            if part.trim().is_empty() {
                return Err(ParseError::EmptyFault(s.to_string()));
            }
            kinds.push(part.parse::<FaultKind>()?);
        }
        FaultCombination::new(&kinds).map_err(|e| match e {
            ParseError::TooManyFaults { count, chips, .. } => {
                ParseError::TooManyFaults { combination: s.to_string(), count, chips }
            }
            other => other,
        })
    }
}

/// Where the beats of beat-local faults (bit, column, word) fall relative to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// All in one beat pair (so in one codeword of every code): Abeyratne 2017's reading.
    #[default]
    Coincident,
    /// Each beat drawn on its own.
    Independent,
}

impl FromStr for Placement {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "coincident" => Ok(Placement::Coincident),
            "independent" => Ok(Placement::Independent),
            _ => Err(ParseError::UnknownPlacement(s.to_string())),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Coincident => "coincident",
            Placement::Independent => "independent",
        })
    }
}

/// How the bits inside a fault's footprint go wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorValues {
    /// Each touched symbol gets a uniformly random non-zero error within the footprint.
    #[default]
    Random,
    /// Every bit of the footprint is flipped.
    Invert,
}

impl FromStr for ErrorValues {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "random" => Ok(ErrorValues::Random),
            "invert" => Ok(ErrorValues::Invert),
            _ => Err(ParseError::UnknownErrorValues(s.to_string())),
        }
    }
}

impl fmt::Display for ErrorValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorValues::Random => "random",
            ErrorValues::Invert => "invert",
        })
    }
}

/// The knobs of fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FaultModel {
    /// Relative placement of beat-local faults.
    pub placement: Placement,
    /// Error values inside a footprint.
    pub values: ErrorValues,
}

/// Draw one occurrence of `combination` and return it as an error pattern (the bits to flip).
/// The pattern is never all-zero: every fault touches at least one symbol with a non-zero error.
pub fn inject<R: Rng + ?Sized>(combination: &FaultCombination, model: &FaultModel, rng: &mut R) -> RankAccess {
    let mut errors = RankAccess::default();
    let mut chips: [u8; CHIPS] = std::array::from_fn(|i| i as u8);
    let anchor_pair = rng.gen_range(0..BEAT_PAIRS);
    for (i, &kind) in combination.kinds.iter().enumerate() {
        let pick = rng.gen_range(i..CHIPS);
        chips.swap(i, pick);
        let chip = chips[i] as usize;
        let pair = match model.placement {
            Placement::Independent if i > 0 => rng.gen_range(0..BEAT_PAIRS),
            _ => anchor_pair,
        };
        inject_one(kind, chip, pair, model.values, rng, &mut errors);
    }
    errors
}

fn inject_one<R: Rng + ?Sized>(
    kind: FaultKind,
    chip: usize,
    pair: usize,
    values: ErrorValues,
    rng: &mut R,
    errors: &mut RankAccess,
) {
    let random = values == ErrorValues::Random;
    match kind {
        FaultKind::Bit | FaultKind::Column => {
            let half = rng.gen_range(0..2);
            let pin = rng.gen_range(0..PINS_PER_CHIP);
            errors.symbols[symbol_index(pair, chip)] ^= 1 << (4 * half + pin);
        }
        FaultKind::Word => {
            let half = rng.gen_range(0..2);
            let nibble: u8 = if random { rng.gen_range(1..=15) } else { 0x0F };
            errors.symbols[symbol_index(pair, chip)] ^= nibble << (4 * half);
        }
        FaultKind::Pin => {
            let pin = rng.gen_range(0..PINS_PER_CHIP);
            for p in 0..BEAT_PAIRS {
                let v: u8 = if random { rng.gen_range(1..=3) } else { 3 };
                errors.symbols[symbol_index(p, chip)] ^= ((v & 1) << pin) | ((v >> 1) << (4 + pin));
            }
        }
        FaultKind::Chip => {
            for p in 0..BEAT_PAIRS {
                let v: u8 = if random { rng.gen_range(1..=255) } else { 0xFF };
                errors.symbols[symbol_index(p, chip)] ^= v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn parses_combinations_and_lists() {
        let c: FaultCombination = "chip+pin".parse().unwrap();
        assert_eq!(c.to_string(), "pin+chip");
        assert_eq!(c.seed_label(), "1 pin + 1 chip");
        assert_eq!(FaultCombination::parse_list("all").unwrap().len(), 20);
        assert_eq!(FaultCombination::parse_list("table").unwrap().len(), 14);
        assert_eq!(FaultCombination::parse_list("bit, chip,bit").unwrap().len(), 2);
        assert!(matches!("bit+nibble".parse::<FaultCombination>(), Err(ParseError::UnknownFault(_))));
        assert!(matches!("bit+".parse::<FaultCombination>(), Err(ParseError::EmptyFault(_))));
        let nineteen = vec!["bit"; 19].join("+");
        assert!(matches!(nineteen.parse::<FaultCombination>(), Err(ParseError::TooManyFaults { count: 19, .. })));
        assert!(FaultCombination::parse_list("bit,,chip").is_err());
    }

    fn bits_per_chip(errors: &RankAccess) -> Vec<(usize, u32)> {
        (0..CHIPS)
            .map(|c| {
                let n = (0..BEAT_PAIRS).map(|p| errors.symbols[symbol_index(p, c)].count_ones()).sum();
                (c, n)
            })
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    #[test]
    fn footprints_match_the_seed_fault_model() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let invert = FaultModel { values: ErrorValues::Invert, ..FaultModel::default() };
        let expect = [("bit", 1), ("column", 1), ("pin", 8), ("word", 4), ("chip", 32)];
        for (name, bits) in expect {
            let c: FaultCombination = name.parse().unwrap();
            for _ in 0..200 {
                let e = inject(&c, &invert, &mut rng);
                assert_eq!(bits_per_chip(&e).len(), 1, "{name}");
                assert_eq!(bits_per_chip(&e)[0].1, bits, "{name}");
                let r = inject(&c, &FaultModel::default(), &mut rng);
                let touched = r.symbols.iter().filter(|&&s| s != 0).count();
                let expected = if bits >= 8 { 4 } else { 1 };
                assert_eq!(touched, expected, "{name}: every touched symbol is wrong");
            }
        }
    }

    #[test]
    fn multi_faults_use_distinct_chips_and_coincident_beats() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let c: FaultCombination = "bit+word".parse().unwrap();
        for _ in 0..500 {
            let e = inject(&c, &FaultModel::default(), &mut rng);
            assert_eq!(bits_per_chip(&e).len(), 2);
            let pairs: std::collections::HashSet<usize> =
                (0..72).filter(|&i| e.symbols[i] != 0).map(|i| i / CHIPS).collect();
            assert_eq!(pairs.len(), 1, "coincident: one beat pair");
        }
        let independent = FaultModel { placement: Placement::Independent, ..FaultModel::default() };
        let spread = (0..500)
            .filter(|_| {
                let e = inject(&c, &independent, &mut rng);
                (0..72)
                    .filter(|&i| e.symbols[i] != 0)
                    .map(|i| i / CHIPS)
                    .collect::<std::collections::HashSet<_>>()
                    .len()
                    == 2
            })
            .count();
        assert!(spread > 250, "independent beats differ about 3/4 of the time: {spread}");
    }
}
