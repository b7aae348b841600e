//! The x4 rank of Abeyratne 2017 (§4.4) and how its bits become 8-bit code symbols.
//!
//! > "A typical memory access to a DDR3 x4 memory module containing 18 chips (16 for data and 2
//! > for ECC) reads out a data block of size 512 bits over 8 beats." (§4.4)
//! >
//! > "one rank with 18 chips are activated and 512 bits are read out over 8 beats. Each beat
//! > contains 4 bits from a single chip, thus two beats can be paired to form an 8-bit symbol in
//! > an RS codeword. The 18 × 2 = 36 symbols from the first 4 beats are sent to one RS(36,32)
//! > decoding unit followed by the second set of 36 symbols from the next 4 beats." (§4.4.1)
//! >
//! > "Every two beats of data form one RS(18,16) codeword." (§4.4.2)
//!
//! One access is therefore 18 chips × 8 beats × 4 pins = 576 bits (512 data + 64 check). We cut
//! it into **72 symbols**, one per (chip, beat pair):
//!
//! * symbol (`beat_pair` p, `chip` c) holds the 4 bits chip c drives in beat 2p in its low nibble
//!   (pin q → bit q) and the 4 bits of beat 2p+1 in its high nibble (pin q → bit 4+q);
//! * chips 0..16 carry data, chips 16 and 17 carry check symbols;
//! * data byte `16·p + c` of the 64-byte line is the symbol of data chip c in beat pair p.
//!
//! The same 72 symbols serve both modes; only their grouping into codewords differs:
//!
//! | code | codewords per access | codeword w holds |
//! | --- | --- | --- |
//! | RS(36,32) (normal) | 2 | beat pairs 2w and 2w+1: 32 data symbols, 4 check symbols (chips 16, 17 in both pairs) |
//! | RS(18,16) / RS(19,16) (strong) | 4 | beat pair w: 16 data symbols + 2 check symbols; RS(19,16)'s third check symbol lives outside the rank |
//!
//! Because a symbol is the same physical (chip, beat pair) cell in both modes, a fault can be
//! drawn once and evaluated under every code.

/// Chips in a rank.
pub const CHIPS: usize = 18;
/// Chips carrying data.
pub const DATA_CHIPS: usize = 16;
/// Data pins (DQ) per x4 chip.
pub const PINS_PER_CHIP: usize = 4;
/// Beats per access (burst length 8).
pub const BEATS: usize = 8;
/// Beat pairs per access; a symbol spans one beat pair.
pub const BEAT_PAIRS: usize = BEATS / 2;
/// Symbols per access: one per (chip, beat pair).
pub const SYMBOLS: usize = CHIPS * BEAT_PAIRS;
/// Data bytes per access (one 64-byte cache line).
pub const LINE_BYTES: usize = DATA_CHIPS * BEAT_PAIRS;

/// Index of symbol (beat pair, chip) in [`RankAccess::symbols`].
#[inline]
pub const fn symbol_index(beat_pair: usize, chip: usize) -> usize {
    beat_pair * CHIPS + chip
}

/// The symbol index and the bit mask inside it of the bit chip `chip` drives on pin `pin` in
/// beat `beat`.
#[inline]
pub const fn bit_location(chip: usize, beat: usize, pin: usize) -> (usize, u8) {
    (symbol_index(beat / 2, chip), 1u8 << (4 * (beat % 2) + pin))
}

/// The 576 bits of one access to the rank, held as 72 symbols (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankAccess {
    /// Symbols indexed by [`symbol_index`].
    pub symbols: [u8; SYMBOLS],
}

impl Default for RankAccess {
    fn default() -> Self {
        RankAccess { symbols: [0; SYMBOLS] }
    }
}

impl RankAccess {
    /// The bit chip `chip` drives on pin `pin` in beat `beat`. Out-of-range indices read as
    /// `false`.
    pub fn bit(&self, chip: usize, beat: usize, pin: usize) -> bool {
        if chip >= CHIPS || beat >= BEATS || pin >= PINS_PER_CHIP {
            return false;
        }
        let (index, mask) = bit_location(chip, beat, pin);
        self.symbols[index] & mask != 0
    }

