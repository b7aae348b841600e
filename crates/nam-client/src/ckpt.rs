//! Checkpoint groups: a rank's side of the server's XOR-parity engine (NAM-XOR).
//!
//! A rank [`Client::ckpt_join`]s a group with the size of its checkpoint buffer. The buffer is
//! memory the library maps with UCX ([`CkptMember::buffer_mut`]), so the server can pull it
//! one-sided: through shared memory on the same host, RDMA between hosts, and emulated RMA
//! over TCP (which needs this process to progress: [`CkptMember::test`] and
//! [`CkptMember::wait`] do). An application whose state already lives in arrays of its own
//! joins with them instead ([`Client::ckpt_join_in`]): they are registered in place, as FTI
//! and VeloC protect an application's arrays, and the server pulls them without a copy into
//! a library buffer. The rank writes its checkpoint into the buffer, flags it
//! [`CkptMember::ready`] (non-blocking) and must not change it until [`CkptMember::wait`]
//! says the server has folded it into the parity. After a failure, the surviving ranks load
//! their checkpoints back into their buffers and one rank asks for a
//! [`CkptMember::restore`] of the lost one; the rebuilt bytes land in a server allocation the
//! replacement reads ([`CkptMember::fetch_restored`]). A replacement that asks itself
//! ([`CkptMember::restore_own`]) gets them straight in its buffer when the server maps it,
//! with no copy ([`CkptMember::finish_restore`]).

use crate::allocation::Allocation;
use crate::client::Client;
use crate::constants::{
    CKPT_FUTEX_SAFETY, CKPT_GROUP_POLL_MAX, CKPT_PULL_POLL_MAX, CKPT_QUERY_INTERVAL, CKPT_SPIN_POLLS, POLL_BACKOFF_STEP,
};
use crate::error::{Error, Result};
use nam_proto::ckpt::*;
use nam_proto::{Reply, Request, Status};
use nam_ucx::MemRegion;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the server writes a restore this rank asked for ([`CkptMember::restore_own`]).
#[derive(Debug)]
pub enum Restoring {
    /// Straight into this rank's group buffer (the server maps it, or PUTs the verified
    /// bytes into it).
    InBuffer,
    /// Into this allocation, copied into the buffer by [`CkptMember::finish_restore`].
    Allocation(Allocation),
}

/// The group a rank joins and how the server pulls it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// Group name, unique in the tenant.
    pub name: String,
    /// Ranks in the group.
    pub ranks: u32,
    /// Index of the server (in the client's list) that keeps the group's parity.
    pub server: usize,
    /// Bytes per GET; 0 for the server's default ([`CKPT_SEGMENT_DEFAULT`]).
    pub segment_bytes: u32,
    /// GETs in flight per rank; 0 for the default ([`CKPT_IN_FLIGHT_DEFAULT`]).
    pub in_flight: u32,
    /// Deadline for all ranks to flag an epoch ready, and for a restore; zero for the default.
    pub timeout: Duration,
    /// This rank's node identity: ranks of one node never share a group (`NAM_NODE_ID`,
    /// else the host name).
    pub node: String,
}

impl GroupSpec {
    /// A group `name` of `ranks` ranks on server 0 with default tuning.
    pub fn new(name: &str, ranks: u32) -> GroupSpec {
        GroupSpec {
            name: name.into(),
            ranks,
            server: 0,
            segment_bytes: 0,
            in_flight: 0,
            timeout: Duration::ZERO,
            node: node_id(),
        }
    }
}

/// This process's node identity: `NAM_NODE_ID` if set (so one machine can play several
/// nodes), else the host name.
pub fn node_id() -> String {
    std::env::var("NAM_NODE_ID").unwrap_or_else(|_| nam_proto::host_id().split('/').next().unwrap_or("").to_string())
}

/// How a member holds its client: borrowed ([`Client::ckpt_join`]) or shared
/// ([`Client::ckpt_join_shared`], for a member that lives as long as its owner wants, such as
/// a checkpoint library's scheme that holds the client itself).
#[derive(Clone)]
enum ClientRef<'c> {
    Borrowed(&'c Client),
    Shared(Arc<Client>),
}

impl std::ops::Deref for ClientRef<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        match self {
            ClientRef::Borrowed(client) => client,
            ClientRef::Shared(client) => client,
        }
    }
}

