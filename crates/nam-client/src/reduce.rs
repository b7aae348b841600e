//! Allreduce at the memory server (the allreduce accelerator of Ploumidis et al. 2023, §4.7): each rank
//! puts its vector and a descriptor one-sided into the group's server memory and signals
//! its arrival with a fetch-and-add on the group's counter; the server, which polls the
//! counters while it spins, reduces (several threads for long vectors) into the result
//! area and publishes the round's status in a result word; the ranks poll that word and
//! then get the result. A server that sleeps says so in the group's `asleep` word, and
//! the last rank of a round then wakes it with a message. Vectors longer than the group's
//! chunk go in several rounds. Layout: [`GroupLayout`].
//!
//! Small rounds (at most [`RANK_REDUCE_BYTES_MAX`] per rank) on the same host skip the
//! server: the rank whose arrival completes the round claims it (compare-and-swap of the
//! group's `claimed` word, which the server also uses) and reduces in the mapped pool
//! itself, then publishes the result word. On a node where ranks outnumber cores this saves
//! waking or scheduling the server, which would cost more than reducing a few KiB.

use crate::allocation::Allocation;
use crate::client::Client;
use crate::constants::{RANK_REDUCE_BYTES_MAX, REDUCE_SPIN_POLLS};
use crate::error::{Error, Result};
use crate::path::{direct, Path};
use nam_proto::gas::GasRequest;
use nam_proto::reduce::{
    combine, judge, DataType, Descriptor, GroupLayout, ReduceOp, Verdict, GROUP_ARRIVED_AT, GROUP_ASLEEP_AT,
    GROUP_BROKEN_AT, GROUP_CLAIMED_AT, GROUP_DESCRIPTOR_LEN, GROUP_RESULT_AT,
};
use nam_proto::{Request, Status};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

pub use crate::constants::REDUCE_CHUNK_DEFAULT;

/// The words before a broadcast's bytes: the sums of the ranks' lengths modulo 8, of their
/// roots, and of the squares of both (see [`ReduceGroup::broadcast`]).
const BROADCAST_HEADER_BYTES: usize = 32;

/// One rank's membership in a server-side allreduce group (an MPI communicator's worth of
/// ranks that all attach with the same name).
#[derive(Debug)]
pub struct ReduceGroup {
    allocation: Allocation,
    layout: GroupLayout,
    rank: u32,
    round: u64,
}

impl ReduceGroup {
    /// Joins group `name` (per tenant) of `ranks` ranks as `rank`, with `chunk_bytes` per
    /// rank and round (a multiple of 8), on server `server`. Every rank must pass the same
    /// name, rank count, chunk size and server.
    pub fn attach(
        client: &Client,
        name: &str,
        ranks: u32,
        rank: u32,
        chunk_bytes: u64,
        server: usize,
    ) -> Result<ReduceGroup> {
        if server >= client.server_count() {
            return Err(Error::InvalidArgument("server index out of range"));
        }
        if name.len() > nam_proto::limits::NAME_LEN_MAX {
            return Err(Error::InvalidArgument("group name longer than 255 bytes"));
        }
        let request = Request::Gas(GasRequest::ReduceAttach { name: name.into(), ranks, rank, chunk_bytes });
        let allocation = client.lock().grant(server, &request, "reduce attach", client.config().timeout)?;
        Ok(ReduceGroup { allocation, layout: GroupLayout { ranks, chunk_bytes }, rank, round: 0 })
    }

    /// Ranks in the group.
    pub fn ranks(&self) -> u32 {
        self.layout.ranks
    }

    /// Reduces `send` (little-endian elements of `dtype`) over every rank into `recv` (the
    /// same length). Every rank calls it with the same length, type and operation; if they
    /// disagree every rank gets [`nam_proto::Status::ReduceMismatch`] and `recv` is not
    /// written; if a rank dies the others get [`nam_proto::Status::ReduceAborted`] (or
    /// [`Error::WaitTimeout`] at their deadline).
    pub fn allreduce(
        &mut self,
        client: &Client,
        op: ReduceOp,
        dtype: DataType,
        send: &[u8],
        recv: &mut [u8],
    ) -> Result<()> {
        if send.len() != recv.len() {
            return Err(Error::InvalidArgument("send and receive buffers differ in length"));
        }
        if !send.len().is_multiple_of(dtype.size()) {
            return Err(Error::InvalidArgument("buffer length is not a multiple of the element size"));
        }
        let chunk = (self.layout.chunk_bytes as usize / dtype.size()) * dtype.size();
        let total = (send.len() / dtype.size()) as u64;
        let mut done = 0;
        // A zero-length vector still makes one (empty) round, so every rank stays in step.
        loop {
            let len = chunk.min(send.len() - done);
            self.round += 1;
            let descriptor = Descriptor {
                round: self.round,
                count: (len / dtype.size()) as u64,
                total,
                op: op as u8,
                dtype: dtype as u8,
            };
            self.arrive(client, &send[done..done + len], &descriptor)?;
            self.await_result(client)?;
            client.get(&self.allocation, self.layout.result_data_at(), &mut recv[done..done + len])?;
            done += len;
            if done == send.len() {
                return Ok(());
            }
        }
    }

