//! `nam.Client`, `nam.Allocation`, `nam.Request` and `nam.Mapped`: the client library of
//! nam-client for Python. Every call that may wait (on the network or a server) releases the
//! GIL, so other Python threads run meanwhile.

use crate::buffer::{fill, AssertSend, Borrowed};
use crate::errors::{invalid, OrRaise};
use nam_client::config::parse_servers;
use nam_client::{AllocOptions, Allocation, Client, ClientConfig, Compare, GlobalAddress, Op, Signal, SignalOp};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::os::raw::c_int;
use std::sync::Arc;
use std::time::Duration;

/// An allocation on a memory server. Freed with `Client.free`; every use afterwards raises
/// `nam.FreedError`.
#[pyclass(module = "nam", name = "Allocation", frozen)]
pub struct PyAllocation {
    /// The client library's allocation.
    pub inner: Allocation,
}

#[pymethods]
impl PyAllocation {
    /// Size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.inner.size()
    }

    /// Handle on its server.
    #[getter]
    fn handle(&self) -> u64 {
        self.inner.handle()
    }

    /// Index of its server in the client's server list.
    #[getter]
    fn server(&self) -> usize {
        self.inner.server()
    }

    /// Whether other clients of the tenant may open it by name.
    #[getter]
    fn shared(&self) -> bool {
        self.inner.is_shared()
    }

    /// Whether it survives the disconnect of every holder until freed.
    #[getter]
    fn persistent(&self) -> bool {
        self.inner.is_persistent()
    }

    /// Whether this process reaches it with plain loads and stores (a same-host server on
    /// the shared-memory path); then `Client.map` views it in place.
    #[getter]
    fn direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn __len__(&self) -> usize {
        self.inner.size() as usize
    }

    fn __repr__(&self) -> String {
        format!(
            "<nam.Allocation handle={} size={} server={}{}>",
            self.inner.handle(),
            self.inner.size(),
            self.inner.server(),
            if self.inner.is_shared() { " shared" } else { "" }
        )
    }
}

/// A non-blocking put or get in flight (`Client.put_nb`, `Client.get_nb`). It holds the
/// buffer until the operation completes; `wait()` completes it, `test()` asks. Dropping it
/// waits for completion, so the buffer is never written after the request is gone.
#[pyclass(module = "nam", name = "Request", unsendable)]
pub struct PyRequest {
    // Field order matters: the operation is dropped (completed) before the buffer and the
    // client it borrows.
    op: Option<Op<'static>>,
    _buffer: Borrowed,
    _client: Arc<Client>,
}

#[pymethods]
impl PyRequest {
    /// Progresses once; True when the operation has completed (raises if it failed).
    fn test(&mut self) -> PyResult<bool> {
        match self.op.as_mut() {
            None => Ok(true),
            Some(op) => {
                let done = op.test().or_raise()?;
                if done {
                    self.op = None;
                }
                Ok(done)
            }
        }
    }

    /// Waits until the operation completes (at most the client's timeout); raises if it failed.
    fn wait(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(op) = self.op.take() else { return Ok(()) };
        let op = AssertSend(op);
        py.allow_threads(move || op.0.wait()).or_raise()
    }

    /// Whether the operation is known to have completed.
    #[getter]
    fn done(&self) -> bool {
        self.op.is_none()
    }
}

/// The bytes of a same-host allocation where they are mapped in this process, as a writable
/// buffer (`memoryview(m)`, `numpy.frombuffer(m, dtype)`): plain loads and stores, no copies.
/// It keeps the client alive; after the allocation is freed its bytes may belong to another
/// allocation, so drop every view before freeing.
#[pyclass(module = "nam", name = "Mapped", frozen)]
pub struct PyMapped {
    _client: Arc<Client>,
    ptr: usize,
    len: usize,
}

#[pymethods]
impl PyMapped {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Exports the mapping as a writable byte buffer.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let (ptr, len) = (slf.get().ptr as *mut u8, slf.get().len);
        // SAFETY: the mapping stays while the client (held by `slf`) lives.
        fill(slf.as_any(), view, flags, ptr, len, false)
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// A connection to one or more nam memory servers.
///
/// `Client()` reads the servers from `NAM_SERVERS` (and `NAM_TENANT`, `NAM_TOKEN`,
/// `NAM_TIMEOUT_MS`, ... as the Rust and C clients do); `Client("host:port,host:port")` or
/// `Client(["host:port", ...])` names them, the other `NAM_*` variables still applying.
#[pyclass(module = "nam", name = "Client", frozen)]
pub struct PyClient {
    /// The connected client, shared with far-memory objects and requests.
    pub inner: Arc<Client>,
    /// What operations without handles keep until the next quiet.
    pub held: std::sync::Mutex<crate::shmem::Held>,
}

fn seconds(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| invalid(format!("{what}={value} is not a number of seconds >= 0")))
}