/// One rank's membership of a checkpoint group.
pub struct CkptMember<'c> {
    client: ClientRef<'c>,
    spec: GroupSpec,
    rank: u32,
    group_id: u64,
    control: Allocation,
    region: Option<MemRegion>,
    len: usize,
    /// Last epoch this rank flagged ready (or the group's complete epoch at join).
    epoch: u64,
    /// Whether the server may still be reading the buffer.
    in_flight: bool,
    joined_complete_epoch: u64,
    recorded_len: u64,
    /// The buffer is the application's own memory, registered in place (fixed size).
    in_place: bool,
}

/// The memory a rank joins with.
#[derive(Clone, Copy)]
enum BufferSource {
    /// A buffer of this many bytes that UCX allocates (shared memory where it can).
    Mapped(usize),
    /// The application's memory, registered where it is.
    InPlace(*mut u8, usize),
}

impl Client {
    /// Deletes checkpoint group `name` of this client's tenant on server `server` (its index
    /// in the configuration), parity and all, and returns the group as the server listed it.
    /// A group outlives the job that made it, so that a restarted job can restore from it;
    /// this removes one no job needs any more (`nam ckpt drop`). Refused while the group is
    /// generating or restoring, and for another tenant's group (the server checks).
    pub fn ckpt_drop(&self, server: usize, name: &str) -> Result<CkptGroupStatus> {
        let addr = *self.config().servers.get(server).ok_or(Error::InvalidArgument("no such server index"))?;
        let status = self.status(server)?;
        let tenant = &self.config().tenant;
        let listed = status.ckpt_groups.len();
        let Some(group) = status.ckpt_groups.into_iter().find(|g| g.name == name && g.tenant == *tenant) else {
            return Err(Error::Refused {
                addr,
                what: "checkpoint drop",
                status: Status::NameNotFound,
                message: format!(
                    "no checkpoint group {name:?} of tenant {tenant:?} among the {listed} listed (of {} on the server)",
                    status.ckpt_groups_total
                ),
            });
        };
        let request = Request::Ckpt(CkptRequest::Destroy { group_id: group.id });
        let timeout = self.config().timeout;
        self.lock().call_waiting(server, &request, ("checkpoint drop", timeout), true)?;
        Ok(group)
    }

    /// Joins (or creates) the checkpoint group `spec` as `rank`, with a checkpoint buffer of
    /// `buffer_len` bytes mapped for the server to pull. A replacement rank that does not
    /// know its size yet passes 0, restores, then [`CkptMember::resize`]s.
    pub fn ckpt_join(&self, spec: &GroupSpec, rank: u32, buffer_len: usize) -> Result<CkptMember<'_>> {
        let mut member = CkptMember::new(ClientRef::Borrowed(self), spec, rank, false)?;
        member.register(BufferSource::Mapped(buffer_len))?;
        Ok(member)
    }

    /// As [`Client::ckpt_join`], the member holding a share of the client instead of a
    /// borrow, so it can live beside the client in one owner.
    pub fn ckpt_join_shared(
        self: &Arc<Self>,
        spec: &GroupSpec,
        rank: u32,
        buffer_len: usize,
    ) -> Result<CkptMember<'static>> {
        let mut member = CkptMember::new(ClientRef::Shared(Arc::clone(self)), spec, rank, false)?;
        member.register(BufferSource::Mapped(buffer_len))?;
        Ok(member)
    }

    /// Joins (or creates) the checkpoint group `spec` as `rank` with the application's own
    /// `buffer` as its checkpoint buffer, registered with UCX where it is: the server pulls
    /// the application's data with no copy into a library buffer, as FTI and VeloC protect an
    /// application's arrays in place. The member borrows the buffer for its life; write it
    /// through [`CkptMember::buffer_mut`], which refuses while the server may still read it.
    /// The buffer keeps its size ([`CkptMember::resize`] is refused). Over shared memory the
    /// server cannot map it, as it maps a [`Client::ckpt_join`] buffer (which UCX allocates
    /// in shared memory) and reads it with its own loads: its GETs then go through
    /// cross-memory attach (CMA) where the kernel lets the server `ptrace` this process, and
    /// where it does not, UCX emulates them with messages this process answers (the waits
    /// of this member progress for them).
    pub fn ckpt_join_in<'m>(&'m self, spec: &GroupSpec, rank: u32, buffer: &'m mut [u8]) -> Result<CkptMember<'m>> {
        Self::check_in_place(buffer)?;
        let mut member = CkptMember::new(ClientRef::Borrowed(self), spec, rank, true)?;
        member.register(BufferSource::InPlace(buffer.as_mut_ptr(), buffer.len()))?;
        Ok(member)
    }

    /// As [`Client::ckpt_join_in`], the member holding a share of the client instead of a
    /// borrow (the buffer must then live for the program: `'static`).
    pub fn ckpt_join_in_shared(
        self: &Arc<Self>,
        spec: &GroupSpec,
        rank: u32,
        buffer: &'static mut [u8],
    ) -> Result<CkptMember<'static>> {
        Self::check_in_place(buffer)?;
        let mut member = CkptMember::new(ClientRef::Shared(Arc::clone(self)), spec, rank, true)?;
        member.register(BufferSource::InPlace(buffer.as_mut_ptr(), buffer.len()))?;
        Ok(member)
    }

    /// Refuses an empty in-place buffer.
    fn check_in_place(buffer: &[u8]) -> Result<()> {
        if buffer.is_empty() {
            return Err(Error::InvalidArgument(
                "an application's checkpoint buffer must not be empty (a replacement that does not know its size joins with ckpt_join and 0 bytes)",
            ));
        }
        Ok(())
    }
}