    /// Deposits data and descriptor, complete at the server before the arrival is counted;
    /// the last rank of the round wakes a sleeping server.
    fn arrive(&self, client: &Client, data: &[u8], descriptor: &Descriptor) -> Result<()> {
        let a = &self.allocation;
        client.put(a, self.layout.deposit_at(self.rank), data)?;
        client.put(a, self.layout.descriptor_at(self.rank), &descriptor.encode())?;
        // A deposit above the direct path's crossover went by UCX RMA: complete it at the
        // server before the arrival is counted (found by nam-bench allreduce: 1 MiB on 8
        // ranks read a half-written deposit).
        if !client.takes_direct_path(a, data.len()) {
            client.flush_server(a.server)?;
        }
        let before = client.fetch_add(a, GROUP_ARRIVED_AT, 1)?;
        if before + 1 != self.round * self.layout.ranks as u64 {
            return Ok(());
        }
        if data.len() <= RANK_REDUCE_BYTES_MAX && client.word_path(a) == Path::Direct {
            // The server may have seen the arrival first: then it reduces (it is awake).
            if client.compare_swap(a, GROUP_CLAIMED_AT, self.round - 1, self.round)? == self.round - 1 {
                self.reduce_here(client)?;
            }
            return Ok(());
        }
        if client.fetch(a, GROUP_ASLEEP_AT)? != 0 {
            let request = Request::Gas(GasRequest::ReduceKick { handle: a.handle });
            client.lock().call(a.server, &request, "allreduce kick", client.config().timeout)?;
        }
        Ok(())
    }

    /// Judges and reduces this round, which this rank claimed, in the mapped group memory,
    /// and publishes its result word, as the server would.
    fn reduce_here(&self, client: &Client) -> Result<()> {
        let layout = self.layout;
        let base = self.allocation.local;
        let mut table = vec![0u8; (layout.ranks as u64 * GROUP_DESCRIPTOR_LEN) as usize];
        client.get(&self.allocation, layout.descriptor_at(0), &mut table)?;
        let descriptors: Vec<Descriptor> = table
            .chunks_exact(GROUP_DESCRIPTOR_LEN as usize)
            .map(|d| Descriptor::decode(d.try_into().expect("chunks of the descriptor length")))
            .collect();
        let status = match judge(layout, self.round, &descriptors) {
            Verdict::Fail(status) => status,
            Verdict::Reduce { op, dtype, count } => {
                let len = count as usize * dtype.size();
                let at = |offset: u64| base + offset as usize;
                // SAFETY: the group's memory is mapped at `base` while this rank holds it and
                // laid out as `layout`; `judge` checked `len` against the chunk, so every area
                // is in bounds; the other ranks wait for this round's result word and write
                // neither their deposits nor the result area until then.
                let (result, deposit) = unsafe {
                    (std::slice::from_raw_parts_mut(at(layout.result_data_at()) as *mut u8, len), |r: u32| {
                        std::slice::from_raw_parts(at(layout.deposit_at(r)) as *const u8, len)
                    })
                };
                result.copy_from_slice(deposit(0));
                for r in 1..layout.ranks {
                    combine(op, dtype, result, deposit(r));
                }
                Status::Ok
            }
        };
        // fetch_max: an abort the server published meanwhile (a rank died) stays.
        let word = GroupLayout::result_word(self.round, status);
        direct::word(&client.session, &self.allocation, GROUP_RESULT_AT, "allreduce")?.fetch_max(word, SeqCst);
        Ok(())
    }

