"""nam for Python: network-attached memory on UCX.

``nam.Client`` connects to memory servers (``NAM_SERVERS`` or its arguments), allocates
memory on them and moves bytes between it and any buffer-protocol object (bytes,
bytearray, memoryview, numpy arrays) without copies in Python; atomics, signals and global
addresses work as in the Rust and C clients. Every failure raises ``nam.NamError`` (or
one of its subclasses, one per status code of nam.h), carrying ``status``,
``status_name`` and ``description``. ``nam.farmem`` holds far memory: an explicit cache
and numpy arrays over paged regions.
"""

from __future__ import annotations

import numpy as _np

from . import _nam
from ._nam import Allocation, Client, Context, Fetch, Group, Mapped, NamError, Request, __version__

# One exception class per nam.h status code (OutOfBoundsError, FreedError, ...) and the
# codes themselves (ERR_OUT_OF_BOUNDS == -2, ...), made by the extension when it loads.
for _name in dir(_nam):
    if _name.endswith("Error") or _name.startswith("ERR_"):
        globals()[_name] = getattr(_nam, _name)
del _name

from . import farmem  # noqa: E402  (needs the names above)


def mapped_array(
    client: Client, allocation: Allocation, dtype: _np.typing.DTypeLike = _np.uint8, offset: int = 0, shape=None
) -> _np.ndarray | None:
    """A numpy array over a same-host allocation's memory where it is mapped in this process
    (``allocation.direct``), with no copies: stores are visible to every client at once.
    ``shape`` defaults to as many elements of ``dtype`` as fit from ``offset`` on. Returns
    None when the allocation is reached over the network (use ``Client.get``/``put``)."""
    dtype = _np.dtype(dtype)
    if shape is None:
        count = (allocation.size - offset) // dtype.itemsize
        shape = (count,)
    elif isinstance(shape, int):
        shape = (shape,)
    nbytes = int(_np.prod(shape, dtype=_np.int64)) * dtype.itemsize
    view = client.map(allocation, offset, nbytes)
    if view is None:
        return None
    return _np.ndarray(shape, dtype=dtype, buffer=view)


__all__ = [
    "Allocation",
    "Client",
    "Context",
    "Fetch",
    "Group",
    "Mapped",
    "NamError",
    "Request",
    "farmem",
    "mapped_array",
    "__version__",
]
