//! Every limit and tuning constant of the checkpoint library, in one place.
//!
//! Where one constant bounds another the relation is a compile-time assertion below, so a
//! change that breaks it does not build (the style of TigerBeetle's `constants.zig`). The
//! defaults of the configuration file stay in [`crate::Config::default`] (and
//! docs/checkpoint.md), except those a limit here bounds.

use std::time::Duration;

// ---- L1 RAM level: chunk parity (`pq`, `format`) ----

/// Most data chunks per P+Q stripe: the coefficients g^i are distinct for i < 255.
pub const PQ_MAX_DATA: usize = 255;

/// Words between P and Q, so that `P[i]` and `Q[i]` (and the data word at the same offset of a
/// page) do not fall at the same address modulo 4 KiB, where the CPU would take stores to one
/// for possible aliases of loads from the other (4K aliasing).
pub const PQ_SKEW_WORDS: usize = 72;

/// Default bytes per RAM-level chunk (each chunk has a CRC32C).
pub const RAM_CHUNK_DEFAULT: u64 = 64 << 10;

/// Default data chunks per RAM-level parity stripe.
pub const RAM_STRIPE_CHUNKS_DEFAULT: usize = 16;

/// Default parity chunks per RAM-level stripe (P+Q).
pub const RAM_PARITY_CHUNKS_DEFAULT: usize = 2;

/// Chunks must be whole cache lines (`Config` refuses others): the CRC and parity kernels
/// work on 64-byte lines.
pub const CHUNK_ALIGN: u64 = 64;

const _: () = assert!(RAM_STRIPE_CHUNKS_DEFAULT <= PQ_MAX_DATA, "the default stripe must take the P+Q code");
const _: () = assert!(RAM_PARITY_CHUNKS_DEFAULT <= 2, "P+Q rebuilds at most two chunks of a stripe");
const _: () = assert!(RAM_CHUNK_DEFAULT.is_multiple_of(CHUNK_ALIGN), "chunks are whole cache lines");

// ---- L1 RAM level: mapped writer (`mapped.rs`) ----

/// Mappings of RAM-level files kept (least recently used go first): a checkpoint name cycles
/// through `keep` + 1 files at the RAM level, and files being flushed add more; this leaves
/// room for two names with a flush in flight. A mapping only costs address space.
pub const MAPPINGS_CACHED_MAX: usize = 8;

/// Bytes checksummed and then copied at a time: small enough that the copy reads them from
/// the L1 cache, large enough for the carry-less-multiply CRC kernel (16 KiB blocks ran 5-10%
/// faster than 4 KiB).
pub const COPY_BLOCK: usize = 16384;

const _: () = assert!(RAM_CHUNK_DEFAULT as usize >= COPY_BLOCK, "a default chunk holds whole copy blocks");
const _: () = assert!((RAM_CHUNK_DEFAULT as usize).is_multiple_of(COPY_BLOCK), "blocks do not straddle chunks");
const _: () = assert!(COPY_BLOCK.is_multiple_of(CHUNK_ALIGN as usize));

// ---- L3 flush (`flush.rs`) ----

/// Bytes the flush copies between looks at whether a checkpoint is being written.
pub const FLUSH_CHUNK: usize = 4 << 20;

/// Longest the flush waits for checkpoints before its next chunk: it must make progress even
/// when the application checkpoints back to back.
pub const FLUSH_PAUSE_LIMIT: Duration = Duration::from_secs(2);

/// How long finalize waits for outstanding flushes.
pub const FLUSH_WAIT_MAX: Duration = Duration::from_secs(600);

const _: () = assert!(FLUSH_PAUSE_LIMIT.as_millis() < FLUSH_WAIT_MAX.as_millis(), "a paused flush still finishes");

// ---- Collectives that sleep (`patient.rs`) ----

/// Longest sleep between two tests of a pending collective: the most latency an early rank's
/// collective adds.
pub const PATIENT_MAX_SLEEP: Duration = Duration::from_micros(500);

/// Polls that only yield before the first sleep: a collective whose ranks are all there
/// completes within a few of them.
pub const PATIENT_YIELD_POLLS: u32 = 8;

// ---- NAM-XOR and the memory-server level (`redundancy/nam_xor.rs`, `incremental`) ----

/// Further connection attempts when a memory server refuses one (a whole job connects at
/// once, and a loaded server can refuse a request).
pub const CONNECT_ATTEMPTS: u32 = 3;

/// Unit of the wait before a further connection attempt: attempt n (from 1) waits 2^n of it.
pub const CONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// Deadline of one protect or rebuild at the memory server.
pub const SERVER_WAIT: Duration = Duration::from_secs(300);

/// The group-name prefix of NAM-XOR when `NAM_CKPT_GROUP` does not name one.
pub const GROUP_PREFIX_DEFAULT: &str = "nam-ckpt";

/// All backoffs of a refused connection, milliseconds.
const CONNECT_BACKOFF_TOTAL_MS: u128 = CONNECT_BACKOFF.as_millis() * ((2 << CONNECT_ATTEMPTS) - 2);

const _: () = assert!(CONNECT_BACKOFF_TOTAL_MS < SERVER_WAIT.as_millis(), "retrying to connect is not a stall");
const _: () = assert!(PATIENT_MAX_SLEEP.as_millis() < SERVER_WAIT.as_millis());

// ---- Placement policy (`policy.rs`) ----

/// Seconds in a (Julian) year, the unit of SSD lifetimes (Abeyratne 2017, Eq. 4.1-4.2).
pub const SECONDS_PER_YEAR: f64 = 365.25 * 86400.0;
