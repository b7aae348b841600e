//! The server's side of the global address space and of allreduce: domain queries, address
//! resolution with the protection-domain check, and allreduce groups and rounds (whose
//! answers are deferred until every rank arrived).

use super::Server;
use crate::manager::Refusal;
use crate::reduce::{reduce_in_place, Arrival, Outcome};
use nam_proto::gas::{DomainReply, GasRequest, KIND_REDUCE_ARRIVE, REDUCE_CHUNK_MAX, REDUCE_RANKS_MAX};
use nam_proto::{Alloc, Reply, Request, Status};
use nam_ucx::EndpointId;

/// Where to send a deferred answer: the endpoint and the request id.
pub(super) type ReplyTo = (EndpointId, u64);

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
            GasRequest::ReduceArrive { .. } => {
                refuse(Status::Internal, "allreduce arrivals are answered by the round".into())
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
        let tenant = self.manager.tenant_name(client)?;
        let existing = self.reducer.by_name(&tenant, name).map(|g| (g.handle, g.members.len() as u32, g.chunk_bytes));
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
                let size = (ranks as u64 + 1) * chunk_bytes;
                let grant = self.manager.allocate(client, &Alloc { size, align: 0, flags: 0, name: String::new() })?;
                self.pool.zero(grant.offset, grant.size);
                self.reducer.insert(&tenant, name, grant.handle, grant.offset, ranks, chunk_bytes);
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

    /// Takes an allreduce arrival out of the normal request path (its answer waits for the
    /// round); returns false for every other message.
    pub(super) fn take_arrival(&mut self, ep: EndpointId, bytes: &[u8]) -> bool {
        let Ok((id, Request::Gas(GasRequest::ReduceArrive { handle, rank, seq, count, total, op, dtype }))) =
            Request::decode(bytes)
        else {
            return false;
        };
        let connection = &self.connections[&ep];
        if !connection.authenticated {
            return false; // answered NotConnected by the normal path
        }
        let arrival = Arrival { reply_to: (ep, id), seq, count, total, op, dtype };
        match self.reducer.arrive(connection.client_id, handle, rank, arrival) {
            Err((status, message)) => self.answer_round(&[(ep, id)], Reply::Error { status, message }),
            Ok(Outcome::Waiting) => {}
            Ok(Outcome::Fail { status, message, reply_to }) => {
                log::info!("allreduce group {handle}: {message}");
                self.answer_round(&reply_to, Reply::Error { status, message })
            }
            Ok(Outcome::Reduce { op, dtype, count, reply_to }) => {
                let group = self.reducer.group_mut(handle).expect("arrived in it");
                let (offset, chunk) = (group.pool_offset, group.chunk_bytes as usize);
                // SAFETY: the group's allocation is live (its members hold it) and spans
                // (ranks + 1) * chunk bytes; the ranks wait for this round's answer, and the
                // count was checked against the chunk.
                unsafe {
                    reduce_in_place(self.pool.base_ptr().add(offset as usize), reply_to.len(), chunk, op, dtype, count)
                };
                self.answer_round(&reply_to, Reply::Done)
            }
        }
        true
    }

    fn answer_round(&mut self, reply_to: &[ReplyTo], reply: Reply) {
        if matches!(reply, Reply::Error { .. }) {
            self.counters.request_errors += reply_to.len() as u64;
        }
        for &(ep, id) in reply_to {
            if self.connections.contains_key(&ep) {
                self.send_reply(ep, reply.encode(KIND_REDUCE_ARRIVE, id));
            }
        }
    }

    /// A client left or died: the ranks waiting with it in an allreduce round hear so now.
    pub(super) fn reductions_member_gone(&mut self, client: u64) {
        for ((ep, id), message) in self.reducer.member_gone(client) {
            self.answer_round(&[(ep, id)], Reply::Error { status: Status::ReduceAborted, message });
        }
    }
}
