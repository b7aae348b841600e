//! Typed errors of the client library.

use nam_proto::{DecodeError, Status};
use std::net::SocketAddr;

/// Why a client operation failed. Every variant says what was attempted and why it failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// No server address was configured (`NAM_SERVERS` or [`crate::ClientConfig`]).
    #[error("no memory server configured: set NAM_SERVERS=host:port[,host:port...]")]
    NoServers,
    /// The configuration is invalid.
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The server could not be reached.
    #[error("cannot connect to memory server {addr}: {source}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// The transport's reason.
        source: nam_ucx::Error,
    },
    /// A control request got no answer in time.
    #[error("memory server {addr} did not answer {what} within {timeout_ms} ms")]
    Timeout {
        /// The server.
        addr: SocketAddr,
        /// The request.
        what: &'static str,
        /// The deadline.
        timeout_ms: u64,
    },
    /// The server refused a request.
    #[error("memory server {addr} refused {what}: {message}")]
    Refused {
        /// The server.
        addr: SocketAddr,
        /// The request.
        what: &'static str,
        /// The server's status.
        status: Status,
        /// The server's explanation.
        message: String,
    },
    /// A one-sided operation failed in the transport (peer failure, timeout).
    #[error("{what} on memory server {addr} failed: {source}")]
    Transport {
        /// The server.
        addr: SocketAddr,
        /// The operation.
        what: &'static str,
        /// The transport's error.
        source: nam_ucx::Error,
    },
    /// The server sent bytes that do not decode.
    #[error("memory server {addr} sent a malformed reply: {source}")]
    Protocol {
        /// The server.
        addr: SocketAddr,
        /// The decoder's error.
        source: DecodeError,
    },
    /// The server answered with a reply of the wrong kind.
    #[error("memory server {addr} answered {what} with an unexpected reply")]
    UnexpectedReply {
        /// The server.
        addr: SocketAddr,
        /// The request.
        what: &'static str,
    },
    /// Offset and length fall outside the allocation; nothing was transferred.
    #[error("offset {offset} + length {len} is outside the {size}-byte allocation")]
    OutOfBounds {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// Allocation size.
        size: u64,
    },
    /// The allocation was freed by this client.
    #[error("allocation handle {handle} was freed")]
    Freed {
        /// The handle.
        handle: u64,
    },
    /// An atomic or signal word is not 8-byte aligned.
    #[error("offset {offset} is not 8-byte aligned, as 64-bit atomics need")]
    Misaligned {
        /// The offset.
        offset: u64,
    },
    /// Two allocations that must be on the same server are not.
    #[error("{0}")]
    InvalidArgument(&'static str),
    /// A global address names a server this client is not connected to.
    #[error("the global address names server tag {tag:08x}, which is not among the configured servers")]
    UnknownServer {
        /// The address's server tag.
        tag: u32,
    },
    /// A mailbox has no free slot; nothing was written. Retry after its owner consumed.
    #[error("mailbox full ({slots} slots): retry after the owner receives")]
    MailboxFull {
        /// Slots in the mailbox.
        slots: u32,
    },
    /// `wait_until` reached its deadline before the condition held.
    #[error("signal condition not met within {timeout_ms} ms (last value {last})")]
    WaitTimeout {
        /// The deadline.
        timeout_ms: u64,
        /// The last value read.
        last: u64,
    },
}

impl Error {
    /// The server status this error corresponds to, if the server decided it.
    pub fn server_status(&self) -> Option<Status> {
        match self {
            Error::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Result of a client operation.
pub type Result<T> = std::result::Result<T, Error>;
