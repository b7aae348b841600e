//! A restore: the lost rank's buffer rebuilt from the stored parity and the survivors,
//! into a pool allocation its replacement reads or, on the same host, straight into the
//! replacement's mapped buffer; checked against the stored checksums before it is handed out.

use super::direct::{mapped_segment, MappedBase};
use super::engine::CkptEngine;
use super::fold::{fold_segment, xor_into};
use super::group::{Group, Peer};
use super::job::{failure, Job, JobFailure, Purpose};
use super::pull::RankSource;
use super::refuse;
use super::slot::{Slot, SlotHeader};
use super::sys::prefault;
use crate::constants::{CKPT_BUFFER_ALIGN, CKPT_DIRECT_BUDGET_BYTES};
use crate::engine::EngineCtx;
use crate::manager::Refusal;
use crate::pool::Pool;
use nam_proto::checksum::crc32c;
use nam_proto::ckpt::*;
use nam_proto::{Alloc, Reply, Status};
use rayon::prelude::*;
use std::time::Instant;

/// What a fused restore rebuilds each segment from: the mapped survivors (rank, segments,
/// base), their sizes in the restored epoch, the segment length and the lost rank.
struct FusedSources<'a> {
    survivors: &'a [(usize, u64, MappedBase)],
    sizes: &'a [u64],
    seg: usize,
    lost: u32,
}

impl FusedSources<'_> {
    /// Rebuilds segment `s` (the parity and every survivor, zero-padded and cut to the lost
    /// rank's length, in one pass, checksummed while in cache) and checks it against the
    /// stored checksums `(parity, lost rank)`: the survivors folded in, or the cause of a
    /// mismatch.
    fn rebuild(
        &self,
        rebuilt: &mut [u8],
        parity: &[u8],
        (parity_crc, rank_crc): (u32, u32),
        s: usize,
    ) -> Result<u32, String> {
        let n = rebuilt.len();
        let mut sources = vec![&parity[..n]];
        for &(r, segments, ref base) in self.survivors {
            if s as u64 >= segments {
                continue;
            }
            // SAFETY: rank r's mapped buffer holds sizes[r] bytes; it does not change until
            // the restore word says so.
            if let Some(data) = unsafe { mapped_segment(base.0, self.sizes[r] as usize, self.seg, s) } {
                sources.push(&data[..data.len().min(n)]);
            }
        }
        let added = sources.len() as u32 - 1;
        let sums = fold_segment(rebuilt, false, &sources, false, true);
        // The rebuilt segment's checksum covers the parity and every survivor at once: the
        // parity's own checksum is computed only to name the cause of a mismatch.
        if sums.output != Some(rank_crc) {
            if crc32c(parity) != parity_crc {
                return Err(format!("parity segment {s} fails its checksum"));
            }
            return Err(format!("rebuilt segment {s} of rank {} fails its checksum", self.lost));
        }
        Ok(added)
    }
}

/// Where a restore writes the rebuilt buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RestoreInto {
    /// A pool allocation at this offset, which the requester reads afterwards.
    Pool(u64),
    /// The lost rank's own group buffer, mapped into the server (same host): no copy after.
    RankBuffer,
}

