//! Every limit, default and tuning knob of the server in one place, with compile-time
//! assertions where one bounds another (after TigerBeetle's `constants.zig`). Limits of
//! what crosses the wire (message lengths, rank counts, segment sizes) are the protocol's and
//! stay in [`nam_proto::limits`]; the assertions below tie the server's knobs to them.

use nam_proto::gas::REDUCE_CHUNK_MAX;
use nam_proto::limits::{ALIGN_MAX, ALIGN_MIN, CKPT_SEGMENT_MAX};
use std::time::Duration;

// ---- Progress loop --------------------------------------------------------------------------

/// Longest sleep on the worker's event fd, so stop requests and leases are noticed promptly.
pub(crate) const SLEEP_MAX: Duration = Duration::from_millis(100);

/// While busy, housekeeping (reaping sends, failed clients, leases, the manifest) runs at
/// most this often; an idle loop runs it on every pass.
pub(crate) const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(10);

/// Pause when sleeping on the event fd fails and the loop falls back to polling.
pub(crate) const SLEEP_FAILED_BACKOFF: Duration = Duration::from_micros(50);

/// Sockets on the listening port are scanned for leftovers of failed connections at most
/// this often (`server::sockets`): a few system calls per socket. Short, because UCX's
/// event thread spins on a socket that sent it garbage and closed until the scan closes it,
/// and holds up the server's progress meanwhile (measured: ten such connections a second
/// made 64 clients' handshakes miss 10 s deadlines with a 1 s grace).
pub(crate) const SOCKET_SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// A socket whose peer closed and that UCX has not closed after this long (seen so by two
/// scans) is a failed connection UCX forgot: UCX closes a real client's socket as soon as
/// it sees the close. (Were it a real client's, closing it under UCX loses nothing: its
/// data connections fail too, and that is how the server learns it is gone.)
pub(crate) const CLOSE_WAIT_GRACE: Duration = SOCKET_SCAN_INTERVAL;

/// Most bytes a real client sends on its connection-manager socket: UCX's connection request
/// (a header and at most `UCX_TCP_CM_PRIV_DATA_LEN` of private data, 2 KiB by default) and a
/// notification. A closed socket that received more was no client and is closed at once.
pub(crate) const CM_BYTES_MAX: u64 = 2048 + 256;

// ---- Configuration defaults (`nam serve` flags and the TOML file override them) -------------

/// Default credit of one client: reply bytes the server holds for it, not yet taken by the
/// client. A well-behaved client has at most a window of 64 KiB replies in flight (the
/// message path's eight), so 8 MiB never stops one; a client that does not read its replies
/// is disconnected when it asks for more.
pub(crate) const DEFAULT_CLIENT_REPLY_BYTES_MAX: u64 = 8 << 20;

/// Default credit of one client in requests: replies not yet taken.
pub(crate) const DEFAULT_CLIENT_REQUESTS_MAX: u32 = 1024;

/// Default bound of the reply bytes the server holds for all clients together.
pub(crate) const DEFAULT_REPLY_BYTES_MAX: u64 = 256 << 20;

