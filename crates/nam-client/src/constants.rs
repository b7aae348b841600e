//! Every limit and tuning constant of the client, in one place, tied together by
//! compile-time assertions where one bounds another (the pattern of TigerBeetle's
//! `constants.zig`). Wire limits, which client and server must agree on, stay in
//! [`nam_proto::limits`]; the ones the client's constants depend on are checked here too.
//!
//! A constant that only one function reads still lives here when changing it changes
//! behaviour a user can see (a deadline, a back-off, a size threshold): the next engineer
//! tuning the client should find every knob in one file.

use nam_proto::limits::DATA_CHUNK_MAX;
use std::time::Duration;

// ---- Deadlines -------------------------------------------------------------------------

/// Default deadline of one operation ([`crate::ClientConfig::timeout`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default deadline for connecting to a server ([`crate::ClientConfig::connect_timeout`]).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline of the best-effort goodbye a dropped client sends each server: a server that
/// is gone reclaims through the lease instead, so dropping must not wait the full timeout.
pub const GOODBYE_TIMEOUT: Duration = Duration::from_secs(1);

// ---- Health of shared-memory servers ----------------------------------------------------

/// Operations completed without progressing the worker (immediate UCX completions, or
/// direct loads and stores) between two health checks of the control endpoints. A check is
/// one worker progress (an epoll_wait, ~0.5 us): every 64 operations it cost ~8 ns each.
pub const HEALTH_CHECK_OPS: u32 = 1024;

/// Longest pause of a client's liveness thread between two progress calls (a quarter of the
/// operation deadline if that is shorter): a client that only loads and stores on a mapped
/// pool learns that its server died within this, whatever its rate of operations. Ten calls
/// a second of about half a microsecond each cost nothing measurable.
pub const LIVENESS_INTERVAL_MAX: Duration = Duration::from_millis(100);

// ---- Control messages -------------------------------------------------------------------

/// How long a patient call (a request the server may answer only after a long step)
/// spins for its reply before it sleeps: a server that is not in the middle of a long step
/// answers well within it.
pub const PATIENT_SPIN: Duration = Duration::from_micros(100);
/// Longest sleep between polls of a patient call. Over TCP, UCX emulates the server's GETs
/// of this process's buffer with messages only this process's progress answers: as short as
/// the checkpoint waits' poll while their buffer is being pulled ([`CKPT_PULL_POLL_MAX`]).
pub const PATIENT_SLEEP_MAX: Duration = Duration::from_micros(200);
/// How long a call that is not patient polls for its reply without yielding the core. A
/// yield on a core that a CPU-bound thread shares hands it the core for the rest of its
/// scheduler slice (a millisecond or more), and the reply, due in tens of microseconds from
/// a server on another core, waits for it. Not over TCP to a server on this host, which
/// the request may have woken on this very core (`Link::yields_at_once`).
pub const RECEIVE_SPIN: Duration = Duration::from_micros(100);
/// A sleeping poller (a patient call, a checkpoint wait) sleeps this much longer on each
/// poll, up to its maximum: short waits stay short, long ones stop costing CPU.
pub const POLL_BACKOFF_STEP: Duration = Duration::from_micros(10);
/// Chunks of [`DATA_CHUNK_MAX`] bytes in flight per transfer on the message path, so that
/// bandwidth is not one round trip per chunk.
pub const MESSAGE_WINDOW: usize = 8;
/// Message-path puts (chunks) sent without their reply collected, per server: a put returns
/// once sent, and the oldest reply is awaited when more are outstanding (`crate::pending`).
pub const MESSAGE_PUTS_IN_FLIGHT_MAX: usize = 32;

// ---- Path choice (direct / RMA crossover) -----------------------------------------------