    /// The 4 bits (pins 0..4 in bits 0..4) chip `chip` drives in beat `beat`.
    pub fn nibble(&self, chip: usize, beat: usize) -> u8 {
        if chip >= CHIPS || beat >= BEATS {
            return 0;
        }
        (self.symbols[symbol_index(beat / 2, chip)] >> (4 * (beat % 2))) & 0x0F
    }

    /// The bus view: for every beat, the 18 nibbles the chips drive, i.e. what crosses the
    /// 72-bit DDR bus in that beat.
    pub fn beats(&self) -> [[u8; CHIPS]; BEATS] {
        let mut out = [[0u8; CHIPS]; BEATS];
        for (beat, row) in out.iter_mut().enumerate() {
            for (chip, nibble) in row.iter_mut().enumerate() {
                *nibble = self.nibble(chip, beat);
            }
        }
        out
    }

    /// Build an access from the bus view (the low nibble of every entry is used).
    pub fn from_beats(beats: &[[u8; CHIPS]; BEATS]) -> RankAccess {
        let mut access = RankAccess::default();
        for (beat, row) in beats.iter().enumerate() {
            for (chip, &nibble) in row.iter().enumerate() {
                access.symbols[symbol_index(beat / 2, chip)] |= (nibble & 0x0F) << (4 * (beat % 2));
            }
        }
        access
    }

    /// XOR an error pattern into this access.
    pub fn xor(&mut self, errors: &RankAccess) {
        for (s, e) in self.symbols.iter_mut().zip(errors.symbols.iter()) {
            *s ^= e;
        }
    }

    /// The 64 data bytes (byte 16·p + c = symbol of data chip c in beat pair p).
    pub fn line(&self) -> [u8; LINE_BYTES] {
        let mut line = [0u8; LINE_BYTES];
        for p in 0..BEAT_PAIRS {
            line[p * DATA_CHIPS..(p + 1) * DATA_CHIPS]
                .copy_from_slice(&self.symbols[symbol_index(p, 0)..symbol_index(p, DATA_CHIPS)]);
        }
        line
    }

    /// Write the 64 data bytes into the data chips (check chips untouched).
    pub fn set_line(&mut self, line: &[u8; LINE_BYTES]) {
        for p in 0..BEAT_PAIRS {
            self.symbols[symbol_index(p, 0)..symbol_index(p, DATA_CHIPS)]
                .copy_from_slice(&line[p * DATA_CHIPS..(p + 1) * DATA_CHIPS]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_matches_the_seed() {
        assert_eq!(CHIPS * BEATS * PINS_PER_CHIP, 576);
        assert_eq!(LINE_BYTES * 8, 512);
        assert_eq!(SYMBOLS, 72);
    }

    #[test]
    fn every_bit_has_its_own_place() {
        let mut seen = std::collections::HashSet::new();
        for chip in 0..CHIPS {
            for beat in 0..BEATS {
                for pin in 0..PINS_PER_CHIP {
                    let (index, mask) = bit_location(chip, beat, pin);
                    assert_eq!(mask.count_ones(), 1);
                    assert!(seen.insert((index, mask)));
                    let mut a = RankAccess::default();
                    a.symbols[index] = mask;
                    assert!(a.bit(chip, beat, pin));
                }
            }
        }
        assert_eq!(seen.len(), 576);
    }

    #[test]
    fn bus_view_round_trips() {
        let mut a = RankAccess::default();
        for (i, s) in a.symbols.iter_mut().enumerate() {
            *s = (i as u8).wrapping_mul(73).wrapping_add(5);
        }
        assert_eq!(RankAccess::from_beats(&a.beats()), a);
        let line = a.line();
        let mut b = RankAccess::default();
        b.set_line(&line);
        assert_eq!(b.line(), line);
    }
}
