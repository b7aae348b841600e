//! Listing the datasets of a level directory (`nam ckpt list DIR`, SCR's `scr_index --list`)
//! and deleting one.
//!
//! A dataset is `<dir>/<name>/v<version>/`. What this directory holds of it is counted from
//! its files (commit markers and checkpoint files); level, descriptor, scheme, time and
//! whether it is an output come from the ranks' records ([`RankRecord`]) when there are
//! some; current, forgotten and output come from the name's [`Index`] in the same directory.
//! A node-local directory holds only its node's ranks: completeness says how many of the
//! job's ranks have committed files here.

use crate::index::INDEX_FILE;
use crate::{check_name, ControlError, Index, RankRecord, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One dataset as a directory holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Dataset {
    /// Checkpoint name.
    pub name: String,
    /// Version.
    pub version: u64,
    /// Level from the records (`None`: no record here).
    pub level: Option<String>,
    /// Redundancy descriptor from the records.
    pub descriptor: Option<String>,
    /// L2 scheme from the records.
    pub scheme: Option<String>,
    /// Ranks of the job that wrote it, from the records.
    pub ranks: Option<usize>,
    /// Ranks whose commit marker is here.
    pub committed: Vec<usize>,
    /// Bytes of the checkpoint files here.
    pub bytes: u64,
    /// Commit time from the records (Unix seconds).
    pub time: Option<f64>,
    /// An output dataset (index or records).
    pub output: bool,
    /// The version the index names for restart.
    pub current: bool,
    /// Forgotten in the index.
    pub forgotten: bool,
}

impl Dataset {
    /// `complete` when every rank of the job committed here, else `k/n ranks` (`k ranks`
    /// when the job size is unknown).
    pub fn completeness(&self) -> String {
        match self.ranks {
            Some(n) if self.committed.len() == n => "complete".into(),
            Some(n) => format!("{}/{n} ranks", self.committed.len()),
            None => format!("{} ranks", self.committed.len()),
        }
    }
}

/// Every dataset under `dir`, by name then version. Err([`ControlError::Index`]) when a
/// name's index is malformed (a listing must not hide which versions are forgotten).
pub fn list(dir: &Path) -> Result<Vec<Dataset>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ControlError::io("read directory", dir, e))?;
    let mut names: Vec<(String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(|n| (n.to_string(), e.path())))
        .collect();
    names.sort();
    for (name, path) in names {
        let versions = versions(&path);
        if versions.is_empty() {
            continue;
        }
        let index = Index::load(dir, &name)?;
        for (version, vdir) in versions {
            out.push(dataset(&name, version, &vdir, &index));
        }
    }
    Ok(out)
}

/// `v<version>` directories under a name's directory, ascending.
fn versions(name_dir: &Path) -> BTreeMap<u64, PathBuf> {
    let Ok(entries) = std::fs::read_dir(name_dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let v = e.file_name().to_str()?.strip_prefix('v')?.parse::<u64>().ok()?;
            Some((v, e.path()))
        })
        .collect()
}

fn dataset(name: &str, version: u64, vdir: &Path, index: &Index) -> Dataset {
    let mut d = Dataset {
        name: name.to_string(),
        version,
        level: None,
        descriptor: None,
        scheme: None,
        ranks: None,
        committed: Vec::new(),
        bytes: 0,
        time: None,
        output: index.outputs.contains(&version),
        current: index.current == Some(version),
        forgotten: index.forgotten.contains(&version),
    };
    let Ok(entries) = std::fs::read_dir(vdir) else {
        return d;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let file = e.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some((rank, suffix)) = file.strip_prefix("rank-").and_then(|r| r.split_once('.')) else { continue };
        let Ok(rank) = rank.parse::<usize>() else { continue };
        match suffix {
            "done" => d.committed.push(rank),
            "ckpt" => d.bytes += e.metadata().map_or(0, |m| m.len()),
            "info" => {
                // A record that cannot be read leaves the fields to the other records.
                if let Ok(Some(r)) = RankRecord::read(&e.path()) {
                    if r.name == name && r.version == version {
                        d.level.get_or_insert(r.level);
                        d.descriptor.get_or_insert(r.descriptor);
                        d.scheme.get_or_insert(r.scheme);
                        d.ranks.get_or_insert(r.ranks);
                        d.time = Some(d.time.map_or(r.time, |t: f64| t.max(r.time)));
                        d.output |= r.output;
                    }
                }
            }
            _ => {}
        }
    }
    d.committed.sort_unstable();
    d
}

