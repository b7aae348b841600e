//! Property tests of the decoders: within the correction radius everything is corrected, within
//! the detection radius everything is at least detected, and no input makes a decoder panic.

use nam_ecc::{CodeKind, DecodeError, DecodePolicy, Decoded, LineCodec, LocationCheck, RsCode, StrongCode};
use proptest::prelude::*;

/// (n, k) of the codes decoded as plain RS codes.
const CODES: [(usize, usize); 3] = [(36, 32), (18, 16), (19, 16)];

/// Distinct positions (at most `max`) with non-zero error values.
fn error_pattern(n: usize, max: usize) -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::sample::subsequence((0..n).collect::<Vec<_>>(), 0..=max).prop_flat_map(|positions| {
        let len = positions.len();
        (Just(positions), proptest::collection::vec(1..=255u8, len)).prop_map(|(p, v)| p.into_iter().zip(v).collect())
    })
}

fn encoded(code: &RsCode, data: &[u8]) -> Vec<u8> {
    let mut word = vec![0u8; code.n()];
    word[..code.k()].copy_from_slice(&data[..code.k()]);
    code.encode(&mut word).expect("right length");
    word
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn within_t_errors_are_corrected(
        which in 0..CODES.len(),
        t in 0usize..=2,
        data in proptest::collection::vec(any::<u8>(), 32),
        errors in error_pattern(36, 2),
    ) {
        let (n, k) = CODES[which];
        let code = RsCode::new(n, k).expect("valid code");
        let t = t.min(code.correct_up_to_max());
        let clean = encoded(&code, &data);
        let mut word = clean.clone();
        let errors: Vec<_> = errors.into_iter().filter(|&(p, _)| p < n).take(t).collect();
        for &(p, v) in &errors {
            word[p] ^= v;
        }
        let out = code.decode(&mut word, &DecodePolicy::correct(t));
        if errors.is_empty() {
            prop_assert_eq!(out, Ok(Decoded::Clean));
        } else {
            prop_assert_eq!(out, Ok(Decoded::Corrected { symbols: errors.len() }));
        }
        prop_assert_eq!(word, clean);
    }

    #[test]
    fn within_r_minus_t_errors_are_detected(
        which in 0..CODES.len(),
        t in 0usize..=2,
        data in proptest::collection::vec(any::<u8>(), 32),
        errors in error_pattern(36, 4),
    ) {
        let (n, k) = CODES[which];
        let code = RsCode::new(n, k).expect("valid code");
        let t = t.min(code.correct_up_to_max());
        let detect = code.check_symbols() - t;
        let clean = encoded(&code, &data);
        let errors: Vec<_> = errors.into_iter().filter(|&(p, _)| p < n).take(detect).collect();
        prop_assume!(errors.len() > t);
        let mut word = clean.clone();
        for &(p, v) in &errors {
            word[p] ^= v;
        }
        let received = word.clone();
        prop_assert_eq!(
            code.decode(&mut word, &DecodePolicy::correct(t)),
            Err(DecodeError::Uncorrectable)
        );
        prop_assert_eq!(word, received, "a rejected word is left as received");
    }

    #[test]
    fn strong_mode_corrects_one_and_detects_two(
        data in proptest::array::uniform16(any::<u8>()),
        errors in error_pattern(18, 2),
    ) {
        let code = StrongCode::new();
        let (checks, third) = code.encode(&data);
        let mut clean = data.to_vec();
        clean.extend_from_slice(&checks);
        let mut word = clean.clone();
        for &(p, v) in &errors {
            word[p] ^= v;
        }
        let out = code.read(&mut word, third, &DecodePolicy::correct(1));
        match errors.len() {
            0 | 1 => {
                prop_assert!(out.is_ok());
                prop_assert_eq!(word, clean);
            }
            _ => prop_assert_eq!(out, Err(DecodeError::Uncorrectable)),
        }
    }

    #[test]
    fn decoding_arbitrary_input_never_panics(
        which in 0..CODES.len(),
        t in 0usize..=3,
        full_length in any::<bool>(),
        word in proptest::collection::vec(any::<u8>(), 0..40),
        third in any::<u8>(),
    ) {
        let (n, k) = CODES[which];
        let code = RsCode::new(n, k).expect("valid code");
        let mut policy = DecodePolicy::correct(t);
        if full_length {
            policy.location_check = LocationCheck::FullLength;
        }
        let mut w = word.clone();
        let _ = code.decode(&mut w, &policy);
        let _ = code.syndromes(&word);
        let mut w = word.clone();
        let _ = StrongCode::new().read(&mut w, third, &policy);
        let mut out = vec![0u8; word.len() / 18 * 16];
        let thirds = vec![third; word.len() / 18];
        let _ = StrongCode::new().decode_buffer(&word, &thirds, &mut out, &policy);
    }

    #[test]
    fn line_reads_of_arbitrary_accesses_never_panic(
        symbols in proptest::array::uniform32(any::<u8>()),
        more in proptest::collection::vec(any::<u8>(), 40),
        apart in proptest::array::uniform4(any::<u8>()),
        t in 0usize..=2,
    ) {
        for kind in CodeKind::ALL {
            let Ok(codec) = LineCodec::new(kind, DecodePolicy::correct(t.min(kind.correct_up_to_max()))) else {
                continue;
            };
            let mut line = nam_ecc::StoredLine::default();
            line.rank.symbols[..32].copy_from_slice(&symbols);
            line.rank.symbols[32..].copy_from_slice(&more);
            line.apart = apart;
            let read = codec.read(&mut line);
            prop_assert_eq!(read.codewords, kind.codewords_per_access());
        }
    }
}
