//! One epoch's parity generation or one restore: pulling the ranks' buffers segment by
//! segment, round-robin over the ranks that are ready, with a bounded number of GETs in
//! flight per rank, and folding each segment into the parity (or the rebuilt buffer) as it
//! arrives. When UCX maps a rank's buffer into the server (same host, shared memory) the
//! engine reads it in place instead of copying it first.

use super::pull::{Pending, RankSource};
use super::restore::{RestoreInto, RestoreTarget};
use super::slot::{Slot, SlotHeader};
use crate::pool::Pool;
use nam_proto::Status;
use std::time::Instant;

/// Why a job failed: the status every rank's word gets and the message naming the cause.
#[derive(Debug, Clone)]
pub(super) struct JobFailure {
    /// Status code for the signal words.
    pub(super) status: Status,
    /// The exact cause.
    pub(super) message: String,
}

pub(super) fn failure(status: Status, message: String) -> JobFailure {
    JobFailure { status, message }
}

/// What the job computes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Purpose {
    /// XOR of every rank's buffer into the slot's parity.
    Epoch,
    /// Rebuild `lost` from the parity and the survivors.
    Restore {
        /// The lost rank.
        lost: u32,
        /// Where the rebuilt bytes go.
        into: RestoreInto,
    },
}

/// Per-rank progress.
pub(super) struct Puller {
    /// Whether the rank takes part (restore: every survivor; epoch: every rank).
    pub(super) active: bool,
    /// Flagged ready (always true in a restore).
    pub(super) ready: bool,
    /// Segments to read.
    pub(super) segments: u64,
    pub(super) next: u64,
    pub(super) done: u64,
    pub(super) pending: Vec<Pending>,
    pub(super) spare: Vec<Vec<u8>>,
}

/// A running job.
pub(super) struct Job {
    /// Epoch generated or restored.
    pub(super) epoch: u64,
    /// What it computes.
    pub(super) purpose: Purpose,
    /// The slot written (epoch) or read (restore).
    pub(super) slot: Slot,
    /// The slot's geometry.
    pub(super) header: SlotHeader,
    /// When the job fails with [`Status::CkptTimeout`].
    pub(super) deadline: Instant,
    /// When it started (for the log).
    pub(super) started: Instant,
    /// When the last rank flagged ready (for the log: the tail the ranks wait for after it).
    pub(super) all_ready: Option<Instant>,
    /// Time spent in steps that made progress: the engine's own work.
    pub(super) busy: std::time::Duration,
    /// CPU time of the server process (every thread) in those steps.
    pub(super) busy_cpu: std::time::Duration,
    pub(super) pullers: Vec<Puller>,
    /// Contributions folded into each segment so far.
    pub(super) counts: Vec<u32>,
    /// Contributions each segment needs.
    pub(super) expected: Vec<u32>,
    pub(super) in_flight: usize,
    pub(super) cursor: usize,
    /// Restore with every survivor mapped: each segment is copied from the parity, folded
    /// and verified in one pass while it is in cache (see [`Job::fuse_restore`]).
    pub(super) fused: bool,
    /// The next segment a fused restore rebuilds.
    pub(super) fused_next: u64,
    /// Parity segments written so far (an epoch): each cohort or fetched segment writes its
    /// segments once, so over the segment count this is the passes over the parity.
    pub(super) parity_segment_writes: u64,
    /// A pushed restore's PUTs into the lost rank's buffer ([`RestoreInto::Pushed`]).
    pub(super) push: Push,
    /// When the last rank's last segment was folded in (for the log: a restore's pull
    /// against what follows it, the PUTs and their flush).
    pub(super) pulled: Option<Instant>,
}

/// Progress of a pushed restore: the rebuilt bytes go out in verified runs of segments,
/// PUT into the lost rank's registered buffer while later segments are still being rebuilt,
/// then one flush makes them all remotely complete before the restore word says done.
#[derive(Default)]
pub(super) struct Push {
    /// The first segment not yet PUT.
    pub(super) next: u64,
    /// PUTs not yet locally complete.
    pub(super) posted: Vec<nam_ucx::Posted>,
    /// The flush posted once every segment is PUT.
    pub(super) flush: Option<nam_ucx::Posted>,
    /// Every PUT is complete at the lost rank.
    pub(super) flushed: bool,
}

