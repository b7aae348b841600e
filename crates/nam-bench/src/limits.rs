//! Limits and tuning of the benchmarks in one place: deadlines, defaults and buffer bounds
//! that a reader tuning a run (or wondering why one gave up) looks for first.

use std::time::Duration;

/// Trials per Table 4.4 row of `nam-bench ecc` (the 10 million of Abeyratne 2017's table).
pub const ECC_TRIALS_DEFAULT: u64 = 10_000_000;
