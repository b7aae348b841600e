"""Far memory over nam memory servers.

``Cache`` is the explicit way in: reserve far address space, ``read``/``write`` bytes
through a local cache of ``local_bytes``, ``flush`` them back. ``Region`` and ``array`` are
the transparent way in: a numpy array whose pages live on the servers and are fetched
when touched, with at most ``local_bytes`` of them resident in this process.
"""

from __future__ import annotations

import numpy as _np

from ._nam import Cache, Client, Region


def array(
    shape,
    dtype: _np.typing.DTypeLike = _np.float64,
    *,
    local_bytes: int,
    client: Client | None = None,
    fault_mode: str = "thread",
) -> _np.ndarray:
    """A zero-filled numpy array of ``shape`` and ``dtype`` backed by a paged far-memory
    region on ``client``'s servers (a new ``Client()`` from ``NAM_SERVERS`` when None), with
    at most ``local_bytes`` resident here. The array keeps its region (``array.base``) and
    the region its client alive; ``array.base.flush()`` writes dirty pages back."""
    if isinstance(shape, int):
        shape = (shape,)
    dtype = _np.dtype(dtype)
    nbytes = int(_np.prod(shape, dtype=_np.int64)) * dtype.itemsize
    if client is None:
        client = Client()
    region = Region(client, max(nbytes, 1), local_bytes, fault_mode=fault_mode)
    # np.ndarray over the buffer (not frombuffer + reshape) so that array.base is the region.
    return _np.ndarray(shape, dtype=dtype, buffer=region)


__all__ = ["Cache", "Region", "array"]
