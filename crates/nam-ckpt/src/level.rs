//! The storage levels and where a rank's files live in them.
//!
//! ```text
//! <level dir>/<name>/v<version>/rank-<r>.ckpt     the rank's checkpoint (crate::format)
//! <level dir>/<name>/v<version>/rank-<r>.done     commit marker, written once every rank's
//!                                                 data and L2 redundancy are stored
//! <level dir>/<name>/v<version>/rank-<r>.xor ...  L2 redundancy kept by this rank
//! ```
//! Because a marker is written only after the collective protect succeeded everywhere, a
//! marker on any rank means the version was complete on every rank.

use crate::error::{CkptError, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A storage level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LevelKind {
    /// L1 in RAM (tmpfs).
    Ram,
    /// L1 on the node's SSD.
    Ssd,
    /// L3 on the parallel file system.
    Pfs,
    /// Memory servers (`nam serve`; incremental checkpoints only).
    Nam,
}

impl LevelKind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            LevelKind::Ram => "ram",
            LevelKind::Ssd => "ssd",
            LevelKind::Pfs => "pfs",
            LevelKind::Nam => "nam",
        }
    }

    /// Number used in the C API and in collective messages.
    pub fn code(self) -> u64 {
        match self {
            LevelKind::Ram => 1,
            LevelKind::Ssd => 2,
            LevelKind::Pfs => 3,
            LevelKind::Nam => 4,
        }
    }

    /// Inverse of [`LevelKind::code`].
    pub fn from_code(code: u64) -> Option<LevelKind> {
        [LevelKind::Ram, LevelKind::Ssd, LevelKind::Pfs, LevelKind::Nam].into_iter().find(|k| k.code() == code)
    }
}

/// Paths of one checkpoint name at one level, for one rank.
#[derive(Debug, Clone)]
pub struct Level {
    /// Which level.
    pub kind: LevelKind,
    /// The level's directory.
    pub dir: PathBuf,
    /// Versions kept.
    pub keep: usize,
}

impl Level {
    /// `<dir>/<name>/v<version>`.
    pub fn version_dir(&self, name: &str, version: u64) -> PathBuf {
        self.dir.join(name).join(format!("v{version}"))
    }

    /// The rank's checkpoint file.
    pub fn file(&self, name: &str, version: u64, rank: usize) -> PathBuf {
        self.version_dir(name, version).join(format!("rank-{rank}.ckpt"))
    }

    /// The rank's commit marker.
    pub fn marker(&self, name: &str, version: u64, rank: usize) -> PathBuf {
        self.version_dir(name, version).join(format!("rank-{rank}.done"))
    }

    /// Slot `slot` for a spare file of the rank: a retired (or reserved) checkpoint file
    /// kept for reuse by the RAM level's writer, whose tmpfs pages already exist.
    pub fn spare(&self, name: &str, rank: usize, slot: usize) -> PathBuf {
        self.dir.join(name).join(format!("spare-rank-{rank}.{slot}.ckpt"))
    }

    /// Spare slots per rank and name: a rank never holds more than `keep` committed versions
    /// and the one being written, so more spares than that would never be used.
    pub fn spare_slots(&self) -> usize {
        self.keep + 1
    }

    /// The rank's spare files that exist now.
    pub fn spares(&self, name: &str, rank: usize) -> Vec<PathBuf> {
        (0..self.spare_slots()).map(|i| self.spare(name, rank, i)).filter(|p| p.exists()).collect()
    }

    /// The first free spare slot of the rank, if any.
    pub fn free_spare(&self, name: &str, rank: usize) -> Option<PathBuf> {
        (0..self.spare_slots()).map(|i| self.spare(name, rank, i)).find(|p| !p.exists())
    }

    /// Versions of `name` this rank has committed at this level, ascending.
    pub fn committed(&self, name: &str, rank: usize) -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(self.dir.join(name)) else {
            return Vec::new();
        };
        let mut versions: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix('v')).and_then(|v| v.parse().ok()))
            .filter(|&v| self.marker(name, v, rank).exists())
            .collect();
        versions.sort_unstable();
        versions
    }

    /// Removes this rank's files of versions beyond the newest `keep` (except `pinned`
    /// ones, still being flushed), and version directories left empty. Files of other
    /// ranks sharing the directory are left alone.
    pub fn retain(&self, name: &str, rank: usize, pinned: &[u64]) -> Result<()> {
        let versions = self.committed(name, rank);
        let drop_count = versions.len().saturating_sub(self.keep);
        for &v in versions[..drop_count].iter().filter(|v| !pinned.contains(v)) {
            let dir = self.version_dir(name, v);
            // The marker goes first: a version without it is never offered for restart.
            remove_file(&self.marker(name, v, rank))?;
            if self.kind == LevelKind::Ram {
                // The RAM level reuses the file (and its tmpfs pages) for a later version.
                if let Some(spare) = self.free_spare(name, rank) {
                    let _ = std::fs::rename(self.file(name, v, rank), spare);
                }
            }
            remove_rank_files(&dir, rank)?;
            let _ = std::fs::remove_dir(&dir);
        }
        Ok(())
    }
}

/// Removes the files of `rank` in a version directory (marker first).
pub fn remove_rank_files(dir: &Path, rank: usize) -> Result<()> {
    let marker = dir.join(format!("rank-{rank}.done"));
    remove_file(&marker)?;
    let prefix = format!("rank-{rank}.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.filter_map(|e| e.ok()) {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            remove_file(&e.path())?;
        }
    }
    Ok(())
}

fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CkptError::io("remove", path, e)),
        _ => Ok(()),
    }
}

/// Creates `dir` if needed and checks it can be written (a probe file is created and
/// removed); Err names the directory and the cause.
pub fn check_writable(dir: &Path) -> Result<()> {
    let fail = |reason: String| CkptError::Directory { path: dir.to_path_buf(), reason };
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create: {e}")))?;
    let probe = dir.join(format!(".nam-probe-{}", std::process::id()));
    std::fs::write(&probe, b"probe").map_err(|e| fail(format!("cannot write: {e}")))?;
    std::fs::remove_file(&probe).map_err(|e| fail(format!("cannot remove a file: {e}")))
}
