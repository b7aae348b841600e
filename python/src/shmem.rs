//! OpenSHMEM's one-sided calls of issue 31 for Python: typed atomics (32/64-bit, signed and
//! unsigned, bitwise), `test` and the multi-word waits, put/get and fetching atomics without
//! handles completed by `quiet`, and a group's barrier and broadcast (`nam.Group`). The
//! `Client` methods in `client.rs` call the helpers here.

use crate::buffer::{AssertSend, Borrowed};
use crate::client::{PyAllocation, PyClient};
use crate::errors::{invalid, OrRaise};
use nam_client::{Allocation, AtomicWord, Client, ReduceGroup, REDUCE_CHUNK_DEFAULT};
use pyo3::prelude::*;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A word type by its Python name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordType {
    U32,
    I32,
    U64,
    I64,
}

impl WordType {
    /// Parses `type=`: "u32", "i32", "u64" or "i64" (numpy's names `uint32` ... too).
    pub fn of(text: &str) -> PyResult<WordType> {
        Ok(match text {
            "u32" | "uint32" => WordType::U32,
            "i32" | "int32" => WordType::I32,
            "u64" | "uint64" => WordType::U64,
            "i64" | "int64" => WordType::I64,
            other => return Err(invalid(format!("type={other:?}: expected 'u32', 'i32', 'u64' or 'i64'"))),
        })
    }

    /// `value`'s bits at this width, or a ValueError when it does not fit the type.
    pub fn bits(self, value: i128, what: &str) -> PyResult<u64> {
        let (low, high) = match self {
            WordType::U32 => (0, u32::MAX as i128),
            WordType::I32 => (i32::MIN as i128, i32::MAX as i128),
            WordType::U64 => (0, u64::MAX as i128),
            WordType::I64 => (i64::MIN as i128, i64::MAX as i128),
        };
        if value < low || value > high {
            return Err(invalid(format!("{what}={value} does not fit a {self:?} word ({low}..={high})")));
        }
        Ok(value as u64)
    }

    /// The word whose bits are the low bits of `bits`, as a Python int's value.
    pub fn value(self, bits: u64) -> i128 {
        match self {
            WordType::U32 => (bits as u32).into(),
            WordType::I32 => (bits as u32 as i32).into(),
            WordType::U64 => bits.into(),
            WordType::I64 => (bits as i64).into(),
        }
    }
}

/// One atomic `op` on a `T` word; the old word's bits.
fn run<T: AtomicWord>(
    c: &Client,
    a: &Allocation,
    offset: u64,
    op: &str,
    (value, compare): (u64, u64),
) -> PyResult<u64> {
    let (v, k) = (T::from_bits(value), T::from_bits(compare));
    let old = match op {
        "fetch_add" | "add" => c.atomic_fetch_add(a, offset, v),
        "fetch_inc" | "inc" => c.atomic_fetch_inc::<T>(a, offset),
        "fetch" => c.atomic_fetch::<T>(a, offset),
        "set" | "swap" => c.atomic_swap(a, offset, v),
        "compare_swap" => c.atomic_compare_swap(a, offset, k, v),
        "fetch_and" | "and" => c.atomic_fetch_and(a, offset, v),
        "fetch_or" | "or" => c.atomic_fetch_or(a, offset, v),
        "fetch_xor" | "xor" => c.atomic_fetch_xor(a, offset, v),
        other => return Err(invalid(format!("op={other:?} is not an atomic operation"))),
    };
    old.map(T::to_bits).or_raise()
}

/// Runs atomic `op` on the word of type `ty`; the old word.
pub fn atomic(c: &Client, a: &Allocation, offset: u64, op: &str, ty: WordType, operands: (u64, u64)) -> PyResult<u64> {
    match ty {
        WordType::U32 => run::<u32>(c, a, offset, op, operands),
        WordType::I32 => run::<i32>(c, a, offset, op, operands),
        WordType::U64 => run::<u64>(c, a, offset, op, operands),
        WordType::I64 => run::<i64>(c, a, offset, op, operands),
    }
}

/// The 8-byte, 8-aligned cell a non-blocking fetching atomic delivers into.
pub struct FetchCell {
    word: UnsafeCell<u64>,
    done: AtomicBool,
}