/// Smallest size the connect-time crossover measurement tries.
pub const PROBE_BYTES_MIN: u64 = 4;
/// Largest size the connect-time measurement tries (its scratch allocation's size).
pub const PROBE_BYTES_MAX: u64 = 256 * 1024;
/// Each probed size is this many times the previous one.
pub const PROBE_SIZE_FACTOR: u64 = 4;
/// Bytes put per probed size and path (repetitions = this / size, clamped below).
pub const PROBE_BYTES_PER_SIZE: u64 = 64 * 1024;
/// Fewest timed puts per probed size and path.
pub const PROBE_REPS_MIN: u64 = 4;
/// Most timed puts per probed size and path.
pub const PROBE_REPS_MAX: u64 = 256;
/// RMA counts as faster than the direct path only when it is faster by this factor: a
/// tie within the noise of a connect-time measurement keeps the direct path.
pub const CROSSOVER_MARGIN: f64 = 1.1;

// ---- Direct path --------------------------------------------------------------------------

/// Direct puts below this size use plain stores even when streaming is asked for: the
/// read for ownership they would avoid is not worth the non-temporal stores' fence.
pub const STREAMING_BYTES_MIN: usize = 4096;

// ---- Waiting on words ---------------------------------------------------------------------

/// Polls of [`crate::Client::wait_until`] before it starts sleeping between polls (kept
/// for callers that poll words themselves).
pub const WAIT_SPIN_POLLS: u32 = 64;
/// Longest sleep between polls of a waiter that has no wake-up to sleep on.
pub const WAIT_SLEEP_MAX: Duration = Duration::from_micros(1000);
/// How long a wait spins on its word before it sleeps on a wake-up, by default
/// ([`crate::ClientConfig::wait_spin`], `NAM_WAIT_SPIN_US`): a signal that comes within it is
/// seen at once; a longer wait costs a futex or a server notification, a few microseconds.
pub const WAIT_SPIN_DEFAULT: Duration = Duration::from_micros(20);
/// The first part of a wait's spin that only spins; for the rest of it (a `wait_spin`
/// configured longer) the waiter yields its core between reads, so that a signaller that
/// shares the waiter's core (more runnable threads than cores) runs. As long as the default
/// spin: yielding after 2 µs, a ping-pong between two threads on a machine busy with other
/// work handed its cores to that work and averaged 3.4 µs per half round trip in some runs
/// against 0.1-0.2 µs spinning (AMD EPYC, 2 cores, load 4); a signaller that shares the
/// core still runs once the waiter sleeps on its futex.
pub const WAIT_SPIN_BUSY: Duration = Duration::from_micros(20);
/// Longest single sleep of a waiter on a wake-up: bounds the delay of a change no one
/// announced (a store by a path that does not wake, see `crate::wake`).
pub const WAIT_SLEEP_SLICE: Duration = Duration::from_millis(10);
/// Longest single sleep of a direct-path waiter that found no room in the wake table.
pub const WAIT_SLEEP_UNREGISTERED: Duration = Duration::from_micros(200);

// ---- Mailboxes ----------------------------------------------------------------------------

/// The owner publishes `head` after consuming this fraction of the slots (at least one
/// message): senders see freed slots in batches, and the owner does not write the shared
/// header line per message.
pub const MAILBOX_PUBLISH_DIVISOR: u64 = 4;
/// Polls of [`crate::Mailbox::recv`] before it starts sleeping between polls.
pub const MAILBOX_SPIN_POLLS: u32 = 1024;
/// Longest sleep between polls of [`crate::Mailbox::recv`].
pub const MAILBOX_SLEEP_MAX: Duration = Duration::from_micros(200);

// ---- Allreduce ----------------------------------------------------------------------------

/// Default bytes per rank and round of an allreduce: 1 MiB.
pub const REDUCE_CHUNK_DEFAULT: u64 = 1 << 20;
/// Rounds of at most this many bytes per rank are reduced by their last rank itself when
/// the group's memory is mapped here; larger ones by the server (with several threads from
/// 256 KiB).
pub const RANK_REDUCE_BYTES_MAX: usize = 64 * 1024;
/// Polls of an allreduce's result word before the rank yields its core between polls.
pub const REDUCE_SPIN_POLLS: u32 = 16;

// ---- Checkpoint groups --------------------------------------------------------------------

