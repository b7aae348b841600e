//! nam-ckpt: checkpoint/restart for MPI applications (docs/checkpoint.md).
//!
//! A tour:
//! - [`Checkpointer`]: the application API. `init` with a communicator and a [`Config`]
//!   (one TOML file, `NAM_CKPT_*` overrides, [`Config::dump`]); `protect`/`unprotect`
//!   regions by id; `route_file`; collective `checkpoint` (name + version; at the policy's
//!   level, or at one chosen per call with `checkpoint_level`), `snapshot` (checkpoints once
//!   `snapshot.interval` has passed), `latest` (only what a restart can restore),
//!   `restart` (all or selected regions, falling back level by level and version by
//!   version); `finalize`. The C API (`nam_ckpt_*` in nam.h) wraps it.
//! - Levels ([`LevelKind`], [`level`]): L1 RAM (tmpfs, size-capped, chunk parity) or SSD
//!   (fsync), chosen per checkpoint for all ranks by the placement policy ([`policy`]: the
//!   CLC of Abeyratne 2017, Algorithm 1, collective; static policies; SSD wear in [`wear`]); L2
//!   redundancy; L3 asynchronous flush ([`flush`]) with retention.
//! - Full or incremental checkpoints: a strategy chosen once at init, to which `checkpoint`,
//!   `latest` and `restart` delegate. Full (the default) stores everything through the levels
//!   below. Incremental ([`incremental`], `[incremental]` in the configuration): a nam-incr
//!   engine tracks writes and stores a base plus increments on the RAM, SSD and memory-server
//!   levels, overlapping the copy with the application.
//! - Integrity ([`format`](mod@format)): CRC32C per chunk, P+Q (RAID-6) or Reed-Solomon parity across
//!   RAM-level chunks, written in one pass with the copy ([`pq`], `mapped.rs`), over the
//!   files of retired versions, or files reserved up front ([`Checkpointer::reserve`]).
//! - [`Comm`]: the MPI layer. Duplicates the application's communicator (Rust, or a C
//!   `MPI_Comm` through [`Comm::from_raw`]) and knows the node of every rank
//!   ([`node::node_id_of`]: `NAM_NODE_ID`, `NAM_EMULATE_NODES`, else the host name).
//!   [`groups`] forms partner pairs and redundancy sets across nodes, or across the failure
//!   groups of [`failure_groups`] (racks, power supplies) when any are set.
//! - Placement over time: [`relocate`] moves each rank's files to the node it restarts on and
//!   rebuilds with the sets a checkpoint was written with; [`scavenge`] copies a node's
//!   checkpoints to the file-system level after a job (`nam ckpt scavenge`).
//! - [`Redundancy`]: the L2 schemes behind one trait, collective over a communicator:
//!   [`NoRedundancy`], [`Partner`], [`Xor`] (SCR's), [`ReedSolomon`](redundancy::ReedSolomon) (k parity), and the
//!   memory-server NAM-XOR ([`redundancy::NamXor`]). [`redundancy::build`] makes the
//!   configured one; [`Redundancy::protect_overlapped`] orders the node-local write and the
//!   redundancy as suits the scheme; [`redfile`] is the checksummed format of stored
//!   redundancy. [`memory_server`] reads the memory-server client settings once.
//! - [`constants`]: every limit and tuning constant, tied by compile-time assertions;
//!   [`fault`]: the test-only fault-injection hook (feature `fault-injection`).
//!
//! ```no_run
//! use nam_ckpt::{Checkpointer, Comm, Config};
//! let universe = mpi::initialize().unwrap();
//! let mut ckpt = Checkpointer::init(Comm::new(&universe.world()), Config::load(None)?)?;
//! let mut state = vec![0u8; 1 << 20];
//! // SAFETY: `state` outlives the checkpointer and is not touched during its calls.
//! unsafe { ckpt.protect(1, state.as_mut_ptr(), state.len())? };
//! if ckpt.latest(None).is_some() {
//!     ckpt.restart(None, None, None)?;
//! }
//! for step in 1..=100u64 {
//!     state[0] = state[0].wrapping_add(1); // compute
//!     if step % 10 == 0 {
//!         ckpt.checkpoint(None, step)?;
//!     }
//! }
//! ckpt.finalize()?;
//! # Ok::<(), nam_ckpt::CkptError>(())
//! ```
//!
//! A redundancy scheme on its own (what `nam-bench ckpt-check redundancy` does):
//!
//! ```no_run
//! use nam_ckpt::{redundancy, Comm, RedundancyConfig, Scheme, Target};
//! let universe = mpi::initialize().unwrap();
//! let comm = Comm::new(&universe.world());
//! let config = RedundancyConfig { scheme: Scheme::Xor, ..Default::default() };
//! let mut xor = redundancy::build(&comm, &config)?;
//! let data = vec![comm.rank() as u8; 1 << 20];
//! let target = Target { dir: std::path::Path::new("/tmp"), name: "demo.1", fsync: false };
//! xor.protect(&data, &target)?;
//! // A rank that lost its data passes None and gets it back:
//! let rebuilt = xor.rebuild(Some(&data), &target)?;
//! assert!(rebuilt.lost.is_empty());
//! # Ok::<(), nam_ckpt::CkptError>(())
//! ```
#![deny(missing_docs)]

mod checkpointer;
pub mod comm;
pub mod config;
pub mod constants;
pub mod cpu;
pub mod datasets;
pub mod descriptors;
mod error;
pub mod failure_groups;
pub mod fault;
pub mod flush;
pub mod format;
mod full;
pub mod groups;
pub mod incremental;
mod latest;
pub mod level;
mod mapped;
pub mod memory_server;
pub mod node;
pub mod patient;
pub mod policy;
pub mod pq;
pub mod redfile;
pub mod redundancy;
pub mod relocate;
mod reserve;
mod restart;
pub mod runloop;
pub mod scavenge;
mod stream_copy;
pub mod wear;

pub use checkpointer::{CheckpointOutcome, Checkpointer};
pub use config::Config;
pub use fault::FAULT_ENV;
pub use incremental::IncrementalConfig;
pub use latest::Latest;
pub use level::LevelKind;
pub use nam_ckpt_control::{ControlError, Dataset};
pub use policy::{Decision, Placement, PolicyKind};
pub use restart::RestartOutcome;
pub use runloop::ExitReason;

pub use comm::Comm;
pub use error::{CkptError, Result};
pub use redundancy::{
    LocalWrite, NoRedundancy, Partner, ProtectStats, Rebuilt, Redundancy, RedundancyConfig, Scheme, ServerClient,
    Target, Xor,
};
