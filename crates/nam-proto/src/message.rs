//! Control messages: requests from clients and the server's replies. `docs/protocol.md`
//! gives the byte layout; this file is its implementation.

use crate::codec::{Reader, Writer};
use crate::limits::*;
use crate::status::Status;
use crate::DecodeError;

/// Active-message id of client-to-server requests.
pub const AM_ID_REQUEST: u16 = 1;
/// Active-message id of server-to-client replies.
pub const AM_ID_REPLY: u16 = 2;
/// Size of the fixed header that starts every message.
pub const HEADER_LEN: usize = 24;
/// Bit set in the kind of every reply.
pub const REPLY_BIT: u16 = 0x8000;

/// Allocation flag: other clients of the same tenant may open it by name.
pub const ALLOC_FLAG_SHARED: u32 = 1 << 0;
/// Allocation flag: survives the disconnect of every holder (and, with a file-backed pool,
/// a server restart) until freed explicitly.
pub const ALLOC_FLAG_PERSISTENT: u32 = 1 << 1;
/// Every allocation flag this version understands.
pub const ALLOC_FLAGS_KNOWN: u32 = ALLOC_FLAG_SHARED | ALLOC_FLAG_PERSISTENT;

/// First message on a connection: who the client is and which tenant it acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Tenant name (`"default"` when the server has no tenant configuration).
    pub tenant: String,
    /// The tenant's secret token.
    pub token: String,
    /// Free-form label shown by `nam status`.
    pub client_name: String,
    /// Process id of the client, for operators.
    pub pid: u32,
}

/// The tenant name of an administrator's [`Hello`], whose token is the server's admin token:
/// empty, which no tenant can be named (tenant names have 1..=[`TENANT_NAME_LEN_MAX`] bytes).
/// An administrator's connection may ask for the whole server's [`Request::Status`] and
/// nothing else.
pub const ADMIN_TENANT: &str = "";

/// Allocate `size` bytes aligned to `align`, optionally named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alloc {
    /// Bytes requested (1..=[`ALLOC_SIZE_MAX`]).
    pub size: u64,
    /// Alignment, a power of two up to [`ALIGN_MAX`]; 0 means [`ALIGN_MIN`].
    pub align: u64,
    /// [`ALLOC_FLAG_SHARED`], [`ALLOC_FLAG_PERSISTENT`].
    pub flags: u32,
    /// Name for [`Request::Open`]; empty for an anonymous allocation.
    pub name: String,
}

/// The counters a client reports when it says goodbye: its one-sided traffic, which the
/// server cannot see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficReport {
    /// Put operations issued.
    pub puts: u64,
    /// Get operations issued.
    pub gets: u64,
    /// Atomic operations issued.
    pub atomics: u64,
    /// Bytes put.
    pub bytes_put: u64,
    /// Bytes got.
    pub bytes_got: u64,
}

/// An atomic executed by the server on the message data path: codes 1..=6 act on the 64-bit
/// word at an 8-byte aligned offset, codes 17..=22 on the 32-bit word at a 4-byte aligned
/// offset (only the low 32 bits of `value` and `compare` are used, and the old word comes back
/// zero-extended). Signed and unsigned operands are the same bits: two's complement addition
/// is one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicKind {
    /// Add `value`, return the old word.
    FetchAdd = 1,
    /// Store `value`, return the old word.
    Swap = 2,
    /// Store `value` if the word equals `compare`; return the old word.
    CompareSwap = 3,
    /// AND `value` into the word, return the old word.
    FetchAnd = 4,
    /// OR `value` into the word, return the old word.
    FetchOr = 5,
    /// XOR `value` into the word, return the old word.
    FetchXor = 6,
    /// [`AtomicKind::FetchAdd`] on a 32-bit word.
    FetchAdd32 = 17,
    /// [`AtomicKind::Swap`] on a 32-bit word.
    Swap32 = 18,
    /// [`AtomicKind::CompareSwap`] on a 32-bit word.
    CompareSwap32 = 19,
    /// [`AtomicKind::FetchAnd`] on a 32-bit word.
    FetchAnd32 = 20,
    /// [`AtomicKind::FetchOr`] on a 32-bit word.
    FetchOr32 = 21,
    /// [`AtomicKind::FetchXor`] on a 32-bit word.
    FetchXor32 = 22,
}

