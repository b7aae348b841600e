"""The program of docs/python.md: start `nam serve --listen 127.0.0.1:13337` first, then
`NAM_SERVERS=127.0.0.1:13337 .venv/bin/python python/examples/quickstart.py`."""

import threading

import numpy as np

import nam
import nam.farmem

client = nam.Client()  # servers from NAM_SERVERS; or nam.Client("host:port,host:port")

# Allocate 8 MiB on a server and move a numpy array there and back, without copies in Python.
a = client.alloc(8 << 20, name="quickstart/grid", shared=True)  # others: client.open("quickstart/grid")
grid = np.random.default_rng(0).random((1024, 1024))
client.put_sync(a, grid)  # visible at the server when it returns
back = np.empty_like(grid)
client.get(a, back)
assert (back == grid).all()

# Non-blocking: start both halves, then wait.
top, bottom = np.empty((512, 1024)), np.empty((512, 1024))
requests = [client.get_nb(a, top), client.get_nb(a, bottom, offset=top.nbytes)]
for r in requests:
    r.wait()
assert (np.vstack([top, bottom]) == grid).all()

# 64-bit atomics and a signal: a put whose arrival another thread waits for.
counter = client.alloc(64)
client.put_sync(counter, np.zeros(8, dtype=np.uint64))
print("fetch_add returned", client.fetch_add(counter, 0, 1))
waiter = threading.Thread(target=lambda: print("signal word", client.wait_until(counter, 8, 1, "==", timeout=5)))
waiter.start()
client.put_signal(counter, b"payload!", 16, counter, 8, 1, op="set")
waiter.join()

# Global addresses name bytes on any server, for any client of the same servers.
address = client.global_address(a, 8)
word = np.empty(1, dtype=np.float64)
client.get_global(address, word)
assert word[0] == grid.flat[1]

# Errors are typed and carry nam.h's status.
try:
    client.put(counter, np.zeros(9, dtype=np.uint64))  # 72 bytes into 64
except nam.OutOfBoundsError as e:
    print(f"{e.status_name} ({e.status}): {e}")

# A same-host server on shared memory: the allocation as a numpy array, in place.
view = nam.mapped_array(client, a, np.float64, shape=(1024, 1024))
if view is not None:
    print("mapped in place; first row sum", view[0].sum())
    del view

# Far memory: a 64 MiB numpy array with at most 8 MiB resident here.
far = nam.farmem.array((8192, 1024), np.float64, local_bytes=8 << 20, client=client)
far[:] = 1.0
print("far array sum", far.sum(), "resident pages", far.base.resident_pages)

# The explicit cache: reserve far address space, read and write through 4 MiB of cache.
cache = nam.farmem.Cache(client, 64 << 20, 4 << 20)
addr = cache.reserve(grid.nbytes)
cache.write(addr, grid)
cache.flush()
cache.read(addr, back)
assert (back == grid).all()

client.free(counter)
client.free(a)
print("done")
