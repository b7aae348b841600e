"""Type stubs of the nam package (the native module nam._nam and its Python wrappers)."""

from typing import Literal

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

from . import farmem as farmem

__version__: str

class NamError(Exception):
    """A nam call failed; ``str()`` is the exact cause."""

    status: int
    """The nam.h status code (negative)."""
    status_name: str
    """Its name, e.g. ``'NAM_ERR_FREED'``."""
    description: str
    """Its short meaning, e.g. ``'allocation already freed'``."""

class Allocation:
    """An allocation on a memory server; every use after ``Client.free`` raises ``FreedError``."""

    @property
    def size(self) -> int: """Size in bytes."""
    @property
    def handle(self) -> int: """Handle on its server."""
    @property
    def server(self) -> int: """Index of its server in the client's server list."""
    @property
    def shared(self) -> bool: """Whether other clients of the tenant may open it by name."""
    @property
    def persistent(self) -> bool: """Whether it survives the disconnect of every holder until freed."""
    @property
    def direct(self) -> bool:
        """Whether this process reaches it with plain loads and stores (``Client.map`` works)."""
    def __len__(self) -> int: ...

class Request:
    """A non-blocking put or get in flight; holds its buffer until it completes."""

    def test(self) -> bool:
        """Progresses once; True when completed (raises if it failed)."""
    def wait(self) -> None:
        """Waits for completion (at most the client's timeout); raises if it failed."""
    @property
    def done(self) -> bool: """Whether the operation is known to have completed."""

class Mapped(Buffer):
    """A same-host allocation's bytes mapped in this process, as a writable buffer."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

Compare = Literal["==", "!=", ">=", ">", "<=", "<", "eq", "ne", "ge", "gt", "le", "lt"]
WordType = Literal["u32", "i32", "u64", "i64", "uint32", "int32", "uint64", "int64"]
FetchOp = Literal["fetch_add", "fetch_inc", "fetch", "swap", "compare_swap", "fetch_and", "fetch_or", "fetch_xor"]
AtomicOp = FetchOp | Literal["add", "inc", "set", "and", "or", "xor"]

class Fetch:
    """The previous value of a non-blocking fetching atomic (``Client.atomic_nbi``)."""

    @property
    def done(self) -> bool: """Whether the client's quiet has completed the atomic."""
    @property
    def value(self) -> int:
        """The word's previous value; raises ``InvalidArgumentError`` before the quiet."""

class Group:
    """A named group of ranks at a memory server: barrier and broadcast among its ranks."""

    def __init__(
        self, client: Client, name: str, ranks: int, rank: int, *, chunk_bytes: int = ..., server: int = 0
    ) -> None: ...
    def barrier(self) -> None:
        """Waits until every rank has called it; raises ``WaitTimeoutError`` at the deadline."""
    def broadcast(self, buffer: Buffer, root: int) -> None:
        """Replaces ``buffer``'s bytes on every rank with rank ``root``'s."""
    def close(self) -> None:
        """Leaves the group."""
    @property
    def ranks(self) -> int: """Ranks in the group."""

class Context:
    """An independent stream of operations over a client (``Client.context()``,
    ``shmem_ctx_t``): its ``quiet()`` waits for its own operations only."""

    def put(self, allocation: Allocation, data: Buffer, offset: int = 0) -> None:
        """Puts ``data``; returns when it may be reused, ``quiet()`` completes it remotely."""
    def get(self, allocation: Allocation, out: Buffer, offset: int = 0) -> None:
        """Fills ``out`` with the bytes at ``offset``."""
    def get_bytes(self, allocation: Allocation, size: int, offset: int = 0) -> bytes:
        """The ``size`` bytes at ``offset`` as ``bytes``."""
    def put_nbi(self, allocation: Allocation, data: Buffer, offset: int = 0) -> None:
        """Starts a put without a handle; this context's ``quiet()`` completes it."""
    def get_nbi(self, allocation: Allocation, out: Buffer, offset: int = 0) -> None:
        """Starts a get without a handle; ``out`` holds the data after ``quiet()``."""
    def atomic(
        self, allocation: Allocation, offset: int, op: AtomicOp, value: int = 0, compare: int = 0, type: WordType = "u64"
    ) -> int:
        """One atomic on this context, done at the server on return; the previous value."""
    def fence(self) -> None:
        """Orders this context's operations."""
    def quiet(self) -> None:
        """Remote completion of this context's operations (not the client's nor others')."""
    def destroy(self) -> None:
        """Completes the context's operations and releases it."""
    @property
    def destroyed(self) -> bool: """Whether ``destroy()`` was called."""
    def __enter__(self) -> Context: ...
    def __exit__(self, *args: object) -> bool: ...

