//! The RMA path: one-sided UCX operations on the server's pool through its remote key, over
//! whatever UCX chose for the data endpoint: shared memory on the same host, RDMA (verbs)
//! between hosts. RDMA is not a path of its own: it is this one over another transport.
//! Every operation takes the client lock (the UCX worker is single-threaded).

use super::{Atomic, SignalPut};
use crate::allocation::Allocation;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::session::Session;
use crate::signal::SignalOp;
use nam_proto::AtomicKind;
use nam_ucx::{AtomicOp, Posted};

/// Puts `data` at byte `offset`; returns at local completion.
#[inline]
pub(crate) fn put(session: &Session, a: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    // SAFETY: `data` is borrowed until the wait below returns.
    let posted =
        unsafe { link.data("put")?.put_nbx(data.as_ptr(), data.len(), a.remote_addr + offset, link.rkey(a.key)) };
    inner.finish(a.server, posted, "put", session.time_left())?;
    inner.count_put(data.len());
    inner.note_rma_put(a.server);
    Ok(())
}

/// Posts a put of `data`; the [`Op`] completes it.
pub(crate) fn put_nb<'a>(session: &'a Session, a: &Allocation, offset: u64, data: &'a [u8]) -> Result<Op<'a>> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    // SAFETY: the returned Op borrows `data` and waits for completion before it is dropped.
    let posted =
        unsafe { link.data("put")?.put_nbx(data.as_ptr(), data.len(), a.remote_addr + offset, link.rkey(a.key)) };
    let op = Op::posted(session, a.server, posted, "put")?;
    inner.count_put(data.len());
    inner.note_rma_put(a.server);
    Ok(op)
}

/// Posts a put of `len` bytes from `data` and keeps its request, if any, for the next
/// flush.
///
/// # Safety
/// `data` must stay valid and unmodified for `len` bytes until the next flush of the server.
pub(crate) unsafe fn put_nbi(
    session: &Session,
    a: &Allocation,
    offset: u64,
    (data, len): (*const u8, usize),
) -> Result<()> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let posted = link.data("put")?.put_nbx(data, len, a.remote_addr + offset, link.rkey(a.key));
    let addr = link.addr;
    if let Posted::InFlight(request) = posted.map_err(|source| Error::Transport { addr, what: "put_nbi", source })? {
        inner.keep_nbi(a.server, request);
    }
    inner.count_put(len);
    inner.note_rma_put(a.server);
    Ok(())
}

/// Posts a get of `len` bytes into `buffer` and keeps its request, if any, for the next
/// flush.
///
/// # Safety
/// `buffer` must stay valid for `len` bytes of writes, and unread, until the next flush.
pub(crate) unsafe fn get_nbi(
    session: &Session,
    a: &Allocation,
    offset: u64,
    (buffer, len): (*mut u8, usize),
) -> Result<()> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let posted = link.data("get")?.get_nbx(buffer, len, a.remote_addr + offset, link.rkey(a.key));
    let addr = link.addr;
    if let Posted::InFlight(request) = posted.map_err(|source| Error::Transport { addr, what: "get_nbi", source })? {
        inner.keep_nbi(a.server, request);
        inner.note_rma_put(a.server);
    }
    inner.count_get(len);
    Ok(())
}

/// Gets bytes from `offset` into `buffer`.
#[inline]
pub(crate) fn get(session: &Session, a: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let target = a.remote_addr + offset;
    // SAFETY: `buffer` is borrowed mutably until the wait below returns.
    let posted = unsafe { link.data("get")?.get_nbx(buffer.as_mut_ptr(), buffer.len(), target, link.rkey(a.key)) };
    inner.finish(a.server, posted, "get", session.time_left())?;
    inner.count_get(buffer.len());
    Ok(())
}

/// Posts a get into `buffer`; the [`Op`] completes it.
pub(crate) fn get_nb<'a>(session: &'a Session, a: &Allocation, offset: u64, buffer: &'a mut [u8]) -> Result<Op<'a>> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let target = a.remote_addr + offset;
    // SAFETY: the returned Op borrows `buffer` and waits for completion before it is dropped.
    let posted = unsafe { link.data("get")?.get_nbx(buffer.as_mut_ptr(), buffer.len(), target, link.rkey(a.key)) };
    let op = Op::posted(session, a.server, posted, "get")?;
    inner.count_get(buffer.len());
    Ok(op)
}

