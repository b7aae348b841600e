//! Checkpoint-parity messages (kinds 16..=20) and the layout of the words a group's ranks
//! read in server memory. The server's engine pulls each rank's registered checkpoint buffer
//! with RMA GETs and keeps XOR parity of the group in its pool (Schmidt 2017 §4.5);
//! `docs/protocol.md` gives the bytes, `docs/checkpoint.md` the scheme.

use crate::codec::{Reader, Writer};
use crate::limits::*;
use crate::message::AllocReply;
use crate::DecodeError;

/// Request kind of [`CkptRequest::Join`].
pub const KIND_CKPT_JOIN: u16 = 16;
/// Request kind of [`CkptRequest::Ready`].
pub const KIND_CKPT_READY: u16 = 17;
/// Request kind of [`CkptRequest::Restore`].
pub const KIND_CKPT_RESTORE: u16 = 18;
/// Request kind of [`CkptRequest::Query`].
pub const KIND_CKPT_QUERY: u16 = 19;
/// Request kind of [`CkptRequest::Destroy`].
pub const KIND_CKPT_DESTROY: u16 = 20;

/// Restore flag: the requester is the lost rank, joined with a buffer of its size; write the
/// rebuilt bytes straight into that buffer when the server can reach it in place (the reply
/// is then Done instead of an allocation).
pub const CKPT_RESTORE_INTO_BUFFER: u32 = 1;

/// Prefix of the pool allocations the engine keeps for a group (control words, parity
/// slots); clients may not allocate, open or free names with this prefix themselves.
pub const CKPT_NAME_PREFIX: &str = "ckpt:";

/// Control-block word: the newest epoch whose parity is complete (0: none yet).
pub const CKPT_WORD_COMPLETE: u64 = 0;
/// Control-block word: the state of the latest restore ([`CkptWord`]).
pub const CKPT_WORD_RESTORE: u64 = 1;
/// Control-block word of rank 0's completion signal; rank `r` is at word `CKPT_WORD_RANK0 + r`.
pub const CKPT_WORD_RANK0: u64 = 2;

pub use crate::limits::{CKPT_IN_FLIGHT_DEFAULT, CKPT_SEGMENT_DEFAULT, CKPT_TIMEOUT_MS_DEFAULT};

/// A 64-bit signal word of the control block: bits 0..48 carry an epoch (or restore
/// sequence number), bits 48..63 a [`crate::Status`] code, and bit 63 says it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CkptWord(pub u64);

impl CkptWord {
    /// Bit set when the epoch failed.
    pub const FAILED: u64 = 1 << 63;
    /// Mask of the epoch field.
    pub const EPOCH_MASK: u64 = (1 << 48) - 1;

    /// A word saying `epoch` completed.
    pub fn done(epoch: u64) -> CkptWord {
        CkptWord(epoch & Self::EPOCH_MASK)
    }

    /// A word saying `epoch` failed with `status`.
    pub fn failed(epoch: u64, status: crate::Status) -> CkptWord {
        CkptWord((epoch & Self::EPOCH_MASK) | ((status.code() as u64 & 0x7fff) << 48) | Self::FAILED)
    }

    /// The epoch (or sequence number) the word is about.
    pub fn epoch(self) -> u64 {
        self.0 & Self::EPOCH_MASK
    }

    /// The failure status, if the epoch failed.
    pub fn failure(self) -> Option<crate::Status> {
        (self.0 & Self::FAILED != 0)
            .then(|| crate::Status::from_code(((self.0 >> 48) & 0x7fff) as u16).unwrap_or(crate::Status::Internal))
    }
}

/// A rank joins a checkpoint group (creating it when it is the first), handing the server
/// what it needs to pull the rank's checkpoint buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CkptJoin {
    /// Group name, unique per tenant.
    pub group: String,
    /// Ranks in the group (1..=[`CKPT_RANKS_MAX`]); every join must agree.
    pub ranks: u32,
    /// This rank (< `ranks`).
    pub rank: u32,
    /// Bytes per GET (multiple of 16, up to [`CKPT_SEGMENT_MAX`]); 0 for the default.
    pub segment_bytes: u32,
    /// GETs in flight per rank (up to [`CKPT_IN_FLIGHT_MAX`]); 0 for the default.
    pub in_flight: u32,
    /// Deadline of an epoch and of a restore, in ms; 0 for the default.
    pub timeout_ms: u32,
    /// Node identity of the rank: two ranks of one node never share a group.
    pub node: String,
    /// The rank's host identity ([`crate::host_id`]): on the server's host the engine
    /// reaches the buffer through shared memory.
    pub host: String,
    /// Length of the registered buffer (0: a replacement rank that will learn its size from
    /// a restore and join again).
    pub buffer_len: u64,
    /// Remote address of the buffer's first byte.
    pub buffer_addr: u64,
    /// Packed UCX remote key of the buffer.
    pub rkey: Vec<u8>,
    /// The rank's UCX worker address, for the server's endpoint to it.
    pub worker_address: Vec<u8>,
}

