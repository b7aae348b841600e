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
        // `last_started` may come from a slot header in the pool: bounded there, added here
        // without overflow all the same.
        let next = group.last_started.saturating_add(1);
        if epoch != next || epoch > CkptWord::EPOCH_MASK {
            return refuse(
                Status::CkptBusy,
                format!("epoch {epoch} is out of order: the next epoch of this group is {next}"),
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
        // The flagging rank's word is cleared, and so is any word that already names this
        // epoch or a later one: it is left from an earlier numbering (a group whose corrupt
        // slot made it number epochs over after a restart), and a rank reading it would stop
        // waiting, and stop answering the engine's GETs, before its buffer is pulled. A word
        // naming the previous epoch stays: its rank may not have seen it yet.
        for r in 0..group.ranks {
            let at = group.control.offset + 8 * (CKPT_WORD_RANK0 + r as u64);
            let stale = CkptWord(ctx.pool.word(at).load(std::sync::atomic::Ordering::SeqCst)).epoch() >= epoch;
            if r == rank || stale {
                group.write_word(ctx.pool, CKPT_WORD_RANK0 + r as u64, 0);
            }
        }
        let mut job = Job::new(epoch, Purpose::Epoch, slot, header, Instant::now() + group.timeout, group.in_flight);
        job.flag_ready(rank);
        group.last_started = epoch;
        group.job = Some(job);
        Ok(())
    }
}

impl Group {
    /// After a restart from a file-backed pool: the newest valid slot is the complete epoch.
    /// A slot whose header fails its checks is left out (and named when asked for).
    pub(super) fn recover_from_pool(&mut self, pool: &Pool) {
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            match slot.read_header(pool, self.ranks) {
                Ok(Some(h)) if h.state == SlotState::Valid => {
                    self.complete_epoch = self.complete_epoch.max(h.epoch);
                    self.last_started = self.last_started.max(h.epoch);
                    self.segment = h.segment;
                }
                Ok(Some(h)) => self.last_started = self.last_started.max(h.epoch),
                Ok(None) => {}
                Err(cause) => log::warn!("group {:?}: parity slot {i}'s header is corrupt: {cause}", self.name),
            }
        }
        self.write_word(pool, CKPT_WORD_COMPLETE, self.complete_epoch);
    }

    /// The slot holding complete epoch `epoch`, with its checked header; `Ok(None)` if no
    /// slot holds it, `CkptCorrupted` naming the cause if none does and a slot's stored
    /// header is corrupt (it may have been that epoch).
    pub(super) fn valid_slot(&self, pool: &Pool, epoch: u64) -> Result<Option<(Slot, SlotHeader)>, Refusal> {
        let mut corrupt = None;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(s) = s else { continue };
            match s.read_header(pool, self.ranks) {
                Ok(Some(h)) if h.state == SlotState::Valid && h.epoch == epoch && epoch != 0 => {
                    return Ok(Some((s.clone(), h)))
                }
                Ok(_) => {}
                Err(cause) => {
                    corrupt = Some(format!("group {:?}: parity slot {i}'s header is corrupt: {cause}", self.name))
                }
            }
        }
        match corrupt {
            Some(message) => refuse(Status::CkptCorrupted, message),
            None => Ok(None),
        }
    }

    /// Rank `rank`'s checkpoint length in the complete epoch (0 when there is none, or its
    /// slot is corrupt: a restore then names the corruption).
    pub(super) fn recorded_len(&self, pool: &Pool, rank: u32) -> u64 {
        match self.valid_slot(pool, self.complete_epoch) {
            Ok(Some((_, h))) => h.sizes.get(rank as usize).copied().unwrap_or(0),
            Ok(None) => 0,
            Err(refusal) => {
                log::warn!("{}", refusal.message);
                0
            }
        }
    }

    /// The slot for a new epoch: never the one holding the complete epoch. Grown (freed and
    /// allocated again) when the ranks' buffers no longer fit.
    pub(super) fn prepare_slot(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        epoch: u64,
    ) -> Result<(Slot, SlotHeader), Refusal> {
        // A corrupt slot holds nothing worth keeping: the new epoch may overwrite it.
        let keep = self.valid_slot(ctx.pool, self.complete_epoch).ok().flatten().map(|(s, _)| s.handle);
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
