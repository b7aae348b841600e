//! What each rank records about its part of a dataset, beside its checkpoint file:
//! `<level dir>/<name>/v<version>/rank-<r>.info` (JSON).
//!
//! It is written after the checkpoint committed, so a record never announces data that is not
//! there; a dataset without records (a flush copy, a job killed right after its commit) is
//! still listed, from its files. Its `rank-<r>.` prefix makes the library's retention remove
//! it with the rank's other files of the version.

use crate::{read_small, write_atomically, ControlError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Largest record read (bytes).
const RECORD_MAX_BYTES: u64 = 64 << 10;

/// One rank's record of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankRecord {
    /// Checkpoint name.
    pub name: String,
    /// Version.
    pub version: u64,
    /// The rank.
    pub rank: usize,
    /// Ranks of the job that wrote the dataset.
    pub ranks: usize,
    /// Level (`ram`, `ssd`, `pfs`).
    pub level: String,
    /// Redundancy descriptor that protected it (`default`: the `[redundancy]` section).
    pub descriptor: String,
    /// Its L2 scheme (`none`, `partner`, `xor`, `rs`, `nam-xor`).
    pub scheme: String,
    /// Bytes of this rank's checkpoint file.
    pub bytes: u64,
    /// When the checkpoint committed (Unix seconds).
    pub time: f64,
    /// Wall seconds of the checkpoint call (slowest rank).
    pub seconds: f64,
    /// An output dataset (never restarted from).
    pub output: bool,
}

impl RankRecord {
    /// `<version dir>/rank-<r>.info`.
    pub fn path(version_dir: &Path, rank: usize) -> PathBuf {
        version_dir.join(format!("rank-{rank}.info"))
    }

    /// Writes this record into `version_dir`.
    pub fn write(&self, version_dir: &Path) -> Result<PathBuf> {
        let path = Self::path(version_dir, self.rank);
        write_atomically(&path, &serde_json::to_vec(self).expect("a record serializes"))?;
        Ok(path)
    }

    /// The record at `path` (`None` when there is none).
    pub fn read(path: &Path) -> Result<Option<RankRecord>> {
        let bad = |reason: String| ControlError::Record { path: path.to_path_buf(), reason };
        let Some(bytes) = read_small(path, RECORD_MAX_BYTES, |len| bad(format!("{len} bytes is not a record")))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| bad(e.to_string()))
    }
}
