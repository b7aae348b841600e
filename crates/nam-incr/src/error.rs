//! Typed errors: one enum for the storage levels, one for the engine.

use crate::tracker::TrackerKind;

/// A storage level failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// Operation and path.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A memory-server operation failed.
    #[error("memory server: {what}: {source}")]
    Server {
        /// Operation and object.
        what: String,
        /// The client's error.
        source: Box<nam_client::Error>,
    },
    /// No object of that name.
    #[error("checkpoint object {name} not found")]
    NotFound {
        /// The object.
        name: String,
    },
    /// An object failed its checks.
    #[error("checkpoint object {name} is corrupt: {why}")]
    Corrupt {
        /// The object.
        name: String,
        /// What check failed.
        why: String,
    },
}

/// An incremental-checkpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IncrError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// The region is empty.
    #[error("region of 0 bytes cannot be protected")]
    EmptyRegion,
    /// The region's pages overlap a region already protected.
    #[error("region {start:#x}+{len} shares pages with a region already protected")]
    Overlap {
        /// First byte.
        start: usize,
        /// Length.
        len: usize,
    },
    /// Too many regions.
    #[error("at most {max} regions can be protected at a time")]
    TooManyRegions {
        /// The limit.
        max: usize,
    },
    /// Registering with the tracker failed.
    #[error("cannot track writes to {start:#x}+{len} with {tracker}: {source}")]
    Track {
        /// First byte.
        start: usize,
        /// Length.
        len: usize,
        /// The tracker.
        tracker: TrackerKind,
        /// The OS error.
        source: std::io::Error,
    },
    /// Unknown region id.
    #[error("region {0} is not protected by this engine")]
    UnknownRegion(usize),
    /// A region was unprotected while its copy was in flight.
    #[error("region {0} was unprotected while checkpoint {1} was being copied; that checkpoint is abandoned")]
    RegionRemoved(usize, u32),
    /// A region's memory could not be read (unmapped while protected).
    #[error("region {region} could not be read at offset {offset} (was it freed while protected?): {source}")]
    RegionUnreadable {
        /// The region.
        region: usize,
        /// Region offset.
        offset: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// Writing a checkpoint failed; the previous checkpoint stays the restart point.
    #[error("checkpoint {interval} failed, checkpoint {previous:?} stays the restart point: {source}")]
    CheckpointFailed {
        /// The interval that failed.
        interval: u32,
        /// The last complete checkpoint.
        previous: Option<u32>,
        /// Why.
        source: Box<StoreError>,
    },
    /// A write gave up waiting for its page, so the interval in flight was abandoned.
    #[error("checkpoint {0} abandoned: a write waited longer than the page wait limit")]
    WaitExpired(u32),
    /// The commit was held by fault injection ([`crate::Engine::hold_next_commit`]) and the
    /// engine stopped first: the checkpoint is incomplete, as after a crash.
    #[error("checkpoint {0} not committed: commits were held for fault injection")]
    CommitHeld(u32),
    /// The background work did not finish in time.
    #[error("checkpoint {interval} still in flight after {timeout_ms} ms")]
    Timeout {
        /// The interval waited for.
        interval: u32,
        /// The deadline.
        timeout_ms: u64,
    },
    /// The mode cannot run on this store.
    #[error("mode {mode} cannot write to the {level} level: {why}")]
    Unsupported {
        /// The mode.
        mode: &'static str,
        /// The store level.
        level: String,
        /// Why.
        why: &'static str,
    },
    /// fork() or the child failed.
    #[error("fork checkpoint: {0}")]
    Fork(String),
    /// No complete checkpoint in the store.
    #[error("no complete checkpoint found in the {level} store")]
    NothingToRestore {
        /// The level.
        level: String,
    },
    /// The store holds no complete copy of that checkpoint (never written, collected as
    /// garbage, or damaged).
    #[error("checkpoint {interval} is not complete in the {level} store")]
    NoSuchCheckpoint {
        /// The interval asked for.
        interval: u32,
        /// The level.
        level: String,
    },
    /// The restore target does not match the checkpoint.
    #[error("region {region} has {expected} bytes in the checkpoint, the target has {actual}")]
    SizeMismatch {
        /// The region.
        region: usize,
        /// Bytes in the checkpoint.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