/// How often [`crate::CkptMember::wait_complete`] asks the server whether the epoch failed.
pub const CKPT_QUERY_INTERVAL: Duration = Duration::from_millis(250);
/// Longest sleep on a mapped control word: the server wakes it when it changes, so this only
/// bounds a missed wake-up (a failure of another rank also shows in the next query).
pub const CKPT_FUTEX_SAFETY: Duration = Duration::from_millis(20);
/// Longest sleep between polls while the server may still read this rank's buffer, off
/// shared memory: over TCP its GETs progress only when this process does.
pub const CKPT_PULL_POLL_MAX: Duration = Duration::from_micros(200);
/// Longest sleep while only other ranks are being pulled: this rank's core is the server's.
pub const CKPT_GROUP_POLL_MAX: Duration = Duration::from_millis(2);
/// Polls of a checkpoint wait before it starts sleeping between polls.
pub const CKPT_SPIN_POLLS: u32 = 16;

// ---- How the constants bound each other ---------------------------------------------------

/// Whether `max` is reached from `min` by whole steps of `factor` (so the last probe is
/// exactly the largest size, as `nam status` reports it).
const fn reached_by_steps(min: u64, max: u64, factor: u64) -> bool {
    let mut size = min;
    while size < max {
        size *= factor;
    }
    size == max
}

/// A strided get reads the whole span from its first to its last element in one get when
/// the span is at most this many times the elements' bytes (the gaps cost only bandwidth,
/// a get per element costs a round trip each on the message path), else one get per element.
pub const STRIDED_SPAN_FACTOR: u64 = 4;

const _: () = {
    assert!(DEFAULT_CONNECT_TIMEOUT.as_nanos() <= DEFAULT_TIMEOUT.as_nanos());
    assert!(GOODBYE_TIMEOUT.as_nanos() <= DEFAULT_TIMEOUT.as_nanos());
    assert!(HEALTH_CHECK_OPS > 0);
    // A patient call must poll at least as often as the checkpoint waits while this
    // process's buffer is being pulled over TCP, or it would slow the pull it waits for.
    assert!(PATIENT_SLEEP_MAX.as_nanos() <= CKPT_PULL_POLL_MAX.as_nanos());
    assert!(PATIENT_SPIN.as_nanos() <= PATIENT_SLEEP_MAX.as_nanos());
    assert!(POLL_BACKOFF_STEP.as_nanos() <= PATIENT_SLEEP_MAX.as_nanos());
    assert!(MESSAGE_WINDOW >= 1);
    assert!(STRIDED_SPAN_FACTOR >= 1);
    // A 64-bit word travels in one chunk: a word load on the message path is one message,
    // which the server executes whole (the mailbox's consistent slot reads rely on it).
    assert!(DATA_CHUNK_MAX >= 8);
    assert!(PROBE_BYTES_MIN >= 1 && PROBE_SIZE_FACTOR >= 2);
    assert!(reached_by_steps(PROBE_BYTES_MIN, PROBE_BYTES_MAX, PROBE_SIZE_FACTOR));
    assert!(PROBE_REPS_MIN >= 1 && PROBE_REPS_MIN <= PROBE_REPS_MAX);
    assert!(PROBE_BYTES_PER_SIZE <= PROBE_BYTES_MAX * PROBE_REPS_MAX);
    // Streaming stores write whole 64-byte lines; below one line there is nothing to stream.
    assert!(STREAMING_BYTES_MIN >= 64);
    assert!(WAIT_SPIN_POLLS > 0 && MAILBOX_SPIN_POLLS > 0);
    assert!(MAILBOX_PUBLISH_DIVISOR >= 1);
    // The rank-side reduction handles one round of a chunk at most.
    assert!(RANK_REDUCE_BYTES_MAX as u64 <= REDUCE_CHUNK_DEFAULT);
    assert!(REDUCE_CHUNK_DEFAULT.is_multiple_of(8));
    // A missed futex wake-up is noticed before the next failure query is due.
    assert!(CKPT_FUTEX_SAFETY.as_nanos() < CKPT_QUERY_INTERVAL.as_nanos());
    assert!(CKPT_PULL_POLL_MAX.as_nanos() <= CKPT_GROUP_POLL_MAX.as_nanos());
    assert!(CKPT_GROUP_POLL_MAX.as_nanos() < CKPT_QUERY_INTERVAL.as_nanos());
};
