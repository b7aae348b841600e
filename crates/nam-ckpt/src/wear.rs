//! SSD wear per node, persisted across runs.
//!
//! Bytes written by the checkpoints of all ranks of a node are summed over the node (one
//! allreduce on a node communicator) and kept in a small JSON file on the SSD
//! (`ssd.wear_file`), written by the node's first rank. The first run starts from
//! `ssd.used_pbw` (read it from `nvme smart-log` "Data Units Written" or `smartctl`); this
//! library does not read SMART itself (it runs unprivileged and the counters need root).

use crate::comm::Comm;
use crate::error::{CkptError, Result};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

const PB: f64 = 1e15;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WearRecord {
    device_dir: PathBuf,
    bytes_written: f64,
}

/// The SSD wear of this rank's node.
pub struct Wear {
    node_comm: SimpleCommunicator,
    file: PathBuf,
    device_dir: PathBuf,
    rated_bytes: f64,
    initial_bytes: f64,
    run_bytes: u64,
}

impl Wear {
    /// Collective: opens (or starts) the wear record of each node.
    pub fn open(comm: &Comm, device_dir: PathBuf, file: PathBuf, rated_pbw: f64, used_pbw: f64) -> Result<Wear> {
        let node = comm.nodes().node_of[comm.rank()];
        let node_comm = comm.split(Some(node as u32), comm.rank() as i32).expect("every rank has a node");
        let initial = match std::fs::read(&file) {
            Ok(bytes) => {
                serde_json::from_slice::<WearRecord>(&bytes)
                    .map_err(|e| CkptError::Corrupt(format!("wear file {}: {e}", file.display())))?
                    .bytes_written
            }
            Err(_) => used_pbw * PB,
        };
        if rated_pbw <= 0.0 {
            return Err(CkptError::Config(format!("ssd.rated_pbw = {rated_pbw} must be positive")));
        }
        Ok(Wear { node_comm, file, device_dir, rated_bytes: rated_pbw * PB, initial_bytes: initial, run_bytes: 0 })
    }

    /// Rated bytes written.
    pub fn rated_bytes(&self) -> f64 {
        self.rated_bytes
    }

    /// Bytes written to the device, including this run.
    pub fn used_bytes(&self) -> f64 {
        self.initial_bytes + self.run_bytes as f64
    }

    /// Bytes this node's ranks wrote to the SSD in this run.
    pub fn run_bytes(&self) -> u64 {
        self.run_bytes
    }

    /// Collective over the node: adds this rank's SSD bytes; the node's first rank persists
    /// the total.
    pub fn add(&mut self, bytes: u64) -> Result<()> {
        let mut node_total = 0u64;
        self.node_comm.all_reduce_into(&bytes, &mut node_total, SystemOperation::sum());
        if node_total == 0 {
            return Ok(());
        }
        self.run_bytes += node_total;
        if self.node_comm.rank() != 0 {
            return Ok(());
        }
        let record = WearRecord { device_dir: self.device_dir.clone(), bytes_written: self.used_bytes() };
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&record).expect("serializes"))
            .and_then(|_| std::fs::rename(&tmp, &self.file))
            .map_err(|e| CkptError::io("write wear file", &self.file, e))
    }
}
