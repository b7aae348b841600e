//! Monte-Carlo fault-injection study: Abeyratne 2017's Table 4.4, rerunnable.
//!
//! A trial draws one occurrence of a [`FaultCombination`] ([`crate::fault::inject`]), applies the
//! same error pattern to a stored line under every selected code, reads the line back and
//! classifies it by comparing the data delivered with the data written:
//!
//! * **SDC** (silent data corruption): some codeword delivered wrong data without flagging it;
//! * **DUE** (detected uncorrectable error): otherwise, some codeword was flagged uncorrectable;
//! * **DCE** (detected and corrected error): otherwise — every codeword delivered the right data.
//!
//! SDC outranks DUE because each codeword is decoded and forwarded on its own (§4.4.1: "If a
//! codeword has 1 symbol error, it is corrected and sent to the last level cache").
//!
//! # Determinism and parallelism
//!
//! Trials are cut into chunks of [`CHUNK_TRIALS`]. Chunk `i` of a combination draws from a
//! ChaCha8 generator keyed by (seed, the combination's canonical name, i), and the chunks run on
//! all cores with rayon. The counts therefore depend only on the random seed, the combination, the fault
//! model and the number of trials — not on the thread count, the order of the list, or which
//! other codes or combinations run alongside. Every code sees the same faults.
//!
//! # Data
//!
//! The codes are linear, so whether a received word decodes to the written one depends only on
//! the error pattern. [`DataModel::Zero`] (default) therefore writes the all-zero line, whose
//! codewords are all zero; [`DataModel::Random`] writes a random line per trial and encodes it,
//! which costs more and — as a test checks — gives identical counts.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::access::{CodeKind, LineCodec, LineRead, StoredLine};
pub use crate::constants::{CHUNK_TRIALS, TRIALS_MAX};
use crate::error::SimError;
use crate::fault::{inject, FaultCombination, FaultModel};
use crate::layout::{symbol_index, BEAT_PAIRS, DATA_CHIPS, LINE_BYTES};
use crate::rs::DecodePolicy;

/// The class of one trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Detected and corrected: the data read back is the data written.
    Dce,
    /// Detected, uncorrectable: a codeword was flagged.
    Due,
    /// Silent data corruption: wrong data delivered without a flag.
    Sdc,
}

/// Counts of outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Trials run.
    pub trials: u64,
    /// Detected and corrected.
    pub dce: u64,
    /// Detected uncorrectable.
    pub due: u64,
    /// Silent data corruption.
    pub sdc: u64,
}

impl Tally {
    /// Count one trial.
    pub fn add(&mut self, outcome: Outcome) {
        self.trials += 1;
        match outcome {
            Outcome::Dce => self.dce += 1,
            Outcome::Due => self.due += 1,
            Outcome::Sdc => self.sdc += 1,
        }
    }

    /// Sum of two tallies.
    pub fn merge(&mut self, other: &Tally) {
        self.trials += other.trials;
        self.dce += other.dce;
        self.due += other.due;
        self.sdc += other.sdc;
    }

    fn pct(&self, count: u64) -> f64 {
        if self.trials == 0 {
            0.0
        } else {
            100.0 * count as f64 / self.trials as f64
        }
    }

    /// DCE in percent of trials.
    pub fn dce_pct(&self) -> f64 {
        self.pct(self.dce)
    }

    /// DUE in percent of trials.
    pub fn due_pct(&self) -> f64 {
        self.pct(self.due)
    }

    /// SDC in percent of trials.
    pub fn sdc_pct(&self) -> f64 {
        self.pct(self.sdc)
    }
}

/// What the simulated line holds before the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataModel {
    /// The all-zero line (exact for linear codes; fast).
    #[default]
    Zero,
    /// A random line per trial, encoded by each code.
    Random,
}

/// A code and the policy its decoder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CodeSetup {
    /// The code.
    pub kind: CodeKind,
    /// Its decoding policy.
    pub policy: DecodePolicy,
}

