//! A checkpoint group: its ranks (peers), its control block and parity slots, and the one
//! job (an epoch or a restore) it runs at a time, which the engine steps, finishes or fails.

use super::job::{Job, JobFailure, Purpose};
use super::pull::RankSource;
use super::refuse;
use super::slot::{Slot, SlotState};
use super::sys::{process_cpu_time, wake_sleepers};
use crate::manager::Refusal;
use crate::pool::Pool;
use nam_proto::ckpt::*;
use nam_proto::Status;
use nam_ucx::{Endpoint, Posted, RemoteKey};
use std::time::{Duration, Instant};

/// A joined rank, as the engine reaches its checkpoint buffer.
pub(super) struct Peer {
    /// The client that joined as this rank.
    pub(super) client: u64,
    /// Its node's name: a group's ranks are on distinct nodes.
    pub(super) node: String,
    /// The checked worker address the dedicated endpoint was made from; empty when the
    /// engine uses the client's connection endpoint.
    pub(super) worker_address: Vec<u8>,
    /// Whether `endpoint` is the engine's own (to a rank on this host, by its checked worker
    /// address) rather than the client's connection, which only the server closes.
    pub(super) dedicated: bool,
    /// Length of the rank's buffer.
    pub(super) len: u64,
    /// Remote address of its byte 0.
    pub(super) addr: u64,
    // Field order: the key is released before its endpoint. `None` for an empty buffer.
    pub(super) rkey: Option<RemoteKey>,
    /// The endpoint GETs of the buffer go through.
    pub(super) endpoint: Endpoint,
}

/// A checkpoint group of one tenant.
pub(super) struct Group {
    /// Its id in requests.
    pub(super) id: u64,
    /// The tenant it belongs to.
    pub(super) tenant: String,
    /// Its name, unique per tenant.
    pub(super) name: String,
    /// Ranks in the group.
    pub(super) ranks: u32,
    /// Bytes per segment pulled and folded.
    pub(super) segment: u32,
    /// GETs in flight per rank.
    pub(super) in_flight: u32,
    /// How long a job may take before it fails with `CkptTimeout`.
    pub(super) timeout: Duration,
    /// The control block (the words ranks wait on).
    pub(super) control: Slot,
    /// The two parity slots (ping-pong), once placed.
    pub(super) slots: [Option<Slot>; 2],
    /// The joined ranks.
    pub(super) peers: Vec<Option<Peer>>,
    /// Ranks whose process disconnected after joining (until they join again): an epoch
    /// refused for lack of them names a failed rank, not one that never came.
    pub(super) departed: Vec<bool>,
    /// The newest epoch whose parity is complete (restorable).
    pub(super) complete_epoch: u64,
    /// The newest epoch started.
    pub(super) last_started: u64,
    /// The running epoch or restore.
    pub(super) job: Option<Job>,
    /// Why the last job failed, for queries.
    pub(super) last_error: String,
    /// The status of the last job that failed.
    pub(super) last_status: Status,
    /// Work time of the last finished job.
    pub(super) last_job_busy: Duration,
    /// Server CPU time of the last finished job.
    pub(super) last_job_cpu: Duration,
    /// The client a running restore writes into an allocation of.
    pub(super) restorer: Option<u64>,
    /// The handle of a pushed restore's staging allocation, the engine's own until the job
    /// ends ([`super::engine::CkptEngine::release_staging`]).
    pub(super) staging: Option<u64>,
}

/// GETs still in flight after their job ended, with the buffers UCX writes into: kept until
/// UCX completes them.
pub(super) type Drain = Vec<(Posted, Vec<u8>)>;

impl Group {
    /// Whether `client` joined as `rank`.
    pub(super) fn check_member(&self, client: u64, rank: u32) -> Result<(), Refusal> {
        match self.peers.get(rank as usize) {
            Some(Some(p)) if p.client == client => Ok(()),
            Some(_) => {
                refuse(Status::InvalidArgument, format!("rank {rank} of this group is not joined by this client"))
            }
            None => refuse(Status::InvalidArgument, format!("rank {rank} is not in a group of {}", self.ranks)),
        }
    }

    /// Stores `value` in control word `word` and wakes the ranks sleeping on it.
    pub(super) fn write_word(&self, pool: &Pool, word: u64, value: u64) {
        let word = pool.word(self.control.offset + 8 * word);
        word.store(value, std::sync::atomic::Ordering::SeqCst);
        wake_sleepers(word);
    }

