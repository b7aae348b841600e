//! Placement between the RAM and SSD levels: the Checkpoint Location Controller (CLC) of
//! seed 001 (Algorithm 1) and static policies.
//!
//! **Lifetime estimation** (Eq. 4.1-4.2): `L_expected = (PBW_rated - PBW_used) * years_rated /
//! PBW_rated` and `L_estimated = (PBW_rated - PBW_used) / B_SSD`, with `B_SSD` the node's
//! SSD write bandwidth of this run. `L_estimated > L_expected` means the SSD wears no faster
//! than rated, so the checkpoint may go to the SSD.
//! **Performance-loss estimation** (Eq. 4.3): `T_slowdown = T_chk / (T_compute + T_chk)`
//! since init; above the bound the checkpoint goes to RAM.
//! **Size**: a checkpoint larger than the rank's RAM share goes to the SSD if wear allows,
//! else it is skipped (the seed skips it).
//!
//! Departure from the seed: the decision is **collective**. The seed lets each rank decide,
//! so ranks of one checkpoint can land on different levels or skip different checkpoints
//! (uncoordinated checkpoints, §4.3.3.3). Here each rank computes its view, one allreduce
//! combines them (SSD only if every node's SSD may take it; slowdown is the worst rank's;
//! RAM only if every rank fits), and every rank applies Algorithm 1 to the same inputs.

use crate::comm::Comm;
use crate::error::{CkptError, Result};
use crate::wear::Wear;
use mpi::collective::SystemOperation;
use mpi::traits::*;
use serde::Serialize;
use std::time::Instant;

/// Seconds in a (Julian) year.
pub const SECONDS_PER_YEAR: f64 = 365.25 * 86400.0;

/// Where a checkpoint goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The RAM level.
    Ram,
    /// The SSD level.
    Ssd,
    /// Not written (CLC: too large for RAM while the SSD must be spared).
    Skip,
}

/// The placement policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Every checkpoint to RAM.
    AlwaysRam,
    /// Every checkpoint to the SSD.
    AlwaysSsd,
    /// N checkpoints to RAM, then one to the SSD.
    Ratio(u64),
    /// CLC with lifetime estimation.
    Le,
    /// CLC with lifetime and performance-loss estimation.
    LePle,
}

impl PolicyKind {
    /// Parses `always-ram`, `always-ssd`, `ratio`, `le`, `le-ple` (`ratio` takes N from
    /// [`PolicyKind::with_ratio`]).
    pub fn parse(name: &str) -> Result<PolicyKind> {
        Ok(match name {
            "always-ram" => PolicyKind::AlwaysRam,
            "always-ssd" => PolicyKind::AlwaysSsd,
            "ratio" => PolicyKind::Ratio(9),
            "le" => PolicyKind::Le,
            "le-ple" => PolicyKind::LePle,
            _ => {
                return Err(CkptError::Config(format!(
                    "unknown policy.kind `{name}` (always-ram|always-ssd|ratio|le|le-ple)"
                )))
            }
        })
    }

    /// Sets N of a ratio policy.
    pub fn with_ratio(self, n: u64) -> PolicyKind {
        match self {
            PolicyKind::Ratio(_) => PolicyKind::Ratio(n),
            k => k,
        }
    }
}

/// One decision and the estimates behind it (the same on every rank).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Decision {
    /// Where the checkpoint goes.
    pub placement: Placement,
    /// `L_estimated` of the most worn node, years.
    pub lifetime_estimated_years: f64,
    /// `L_expected` of that node, years.
    pub lifetime_expected_years: f64,
    /// Worst rank's `T_slowdown` before this checkpoint.
    pub slowdown: f64,
    /// Every rank's checkpoint fits its RAM share.
    pub fits_ram: bool,
}

/// The controller: a policy, its counters and the node's SSD wear.
pub struct Clc {
    kind: PolicyKind,
    bound: f64,
    force_ssd_every: u64,
    rated_years: f64,
    wear: Wear,
    start: Instant,
    checkpoint_seconds: f64,
    count: u64,
}

