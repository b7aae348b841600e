//! Every byte that crosses a nam process boundary.
//!
//! - [`message`]: control messages ([`Request`], [`Reply`]) carried in UCX active messages
//!   ([`AM_ID_REQUEST`], [`AM_ID_REPLY`]); `docs/protocol.md` gives their byte layout.
//! - [`limits`]: every bound and default, as a named constant, checked where input arrives.
//! - [`Status`]: the status vocabulary shared by server, client library and C API.
//! - [`size`]: human sizes (`64MiB`) for the command line and config files.
//! - [`GlobalAddress`] ([`address`]): the 128-bit (server, protection domain, allocation,
//!   offset) form; [`gas`]: its control messages and the allreduce engine's; [`mailbox`]:
//!   the byte layout of mailboxes in server memory; [`reduce`]: reduction ops and types;
//!   [`watch`]: the comparisons of a wait the server answers when a word changes.
//!
//! Decoding never panics: malformed, truncated or oversized input gives a [`DecodeError`].
//!
//! ```
//! use nam_proto::{Request, Alloc};
//! let bytes = Request::Alloc(Alloc { size: 4096, align: 0, flags: 0, name: String::new() }).encode(7);
//! let (id, request) = Request::decode(&bytes).unwrap();
//! assert_eq!(id, 7);
//! assert!(matches!(request, Request::Alloc(a) if a.size == 4096));
//! assert!(Request::decode(&bytes[..10]).is_err());
//! ```
#![deny(missing_docs)]

#[cfg(test)]
mod put_tests {
    use super::*;

    #[test]
    fn the_borrowing_put_codec_matches_the_request_codec() {
        let data = vec![7u8; 1000];
        let bytes = encode_put(9, 3, 64, &data);
        assert_eq!(bytes, Request::Put { handle: 3, offset: 64, data: data.clone() }.encode(9));
        let view = decode_put(&bytes).unwrap().unwrap();
        assert_eq!((view.request_id, view.handle, view.offset, view.data), (9, 3, 64, &data[..]));
        assert_eq!(decode_put(&Request::Status.encode(1)).unwrap(), None);
        assert!(decode_put(&bytes[..bytes.len() - 1]).is_err());
    }
}

pub mod address;
pub mod checksum;
pub mod ckpt;
pub mod codec;
pub mod gas;
pub mod limits;
pub mod mailbox;
pub mod message;
pub mod reduce;
pub mod size;
mod status;
pub mod watch;

pub use address::GlobalAddress;
pub use message::*;
pub use status::Status;

/// Why bytes could not be decoded as a nam message. Each variant names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message ended inside `field`.
    #[error("message truncated in field `{field}`: need {need} bytes, have {have}")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// The first four bytes are not the nam magic.
    #[error("bad magic 0x{found:08x}: not a nam message")]
    BadMagic {
        /// What was found.
        found: u32,
    },
    /// The peer speaks another protocol version.
    #[error("protocol version {found}, this build speaks {expected}")]
    Version {
        /// The peer's version.
        found: u16,
        /// Ours.
        expected: u16,
    },
    /// Unknown message kind.
    #[error("unknown message kind {kind}")]
    UnknownKind {
        /// The kind code.
        kind: u16,
    },
    /// Unknown status code in a reply.
    #[error("unknown status code {code}")]
    UnknownStatus {
        /// The code.
        code: u16,
    },
    /// A variable-length field exceeds its limit.
    #[error("field `{field}` is {len} long, the limit is {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its declared length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A string field is not UTF-8.
    #[error("field `{field}` is not valid UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },
    /// The header's body length disagrees with the bytes received.
    #[error("header declares a {declared}-byte body but {actual} bytes follow")]
    LengthMismatch {
        /// Declared length.
        declared: usize,
        /// Actual length.
        actual: usize,
    },
    /// The header's reserved field is not zero.
    #[error("reserved header field is 0x{found:08x}, must be 0")]
    Reserved {
        /// What was found.
        found: u32,
    },
    /// Bytes left over after the last field.
    #[error("{extra} unexpected bytes after the last field")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// A total is smaller than the entries the same message lists, so one of them lies.
    #[error("field `{field}` says {total}, but the message lists {listed}")]
    TotalBelowListed {
        /// The total field.
        field: &'static str,
        /// Its value.
        total: u64,
        /// Entries listed.
        listed: u64,
    },
}
