//! The checkpoint-parity engine (the CR unit of Schmidt 2017 §4.5, in software).
//!
//! Ranks join a group, handing the server their registered checkpoint buffer (address,
//! remote key, worker address). When a rank flags its buffer ready for epoch `e`, the engine
//! pulls it with RMA GETs ([`job`]), XORs equal segment indices of all ranks into a parity
//! slot in the pool ([`slot`]) and signals the rank in its control word once its last segment
//! is folded in. Two slots alternate (ping-pong), so a failure during generation leaves the
//! previous epoch restorable. A restore pulls the survivors, XORs them with the stored parity
//! and leaves the lost rank's buffer in a pool allocation its replacement reads.

pub mod fold;
pub mod job;
mod mapping;
pub mod slot;

use crate::manager::{Manager, Refusal};
use crate::pool::Pool;
use job::{Job, JobFailure, Purpose, RankSource, RestoreInto, RestoreTarget};
use nam_proto::ckpt::*;
use nam_proto::limits::*;
use nam_proto::{Alloc, AllocReply, Status, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED};
use nam_ucx::{Endpoint, Posted, RemoteKey, RkeyLayout, Worker};
use slot::{Slot, SlotHeader, SlotState};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What the engine needs from the server for one call.
pub struct EngineCtx<'a> {
    /// The allocation manager (slots and control blocks are allocations of the tenant).
    pub manager: &'a mut Manager,
    /// The pool.
    pub pool: &'a Pool,
    /// The server's worker, for endpoints to the ranks.
    pub worker: &'a Worker,
    /// The server worker's own packed address: a rank's address is checked against it.
    pub own_address: &'a [u8],
    /// The remote-key layout of the server's UCX context: a rank's key is checked against it.
    pub rkey_layout: &'a RkeyLayout,
    /// The endpoint of the requesting client's own connection (accepted from the listener).
    pub connection: &'a Endpoint,
}

struct Peer {
    client: u64,
    node: String,
    /// The checked worker address the dedicated endpoint was made from; empty when the
    /// engine uses the client's connection endpoint.
    worker_address: Vec<u8>,
    /// Whether `endpoint` is the engine's own (to a rank on this host, by its checked worker
    /// address) rather than the client's connection, which only the server closes.
    dedicated: bool,
    len: u64,
    addr: u64,
    // Field order: the key is released before its endpoint. `None` for an empty buffer.
    rkey: Option<RemoteKey>,
    endpoint: Endpoint,
}

struct Group {
    id: u64,
    tenant: String,
    name: String,
    ranks: u32,
    segment: u32,
    in_flight: u32,
    timeout: Duration,
    control: Slot,
    slots: [Option<Slot>; 2],
    peers: Vec<Option<Peer>>,
    /// Ranks whose process disconnected after joining (until they join again): an epoch
    /// refused for lack of them names a failed rank, not one that never came.
    departed: Vec<bool>,
    complete_epoch: u64,
    last_started: u64,
    job: Option<Job>,
    last_error: String,
    last_status: Status,
    last_job_busy: Duration,
    last_job_cpu: Duration,
    /// The client a running restore writes into an allocation of.
    restorer: Option<u64>,
}

/// GETs still in flight after their job ended, with the buffers UCX writes into: kept until
/// UCX completes them.
type Drain = Vec<(Posted, Vec<u8>)>;

/// Every checkpoint group of the server.
#[derive(Default)]
pub struct CkptEngine {
    groups: HashMap<u64, Group>,
    by_name: HashMap<(String, String), u64>,
    next_id: u64,
    /// GETs still in flight from failed jobs, with the buffers they write into.
    draining: Drain,
}

fn refuse<T>(status: Status, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal { status, message: message.into() })
}

fn slot_name(group: &str, i: usize) -> String {
    format!("{CKPT_NAME_PREFIX}{group}:parity{i}")
}

impl CkptEngine {
    /// Handles one checkpoint request of `client`.
    pub fn execute(&mut self, ctx: &mut EngineCtx<'_>, client: u64, request: CkptRequest) -> Result<Reply, Refusal> {
        match request {
            CkptRequest::Join(join) => self.join(ctx, client, join).map(Reply::Joined),
            CkptRequest::Ready { group_id, rank, epoch } => self.ready(ctx, client, group_id, rank, epoch),
            CkptRequest::Restore { group_id, lost_rank, epoch, flags } => {
                self.restore(ctx, client, group_id, lost_rank, epoch, flags)
            }
            CkptRequest::Query { group_id } => {
                let g = self.group(ctx, client, group_id)?;
                Ok(Reply::Info(CkptInfo {
                    complete_epoch: g.complete_epoch,
                    running_epoch: g.job.as_ref().map_or(0, |j| j.epoch),
                    joined: g.peers.iter().filter(|p| p.is_some()).count() as u32,
                    last_job_busy_us: g.last_job_busy.as_micros() as u64,
                    last_job_cpu_us: g.last_job_cpu.as_micros() as u64,
                    last_status: g.last_status,
                    last_error: g.last_error.clone(),
                }))
            }
            CkptRequest::Destroy { group_id } => self.destroy(ctx, client, group_id).map(|()| Reply::Done),
        }
    }