/// Bit of an [`AtomicKind`] code that marks the 32-bit forms.
const ATOMIC_32_BIT: u16 = 16;

impl AtomicKind {
    /// Every kind, for tests and tables.
    pub const ALL: [AtomicKind; 12] = [
        AtomicKind::FetchAdd,
        AtomicKind::Swap,
        AtomicKind::CompareSwap,
        AtomicKind::FetchAnd,
        AtomicKind::FetchOr,
        AtomicKind::FetchXor,
        AtomicKind::FetchAdd32,
        AtomicKind::Swap32,
        AtomicKind::CompareSwap32,
        AtomicKind::FetchAnd32,
        AtomicKind::FetchOr32,
        AtomicKind::FetchXor32,
    ];

    /// The kind for its wire code, if it is one.
    pub fn from_code(code: u16) -> Option<AtomicKind> {
        AtomicKind::ALL.into_iter().find(|k| *k as u16 == code)
    }

    /// The width of the word it acts on, in bytes (4 or 8); also the alignment it needs.
    pub fn width_bytes(self) -> u64 {
        if self as u16 & ATOMIC_32_BIT != 0 {
            4
        } else {
            8
        }
    }

    /// The same operation on a word of `width_bytes` (4 or 8; anything else means 8).
    pub fn with_width(self, width_bytes: u64) -> AtomicKind {
        let op = self as u16 & !ATOMIC_32_BIT;
        let code = if width_bytes == 4 { op | ATOMIC_32_BIT } else { op };
        AtomicKind::from_code(code).expect("every operation has both widths")
    }

    /// The 64-bit form of the same operation.
    pub fn operation(self) -> AtomicKind {
        self.with_width(8)
    }

    /// Performs the operation (at whatever width it names) on a 64-bit word in this process
    /// with a sequentially consistent CPU atomic; the old word. Server and same-host clients
    /// use this one definition, so both update a word the same way.
    pub fn apply64(self, word: &std::sync::atomic::AtomicU64, value: u64, compare: u64) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        match self.operation() {
            AtomicKind::FetchAdd => word.fetch_add(value, SeqCst),
            AtomicKind::Swap => word.swap(value, SeqCst),
            AtomicKind::CompareSwap => word.compare_exchange(compare, value, SeqCst, SeqCst).unwrap_or_else(|o| o),
            AtomicKind::FetchAnd => word.fetch_and(value, SeqCst),
            AtomicKind::FetchOr => word.fetch_or(value, SeqCst),
            _ => word.fetch_xor(value, SeqCst),
        }
    }

    /// [`AtomicKind::apply64`] on a 32-bit word, with the low 32 bits of the operands.
    pub fn apply32(self, word: &std::sync::atomic::AtomicU32, value: u32, compare: u32) -> u32 {
        use std::sync::atomic::Ordering::SeqCst;
        match self.operation() {
            AtomicKind::FetchAdd => word.fetch_add(value, SeqCst),
            AtomicKind::Swap => word.swap(value, SeqCst),
            AtomicKind::CompareSwap => word.compare_exchange(compare, value, SeqCst, SeqCst).unwrap_or_else(|o| o),
            AtomicKind::FetchAnd => word.fetch_and(value, SeqCst),
            AtomicKind::FetchOr => word.fetch_or(value, SeqCst),
            _ => word.fetch_xor(value, SeqCst),
        }
    }
}