// SAFETY: the word is written only by the transport before the quiet that sets `done`
// (under the client's lock), and read only after `done` is seen set.
unsafe impl Send for FetchCell {}
unsafe impl Sync for FetchCell {}

/// What operations without handles keep alive until the client's next quiet: the buffers
/// of `put_nbi`/`get_nbi` and the cells of `atomic_nbi`.
#[derive(Default)]
pub struct Held {
    buffers: Vec<Borrowed>,
    fetches: Vec<Arc<FetchCell>>,
}

impl Held {
    /// Keeps `buffer` until the next quiet.
    pub fn keep(&mut self, buffer: Borrowed) {
        self.buffers.push(buffer);
    }

    /// The quiet returned: every cell holds its word; the buffers may go.
    pub fn completed(&mut self) {
        for cell in self.fetches.drain(..) {
            cell.done.store(true, Ordering::Release);
        }
        self.buffers.clear();
    }
}

/// Posts fetching atomic `op` on a `T` word into `cell`.
///
/// # Safety
/// `cell` stays alive (the client's `Held` keeps it) until the next quiet.
unsafe fn post<T: AtomicWord>(
    c: &Client,
    a: &Allocation,
    offset: u64,
    op: &str,
    (value, compare): (u64, u64),
    cell: &FetchCell,
) -> PyResult<()> {
    let fetch = &mut *(cell.word.get() as *mut T);
    let (v, k) = (T::from_bits(value), T::from_bits(compare));
    match op {
        "fetch_add" => c.atomic_fetch_add_nbi(fetch, a, offset, v),
        "fetch_inc" => c.atomic_fetch_inc_nbi(fetch, a, offset),
        "fetch" => c.atomic_fetch_nbi(fetch, a, offset),
        "swap" => c.atomic_swap_nbi(fetch, a, offset, v),
        "compare_swap" => c.atomic_compare_swap_nbi(fetch, a, offset, k, v),
        "fetch_and" => c.atomic_fetch_and_nbi(fetch, a, offset, v),
        "fetch_or" => c.atomic_fetch_or_nbi(fetch, a, offset, v),
        "fetch_xor" => c.atomic_fetch_xor_nbi(fetch, a, offset, v),
        other => return Err(invalid(format!("op={other:?} is not a fetching atomic operation"))),
    }
    .or_raise()
}

/// Posts a non-blocking fetching atomic; the `Fetch` its value arrives in at the next quiet.
pub fn atomic_nbi(
    client: &PyClient,
    a: &Allocation,
    offset: u64,
    op: &str,
    ty: WordType,
    operands: (u64, u64),
) -> PyResult<PyFetch> {
    let cell = Arc::new(FetchCell { word: UnsafeCell::new(0), done: AtomicBool::new(false) });
    let c = &*client.inner;
    // Held (pushed below) before a quiet can take it: both take the `held` lock.
    let mut held = client.held();
    // SAFETY: `held` keeps the cell until the next quiet.
    unsafe {
        match ty {
            WordType::U32 => post::<u32>(c, a, offset, op, operands, &cell)?,
            WordType::I32 => post::<i32>(c, a, offset, op, operands, &cell)?,
            WordType::U64 => post::<u64>(c, a, offset, op, operands, &cell)?,
            WordType::I64 => post::<i64>(c, a, offset, op, operands, &cell)?,
        }
    }
    held.fetches.push(cell.clone());
    Ok(PyFetch { cell, ty })
}

/// Completes every operation of the client (remote completion, `shmem_quiet`), then
/// releases what its operations without handles held. Takes what is held first, so the
/// lock is never held while the GIL is released (a thread posting meanwhile keeps its
/// buffer for the next quiet).
pub fn quiet(py: Python<'_>, client: &PyClient) -> PyResult<()> {
    let c = &*client.inner;
    let mut taken = std::mem::take(&mut *client.held());
    let result = py.allow_threads(|| c.quiet());
    // Even a failed quiet waited for every operation (or gave up at its deadline, when the
    // transport has failed and writes nothing more): nothing is written afterwards.
    taken.completed();
    result.or_raise()
}

