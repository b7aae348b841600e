//! Datasets: the versions a job stored, and what the user decides about them (SCR's
//! `scr_index`, `SCR_CURRENT`, `SCR_Drop`, `SCR_Delete`, output datasets).
//!
//! - Which version a restart uses when the call names none: `datasets.current`
//!   (`NAM_CKPT_DATASETS_CURRENT`), else the `current` of the name's index in the control
//!   directory (`nam ckpt current DIR NAME VERSION`, [`Checkpointer::set_current`]), else the
//!   newest restorable one.
//! - Forgotten versions keep their files but are never offered for restart
//!   ([`Checkpointer::forget`], `nam ckpt forget`); deleted ones lose their files on every
//!   rank and level ([`Checkpointer::delete`], `nam ckpt delete` for one directory).
//! - Output datasets ([`Checkpointer::checkpoint_output`]) are stored and flushed like a
//!   checkpoint at the PFS level, and never restarted from.
//! - After each checkpoint every rank records its part ([`nam_ckpt_control::RankRecord`]:
//!   level, descriptor, scheme, bytes, time), so `nam ckpt list DIR` can say what each
//!   dataset is and how complete it is.
//!
//! The index is read on rank 0 and broadcast, so every rank restarts from the same version;
//! it is written on rank 0 only.

