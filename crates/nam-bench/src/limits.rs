//! Limits and tuning of the benchmarks in one place: deadlines, defaults and buffer bounds
//! that a reader tuning a run (or wondering why one gave up) looks for first.

use std::time::Duration;

/// Trials per Table 4.4 row of `nam-bench ecc` (the 10 million of Abeyratne 2017's table).
pub const ECC_TRIALS_DEFAULT: u64 = 10_000_000;

/// How long a failed MPI rank waits in `MPI_Finalize` for its peers before it exits without it.
pub const FINALIZE_DEADLINE: Duration = Duration::from_secs(10);

/// Longest one `mpirun` job of `nam-bench allreduce` may take.
pub const ALLREDUCE_JOB_DEADLINE: Duration = Duration::from_secs(900);

/// Longest one `ucx_perftest` run (the baseline of `nam-bench gas --vs-ucx`) may take.
pub const PERFTEST_RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadline of one mailbox receive or signal wait of `nam-bench mailbox`.
pub const MAILBOX_DEADLINE: Duration = Duration::from_secs(30);

/// Polls that spin before each further poll yields the core. Short: when both sides share
/// one core (a loaded machine), a longer spin only delays the other side (a 50 us spin made
/// both kinds of round trip ~200 us there).
pub const MAILBOX_SPIN_POLLS: u32 = 256;

/// Most bytes of get destinations in flight in the bandwidth phase of `nam-bench gas`.
pub const GET_SLOTS_BYTES_MAX: usize = 4 << 20;

/// Operation and connect deadline of a `--clients` process of `nam-bench gas` (64 of them
/// start at once on a small machine).
pub const CLIENT_PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadline of the status request that checks a server after a benchmark.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// Operation deadline of the far-memory benchmark's clients.
pub const FARMEM_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long memcached may take to listen.
pub const MEMCACHED_START_DEADLINE: Duration = Duration::from_secs(10);

/// Read deadline of one memcached connection of the load generator.
pub const MEMCACHED_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `nam-bench ckpt-check app --wait-flush` waits for a rank's L3 flush.
pub const FLUSH_WAIT: Duration = Duration::from_secs(60);
