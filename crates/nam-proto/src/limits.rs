//! Every bound nam's protocol enforces and every default it proposes, in one place (the model
//! is TigerBeetle's `constants.zig`). Input is checked against these where it arrives; where
//! one limit bounds another, a compile-time assertion at the end of this module says so, so a
//! change that breaks the relation does not build.

use crate::message::HEADER_LEN;

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
/// Most checkpoint groups one Status reply lists (the count of all follows them, so a
/// longer list is seen to be cut).
pub const CKPT_GROUPS_LISTED_MAX: usize = 64;
/// Longest server name in a status reply.
pub const SERVER_NAME_LEN_MAX: usize = 255;
/// Most ranks in one checkpoint group.
pub const CKPT_RANKS_MAX: u32 = 1024;
/// Largest segment of one checkpoint GET (16 MiB).
pub const CKPT_SEGMENT_MAX: u32 = 16 << 20;
/// Smallest segment of one checkpoint GET: the NAM's 16-byte access granularity
/// (Schmidt 2017 §4.3.3.4).
pub const CKPT_SEGMENT_MIN: u32 = 16;
/// Most checkpoint GETs in flight per rank.
pub const CKPT_IN_FLIGHT_MAX: u32 = 1024;
/// Most segments in one parity slot (bounds the checksum tables: 4 bytes per segment and rank).
pub const CKPT_SEGMENTS_MAX: u64 = 1 << 22;
/// Longest suffix the engine appends to a group name for its allocations (`ckpt:` + `:parity1`).
pub const CKPT_NAME_SUFFIX_LEN_MAX: usize = 16;

/// Default segment of one RMA GET: measured on this project's machines, 256 KiB segments
/// pull at several times the rate of the 496-byte packet payload of Schmidt 2017 §4.2.4
/// (`nam-bench ckpt --segment-sweep`).
pub const CKPT_SEGMENT_DEFAULT: u32 = 256 * 1024;
/// Default GETs in flight per rank: enough to keep the link busy while one completes,
/// few enough that a group's ranks share the server's worker fairly.
pub const CKPT_IN_FLIGHT_DEFAULT: u32 = 4;
/// Default deadline for every rank of a group to flag ready once the first one has, and for
/// a restore to finish: a minute covers a slow rank's whole checkpoint write.
pub const CKPT_TIMEOUT_MS_DEFAULT: u32 = 60_000;

/// Default payload bytes per mailbox slot: one packetizer message of Ploumidis et al. 2023.
pub const MAILBOX_SLOT_SIZE_DEFAULT: u32 = 64;
/// Largest payload per mailbox slot; a `MailboxSend` carries one slot's payload in one
/// control message, so this is bounded by [`MESSAGE_LEN_MAX`].
pub const MAILBOX_SLOT_SIZE_MAX: u32 = 64 * 1024;
/// Most slots in one mailbox (a power of two, so the ring index is a mask).
pub const MAILBOX_SLOTS_MAX: u32 = 1 << 20;

/// Longest a server keeps one Watch (a wait it answers when a word changes); a client
/// waiting longer sends another.
pub const WATCH_TIMEOUT_MS_MAX: u32 = 60_000;
/// Most Watches one client may have pending at a server; more are refused (`Busy`).
pub const WATCHES_PER_CLIENT_MAX: usize = 256;

/// Most ranks in one allreduce group.
pub const REDUCE_RANKS_MAX: u32 = 4096;
/// Largest per-rank deposit area of an allreduce group (one chunk).
pub const REDUCE_CHUNK_MAX: u64 = 256 << 20;