/// A client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Kind 1.
    Hello(Hello),
    /// Kind 2.
    Alloc(Alloc),
    /// Kind 3: open a shared allocation by name.
    Open {
        /// The allocation's name.
        name: String,
    },
    /// Kind 4: release this client's reference to an allocation.
    Free {
        /// The handle from an alloc or open reply.
        handle: u64,
    },
    /// Kind 5: server statistics.
    Status,
    /// Kind 6: the client is leaving; its non-persistent allocations are released now.
    Goodbye(TrafficReport),
    /// Kind 7 (message data path): write `data` at `offset` of an allocation this client holds.
    Put {
        /// The allocation.
        handle: u64,
        /// Offset inside it.
        offset: u64,
        /// At most [`DATA_CHUNK_MAX`] bytes.
        data: Vec<u8>,
    },
    /// Kind 8 (message data path): read `len` bytes at `offset`.
    Get {
        /// The allocation.
        handle: u64,
        /// Offset inside it.
        offset: u64,
        /// At most [`DATA_CHUNK_MAX`].
        len: u32,
    },
    /// Kind 9 (message data path): an atomic on the aligned 64- or 32-bit word at `offset`
    /// ([`AtomicKind::width_bytes`]).
    Atomic {
        /// The allocation.
        handle: u64,
        /// Offset inside it (a multiple of the word's width).
        offset: u64,
        /// Which atomic.
        op: AtomicKind,
        /// Operand.
        value: u64,
        /// Compare value of [`AtomicKind::CompareSwap`]; 0 otherwise.
        compare: u64,
    },
    /// Kinds 16..=20: checkpoint-parity groups ([`crate::ckpt`]).
    Ckpt(crate::ckpt::CkptRequest),
    /// Kinds 32..=47: global addresses and allreduce ([`crate::gas`]).
    Gas(crate::gas::GasRequest),
}

/// What the server tells a new client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloReply {
    /// This connection's id on the server.
    pub client_id: u64,
    /// How long the allocations of a vanished client are kept before reclaim.
    pub lease_ms: u64,
    /// Pool capacity in bytes.
    pub capacity: u64,
    /// The server's name.
    pub server_name: String,
    /// The server's UCX worker address, for the data-plane endpoint.
    pub worker_address: Vec<u8>,
    /// The server's host identity ([`host_id`]): a client with the same one may reach the
    /// pool through shared memory.
    pub host_id: String,
}

/// Where an allocation lives and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocReply {
    /// Handle for free and for naming the allocation in later requests.
    pub handle: u64,
    /// Usable size in bytes.
    pub size: u64,
    /// Remote virtual address of the first byte, for RMA.
    pub remote_addr: u64,
    /// The allocation's flags.
    pub flags: u32,
    /// Packed UCX remote key of the pool, handed out only to authenticated tenants.
    pub rkey: Vec<u8>,
}

/// Usage of one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantUsage {
    /// Tenant name.
    pub name: String,
    /// Bytes allocated.
    pub used: u64,
    /// Quota in bytes.
    pub quota: u64,
    /// Live allocations.
    pub allocations: u64,
}

/// What the server holds for its clients and how it bounds it (`nam status`): a server's
/// memory stays bounded whatever its clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceReport {
    /// Reply bytes the server holds for all clients together at most.
    pub reply_bytes_max: u64,
    /// Reply bytes it may hold for one client (its credit).
    pub client_reply_bytes_max: u64,
    /// Reply bytes held now, not yet taken by their clients.
    pub reply_bytes_queued: u64,
    /// Most reply bytes held at once since start.
    pub reply_bytes_high: u64,
    /// Connections the server accepts at most.
    pub connections_max: u64,
    /// Clients disconnected for exceeding their credit or not taking replies in time.
    pub clients_cut_off: u64,
    /// Connections refused by the limits or closed at the handshake deadline.
    pub connections_refused: u64,
    /// Sockets of connections that never completed, closed by the server.
    pub sockets_reaped: u64,
}

