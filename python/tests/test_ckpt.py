"""nam.ckpt under mpirun: an mpi4py heat stencil is killed mid-way, the killed rank's newest
checkpoint files are deleted too, and the restart (XOR rebuilds that rank) ends with the
same answer as an uninterrupted run; and the checkpointer's errors are typed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mpi4py  # noqa: F401  (installed by scripts/setup.sh; a missing one fails, not skips)
import pytest

HERE = Path(__file__).resolve().parent


def mpirun(tmp: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    """4 ranks as 4 emulated nodes, as the C example's test runs them."""
    base = tmp / f"ompi-{len(list(tmp.glob('ompi-*')))}"
    base.mkdir()
    env = dict(
        os.environ,
        OMPI_MCA_orte_tmpdir_base=str(base),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    cmd = ["mpirun", "--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", "4"]
    cmd += ["-x", "NAM_EMULATE_NODES=4", "-x", f"NAM_CKPT_CONFIG={config}"]
    cmd += [sys.executable, str(HERE / "mpi_heat.py"), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def answer(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("final "))


def test_heat_killed_rank_restarts_to_the_same_answer(tmp_path):
    config = tmp_path / "ckpt.toml"
    config.write_text(
        f'[ram]\ndir = "{tmp_path}/ram"\n[ssd]\ndir = "{tmp_path}/ssd"\nfsync = false\n'
        '[redundancy]\nscheme = "xor"\n[policy]\nkind = "ratio"\nratio = 1\n'
    )
    clean = mpirun(tmp_path, config, "100", "20")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    for level in ["ram", "ssd"]:
        shutil.rmtree(tmp_path / level)
    # Rank 1 dies after step 70; the newest checkpoint is step 60.
    killed = mpirun(tmp_path, config, "100", "20", "1", "70")
    assert killed.returncode != 0 and "final " not in killed.stdout, killed.stdout + killed.stderr
    deleted = 0
    for level in ["ram", "ssd"]:
        v60 = tmp_path / level / "heat" / "v60"
        if v60.is_dir():
            for f in v60.iterdir():
                if f.name.startswith("rank-1."):
                    f.unlink()
                    deleted += 1
    assert deleted >= 2, "rank 1's checkpoint, parity and marker of step 60"
    restarted = mpirun(tmp_path, config, "100", "20")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "restarted from version 60 at step 60" in restarted.stdout, restarted.stdout
    assert "rebuilt [1]" in restarted.stdout, restarted.stdout
    assert answer(restarted.stdout) == answer(clean.stdout)


def test_checkpointer_errors_are_typed(tmp_path):
    from mpi4py import MPI

    import nam
    import nam.ckpt
    import numpy as np

    bad = tmp_path / "bad.toml"
    bad.write_text("[nonsense]\nkey = 1\n")
    with pytest.raises(nam.CkptUnknownKeyError) as e:
        nam.ckpt.Checkpointer(MPI.COMM_SELF, bad)
    assert e.value.status == nam.ERR_CKPT_UNKNOWN_KEY and "nonsense" in str(e.value)
    good = tmp_path / "good.toml"
    good.write_text(f'[ram]\ndir = "{tmp_path}/ram"\n[ssd]\ndir = "{tmp_path}/ssd"\n[redundancy]\nscheme = "none"\n')
    with nam.ckpt.Checkpointer(MPI.COMM_SELF, good) as ckpt:
        a = np.zeros(16)
        ckpt.protect("a", a)
        with pytest.raises(nam.CkptRegionError):
            ckpt.protect("a", np.zeros(4))
        with pytest.raises(nam.InvalidArgumentError):
            ckpt.protect("b", b"read-only bytes")
        assert ckpt.latest("none") is None
        with pytest.raises(nam.NamError) as e:
            ckpt.restart("none")
        assert e.value.status_name.startswith("NAM_ERR_CKPT") and str(e.value)
        a[:] = 3.0
        assert ckpt.checkpoint(1, name="one") in ("ram", "ssd")
        a[:] = 0.0
        assert ckpt.restart("one")[0] == 1
        assert (a == 3.0).all()
