//! Control messages of the global address space and the server-side allreduce (kinds
//! 32..=47). `docs/protocol.md` ("Global addresses, mailboxes and allreduce") gives their
//! byte layout; [`crate::Request::Gas`] and [`crate::Reply::Domain`] carry them.

use crate::address::GlobalAddress;
use crate::codec::{Reader, Writer};
use crate::limits::NAME_LEN_MAX;
use crate::DecodeError;

/// Kind of [`GasRequest::Domain`].
pub const KIND_DOMAIN: u16 = 32;
/// Kind of [`GasRequest::Resolve`].
pub const KIND_RESOLVE: u16 = 33;
/// Kind of [`GasRequest::ReduceAttach`].
pub const KIND_REDUCE_ATTACH: u16 = 34;
/// Kind of [`GasRequest::ReduceKick`].
pub const KIND_REDUCE_KICK: u16 = 35;
/// Kind of [`GasRequest::MailboxSend`].
pub const KIND_MAILBOX_SEND: u16 = 36;
/// Kind of [`GasRequest::Watch`].
pub const KIND_WATCH: u16 = 37;
/// Kind of [`GasRequest::PutSignal`].
pub const KIND_PUT_SIGNAL: u16 = 38;
pub use crate::limits::{REDUCE_CHUNK_MAX, REDUCE_RANKS_MAX};

/// A request of the global address space or the allreduce engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GasRequest {
    /// Kind 32: this server's tag and the caller's protection domain on it.
    Domain,
    /// Kind 33: the allocation behind a global address; the server checks the domain and
    /// that the allocation is live, then adds the caller as a holder and answers with an
    /// [`crate::AllocReply`] (remote key included).
    Resolve {
        /// The address.
        address: GlobalAddress,
    },
    /// Kind 34: join allreduce group `name` of `ranks` ranks as `rank`; the first member
    /// creates the group's memory ([`crate::reduce::GroupLayout`]: control words, rank
    /// descriptors, one deposit area of `chunk_bytes` per rank, the result area). Answered with an [`crate::AllocReply`] for that memory.
    ReduceAttach {
        /// Group name (per tenant).
        name: String,
        /// Ranks in the group (1..=[`REDUCE_RANKS_MAX`]).
        ranks: u32,
        /// The caller's rank.
        rank: u32,
        /// Bytes of each area (1..=[`REDUCE_CHUNK_MAX`], a multiple of 8).
        chunk_bytes: u64,
    },
    /// Kind 35: wakes the server for the group with this allocation handle (sent by the
    /// last rank of a round when the group's `asleep` word is set); answered with Done.
    ReduceKick {
        /// The group's handle (from the attach reply).
        handle: u64,
    },
    /// Kind 36: deliver one message into the mailbox at `offset` of allocation `handle`
    /// (which the caller holds, e.g. after resolving the mailbox's global address). The
    /// server follows the mailbox protocol of [`crate::mailbox`] itself: one round trip
    /// instead of a compare-and-swap, a put and a signal, for peers that reach the server
    /// through messages. A full mailbox is refused with `MailboxFull`, nothing written.
    MailboxSend {
        /// The mailbox's allocation.
        handle: u64,
        /// Where the mailbox header starts in it.
        offset: u64,
        /// Sender id stored with the message (the sender's process id).
        sender: u32,
        /// The message (at most the mailbox's slot size).
        data: Vec<u8>,
    },
    /// Kind 37: answer with the word at `offset` of allocation `handle` (held by the caller)
    /// once it satisfies comparison `compare` ([`crate::watch`]) against `value`, or when
    /// `timeout_ms` (at most [`crate::limits::WATCH_TIMEOUT_MS_MAX`]) has passed; the reply
    /// is [`crate::Reply::Value`] with the word then, and the client compares again.
    Watch {
        /// The allocation.
        handle: u64,
        /// The word's offset, a multiple of `width_bytes`.
        offset: u64,
        /// [`crate::watch::WatchCompare`] code, plus [`crate::watch::WATCH_SIGNED`].
        compare: u8,
        /// 4 or 8.
        width_bytes: u8,
        /// What the word is compared with.
        value: u64,
        /// How long the server keeps the watch.
        timeout_ms: u32,
    },
    /// Kind 38: store `data` at `offset` of allocation `handle`, then apply `op` (64-bit
    /// [`crate::AtomicKind::Swap`] or [`crate::AtomicKind::FetchAdd`]) with `value` to the
    /// signal word at `signal_offset` of `signal_handle` (both held by the caller): a
    /// put-with-signal in one message and one reply (Done) instead of a Put and an Atomic,
    /// for peers that reach the server through messages. Both ranges are checked before
    /// either is written.
    PutSignal {
        /// The data's allocation.
        handle: u64,
        /// Where the data goes in it.
        offset: u64,
        /// The signal word's allocation.
        signal_handle: u64,
        /// The signal word's offset, a multiple of 8.
        signal_offset: u64,
        /// How the signal word changes.
        op: crate::AtomicKind,
        /// The operand.
        value: u64,
        /// The data (at most [`crate::limits::DATA_CHUNK_MAX`] bytes).
        data: Vec<u8>,
    },
}

