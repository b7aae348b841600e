//! The network path of a job: GETs of the ranks' segments posted round-robin over the
//! ranks that are ready, with a bounded number in flight per rank, each segment folded into
//! the parity (or the rebuilt buffer) as it arrives.

use super::fold::fold_segment;
use super::job::{failure, Job, JobFailure, Purpose};
use super::restore::RestoreTarget;
use crate::pool::Pool;
use nam_proto::Status;
use nam_ucx::{Endpoint, Posted, RemoteKey};

/// Where a rank's buffer is, as the engine reaches it.
pub(super) struct RankSource<'a> {
    /// The server's endpoint to the rank's worker.
    pub(super) endpoint: &'a Endpoint,
    /// The buffer's remote key.
    pub(super) rkey: &'a RemoteKey,
    /// Remote address of byte 0.
    pub(super) addr: u64,
    /// Length of the buffer the rank joined with: nothing is written past it.
    pub(super) len: u64,
}

pub(super) struct Pending {
    pub(super) segment: u64,
    pub(super) buffer: Vec<u8>,
    pub(super) posted: Posted,
}

impl Job {
    /// Posts GETs round-robin over the ready ranks until each has its window full.
    pub(super) fn issue(&mut self, sources: &[Option<RankSource<'_>>]) -> Result<bool, JobFailure> {
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

    pub(super) fn post_get(&mut self, r: usize, source: &RankSource<'_>) -> Result<(), JobFailure> {
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
    pub(super) fn reap(&mut self, pool: &Pool, target: Option<RestoreTarget>) -> Result<bool, JobFailure> {
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
    pub(super) fn take_pending(&mut self) -> Vec<(Posted, Vec<u8>)> {
        self.pullers.iter_mut().flat_map(|p| p.pending.drain(..)).map(|p| (p.posted, p.buffer)).collect()
    }

    #[allow(clippy::mut_from_ref)]
    pub(super) fn parity_segment<'p>(&self, pool: &'p Pool, s: u64) -> &'p mut [u8] {
        let (at, n) = self.segment_range(s, self.header.parity_len());
        // SAFETY: the slot is the engine's own allocation; only this job touches it.
        unsafe { pool.bytes_mut(self.slot.offset + self.header.data_at() + at, n) }
    }

    /// Folds rank `r`'s segment `s` into the parity (epoch) or the rebuilt buffer (restore).
    pub(super) fn fold(
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
            Purpose::Restore { lost, .. } => self.fold_restore_segment(lost, s, data, target),
        }
        Ok(())
    }
}