/// Server statistics for `nam status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusReply {
    /// The server's name.
    pub server_name: String,
    /// Pool capacity in bytes.
    pub capacity: u64,
    /// Bytes allocated.
    pub used: u64,
    /// Live allocations.
    pub allocations: u64,
    /// Connected clients.
    pub clients: u64,
    /// Clients that disconnected but whose lease has not expired.
    pub clients_lingering: u64,
    /// Clients accepted since start.
    pub clients_total: u64,
    /// Control requests handled.
    pub requests: u64,
    /// Control requests that failed.
    pub request_errors: u64,
    /// Control bytes received.
    pub bytes_in: u64,
    /// Control bytes sent.
    pub bytes_out: u64,
    /// Allocations reclaimed after a lease expired.
    pub leases_reclaimed: u64,
    /// One-sided traffic reported by departed clients.
    pub reported: TrafficReport,
    /// Per-tenant usage.
    pub tenants: Vec<TenantUsage>,
    /// Bounds and use of the server's resources; follows the tenants on the wire. Boxed: a
    /// status is rare, and every [`Reply`] is as large as its largest variant.
    pub resources: Box<ResourceReport>,
    /// Checkpoint groups on the server (at most [`crate::limits::CKPT_GROUPS_LISTED_MAX`]):
    /// what finished jobs left, with the bytes each holds.
    pub ckpt_groups: Vec<crate::ckpt::CkptGroupStatus>,
    /// Checkpoint groups in all (more than `ckpt_groups` lists when the list was cut).
    pub ckpt_groups_total: u64,
}

/// A reply body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To [`Request::Hello`].
    Hello(HelloReply),
    /// To [`Request::Alloc`] and [`Request::Open`].
    Alloc(AllocReply),
    /// To [`Request::Free`], [`Request::Goodbye`] and [`Request::Put`].
    Done,
    /// To [`Request::Status`].
    Status(StatusReply),
    /// To [`Request::Get`]: the bytes read.
    Data(Vec<u8>),
    /// To [`Request::Atomic`]: the word's old value.
    Value(u64),
    /// To a checkpoint-group join or query.
    Ckpt(crate::ckpt::CkptReply),
    /// To [`crate::gas::GasRequest::Domain`].
    Domain(crate::gas::DomainReply),
    /// Any request that failed.
    Error {
        /// Why.
        status: Status,
        /// The exact cause, for the user.
        message: String,
    },
}

/// The fixed header of every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Message kind; replies have [`REPLY_BIT`] set.
    pub kind: u16,
    /// Chosen by the client; echoed in the reply.
    pub request_id: u64,
}

fn write_header(w: &mut Writer, kind: u16, request_id: u64) {
    w.u32(MESSAGE_MAGIC);
    w.u16(PROTOCOL_VERSION);
    w.u16(kind);
    w.u64(request_id);
    w.u32(0); // body length, patched by finish_message
    w.u32(0); // reserved
}

fn finish_message(mut w: Writer) -> Vec<u8> {
    let body_len = (w.len() - HEADER_LEN) as u32;
    w.patch_u32(16, body_len);
    w.finish()
}

/// The request id and kind of a message whose header has the right magic but another
/// protocol version, so the server can answer it with `VersionMismatch`. Every version keeps
/// the first 16 header bytes in this layout.
pub fn peek_foreign_version(bytes: &[u8]) -> Option<(u16, u64)> {
    if bytes.len() < 16 || bytes[0..4] != MESSAGE_MAGIC.to_le_bytes() {
        return None;
    }
    let kind = u16::from_le_bytes([bytes[6], bytes[7]]);
    let request_id = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    Some((kind, request_id))
}

