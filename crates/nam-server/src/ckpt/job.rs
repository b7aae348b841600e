//! One epoch's parity generation or one restore: pulling the ranks' buffers segment by
//! segment, round-robin over the ranks that are ready, with a bounded number of GETs in
//! flight per rank, and folding each segment into the parity (or the rebuilt buffer) as it
//! arrives. When UCX maps a rank's buffer into the server (same host, shared memory) the
//! engine reads it in place instead of copying it first.

use super::fold::{fold_segment, xor_into};
use super::slot::{Slot, SlotHeader};
use crate::pool::Pool;
use nam_proto::checksum::crc32c;
use nam_proto::Status;
use nam_ucx::{Endpoint, Posted, RemoteKey};
use rayon::prelude::*;
use std::time::Instant;

/// Bytes the direct (mapped) path folds per call to [`Job::step`], so one large epoch does
/// not stall the server's other clients (about 2 ms of work). Large enough that a cohort of
/// many ranks still gets several segments per step to spread over the cores: at 2 MiB, 8
/// ranks and 256 KiB segments made one segment per step, folded on one core.
const DIRECT_BUDGET_BYTES: u64 = 16 << 20;

/// Why a job failed: the status every rank's word gets and the message naming the cause.
#[derive(Debug, Clone)]
pub struct JobFailure {
    /// Status code for the signal words.
    pub status: Status,
    /// The exact cause.
    pub message: String,
}

fn failure(status: Status, message: String) -> JobFailure {
    JobFailure { status, message }
}

/// Where a rank's buffer is, as the engine reaches it.
pub struct RankSource<'a> {
    /// The server's endpoint to the rank's worker.
    pub endpoint: &'a Endpoint,
    /// The buffer's remote key.
    pub rkey: &'a RemoteKey,
    /// Remote address of byte 0.
    pub addr: u64,
}

/// What the job computes.
#[derive(Debug, Clone, Copy)]
pub enum Purpose {
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

/// Where a restore writes the rebuilt buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreInto {
    /// A pool allocation at this offset, which the requester reads afterwards.
    Pool(u64),
    /// The lost rank's own group buffer, mapped into the server (same host): no copy after.
    RankBuffer,
}

/// The rebuilt buffer of a running restore: `len` bytes at `base`, resolved by the group at
/// every step (a pool range, or the replacement rank's mapped buffer).
#[derive(Debug, Clone, Copy)]
pub struct RestoreTarget {
    /// Byte 0 of the rebuilt buffer in this process.
    pub base: *mut u8,
    /// Its length: the lost rank's size in the restored epoch.
    pub len: usize,
}

impl RestoreTarget {
    /// `n` bytes at `at`.
    ///
    /// # Safety
    /// The target must still be mapped (the group resolves it while its owner is joined) and
    /// nothing else may access the range while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes(&self, at: usize, n: usize) -> &mut [u8] {
        assert!(at + n <= self.len, "restore target range {at}+{n} beyond {}", self.len);
        std::slice::from_raw_parts_mut(self.base.add(at), n)
    }
}

struct Pending {
    segment: u64,
    buffer: Vec<u8>,
    posted: Posted,
}

/// Per-rank progress.
struct Puller {
    /// Whether the rank takes part (restore: every survivor; epoch: every rank).
    active: bool,
    /// Flagged ready (always true in a restore).
    ready: bool,
    /// Segments to read.
    segments: u64,
    next: u64,
    done: u64,
    pending: Vec<Pending>,
    spare: Vec<Vec<u8>>,
}

