//! Joining a group: checking what a rank sends (group geometry, its remote key and mapped
//! buffer, its worker address), finding or creating the group (also one a file-backed pool
//! kept over a restart), and the endpoint the engine pulls the rank's buffer through.

use super::engine::CkptEngine;
use super::group::{Group, Peer};
use super::slot::Slot;
use super::sys::prefault;
use super::{mapping, refuse, slot_name};
use crate::constants::CKPT_CONTROL_ALIGN;
use crate::engine::{Caller, EngineCtx};
use crate::manager::Refusal;
use nam_proto::ckpt::*;
use nam_proto::limits::*;
use nam_proto::{Alloc, Status, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED};
use nam_ucx::Endpoint;
use std::time::Duration;

impl CkptEngine {
    /// Joins `caller` to a group as `join.rank`, creating the group at its first join.
    pub(super) fn join(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        caller: &Caller<'_>,
        join: CkptJoin,
    ) -> Result<CkptJoined, Refusal> {
        let client = caller.client;
        validate_join(&join)?;
        let tenant = ctx.manager.tenant(client).unwrap_or_default().to_string();
        let key = (tenant.clone(), join.group.clone());
        let id = match self.by_name.get(&key) {
            Some(&id) => id,
            None => {
                let group = self.create_group(ctx, client, &tenant, &join)?;
                let id = group.id;
                self.groups.insert(id, group);
                self.by_name.insert(key, id);
                id
            }
        };
        let group = self.groups.get_mut(&id).expect("indexed");
        group.check_compatible(&join)?;
        if group.job.is_some() {
            return refuse(Status::CkptBusy, format!("group {:?} is generating or restoring; join later", group.name));
        }
        if let Some(other) = group
            .peers
            .iter()
            .enumerate()
            .find_map(|(r, p)| p.as_ref().filter(|p| r as u32 != join.rank && p.node == join.node).map(|_| r))
        {
            return refuse(
                Status::InvalidArgument,
                format!(
                    "ranks {other} and {} are both on node {:?}; a group needs distinct nodes",
                    join.rank, join.node
                ),
            );
        }
        let previous = group.peers[join.rank as usize].take();
        let peer = checked_peer(ctx, caller, previous, &join)?;
        let control_grant = ctx.manager.open(client, &format!("{CKPT_NAME_PREFIX}{}:control", join.group))?;
        let recorded_len = group.recorded_len(ctx.pool, join.rank);
        group.departed[join.rank as usize] = false;
        group.peers[join.rank as usize] = Some(peer);
        Ok(CkptJoined {
            group_id: id,
            control: ctx.alloc_reply(&control_grant),
            complete_epoch: group.complete_epoch,
            started_epoch: group.last_started,
            recorded_len,
        })
    }

    /// A new group, or one found in the pool (a file-backed pool after a restart).
    pub(super) fn create_group(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        tenant: &str,
        join: &CkptJoin,
    ) -> Result<Group, Refusal> {
        let control_name = format!("{CKPT_NAME_PREFIX}{}:control", join.group);
        let control_len = 8 * (CKPT_WORD_RANK0 + join.ranks as u64);
        let control = match ctx.manager.lookup(tenant, &control_name) {
            Some(grant) => grant,
            None => {
                let alloc = Alloc {
                    size: control_len,
                    align: CKPT_CONTROL_ALIGN,
                    flags: ALLOC_FLAG_SHARED | ALLOC_FLAG_PERSISTENT,
                    name: control_name.clone(),
                };
                let grant = ctx.manager.allocate(client, &alloc)?;
                ctx.manager.release_hold(client, grant.handle);
                ctx.pool.zero(grant.offset, grant.size);
                grant
            }
        };
        if control.size < control_len {
            return refuse(
                Status::InvalidArgument,
                format!("group {:?} exists in the pool with fewer than {} ranks", join.group, join.ranks),
            );
        }
        let mut slots = [None, None];
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some(grant) = ctx.manager.lookup(tenant, &slot_name(&join.group, i)) {
                *slot = Some(Slot { offset: grant.offset, len: grant.size, handle: grant.handle });
            }
        }
        self.next_id += 1;
        let mut group = Group {
            id: self.next_id,
            tenant: tenant.to_string(),
            name: join.group.clone(),
            ranks: join.ranks,
            segment: if join.segment_bytes == 0 { CKPT_SEGMENT_DEFAULT } else { join.segment_bytes },
            in_flight: if join.in_flight == 0 { CKPT_IN_FLIGHT_DEFAULT } else { join.in_flight },
            timeout: Duration::from_millis(
                if join.timeout_ms == 0 { CKPT_TIMEOUT_MS_DEFAULT } else { join.timeout_ms } as u64,
            ),
            control: Slot { offset: control.offset, len: control.size, handle: control.handle },
            slots,
            peers: (0..join.ranks).map(|_| None).collect(),
            departed: vec![false; join.ranks as usize],
            complete_epoch: 0,
            last_started: 0,
            job: None,
            last_error: String::new(),
            last_status: Status::Ok,
            last_job_busy: Duration::ZERO,
            last_job_cpu: Duration::ZERO,
            restorer: None,
            staging: None,
        };
        group.recover_from_pool(ctx.pool);
        Ok(group)
    }
}

