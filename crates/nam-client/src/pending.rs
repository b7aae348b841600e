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

/// An atomic with a handle, as its path left it ([`crate::path::Path::atomic_nb`]).
pub(crate) enum AmoPending {
    /// Done: the old word.
    Done(u64),
    /// Sent on the message path as request `id` of the stream that sent it.
    Message { id: u64 },
    /// Posted on UCX RMA: its request, and the words UCX reads and writes until it completes.
    Rma { request: nam_ucx::Request, operand: Box<u64>, reply: Box<u64> },
}

/// What the reply to an outstanding message-path request is for.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// A put or signal: only a refusal matters (reported by the next flush).
    Ack,
    /// A fetching atomic without a handle: its old word goes to the sink.
    Fetch(FetchSink),
    /// An atomic with a handle ([`crate::AtomicOp`]): its outcome is kept for the handle.
    Handle,
}

/// The unanswered requests of one stream (the client's, or a context's), per server and
/// oldest first; the first refusal among the answers collected since its last flush; and
/// the outcomes of handle atomics collected before their handle asked.
#[derive(Default)]
struct Answers {
    ids: Vec<VecDeque<(u64, Answer)>>,
    refused: Option<Error>,
    finished: std::collections::HashMap<u64, Result<u64>>,
}

impl Answers {
    /// Whether request `id` is still to be answered or its outcome is still to be taken.
    fn awaits(&self, id: u64) -> bool {
        self.ids.iter().any(|q| q.iter().any(|(i, _)| *i == id))
    }

    fn idle(&self) -> bool {
        self.ids.iter().all(VecDeque::is_empty)
    }
}