/// A running job.
pub struct Job {
    /// Epoch generated or restored.
    pub epoch: u64,
    /// What it computes.
    pub purpose: Purpose,
    /// The slot written (epoch) or read (restore).
    pub slot: Slot,
    /// The slot's geometry.
    pub header: SlotHeader,
    /// When the job fails with [`Status::CkptTimeout`].
    pub deadline: Instant,
    /// When it started (for the log).
    pub started: Instant,
    /// When the last rank flagged ready (for the log: the tail the ranks wait for after it).
    pub all_ready: Option<Instant>,
    /// Time spent in steps that made progress: the engine's own work.
    pub busy: std::time::Duration,
    /// CPU time of the server process (every thread) in those steps.
    pub busy_cpu: std::time::Duration,
    pullers: Vec<Puller>,
    /// Contributions folded into each segment so far.
    counts: Vec<u32>,
    /// Contributions each segment needs.
    expected: Vec<u32>,
    in_flight: usize,
    cursor: usize,
    /// Restore with every survivor mapped: each segment is copied from the parity, folded
    /// and verified in one pass while it is in cache (see [`Job::fuse_restore`]).
    fused: bool,
    /// The next segment a fused restore rebuilds.
    fused_next: u64,
    /// Parity segments written so far (an epoch): each cohort or fetched segment writes its
    /// segments once, so over the segment count this is the passes over the parity.
    parity_segment_writes: u64,
}

