"""nam.farmem: the explicit cache and numpy arrays over paged regions."""

from __future__ import annotations

import numpy as np
import pytest

import nam
import nam.farmem


def test_cache_reserve_write_read_flush(server):
    c = server.client()
    cache = nam.farmem.Cache(c, 64 << 20, 1 << 20)
    assert cache.far_bytes == 64 << 20
    addr = cache.reserve(8 << 20)
    x = np.random.default_rng(2).integers(0, 1 << 62, size=(8 << 20) // 8, dtype=np.uint64)
    # Larger than the local budget: lines are evicted and written back on the way.
    cache.write(addr, x)
    y = np.empty_like(x)
    cache.read(addr, y)
    np.testing.assert_array_equal(x, y)
    cache.flush()
    stats = cache.stats()
    assert stats["evictions"] > 0 and stats["writebacks"] > 0
    cache.invalidate()
    z = np.zeros(1024, dtype=np.uint64)
    cache.read_bulk(addr + 8 * 4096, z)
    np.testing.assert_array_equal(z, x[4096 : 4096 + 1024])
    cache.write_bulk(addr, np.zeros(1024, dtype=np.uint64))
    cache.read(addr, z)
    assert not z.any()


def test_cache_errors(server):
    c = server.client()
    with pytest.raises(nam.BudgetTooSmallError) as e:
        nam.farmem.Cache(c, 64 << 20, 1)
    assert e.value.status == nam.ERR_BUDGET_TOO_SMALL and str(e.value)
    cache = nam.farmem.Cache(c, 1 << 20, 256 << 10)
    with pytest.raises(nam.OutOfBoundsError):
        cache.read(1 << 20, bytearray(8))


@pytest.mark.parametrize("fault_mode", ["thread", "signal"])
def test_array_over_paged_region(server, fault_mode):
    c = server.client()
    # 8 MiB of doubles in a 1 MiB local budget: sweeps fault pages in and evict them.
    a = nam.farmem.array((1024, 1024), np.float64, local_bytes=1 << 20, client=c, fault_mode=fault_mode)
    assert a.shape == (1024, 1024) and a.dtype == np.float64
    assert not a.any()
    a[:] = np.arange(1024.0)[:, None]
    assert a.sum() == 1024 * (1023 * 1024 / 2)
    region = a.base
    assert isinstance(region, nam.farmem.Region)
    assert region.resident_pages * region.page_bytes <= 1 << 20
    region.flush()
    region.evict_all()
    assert a[1000, 5] == 1000.0
    assert region.stats()["evictions"] > 0


def test_array_from_environment(server, monkeypatch):
    monkeypatch.setenv("NAM_SERVERS", server.address)
    monkeypatch.setenv("NAM_TRANSPORTS", server.transports)
    a = nam.farmem.array(1000, np.int32, local_bytes=1 << 20)
    a[:] = 7
    assert int(a.sum()) == 7000


def test_region_errors(server):
    c = server.client()
    with pytest.raises(nam.BudgetTooSmallError):
        nam.farmem.Region(c, 1 << 20, 4096)
    with pytest.raises(nam.InvalidArgumentError):
        nam.farmem.Region(c, 1 << 20, 1 << 20, fault_mode="sometimes")