impl CodeSetup {
    /// The code with Abeyratne 2017's policy.
    pub fn seed(kind: CodeKind) -> CodeSetup {
        CodeSetup { kind, policy: kind.seed_policy() }
    }
}

/// A simulation to run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Codes to evaluate (every one sees the same faults).
    pub codes: Vec<CodeSetup>,
    /// Fault combinations, one result row each.
    pub combinations: Vec<FaultCombination>,
    /// Trials per combination.
    pub trials: u64,
    /// Seed of the random streams.
    pub seed: u64,
    /// Fault placement and values.
    pub model: FaultModel,
    /// Data written before the fault.
    pub data: DataModel,
    /// Worker threads; `None` uses every core.
    pub threads: Option<usize>,
}

impl SimConfig {
    /// Table 4.4: the three codes with Abeyratne 2017's policies, Abeyratne 2017's 14 rows.
    pub fn seed_table(trials: u64, seed: u64) -> SimConfig {
        SimConfig {
            codes: CodeKind::ALL.iter().map(|&k| CodeSetup::seed(k)).collect(),
            combinations: FaultCombination::seed_table_rows(),
            trials,
            seed,
            model: FaultModel::default(),
            data: DataModel::default(),
            threads: None,
        }
    }

    fn validate(&self) -> Result<Vec<LineCodec>, SimError> {
        if self.trials == 0 {
            return Err(SimError::ZeroTrials);
        }
        if self.trials > TRIALS_MAX {
            return Err(SimError::TooManyTrials { requested: self.trials, max: TRIALS_MAX });
        }
        if self.codes.is_empty() {
            return Err(SimError::NoCodes);
        }
        if self.combinations.is_empty() {
            return Err(SimError::NoFaults);
        }
        self.codes.iter().map(|c| LineCodec::new(c.kind, c.policy).map_err(SimError::from)).collect()
    }
}

/// The outcome counts of one code under one fault combination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimResult {
    /// The code and its policy.
    pub code: CodeSetup,
    /// The fault combination.
    pub combination: FaultCombination,
    /// The counts.
    pub tally: Tally,
}

/// Run the simulation. Results come combination-major (all codes of the first combination,
/// then the next), in the order of the configuration.
pub fn run(config: &SimConfig) -> Result<Vec<SimResult>, SimError> {
    let codecs = config.validate()?;
    let chunks = config.trials.div_ceil(CHUNK_TRIALS);
    let units: Vec<(usize, u64)> =
        (0..config.combinations.len()).flat_map(|c| (0..chunks).map(move |k| (c, k))).collect();
    let work = || {
        units
            .par_iter()
            .map(|&(c, k)| {
                let first = k * CHUNK_TRIALS;
                let count = CHUNK_TRIALS.min(config.trials - first);
                (c, run_chunk(config, &codecs, c, k, count))
            })
            .collect::<Vec<_>>()
    };
    let partial = match config.threads {
        None => work(),
        Some(threads) => rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| SimError::ThreadPool { threads, reason: e.to_string() })?
            .install(work),
    };
    let mut totals = vec![vec![Tally::default(); codecs.len()]; config.combinations.len()];
    for (c, tallies) in partial {
        for (total, t) in totals[c].iter_mut().zip(&tallies) {
            total.merge(t);
        }
    }
    let mut out = Vec::with_capacity(totals.len() * codecs.len());
    for (c, row) in totals.into_iter().enumerate() {
        for (code, tally) in config.codes.iter().zip(row) {
            out.push(SimResult { code: *code, combination: config.combinations[c].clone(), tally });
        }
    }
    Ok(out)
}

/// The 32-byte ChaCha key of chunk `chunk` of `combination`.
fn chunk_key(seed: u64, combination: &FaultCombination, chunk: u64) -> [u8; 32] {
    // FNV-1a of the canonical name: stable across runs, platforms and list orders.
    let name_hash = combination
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&name_hash.to_le_bytes());
    key[16..24].copy_from_slice(&chunk.to_le_bytes());
    key[24..].copy_from_slice(b"nam-ecc1");
    key
}

