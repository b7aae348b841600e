//! Physical models: router frequency and energy against radix, wire delay and energy, area.
//!
//! Every constant here comes from Abeyratne 2017 Ch. III (thesis on asymmetric high-radix topologies):
//!
//! * wire delay 66 ps/mm and wire energy 0.07 pJ/bit/mm (§3.4.2);
//! * Swizzle-Switch frequency against radix at 128-bit datapath: radix 40 at 2.2 GHz and radix 52
//!   at 1.8 GHz (§3.3.1.1), radix 42 at 2.1 GHz (§3.3.1.2), radix 64 at 1.5 GHz (§3.2.2). Between
//!   the points the frequency is interpolated linearly; below radix 40 it is extrapolated along
//!   the line through (40, 2.2) and (64, 1.5), capped at [`ROUTER_FREQ_MAX_GHZ`]; above 64 along
//!   the same line, floored at [`ROUTER_FREQ_MIN_GHZ`];
//! * switch energy: a radix-64 switch at 1.5 GHz draws "less than 2 W" (§3.2.2). At full load
//!   (64 ports x 128 bits x 1.5 GHz) that is at most 0.163 pJ/bit; we scale it linearly with the
//!   radix (the crossbar's output wires grow with the radix). This is an **estimate**;
//! * router area: a crossbar term `a * radix^2` plus a buffer term `b * radix`. `a` comes from the
//!   Swizzle-Switch's ~2 mm^2 at radix 64 in 32 nm (§3.2.2) scaled by (15/32)^2 to 15 nm; `b` (one
//!   port's 4 VCs x 5 flits x 128 bits plus its share of control) is the single coefficient fitted,
//!   to the mesh row of Table 3.2 (576 radix-5 routers, 38.19 mm^2). Links are assumed to run
//!   over the tiles on upper metal and add no area. The other rows of Table 3.2 are predictions
//!   of this model, compared in `docs/netsim.md`. An **estimate**.

/// Wire delay per millimetre (Abeyratne 2017 §3.4.2).
pub const WIRE_DELAY_PS_PER_MM: f64 = 66.0;
/// Wire energy per bit per millimetre (Abeyratne 2017 §3.4.2).
pub const WIRE_ENERGY_PJ_PER_BIT_MM: f64 = 0.07;
/// Datapath (flit) width in bits (Abeyratne 2017 §3.4.3).
pub const FLIT_BITS: u32 = 128;
/// Highest router frequency the radix model returns.
pub const ROUTER_FREQ_MAX_GHZ: f64 = 3.3;
/// Lowest router frequency the radix model returns.
pub const ROUTER_FREQ_MIN_GHZ: f64 = 0.5;
/// Tile edge of the 24x24-tile chip (Abeyratne 2017 §3.2.1).
pub const TILE_MM: f64 = 0.9;

/// (radix, GHz) points of the Swizzle-Switch quoted in Abeyratne 2017 Ch. III.
pub const SWITCH_FREQ_POINTS: [(f64, f64); 4] = [(40.0, 2.2), (42.0, 2.1), (52.0, 1.8), (64.0, 1.5)];

/// Power of a radix-64 switch at 1.5 GHz (upper bound quoted in Abeyratne 2017 §3.2.2).
const SWITCH_POWER_R64_W: f64 = 2.0;
/// Area of a radix-64 128-bit switch in 32 nm (Abeyratne 2017 §3.2.2).
const SWITCH_AREA_R64_32NM_MM2: f64 = 2.0;
/// Abeyratne 2017 Table 3.2: network area of the 24x24 mesh (576 radix-5 routers), mm^2.
const MESH_AREA_TABLE_3_2_MM2: f64 = 38.19;

/// Router frequency for a radix, interpolated from [`SWITCH_FREQ_POINTS`].
pub fn router_freq_ghz(radix: usize) -> f64 {
    let r = radix as f64;
    let pts = SWITCH_FREQ_POINTS;
    let (first, last) = (pts[0], pts[pts.len() - 1]);
    let slope = (last.1 - first.1) / (last.0 - first.0);
    let f = if r <= first.0 {
        first.1 + slope * (r - first.0)
    } else if r >= last.0 {
        last.1 + slope * (r - last.0)
    } else {
        let i = pts.windows(2).position(|w| r <= w[1].0).unwrap_or(0);
        let (a, b) = (pts[i], pts[i + 1]);
        a.1 + (b.1 - a.1) * (r - a.0) / (b.0 - a.0)
    };
    f.clamp(ROUTER_FREQ_MIN_GHZ, ROUTER_FREQ_MAX_GHZ)
}

/// Estimated switch energy per bit traversing a router of this radix, in pJ.
pub fn router_energy_pj_per_bit(radix: usize) -> f64 {
    let e64 = SWITCH_POWER_R64_W / (64.0 * FLIT_BITS as f64 * 1.5e9) * 1e12;
    e64 * radix as f64 / 64.0
}

/// Link energy of one flit over `length_mm`, in pJ.
pub fn link_energy_pj_per_flit(length_mm: f64) -> f64 {
    WIRE_ENERGY_PJ_PER_BIT_MM * FLIT_BITS as f64 * length_mm
}

/// Crossbar area coefficient `a` (mm^2 per radix^2) in 15 nm.
fn crossbar_coeff() -> f64 {
    SWITCH_AREA_R64_32NM_MM2 * (15.0f64 / 32.0).powi(2) / (64.0 * 64.0)
}

/// Per-port buffer area coefficient `b` (mm^2 per port), fitted to the mesh row of Table 3.2.
fn port_coeff() -> f64 {
    (MESH_AREA_TABLE_3_2_MM2 / 576.0 - 25.0 * crossbar_coeff()) / 5.0
}

/// Estimated area of a router of this radix in 15 nm (crossbar plus buffers), mm^2.
pub fn router_area_mm2(radix: usize) -> f64 {
    let r = radix as f64;
    crossbar_coeff() * r * r + port_coeff() * r
}

/// Wire delay of a link in picoseconds.
pub fn wire_delay_ps(length_mm: f64) -> f64 {
    WIRE_DELAY_PS_PER_MM * length_mm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequency_hits_seed_points() {
        for (r, f) in SWITCH_FREQ_POINTS {
            assert!((router_freq_ghz(r as usize) - f).abs() < 1e-9);
        }
        assert!(router_freq_ghz(5) > router_freq_ghz(24));
        assert!(router_freq_ghz(24) > router_freq_ghz(36));
        assert!(router_freq_ghz(1000) >= ROUTER_FREQ_MIN_GHZ);
    }

    #[test]
    fn energy_grows_with_radix() {
        assert!(router_energy_pj_per_bit(64) > router_energy_pj_per_bit(5));
        assert!((link_energy_pj_per_flit(1.0) - 8.96).abs() < 1e-9);
    }
}
