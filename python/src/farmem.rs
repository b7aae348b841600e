//! `nam.farmem`: far memory for Python. `Cache` is the explicit way in (reads and writes at
//! far addresses through a local cache, `nam_farmem::FarMemory`); `Region` is the
//! transparent way in (a paged region, `nam_farmem::PagedRegion`, whose pages are fetched on
//! first touch), exported as a writable buffer so that `nam.farmem.array` is a numpy array
//! over far memory.

use crate::buffer::{fill, Borrowed};
use crate::client::PyClient;
use crate::errors::{invalid, OrRaise};
use nam_farmem::{FarConfig, FarMemory, FaultMode, PagedRegion, PagerConfig, Stats};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::os::raw::c_int;
use std::sync::Mutex;

/// The counters of a cache or region as a dict (name -> count).
fn stats_dict<'py>(py: Python<'py>, s: Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let fields = [
        ("hits", s.hits),
        ("misses", s.misses),
        ("merged", s.merged),
        ("prefetches", s.prefetches),
        ("prefetch_hits", s.prefetch_hits),
        ("prefetch_wasted", s.prefetch_wasted),
        ("evictions", s.evictions),
        ("writebacks", s.writebacks),
        ("bypassed", s.bypassed),
        ("in_place", s.in_place),
        ("full_line_writes", s.full_line_writes),
        ("write_faults", s.write_faults),
        ("inflight_max", s.inflight_max),
    ];
    for (name, value) in fields {
        d.set_item(name, value)?;
    }
    Ok(d)
}

/// Far memory reached explicitly: `far_bytes` of address space on the client's servers,
/// cached in `local_bytes` of this process's memory (set-associative, write-back). Reserve
/// ranges with `reserve`, move bytes with `read`/`write`, and `flush` before another
/// process reads the servers' copy.
#[pyclass(module = "nam.farmem", name = "Cache", frozen)]
pub struct PyCache {
    far: Mutex<FarMemory>,
}

impl PyCache {
    /// Runs `f` on the cache with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut FarMemory) -> nam_farmem::Result<T> + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| {
            // A panic inside far memory poisons the lock; the cache's state is then unknown.
            let mut far =
                self.far.lock().map_err(|_| invalid("the far-memory cache failed in an earlier call".into()))?;
            f(&mut far).or_raise()
        })
    }
}

#[pymethods]
impl PyCache {
    #[new]
    #[pyo3(signature = (client, far_bytes, local_bytes, *, line_bytes=None, ways=None))]
    fn new(
        py: Python<'_>,
        client: &PyClient,
        far_bytes: u64,
        local_bytes: u64,
        line_bytes: Option<u64>,
        ways: Option<usize>,
    ) -> PyResult<PyCache> {
        let mut config = FarConfig::new(far_bytes, local_bytes);
        if let Some(line_bytes) = line_bytes {
            config.line_bytes = line_bytes;
        }
        if let Some(ways) = ways {
            config.ways = ways;
        }
        let client = client.inner.clone();
        let far = py.allow_threads(|| FarMemory::new(client, config)).or_raise()?;
        Ok(PyCache { far: Mutex::new(far) })
    }

    /// Bytes of far address space.
    #[getter]
    fn far_bytes(&self) -> PyResult<u64> {
        Ok(self.far.lock().map_err(|_| invalid("the far-memory cache failed in an earlier call".into()))?.far_bytes())
    }

    /// Reserves `size` bytes of far address space; returns their far address.
    fn reserve(&self, py: Python<'_>, size: u64) -> PyResult<u64> {
        self.with(py, |far| far.reserve(size))
    }

    /// Fills `out` (a writable contiguous buffer) with the bytes at far address `addr`.
    fn read(&self, py: Python<'_>, addr: u64, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        let bytes = out.as_mut_slice();
        self.with(py, |far| far.read(addr, bytes))
    }

    /// Writes `data` (any contiguous buffer) at far address `addr` (into the cache; `flush`
    /// writes it back).
    fn write(&self, py: Python<'_>, addr: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.with(py, |far| far.write(addr, bytes))
    }

    /// As `read`, streaming whole lines past the cache (for sweeps over large arrays).
    fn read_bulk(&self, py: Python<'_>, addr: u64, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        let bytes = out.as_mut_slice();
        self.with(py, |far| far.read_bulk(addr, bytes))
    }

    /// As `write`, streaming whole lines past the cache.
    fn write_bulk(&self, py: Python<'_>, addr: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.with(py, |far| far.write_bulk(addr, bytes))
    }

    /// Writes every dirty line back to the servers.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |far| far.flush())
    }

    /// Writes dirty lines back and empties the cache, so the next reads see the servers' copy.
    fn invalidate(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |far| far.invalidate())
    }

    /// Hit, miss, eviction and write-back counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.with(py, |far| Ok(far.stats()))?;
        stats_dict(py, stats)
    }
}

/// A far-memory region reached with plain loads and stores: `size` bytes (rounded up to
/// pages) on the client's servers, at most `local_bytes` of them resident here. It exports a
/// writable buffer (`numpy.frombuffer(region, dtype)`); missing pages are fetched when
/// touched and evicted (written back if dirty) to stay within the budget.
///
/// `fault_mode="thread"` (the default here) serves faults in a handler thread, so system
/// calls that read the region (file writes, sockets) work; `"signal"` serves them in the
/// faulting thread, faster, but such system calls fail with EFAULT on missing pages.
#[pyclass(module = "nam.farmem", name = "Region", frozen)]
pub struct PyRegion {
    region: PagedRegion,
}

#[pymethods]
impl PyRegion {
    #[new]
    #[pyo3(signature = (client, size, local_bytes, *, fault_mode="thread"))]
    fn new(py: Python<'_>, client: &PyClient, size: u64, local_bytes: u64, fault_mode: &str) -> PyResult<PyRegion> {
        let mut config = PagerConfig::new(size, local_bytes);
        config.fault_mode = match fault_mode {
            "thread" => FaultMode::Thread,
            "signal" => FaultMode::Signal,
            other => return Err(invalid(format!("fault_mode={other:?}: expected 'thread' or 'signal'"))),
        };
        let client = client.inner.clone();
        let region = py.allow_threads(|| PagedRegion::new(client, config)).or_raise()?;
        Ok(PyRegion { region })
    }

    fn __len__(&self) -> usize {
        self.region.len() as usize
    }

    /// Bytes of one page (the unit of faults and evictions).
    #[getter]
    fn page_bytes(&self) -> u64 {
        self.region.page_bytes()
    }

    /// Pages resident in local memory now.
    #[getter]
    fn resident_pages(&self) -> usize {
        self.region.resident_pages()
    }

    /// Writes every dirty resident page back to the servers.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.region.flush()).or_raise()
    }

    /// Writes back and drops every resident page (the next touch fetches from the servers).
    fn evict_all(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.region.evict_all()).or_raise()
    }

    /// Fault, eviction and prefetch counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, self.region.stats())
    }

    /// Exports the region as a writable byte buffer.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let region = &slf.get().region;
        let (ptr, len) = (region.as_ptr(), region.len() as usize);
        // SAFETY: the mapping stays while the region (held by the view through `slf`) lives.
        fill(slf.as_any(), view, flags, ptr, len, false)
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
