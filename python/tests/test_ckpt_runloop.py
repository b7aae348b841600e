"""nam.ckpt's run loop under mpirun: `need_checkpoint` by interval, `should_exit` stopped by a
halt file written by `nam ckpt halt` while the job runs, a last checkpoint with a named
redundancy descriptor, restart from it checked element by element, and a forgotten version
passed over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_ckpt import HERE, mpirun

NAM = Path(__file__).resolve().parents[2] / "target" / "debug" / "nam"


def test_run_loop_halts_checkpoints_with_a_descriptor_and_restarts(tmp_path):
    assert NAM.exists(), "cargo build -p nam-cli makes the nam command"
    config = tmp_path / "ckpt.toml"
    config.write_text(
        f'[ram]\ndir = "{tmp_path}/ram"\n[ssd]\ndir = "{tmp_path}/ssd"\nfsync = false\n'
        '[redundancy]\nscheme = "partner"\n[policy]\nkind = "always-ram"\n[runloop]\ninterval = 0.3\n'
        '[descriptors.xor]\nscheme = "xor"\nset_size = 4\nlevel = "ssd"\nevery = 0\n'
    )
    base = tmp_path / "ompi-loop"
    base.mkdir()
    env = dict(
        os.environ,
        OMPI_MCA_orte_tmpdir_base=str(base),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    cmd = ["mpirun", "--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", "4"]
    cmd += ["-x", "NAM_EMULATE_NODES=4", "-x", f"NAM_CKPT_CONFIG={config}"]
    cmd += [sys.executable, str(HERE / "mpi_runloop.py"), "loop", "3000"]
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Halt the job from outside once it has checkpointed twice.
    lines = []
    for line in job.stdout:
        lines.append(line)
        if sum(1 for seen in lines if seen.startswith("checkpoint ")) == 2:
            halt = subprocess.run([NAM, "ckpt", "halt", tmp_path / "ssd", "--reason", "py-halt"], capture_output=True)
            assert halt.returncode == 0, halt.stderr
            break
    rest, err = job.communicate(timeout=120)
    out = "".join(lines) + rest
    assert job.returncode == 0, out + err
    stop = next(line for line in out.splitlines() if line.startswith("stopping at step"))
    assert "halted by" in stop and "py-halt" in stop, out
    step = int(stop.split()[3])
    taken = [int(line.split()[1]) for line in out.splitlines() if line.startswith("checkpoint ")]
    assert len(taken) >= 2 and step < 3000, out
    # The last checkpoint, unless the interval took one at that very step, used the descriptor.
    newest = step if "level None" in stop else step + 1000
    assert "level None" in stop or "level ssd" in stop, stop

    out = mpirun(tmp_path, config, "restart", script="mpi_runloop.py")
    assert f"restored {newest} " in out.stdout and "ok=True" in out.stdout, out.stdout + out.stderr

    mpirun(tmp_path, config, "forget", str(newest), script="mpi_runloop.py")
    older = max(v for v in taken if v != newest)
    out = mpirun(tmp_path, config, "restart", script="mpi_runloop.py")
    assert f"restored {older} " in out.stdout and "ok=True" in out.stdout, out.stdout + out.stderr
