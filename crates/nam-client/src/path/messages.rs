//! The message data path: put, get and atomics as control messages that the server executes
//! (see [`crate::link::DataPath::Messages`]). Transfers are split into chunks of
//! [`DATA_CHUNK_MAX`] bytes; a get keeps up to [`MESSAGE_WINDOW`] chunks in flight, so
//! bandwidth is not one round trip per chunk. Puts (and put-with-signal) return once sent,
//! their replies collected later ([`crate::pending`]); gets and atomics complete at the
//! server before they return.

use super::{Atomic, SignalPut};
use crate::allocation::Allocation;
use crate::constants::MESSAGE_WINDOW;
use crate::error::{Error, Result};
use crate::session::{Inner, Session};
use crate::signal::SignalOp;
use nam_proto::gas::GasRequest;
use nam_proto::limits::DATA_CHUNK_MAX;
use nam_proto::{AtomicKind, Reply, Request};
use std::time::Duration;

/// Puts `data` at byte `offset` through the server: returns once its messages are sent
/// (`data` may be reused); the server's replies are collected later ([`crate::pending`]).
pub(crate) fn put(session: &Session, a: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
    let mut inner = session.lock();
    inner.post_put(a, offset, data, session.time_left())?;
    inner.count_put(data.len());
    Ok(())
}

/// Gets bytes from `offset` into `buffer` through the server.
pub(crate) fn get(session: &Session, a: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
    let mut inner = session.lock();
    inner.get_messages(a, offset, buffer, session.time_left())?;
    inner.count_get(buffer.len());
    Ok(())
}

/// An atomic the server executes; returns the old value.
pub(crate) fn atomic(session: &Session, a: &Allocation, offset: u64, atomic: Atomic) -> Result<u64> {
    let mut inner = session.lock();
    let old = inner.atomic_messages(a, offset, atomic, session.time_left())?;
    inner.traffic.atomics += 1;
    Ok(old)
}

/// Sends an atomic the server executes and returns at once; its old word goes to `sink`
/// when the reply is collected (at the latest by the next flush, [`crate::pending`]).
pub(crate) fn atomic_nbi(
    session: &Session,
    a: &Allocation,
    offset: u64,
    atomic: Atomic,
    sink: crate::pending::FetchSink,
) -> Result<()> {
    let Atomic { op, value, compare } = atomic;
    let request = Request::Atomic { handle: a.handle(), offset, op, value, compare };
    let mut inner = session.lock();
    let id = inner.request_id();
    inner.links[a.server()].send(id, &request, "atomic_nbi", session.time_left())?;
    inner.expect_fetch(a.server(), id, sink, session.time_left())?;
    inner.traffic.atomics += 1;
    Ok(())
}

/// Sends an atomic the server executes and returns at once; its handle (or the next flush,
/// which keeps the outcome for it) collects the reply.
pub(crate) fn atomic_nb(
    session: &Session,
    a: &Allocation,
    offset: u64,
    atomic: Atomic,
) -> Result<crate::pending::AmoPending> {
    let Atomic { op, value, compare } = atomic;
    let request = Request::Atomic { handle: a.handle(), offset, op, value, compare };
    let mut inner = session.lock();
    let id = inner.request_id();
    inner.links[a.server()].send(id, &request, "atomic_nb", session.time_left())?;
    inner.expect_handle(a.server(), id, session.time_left())?;
    inner.traffic.atomics += 1;
    Ok(crate::pending::AmoPending::Message { id })
}

/// Puts `data`, then updates the signal word. To one server and within one chunk, one
/// PutSignal message that the server executes whole (data first); otherwise a put and then
/// an atomic, which the server executes in order, so the data is stored before the signal.
/// One message instead of two is one send fewer for this caller and one reply fewer for the
/// server, both on a ping-pong's path.
pub(crate) fn put_signal(session: &Session, put: SignalPut<'_>) -> Result<()> {
    let _call = session.begin_call();
    let mut inner = session.lock();
    let op = if put.op == SignalOp::Set { AtomicKind::Swap } else { AtomicKind::FetchAdd };
    let server = put.word.server();
    let request = if put.data.server() == server && put.bytes.len() <= DATA_CHUNK_MAX {
        Request::Gas(GasRequest::PutSignal {
            handle: put.data.handle(),
            offset: put.offset,
            signal_handle: put.word.handle(),
            signal_offset: put.word_offset,
            op,
            value: put.value,
            data: put.bytes.to_vec(),
        })
    } else {
        inner.post_put(put.data, put.offset, put.bytes, session.time_left())?;
        Request::Atomic { handle: put.word.handle(), offset: put.word_offset, op, value: put.value, compare: 0 }
    };
    // Not waited for either: the signal completes with the put, remotely at the next flush.
    let id = inner.request_id();
    inner.links[server].send(id, &request, "put_signal", session.time_left())?;
    inner.expect_reply(server, id, session.time_left())?;
    inner.count_put(put.bytes.len());
    inner.traffic.atomics += 1;
    Ok(())
}

