//! Every limit and tuning value of nam-ucx, in one place (the model is TigerBeetle's
//! `constants.zig`): what each bounds and why it has its value. The byte layout of UCX's
//! packed addresses and keys (`peer.rs`) is UCX's definition, not a choice, and stays with
//! its parser.

use std::time::Duration;

/// Longest an endpoint's close progresses the worker waiting for UCX to finish it: 2 s,
/// long enough for a close to a live peer; a dead peer's close is then given up, not waited
/// for.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// More transports than any host lists: a bound on the loop, not a UCX limit.
pub const IFACES_MAX: usize = 64;

/// UCX settings whose defaults nam changes, unless the environment variable named first
/// sets them: (environment variable, configuration key, value).
///
/// `UCX_TCP_PUT_ENABLE`: UCX 1.13's TCP transport with zero-copy PUT crashed (SIGSEGV in
/// `uct_tcp_ep_handle_io_err`, from `uct_tcp_iface_progress`) when a peer closed its endpoint
/// on an oversubscribed machine; the `ckpt_parity` tests beside four busy loops crashed in 2 of
/// 3 runs with it on and passed 6 of 6 with it off. Kept off with UCX 1.22 until measured
/// again: puts over TCP then travel as active messages; shared memory and RDMA transports are
/// not affected. The keys are the full names (UCX 1.22 checks that some component has them).
///
/// `UCX_TCP_CM_REUSEADDR`: a listener sets `SO_REUSEADDR`, so a server restarted on its port
/// right after a crash (kill -9) binds at once instead of failing with "Address already in
/// use" while the dead process's connections sit in TIME-WAIT (about a minute). It does not
/// let two live listeners share a port: Linux refuses a second bind to a listening address.
///
/// `UCX_TCP_TX_SEG_SIZE`: 64 KiB, the receive segment's default size, instead of 8 KiB. UCX
/// 1.22 sends a large active message over TCP as a train of send segments; with 8 KiB ones,
/// nam's message-path gets and puts of 1-16 MiB ran at 0.56-0.86 GB/s, half of what they did on
/// UCX 1.13; with 64 KiB, 1.26-1.95 GB/s in the same session (`nam-bench gas --sweep
/// --min-size 1MiB --max-size 16MiB --op get,put --transport tcp`). Larger segments did more
/// still, but each connection's receive buffer grows with them.
pub const OVERRIDDEN_DEFAULTS: [(&str, &std::ffi::CStr, &std::ffi::CStr); 3] = [
    ("UCX_TCP_PUT_ENABLE", c"TCP_PUT_ENABLE", c"n"),
    ("UCX_TCP_CM_REUSEADDR", c"TCP_CM_REUSEADDR", c"y"),
    ("UCX_TCP_TX_SEG_SIZE", c"TCP_TX_SEG_SIZE", c"64K"),
];

/// Worker progress calls between two looks at the clock and the watched endpoint while a
/// request is waited for: 64, so a blocking wait reads the time rarely against the progress
/// calls that do the work, yet still notices a dead peer or a passed deadline soon after.
pub const WATCH_EVERY_SPINS: u32 = 64;

// The watch interval is a power of two, so the check is a mask.
const _: () = assert!(WATCH_EVERY_SPINS.is_power_of_two());
