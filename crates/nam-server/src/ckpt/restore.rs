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
use crate::constants::{CKPT_BUFFER_ALIGN, CKPT_DIRECT_BUDGET_BYTES, CKPT_PUSH_RUN_BYTES};
use crate::engine::EngineCtx;
use crate::manager::Grant;
use crate::manager::Refusal;
use crate::pool::Pool;
use nam_proto::checksum::crc32c;
use nam_proto::ckpt::*;
use nam_proto::{Alloc, Reply, Status, ALLOC_FLAG_PERSISTENT};
use nam_ucx::Posted;
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
    /// The engine's staging allocation at this offset, each verified run of segments PUT
    /// from there into the lost rank's registered buffer as soon as it is rebuilt (a rank
    /// the server does not map: another host, or TCP only).
    Pushed(u64),
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
        // Elsewhere (another host, or TCP only) the engine PUTs the rebuilt bytes into the
        // replacement's registered buffer as they are verified, pipelined with the rebuild,
        // instead of leaving them in an allocation the replacement then fetches chunk by
        // chunk through the message path after the rebuild (a second pass over the network).
        let push = !in_place
            && flags & CKPT_RESTORE_INTO_BUFFER != 0
            && lost_len > 0
            && group.peers[lost as usize]
                .as_ref()
                .is_some_and(|peer| peer.client == client && peer.len == lost_len && peer.rkey.is_some());
        let fused = (0..group.ranks).filter(|&r| r != lost).all(|r| mapped(r).is_some());
        let grant = if in_place {
            None
        } else if push {
            Some(group.staging_allocation(ctx, client, lost_len)?)
        } else {
            let alloc = Alloc { size: lost_len.max(1), align: CKPT_BUFFER_ALIGN, flags: 0, name: String::new() };
            Some(ctx.manager.allocate(client, &alloc)?)
        };
        let into = match &grant {
            None => RestoreInto::RankBuffer,
            Some(g) if push => RestoreInto::Pushed(g.offset),
            Some(g) => RestoreInto::Pool(g.offset),
        };
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
            match &grant {
                Some(grant) if push => ctx.manager.destroy_handle(grant.handle),
                Some(grant) => ctx.manager.free(client, grant.handle)?,
                None => {}
            }
            group.last_error = f.message.clone();
            group.last_status = f.status;
            return refuse(f.status, f.message);
        }
        group.job = Some(job);
        group.restorer = Some(client);
        match grant {
            Some(grant) if push => {
                group.staging = Some(grant.handle);
                Ok(Reply::Done)
            }
            grant => Ok(grant.map_or(Reply::Done, |grant| Reply::Alloc(ctx.alloc_reply(&grant)))),
        }
    }
}

impl Group {
    /// The engine's own pool allocation a pushed restore rebuilds into before it PUTs the
    /// bytes out: charged to the requester's tenant like the allocation a fetched restore
    /// hands out, but under a reserved name and held by no client, so that no client can
    /// free it while the job writes it; the engine destroys it when the job ends
    /// ([`CkptEngine::release_staging`]). A stale one (a file-backed pool kept over a
    /// server restart) is replaced.
    fn staging_allocation(&mut self, ctx: &mut EngineCtx<'_>, client: u64, len: u64) -> Result<Grant, Refusal> {
        let name = format!("{CKPT_NAME_PREFIX}{}:restore", self.name);
        if let Some(stale) = ctx.manager.lookup(&self.tenant, &name) {
            ctx.manager.destroy_handle(stale.handle);
        }
        let alloc = Alloc { size: len, align: CKPT_BUFFER_ALIGN, flags: ALLOC_FLAG_PERSISTENT, name };
        let grant = ctx.manager.allocate(client, &alloc).map_err(|r| Refusal {
            status: r.status,
            message: format!("restore staging of {len} bytes: {}", r.message),
        })?;
        ctx.manager.release_hold(client, grant.handle);
        Ok(grant)
    }
}