    fn group(&mut self, ctx: &EngineCtx<'_>, client: u64, group_id: u64) -> Result<&mut Group, Refusal> {
        let tenant = ctx.manager.tenant(client).unwrap_or_default().to_string();
        match self.groups.get_mut(&group_id) {
            Some(g) if g.tenant == tenant => Ok(g),
            _ => refuse(Status::InvalidArgument, format!("no checkpoint group {group_id} for this tenant")),
        }
    }

    fn join(&mut self, ctx: &mut EngineCtx<'_>, client: u64, join: CkptJoin) -> Result<CkptJoined, Refusal> {
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
        let (endpoint, dedicated, worker_address) = rank_endpoint(ctx, group.peers[join.rank as usize].take(), &join)?;
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
        let control_grant = ctx.manager.open(client, &format!("{CKPT_NAME_PREFIX}{}:control", join.group))?;
        let recorded_len = group.recorded_len(ctx.pool, join.rank);
        group.departed[join.rank as usize] = false;
        group.peers[join.rank as usize] = Some(Peer {
            client,
            node: join.node,
            worker_address,
            dedicated,
            len: join.buffer_len,
            addr: join.buffer_addr,
            rkey,
            endpoint,
        });
        Ok(CkptJoined {
            group_id: id,
            control: AllocReply {
                handle: control_grant.handle,
                size: control_grant.size,
                remote_addr: ctx.pool.remote_addr(control_grant.offset),
                flags: control_grant.flags,
                rkey: ctx.pool.rkey().to_vec(),
            },
            complete_epoch: group.complete_epoch,
            started_epoch: group.last_started,
            recorded_len,
        })
    }

