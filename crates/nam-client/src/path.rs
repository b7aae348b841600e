//! Transfer-path choice on the same host (the Unimem MPhil thesis Ch. 4: native stores below a threshold,
//! the RDMA engine above it). A server whose pool is mapped here can be reached two ways:
//! the direct path (plain loads and stores into the mapping, [`crate::direct`]) and UCX
//! RMA over shared memory. Transfers up to a crossover size take the direct path, larger
//! ones RMA. The crossover is measured when the client connects (unless configured with
//! `direct_max_bytes` / `NAM_DIRECT_MAX`), and reported by [`Client::transfer_path`] and
//! `nam status`. Atomics and signals always take the direct path when there is one.

use crate::allocation::{AllocOptions, Allocation};
use crate::client::Client;
use crate::error::Result;
use crate::link::DataPath;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Largest size the connect-time measurement tries (its scratch allocation's size).
pub const PROBE_BYTES_MAX: u64 = 256 * 1024;

/// How transfers to one server are split between the direct path and RMA.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferPath {
    /// Transfers of at most this many bytes take the direct path (`u64::MAX`: every size;
    /// 0: none).
    pub direct_max_bytes: u64,
    /// Whether the crossover was measured (else configured).
    pub measured: bool,
    /// The measurement: (bytes, direct ns, RMA ns) per probed size.
    pub probes: Vec<(u64, f64, f64)>,
}

/// Per-server crossovers, readable without the client lock.
#[derive(Default)]
pub(crate) struct PathChoice {
    direct_max: Vec<AtomicU64>,
    reports: Mutex<Vec<Option<TransferPath>>>,
}

impl Client {
    /// The local base of `allocation` if a `len`-byte transfer should take the direct path.
    #[inline]
    pub(crate) fn direct_base_sized(
        &self,
        allocation: &Allocation,
        len: usize,
        what: &'static str,
    ) -> Result<Option<usize>> {
        let limit = self.paths.direct_max.get(allocation.server).map_or(u64::MAX, |m| m.load(Ordering::Relaxed));
        if len as u64 > limit {
            return Ok(None);
        }
        self.direct_base(allocation, what)
    }

    /// Whether a `len`-byte transfer to `allocation` takes the direct path (and is so
    /// visible at the server when it returns, without a flush).
    pub fn takes_direct_path(&self, allocation: &Allocation, len: usize) -> bool {
        allocation.is_direct()
            && len as u64
                <= self.paths.direct_max.get(allocation.server).map_or(u64::MAX, |m| m.load(Ordering::Relaxed))
    }

    /// The transfer-path split to server `server`, if the pool is mapped here (`None` for a
    /// server reached over the network or through messages).
    pub fn transfer_path(&self, server: usize) -> Option<TransferPath> {
        self.paths.reports.lock().unwrap().get(server).cloned().flatten()
    }

    /// The one-sided traffic that took the direct path (a part of [`Client::traffic`]).
    pub fn direct_traffic(&self) -> nam_proto::TrafficReport {
        self.direct.add_to(nam_proto::TrafficReport::default())
    }

    /// Sets the crossover of every same-host server: from the configuration, or measured.
    pub(crate) fn choose_paths(&mut self) -> Result<()> {
        let n = self.server_count();
        self.paths.direct_max = (0..n).map(|_| AtomicU64::new(u64::MAX)).collect();
        let mut reports = vec![None; n];
        for (server, report) in reports.iter_mut().enumerate() {
            if self.data_path(server) != Some(DataPath::SharedMemory) {
                continue;
            }
            let choice = match self.config.direct_max_bytes {
                Some(bytes) => TransferPath { direct_max_bytes: bytes, measured: false, probes: Vec::new() },
                // A failed probe (no room for the scratch allocation, say) must not fail
                // the connection: keep the direct path for every size, and say so.
                None => self.measure_crossover(server).unwrap_or_else(|e| {
                    log::warn!("server {server}: cannot measure the direct/RMA crossover ({e}); direct at every size");
                    TransferPath { direct_max_bytes: u64::MAX, measured: false, probes: Vec::new() }
                }),
            };
            self.paths.direct_max[server].store(choice.direct_max_bytes, Ordering::Relaxed);
            *report = Some(choice);
        }
        *self.paths.reports.lock().unwrap() = reports;
        Ok(())
    }

    /// Times puts of 4 B to [`PROBE_BYTES_MAX`] both ways on a scratch allocation. The
    /// crossover is the largest size below the smallest one from which RMA stays faster.
    fn measure_crossover(&self, server: usize) -> Result<TransferPath> {
        let scratch =
            self.alloc(PROBE_BYTES_MAX, &AllocOptions { server: Some(server), align: 4096, ..Default::default() })?;
        if !scratch.is_direct() {
            self.free(&scratch)?;
            return Ok(TransferPath { direct_max_bytes: 0, measured: true, probes: Vec::new() });
        }
        let source = vec![0x5au8; PROBE_BYTES_MAX as usize];
        let mut probes = Vec::new();
        let mut size = 4u64;
        while size <= PROBE_BYTES_MAX {
            let reps = (64 * 1024 / size).clamp(4, 256) as u32;
            let time = |limit: u64| -> Result<f64> {
                self.paths.direct_max[server].store(limit, Ordering::Relaxed);
                self.put(&scratch, 0, &source[..size as usize])?; // warm
                let t0 = Instant::now();
                for _ in 0..reps {
                    self.put(&scratch, 0, &source[..size as usize])?;
                }
                Ok(t0.elapsed().as_nanos() as f64 / reps as f64)
            };
            let (direct, rma) = (time(u64::MAX)?, time(0)?);
            probes.push((size, direct, rma));
            size *= 4;
        }
        self.flush_server(server)?;
        self.free(&scratch)?;
        Ok(TransferPath { direct_max_bytes: crossover(&probes), measured: true, probes })
    }
}

/// The direct-path limit from probes: below the smallest size from which RMA is faster (by
/// more than 10%, against noise) at every larger probed size; `u64::MAX` if there is none.
pub fn crossover(probes: &[(u64, f64, f64)]) -> u64 {
    let rma_wins = |p: &(u64, f64, f64)| p.2 * 1.1 < p.1;
    match probes.iter().position(rma_wins) {
        Some(i) if probes[i..].iter().all(rma_wins) => probes[i].0 - 1,
        _ => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::crossover;

    #[test]
    fn the_crossover_is_where_rma_starts_winning_for_good() {
        assert_eq!(crossover(&[(4, 10.0, 50.0), (16, 20.0, 40.0), (64, 80.0, 30.0), (256, 200.0, 60.0)]), 63);
        assert_eq!(crossover(&[(4, 10.0, 50.0), (16, 30.0, 20.0), (64, 20.0, 60.0)]), u64::MAX, "a lone win is noise");
        assert_eq!(crossover(&[(4, 10.0, 50.0), (16, 20.0, 19.0)]), u64::MAX, "within 10% is a tie");
        assert_eq!(crossover(&[(4, 50.0, 10.0)]), 3);
    }
}
