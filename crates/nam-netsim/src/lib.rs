//! # nam-netsim: a cycle-level, flit-level interconnect simulator
//!
//! nam-netsim models on-chip and system networks at the level of flits and router clock cycles,
//! to reproduce the asymmetric high-radix topologies of Abeyratne 2017 Ch. III (Super-Star,
//! Super-StarX, Super-Ring against mesh, concentrated mesh and flattened butterfly on a 24x24-tile,
//! 576-node chip) and the ExaNeSt 3-D torus of Ploumidis et al. 2023 §4.1, and to let users try their own
//! networks from a text file.
//!
//! ## Tour
//!
//! * [`Topology`] holds routers (each with its own clock and position), directed channels with
//!   physical lengths, nodes and a [`RoutingKind`]. [`build`] makes the named topologies from
//!   [`TopologyParams`]; [`topofile::parse`] reads the text format.
//! * [`SimConfig`] sets VCs (4), buffer depth (5 flits), packet size (4 flits of 128 bits),
//!   [`Injection`] rate, [`TrafficPattern`] (uniform, clustered, transpose, bit-complement, trace),
//!   warm-up / window / drain and the random seed.
//! * [`run`] simulates one load point and returns a [`SimResult`] (average and p99 latency in ns
//!   and cycles, accepted throughput, energy, flit counts, [`RunStatus`]). The engine is in
//!   [`sim`]: input-queued VC routers with a two-stage pipeline, wormhole switching, credit flow
//!   control, separable round-robin allocators, per-router clocks with dual-clock buffers and
//!   links pipelined at 66 ps/mm.
//! * [`sweep::sweep`] runs a latency-throughput curve in parallel (rayon) and adds the analytic
//!   zero-load latency and channel-load bound from [`analytic`].
//! * [`exanest`] holds Ploumidis et al. 2023's per-path latency model and broadcast model.
//! * [`physical`] holds the frequency, energy, area and wire models with their sources in the cited works.
//!
//! ## Example
//!
//! ```
//! use nam_netsim::{build, run, Injection, SimConfig, TopologyParams};
//!
//! // A 4x4 mesh (16 nodes) at light uniform load.
//! let params = TopologyParams { tiles: 4, ..TopologyParams::default() };
//! let mesh = build("mesh", &params)?;
//! let cfg = SimConfig {
//!     injection: Injection::FlitsPerNodePerCycle(0.05),
//!     warmup_cycles: 200,
//!     measure_cycles: 500,
//!     ..SimConfig::default()
//! };
//! let result = run(&mesh, &cfg)?;
//! assert_eq!(result.status, nam_netsim::RunStatus::Stable);
//! assert!(result.avg_latency_cycles.unwrap() > 5.0);
//! assert_eq!(result.packets_malformed, 0);
//! # Ok::<(), nam_netsim::NetsimError>(())
//! ```

#![deny(missing_docs)]

pub mod alloc;
pub mod analytic;
pub mod bookconfig;
pub mod builders;
pub mod config;
pub mod constants;
pub mod error;
pub mod exanest;
pub mod physical;
pub mod routing;
pub mod sim;
pub mod sweep;
pub mod topofile;
pub mod topology;
pub mod traffic;

pub use alloc::AllocatorKind;
pub use builders::{build, TopologyParams, TOPOLOGY_NAMES};
pub use config::{Energy, Injection, InjectionProcess, RunStatus, SimConfig, SimResult};
pub use error::{NetsimError, Result};
pub use sim::run;
pub use topology::{CubeAlgo, DragonflyAlgo, RoutingKind, Topology, TopologySummary};
pub use traffic::TrafficPattern;
