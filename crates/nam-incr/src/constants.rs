//! Every limit and tuning value of nam-incr, in one place (the model is TigerBeetle's
//! `constants.zig`): what each bounds and why it has its value, the defaults of
//! [`crate::Config`] among them. Where one bounds another, a compile-time assertion at the end
//! says so, so a change that breaks the relation does not build. The on-disk format's sizes
//! (`crate::format`) and the page and line geometry (`crate::geometry`) are definitions, not
//! choices, and stay with their code.

use crate::format::{ENTRY_BYTES, RECORD_HEADER_BYTES};
use crate::geometry::{LINES_PER_PAGE, PAGE_BYTES};
use std::time::Duration;

/// Default record size: one 16 KiB flash page, the unit Abeyratne 2017 §5.3.2 consolidates
/// sparse pages into (the largest page of the NAND devices of its Table 2.1).
pub const RECORD_BYTES_DEFAULT: usize = 16 * 1024;

/// Smallest record: its header, one page header, one whole page and the checksum.
pub const RECORD_BYTES_MIN: usize = RECORD_HEADER_BYTES + ENTRY_BYTES + PAGE_BYTES + 4;

/// Most regions one process can protect at a time.
pub const REGIONS_MAX: usize = 64;

/// Most pages copied with one read (and, with the asynchronous tracker, released with one
/// mprotect call).
pub const RUN_PAGES: usize = 16;

/// Longest a write waits for its page to be persisted before the page is released and the
/// checkpoint in flight is marked broken (the writer's store hung): no write waits forever.
pub const FAULT_WAIT_MAX: Duration = Duration::from_secs(30);

/// How far below the head restart looks for an older complete checkpoint.
pub const PROBE_BACK_MAX: u32 = 64;

/// How long replacing an object waits for a vanished client's hold on the old one to end
/// (the server's lease, 10 s by default).
pub const REPLACE_WAIT_MAX: Duration = Duration::from_secs(30);

/// Pause between attempts to replace an object a vanished client still holds: short against
/// [`REPLACE_WAIT_MAX`], long enough not to flood the server with refused allocations.
pub const REPLACE_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How often a checkpoint waiting for its forked child looks whether the child has exited:
/// 200 µs, small against the copy of any region worth forking for.
pub const FORK_REAP_POLL: Duration = Duration::from_micros(200);

/// How long a write waiting for its page to be persisted sleeps between looks at the page's
/// state (20 µs): the page is copied by the writer meanwhile (it was marked urgent), and
/// the wait stays async-signal-safe (`nanosleep`) inside the fault handler.
pub const FAULT_RECHECK_NS: libc::c_long = 20_000;

/// Longest a write waiting for an urgent page sleeps on the served-pages futex before it
/// checks its deadline again (1 ms); a served page wakes it at once.
pub const SERVED_WAIT_NS: libc::c_long = 1_000_000;

/// How long the write-protect fault thread waits in `poll(2)` before it looks at its stop
/// flag again: 50 ms, so dropping the engine is prompt.
pub const TRACKER_POLL_MS: i32 = 50;

/// Default bytes per segment (one store object, one fsync on the SSD level): 4 MiB, so the
/// per-object cost of the store is spread over 256 records of the default size.
pub const SEGMENT_BYTES_DEFAULT: usize = 4 << 20;

/// Default neighbouring clean pages one write fault releases (a power of two): fewer faults
/// for dense writes, a little more hashing for sparse ones.
pub const FAULT_AROUND_PAGES_DEFAULT: usize = 16;

/// Default interval at which the early/late writer looks for pages that turned cold.
pub const EARLY_SWEEP_DEFAULT: Duration = Duration::from_millis(10);

/// Default growth of the increment chain, as a multiple of the regions' bytes, beyond which
/// it is merged backwards (Abeyratne 2017 §5.3.2's garbage collection).
pub const MERGE_RATIO_DEFAULT: f64 = 4.0;

/// Default deadline of every wait of the engine: a minute covers a slow store's whole
/// checkpoint.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// Default complete checkpoints kept in the store, the newest included.
pub const KEEP_DEFAULT: usize = 1;

// A line bitmap of a page is one u64.
const _: () = assert!(LINES_PER_PAGE == 64);
// A record of the default size holds at least one whole page, and a segment whole records.
const _: () = assert!(RECORD_BYTES_MIN <= RECORD_BYTES_DEFAULT);
const _: () = assert!(SEGMENT_BYTES_DEFAULT.is_multiple_of(RECORD_BYTES_DEFAULT));
// Fault-around releases a power of two of pages; a copy run is at least one page.
const _: () = assert!(FAULT_AROUND_PAGES_DEFAULT.is_power_of_two() && RUN_PAGES >= 1);
// A write never waits for its page longer than the engine waits for anything.
const _: () = assert!(FAULT_WAIT_MAX.as_secs() <= TIMEOUT_DEFAULT.as_secs());
// A write rechecks its page many times within the longest wait.
const _: () = assert!((FAULT_RECHECK_NS as u128) * 1000 < FAULT_WAIT_MAX.as_nanos());
const _: () = assert!((SERVED_WAIT_NS as u128) * 1000 < FAULT_WAIT_MAX.as_nanos());
// A timespec's nanoseconds stay below one second.
const _: () = assert!(FAULT_RECHECK_NS < 1_000_000_000 && SERVED_WAIT_NS < 1_000_000_000);
// Retries fit many times into the wait for a replaced object; a restart keeps a checkpoint.
const _: () = assert!(REPLACE_RETRY_PAUSE.as_millis() * 10 <= REPLACE_WAIT_MAX.as_millis() && KEEP_DEFAULT >= 1);
