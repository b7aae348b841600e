//! Known-answer tests of the encoders.
//!
//! The expected check symbols were computed with an independent textbook implementation (a
//! few lines of Python: GF(2^8) mod 0x11D, g(x) = Π_{j<r} (x - α^j), systematic
//! `m(x)·x^r mod g(x)`, message first; the third RS(19,16) symbol is the 18-symbol word
//! evaluated at α^2), not with this crate. The published QR-code vector that anchors the same
//! convention is in `src/reference.rs`.

use nam_ecc::layout::{symbol_index, LINE_BYTES};
use nam_ecc::{CodeKind, LineCodec, RsCode, StrongCode};

#[test]
fn rs36_32_known_answer() {
    let data = b"nam-ecc known answer: RS(36,32)!";
    let code = RsCode::new(36, 32).expect("valid");
    let mut word = [0u8; 36];
    word[..32].copy_from_slice(data);
    code.encode(&mut word).expect("right length");
    assert_eq!(word[32..], [0xe1, 0x87, 0x46, 0x76]);
}

#[test]
fn rs36_32_known_answer_through_the_rank_layout() {
    // Line bytes 0..32 are the data symbols of codeword 0 (beat pairs 0 and 1); its check
    // symbols land on ECC chips 16, 17 of beat pair 0, then of beat pair 1.
    let mut line = [0u8; LINE_BYTES];
    line[..32].copy_from_slice(b"nam-ecc known answer: RS(36,32)!");
    let stored = LineCodec::seed(CodeKind::Rs36_32).encode(&line);
    let s = &stored.rank.symbols;
    assert_eq!(
        [s[symbol_index(0, 16)], s[symbol_index(0, 17)], s[symbol_index(1, 16)], s[symbol_index(1, 17)]],
        [0xe1, 0x87, 0x46, 0x76]
    );
}

#[test]
fn rs18_16_and_rs19_16_known_answers() {
    let code = StrongCode::new();
    assert_eq!(code.encode(b"checkpoint page!"), ([0x77, 0x6f], 0x7b));
    assert_eq!(code.encode(&[0xff; 16]), ([0x98, 0x98], 0x04));
    assert_eq!(code.encode(&[0; 16]), ([0, 0], 0));
    let mut word = [0u8; 18];
    word[..16].copy_from_slice(b"checkpoint page!");
    code.tier1().encode(&mut word).expect("right length");
    assert_eq!(word[16..], [0x77, 0x6f]);
}