    /// A new group, or one found in the pool (a file-backed pool after a restart).
    fn create_group(
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
                    align: 64,
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
        };
        group.recover_from_pool(ctx.pool);
        Ok(group)
    }

    fn ready(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        group_id: u64,
        rank: u32,
        epoch: u64,
    ) -> Result<Reply, Refusal> {
        let group = self.group(ctx, client, group_id)?;
        group.check_member(client, rank)?;
        if let Some(job) = &mut group.job {
            if job.epoch != epoch || !matches!(job.purpose, Purpose::Epoch) {
                return refuse(Status::CkptBusy, format!("group is working on epoch {}, not {epoch}", job.epoch));
            }
            if !job.flag_ready(rank) {
                return refuse(Status::CkptBusy, format!("rank {rank} already flagged epoch {epoch} ready"));
            }
            return Ok(Reply::Done);
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
        Ok(Reply::Done)
    }

    fn restore(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        group_id: u64,
        lost: u32,
        epoch: u64,
        flags: u32,
    ) -> Result<Reply, Refusal> {
        let group = self.group(ctx, client, group_id)?;
        if lost >= group.ranks {
            return refuse(Status::InvalidArgument, format!("rank {lost} is not in a group of {}", group.ranks));
        }
        if group.job.is_some() {
            return refuse(Status::CkptBusy, "the group is generating or restoring");
        }
        let epoch = if epoch == 0 { group.complete_epoch } else { epoch };
        let Some((slot, header)) = group.valid_slot(ctx.pool, epoch) else {
            return refuse(Status::CkptUnrecoverable, format!("no complete parity for epoch {epoch} in this group"));
        };
        let missing: Vec<u32> = (0..group.ranks).filter(|&r| r != lost && group.peers[r as usize].is_none()).collect();
        if !missing.is_empty() {
            return refuse(
                Status::CkptUnrecoverable,
                format!("ranks {lost} and {missing:?} are lost; XOR parity rebuilds only one rank per group"),
            );
        }
        for r in (0..group.ranks).filter(|&r| r != lost) {
            let (have, want) = (group.peers[r as usize].as_ref().expect("checked").len, header.sizes[r as usize]);
            if have != want {
                return refuse(
                    Status::InvalidArgument,
                    format!("rank {r}'s buffer is {have} bytes; its epoch-{epoch} checkpoint was {want}"),
                );
            }
        }
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
            let alloc = Alloc { size: lost_len.max(1), align: 4096, flags: 0, name: String::new() };
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
        Ok(match grant {
            None => Reply::Done,
            Some(grant) => Reply::Alloc(AllocReply {
                handle: grant.handle,
                size: grant.size,
                remote_addr: ctx.pool.remote_addr(grant.offset),
                flags: grant.flags,
                rkey: ctx.pool.rkey().to_vec(),
            }),
        })
    }

    fn destroy(&mut self, ctx: &mut EngineCtx<'_>, client: u64, group_id: u64) -> Result<(), Refusal> {
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

    /// Advances every running job; true if any made progress (a job waiting for ranks to
    /// flag ready lets the server sleep: their requests wake it).
    pub fn poll(&mut self, pool: &Pool) -> bool {
        self.draining.retain(|(posted, _)| match posted {
            Posted::Done => false,
            Posted::InFlight(request) => request.check().is_none(),
        });
        let mut busy = false;
        for group in self.groups.values_mut() {
            let (progressed, pending) = group.step(pool);
            busy |= progressed;
            self.draining.extend(pending.into_iter().flatten());
        }
        busy
    }

    /// A client disconnected: its ranks leave their groups, and a job still reading one of
    /// them fails now instead of at its deadline.
    pub fn client_gone(&mut self, pool: &Pool, client: u64) {
        for group in self.groups.values_mut() {
            // The restore target is that client's allocation, reclaimed after its lease: stop
            // writing into it now.
            if group.job.is_some() && group.restorer == Some(client) {
                let message = "the client that asked for the restore disconnected".to_string();
                let pending = group.fail(pool, JobFailure { status: Status::CkptRankFailed, message });
                self.draining.extend(pending);
            }
            for r in 0..group.ranks {
                let Some(peer) = &group.peers[r as usize] else { continue };
                if peer.client != client {
                    continue;
                }
                if group.job.as_ref().is_some_and(|j| j.rank_pending(r)) {
                    let message = format!("rank {r}'s process disconnected while the engine still had to read it");
                    let pending = group.fail(pool, JobFailure { status: Status::CkptRankFailed, message });
                    self.draining.extend(pending);
                }
                group.peers[r as usize] = None;
                group.departed[r as usize] = true;
            }
        }
    }
}

/// A checkpoint reply body, or a plain one.
pub enum Reply {
    /// To a join.
    Joined(CkptJoined),
    /// To a query.
    Info(CkptInfo),
    /// To a restore.
    Alloc(AllocReply),
    /// To ready and destroy.
    Done,
}

/// CPU time of this process so far, every thread (the engine folds with a thread pool).
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wakes the ranks sleeping on a control word (mapped into their processes through shared
/// memory, see nam-client's `futex` module) after it changed. A shared futex: the word's
/// page is shared memory, so the kernel matches sleepers in other processes; with none the
/// call costs a syscall, once per rank per epoch.
fn wake_sleepers(word: &std::sync::atomic::AtomicU64) {
    let low = if cfg!(target_endian = "little") {
        word.as_ptr() as *const u32
    } else {
        (word.as_ptr() as *const u32).wrapping_add(1)
    };
    // SAFETY: FUTEX_WAKE only looks the address up; it stays mapped (the control block).
    unsafe { libc::syscall(libc::SYS_futex, low, libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// Faults in the pages of `[base, base + len)` ahead of use (`MADV_POPULATE_*`, Linux 5.14):
/// a rank's mapped buffer and a new parity slot are read or written whole at every epoch,
/// and taking their page faults one by one inside the first epoch cost about half its time.
/// Best effort: an older kernel just faults them in later.
fn prefault(base: *mut u8, len: usize, advice: libc::c_int) {
    const PAGE: usize = 4096;
    let start = base as usize / PAGE * PAGE;
    let end = (base as usize + len).div_ceil(PAGE) * PAGE;
    // SAFETY: the range covers memory mapped into this process (a rank's buffer mapped by
    // UCX, or the pool); MADV_POPULATE_* only faults pages in, it never changes contents.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
    if rc != 0 {
        log::debug!("madvise(MADV_POPULATE) failed: {}", std::io::Error::last_os_error());
    }
}

/// The endpoint the engine pulls a joining rank's buffer through, whether it is the engine's
/// own, and the worker address it was made from. A rank on this server's host gets an
/// endpoint to its worker address (after [`nam_ucx::check_worker_address`]), without peer
/// failure detection so that UCX may use shared memory and map the buffer; any other rank
/// is reached through its client's own connection, so no address it sends reaches UCX.
/// A rank joining again keeps its endpoint (creating one costs a wire-up round trip).
fn rank_endpoint(
    ctx: &EngineCtx<'_>,
    previous: Option<Peer>,
    join: &CkptJoin,
) -> Result<(Endpoint, bool, Vec<u8>), Refusal> {
    if join.host != nam_proto::host_id() {
        return Ok((ctx.connection.clone(), false, Vec::new()));
    }
    if let Some(p) = previous.filter(|p| p.dedicated && p.worker_address == join.worker_address) {
        let Peer { rkey, endpoint, .. } = p;
        drop(rkey);
        return Ok((endpoint, true, join.worker_address.clone()));
    }
    let endpoint = Endpoint::connect_to_peer_worker(ctx.worker, &join.worker_address, ctx.own_address, false).map_err(
        |e| match e {
            nam_ucx::Error::Malformed { .. } => {
                Refusal { status: Status::InvalidArgument, message: format!("rank {}: {e}", join.rank) }
            }
            e => Refusal { status: Status::CkptRankFailed, message: format!("cannot reach rank {}: {e}", join.rank) },
        },
    )?;
    Ok((endpoint, true, join.worker_address.clone()))
}

fn validate_join(join: &CkptJoin) -> Result<(), Refusal> {
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

impl Group {
    fn check_compatible(&self, join: &CkptJoin) -> Result<(), Refusal> {
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

    fn check_member(&self, client: u64, rank: u32) -> Result<(), Refusal> {
        match self.peers.get(rank as usize) {
            Some(Some(p)) if p.client == client => Ok(()),
            Some(_) => {
                refuse(Status::InvalidArgument, format!("rank {rank} of this group is not joined by this client"))
            }
            None => refuse(Status::InvalidArgument, format!("rank {rank} is not in a group of {}", self.ranks)),
        }
    }

    fn write_word(&self, pool: &Pool, word: u64, value: u64) {
        let word = pool.word(self.control.offset + 8 * word);
        word.store(value, std::sync::atomic::Ordering::SeqCst);
        wake_sleepers(word);
    }

    /// After a restart from a file-backed pool: the newest valid slot is the complete epoch.
    fn recover_from_pool(&mut self, pool: &Pool) {
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

    fn valid_slot(&self, pool: &Pool, epoch: u64) -> Option<(Slot, SlotHeader)> {
        self.slots.iter().flatten().find_map(|s| {
            let h = s.read_header(pool)?;
            (h.state == SlotState::Valid && h.epoch == epoch && epoch != 0).then(|| (s.clone(), h))
        })
    }

    fn recorded_len(&self, pool: &Pool, rank: u32) -> u64 {
        self.valid_slot(pool, self.complete_epoch).map_or(0, |(_, h)| h.sizes[rank as usize])
    }

    /// The slot for a new epoch: never the one holding the complete epoch. Grown (freed and
    /// allocated again) when the ranks' buffers no longer fit.
    fn prepare_slot(
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
    fn ensure_slot(
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
        let alloc =
            Alloc { size: header.slot_len(), align: 4096, flags: ALLOC_FLAG_SHARED | ALLOC_FLAG_PERSISTENT, name };
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

    /// The rebuilt buffer of a restore job, where it is in this process now.
    fn restore_target(&self, pool: &Pool, job: &Job) -> Option<RestoreTarget> {
        Self::resolve_target(&self.peers, pool, job)
    }

    fn resolve_target(peers: &[Option<Peer>], pool: &Pool, job: &Job) -> Option<RestoreTarget> {
        let Purpose::Restore { lost, into } = job.purpose else { return None };
        let len = job.header.sizes[lost as usize] as usize;
        let base = match into {
            // SAFETY: the allocation is the requester's, of at least `len` bytes, in the pool.
            RestoreInto::Pool(offset) => unsafe { pool.base_ptr().add(offset as usize) },
            RestoreInto::RankBuffer => {
                let peer = peers[lost as usize].as_ref()?;
                peer.rkey.as_ref()?.local_ptr(peer.addr)?
            }
        };
        Some(RestoreTarget { base, len })
    }

    /// Advances the job: whether it progressed, and the GETs to drain if it failed.
    fn step(&mut self, pool: &Pool) -> (bool, Option<Drain>) {
        let Some(job) = self.job.as_mut() else { return (false, None) };
        let sources: Vec<Option<RankSource<'_>>> = self
            .peers
            .iter()
            .map(|p| {
                let p = p.as_ref()?;
                Some(RankSource { endpoint: &p.endpoint, rkey: p.rkey.as_ref()?, addr: p.addr })
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

    fn finish(&mut self, pool: &Pool) -> Option<Drain> {
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
                    "group {:?}: rank {lost} rebuilt from epoch {} in {:?} ({:?} of work)",
                    self.name,
                    job.epoch,
                    job.started.elapsed(),
                    job.busy
                );
            }
        }
        self.job = None;
        None
    }

    /// Ends the running job with `failure`: the slot being written is marked empty (the
    /// other one still holds the last complete epoch), every waiting rank gets the status.
    fn fail(&mut self, pool: &Pool, failure: JobFailure) -> Drain {
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
