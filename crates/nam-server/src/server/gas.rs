//! The server's side of the global address space and of allreduce: domain queries, address
//! resolution with the protection-domain check, and allreduce groups (attach, kick, and
//! the polling of their rounds from the progress loop).

use super::Server;
use crate::manager::Refusal;
use crate::pool::Pool;
use crate::reduce::{aborted_word, judge, reduce_into, Group, Verdict};
use nam_proto::gas::{DomainReply, GasRequest, REDUCE_CHUNK_MAX, REDUCE_RANKS_MAX};
use nam_proto::reduce::{
    Descriptor, GroupLayout, GROUP_ARRIVED_AT, GROUP_ASLEEP_AT, GROUP_CLAIMED_AT, GROUP_DESCRIPTOR_LEN, GROUP_RESULT_AT,
};
use nam_proto::{Alloc, Reply, Status};
use std::sync::atomic::Ordering;

fn refuse<T>(status: Status, message: String) -> Result<T, Refusal> {
    Err(Refusal { status, message })
}

impl Server {
    /// This server's tag in global addresses.
    pub(super) fn server_tag(&self) -> u32 {
        nam_proto::address::server_tag(&self.config.name, &self.address().to_string())
    }

    /// Answers the global-address requests that are answered at once.
    pub(super) fn execute_gas(&mut self, client: u64, request: GasRequest) -> Result<Reply, Refusal> {
        match request {
            GasRequest::Domain => Ok(Reply::Domain(DomainReply {
                server_tag: self.server_tag(),
                domain: self.manager.domain_of(client)?,
            })),
            GasRequest::Resolve { address } => {
                if address.server() != self.server_tag() {
                    return refuse(
                        Status::WrongServer,
                        format!(
                            "{address} names server tag {:08x}, this is {:08x}",
                            address.server(),
                            self.server_tag()
                        ),
                    );
                }
                let grant = self.manager.hold_global(client, address.domain(), address.handle())?;
                if address.offset() >= grant.size {
                    return refuse(
                        Status::OutOfBounds,
                        format!("{address}: offset {} is outside the {}-byte allocation", address.offset(), grant.size),
                    );
                }
                Ok(self.alloc_reply(grant))
            }
            GasRequest::ReduceAttach { name, ranks, rank, chunk_bytes } => {
                self.attach_reduce(client, &name, ranks, rank, chunk_bytes).map(|g| self.alloc_reply(g))
            }
            GasRequest::MailboxSend { handle, offset, sender, data } => {
                let (base, size) = self.manager.resolve(client, handle)?;
                if offset >= size {
                    return refuse(
                        Status::OutOfBounds,
                        format!("offset {offset} is outside the {size}-byte allocation"),
                    );
                }
                crate::mailbox::deliver(&self.pool, base + offset, base + size, sender, &data)?;
                Ok(Reply::Done)
            }
            GasRequest::ReduceKick { handle } => {
                self.manager.resolve(client, handle)?;
                self.poll_reductions();
                Ok(Reply::Done)
            }
        }
    }

    fn attach_reduce(
        &mut self,
        client: u64,
        name: &str,
        ranks: u32,
        rank: u32,
        chunk_bytes: u64,
    ) -> Result<crate::manager::Grant, Refusal> {
        if ranks == 0 || ranks > REDUCE_RANKS_MAX || rank >= ranks {
            return refuse(Status::InvalidArgument, format!("rank {rank} of {ranks} (1..={REDUCE_RANKS_MAX} ranks)"));
        }
        if chunk_bytes == 0 || chunk_bytes > REDUCE_CHUNK_MAX || !chunk_bytes.is_multiple_of(8) {
            return refuse(
                Status::InvalidArgument,
                format!("chunk of {chunk_bytes} bytes (a multiple of 8 up to {REDUCE_CHUNK_MAX})"),
            );
        }
        let domain = self.manager.domain_of(client)?;
        let tenant = self.manager.tenant(client).expect("domain_of checked the client").to_string();
        let existing = self.reducer.by_name(&tenant, name).map(|g| (g.handle, g.layout.ranks, g.layout.chunk_bytes));
        let grant = match existing {
            Some((handle, _, _)) if !self.manager.is_live(handle) => {
                self.reducer.remove(handle);
                return self.attach_reduce(client, name, ranks, rank, chunk_bytes);
            }
            Some((_, have_ranks, have_chunk)) if (have_ranks, have_chunk) != (ranks, chunk_bytes) => {
                return refuse(
                    Status::ReduceMismatch,
                    format!(
                        "group {name:?} has {have_ranks} ranks of {have_chunk} bytes; asked {ranks} of {chunk_bytes}"
                    ),
                )
            }
            Some((handle, _, _)) => self.manager.hold_global(client, domain, handle)?,
            None => {
                let layout = GroupLayout { ranks, chunk_bytes };
                let size = layout.total_len();
                let grant = self.manager.allocate(client, &Alloc { size, align: 0, flags: 0, name: String::new() })?;
                self.pool.zero(grant.offset, grant.size);
                self.reducer.insert(&tenant, name, grant.handle, grant.offset, layout);
                grant
            }
        };
        let group = self.reducer.group_mut(grant.handle).expect("inserted or found above");
        match group.members[rank as usize] {
            Some(other) if other != client => {
                refuse(Status::InvalidArgument, format!("rank {rank} of group {name:?} is already attached"))
            }
            _ => {
                group.members[rank as usize] = Some(client);
                Ok(grant)
            }
        }
    }

