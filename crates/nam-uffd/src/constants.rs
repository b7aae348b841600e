//! Every limit and tuning value of nam-uffd, in one place (the model is TigerBeetle's
//! `constants.zig`). The ioctl numbers, flags and struct layouts in `lib.rs` are the kernel's
//! ABI, not choices, and stay beside the calls that use them.

/// Tries of one [`crate::move_pages`] before it gives up on a range that keeps changing.
pub const MOVE_ATTEMPTS: usize = 16;

/// Fault messages one `read(2)` of [`crate::read_faults`] takes: 32 messages of 32 bytes, so a
/// burst of faults from many threads costs one 1 KiB read, not one system call each.
pub const FAULT_BATCH: usize = 32;

/// Page ranges one `PAGEMAP_SCAN` of [`crate::pagemap_scan`] returns at most (24 bytes each,
/// 6 KiB on the stack): a scan of a sparse range continues where the last one stopped.
pub const SCAN_RANGES: usize = 256;

// Each batch takes at least one entry.
const _: () = assert!(FAULT_BATCH >= 1 && SCAN_RANGES >= 1 && MOVE_ATTEMPTS >= 1);