/// Reads and checks the header; returns it and the body.
pub fn decode_header(bytes: &[u8]) -> Result<(Header, &[u8]), DecodeError> {
    if bytes.len() > MESSAGE_LEN_MAX {
        return Err(DecodeError::TooLong { field: "message", len: bytes.len(), max: MESSAGE_LEN_MAX });
    }
    let mut r = Reader::new(bytes);
    let magic = r.u32("magic")?;
    if magic != MESSAGE_MAGIC {
        return Err(DecodeError::BadMagic { found: magic });
    }
    let version = r.u16("version")?;
    if version != PROTOCOL_VERSION {
        return Err(DecodeError::Version { found: version, expected: PROTOCOL_VERSION });
    }
    let kind = r.u16("kind")?;
    let request_id = r.u64("request_id")?;
    let body_len = r.u32("body_len")? as usize;
    let reserved = r.u32("reserved")?;
    if reserved != 0 {
        return Err(DecodeError::Reserved { found: reserved });
    }
    let body = &bytes[HEADER_LEN..];
    if body.len() != body_len {
        return Err(DecodeError::LengthMismatch { declared: body_len, actual: body.len() });
    }
    Ok((Header { kind, request_id }, body))
}

impl Request {
    /// The kind code of this request.
    pub fn kind(&self) -> u16 {
        match self {
            Request::Hello(_) => 1,
            Request::Alloc(_) => 2,
            Request::Open { .. } => 3,
            Request::Free { .. } => 4,
            Request::Status => 5,
            Request::Goodbye(_) => 6,
            Request::Put { .. } => 7,
            Request::Get { .. } => 8,
            Request::Atomic { .. } => 9,
            Request::Ckpt(c) => c.kind(),
            Request::Gas(g) => g.kind(),
        }
    }

    /// Encodes the request with `request_id`.
    pub fn encode(&self, request_id: u64) -> Vec<u8> {
        let mut w = Writer::with_capacity(HEADER_LEN + 64);
        write_header(&mut w, self.kind(), request_id);
        match self {
            Request::Hello(h) => {
                w.str16(&h.tenant);
                w.str16(&h.token);
                w.str16(&h.client_name);
                w.u32(h.pid);
            }
            Request::Alloc(a) => {
                w.u64(a.size);
                w.u64(a.align);
                w.u32(a.flags);
                w.str16(&a.name);
            }
            Request::Open { name } => w.str16(name),
            Request::Free { handle } => w.u64(*handle),
            Request::Status => {}
            Request::Goodbye(t) => write_traffic(&mut w, t),
            Request::Put { handle, offset, data } => {
                w.u64(*handle);
                w.u64(*offset);
                w.bytes32(data);
            }
            Request::Get { handle, offset, len } => {
                w.u64(*handle);
                w.u64(*offset);
                w.u32(*len);
            }
            Request::Ckpt(c) => c.encode_body(&mut w),
            Request::Atomic { handle, offset, op, value, compare } => {
                w.u64(*handle);
                w.u64(*offset);
                w.u16(*op as u16);
                w.u64(*value);
                w.u64(*compare);
            }
            Request::Gas(g) => g.encode_body(&mut w),
        }
        finish_message(w)
    }

    /// Decodes a request; never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<(u64, Request), DecodeError> {
        let (header, body) = decode_header(bytes)?;
        let mut r = Reader::new(body);
        let request = match header.kind {
            1 => Request::Hello(Hello {
                tenant: r.str16("tenant", TENANT_NAME_LEN_MAX)?,
                token: r.str16("token", TOKEN_LEN_MAX)?,
                client_name: r.str16("client_name", CLIENT_NAME_LEN_MAX)?,
                pid: r.u32("pid")?,
            }),
            2 => Request::Alloc(Alloc {
                size: r.u64("size")?,
                align: r.u64("align")?,
                flags: r.u32("flags")?,
                name: r.str16("name", NAME_LEN_MAX)?,
            }),
            3 => Request::Open { name: r.str16("name", NAME_LEN_MAX)? },
            4 => Request::Free { handle: r.u64("handle")? },
            5 => Request::Status,
            6 => Request::Goodbye(read_traffic(&mut r)?),
            7 => Request::Put {
                handle: r.u64("handle")?,
                offset: r.u64("offset")?,
                data: r.bytes32("data", DATA_CHUNK_MAX)?,
            },
            8 => {
                let (handle, offset, len) = (r.u64("handle")?, r.u64("offset")?, r.u32("len")?);
                if len as usize > DATA_CHUNK_MAX {
                    return Err(DecodeError::TooLong { field: "len", len: len as usize, max: DATA_CHUNK_MAX });
                }
                Request::Get { handle, offset, len }
            }
            9 => {
                let (handle, offset) = (r.u64("handle")?, r.u64("offset")?);
                let code = r.u16("op")?;
                let op = AtomicKind::from_code(code).ok_or(DecodeError::UnknownKind { kind: code })?;
                Request::Atomic { handle, offset, op, value: r.u64("value")?, compare: r.u64("compare")? }
            }
            16..=20 => Request::Ckpt(crate::ckpt::CkptRequest::decode_body(header.kind, &mut r)?),
            kind @ 32..=47 => Request::Gas(crate::gas::GasRequest::decode_body(kind, &mut r)?),
            kind => return Err(DecodeError::UnknownKind { kind }),
        };
        r.finish()?;
        Ok((header.request_id, request))
    }
}

