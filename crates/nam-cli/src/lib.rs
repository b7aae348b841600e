//! The product commands of nam, as a library: `serve`, `status`, `demo` and `ecc-sim`, which
//! the `nam` binary (src/main.rs) dispatches to. `nam-bench` links this library so that the
//! local servers its benchmarks and tests start run the same code as `nam serve`; nothing
//! here links MPI or a plotting library (the benchmarks and the MPI tools live in `nam-bench`).

pub mod child;
pub mod ckpt;
pub mod ckpt_datasets;
pub mod demo;
pub mod ecc_sim;
pub mod local;
pub mod serve;
pub mod status;
mod status_path;