class Client:
    """A connection to nam memory servers: ``NAM_SERVERS`` when ``servers`` is None, else a
    ``'host:port[,host:port...]'`` string or a list of ``'host:port'`` strings."""

    def __init__(
        self,
        servers: str | list[str] | None = None,
        *,
        tenant: str | None = None,
        token: str | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        transports: str | None = None,
    ) -> None: ...
    @property
    def servers(self) -> list[str]: """The servers, as 'host:port' strings."""
    def alloc(
        self,
        size: int,
        *,
        name: str | None = None,
        shared: bool = False,
        persistent: bool = False,
        align: int = 0,
        server: int | None = None,
    ) -> Allocation:
        """Allocates ``size`` bytes."""
    def open(self, name: str) -> Allocation:
        """Opens the shared allocation ``name`` of this client's tenant."""
    def free(self, allocation: Allocation) -> None:
        """Frees the allocation; a second free raises ``FreedError``."""
    def put(self, allocation: Allocation, data: Buffer, offset: int = 0) -> None:
        """Copies ``data`` to ``offset``; returns when ``data`` may be reused."""
    def put_sync(self, allocation: Allocation, data: Buffer, offset: int = 0) -> None:
        """As ``put``, returning when the data is visible at the server."""
    def get(self, allocation: Allocation, out: Buffer, offset: int = 0) -> None:
        """Fills the writable buffer ``out`` from ``offset``."""
    def get_bytes(self, allocation: Allocation, size: int, offset: int = 0) -> bytes:
        """The ``size`` bytes at ``offset`` as a new bytes object."""
    def put_nb(self, allocation: Allocation, data: Buffer, offset: int = 0) -> Request:
        """Starts a put; ``data`` must not change until the request completes."""
    def get_nb(self, allocation: Allocation, out: Buffer, offset: int = 0) -> Request:
        """Starts a get into ``out``; read it after the request completes."""
    def flush(self) -> None:
        """Remote completion of every operation issued so far."""
    def fence(self) -> None:
        """Operations after the fence reach a server after those before it."""
    def fetch_add(self, allocation: Allocation, offset: int, value: int) -> int:
        """Atomic add to the 64-bit word at ``offset``; returns the old value."""
    def swap(self, allocation: Allocation, offset: int, value: int) -> int:
        """Atomic exchange; returns the old value."""
    def compare_swap(self, allocation: Allocation, offset: int, compare: int, value: int) -> int:
        """Atomic compare-and-swap; returns the old value."""
    def fetch(self, allocation: Allocation, offset: int) -> int:
        """Atomic read of the word at ``offset``."""
    def put_signal(
        self,
        allocation: Allocation,
        data: Buffer,
        offset: int,
        signal: Allocation,
        signal_offset: int,
        value: int,
        op: Literal["set", "add"] = "set",
    ) -> None:
        """Puts ``data``, then sets or adds to the signal word, ordered after the data."""
    def wait_until(
        self, allocation: Allocation, offset: int, value: int, compare: Compare = "==", timeout: float = 10.0
    ) -> int:
        """Waits until the word compares true against ``value``; raises ``WaitTimeoutError``."""
    def context(self) -> Context:
        """A new context (``shmem_ctx_create``); destroy it with ``destroy()`` or ``with``."""
    def quiet(self) -> None:
        """``shmem_quiet``: remote completion of every operation, the handle-less ones too;
        their buffers are released and ``Fetch.value`` readable when it returns."""
    def put_nbi(self, allocation: Allocation, data: Buffer, offset: int = 0) -> None:
        """Starts a put without a handle; ``quiet()`` completes it (keep ``data`` unchanged)."""
    def get_nbi(self, allocation: Allocation, out: Buffer, offset: int = 0) -> None:
        """Starts a get into ``out`` without a handle; read ``out`` after ``quiet()``."""
    def atomic(
        self,
        allocation: Allocation,
        offset: int,
        op: AtomicOp,
        value: int = 0,
        compare: int = 0,
        type: WordType = "u64",
    ) -> int:
        """One atomic on a 32/64-bit, signed/unsigned word; returns the previous value."""
    def atomic_nbi(
        self,
        allocation: Allocation,
        offset: int,
        op: FetchOp,
        value: int = 0,
        compare: int = 0,
        type: WordType = "u64",
    ) -> Fetch:
        """A non-blocking fetching atomic; its ``Fetch.value`` is set by the next ``quiet()``."""
    def test(
        self, allocation: Allocation, offset: int, value: int, compare: Compare = "==", type: WordType = "u64"
    ) -> bool:
        """Whether the word compares true against ``value`` now (``shmem_test``); never sleeps."""
    def wait_until_all(
        self, words: list[tuple[Allocation, int]], value: int, compare: Compare = "==", timeout: float = 10.0
    ) -> None:
        """Waits until every word compares true; raises ``WaitTimeoutError``."""
    def wait_until_any(
        self, words: list[tuple[Allocation, int]], value: int, compare: Compare = "==", timeout: float = 10.0
    ) -> int:
        """Waits until one word compares true; its index."""
    def wait_until_some(
        self, words: list[tuple[Allocation, int]], value: int, compare: Compare = "==", timeout: float = 10.0
    ) -> list[int]:
        """Waits until at least one word compares true; the indices of all that do."""
    def global_address(self, allocation: Allocation, offset: int = 0) -> int:
        """The 128-bit global address of ``offset`` in ``allocation``."""
    def resolve(self, address: int) -> tuple[Allocation, int]:
        """The allocation and offset a global address names."""
    def put_global(self, address: int, data: Buffer) -> None: """``put`` at a global address."""
    def put_global_sync(self, address: int, data: Buffer) -> None: """``put_sync`` at a global address."""
    def get_global(self, address: int, out: Buffer) -> None: """``get`` from a global address."""
    def fetch_add_global(self, address: int, value: int) -> int: """``fetch_add`` at a global address."""
    def compare_swap_global(self, address: int, compare: int, value: int) -> int:
        """``compare_swap`` at a global address."""
    def map(self, allocation: Allocation, offset: int = 0, size: int | None = None) -> Mapped | None:
        """The bytes mapped in this process when ``allocation.direct``; None otherwise."""