/// Encodes a [`Request::Put`] straight from the caller's bytes (the same bytes as
/// `Request::Put { .. }.encode(request_id)`, without first copying `data` into a request).
pub fn encode_put(request_id: u64, handle: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(HEADER_LEN + 20 + data.len());
    write_header(&mut w, 7, request_id);
    w.u64(handle);
    w.u64(offset);
    w.bytes32(data);
    finish_message(w)
}

/// A Put request decoded without copying its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutView<'a> {
    /// The request id.
    pub request_id: u64,
    /// The allocation.
    pub handle: u64,
    /// Offset inside it.
    pub offset: u64,
    /// The payload, borrowed from the message.
    pub data: &'a [u8],
}

/// Decodes `bytes` as a Put request if it is one (`None` for any other kind; errors as
/// [`Request::decode`] reports them).
pub fn decode_put(bytes: &[u8]) -> Result<Option<PutView<'_>>, DecodeError> {
    let (header, body) = decode_header(bytes)?;
    if header.kind != 7 {
        return Ok(None);
    }
    let mut r = Reader::new(body);
    let (handle, offset) = (r.u64("handle")?, r.u64("offset")?);
    let data = r.bytes32_borrowed("data", DATA_CHUNK_MAX)?;
    r.finish()?;
    Ok(Some(PutView { request_id: header.request_id, handle, offset, data }))
}

fn write_traffic(w: &mut Writer, t: &TrafficReport) {
    for v in [t.puts, t.gets, t.atomics, t.bytes_put, t.bytes_got] {
        w.u64(v);
    }
}

fn read_traffic(r: &mut Reader<'_>) -> Result<TrafficReport, DecodeError> {
    Ok(TrafficReport {
        puts: r.u64("puts")?,
        gets: r.u64("gets")?,
        atomics: r.u64("atomics")?,
        bytes_put: r.u64("bytes_put")?,
        bytes_got: r.u64("bytes_got")?,
    })
}

/// Cuts `s` to at most `max` bytes on a character boundary (for outgoing texts).
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Reply {
    /// Encodes the reply to request `kind` with `request_id`.
    pub fn encode(&self, request_kind: u16, request_id: u64) -> Vec<u8> {
        let mut w = Writer::with_capacity(HEADER_LEN + 64);
        write_header(&mut w, request_kind | REPLY_BIT, request_id);
        match self {
            Reply::Error { status, message } => {
                // An "error" that says Ok would not decode; it is a bug where it was made.
                debug_assert_ne!(*status, Status::Ok, "Reply::Error with Status::Ok");
                let status = if *status == Status::Ok { Status::Internal } else { *status };
                w.u16(status.code());
                w.str16(truncate_utf8(message, ERROR_TEXT_LEN_MAX));
            }
            ok => {
                w.u16(Status::Ok.code());
                encode_ok_body(&mut w, ok);
            }
        }
        finish_message(w)
    }

    /// Decodes a reply; returns the request kind it answers, the request id and the body.
    pub fn decode(bytes: &[u8]) -> Result<(u16, u64, Reply), DecodeError> {
        let (header, body) = decode_header(bytes)?;
        if header.kind & REPLY_BIT == 0 {
            return Err(DecodeError::UnknownKind { kind: header.kind });
        }
        let kind = header.kind & !REPLY_BIT;
        let mut r = Reader::new(body);
        let code = r.u16("status")?;
        let status = Status::from_code(code).ok_or(DecodeError::UnknownStatus { code })?;
        let reply = if status != Status::Ok {
            Reply::Error { status, message: r.str16("message", ERROR_TEXT_LEN_MAX)? }
        } else {
            decode_ok_body(kind, &mut r)?
        };
        r.finish()?;
        Ok((kind, header.request_id, reply))
    }
}

