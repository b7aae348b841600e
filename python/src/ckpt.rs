//! `nam.ckpt`: the checkpoint library (`nam_ckpt::Checkpointer`, the one behind the C API's
//! `nam_ckpt_*`) for mpi4py programs. The Python wrapper (`nam/ckpt.py`) passes the
//! communicator's Fortran handle (`comm.py2f()`), as `nam_ckpt_init` does in C, and names
//! regions by string.

use crate::buffer::{AssertSend, Borrowed};
use crate::errors::{exception, invalid};
use nam::status_of_ckpt_error;
use nam_ckpt::{Checkpointer, CkptError, Comm, Config, LevelKind};
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// A level's name as Python passes it ('ram', 'ssd', 'pfs', 'nam').
fn level_kind(name: &str) -> PyResult<LevelKind> {
    [LevelKind::Ram, LevelKind::Ssd, LevelKind::Pfs, LevelKind::Nam]
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| invalid(format!("level {name:?} is none of 'ram', 'ssd', 'pfs', 'nam'")))
}

fn ckpt_error(error: CkptError) -> PyErr {
    exception(status_of_ckpt_error(&error), error.to_string())
}

/// The checkpointer of one MPI job (collective calls: every rank makes them in the same order).
#[pyclass(module = "nam.ckpt", name = "_Checkpointer", unsendable)]
pub struct PyCheckpointer {
    // Dropped before the buffers it reads: field order is drop order.
    inner: Option<Checkpointer>,
    regions: BTreeMap<i32, Borrowed>,
}

impl PyCheckpointer {
    fn live(&mut self) -> PyResult<&mut Checkpointer> {
        self.inner.as_mut().ok_or_else(|| invalid("the checkpointer was finalized".into()))
    }

    /// Runs the collective `f` on the checkpointer without the GIL (other Python threads go
    /// on while the ranks wait for each other).
    fn collective<T>(
        &mut self,
        py: Python<'_>,
        f: impl FnOnce(&mut Checkpointer) -> nam_ckpt::Result<T>,
    ) -> PyResult<T> {
        let call = AssertSend((self.live()?, f));
        let out = py.allow_threads(move || {
            let call = call;
            let (ckpt, f) = call.0;
            AssertSend(f(ckpt))
        });
        out.0.map_err(ckpt_error)
    }
}

#[pymethods]
impl PyCheckpointer {
    /// Collective over the communicator whose Fortran handle is `fcomm`; `config` is a TOML
    /// file (None: `NAM_CKPT_CONFIG`, or defaults), with the `NAM_CKPT_*` variables applied.
    #[new]
    #[pyo3(signature = (fcomm, config=None))]
    fn new(py: Python<'_>, fcomm: i32, config: Option<String>) -> PyResult<PyCheckpointer> {
        let config = Config::load(config.as_deref().map(Path::new)).map_err(ckpt_error)?;
        let init = AssertSend(move || {
            // SAFETY: mpi4py initialized MPI, and `fcomm` is a live communicator's handle
            // (from `comm.py2f()`); the library duplicates it.
            let comm = unsafe { Comm::from_raw(mpi::ffi::MPI_Comm_f2c(fcomm)) };
            Checkpointer::init(comm, config)
        });
        let inner = py.allow_threads(move || AssertSend((init.0)())).0.map_err(ckpt_error)?;
        Ok(PyCheckpointer { inner: Some(inner), regions: BTreeMap::new() })
    }

    /// Protects the bytes of `array` (a writable, contiguous buffer, kept alive here) under `id`.
    fn protect(&mut self, id: i32, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut buffer = Borrowed::new(array, true)?;
        let bytes = buffer.as_mut_slice();
        let (ptr, len) = (bytes.as_mut_ptr(), bytes.len());
        // SAFETY: the buffer view keeps the memory valid (and unresized) until unprotected.
        unsafe { self.live()?.protect(id, ptr, len) }.map_err(ckpt_error)?;
        self.regions.insert(id, buffer);
        Ok(())
    }

    /// Stops protecting `id`.
    fn unprotect(&mut self, id: i32) -> PyResult<()> {
        self.live()?.unprotect(id).map_err(ckpt_error)?;
        self.regions.remove(&id);
        Ok(())
    }

