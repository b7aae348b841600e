//! The typed errors of the checkpoint library.

use std::path::PathBuf;

/// Every way a checkpoint-library call can fail. Each variant names its cause; the C API maps
/// each to exactly one `nam_status_t` code.
#[derive(Debug, thiserror::Error)]
pub enum CkptError {
    /// The configuration file or an environment override is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// A configuration key that does not exist (in the file or a `NAM_CKPT_*` variable).
    #[error("unknown configuration key `{0}`")]
    UnknownKey(String),
    /// A directory the configuration names is missing or cannot be written.
    #[error("directory {path} is not usable: {reason}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why it is not usable.
        reason: String,
    },
    /// One checkpoint of this rank does not fit the RAM level's per-rank share.
    #[error("checkpoint of {bytes} bytes per rank exceeds the RAM level's per-rank limit of {limit} bytes")]
    RamTooSmall {
        /// Bytes this rank would write.
        bytes: u64,
        /// The per-rank limit.
        limit: u64,
    },
    /// A region id is protected twice, or a region overlaps another.
    #[error("region {id}: {reason}")]
    Region {
        /// The region id.
        id: i32,
        /// What is wrong with it.
        reason: String,
    },
    /// A region id that is not protected.
    #[error("region {0} is not protected")]
    UnknownRegion(i32),
    /// No restartable checkpoint exists (on any level).
    #[error("no restartable checkpoint{0}")]
    NoCheckpoint(String),
    /// The checkpoint was written by a job of another size.
    #[error("checkpoint was written by {written} ranks, this job has {now}")]
    RankCount {
        /// Ranks of the job that wrote it.
        written: usize,
        /// Ranks of this job.
        now: usize,
    },
    /// Stored bytes failed their checksum and could not be rebuilt.
    #[error("corrupt checkpoint data: {0}")]
    Corrupt(String),
    /// More data was lost than the redundancy scheme can rebuild.
    #[error("unrecoverable: {0}")]
    Unrecoverable(String),
    /// The redundancy scheme cannot work with this job layout (e.g. every rank on one node).
    #[error("redundancy scheme {scheme}: {reason}")]
    Layout {
        /// The scheme.
        scheme: String,
        /// Why the layout does not allow it.
        reason: String,
    },
    /// A restored region's stored size differs from the protected size.
    #[error("region {id}: stored {stored} bytes, protected {protected} bytes")]
    SizeMismatch {
        /// The region id.
        id: i32,
        /// Bytes in the checkpoint.
        stored: u64,
        /// Bytes of the protected region.
        protected: u64,
    },
    /// The L3 flush failed (its target filled up, or could not be written).
    #[error("flush to {path}: {reason}")]
    Flush {
        /// The flush target.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An incremental checkpoint (`incremental.mode`) failed: tracking writes, or storing the
    /// increments; the previous complete version stays the restart point.
    #[error("incremental checkpoint: {0}")]
    Incremental(nam_incr::IncrError),
    /// Another rank failed a step every rank takes together: this rank stops too, with the
    /// failed rank's cause, so no rank goes on into the next collective alone
    /// ([`crate::comm::Comm::agree`]).
    #[error("{what} failed on rank {rank} (node {node}): {cause}")]
    Peer {
        /// The step.
        what: String,
        /// The first rank (lowest number) that failed.
        rank: usize,
        /// That rank's node.
        node: String,
        /// That rank's error, as it printed it.
        cause: String,
    },
    /// Failure groups ([`crate::failure_groups`]) that are malformed, unknown, split a node, or
    /// that a scheme cannot keep apart in its sets; the message names the groups.
    #[error("failure groups: {0}")]
    FailureGroup(String),
    /// A checkpoint asked for a redundancy descriptor the configuration does not define.
    #[error("unknown redundancy descriptor `{name}` (configured: {known})")]
    UnknownDescriptor {
        /// The name asked for.
        name: String,
        /// The configured names, comma-separated (`default` is the `[redundancy]` section).
        known: String,
    },
    /// A job-control file (dataset index, halt file, dataset record) is malformed, or a
    /// dataset named by the caller is not there ([`nam_ckpt_control::ControlError`]).
    #[error("{0}")]
    Control(#[from] nam_ckpt_control::ControlError),
    /// The library was used in the wrong order (e.g. after finalize).
    #[error("invalid use: {0}")]
    State(String),
}

/// Result with [`CkptError`].
pub type Result<T, E = CkptError> = std::result::Result<T, E>;

impl CkptError {
    /// An [`CkptError::Io`] for `op` on `path`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CkptError::Io { op, path: path.into(), source }
    }

    /// A [`CkptError::Layout`] for `scheme`.
    pub fn layout(scheme: &str, reason: impl Into<String>) -> Self {
        CkptError::Layout { scheme: scheme.to_string(), reason: reason.into() }
    }
}