/// Deletes what `dir` holds of version `version` of `name` (every rank's files there) and
/// forgets it in the name's index in `dir`. Err([`ControlError::NoDataset`]) when `dir`
/// holds nothing of it.
pub fn delete_dataset(dir: &Path, name: &str, version: u64) -> Result<()> {
    check_name(name)?;
    let vdir = dir.join(name).join(format!("v{version}"));
    if !vdir.is_dir() {
        return Err(ControlError::NoDataset { dir: dir.to_path_buf(), name: name.into(), version });
    }
    // Commit markers first: a half-deleted version is never offered for restart.
    if let Ok(entries) = std::fs::read_dir(&vdir) {
        for e in entries.filter_map(|e| e.ok()) {
            if e.file_name().to_str().is_some_and(|n| n.ends_with(".done")) {
                std::fs::remove_file(e.path()).map_err(|err| ControlError::io("remove", e.path(), err))?;
            }
        }
    }
    std::fs::remove_dir_all(&vdir).map_err(|e| ControlError::io("remove", &vdir, e))?;
    Index::update(dir, name, |i| i.forget(version))?;
    Ok(())
}

/// The index file of `name` in `dir`, for messages.
pub fn index_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name).join(INDEX_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(rank: usize, version: u64, output: bool) -> RankRecord {
        RankRecord {
            name: "heat".into(),
            version,
            rank,
            ranks: 2,
            level: "ram".into(),
            descriptor: "default".into(),
            scheme: "xor".into(),
            bytes: 10,
            time: 1000.0 + rank as f64,
            seconds: 0.5,
            output,
        }
    }

    #[test]
    fn datasets_are_listed_with_their_completeness_and_deleted() {
        let dir = std::env::temp_dir().join(format!("nam-list-{}", std::process::id()));
        for (version, ranks) in [(1u64, vec![0, 1]), (2, vec![0])] {
            let vdir = dir.join("heat").join(format!("v{version}"));
            std::fs::create_dir_all(&vdir).unwrap();
            for r in ranks {
                std::fs::write(vdir.join(format!("rank-{r}.ckpt")), vec![0u8; 10]).unwrap();
                std::fs::write(vdir.join(format!("rank-{r}.done")), b"").unwrap();
                record(r, version, version == 2).write(&vdir).unwrap();
            }
        }
        Index::update(&dir, "heat", |i| i.set_current(1)).unwrap();
        let all = list(&dir).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].completeness(), all[0].bytes, all[0].current, all[0].output),
            ("complete".into(), 20, true, false)
        );
        assert_eq!((all[1].completeness(), all[1].time, all[1].output), ("1/2 ranks".into(), Some(1000.0), true));
        assert_eq!(all[1].scheme.as_deref(), Some("xor"));

        delete_dataset(&dir, "heat", 1).unwrap();
        let all = list(&dir).unwrap();
        assert_eq!(all.iter().map(|d| d.version).collect::<Vec<_>>(), vec![2]);
        assert_eq!(Index::load(&dir, "heat").unwrap().current, None);
        assert!(matches!(delete_dataset(&dir, "heat", 1), Err(ControlError::NoDataset { .. })));
        std::fs::write(index_path(&dir, "heat"), b"[1, 2]").unwrap();
        assert!(matches!(list(&dir), Err(ControlError::Index { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
