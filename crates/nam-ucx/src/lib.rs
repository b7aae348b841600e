//! Safe wrapper over UCX's UCP layer, the only crate of nam that touches UCX or `unsafe` FFI.
//!
//! A tour of the types, bottom up:
//! - [`Context`]: one per process and purpose; reads `UCX_*` from the environment.
//! - [`Worker`]: the progress engine. Active-message handlers run inside
//!   [`Worker::progress`]; [`Worker::wait_for_events`] sleeps on the worker's event fd.
//! - [`Listener`] accepts connections; [`Endpoint`] is one connection, with peer-failure
//!   detection ([`Endpoint::failure`]), RMA, 64-bit atomics ([`AtomicOp`]), active
//!   messages, fence and flush.
//! - [`MemRegion`] maps memory for RMA and packs its remote key; [`RemoteKey`] is a peer's
//!   key unpacked on an endpoint.
//! - [`check_worker_address`] and [`RkeyLayout`] check a peer's packed worker address and
//!   remote key against the layouts this UCX packs before any of it reaches UCX
//!   ([`Endpoint::connect_to_peer_worker`], [`Endpoint::unpack_peer_rkey`]).
//! - [`devices`] narrows the network devices a context opens TCP data ports on
//!   ([`Context::configured`] takes its [`Setting`]s).
//!
//! Every blocking call takes a timeout. When an operation outlives it, the endpoint is
//! force-closed so that UCX completes all its requests and releases their buffers, and the
//! call returns [`Error::TimedOut`]: no wait is unbounded and no buffer is left in use.
//!
//! ```no_run
//! use nam_ucx::{Context, Endpoint, Features, Worker};
//! use std::time::Duration;
//! let context = Context::new(Features::CLIENT)?;
//! let worker = Worker::new(&context)?;
//! let endpoint = Endpoint::connect(&worker, "127.0.0.1:13337".parse().unwrap())?;
//! endpoint.am_send(1, b"hello", Duration::from_secs(1))?;
//! # Ok::<(), nam_ucx::Error>(())
//! ```
#![deny(missing_docs)]

pub mod constants;
mod context;
pub mod devices;
mod endpoint;
mod error;
pub mod ffi;
mod listener;
mod memory;
mod peer;
mod request;
mod sockaddr;
mod worker;

pub use context::{Context, Features, Setting};

/// The `bin` directory of the UCX release nam was built against (from its pkg-config file;
/// empty if it names none): where its `ucx_perftest` and `ucx_info` are, so that tools
/// compare nam with the very UCX it runs on.
pub const UCX_BIN_DIR: &str = env!("NAM_UCX_BINDIR");
pub use endpoint::{AtomicOp, Endpoint};
pub use error::{Error, Result};
pub use listener::{ConnRequest, Listener};
pub use memory::{MemRegion, RemoteKey};
pub use peer::{check_worker_address, RkeyLayout};
pub use request::{Posted, Request};
pub use worker::{AmMessage, EndpointId, Worker};
