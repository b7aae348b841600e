//! The nam memory server: the Network Attached Memory of Schmidt 2017 and the memory blade of
//! Mao 2020, in software over UCX.
//!
//! A tour:
//! - [`Server`]: binds a listener, maps the [`Pool`] once, and runs the progress loop
//!   ([`Server::run`]) that answers control requests, watches for failed clients and
//!   reclaims their allocations after a lease.
//! - [`Manager`]: the allocation manager: sizes, alignment, shared/exclusive, names,
//!   persistence, tenants with tokens and quotas. Pure bookkeeping, unit-tested.
//! - [`RangeAllocator`]: first-fit offsets with coalescing, model-tested.
//! - [`ServerConfig`]: TOML file and defaults.
//! - [`ckpt::CkptEngine`]: checkpoint groups whose XOR parity the server computes by pulling
//!   the ranks' buffers itself (Schmidt 2017's CR unit), in ping-pong parity slots.
//! - [`reduce`]: the allreduce engine (groups, rounds, the multi-threaded kernel); global
//!   addresses are resolved with the protection-domain check of [`Manager::hold_global`].
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

pub mod allocator;
pub mod ckpt;
pub mod config;
pub mod mailbox;
pub mod manager;
pub mod pool;
pub mod reduce;
mod server;

pub use allocator::RangeAllocator;
pub use config::ServerConfig;
pub use manager::Manager;
pub use pool::Pool;
pub use server::{manifest_path_for, Server, ServerError};
