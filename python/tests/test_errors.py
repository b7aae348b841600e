"""Bad input and misuse raise nam.NamError subclasses that carry the nam.h status."""

from __future__ import annotations

import numpy as np
import pytest

import nam


def check(error: nam.NamError, cls, code: int, name: str):
    assert isinstance(error, cls) and isinstance(error, nam.NamError)
    assert error.status == code
    assert error.status_name == name
    assert error.description
    assert str(error), "never an empty message"


def test_every_status_has_a_subclass():
    assert nam.OutOfBoundsError.__mro__[1] is nam.NamError
    assert nam.ERR_OUT_OF_BOUNDS == -2 and nam.ERR_FREED == -4
    assert issubclass(nam.NamError, Exception)


def test_out_of_bounds_put_and_get(client):
    a = client.alloc(64)
    with pytest.raises(nam.OutOfBoundsError) as e:
        client.put(a, np.zeros(9, dtype=np.float64))
    check(e.value, nam.OutOfBoundsError, nam.ERR_OUT_OF_BOUNDS, "NAM_ERR_OUT_OF_BOUNDS")
    assert "outside the 64-byte allocation" in str(e.value)
    with pytest.raises(nam.OutOfBoundsError):
        client.get(a, bytearray(8), 60)
    with pytest.raises(nam.OutOfBoundsError):
        client.get_nb(a, bytearray(65))
    client.free(a)


def test_freed_handle(client):
    a = client.alloc(64)
    client.free(a)
    with pytest.raises(nam.FreedError) as e:
        client.put(a, b"x")
    check(e.value, nam.FreedError, nam.ERR_FREED, "NAM_ERR_FREED")
    with pytest.raises(nam.FreedError):
        client.get(a, bytearray(1))
    with pytest.raises(nam.FreedError):
        client.fetch_add(a, 0, 1)
    with pytest.raises(nam.FreedError):
        client.free(a)


def test_misaligned_atomic(client):
    a = client.alloc(64)
    with pytest.raises(nam.MisalignedError) as e:
        client.fetch_add(a, 4, 1)
    check(e.value, nam.MisalignedError, nam.ERR_MISALIGNED, "NAM_ERR_MISALIGNED")
    client.free(a)


def test_buffers_that_cannot_be_used(client):
    a = client.alloc(4096)
    # A get needs a writable buffer.
    with pytest.raises(nam.InvalidArgumentError) as e:
        client.get(a, b"immutable")
    check(e.value, nam.InvalidArgumentError, nam.ERR_INVALID_ARGUMENT, "NAM_ERR_INVALID_ARGUMENT")
    assert "writable" in str(e.value)
    # A strided view is not one contiguous byte range.
    with pytest.raises(nam.InvalidArgumentError) as e:
        client.put(a, np.arange(16.0)[::2])
    assert "contiguous" in str(e.value)
    with pytest.raises(nam.InvalidArgumentError):
        client.put(a, 42)
    with pytest.raises(nam.InvalidArgumentError):
        client.wait_until(a, 0, 1, "~")
    with pytest.raises(nam.InvalidArgumentError):
        client.put_signal(a, b"x", 0, a, 8, 1, op="mul")
    client.free(a)


def test_named_allocations(client, server):
    with pytest.raises(nam.NameNotFoundError) as e:
        client.open(f"py-nothing-{server.transports}")
    check(e.value, nam.NameNotFoundError, nam.ERR_NAME_NOT_FOUND, "NAM_ERR_NAME_NOT_FOUND")
    a = client.alloc(64, name=f"py-twice-{server.transports}", shared=True)
    with pytest.raises(nam.NameExistsError):
        client.alloc(64, name=f"py-twice-{server.transports}", shared=True)
    client.free(a)


def test_zero_size_and_bad_alignment(client):
    with pytest.raises(nam.InvalidArgumentError):
        client.alloc(0)
    with pytest.raises(nam.InvalidArgumentError):
        client.alloc(64, align=3)


def test_no_servers(monkeypatch):
    monkeypatch.delenv("NAM_SERVERS", raising=False)
    with pytest.raises(nam.NoServersError) as e:
        nam.Client()
    check(e.value, nam.NoServersError, nam.ERR_NO_SERVERS, "NAM_ERR_NO_SERVERS")
    assert "NAM_SERVERS" in str(e.value)


def test_bad_server_list():
    with pytest.raises(nam.ConfigError) as e:
        nam.Client("not an address")
    check(e.value, nam.ConfigError, nam.ERR_CONFIG, "NAM_ERR_CONFIG")
    with pytest.raises(nam.InvalidArgumentError):
        nam.Client([1, 2])
    with pytest.raises(nam.InvalidArgumentError):
        nam.Client("127.0.0.1:1", timeout=-1.0)


def test_unreachable_server():
    with pytest.raises(nam.ConnectError) as e:
        nam.Client("127.0.0.1:1", transports="tcp", connect_timeout=1.0)
    check(e.value, nam.ConnectError, nam.ERR_CONNECT, "NAM_ERR_CONNECT")
