//! Mailbox delivery by the server, for senders that reach it through messages: the same
//! protocol a one-sided sender follows ([`nam_proto::mailbox`]), executed next to the
//! memory in one step. The server's loop is single-threaded, but one-sided senders and the
//! owner touch the same words concurrently, so the words are used atomically.

use crate::engine::{Caller, Engine, EngineCtx, Execution};
use crate::manager::Refusal;
use crate::pool::Pool;
use nam_proto::gas::GasRequest;
use nam_proto::mailbox::*;
use nam_proto::{Reply, Request, Status};
use std::sync::atomic::Ordering::SeqCst;

/// Delivers the mailbox messages that senders send through the server.
pub(crate) struct MailboxEngine;

impl Engine for MailboxEngine {
    fn execute(&mut self, ctx: &mut EngineCtx<'_>, caller: &Caller<'_>, request: Request) -> Execution {
        let Request::Gas(GasRequest::MailboxSend { handle, offset, sender, data }) = request else {
            return Execution::Declined(request);
        };
        Execution::Done(send(ctx, caller.client, handle, offset, sender, &data))
    }

    fn label(&self) -> &'static str {
        "the mailbox engine"
    }
}

/// Delivers `data` into the mailbox at `offset` of `client`'s allocation `handle`.
fn send(
    ctx: &EngineCtx<'_>,
    client: u64,
    handle: u64,
    offset: u64,
    sender: u32,
    data: &[u8],
) -> Result<Reply, Refusal> {
    let (base, size) = ctx.manager.resolve(client, handle)?;
    if offset >= size {
        return refuse(Status::OutOfBounds, format!("offset {offset} is outside the {size}-byte allocation"));
    }
    deliver(ctx.pool, base + offset, base + size, sender, data)?;
    Ok(Reply::Done)
}

fn refuse<T>(status: Status, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal { status, message: message.into() })
}

/// Delivers `data` into the mailbox whose header is at pool offset `base`, inside an
/// allocation that ends at pool offset `end`. Checks the header, the slot size and the
/// bounds; a full mailbox is refused with `MailboxFull` and nothing is written.
pub(crate) fn deliver(pool: &Pool, base: u64, end: u64, sender: u32, data: &[u8]) -> Result<(), Refusal> {
    if !base.is_multiple_of(8) || base + MAILBOX_HEADER_LEN > end {
        return refuse(Status::InvalidArgument, "no room for a mailbox header there");
    }
    let Some(layout) = MailboxLayout::decode_header(&pool.read(base, MAILBOX_HEADER_LEN as usize)) else {
        return refuse(Status::InvalidArgument, "the address does not point to a mailbox");
    };
    if base + layout.total_len() > end {
        return refuse(Status::OutOfBounds, "the mailbox header claims more slots than its allocation holds");
    }
    if data.len() > layout.slot_size as usize {
        return refuse(Status::TooLarge, format!("{}-byte message, the slot size is {}", data.len(), layout.slot_size));
    }
    let (tail, head) = (pool.word(base + MAILBOX_TAIL_AT), pool.word(base + MAILBOX_HEAD_AT));
    let mut ticket = tail.load(SeqCst);
    loop {
        if ticket.wrapping_sub(head.load(SeqCst)) >= layout.slots as u64 {
            return refuse(Status::MailboxFull, format!("mailbox full ({} slots)", layout.slots));
        }
        match tail.compare_exchange(ticket, ticket + 1, SeqCst, SeqCst) {
            Ok(_) => break,
            Err(now) => ticket = now,
        }
    }
    let slot = base + layout.slot_at(ticket);
    let mut meta = [0u8; 8];
    meta[0..4].copy_from_slice(&(data.len() as u32).to_le_bytes());
    meta[4..8].copy_from_slice(&sender.to_le_bytes());
    pool.write(slot + 8, &meta);
    pool.write(slot + MAILBOX_SLOT_HEADER_LEN, data);
    pool.word(slot).store(ticket + 1, SeqCst);
    Ok(())
}
