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

/// The unanswered requests of every server, oldest first, and the first refusal among the
/// answers collected since the last flush.
#[derive(Default)]
pub(crate) struct Unacked {
    ids: Vec<VecDeque<u64>>,
    refused: Option<Error>,
    /// Per server: an RMA put was posted since its last flush.
    rma_unflushed: Vec<bool>,
    /// RMA puts and gets posted without a handle ([`crate::Client::put_nbi`]), by server,
    /// waited for by the next flush.
    nbi: Vec<(usize, nam_ucx::Request)>,
}

impl Inner {
    /// Notes that request `id` to `server` was sent and its reply is to be collected later;
    /// collects the oldest first when too many are outstanding.
    pub(crate) fn expect_reply(&mut self, server: usize, id: u64, timeout: Duration) -> Result<()> {
        if self.unacked.ids.len() <= server {
            self.unacked.ids.resize_with(server + 1, VecDeque::new);
        }
        self.unacked.ids[server].push_back(id);
        if self.unacked.ids[server].len() > MESSAGE_PUTS_IN_FLIGHT_MAX {
            self.collect_oldest(server, timeout)?;
        }
        Ok(())
    }

    /// Waits for the reply to `server`'s oldest outstanding request.
    fn collect_oldest(&mut self, server: usize, timeout: Duration) -> Result<()> {
        let Some(id) = self.unacked.ids[server].pop_front() else { return Ok(()) };
        match self.links[server].receive(&self.replies, id, "put", timeout) {
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
        first
    }

    /// The first refusal of a message-path put since the last call.
    pub(crate) fn take_refusal(&mut self) -> Result<()> {
        self.unacked.refused.take().map_or(Ok(()), Err)
    }
}
