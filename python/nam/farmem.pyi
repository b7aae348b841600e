"""Type stubs of nam.farmem."""

import numpy as np
import numpy.typing as npt
from typing import Literal
from typing_extensions import Buffer

from . import Client

class Cache:
    """Far memory reached explicitly through a local cache of ``local_bytes``."""

    def __init__(
        self, client: Client, far_bytes: int, local_bytes: int, *, line_bytes: int | None = None, ways: int | None = None
    ) -> None: ...
    @property
    def far_bytes(self) -> int: """Bytes of far address space."""
    def reserve(self, size: int) -> int: """Reserves ``size`` bytes; returns their far address."""
    def read(self, addr: int, out: Buffer) -> None: """Fills ``out`` from far address ``addr``."""
    def write(self, addr: int, data: Buffer) -> None: """Writes ``data`` at far address ``addr``."""
    def read_bulk(self, addr: int, out: Buffer) -> None: """As ``read``, streaming past the cache."""
    def write_bulk(self, addr: int, data: Buffer) -> None: """As ``write``, streaming past the cache."""
    def flush(self) -> None: """Writes every dirty line back."""
    def invalidate(self) -> None: """Writes back and empties the cache."""
    def stats(self) -> dict[str, int]: """Hit, miss, eviction and write-back counters."""

class Region(Buffer):
    """A paged far-memory region exported as a writable buffer."""

    def __init__(
        self, client: Client, size: int, local_bytes: int, *, fault_mode: Literal["thread", "signal"] = "thread"
    ) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def page_bytes(self) -> int: """Bytes of one page."""
    @property
    def resident_pages(self) -> int: """Pages resident in local memory now."""
    def flush(self) -> None: """Writes every dirty resident page back."""
    def evict_all(self) -> None: """Writes back and drops every resident page."""
    def stats(self) -> dict[str, int]: """Fault, eviction and prefetch counters."""

def array(
    shape: int | tuple[int, ...],
    dtype: npt.DTypeLike = ...,
    *,
    local_bytes: int,
    client: Client | None = None,
    fault_mode: Literal["thread", "signal"] = "thread",
) -> np.ndarray:
    """A numpy array backed by a paged far-memory region; ``array.base`` is the region."""
