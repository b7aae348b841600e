//! Measurements behind `nam-bench ecc`, each with a baseline run in the same process.
//!
//! * [`rs19_throughput`]: RS(19,16) encode + decode of a real buffer on one core, table-driven
//!   ([`StrongCode`]) against the textbook encoder/syndromes with the bit-serial multiply
//!   ([`crate::reference`] + [`crate::gf::mul_naive`]).
//! * [`monte_carlo_rate`]: trials per second of [`crate::sim::run`] on all cores against the
//!   same work on one thread.

use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::constants::{AGREEMENT_CHECK_BYTES, BASELINE_TRIALS_SHARE, NAIVE_DATA_SHARE, THROUGHPUT_MIN_TIME};
use crate::error::SimError;
use crate::gf;
use crate::reference;
use crate::report::{self, ResultRecord};
use crate::rs::{locate_errors, DecodePolicy, LocationCheck};
use crate::sim::{self, SimConfig, CHUNK_TRIALS};
use crate::strong::{StrongCode, DATA_SYMBOLS, STORED_SYMBOLS};

/// Throughput of one implementation, in MB/s of data (10^6 bytes per second).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Throughput {
    /// Data bytes encoded (and then decoded) per repetition.
    pub data_bytes: usize,
    /// Repetitions timed.
    pub repetitions: usize,
    /// Encode rate.
    pub encode_mb_s: f64,
    /// Decode rate.
    pub decode_mb_s: f64,
    /// Encode + decode rate: data bytes over (encode time + decode time).
    pub encode_decode_mb_s: f64,
    /// Whether the decoded buffer equals the data encoded.
    pub round_trip: bool,
}

/// RS(19,16) throughput, table-driven against the naive baseline.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ThroughputReport {
    /// The implementation of [`StrongCode`].
    pub table: Throughput,
    /// The naive baseline.
    pub naive: Throughput,
    /// `table.encode_decode_mb_s / naive.encode_decode_mb_s`.
    pub speedup: f64,
    /// Whether both implementations produced the same stored bytes and third symbols.
    pub outputs_agree: bool,
}

/// Measure RS(19,16) encode + decode throughput on one core with a random buffer of
/// `data_bytes` (rounded down to 16 bytes), repeating for at least `min_time` per
/// implementation (the naive one on a buffer a tenth as long).
pub fn rs19_throughput(data_bytes: usize, min_time: Duration, seed: u64) -> ThroughputReport {
    let data_bytes = (data_bytes / DATA_SYMBOLS).max(1) * DATA_SYMBOLS;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut data = vec![0u8; data_bytes];
    rng.fill_bytes(&mut data);
    let code = StrongCode::new();
    let table = time_codec(
        &data,
        min_time,
        |d, s, t| {
            let _ = code.encode_buffer(d, s, t);
        },
        |s, t, out| {
            let _ = code.decode_buffer(s, t, out, &DecodePolicy::correct(1));
        },
    );
    let naive_len = (data_bytes / NAIVE_DATA_SHARE / DATA_SYMBOLS).max(1) * DATA_SYMBOLS;
    let naive = time_codec(&data[..naive_len], min_time, naive_encode, naive_decode);
    let outputs_agree = {
        let n = naive_len.min(AGREEMENT_CHECK_BYTES);
        let (mut s1, mut t1) = (vec![0u8; n / 16 * 18], vec![0u8; n / 16]);
        let (mut s2, mut t2) = (s1.clone(), t1.clone());
        let _ = code.encode_buffer(&data[..n], &mut s1, &mut t1);
        naive_encode(&data[..n], &mut s2, &mut t2);
        s1 == s2 && t1 == t2
    };
    ThroughputReport {
        table,
        naive,
        speedup: table.encode_decode_mb_s / naive.encode_decode_mb_s.max(f64::MIN_POSITIVE),
        outputs_agree,
    }
}

fn time_codec(
    data: &[u8],
    min_time: Duration,
    encode: impl Fn(&[u8], &mut [u8], &mut [u8]),
    decode: impl Fn(&[u8], &[u8], &mut [u8]),
) -> Throughput {
    let codewords = data.len() / DATA_SYMBOLS;
    let mut stored = vec![0u8; codewords * STORED_SYMBOLS];
    let mut third = vec![0u8; codewords];
    let mut out = vec![0u8; data.len()];
    let (mut encode_time, mut decode_time, mut repetitions) = (Duration::ZERO, Duration::ZERO, 0);
    while encode_time + decode_time < min_time || repetitions < 2 {
        let start = Instant::now();
        encode(data, &mut stored, &mut third);
        let mid = Instant::now();
        decode(&stored, &third, &mut out);
        let end = Instant::now();
        std::hint::black_box(&out);
        encode_time += mid - start;
        decode_time += end - mid;
        repetitions += 1;
    }
    let bytes = (data.len() * repetitions) as f64;
    let rate = |t: Duration| bytes / t.as_secs_f64().max(1e-9) / 1e6;
    Throughput {
        data_bytes: data.len(),
        repetitions,
        encode_mb_s: rate(encode_time),
        decode_mb_s: rate(decode_time),
        encode_decode_mb_s: rate(encode_time + decode_time),
        round_trip: out.as_slice() == data,
    }
}

