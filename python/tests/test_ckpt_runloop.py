"""nam.ckpt's run loop under mpirun: `need_checkpoint` by interval, `should_exit` stopped by a
halt file written by `nam ckpt halt`, a last checkpoint with a named redundancy descriptor,
restart from it checked element by element, and a forgotten version passed over."""

from __future__ import annotations

from pathlib import Path
import subprocess

from test_ckpt import mpirun

NAM = Path(__file__).resolve().parents[2] / "target" / "debug" / "nam"


def test_run_loop_halts_checkpoints_with_a_descriptor_and_restarts(tmp_path):
    assert NAM.exists(), "cargo build -p nam-cli makes the nam command"
    config = tmp_path / "ckpt.toml"
    config.write_text(
        f'[ram]\ndir = "{tmp_path}/ram"\n[ssd]\ndir = "{tmp_path}/ssd"\nfsync = false\n'
        '[redundancy]\nscheme = "partner"\n[policy]\nkind = "always-ram"\n[runloop]\ninterval = 0.3\n'
        '[descriptors.xor]\nscheme = "xor"\nset_size = 4\nlevel = "ssd"\nevery = 0\n'
    )
    halt = subprocess.run([NAM, "ckpt", "halt", tmp_path / "ssd", "--after", "4.0"], capture_output=True, text=True)
    assert halt.returncode == 0, halt.stderr
    out = mpirun(tmp_path, config, "loop", "1500", script="mpi_runloop.py")
    assert out.returncode == 0, out.stdout + out.stderr
    stop = next(line for line in out.stdout.splitlines() if line.startswith("stopping at step"))
    assert "halted by" in stop, out.stdout
    step = int(stop.split()[3])
    taken = [int(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("checkpoint ")]
    assert 0 < len(taken) < step or "level None" in stop, out.stdout
    newest = step + 1000 if "level ssd" in stop else step
    assert "level ssd" in stop or "level None" in stop, stop

    out = mpirun(tmp_path, config, "restart", script="mpi_runloop.py")
    assert f"restored {newest} " in out.stdout and "ok=True" in out.stdout, out.stdout + out.stderr

    mpirun(tmp_path, config, "forget", str(newest), script="mpi_runloop.py")
    older = max(v for v in taken if v != newest)  # the interval fired before the halt (4 s)
    out = mpirun(tmp_path, config, "restart", script="mpi_runloop.py")
    assert f"restored {older} " in out.stdout and "ok=True" in out.stdout, out.stdout + out.stderr
