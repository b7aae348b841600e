//! The application API: init, protect regions, checkpoint, restart, route files, finalize.
//!
//! What a checkpoint stores is a strategy chosen once at init ([`Strategy`]): full
//! checkpoints (`full.rs`) or incremental ones (`incremental`); the API delegates to it.

use crate::comm::Comm;
use crate::config::Config;
use crate::constants::FLUSH_WAIT_MAX;
use crate::error::{CkptError, Result};
use crate::full::Full;
use crate::incremental::Incremental;
use crate::latest::Latest;
use crate::level::{check_writable, LevelKind};
use crate::memory_server::ServerClient;
use crate::policy::Decision;
use crate::redundancy::{ProtectStats, Scheme};
use crate::restart::RestartOutcome;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A protected memory region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

/// What one checkpoint did (the same placement on every rank).
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointOutcome {
    /// Version written.
    pub version: u64,
    /// Level written, or `None` when the policy skipped this checkpoint.
    pub level: Option<LevelKind>,
    /// The policy's decision.
    pub decision: Decision,
    /// Bytes of this rank's file.
    pub file_bytes: u64,
    /// Seconds to write this rank's file.
    pub write_seconds: f64,
    /// L2 statistics of this rank.
    pub protect: ProtectStats,
    /// Wall seconds of the whole call (slowest rank).
    pub seconds: f64,
    /// Queued for the L3 flush.
    pub flushed: bool,
}

/// What every strategy works on: the job's communicator and configuration, and what the
/// application protects.
pub(crate) struct Job {
    pub(crate) comm: Comm,
    pub(crate) config: Config,
    pub(crate) regions: BTreeMap<i32, Region>,
    pub(crate) files: BTreeMap<String, PathBuf>,
}

impl Job {
    /// [`Checkpointer::route_file`].
    pub(crate) fn route_file(&mut self, path: &str) -> Result<PathBuf> {
        let base = std::path::Path::new(path)
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| CkptError::Config(format!("cannot route `{path}`: no file name")))?;
        let dir = self.config.ram.dir.join(&self.config.name).join(format!("files-rank-{}", self.comm.rank()));
        std::fs::create_dir_all(&dir).map_err(|e| CkptError::io("create", &dir, e))?;
        let routed = dir.join(base);
        self.files.insert(base.to_string(), routed.clone());
        Ok(routed)
    }
}

/// How checkpoints are stored, chosen once at init from `incremental.mode`.
pub(crate) enum Strategy {
    /// Every checkpoint stores everything: placement policy, L1 file, L2 scheme, L3 flush.
    Full(Full),
    /// A nam-incr engine stores a base and increments (no policy, L2 or L3).
    Incremental(Incremental),
}

/// The checkpoint library of one MPI job.
pub struct Checkpointer {
    pub(crate) job: Job,
    pub(crate) strategy: Strategy,
    /// When this rank's last checkpoint finished (or init): [`Checkpointer::snapshot`]
    /// measures its interval from here.
    pub(crate) last_checkpoint: Instant,
    /// This job's checkpoints and their cost ([`Checkpointer::need_checkpoint`], the
    /// descriptor rule).
    pub(crate) run: crate::runloop::RunState,
    /// The redundancy descriptors ([`crate::descriptors`]).
    pub(crate) plan: crate::descriptors::Plan,
}