/// Textbook RS(19,16) encoder: polynomial division for the two stored checks, Horner for the
/// third symbol, bit-serial multiplies throughout.
fn naive_encode(data: &[u8], stored: &mut [u8], third: &mut [u8]) {
    let generator = reference::generator_poly(2, gf::mul_naive);
    for (i, chunk) in data.chunks_exact(DATA_SYMBOLS).enumerate() {
        let out = &mut stored[i * STORED_SYMBOLS..(i + 1) * STORED_SYMBOLS];
        out[..DATA_SYMBOLS].copy_from_slice(chunk);
        let checks = reference::encode_checks(chunk, &generator, gf::mul_naive);
        out[DATA_SYMBOLS..].copy_from_slice(&checks);
        third[i] = reference::syndromes(out, 3, gf::mul_naive)[2];
    }
}

/// Textbook two-tier decoder: Horner syndromes with bit-serial multiplies, then the same error
/// locator search as the real decoder when tier 1 sees an error.
fn naive_decode(stored: &[u8], third: &[u8], data: &mut [u8]) {
    for (i, word) in stored.chunks_exact(STORED_SYMBOLS).enumerate() {
        let out = &mut data[i * DATA_SYMBOLS..(i + 1) * DATA_SYMBOLS];
        out.copy_from_slice(&word[..DATA_SYMBOLS]);
        let s = reference::syndromes(word, 2, gf::mul_naive);
        if s == [0, 0] {
            continue;
        }
        let s2 = reference::syndromes(word, 3, gf::mul_naive)[2] ^ third[i];
        if let Some(found) = locate_errors(&[s[0], s[1], s2], 1, STORED_SYMBOLS, LocationCheck::Shortened) {
            for &(degree, value) in found.iter() {
                let index = STORED_SYMBOLS - 1 - degree;
                if index < DATA_SYMBOLS {
                    out[index] ^= value;
                }
            }
        }
    }
}

/// Trial rate of a Monte-Carlo run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MonteCarloRate {
    /// Code × trial evaluations run (trials × combinations × codes).
    pub code_trials: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// `code_trials / seconds`.
    pub code_trials_per_s: f64,
    /// Worker threads used.
    pub threads: usize,
}

/// Time `config` as given (all cores unless it says otherwise).
pub fn monte_carlo_rate(config: &SimConfig) -> Result<(MonteCarloRate, Vec<sim::SimResult>), SimError> {
    let start = Instant::now();
    let results = sim::run(config)?;
    let seconds = start.elapsed().as_secs_f64();
    let code_trials = config.trials * (config.combinations.len() * config.codes.len()) as u64;
    let threads = config.threads.unwrap_or_else(rayon::current_num_threads);
    Ok((
        MonteCarloRate { code_trials, seconds, code_trials_per_s: code_trials as f64 / seconds.max(1e-9), threads },
        results,
    ))
}

/// Monte-Carlo timing of one fault combination (all codes evaluated on every trial).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RowRate {
    /// The combination.
    pub faults: String,
    /// Trials run.
    pub trials: u64,
    /// Codes evaluated per trial.
    pub codes: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Trials per second (each trial evaluated under every code).
    pub trials_per_s: f64,
}

/// Everything `nam-bench ecc` measures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchReport {
    /// CPU model, from /proc/cpuinfo where available.
    pub cpu: String,
    /// Worker threads of the Monte-Carlo runs.
    pub threads: usize,
    /// Trials per Table 4.4 row.
    pub trials_per_row: u64,
    /// One entry per Table 4.4 row.
    pub rows: Vec<RowRate>,
    /// Seconds for the whole table.
    pub table_seconds: f64,
    /// Trials per second over the whole table (each evaluated under the three codes).
    pub table_trials_per_s: f64,
    /// Code × trial evaluations per second over the whole table.
    pub table_code_trials_per_s: f64,
    /// The same table on one thread, fewer trials: the baseline.
    pub baseline_single_thread: MonteCarloRate,
    /// `table_code_trials_per_s / baseline_single_thread.code_trials_per_s`.
    pub parallel_speedup: f64,
    /// RS(19,16) encode + decode throughput on one core.
    pub rs19_16: ThroughputReport,
    /// The Table 4.4 rerun the timed runs produced, one record per cell.
    pub table: Vec<ResultRecord>,
    /// The same rerun as a Table-4.4-shaped markdown table.
    #[serde(skip)]
    pub table_markdown: String,
}