/// The rebuilt buffer of a running restore: `len` bytes at `base`, resolved by the group at
/// every step (a pool range, or the replacement rank's mapped buffer).
#[derive(Debug, Clone, Copy)]
pub(super) struct RestoreTarget {
    /// Byte 0 of the rebuilt buffer in this process.
    pub(super) base: *mut u8,
    /// Its length: the lost rank's size in the restored epoch.
    pub(super) len: usize,
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

impl CkptEngine {
    /// Starts rebuilding rank `lost` of a group from epoch `epoch` (0: the complete one).
    pub(super) fn restore(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        group_id: u64,
        lost: u32,
        epoch: u64,
        flags: u32,
    ) -> Result<Reply, Refusal> {
        let group = self.group(ctx, client, group_id)?;
        let (slot, header) = group.restorable(ctx.pool, lost, epoch)?;
        let epoch = header.epoch;
        let lost_len = header.sizes[lost as usize];
        // The replacement's own buffer when it asked for that and the server maps it (same
        // host): the rebuilt bytes land where the application reads them, with no copy after.
        let mapped = |r: u32| {
            let peer = group.peers[r as usize].as_ref()?;
            peer.rkey.as_ref()?.local_ptr(peer.addr).map(|base| (peer, base))
        };
        let in_place = flags & CKPT_RESTORE_INTO_BUFFER != 0
            && mapped(lost).is_some_and(|(peer, _)| peer.client == client && peer.len == lost_len);
        let fused = (0..group.ranks).filter(|&r| r != lost).all(|r| mapped(r).is_some());
        let grant = if in_place {
            None
        } else {
            let alloc = Alloc { size: lost_len.max(1), align: CKPT_BUFFER_ALIGN, flags: 0, name: String::new() };
            Some(ctx.manager.allocate(client, &alloc)?)
        };
        let into = grant.as_ref().map_or(RestoreInto::RankBuffer, |g| RestoreInto::Pool(g.offset));
        group.write_word(ctx.pool, CKPT_WORD_RESTORE, 0);
        let mut job = Job::new(
            epoch,
            Purpose::Restore { lost, into },
            slot,
            header,
            Instant::now() + group.timeout,
            group.in_flight,
        );
        if fused {
            job.fuse_restore();
        }
        let target = group.restore_target(ctx.pool, &job).expect("the target was resolved above");
        if in_place {
            // The replacement's pages are new: fault them in at once rather than one by one.
            prefault(target.base, target.len, libc::MADV_POPULATE_WRITE);
        }
        if let Err(f) = job.start_restore(ctx.pool, target) {
            if let Some(grant) = &grant {
                ctx.manager.free(client, grant.handle)?;
            }
            group.last_error = f.message.clone();
            group.last_status = f.status;
            return refuse(f.status, f.message);
        }
        group.job = Some(job);
        group.restorer = Some(client);
        Ok(grant.map_or(Reply::Done, |grant| Reply::Alloc(ctx.alloc_reply(&grant))))
    }
}

impl Group {
    /// The slot and geometry to rebuild rank `lost` from, if the group is idle, holds a
    /// complete epoch `epoch` (0: the complete one) and every other rank is joined with the
    /// buffer size it had in that epoch (XOR parity rebuilds only one rank).
    fn restorable(&self, pool: &Pool, lost: u32, epoch: u64) -> Result<(Slot, SlotHeader), Refusal> {
        if lost >= self.ranks {
            return refuse(Status::InvalidArgument, format!("rank {lost} is not in a group of {}", self.ranks));
        }
        if self.job.is_some() {
            return refuse(Status::CkptBusy, "the group is generating or restoring");
        }
        let epoch = if epoch == 0 { self.complete_epoch } else { epoch };
        let Some((slot, header)) = self.valid_slot(pool, epoch)? else {
            return refuse(Status::CkptUnrecoverable, format!("no complete parity for epoch {epoch} in this group"));
        };
        let missing: Vec<u32> = (0..self.ranks).filter(|&r| r != lost && self.peers[r as usize].is_none()).collect();
        if !missing.is_empty() {
            return refuse(
                Status::CkptUnrecoverable,
                format!("ranks {lost} and {missing:?} are lost; XOR parity rebuilds only one rank per group"),
            );
        }
        for r in (0..self.ranks).filter(|&r| r != lost) {
            let (have, want) = (self.peers[r as usize].as_ref().expect("checked").len, header.sizes[r as usize]);
            if have != want {
                return refuse(
                    Status::InvalidArgument,
                    format!("rank {r}'s buffer is {have} bytes; its epoch-{epoch} checkpoint was {want}"),
                );
            }
        }
        Ok((slot, header))
    }

    /// The rebuilt buffer of a restore job, where it is in this process now.
    pub(super) fn restore_target(&self, pool: &Pool, job: &Job) -> Option<RestoreTarget> {
        Self::resolve_target(&self.peers, pool, job)
    }

