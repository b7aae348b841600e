//! The nam client library: one-sided access to memory servers (libNAM of Schmidt 2017, the
//! ExaNeSt RDMA user API of Ploumidis et al. 2023), over UCX.
//!
//! A tour:
//! - [`Client`]: connects to one or several servers ([`ClientConfig`], or `NAM_SERVERS`),
//!   authenticates as a tenant, and performs every operation.
//! - [`Allocation`]: a range of server memory: from [`Client::alloc`] or, for a shared
//!   named allocation, [`Client::open`]. Its bounds are checked before anything is sent.
//! - Data: [`Client::put`], [`Client::get`], their non-blocking forms returning an [`Op`],
//!   [`Client::flush`] (remote completion) and [`Client::fence`] (ordering). Each takes the
//!   [`Path`] the client chose for its server and size when it connected
//!   ([`Client::path_table`]; see [`path`]).
//! - Atomics on 64-bit words: [`Client::fetch_add`], [`Client::swap`],
//!   [`Client::compare_swap`]; OpenSHMEM's full set on 32- and 64-bit words, signed and
//!   unsigned ([`AtomicWord`]): [`Client::atomic_fetch_add`], [`Client::atomic_add`],
//!   [`Client::atomic_fetch_and`] and the rest. Signals: [`Client::put_signal`] and the waits
//!   [`Client::wait_until`], [`Client::test`], [`Client::wait_until_all`], `_any`, `_some`,
//!   which spin briefly, then sleep on a wake-up the signalling side triggers.
//!
//! - OpenSHMEM's other calls: [`Client::put_value`]/[`Client::get_value`] (`shmem_p`/`_g`),
//!   [`Client::iput`]/[`Client::iget`] (strided), the non-blocking fetching atomics
//!   ([`Client::atomic_fetch_add_nbi`] and the rest, completed by [`Client::quiet`]),
//!   contexts ([`Client::context`], [`Context`]: independent streams with their own fence and
//!   quiet), and a named group's [`ReduceGroup::barrier`] and [`ReduceGroup::broadcast`].
//!
//! - Checkpoint groups ([`ckpt`]): [`Client::ckpt_join`] gives a [`CkptMember`] whose
//!   buffer the server pulls and XORs into parity (NAM-XOR), and restores after a loss.
//! - Global address space: [`Client::global_address`], [`Client::resolve`] and the
//!   `*_global` operations on a [`GlobalAddress`]; [`Mailbox`] / [`MailboxSender`] for small
//!   messages; [`ReduceGroup`] for allreduce at the memory server.
//!
//! Every call has a deadline (the config's `timeout`); a server that dies makes calls fail
//! with [`Error::Transport`] or [`Error::Timeout`], never hang.
//!
//! ```no_run
//! use nam_client::{AllocOptions, Client, ClientConfig};
//! let client = Client::connect(ClientConfig::new(vec!["127.0.0.1:13337".parse().unwrap()]))?;
//! let a = client.alloc(4096, &AllocOptions::shared("results"))?;
//! client.put_sync(&a, 0, b"hello")?;
//! let mut back = [0u8; 5];
//! client.get(&a, 0, &mut back)?;
//! assert_eq!(&back, b"hello");
//! assert_eq!(client.fetch_add(&a, 8, 1)?, 0);
//! client.free(&a)?;
//! # Ok::<(), nam_client::Error>(())
//! ```
#![deny(missing_docs)]

// Layers, each using only those above it: leaves (constants, error, allocation, signal,
// lock, futex, config); `link` (one server's endpoints); `session` (all links and the state
// every path shares); `op` and `path` (how each operation reaches memory); `global`
// (address cache, over the session); `client` (the public API: bounds check + path); and
// the protocols built on the client: `mailbox`, `reduce`, `ckpt`.
mod allocation;
mod amo;
mod amo_op;
pub mod ckpt;
mod client;
pub mod config;
pub mod constants;
mod context;
mod copy;
mod deadline;
mod error;
mod futex;
mod global;
pub mod link;
mod lock;
mod mailbox;
mod op;
pub mod path;
mod pending;
mod reduce;
mod session;
mod shmem;
mod signal;
mod wait;
mod wake;

pub use allocation::{AllocOptions, Allocation};
pub use amo::AtomicWord;
pub use amo_op::{AmoKind, AtomicOp};
pub use ckpt::{CkptMember, GroupSpec, Restoring};
pub use client::{server_status, server_status_as, Client, StatusCredentials};
pub use config::ClientConfig;
pub use context::Context;
pub use error::{Error, Result};
pub use link::DataPath;
pub use mailbox::{Mailbox, MailboxSender, Message};
pub use nam_proto::mailbox::{MailboxLayout, MAILBOX_SLOT_SIZE_DEFAULT};
pub use nam_proto::reduce::{DataType, ReduceOp};
pub use nam_proto::{GlobalAddress, Status, StatusReply, TrafficReport};
pub use op::Op;
pub use path::{Path, ServerPaths, TransferPath};
pub use reduce::{ReduceGroup, REDUCE_CHUNK_DEFAULT};
pub use shmem::Element;
pub use signal::{Compare, Signal, SignalOp};
