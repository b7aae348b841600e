//! The native part of the Python package `nam` (module `nam._nam`), built by maturin from
//! `python/`: the client (`client`), contexts (`context`), far memory (`farmem`), checkpointing (`ckpt`), OpenSHMEM's calls (`shmem`), the exceptions (`errors`) and
//! the buffer protocol both ways (`buffer`). The Python files in `python/nam` re-export it
//! and add what is simpler in Python (numpy arrays over the buffers exported here).

mod buffer;
mod ckpt;
mod client;
mod context;
mod errors;
mod farmem;
mod shmem;

use pyo3::prelude::*;

/// The module `nam._nam`.
#[pymodule]
fn _nam(module: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(module)?;
    module.add_class::<client::PyClient>()?;
    module.add_class::<client::PyAllocation>()?;
    module.add_class::<client::PyRequest>()?;
    module.add_class::<client::PyMapped>()?;
    module.add_class::<context::PyContext>()?;
    module.add_class::<shmem::PyFetch>()?;
    module.add_class::<shmem::PyGroup>()?;
    module.add_class::<farmem::PyCache>()?;
    module.add_class::<farmem::PyRegion>()?;
    module.add_class::<ckpt::PyCheckpointer>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