impl Checkpointer {
    /// Collective over `comm`: checks the directories and sets up the strategy (for full
    /// checkpoints the L2 scheme and the policy). Every rank gets the same outcome (an error
    /// on one rank is an error on all).
    pub fn init(mut comm: Comm, mut config: Config) -> Result<Checkpointer> {
        // Node-local directories may name the node (`{node}`); failure groups shape the sets.
        crate::relocate::localize(&mut config, &comm.nodes().names[comm.nodes().node_of[comm.rank()]]);
        comm.apply_failure_groups(&config.failure_groups)?;
        let local = Self::check_dirs(&config);
        crate::redundancy::agree(comm.raw(), local, "checking checkpoint directories")?;
        // The memory-server client settings are read once, for every memory server used.
        let incremental = config.incremental.mode()?.is_some();
        let wants_servers = if incremental {
            config.incremental.level_kinds()?.contains(&LevelKind::Nam)
        } else {
            Scheme::parse(&config.redundancy.scheme)? == Scheme::NamXor
                || config.descriptors.values().any(|d| d.scheme == Scheme::NamXor.name())
        };
        let client = if wants_servers {
            Some(comm.agree(ServerClient::from_env(), "reading the memory-server client settings")?)
        } else {
            None
        };
        let mut strategy = match Incremental::new(&config.incremental, client.clone())? {
            Some(incr) => Strategy::Incremental(incr),
            None => {
                // Ranks that run on other nodes than they did get their files first.
                crate::relocate::relocate(&comm, &[config.ram.dir.clone(), config.ssd.dir.clone()])?;
                Strategy::Full(Full::new(&comm, &config, client.as_ref())?)
            }
        };
        let full = match &mut strategy {
            Strategy::Full(full) => Some(full),
            Strategy::Incremental(_) => None,
        };
        let plan = crate::descriptors::install(&comm, &config, client.as_ref(), full)?;
        let job = Job { comm, config, regions: BTreeMap::new(), files: BTreeMap::new() };
        let run = Default::default();
        Ok(Checkpointer { job, strategy, last_checkpoint: Instant::now(), run, plan })
    }

    fn check_dirs(config: &Config) -> Result<()> {
        check_writable(&config.ram.dir)?;
        check_writable(&config.ssd.dir)?;
        if let Some(dir) = &config.flush.dir {
            check_writable(dir)?;
        }
        Ok(())
    }

    /// The MPI layer.
    pub fn comm(&self) -> &Comm {
        &self.job.comm
    }

    /// The resolved configuration.
    pub fn config(&self) -> &Config {
        &self.job.config
    }

    /// Protects `len` bytes at `ptr` under `id` (not collective).
    ///
    /// # Safety
    /// The memory must stay valid, and must not be accessed by other threads during
    /// [`Checkpointer::checkpoint`] and [`Checkpointer::restart`], until it is unprotected
    /// or the checkpointer is dropped.
    pub unsafe fn protect(&mut self, id: i32, ptr: *mut u8, len: usize) -> Result<()> {
        let bad = |reason: String| Err(CkptError::Region { id, reason });
        if ptr.is_null() {
            return bad("the pointer is NULL".into());
        }
        if self.job.regions.contains_key(&id) {
            return bad("the id is already protected (unprotect it first)".into());
        }
        let (lo, hi) = (ptr as usize, ptr as usize + len);
        for (other, r) in &self.job.regions {
            let (olo, ohi) = (r.ptr as usize, r.ptr as usize + r.len);
            if lo < ohi && olo < hi {
                return bad(format!("overlaps region {other} ({} bytes at {:p})", r.len, r.ptr));
            }
        }
        self.job.regions.insert(id, Region { ptr, len });
        self.strategy_protect(id)
    }

    /// Stops protecting `id`; later checkpoints do not contain it, and restart refuses it.
    pub fn unprotect(&mut self, id: i32) -> Result<()> {
        self.job.regions.remove(&id).ok_or(CkptError::UnknownRegion(id))?;
        self.strategy_unprotect(id)
    }

    /// Routes a file of a file-based application: returns where to write `path` so that the
    /// next [`Checkpointer::checkpoint`] stores it (and where [`Checkpointer::restart`] puts
    /// it back). The file is kept by its base name.
    pub fn route_file(&mut self, path: &str) -> Result<PathBuf> {
        self.job.route_file(path)
    }

    /// Collective: writes version `version` of checkpoint `name` (the configured name when
    /// `None`). Full checkpoints: the policy picks RAM or SSD for all ranks, every rank writes
    /// its file, the L2 scheme protects it, every rank commits, and older versions beyond
    /// `keep` go. Incremental checkpoints: the engine stores what changed.
    pub fn checkpoint(&mut self, name: Option<&str>, version: u64) -> Result<CheckpointOutcome> {
        self.checkpoint_at(name, version, None)
    }