impl Job {
    /// A job over `header`'s ranks. In a restore, the parity has already been checked and
    /// copied into the target by [`Job::start_restore`].
    pub(super) fn new(
        epoch: u64,
        purpose: Purpose,
        slot: Slot,
        header: SlotHeader,
        deadline: Instant,
        in_flight: u32,
    ) -> Job {
        let seg = header.segment as u64;
        let limit = match purpose {
            Purpose::Epoch => u64::MAX,
            Purpose::Restore { lost, .. } => header.sizes[lost as usize],
        };
        let pullers: Vec<Puller> = (0..header.ranks)
            .map(|r| {
                let active = !matches!(purpose, Purpose::Restore { lost, .. } if lost == r);
                let len = header.sizes[r as usize].min(limit);
                Puller {
                    active,
                    ready: matches!(purpose, Purpose::Restore { .. }),
                    segments: if active { len.div_ceil(seg) } else { 0 },
                    next: 0,
                    done: 0,
                    pending: Vec::new(),
                    spare: Vec::new(),
                }
            })
            .collect();
        let segments = match purpose {
            Purpose::Epoch => header.segments(),
            Purpose::Restore { lost, .. } => header.sizes[lost as usize].div_ceil(seg),
        };
        let mut expected = vec![0u32; segments as usize];
        for p in pullers.iter().filter(|p| p.active) {
            for e in expected.iter_mut().take(p.segments as usize) {
                *e += 1;
            }
        }
        Job {
            epoch,
            purpose,
            slot,
            header,
            deadline,
            started: Instant::now(),
            all_ready: None,
            busy: std::time::Duration::ZERO,
            busy_cpu: std::time::Duration::ZERO,
            pullers,
            counts: vec![0; segments as usize],
            expected,
            in_flight: in_flight as usize,
            cursor: 0,
            fused: false,
            fused_next: 0,
            parity_segment_writes: 0,
            push: Push::default(),
            pulled: None,
        }
    }

    /// Passes over the parity so far (an epoch): 1.0 when every rank was folded in one cohort.
    pub(super) fn parity_passes(&self) -> f64 {
        self.parity_segment_writes as f64 / self.counts.len().max(1) as f64
    }

    /// Marks `rank` ready (an epoch); false if it already was.
    pub(super) fn flag_ready(&mut self, rank: u32) -> bool {
        let p = &mut self.pullers[rank as usize];
        let first = !std::mem::replace(&mut p.ready, true);
        if first && self.pullers.iter().all(|p| !p.active || p.ready) {
            self.all_ready = Some(Instant::now());
        }
        first
    }

    /// Ranks that have not flagged ready.
    pub(super) fn not_ready(&self) -> Vec<u32> {
        (0..self.header.ranks).filter(|&r| self.pullers[r as usize].active && !self.pullers[r as usize].ready).collect()
    }

    /// Whether `rank` still has data to be pulled.
    pub(super) fn rank_pending(&self, rank: u32) -> bool {
        let p = &self.pullers[rank as usize];
        p.active && p.done < p.segments
    }

    /// Whether `rank`'s whole buffer has been folded in.
    pub(super) fn rank_finished(&self, rank: u32) -> bool {
        let p = &self.pullers[rank as usize];
        p.ready && p.done == p.segments
    }

    /// Whether every segment has every contribution.
    pub(super) fn finished(&self) -> bool {
        (!self.fused || self.fused_next == self.counts.len() as u64)
            && (!self.pushes() || self.push.flushed)
            && self.all_pulled()
    }

    /// Whether every taking-part rank's whole buffer has been pulled and folded in.
    fn all_pulled(&self) -> bool {
        self.pullers.iter().all(|p| !p.active || (p.ready && p.done == p.segments))
    }

    /// Whether GETs are still in flight (their buffers must outlive them).
    pub(super) fn has_pending(&self) -> bool {
        self.pullers.iter().any(|p| !p.pending.is_empty())
    }

    /// Advances the job: issues GETs, folds completed segments. Returns whether anything
    /// happened. `sources[r]` is `None` for a rank that takes no part.
    /// `target` is the rebuilt buffer of a restore (`None` for an epoch).
    pub(super) fn step(
        &mut self,
        pool: &Pool,
        sources: &[Option<RankSource<'_>>],
        target: Option<RestoreTarget>,
    ) -> Result<bool, JobFailure> {
        let mut busy = self.fold_direct(pool, sources, target)?;
        busy |= self.issue(sources)?;
        busy |= self.reap(pool, target)?;
        if self.pulled.is_none() && self.all_pulled() {
            self.pulled = Some(Instant::now());
        }
        busy |= self.push_rebuilt(pool, sources, target)?;
        Ok(busy)
    }

    /// `(offset, length)` of segment `s` in a buffer of `len` bytes.
    pub(super) fn segment_range(&self, s: u64, len: u64) -> (u64, usize) {
        let seg = self.header.segment as u64;
        let at = s * seg;
        (at, seg.min(len.saturating_sub(at)) as usize)
    }

    // The slice aliases nothing: the slot belongs to this job alone (see `Pool::bytes_mut`).
}
