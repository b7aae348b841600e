//! The nam memory server: the Network Attached Memory of Schmidt 2017 and the memory blade of
//! Mao 2020, in software over UCX.
//!
//! A tour:
//! - [`Server`]: binds a listener, maps the pool once, and runs the progress loop
//!   ([`Server::run`]) that answers control requests, watches for failed clients and
//!   reclaims their allocations after a lease.
//! - The engines (module `engine`): every service the server runs next to the memory is a
//!   provider with the same hooks (execute its requests, poll, before and after a sleep,
//!   client gone, reserved names), held in one list the loop iterates: the allocation
//!   manager's requests (`alloc_engine`, over the `manager` bookkeeping: sizes, alignment,
//!   shared/exclusive, names, persistence, tenants with tokens and quotas), mailboxes
//!   (`mailbox`), allreduce groups (`reduce`, the allreduce accelerator of Ploumidis et al.
//!   2023 §4.7) and the checkpoint engine (`ckpt`: XOR parity the server computes by pulling
//!   the ranks' buffers itself, the CR unit of Schmidt 2017 §4.5).
//! - [`ServerConfig`]: TOML file and defaults; every other limit and tuning constant is in
//!   module `constants`, the wire's limits in [`nam_proto::limits`].
//!
//! ```no_run
//! use nam_server::{Server, ServerConfig};
//! use std::sync::atomic::AtomicBool;
//! let config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), 64 << 20);
//! let mut server = Server::bind(config)?;
//! println!("listening on {}", server.address());
//! server.run(&AtomicBool::new(false))?;
//! # Ok::<(), nam_server::ServerError>(())
//! ```
#![deny(missing_docs)]

mod alloc_engine;
mod allocator;
mod ckpt;
pub mod config;
mod constants;
mod engine;
mod mailbox;
pub mod manager;
mod pool;
mod reduce;
mod server;
mod watch;

/// Entry points for the cargo-fuzz targets in `fuzz/` (feature `fuzzing`): the parsers of
/// stored structures, which are private to the server, without widening its normal API.
#[cfg(feature = "fuzzing")]
pub mod fuzzing;

pub use config::ServerConfig;
pub use pool::PoolError;
pub use server::{manifest_path_for, Server, ServerError};
