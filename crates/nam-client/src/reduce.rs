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
    GROUP_CLAIMED_AT, GROUP_DESCRIPTOR_LEN, GROUP_RESULT_AT,
};
use nam_proto::{Request, Status};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

pub use crate::constants::REDUCE_CHUNK_DEFAULT;

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
        let mut word = [0u8; 8];
        let mut polls = 0u32;
        loop {
            // An aligned 8-byte get: one load on the direct path, an atomic read elsewhere.
            client.get(&self.allocation, GROUP_RESULT_AT, &mut word)?;
            let value = u64::from_le_bytes(word);
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

    /// Leaves the group (the other ranks' rounds fail from now on).
    pub fn detach(self, client: &Client) -> Result<()> {
        client.free(&self.allocation)
    }
}
