//! Incremental checkpointing that overlaps the application (Abeyratne 2017 Ch. V, in software).
//!
//! A tour:
//! - [`Engine`]: protect memory regions ([`Engine::protect`], any alignment), then call
//!   [`Engine::checkpoint`] at the end of each interval. [`Mode`] picks how: the baselines
//!   stop-and-copy and fork, blocking incremental, partially non-blocking (resume at once,
//!   a background writer persists the dirty pages, a write to a page not persisted yet waits
//!   for that page only and jumps the queue), and early/late (cold pages copied before the
//!   checkpoint, copying continuing into later intervals).
//! - Write tracking ([`TrackerKind`]) at page granularity: asynchronous userfaultfd
//!   write-protection read back with PAGEMAP_SCAN (Linux 6.7+; a first write is a minor fault
//!   the kernel resolves, and only pages whose previous version is not persisted yet are held
//!   read-only with mprotect), else userfaultfd write-protect faults served by a thread, else
//!   mprotect + SIGSEGV when userfaultfd is not permitted ([`Engine::tracker_fallback`] says
//!   why). Inside a dirty page, 64-byte lines are compared by hash with their last copy.
//! - Consolidation: changed lines of many pages packed into 16 KiB records with a header per
//!   page (page, 64-bit line bitmap, location); chains of increments are merged backwards in
//!   time during garbage collection.
//! - [`Store`]: where objects go: [`DirStore::ram`] (tmpfs), [`DirStore::ssd`] (files with
//!   fsync) and [`NamStore`] (persistent allocations on a memory server).
//! - [`restore`]: rebuilds the regions from the newest complete checkpoint, checking every
//!   CRC32C, skipping a damaged or incomplete one for the one before.
//!
//! ```
//! use nam_incr::{restore, Config, DirStore, Engine, Mode};
//! use std::sync::Arc;
//! let dir = std::env::temp_dir().join(format!("nam-incr-doc-{}", std::process::id()));
//! let store = Arc::new(DirStore::ram(&dir)?);
//! let mut data = vec![7u8; 3 * 4096 + 100];
//! let engine = Engine::new(Config::new(Mode::PartiallyNonBlocking), store.clone())?;
//! // SAFETY: `data` outlives the engine and nothing else changes its protection.
//! unsafe { engine.protect(data.as_mut_ptr(), data.len())? };
//! engine.checkpoint()?; // returns at once; a background thread writes
//! data[5000] = 1; // waits only if page 1 is not persisted yet
//! engine.checkpoint()?;
//! engine.wait()?;
//! drop(engine);
//! let back = restore(&*store)?;
//! assert_eq!(back.regions[0], data);
//! # std::fs::remove_dir_all(dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod commit;
pub mod constants;
mod copy;
mod engine;
mod error;
mod fork;
pub mod format;
pub mod geometry;
mod image;
mod merge;
mod mode;
mod pages;
pub mod record;
mod region;
mod restore;
mod store;
mod store_nam;
mod tracker;
mod writer;

pub use engine::{Engine, Stats};
pub use error::{IncrError, StoreError};
pub use mode::{Config, Mode};
pub use restore::{checkpoints, restore, restore_interval, Listed, Restored};
pub use store::{DirStore, Store};
pub use store_nam::NamStore;
pub use tracker::{TrackerChoice, TrackerKind};
