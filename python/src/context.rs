//! Contexts for Python (`Client.context()`, OpenSHMEM's `shmem_ctx_create`): independent
//! streams of operations over one client, each with its own ordering (`fence`) and
//! completion (`quiet`): a context's quiet waits for its own operations only, never for the
//! client's or another context's (see `nam_client::Context`). `destroy()` (or leaving a
//! `with` block) completes it and releases it.

use crate::buffer::{AssertSend, Borrowed};
use crate::client::{PyAllocation, PyClient};
use crate::errors::{invalid, OrRaise};
use crate::shmem::WordType;
use nam_client::{AmoKind, AtomicWord, Client, Context};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

/// A context of a client (`Client.context()`). Use it from one thread at a time
/// (OpenSHMEM's `SHMEM_CTX_PRIVATE`).
#[pyclass(module = "nam", name = "Context", unsendable)]
pub struct PyContext {
    // Field order matters: the context is dropped (completed) before the buffers its
    // operations without handles use and before the client it borrows.
    context: Option<Context<'static>>,
    /// Buffers of `put_nbi`/`get_nbi`, kept until this context's next quiet.
    held: Vec<Borrowed>,
    _client: Arc<Client>,
}

impl PyContext {
    /// A new context of `client`.
    pub fn new(client: &PyClient) -> PyResult<PyContext> {
        let client = Arc::clone(&client.inner);
        // SAFETY: the context borrows the client, which `client` keeps alive for as long as
        // the context exists (it is dropped first).
        let borrowed: &'static Client = unsafe { &*Arc::as_ptr(&client) };
        let context = borrowed.context().or_raise()?;
        Ok(PyContext { context: Some(context), held: Vec::new(), _client: client })
    }

    fn context(&self) -> PyResult<&Context<'static>> {
        self.context.as_ref().ok_or_else(|| invalid("the context was destroyed".into()))
    }

    /// Runs `f` on the context with the GIL released.
    fn blocking<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Context<'static>) -> nam_client::Result<T> + Send,
    ) -> PyResult<T> {
        let context = AssertSend(self.context()?);
        py.allow_threads(move || {
            let context = context;
            f(context.0)
        })
        .or_raise()
    }
}

/// The `AmoKind` of an op name (as `Client.atomic`'s).
fn kind(op: &str) -> PyResult<AmoKind> {
    Ok(match op {
        "fetch_add" => AmoKind::FetchAdd,
        "add" => AmoKind::Add,
        "fetch_inc" => AmoKind::FetchInc,
        "inc" => AmoKind::Inc,
        "fetch" => AmoKind::Fetch,
        "set" => AmoKind::Set,
        "swap" => AmoKind::Swap,
        "compare_swap" => AmoKind::CompareSwap,
        "fetch_and" => AmoKind::FetchAnd,
        "and" => AmoKind::And,
        "fetch_or" => AmoKind::FetchOr,
        "or" => AmoKind::Or,
        "fetch_xor" => AmoKind::FetchXor,
        "xor" => AmoKind::Xor,
        other => return Err(invalid(format!("op={other:?} is not an atomic operation"))),
    })
}

/// Atomic `kind` on a `T` word through `context`, waited for; the old word's bits.
fn run<T: AtomicWord>(
    context: &Context<'static>,
    (a, offset): (&nam_client::Allocation, u64),
    kind: AmoKind,
    (value, compare): (u64, u64),
) -> nam_client::Result<u64> {
    let op = context.atomic_nb(a, offset, kind, T::from_bits(value), T::from_bits(compare))?;
    op.wait().map(T::to_bits)
}

#[pymethods]
impl PyContext {
    /// Copies `data` to `offset` of `allocation` on this context; returns when `data` may be
    /// reused (`shmem_ctx_putmem`); this context's `quiet()` completes it at the server.
    #[pyo3(signature = (allocation, data, offset=0))]
    fn put(&self, py: Python<'_>, allocation: &PyAllocation, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        let bytes = data.as_slice();
        self.blocking(py, |c| c.put(&allocation.inner, offset, bytes))
    }

