//! The job-control files of the checkpoint library (nam-ckpt), shared with the `nam` command.
//!
//! The library links MPI and the `nam` command must not (docs/architecture.md), yet both read
//! and write the same few files that let a user steer a job from outside, as SCR's `scr_halt`
//! and `scr_index` do:
//!
//! ```text
//! <dir>/nam-ckpt.halt                     the halt file: the job should stop (`halt`)
//! <dir>/<name>/index.json                 the dataset index: the version a restart uses,
//!                                         forgotten versions, output datasets (`index`)
//! <level dir>/<name>/v<version>/rank-<r>.info
//!                                         what a rank recorded about its part of a dataset:
//!                                         level, redundancy descriptor and scheme, bytes,
//!                                         time, output or not (`record`)
//! ```
//!
//! `<dir>` is the job's control directory (the library's `datasets.dir`: by default its
//! `flush.dir`, else its `ssd.dir`). [`list`](mod@list) walks a level directory and reports each
//! dataset with its completeness. Every file is read as hostile: a malformed one is a
//! [`ControlError`] naming the file and the cause, never a panic.

#![deny(missing_docs)]

pub mod halt;
pub mod index;
pub mod list;
pub mod record;

pub use halt::Halt;
pub use index::Index;
pub use list::{delete_dataset, list, Dataset};
pub use record::RankRecord;

use std::path::{Path, PathBuf};

/// What can go wrong with a job-control file. Each variant names the file and the cause.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The dataset index is malformed (or names something impossible).
    #[error("dataset index {path}: {reason}")]
    Index {
        /// The index file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A rank's dataset record is malformed.
    #[error("dataset record {path}: {reason}")]
    Record {
        /// The record file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The halt file is malformed.
    #[error("halt file {path}: {reason}")]
    Halt {
        /// The halt file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A dataset named by the caller does not exist where it was looked for.
    #[error("no dataset `{name}` version {version} in {dir}")]
    NoDataset {
        /// The directory searched.
        dir: PathBuf,
        /// Checkpoint name.
        name: String,
        /// Version.
        version: u64,
    },
    /// A checkpoint name that cannot be a directory name (empty, `.`, `..`, or with `/`).
    #[error("checkpoint name {0:?} is not a plain directory name")]
    BadName(String),
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
}

/// Result with [`ControlError`].
pub type Result<T, E = ControlError> = std::result::Result<T, E>;

impl ControlError {
    /// A [`ControlError::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ControlError::Io { op, path: path.into(), source }
    }
}

/// Checks that `name` can be a directory name under a level directory: a user's command
/// line must not reach outside it (`../x`).
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(ControlError::BadName(name.to_string()));
    }
    Ok(())
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a Unix time, for listings.
pub fn format_utc(unix: f64) -> String {
    let secs = unix.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Writes `bytes` to `path` under a temporary name and renames it, so a reader never sees a
/// half-written file (a job reading the index while `nam ckpt current` writes it).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| ControlError::io("create", parent, e))?;
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| ControlError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ControlError::io("rename", path, e))
}

/// Reads `path`, `None` when it does not exist; files larger than `limit` are refused as
/// `too_big(len)` (a control file is a few hundred bytes; a huge one is not ours).
pub(crate) fn read_small(
    path: &Path,
    limit: u64,
    too_big: impl FnOnce(u64) -> ControlError,
) -> Result<Option<Vec<u8>>> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ControlError::io("stat", path, e)),
        Ok(m) if m.len() > limit => return Err(too_big(m.len())),
        Ok(_) => {}
    }
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ControlError::io("read", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_the_level_directory() {
        assert!(check_name("heat").is_ok());
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert!(matches!(check_name(bad), Err(ControlError::BadName(_))), "{bad:?}");
        }
    }

    #[test]
    fn utc_times_are_civil_dates() {
        assert_eq!(format_utc(0.0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(951_782_400.0), "2000-02-29 00:00:00");
        assert_eq!(format_utc(1_795_000_000.0), "2026-11-18 11:06:40");
    }
}
