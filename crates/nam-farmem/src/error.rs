//! Typed errors of the far-memory library.

use std::net::SocketAddr;

/// Why a far-memory operation failed. Every variant names the cause; a failed operation
/// leaves far memory and the cache as they were (dirty data stays in the cache).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of its range.
    #[error("invalid far-memory configuration: {0}")]
    Config(String),
    /// The local-memory budget cannot hold one cache set (or one page for the pager).
    #[error("local-memory budget of {budget_bytes} bytes is smaller than one {unit_bytes}-byte set of lines")]
    BudgetTooSmall {
        /// The budget asked for.
        budget_bytes: u64,
        /// The smallest budget that works.
        unit_bytes: u64,
    },
    /// A far address range falls outside the far address space.
    #[error("far address range {addr:#x} + {len} is outside the {size}-byte far address space")]
    OutOfRange {
        /// First far address.
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Size of the far address space.
        size: u64,
    },
    /// A span operation was not aligned to the span size.
    #[error("span access at {addr:#x} of {len} bytes is not aligned to the {span_bytes}-byte span size")]
    Unaligned {
        /// Address asked for.
        addr: u64,
        /// Length asked for.
        len: u64,
        /// The span size.
        span_bytes: u64,
    },
    /// A typed view in place needs whole, aligned elements inside each cache line.
    #[error("far array of {elem_bytes}-byte elements at {addr:#x} cannot be viewed in place: the element size must divide the {line_bytes}-byte line and the address be a multiple of it")]
    NotViewable {
        /// Far address of the array.
        addr: u64,
        /// Size of one element.
        elem_bytes: usize,
        /// The cache's line size.
        line_bytes: u64,
    },
    /// A memory server failed (died, timed out, or refused) while serving an extent.
    #[error("memory server {server} ({addr}) failed during {what}: {source}")]
    Server {
        /// Index of the server in the client's list.
        server: usize,
        /// Its address.
        addr: SocketAddr,
        /// The operation.
        what: &'static str,
        /// The client library's error (boxed: it is large and errors are rare).
        source: Box<nam_client::Error>,
    },
    /// A memory server has no room for an extent; the dirty data it was meant for stays in
    /// the local cache.
    #[error("memory server {server} ({addr}) is out of capacity for a {bytes}-byte extent chunk; dirty data stays local: {source}")]
    OutOfCapacity {
        /// Index of the server.
        server: usize,
        /// Its address.
        addr: SocketAddr,
        /// Size of the chunk that did not fit.
        bytes: u64,
        /// The server's refusal.
        source: Box<nam_client::Error>,
    },
    /// userfaultfd is not permitted for this process.
    #[error("userfaultfd is not permitted ({reason}); run as root, set vm.unprivileged_userfaultfd=1, grant CAP_SYS_PTRACE, or give read-write access to /dev/userfaultfd")]
    UserfaultfdNotPermitted {
        /// The kernel's answer.
        reason: String,
    },
    /// A region on huge pages needs more huge pages than are reserved and free.
    #[error("the region's budget needs {needed} huge pages of {page_bytes} bytes but {free} are free (none at all when the page size is 0: the kernel has no huge pages); reserve more as root with `sysctl vm.nr_hugepages=N`, or use 4 KiB pages")]
    HugePagesUnavailable {
        /// Huge pages the budget needs.
        needed: u64,
        /// Huge pages free when the region was made.
        free: u64,
        /// The huge page size (0: the kernel has none).
        page_bytes: u64,
    },
    /// A system call of the pager failed.
    #[error("{what} failed: {source}")]
    System {
        /// The call.
        what: &'static str,
        /// The OS error.
        source: std::sync::Arc<std::io::Error>,
    },
}

impl Error {
    /// The last OS error for `what`.
    pub(crate) fn last_os(what: &'static str) -> Error {
        Error::System { what, source: std::sync::Arc::new(std::io::Error::last_os_error()) }
    }
}

/// Result of a far-memory operation.
pub type Result<T> = std::result::Result<T, Error>;