impl<'c> CkptMember<'c> {
    /// A member of `spec` not joined yet.
    fn new(client: ClientRef<'c>, spec: &GroupSpec, rank: u32, in_place: bool) -> Result<CkptMember<'c>> {
        if spec.server >= client.server_count() {
            return Err(Error::InvalidArgument("checkpoint group on a server index that is not configured"));
        }
        Ok(CkptMember {
            client,
            spec: spec.clone(),
            rank,
            group_id: 0,
            control: Allocation::placeholder(),
            region: None,
            len: 0,
            epoch: 0,
            in_flight: false,
            joined_complete_epoch: 0,
            recorded_len: 0,
            in_place,
        })
    }

    /// Maps or registers the buffer `source` and (re)joins the group with it.
    fn register(&mut self, source: BufferSource) -> Result<()> {
        let server = self.spec.server;
        let len = match source {
            BufferSource::Mapped(len) | BufferSource::InPlace(_, len) => len,
        };
        let (region, rkey, worker_address) = {
            let inner = self.client.lock();
            let addr = inner.links[server].addr;
            let transport = |what| move |source| Error::Transport { addr, what, source };
            let region = match source {
                BufferSource::Mapped(0) => None,
                BufferSource::Mapped(len) => {
                    let region =
                        MemRegion::allocate(&inner.context, len).map_err(transport("mapping the checkpoint buffer"))?;
                    // SAFETY: UCX mapped `len` writable bytes at region.address(). Zeroed once
                    // so a new buffer never shows old memory, and before the join: the server
                    // faults the buffer in while it handles the join, and pages this process
                    // has already touched are only mapped there, not allocated (512 MiB of
                    // untouched pages on eight ranks at once outlasted the join's deadline on
                    // a fresh machine).
                    unsafe { std::ptr::write_bytes(region.address(), 0, len) };
                    Some(region)
                }
                BufferSource::InPlace(at, len) => {
                    // SAFETY: the application's buffer outlives the member (its borrow in
                    // `ckpt_join_in`), and the region is dropped with the member.
                    let region = unsafe { MemRegion::register(&inner.context, at, len) }
                        .map_err(transport("registering the checkpoint buffer"))?;
                    if region.address() != at || region.len() < len {
                        return Err(Error::InvalidArgument("UCX registered the checkpoint buffer at another address"));
                    }
                    Some(region)
                }
            };
            let rkey = match &region {
                Some(r) => r.pack_rkey().map_err(transport("packing the checkpoint buffer's key"))?,
                None => Vec::new(),
            };
            (region, rkey, inner.worker.address().map_err(transport("querying the worker address"))?)
        };
        let join = CkptJoin {
            group: self.spec.name.clone(),
            ranks: self.spec.ranks,
            rank: self.rank,
            segment_bytes: self.spec.segment_bytes,
            in_flight: self.spec.in_flight,
            timeout_ms: self.spec.timeout.as_millis().min(u32::MAX as u128) as u32,
            node: self.spec.node.clone(),
            host: nam_proto::host_id(),
            buffer_len: len as u64,
            buffer_addr: region.as_ref().map_or(0, |r| r.address() as u64),
            rkey,
            worker_address,
        };
        let timeout = self.client.config().timeout;
        let mut inner = self.client.lock();
        let reply = inner.call(server, &Request::Ckpt(CkptRequest::Join(join)), "checkpoint join", timeout)?;
        let Reply::Ckpt(CkptReply::Joined(joined)) = reply else {
            return Err(Error::UnexpectedReply { addr: inner.links[server].addr, what: "checkpoint join" });
        };
        self.control = inner.adopt(server, joined.control)?;
        drop(inner);
        self.group_id = joined.group_id;
        self.joined_complete_epoch = joined.complete_epoch;
        self.recorded_len = joined.recorded_len;
        self.epoch = joined.started_epoch.max(self.epoch);
        self.region = region;
        self.len = len;
        Ok(())
    }

    /// Joins again with a buffer of `len` bytes (contents start zeroed). Only between epochs,
    /// and not for an application's buffer registered in place ([`Client::ckpt_join_in`]),
    /// whose size is the application's.
    pub fn resize(&mut self, len: usize) -> Result<()> {
        self.ensure_idle()?;
        if self.in_place {
            return Err(Error::InvalidArgument(
                "an application's checkpoint buffer registered in place keeps its size; join again with one of the new size",
            ));
        }
        self.register(BufferSource::Mapped(len))
    }

    /// Whether the buffer is the application's own memory ([`Client::ckpt_join_in`]).
    pub fn in_place(&self) -> bool {
        self.in_place
    }

    /// The last epoch this rank flagged ready (or the complete epoch when it joined).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the group.
    pub fn ranks(&self) -> u32 {
        self.spec.ranks
    }

    /// The newest complete epoch when this rank joined (after a server restart from a
    /// file-backed pool, the one the pool still holds).
    pub fn complete_epoch_at_join(&self) -> u64 {
        self.joined_complete_epoch
    }

    /// The size the group recorded for this rank in that epoch (0 if none).
    pub fn recorded_len(&self) -> u64 {
        self.recorded_len
    }

    /// The checkpoint buffer, read-only (always allowed).
    pub fn buffer(&self) -> &[u8] {
        match &self.region {
            // SAFETY: the region maps `len` bytes for as long as it lives; only shared
            // access is handed out here.
            Some(r) => unsafe { std::slice::from_raw_parts(r.address(), self.len) },
            None => &[],
        }
    }

    /// The checkpoint buffer to write the next checkpoint into. Refused while the server
    /// may still be reading the previous one ([`Status::CkptBusy`]); [`CkptMember::wait`] first.
    pub fn buffer_mut(&mut self) -> Result<&mut [u8]> {
        self.ensure_idle()?;
        Ok(match &self.region {
            // SAFETY: as in `buffer`; `&mut self` makes this the only reference.
            Some(r) => unsafe { std::slice::from_raw_parts_mut(r.address(), self.len) },
            None => &mut [],
        })
    }

    /// Whether the server reaches this rank through shared memory (the control block is
    /// mapped here) and maps its buffer (one the library allocated): it then reads the buffer
    /// in place, and this process need not progress for it. Elsewhere UCX may emulate the
    /// server's GETs with messages this process must answer, so a rank must keep calling into
    /// the library while the server reads it. (An application's buffer registered in place
    /// is read with CMA over shared memory where the kernel permits it, and with emulated
    /// GETs that need this process's progress where it does not: never in place.)
    pub fn served_in_place(&self) -> bool {
        self.control.is_direct() && !self.in_place
    }

    /// How long a wait may sleep while the server may still read this rank's buffer: when
    /// the server reads it in place, as long as once the group is pulled; elsewhere UCX may
    /// emulate the server's GETs with messages this process must answer.
    fn pull_poll_max(&self) -> Duration {
        if self.served_in_place() {
            CKPT_GROUP_POLL_MAX
        } else {
            CKPT_PULL_POLL_MAX
        }
    }

    fn ensure_idle(&self) -> Result<()> {
        if self.in_flight {
            return Err(self.local_error(
                Status::CkptBusy,
                format!("epoch {} is still being pulled; wait before changing the buffer", self.epoch),
            ));
        }
        Ok(())
    }

    fn local_error(&self, status: Status, message: String) -> Error {
        Error::Refused { addr: self.client.config().servers[self.spec.server], what: "checkpoint", status, message }
    }

    /// Flags the buffer ready for the next epoch and returns that epoch's number. Returns at
    /// once; the server pulls the buffer in the background.
    pub fn ready(&mut self) -> Result<u64> {
        self.ready_epoch(self.epoch + 1)
    }

    /// Like [`CkptMember::ready`] for an explicit epoch number, which every rank of the
    /// group must use (the MPI layer agrees on it collectively, so a rank that missed a
    /// failed epoch catches up).
    pub fn ready_epoch(&mut self, epoch: u64) -> Result<u64> {
        self.ensure_idle()?;
        let request = CkptRequest::Ready { group_id: self.group_id, rank: self.rank, epoch };
        self.call(request, "checkpoint ready")?;
        self.epoch = epoch;
        self.in_flight = true;
        Ok(epoch)
    }

    fn call(&self, request: CkptRequest, what: &'static str) -> Result<Reply> {
        let timeout = self.client.config().timeout;
        // The server answers between steps of folding parity, which take milliseconds.
        self.client.lock().call_waiting(self.spec.server, &Request::Ckpt(request), (what, timeout), true)
    }

    /// Whether the server has folded this rank's buffer into the parity of the epoch last
    /// flagged ready; an error if that epoch failed.
    pub fn test(&mut self) -> Result<bool> {
        if !self.in_flight {
            return Ok(true);
        }
        let word = CkptWord(self.client.fetch(&self.control, 8 * (CKPT_WORD_RANK0 + self.rank as u64))?);
        self.settle(word)
    }

    /// [`CkptMember::test`] on a value of this rank's control word already read.
    fn settle(&mut self, word: CkptWord) -> Result<bool> {
        if !self.in_flight {
            return Ok(true);
        }
        if word.epoch() != self.epoch {
            return Ok(false);
        }
        self.in_flight = false;
        match word.failure() {
            None => Ok(true),
            Some(status) => Err(self.failure(status, "checkpoint epoch")),
        }
    }

    /// Waits until [`CkptMember::test`] is true, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        let mut polls = 0u32;
        let own = CKPT_WORD_RANK0 + self.rank as u64;
        loop {
            // The value tested is the one slept on: a change after this read ends the sleep.
            let seen = self.client.fetch(&self.control, 8 * own)?;
            if self.settle(CkptWord(seen))? {
                return Ok(self.epoch);
            }
            if Instant::now() >= deadline {
                return Err(self
                    .local_error(Status::CkptTimeout, format!("epoch {} not pulled within {timeout:?}", self.epoch)));
            }
            self.sleep_on(own, seen, &mut polls, self.pull_poll_max());
        }
    }