fn config_of(
    servers: Option<&Bound<'_, PyAny>>,
    tenant: Option<String>,
    token: Option<String>,
    timeout: Option<f64>,
    connect_timeout: Option<f64>,
    transports: Option<String>,
) -> PyResult<ClientConfig> {
    let mut config = match servers {
        None => ClientConfig::from_env().or_raise()?,
        Some(servers) => {
            let list = if let Ok(text) = servers.downcast::<PyString>() {
                text.to_str()?.to_string()
            } else {
                let items: Vec<String> = servers.extract().map_err(|_| {
                    invalid(
                        "servers must be a 'host:port[,host:port...]' string or a list of 'host:port' strings".into(),
                    )
                })?;
                items.join(",")
            };
            let mut config = ClientConfig::new(parse_servers(&list).or_raise()?);
            config.apply_env().or_raise()?;
            config
        }
    };
    if let Some(tenant) = tenant {
        config.tenant = tenant;
    }
    if let Some(token) = token {
        config.token = token;
    }
    if let Some(timeout) = timeout {
        config.timeout = seconds(timeout, "timeout")?;
    }
    if let Some(timeout) = connect_timeout {
        config.connect_timeout = seconds(timeout, "connect_timeout")?;
    }
    if transports.is_some() {
        config.transports = transports;
    }
    Ok(config)
}

fn compare_of(text: &str) -> PyResult<Compare> {
    Ok(match text {
        "==" | "eq" => Compare::Eq,
        "!=" | "ne" => Compare::Ne,
        ">=" | "ge" => Compare::Ge,
        ">" | "gt" => Compare::Gt,
        "<=" | "le" => Compare::Le,
        "<" | "lt" => Compare::Lt,
        other => return Err(invalid(format!("compare={other:?}: expected one of == != >= > <= <"))),
    })
}

fn signal_op_of(text: &str) -> PyResult<SignalOp> {
    match text {
        "set" => Ok(SignalOp::Set),
        "add" => Ok(SignalOp::Add),
        other => Err(invalid(format!("op={other:?}: expected 'set' or 'add'"))),
    }
}