    /// Polls the result word until the server published this round (or an abort).
    fn await_result(&self, client: &Client) -> Result<()> {
        let deadline = Instant::now() + client.config().timeout;
        let mut words = [0u8; (GROUP_BROKEN_AT + 8) as usize];
        let mut polls = 0u32;
        loop {
            // The result word and the broken word in one get: one message on the message
            // path, loads on the direct path.
            client.get(&self.allocation, GROUP_RESULT_AT, &mut words)?;
            let word = |at: u64| u64::from_le_bytes(words[at as usize..at as usize + 8].try_into().expect("8 bytes"));
            let (value, broken) = (word(GROUP_RESULT_AT), word(GROUP_BROKEN_AT));
            if value >> 8 < self.round && broken != 0 && broken <= self.round {
                return Err(Error::Refused {
                    addr: client.config().servers[self.allocation.server],
                    what: "allreduce",
                    status: Status::ReduceAborted,
                    message: format!("a rank left the group before round {}", self.round),
                });
            }
            if value >> 8 >= self.round {
                let code = (value & 0xff) as u16;
                return match Status::from_code(code) {
                    Some(Status::Ok) => Ok(()),
                    status => Err(Error::Refused {
                        addr: client.config().servers[self.allocation.server],
                        what: "allreduce",
                        status: status.unwrap_or(Status::Internal),
                        message: format!("round {} of the allreduce failed at the server", self.round),
                    }),
                };
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout { timeout_ms: client.config().timeout.as_millis() as u64, last: value });
            }
            polls = polls.saturating_add(1);
            if polls > REDUCE_SPIN_POLLS {
                // Other ranks (and the server) may share this core: let them run.
                std::thread::yield_now();
            }
        }
    }

    /// Waits until every rank of the group has called it (OpenSHMEM's `shmem_barrier_all`
    /// over the group's ranks; an MPI barrier): one empty round of the group at the server.
    /// Returns [`Error::WaitTimeout`] at the client's deadline if a rank does not come, and
    /// [`nam_proto::Status::ReduceAborted`] if one left or died. It orders nothing by itself:
    /// call [`Client::quiet`] first to have this rank's puts complete at the server before
    /// the others pass (as `shmem_barrier_all` does).
    pub fn barrier(&mut self, client: &Client) -> Result<()> {
        self.allreduce(client, ReduceOp::Sum, DataType::I64, &[], &mut [])
    }

    /// Broadcasts `buffer` of rank `root` to every rank's `buffer` (OpenSHMEM's
    /// `shmem_broadcast` over the group's ranks, root included): every rank passes a buffer
    /// of the same length and names the same root. At the server, as an allreduce: the root
    /// deposits its bytes and every other rank zeros, summed as 64-bit integers (exact), so
    /// each round costs the same as an allreduce of that length. Returns when `buffer` holds
    /// the root's bytes. Errors: [`Error::InvalidArgument`] for a root outside the group
    /// (before anything is sent); [`nam_proto::Status::ReduceMismatch`] on every rank when
    /// the ranks' lengths or roots disagree (then no `buffer` is written); as [`ReduceGroup::barrier`]
    /// for a missing rank.
    pub fn broadcast(&mut self, client: &Client, root: u32, buffer: &mut [u8]) -> Result<()> {
        if root >= self.layout.ranks {
            return Err(Error::InvalidArgument("broadcast root is not a rank of the group"));
        }
        // Header words, then the bytes padded to whole 64-bit words. The header sums each
        // rank's length modulo 8 and the root it named, each with its square: values `x_i`
        // are all equal exactly when ranks * sum(x^2) == sum(x)^2 (Cauchy-Schwarz); the
        // padded lengths the allreduce itself compares.
        let len = buffer.len();
        let padded = len.div_ceil(8) * 8;
        let tail = (len % 8) as u64;
        let mut send = vec![0u8; BROADCAST_HEADER_BYTES + padded];
        let root64 = u64::from(root);
        for (i, x) in [tail, tail * tail, root64, root64 * root64].into_iter().enumerate() {
            send[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        if self.rank == root {
            send[BROADCAST_HEADER_BYTES..BROADCAST_HEADER_BYTES + len].copy_from_slice(buffer);
        }
        let mut recv = vec![0u8; send.len()];
        self.allreduce(client, ReduceOp::Sum, DataType::I64, &send, &mut recv)?;
        // Peers' sums: compared in 128 bits, where no product of two words overflows.
        let word = |at: usize| u128::from(u64::from_le_bytes(recv[at..at + 8].try_into().expect("8 bytes")));
        let ranks = u128::from(self.layout.ranks);
        let agree =
            |at: usize, mine: u64| ranks * word(at + 8) == word(at) * word(at) && word(at) == ranks * u128::from(mine);
        if !agree(0, tail) || !agree(16, root64) {
            return Err(Error::Refused {
                addr: client.config().servers[self.allocation.server],
                what: "broadcast",
                status: Status::ReduceMismatch,
                message: "the ranks of the broadcast passed different lengths or roots".into(),
            });
        }
        buffer.copy_from_slice(&recv[BROADCAST_HEADER_BYTES..BROADCAST_HEADER_BYTES + len]);
        Ok(())
    }

    /// Leaves the group (the other ranks' rounds fail from now on).
    pub fn detach(self, client: &Client) -> Result<()> {
        client.free(&self.allocation)
    }
}