    pub(super) fn resolve_target(peers: &[Option<Peer>], pool: &Pool, job: &Job) -> Option<RestoreTarget> {
        let Purpose::Restore { lost, into } = job.purpose else { return None };
        let len = job.header.sizes[lost as usize] as usize;
        let base = match into {
            // SAFETY: the allocation is the requester's, of at least `len` bytes, in the pool.
            RestoreInto::Pool(offset) => pool.ptr(offset, len as u64),
            RestoreInto::RankBuffer => {
                let peer = peers[lost as usize].as_ref()?;
                peer.rkey.as_ref()?.local_ptr(peer.addr)?
            }
        };
        Some(RestoreTarget { base, len })
    }
}

impl Job {
    /// Folds segments `first..end` of every mapped survivor of `cohort` into the rebuilt
    /// buffer, in parallel over the segments.
    pub(super) fn fold_cohort_restore(
        &mut self,
        cohort: &[(usize, MappedBase)],
        first: u64,
        end: u64,
        target: Option<RestoreTarget>,
    ) {
        let seg = self.header.segment as usize;
        let sizes = &self.header.sizes;
        let target = target.expect("a restore steps with its target");
        let first_at = first as usize * seg;
        let lost_end = (end as usize * seg).min(target.len);
        // SAFETY: the target is the job's alone until it finishes.
        let rebuilt = unsafe { target.bytes(first_at, lost_end - first_at) };
        let added: Vec<u32> = rebuilt
            .par_chunks_mut(seg)
            .enumerate()
            .map(|(i, rebuilt)| {
                let mut added = 0;
                for (r, base) in cohort {
                    // SAFETY: as in `Job::fold_cohort`: rank r's mapped buffer holds
                    // sizes[r] bytes and does not change until the restore word says so.
                    let data = unsafe { mapped_segment(base.0, sizes[*r] as usize, seg, first as usize + i) };
                    let Some(data) = data else { continue };
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

    /// XORs a survivor's fetched segment `s` into the rebuilt buffer of rank `lost`.
    pub(super) fn fold_restore_segment(&mut self, lost: u32, s: u64, data: &[u8], target: Option<RestoreTarget>) {
        let target = target.expect("a restore steps with its target");
        let (at, n) = self.segment_range(s, self.header.sizes[lost as usize]);
        let n = n.min(data.len());
        // SAFETY: the target is the job's alone until it finishes.
        xor_into(unsafe { target.bytes(at as usize, n) }, &data[..n]);
        self.counts[s as usize] += 1;
    }

    /// Makes this restore a single pass (every survivor is mapped): each segment of the
    /// target is the parity segment XOR the survivors' segments, computed while it is in
    /// cache and checked against both stored checksums right away, instead of a copy pass,
    /// a fold pass and a verify pass over the whole buffer (a third of the memory traffic).
    pub(super) fn fuse_restore(&mut self) {
        self.fused = matches!(self.purpose, Purpose::Restore { .. });
    }

    /// Checks every parity segment the restore reads against its stored checksum and
    /// copies the parity into the target, which the survivors are then folded into (a fused
    /// restore does this segment by segment as it folds).
    pub(super) fn start_restore(&mut self, pool: &Pool, target: RestoreTarget) -> Result<(), JobFailure> {
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

    /// One window of a fused restore (every survivor mapped): for each segment, the target
    /// gets the parity segment, the survivors' segments are XORed in, and the result is
    /// checked against the lost rank's checksum (a corrupted parity or survivor fails it),
    /// all while the segment is in cache. Segments run in parallel. Segments past every survivor's end are
    /// the parity alone (implicit zero padding), so the job walks the target, not the ranks.
    pub(super) fn fold_fused(
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
        let window = (CKPT_DIRECT_BUDGET_BYTES / seg / (survivors.len() as u64 + 1)).max(1);
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
        let fused = FusedSources { survivors: &survivors, sizes, seg: seg as usize, lost };
        let checked: Vec<Result<u32, String>> = rebuilt
            .par_chunks_mut(seg as usize)
            .zip(parity.par_chunks(seg as usize))
            .zip(stored.par_iter())
            .enumerate()
            .map(|(i, ((rebuilt, parity), &crcs))| fused.rebuild(rebuilt, parity, crcs, first as usize + i))
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
    pub(super) fn corrupted(&self, cause: &str) -> JobFailure {
        failure(
            Status::CkptCorrupted,
            format!(
                "{cause} in epoch {}: a survivor's buffer or the parity differs from that epoch; not restoring",
                self.epoch
            ),
        )
    }

    /// After a restore's last segment: the rebuilt buffer must match the lost rank's
    /// checksums, or it is not handed out.
    pub(super) fn verify_restore(&self, pool: &Pool, target: RestoreTarget) -> Result<(), JobFailure> {
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
