//! The one status vocabulary of the C API, and the thread-local text of the last error.

use crate::constants::LAST_ERROR_LEN_MAX;
use nam_client::{Error, Status};
use std::cell::RefCell;
use std::ffi::c_char;

/// Outcome of a call. `NAM_OK` is 0, `NAM_IN_PROGRESS` (a non-blocking operation is still in
/// flight) is positive, every error is negative. Each error of the client library and each
/// refusal of a memory server has exactly one code; `nam_status_string` names it and
/// `nam_last_error_message` gives the exact cause of the last failure on this thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum nam_status_t {
    /// Success.
    NAM_OK = 0,
    /// A non-blocking operation has not completed yet (not an error).
    NAM_IN_PROGRESS = 1,
    /// An argument is invalid: a NULL pointer, a bad flag or enum value, a name that is not
    /// UTF-8 or too long, a zero size, allocations of different clients or servers.
    NAM_ERR_INVALID_ARGUMENT = -1,
    /// Offset and length fall outside the allocation; nothing was transferred.
    NAM_ERR_OUT_OF_BOUNDS = -2,
    /// The offset of an atomic or signal word is not 8-byte aligned.
    NAM_ERR_MISALIGNED = -3,
    /// The allocation was already freed (double free, or use after free).
    NAM_ERR_FREED = -4,
    /// The server never issued this handle to this client.
    NAM_ERR_UNKNOWN_HANDLE = -5,
    /// The server's pool has no free range large enough.
    NAM_ERR_POOL_EXHAUSTED = -6,
    /// The tenant's quota would be exceeded.
    NAM_ERR_QUOTA_EXCEEDED = -7,
    /// A size exceeds a protocol limit.
    NAM_ERR_TOO_LARGE = -8,
    /// The server refuses more clients or handles.
    NAM_ERR_TOO_MANY = -9,
    /// No allocation of this tenant has that name.
    NAM_ERR_NAME_NOT_FOUND = -10,
    /// An allocation of this tenant already has that name.
    NAM_ERR_NAME_EXISTS = -11,
    /// The allocation is exclusive to its creator and cannot be opened.
    NAM_ERR_NOT_SHARED = -12,
    /// The tenant is unknown or its token is wrong.
    NAM_ERR_AUTH = -13,
    /// No memory server is configured (`NAM_SERVERS` unset or empty).
    NAM_ERR_NO_SERVERS = -14,
    /// The configuration is invalid (a server that is not host:port, a bad number).
    NAM_ERR_CONFIG = -15,
    /// A memory server could not be reached.
    NAM_ERR_CONNECT = -16,
    /// A memory server did not answer a control request before the deadline.
    NAM_ERR_TIMEOUT = -17,
    /// `nam_wait_until`: the condition did not hold before the deadline.
    NAM_ERR_WAIT_TIMEOUT = -18,
    /// A one-sided operation failed in the transport (the server died, a deadline passed).
    NAM_ERR_TRANSPORT = -19,
    /// The server sent a reply that does not decode.
    NAM_ERR_PROTOCOL = -20,
    /// The server answered with a reply of the wrong kind.
    NAM_ERR_UNEXPECTED_REPLY = -21,
    /// The server could not decode a request of this client.
    NAM_ERR_MALFORMED = -22,
    /// The server speaks another protocol version.
    NAM_ERR_VERSION_MISMATCH = -23,
    /// The server got a request before the client introduced itself.
    NAM_ERR_NOT_CONNECTED = -24,
    /// The server failed internally.
    NAM_ERR_SERVER_INTERNAL = -25,
    /// libnam failed internally (a bug: a panic caught at the API boundary).
    NAM_ERR_INTERNAL = -26,
    /// A checkpoint epoch or restore missed its deadline (a rank never flagged ready).
    NAM_ERR_CKPT_TIMEOUT = -27,
    /// The memory server could not read a rank's checkpoint buffer (the rank died or left).
    NAM_ERR_CKPT_RANK_FAILED = -28,
    /// The checkpoint cannot be rebuilt: more than one rank of the group lost, or no
    /// complete epoch.
    NAM_ERR_CKPT_UNRECOVERABLE = -29,
    /// Stored parity or a rank's buffer fails its checksum; no data was returned.
    NAM_ERR_CKPT_CORRUPTED = -30,
    /// The checkpoint group is busy with another epoch or restore, or the epoch is out of
    /// order, or the buffer is still being pulled.
    NAM_ERR_CKPT_BUSY = -31,
    /// Checkpoint library: a configuration key that does not exist.
    NAM_ERR_CKPT_UNKNOWN_KEY = -32,
    /// Checkpoint library: a checkpoint directory is missing or cannot be written.
    NAM_ERR_CKPT_DIRECTORY = -33,
    /// Checkpoint library: one checkpoint of a rank exceeds the RAM level's per-rank share.
    NAM_ERR_CKPT_RAM_TOO_SMALL = -34,
    /// Checkpoint library: a region overlaps another, is NULL, or its id is already protected.
    NAM_ERR_CKPT_REGION = -35,
    /// Checkpoint library: a region id that is not protected.
    NAM_ERR_CKPT_UNKNOWN_REGION = -36,
    /// Checkpoint library: no restartable checkpoint exists on any level.
    NAM_ERR_CKPT_NO_CHECKPOINT = -37,
    /// Checkpoint library: the checkpoint was written by a job of another size.
    NAM_ERR_CKPT_RANK_COUNT = -38,
    /// Checkpoint library: the redundancy scheme cannot work with this job's node layout.
    NAM_ERR_CKPT_LAYOUT = -39,
    /// Checkpoint library: a stored region's size differs from the protected region's.
    NAM_ERR_CKPT_SIZE_MISMATCH = -40,
    /// Checkpoint library: the asynchronous flush to the parallel file system failed.
    NAM_ERR_CKPT_FLUSH = -41,
    /// Checkpoint library: a checkpoint file operation failed.
    NAM_ERR_CKPT_IO = -42,
    /// Checkpoint library: the checkpoint library was used in the wrong order.
    NAM_ERR_CKPT_STATE = -43,
    /// Far memory: the local-memory budget is smaller than one set of lines (or one page).
    NAM_ERR_BUDGET_TOO_SMALL = -44,
    /// Far memory: a span access is not aligned to the span size.
    NAM_ERR_UNALIGNED = -45,
    /// Far memory: this process may not use userfaultfd (paged regions are unavailable).
    NAM_ERR_USERFAULTFD_DENIED = -46,
    /// Far memory: a system call of the pager failed (mmap, ioctl, madvise).
    NAM_ERR_SYSTEM = -47,
    /// A global address names another protection domain than the caller's tenant, or an
    /// allocation of another domain; nothing was touched.
    NAM_ERR_DOMAIN = -48,
    /// A mailbox is full: retry after its owner received (nothing was written).
    NAM_ERR_MAILBOX_FULL = -49,
    /// The ranks of one allreduce disagree on length, type or operation (every rank gets
    /// this; no result is written).
    NAM_ERR_REDUCE_MISMATCH = -50,
    /// An allreduce cannot complete: a rank of the group left or died.
    NAM_ERR_REDUCE_ABORTED = -51,
    /// A global address names a server this client is not connected to (or another
    /// server than the one asked).
    NAM_ERR_WRONG_SERVER = -52,
    /// Far memory: a region on huge pages needs more huge pages than are reserved and free
    /// (`vm.nr_hugepages`), or the kernel has none.
    NAM_ERR_HUGE_PAGES_UNAVAILABLE = -53,
}