    /// Collective: [`Checkpointer::checkpoint`] at a level chosen for this call (as FTI's
    /// `FTI_Checkpoint(id, level)`), the same on every rank, instead of the placement
    /// policy's: [`LevelKind::Ram`] or [`LevelKind::Ssd`] (a RAM checkpoint larger than the
    /// rank's share is [`CkptError::RamTooSmall`]), or [`LevelKind::Pfs`]: the policy's L1
    /// level, then flushed to `flush.dir` before the call returns (the outcome's `flushed`
    /// and `level` say so). The L2 scheme protects it as any other. Full checkpoints only;
    /// [`LevelKind::Nam`], PFS without `flush.dir` and incremental checkpoints are
    /// [`CkptError::Config`].
    pub fn checkpoint_level(
        &mut self,
        name: Option<&str>,
        version: u64,
        level: LevelKind,
    ) -> Result<CheckpointOutcome> {
        self.checkpoint_at(name, version, Some(level))
    }

    /// Collective: checkpoints as [`Checkpointer::checkpoint`] when `snapshot.interval`
    /// seconds have passed since init or since the last checkpoint (FTI's `FTI_Snapshot`),
    /// else returns `None` at the cost of one allreduce. The slowest rank's clock decides,
    /// so every rank decides alike. Call it every iteration.
    pub fn snapshot(&mut self, name: Option<&str>, version: u64) -> Result<Option<CheckpointOutcome>> {
        let elapsed = self.job.comm.max_f64(self.last_checkpoint.elapsed().as_secs_f64());
        if elapsed < self.job.config.snapshot.interval {
            return Ok(None);
        }
        self.checkpoint_at(name, version, None).map(Some)
    }

    fn checkpoint_at(
        &mut self,
        name: Option<&str>,
        version: u64,
        level: Option<LevelKind>,
    ) -> Result<CheckpointOutcome> {
        self.checkpoint_full(name, version, level, None, false)
    }

    /// Every checkpoint: with the redundancy descriptor the call names or the rule picks
    /// (its level unless the call names one), recorded for the run loop and the dataset
    /// listing (`output`: an output dataset).
    pub(crate) fn checkpoint_full(
        &mut self,
        name: Option<&str>,
        version: u64,
        level: Option<LevelKind>,
        descriptor: Option<&str>,
        output: bool,
    ) -> Result<CheckpointOutcome> {
        let name = name.unwrap_or(&self.job.config.name).to_string();
        let chosen = self.choose_descriptor(descriptor)?;
        let level = level.or(chosen.level);
        let outcome = match (&mut self.strategy, level) {
            (Strategy::Full(full), level) => full.checkpoint(&self.job, &name, version, level),
            (Strategy::Incremental(incr), None) => incr.checkpoint(&mut self.job, &name, version),
            (Strategy::Incremental(_), Some(level)) => Err(CkptError::Config(format!(
                "incremental checkpoints go to the levels of incremental.levels; a level per call ({}) is for full checkpoints",
                level.name()
            ))),
        };
        if let Ok(outcome) = &outcome {
            self.last_checkpoint = Instant::now();
            self.run.record(outcome.seconds, outcome.level.is_some());
            self.write_records(&name, outcome, &chosen.name, chosen.scheme.name(), output);
        }
        outcome
    }

    /// Collective: the newest version of `name` that a restart can restore (`None` when
    /// there is none): [`Checkpointer::latest_restorable`] without the reasons.
    pub fn latest(&self, name: Option<&str>) -> Option<u64> {
        self.latest_restorable(name).ok().map(|l| l.version)
    }

    /// Collective: the newest version of `name` that a restart can restore: one whose data
    /// every rank still has, or the L2 scheme can rebuild from the files left (newer
    /// committed versions that cannot be restored are listed in [`Latest::skipped`]).
    /// Err([`CkptError::NoCheckpoint`]) when no version was committed,
    /// Err([`CkptError::Unrecoverable`]) saying what is missing when none can be restored.
    /// Restart still verifies every byte and falls back when it must.
    pub fn latest_restorable(&self, name: Option<&str>) -> Result<Latest> {
        let name = name.unwrap_or(&self.job.config.name).to_string();
        self.prepare_restart(&name, None)?;
        match &self.strategy {
            Strategy::Full(full) => full.latest_restorable(&self.job, &name),
            Strategy::Incremental(incr) => match incr.latest(&self.job, &name) {
                Some(version) => Ok(Latest { version, level: None, skipped: Vec::new() }),
                None => Err(CkptError::NoCheckpoint(format!(" of `{name}`"))),
            },
        }
    }