/// The reply to [`GasRequest::Domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainReply {
    /// The server's tag ([`crate::address::server_tag`]).
    pub server_tag: u32,
    /// The caller's protection domain (its tenant's id on this server).
    pub domain: u16,
}

impl GasRequest {
    /// The kind code.
    pub fn kind(&self) -> u16 {
        match self {
            GasRequest::Domain => KIND_DOMAIN,
            GasRequest::Resolve { .. } => KIND_RESOLVE,
            GasRequest::ReduceAttach { .. } => KIND_REDUCE_ATTACH,
            GasRequest::ReduceKick { .. } => KIND_REDUCE_KICK,
            GasRequest::MailboxSend { .. } => KIND_MAILBOX_SEND,
            GasRequest::Watch { .. } => KIND_WATCH,
            GasRequest::PutSignal { .. } => KIND_PUT_SIGNAL,
        }
    }

    pub(crate) fn encode_body(&self, w: &mut Writer) {
        match self {
            GasRequest::Domain => {}
            GasRequest::Resolve { address } => {
                w.u64(address.0 as u64);
                w.u64((address.0 >> 64) as u64);
            }
            GasRequest::ReduceAttach { name, ranks, rank, chunk_bytes } => {
                w.u32(*ranks);
                w.u32(*rank);
                w.u64(*chunk_bytes);
                w.str16(name);
            }
            GasRequest::ReduceKick { handle } => w.u64(*handle),
            GasRequest::MailboxSend { handle, offset, sender, data } => {
                w.u64(*handle);
                w.u64(*offset);
                w.u32(*sender);
                w.bytes32(data);
            }
            GasRequest::Watch { handle, offset, compare, width_bytes, value, timeout_ms } => {
                w.u64(*handle);
                w.u64(*offset);
                w.u16(u16::from(*compare) | u16::from(*width_bytes) << 8);
                w.u64(*value);
                w.u32(*timeout_ms);
            }
            GasRequest::PutSignal { handle, offset, signal_handle, signal_offset, op, value, data } => {
                w.u64(*handle);
                w.u64(*offset);
                w.u64(*signal_handle);
                w.u64(*signal_offset);
                w.u16(*op as u16);
                w.u64(*value);
                w.bytes32(data);
            }
        }
    }

