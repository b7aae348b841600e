"""Contexts from Python against real servers (TCP and shared memory): puts, gets, handle-less
operations and atomics on a context, completed by its own quiet; a context's quiet does not
wait for another context's operations to a stopped server; destroy and `with`."""

from __future__ import annotations

import os
import signal

import pytest

import nam
from conftest import TRANSPORTS, Server


def test_context_operations_complete_at_its_quiet(client):
    a = client.alloc(1 << 16)
    data = bytes(range(256)) * 16
    with client.context() as ctx:
        ctx.put(a, data, 0)
        ctx.put_nbi(a, data[::-1], 8192)
        out = bytearray(len(data))
        ctx.get_nbi(a, out, 0)
        ctx.fence()
        assert ctx.atomic(a, 32768, "fetch_add", 5) == 0
        assert ctx.atomic(a, 32768, "add", 2) == 5
        assert ctx.atomic(a, 32776, "set", -4, type="i32") == 0
        assert ctx.atomic(a, 32776, "fetch", type="i32") == -4
        assert ctx.atomic(a, 32768, "compare_swap", 99, compare=7) == 7
        ctx.quiet()
        assert bytes(out) == data
        assert ctx.get_bytes(a, len(data), 8192) == data[::-1]
        back = bytearray(len(data))
        ctx.get(a, back, 0)
        assert bytes(back) == data
        assert not ctx.destroyed
    assert ctx.destroyed
    assert client.atomic(a, 32768, "fetch") == 99
    with pytest.raises(nam.InvalidArgumentError):
        ctx.put(a, b"x", 0)
    with pytest.raises(nam.MisalignedError):
        client.context().atomic(a, 4, "fetch_add", 1)
    with pytest.raises(nam.OutOfBoundsError):
        client.context().put(a, b"xy", (1 << 16) - 1)
    client.free(a)


@pytest.mark.parametrize("transports", TRANSPORTS, ids=["tcp", "shm"])
def test_a_contexts_quiet_does_not_wait_for_another_context(transports):
    slow, fast = Server(transports, "--capacity", "16MiB"), Server(transports, "--capacity", "16MiB")
    try:
        c = nam.Client([slow.address, fast.address], transports=transports, timeout=1.5, connect_timeout=5.0)
        stuck, free = c.alloc(1 << 16, server=0), c.alloc(1 << 16, server=1)
        a, b = c.context(), c.context()
        old = bytes(i % 251 for i in range(16384))
        new = bytes((i % 241) ^ 0x5A for i in range(16384))
        os.kill(slow.process.pid, signal.SIGSTOP)
        try:
            a.put(stuck, old, 0)
            b.put(free, new, 0)
            b.quiet()  # context B waits for its own put only
            assert b.get_bytes(free, len(new), 0) == new
            if c.map(stuck) is None:
                # Over the network the stopped server cannot answer: A's quiet times out.
                with pytest.raises(nam.TimeoutError):
                    a.quiet()
            else:
                a.quiet()  # mapped memory: done without the server
        finally:
            os.kill(slow.process.pid, signal.SIGCONT)
        a.put(stuck, old, 0)
        a.quiet()
        assert a.get_bytes(stuck, len(old), 0) == old
        a.destroy()
        b.destroy()
    finally:
        slow.stop()
        fast.stop()
