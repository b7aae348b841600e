"""Checkpoint/restart for mpi4py programs, over nam's checkpoint library (the one behind the
C API's ``nam_ckpt_*``; see docs/checkpoint.md for the configuration, levels and schemes).

    from mpi4py import MPI
    import numpy as np, nam.ckpt
    grid = np.zeros((512, 512)); step = np.zeros(1, dtype=np.int64)
    ckpt = nam.ckpt.Checkpointer(MPI.COMM_WORLD)        # NAM_CKPT_CONFIG or defaults
    ckpt.protect("grid", grid); ckpt.protect("step", step)
    if ckpt.latest("heat") is not None:
        ckpt.restart("heat")
    ...
    ckpt.checkpoint(int(step[0]), name="heat")               # the placement policy's level
    ckpt.checkpoint(int(step[0]), name="heat", level="ssd")  # or one chosen per call
    ckpt.snapshot(int(step[0]), name="heat")  # every iteration: checkpoints each snapshot.interval
    ckpt.finalize()

Every call but ``protect``/``unprotect`` is collective: all ranks make it, in the same order.
"""

from __future__ import annotations

import os
import zlib

from ._nam import _Checkpointer


def region_id(name: str) -> int:
    """The C API's region id of a Python region name: a CRC-32 of the name, positive, so the
    same name has the same id in every run and every rank."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


class Checkpointer:
    """The checkpointer of one MPI job over ``comm`` (an mpi4py communicator, duplicated by
    the library). ``config``: a TOML file path (None: ``NAM_CKPT_CONFIG``, or defaults); the
    ``NAM_CKPT_*`` environment variables apply on top, as in C."""

    def __init__(self, comm, config: str | os.PathLike | None = None):
        self.comm = comm
        self._names: dict[str, int] = {}
        self._inner = _Checkpointer(comm.py2f(), None if config is None else os.fspath(config))

    def protect(self, name: str, array) -> None:
        """Protects ``array`` (a writable contiguous buffer, e.g. a numpy array) under
        ``name``; restart writes into it in place. The library keeps it alive."""
        rid = region_id(name)
        other = next((n for n, i in self._names.items() if i == rid and n != name), None)
        if other is not None:
            raise ValueError(f"region names {name!r} and {other!r} have the same id {rid}; rename one")
        self._inner.protect(rid, array)
        self._names[name] = rid

    def unprotect(self, name: str) -> None:
        """Stops protecting the region ``name``."""
        self._inner.unprotect(region_id(name))
        self._names.pop(name, None)

    def checkpoint(self, version: int, name: str | None = None, level: str | None = None) -> str | None:
        """Collective: writes version ``version`` of checkpoint ``name`` at the level the
        placement policy picks, or at ``level`` chosen for this call (as FTI's
        ``FTI_Checkpoint(id, level)``; the same on every rank): 'ram', 'ssd', or 'pfs' (the
        policy's node-local level, then flushed to ``flush.dir`` before the call returns).
        Returns the level written ('ram', 'ssd', 'pfs' or 'nam'), or None when the placement
        policy skipped it. An unknown level raises ``InvalidArgumentError``; 'pfs' without
        ``flush.dir`` or a level with incremental checkpoints raises ``ConfigError``."""
        return self._inner.checkpoint(version, name, level)

    def snapshot(self, version: int, name: str | None = None) -> tuple[bool, str | None]:
        """Collective, to call every iteration (as FTI's ``FTI_Snapshot``): checkpoints as
        ``checkpoint`` when ``snapshot.interval`` seconds (configuration, default 60) have
        passed since init or the last checkpoint, else costs one allreduce. Returns
        ``(taken, level)``."""
        return self._inner.snapshot(version, name)

    def latest(self, name: str | None = None) -> int | None:
        """Collective: the newest version of ``name`` that ``restart`` can restore (every
        rank's data is there, or the redundancy scheme can rebuild it), or None when no
        version was ever written. Raises ``CkptUnrecoverableError``, saying what is missing,
        when versions were written but none can be restored."""
        return self._inner.latest(name)

    def restart(self, name: str | None = None, version: int | None = None, regions: list[str] | None = None):
        """Collective: restores the protected regions (or only ``regions``) from ``version``
        (None: the newest restorable) in place. Returns ``(version, level, rebuilt_ranks)``:
        the ranks whose lost data the redundancy scheme rebuilt."""
        ids = None if regions is None else [region_id(n) for n in regions]
        return self._inner.restart(name, version, ids)

    def need_checkpoint(self) -> bool:
        """Collective, to call every iteration (SCR's ``SCR_Need_checkpoint``): whether to
        checkpoint now, by ``runloop.interval`` seconds since the last checkpoint or the
        ``runloop.overhead`` fraction of run time measured against this job's checkpoints
        (always True when neither is configured). The same on every rank."""
        return self._inner.need_checkpoint()

    def should_exit(self) -> str | None:
        """Collective, to call every iteration (SCR's ``SCR_Should_exit``): why the job should
        stop now (a halt file from ``nam ckpt halt DIR``, or the allocation ending within
        ``runloop.exit_before`` seconds), or None. The same on every rank."""
        return self._inner.should_exit()

    def checkpoint_with(self, version: int, descriptor: str, name: str | None = None) -> str | None:
        """Collective: ``checkpoint`` protected by the redundancy descriptor ``descriptor``
        (``[descriptors.<name>]``, or 'default') at its level. An unknown descriptor raises
        ``ConfigError``."""
        return self._inner.checkpoint_with(version, descriptor, name)

    def checkpoint_output(self, version: int, name: str | None = None) -> None:
        """Collective: stores an output dataset, flushed to ``flush.dir`` before the call
        returns and never restarted from."""
        self._inner.checkpoint_output(version, name)

    def set_current(self, version: int | None, name: str | None = None) -> None:
        """Collective: the version a restart without one uses, in this job and later ones
        (None: the newest restorable)."""
        self._inner.set_current(version, name)

    def forget(self, version: int, name: str | None = None) -> None:
        """Collective: never offer ``version`` for restart again (its files stay)."""
        self._inner.forget(version, name)

    def delete(self, version: int, name: str | None = None) -> None:
        """Collective: deletes every rank's files of ``version`` at every level, and forgets it."""
        self._inner.delete(version, name)

    def finalize(self) -> None:
        """Collective: waits for background flushes and releases the library's resources."""
        self._inner.finalize()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.finalize()


__all__ = ["Checkpointer", "region_id"]
