"""The complete program of docs/python.md runs as printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "python" / "examples" / "quickstart.py"


def test_docs_show_the_example_verbatim():
    program = EXAMPLE.read_text()
    body = program[program.index("import threading") :]
    assert body in (REPO / "docs" / "python.md").read_text()


def test_quickstart_runs(server):
    env = dict(os.environ, NAM_SERVERS=server.address, NAM_TRANSPORTS=server.transports)
    out = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NAM_ERR_OUT_OF_BOUNDS (-2)" in out.stdout
    assert out.stdout.strip().endswith("done")