    /// Waits until the group's parity of `epoch` is complete (every rank pulled), at most
    /// `timeout`. Fails if the epoch failed.
    pub fn wait_complete(&self, epoch: u64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut polls = 0u32;
        let mut next_query = Instant::now() + CKPT_QUERY_INTERVAL;
        loop {
            let complete = self.complete_epoch()?;
            if complete >= epoch {
                return Ok(());
            }
            let own = CkptWord(self.client.fetch(&self.control, 8 * (CKPT_WORD_RANK0 + self.rank as u64))?);
            if own.epoch() == epoch {
                if let Some(status) = own.failure() {
                    return Err(self.failure(status, "checkpoint epoch"));
                }
            }
            // Another rank's failure shows only in the group's state: ask now and then, not
            // on every poll (a control round trip costs the server and this core).
            if Instant::now() >= next_query {
                next_query = Instant::now() + CKPT_QUERY_INTERVAL;
                let info = self.query()?;
                if info.running_epoch != epoch && info.complete_epoch < epoch {
                    let status = if info.last_status == Status::Ok { Status::CkptRankFailed } else { info.last_status };
                    let message =
                        if info.last_error.is_empty() { format!("epoch {epoch} failed") } else { info.last_error };
                    return Err(self.local_error(status, message));
                }
            }
            if Instant::now() >= deadline {
                return Err(self.local_error(
                    Status::CkptTimeout,
                    format!("parity of epoch {epoch} not complete within {timeout:?}"),
                ));
            }
            self.sleep_on(CKPT_WORD_COMPLETE, complete, &mut polls, CKPT_GROUP_POLL_MAX);
        }
    }