use crate::checkpointer::{CheckpointOutcome, Checkpointer, Strategy};
use crate::config::Config;
use crate::error::{CkptError, Result};
use crate::level::{remove_rank_files, Level, LevelKind};
use crate::runloop::from_root;
use nam_ckpt_control::{unix_now, Dataset, Index, RankRecord};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[datasets]`: where the job-control files are and which version a restart uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatasetsConfig {
    /// The control directory: the halt file and each name's dataset index (empty: `flush.dir`
    /// when set, else `ssd.dir`).
    pub dir: String,
    /// The version a restart uses when the call names none (SCR's `SCR_CURRENT`; empty: the
    /// index's current version, else the newest restorable one).
    pub current: String,
}

impl DatasetsConfig {
    /// `datasets.current` as a version; Err([`CkptError::Config`]) when it is not one.
    pub fn current_version(&self) -> Result<Option<u64>> {
        let text = self.current.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<u64>()
            .map(Some)
            .map_err(|_| CkptError::Config(format!("datasets.current = {text:?} is not a version number")))
    }
}

impl Config {
    /// The control directory ([`DatasetsConfig::dir`]).
    pub fn control_dir(&self) -> PathBuf {
        if !self.datasets.dir.is_empty() {
            return PathBuf::from(&self.datasets.dir);
        }
        self.flush.dir.clone().unwrap_or_else(|| self.ssd.dir.clone())
    }
}

/// Which versions a full restart (and `latest`) may consider.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Choice {
    /// Versions never offered (forgotten ones, outputs).
    hidden: std::collections::BTreeSet<u64>,
    /// Only this version (the current one, or the call's).
    only: Option<u64>,
}

impl Choice {
    /// Whether `version` may be restarted from.
    pub(crate) fn allows(&self, version: u64) -> bool {
        !self.hidden.contains(&version) && self.only.is_none_or(|v| v == version)
    }
}

impl Checkpointer {
    /// The levels of full checkpoints (RAM, SSD, and PFS when `flush.dir` is set).
    fn dataset_levels(&self) -> Vec<Level> {
        let c = &self.job.config;
        let mut levels = vec![
            Level { kind: LevelKind::Ram, dir: c.ram.dir.clone(), keep: c.ram.keep },
            Level { kind: LevelKind::Ssd, dir: c.ssd.dir.clone(), keep: c.ssd.keep },
        ];
        if let Some(dir) = &c.flush.dir {
            levels.push(Level { kind: LevelKind::Pfs, dir: dir.clone(), keep: c.flush.keep });
        }
        levels
    }

    /// Not collective: the datasets of `name` (the configured name when `None`) that this
    /// rank's levels hold, level by level (RAM, SSD, PFS), each with its completeness as the
    /// directory shows it (a node-local directory holds its node's ranks only).
    pub fn datasets(&self, name: Option<&str>) -> Result<Vec<Dataset>> {
        let name = name.unwrap_or(&self.job.config.name);
        let mut out = Vec::new();
        for level in self.dataset_levels() {
            if !level.dir.join(name).is_dir() {
                continue;
            }
            out.extend(nam_ckpt_control::list(&level.dir)?.into_iter().filter(|d| d.name == name).map(|mut d| {
                d.level.get_or_insert_with(|| level.kind.name().to_string());
                d
            }));
        }
        Ok(out)
    }

    /// Collective: changes the index of `name` on rank 0 with `change`; the outcome is the
    /// same on every rank.
    fn update_index(&self, name: Option<&str>, what: &str, change: impl FnOnce(&mut Index)) -> Result<()> {
        let name = name.unwrap_or(&self.job.config.name);
        let dir = self.control_dir();
        let local =
            (self.job.comm.rank() == 0).then(|| Index::update(&dir, name, change).map(|_| ()).map_err(CkptError::from));
        from_root(&self.job.comm, local, what)
    }

    /// Collective: makes `version` of `name` the one a restart without a version uses (SCR's
    /// `SCR_CURRENT`, kept in the index, so later jobs restart from it too); `None` goes back
    /// to the newest restorable version. `datasets.current` in the configuration outranks it.
    pub fn set_current(&mut self, name: Option<&str>, version: Option<u64>) -> Result<()> {
        self.update_index(name, "choosing the current dataset", |i| match version {
            Some(v) => i.set_current(v),
            None => i.current = None,
        })
    }

    /// Collective: forgets `version` of `name` (SCR's `SCR_Drop`): its files stay, but no
    /// restart or `latest` offers it again.
    pub fn forget(&mut self, name: Option<&str>, version: u64) -> Result<()> {
        self.update_index(name, "forgetting a dataset", |i| i.forget(version))
    }

    /// Collective: deletes `version` of `name` (SCR's `SCR_Delete`): every rank removes its
    /// files of it at every level (commit marker first), and the index forgets it.
    pub fn delete(&mut self, name: Option<&str>, version: u64) -> Result<()> {
        let real = name.unwrap_or(&self.job.config.name).to_string();
        // The name becomes a path: it must not reach outside the level directories.
        nam_ckpt_control::check_name(&real)?;
        if let Strategy::Full(full) = &self.strategy {
            // A rebuilt file still being stored would come back after the removal.
            full.settle();
        }
        let rank = self.job.comm.rank();
        let mut local = Ok(());
        for level in self.dataset_levels() {
            let dir = level.version_dir(&real, version);
            if local.is_ok() && dir.is_dir() {
                local = remove_rank_files(&dir, rank);
                // Left for the last rank of a shared directory to remove.
                let _ = std::fs::remove_dir(&dir);
            }
        }
        self.job.comm.agree(local, "deleting a dataset's files")?;
        self.update_index(Some(&real), "forgetting a deleted dataset", |i| i.forget(version))?;
        // Records and descriptor files of ranks of this node that no rank removed (none
        // should be left) keep an empty version directory from going; the barrier lets every
        // rank finish before the directories are tried once more.
        self.job.comm.barrier();
        for level in self.dataset_levels() {
            let _ = std::fs::remove_dir(level.version_dir(&real, version));
        }
        Ok(())
    }

    /// Collective: stores the protected regions (and routed files) as output dataset
    /// `version` of `name`: a checkpoint at the PFS level (flushed before the call returns)
    /// that the index marks as output, so no restart uses it. Needs `flush.dir`
    /// (Err([`CkptError::Config`]) otherwise); full checkpoints only.
    pub fn checkpoint_output(&mut self, name: Option<&str>, version: u64) -> Result<CheckpointOutcome> {
        if self.job.config.flush.dir.is_none() {
            return Err(CkptError::Config("an output dataset is flushed to the PFS level: set flush.dir".into()));
        }
        let outcome = self.checkpoint_full(name, version, Some(LevelKind::Pfs), None, true)?;
        self.update_index(name, "marking an output dataset", |i| {
            i.outputs.insert(version);
        })?;
        Ok(outcome)
    }

    /// Collective, before `latest` and `restart`: reads the index of `name` on rank 0 and
    /// tells the strategy which versions it may use; returns the version a restart without
    /// one must use (`datasets.current`, else the index's current).
    pub(crate) fn prepare_restart(&self, name: &str, version: Option<u64>) -> Result<Option<u64>> {
        let dir = self.control_dir();
        let local = (self.job.comm.rank() == 0).then(|| Index::load(&dir, name).map_err(CkptError::from));
        let index: Index = from_root(&self.job.comm, local, "reading the dataset index")?;
        let current = self.job.config.datasets.current_version()?.or(index.current);
        let choice = match version {
            // A version the call names is used even when forgotten.
            Some(v) => Choice { hidden: Default::default(), only: Some(v) },
            None => Choice { hidden: index.forgotten.union(&index.outputs).copied().collect(), only: current },
        };
        if let Strategy::Full(full) = &self.strategy {
            *full.choice.borrow_mut() = choice;
        }
        self.learn_descriptors(name)?;
        Ok(version.or(current))
    }

    /// Not collective: this rank's record of a checkpoint that committed, at every level
    /// that holds its commit marker. A record is a listing aid: a failure to write one is
    /// logged, not returned (the checkpoint itself is complete).
    pub(crate) fn write_records(
        &self,
        name: &str,
        outcome: &CheckpointOutcome,
        descriptor: &str,
        scheme: &str,
        output: bool,
    ) {
        if outcome.level.is_none() {
            return;
        }
        let rank = self.job.comm.rank();
        for level in self.dataset_levels() {
            if !level.marker(name, outcome.version, rank).exists() {
                continue;
            }
            let record = RankRecord {
                name: name.to_string(),
                version: outcome.version,
                rank,
                ranks: self.job.comm.size(),
                level: level.kind.name().to_string(),
                descriptor: descriptor.to_string(),
                scheme: if level.kind == LevelKind::Pfs { "none".to_string() } else { scheme.to_string() },
                bytes: outcome.file_bytes,
                time: unix_now(),
                seconds: outcome.seconds,
                output,
            };
            if let Err(e) = record.write(&level.version_dir(name, outcome.version)) {
                log::warn!("rank {rank}: recording dataset {name} v{}: {e}", outcome.version);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_version_and_control_directory() {
        let c = Config::parse("", &[]).unwrap();
        assert_eq!((c.datasets.current_version().unwrap(), c.control_dir()), (None, c.ssd.dir.clone()));
        let c = Config::parse("[flush]\ndir = \"/pfs\"\n[datasets]\ncurrent = \"12\"\n", &[]).unwrap();
        assert_eq!((c.datasets.current_version().unwrap(), c.control_dir()), (Some(12), PathBuf::from("/pfs")));
        let env = [("NAM_CKPT_DATASETS_CURRENT".to_string(), "latest".to_string())];
        let e = Config::parse("", &env).unwrap_err();
        assert!(matches!(&e, CkptError::Config(m) if m.contains("datasets.current")), "{e}");
        let choice = Choice { hidden: [3].into(), only: None };
        assert!(choice.allows(4) && !choice.allows(3));
    }
}
