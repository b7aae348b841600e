//! nam-ckpt: checkpoint/restart for MPI applications.
//!
//! A tour:
//! - [`Comm`]: the MPI layer. Duplicates the application's communicator (Rust, or a C
//!   `MPI_Comm` through [`Comm::from_raw`]) and knows the node of every rank
//!   ([`node::node_id`]: `NAM_NODE_ID`, else the host name, so one machine can emulate
//!   several nodes). [`groups`] forms partner pairs and redundancy sets across nodes.
//! - [`Redundancy`]: the L2 schemes behind one trait, collective over a communicator:
//!   [`NoRedundancy`], [`Partner`], [`Xor`] (SCR's), [`ReedSolomon`] (k parity), and the
//!   memory-server NAM-XOR ([`Scheme::NamXor`]). [`redundancy::build`] makes the configured one.
//! - [`redfile`]: the checksummed file format of stored redundancy.
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
pub mod cpu;
mod error;
pub mod flush;
pub mod format;
pub mod groups;
pub mod level;
pub mod node;
pub mod policy;
pub mod redfile;
pub mod redundancy;
mod restart;
pub mod wear;

pub use checkpointer::{CheckpointOutcome, Checkpointer, FAULT_ENV};
pub use config::Config;
pub use level::LevelKind;
pub use policy::{Decision, Placement, PolicyKind};
pub use restart::RestartOutcome;

pub use comm::Comm;
pub use error::{CkptError, Result};
pub use redundancy::{NoRedundancy, Partner, ProtectStats, Rebuilt, Redundancy, RedundancyConfig, Scheme, Target, Xor};