    /// Sleeps until control word `index` may have changed from `seen`: on the word itself
    /// when the control block is mapped here and the buffer is the library's (the server
    /// wakes it; bounded by [`CKPT_FUTEX_SAFETY`] and the next query), else polling with a
    /// growing backoff up to `max` (over the network, and for an application's buffer
    /// registered in place, this process must progress).
    fn sleep_on(&self, index: u64, seen: u64, polls: &mut u32, max: Duration) {
        match self.control.local_word(8 * index) {
            Some(word) if !self.in_place => crate::futex::wait(word, seen, CKPT_FUTEX_SAFETY),
            // The server reads an application's buffer with GETs that UCX emulates with
            // messages where CMA is not permitted: this process must progress for them, and
            // reading the mapped word does not.
            Some(_) => {
                self.client.lock().worker.progress();
                backoff(polls, max)
            }
            None => self.progress_and_sleep(polls, max),
        }
    }

    /// A wait over the network: the server's GETs of this rank's buffer and a pushed
    /// restore's PUTs into it travel as messages that only this process's progress serves
    /// over TCP (UCX emulates RMA there). Sleeping a fixed backoff let the socket fill and
    /// stalled the server's transfer for the rest of each sleep; sleeping on the worker's
    /// event fd (up to `max`) wakes the rank as soon as a message arrives, and costs it no
    /// CPU while none does. A `max` under 1 ms ([`CKPT_PULL_POLL_MAX`], while the buffer is
    /// being pulled or pushed) does not sleep at all ([`nam_ucx::Worker::wait_for_events`]):
    /// the rank keeps progressing, which is what the transfer needs then.
    fn progress_and_sleep(&self, polls: &mut u32, max: Duration) {
        let inner = self.client.lock();
        while inner.worker.progress() > 0 {}
        *polls = polls.saturating_add(1);
        if *polls <= CKPT_SPIN_POLLS {
            drop(inner);
            std::thread::yield_now();
        } else if inner.worker.wait_for_events(max).is_err() {
            drop(inner);
            backoff(polls, max);
        }
    }

