//! Allreduce at the memory server (the allreduce accelerator of seed 003 §4.7): each rank
//! puts its vector one-sided into its area of the group's server memory and notifies the
//! server; the server reduces (several threads for long vectors) into the result area and
//! answers every rank, which then gets the result. Vectors longer than the group's chunk
//! go in several rounds.
//!
//! The notification is an active message rather than a signal word in pool memory, so the
//! server can sleep between collectives instead of polling every group's words.

use crate::allocation::Allocation;
use crate::client::Client;
use crate::error::{Error, Result};
use nam_proto::gas::GasRequest;
use nam_proto::reduce::{DataType, ReduceOp};
use nam_proto::{Reply, Request};

/// Default bytes per rank and round: 1 MiB.
pub const REDUCE_CHUNK_DEFAULT: u64 = 1 << 20;

/// One rank's membership in a server-side allreduce group (an MPI communicator's worth of
/// ranks that all attach with the same name).
#[derive(Debug)]
pub struct ReduceGroup {
    allocation: Allocation,
    ranks: u32,
    rank: u32,
    chunk_bytes: u64,
    seq: u64,
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
        let allocation = client.lock().grant(server, &request, "reduce attach", client.config.timeout)?;
        Ok(ReduceGroup { allocation, ranks, rank, chunk_bytes, seq: 0 })
    }

    /// Ranks in the group.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// Reduces `send` (little-endian elements of `dtype`) over every rank into `recv` (the
    /// same length). Every rank calls it with the same length, type and operation; if they
    /// disagree every rank gets [`nam_proto::Status::ReduceMismatch`] and `recv` is not
    /// written; if a rank dies the others get [`nam_proto::Status::ReduceAborted`] (or
    /// their deadline passes).
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
        let chunk = (self.chunk_bytes as usize / dtype.size()) * dtype.size();
        let result_at = self.ranks as u64 * self.chunk_bytes;
        let mine = self.rank as u64 * self.chunk_bytes;
        let mut done = 0;
        // A zero-length vector still makes one (empty) round, so every rank stays in step.
        loop {
            let len = chunk.min(send.len() - done);
            self.deposit(client, mine, &send[done..done + len])?;
            self.seq += 1;
            let request = Request::Gas(GasRequest::ReduceArrive {
                handle: self.allocation.handle,
                rank: self.rank,
                seq: self.seq,
                count: (len / dtype.size()) as u64,
                total: (send.len() / dtype.size()) as u64,
                op,
                dtype,
            });
            match client.lock().call(self.allocation.server, &request, "allreduce", client.config.timeout)? {
                Reply::Done => {}
                _ => {
                    return Err(Error::UnexpectedReply {
                        addr: client.config.servers[self.allocation.server],
                        what: "allreduce",
                    })
                }
            }
            client.get(&self.allocation, result_at, &mut recv[done..done + len])?;
            done += len;
            if done == send.len() {
                return Ok(());
            }
        }
    }

    /// Puts `data` in this rank's area, complete at the server before the notification.
    fn deposit(&self, client: &Client, at: u64, data: &[u8]) -> Result<()> {
        if self.allocation.is_direct() {
            client.put(&self.allocation, at, data)?;
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            Ok(())
        } else {
            client.put_sync(&self.allocation, at, data)
        }
    }

    /// Leaves the group (the other ranks' rounds fail from now on).
    pub fn detach(self, client: &Client) -> Result<()> {
        client.free(&self.allocation)
    }
}
