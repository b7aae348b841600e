//! Every bound nam enforces, in one place. Input is checked against these where it arrives.

/// Protocol version spoken by this build; a peer with another major version is refused.
pub const PROTOCOL_VERSION: u16 = 1;
/// Magic number at the start of every control message: `"NAM\x01"` little-endian.
pub const MESSAGE_MAGIC: u32 = u32::from_le_bytes(*b"NAM\x01");
/// Largest control message, header included. Sized so that a Status reply with
/// [`TENANTS_MAX`] tenants of the longest names fits (about 92 KiB), with room to spare.
pub const MESSAGE_LEN_MAX: usize = 128 * 1024;
/// Longest allocation name in bytes (UTF-8).
pub const NAME_LEN_MAX: usize = 255;
/// Longest tenant name in bytes.
pub const TENANT_NAME_LEN_MAX: usize = 64;
/// Longest tenant token in bytes.
pub const TOKEN_LEN_MAX: usize = 256;
/// Longest client label in bytes.
pub const CLIENT_NAME_LEN_MAX: usize = 128;
/// Longest packed remote key carried in a reply.
pub const RKEY_LEN_MAX: usize = 8 * 1024;
/// Longest UCX worker address carried in a reply.
pub const WORKER_ADDRESS_LEN_MAX: usize = 16 * 1024;
/// Largest payload of one Put or Get message on the message data path; larger transfers are
/// split into chunks of this size.
pub const DATA_CHUNK_MAX: usize = 64 * 1024;
/// Longest host identity in a Hello reply.
pub const HOST_ID_LEN_MAX: usize = 255;
/// Longest error text carried in a reply.
pub const ERROR_TEXT_LEN_MAX: usize = 1024;
/// Largest single allocation (1 TiB).
pub const ALLOC_SIZE_MAX: u64 = 1 << 40;
/// Largest alignment an allocation may ask for (1 GiB); alignments are powers of two.
pub const ALIGN_MAX: u64 = 1 << 30;
/// Default and minimum alignment of allocations: a cache line, so atomics never straddle.
pub const ALIGN_MIN: u64 = 64;
/// Most clients one server accepts at once.
pub const CLIENTS_MAX: usize = 4096;
/// Most allocations one client may hold on one server.
pub const HANDLES_PER_CLIENT_MAX: usize = 1 << 16;
/// Most tenants a server configuration may declare.
pub const TENANTS_MAX: usize = 1024;
/// Longest server name in a status reply.
pub const SERVER_NAME_LEN_MAX: usize = 255;
/// Most ranks in one checkpoint group.
pub const CKPT_RANKS_MAX: u32 = 1024;
/// Largest segment of one checkpoint GET (16 MiB).
pub const CKPT_SEGMENT_MAX: u32 = 16 << 20;
/// Smallest segment of one checkpoint GET (the seed's 16-byte access granularity).
pub const CKPT_SEGMENT_MIN: u32 = 16;
/// Most checkpoint GETs in flight per rank.
pub const CKPT_IN_FLIGHT_MAX: u32 = 1024;
/// Most segments in one parity slot (bounds the checksum tables: 4 bytes per segment and rank).
pub const CKPT_SEGMENTS_MAX: u64 = 1 << 22;
/// Longest suffix the engine appends to a group name for its allocations (`ckpt:` + `:parity1`).
pub const CKPT_NAME_SUFFIX_LEN_MAX: usize = 16;
