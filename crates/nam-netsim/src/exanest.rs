//! Ploumidis et al. 2023's ExaNeSt latency models: the per-path MPI latency model of §6.1.1 (Table 1-2) and
//! the broadcast model of §6.1.4 (Eq. 1).

use serde::Serialize;

/// Per-hop parameters of the path model (Ploumidis et al. 2023 §6.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PathModel {
    /// Latency of an empty MPI message between two ranks of one MPSoC, µs (1.17).
    pub base_us: f64,
    /// Link latency L_l, µs (about 0.120).
    pub link_us: f64,
    /// ExaNet routing block latency L_ER, µs (about 0.145).
    pub router_us: f64,
}

impl Default for PathModel {
    fn default() -> Self {
        PathModel { base_us: 1.17, link_us: 0.120, router_us: 0.145 }
    }
}

impl PathModel {
    /// Latency of a path with `i` inter-mezzanine, `j` intra-mezzanine and `k` intra-QFDB hops:
    /// `base + (i + j + 1) * L_ER (when i + j > 0) + (i + j + k) * L_l`. A path of N inter-QFDB hops
    /// passes N + 1 routing blocks; intra-QFDB hops are routed directly.
    pub fn latency_us(&self, i: u32, j: u32, k: u32) -> f64 {
        let inter = i + j;
        let routers = if inter > 0 { inter + 1 } else { 0 };
        self.base_us + routers as f64 * self.router_us + (inter + k) as f64 * self.link_us
    }
}

/// One row of Ploumidis et al. 2023 Table 1-2.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PathCase {
    /// Label as in Ploumidis et al. 2023.
    pub name: &'static str,
    /// Inter-mezzanine hops.
    pub inter_mezz: u32,
    /// Intra-mezzanine hops.
    pub intra_mezz: u32,
    /// Intra-QFDB hops.
    pub intra_qfdb: u32,
    /// Measured zero-byte osu_latency, µs (Ploumidis et al. 2023 Table 2).
    pub measured_us: f64,
}

/// The paths of Ploumidis et al. 2023 Table 2 with their measured latency.
pub const TABLE2: [PathCase; 6] = [
    PathCase { name: "Intra-FPGA", inter_mezz: 0, intra_mezz: 0, intra_qfdb: 0, measured_us: 1.17 },
    PathCase { name: "Intra-QFDB-sh", inter_mezz: 0, intra_mezz: 0, intra_qfdb: 1, measured_us: 1.293 },
    PathCase { name: "Intra-mezz-sh", inter_mezz: 0, intra_mezz: 1, intra_qfdb: 0, measured_us: 1.579 },
    PathCase { name: "Intra-mezz-mh(2)", inter_mezz: 0, intra_mezz: 1, intra_qfdb: 1, measured_us: 2.0 },
    PathCase { name: "Intra-mezz-mh(3)", inter_mezz: 0, intra_mezz: 1, intra_qfdb: 2, measured_us: 2.111 },
    PathCase { name: "Inter-mezz(3,1,2)", inter_mezz: 3, intra_mezz: 1, intra_qfdb: 2, measured_us: 2.555 },
];

/// Steps of a binomial-tree broadcast over `ranks` ranks packed `per_mpsoc` to an MPSoC and
/// `mpsoc_per_qfdb` MPSoCs to a QFDB: (intra-MPSoC, intra-QFDB, inter-QFDB) steps.
pub fn broadcast_steps(ranks: u32, per_mpsoc: u32, mpsoc_per_qfdb: u32) -> (u32, u32, u32) {
    let mut steps = (0, 0, 0);
    let mut dist = 1u32;
    while dist < ranks {
        if dist < per_mpsoc {
            steps.0 += 1;
        } else if dist < per_mpsoc * mpsoc_per_qfdb {
            steps.1 += 1;
        } else {
            steps.2 += 1;
        }
        dist = dist.saturating_mul(2);
    }
    steps
}

/// Ploumidis et al. 2023 Eq. 1: `L_exp = Ns_MPSoC * L_MPSoC + Ns_QFDB * L_QFDB + Ns_mezz * L_mezz`.
pub fn broadcast_latency_us(steps: (u32, u32, u32), l_mpsoc_us: f64, l_qfdb_us: f64, l_mezz_us: f64) -> f64 {
    steps.0 as f64 * l_mpsoc_us + steps.1 as f64 * l_qfdb_us + steps.2 as f64 * l_mezz_us
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_table2_prediction() {
        let m = PathModel::default();
        assert!((m.latency_us(3, 1, 2) - 2.615).abs() < 1e-9);
        assert!((m.latency_us(0, 0, 1) - 1.29).abs() < 1e-9);
    }

    #[test]
    fn broadcast_512_ranks_matches_seed_schedule() {
        // Ploumidis et al. 2023 §6.1.4: 512 ranks -> 5 inter-QFDB, 2 intra-QFDB, 2 intra-MPSoC steps.
        assert_eq!(broadcast_steps(512, 4, 4), (2, 2, 5));
        assert_eq!(broadcast_steps(4, 4, 4), (2, 0, 0));
    }
}