fn encode_ok_body(w: &mut Writer, reply: &Reply) {
    match reply {
        Reply::Hello(h) => {
            w.u64(h.client_id);
            w.u64(h.lease_ms);
            w.u64(h.capacity);
            w.str16(truncate_utf8(&h.server_name, SERVER_NAME_LEN_MAX));
            w.bytes32(&h.worker_address);
            w.str16(truncate_utf8(&h.host_id, HOST_ID_LEN_MAX));
        }
        Reply::Alloc(a) => write_alloc_reply(w, a),
        Reply::Ckpt(c) => c.encode_body(w),
        Reply::Done | Reply::Error { .. } => {}
        Reply::Data(data) => w.bytes32(data),
        Reply::Value(v) => w.u64(*v),
        Reply::Domain(d) => crate::gas::encode_domain(w, d),
        Reply::Status(s) => {
            w.str16(truncate_utf8(&s.server_name, SERVER_NAME_LEN_MAX));
            for v in [
                s.capacity,
                s.used,
                s.allocations,
                s.clients,
                s.clients_lingering,
                s.clients_total,
                s.requests,
                s.request_errors,
                s.bytes_in,
                s.bytes_out,
                s.leases_reclaimed,
            ] {
                w.u64(v);
            }
            write_traffic(w, &s.reported);
            w.u32(s.tenants.len() as u32);
            for t in &s.tenants {
                w.str16(&t.name);
                w.u64(t.used);
                w.u64(t.quota);
                w.u64(t.allocations);
            }
            let r = &s.resources;
            for v in [
                r.reply_bytes_max,
                r.client_reply_bytes_max,
                r.reply_bytes_queued,
                r.reply_bytes_high,
                r.connections_max,
                r.clients_cut_off,
                r.connections_refused,
                r.sockets_reaped,
            ] {
                w.u64(v);
            }
            let listed = &s.ckpt_groups[..s.ckpt_groups.len().min(CKPT_GROUPS_LISTED_MAX)];
            w.u64(s.ckpt_groups_total.max(listed.len() as u64));
            w.u32(listed.len() as u32);
            for g in listed {
                g.encode(w);
            }
        }
    }
}

fn decode_ok_body(kind: u16, r: &mut Reader<'_>) -> Result<Reply, DecodeError> {
    Ok(match kind {
        1 => Reply::Hello(HelloReply {
            client_id: r.u64("client_id")?,
            lease_ms: r.u64("lease_ms")?,
            capacity: r.u64("capacity")?,
            server_name: r.str16("server_name", SERVER_NAME_LEN_MAX)?,
            worker_address: r.bytes32("worker_address", WORKER_ADDRESS_LEN_MAX)?,
            host_id: r.str16("host_id", HOST_ID_LEN_MAX)?,
        }),
        2 | 3 => Reply::Alloc(read_alloc_reply(r)?),
        // A restore into the requester's own buffer has nothing to name: an empty body.
        18 if r.at_end() => Reply::Done,
        18 => Reply::Alloc(read_alloc_reply(r)?),
        4 | 6 | 7 | 17 | 20 => Reply::Done,
        16 | 19 => Reply::Ckpt(crate::ckpt::CkptReply::decode_body(kind, r)?),
        5 => Reply::Status(decode_status(r)?),
        8 => Reply::Data(r.bytes32("data", DATA_CHUNK_MAX)?),
        9 => Reply::Value(r.u64("value")?),
        32..=47 => crate::gas::decode_ok_body(kind, r)?,
        kind => return Err(DecodeError::UnknownKind { kind }),
    })
}