/// Room for the fixed fields after the header of any message that carries a payload (a Put's
/// handle, offset and length; a `MailboxSend`'s handle, offset, sender and length, plus the
/// sub-kind; a `PutSignal`'s 46 bytes): the assertions below reserve it when they fit a payload into a message.
const FIXED_FIELDS_LEN_MAX: usize = 64;
/// Encoded size of one tenant in a Status reply: its name (u16 length + bytes) and three u64s.
const STATUS_TENANT_LEN_MAX: usize = 2 + TENANT_NAME_LEN_MAX + 3 * 8;
/// Encoded size of a Status reply's fields other than its tenants: the server name, sixteen
/// u64 counters (server and reported traffic) and the tenant count.
const STATUS_FIXED_LEN_MAX: usize = 2 + SERVER_NAME_LEN_MAX + 16 * 8 + 4;

/// Encoded size of one checkpoint group in a Status reply: id, tenant, name, two u32s, two u64s.
const STATUS_GROUP_LEN_MAX: usize = 8 + 2 + TENANT_NAME_LEN_MAX + 2 + NAME_LEN_MAX + 2 * 4 + 2 * 8;

// A message must hold the largest payload each message kind may carry.
const _: () = assert!(HEADER_LEN + FIXED_FIELDS_LEN_MAX + DATA_CHUNK_MAX <= MESSAGE_LEN_MAX);
const _: () = assert!(HEADER_LEN + FIXED_FIELDS_LEN_MAX + MAILBOX_SLOT_SIZE_MAX as usize <= MESSAGE_LEN_MAX);
const _: () = assert!(
    HEADER_LEN
        + STATUS_FIXED_LEN_MAX
        + TENANTS_MAX * STATUS_TENANT_LEN_MAX
        + 8
        + 4
        + CKPT_GROUPS_LISTED_MAX * STATUS_GROUP_LEN_MAX
        <= MESSAGE_LEN_MAX
);
const _: () = assert!(
    HEADER_LEN + FIXED_FIELDS_LEN_MAX + WORKER_ADDRESS_LEN_MAX + SERVER_NAME_LEN_MAX + HOST_ID_LEN_MAX
        <= MESSAGE_LEN_MAX
);
const _: () = assert!(HEADER_LEN + FIXED_FIELDS_LEN_MAX + RKEY_LEN_MAX <= MESSAGE_LEN_MAX);
const _: () = assert!(HEADER_LEN + FIXED_FIELDS_LEN_MAX + ERROR_TEXT_LEN_MAX <= MESSAGE_LEN_MAX);
// Alignments are powers of two from a cache line up, and an allocation can be that aligned.
const _: () = assert!(ALIGN_MIN.is_power_of_two() && ALIGN_MAX.is_power_of_two());
const _: () = assert!(ALIGN_MIN <= ALIGN_MAX && ALIGN_MAX <= ALLOC_SIZE_MAX);
// A group's pool names (`ckpt:` + name + suffix) fit an allocation name.
const _: () = assert!(crate::ckpt::CKPT_NAME_PREFIX.len() + CKPT_NAME_SUFFIX_LEN_MAX < NAME_LEN_MAX);
// The checkpoint defaults lie within the bounds the server enforces.
const _: () = assert!(CKPT_SEGMENT_MIN <= CKPT_SEGMENT_DEFAULT && CKPT_SEGMENT_DEFAULT <= CKPT_SEGMENT_MAX);
const _: () = assert!(1 <= CKPT_IN_FLIGHT_DEFAULT && CKPT_IN_FLIGHT_DEFAULT <= CKPT_IN_FLIGHT_MAX);
// The mailbox default lies within its bound, and the slot count is a power of two.
const _: () = assert!(1 <= MAILBOX_SLOT_SIZE_DEFAULT && MAILBOX_SLOT_SIZE_DEFAULT <= MAILBOX_SLOT_SIZE_MAX);
const _: () = assert!(MAILBOX_SLOTS_MAX.is_power_of_two());
// An allreduce deposit is a whole number of 8-byte elements and no larger than an allocation.
const _: () = assert!(REDUCE_CHUNK_MAX.is_multiple_of(8) && REDUCE_CHUNK_MAX <= ALLOC_SIZE_MAX);
