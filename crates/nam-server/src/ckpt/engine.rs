//! The checkpoint engine as one of the server's engines: its requests, the lookup of a
//! tenant's groups, polling the running jobs, and dropping a client that is gone.

use super::group::{Drain, Group};
use super::job::JobFailure;
use super::{refuse, slot_name};
use crate::engine::{Caller, Engine, EngineCtx, Execution};
use crate::manager::Refusal;
use nam_proto::ckpt::*;
use nam_proto::{Reply, Request, Status};
use nam_ucx::Posted;
use std::collections::HashMap;

/// Every checkpoint group of the server.
#[derive(Default)]
pub(crate) struct CkptEngine {
    /// The groups by id.
    pub(super) groups: HashMap<u64, Group>,
    /// Group ids by (tenant, group name).
    pub(super) by_name: HashMap<(String, String), u64>,
    /// The last group id handed out.
    pub(super) next_id: u64,
    /// GETs still in flight from failed jobs, with the buffers they write into.
    pub(super) draining: Drain,
}

impl Engine for CkptEngine {
    fn execute(&mut self, ctx: &mut EngineCtx<'_>, caller: &Caller<'_>, request: Request) -> Execution {
        let Request::Ckpt(request) = request else { return Execution::Declined(request) };
        let client = caller.client;
        Execution::Done(match request {
            CkptRequest::Join(join) => self.join(ctx, caller, join).map(|j| Reply::Ckpt(CkptReply::Joined(j))),
            CkptRequest::Ready { group_id, rank, epoch } => {
                self.ready(ctx, client, group_id, rank, epoch).map(|()| Reply::Done)
            }
            CkptRequest::Restore { group_id, lost_rank, epoch, flags } => {
                self.restore(ctx, client, group_id, lost_rank, epoch, flags)
            }
            CkptRequest::Query { group_id } => {
                self.query(ctx, client, group_id).map(|i| Reply::Ckpt(CkptReply::Info(i)))
            }
            CkptRequest::Destroy { group_id } => self.destroy(ctx, client, group_id).map(|()| Reply::Done),
        })
    }

    /// Advances every running job; true if any made progress (a job waiting for ranks to
    /// flag ready lets the server sleep: their requests wake it).
    fn poll(&mut self, ctx: &mut EngineCtx<'_>) -> bool {
        self.draining.retain(|(posted, _)| match posted {
            Posted::Done => false,
            Posted::InFlight(request) => request.check().is_none(),
        });
        let mut busy = false;
        for group in self.groups.values_mut() {
            let (progressed, pending) = group.step(ctx.pool);
            busy |= progressed;
            self.draining.extend(pending.into_iter().flatten());
            Self::release_staging(ctx, group);
        }
        busy
    }

    /// A client disconnected: its ranks leave their groups, and a job still reading one of
    /// them fails now instead of at its deadline.
    fn client_gone(&mut self, ctx: &mut EngineCtx<'_>, client: u64) {
        for group in self.groups.values_mut() {
            // The restore target is that client's allocation, reclaimed after its lease: stop
            // writing into it now.
            if group.job.is_some() && group.restorer == Some(client) {
                let message = "the client that asked for the restore disconnected".to_string();
                let pending = group.fail(ctx.pool, JobFailure { status: Status::CkptRankFailed, message });
                self.draining.extend(pending);
                Self::release_staging(ctx, group);
            }
            for r in 0..group.ranks {
                let Some(peer) = &group.peers[r as usize] else { continue };
                if peer.client != client {
                    continue;
                }
                if group.job.as_ref().is_some_and(|j| j.rank_pending(r)) {
                    let message = format!("rank {r}'s process disconnected while the engine still had to read it");
                    let pending = group.fail(ctx.pool, JobFailure { status: Status::CkptRankFailed, message });
                    self.draining.extend(pending);
                }
                group.peers[r as usize] = None;
                group.departed[r as usize] = true;
            }
        }
    }

    fn reserved_prefix(&self) -> Option<&'static str> {
        Some(CKPT_NAME_PREFIX)
    }

    fn label(&self) -> &'static str {
        "the checkpoint engine"
    }

    /// Lists the groups, oldest first: a group outlives its job by design (a restarted job
    /// restores from it), so an operator must see what each holds to remove it.
    fn status(&self, _manager: &crate::manager::Manager, status: &mut nam_proto::StatusReply) {
        let mut groups: Vec<&Group> = self.groups.values().collect();
        groups.sort_unstable_by_key(|g| g.id);
        status.ckpt_groups_total = groups.len() as u64;
        status.ckpt_groups = groups
            .into_iter()
            .take(nam_proto::limits::CKPT_GROUPS_LISTED_MAX)
            .map(|g| CkptGroupStatus {
                id: g.id,
                tenant: g.tenant.clone(),
                name: g.name.clone(),
                ranks: g.ranks,
                joined: g.peers.iter().filter(|p| p.is_some()).count() as u32,
                bytes: g.control.len + g.slots.iter().flatten().map(|s| s.len).sum::<u64>(),
                complete_epoch: g.complete_epoch,
            })
            .collect();
    }
}

impl CkptEngine {
    pub(super) fn group(&mut self, ctx: &EngineCtx<'_>, client: u64, group_id: u64) -> Result<&mut Group, Refusal> {
        let tenant = ctx.manager.tenant(client).unwrap_or_default().to_string();
        match self.groups.get_mut(&group_id) {
            Some(g) if g.tenant == tenant => Ok(g),
            _ => refuse(Status::InvalidArgument, format!("no checkpoint group {group_id} for this tenant")),
        }
    }

    pub(super) fn query(&mut self, ctx: &EngineCtx<'_>, client: u64, group_id: u64) -> Result<CkptInfo, Refusal> {
        let g = self.group(ctx, client, group_id)?;
        Ok(CkptInfo {
            complete_epoch: g.complete_epoch,
            running_epoch: g.job.as_ref().map_or(0, |j| j.epoch),
            joined: g.peers.iter().filter(|p| p.is_some()).count() as u32,
            last_job_busy_us: g.last_job_busy.as_micros() as u64,
            last_job_cpu_us: g.last_job_cpu.as_micros() as u64,
            last_status: g.last_status,
            last_error: g.last_error.clone(),
        })
    }

    pub(super) fn destroy(&mut self, ctx: &mut EngineCtx<'_>, client: u64, group_id: u64) -> Result<(), Refusal> {
        let group = self.group(ctx, client, group_id)?;
        if group.job.is_some() {
            return refuse(Status::CkptBusy, "the group is generating or restoring");
        }
        let name = group.name.clone();
        let tenant = group.tenant.clone();
        for n in [slot_name(&name, 0), slot_name(&name, 1), format!("{CKPT_NAME_PREFIX}{name}:control")] {
            if let Some(grant) = ctx.manager.lookup(&tenant, &n) {
                ctx.manager.destroy_handle(grant.handle);
            }
        }
        let group = self.groups.remove(&group_id).expect("found above");
        self.by_name.remove(&(group.tenant, group.name));
        Ok(())
    }
}
