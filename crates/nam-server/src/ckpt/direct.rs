//! The mapped path of a job: when UCX maps a rank's buffer into the server (same host,
//! shared memory) the engine reads it in place instead of fetching it, folding the ready
//! ranks that have reached the same segment together (a cohort), a byte budget per step.

use super::fold::fold_segment;
use super::job::{Job, JobFailure, Purpose};
use super::pull::RankSource;
use super::restore::RestoreTarget;
use crate::constants::CKPT_DIRECT_BUDGET_BYTES;
use crate::pool::Pool;
use rayon::prelude::*;

impl Job {
    /// Folds segments of mapped buffers in place, up to a byte budget per call. Segment-major,
    /// as the CR unit of Schmidt 2017 (§4.5) does: the ready ranks that have reached the same
    /// segment (a cohort) are folded together, segment by segment, so each parity segment is
    /// read and written once while it is in cache instead of once per rank; segments run in
    /// parallel.
    pub(super) fn fold_direct(
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
        let window = (CKPT_DIRECT_BUDGET_BYTES / seg / cohort.len() as u64).max(1);
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
    pub(super) fn foldable_cohort(&self, mapped: Vec<(usize, *const u8)>) -> Option<(u64, Vec<(usize, *const u8)>)> {
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
    pub(super) fn fold_cohort(
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
            Purpose::Restore { .. } => self.fold_cohort_restore(&cohort, first, end, target),
        }
        Ok(())
    }
}

/// One segment of a cohort: each rank's (rank, checksum), and the parity's checksum if the
/// segment is complete.
pub(super) type FoldedSegment = (Vec<(usize, u32)>, Option<u32>);

/// A rank's buffer mapped into the server, shared by the threads that fold it.
pub(super) struct MappedBase(pub(super) *mut u8);
// SAFETY: the mapped buffers are only read, from any thread, while the job runs.
unsafe impl Sync for MappedBase {}
unsafe impl Send for MappedBase {}

/// Segment `s` of a mapped buffer of `size` bytes at `base`, `None` past its end.
///
/// # Safety
/// `base` must map `size` readable bytes that nobody writes while the slice lives.
pub(super) unsafe fn mapped_segment<'a>(base: *const u8, size: usize, seg: usize, s: usize) -> Option<&'a [u8]> {
    let at = s * seg;
    let len = size.saturating_sub(at).min(seg);
    (len > 0).then(|| std::slice::from_raw_parts(base.add(at), len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ckpt::restore::RestoreInto;
    use crate::ckpt::slot::{Slot, SlotHeader, SlotState};
    use std::time::Instant;

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
