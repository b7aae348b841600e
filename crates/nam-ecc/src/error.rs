//! Typed errors, one enum per operation family.

use thiserror::Error;

/// Errors of building a code or handing it buffers of the wrong size.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodeError {
    /// The (n, k) pair does not describe a code this crate builds.
    #[error("RS({n},{k}) is not supported: need 1 <= k < n <= 255 and 1 <= n - k <= {check_symbols_max}")]
    InvalidParameters {
        /// Requested codeword length in symbols.
        n: usize,
        /// Requested number of data symbols.
        k: usize,
        /// Largest number of check symbols supported.
        check_symbols_max: usize,
    },
    /// A buffer does not have the length the code needs.
    #[error("{what} has {actual} bytes, expected {expected}")]
    WrongLength {
        /// Which buffer.
        what: &'static str,
        /// Required length in bytes (or a multiple of it, for streams).
        expected: usize,
        /// Length that was passed.
        actual: usize,
    },
}

/// Errors of decoding one codeword (or one buffer of codewords).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The decoder found errors it may not correct under its policy: a detected,
    /// uncorrectable error (DUE). The buffer is left as it was received.
    #[error("detected uncorrectable error")]
    Uncorrectable,
    /// A buffer does not have the length the code needs.
    #[error("{what} has {actual} bytes, expected {expected}")]
    WrongLength {
        /// Which buffer.
        what: &'static str,
        /// Required length in bytes.
        expected: usize,
        /// Length that was passed.
        actual: usize,
    },
    /// The decoding policy asks to correct more symbols than the code's distance allows.
    #[error("policy corrects up to {requested} symbols, but {code} can correct at most {max}")]
    PolicyTooStrong {
        /// Name of the code.
        code: &'static str,
        /// Symbols the policy asked to correct.
        requested: usize,
        /// Largest correction radius of the code, floor((n - k) / 2).
        max: usize,
    },
}

/// Errors of parsing names given by a user (codes, faults, placements, error values).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// Not one of `rs36_32`, `rs18_16`, `rs19_16`.
    #[error("unknown code `{0}`: expected one of rs36_32, rs18_16, rs19_16")]
    UnknownCode(String),
    /// Not one of `bit`, `column`, `pin`, `word`, `chip`.
    #[error("unknown fault `{0}`: expected bit, column, pin, word or chip, joined by `+` for faults in several chips (e.g. `pin+chip`)")]
    UnknownFault(String),
    /// An empty name, e.g. `bit+` or an empty list.
    #[error("empty fault name in `{0}`")]
    EmptyFault(String),
    /// More simultaneous faults than chips: every fault of a combination lives in its own chip.
    #[error("impossible fault combination `{combination}`: {count} faults need {count} distinct chips, but a rank has {chips}")]
    TooManyFaults {
        /// The combination as written.
        combination: String,
        /// Number of faults in it.
        count: usize,
        /// Chips in a rank.
        chips: usize,
    },
    /// Not one of `coincident`, `independent`.
    #[error("unknown placement `{0}`: expected coincident or independent")]
    UnknownPlacement(String),
    /// Not one of `random`, `invert`.
    #[error("unknown error-value model `{0}`: expected random or invert")]
    UnknownErrorValues(String),
}

/// Errors of configuring or running a Monte-Carlo simulation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SimError {
    /// The number of trials must be at least 1.
    #[error("the number of trials must be at least 1")]
    ZeroTrials,
    /// More trials than [`crate::sim::TRIALS_MAX`].
    #[error("{requested} trials exceed the limit of {max}")]
    TooManyTrials {
        /// Trials requested.
        requested: u64,
        /// The limit.
        max: u64,
    },
    /// No code was selected.
    #[error("no code selected")]
    NoCodes,
    /// No fault combination was selected.
    #[error("no fault combination selected")]
    NoFaults,
    /// A code's decoding policy is impossible.
    #[error(transparent)]
    Policy(#[from] DecodeError),
    /// The worker thread pool could not be built.
    #[error("cannot start {threads} worker threads: {reason}")]
    ThreadPool {
        /// Threads requested.
        threads: usize,
        /// Why rayon refused.
        reason: String,
    },
}