/// Every message operation completed at the server before it returned: a flush only makes
/// sure the server is still there.
pub(crate) fn flush(session: &Session, server: usize) -> Result<()> {
    let mut inner = session.lock();
    // Every reply in: every put the server answered is in its memory.
    inner.settle(session.time_left())?;
    // Learn of a dead server before promising remote completion.
    inner.worker.progress();
    session.alive(server, "flush")?;
    inner.take_refusal()
}

/// Asks the server to answer once the word at `offset` satisfies `watch`, and sleeps until
/// it does or `until` passes; returns the word the server sent, or `None` when no answer
/// came by then (the caller reads the word and decides).
pub(crate) fn watch(
    session: &Session,
    a: &Allocation,
    offset: u64,
    watch: crate::wait::WordWatch,
    until: std::time::Instant,
) -> Result<Option<u64>> {
    let remaining = until.saturating_duration_since(std::time::Instant::now());
    let request = Request::Gas(GasRequest::Watch {
        handle: a.handle(),
        offset,
        compare: watch.code,
        width_bytes: watch.width_bytes,
        value: watch.value,
        timeout_ms: remaining.as_millis().clamp(1, nam_proto::limits::WATCH_TIMEOUT_MS_MAX.into()) as u32,
    });
    let mut inner = session.lock();
    // Not settled first: the replies to earlier puts and signals (a ping-pong's) stay
    // queued for whoever collects them, instead of costing this wait a round trip; the
    // server executes the Watch after them anyway.
    inner.clear_stale_replies();
    let id = inner.request_id();
    let link = &inner.links[a.server()];
    link.send(id, &request, "watch", session.time_left())?;
    // The server answers by `until` (rounded up to its millisecond) plus a trip.
    let give_up = until + WATCH_REPLY_GRACE;
    // A reply within `wait_spin` is taken without arming the worker's event fd and
    // sleeping on it, whose wake-up costs tens of microseconds. The polls yield the core
    // between them.
    let spin_until = std::time::Instant::now() + session.wait_spin;
    let mut can_sleep = true;
    loop {
        if let Some(reply) = link.poll_reply(&inner.replies, id, "watch")? {
            return match reply {
                Reply::Value(word) => Ok(Some(word)),
                _ => Err(Error::UnexpectedReply { addr: link.addr, what: "watch" }),
            };
        }
        let now = std::time::Instant::now();
        if now >= give_up {
            // No news: the caller reads the word itself (its late reply is dropped with the
            // next call's stale replies).
            return Ok(None);
        }
        if now < spin_until.min(give_up) {
            // Yield, not spin: the server (or the peer that will signal) may need this core
            // (as `Link::receive_until` does).
            std::thread::yield_now();
            continue;
        }
        // Sleep on the worker's event fd: the reply wakes it. Without one, short naps.
        if can_sleep {
            can_sleep = inner.worker.wait_for_events(give_up - now).is_ok();
        } else {
            std::thread::sleep(crate::constants::POLL_BACKOFF_STEP);
        }
    }
}

/// How long after its deadline a Watch's reply is still waited for.
const WATCH_REPLY_GRACE: Duration = Duration::from_millis(2);