/// A checkpoint-group request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CkptRequest {
    /// Kind 16: join (or create) a group.
    Join(CkptJoin),
    /// Kind 17: the rank's buffer holds epoch `epoch`'s checkpoint and may be pulled; the
    /// reply comes at once, completion is signalled in the rank's control word.
    Ready {
        /// From the join reply.
        group_id: u64,
        /// The rank.
        rank: u32,
        /// Epoch number, one more than the group's last started epoch.
        epoch: u64,
    },
    /// Kind 18: rebuild rank `lost_rank`'s checkpoint of `epoch` (0: the newest complete)
    /// from the other ranks' buffers and the parity; the reply says where the result is
    /// written (the requester's own group buffer, or a new allocation), completion is
    /// signalled in the restore word.
    Restore {
        /// From the join reply.
        group_id: u64,
        /// The rank whose data is lost.
        lost_rank: u32,
        /// Epoch to restore, 0 for the newest complete.
        epoch: u64,
        /// [`CKPT_RESTORE_INTO_BUFFER`] or 0.
        flags: u32,
    },
    /// Kind 19: the group's state and last error.
    Query {
        /// From the join reply.
        group_id: u64,
    },
    /// Kind 20: delete the group and its parity.
    Destroy {
        /// From the join reply.
        group_id: u64,
    },
}

/// Reply to [`CkptRequest::Join`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CkptJoined {
    /// Names the group in later requests.
    pub group_id: u64,
    /// The control block: [`CKPT_WORD_COMPLETE`], [`CKPT_WORD_RESTORE`], then one word per rank.
    pub control: AllocReply,
    /// Newest epoch whose parity is complete (after a server restart from a file-backed
    /// pool, the one found in the pool).
    pub complete_epoch: u64,
    /// The group's last started epoch (complete or failed): the next ready is for one more.
    pub started_epoch: u64,
    /// Size the group recorded for this rank in `complete_epoch` (0 if none).
    pub recorded_len: u64,
}

/// Reply to [`CkptRequest::Query`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CkptInfo {
    /// Newest epoch whose parity is complete.
    pub complete_epoch: u64,
    /// Epoch being generated (0: none).
    pub running_epoch: u64,
    /// Ranks that have joined.
    pub joined: u32,
    /// Microseconds the engine spent working (pulling, XOR, checksums) on the last
    /// finished epoch or restore, not counting waits for ranks to flag ready.
    pub last_job_busy_us: u64,
    /// CPU time the server process spent in those steps, all its threads (µs): the
    /// engine's work independent of what else shares the server's cores.
    pub last_job_cpu_us: u64,
    /// Status of the last failure ([`crate::Status::Ok`] if none).
    pub last_status: crate::Status,
    /// The last failure, naming its cause (empty if none).
    pub last_error: String,
}

/// One checkpoint group as a Status reply lists it: what a finished job left on the server,
/// so an operator sees it and can remove it (`nam ckpt drop`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CkptGroupStatus {
    /// Its id (what [`CkptRequest::Destroy`] names).
    pub id: u64,
    /// The tenant it belongs to (≤ [`crate::limits::TENANT_NAME_LEN_MAX`] bytes).
    pub tenant: String,
    /// Its name, unique per tenant (≤ [`crate::limits::NAME_LEN_MAX`] bytes).
    pub name: String,
    /// Ranks in the group.
    pub ranks: u32,
    /// Ranks joined now (0: every rank's process is gone; only the parity remains).
    pub joined: u32,
    /// Pool bytes it holds (control block and parity slots).
    pub bytes: u64,
    /// Newest epoch whose parity is complete (0: none).
    pub complete_epoch: u64,
}