use nam_status_t::*;

impl nam_status_t {
    /// Every code, in declaration order.
    pub const fn all() -> [nam_status_t; 55] {
        [
            NAM_OK,
            NAM_IN_PROGRESS,
            NAM_ERR_INVALID_ARGUMENT,
            NAM_ERR_OUT_OF_BOUNDS,
            NAM_ERR_MISALIGNED,
            NAM_ERR_FREED,
            NAM_ERR_UNKNOWN_HANDLE,
            NAM_ERR_POOL_EXHAUSTED,
            NAM_ERR_QUOTA_EXCEEDED,
            NAM_ERR_TOO_LARGE,
            NAM_ERR_TOO_MANY,
            NAM_ERR_NAME_NOT_FOUND,
            NAM_ERR_NAME_EXISTS,
            NAM_ERR_NOT_SHARED,
            NAM_ERR_AUTH,
            NAM_ERR_NO_SERVERS,
            NAM_ERR_CONFIG,
            NAM_ERR_CONNECT,
            NAM_ERR_TIMEOUT,
            NAM_ERR_WAIT_TIMEOUT,
            NAM_ERR_TRANSPORT,
            NAM_ERR_PROTOCOL,
            NAM_ERR_UNEXPECTED_REPLY,
            NAM_ERR_MALFORMED,
            NAM_ERR_VERSION_MISMATCH,
            NAM_ERR_NOT_CONNECTED,
            NAM_ERR_SERVER_INTERNAL,
            NAM_ERR_INTERNAL,
            NAM_ERR_CKPT_TIMEOUT,
            NAM_ERR_CKPT_RANK_FAILED,
            NAM_ERR_CKPT_UNRECOVERABLE,
            NAM_ERR_CKPT_CORRUPTED,
            NAM_ERR_CKPT_BUSY,
            NAM_ERR_CKPT_UNKNOWN_KEY,
            NAM_ERR_CKPT_DIRECTORY,
            NAM_ERR_CKPT_RAM_TOO_SMALL,
            NAM_ERR_CKPT_REGION,
            NAM_ERR_CKPT_UNKNOWN_REGION,
            NAM_ERR_CKPT_NO_CHECKPOINT,
            NAM_ERR_CKPT_RANK_COUNT,
            NAM_ERR_CKPT_LAYOUT,
            NAM_ERR_CKPT_SIZE_MISMATCH,
            NAM_ERR_CKPT_FLUSH,
            NAM_ERR_CKPT_IO,
            NAM_ERR_CKPT_STATE,
            NAM_ERR_BUDGET_TOO_SMALL,
            NAM_ERR_UNALIGNED,
            NAM_ERR_USERFAULTFD_DENIED,
            NAM_ERR_SYSTEM,
            NAM_ERR_DOMAIN,
            NAM_ERR_MAILBOX_FULL,
            NAM_ERR_REDUCE_MISMATCH,
            NAM_ERR_REDUCE_ABORTED,
            NAM_ERR_WRONG_SERVER,
            NAM_ERR_HUGE_PAGES_UNAVAILABLE,
        ]
    }

