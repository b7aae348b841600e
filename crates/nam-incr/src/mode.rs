//! The checkpointing modes and the engine's configuration.

use crate::constants::{
    EARLY_SWEEP_DEFAULT, FAULT_AROUND_PAGES_DEFAULT, KEEP_DEFAULT, MERGE_RATIO_DEFAULT, RECORD_BYTES_DEFAULT,
    SEGMENT_BYTES_DEFAULT, TIMEOUT_DEFAULT,
};
use crate::tracker::TrackerChoice;
use std::time::Duration;

/// How a checkpoint is taken (Abeyratne 2017 §5.2-5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Baseline: stop, copy every byte of every region into one image, fsync, resume.
    StopAndCopy,
    /// Baseline: fork; the child writes the image while the parent runs on (copy-on-write).
    Fork,
    /// Stop, copy only what changed since the last checkpoint, resume (with
    /// `consolidate` this is the "consolidate" method of Abeyratne 2017 §5.3.2).
    Incremental,
    /// Write-protect the dirty pages and resume at once; a background writer persists them,
    /// and a write to a page not yet persisted waits for that page only (queue jumping).
    /// The next checkpoint waits for the previous one.
    PartiallyNonBlocking,
    /// Partially non-blocking, plus early copying of pages that turn cold before the
    /// checkpoint and late copying that may span later intervals.
    EarlyLate,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 5] =
        [Mode::StopAndCopy, Mode::Fork, Mode::Incremental, Mode::PartiallyNonBlocking, Mode::EarlyLate];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::StopAndCopy => "stop-and-copy",
            Mode::Fork => "fork",
            Mode::Incremental => "incremental",
            Mode::PartiallyNonBlocking => "non-blocking",
            Mode::EarlyLate => "early-late",
        }
    }

    /// Parses [`Mode::name`].
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Whether the mode tracks writes.
    pub fn tracks(self) -> bool {
        self != Mode::StopAndCopy
    }

    /// Whether the mode writes records (increments) rather than images.
    pub fn incremental(self) -> bool {
        matches!(self, Mode::Incremental | Mode::PartiallyNonBlocking | Mode::EarlyLate)
    }
}

/// Engine configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The mode.
    pub mode: Mode,
    /// Store only changed 64-byte lines, packed into records (else whole dirty pages).
    pub consolidate: bool,
    /// Record size in bytes (default 16 KiB).
    pub record_bytes: usize,
    /// Records are gathered into segments of this many bytes, one store object (and one
    /// fsync on the SSD level) each, instead of one object per record (default 4 MiB).
    pub segment_bytes: usize,
    /// A write fault releases this many neighbouring clean pages at once (a power of two;
    /// 1 = page by page): fewer faults for dense writes, a little more hashing for sparse ones.
    pub fault_around_pages: usize,
    /// Which tracker to try.
    pub tracker: TrackerChoice,
    /// Early/late: how often the writer looks for pages that turned cold.
    pub early_sweep: Duration,
    /// Merge the increments of the chain backwards (garbage collection) once the chain holds
    /// more than this many times the regions' bytes (0: never).
    pub merge_ratio: f64,
    /// Deadline of every wait of the engine.
    pub timeout: Duration,
    /// Nice value of the background writer thread (default 0: the application's). A positive
    /// value lets the application's threads run first when they share a core with the writer,
    /// but on a loaded node it also delays the pages the application waits for: with 5 on this
    /// project's shared 2-core machine the stall per checkpoint grew about sixfold.
    pub writer_nice: i32,
    /// Complete checkpoints kept in the store, the newest included (default 1; a collective
    /// restart needs 2 or more, since ranks finish their background copies at different times).
    pub keep: usize,
}

impl Config {
    /// Defaults for `mode`: consolidation on, 16 KiB records, 10 ms sweeps, merge at four times the regions' size.
    pub fn new(mode: Mode) -> Config {
        Config {
            mode,
            consolidate: true,
            record_bytes: RECORD_BYTES_DEFAULT,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            fault_around_pages: FAULT_AROUND_PAGES_DEFAULT,
            tracker: TrackerChoice::Auto,
            early_sweep: EARLY_SWEEP_DEFAULT,
            merge_ratio: MERGE_RATIO_DEFAULT,
            timeout: TIMEOUT_DEFAULT,
            keep: KEEP_DEFAULT,
            writer_nice: 0,
        }
    }
}