def mapped_array(
    client: Client,
    allocation: Allocation,
    dtype: npt.DTypeLike = ...,
    offset: int = 0,
    shape: int | tuple[int, ...] | None = None,
) -> np.ndarray | None:
    """A numpy array over a same-host allocation's mapped memory; None over the network."""

class InvalidArgumentError(NamError):
    """NAM_ERR_INVALID_ARGUMENT: invalid argument."""

class OutOfBoundsError(NamError):
    """NAM_ERR_OUT_OF_BOUNDS: offset or length out of bounds."""

class MisalignedError(NamError):
    """NAM_ERR_MISALIGNED: atomic word not 8-byte aligned."""

class FreedError(NamError):
    """NAM_ERR_FREED: allocation already freed."""

class UnknownHandleError(NamError):
    """NAM_ERR_UNKNOWN_HANDLE: unknown allocation handle."""

class PoolExhaustedError(NamError):
    """NAM_ERR_POOL_EXHAUSTED: memory pool exhausted."""

class QuotaExceededError(NamError):
    """NAM_ERR_QUOTA_EXCEEDED: tenant quota exceeded."""

class TooLargeError(NamError):
    """NAM_ERR_TOO_LARGE: size exceeds a protocol limit."""

class TooManyError(NamError):
    """NAM_ERR_TOO_MANY: too many clients or handles."""

