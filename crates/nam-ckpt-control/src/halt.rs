//! The halt file: a job is told to stop from outside (`nam ckpt halt DIR`, SCR's `scr_halt`).
//!
//! The file is `<dir>/nam-ckpt.halt`, JSON. Its presence is the request; `after` (Unix
//! seconds) delays it, so an operator can ask a job to stop at the end of a shift. The
//! library's `should_exit` reads it on one rank and tells every rank the same answer;
//! `nam ckpt halt DIR --clear` (or deleting the file) withdraws the request.

use crate::{read_small, write_atomically, ControlError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The halt file's name in the control directory.
pub const HALT_FILE: &str = "nam-ckpt.halt";
/// Largest halt file read (bytes): the JSON of a [`Halt`] with a generous reason.
const HALT_MAX_BYTES: u64 = 64 << 10;

/// A request to stop the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Halt {
    /// Why (shown by the job when it stops).
    pub reason: String,
    /// When the request was made (Unix seconds).
    pub set_at: f64,
    /// The job stops from this time on (Unix seconds); `None`: at once.
    pub after: Option<f64>,
}

impl Halt {
    /// `<dir>/nam-ckpt.halt`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(HALT_FILE)
    }

    /// Whether the request applies at Unix time `now`.
    pub fn active(&self, now: f64) -> bool {
        self.after.is_none_or(|after| now >= after)
    }

    /// Writes the request to `dir` (created if needed), replacing any earlier one.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let path = Self::path(dir);
        if !(self.set_at.is_finite() && self.after.is_none_or(f64::is_finite)) {
            return Err(ControlError::Halt { path, reason: "times must be finite Unix seconds".into() });
        }
        write_atomically(&path, &serde_json::to_vec_pretty(self).expect("a halt serializes"))?;
        Ok(path)
    }

    /// The request in `dir`, `None` when there is none; Err([`ControlError::Halt`]) when the
    /// file is not a halt request.
    pub fn read(dir: &Path) -> Result<Option<Halt>> {
        let path = Self::path(dir);
        let too_big =
            |len| ControlError::Halt { path: path.clone(), reason: format!("{len} bytes is not a halt file") };
        let Some(bytes) = read_small(&path, HALT_MAX_BYTES, too_big)? else {
            return Ok(None);
        };
        let halt: Halt = serde_json::from_slice(&bytes)
            .map_err(|e| ControlError::Halt { path: path.clone(), reason: e.to_string() })?;
        if !(halt.set_at.is_finite() && halt.after.is_none_or(f64::is_finite)) {
            return Err(ControlError::Halt { path, reason: "times must be finite Unix seconds".into() });
        }
        Ok(Some(halt))
    }

    /// Withdraws the request in `dir`; true when there was one.
    pub fn clear(dir: &Path) -> Result<bool> {
        let path = Self::path(dir);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ControlError::io("remove", path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halt_is_written_read_delayed_and_cleared() {
        let dir = std::env::temp_dir().join(format!("nam-halt-{}", std::process::id()));
        assert_eq!(Halt::read(&dir).unwrap(), None);
        let halt = Halt { reason: "maintenance".into(), set_at: 100.0, after: Some(200.0) };
        halt.write(&dir).unwrap();
        let read = Halt::read(&dir).unwrap().unwrap();
        assert_eq!(read, halt);
        assert!(!read.active(150.0) && read.active(200.0));
        std::fs::write(Halt::path(&dir), b"{\"reason\": 3}").unwrap();
        let e = Halt::read(&dir).unwrap_err();
        assert!(matches!(&e, ControlError::Halt { reason, .. } if reason.contains("invalid type")), "{e}");
        assert!(Halt::clear(&dir).unwrap());
        assert!(!Halt::clear(&dir).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