    /// The code of an `int` from C, if it is one.
    pub fn from_code(code: i32) -> Option<nam_status_t> {
        Self::all().into_iter().find(|s| *s as i32 == code)
    }

    /// The NUL-terminated description returned by `nam_status_string`.
    pub fn describe(self) -> &'static str {
        match self {
            NAM_OK => "success\0",
            NAM_IN_PROGRESS => "operation in progress\0",
            NAM_ERR_INVALID_ARGUMENT => "invalid argument\0",
            NAM_ERR_OUT_OF_BOUNDS => "offset or length out of bounds\0",
            NAM_ERR_MISALIGNED => "atomic word not 8-byte aligned\0",
            NAM_ERR_FREED => "allocation already freed\0",
            NAM_ERR_UNKNOWN_HANDLE => "unknown allocation handle\0",
            NAM_ERR_POOL_EXHAUSTED => "memory pool exhausted\0",
            NAM_ERR_QUOTA_EXCEEDED => "tenant quota exceeded\0",
            NAM_ERR_TOO_LARGE => "size exceeds a protocol limit\0",
            NAM_ERR_TOO_MANY => "too many clients or handles\0",
            NAM_ERR_NAME_NOT_FOUND => "no allocation with that name\0",
            NAM_ERR_NAME_EXISTS => "an allocation with that name exists\0",
            NAM_ERR_NOT_SHARED => "allocation is exclusive\0",
            NAM_ERR_AUTH => "tenant authentication failed\0",
            NAM_ERR_NO_SERVERS => "no memory server configured\0",
            NAM_ERR_CONFIG => "invalid configuration\0",
            NAM_ERR_CONNECT => "cannot connect to memory server\0",
            NAM_ERR_TIMEOUT => "memory server did not answer in time\0",
            NAM_ERR_WAIT_TIMEOUT => "wait condition not met in time\0",
            NAM_ERR_TRANSPORT => "transport error\0",
            NAM_ERR_PROTOCOL => "malformed reply from memory server\0",
            NAM_ERR_UNEXPECTED_REPLY => "unexpected reply from memory server\0",
            NAM_ERR_MALFORMED => "memory server could not decode the request\0",
            NAM_ERR_VERSION_MISMATCH => "protocol version mismatch\0",
            NAM_ERR_NOT_CONNECTED => "request before hello\0",
            NAM_ERR_SERVER_INTERNAL => "internal memory server error\0",
            NAM_ERR_INTERNAL => "internal libnam error\0",
            NAM_ERR_CKPT_TIMEOUT => "checkpoint deadline passed\0",
            NAM_ERR_CKPT_RANK_FAILED => "checkpoint rank failed\0",
            NAM_ERR_CKPT_UNRECOVERABLE => "checkpoint unrecoverable\0",
            NAM_ERR_CKPT_CORRUPTED => "checkpoint data corrupted\0",
            NAM_ERR_CKPT_BUSY => "checkpoint group busy\0",
            NAM_ERR_CKPT_UNKNOWN_KEY => "checkpoint: unknown configuration key\0",
            NAM_ERR_CKPT_DIRECTORY => "checkpoint: directory not usable\0",
            NAM_ERR_CKPT_RAM_TOO_SMALL => "checkpoint: RAM level too small\0",
            NAM_ERR_CKPT_REGION => "checkpoint: invalid region\0",
            NAM_ERR_CKPT_UNKNOWN_REGION => "checkpoint: region not protected\0",
            NAM_ERR_CKPT_NO_CHECKPOINT => "checkpoint: nothing to restart\0",
            NAM_ERR_CKPT_RANK_COUNT => "checkpoint: different rank count\0",
            NAM_ERR_CKPT_LAYOUT => "checkpoint: job layout unsuited to scheme\0",
            NAM_ERR_CKPT_SIZE_MISMATCH => "checkpoint: region size mismatch\0",
            NAM_ERR_CKPT_FLUSH => "checkpoint: flush failed\0",
            NAM_ERR_CKPT_IO => "checkpoint: file I/O error\0",
            NAM_ERR_CKPT_STATE => "checkpoint: invalid use\0",
            NAM_ERR_BUDGET_TOO_SMALL => "local-memory budget too small\0",
            NAM_ERR_UNALIGNED => "far-memory span not aligned\0",
            NAM_ERR_USERFAULTFD_DENIED => "userfaultfd not permitted\0",
            NAM_ERR_SYSTEM => "system call failed\0",
            NAM_ERR_DOMAIN => "protection domain mismatch\0",
            NAM_ERR_MAILBOX_FULL => "mailbox full, retry later\0",
            NAM_ERR_REDUCE_MISMATCH => "allreduce ranks disagree on length, type or operation\0",
            NAM_ERR_REDUCE_ABORTED => "allreduce aborted: a rank left or died\0",
            NAM_ERR_WRONG_SERVER => "global address names another server\0",
            NAM_ERR_HUGE_PAGES_UNAVAILABLE => "not enough free huge pages\0",
        }
    }
}