class NameNotFoundError(NamError):
    """NAM_ERR_NAME_NOT_FOUND: no allocation with that name."""

class NameExistsError(NamError):
    """NAM_ERR_NAME_EXISTS: an allocation with that name exists."""

class NotSharedError(NamError):
    """NAM_ERR_NOT_SHARED: allocation is exclusive."""

class AuthError(NamError):
    """NAM_ERR_AUTH: tenant authentication failed."""

class NoServersError(NamError):
    """NAM_ERR_NO_SERVERS: no memory server configured."""

class ConfigError(NamError):
    """NAM_ERR_CONFIG: invalid configuration."""

class ConnectError(NamError):
    """NAM_ERR_CONNECT: cannot connect to memory server."""

class TimeoutError(NamError):
    """NAM_ERR_TIMEOUT: memory server did not answer in time."""

class WaitTimeoutError(NamError):
    """NAM_ERR_WAIT_TIMEOUT: wait condition not met in time."""

class TransportError(NamError):
    """NAM_ERR_TRANSPORT: transport error."""

class ProtocolError(NamError):
    """NAM_ERR_PROTOCOL: malformed reply from memory server."""

class UnexpectedReplyError(NamError):
    """NAM_ERR_UNEXPECTED_REPLY: unexpected reply from memory server."""

class MalformedError(NamError):
    """NAM_ERR_MALFORMED: memory server could not decode the request."""

class VersionMismatchError(NamError):
    """NAM_ERR_VERSION_MISMATCH: protocol version mismatch."""

class NotConnectedError(NamError):
    """NAM_ERR_NOT_CONNECTED: request before hello."""

class ServerInternalError(NamError):
    """NAM_ERR_SERVER_INTERNAL: internal memory server error."""

class InternalError(NamError):
    """NAM_ERR_INTERNAL: internal libnam error."""

class CkptTimeoutError(NamError):
    """NAM_ERR_CKPT_TIMEOUT: checkpoint deadline passed."""

class CkptRankFailedError(NamError):
    """NAM_ERR_CKPT_RANK_FAILED: checkpoint rank failed."""

class CkptUnrecoverableError(NamError):
    """NAM_ERR_CKPT_UNRECOVERABLE: checkpoint unrecoverable."""

class CkptCorruptedError(NamError):
    """NAM_ERR_CKPT_CORRUPTED: checkpoint data corrupted."""

class CkptBusyError(NamError):
    """NAM_ERR_CKPT_BUSY: checkpoint group busy."""

class CkptUnknownKeyError(NamError):
    """NAM_ERR_CKPT_UNKNOWN_KEY: checkpoint: unknown configuration key."""

class CkptDirectoryError(NamError):
    """NAM_ERR_CKPT_DIRECTORY: checkpoint: directory not usable."""

class CkptRamTooSmallError(NamError):
    """NAM_ERR_CKPT_RAM_TOO_SMALL: checkpoint: RAM level too small."""

class CkptRegionError(NamError):
    """NAM_ERR_CKPT_REGION: checkpoint: invalid region."""

class CkptUnknownRegionError(NamError):
    """NAM_ERR_CKPT_UNKNOWN_REGION: checkpoint: region not protected."""

class CkptNoCheckpointError(NamError):
    """NAM_ERR_CKPT_NO_CHECKPOINT: checkpoint: nothing to restart."""

class CkptRankCountError(NamError):
    """NAM_ERR_CKPT_RANK_COUNT: checkpoint: different rank count."""

class CkptLayoutError(NamError):
    """NAM_ERR_CKPT_LAYOUT: checkpoint: job layout unsuited to scheme."""

class CkptSizeMismatchError(NamError):
    """NAM_ERR_CKPT_SIZE_MISMATCH: checkpoint: region size mismatch."""

class CkptFlushError(NamError):
    """NAM_ERR_CKPT_FLUSH: checkpoint: flush failed."""

class CkptIoError(NamError):
    """NAM_ERR_CKPT_IO: checkpoint: file I/O error."""

class CkptStateError(NamError):
    """NAM_ERR_CKPT_STATE: checkpoint: invalid use."""

