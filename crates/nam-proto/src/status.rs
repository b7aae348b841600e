//! The status vocabulary shared by the server, the client library and the C API.

/// Outcome of a request, carried in every reply. `Ok` is 0; errors are positive on the wire
/// and negative (`-code`) in the C API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// An argument is out of range (zero size, bad alignment, bad flags).
    InvalidArgument = 1,
    /// The handle was never issued by this server.
    UnknownHandle = 2,
    /// The handle was issued but has been freed (or its lease reclaimed).
    FreedHandle = 3,
    /// Offset and length fall outside the allocation.
    OutOfBounds = 4,
    /// The pool has no free range large enough.
    PoolExhausted = 5,
    /// The tenant's quota would be exceeded.
    QuotaExceeded = 6,
    /// The tenant is unknown or its token is wrong.
    AuthFailed = 7,
    /// No allocation with that name exists for this tenant.
    NameNotFound = 8,
    /// An allocation with that name already exists for this tenant.
    NameExists = 9,
    /// The allocation is exclusive and cannot be opened by another client.
    NotShared = 10,
    /// The control message could not be decoded.
    Malformed = 11,
    /// The peer speaks another protocol version.
    VersionMismatch = 12,
    /// A size exceeds a protocol limit.
    TooLarge = 13,
    /// The server refuses more clients or handles.
    TooMany = 14,
    /// The client sent a request before `Hello`.
    NotConnected = 15,
    /// The server failed internally; the message says why.
    Internal = 16,
    /// A checkpoint epoch or restore missed its deadline (a rank never flagged ready).
    CkptTimeout = 17,
    /// The engine could not read a rank's checkpoint buffer (the rank died or left).
    CkptRankFailed = 18,
    /// The data cannot be rebuilt: more than one rank of the group is lost, or no epoch is complete.
    CkptUnrecoverable = 19,
    /// Stored parity or a rank's buffer fails its checksum.
    CkptCorrupted = 20,
    /// The group is busy with another epoch or restore, or the epoch is out of order.
    CkptBusy = 21,
    /// A global address names a protection domain the caller does not belong to, or an
    /// allocation of another domain.
    DomainMismatch = 24,
    /// A mailbox is full; retry after its owner consumed messages (nothing was written).
    MailboxFull = 25,
    /// The ranks of one allreduce round disagree on length, type or operation.
    ReduceMismatch = 26,
    /// An allreduce round cannot complete: a rank of the group left or died.
    ReduceAborted = 27,
    /// A global address names another server.
    WrongServer = 28,
}

impl Status {
    /// All statuses, in code order.
    pub const ALL: [Status; 27] = [
        Status::Ok,
        Status::InvalidArgument,
        Status::UnknownHandle,
        Status::FreedHandle,
        Status::OutOfBounds,
        Status::PoolExhausted,
        Status::QuotaExceeded,
        Status::AuthFailed,
        Status::NameNotFound,
        Status::NameExists,
        Status::NotShared,
        Status::Malformed,
        Status::VersionMismatch,
        Status::TooLarge,
        Status::TooMany,
        Status::NotConnected,
        Status::Internal,
        Status::CkptTimeout,
        Status::CkptRankFailed,
        Status::CkptUnrecoverable,
        Status::CkptCorrupted,
        Status::CkptBusy,
        Status::DomainMismatch,
        Status::MailboxFull,
        Status::ReduceMismatch,
        Status::ReduceAborted,
        Status::WrongServer,
    ];

    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Decodes a wire code.
    pub fn from_code(code: u16) -> Option<Status> {
        // Codes have gaps (ranges are reserved per feature), so search rather than index.
        Status::ALL.iter().copied().find(|s| s.code() == code)
    }

    /// A short description.
    pub fn describe(self) -> &'static str {
        match self {
            Status::Ok => "success",
            Status::InvalidArgument => "invalid argument",
            Status::UnknownHandle => "unknown handle",
            Status::FreedHandle => "handle already freed",
            Status::OutOfBounds => "offset or length out of bounds",
            Status::PoolExhausted => "memory pool exhausted",
            Status::QuotaExceeded => "tenant quota exceeded",
            Status::AuthFailed => "tenant authentication failed",
            Status::NameNotFound => "no allocation with that name",
            Status::NameExists => "an allocation with that name exists",
            Status::NotShared => "allocation is exclusive",
            Status::Malformed => "malformed control message",
            Status::VersionMismatch => "protocol version mismatch",
            Status::TooLarge => "size exceeds a protocol limit",
            Status::TooMany => "too many clients or handles",
            Status::NotConnected => "no Hello before the request",
            Status::Internal => "internal server error",
            Status::CkptTimeout => "checkpoint deadline passed",
            Status::CkptRankFailed => "checkpoint rank failed",
            Status::CkptUnrecoverable => "checkpoint unrecoverable",
            Status::CkptCorrupted => "checkpoint data corrupted",
            Status::CkptBusy => "checkpoint group busy",
            Status::DomainMismatch => "protection domain mismatch",
            Status::MailboxFull => "mailbox full, retry later",
            Status::ReduceMismatch => "allreduce ranks disagree on length, type or operation",
            Status::ReduceAborted => "allreduce aborted: a rank left or died",
            Status::WrongServer => "global address names another server",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}