impl CkptEngine {
    /// Destroys a finished or failed pushed restore's staging allocation. PUTs a failed
    /// job left in flight may still read it; they only ever write the failed replacement's
    /// own buffer, which its restore word already declares unrestored.
    pub(super) fn release_staging(ctx: &mut EngineCtx<'_>, group: &mut Group) {
        if group.job.is_none() {
            if let Some(handle) = group.staging.take() {
                ctx.manager.destroy_handle(handle);
            }
        }
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
            RestoreInto::Pool(offset) | RestoreInto::Pushed(offset) => pool.ptr(offset, len as u64),
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

    /// Whether this job PUTs the rebuilt bytes into the lost rank's buffer.
    pub(super) fn pushes(&self) -> bool {
        matches!(self.purpose, Purpose::Restore { into: RestoreInto::Pushed(_), .. })
    }

    /// Whether segment `s` of the rebuilt buffer has every contribution.
    fn segment_rebuilt(&self, s: u64) -> bool {
        if self.fused {
            s < self.fused_next
        } else {
            self.counts[s as usize] == self.expected[s as usize]
        }
    }

    /// A pushed restore's step: reaps completed PUTs, PUTs every run of segments rebuilt
    /// since the last step (each segment first checked against the lost rank's stored
    /// checksum, so no unverified byte leaves the server), and once everything is PUT,
    /// flushes the endpoint so that the bytes are in the lost rank's buffer before the
    /// restore word says so. The lost rank only waits (progressing, as TCP needs).
    pub(super) fn push_rebuilt(
        &mut self,
        pool: &Pool,
        sources: &[Option<RankSource<'_>>],
        target: Option<RestoreTarget>,
    ) -> Result<bool, JobFailure> {
        let Purpose::Restore { lost, into: RestoreInto::Pushed(_) } = self.purpose else { return Ok(false) };
        let target = target.expect("a restore steps with its target");
        let source = sources[lost as usize].as_ref().ok_or_else(|| {
            failure(Status::CkptRankFailed, format!("rank {lost} left before its rebuilt bytes were written back"))
        })?;
        let write_failed =
            |e| failure(Status::CkptRankFailed, format!("writing the rebuilt bytes into rank {lost}'s buffer: {e}"));
        let mut busy = false;
        let mut i = 0;
        while i < self.push.posted.len() {
            let state = match &self.push.posted[i] {
                Posted::Done => Some(Ok(())),
                Posted::InFlight(request) => request.check(),
            };
            match state {
                None => i += 1,
                Some(Err(e)) => return Err(write_failed(e)),
                Some(Ok(())) => {
                    self.push.posted.swap_remove(i);
                    busy = true;
                }
            }
        }
        let (seg, total) = (self.header.segment as u64, self.counts.len() as u64);
        let run_max = (CKPT_PUSH_RUN_BYTES / seg).max(1);
        while self.push.next < total && self.segment_rebuilt(self.push.next) {
            let first = self.push.next;
            let mut end = first + 1;
            while end < total && end - first < run_max && self.segment_rebuilt(end) {
                end += 1;
            }
            if !self.fused {
                // (A fused restore checked each segment as it rebuilt it.)
                for s in first..end {
                    let (at, n) = self.segment_range(s, target.len as u64);
                    // SAFETY: the target is the job's alone; read-only here.
                    let rebuilt = unsafe { target.bytes(at as usize, n) };
                    if crc32c(rebuilt) != self.slot.load_crc(pool, self.header.rank_crc_at(lost), s) {
                        return Err(self.corrupted(&format!("rebuilt segment {s} of rank {lost} fails its checksum")));
                    }
                }
            }
            let at = first * seg;
            let stop = (end * seg).min(target.len as u64);
            // The lost rank joined with exactly its recorded size (checked when the restore
            // started, and a rank cannot join again while it runs): never past its buffer.
            if stop > source.len {
                return Err(failure(
                    Status::CkptRankFailed,
                    format!("rank {lost}'s buffer of {} bytes is shorter than its {stop}-byte checkpoint", source.len),
                ));
            }
            // SAFETY: the staging allocation stays the engine's until the job has ended; the
            // bytes are only read here.
            let posted = unsafe {
                source.endpoint.put_nbx(
                    target.base.add(at as usize),
                    (stop - at) as usize,
                    source.addr + at,
                    source.rkey,
                )
            }
            .map_err(write_failed)?;
            self.push.posted.push(posted);
            self.push.next = end;
            busy = true;
        }
        if self.push.next == total && self.push.posted.is_empty() && !self.push.flushed {
            let state = match &self.push.flush {
                None => {
                    self.push.flush = Some(source.endpoint.flush_nbx().map_err(write_failed)?);
                    busy = true;
                    None
                }
                Some(Posted::Done) => Some(Ok(())),
                Some(Posted::InFlight(request)) => request.check(),
            };
            match state {
                None => {}
                Some(Err(e)) => return Err(write_failed(e)),
                Some(Ok(())) => {
                    self.push.flush = None;
                    self.push.flushed = true;
                    busy = true;
                }
            }
        }
        Ok(busy)
    }

    /// After a restore's last segment: the rebuilt buffer must match the lost rank's
    /// checksums, or it is not handed out.
    pub(super) fn verify_restore(&self, pool: &Pool, target: RestoreTarget) -> Result<(), JobFailure> {
        let Purpose::Restore { lost, .. } = self.purpose else { return Ok(()) };
        if self.fused || self.pushes() {
            return Ok(()); // every segment was checked as it was rebuilt or before it was PUT
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