impl PyClient {
    /// What operations without handles hold (a panic elsewhere leaves it usable).
    pub fn held(&self) -> std::sync::MutexGuard<'_, crate::shmem::Held> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the client with the GIL released.
    fn blocking<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Client) -> nam_client::Result<T> + Send,
    ) -> PyResult<T> {
        let client = &*self.inner;
        py.allow_threads(|| f(client)).or_raise()
    }

    /// Starts a non-blocking operation on `buffer`, which the request keeps.
    fn request(
        &self,
        mut buffer: Borrowed,
        start: impl FnOnce(&'static Client, &'static mut [u8]) -> nam_client::Result<Op<'static>>,
    ) -> PyResult<PyRequest> {
        let client = Arc::clone(&self.inner);
        let bytes = buffer.as_mut_slice();
        // SAFETY: the request owns both the buffer view and a reference to the client, and
        // drops (completes) the operation before either, so the borrows never outlive them.
        let (client_ref, bytes): (&'static Client, &'static mut [u8]) =
            unsafe { (&*Arc::as_ptr(&client), std::slice::from_raw_parts_mut(bytes.as_mut_ptr(), bytes.len())) };
        let op = start(client_ref, bytes).or_raise()?;
        Ok(PyRequest { op: Some(op), _buffer: buffer, _client: client })
    }
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (servers=None, *, tenant=None, token=None, timeout=None, connect_timeout=None, transports=None))]
    fn new(
        py: Python<'_>,
        servers: Option<&Bound<'_, PyAny>>,
        tenant: Option<String>,
        token: Option<String>,
        timeout: Option<f64>,
        connect_timeout: Option<f64>,
        transports: Option<String>,
    ) -> PyResult<PyClient> {
        let config = config_of(servers, tenant, token, timeout, connect_timeout, transports)?;
        let client = py.allow_threads(|| Client::connect(config)).or_raise()?;
        Ok(PyClient { inner: Arc::new(client), held: Default::default() })
    }

    /// The servers, as 'host:port' strings, in the order allocations index them.
    #[getter]
    fn servers(&self) -> Vec<String> {
        self.inner.config().servers.iter().map(|s| s.to_string()).collect()
    }

    /// Allocates `size` bytes. `name` with `shared=True` lets other clients of the tenant
    /// `open` it; `persistent=True` keeps it after every holder disconnects; `server` picks
    /// a server by index (default: round-robin); `align` is a power of two (0: 64 bytes).
    #[pyo3(signature = (size, *, name=None, shared=false, persistent=false, align=0, server=None))]
    // Python's keyword arguments: each option of AllocOptions is one.
    #[allow(clippy::too_many_arguments)]
    fn alloc(
        &self,
        py: Python<'_>,
        size: u64,
        name: Option<String>,
        shared: bool,
        persistent: bool,
        align: u64,
        server: Option<usize>,
    ) -> PyResult<PyAllocation> {
        let options = AllocOptions { align, shared, persistent, name, server };
        let inner = self.blocking(py, |c| c.alloc(size, &options))?;
        Ok(PyAllocation { inner })
    }

    /// Opens the shared allocation `name` of this client's tenant.
    fn open(&self, py: Python<'_>, name: &str) -> PyResult<PyAllocation> {
        let inner = self.blocking(py, |c| c.open(name))?;
        Ok(PyAllocation { inner })
    }

    /// Frees the allocation (this client's reference); a second free raises `FreedError`.
    fn free(&self, py: Python<'_>, allocation: &PyAllocation) -> PyResult<()> {
        self.blocking(py, |c| c.free(&allocation.inner))
    }

    /// Copies `data` (any contiguous buffer: bytes, bytearray, memoryview, numpy array) to
    /// `offset` of `allocation`; returns when `data` may be reused.
    #[pyo3(signature = (allocation, data, offset=0))]
    fn put(&self, py: Python<'_>, allocation: &PyAllocation, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.blocking(py, |c| c.put(&allocation.inner, offset, bytes))
    }

    /// As `put`, returning when the data is visible at the server.
    #[pyo3(signature = (allocation, data, offset=0))]
    fn put_sync(
        &self,
        py: Python<'_>,
        allocation: &PyAllocation,
        data: &Bound<'_, PyAny>,
        offset: u64,
    ) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.blocking(py, |c| c.put_sync(&allocation.inner, offset, bytes))
    }

    /// Fills `out` (a writable contiguous buffer, e.g. a numpy array) with the bytes at
    /// `offset` of `allocation`, as many as `out` holds.
    #[pyo3(signature = (allocation, out, offset=0))]
    fn get(&self, py: Python<'_>, allocation: &PyAllocation, out: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        let bytes = out.as_mut_slice();
        self.blocking(py, |c| c.get(&allocation.inner, offset, bytes))
    }

    /// The `size` bytes at `offset` of `allocation` as a new `bytes` object.
    #[pyo3(signature = (allocation, size, offset=0))]
    fn get_bytes<'py>(
        &self,
        py: Python<'py>,
        allocation: &PyAllocation,
        size: usize,
        offset: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut buffer = vec![0u8; size];
        let bytes = buffer.as_mut_slice();
        self.blocking(py, |c| c.get(&allocation.inner, offset, bytes))?;
        Ok(PyBytes::new(py, &buffer))
    }

    /// Starts a put of `data` and returns a `Request`; `data` must not change until it completes.
    #[pyo3(signature = (allocation, data, offset=0))]
    fn put_nb(&self, allocation: &PyAllocation, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<PyRequest> {
        let data = Borrowed::new(data, false)?;
        self.request(data, |c, bytes| c.put_nb(&allocation.inner, offset, bytes))
    }

    /// Starts a get into `out` and returns a `Request`; read `out` after it completes.
    #[pyo3(signature = (allocation, out, offset=0))]
    fn get_nb(&self, allocation: &PyAllocation, out: &Bound<'_, PyAny>, offset: u64) -> PyResult<PyRequest> {
        let out = Borrowed::new(out, true)?;
        self.request(out, |c, bytes| c.get_nb(&allocation.inner, offset, bytes))
    }

    /// A new context (`shmem_ctx_create`): an independent stream of operations whose
    /// `quiet()` waits for its own operations only. Destroy it with `destroy()` or a `with`
    /// block.
    fn context(&self) -> PyResult<crate::context::PyContext> {
        crate::context::PyContext::new(self)
    }

    /// Remote completion of every operation issued so far, on every server (the same as
    /// `quiet()`).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        crate::shmem::quiet(py, self)
    }

    /// OpenSHMEM's `shmem_quiet`: remote completion of every operation of this client, the
    /// handle-less ones (`put_nbi`, `get_nbi`, `atomic_nbi`) included; their buffers are
    /// released and their `Fetch` values readable when it returns.
    fn quiet(&self, py: Python<'_>) -> PyResult<()> {
        crate::shmem::quiet(py, self)
    }

    /// Starts a put of `data` without a handle (`shmem_putmem_nbi`): the client keeps `data`
    /// until the next `quiet()`, which completes it at the server; do not change it until then.
    #[pyo3(signature = (allocation, data, offset=0))]
    fn put_nbi(&self, allocation: &PyAllocation, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let mut held = self.held();
        // SAFETY: `held` keeps the buffer, unchanged by contract, until the next quiet.
        unsafe { self.inner.put_nbi(&allocation.inner, offset, data.as_slice()) }.or_raise()?;
        held.keep(data);
        Ok(())
    }

    /// Starts a get into `out` without a handle (`shmem_getmem_nbi`): `out` holds the data
    /// once the next `quiet()` returns; do not read it before.
    #[pyo3(signature = (allocation, out, offset=0))]
    fn get_nbi(&self, allocation: &PyAllocation, out: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        let mut held = self.held();
        // SAFETY: `held` keeps the buffer until the next quiet.
        unsafe { self.inner.get_nbi(&allocation.inner, offset, out.as_mut_slice()) }.or_raise()?;
        held.keep(out);
        Ok(())
    }

    /// One atomic on the word of `type` ('u32', 'i32', 'u64', 'i64') at `offset` (aligned
    /// to its width): `op` is 'fetch_add'/'add', 'fetch_inc'/'inc', 'fetch', 'set'/'swap',
    /// 'compare_swap', 'fetch_and'/'and', 'fetch_or'/'or', 'fetch_xor'/'xor' (OpenSHMEM's
    /// `shmem_atomic_*`). Returns the previous value (for every op). Blocking: done at the
    /// server when it returns.
    #[pyo3(signature = (allocation, offset, op, value=0, compare=0, r#type="u64"))]
    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &self,
        py: Python<'_>,
        allocation: &PyAllocation,
        offset: u64,
        op: &str,
        value: i128,
        compare: i128,
        r#type: &str,
    ) -> PyResult<i128> {
        let ty = crate::shmem::WordType::of(r#type)?;
        let operands = (ty.bits(value, "value")?, ty.bits(compare, "compare")?);
        let (c, a) = (&*self.inner, &allocation.inner);
        let old = py.allow_threads(|| crate::shmem::atomic(c, a, offset, op, ty, operands))?;
        Ok(ty.value(old))
    }

    /// A non-blocking fetching atomic (`shmem_atomic_fetch_*_nbi`): `op` as `atomic`, the
    /// fetching ones only ('fetch_add', 'fetch_inc', 'fetch', 'swap', 'compare_swap',
    /// 'fetch_and', 'fetch_or', 'fetch_xor'). Returns a `Fetch` whose `value` is the word's
    /// previous value once the next `quiet()` returns.
    #[pyo3(signature = (allocation, offset, op, value=0, compare=0, r#type="u64"))]
    fn atomic_nbi(
        &self,
        allocation: &PyAllocation,
        offset: u64,
        op: &str,
        value: i128,
        compare: i128,
        r#type: &str,
    ) -> PyResult<crate::shmem::PyFetch> {
        let ty = crate::shmem::WordType::of(r#type)?;
        let operands = (ty.bits(value, "value")?, ty.bits(compare, "compare")?);
        crate::shmem::atomic_nbi(self, &allocation.inner, offset, op, ty, operands)
    }

    /// Whether the word of `type` at `offset` compares true against `value` now
    /// (`shmem_test`); never sleeps.
    #[pyo3(signature = (allocation, offset, value, compare="==", r#type="u64"))]
    fn test(
        &self,
        py: Python<'_>,
        allocation: &PyAllocation,
        offset: u64,
        value: i128,
        compare: &str,
        r#type: &str,
    ) -> PyResult<bool> {
        use crate::shmem::WordType;
        let (compare, ty) = (compare_of(compare)?, WordType::of(r#type)?);
        let bits = ty.bits(value, "value")?;
        let a = &allocation.inner;
        self.blocking(py, |c| match ty {
            WordType::U32 => c.test_as::<u32>(a, offset, compare, bits as u32),
            WordType::I32 => c.test_as::<i32>(a, offset, compare, bits as u32 as i32),
            WordType::U64 => c.test_as::<u64>(a, offset, compare, bits),
            WordType::I64 => c.test_as::<i64>(a, offset, compare, bits as i64),
        })
    }

    /// Waits until every 64-bit word of `words` (a list of (allocation, offset)) compares
    /// true against `value` (`shmem_wait_until_all`), at most `timeout` seconds.
    #[pyo3(signature = (words, value, compare="==", timeout=10.0))]
    fn wait_until_all(
        &self,
        py: Python<'_>,
        words: Vec<(PyRef<'_, PyAllocation>, u64)>,
        value: u64,
        compare: &str,
        timeout: f64,
    ) -> PyResult<()> {
        let (compare, timeout) = (compare_of(compare)?, seconds(timeout, "timeout")?);
        let words = crate::shmem::words(&words);
        self.blocking(py, |c| c.wait_until_all(&words, compare, value, timeout))
    }

    /// Waits until one word of `words` compares true (`shmem_wait_until_any`); its index.
    #[pyo3(signature = (words, value, compare="==", timeout=10.0))]
    fn wait_until_any(
        &self,
        py: Python<'_>,
        words: Vec<(PyRef<'_, PyAllocation>, u64)>,
        value: u64,
        compare: &str,
        timeout: f64,
    ) -> PyResult<usize> {
        let (compare, timeout) = (compare_of(compare)?, seconds(timeout, "timeout")?);
        let words = crate::shmem::words(&words);
        self.blocking(py, |c| c.wait_until_any(&words, compare, value, timeout))
    }

    /// Waits until at least one word compares true (`shmem_wait_until_some`); the indices
    /// of every word that does.
    #[pyo3(signature = (words, value, compare="==", timeout=10.0))]
    fn wait_until_some(
        &self,
        py: Python<'_>,
        words: Vec<(PyRef<'_, PyAllocation>, u64)>,
        value: u64,
        compare: &str,
        timeout: f64,
    ) -> PyResult<Vec<usize>> {
        let (compare, timeout) = (compare_of(compare)?, seconds(timeout, "timeout")?);
        let words = crate::shmem::words(&words);
        self.blocking(py, |c| c.wait_until_some(&words, compare, value, timeout))
    }

    /// Orders: operations after the fence reach a server after those before it.
    fn fence(&self, py: Python<'_>) -> PyResult<()> {
        self.blocking(py, |c| c.fence())
    }

    /// Atomically adds `value` to the 64-bit word at `offset` (8-byte aligned); returns the old value.
    fn fetch_add(&self, py: Python<'_>, allocation: &PyAllocation, offset: u64, value: u64) -> PyResult<u64> {
        self.blocking(py, |c| c.fetch_add(&allocation.inner, offset, value))
    }

    /// Atomically replaces the word at `offset` with `value`; returns the old value.
    fn swap(&self, py: Python<'_>, allocation: &PyAllocation, offset: u64, value: u64) -> PyResult<u64> {
        self.blocking(py, |c| c.swap(&allocation.inner, offset, value))
    }

    /// Atomically sets the word at `offset` to `value` if it equals `compare`; returns the old value.
    fn compare_swap(
        &self,
        py: Python<'_>,
        allocation: &PyAllocation,
        offset: u64,
        compare: u64,
        value: u64,
    ) -> PyResult<u64> {
        self.blocking(py, |c| c.compare_swap(&allocation.inner, offset, compare, value))
    }

    /// Atomically reads the word at `offset`.
    fn fetch(&self, py: Python<'_>, allocation: &PyAllocation, offset: u64) -> PyResult<u64> {
        self.blocking(py, |c| c.fetch(&allocation.inner, offset))
    }

    /// Puts `data` at `offset`, then sets (`op="set"`) or adds to (`op="add"`) the signal
    /// word at `signal_offset` of `signal`, so a reader that sees the signal sees the data.
    /// Data and signal word must be on the same server.
    #[pyo3(signature = (allocation, data, offset, signal, signal_offset, value, op="set"))]
    // The data and the signal word each take an allocation and an offset, as in Rust.
    #[allow(clippy::too_many_arguments)]
    fn put_signal(
        &self,
        py: Python<'_>,
        allocation: &PyAllocation,
        data: &Bound<'_, PyAny>,
        offset: u64,
        signal: &PyAllocation,
        signal_offset: u64,
        value: u64,
        op: &str,
    ) -> PyResult<()> {
        let op = signal_op_of(op)?;
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        let signal = Signal { word: &signal.inner, offset: signal_offset, value, op };
        self.blocking(py, |c| c.put_signal(&allocation.inner, offset, bytes, signal))
    }

    /// Waits until the word at `offset` compares true (`compare`: == != >= > <= <) against
    /// `value`, at most `timeout` seconds (then raises `WaitTimeoutError`); returns the word.
    #[pyo3(signature = (allocation, offset, value, compare="==", timeout=10.0))]
    fn wait_until(
        &self,
        py: Python<'_>,
        allocation: &PyAllocation,
        offset: u64,
        value: u64,
        compare: &str,
        timeout: f64,
    ) -> PyResult<u64> {
        let compare = compare_of(compare)?;
        let timeout = seconds(timeout, "timeout")?;
        self.blocking(py, |c| c.wait_until(&allocation.inner, offset, compare, value, timeout))
    }

    /// The global address (a 128-bit int) of `offset` in `allocation`, valid in any client
    /// of the same servers, e.g. sent to another process.
    #[pyo3(signature = (allocation, offset=0))]
    fn global_address(&self, allocation: &PyAllocation, offset: u64) -> PyResult<u128> {
        Ok(self.inner.global_address(&allocation.inner, offset).or_raise()?.0)
    }

    /// The allocation and offset a global address names (opening it on first use).
    fn resolve(&self, py: Python<'_>, address: u128) -> PyResult<(PyAllocation, u64)> {
        let (inner, offset) = self.blocking(py, |c| c.resolve(GlobalAddress(address)))?;
        Ok((PyAllocation { inner }, offset))
    }

    /// `put` at a global address.
    fn put_global(&self, py: Python<'_>, address: u128, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.blocking(py, |c| c.put_global(GlobalAddress(address), bytes))
    }

    /// `put_sync` at a global address.
    fn put_global_sync(&self, py: Python<'_>, address: u128, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.blocking(py, |c| c.put_global_sync(GlobalAddress(address), bytes))
    }

    /// `get` from a global address into `out`.
    fn get_global(&self, py: Python<'_>, address: u128, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        let bytes = out.as_mut_slice();
        self.blocking(py, |c| c.get_global(GlobalAddress(address), bytes))
    }

    /// `fetch_add` at a global address.
    fn fetch_add_global(&self, py: Python<'_>, address: u128, value: u64) -> PyResult<u64> {
        self.blocking(py, |c| c.fetch_add_global(GlobalAddress(address), value))
    }

    /// `compare_swap` at a global address.
    fn compare_swap_global(&self, py: Python<'_>, address: u128, compare: u64, value: u64) -> PyResult<u64> {
        self.blocking(py, |c| c.compare_swap_global(GlobalAddress(address), compare, value))
    }

    /// The bytes `[offset, offset + size)` of `allocation` (to its end when `size` is None)
    /// mapped in this process, as a writable `Mapped` buffer, when the allocation is direct
    /// (`allocation.direct`: a same-host server on the shared-memory path); None otherwise.
    #[pyo3(signature = (allocation, offset=0, size=None))]
    fn map(&self, allocation: &PyAllocation, offset: u64, size: Option<usize>) -> PyResult<Option<PyMapped>> {
        let size = match size {
            Some(size) => size,
            None => allocation.inner.size().checked_sub(offset).map(|s| s as usize).unwrap_or(usize::MAX),
        };
        let Some(ptr) = self.inner.mapped(&allocation.inner, offset, size).or_raise()? else { return Ok(None) };
        Ok(Some(PyMapped { _client: Arc::clone(&self.inner), ptr: ptr as usize, len: size }))
    }

    fn __repr__(&self) -> String {
        format!("<nam.Client servers={:?}>", self.servers())
    }
}