class BudgetTooSmallError(NamError):
    """NAM_ERR_BUDGET_TOO_SMALL: local-memory budget too small."""

class UnalignedError(NamError):
    """NAM_ERR_UNALIGNED: far-memory span not aligned."""

class UserfaultfdDeniedError(NamError):
    """NAM_ERR_USERFAULTFD_DENIED: userfaultfd not permitted."""

class SystemError(NamError):
    """NAM_ERR_SYSTEM: system call failed."""

class DomainError(NamError):
    """NAM_ERR_DOMAIN: protection domain mismatch."""

class MailboxFullError(NamError):
    """NAM_ERR_MAILBOX_FULL: mailbox full, retry later."""

class ReduceMismatchError(NamError):
    """NAM_ERR_REDUCE_MISMATCH: allreduce ranks disagree on length, type or operation."""

class ReduceAbortedError(NamError):
    """NAM_ERR_REDUCE_ABORTED: allreduce aborted: a rank left or died."""

class WrongServerError(NamError):
    """NAM_ERR_WRONG_SERVER: global address names another server."""

class HugePagesUnavailableError(NamError):
    """NAM_ERR_HUGE_PAGES_UNAVAILABLE: not enough free huge pages."""

ERR_INVALID_ARGUMENT: int  # -1
ERR_OUT_OF_BOUNDS: int  # -2
ERR_MISALIGNED: int  # -3
ERR_FREED: int  # -4
ERR_UNKNOWN_HANDLE: int  # -5
ERR_POOL_EXHAUSTED: int  # -6
ERR_QUOTA_EXCEEDED: int  # -7
ERR_TOO_LARGE: int  # -8
ERR_TOO_MANY: int  # -9
ERR_NAME_NOT_FOUND: int  # -10
ERR_NAME_EXISTS: int  # -11
ERR_NOT_SHARED: int  # -12
ERR_AUTH: int  # -13
ERR_NO_SERVERS: int  # -14
ERR_CONFIG: int  # -15
ERR_CONNECT: int  # -16
ERR_TIMEOUT: int  # -17
ERR_WAIT_TIMEOUT: int  # -18
ERR_TRANSPORT: int  # -19
ERR_PROTOCOL: int  # -20
ERR_UNEXPECTED_REPLY: int  # -21
ERR_MALFORMED: int  # -22
ERR_VERSION_MISMATCH: int  # -23
ERR_NOT_CONNECTED: int  # -24
ERR_SERVER_INTERNAL: int  # -25
ERR_INTERNAL: int  # -26
ERR_CKPT_TIMEOUT: int  # -27
ERR_CKPT_RANK_FAILED: int  # -28
ERR_CKPT_UNRECOVERABLE: int  # -29
ERR_CKPT_CORRUPTED: int  # -30
ERR_CKPT_BUSY: int  # -31
ERR_CKPT_UNKNOWN_KEY: int  # -32
ERR_CKPT_DIRECTORY: int  # -33
ERR_CKPT_RAM_TOO_SMALL: int  # -34
ERR_CKPT_REGION: int  # -35
ERR_CKPT_UNKNOWN_REGION: int  # -36
ERR_CKPT_NO_CHECKPOINT: int  # -37
ERR_CKPT_RANK_COUNT: int  # -38
ERR_CKPT_LAYOUT: int  # -39
ERR_CKPT_SIZE_MISMATCH: int  # -40
ERR_CKPT_FLUSH: int  # -41
ERR_CKPT_IO: int  # -42
ERR_CKPT_STATE: int  # -43
ERR_BUDGET_TOO_SMALL: int  # -44
ERR_UNALIGNED: int  # -45
ERR_USERFAULTFD_DENIED: int  # -46
ERR_SYSTEM: int  # -47
ERR_DOMAIN: int  # -48
ERR_MAILBOX_FULL: int  # -49
ERR_REDUCE_MISMATCH: int  # -50
ERR_REDUCE_ABORTED: int  # -51
ERR_WRONG_SERVER: int  # -52
ERR_HUGE_PAGES_UNAVAILABLE: int  # -53
