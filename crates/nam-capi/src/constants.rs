//! Every limit and tuning value of nam-capi, in one place (the model is TigerBeetle's
//! `constants.zig`). The `NAM_*` values of the C API (`alloc.rs`, `ckpt.rs`, `status.rs`) are
//! its definitions, exported to `nam.h`, not tuning, and stay beside the calls that take them.
//! These items are `pub(crate)` so that cbindgen does not export them to the header.

/// Longest last-error text kept, in bytes (longer texts are cut at a character boundary):
/// with its NUL it fills a 1 KiB buffer per thread, kept for the life of the thread.
pub(crate) const LAST_ERROR_LEN_MAX: usize = 1023;
