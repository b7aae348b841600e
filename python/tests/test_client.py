"""nam.Client against real servers: allocations, put/get of buffer-protocol objects,
non-blocking requests, atomics, signals, global addresses and mapped views."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import nam


def test_put_get_numpy_roundtrip(client):
    a = client.alloc(1 << 20)
    assert a.size == 1 << 20 and len(a) == 1 << 20
    x = np.random.default_rng(1).random(1 << 17)
    client.put(a, x)
    y = np.empty_like(x)
    client.get(a, y)
    np.testing.assert_array_equal(x, y)
    client.free(a)


def test_put_get_other_buffers_and_offsets(client):
    a = client.alloc(4096)
    client.put(a, b"hello", 10)
    client.put_sync(a, bytearray(b"world"), offset=15)
    client.put(a, memoryview(b"!!"), offset=20)
    assert client.get_bytes(a, 12, 10) == b"helloworld!!"
    out = bytearray(5)
    client.get(a, out, offset=15)
    assert out == b"world"
    # A 2-D array is one contiguous range; a get fills exactly as many bytes as it holds.
    m = np.arange(12, dtype=np.int32).reshape(3, 4)
    client.put(a, m, 1024)
    back = np.zeros((3, 4), dtype=np.int32)
    client.get(a, back, 1024)
    np.testing.assert_array_equal(m, back)
    client.free(a)


def test_servers_from_environment(server, monkeypatch):
    monkeypatch.setenv("NAM_SERVERS", server.address)
    monkeypatch.setenv("NAM_TRANSPORTS", server.transports)
    c = nam.Client()
    assert c.servers == [server.address]
    a = c.alloc(64)
    c.put(a, b"x" * 64)
    assert c.get_bytes(a, 64) == b"x" * 64
    c.free(a)


def test_servers_as_list(server):
    c = nam.Client([server.address], transports=server.transports)
    assert c.servers == [server.address]


def test_shared_allocation_opened_by_name(server):
    owner, other = server.client(), server.client()
    a = owner.alloc(256, name=f"py-shared-{server.transports}", shared=True)
    assert a.shared
    owner.put_sync(a, b"from owner")
    b = other.open(f"py-shared-{server.transports}")
    assert b.size == 256
    assert other.get_bytes(b, 10) == b"from owner"
    other.free(b)
    owner.free(a)


def test_nonblocking_requests(client):
    a = client.alloc(1 << 16)
    data = np.arange(1 << 13, dtype=np.uint64)
    r = client.put_nb(a, data)
    r.wait()
    assert r.done
    client.flush()
    out = np.zeros_like(data)
    r = client.get_nb(a, out)
    while not r.test():
        pass
    assert r.done
    np.testing.assert_array_equal(out, data)
    # Many in flight at once, completed in any order.
    outs = [np.zeros(1024, dtype=np.uint64) for _ in range(8)]
    reqs = [client.get_nb(a, o, i * 8192) for i, o in enumerate(outs)]
    for r in reversed(reqs):
        r.wait()
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o, data[i * 1024 : (i + 1) * 1024])
    client.free(a)


def test_atomics(client):
    a = client.alloc(64)
    client.put_sync(a, np.zeros(8, dtype=np.uint64))
    assert client.fetch_add(a, 8, 5) == 0
    assert client.fetch_add(a, 8, 2) == 5
    assert client.fetch(a, 8) == 7
    assert client.swap(a, 8, 100) == 7
    assert client.compare_swap(a, 8, 99, 1) == 100  # no match: unchanged
    assert client.compare_swap(a, 8, 100, 1) == 100
    assert client.fetch(a, 8) == 1
    client.free(a)


def test_signal_wakes_a_waiter_in_another_thread(server):
    writer, reader = server.client(), server.client()
    data = writer.alloc(4096, name=f"py-signal-{server.transports}", shared=True)
    flag = reader.open(f"py-signal-{server.transports}")
    writer.put_sync(data, np.zeros(1, dtype=np.uint64), 4088)
    seen = {}

    def wait():
        # Waits with the GIL released: the main thread's put_signal runs meanwhile.
        seen["word"] = reader.wait_until(flag, 4088, 3, ">=", timeout=10.0)
        seen["data"] = reader.get_bytes(flag, 7)

    t = threading.Thread(target=wait)
    t.start()
    writer.put_signal(data, b"payload", 0, data, 4088, 3, op="set")
    t.join(20)
    assert not t.is_alive()
    assert seen == {"word": 3, "data": b"payload"}
    writer.put_signal(data, b"more", 8, data, 4088, 2, op="add")
    assert reader.fetch(flag, 4088) == 5
    reader.free(flag)
    writer.free(data)


def test_wait_until_times_out_with_last_value(client):
    a = client.alloc(64)
    client.put_sync(a, np.full(1, 7, dtype=np.uint64))
    with pytest.raises(nam.WaitTimeoutError) as e:
        client.wait_until(a, 0, 8, "==", timeout=0.05)
    assert e.value.status == nam.ERR_WAIT_TIMEOUT
    assert "last value 7" in str(e.value)
    client.free(a)


def test_global_addresses_across_clients(server):
    first, second = server.client(), server.client()
    a = first.alloc(128, name=f"py-global-{server.transports}", shared=True)
    first.put_sync(a, b"global!!", 16)
    address = first.global_address(a, 16)
    assert isinstance(address, int) and address > 0
    b, offset = second.resolve(address)
    assert offset == 16 and b.size == 128
    out = bytearray(8)
    second.get_global(address, out)
    assert out == b"global!!"
    second.put_global_sync(first.global_address(a, 32), b"back")
    assert first.get_bytes(a, 4, 32) == b"back"
    word = first.global_address(a, 64)
    assert second.fetch_add_global(word, 4) == 0
    assert second.compare_swap_global(word, 4, 9) == 4
    assert first.fetch(a, 64) == 9
    second.free(b)
    first.free(a)


def test_mapped_array_over_same_host_allocation(shm_server):
    c = shm_server.client()
    a = c.alloc(1 << 16)
    assert a.direct
    view = nam.mapped_array(c, a, np.uint32)
    assert view.shape == ((1 << 16) // 4,)
    view[:] = np.arange(view.size, dtype=np.uint32)
    # Stores into the view are the allocation's bytes: a get sees them.
    out = np.empty(16, dtype=np.uint32)
    c.get(a, out, 4 * 100)
    np.testing.assert_array_equal(out, np.arange(100, 116, dtype=np.uint32))
    c.put(a, np.full(4, 0xABCD, dtype=np.uint32), 0)
    assert list(view[:4]) == [0xABCD] * 4
    assert len(c.map(a, 16, 32)) == 32
    with pytest.raises(nam.OutOfBoundsError):
        c.map(a, 1 << 16, 1)
    del view
    c.free(a)


def test_mapped_array_only_where_the_path_allows(server):
    c = server.client()
    a = c.alloc(4096)
    # Over TCP the allocation is reached through UCX: no view, use get/put.
    assert a.direct == (server.transports != "tcp")
    view = nam.mapped_array(c, a, np.uint8, shape=(64, 64))
    assert (view is None) == (server.transports == "tcp")
    if view is not None:
        assert view.shape == (64, 64) and view.base is not None
        del view
    c.free(a)
