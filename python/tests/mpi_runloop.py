"""The run loop and datasets of nam.ckpt (run by test_ckpt_runloop.py under mpirun).

`mpi_runloop.py loop STEPS` checkpoints when `need_checkpoint` says so and, when
`should_exit` says stop, takes a last checkpoint with the `xor` descriptor and stops;
`mpi_runloop.py restart` restores the newest restorable version and checks every element;
`mpi_runloop.py forget V` forgets version V."""

import sys
import time

import numpy as np
from mpi4py import MPI

import nam.ckpt

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
data = np.zeros(8192, dtype=np.int64)


def fill(v: int) -> np.ndarray:
    return (rank << 40) + (v << 20) + np.arange(data.size, dtype=np.int64)


ckpt = nam.ckpt.Checkpointer(comm)
ckpt.protect("data", data)
if sys.argv[1] == "loop":
    for step in range(1, int(sys.argv[2]) + 1):
        data[:] = fill(step)
        time.sleep(0.01)
        taken = ckpt.need_checkpoint()
        if taken:
            ckpt.checkpoint(step, name="loop")
            if rank == 0:
                print(f"checkpoint {step}", flush=True)
        why = ckpt.should_exit()
        if why is not None:
            level = ckpt.checkpoint_with(step + 1000, "xor", name="loop") if not taken else None
            if rank == 0:
                print(f"stopping at step {step} level {level}: {why}", flush=True)
            break
elif sys.argv[1] == "restart":
    version, level, rebuilt = ckpt.restart("loop")
    ok = comm.allreduce(int(np.array_equal(data, fill(version % 1000))), op=MPI.MIN)
    if rank == 0:
        print(f"restored {version} {level} ok={bool(ok)}", flush=True)
elif sys.argv[1] == "forget":
    ckpt.forget(int(sys.argv[2]), name="loop")
ckpt.finalize()