impl Inner {
    /// Sends `data` for `offset` through the server in chunks, without waiting for the
    /// replies ([`crate::pending`]).
    /// `timeout` bounds the whole call, not each chunk (`nam.h`: the deadline is the call's).
    fn post_put(&mut self, a: &Allocation, offset: u64, data: &[u8], timeout: Duration) -> Result<()> {
        let (server, handle) = (a.server(), a.handle());
        let deadline = std::time::Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        let whole = |e: Error| match e {
            Error::Timeout { addr, what, .. } => Error::Timeout { addr, what, timeout_ms: timeout.as_millis() as u64 },
            e => e,
        };
        for (i, chunk) in data.chunks(DATA_CHUNK_MAX).enumerate() {
            let id = self.request_id();
            let bytes = nam_proto::encode_put(id, handle, offset + (i * DATA_CHUNK_MAX) as u64, chunk);
            self.links[server].send_bytes(&bytes, "put", left()).map_err(whole)?;
            self.expect_reply(server, id, left()).map_err(whole)?;
        }
        Ok(())
    }

    /// Reads into `buffer` from `offset` through the server.
    fn get_messages(&mut self, a: &Allocation, offset: u64, buffer: &mut [u8], timeout: Duration) -> Result<()> {
        let len = buffer.len();
        let requests = (0..len.div_ceil(DATA_CHUNK_MAX)).map(|i| Request::Get {
            handle: a.handle(),
            offset: offset + (i * DATA_CHUNK_MAX) as u64,
            len: (len - i * DATA_CHUNK_MAX).min(DATA_CHUNK_MAX) as u32,
        });
        self.pipeline(a.server(), requests, "get", timeout, |i, reply| match reply {
            Reply::Data(bytes) => {
                let at = i * DATA_CHUNK_MAX;
                let want = (len - at).min(DATA_CHUNK_MAX);
                if bytes.len() != want {
                    return Err("get");
                }
                buffer[at..at + want].copy_from_slice(&bytes);
                Ok(())
            }
            _ => Err("get"),
        })
    }

    /// A 64-bit atomic executed by the server; returns the old value.
    fn atomic_messages(&mut self, a: &Allocation, offset: u64, atomic: Atomic, timeout: Duration) -> Result<u64> {
        let Atomic { op, value, compare } = atomic;
        let request = Request::Atomic { handle: a.handle(), offset, op, value, compare };
        match self.call(a.server(), &request, "atomic", timeout)? {
            Reply::Value(old) => Ok(old),
            _ => Err(Error::UnexpectedReply { addr: self.links[a.server()].addr, what: "atomic" }),
        }
    }

    /// Sends `requests` to `server` keeping up to [`MESSAGE_WINDOW`] unanswered, handing each reply
    /// (with its index) to `accept`. Stops at the first error after collecting the replies
    /// already requested, so no late reply is left to confuse a later call. `timeout` bounds
    /// the whole transfer, not each chunk (`nam.h`: the deadline is the call's): after it
    /// passes, the replies still outstanding are not waited for (a later call discards them).
    fn pipeline(
        &mut self,
        server: usize,
        requests: impl Iterator<Item = Request>,
        what: &'static str,
        timeout: Duration,
        mut accept: impl FnMut(usize, Reply) -> std::result::Result<(), &'static str>,
    ) -> Result<()> {
        let addr = self.links[server].addr;
        self.settle(timeout)?;
        let deadline = std::time::Instant::now() + timeout;
        // What is left of the call's deadline; a timeout names the call's, not the remainder.
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        let whole = |e: Error| match e {
            Error::Timeout { addr, what, .. } => Error::Timeout { addr, what, timeout_ms: timeout.as_millis() as u64 },
            e => e,
        };
        self.clear_stale_replies();
        let mut in_flight: std::collections::VecDeque<(usize, u64)> = std::collections::VecDeque::new();
        let mut first_error = None;
        let mut requests = requests.enumerate().peekable();
        while requests.peek().is_some() || !in_flight.is_empty() {
            while in_flight.len() < MESSAGE_WINDOW && first_error.is_none() {
                let Some((index, request)) = requests.next() else { break };
                let id = self.request_id();
                let bytes = request.encode(id);
                self.links[server].send_bytes(&bytes, what, left()).map_err(whole)?;
                in_flight.push_back((index, id));
            }
            let Some((index, id)) = in_flight.pop_front() else { break };
            let result = self.links[server]
                .receive(&self.replies, id, what, left())
                .map_err(whole)
                .and_then(|reply| accept(index, reply).map_err(|what| Error::UnexpectedReply { addr, what }));
            match (result, &first_error) {
                // The deadline has passed: the other replies would only be waited for in vain.
                (Err(e @ Error::Timeout { .. }), None) => return Err(e),
                (Err(e), None) => first_error = Some(e),
                _ => {}
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
