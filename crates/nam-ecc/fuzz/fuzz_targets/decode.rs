//! Every decoder of nam-ecc on arbitrary bytes: it may reject them, it must never panic, and
//! whatever it accepts must be a codeword afterwards.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nam_ecc::{CodeKind, DecodePolicy, LineCodec, LocationCheck, RsCode, StoredLine, StrongCode};

/// Codes are built once: their tables take longer to build than a decode.
fn line_codecs() -> &'static Vec<LineCodec> {
    static CODECS: OnceLock<Vec<LineCodec>> = OnceLock::new();
    CODECS.get_or_init(|| {
        let mut out = Vec::new();
        for kind in CodeKind::ALL {
            for t in 0..=2 {
                for full in [false, true] {
                    let mut policy = DecodePolicy::correct(t);
                    if full {
                        policy.location_check = LocationCheck::FullLength;
                    }
                    out.extend(LineCodec::new(kind, policy).ok());
                }
            }
        }
        out
    })
}

fn codes() -> &'static (Vec<RsCode>, StrongCode) {
    static CODES: OnceLock<(Vec<RsCode>, StrongCode)> = OnceLock::new();
    CODES.get_or_init(|| {
        let rs = [(36, 32), (18, 16), (19, 16)].iter().filter_map(|&(n, k)| RsCode::new(n, k).ok()).collect();
        (rs, StrongCode::new())
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((&control, bytes)) = input.split_first() else {
        return;
    };
    let mut policy = DecodePolicy::correct(usize::from(control & 0x03));
    if control & 0x04 != 0 {
        policy.location_check = LocationCheck::FullLength;
    }
    let (rs, strong) = codes();
    for code in rs {
        let mut word = bytes.to_vec();
        let accepted = code.decode(&mut word, &policy).is_ok();
        if accepted && policy.location_check == LocationCheck::Shortened {
            let syndromes = code.syndromes(&word).unwrap_or_default();
            assert!(syndromes.iter().all(|&s| s == 0), "accepted word is a codeword");
        }
    }
    let third = bytes.first().copied().unwrap_or(0);
    let mut word = bytes.to_vec();
    let _ = strong.read(&mut word, third, &policy);
    let codewords = bytes.len() / 18;
    let mut out = vec![0u8; codewords * 16];
    let thirds = vec![third; codewords];
    let _ = strong.decode_buffer(&bytes[..codewords * 18], &thirds, &mut out, &policy);
    if bytes.len() >= 76 {
        for codec in line_codecs().iter().filter(|c| c.policy() == policy) {
            let mut line = StoredLine::default();
            line.rank.symbols.copy_from_slice(&bytes[..72]);
            line.apart.copy_from_slice(&bytes[72..76]);
            let _ = codec.read(&mut line);
        }
    }
});