impl Group {
    pub(super) fn check_compatible(&self, join: &CkptJoin) -> Result<(), Refusal> {
        let seg = if join.segment_bytes == 0 { self.segment } else { join.segment_bytes };
        if join.ranks != self.ranks || seg != self.segment {
            return refuse(
                Status::InvalidArgument,
                format!(
                    "group {:?} has {} ranks and {}-byte segments; the join asks for {} and {}",
                    self.name, self.ranks, self.segment, join.ranks, seg
                ),
            );
        }
        Ok(())
    }
}

/// The joining rank as the engine will reach it: its endpoint, its remote key checked
/// against this UCX's layout, and (when UCX maps the buffer into the server) the buffer
/// checked to lie in the rank's own shared memory and faulted in.
fn checked_peer(
    ctx: &EngineCtx<'_>,
    caller: &Caller<'_>,
    previous: Option<Peer>,
    join: &CkptJoin,
) -> Result<Peer, Refusal> {
    let (endpoint, dedicated, worker_address) = rank_endpoint(ctx, caller.connection, previous, join)?;
    // UCX cannot validate a packed key (it reads it without a length), so it is checked
    // against this UCX's layout first; an empty buffer (a replacement rank that has not
    // learnt its size) carries none.
    let rkey = match (join.buffer_len, join.rkey.is_empty()) {
        (0, _) => None,
        (_, true) => return refuse(Status::InvalidArgument, format!("rank {} sent no remote key", join.rank)),
        (_, false) => Some(endpoint.unpack_peer_rkey(&join.rkey, ctx.rkey_layout).map_err(|e| Refusal {
            status: Status::InvalidArgument,
            message: format!("rank {}'s remote key: {e}", join.rank),
        })?),
    };
    if let Some(base) = rkey.as_ref().and_then(|k| k.local_ptr(join.buffer_addr)) {
        // UCX computes the pointer without bounds: the whole buffer must lie in one
        // shared mapping of the rank's, not in this server's own memory.
        mapping::check_rank_buffer(base, join.buffer_len, ctx.pool).map_err(|message| Refusal {
            status: Status::InvalidArgument,
            message: format!("rank {}'s buffer: {message}", join.rank),
        })?;
        prefault(base, join.buffer_len as usize, libc::MADV_POPULATE_READ);
    }
    Ok(Peer {
        client: caller.client,
        node: join.node.clone(),
        worker_address,
        dedicated,
        len: join.buffer_len,
        addr: join.buffer_addr,
        rkey,
        endpoint,
    })
}

/// The endpoint the engine pulls a joining rank's buffer through, whether it is the engine's
/// own, and the worker address it was made from. A rank on this server's host gets an
/// endpoint to its worker address (after [`nam_ucx::check_worker_address`]), without peer
/// failure detection so that UCX may use shared memory and map the buffer; any other rank
/// is reached through its client's own connection, so no address it sends reaches UCX.
/// A rank joining again keeps its endpoint (creating one costs a wire-up round trip).
pub(super) fn rank_endpoint(
    ctx: &EngineCtx<'_>,
    connection: &Endpoint,
    previous: Option<Peer>,
    join: &CkptJoin,
) -> Result<(Endpoint, bool, Vec<u8>), Refusal> {
    if join.host != nam_proto::host_id() {
        return Ok((connection.clone(), false, Vec::new()));
    }
    if let Some(p) = previous.filter(|p| p.dedicated && p.worker_address == join.worker_address) {
        let Peer { rkey, endpoint, .. } = p;
        drop(rkey);
        return Ok((endpoint, true, join.worker_address.clone()));
    }
    let endpoint = Endpoint::connect_to_peer_worker(ctx.worker, &join.worker_address, ctx.address_reference, false)
        .map_err(|e| match e {
            nam_ucx::Error::Malformed { .. } => {
                Refusal { status: Status::InvalidArgument, message: format!("rank {}: {e}", join.rank) }
            }
            e => Refusal { status: Status::CkptRankFailed, message: format!("cannot reach rank {}: {e}", join.rank) },
        })?;
    Ok((endpoint, true, join.worker_address.clone()))
}

pub(super) fn validate_join(join: &CkptJoin) -> Result<(), Refusal> {
    let bad = |m: String| refuse(Status::InvalidArgument, m);
    if join.group.is_empty() {
        return bad("empty group name".into());
    }
    if join.ranks == 0 || join.ranks > CKPT_RANKS_MAX {
        return bad(format!("a group has 1..={CKPT_RANKS_MAX} ranks, not {}", join.ranks));
    }
    if join.rank >= join.ranks {
        return bad(format!("rank {} is not in a group of {}", join.rank, join.ranks));
    }
    let seg = join.segment_bytes;
    if seg != 0 && (!(CKPT_SEGMENT_MIN..=CKPT_SEGMENT_MAX).contains(&seg) || !seg.is_multiple_of(16)) {
        return bad(format!("segment of {seg} bytes: use a multiple of 16 in {CKPT_SEGMENT_MIN}..={CKPT_SEGMENT_MAX}"));
    }
    if join.in_flight > CKPT_IN_FLIGHT_MAX {
        return bad(format!("{} GETs in flight exceed {CKPT_IN_FLIGHT_MAX}", join.in_flight));
    }
    if join.buffer_len > ALLOC_SIZE_MAX {
        return refuse(Status::TooLarge, format!("a {}-byte buffer exceeds {ALLOC_SIZE_MAX}", join.buffer_len));
    }
    Ok(())
}