    /// Finishes every group round whose ranks have all arrived; true if any did. A round
    /// the last rank claimed first (it reduces small vectors itself, in the mapped pool) is
    /// only counted: the server did no work for it.
    pub(super) fn poll_reductions(&mut self) -> bool {
        let pool = &self.pool;
        let mut any = false;
        let manager = &self.manager;
        for group in self.reducer.groups_mut().filter(|g| !g.broken && manager.is_live(g.handle)) {
            let ranks = group.layout.ranks as u64;
            let (arrived, claimed) =
                (pool.word(group.pool_offset + GROUP_ARRIVED_AT), pool.word(group.pool_offset + GROUP_CLAIMED_AT));
            while arrived.load(Ordering::SeqCst) >= (group.done + 1) * ranks {
                match claimed.compare_exchange(group.done, group.done + 1, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        group.done += 1;
                        finish_round(pool, group);
                        any = true;
                    }
                    // A rank took this round (and maybe later ones): it publishes them.
                    Err(taken) => group.done = taken.max(group.done + 1),
                }
            }
        }
        any
    }

    /// Tells every group's ranks that the server is about to sleep (so the last rank of a
    /// round sends a kick), then looks once more: true if a round finished meanwhile (do
    /// not sleep then).
    pub(super) fn reductions_before_sleep(&mut self) -> bool {
        self.set_asleep(1);
        if self.poll_reductions() {
            self.set_asleep(0);
            return true;
        }
        false
    }

    /// Awake again: ranks need not kick.
    pub(super) fn reductions_after_sleep(&mut self) {
        self.set_asleep(0);
    }

    fn set_asleep(&mut self, value: u64) {
        let (pool, manager) = (&self.pool, &self.manager);
        // Only groups whose memory is still theirs: a broken group's allocation may have
        // been freed and handed to another group (writing this flag there corrupted its
        // deposits: allreduce results differed from MPI's under `nam bench allreduce`).
        for group in self.reducer.groups_mut().filter(|g| !g.broken && manager.is_live(g.handle)) {
            pool.word(group.pool_offset + GROUP_ASLEEP_AT).store(value, Ordering::SeqCst);
        }
    }

    /// A client left or died: its groups' rounds fail now and from now on.
    pub(super) fn reductions_member_gone(&mut self, client: u64) {
        for offset in self.reducer.member_gone(client) {
            let word = self.pool.word(offset + GROUP_RESULT_AT);
            // A round that already failed (ranks that disagreed) keeps its cause for the
            // ranks still reading it; every later round reads as aborted either way.
            let failed = Status::from_code((word.load(Ordering::SeqCst) & 0xff) as u16)
                .filter(|s| *s != Status::Ok && *s != Status::ReduceAborted);
            let abort = failed
                .map_or(aborted_word(), |status| GroupLayout::result_word(nam_proto::reduce::ROUND_ABORTED, status));
            word.store(abort, Ordering::SeqCst);
        }
    }
}

/// Judges and reduces round `group.done`, which this server claimed, and publishes it.
fn finish_round(pool: &Pool, group: &Group) {
    let descriptors: Vec<Descriptor> = (0..group.layout.ranks)
        .map(|r| {
            let bytes = pool.read(group.pool_offset + group.layout.descriptor_at(r), GROUP_DESCRIPTOR_LEN as usize);
            Descriptor::decode(bytes.as_slice().try_into().expect("read the descriptor length"))
        })
        .collect();
    let status = match judge(group.layout, group.done, &descriptors) {
        Verdict::Fail(status) => {
            log::info!("allreduce group {:?} round {}: {status}", group.name, group.done);
            status
        }
        Verdict::Reduce { op, dtype, count } => {
            let base = pool.base_ptr();
            let (deposits, result) = (group.layout.deposit_at(0), group.layout.result_data_at());
            // SAFETY: the group's allocation is live (its members hold it) and laid out as
            // `layout`; the ranks wait for this round's result word; `judge` checked the
            // count against the chunk.
            unsafe {
                reduce_into(
                    base.add((group.pool_offset + deposits) as usize),
                    base.add((group.pool_offset + result) as usize),
                    group.layout.ranks as usize,
                    group.layout.chunk_bytes as usize,
                    op,
                    dtype,
                    count,
                )
            };
            Status::Ok
        }
    };
    // fetch_max: an abort published meanwhile (a rank died) stays.
    let word = GroupLayout::result_word(group.done, status);
    pool.word(group.pool_offset + GROUP_RESULT_AT).fetch_max(word, Ordering::SeqCst);
}