/// The code of a refusal by a memory server. `Status::Ok` is success and maps to `NAM_OK`.
pub fn status_of_refusal(status: Status) -> nam_status_t {
    match status {
        Status::Ok => NAM_OK,
        Status::InvalidArgument => NAM_ERR_INVALID_ARGUMENT,
        Status::UnknownHandle => NAM_ERR_UNKNOWN_HANDLE,
        Status::FreedHandle => NAM_ERR_FREED,
        Status::OutOfBounds => NAM_ERR_OUT_OF_BOUNDS,
        Status::PoolExhausted => NAM_ERR_POOL_EXHAUSTED,
        Status::QuotaExceeded => NAM_ERR_QUOTA_EXCEEDED,
        Status::AuthFailed => NAM_ERR_AUTH,
        Status::NameNotFound => NAM_ERR_NAME_NOT_FOUND,
        Status::NameExists => NAM_ERR_NAME_EXISTS,
        Status::NotShared => NAM_ERR_NOT_SHARED,
        Status::Malformed => NAM_ERR_MALFORMED,
        Status::VersionMismatch => NAM_ERR_VERSION_MISMATCH,
        Status::TooLarge => NAM_ERR_TOO_LARGE,
        Status::TooMany => NAM_ERR_TOO_MANY,
        Status::NotConnected => NAM_ERR_NOT_CONNECTED,
        Status::Internal => NAM_ERR_SERVER_INTERNAL,
        Status::CkptTimeout => NAM_ERR_CKPT_TIMEOUT,
        Status::CkptRankFailed => NAM_ERR_CKPT_RANK_FAILED,
        Status::CkptUnrecoverable => NAM_ERR_CKPT_UNRECOVERABLE,
        Status::CkptCorrupted => NAM_ERR_CKPT_CORRUPTED,
        Status::CkptBusy => NAM_ERR_CKPT_BUSY,
        Status::DomainMismatch => NAM_ERR_DOMAIN,
        Status::MailboxFull => NAM_ERR_MAILBOX_FULL,
        Status::ReduceMismatch => NAM_ERR_REDUCE_MISMATCH,
        Status::ReduceAborted => NAM_ERR_REDUCE_ABORTED,
        Status::WrongServer => NAM_ERR_WRONG_SERVER,
    }
}

