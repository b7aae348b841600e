//! Message-path operations whose replies are still to come: a put through the server
//! returns once its message is sent (its source may be reused, OpenSHMEM's local
//! completion), and its reply is collected later: when more than
//! [`MESSAGE_PUTS_IN_FLIGHT_MAX`] are outstanding, before any call that waits for a reply of
//! its own, and by a flush ([`crate::Client::quiet`]), which is remote completion. A refused
//! put (its allocation freed meanwhile) is reported by the next flush.
//!
//! Also here: which servers have RMA puts that no flush has completed yet, so that a flush
//! (a `put_sync`, a `quiet`) after direct-path puts only, or after another flush, costs no
//! UCX endpoint flush.

use crate::constants::MESSAGE_PUTS_IN_FLIGHT_MAX;
use crate::error::{Error, Result};
use crate::session::Inner;
use std::collections::VecDeque;
use std::time::Duration;

/// Where the old word of a non-blocking fetching atomic goes ([`crate::Client::atomic_fetch_add_nbi`]
/// and the rest): the caller's location, written when the reply comes (message path) or
/// by UCX (RMA path), at the latest by the next flush.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchSink {
    ptr: *mut u8,
    width_bytes: u8,
}

// SAFETY: the caller of the `_nbi` call promised the location stays valid, and unread, until
// the next flush; the client lock orders the write before that flush returns, whichever
// thread collects the reply.
unsafe impl Send for FetchSink {}

impl FetchSink {
    /// A sink for a `width_bytes`-wide word (4 or 8) at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `width_bytes`, aligned to them, until the next flush.
    pub(crate) unsafe fn new(ptr: *mut u8, width_bytes: u64) -> FetchSink {
        FetchSink { ptr, width_bytes: width_bytes as u8 }
    }

    /// The location, for UCX to write a 64-bit reply into.
    pub(crate) fn ptr(self) -> *mut u8 {
        self.ptr
    }

    /// Stores the old word (its low bits for a 32-bit word).
    pub(crate) fn deliver(self, bits: u64) {
        // SAFETY: promised by the caller of `new`.
        unsafe {
            if self.width_bytes == 4 {
                (self.ptr as *mut u32).write(bits as u32)
            } else {
                (self.ptr as *mut u64).write(bits)
            }
        }
    }
}

/// The unanswered requests of every server, oldest first (with where a fetching atomic's
/// answer goes), and the first refusal among the answers collected since the last flush.
#[derive(Default)]
pub(crate) struct Unacked {
    ids: Vec<VecDeque<(u64, Option<FetchSink>)>>,
    refused: Option<Error>,
    /// Per server: an RMA put was posted since its last flush.
    rma_unflushed: Vec<bool>,
    /// RMA puts and gets posted without a handle ([`crate::Client::put_nbi`]), by server,
    /// waited for by the next flush.
    nbi: Vec<(usize, nam_ucx::Request)>,
    /// Operands of RMA atomics posted without a handle, by server: UCX may read them until
    /// the operation completes, so they live until the next flush of the server.
    nbi_operands: Vec<(usize, Box<u64>)>,
}

impl Inner {
    /// Notes that request `id` to `server` was sent and its reply is to be collected later;
    /// collects the oldest first when too many are outstanding.
    pub(crate) fn expect_reply(&mut self, server: usize, id: u64, timeout: Duration) -> Result<()> {
        self.expect_answer(server, (id, None), timeout)
    }

    /// [`Inner::expect_reply`] for a fetching atomic whose old word goes to `sink`.
    pub(crate) fn expect_fetch(&mut self, server: usize, id: u64, sink: FetchSink, timeout: Duration) -> Result<()> {
        self.expect_answer(server, (id, Some(sink)), timeout)
    }

    fn expect_answer(&mut self, server: usize, pending: (u64, Option<FetchSink>), timeout: Duration) -> Result<()> {
        if self.unacked.ids.len() <= server {
            self.unacked.ids.resize_with(server + 1, VecDeque::new);
        }
        self.unacked.ids[server].push_back(pending);
        if self.unacked.ids[server].len() > MESSAGE_PUTS_IN_FLIGHT_MAX {
            self.collect_oldest(server, timeout)?;
        }
        Ok(())
    }

