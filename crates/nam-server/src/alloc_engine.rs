//! The allocation manager as an engine: allocate, open and free, the message data path
//! (put, get, atomics for clients that do not reach the pool one-sided) and the global
//! address space's queries (a client's protection domain, resolving a global address with
//! the domain check of [`Manager::hold_global`]). The manager itself is state every engine
//! shares ([`EngineCtx::manager`]); this engine is its clients' door to it.

use crate::engine::{Caller, Engine, EngineCtx, Execution};
use crate::manager::{Manager, Refusal};
use nam_proto::gas::{DomainReply, GasRequest};
use nam_proto::{AtomicKind, Reply, Request, Status};

/// Serves the allocation, data-path and global-address requests.
pub(crate) struct AllocEngine;

impl Engine for AllocEngine {
    fn execute(&mut self, ctx: &mut EngineCtx<'_>, caller: &Caller<'_>, request: Request) -> Execution {
        let client = caller.client;
        Execution::Done(match request {
            Request::Alloc(alloc) => ctx.manager.allocate(client, &alloc).map(|grant| {
                ctx.pool.zero(grant.offset, grant.size);
                Reply::Alloc(ctx.alloc_reply(&grant))
            }),
            Request::Open { name } => ctx.manager.open(client, &name).map(|g| Reply::Alloc(ctx.alloc_reply(&g))),
            Request::Free { handle } => ctx.manager.free(client, handle).map(|()| Reply::Done),
            Request::Put { handle, offset, data } => {
                checked_range(ctx.manager, client, handle, offset, data.len() as u64).map(|at| {
                    ctx.pool.write(at, &data);
                    Reply::Done
                })
            }
            Request::Get { handle, offset, len } => checked_range(ctx.manager, client, handle, offset, len as u64)
                .map(|at| Reply::Data(ctx.pool.read(at, len as usize))),
            Request::Atomic { handle, offset, op, value, compare } => {
                atomic(ctx, client, handle, offset, op, value, compare)
            }
            Request::Gas(GasRequest::Domain) => ctx
                .manager
                .domain_of(client)
                .map(|domain| Reply::Domain(DomainReply { server_tag: ctx.server_tag, domain })),
            Request::Gas(GasRequest::Resolve { address }) => resolve(ctx, client, address),
            Request::Gas(GasRequest::PutSignal { handle, offset, signal_handle, signal_offset, op, value, data }) => {
                put_signal(ctx, client, (handle, offset, &data), (signal_handle, signal_offset, op, value))
            }
            request => return Execution::Declined(request),
        })
    }

    fn label(&self) -> &'static str {
        "the allocation manager"
    }
}

/// The pool offset of `[offset, offset + len)` inside `handle`, if `client` holds it and
/// the range fits.
pub(crate) fn checked_range(
    manager: &Manager,
    client: u64,
    handle: u64,
    offset: u64,
    len: u64,
) -> Result<u64, Refusal> {
    let (base, size) = manager.resolve(client, handle)?;
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(base + offset),
        _ => Err(Refusal {
            status: Status::OutOfBounds,
            message: format!("offset {offset} + length {len} is outside the {size}-byte allocation"),
        }),
    }
}

/// An atomic on the 32- or 64-bit word at `offset`; replies with the old word
/// (zero-extended). Then wakes same-host clients asleep on the word (see
/// [`crate::watch::wake`]): their signal may have come through here.
fn atomic(
    ctx: &EngineCtx<'_>,
    client: u64,
    handle: u64,
    offset: u64,
    op: AtomicKind,
    value: u64,
    compare: u64,
) -> Result<Reply, Refusal> {
    let width = op.width_bytes();
    if !offset.is_multiple_of(width) {
        return Err(Refusal {
            status: Status::InvalidArgument,
            message: format!("offset {offset} is not {width}-byte aligned"),
        });
    }
    let at = checked_range(ctx.manager, client, handle, offset, width)?;
    let old = if width == 8 {
        op.apply64(ctx.pool.word(at), value, compare)
    } else {
        op.apply32(crate::watch::word32(ctx.pool, at), value as u32, compare as u32).into()
    };
    crate::watch::wake(ctx.pool, at);
    Ok(Reply::Value(old))
}

/// A put-with-signal in one message ([`GasRequest::PutSignal`]): both ranges checked first,
/// then the data stored, then the signal word changed (sequentially consistent, after the
/// data for every observer) and its same-host sleepers woken.
fn put_signal(
    ctx: &EngineCtx<'_>,
    client: u64,
    (handle, offset, data): (u64, u64, &[u8]),
    (signal_handle, signal_offset, op, value): (u64, u64, AtomicKind, u64),
) -> Result<Reply, Refusal> {
    if !matches!(op, AtomicKind::Swap | AtomicKind::FetchAdd) {
        return Err(Refusal {
            status: Status::InvalidArgument,
            message: format!("a signal is a 64-bit swap or fetch-add, not {op:?}"),
        });
    }
    if !signal_offset.is_multiple_of(8) {
        return Err(Refusal {
            status: Status::InvalidArgument,
            message: format!("signal offset {signal_offset} is not 8-byte aligned"),
        });
    }
    let at = checked_range(ctx.manager, client, handle, offset, data.len() as u64)?;
    let signal_at = checked_range(ctx.manager, client, signal_handle, signal_offset, 8)?;
    ctx.pool.write(at, data);
    op.apply64(ctx.pool.word(signal_at), value, 0);
    crate::watch::wake(ctx.pool, signal_at);
    Ok(Reply::Done)
}

/// Resolves a global address of this server: the allocation it names, if the client's
/// protection domain may reach it and the offset lies inside.
fn resolve(ctx: &mut EngineCtx<'_>, client: u64, address: nam_proto::address::GlobalAddress) -> Result<Reply, Refusal> {
    if address.server() != ctx.server_tag {
        return Err(Refusal {
            status: Status::WrongServer,
            message: format!("{address} names server tag {:08x}, this is {:08x}", address.server(), ctx.server_tag),
        });
    }
    let grant = ctx.manager.hold_global(client, address.domain(), address.handle())?;
    if address.offset() >= grant.size {
        return Err(Refusal {
            status: Status::OutOfBounds,
            message: format!("{address}: offset {} is outside the {}-byte allocation", address.offset(), grant.size),
        });
    }
    Ok(Reply::Alloc(ctx.alloc_reply(&grant)))
}