/// A UCX atomic on the word at `offset`; returns the old value. UCX's 64-bit atomics
/// serve the 64-bit kinds; a 32-bit kind is a compare-and-swap loop on the aligned 64-bit
/// word that holds it, which leaves the other half as it is.
#[inline]
pub(crate) fn atomic(session: &Session, a: &Allocation, offset: u64, atomic: Atomic) -> Result<u64> {
    let Atomic { op, value, compare } = atomic;
    if op.width_bytes() == 4 {
        return atomic32(session, a, offset, atomic);
    }
    let (op, operand, mut reply) = ucx_form(op, value, compare);
    atomic64(session, a, offset, (op, operand, &mut reply))?;
    Ok(reply)
}

/// A 64-bit kind in UCX's convention: its operation, operand and the reply buffer's value
/// on input.
fn ucx_form(op: AtomicKind, value: u64, compare: u64) -> (AtomicOp, u64, u64) {
    match op.operation() {
        AtomicKind::FetchAdd => (AtomicOp::Add, value, 0),
        AtomicKind::Swap => (AtomicOp::Swap, value, 0),
        // UCX takes the new value in the reply buffer and the one to compare as operand.
        AtomicKind::CompareSwap => (AtomicOp::CompareSwap, compare, value),
        AtomicKind::FetchAnd => (AtomicOp::And, value, 0),
        AtomicKind::FetchOr => (AtomicOp::Or, value, 0),
        _ => (AtomicOp::Xor, value, 0),
    }
}

/// Posts a 64-bit fetching atomic whose old word UCX writes to `sink` and keeps its
/// request for the next flush of the server (OpenSHMEM's `shmem_atomic_fetch_*_nbi`).
///
/// # Safety
/// `sink` must stay valid for an aligned 8-byte write, and unread, until the next flush.
pub(crate) unsafe fn atomic_nbi(
    session: &Session,
    a: &Allocation,
    offset: u64,
    atomic: Atomic,
    sink: crate::pending::FetchSink,
) -> Result<()> {
    let (op, operand, reply_in) = ucx_form(atomic.op, atomic.value, atomic.compare);
    let reply = sink.ptr() as *mut u64;
    reply.write(reply_in);
    let operand = Box::new(operand);
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let posted = link.data("atomic")?.atomic_nbx(op, &*operand, reply, a.remote_addr + offset, link.rkey(a.key));
    let addr = link.addr;
    let request = match posted.map_err(|source| Error::Transport { addr, what: "atomic_nbi", source })? {
        Posted::InFlight(request) => Some(request),
        Posted::Done => None,
    };
    inner.keep_nbi_atomic(a.server, request, operand);
    inner.traffic.atomics += 1;
    Ok(())
}

/// Posts a 64-bit atomic for a handle ([`crate::AtomicOp`]), which owns its operand and
/// reply word until it completes; a flush of the server completes it too.
pub(crate) fn atomic_nb(
    session: &Session,
    a: &Allocation,
    offset: u64,
    atomic: Atomic,
) -> Result<crate::pending::AmoPending> {
    let (op, operand, reply_in) = ucx_form(atomic.op, atomic.value, atomic.compare);
    let (operand, mut reply) = (Box::new(operand), Box::new(reply_in));
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    // SAFETY: both words are on the heap and move into the handle, which keeps them until
    // the request completes (its drop waits for it).
    let posted = unsafe {
        link.data("atomic")?.atomic_nbx(op, &*operand, &mut *reply, a.remote_addr + offset, link.rkey(a.key))
    };
    let addr = link.addr;
    let posted = posted.map_err(|source| Error::Transport { addr, what: "atomic_nb", source })?;
    inner.traffic.atomics += 1;
    match posted {
        Posted::Done => Ok(crate::pending::AmoPending::Done(*reply)),
        Posted::InFlight(request) => {
            // The next flush of the server flushes the endpoint, which completes it.
            inner.note_rma_put(a.server);
            Ok(crate::pending::AmoPending::Rma { request, operand, reply })
        }
    }
}

/// One UCX 64-bit atomic, waited for; `reply` receives the old word.
fn atomic64(
    session: &Session,
    a: &Allocation,
    offset: u64,
    (op, operand, reply): (AtomicOp, u64, &mut u64),
) -> Result<()> {
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let target = a.remote_addr + offset;
    // SAFETY: operand and reply live on this frame until the wait returns.
    let posted = unsafe { link.data("atomic")?.atomic_nbx(op, &operand, reply, target, link.rkey(a.key)) };
    inner.finish(a.server, posted, "atomic", session.time_left())?;
    inner.traffic.atomics += 1;
    Ok(())
}

