//! An epoch: a rank flags its buffer ready, the first flag starts the group's job, and the
//! parity goes into the slot that does not hold the last complete epoch (ping-pong, placed
//! and grown here); after a restart the newest valid slot is the complete epoch.

use super::engine::CkptEngine;
use super::group::Group;
use super::job::{Job, Purpose};
use super::slot::{Slot, SlotHeader, SlotState};
use super::sys::prefault;
use super::{refuse, slot_name};
use crate::constants::CKPT_BUFFER_ALIGN;
use crate::engine::EngineCtx;
use crate::manager::Refusal;
use crate::pool::Pool;
use nam_proto::ckpt::*;
use nam_proto::limits::CKPT_SEGMENTS_MAX;
use nam_proto::{Alloc, Status, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED};
use std::time::Instant;

impl CkptEngine {
    pub(super) fn ready(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        group_id: u64,
        rank: u32,
        epoch: u64,
    ) -> Result<(), Refusal> {
        let group = self.group(ctx, client, group_id)?;
        group.check_member(client, rank)?;
        if let Some(job) = &mut group.job {
            if job.epoch != epoch || !matches!(job.purpose, Purpose::Epoch) {
                return refuse(Status::CkptBusy, format!("group is working on epoch {}, not {epoch}", job.epoch));
            }
            if !job.flag_ready(rank) {
                return refuse(Status::CkptBusy, format!("rank {rank} already flagged epoch {epoch} ready"));
            }
            return Ok(());
        }
        if epoch != group.last_started + 1 {
            return refuse(
                Status::CkptBusy,
                format!("epoch {epoch} is out of order: the next epoch of this group is {}", group.last_started + 1),
            );
        }
        if let Some(missing) = group.peers.iter().position(Option::is_none) {
            if group.departed[missing] {
                return refuse(
                    Status::CkptRankFailed,
                    format!("rank {missing}'s process disconnected; it must join again before the next epoch"),
                );
            }
            return refuse(Status::InvalidArgument, format!("rank {missing} has not joined the group"));
        }
        let (slot, header) = group.prepare_slot(ctx, client, epoch)?;
        group.write_word(ctx.pool, CKPT_WORD_RANK0 + rank as u64, 0);
        let mut job = Job::new(epoch, Purpose::Epoch, slot, header, Instant::now() + group.timeout, group.in_flight);
        job.flag_ready(rank);
        group.last_started = epoch;
        group.job = Some(job);
        Ok(())
    }
}

impl Group {
    /// After a restart from a file-backed pool: the newest valid slot is the complete epoch.
    pub(super) fn recover_from_pool(&mut self, pool: &Pool) {
        for slot in self.slots.iter().flatten() {
            match slot.read_header(pool) {
                Some(h) if h.state == SlotState::Valid && h.ranks == self.ranks => {
                    self.complete_epoch = self.complete_epoch.max(h.epoch);
                    self.last_started = self.last_started.max(h.epoch);
                    self.segment = h.segment;
                }
                Some(h) => self.last_started = self.last_started.max(h.epoch),
                None => {}
            }
        }
        self.write_word(pool, CKPT_WORD_COMPLETE, self.complete_epoch);
    }

    pub(super) fn valid_slot(&self, pool: &Pool, epoch: u64) -> Option<(Slot, SlotHeader)> {
        self.slots.iter().flatten().find_map(|s| {
            let h = s.read_header(pool)?;
            (h.state == SlotState::Valid && h.epoch == epoch && epoch != 0).then(|| (s.clone(), h))
        })
    }

    pub(super) fn recorded_len(&self, pool: &Pool, rank: u32) -> u64 {
        self.valid_slot(pool, self.complete_epoch).map_or(0, |(_, h)| h.sizes[rank as usize])
    }

    /// The slot for a new epoch: never the one holding the complete epoch. Grown (freed and
    /// allocated again) when the ranks' buffers no longer fit.
    pub(super) fn prepare_slot(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        epoch: u64,
    ) -> Result<(Slot, SlotHeader), Refusal> {
        let keep = self.valid_slot(ctx.pool, self.complete_epoch).map(|(s, _)| s.handle);
        let index = match (&self.slots[0], keep) {
            (Some(s), Some(k)) if s.handle == k => 1,
            _ => 0,
        };
        let header = SlotHeader {
            epoch,
            state: SlotState::Writing,
            ranks: self.ranks,
            segment: self.segment,
            sizes: self.peers.iter().map(|p| p.as_ref().map_or(0, |p| p.len)).collect(),
        };
        if header.segments() > CKPT_SEGMENTS_MAX {
            return refuse(
                Status::TooLarge,
                format!("{} segments exceed {CKPT_SEGMENTS_MAX}; use larger segments", header.segments()),
            );
        }
        self.ensure_slot(ctx, client, index, &header)?;
        // The first epoch also places the other slot, so the second epoch does not pay for
        // allocating and faulting in a parity slot (the one holding a valid epoch stays).
        let other = 1 - index;
        if keep.is_none() && self.slots[other].is_none() {
            self.ensure_slot(ctx, client, other, &header)?;
        }
        let slot = self.slots[index].clone().expect("placed above");
        slot.write_header(ctx.pool, &header);
        Ok((slot, header))
    }

    /// Makes slot `index` an allocation large enough for `header`'s epoch, replacing a
    /// smaller one; new slots are faulted in at once.
    pub(super) fn ensure_slot(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        index: usize,
        header: &SlotHeader,
    ) -> Result<(), Refusal> {
        if self.slots[index].as_ref().is_some_and(|s| s.len >= header.slot_len()) {
            return Ok(());
        }
        if let Some(old) = self.slots[index].take() {
            ctx.manager.destroy_handle(old.handle);
        }
        let name = slot_name(&self.name, index);
        let alloc = Alloc {
            size: header.slot_len(),
            align: CKPT_BUFFER_ALIGN,
            flags: ALLOC_FLAG_SHARED | ALLOC_FLAG_PERSISTENT,
            name,
        };
        let grant = ctx.manager.allocate(client, &alloc).map_err(|r| Refusal {
            status: r.status,
            message: format!("parity slot of {} bytes for epoch {}: {}", header.slot_len(), header.epoch, r.message),
        })?;
        ctx.manager.release_hold(client, grant.handle);
        // SAFETY: the new slot is the engine's; only its pages are touched.
        let bytes = unsafe { ctx.pool.bytes_mut(grant.offset, grant.size as usize) };
        prefault(bytes.as_mut_ptr(), bytes.len(), libc::MADV_POPULATE_WRITE);
        self.slots[index] = Some(Slot { offset: grant.offset, len: grant.size, handle: grant.handle });
        Ok(())
    }
}
