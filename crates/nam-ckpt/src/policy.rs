//! Placement between the RAM and SSD levels: the Checkpoint Location Controller (CLC) of
//! Abeyratne 2017 (Algorithm 1) and static policies.
//!
//! **Lifetime estimation** (Eq. 4.1-4.2): `L_expected = (PBW_rated - PBW_used) * years_rated /
//! PBW_rated` and `L_estimated = (PBW_rated - PBW_used) / B_SSD`, with `B_SSD` the node's
//! SSD write bandwidth of this run. `L_estimated > L_expected` means the SSD wears no faster
//! than rated, so the checkpoint may go to the SSD.
//! **Performance-loss estimation** (Eq. 4.3): `T_slowdown = T_chk / (T_compute + T_chk)` since
//! init, with `T_chk` the measured seconds of every checkpoint so far (RAM and SSD). Abeyratne 2017
//! tests the loss *before* the checkpoint, so one SSD checkpoint taken just under the bound
//! overshoots it by its whole cost. Here the test is Eq. 4.3 *after* the SSD checkpoint, with its
//! cost predicted from this run's measured SSD seconds per byte: `(T_chk + c) / (T_total + c) <=
//! bound`. Until an SSD checkpoint has been measured, `c` comes from a probe at init: every rank
//! writes `policy.ssd_probe` bytes to the SSD level at once (fsynced as checkpoints are) and the
//! slowest rank's rate stands for the SSD's. Without the probe (`ssd_probe = 0`) `c` is taken as 0,
//! Abeyratne 2017's test, and the first SSD checkpoint is chosen blind: it is the one that
//! overshoots.
//! **Size**: a checkpoint larger than the rank's RAM share goes to the SSD if wear allows,
//! else it is skipped (Abeyratne 2017 skips it).
//!
//! Departure from Abeyratne 2017: the decision is **collective**. There each rank decides, so ranks
//! of one checkpoint can land on different levels or skip different checkpoints (uncoordinated
//! checkpoints, Abeyratne 2017, §4.3.3.3). Here each rank computes its view, one allreduce combines
//! them (SSD only if every node's SSD may take it; slowdown is the worst rank's; RAM only if every
//! rank fits), and every rank applies Algorithm 1 to the same inputs. The same allreduce carries
//! whether each rank is ready to write (its routed files were read), so a checkpoint costs one
//! collective before the data is written.

use crate::comm::Comm;
use crate::error::{CkptError, Result};
use crate::wear::Wear;
use mpi::collective::SystemOperation;
use mpi::traits::*;
use serde::Serialize;
use std::time::Instant;

/// Seconds in a (Julian) year ([`crate::constants`]).
pub use crate::constants::SECONDS_PER_YEAR;

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
    /// Worst rank's `T_slowdown` predicted after this checkpoint if it went to the SSD
    /// (from the init probe until an SSD checkpoint has been measured; equal to `slowdown`
    /// when neither exists).
    pub slowdown_after_ssd: f64,
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
    /// Measured SSD seconds and bytes of this run's SSD checkpoints, if any.
    ssd_cost: Option<Cost>,
    /// The init probe's SSD seconds and bytes, used until an SSD checkpoint is measured.
    ssd_probe: Option<Cost>,
    count: u64,
}

/// Seconds and bytes of one level's measured checkpoints.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    seconds: f64,
    bytes: f64,
}

impl Cost {
    /// Seconds for `bytes` at the measured mean rate.
    fn predict(&self, bytes: u64) -> f64 {
        self.seconds / self.bytes.max(1.0) * bytes as f64
    }
}