impl Job {
    /// A job over `header`'s ranks. In a restore, the parity has already been checked and
    /// copied into the target by [`Job::start_restore`].
    pub fn new(epoch: u64, purpose: Purpose, slot: Slot, header: SlotHeader, deadline: Instant, in_flight: u32) -> Job {
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
        }
    }

    /// Makes this restore a single pass (every survivor is mapped): each segment of the
    /// target is the parity segment XOR the survivors' segments, computed while it is in
    /// cache and checked against both stored checksums right away, instead of a copy pass,
    /// a fold pass and a verify pass over the whole buffer (a third of the memory traffic).
    pub fn fuse_restore(&mut self) {
        self.fused = matches!(self.purpose, Purpose::Restore { .. });
    }

    /// Checks every parity segment the restore reads against its stored checksum and
    /// copies the parity into the target, which the survivors are then folded into (a fused
    /// restore does this segment by segment as it folds).
    pub fn start_restore(&mut self, pool: &Pool, target: RestoreTarget) -> Result<(), JobFailure> {
        if self.fused || !matches!(self.purpose, Purpose::Restore { .. }) {
            return Ok(());
        }
        let seg = self.header.segment as usize;
        let parity_len = (self.counts.len() * seg).min(self.header.parity_len() as usize);
        // SAFETY: the slot is the engine's own allocation, the target the job's alone.
        let parity = unsafe { pool.bytes_mut(self.slot.offset + self.header.data_at(), parity_len) };
        let rebuilt = unsafe { target.bytes(0, target.len) };
        let stored: Vec<u32> =
            (0..self.counts.len() as u64).map(|s| self.slot.load_crc(pool, self.header.parity_crc_at(), s)).collect();
        let bad =
            parity.par_chunks(seg).zip(rebuilt.par_chunks_mut(seg)).zip(stored.par_iter()).enumerate().find_map_any(
                |(s, ((parity, rebuilt), &stored))| {
                    let corrupt = crc32c(parity) != stored;
                    rebuilt.copy_from_slice(&parity[..rebuilt.len()]);
                    corrupt.then_some(s)
                },
            );
        match bad {
            Some(s) => Err(failure(
                Status::CkptCorrupted,
                format!("parity segment {s} of epoch {} fails its checksum; not restoring", self.epoch),
            )),
            None => Ok(()),
        }
    }

    /// Passes over the parity so far (an epoch): 1.0 when every rank was folded in one cohort.
    pub fn parity_passes(&self) -> f64 {
        self.parity_segment_writes as f64 / self.counts.len().max(1) as f64
    }

    /// Marks `rank` ready (an epoch); false if it already was.
    pub fn flag_ready(&mut self, rank: u32) -> bool {
        let p = &mut self.pullers[rank as usize];
        let first = !std::mem::replace(&mut p.ready, true);
        if first && self.pullers.iter().all(|p| !p.active || p.ready) {
            self.all_ready = Some(Instant::now());
        }
        first
    }

    /// Ranks that have not flagged ready.
    pub fn not_ready(&self) -> Vec<u32> {
        (0..self.header.ranks).filter(|&r| self.pullers[r as usize].active && !self.pullers[r as usize].ready).collect()
    }

    /// Whether `rank` still has data to be pulled.
    pub fn rank_pending(&self, rank: u32) -> bool {
        let p = &self.pullers[rank as usize];
        p.active && p.done < p.segments
    }

    /// Whether `rank`'s whole buffer has been folded in.
    pub fn rank_finished(&self, rank: u32) -> bool {
        let p = &self.pullers[rank as usize];
        p.ready && p.done == p.segments
    }

    /// Whether every segment has every contribution.
    pub fn finished(&self) -> bool {
        (!self.fused || self.fused_next == self.counts.len() as u64)
            && self.pullers.iter().all(|p| !p.active || (p.ready && p.done == p.segments))
    }

    /// Whether GETs are still in flight (their buffers must outlive them).
    pub fn has_pending(&self) -> bool {
        self.pullers.iter().any(|p| !p.pending.is_empty())
    }

    /// Advances the job: issues GETs, folds completed segments. Returns whether anything
    /// happened. `sources[r]` is `None` for a rank that takes no part.
    /// `target` is the rebuilt buffer of a restore (`None` for an epoch).
    pub fn step(
        &mut self,
        pool: &Pool,
        sources: &[Option<RankSource<'_>>],
        target: Option<RestoreTarget>,
    ) -> Result<bool, JobFailure> {
        let mut busy = self.fold_direct(pool, sources, target)?;
        busy |= self.issue(sources)?;
        busy |= self.reap(pool, target)?;
        Ok(busy)
    }

    /// Folds segments of mapped buffers in place, up to a byte budget per call. Segment-major,
    /// as the seed's CR unit does: the ready ranks that have reached the same segment (a
    /// cohort) are folded together, segment by segment, so each parity segment is read and
    /// written once while it is in cache instead of once per rank; segments run in parallel.
    fn fold_direct(
        &mut self,
        pool: &Pool,
        sources: &[Option<RankSource<'_>>],
        target: Option<RestoreTarget>,
    ) -> Result<bool, JobFailure> {
        if self.fused {
            return self.fold_fused(pool, sources, target);
        }
        let seg = self.header.segment as u64;
        let mapped: Vec<(usize, *const u8)> = sources
            .iter()
            .enumerate()
            .filter_map(|(r, source)| {
                let p = &self.pullers[r];
                let source = source.as_ref()?;
                (p.active && p.ready && p.next < p.segments)
                    .then(|| source.rkey.local_ptr(source.addr).map(|base| (r, base as *const u8)))?
            })
            .collect();
        let Some((first, cohort)) = self.foldable_cohort(mapped) else { return Ok(false) };
        let window = (DIRECT_BUDGET_BYTES / seg / cohort.len() as u64).max(1);
        let end = cohort.iter().map(|&(r, _)| self.pullers[r].segments).max().unwrap_or(first).min(first + window);
        self.fold_cohort(pool, &cohort, first, end, target)?;
        for &(r, _) in &cohort {
            let p = &mut self.pullers[r];
            let upto = p.segments.min(end);
            p.done += upto - p.next;
            p.next = upto;
        }
        Ok(true)
    }

    /// The cohort to fold next among the `mapped` ready ranks (rank, base), with the segment
    /// it is at: the one furthest behind that may start. A cohort that has started always
    /// may; a new one (at segment 0) of an epoch starts only once it is at least as large as
    /// the ranks still to flag ready. Every cohort reads and writes the parity once more, so
    /// folding ranks one by one as they trickle in makes up to one parity pass per rank (for
    /// 8 ranks, about three times the memory traffic of one pass); halving the cohorts bounds
    /// the passes by log2(ranks) + 1 while the last rank still finds the others folded.
    fn foldable_cohort(&self, mapped: Vec<(usize, *const u8)>) -> Option<(u64, Vec<(usize, *const u8)>)> {
        let waiting = match self.purpose {
            Purpose::Epoch => self.pullers.iter().filter(|p| p.active && !p.ready).count(),
            Purpose::Restore { .. } => 0,
        };
        let mut positions: Vec<u64> = mapped.iter().map(|&(r, _)| self.pullers[r].next).collect();
        positions.sort_unstable();
        positions.dedup();
        positions.into_iter().find_map(|at| {
            let cohort: Vec<(usize, *const u8)> =
                mapped.iter().copied().filter(|&(r, _)| self.pullers[r].next == at).collect();
            (at > 0 || cohort.len() >= waiting).then_some((at, cohort))
        })
    }

    /// Folds segments `first..end` of every rank of `cohort` (rank, mapped base address).
    fn fold_cohort(
        &mut self,
        pool: &Pool,
        cohort: &[(usize, *const u8)],
        first: u64,
        end: u64,
        target: Option<RestoreTarget>,
    ) -> Result<(), JobFailure> {
        let seg = self.header.segment as usize;
        let sizes = &self.header.sizes;
        // SAFETY: UCX mapped each rank's registered buffer of `sizes[r]` bytes at its base;
        // the ranks do not change them until their completion word (or the restore word) says
        // so. Slices are built per segment inside the bounds of the buffer.
        let rank_segment =
            |r: usize, base: *mut u8, s: usize| unsafe { mapped_segment(base, sizes[r] as usize, seg, s) };
        let cohort: Vec<(usize, MappedBase)> = cohort.iter().map(|&(r, b)| (r, MappedBase(b as *mut u8))).collect();
        let range = first as usize..end as usize;
        let first_at = first as usize * seg;
        match self.purpose {
            Purpose::Epoch => {
                let parity_end = (end as usize * seg).min(self.header.parity_len() as usize);
                let at = self.slot.offset + self.header.data_at() + first_at as u64;
                // SAFETY: the slot is the engine's own allocation; only this job touches it.
                let parity = unsafe { pool.bytes_mut(at, parity_end - first_at) };
                let (counts, expected) = (&self.counts[range.clone()], &self.expected[range]);
                let folded: Vec<FoldedSegment> = parity
                    .par_chunks_mut(seg)
                    .zip(counts.par_iter().zip(expected.par_iter()))
                    .enumerate()
                    .map(|(i, (parity, (&count, &expected)))| {
                        let s = first as usize + i;
                        let present: Vec<(usize, &[u8])> =
                            cohort.iter().filter_map(|(r, base)| Some((*r, rank_segment(*r, base.0, s)?))).collect();
                        let data: Vec<&[u8]> = present.iter().map(|&(_, d)| d).collect();
                        let complete = count + data.len() as u32 == expected;
                        // The first contribution to a segment overwrites it (zero-padded).
                        let sums = fold_segment(parity, count > 0, &data, true, complete);
                        (present.iter().map(|&(r, _)| r).zip(sums.sources).collect(), sums.output)
                    })
                    .collect();
                self.parity_segment_writes += end - first;
                for (s, (crcs, parity_crc)) in (first..end).zip(folded) {
                    for (r, crc) in crcs {
                        self.slot.store_crc(pool, self.header.rank_crc_at(r as u32), s, crc);
                        self.counts[s as usize] += 1;
                    }
                    if let Some(crc) = parity_crc {
                        self.slot.store_crc(pool, self.header.parity_crc_at(), s, crc);
                    }
                }
            }
            Purpose::Restore { .. } => {
                let target = target.expect("a restore steps with its target");
                let lost_end = (end as usize * seg).min(target.len);
                // SAFETY: the target is the job's alone until it finishes.
                let rebuilt = unsafe { target.bytes(first_at, lost_end - first_at) };
                let added: Vec<u32> = rebuilt
                    .par_chunks_mut(seg)
                    .enumerate()
                    .map(|(i, rebuilt)| {
                        let mut added = 0;
                        for (r, base) in &cohort {
                            let Some(data) = rank_segment(*r, base.0, first as usize + i) else { continue };
                            let n = rebuilt.len().min(data.len());
                            xor_into(&mut rebuilt[..n], &data[..n]);
                            added += 1;
                        }
                        added
                    })
                    .collect();
                for (s, added) in (first..end).zip(added) {
                    self.counts[s as usize] += added;
                }
            }
        }
        Ok(())
    }

    /// One window of a fused restore (every survivor mapped): for each segment, the target
    /// gets the parity segment, the survivors' segments are XORed in, and the result is
    /// checked against the lost rank's checksum (a corrupted parity or survivor fails it),
    /// all while the segment is in cache. Segments run in parallel. Segments past every survivor's end are
    /// the parity alone (implicit zero padding), so the job walks the target, not the ranks.
    fn fold_fused(
        &mut self,
        pool: &Pool,
        sources: &[Option<RankSource<'_>>],
        target: Option<RestoreTarget>,
    ) -> Result<bool, JobFailure> {
        let total = self.counts.len() as u64;
        let Purpose::Restore { lost, .. } = self.purpose else { return Ok(false) };
        if self.fused_next == total {
            return Ok(false);
        }
        let target = target.expect("a restore steps with its target");
        let mut survivors = Vec::new();
        for (r, p) in self.pullers.iter().enumerate().filter(|(_, p)| p.active) {
            let base = sources[r].as_ref().and_then(|source| source.rkey.local_ptr(source.addr));
            let base = base.ok_or_else(|| {
                failure(Status::CkptRankFailed, format!("rank {r}'s buffer is no longer mapped for the restore"))
            })?;
            survivors.push((r, p.segments, MappedBase(base)));
        }
        let (seg, first) = (self.header.segment as u64, self.fused_next);
        let window = (DIRECT_BUDGET_BYTES / seg / (survivors.len() as u64 + 1)).max(1);
        let end = (first + window).min(total);
        let (first_at, sizes) = ((first * seg) as usize, &self.header.sizes);
        let parity_end = ((end * seg) as usize).min(self.header.parity_len() as usize);
        // SAFETY: the slot is the engine's own allocation, only read here; the target is the
        // job's alone until it finishes.
        let parity = unsafe {
            pool.bytes_mut(self.slot.offset + self.header.data_at() + first_at as u64, parity_end - first_at)
        };
        let rebuilt = unsafe { target.bytes(first_at, ((end * seg) as usize).min(target.len) - first_at) };
        let stored: Vec<(u32, u32)> = (first..end)
            .map(|s| {
                let crc = |at| self.slot.load_crc(pool, at, s);
                (crc(self.header.parity_crc_at()), crc(self.header.rank_crc_at(lost)))
            })
            .collect();
        let checked: Vec<Result<u32, String>> = rebuilt
            .par_chunks_mut(seg as usize)
            .zip(parity.par_chunks(seg as usize))
            .zip(stored.par_iter())
            .enumerate()
            .map(|(i, ((rebuilt, parity), &(parity_crc, rank_crc)))| {
                let s = first as usize + i;
                let n = rebuilt.len();
                // The parity and every survivor (zero-padded, cut to the lost rank's length)
                // in one pass, checksummed while in cache.
                let mut sources = vec![&parity[..n]];
                for &(r, segments, ref base) in &survivors {
                    if s as u64 >= segments {
                        continue;
                    }
                    // SAFETY: rank r's mapped buffer holds sizes[r] bytes; it does not change
                    // until the restore word says so.
                    if let Some(data) = unsafe { mapped_segment(base.0, sizes[r] as usize, seg as usize, s) } {
                        sources.push(&data[..data.len().min(n)]);
                    }
                }
                let added = sources.len() as u32 - 1;
                let sums = fold_segment(rebuilt, false, &sources, false, true);
                // The rebuilt segment's checksum covers the parity and every survivor at once:
                // the parity's own checksum is computed only to name the cause of a mismatch.
                if sums.output != Some(rank_crc) {
                    if crc32c(parity) != parity_crc {
                        return Err(format!("parity segment {s} fails its checksum"));
                    }
                    return Err(format!("rebuilt segment {s} of rank {lost} fails its checksum"));
                }
                Ok(added)
            })
            .collect();
        for (s, added) in (first..end).zip(checked) {
            self.counts[s as usize] += added.map_err(|cause| self.corrupted(&cause))?;
        }
        for p in self.pullers.iter_mut().filter(|p| p.active) {
            p.next = p.segments.min(end);
            p.done = p.next;
        }
        self.fused_next = end;
        Ok(true)
    }

    /// The failure of a restore whose parity or rebuilt data fails a checksum.
    fn corrupted(&self, cause: &str) -> JobFailure {
        failure(
            Status::CkptCorrupted,
            format!(
                "{cause} in epoch {}: a survivor's buffer or the parity differs from that epoch; not restoring",
                self.epoch
            ),
        )
    }

    /// Posts GETs round-robin over the ready ranks until each has its window full.
    fn issue(&mut self, sources: &[Option<RankSource<'_>>]) -> Result<bool, JobFailure> {
        let ranks = self.pullers.len();
        let mut busy = false;
        loop {
            let mut issued = false;
            for i in 0..ranks {
                let r = (self.cursor + i) % ranks;
                let Some(source) = &sources[r] else { continue };
                let p = &self.pullers[r];
                if !p.active || !p.ready || p.next == p.segments || p.pending.len() >= self.in_flight {
                    continue;
                }
                if source.rkey.local_ptr(source.addr).is_some() {
                    continue;
                }
                self.post_get(r, source)?;
                issued = true;
            }
            self.cursor = (self.cursor + 1) % ranks.max(1);
            if !issued {
                return Ok(busy);
            }
            busy = true;
        }
    }

    fn post_get(&mut self, r: usize, source: &RankSource<'_>) -> Result<(), JobFailure> {
        let (at, n) = self.segment_range(self.pullers[r].next, self.header.sizes[r]);
        let p = &mut self.pullers[r];
        let mut buffer = p.spare.pop().unwrap_or_default();
        buffer.resize(n, 0);
        // SAFETY: the buffer is kept in `pending` (and after a failure, in the engine's
        // drain list) until UCX completes the GET.
        let posted = unsafe { source.endpoint.get_nbx(buffer.as_mut_ptr(), n, source.addr + at, source.rkey) }
            .map_err(|e| failure(Status::CkptRankFailed, format!("cannot read rank {r}'s buffer: {e}")))?;
        p.pending.push(Pending { segment: p.next, buffer, posted });
        p.next += 1;
        Ok(())
    }

    /// Folds every completed GET.
    fn reap(&mut self, pool: &Pool, target: Option<RestoreTarget>) -> Result<bool, JobFailure> {
        let mut busy = false;
        for r in 0..self.pullers.len() {
            let mut i = 0;
            while i < self.pullers[r].pending.len() {
                let state = match &self.pullers[r].pending[i].posted {
                    Posted::Done => Some(Ok(())),
                    Posted::InFlight(request) => request.check(),
                };
                match state {
                    None => i += 1,
                    Some(Err(e)) => {
                        return Err(failure(Status::CkptRankFailed, format!("reading rank {r}'s buffer failed: {e}")))
                    }
                    Some(Ok(())) => {
                        let done = self.pullers[r].pending.swap_remove(i);
                        self.fold(pool, r as u32, done.segment, &done.buffer, target)?;
                        self.pullers[r].done += 1;
                        self.pullers[r].spare.push(done.buffer);
                        busy = true;
                    }
                }
            }
        }
        Ok(busy)
    }

    /// Hands back the buffers of GETs still in flight, to be kept until they complete.
    pub fn take_pending(&mut self) -> Vec<(Posted, Vec<u8>)> {
        self.pullers.iter_mut().flat_map(|p| p.pending.drain(..)).map(|p| (p.posted, p.buffer)).collect()
    }

    /// `(offset, length)` of segment `s` in a buffer of `len` bytes.
    fn segment_range(&self, s: u64, len: u64) -> (u64, usize) {
        let seg = self.header.segment as u64;
        let at = s * seg;
        (at, seg.min(len.saturating_sub(at)) as usize)
    }

    // The slice aliases nothing: the slot belongs to this job alone (see `Pool::bytes_mut`).
    #[allow(clippy::mut_from_ref)]
    fn parity_segment<'p>(&self, pool: &'p Pool, s: u64) -> &'p mut [u8] {
        let (at, n) = self.segment_range(s, self.header.parity_len());
        // SAFETY: the slot is the engine's own allocation; only this job touches it.
        unsafe { pool.bytes_mut(self.slot.offset + self.header.data_at() + at, n) }
    }

    /// Folds rank `r`'s segment `s` into the parity (epoch) or the rebuilt buffer (restore).
    fn fold(
        &mut self,
        pool: &Pool,
        r: u32,
        s: u64,
        data: &[u8],
        target: Option<RestoreTarget>,
    ) -> Result<(), JobFailure> {
        match self.purpose {
            Purpose::Epoch => {
                let (count, expected) = (self.counts[s as usize], self.expected[s as usize]);
                let complete = count + 1 == expected;
                let sums = fold_segment(self.parity_segment(pool, s), count > 0, &[data], true, complete);
                self.parity_segment_writes += 1;
                self.slot.store_crc(pool, self.header.rank_crc_at(r), s, sums.sources[0]);
                if let Some(crc) = sums.output {
                    self.slot.store_crc(pool, self.header.parity_crc_at(), s, crc);
                }
                self.counts[s as usize] += 1;
            }
            Purpose::Restore { lost, .. } => {
                let target = target.expect("a restore steps with its target");
                let (at, n) = self.segment_range(s, self.header.sizes[lost as usize]);
                let n = n.min(data.len());
                // SAFETY: the target is the job's alone until it finishes.
                xor_into(unsafe { target.bytes(at as usize, n) }, &data[..n]);
                self.counts[s as usize] += 1;
            }
        }
        Ok(())
    }

    /// After a restore's last segment: the rebuilt buffer must match the lost rank's
    /// checksums, or it is not handed out.
    pub fn verify_restore(&self, pool: &Pool, target: RestoreTarget) -> Result<(), JobFailure> {
        let Purpose::Restore { lost, .. } = self.purpose else { return Ok(()) };
        if self.fused {
            return Ok(()); // every segment was checked as it was rebuilt
        }
        let seg = self.header.segment as usize;
        // SAFETY: the target is the job's alone; read-only here.
        let rebuilt = unsafe { target.bytes(0, target.len) };
        let stored: Vec<u32> =
            (0..self.counts.len() as u64).map(|s| self.slot.load_crc(pool, self.header.rank_crc_at(lost), s)).collect();
        let bad = rebuilt
            .par_chunks(seg)
            .zip(stored.par_iter())
            .enumerate()
            .find_map_any(|(s, (rebuilt, &stored))| (crc32c(rebuilt) != stored).then_some(s));
        match bad {
            Some(s) => Err(failure(
                Status::CkptCorrupted,
                format!(
                    "rebuilt segment {s} of rank {lost} fails the epoch-{} checksum: a survivor's buffer or the \
                     parity differs from that epoch",
                    self.epoch
                ),
            )),
            None => Ok(()),
        }
    }
}

/// One segment of a cohort: each rank's (rank, checksum), and the parity's checksum if the
/// segment is complete.
type FoldedSegment = (Vec<(usize, u32)>, Option<u32>);

/// A rank's buffer mapped into the server, shared by the threads that fold it.
struct MappedBase(*mut u8);
// SAFETY: the mapped buffers are only read, from any thread, while the job runs.
unsafe impl Sync for MappedBase {}
unsafe impl Send for MappedBase {}

/// Segment `s` of a mapped buffer of `size` bytes at `base`, `None` past its end.
///
/// # Safety
/// `base` must map `size` readable bytes that nobody writes while the slice lives.
unsafe fn mapped_segment<'a>(base: *const u8, size: usize, seg: usize, s: usize) -> Option<&'a [u8]> {
    let at = s * seg;
    let len = size.saturating_sub(at).min(seg);
    (len > 0).then(|| std::slice::from_raw_parts(base.add(at), len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ckpt::slot::SlotState;

    fn epoch_job(ranks: u32) -> Job {
        let header = SlotHeader {
            epoch: 1,
            state: SlotState::Writing,
            ranks,
            segment: 4096,
            sizes: vec![4 * 4096; ranks as usize],
        };
        let slot = Slot { offset: 0, len: header.slot_len(), handle: 0 };
        Job::new(1, Purpose::Epoch, slot, header, Instant::now(), 4)
    }

    /// The ready ranks as the direct path sees them (their bases are never read here).
    fn mapped(job: &Job) -> Vec<(usize, *const u8)> {
        (0..job.pullers.len())
            .filter(|&r| job.pullers[r].ready && job.pullers[r].next < job.pullers[r].segments)
            .map(|r| (r, std::ptr::null()))
            .collect()
    }

    fn cohort(job: &Job) -> Option<(u64, Vec<usize>)> {
        job.foldable_cohort(mapped(job)).map(|(at, c)| (at, c.into_iter().map(|(r, _)| r).collect()))
    }

    #[test]
    fn a_new_cohort_starts_once_it_is_as_large_as_the_ranks_still_to_come() {
        let mut job = epoch_job(8);
        for r in 0..3 {
            job.flag_ready(r);
            assert_eq!(cohort(&job), None, "{} ready, {} to come", r + 1, 7 - r);
        }
        job.flag_ready(3);
        assert_eq!(cohort(&job), Some((0, vec![0, 1, 2, 3])));
        // The first cohort is half-way; a new rank alone waits while it is smaller than the
        // ranks still to come, and the cohort that started goes on meanwhile.
        for r in 0..4 {
            job.pullers[r].next = 2;
        }
        job.flag_ready(4);
        assert_eq!(cohort(&job), Some((2, vec![0, 1, 2, 3])));
        job.flag_ready(5);
        assert_eq!(cohort(&job), Some((0, vec![4, 5])), "2 ready and 2 to come");
        job.pullers[4].next = 1;
        job.pullers[5].next = 1;
        job.flag_ready(6);
        job.flag_ready(7);
        assert_eq!(cohort(&job), Some((0, vec![6, 7])), "the last ranks never wait");
    }

    #[test]
    fn a_restore_folds_every_survivor_at_once() {
        let header = SlotHeader { epoch: 1, state: SlotState::Valid, ranks: 3, segment: 4096, sizes: vec![8192; 3] };
        let slot = Slot { offset: 0, len: header.slot_len(), handle: 0 };
        let into = RestoreInto::Pool(0);
        let job = Job::new(1, Purpose::Restore { lost: 1, into }, slot, header, Instant::now(), 4);
        assert_eq!(cohort(&job), Some((0, vec![0, 2])));
    }
}
