"""An mpi4py heat stencil checkpointing with nam.ckpt (run by test_ckpt.py under mpirun):
`mpi_heat.py STEPS EVERY [KILL_RANK KILL_AFTER]`. It restarts from the newest checkpoint
when there is one, and prints `final <checksum>` at the end."""

import sys

import numpy as np
from mpi4py import MPI

import nam.ckpt

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
steps, every = int(sys.argv[1]), int(sys.argv[2])
kill_rank, kill_after = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (-1, -1)

n = 64
grid = np.zeros((n + 2, n), dtype=np.float64)  # one ghost row above and below
grid[1:-1, :] = rank + np.arange(n)[None, :] / n
step = np.zeros(1, dtype=np.int64)

ckpt = nam.ckpt.Checkpointer(comm)
ckpt.protect("grid", grid)
ckpt.protect("step", step)
if ckpt.latest("heat") is not None:
    version, level, rebuilt = ckpt.restart("heat")
    if rank == 0:
        print(f"restarted from version {version} at step {int(step[0])} level {level} rebuilt {rebuilt}", flush=True)

up, down = (rank - 1) % size, (rank + 1) % size
while step[0] < steps:
    comm.Sendrecv(grid[1], dest=up, recvbuf=grid[-1], source=down)
    comm.Sendrecv(grid[-2], dest=down, recvbuf=grid[0], source=up)
    grid[1:-1] = 0.25 * (grid[:-2] + grid[2:] + 2 * grid[1:-1])
    step[0] += 1
    if step[0] % every == 0:
        ckpt.checkpoint(int(step[0]), name="heat")
    if rank == kill_rank and step[0] == kill_after:
        import os

        os._exit(9)  # dies without finalizing, like a crashed rank

total = comm.allreduce(float(grid[1:-1].sum()))
ckpt.finalize()
if rank == 0:
    print(f"final {total:.12e}", flush=True)
