//! Reserving the RAM level's files before the first checkpoint.
//!
//! The RAM level overwrites the files of retired versions in place (`mapped.rs`), so after
//! the first `keep` + 1 checkpoints of a name no checkpoint allocates tmpfs pages. Those first
//! ones do: on this project's machines a fresh 64 MiB tmpfs file costs two to four times the
//! copy itself (page allocation, zeroing, page tables). [`Checkpointer::reserve`] moves that
//! cost to setup, where an application allocates its own arrays, and checks there that the
//! level has room for the versions it keeps (tmpfs full fails the reservation, not a
//! checkpoint in the middle of the run).

use crate::checkpointer::{Checkpointer, Strategy};
use crate::error::Result;
use crate::format::parity_len;
use crate::level::LevelKind;
use crate::policy::PolicyKind;

impl Checkpointer {
    /// Reserves the RAM level's files for checkpoints of `name` (the configured name when
    /// `None`) of the regions (and routed files) protected now: every rank gets one file more
    /// than `ram.keep`, less those it already has, each allocated and mapped. Not collective.
    /// Returns the bytes reserved by this rank. Does nothing for policies that never write
    /// to RAM (`always-ssd`) and for incremental checkpoints (their own stores).
    ///
    /// Checkpoints of another size still work: a reserved file is resized when reused.
    pub fn reserve(&mut self, name: Option<&str>) -> Result<u64> {
        let kind = PolicyKind::parse(&self.job.config.policy.kind)?;
        let (Strategy::Full(full), false) = (&self.strategy, kind == PolicyKind::AlwaysSsd) else { return Ok(0) };
        let job = &self.job;
        let name = name.unwrap_or(&job.config.name).to_string();
        let rank = job.comm.rank();
        let files: u64 = job.files.values().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        let total = job.regions.values().map(|r| r.len as u64).sum::<u64>() + files;
        let opts = full.write_options(job, LevelKind::Ram);
        let body = total as usize + parity_len(total as usize, &opts);
        let level = full.ram.clone();
        let dir = level.dir.join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| crate::CkptError::io("create", &dir, e))?;
        let held = level.spares(&name, rank).len() + level.committed(&name, rank).len();
        let mut reserved = 0;
        for _ in held..level.spare_slots() {
            let Some(slot) = level.free_spare(&name, rank) else { break };
            crate::mapped::reserve(&slot, body)?;
            reserved += body as u64;
        }
        Ok(reserved)
    }
}