    /// The newest epoch whose parity is complete.
    pub fn complete_epoch(&self) -> Result<u64> {
        self.client.fetch(&self.control, 8 * CKPT_WORD_COMPLETE)
    }

    /// The group's state and its last error.
    pub fn query(&self) -> Result<CkptInfo> {
        match self.call(CkptRequest::Query { group_id: self.group_id }, "checkpoint query")? {
            Reply::Ckpt(CkptReply::Info(info)) => Ok(info),
            _ => Err(self.unexpected("query")),
        }
    }

    /// An error for a failure signalled in a control word, with the server's explanation.
    fn failure(&self, status: Status, what: &'static str) -> Error {
        let message = self.query().map(|i| i.last_error).unwrap_or_else(|e| e.to_string());
        Error::Refused { addr: self.client.config().servers[self.spec.server], what, status, message }
    }

    /// Asks the server to rebuild `lost_rank`'s checkpoint of `epoch` (0: the newest
    /// complete) from the other ranks' buffers, which must hold that epoch's checkpoints, and
    /// the parity. Returns the allocation the rebuilt bytes are written to; wait with
    /// [`CkptMember::wait_restore`]. Every other rank must stay joined and leave its buffer
    /// unchanged until then.
    pub fn restore(&self, lost_rank: u32, epoch: u64) -> Result<Allocation> {
        match self.request_restore(lost_rank, epoch, 0)? {
            Restoring::Allocation(allocation) => Ok(allocation),
            Restoring::InBuffer => Err(self.unexpected("restore")),
        }
    }

