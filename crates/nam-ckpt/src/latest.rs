//! Which version a restart can start from: the newest committed version whose data every
//! rank has, or which the L2 scheme can rebuild from the files that are left.
//!
//! A commit marker on any rank means the version was stored on every rank, but files can go
//! afterwards (a node's tmpfs with the node, a user's `rm`). So before a version is
//! reported, every rank says whether it still has its file and marker and its redundancy
//! files ([`Redundancy::missing_redundancy`]), one all-gather spreads that, and the scheme
//! judges whether it can rebuild the ranks without data ([`Redundancy::can_rebuild`]). The
//! check reads no data: restart still verifies every byte and falls back when it must.
//!
//! [`Redundancy::missing_redundancy`]: crate::Redundancy::missing_redundancy
//! [`Redundancy::can_rebuild`]: crate::Redundancy::can_rebuild

use crate::checkpointer::Job;
use crate::error::{CkptError, Result};
use crate::full::Full;
use crate::level::LevelKind;
use crate::redundancy::Target;
use serde::Serialize;

/// The newest version a restart can start from ([`crate::Checkpointer::latest_restorable`]),
/// the same on every rank.
#[derive(Debug, Clone, Serialize)]
pub struct Latest {
    /// The version.
    pub version: u64,
    /// The level it is restorable from (`None` for incremental checkpoints, whose restart
    /// picks the level).
    pub level: Option<LevelKind>,
    /// `(version, level, what is missing)` of every newer committed candidate that cannot be
    /// restored.
    pub skipped: Vec<(u64, LevelKind, String)>,
}

impl Full {
    /// Collective: the newest restorable version of `name` ([`Latest`]);
    /// Err([`CkptError::NoCheckpoint`]) when no version was ever committed,
    /// Err([`CkptError::Unrecoverable`]) naming what is missing of each when none can be
    /// restored.
    pub(crate) fn latest_restorable(&self, job: &Job, name: &str) -> Result<Latest> {
        self.settle();
        let mut skipped = Vec::new();
        for (version, kind) in self.candidates(job, name) {
            match self.restorable(job, name, version, kind) {
                Ok(()) => return Ok(Latest { version, level: Some(kind), skipped }),
                Err(missing) => skipped.push((version, kind, missing)),
            }
        }
        if skipped.is_empty() {
            return Err(CkptError::NoCheckpoint(format!(" of `{name}`")));
        }
        let why: Vec<String> = skipped.iter().map(|(v, k, m)| format!("v{v}/{}: {m}", k.name())).collect();
        Err(CkptError::Unrecoverable(format!("no version of `{name}` can be restored: {}", why.join("; "))))
    }

    /// Collective: Ok when every rank has its data of `version` at level `kind`, or the L2
    /// scheme can rebuild the ranks that have not; else what is missing (the same text on
    /// every rank).
    fn restorable(&self, job: &Job, name: &str, version: u64, kind: LevelKind) -> std::result::Result<(), String> {
        let rank = job.comm.rank();
        let level = self.levels().into_iter().find(|l| l.kind == kind).expect("candidate level exists");
        let have = level.marker(name, version, rank).exists() && level.file(name, version, rank).exists();
        let dir = level.version_dir(name, version);
        let target_name = format!("rank-{rank}");
        let target = Target { dir: &dir, name: &target_name, fsync: false };
        // The PFS level has no L2 redundancy: the flush copies the data files only.
        let redundancy = kind == LevelKind::Pfs || self.scheme.missing_redundancy(&target).is_none();
        let flags = crate::comm::all_gather_u64(job.comm.raw(), u64::from(have) | u64::from(redundancy) << 1);
        let lost: Vec<usize> = (0..flags.len()).filter(|&r| flags[r] & 1 == 0).collect();
        let no_redundancy: Vec<usize> = (0..flags.len()).filter(|&r| flags[r] & 2 == 0).collect();
        let local = match (lost.is_empty(), kind) {
            (true, _) => Ok(()),
            (false, LevelKind::Pfs) => Err(format!("ranks {lost:?} have no copy at the PFS level")),
            // Judged with the sets of the layout this version was written with: the job may
            // run on other nodes now (every rank takes this branch, as `lost` is the job's).
            (false, _) => match crate::relocate::scheme_for(job, self, name, version) {
                Ok(recorded) => recorded.scheme.as_deref().unwrap_or(&*self.scheme).can_rebuild(&lost, &no_redundancy),
                Err(e) => Err(format!("forming the sets of the layout version {version} was written with: {e}")),
            },
        };
        // Each set judges its own ranks: the job's answer is every set's. (The causes are
        // gathered only when there are some: Open MPI refuses an all-gather of no bytes.)
        if job.comm.all_agree(local.is_ok()) {
            return Ok(());
        }
        let mut reasons: Vec<String> = job
            .comm
            .all_gather_bytes(local.err().unwrap_or_default().as_bytes())
            .into_iter()
            .filter(|m| !m.is_empty())
            .map(|m| String::from_utf8_lossy(&m).into_owned())
            .collect();
        reasons.sort_unstable();
        reasons.dedup();
        Err(reasons.join("; "))
    }
}