    /// Fills `out` (a writable contiguous buffer) with the bytes at `offset` of `allocation`
    /// on this context (`shmem_ctx_getmem`).
    #[pyo3(signature = (allocation, out, offset=0))]
    fn get(&self, py: Python<'_>, allocation: &PyAllocation, out: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        let bytes = out.as_mut_slice();
        self.blocking(py, |c| c.get(&allocation.inner, offset, bytes))
    }

    /// The `size` bytes at `offset` of `allocation` as a new `bytes` object, on this context.
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

    /// Starts a put of `data` without a handle on this context (`shmem_ctx_putmem_nbi`):
    /// the context keeps `data` until its next `quiet()`; do not change it until then.
    #[pyo3(signature = (allocation, data, offset=0))]
    fn put_nbi(&mut self, allocation: &PyAllocation, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let data = Borrowed::new(data, false)?;
        // SAFETY: `held` keeps the buffer, unchanged by contract, until the next quiet.
        unsafe { self.context()?.put_nbi(&allocation.inner, offset, data.as_slice()) }.or_raise()?;
        self.held.push(data);
        Ok(())
    }

    /// Starts a get into `out` without a handle on this context (`shmem_ctx_getmem_nbi`):
    /// `out` holds the data once this context's next `quiet()` returns.
    #[pyo3(signature = (allocation, out, offset=0))]
    fn get_nbi(&mut self, allocation: &PyAllocation, out: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let mut out = Borrowed::new(out, true)?;
        // SAFETY: `held` keeps the buffer until the next quiet.
        unsafe { self.context()?.get_nbi(&allocation.inner, offset, out.as_mut_slice()) }.or_raise()?;
        self.held.push(out);
        Ok(())
    }

    /// One atomic on this context (`shmem_ctx_atomic_*`): `op` and `type` as
    /// `Client.atomic`; returns the previous value. Blocking: done at the server on return.
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
        let ty = WordType::of(r#type)?;
        let (kind, operands) = (kind(op)?, (ty.bits(value, "value")?, ty.bits(compare, "compare")?));
        let a = (&allocation.inner, offset);
        let old = self.blocking(py, |c| match ty {
            WordType::U32 => run::<u32>(c, a, kind, operands),
            WordType::I32 => run::<i32>(c, a, kind, operands),
            WordType::U64 => run::<u64>(c, a, kind, operands),
            WordType::I64 => run::<i64>(c, a, kind, operands),
        })?;
        Ok(ty.value(old))
    }

    /// Orders this context's operations (`shmem_ctx_fence`): those issued before complete at
    /// their targets before those issued after.
    fn fence(&self, py: Python<'_>) -> PyResult<()> {
        self.blocking(py, |c| c.fence())
    }

    /// Remote completion of every operation issued on this context (`shmem_ctx_quiet`),
    /// and of nothing else: the client's and other contexts' operations are not waited for.
    /// Releases the buffers of its `put_nbi`/`get_nbi`. Raises `TimeoutError` (a `NamError`)
    /// at the client's deadline.
    fn quiet(&mut self, py: Python<'_>) -> PyResult<()> {
        let result = self.blocking(py, |c| c.quiet());
        // Even a failed quiet waited for every operation (or gave up at its deadline, when
        // the transport writes nothing more).
        self.held.clear();
        result
    }

    /// Completes the context's operations and releases it (`shmem_ctx_destroy`); later
    /// calls on it raise. Raises if the completion failed (it is released either way).
    fn destroy(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(context) = self.context.take() else { return Ok(()) };
        let context = AssertSend(context);
        let result = py.allow_threads(move || {
            let context = context;
            let result = context.0.quiet();
            drop(context);
            result
        });
        self.held.clear();
        result.or_raise()
    }

    /// Whether `destroy()` was called.
    #[getter]
    fn destroyed(&self) -> bool {
        self.context.is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.destroy(py)?;
        Ok(false)
    }
}
