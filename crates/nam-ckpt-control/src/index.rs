//! The dataset index of one checkpoint name: which version a restart uses, which versions are
//! forgotten, and which are output datasets (as SCR's `index.scr`, kept by `scr_index`).
//!
//! `<dir>/<name>/index.json`, JSON. A missing file is an empty index. The library reads it
//! on one rank before `latest` and `restart` and spreads it to all, and writes it when the
//! application marks a dataset; `nam ckpt current|forget|delete` write it from outside. A
//! forgotten version keeps its files but is never offered for restart; an output dataset is
//! stored (and flushed) like a checkpoint but never restarted from.

use crate::{check_name, read_small, write_atomically, ControlError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The index file's name in `<dir>/<name>/`.
pub const INDEX_FILE: &str = "index.json";
/// Largest index read (bytes): 64 Ki versions of 20 digits each, with room to spare. A
/// larger file is not an index this library wrote.
const INDEX_MAX_BYTES: u64 = 4 << 20;

/// The dataset index of one checkpoint name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Index {
    /// The version a restart uses when the call names none (SCR's `SCR_CURRENT`); `None`:
    /// the newest restorable one.
    pub current: Option<u64>,
    /// Versions never offered for restart (their files stay until retention or `delete`).
    pub forgotten: BTreeSet<u64>,
    /// Output datasets: stored and flushed, never restarted from.
    pub outputs: BTreeSet<u64>,
}

impl Index {
    /// `<dir>/<name>/index.json`.
    pub fn path(dir: &Path, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        Ok(dir.join(name).join(INDEX_FILE))
    }

    /// The index of `name` in `dir` (empty when there is none). Err([`ControlError::Index`])
    /// naming the file and the cause when it is malformed, or names a current version that
    /// it also forgets or marks as output.
    pub fn load(dir: &Path, name: &str) -> Result<Index> {
        let path = Self::path(dir, name)?;
        let too_big =
            |len| ControlError::Index { path: path.clone(), reason: format!("{len} bytes is larger than any index") };
        let Some(bytes) = read_small(&path, INDEX_MAX_BYTES, too_big)? else {
            return Ok(Index::default());
        };
        let index: Index = serde_json::from_slice(&bytes)
            .map_err(|e| ControlError::Index { path: path.clone(), reason: e.to_string() })?;
        index.check().map_err(|reason| ControlError::Index { path, reason })?;
        Ok(index)
    }

    /// Writes the index of `name` to `dir` (atomically).
    pub fn save(&self, dir: &Path, name: &str) -> Result<PathBuf> {
        let path = Self::path(dir, name)?;
        self.check().map_err(|reason| ControlError::Index { path: path.clone(), reason })?;
        write_atomically(&path, &serde_json::to_vec_pretty(self).expect("an index serializes"))?;
        Ok(path)
    }

    /// Loads, changes with `change` and saves the index of `name` in `dir`.
    pub fn update(dir: &Path, name: &str, change: impl FnOnce(&mut Index)) -> Result<Index> {
        let mut index = Self::load(dir, name)?;
        change(&mut index);
        index.save(dir, name)?;
        Ok(index)
    }

    /// Whether a restart may use `version`: not forgotten, not an output, and the current
    /// version when one is set.
    pub fn restartable(&self, version: u64) -> bool {
        !self.forgotten.contains(&version)
            && !self.outputs.contains(&version)
            && self.current.is_none_or(|c| c == version)
    }

    /// Makes `version` the one a restart uses (and remembers it again if it was forgotten).
    pub fn set_current(&mut self, version: u64) {
        self.forgotten.remove(&version);
        self.current = Some(version);
    }

    /// Forgets `version` (no longer the current one).
    pub fn forget(&mut self, version: u64) {
        self.forgotten.insert(version);
        if self.current == Some(version) {
            self.current = None;
        }
    }

    fn check(&self) -> std::result::Result<(), String> {
        match self.current {
            Some(c) if self.forgotten.contains(&c) => Err(format!("current version {c} is also forgotten")),
            Some(c) if self.outputs.contains(&c) => {
                Err(format!("current version {c} is an output dataset, which is never restarted from"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_chooses_forgets_and_refuses_malformed_files() {
        let dir = std::env::temp_dir().join(format!("nam-index-{}", std::process::id()));
        assert_eq!(Index::load(&dir, "heat").unwrap(), Index::default());
        let index = Index::update(&dir, "heat", |i| {
            i.outputs.insert(5);
            i.forget(3);
            i.set_current(4);
        })
        .unwrap();
        assert_eq!(Index::load(&dir, "heat").unwrap(), index);
        assert!(index.restartable(4) && !index.restartable(6) && !index.restartable(3) && !index.restartable(5));
        let mut i = index.clone();
        i.forget(4);
        assert_eq!(i.current, None);
        assert!(i.restartable(6) && !i.restartable(4));

        let path = Index::path(&dir, "heat").unwrap();
        for (text, cause) in [
            ("{\"current\": \"four\"}", "invalid type"),
            ("{\"currnt\": 4}", "unknown field"),
            ("{\"current\": 4, \"forgotten\": [4]}", "current version 4 is also forgotten"),
            ("not json", "expected"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Index::load(&dir, "heat").unwrap_err();
            assert!(matches!(&e, ControlError::Index { reason, .. } if reason.contains(cause)), "{text}: {e}");
            assert!(e.to_string().contains("index.json"), "{e}");
        }
        assert!(matches!(Index::load(&dir, "../etc"), Err(ControlError::BadName(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