    /// The replacement's restore: asks the server to rebuild this rank's own checkpoint of
    /// `epoch` (0: the newest complete). The buffer must have this rank's size in that epoch
    /// ([`CkptMember::recorded_len`] after the join, or [`CkptMember::resize`]). When the
    /// server maps the buffer (same host) it writes the rebuilt bytes straight into it;
    /// elsewhere it PUTs them into it as they are verified ([`Restoring::InBuffer`] either
    /// way), or, for a buffer it cannot reach, into an allocation. Either way, finish with
    /// [`CkptMember::finish_restore`], which waits progressing, as the PUTs need over TCP.
    pub fn restore_own(&mut self, epoch: u64) -> Result<Restoring> {
        self.ensure_idle()?;
        self.request_restore(self.rank, epoch, CKPT_RESTORE_INTO_BUFFER)
    }

    /// Waits for a [`CkptMember::restore_own`] (at most `timeout`) and, if the server wrote
    /// an allocation, copies it into the buffer and frees it. Returns the epoch restored.
    pub fn finish_restore(&mut self, restoring: Restoring, timeout: Duration) -> Result<u64> {
        let epoch = self.wait_restore(timeout)?;
        if let Restoring::Allocation(allocation) = restoring {
            self.fetch_restored(&allocation, self.len as u64)?;
        }
        Ok(epoch)
    }

    fn request_restore(&self, lost_rank: u32, epoch: u64, flags: u32) -> Result<Restoring> {
        let request = CkptRequest::Restore { group_id: self.group_id, lost_rank, epoch, flags };
        let timeout = self.client.config().timeout;
        let mut inner = self.client.lock();
        match inner.call_waiting(self.spec.server, &Request::Ckpt(request), ("checkpoint restore", timeout), true)? {
            Reply::Alloc(grant) => inner.adopt(self.spec.server, grant).map(Restoring::Allocation),
            Reply::Done => Ok(Restoring::InBuffer),
            _ => Err(Error::UnexpectedReply { addr: inner.links[self.spec.server].addr, what: "restore" }),
        }
    }

    fn unexpected(&self, what: &'static str) -> Error {
        Error::UnexpectedReply { addr: self.client.config().servers[self.spec.server], what }
    }

    /// Waits until the running restore is finished (checksums verified), at most `timeout`.
    /// Any rank of the group may wait; survivors wait before changing their buffers.
    pub fn wait_restore(&self, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        let mut polls = 0u32;
        loop {
            let word = CkptWord(self.client.fetch(&self.control, 8 * CKPT_WORD_RESTORE)?);
            if word.0 != 0 {
                return match word.failure() {
                    None => Ok(word.epoch()),
                    Some(status) => Err(self.failure(status, "checkpoint restore")),
                };
            }
            if Instant::now() >= deadline {
                return Err(self.local_error(Status::CkptTimeout, format!("restore not finished within {timeout:?}")));
            }
            self.sleep_on(CKPT_WORD_RESTORE, word.0, &mut polls, self.pull_poll_max());
        }
    }

    /// Copies a finished restore's bytes into this rank's buffer (resizing it to fit) and
    /// frees the server allocation.
    pub fn fetch_restored(&mut self, restored: &Allocation, len: u64) -> Result<()> {
        if len > restored.size() {
            return Err(Error::InvalidArgument("restored length exceeds the restore allocation"));
        }
        if self.len as u64 != len {
            self.resize(len as usize)?;
        }
        let client = self.client.clone();
        client.get(restored, 0, self.buffer_mut()?)?;
        client.free(restored)
    }

    /// Deletes the group and its parity on the server.
    pub fn destroy(self) -> Result<()> {
        self.call(CkptRequest::Destroy { group_id: self.group_id }, "checkpoint destroy").map(|_| ())
    }
}

/// Sleeps a little longer on every poll, up to `max`: a waiting rank should leave its core
/// to the server and the other ranks (measured: waking every 0.2 ms cost a rank ~5 ms of CPU
/// per checkpoint on an oversubscribed node).
fn backoff(polls: &mut u32, max: Duration) {
    *polls = polls.saturating_add(1);
    if *polls > CKPT_SPIN_POLLS {
        std::thread::sleep((POLL_BACKOFF_STEP * *polls).min(max));
    } else {
        std::thread::yield_now();
    }
}