impl CkptGroupStatus {
    /// Appends the encoded entry.
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.id);
        w.str16(crate::message::truncate_utf8(&self.tenant, TENANT_NAME_LEN_MAX));
        w.str16(crate::message::truncate_utf8(&self.name, NAME_LEN_MAX));
        w.u32(self.ranks);
        w.u32(self.joined);
        w.u64(self.bytes);
        w.u64(self.complete_epoch);
    }

    /// Reads one entry.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CkptGroupStatus {
            id: r.u64("group_id")?,
            tenant: r.str16("group_tenant", TENANT_NAME_LEN_MAX)?,
            name: r.str16("group_name", NAME_LEN_MAX)?,
            ranks: r.u32("group_ranks")?,
            joined: r.u32("group_joined")?,
            bytes: r.u64("group_bytes")?,
            complete_epoch: r.u64("group_complete_epoch")?,
        })
    }
}

/// A checkpoint-group reply body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CkptReply {
    /// To a join.
    Joined(CkptJoined),
    /// To a query.
    Info(CkptInfo),
}

impl CkptRequest {
    /// The request's kind.
    pub fn kind(&self) -> u16 {
        match self {
            CkptRequest::Join(_) => KIND_CKPT_JOIN,
            CkptRequest::Ready { .. } => KIND_CKPT_READY,
            CkptRequest::Restore { .. } => KIND_CKPT_RESTORE,
            CkptRequest::Query { .. } => KIND_CKPT_QUERY,
            CkptRequest::Destroy { .. } => KIND_CKPT_DESTROY,
        }
    }

    pub(crate) fn encode_body(&self, w: &mut Writer) {
        match self {
            CkptRequest::Join(j) => {
                w.str16(&j.group);
                w.u32(j.ranks);
                w.u32(j.rank);
                w.u32(j.segment_bytes);
                w.u32(j.in_flight);
                w.u32(j.timeout_ms);
                w.str16(&j.node);
                w.str16(&j.host);
                w.u64(j.buffer_len);
                w.u64(j.buffer_addr);
                w.bytes32(&j.rkey);
                w.bytes32(&j.worker_address);
            }
            CkptRequest::Ready { group_id, rank, epoch } => {
                w.u64(*group_id);
                w.u32(*rank);
                w.u64(*epoch);
            }
            CkptRequest::Restore { group_id, lost_rank, epoch, flags } => {
                w.u64(*group_id);
                w.u32(*lost_rank);
                w.u64(*epoch);
                w.u32(*flags);
            }
            CkptRequest::Query { group_id } | CkptRequest::Destroy { group_id } => w.u64(*group_id),
        }
    }

    pub(crate) fn decode_body(kind: u16, r: &mut Reader<'_>) -> Result<CkptRequest, DecodeError> {
        Ok(match kind {
            KIND_CKPT_JOIN => CkptRequest::Join(CkptJoin {
                group: r.str16("group", NAME_LEN_MAX - CKPT_NAME_SUFFIX_LEN_MAX)?,
                ranks: r.u32("ranks")?,
                rank: r.u32("rank")?,
                segment_bytes: r.u32("segment_bytes")?,
                in_flight: r.u32("in_flight")?,
                timeout_ms: r.u32("timeout_ms")?,
                node: r.str16("node", HOST_ID_LEN_MAX)?,
                host: r.str16("host", HOST_ID_LEN_MAX)?,
                buffer_len: r.u64("buffer_len")?,
                buffer_addr: r.u64("buffer_addr")?,
                rkey: r.bytes32("rkey", RKEY_LEN_MAX)?,
                worker_address: r.bytes32("worker_address", WORKER_ADDRESS_LEN_MAX)?,
            }),
            KIND_CKPT_READY => {
                CkptRequest::Ready { group_id: r.u64("group_id")?, rank: r.u32("rank")?, epoch: r.u64("epoch")? }
            }
            KIND_CKPT_RESTORE => CkptRequest::Restore {
                group_id: r.u64("group_id")?,
                lost_rank: r.u32("lost_rank")?,
                epoch: r.u64("epoch")?,
                flags: r.u32("flags")?,
            },
            KIND_CKPT_QUERY => CkptRequest::Query { group_id: r.u64("group_id")? },
            KIND_CKPT_DESTROY => CkptRequest::Destroy { group_id: r.u64("group_id")? },
            kind => return Err(DecodeError::UnknownKind { kind }),
        })
    }
}

impl CkptReply {
    pub(crate) fn encode_body(&self, w: &mut Writer) {
        match self {
            CkptReply::Joined(j) => {
                w.u64(j.group_id);
                crate::message::write_alloc_reply(w, &j.control);
                w.u64(j.complete_epoch);
                w.u64(j.started_epoch);
                w.u64(j.recorded_len);
            }
            CkptReply::Info(i) => {
                w.u64(i.complete_epoch);
                w.u64(i.running_epoch);
                w.u32(i.joined);
                w.u64(i.last_job_busy_us);
                w.u64(i.last_job_cpu_us);
                w.u16(i.last_status.code());
                w.str16(crate::message::truncate_utf8(&i.last_error, ERROR_TEXT_LEN_MAX));
            }
        }
    }

