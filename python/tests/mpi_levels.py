"""Per-call levels, snapshots and `latest` of nam.ckpt (run by test_ckpt.py under mpirun):
`mpi_levels.py write INTERVAL` checkpoints v1 at 'ssd', v2 at 'ram', v3 at 'pfs' and then
snapshots until one is taken as v4; `mpi_levels.py latest` prints what `latest` reports
(`latest <version>`, or `latest error <class>: <message>`), restores it and checks it."""

import sys
import time

import numpy as np
from mpi4py import MPI

import nam
import nam.ckpt

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
data = np.zeros(4096, dtype=np.int64)
version = np.zeros(1, dtype=np.int64)


def fill(v: int) -> np.ndarray:
    return (rank << 40) + (v << 20) + np.arange(data.size, dtype=np.int64)


ckpt = nam.ckpt.Checkpointer(comm)
ckpt.protect("data", data)
ckpt.protect("version", version)
if sys.argv[1] == "write":
    interval = float(sys.argv[2])
    for v, level in [(1, "ssd"), (2, "ram"), (3, "pfs")]:
        data[:], version[0] = fill(v), v
        got = ckpt.checkpoint(v, name="levels", level=level)
        assert got == level, (v, level, got)
        if rank == 0:
            print(f"checkpoint {v} {got}", flush=True)
    data[:], version[0] = fill(4), 4
    assert ckpt.snapshot(4, name="levels") == (False, None)
    time.sleep(interval + 0.2)
    taken, level = ckpt.snapshot(4, name="levels")
    if rank == 0:
        print(f"snapshot {taken} {level}", flush=True)
else:
    try:
        latest = ckpt.latest("levels")
    except nam.NamError as e:
        if rank == 0:
            print(f"latest error {type(e).__name__}: {e}", flush=True)
    else:
        if rank == 0:
            print(f"latest {latest}", flush=True)
        if latest is not None:
            restored = ckpt.restart("levels", version=latest)[0]
            assert restored == latest and version[0] == latest and (data == fill(latest)).all()
            comm.Barrier()
            if rank == 0:
                print(f"restored {restored}", flush=True)
ckpt.finalize()
