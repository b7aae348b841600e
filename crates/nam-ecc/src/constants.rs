//! Every limit and tuning value of nam-ecc, in one place (the model is TigerBeetle's
//! `constants.zig`): what each bounds and why it has its value. Where one bounds another, a
//! compile-time assertion at the end says so. The code geometry (`crate::layout`,
//! `crate::strong`) and the field (`crate::gf`) are definitions of Abeyratne 2017 §4.4 and of
//! GF(2^8), not choices, and stay with their code.

use std::time::Duration;

/// Largest number of check symbols (n - k) supported: four, enough for RS(36,32), the
/// strongest code of Abeyratne 2017 §4.4; the syndromes are packed in a `u32`, one byte each.
pub const CHECK_SYMBOLS_MAX: usize = 4;

/// Trials per chunk: the unit of work and of random-stream derivation. 16 Ki trials: large
/// enough that starting a chunk's random stream is amortized, small enough that a table row
/// of a few million trials still spreads over every core.
pub const CHUNK_TRIALS: u64 = 1 << 14;

/// Largest number of trials per combination accepted (2^40): counts, and the
/// chunk index that keys each random stream, stay far from overflow.
pub const TRIALS_MAX: u64 = 1 << 40;

/// Least time each RS(19,16) throughput measurement of `nam-bench ecc` runs: 2 s, long
/// enough for a stable rate on a loaded machine.
pub const THROUGHPUT_MIN_TIME: Duration = Duration::from_secs(2);

/// The benchmark's single-thread baseline runs one in this many of the table's trials (at
/// least one chunk): enough for a stable rate, short beside the parallel table.
pub const BASELINE_TRIALS_SHARE: u64 = 50;

/// The naive codec of the throughput benchmark is timed on one in this many bytes of the
/// buffer: it is the slow reference, and a tenth of the buffer gives its rate in a tenth
/// of the time.
pub const NAIVE_DATA_SHARE: usize = 10;

/// Bytes on which the benchmark checks that the table-driven and naive codecs agree: 64 KiB,
/// every byte value in every symbol position many times over.
pub const AGREEMENT_CHECK_BYTES: usize = 1 << 16;

// Syndromes of the most check symbols fit the packed `u32`.
const _: () = assert!(CHECK_SYMBOLS_MAX * 8 <= u32::BITS as usize);
// Trials are whole chunks up to the limit.
const _: () = assert!(CHUNK_TRIALS <= TRIALS_MAX && TRIALS_MAX % CHUNK_TRIALS == 0);
// The agreement check covers whole 16-symbol data words.
const _: () = assert!(AGREEMENT_CHECK_BYTES % crate::strong::DATA_SYMBOLS == 0);
