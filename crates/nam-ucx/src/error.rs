//! The one error vocabulary of the transport layer.

use crate::ffi;
use std::ffi::CStr;

/// A failed transport operation. Every variant names the operation that failed and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// UCX returned an error status for `op`.
    #[error("UCX {op} failed: {message} (status {status})")]
    Ucx {
        /// The UCX call or wrapper operation that failed.
        op: &'static str,
        /// The raw `ucs_status_t`.
        status: i8,
        /// UCX's own description of the status.
        message: String,
    },
    /// The operation did not complete before its deadline; the endpoint was closed so that
    /// no buffer stays in use by the transport.
    #[error("{op} did not complete within {timeout_ms} ms; the endpoint was closed")]
    TimedOut {
        /// The operation that timed out.
        op: &'static str,
        /// The deadline that was exceeded, in milliseconds.
        timeout_ms: u64,
    },
    /// The peer of this endpoint failed or disconnected.
    #[error("peer failed: {message} (status {status})")]
    PeerFailed {
        /// The `ucs_status_t` that UCX reported to the error handler.
        status: i8,
        /// UCX's description of it.
        message: String,
    },
    /// The endpoint was closed by this process (after a timeout or explicitly).
    #[error("endpoint is closed")]
    Closed,
    /// A socket address could not be used.
    #[error("invalid socket address: {0}")]
    InvalidAddress(String),
    /// Bytes a peer sent (a packed worker address or remote key) do not have the layout this
    /// UCX packs; they were not handed to UCX.
    #[error("malformed {what} from a peer: {reason}")]
    Malformed {
        /// What the bytes were meant to be.
        what: &'static str,
        /// Which part of the layout is wrong.
        reason: String,
    },
    /// An argument violates the wrapper's contract (for example an unaligned atomic).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The UCX library loaded at run time is not the release nam was built against. The
    /// checks of a peer's packed addresses and keys (`crate::peer`) follow the layouts of
    /// the release built against, so another one is refused rather than trusted.
    #[error(
        "UCX {loaded} is loaded, but nam was built against UCX {built}: rebuild nam, or load the \
         UCX it was built with (scripts/setup.sh installs it in /opt/nam/ucx)"
    )]
    VersionMismatch {
        /// `major.minor` of the headers nam was built with.
        built: String,
        /// `major.minor.release` of the library this process loaded.
        loaded: String,
    },
}

/// Result of a transport operation.
pub type Result<T> = std::result::Result<T, Error>;

/// UCX's text for a status code.
pub(crate) fn status_message(status: ffi::ucs_status_t) -> String {
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::ucs_status_string(status)).to_string_lossy().into_owned() }
}

/// Turns a status into `Ok(())` or an [`Error::Ucx`] naming `op`.
pub(crate) fn check(op: &'static str, status: ffi::ucs_status_t) -> Result<()> {
    if status == ffi::UCS_OK {
        Ok(())
    } else {
        Err(Error::Ucx { op, status, message: status_message(status) })
    }
}

/// Whether a status means the remote side is gone (as opposed to a local misuse).
pub(crate) fn is_peer_failure(status: ffi::ucs_status_t) -> bool {
    status <= ffi::UCS_ERR_FIRST_LINK_FAILURE as ffi::ucs_status_t
        && status >= ffi::UCS_ERR_LAST_ENDPOINT_FAILURE as ffi::ucs_status_t
        || [
            ffi::UCS_ERR_CANCELED,
            ffi::UCS_ERR_UNREACHABLE,
            ffi::UCS_ERR_CONNECTION_RESET,
            ffi::UCS_ERR_NOT_CONNECTED,
            ffi::UCS_ERR_REJECTED,
        ]
        .contains(&status)
}

/// Converts a status of an operation on an endpoint into the right error variant.
pub(crate) fn op_error(op: &'static str, status: ffi::ucs_status_t) -> Error {
    if is_peer_failure(status) {
        Error::PeerFailed { status, message: status_message(status) }
    } else {
        Error::Ucx { op, status, message: status_message(status) }
    }
}