    /// Advances the job: whether it progressed, and the GETs to drain if it failed.
    pub(super) fn step(&mut self, pool: &Pool) -> (bool, Option<Drain>) {
        let Some(job) = self.job.as_mut() else { return (false, None) };
        let sources: Vec<Option<RankSource<'_>>> = self
            .peers
            .iter()
            .map(|p| {
                let p = p.as_ref()?;
                Some(RankSource { endpoint: &p.endpoint, rkey: p.rkey.as_ref()?, addr: p.addr, len: p.len })
            })
            .collect();
        let target = Self::resolve_target(&self.peers, pool, job);
        if matches!(job.purpose, Purpose::Restore { .. }) && target.is_none() {
            let message = "the replacement rank's buffer is gone".to_string();
            return (true, Some(self.fail(pool, JobFailure { status: Status::CkptRankFailed, message })));
        }
        let (started, cpu) = (Instant::now(), process_cpu_time());
        let result = job.step(pool, &sources, target);
        drop(sources);
        if matches!(result, Ok(true)) {
            job.busy += started.elapsed();
            job.busy_cpu += process_cpu_time().saturating_sub(cpu);
        }
        let progressed = match result {
            Ok(progressed) => progressed,
            Err(f) => return (true, Some(self.fail(pool, f))),
        };
        let job = self.job.as_ref().expect("still running");
        if let Purpose::Epoch = job.purpose {
            for r in 0..self.ranks {
                let word = CKPT_WORD_RANK0 + r as u64;
                if job.rank_finished(r)
                    && pool.word(self.control.offset + 8 * word).load(std::sync::atomic::Ordering::Relaxed) != job.epoch
                {
                    self.write_word(pool, word, CkptWord::done(job.epoch).0);
                }
            }
        }
        if job.finished() {
            return (true, self.finish(pool));
        }
        if Instant::now() >= job.deadline {
            let message = match job.purpose {
                Purpose::Epoch => format!(
                    "epoch {}: ranks {:?} did not flag ready within {:?}",
                    job.epoch,
                    job.not_ready(),
                    self.timeout
                ),
                Purpose::Restore { .. } => {
                    format!("restore of epoch {} did not finish within {:?}", job.epoch, self.timeout)
                }
            };
            return (true, Some(self.fail(pool, JobFailure { status: Status::CkptTimeout, message })));
        }
        (progressed, None)
    }

    pub(super) fn finish(&mut self, pool: &Pool) -> Option<Drain> {
        let job = self.job.as_ref().expect("finishing a job");
        self.last_job_busy = job.busy;
        self.last_job_cpu = job.busy_cpu;
        match job.purpose {
            Purpose::Epoch => {
                job.slot.set_state(pool, SlotState::Valid);
                self.complete_epoch = job.epoch;
                self.write_word(pool, CKPT_WORD_COMPLETE, job.epoch);
                log::info!(
                    "group {:?}: epoch {} complete, {} bytes folded in {:?}, {:?} after the last rank flagged ready ({:?} of work, {:?} CPU, {:.2} parity passes)",
                    self.name,
                    job.epoch,
                    job.header.sizes.iter().sum::<u64>(),
                    job.started.elapsed(),
                    job.all_ready.map(|t| t.elapsed()).unwrap_or_default(),
                    job.busy,
                    job.busy_cpu,
                    job.parity_passes()
                );
            }
            Purpose::Restore { lost, .. } => {
                let verified = match self.restore_target(pool, job) {
                    Some(target) => job.verify_restore(pool, target),
                    None => Err(JobFailure {
                        status: Status::CkptRankFailed,
                        message: "the replacement rank's buffer is gone".into(),
                    }),
                };
                if let Err(f) = verified {
                    return Some(self.fail(pool, f));
                }
                self.write_word(pool, CKPT_WORD_RESTORE, CkptWord::done(job.epoch).0);
                log::info!(
                    "group {:?}: rank {lost} rebuilt from epoch {} in {:?} ({:?} of work; the survivors' bytes all in after {:?})",
                    self.name,
                    job.epoch,
                    job.started.elapsed(),
                    job.busy,
                    job.pulled.map(|t| t.duration_since(job.started)).unwrap_or_default()
                );
            }
        }
        self.job = None;
        None
    }

    /// Ends the running job with `failure`: the slot being written is marked empty (the
    /// other one still holds the last complete epoch), every waiting rank gets the status.
    pub(super) fn fail(&mut self, pool: &Pool, failure: JobFailure) -> Drain {
        let Some(mut job) = self.job.take() else { return Vec::new() };
        log::warn!("group {:?}: {}", self.name, failure.message);
        let word = CkptWord::failed(job.epoch, failure.status).0;
        match job.purpose {
            Purpose::Epoch => {
                job.slot.set_state(pool, SlotState::Empty);
                for r in (0..self.ranks).filter(|&r| !job.rank_finished(r)) {
                    self.write_word(pool, CKPT_WORD_RANK0 + r as u64, word);
                }
                // Ranks already pulled sleep on the complete word: have them query now.
                wake_sleepers(pool.word(self.control.offset + 8 * CKPT_WORD_COMPLETE));
            }
            Purpose::Restore { .. } => self.write_word(pool, CKPT_WORD_RESTORE, word),
        }
        self.last_error = failure.message;
        self.last_status = failure.status;
        // GETs still in flight go to ranks that may be gone: close those endpoints so UCX
        // ends the GETs; those ranks join again before the next epoch.
        if job.has_pending() {
            // A client's connection is not the engine's to close: the server closes it when the
            // client fails, which ends the GETs on it too.
            for peer in &mut self.peers {
                if let Some(p) = peer.take() {
                    if p.dedicated {
                        p.endpoint.abort();
                    }
                }
            }
        }
        job.take_pending()
    }
}