/// The inputs of Abeyratne 2017, Algorithm 1, combined over all ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    /// Every node's SSD may take the checkpoint (`L_estimated > L_expected`).
    pub le_ok: bool,
    /// Worst rank's `T_slowdown` now.
    pub slowdown: f64,
    /// Worst rank's `T_slowdown` predicted after an SSD checkpoint.
    pub slowdown_after_ssd: f64,
    /// Every rank's checkpoint fits its RAM share.
    pub fits_ram: bool,
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
            ssd_cost: None,
            ssd_probe: None,
            count: 0,
        }
    }

    /// Whether this policy uses the SSD's predicted cost (PLE): only then is a probe useful.
    pub fn wants_ssd_cost(&self) -> bool {
        self.kind == PolicyKind::LePle
    }

    /// Collective: every rank writes `bytes` to a probe file in `dir` at once (fsynced when
    /// `fsync`), removes it, and the slowest rank's rate stands for the SSD's cost until a
    /// checkpoint measures it. The probe bytes are not added to the wear record (they are
    /// written once per run, a few MiB against the checkpoints' GiB).
    pub fn probe_ssd(&mut self, comm: &Comm, dir: &std::path::Path, bytes: usize, fsync: bool) -> Result<()> {
        let path = dir.join(format!(".nam-ssd-probe-{}", comm.rank()));
        // Not zeros: a file system may store zero pages sparsely or compress them.
        let data: Vec<u8> = (0..bytes).map(|i| (i as u8).wrapping_mul(167).wrapping_add(13)).collect();
        comm.raw().barrier();
        let started = Instant::now();
        let written = write_probe(&path, &data, fsync);
        let seconds = started.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(&path);
        crate::redundancy::agree(comm.raw(), written, "probing the SSD level")?;
        let slowest = comm.max_f64(seconds);
        self.ssd_probe = Some(Cost { seconds: slowest, bytes: bytes as f64 });
        Ok(())
    }

    /// Abeyratne 2017, Eq. 4.1 and 4.2, for this node, years (`L_estimated` is infinite before any
    /// SSD write).
    pub fn lifetimes(&self) -> (f64, f64) {
        let remaining = (self.wear.rated_bytes() - self.wear.used_bytes()).max(0.0);
        let expected = remaining * self.rated_years / self.wear.rated_bytes();
        let elapsed = self.start.elapsed().as_secs_f64().max(1e-9);
        let bandwidth = self.wear.run_bytes() as f64 / elapsed;
        let estimated = if bandwidth > 0.0 { remaining / bandwidth / SECONDS_PER_YEAR } else { f64::INFINITY };
        (estimated, expected)
    }

    /// Abeyratne 2017, Eq. 4.3: fraction of the time since init spent in checkpoints.
    pub fn slowdown(&self) -> f64 {
        let total = self.start.elapsed().as_secs_f64();
        if total <= 0.0 {
            0.0
        } else {
            self.checkpoint_seconds / total
        }
    }

    /// Abeyratne 2017, Eq. 4.3, after a checkpoint of `bytes` to the SSD, its cost predicted from
    /// this run's measured SSD checkpoints (the current `T_slowdown` until one has been measured).
    pub fn slowdown_after_ssd(&self, bytes: u64) -> f64 {
        let total = self.start.elapsed().as_secs_f64();
        let cost = self.ssd_cost.or(self.ssd_probe).map_or(0.0, |c| c.predict(bytes));
        if total + cost <= 0.0 {
            0.0
        } else {
            (self.checkpoint_seconds + cost) / (total + cost)
        }
    }

    /// Collective: where the next checkpoint of `bytes` goes, given this rank's RAM share.
    /// `ready` is this rank's readiness to write; the second value is true when every rank
    /// is ready (the same allreduce carries it).
    pub fn decide(&mut self, comm: &Comm, bytes: u64, ram_limit: u64, ready: bool) -> (Decision, bool) {
        let (estimated, expected) = self.lifetimes();
        // Fractions in billionths; maxima as u64::MAX minus the value, so that one MIN
        // allreduce combines everything.
        let frac = |f: f64| (f.clamp(0.0, 1.0) * 1e9) as u64;
        let local = [
            u64::from(estimated > expected),
            u64::MAX - frac(self.slowdown()),
            u64::MAX - frac(self.slowdown_after_ssd(bytes)),
            u64::from(bytes <= ram_limit),
            // Margin ratio in millionths, for reporting the most worn node.
            ((estimated / expected).min(1e12) * 1e6) as u64,
            u64::from(ready),
        ];
        let mut min = [0u64; 6];
        comm.raw().all_reduce_into(&local[..], &mut min[..], SystemOperation::min());
        let inputs = Inputs {
            le_ok: min[0] == 1,
            slowdown: (u64::MAX - min[1]) as f64 / 1e9,
            slowdown_after_ssd: (u64::MAX - min[2]) as f64 / 1e9,
            fits_ram: min[3] == 1,
        };
        let worst_estimated = expected * min[4] as f64 / 1e6;
        let placement = algorithm1(self.kind, self.bound, self.force_ssd_every, self.count, inputs);
        self.count += 1;
        let decision = Decision {
            placement,
            lifetime_estimated_years: if estimated.is_infinite() { f64::INFINITY } else { worst_estimated },
            lifetime_expected_years: expected,
            slowdown: inputs.slowdown,
            slowdown_after_ssd: inputs.slowdown_after_ssd,
            fits_ram: inputs.fits_ram,
        };
        (decision, min[5] == 1)
    }

    /// Records a finished checkpoint: its seconds (T_chk), the SSD's measured cost and the
    /// node's SSD bytes. Collective over the node for SSD checkpoints only, which every rank
    /// knows alike (the placement is collective).
    pub fn record(&mut self, placement: Placement, seconds: f64, bytes: u64) -> Result<()> {
        self.checkpoint_seconds += seconds;
        if placement != Placement::Ssd {
            return Ok(());
        }
        let cost = self.ssd_cost.get_or_insert_with(Cost::default);
        cost.seconds += seconds;
        cost.bytes += bytes as f64;
        self.wear.add(bytes)
    }

    /// The wear record.
    pub fn wear(&self) -> &Wear {
        &self.wear
    }
}