fn run_chunk(config: &SimConfig, codecs: &[LineCodec], combination: usize, chunk: u64, count: u64) -> Vec<Tally> {
    let key = chunk_key(config.seed, &config.combinations[combination], chunk);
    let mut fault_rng = ChaCha8Rng::from_seed(key);
    let mut data_rng = ChaCha8Rng::from_seed(key);
    data_rng.set_stream(1);
    let mut tallies = vec![Tally::default(); codecs.len()];
    let mut line = [0u8; LINE_BYTES];
    for _ in 0..count {
        let errors = inject(&config.combinations[combination], &config.model, &mut fault_rng);
        if config.data == DataModel::Random {
            data_rng.fill_bytes(&mut line);
        }
        for (codec, tally) in codecs.iter().zip(tallies.iter_mut()) {
            let written = match config.data {
                DataModel::Zero => StoredLine::default(),
                DataModel::Random => codec.encode(&line),
            };
            let mut received = written;
            received.rank.xor(&errors);
            let read = codec.read(&mut received);
            tally.add(classify(codec.kind(), &read, &written, &received));
        }
    }
    tallies
}

/// Classify a read: SDC if a codeword that was not flagged delivered wrong data, else DUE if
/// one was flagged, else DCE.
pub fn classify(kind: CodeKind, read: &LineRead, written: &StoredLine, delivered: &StoredLine) -> Outcome {
    let mut flagged = false;
    for w in 0..read.codewords.min(BEAT_PAIRS) {
        if read.results[w].is_err() {
            flagged = true;
            continue;
        }
        let wrong = kind.codeword_beat_pairs(w).any(|p| {
            let range = symbol_index(p, 0)..symbol_index(p, DATA_CHIPS);
            written.rank.symbols[range.clone()] != delivered.rank.symbols[range]
        });
        if wrong {
            return Outcome::Sdc;
        }
    }
    if flagged {
        Outcome::Due
    } else {
        Outcome::Dce
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(trials: u64) -> SimConfig {
        SimConfig {
            combinations: FaultCombination::parse_list("bit,chip,pin+chip").unwrap_or_default(),
            ..SimConfig::seed_table(trials, 42)
        }
    }

    #[test]
    fn counts_add_up_and_are_thread_independent() {
        let mut one = small(3 * CHUNK_TRIALS / 2);
        one.threads = Some(1);
        let mut two = one.clone();
        two.threads = Some(2);
        let a = run(&one).unwrap();
        let b = run(&two).unwrap();
        assert_eq!(a, b);
        for r in &a {
            let t = r.tally;
            assert_eq!(t.trials, one.trials);
            assert_eq!(t.dce + t.due + t.sdc, t.trials);
        }
    }

    #[test]
    fn zero_data_and_random_data_agree() {
        let mut zero = small(4000);
        zero.combinations = FaultCombination::all_singles_and_pairs();
        zero.model.values = crate::fault::ErrorValues::Random;
        let mut random = zero.clone();
        random.data = DataModel::Random;
        assert_eq!(run(&zero).unwrap(), run(&random).unwrap());
    }

    #[test]
    fn refuses_bad_configurations() {
        let mut c = small(0);
        assert_eq!(run(&c), Err(SimError::ZeroTrials));
        c.trials = TRIALS_MAX + 1;
        assert!(matches!(run(&c), Err(SimError::TooManyTrials { .. })));
        c.trials = 10;
        c.codes.clear();
        assert_eq!(run(&c), Err(SimError::NoCodes));
        let mut c = small(10);
        c.combinations.clear();
        assert_eq!(run(&c), Err(SimError::NoFaults));
        let mut c = small(10);
        c.codes[2].policy = DecodePolicy::correct(2);
        assert!(matches!(run(&c), Err(SimError::Policy(_))));
    }
}