    /// Collective: writes version `version` of checkpoint `name` at the placement policy's
    /// level, or at `level` ('ram', 'ssd' or 'pfs') chosen for this call; returns the level
    /// written ('ram', 'ssd', 'pfs', 'nam') or None when the placement policy skipped it.
    #[pyo3(signature = (version, name=None, level=None))]
    fn checkpoint(
        &mut self,
        py: Python<'_>,
        version: u64,
        name: Option<String>,
        level: Option<String>,
    ) -> PyResult<Option<&'static str>> {
        let level = level.map(|l| level_kind(&l)).transpose()?;
        let ckpt = AssertSend(self.live()?);
        let outcome = py.allow_threads(move || {
            let ckpt = ckpt;
            AssertSend(match level {
                Some(level) => ckpt.0.checkpoint_level(name.as_deref(), version, level),
                None => ckpt.0.checkpoint(name.as_deref(), version),
            })
        });
        Ok(outcome.0.map_err(ckpt_error)?.level.map(|l| l.name()))
    }

    /// Collective, every iteration: checkpoints as `checkpoint` once `snapshot.interval`
    /// seconds have passed since init or the last checkpoint; returns (taken, level).
    #[pyo3(signature = (version, name=None))]
    fn snapshot(
        &mut self,
        py: Python<'_>,
        version: u64,
        name: Option<String>,
    ) -> PyResult<(bool, Option<&'static str>)> {
        let ckpt = AssertSend(self.live()?);
        let outcome = py.allow_threads(move || {
            let ckpt = ckpt;
            AssertSend(ckpt.0.snapshot(name.as_deref(), version))
        });
        let outcome = outcome.0.map_err(ckpt_error)?;
        Ok((outcome.is_some(), outcome.and_then(|o| o.level).map(|l| l.name())))
    }

    /// Collective: the newest version of `name` that restart can restore, or None when no
    /// version was ever written; raises `CkptUnrecoverableError` (saying what is missing)
    /// when versions were written but none can be restored.
    #[pyo3(signature = (name=None))]
    fn latest(&mut self, py: Python<'_>, name: Option<String>) -> PyResult<Option<u64>> {
        let ckpt = AssertSend(self.live()?);
        let latest = py.allow_threads(move || {
            let ckpt = ckpt;
            AssertSend(ckpt.0.latest_restorable(name.as_deref()))
        });
        match latest.0 {
            Ok(latest) => Ok(Some(latest.version)),
            Err(CkptError::NoCheckpoint(_)) => Ok(None),
            Err(e) => Err(ckpt_error(e)),
        }
    }

    /// Collective: restores the protected regions (or only `ids`) from `version` (None: the
    /// newest restorable); returns (version, level, ranks rebuilt by the redundancy scheme).
    #[pyo3(signature = (name=None, version=None, ids=None))]
    fn restart(
        &mut self,
        py: Python<'_>,
        name: Option<String>,
        version: Option<u64>,
        ids: Option<Vec<i32>>,
    ) -> PyResult<(u64, &'static str, Vec<usize>)> {
        let ckpt = AssertSend(self.live()?);
        let outcome = py.allow_threads(move || {
            let ckpt = ckpt;
            AssertSend(ckpt.0.restart(name.as_deref(), version, ids.as_deref()))
        });
        let outcome = outcome.0.map_err(ckpt_error)?;
        Ok((outcome.version, outcome.level.name(), outcome.rebuilt_ranks))
    }

    /// Collective, every iteration (SCR's `SCR_Need_checkpoint`): whether to checkpoint now
    /// (`runloop.interval` or `runloop.overhead`; always true when neither is configured).
    fn need_checkpoint(&mut self, py: Python<'_>) -> PyResult<bool> {
        self.collective(py, |c| c.need_checkpoint())
    }

    /// Collective, every iteration (SCR's `SCR_Should_exit`): why the job should stop now (a
    /// halt file from `nam ckpt halt`, or the allocation's end), or None.
    fn should_exit(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.collective(py, |c| c.should_exit())?.map(|r| r.to_string()))
    }

    /// Collective: `checkpoint` protected by the redundancy descriptor `descriptor`; returns
    /// the level written.
    #[pyo3(signature = (version, descriptor, name=None))]
    fn checkpoint_with(
        &mut self,
        py: Python<'_>,
        version: u64,
        descriptor: String,
        name: Option<String>,
    ) -> PyResult<Option<&'static str>> {
        let out = self.collective(py, |c| c.checkpoint_with(name.as_deref(), version, &descriptor))?;
        Ok(out.level.map(|l| l.name()))
    }

    /// Collective: stores output dataset `version` (flushed to `flush.dir`, never restarted from).
    #[pyo3(signature = (version, name=None))]
    fn checkpoint_output(&mut self, py: Python<'_>, version: u64, name: Option<String>) -> PyResult<()> {
        self.collective(py, |c| c.checkpoint_output(name.as_deref(), version).map(|_| ()))
    }

    /// Collective: the version a restart without one uses (None: the newest restorable).
    #[pyo3(signature = (version, name=None))]
    fn set_current(&mut self, py: Python<'_>, version: Option<u64>, name: Option<String>) -> PyResult<()> {
        self.collective(py, |c| c.set_current(name.as_deref(), version))
    }

    /// Collective: never offer `version` for restart again (its files stay).
    #[pyo3(signature = (version, name=None))]
    fn forget(&mut self, py: Python<'_>, version: u64, name: Option<String>) -> PyResult<()> {
        self.collective(py, |c| c.forget(name.as_deref(), version))
    }

    /// Collective: delete every rank's files of `version` at every level, and forget it.
    #[pyo3(signature = (version, name=None))]
    fn delete(&mut self, py: Python<'_>, version: u64, name: Option<String>) -> PyResult<()> {
        self.collective(py, |c| c.delete(name.as_deref(), version))
    }

    /// Collective: waits for background flushes and releases the checkpointer.
    fn finalize(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(ckpt) = self.inner.take() else { return Ok(()) };
        let ckpt = AssertSend(ckpt);
        let result = py.allow_threads(move || {
            let ckpt = ckpt;
            AssertSend(ckpt.0.finalize())
        });
        self.regions.clear();
        result.0.map_err(ckpt_error)
    }
}