/// Writes the probe file (and fsyncs it when `fsync`).
fn write_probe(path: &std::path::Path, data: &[u8], fsync: bool) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path).map_err(|e| CkptError::io("create", path, e))?;
    file.write_all(data).map_err(|e| CkptError::io("write", path, e))?;
    if fsync {
        file.sync_all().map_err(|e| CkptError::io("fsync", path, e))?;
    }
    Ok(())
}

/// Algorithm 1 of Abeyratne 2017 for checkpoint number `i` (from 0), on inputs combined over all
/// ranks so that every rank gets the same answer. PLE tests the loss predicted after an SSD
/// checkpoint (see the module doc).
pub fn algorithm1(kind: PolicyKind, bound: f64, force_ssd_every: u64, i: u64, inputs: Inputs) -> Placement {
    let Inputs { le_ok, slowdown_after_ssd, fits_ram, .. } = inputs;
    if force_ssd_every > 0 && (i + 1).is_multiple_of(force_ssd_every) {
        return Placement::Ssd;
    }
    let loc = match kind {
        PolicyKind::AlwaysRam => return Placement::Ram,
        PolicyKind::AlwaysSsd => return Placement::Ssd,
        PolicyKind::Ratio(n) => return if i % (n + 1) == n { Placement::Ssd } else { Placement::Ram },
        PolicyKind::Le if le_ok => Placement::Ssd,
        PolicyKind::LePle if le_ok && slowdown_after_ssd <= bound => Placement::Ssd,
        PolicyKind::Le | PolicyKind::LePle => Placement::Ram,
    };
    match (loc, fits_ram, le_ok) {
        (Placement::Ram, false, true) => Placement::Ssd,
        (Placement::Ram, false, false) => Placement::Skip,
        (loc, _, _) => loc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(le_ok: bool, slowdown: f64, after: f64, fits_ram: bool) -> Inputs {
        Inputs { le_ok, slowdown, slowdown_after_ssd: after, fits_ram }
    }

    #[test]
    fn ple_tests_the_loss_after_the_ssd_checkpoint() {
        // 5% lost so far, but the SSD checkpoint would bring it to 12%: RAM.
        assert_eq!(algorithm1(PolicyKind::LePle, 0.10, 0, 3, inputs(true, 0.05, 0.12, true)), Placement::Ram);
        // 5% now and 9% after: the SSD.
        assert_eq!(algorithm1(PolicyKind::LePle, 0.10, 0, 3, inputs(true, 0.05, 0.09, true)), Placement::Ssd);
        // LE alone ignores the loss; wear forbids the SSD to both.
        assert_eq!(algorithm1(PolicyKind::Le, 0.10, 0, 3, inputs(true, 0.05, 0.5, true)), Placement::Ssd);
        assert_eq!(algorithm1(PolicyKind::LePle, 0.10, 0, 3, inputs(false, 0.0, 0.0, true)), Placement::Ram);
    }

    #[test]
    fn size_limit_sends_to_the_ssd_or_skips_and_forced_checkpoints_win() {
        assert_eq!(algorithm1(PolicyKind::LePle, 0.10, 0, 0, inputs(true, 0.2, 0.3, false)), Placement::Ssd);
        assert_eq!(algorithm1(PolicyKind::LePle, 0.10, 0, 0, inputs(false, 0.0, 0.0, false)), Placement::Skip);
        assert_eq!(algorithm1(PolicyKind::AlwaysRam, 0.10, 4, 3, inputs(false, 0.9, 0.9, true)), Placement::Ssd);
        assert_eq!(algorithm1(PolicyKind::AlwaysRam, 0.10, 4, 2, inputs(false, 0.9, 0.9, true)), Placement::Ram);
        let ratio: Vec<Placement> =
            (0..4).map(|i| algorithm1(PolicyKind::Ratio(1), 0.1, 0, i, inputs(true, 0.0, 0.0, true))).collect();
        assert_eq!(ratio, [Placement::Ram, Placement::Ssd, Placement::Ram, Placement::Ssd]);
    }

    #[test]
    fn the_ssd_cost_is_predicted_from_measured_checkpoints() {
        let cost = Cost { seconds: 0.2, bytes: 100.0 };
        assert!((cost.predict(50) - 0.1).abs() < 1e-12);
        assert_eq!(Cost::default().predict(50), 0.0);
    }
}