/// Run the benchmark: Table 4.4 with `trials` per row on `threads` (all cores when `None`),
/// its single-thread baseline with `trials / BASELINE_TRIALS_SHARE`, and RS(19,16) throughput on `buffer_bytes`.
pub fn run_bench(trials: u64, buffer_bytes: usize, seed: u64, threads: Option<usize>) -> Result<BenchReport, SimError> {
    let table = SimConfig { threads, ..SimConfig::seed_table(trials, seed) };
    let mut rows = Vec::new();
    let mut results = Vec::new();
    let mut used_threads = 1;
    for combination in &table.combinations {
        let config = SimConfig { combinations: vec![combination.clone()], ..table.clone() };
        let (rate, row_results) = monte_carlo_rate(&config)?;
        results.extend(row_results);
        used_threads = rate.threads;
        rows.push(RowRate {
            faults: combination.to_string(),
            trials,
            codes: config.codes.len(),
            seconds: rate.seconds,
            trials_per_s: trials as f64 / rate.seconds.max(1e-9),
        });
    }
    let table_seconds: f64 = rows.iter().map(|r| r.seconds).sum();
    let table_trials = trials * rows.len() as u64;
    let baseline_config =
        SimConfig { trials: (trials / BASELINE_TRIALS_SHARE).max(CHUNK_TRIALS), threads: Some(1), ..table.clone() };
    let (baseline, _) = monte_carlo_rate(&baseline_config)?;
    let table_code_trials_per_s = (table_trials * table.codes.len() as u64) as f64 / table_seconds.max(1e-9);
    Ok(BenchReport {
        cpu: cpu_model(),
        threads: used_threads,
        trials_per_row: trials,
        rows,
        table_seconds,
        table_trials_per_s: table_trials as f64 / table_seconds.max(1e-9),
        table_code_trials_per_s,
        parallel_speedup: table_code_trials_per_s / baseline.code_trials_per_s.max(1e-9),
        baseline_single_thread: baseline,
        rs19_16: rs19_throughput(buffer_bytes, THROUGHPUT_MIN_TIME, seed),
        table: results.iter().map(|r| ResultRecord::new(&table, r)).collect(),
        table_markdown: format!("{}\n\n{}", report::describe(&table), report::markdown_table(&table, &results)),
    })
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

impl BenchReport {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A markdown section (tables of both measurements with their baselines and ratios).
    pub fn to_markdown(&self) -> String {
        let t = &self.rs19_16;
        let mut out = String::new();
        out.push_str(&format!(
            "### Monte-Carlo: Table 4.4, {} trials per row, 3 codes per trial, {} threads\n\n",
            self.trials_per_row, self.threads
        ));
        out.push_str("| fault combination | trials | seconds | trials/s |\n|---|---:|---:|---:|\n");
        for r in &self.rows {
            out.push_str(&format!("| {} | {} | {:.2} | {:.0} |\n", r.faults, r.trials, r.seconds, r.trials_per_s));
        }
        out.push_str(&format!(
            "| **whole table** | {} | {:.2} | {:.0} |\n\n",
            self.trials_per_row * self.rows.len() as u64,
            self.table_seconds,
            self.table_trials_per_s
        ));
        out.push_str(&format!(
            "Code-trials/s (trials × 3 codes): {:.0} on {} threads; baseline, same table on 1 thread \
             ({} trials per row): {:.0}; ratio {:.2}×.\n\n",
            self.table_code_trials_per_s,
            self.threads,
            self.baseline_single_thread.code_trials / (self.rows.len() as u64 * 3).max(1),
            self.baseline_single_thread.code_trials_per_s,
            self.parallel_speedup
        ));
        out.push_str("### RS(19,16) encode + decode on one core (real buffers)\n\n");
        out.push_str("| implementation | buffer (data bytes) | encode MB/s | decode MB/s | encode+decode MB/s |\n|---|---:|---:|---:|---:|\n");
        for (name, r) in
            [("table-driven (nam-ecc)", &t.table), ("baseline: textbook, bit-serial GF multiply", &t.naive)]
        {
            out.push_str(&format!(
                "| {name} | {} | {:.0} | {:.0} | {:.0} |\n",
                r.data_bytes, r.encode_mb_s, r.decode_mb_s, r.encode_decode_mb_s
            ));
        }
        out.push_str(&format!(
            "\nRatio table-driven / baseline: {:.1}×. Outputs identical: {}. Round trip: {}.\n",
            t.speedup,
            t.outputs_agree,
            t.table.round_trip && t.naive.round_trip
        ));
        out.push_str("\n### Table 4.4 rerun by the timed runs above\n\n");
        out.push_str(&self.table_markdown);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naive_and_table_codecs_agree_and_round_trip() {
        let report = rs19_throughput(16 * 1024, Duration::from_millis(1), 3);
        assert!(report.outputs_agree);
        assert!(report.table.round_trip && report.naive.round_trip);
        assert!(report.table.encode_decode_mb_s > 0.0);
        assert!(report.naive.encode_decode_mb_s > 0.0);
    }

    #[test]
    fn naive_decoder_corrects_a_symbol() {
        let data: Vec<u8> = (0..32u8).collect();
        let (mut stored, mut third) = (vec![0u8; 36], vec![0u8; 2]);
        naive_encode(&data, &mut stored, &mut third);
        stored[20] ^= 0x77;
        let mut out = vec![0u8; 32];
        naive_decode(&stored, &third, &mut out);
        assert_eq!(out, data);
    }
}