/// The code of an error of the client library. The match has no wildcard, so a new variant
/// does not compile until it has a code. A refusal carrying `Status::Ok` (never sent by a
/// correct server) is an unexpected reply.
pub fn status_of_error(error: &Error) -> nam_status_t {
    match error {
        Error::NoServers => NAM_ERR_NO_SERVERS,
        Error::Config(_) => NAM_ERR_CONFIG,
        Error::Connect { .. } => NAM_ERR_CONNECT,
        Error::Timeout { .. } => NAM_ERR_TIMEOUT,
        Error::Refused { status: Status::Ok, .. } => NAM_ERR_UNEXPECTED_REPLY,
        Error::Refused { status, .. } => status_of_refusal(*status),
        Error::Transport { .. } => NAM_ERR_TRANSPORT,
        Error::Protocol { .. } => NAM_ERR_PROTOCOL,
        Error::UnexpectedReply { .. } => NAM_ERR_UNEXPECTED_REPLY,
        Error::OutOfBounds { .. } => NAM_ERR_OUT_OF_BOUNDS,
        Error::Freed { .. } => NAM_ERR_FREED,
        Error::Misaligned { .. } => NAM_ERR_MISALIGNED,
        Error::InvalidArgument(_) => NAM_ERR_INVALID_ARGUMENT,
        Error::WaitTimeout { .. } => NAM_ERR_WAIT_TIMEOUT,
        Error::UnknownServer { .. } => NAM_ERR_WRONG_SERVER,
        Error::MailboxFull { .. } => NAM_ERR_MAILBOX_FULL,
    }
}

/// The code of an error of the far-memory library. A failed server gives the code of the
/// client library's error underneath; no wildcard, so a new variant needs a code.
pub fn status_of_far_error(error: &nam_farmem::Error) -> nam_status_t {
    use nam_farmem::Error as E;
    match error {
        E::Config(_) => NAM_ERR_CONFIG,
        E::BudgetTooSmall { .. } => NAM_ERR_BUDGET_TOO_SMALL,
        E::OutOfRange { .. } => NAM_ERR_OUT_OF_BOUNDS,
        // NotViewable: the in-place views (not in the C API) need aligned whole elements.
        E::Unaligned { .. } | E::NotViewable { .. } => NAM_ERR_UNALIGNED,
        E::Server { source, .. } | E::OutOfCapacity { source, .. } => status_of_error(source),
        E::UserfaultfdNotPermitted { .. } => NAM_ERR_USERFAULTFD_DENIED,
        E::System { .. } => NAM_ERR_SYSTEM,
        E::HugePagesUnavailable { .. } => NAM_ERR_HUGE_PAGES_UNAVAILABLE,
    }
}

/// Type of the `status` argument of `nam_status_string`: an `int` in Rust, so that any
/// value C passes is defined behaviour, shown as `nam_status_t` in nam.h (see cbindgen.toml).
pub type NamStatusArg = i32;

/// A static, NUL-terminated description of `status` (for example "offset or length out of
/// bounds" for `NAM_ERR_OUT_OF_BOUNDS`), or "unknown status" for a value that is no code.
/// Never NULL; the string must not be freed. Thread-safe; completes immediately.
#[no_mangle]
pub extern "C" fn nam_status_string(status: NamStatusArg) -> *const c_char {
    let text = nam_status_t::from_code(status).map_or("unknown status\0", nam_status_t::describe);
    text.as_ptr().cast()
}

thread_local! {
    /// One fixed buffer per thread, so a pointer from `nam_last_error_message` never dangles:
    /// a later failure overwrites the text in place.
    static LAST_ERROR: RefCell<Box<[u8; LAST_ERROR_LEN_MAX + 1]>> = RefCell::new(initial_last_error());
}

fn initial_last_error() -> Box<[u8; LAST_ERROR_LEN_MAX + 1]> {
    let mut buffer = Box::new([0u8; LAST_ERROR_LEN_MAX + 1]);
    buffer[..8].copy_from_slice(b"no error");
    buffer
}

/// Records `message` as this thread's last error.
pub(crate) fn set_last_error(message: String) {
    let message = message.replace('\0', " ");
    let mut len = message.len().min(LAST_ERROR_LEN_MAX);
    while !message.is_char_boundary(len) {
        len -= 1;
    }
    LAST_ERROR.with(|last| {
        let mut buffer = last.borrow_mut();
        buffer[..len].copy_from_slice(&message.as_bytes()[..len]);
        buffer[len] = 0;
    });
}

/// The text of the last error on the calling thread, naming the call and its exact cause
/// (for example "nam_put_sync: offset 4092 + length 8 is outside the 4096-byte
/// allocation"), or "no error". Successful calls do not clear it (like `errno`). Never NULL;
/// the string belongs to libnam. The pointer stays valid as long as the thread lives; its
/// text is replaced by the next failing nam call on this thread (at most 1023 bytes).
/// Completes immediately.
#[no_mangle]
pub extern "C" fn nam_last_error_message() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr().cast())
}
