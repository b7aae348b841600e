"""Fixtures of the Python package's tests: real `nam serve` processes, as the Rust system
tests start them (crates/nam-cli/tests/common/mod.rs): `--listen 127.0.0.1:0`, the chosen
port read from the first line the server prints, and UCX_TLS choosing the transports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The environment .cargo/config.toml gives the Rust tests: UCX kept off huge pages (the
# far-memory tests of other suites reserve them) and quiet about unused variables.
for _key, _value in {
    "UCX_POSIX_HUGETLB_MODE": "n",
    "UCX_SYSV_HUGETLB_MODE": "n",
    "UCX_ALLOC_PRIO": "md:sysv,md:posix,thp,md:*,mmap,heap",
    "UCX_SELF_ALLOC": "thp,md,mmap,heap",
    "UCX_TCP_ALLOC": "thp,md,mmap,heap",
    "UCX_CMA_ALLOC": "thp,mmap,heap",
    "UCX_WARN_UNUSED_ENV_VARS": "n",
}.items():
    os.environ.setdefault(_key, _value)

# UCX over TCP, and UCX shared memory (the connection manager needs tcp listed).
TRANSPORTS = ["tcp", "sm,self,tcp"]


def nam_binary() -> Path:
    """The `nam` binary: $NAM_BIN, else target/debug/nam, built with cargo if missing."""
    if "NAM_BIN" in os.environ:
        return Path(os.environ["NAM_BIN"])
    path = REPO / "target" / "debug" / "nam"
    if not path.exists():
        subprocess.run(["cargo", "build", "-p", "nam-cli"], cwd=REPO, check=True)
    return path


class Server:
    """A `nam serve` child process, killed at the end of its fixture's scope."""

    def __init__(self, transports: str, *extra: str):
        env = dict(os.environ, UCX_TLS=transports)
        self.transports = transports
        self.process = subprocess.Popen(
            [str(nam_binary()), "serve", "--listen", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            env=env,
            text=True,
        )
        line = self.process.stdout.readline()
        match = re.search(r"\b(\d+\.\d+\.\d+\.\d+:\d+)\b", line)
        if not match:
            self.stop()
            raise RuntimeError(f"nam serve did not print its address: {line!r}")
        self.address = match.group(1)

    def client(self, **kwargs):
        """A client of this server on the same transports, with short deadlines."""
        import nam

        kwargs.setdefault("timeout", 5.0)
        kwargs.setdefault("connect_timeout", 5.0)
        return nam.Client(self.address, transports=self.transports, **kwargs)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="session", params=TRANSPORTS, ids=["tcp", "shm"])
def server(request):
    """A server per transport; tests using it run once on each."""
    s = Server(request.param, "--capacity", "256MiB")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def shm_server():
    """A same-host server on the shared-memory path (for mapped allocations)."""
    s = Server("sm,self,tcp", "--capacity", "256MiB")
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return server.client()
