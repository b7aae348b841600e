//! DRAM fault codes in software: the dual-mode Reed-Solomon ECC of Abeyratne 2017 (§4.4, §4.6.2) and
//! its fault-injection study.
//!
//! Checkpoints kept in DRAM need a stronger code than ordinary data. Abeyratne 2017 protects normal
//! data with **RS(36,32)** (single-symbol correct, triple-symbol detect) and checkpoint pages with
//! **RS(18,16)** detection escalating to **RS(19,16)** Chipkill-Correct (single-symbol correct,
//! double-symbol detect), all over GF(2^8) on one x4 rank of 18 chips read in 8 beats.
//!
//! # Tour
//!
//! * [`gf`] — GF(2^8) arithmetic (log/antilog tables; a bit-serial multiply as baseline).
//! * [`rs`] — [`RsCode`]: shortened RS(n, k) with a table-driven encoder and syndromes, and a
//!   bounded-distance decoder (Berlekamp–Massey, Chien, Forney) under a [`DecodePolicy`]
//!   ("correct up to t, detect beyond").
//! * [`strong`] — [`StrongCode`]: the two-tier RS(18,16)/RS(19,16) mode whose third check symbol
//!   lives apart from the rank, with buffer encode/decode for real data.
//! * [`layout`] — the rank: 18 chips × 8 beats × 4 pins, cut into 72 symbols of one chip over
//!   two beats ([`RankAccess`]).
//! * [`access`] — [`CodeKind`] and [`LineCodec`]: a code applied to a whole 64-byte line.
//! * [`fault`] — Abeyratne 2017's fault types (bit, column, pin, word, chip), combinations of them and
//!   their injection from a seeded generator.
//! * [`sim`] — the Monte-Carlo runner that classifies trials as DCE, DUE or SDC on all cores.
//! * [`report`] — JSON records and Table-4.4-shaped text of results.
//! * [`seed`] — Abeyratne 2017's published Table 4.4, for comparison (the module, [`SimConfig::seed_table`]
//!   and the `seed_*` names refer to those published numbers, not to random seeds).
//! * [`bench`](mod@bench) — throughput and trial-rate measurements, each with its baseline.
//! * [`error`] — the typed errors.
//!
//! # Example
//!
//! Protect a checkpoint buffer with the strong code, lose a whole chip's worth of a codeword,
//! and get the data back; then rerun a little of Table 4.4.
//!
//! ```
//! use nam_ecc::{CodeKind, DecodePolicy, FaultCombination, SimConfig, StrongCode};
//!
//! let code = StrongCode::new();
//! let data: Vec<u8> = (0..64u8).collect();
//! let mut stored = vec![0u8; 72];
//! let mut third = vec![0u8; 4];
//! code.encode_buffer(&data, &mut stored, &mut third)?;
//!
//! stored[18 + 5] ^= 0xFF; // chip 5 of the second codeword returns garbage
//! let mut out = vec![0u8; 64];
//! let report = code.decode_buffer(&stored, &third, &mut out, &DecodePolicy::correct(1))?;
//! assert_eq!((report.corrected, report.uncorrectable), (1, 0));
//! assert_eq!(out, data);
//!
//! let mut config = SimConfig::seed_table(2_000, 7);
//! config.combinations = FaultCombination::parse_list("chip,chip+chip")?;
//! let results = nam_ecc::sim::run(&config)?;
//! let rs19_chip = results
//!     .iter()
//!     .find(|r| r.code.kind == CodeKind::Rs19_16 && r.combination.to_string() == "chip")
//!     .map(|r| r.tally)
//!     .unwrap_or_default();
//! assert_eq!(rs19_chip.dce, rs19_chip.trials); // Chipkill-Correct
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod access;
pub mod bench;
pub mod constants;
pub mod error;
pub mod fault;
pub mod gf;
pub mod layout;
pub mod reference;
pub mod report;
pub mod rs;
pub mod seed;
pub mod sim;
pub mod strong;

pub use access::{CodeKind, LineCodec, LineRead, StoredLine};
pub use error::{CodeError, DecodeError, ParseError, SimError};
pub use fault::{ErrorValues, FaultCombination, FaultKind, FaultModel, Placement};
pub use layout::RankAccess;
pub use rs::{DecodePolicy, Decoded, LocationCheck, RsCode};
pub use sim::{CodeSetup, DataModel, Outcome, SimConfig, SimResult, Tally};
pub use strong::{BufferReport, StrongCode};
