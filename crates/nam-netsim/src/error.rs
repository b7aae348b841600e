//! Typed errors of the simulator.

use thiserror::Error;

/// Everything that can go wrong when building a topology, parsing input or running a simulation.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum NetsimError {
    /// A topology name that no builder knows.
    #[error("unknown topology `{name}` (known: {known})")]
    UnknownTopology {
        /// The name given.
        name: String,
        /// Comma-separated list of known names.
        known: String,
    },
    /// A routing name that no routing function knows, or that does not fit the topology.
    #[error("unknown routing `{name}` for topology `{topology}` (known: {known})")]
    UnknownRouting {
        /// The name given.
        name: String,
        /// The topology it was asked for.
        topology: String,
        /// Comma-separated list of routings valid here.
        known: String,
    },
    /// A traffic pattern name that is not known.
    #[error("unknown traffic pattern `{name}` (known: {known})")]
    UnknownTraffic {
        /// The name given.
        name: String,
        /// Comma-separated list of known names.
        known: String,
    },
    /// A parameter outside its allowed range.
    #[error("invalid parameter `{field}`: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        field: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A malformed line in a topology or trace file.
    #[error("{file} line {line}: field `{field}`: {reason}")]
    Parse {
        /// Which kind of file ("topology file", "trace file").
        file: String,
        /// 1-based line number.
        line: usize,
        /// The field that is wrong.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A topology that is not usable (unreachable node, router without ports, ...).
    #[error("invalid topology `{topology}`: {reason}")]
    InvalidTopology {
        /// The topology's name.
        topology: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading an input file failed.
    #[error("cannot read {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's message.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, NetsimError>;

/// Builds an [`NetsimError::InvalidParameter`].
pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> NetsimError {
    NetsimError::InvalidParameter { field: field.to_string(), reason: reason.into() }
}