    /// Waits for the reply to `server`'s oldest outstanding request.
    fn collect_oldest(&mut self, server: usize, timeout: Duration) -> Result<()> {
        let Some((id, sink)) = self.unacked.ids[server].pop_front() else { return Ok(()) };
        match self.links[server].receive(&self.replies, id, "put", timeout) {
            Ok(nam_proto::Reply::Value(old)) => {
                if let Some(sink) = sink {
                    sink.deliver(old);
                }
                Ok(())
            }
            Ok(reply) if sink.is_some() => {
                let e = crate::session::unexpected(self.links[server].addr, "atomic_nbi", reply);
                self.unacked.refused.get_or_insert(e);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e @ Error::Refused { .. }) => {
                self.unacked.refused.get_or_insert(e);
                Ok(())
            }
            Err(e) => {
                // The server is gone or late: forget the rest, whose replies may never come.
                self.unacked.ids[server].clear();
                Err(e)
            }
        }
    }

    /// Collects every outstanding reply of every server (before a call that clears the
    /// reply queue, and by flushes). Refusals stay for [`Inner::take_refusal`].
    /// All of it within `timeout`, however many servers are late.
    pub(crate) fn settle(&mut self, timeout: Duration) -> Result<()> {
        let _call = crate::deadline::CallDeadline::begin(timeout);
        let mut first = Ok(());
        for server in 0..self.unacked.ids.len() {
            while !self.unacked.ids[server].is_empty() {
                if let Err(e) = self.collect_oldest(server, crate::deadline::time_left(timeout)) {
                    first = first.and(Err(e));
                }
            }
        }
        first
    }

    /// Notes an RMA put to `server` (call with the lock held, once it is posted).
    #[inline]
    pub(crate) fn note_rma_put(&mut self, server: usize) {
        let unflushed = &mut self.unacked.rma_unflushed;
        if unflushed.len() <= server {
            unflushed.resize(server + 1, false);
        }
        unflushed[server] = true;
    }

    /// Whether an RMA put to `server` was posted since the last call (the flush about to be
    /// made, under the same lock hold, completes it).
    pub(crate) fn take_rma_unflushed(&mut self, server: usize) -> bool {
        self.unacked.rma_unflushed.get_mut(server).map(std::mem::take).unwrap_or(false)
    }

    /// Keeps an RMA operation posted without a handle for the next flush of `server`.
    pub(crate) fn keep_nbi(&mut self, server: usize, request: nam_ucx::Request) {
        self.unacked.nbi.push((server, request));
    }

    /// [`Inner::keep_nbi`] for an atomic whose `operand` UCX may read until it completes.
    pub(crate) fn keep_nbi_atomic(&mut self, server: usize, request: Option<nam_ucx::Request>, operand: Box<u64>) {
        if let Some(request) = request {
            self.unacked.nbi.push((server, request));
            self.unacked.nbi_operands.push((server, operand));
        }
    }

    /// Waits for every handle-less RMA operation to `server`; the first error after all.
    /// All of them within `timeout`.
    pub(crate) fn finish_nbi(&mut self, server: usize, timeout: Duration) -> Result<()> {
        let _call = crate::deadline::CallDeadline::begin(timeout);
        let (mine, others) = std::mem::take(&mut self.unacked.nbi).into_iter().partition(|(s, _)| *s == server);
        self.unacked.nbi = others;
        let mut first = Ok(());
        for (_, request) in mine {
            let left = crate::deadline::time_left(timeout);
            let result = self.links[server].wait(nam_ucx::Posted::InFlight(request), left, "put_nbi");
            first = first.and(result);
        }
        // Every atomic of the server is complete: UCX reads none of their operands any more.
        // After a failure one may still be in flight: its operand stays until a clean flush.
        if first.is_ok() {
            self.unacked.nbi_operands.retain(|(s, _)| *s != server);
        }
        first
    }

    /// The first refusal of a message-path put since the last call.
    pub(crate) fn take_refusal(&mut self) -> Result<()> {
        self.unacked.refused.take().map_or(Ok(()), Err)
    }
}