/// A 32-bit atomic as a compare-and-swap loop on the aligned 64-bit word holding it.
fn atomic32(session: &Session, a: &Allocation, offset: u64, atomic: Atomic) -> Result<u64> {
    let Atomic { op, value, compare } = atomic;
    let whole = offset & !7;
    let shift = (offset & 4) * 8;
    let mut seen = 0u64;
    atomic64(session, a, whole, (AtomicOp::Add, 0, &mut seen))?;
    loop {
        let old = (seen >> shift) as u32;
        let (value, compare) = (value as u32, compare as u32);
        let new = match op.operation() {
            AtomicKind::FetchAdd => old.wrapping_add(value),
            AtomicKind::Swap => value,
            AtomicKind::CompareSwap if old == compare => value,
            AtomicKind::CompareSwap => return Ok(old.into()),
            AtomicKind::FetchAnd => old & value,
            AtomicKind::FetchOr => old | value,
            _ => old ^ value,
        };
        let replaced = (seen & !(0xffff_ffffu64 << shift)) | (u64::from(new) << shift);
        // UCX: the operand is the compare value, the reply buffer the new word (then the old).
        let mut found = replaced;
        atomic64(session, a, whole, (AtomicOp::CompareSwap, seen, &mut found))?;
        if found == seen {
            return Ok(old.into());
        }
        seen = found;
    }
}

/// Puts `data`, fences, then updates the signal word, so that a reader that sees the
/// signal also sees the data.
pub(crate) fn put_signal(session: &Session, put_signal: SignalPut<'_>) -> Result<()> {
    let SignalPut { data: a, offset, bytes: data, word: signal, word_offset: signal_offset, value, op } = put_signal;
    let _call = session.begin_call();
    let mut inner = session.lock();
    let link = &inner.links[a.server];
    let (addr, ep) = (link.addr, link.data("put_signal")?);
    let transport = |what| move |source| Error::Transport { addr, what, source };
    // SAFETY: `data` is borrowed until the put is waited for below.
    let put = unsafe { ep.put_nbx(data.as_ptr(), data.len(), a.remote_addr + offset, link.rkey(a.key)) }
        .map_err(transport("put"))?;
    inner.worker.fence().map_err(transport("fence"))?;
    let mut old = value;
    let (atomic_op, reply) = match op {
        SignalOp::Set => (AtomicOp::Swap, &mut old as *mut u64),
        SignalOp::Add => (AtomicOp::Add, std::ptr::null_mut()),
    };
    let word = signal.remote_addr + signal_offset;
    // SAFETY: `value` and `old` live on this frame until the waits below return.
    let signal_op = unsafe { ep.atomic_nbx(atomic_op, &value, reply, word, link.rkey(signal.key)) };
    let put_result = link.wait(put, session.time_left(), "put");
    let signal_result =
        signal_op.map_err(transport("signal")).and_then(|p| link.wait(p, session.time_left(), "signal"));
    put_result?;
    signal_result?;
    inner.count_put(data.len());
    inner.note_rma_put(a.server);
    inner.traffic.atomics += 1;
    Ok(())
}

/// Remote completion of every RMA operation issued to `server`.
pub(crate) fn flush(session: &Session, server: usize) -> Result<()> {
    let mut inner = session.lock();
    if inner.rma_idle(server) {
        // Nothing in flight (direct stores are visible when they retire): no deadline, no
        // clock read, which would be most of the cost of a put + quiet on the direct path.
        return session.alive(server, "flush");
    }
    // Its steps share one deadline (the caller's, if it began one).
    let _call = session.begin_call();
    inner.finish_nbi(server, session.time_left())?;
    if !inner.take_rma_unflushed(server) {
        // Nothing posted since the last flush: direct stores are visible when they retire,
        // gets and atomics complete when waited for.
        return session.alive(server, "flush");
    }
    // Learn of a dead server before promising remote completion.
    inner.worker.progress();
    let link = &inner.links[server];
    let posted: Posted = link.data("flush")?.flush_nbx().map_err(|source| Error::Transport {
        addr: link.addr,
        what: "flush",
        source,
    })?;
    link.wait(posted, session.time_left(), "flush")
}