pub(crate) fn write_alloc_reply(w: &mut Writer, a: &AllocReply) {
    w.u64(a.handle);
    w.u64(a.size);
    w.u64(a.remote_addr);
    w.u32(a.flags);
    w.bytes32(&a.rkey);
}

pub(crate) fn read_alloc_reply(r: &mut Reader<'_>) -> Result<AllocReply, DecodeError> {
    Ok(AllocReply {
        handle: r.u64("handle")?,
        size: r.u64("size")?,
        remote_addr: r.u64("remote_addr")?,
        flags: r.u32("flags")?,
        rkey: r.bytes32("rkey", RKEY_LEN_MAX)?,
    })
}

fn decode_status(r: &mut Reader<'_>) -> Result<StatusReply, DecodeError> {
    let mut s = StatusReply { server_name: r.str16("server_name", SERVER_NAME_LEN_MAX)?, ..Default::default() };
    s.capacity = r.u64("capacity")?;
    s.used = r.u64("used")?;
    s.allocations = r.u64("allocations")?;
    s.clients = r.u64("clients")?;
    s.clients_lingering = r.u64("clients_lingering")?;
    s.clients_total = r.u64("clients_total")?;
    s.requests = r.u64("requests")?;
    s.request_errors = r.u64("request_errors")?;
    s.bytes_in = r.u64("bytes_in")?;
    s.bytes_out = r.u64("bytes_out")?;
    s.leases_reclaimed = r.u64("leases_reclaimed")?;
    s.reported = read_traffic(r)?;
    let count = r.u32("tenant_count")? as usize;
    if count > TENANTS_MAX {
        return Err(DecodeError::TooLong { field: "tenants", len: count, max: TENANTS_MAX });
    }
    for _ in 0..count {
        s.tenants.push(TenantUsage {
            name: r.str16("tenant_name", TENANT_NAME_LEN_MAX)?,
            used: r.u64("tenant_used")?,
            quota: r.u64("tenant_quota")?,
            allocations: r.u64("tenant_allocations")?,
        });
    }
    *s.resources = ResourceReport {
        reply_bytes_max: r.u64("reply_bytes_max")?,
        client_reply_bytes_max: r.u64("client_reply_bytes_max")?,
        reply_bytes_queued: r.u64("reply_bytes_queued")?,
        reply_bytes_high: r.u64("reply_bytes_high")?,
        connections_max: r.u64("connections_max")?,
        clients_cut_off: r.u64("clients_cut_off")?,
        connections_refused: r.u64("connections_refused")?,
        sockets_reaped: r.u64("sockets_reaped")?,
    };
    s.ckpt_groups_total = r.u64("ckpt_groups_total")?;
    let listed = r.u32("ckpt_group_count")? as usize;
    if listed > CKPT_GROUPS_LISTED_MAX {
        return Err(DecodeError::TooLong { field: "ckpt_groups", len: listed, max: CKPT_GROUPS_LISTED_MAX });
    }
    if s.ckpt_groups_total < listed as u64 {
        return Err(DecodeError::TotalBelowListed {
            field: "ckpt_groups_total",
            total: s.ckpt_groups_total,
            listed: listed as u64,
        });
    }
    for _ in 0..listed {
        s.ckpt_groups.push(crate::ckpt::CkptGroupStatus::decode(r)?);
    }
    Ok(s)
}

/// This machine's identity: host name and kernel boot id. Two processes with the same one
/// run on the same kernel, so shared memory between them can work.
pub fn host_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    truncate_utf8(&format!("{}/{}", host.trim(), boot.trim()), HOST_ID_LEN_MAX).to_string()
}