thread_local! {
    /// The message-path stream this thread's operations belong to: 0 is the client's, others
    /// are contexts' ([`StreamScope`]).
    static STREAM: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// While it lives, this thread's message-path operations belong to a context's stream: its
/// requests are recorded, settled and flushed apart from the client's and other contexts'
/// (the replies still arrive on the client's endpoint, under the client lock).
pub(crate) struct StreamScope {
    outer: u64,
}

impl StreamScope {
    /// Enters stream `id` (from [`new_stream`]; 0 is the client's).
    pub(crate) fn enter(id: u64) -> StreamScope {
        StreamScope { outer: STREAM.replace(id) }
    }
}

impl Drop for StreamScope {
    fn drop(&mut self) {
        STREAM.set(self.outer);
    }
}

/// A new stream id for a context, never 0 nor reused in this process.
pub(crate) fn new_stream() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The unanswered requests of every stream, and the handle-less RMA operations.
#[derive(Default)]
pub(crate) struct Unacked {
    /// The client's stream.
    client: Answers,
    /// Contexts' streams, by id ([`StreamScope`]).
    contexts: std::collections::HashMap<u64, Answers>,
    /// Per server: an RMA put was posted since its last flush.
    rma_unflushed: Vec<bool>,
    /// RMA puts and gets posted without a handle ([`crate::Client::put_nbi`]), by server,
    /// waited for by the next flush.
    nbi: Vec<(usize, nam_ucx::Request)>,
    /// Operands of RMA atomics posted without a handle, by server: UCX may read them until
    /// the operation completes, so they live until the next flush of the server.
    nbi_operands: Vec<(usize, Box<u64>)>,
}

impl Unacked {
    /// The current thread's stream.
    fn current(&mut self) -> &mut Answers {
        match STREAM.get() {
            0 => &mut self.client,
            id => self.contexts.entry(id).or_default(),
        }
    }
}

/// Waits for the reply to the oldest outstanding request of `answers` to `server`.
fn collect_oldest(
    answers: &mut Answers,
    link: &crate::link::Link,
    replies: &crate::link::ReplyQueue,
    server: usize,
    timeout: Duration,
) -> Result<()> {
    let Some((id, answer)) = answers.ids[server].pop_front() else { return Ok(()) };
    let result = link.receive(replies, id, "put", timeout);
    match (answer, result) {
        (Answer::Handle, Ok(nam_proto::Reply::Value(old))) => {
            answers.finished.insert(id, Ok(old));
            Ok(())
        }
        (Answer::Handle, Ok(reply)) => {
            answers.finished.insert(id, Err(crate::session::unexpected(link.addr, "atomic_nb", reply)));
            Ok(())
        }
        (Answer::Handle, Err(e @ Error::Refused { .. })) => {
            answers.finished.insert(id, Err(e));
            Ok(())
        }
        (_, Ok(nam_proto::Reply::Value(old))) => {
            if let Answer::Fetch(sink) = answer {
                sink.deliver(old);
            }
            Ok(())
        }
        (Answer::Fetch(_), Ok(reply)) => {
            let e = crate::session::unexpected(link.addr, "atomic_nbi", reply);
            answers.refused.get_or_insert(e);
            Ok(())
        }
        (_, Ok(_)) => Ok(()),
        (_, Err(e @ Error::Refused { .. })) => {
            answers.refused.get_or_insert(e);
            Ok(())
        }
        (answer, Err(e)) => {
            // The server is gone or late: forget the rest, whose replies may never come;
            // their handles learn why.
            if let Answer::Handle = answer {
                answers.finished.insert(id, Err(e.clone()));
            }
            for (id, answer) in answers.ids[server].drain(..) {
                if let Answer::Handle = answer {
                    answers.finished.insert(id, Err(e.clone()));
                }
            }
            Err(e)
        }
    }
}

impl Inner {
    /// Notes that request `id` to `server` was sent and its reply is to be collected later;
    /// collects the oldest first when too many are outstanding.
    pub(crate) fn expect_reply(&mut self, server: usize, id: u64, timeout: Duration) -> Result<()> {
        self.expect_answer(server, (id, Answer::Ack), timeout)
    }

    /// [`Inner::expect_reply`] for a fetching atomic whose old word goes to `sink`.
    pub(crate) fn expect_fetch(&mut self, server: usize, id: u64, sink: FetchSink, timeout: Duration) -> Result<()> {
        self.expect_answer(server, (id, Answer::Fetch(sink)), timeout)
    }

    /// [`Inner::expect_reply`] for an atomic whose handle takes its outcome
    /// ([`Inner::take_handle`]).
    pub(crate) fn expect_handle(&mut self, server: usize, id: u64, timeout: Duration) -> Result<()> {
        self.expect_answer(server, (id, Answer::Handle), timeout)
    }

    fn expect_answer(&mut self, server: usize, pending: (u64, Answer), timeout: Duration) -> Result<()> {
        let answers = self.unacked.current();
        if answers.ids.len() <= server {
            answers.ids.resize_with(server + 1, VecDeque::new);
        }
        answers.ids[server].push_back(pending);
        if answers.ids[server].len() > MESSAGE_PUTS_IN_FLIGHT_MAX {
            collect_oldest(answers, &self.links[server], &self.replies, server, timeout)?;
        }
        Ok(())
    }

    /// Collects every outstanding reply of this thread's stream ([`StreamScope`]) from every
    /// server (before a call that clears the reply queue, and by flushes). Refusals stay for
    /// [`Inner::take_refusal`]. All of it within `timeout`, however many servers are late.
    /// Other streams' requests are not waited for: their replies stay queued for them.
    pub(crate) fn settle(&mut self, timeout: Duration) -> Result<()> {
        let _call = crate::deadline::CallDeadline::begin(timeout);
        let answers = self.unacked.current();
        let mut first = Ok(());
        for server in 0..answers.ids.len() {
            while !answers.ids[server].is_empty() {
                let left = crate::deadline::time_left(timeout);
                if let Err(e) = collect_oldest(answers, &self.links[server], &self.replies, server, left) {
                    first = first.and(Err(e));
                }
            }
        }
        first
    }

    /// The outcome of handle atomic `id` to `server` of stream `stream`: `None` while its
    /// reply has not come. `wait` waits for it that long; otherwise it only progresses once.
    /// Other requests' replies stay queued for whoever waits for them.
    pub(crate) fn take_handle(
        &mut self,
        (stream, server, id): (u64, usize, u64),
        wait: Option<Duration>,
    ) -> Result<Option<u64>> {
        let _scope = StreamScope::enter(stream);
        let answers = self.unacked.current();
        if let Some(outcome) = answers.finished.remove(&id) {
            return outcome.map(Some);
        }
        let Some(position) = answers.ids.get(server).and_then(|q| q.iter().position(|(i, _)| *i == id)) else {
            return Err(Error::InvalidArgument("the atomic's outcome was already taken"));
        };
        let link = &self.links[server];
        let outcome = match wait {
            Some(timeout) => link.receive(&self.replies, id, "atomic_nb", timeout).map(Some),
            None => link.poll_reply(&self.replies, id, "atomic_nb"),
        };
        let outcome = match outcome {
            Ok(None) => return Ok(None),
            Ok(Some(nam_proto::Reply::Value(old))) => Ok(Some(old)),
            Ok(Some(reply)) => Err(crate::session::unexpected(link.addr, "atomic_nb", reply)),
            Err(e) => Err(e),
        };
        answers.ids[server].remove(position);
        outcome
    }

    /// Empties the reply queue of late replies (to calls that timed out) before a call waits
    /// for one of its own, keeping those that any stream still awaits.
    pub(crate) fn clear_stale_replies(&self) {
        let unacked = &self.unacked;
        let mut queue = self.replies.lock();
        if unacked.client.idle() && unacked.contexts.values().all(Answers::idle) {
            queue.clear();
            return;
        }
        queue.retain(|bytes| match nam_proto::decode_header(bytes) {
            Ok((h, _)) => {
                unacked.client.awaits(h.request_id) || unacked.contexts.values().any(|a| a.awaits(h.request_id))
            }
            Err(_) => false,
        });
    }

    /// Forgets a context's stream as it is destroyed (after its quiet): late replies to it
    /// become stale.
    pub(crate) fn end_stream(&mut self, stream: u64) {
        self.unacked.contexts.remove(&stream);
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

    /// Whether a flush of `server`'s RMA path has nothing to complete: no put posted since
    /// the last flush and no handle-less operation (or leftover operand) of it kept. Lets an
    /// idle flush return without reading the clock for a deadline.
    #[inline]
    pub(crate) fn rma_idle(&self, server: usize) -> bool {
        let unacked = &self.unacked;
        !unacked.rma_unflushed.get(server).copied().unwrap_or(false)
            && !unacked.nbi.iter().any(|(s, _)| *s == server)
            && !unacked.nbi_operands.iter().any(|(s, _)| *s == server)
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

    /// The first refusal of a message-path put of this thread's stream since the last call.
    pub(crate) fn take_refusal(&mut self) -> Result<()> {
        self.unacked.current().refused.take().map_or(Ok(()), Err)
    }
}