impl Clc {
    /// A controller for `kind` with the PLE `bound`, forced SSD checkpoints every
    /// `force_ssd_every` (0: never), the SSD's rated lifetime and its wear record.
    pub fn new(kind: PolicyKind, bound: f64, force_ssd_every: u64, rated_years: f64, wear: Wear) -> Self {
        Clc {
            kind,
            bound,
            force_ssd_every,
            rated_years,
            wear,
            start: Instant::now(),
            checkpoint_seconds: 0.0,
            count: 0,
        }
    }

    /// Eq. 4.1 and 4.2 for this node, years (`L_estimated` is infinite before any SSD write).
    pub fn lifetimes(&self) -> (f64, f64) {
        let remaining = (self.wear.rated_bytes() - self.wear.used_bytes()).max(0.0);
        let expected = remaining * self.rated_years / self.wear.rated_bytes();
        let elapsed = self.start.elapsed().as_secs_f64().max(1e-9);
        let bandwidth = self.wear.run_bytes() as f64 / elapsed;
        let estimated = if bandwidth > 0.0 { remaining / bandwidth / SECONDS_PER_YEAR } else { f64::INFINITY };
        (estimated, expected)
    }

    /// Eq. 4.3: fraction of the time since init spent in checkpoints.
    pub fn slowdown(&self) -> f64 {
        let total = self.start.elapsed().as_secs_f64();
        if total <= 0.0 {
            0.0
        } else {
            self.checkpoint_seconds / total
        }
    }

    /// Collective: where the next checkpoint of `bytes` goes, given this rank's RAM share.
    pub fn decide(&mut self, comm: &Comm, bytes: u64, ram_limit: u64) -> Decision {
        let (estimated, expected) = self.lifetimes();
        let local = [
            u64::from(estimated > expected),
            (self.slowdown() * 1e9) as u64,
            u64::from(bytes <= ram_limit),
            // Margin ratio in millionths, for reporting the most worn node.
            ((estimated / expected).min(1e12) * 1e6) as u64,
        ];
        let mut min = [0u64; 4];
        let mut max = [0u64; 4];
        comm.raw().all_reduce_into(&local[..], &mut min[..], SystemOperation::min());
        comm.raw().all_reduce_into(&local[..], &mut max[..], SystemOperation::max());
        let (le_ok, slowdown, fits_ram) = (min[0] == 1, max[1] as f64 / 1e9, min[2] == 1);
        let worst_estimated = expected * min[3] as f64 / 1e6;
        let placement = self.algorithm1(le_ok, slowdown, fits_ram);
        self.count += 1;
        Decision {
            placement,
            lifetime_estimated_years: if estimated.is_infinite() { f64::INFINITY } else { worst_estimated },
            lifetime_expected_years: expected,
            slowdown,
            fits_ram,
        }
    }

    fn algorithm1(&self, le_ok: bool, slowdown: f64, fits_ram: bool) -> Placement {
        let i = self.count;
        if self.force_ssd_every > 0 && (i + 1) % self.force_ssd_every == 0 {
            return Placement::Ssd;
        }
        let loc = match self.kind {
            PolicyKind::AlwaysRam => return Placement::Ram,
            PolicyKind::AlwaysSsd => return Placement::Ssd,
            PolicyKind::Ratio(n) => return if i % (n + 1) == n { Placement::Ssd } else { Placement::Ram },
            PolicyKind::Le if le_ok => Placement::Ssd,
            PolicyKind::LePle if le_ok && slowdown <= self.bound => Placement::Ssd,
            PolicyKind::Le | PolicyKind::LePle => Placement::Ram,
        };
        match (loc, fits_ram, le_ok) {
            (Placement::Ram, false, true) => Placement::Ssd,
            (Placement::Ram, false, false) => Placement::Skip,
            (loc, _, _) => loc,
        }
    }

    /// Records a finished checkpoint: its seconds (T_chk) and, for the SSD, the node's bytes.
    pub fn record(&mut self, comm: &Comm, placement: Placement, seconds: f64, bytes: u64) -> Result<()> {
        self.checkpoint_seconds += seconds;
        let node_bytes = if placement == Placement::Ssd { bytes } else { 0 };
        self.wear.add(comm, node_bytes)
    }

    /// The wear record.
    pub fn wear(&self) -> &Wear {
        &self.wear
    }
}