    pub(crate) fn decode_body(kind: u16, r: &mut Reader<'_>) -> Result<CkptReply, DecodeError> {
        Ok(match kind {
            KIND_CKPT_JOIN => CkptReply::Joined(CkptJoined {
                group_id: r.u64("group_id")?,
                control: crate::message::read_alloc_reply(r)?,
                complete_epoch: r.u64("complete_epoch")?,
                started_epoch: r.u64("started_epoch")?,
                recorded_len: r.u64("recorded_len")?,
            }),
            KIND_CKPT_QUERY => CkptReply::Info(CkptInfo {
                complete_epoch: r.u64("complete_epoch")?,
                running_epoch: r.u64("running_epoch")?,
                joined: r.u32("joined")?,
                last_job_busy_us: r.u64("last_job_busy_us")?,
                last_job_cpu_us: r.u64("last_job_cpu_us")?,
                last_status: {
                    let code = r.u16("last_status")?;
                    crate::Status::from_code(code).ok_or(DecodeError::UnknownStatus { code })?
                },
                last_error: r.str16("last_error", ERROR_TEXT_LEN_MAX)?,
            }),
            kind => return Err(DecodeError::UnknownKind { kind }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Reply, Request, Status};

    #[test]
    fn every_checkpoint_request_round_trips() {
        let join = CkptJoin {
            group: "g".into(),
            ranks: 4,
            rank: 3,
            segment_bytes: 496,
            in_flight: 128,
            timeout_ms: 1000,
            node: "n1".into(),
            host: "h".into(),
            buffer_len: 1 << 20,
            buffer_addr: 0xdead_0000,
            rkey: vec![1, 2, 3],
            worker_address: vec![9; 300],
        };
        for request in [
            CkptRequest::Join(join),
            CkptRequest::Ready { group_id: 7, rank: 1, epoch: 2 },
            CkptRequest::Restore { group_id: 7, lost_rank: 1, epoch: 0, flags: CKPT_RESTORE_INTO_BUFFER },
            CkptRequest::Query { group_id: 7 },
            CkptRequest::Destroy { group_id: 7 },
        ] {
            let bytes = Request::Ckpt(request.clone()).encode(5);
            assert_eq!(Request::decode(&bytes).unwrap(), (5, Request::Ckpt(request)));
        }
    }

    #[test]
    fn checkpoint_replies_round_trip() {
        let control = AllocReply { handle: 1, size: 64, remote_addr: 4096, flags: 3, rkey: vec![4; 10] };
        let joined = CkptJoined { group_id: 2, control, complete_epoch: 9, started_epoch: 10, recorded_len: 100 };
        let info = CkptInfo {
            complete_epoch: 9,
            running_epoch: 10,
            joined: 3,
            last_job_busy_us: 1234,
            last_job_cpu_us: 2345,
            last_status: Status::CkptTimeout,
            last_error: "rank 2".into(),
        };
        for (kind, reply) in [(KIND_CKPT_JOIN, CkptReply::Joined(joined)), (KIND_CKPT_QUERY, CkptReply::Info(info))] {
            let bytes = Reply::Ckpt(reply.clone()).encode(kind, 11);
            assert_eq!(Reply::decode(&bytes).unwrap(), (kind, 11, Reply::Ckpt(reply)));
        }
    }

    #[test]
    fn a_restore_is_answered_with_an_allocation_or_in_place() {
        let grant = AllocReply { handle: 1, size: 64, remote_addr: 4096, flags: 0, rkey: vec![4; 10] };
        for reply in [Reply::Alloc(grant), Reply::Done] {
            let bytes = reply.encode(KIND_CKPT_RESTORE, 3);
            assert_eq!(Reply::decode(&bytes).unwrap(), (KIND_CKPT_RESTORE, 3, reply));
        }
    }

    #[test]
    fn words_carry_epoch_and_failure() {
        assert_eq!(CkptWord::done(5).epoch(), 5);
        assert_eq!(CkptWord::done(5).failure(), None);
        let failed = CkptWord::failed(6, Status::CkptTimeout);
        assert_eq!(failed.epoch(), 6);
        assert_eq!(failed.failure(), Some(Status::CkptTimeout));
    }
}