/// Default deadline for a client to take a reply: one still queued after it is dropped and
/// its client disconnected.
pub(crate) const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Default deadline for a connection to authenticate (and for an accepted socket to send its
/// first byte); a connection still anonymous after it is closed.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default limit of connections, all sources together.
pub(crate) const DEFAULT_CONNECTIONS_MAX: usize = 1024;

/// Default limit of connections from one IP address.
pub(crate) const DEFAULT_CONNECTIONS_PER_SOURCE_MAX: usize = 512;

/// Default limit of connections not yet authenticated (and of silent sockets) from one IP
/// address: a burst of legitimate clients authenticates within milliseconds.
pub(crate) const DEFAULT_PENDING_PER_SOURCE_MAX: usize = 128;

/// The port `nam serve` listens on by default.
pub(crate) const DEFAULT_PORT: u16 = 13337;

/// Pool size of a configuration file that names none.
pub(crate) const DEFAULT_CAPACITY_BYTES: u64 = 1 << 30;

/// Default lease of a vanished client's allocations.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Default busy-poll window after the last event (keeps latency at polling level while
/// traffic flows; an idle server sleeps on the worker's event fd after it).
pub(crate) const DEFAULT_IDLE_SPIN: Duration = Duration::from_millis(2);

/// Name of the tenant used when the configuration declares none.
pub(crate) const DEFAULT_TENANT: &str = "default";

// ---- Memory ---------------------------------------------------------------------------------

/// The page size the pool is rounded to and ranges are faulted in by.
pub(crate) const PAGE_BYTES: u64 = 4096;

/// The first segment of a tenant's arena (and the least a later one grows it by, quota and
/// pool permitting): small allocations share a segment instead of taking one UCX mapping,
/// one remote key and one client-side mapping each.
pub(crate) const ARENA_SEGMENT_MIN_BYTES: u64 = 1 << 20;

/// The most a new segment grows an arena by beyond what the allocation at hand needs: an
/// arena doubles while small (few segments), but never takes more than this of the pool
/// ahead of its tenant's use.
pub(crate) const ARENA_GROWTH_MAX_BYTES: u64 = 64 << 20;

/// Segments one tenant's arena may have: every segment is a UCX registration here and a
/// remote key (a mapping, over shared memory) in each of the tenant's clients. Arenas grow
/// by doubling up to [`ARENA_GROWTH_MAX_BYTES`], so this is reached only past 16 GiB.
pub(crate) const ARENA_SEGMENTS_MAX: usize = 256;

/// A cache line: the reduction kernel splits work on it, so threads share no line.
pub(crate) const CACHE_LINE_BYTES: usize = 64;

/// Mode of the pool's backing file and manifest: they hold every tenant's data and the
/// names and sizes of every allocation, so only the server's user may read them.
pub(crate) const BACKING_FILE_MODE: u32 = 0o600;

// ---- Checkpoint engine ----------------------------------------------------------------------

/// Bytes the direct (mapped) path folds per step, so one large epoch does not stall the
/// server's other clients (about 2 ms of work). Large enough that a cohort of many ranks
/// still gets several segments per step to spread over the cores: at 2 MiB, 8 ranks and
/// 256 KiB segments made one segment per step, folded on one core.
pub(crate) const CKPT_DIRECT_BUDGET_BYTES: u64 = 16 << 20;
/// Largest run of rebuilt segments a pushed restore PUTs into the lost rank's buffer at
/// once: large enough that UCX streams it without a round trip per segment, small enough
/// that the first bytes leave while later segments are still being rebuilt.
pub(crate) const CKPT_PUSH_RUN_BYTES: u64 = 4 << 20;

/// Bytes of a fold sub-block: eight sources and the output (576 KiB) stay in a 1 MiB L2
/// cache, and each checksum call is long enough for the carry-less-multiply kernel to pay
/// off (measured: 4 KiB sub-blocks ran at 0.6 of a plain XOR loop per CPU second, 64 KiB at
/// 1.0).
pub(crate) const CKPT_FOLD_SUB_BLOCK_BYTES: usize = 64 << 10;

/// Alignment of a group's control block: each group's words on their own cache lines.
pub(crate) const CKPT_CONTROL_ALIGN: u64 = CACHE_LINE_BYTES as u64;

/// Alignment of a parity slot and of a restore's pool buffer: whole pages, faulted in and
/// mapped by the ranks page by page.
pub(crate) const CKPT_BUFFER_ALIGN: u64 = PAGE_BYTES;

// ---- Allreduce engine -----------------------------------------------------------------------

/// Vectors at least this long are reduced by several threads.
pub(crate) const REDUCE_PARALLEL_BYTES_MIN: usize = 256 * 1024;

/// Most threads one reduction uses.
pub(crate) const REDUCE_THREADS_MAX: usize = 8;

// ---- How they bound each other --------------------------------------------------------------

const _: () = assert!(HOUSEKEEPING_INTERVAL.as_nanos() <= SLEEP_MAX.as_nanos(), "housekeeping runs every wake-up");
const _: () = assert!(SLEEP_MAX.as_nanos() < DEFAULT_LEASE.as_nanos(), "a sleep never outlasts a lease");
const _: () = assert!(DEFAULT_IDLE_SPIN.as_nanos() < SLEEP_MAX.as_nanos(), "spinning is shorter than a sleep");
const _: () = assert!(PAGE_BYTES.is_power_of_two() && CACHE_LINE_BYTES.is_power_of_two());
const _: () = assert!(
    CKPT_DIRECT_BUDGET_BYTES >= CKPT_SEGMENT_MAX as u64,
    "one step of the direct path folds at least one segment of the largest size"
);
const _: () = assert!(
    CKPT_FOLD_SUB_BLOCK_BYTES.is_multiple_of(CACHE_LINE_BYTES),
    "the fold kernel works in whole 64-byte lanes inside a sub-block"
);
const _: () = assert!(
    ALIGN_MIN <= CKPT_CONTROL_ALIGN && CKPT_BUFFER_ALIGN <= ALIGN_MAX,
    "the engine's own allocations pass the manager's alignment check"
);
const _: () = assert!(
    CKPT_CONTROL_ALIGN.is_power_of_two() && CKPT_BUFFER_ALIGN.is_power_of_two(),
    "the manager takes power-of-two alignments only"
);
const _: () = assert!(
    REDUCE_PARALLEL_BYTES_MIN as u64 <= REDUCE_CHUNK_MAX,
    "a chunk can be long enough to be reduced in parallel"
);
const _: () = assert!(REDUCE_THREADS_MAX >= 1);
const _: () = assert!(
    DEFAULT_CLIENT_REPLY_BYTES_MAX <= DEFAULT_REPLY_BYTES_MAX,
    "one client's credit fits in the server's bound"
);
const _: () = assert!(
    DEFAULT_PENDING_PER_SOURCE_MAX <= DEFAULT_CONNECTIONS_PER_SOURCE_MAX
        && DEFAULT_CONNECTIONS_PER_SOURCE_MAX <= DEFAULT_CONNECTIONS_MAX
        && DEFAULT_CONNECTIONS_MAX <= nam_proto::limits::CLIENTS_MAX,
    "the connection limits nest"
);
const _: () = assert!(CLOSE_WAIT_GRACE.as_nanos() >= SOCKET_SCAN_INTERVAL.as_nanos());