/// The old word of a non-blocking fetching atomic (`Client.atomic_nbi`): `value` once the
/// client's next `quiet()` (or `flush()`) has returned.
#[pyclass(module = "nam", name = "Fetch", frozen)]
pub struct PyFetch {
    cell: Arc<FetchCell>,
    ty: WordType,
}

#[pymethods]
impl PyFetch {
    /// Whether the client's quiet has completed the atomic.
    #[getter]
    fn done(&self) -> bool {
        self.cell.done.load(Ordering::Acquire)
    }

    /// The word's previous value; raises `nam.InvalidArgumentError` before the quiet.
    #[getter]
    fn value(&self) -> PyResult<i128> {
        if !self.done() {
            return Err(invalid("the atomic completes at the client's next quiet(); call it first".into()));
        }
        // SAFETY: done: the transport wrote the word before the quiet returned.
        Ok(self.ty.value(unsafe { *self.cell.word.get() }))
    }
}

/// A named group of ranks at a memory server (the allreduce group): `barrier()` and
/// `broadcast()` among its ranks. Every rank creates it with the same name and rank count.
#[pyclass(module = "nam", name = "Group", unsendable)]
pub struct PyGroup {
    client: Arc<Client>,
    group: Option<ReduceGroup>,
}

impl PyGroup {
    fn group(&mut self) -> PyResult<&mut ReduceGroup> {
        self.group.as_mut().ok_or_else(|| invalid("the group was closed".into()))
    }
}

#[pymethods]
impl PyGroup {
    /// Joins group `name` of `ranks` ranks as `rank` on server `server`, with `chunk_bytes`
    /// of server memory per rank and round (a multiple of 8).
    #[new]
    #[pyo3(signature = (client, name, ranks, rank, *, chunk_bytes=REDUCE_CHUNK_DEFAULT, server=0))]
    fn new(
        py: Python<'_>,
        client: &PyClient,
        name: &str,
        ranks: u32,
        rank: u32,
        chunk_bytes: u64,
        server: usize,
    ) -> PyResult<PyGroup> {
        let inner = client.inner.clone();
        let group =
            py.allow_threads(|| ReduceGroup::attach(&inner, name, ranks, rank, chunk_bytes, server)).or_raise()?;
        Ok(PyGroup { client: inner, group: Some(group) })
    }

    /// Waits until every rank has called it (at most the client's timeout: then raises
    /// `nam.WaitTimeoutError`). Call `Client.quiet()` first for this rank's puts to be at
    /// the server before the others pass.
    fn barrier(&mut self, py: Python<'_>) -> PyResult<()> {
        let client = self.client.clone();
        let group = AssertSend(self.group()?);
        py.allow_threads(move || {
            let group = group;
            group.0.barrier(&client)
        })
        .or_raise()
    }

    /// Replaces the bytes of `buffer` (a writable buffer: bytearray, numpy array) on every
    /// rank with those of rank `root`'s; every rank passes the same length and root.
    fn broadcast(&mut self, py: Python<'_>, buffer: &Bound<'_, PyAny>, root: u32) -> PyResult<()> {
        let mut view = Borrowed::new(buffer, true)?;
        let client = self.client.clone();
        let group = AssertSend(self.group()?);
        let bytes = AssertSend(view.as_mut_slice());
        py.allow_threads(move || {
            let (group, bytes) = (group, bytes);
            group.0.broadcast(&client, root, bytes.0)
        })
        .or_raise()
    }

    /// Leaves the group (the other ranks' later rounds fail).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(group) = self.group.take() else { return Ok(()) };
        let client = self.client.clone();
        let group = AssertSend(group);
        py.allow_threads(move || {
            let group = group;
            group.0.detach(&client)
        })
        .or_raise()
    }

    /// Ranks in the group.
    #[getter]
    fn ranks(&mut self) -> PyResult<u32> {
        Ok(self.group()?.ranks())
    }
}

/// The (allocation, offset) pairs of a multi-word wait.
pub fn words<'a>(list: &'a [(PyRef<'a, PyAllocation>, u64)]) -> Vec<(&'a Allocation, u64)> {
    list.iter().map(|(a, offset)| (&a.inner, *offset)).collect()
}
