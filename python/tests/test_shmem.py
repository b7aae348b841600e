"""OpenSHMEM's one-sided calls from Python against real servers (TCP and shared memory):
typed and bitwise atomics on 32- and 64-bit words, test and the multi-word waits (timeouts
included), put/get and fetching atomics without handles completed by quiet, and a group's
barrier and broadcast."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import nam


def test_atomics_on_every_word_type(client):
    a = client.alloc(4096)
    assert client.atomic(a, 0, "set", 5, type="u64") == 0
    assert client.atomic(a, 0, "fetch_add", 3) == 5
    assert client.atomic(a, 0, "fetch") == 8
    assert client.atomic(a, 0, "compare_swap", 9, compare=8) == 8
    assert client.atomic(a, 0, "fetch") == 9
    # Bitwise, 64-bit.
    client.atomic(a, 8, "set", 0b1100)
    assert client.atomic(a, 8, "fetch_and", 0b0110) == 0b1100
    assert client.atomic(a, 8, "fetch_or", 0b0001) == 0b0100
    assert client.atomic(a, 8, "fetch_xor", 0b1111) == 0b0101
    assert client.atomic(a, 8, "fetch") == 0b1010
    # 32-bit signed and unsigned side by side: the neighbour is untouched.
    client.atomic(a, 16, "set", -2, type="i32")
    client.atomic(a, 20, "set", 0xFFFF_FFFF, type="u32")
    assert client.atomic(a, 16, "fetch_inc", type="i32") == -2
    assert client.atomic(a, 16, "fetch", type="i32") == -1
    assert client.atomic(a, 20, "fetch_add", 1, type="u32") == 0xFFFF_FFFF
    assert client.atomic(a, 20, "fetch", type="u32") == 0, "wraps at 32 bits"
    assert client.atomic(a, 16, "fetch", type="i32") == -1, "the neighbour of a 32-bit add changed"
    assert client.atomic(a, 16, "fetch", type="i64") == 0xFFFF_FFFF, "i32 -1 then u32 0, little-endian"
    with pytest.raises(nam.MisalignedError):
        client.atomic(a, 4, "add", 1)
    with pytest.raises(nam.InvalidArgumentError):
        client.atomic(a, 0, "add", -1, type="u64")
    with pytest.raises(nam.InvalidArgumentError):
        client.atomic(a, 0, "nand", 1)
    client.free(a)


def test_test_and_waits_time_out(client):
    a = client.alloc(64)
    for offset in (0, 24, 32):
        client.atomic(a, offset, "set", 0)
    client.atomic(a, 8, "set", 41)
    assert not client.test(a, 8, 42)
    assert client.test(a, 8, 42, "<")
    client.atomic(a, 16, "set", -1, type="i32")
    assert client.test(a, 16, 0, "<", type="i32")
    assert not client.test(a, 16, 0, "<", type="u32")
    start = time.monotonic()
    with pytest.raises(nam.WaitTimeoutError):
        client.wait_until(a, 8, 42, timeout=0.05)
    assert time.monotonic() - start >= 0.05
    with pytest.raises(nam.WaitTimeoutError):
        client.wait_until_all([(a, 0), (a, 8)], 41, timeout=0.05)
    client.atomic(a, 0, "set", 41)
    client.wait_until_all([(a, 0), (a, 8)], 41, timeout=1.0)
    assert client.wait_until_any([(a, 24), (a, 8)], 41) == 1
    assert client.wait_until_some([(a, 0), (a, 24), (a, 8)], 41) == [0, 2]
    with pytest.raises(nam.WaitTimeoutError):
        client.wait_until_any([(a, 24), (a, 32)], 1, timeout=0.05)
    client.free(a)


def test_waiters_in_other_threads_wake_on_the_signal(server):
    signaller = server.client()
    word = signaller.alloc(64, name="py-flag", shared=True)
    signaller.atomic(word, 0, "set", 0)
    signaller.atomic(word, 8, "set", 0)
    results = []

    def wait():
        c = server.client()
        view = c.open("py-flag")
        results.append(c.wait_until_any([(view, 0), (view, 8)], 1, ">=", timeout=10.0))

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    signaller.atomic(word, 8, "set", 1)
    for t in threads:
        t.join()
    assert results == [1, 1, 1]
    signaller.free(word)


def test_handle_less_puts_gets_and_fetching_atomics_complete_at_quiet(client):
    a = client.alloc(1 << 20)
    chunks = [np.full(1 << 16, i + 1, dtype=np.uint8) for i in range(4)]
    for i, chunk in enumerate(chunks):
        client.put_nbi(a, chunk, i << 16)
    client.quiet()
    backs = [np.zeros(1 << 16, dtype=np.uint8) for _ in range(4)]
    for i, back in enumerate(backs):
        client.get_nbi(a, back, i << 16)
    client.quiet()
    for chunk, back in zip(chunks, backs):
        np.testing.assert_array_equal(chunk, back)

    client.atomic(a, 0, "set", 10)
    client.atomic(a, 8, "set", 0)
    client.atomic(a, 16, "set", 0)
    fetches = [client.atomic_nbi(a, 0, "fetch_add", 1) for _ in range(32)]
    small = client.atomic_nbi(a, 8, "fetch_xor", 0xFF, type="u32")
    swapped = client.atomic_nbi(a, 16, "compare_swap", 5, compare=0, type="i64")
    with pytest.raises(nam.InvalidArgumentError):
        fetches[0].value  # noqa: B018  (not complete before the quiet)
    client.quiet()
    assert all(f.done for f in fetches)
    assert sorted(f.value for f in fetches) == list(range(10, 42))
    assert small.value == 0 and swapped.value == 0
    assert client.atomic(a, 8, "fetch", type="u32") == 0xFF
    assert client.atomic(a, 16, "fetch", type="i64") == 5
    with pytest.raises(nam.MisalignedError):
        client.atomic_nbi(a, 4, "fetch_add", 1)
    with pytest.raises(nam.InvalidArgumentError):
        client.atomic_nbi(a, 0, "add", 1)
    client.free(a)


def _ranks(server, name, ranks, body):
    """Runs `body(client, group, rank)` in one thread per rank; their results by rank."""
    results = [None] * ranks
    errors = []

    def run(rank):
        try:
            c = server.client()
            group = nam.Group(c, name, ranks, rank, chunk_bytes=4096)
            results[rank] = body(c, group, rank)
            group.close()
        except Exception as e:  # noqa: BLE001  (reported below with its rank)
            errors.append((rank, e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_barrier_and_broadcast(server):
    owner = server.client()
    board = owner.alloc(64, name="py-board", shared=True)
    owner.atomic(board, 0, "set", 0)

    def body(c, group, rank):
        view = c.open("py-board")
        if rank == 1:
            time.sleep(0.05)
        c.atomic(view, 0, "add", 1)
        c.quiet()
        group.barrier()
        seen = c.atomic(view, 0, "fetch")
        data = np.arange(1000, dtype=np.int32) if rank == 2 else np.zeros(1000, dtype=np.int32)
        group.broadcast(data, 2)
        text = bytearray(b"root!" if rank == 0 else b".....")
        group.broadcast(text, 0)
        return seen, data, bytes(text)

    for seen, data, text in _ranks(server, "py-group", 3, body):
        assert seen == 3, "a rank passed the barrier before every rank arrived"
        np.testing.assert_array_equal(data, np.arange(1000, dtype=np.int32))
        assert text == b"root!"
    owner.free(board)


def test_barrier_times_out_and_bad_groups_are_refused(server):
    c = server.client(timeout=0.3)
    group = nam.Group(c, "py-lonely", 2, 0, chunk_bytes=4096)
    start = time.monotonic()
    with pytest.raises(nam.WaitTimeoutError):
        group.barrier()
    assert time.monotonic() - start >= 0.3
    with pytest.raises(nam.InvalidArgumentError):
        group.broadcast(bytearray(8), 5)
    with pytest.raises(nam.NamError):
        nam.Group(c, "py-bad", 2, 2)
    group.close()
