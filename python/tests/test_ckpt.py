"""nam.ckpt under mpirun: an mpi4py heat stencil is killed mid-way, the killed rank's newest
checkpoint files are deleted too, and the restart (XOR rebuilds that rank) ends with the
same answer as an uninterrupted run; levels chosen per call, snapshots, and `latest`
reporting only what a restart can restore; and the checkpointer's errors are typed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mpi4py  # noqa: F401  (installed by scripts/setup.sh; a missing one fails, not skips)
import pytest

HERE = Path(__file__).resolve().parent


def mpirun(tmp: Path, config: Path, *args: str, script: str = "mpi_heat.py") -> subprocess.CompletedProcess:
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
    cmd += [sys.executable, str(HERE / script), *args]
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


def test_levels_per_call_snapshots_and_latest_reports_only_restorable_versions(tmp_path):
    config = tmp_path / "ckpt.toml"
    config.write_text(
        f'[ram]\ndir = "{tmp_path}/ram"\n[ssd]\ndir = "{tmp_path}/ssd"\nfsync = false\n'
        '[redundancy]\nscheme = "xor"\nset_size = 4\n[policy]\nkind = "always-ram"\n'
        f'[flush]\ndir = "{tmp_path}/pfs"\n[snapshot]\ninterval = 1.0\n'
    )
    wrote = mpirun(tmp_path, config, "write", "1.0", script="mpi_levels.py")
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    for line in ["checkpoint 1 ssd", "checkpoint 2 ram", "checkpoint 3 pfs", "snapshot True ram"]:
        assert line in wrote.stdout, wrote.stdout
    assert all((tmp_path / "pfs" / "levels" / "v3" / f"rank-{r}.ckpt").exists() for r in range(4))

    def delete(level: str, version: int, ranks: list[int]) -> int:
        files = [f for f in (tmp_path / level / "levels" / f"v{version}").iterdir()]
        doomed = [f for f in files if any(f.name.startswith(f"rank-{r}.") for r in ranks)]
        for f in doomed:
            f.unlink()
        return len(doomed)

    def latest() -> str:
        out = mpirun(tmp_path, config, "latest", script="mpi_levels.py")
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    # Two ranks of the XOR set lost v4: the previous complete version is reported.
    assert delete("ram", 4, [1, 2]) >= 6
    out = latest()
    assert "latest 3" in out and "restored 3" in out, out
    # Without v3 (RAM copy lost by two ranks, PFS copy gone), v1 on the SSD level.
    assert delete("ram", 3, [1, 2]) >= 6
    shutil.rmtree(tmp_path / "pfs")
    out = latest()
    assert "latest 1" in out and "restored 1" in out, out
    # Nothing restorable: a typed exception saying what is missing.
    assert delete("ssd", 1, [0, 3]) >= 6
    out = latest()
    assert "latest error CkptUnrecoverableError" in out, out
    assert "XOR set [0, 1, 2, 3] lost ranks [0, 3]" in out and "v4/ram" in out, out


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
        with pytest.raises(nam.InvalidArgumentError):
            ckpt.checkpoint(2, name="one", level="tape")
        with pytest.raises(nam.ConfigError):
            ckpt.checkpoint(2, name="one", level="pfs")  # no flush.dir
