//! Far memory over nam memory servers (Mao 2020 Ch. 6-8): memory servers act as memory
//! blades, and this process keeps a cache of their memory in a local-memory budget.
//!
//! A tour:
//! - [`ExtentTable`] maps the far address space in 4 MiB extents to per-server chunks,
//!   interleaving granules (pages by default) across servers; chunks are allocated on
//!   first write.
//! - [`SpanService`] reads and writes fixed-size spans (Mao 2020 Ch. 6) with nam's one-sided
//!   GET and PUT, many in flight at once.
//! - [`FarMemory`] is the explicit way in: `read`/`write` at far addresses through a
//!   set-associative cache ([`FarConfig`]: line size, ways, metadata cache, outstanding
//!   misses) with random-not-MRU replacement, write-back, write-allocate, full-line writes
//!   without a fetch, and the [`StreamPrefetcher`]; [`FarArray`] gives typed arrays, and
//!   `read_bulk`/`write_bulk` stream whole lines past the cache for sweeps over large arrays.
//!   [`FarArray::for_each_chunk`] and [`FarArray::zip_chunks_mut`] hand the caller's
//!   computation slices of resident lines in place, and [`FarMemory::fetch_ranges`] fetches
//!   the misses of many ranges as one batch (a graph frontier's neighbour lists).
//! - [`PagedRegion`] is the transparent way in: a userfaultfd-registered mapping whose
//!   missing pages are fetched from the servers by the faulting thread itself in a SIGBUS
//!   handler (signal mode, the default, prefetch windows included), or by a busy-polling
//!   handler thread that also installs prefetched pages in the background (thread mode),
//!   with write-protection to find dirty pages and batched eviction that keeps the resident
//!   set within the budget. Its prefetcher is
//!   throttled by its measured accuracy ([`Throttle`], [`ThrottleConfig`]). A program that
//!   knows what it reads next asks for it with [`PagedRegion::fetch_ranges`] and gives up
//!   what it is done with with [`PagedRegion::evict_range`].
//! - [`constants`] holds every limit and tuning value, and the assertions that tie them.
//! - [`exit_fatal`] ends a process whose far memory failed (a page fault that cannot be
//!   served) with one line on stderr and [`FATAL_EXIT_STATUS`], past any signal handler.
//! - [`CpuLatencyBound`] holds the kernel's CPU latency QoS bound, so that idle cores wake
//!   quickly for thread-mode faults (opt-in: [`PagerConfig::cpu_latency_us`]).
//!
//! ```no_run
//! use nam_client::{Client, ClientConfig};
//! use nam_farmem::{FarConfig, FarMemory};
//! use std::sync::Arc;
//! let client = Arc::new(Client::connect(ClientConfig::new(vec!["127.0.0.1:13337".parse().unwrap()]))?);
//! let mut far = FarMemory::new(client, FarConfig::new(1 << 30, 16 << 20))?;
//! let xs = far.alloc_array::<f64>(1_000_000)?;
//! xs.set(&mut far, 42, 2.5)?;
//! assert_eq!(xs.get(&mut far, 42)?, 2.5);
//! let mut sum = 0.0;
//! xs.for_each_chunk(&mut far, 0..xs.len(), |_, chunk| sum += chunk.iter().sum::<f64>())?;
//! assert_eq!(sum, 2.5);
//! far.flush()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod array;
mod cache;
pub mod config;
pub mod constants;
mod cpu_latency;
mod error;
mod extent;
mod far;
mod fatal;
mod pager;
mod prefetch;
mod span;
mod stats;
mod throttle;
mod uffd;

pub use array::{FarArray, Plain};
pub use config::{FarConfig, PrefetchConfig};
pub use cpu_latency::{cpu_latency_in_force_us, CpuLatencyBound, CPU_LATENCY_DEVICE};
pub use error::{Error, Result};
pub use extent::{ExtentTable, Placement};
pub use far::{DestMode, FarMemory};
pub use fatal::{exit_fatal, FATAL_EXIT_STATUS};
pub use pager::{free_huge_pages, huge_page_bytes, serving_faults, FaultMode, PagedRegion, PagerConfig, Watermarks};
pub use prefetch::StreamPrefetcher;
pub use span::SpanService;
pub use stats::Stats;
pub use throttle::{Throttle, ThrottleConfig, ThrottleTotals};