    /// Collective: restores the newest restorable version (or exactly `version`) into the
    /// protected regions (all, or only `ids`) and routed files. Each candidate is read and
    /// verified (CRC32C per chunk, rebuilt from chunk parity where possible); ranks whose
    /// data is missing or corrupt are rebuilt by the L2 scheme; a candidate that still fails
    /// sends the restart to the next level, then to the next older version. Wrong data is
    /// never reported as restored.
    ///
    /// Each rank's file is read once, straight into the regions, each chunk checked as it
    /// arrives (no staging buffer, no second pass): so when a candidate fails after its
    /// bytes were read, the regions hold them until the next candidate is restored, and
    /// after a restart that fails on every candidate the regions' contents are unspecified
    /// (the routed files are only written once a candidate succeeded).
    pub fn restart(&mut self, name: Option<&str>, version: Option<u64>, ids: Option<&[i32]>) -> Result<RestartOutcome> {
        let name = name.unwrap_or(&self.job.config.name).to_string();
        if let Some(ids) = ids {
            if let Some(&id) = ids.iter().find(|id| !self.job.regions.contains_key(id)) {
                return Err(CkptError::UnknownRegion(id));
            }
        }
        let version = self.prepare_restart(&name, version)?;
        match &mut self.strategy {
            Strategy::Full(full) => crate::relocate::restart(full, &mut self.job, &name, version, ids),
            Strategy::Incremental(incr) => incr.restart(&self.job, &name, version, ids),
        }
    }

    /// Tells the strategy that region `id` was just protected.
    fn strategy_protect(&mut self, id: i32) -> Result<()> {
        match &mut self.strategy {
            Strategy::Full(_) => Ok(()),
            Strategy::Incremental(incr) => incr.protect(&mut self.job, id),
        }
    }

    /// Tells the strategy that region `id` was just unprotected.
    fn strategy_unprotect(&mut self, id: i32) -> Result<()> {
        match &mut self.strategy {
            Strategy::Full(_) => Ok(()),
            Strategy::Incremental(incr) => incr.unprotect(id),
        }
    }

    /// Abeyratne 2017, Eq. 4.2, for this rank's node now: projected SSD lifetime at this run's SSD
    /// write rate, years (infinite before any SSD write, and with incremental checkpoints, which
    /// the placement policy does not place).
    pub fn lifetime_estimated_years(&self) -> f64 {
        match &self.strategy {
            Strategy::Full(full) => full.clc.lifetimes().0,
            Strategy::Incremental(_) => f64::INFINITY,
        }
    }

    /// Errors of finished L3 flushes since the last call (empty when all went well).
    pub fn flush_errors(&self) -> Vec<String> {
        match &self.strategy {
            Strategy::Full(full) => full.flush_errors(),
            Strategy::Incremental(_) => Vec::new(),
        }
    }

    /// Waits (at most `deadline`) for queued flushes.
    pub fn wait_flush(&self, deadline: Duration) -> Result<()> {
        match &self.strategy {
            Strategy::Full(full) => full.wait_flush(deadline),
            Strategy::Incremental(_) => Ok(()),
        }
    }

    /// Collective: waits for flushes (and incremental copies) and releases everything. Err
    /// reports flush failures.
    pub fn finalize(self) -> Result<()> {
        let waited = match &self.strategy {
            Strategy::Full(full) => full.wait_flush(FLUSH_WAIT_MAX),
            Strategy::Incremental(incr) => incr.finish(),
        };
        let errors = self.flush_errors();
        let local = waited.and_then(|_| match errors.first() {
            Some(e) => {
                Err(CkptError::Flush { path: self.job.config.flush.dir.clone().unwrap_or_default(), reason: e.clone() })
            }
            None => Ok(()),
        });
        self.job.comm.barrier();
        local
    }
}