    pub(crate) fn decode_body(kind: u16, r: &mut Reader<'_>) -> Result<GasRequest, DecodeError> {
        Ok(match kind {
            KIND_DOMAIN => GasRequest::Domain,
            KIND_RESOLVE => {
                let low = r.u64("address_low")? as u128;
                GasRequest::Resolve { address: GlobalAddress(low | (r.u64("address_high")? as u128) << 64) }
            }
            KIND_REDUCE_ATTACH => GasRequest::ReduceAttach {
                ranks: r.u32("ranks")?,
                rank: r.u32("rank")?,
                chunk_bytes: r.u64("chunk_bytes")?,
                name: r.str16("name", NAME_LEN_MAX)?,
            },
            KIND_REDUCE_KICK => GasRequest::ReduceKick { handle: r.u64("handle")? },
            KIND_MAILBOX_SEND => GasRequest::MailboxSend {
                handle: r.u64("handle")?,
                offset: r.u64("offset")?,
                sender: r.u32("sender")?,
                data: r.bytes32("data", crate::limits::MAILBOX_SLOT_SIZE_MAX as usize)?,
            },
            KIND_WATCH => {
                let (handle, offset, packed) = (r.u64("handle")?, r.u64("offset")?, r.u16("compare")?);
                let (value, timeout_ms) = (r.u64("value")?, r.u32("timeout_ms")?);
                GasRequest::Watch {
                    handle,
                    offset,
                    compare: packed as u8,
                    width_bytes: (packed >> 8) as u8,
                    value,
                    timeout_ms,
                }
            }
            KIND_PUT_SIGNAL => {
                let (handle, offset) = (r.u64("handle")?, r.u64("offset")?);
                let (signal_handle, signal_offset) = (r.u64("signal_handle")?, r.u64("signal_offset")?);
                let code = r.u16("op")?;
                let op = crate::AtomicKind::from_code(code).ok_or(DecodeError::UnknownKind { kind: code })?;
                GasRequest::PutSignal {
                    handle,
                    offset,
                    signal_handle,
                    signal_offset,
                    op,
                    value: r.u64("value")?,
                    data: r.bytes32("data", crate::limits::DATA_CHUNK_MAX)?,
                }
            }
            kind => return Err(DecodeError::UnknownKind { kind }),
        })
    }
}

pub(crate) fn encode_domain(w: &mut Writer, d: &DomainReply) {
    w.u32(d.server_tag);
    w.u16(d.domain);
}

/// Decodes the success body of a reply to a request of kind 32..=47.
pub(crate) fn decode_ok_body(kind: u16, r: &mut Reader<'_>) -> Result<crate::Reply, DecodeError> {
    Ok(match kind {
        KIND_DOMAIN => crate::Reply::Domain(DomainReply { server_tag: r.u32("server_tag")?, domain: r.u16("domain")? }),
        KIND_RESOLVE | KIND_REDUCE_ATTACH => crate::Reply::Alloc(crate::message::read_alloc_reply(r)?),
        KIND_REDUCE_KICK | KIND_MAILBOX_SEND | KIND_PUT_SIGNAL => crate::Reply::Done,
        KIND_WATCH => crate::Reply::Value(r.u64("value")?),
        kind => return Err(DecodeError::UnknownKind { kind }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Reply, Request};

    #[test]
    fn every_gas_request_round_trips() {
        let address = GlobalAddress::new(0xDEAD_BEEF, 3, 77, 4096).unwrap();
        for request in [
            GasRequest::Domain,
            GasRequest::Resolve { address },
            GasRequest::ReduceAttach { name: "world".into(), ranks: 8, rank: 3, chunk_bytes: 1 << 20 },
            GasRequest::ReduceKick { handle: 9 },
            GasRequest::MailboxSend { handle: 4, offset: 128, sender: 77, data: b"ping".to_vec() },
            GasRequest::PutSignal {
                handle: 4,
                offset: 64,
                signal_handle: 5,
                signal_offset: 8,
                op: crate::AtomicKind::Swap,
                value: 7,
                data: b"data".to_vec(),
            },
        ] {
            let bytes = Request::Gas(request.clone()).encode(5);
            assert_eq!(Request::decode(&bytes).unwrap(), (5, Request::Gas(request.clone())));
            assert!(Request::decode(&bytes[..bytes.len() - 1]).is_err());
        }
        let reply = Reply::Domain(DomainReply { server_tag: 0xDEAD_BEEF, domain: 3 });
        assert_eq!(Reply::decode(&reply.encode(KIND_DOMAIN, 4)).unwrap(), (KIND_DOMAIN, 4, reply));
        assert_eq!(Reply::decode(&Reply::Done.encode(KIND_REDUCE_KICK, 4)).unwrap().2, Reply::Done);
    }
}
