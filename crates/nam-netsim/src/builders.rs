//! Builders for the named topologies on the 24x24-tile, 576-node layout (Abeyratne 2017 §3.2.1,
//! tile edge 0.9 mm) and for the ExaNeSt 3-D torus (Ploumidis et al. 2023 §4.1).

use crate::constants::{CUBE_DIMS_MAX, FILE_NODES_MAX, FILE_ROUTERS_MAX, LINK_CYCLES_MAX};
use crate::error::{invalid, NetsimError, Result};
use crate::physical::TILE_MM;
use crate::topology::{CubeAlgo, DragonflyAlgo, RoutingKind, Topology};

/// Names accepted by [`build`].
pub const TOPOLOGY_NAMES: [&str; 12] = [
    "mesh",
    "torus",
    "cmesh",
    "cmesh-low",
    "cmesh-high",
    "fbfly",
    "superstar",
    "superstarx",
    "superring",
    "exanest",
    "dragonfly",
    "fattree",
];

/// Cluster edge (tiles) of Super-Star's local routers: 16 tiles per cluster (Abeyratne 2017 §3.3.2).
pub const SUPERSTAR_CLUSTER_EDGE: usize = 4;
/// ExaNeSt serial link latency L_l (Ploumidis et al. 2023 §6.1.1: about 120 ns).
pub const EXANEST_LINK_NS: f64 = 120.0;
/// ExaNeSt routing block latency L_ER (Ploumidis et al. 2023 §6.1.1: (409 - 120) / 2 = 145 ns).
pub const EXANEST_ROUTER_NS: f64 = 145.0;
/// ExaNeSt switch clock (Ploumidis et al. 2023 §4.2: the NI and switches run at 150 MHz).
pub const EXANEST_FREQ_GHZ: f64 = 0.15;

/// Parameters of the named topologies. `Default` gives the configurations of Abeyratne 2017 Ch. III.
#[derive(Debug, Clone, PartialEq)]
pub struct TopologyParams {
    /// Edge of the square tile grid (24 in Abeyratne 2017: 576 nodes).
    pub tiles: usize,
    /// Nodes per router for `cmesh` / `fbfly` (a square number whose root divides `tiles`).
    pub concentration: Option<usize>,
    /// Parallel links between adjacent routers of `cmesh`.
    pub parallel_links: Option<usize>,
    /// Global routers of `superstar` / `superstarx` (Abeyratne 2017: 8, Table 3.2).
    pub global_routers: Option<usize>,
    /// Super-StarX: occupancy threshold (flits) of the neighbour link above which packets go
    /// through a global router instead.
    pub threshold_flits: Option<u32>,
    /// ExaNeSt torus size in QFDBs (X ring of 4 in a blade, Y ring of 4 blades, Z of 2 groups).
    pub exanest_dims: [usize; 3],
    /// Overrides every router's frequency (GHz) instead of the radix model.
    pub freq_ghz: Option<f64>,
    /// `mesh` / `torus` as a k-ary n-cube with these radices (1 to 3 dimensions, one node per
    /// router; `[8, 4]` is a rectangular 8x4 mesh) instead of the `tiles` x `tiles` grid.
    pub dims: Option<Vec<usize>>,
    /// Every router-router channel takes this many cycles of its upstream router's clock
    /// instead of its wire delay (BookSim2 `use_noc_latency`: 1 on a mesh, 2 on its folded
    /// torus).
    pub link_cycles: Option<u64>,
    /// Levels of routers of `fattree` (default 3; its arity is `concentration`, default 4).
    pub levels: Option<usize>,
}

impl Default for TopologyParams {
    fn default() -> Self {
        TopologyParams {
            tiles: 24,
            concentration: None,
            parallel_links: None,
            global_routers: None,
            threshold_flits: None,
            exanest_dims: [4, 4, 2],
            freq_ghz: None,
            dims: None,
            link_cycles: None,
            levels: None,
        }
    }
}

/// Builds a named topology.
pub fn build(name: &str, p: &TopologyParams) -> Result<Topology> {
    if p.tiles < 2 || p.tiles > 64 {
        return Err(invalid("tiles", format!("{} is outside 2..=64", p.tiles)));
    }
    if p.dims.is_some() && !matches!(name, "mesh" | "torus") {
        return Err(invalid("dims", format!("only mesh and torus take dimensions, not {name}")));
    }
    let mut t = match (name, &p.dims) {
        ("mesh", Some(d)) => cube(name, d, false)?,
        ("torus", Some(d)) => cube(name, d, true)?,
        _ => named(name, p)?,
    };
    if let Some(f) = p.freq_ghz {
        if !(f > 0.0 && f <= 100.0) {
            return Err(invalid("freq_ghz", format!("{f} is outside (0, 100]")));
        }
        for r in &mut t.routers {
            r.freq_ghz = f;
        }
    }
    let mut t = t.finish_by_class()?;
    if let Some(n) = p.link_cycles {
        if n == 0 || n > LINK_CYCLES_MAX {
            return Err(invalid("link_cycles", format!("{n} is outside 1..={LINK_CYCLES_MAX}")));
        }
        for ch in &mut t.channels {
            let period = (1000.0 / t.routers[ch.from].freq_ghz).round().max(1.0);
            ch.delay_ps = Some(n as f64 * period);
        }
    }
    Ok(t)
}

/// The topologies of the tile layout.
fn named(name: &str, p: &TopologyParams) -> Result<Topology> {
    Ok(match name {
        "mesh" => grid(name, p.tiles, 1, 1, false)?,
        "torus" => grid(name, p.tiles, 1, 1, true)?,
        "cmesh" | "cmesh-low" => {
            grid(name, p.tiles, p.concentration.unwrap_or(4), p.parallel_links.unwrap_or(1), false)?
        }
        "cmesh-high" => grid(name, p.tiles, p.concentration.unwrap_or(36), p.parallel_links.unwrap_or(4), false)?,
        "fbfly" => flatfly(p.tiles, p.concentration.unwrap_or(36))?,
        "superstar" => superstar(name, p.tiles, p.global_routers.unwrap_or(8), None)?,
        "superstarx" => superstar(name, p.tiles, p.global_routers.unwrap_or(8), Some(p.threshold_flits.unwrap_or(3)))?,
        "superring" => superring(p.tiles)?,
        "exanest" => exanest(p.exanest_dims)?,
        "dragonfly" => dragonfly(p.concentration.unwrap_or(2))?,
        "fattree" => fattree(p.concentration.unwrap_or(4), p.levels.unwrap_or(3))?,
        _ => return Err(NetsimError::UnknownTopology { name: name.to_string(), known: TOPOLOGY_NAMES.join(", ") }),
    })
}

/// Kim et al.'s balanced dragonfly with `p` nodes per router: groups of `a = 2p` fully connected
/// routers with `h = p` global links each, `a h + 1` groups, one global link between every two
/// groups; groups 4 tiles apart on a line of tiles, local links one tile long.
fn dragonfly(p: usize) -> Result<Topology> {
    if !(1..=4).contains(&p) {
        return Err(invalid("concentration", format!("dragonfly nodes per router {p} is outside 1..=4")));
    }
    let (a, h) = (2 * p, p);
    let g = a * h + 1;
    let mut t = Topology::new(
        "dragonfly",
        RoutingKind::Dragonfly { routers: a, globals: h, groups: g, algo: DragonflyAlgo::Minimal },
    );
    for gi in 0..g {
        for i in 0..a {
            t.add_router(format!("G{gi}R{i}"), tile_center(gi * (a + 1) + i), tile_center(0), false);
        }
    }
    for gi in 0..g {
        for i in 0..a {
            for j in i + 1..a {
                t.connect(gi * a + i, gi * a + j, (j - i) as f64 * TILE_MM);
            }
        }
    }
    for gi in 0..g {
        for gj in gi + 1..g {
            let (l, back) = ((gj - gi - 1) % g, (gi + g - gj - 1) % g);
            let (ra, rb) = (gi * a + l / h, gj * a + back / h);
            t.connect(ra, rb, (t.routers[ra].x_mm - t.routers[rb].x_mm).abs());
        }
    }
    for r in 0..g * a {
        for _ in 0..p {
            t.add_node(r, t.routers[r].x_mm, t.routers[r].y_mm, 0.0);
        }
    }
    Ok(t)
}

/// k-ary n-tree: `k^n` nodes, `n` levels of `k^(n-1)` routers (radix `2k`, the top `k`),
/// levels one tile apart, routers of a level one tile apart.
fn fattree(k: usize, n: usize) -> Result<Topology> {
    if !(2..=8).contains(&k) || !(1..=4).contains(&n) || k.pow(n as u32) > FILE_NODES_MAX {
        return Err(invalid("levels", format!("fat tree of arity {k} and {n} levels is outside 2..=8 x 1..=4")));
    }
    let per = k.pow(n as u32 - 1);
    let mut t = Topology::new("fattree", RoutingKind::FatTree { k, levels: n });
    for l in 0..n {
        for w in 0..per {
            t.add_router(format!("L{l}W{w}"), tile_center(w), tile_center(l), false);
        }
    }
    for l in 0..n.saturating_sub(1) {
        let p = k.pow(l as u32);
        for w in 0..per {
            for j in 0..k {
                let up = w - (w / p) % k * p + j * p;
                let (a, b) = (l * per + w, (l + 1) * per + up);
                t.connect(a, b, TILE_MM + (t.routers[a].x_mm - t.routers[b].x_mm).abs());
            }
        }
    }
    for w in 0..per {
        for _ in 0..k {
            t.add_node(w, t.routers[w].x_mm, t.routers[w].y_mm, 0.0);
        }
    }
    Ok(t)
}

/// A k-ary n-cube (mesh or folded torus) with one node per router, routers one tile apart
/// (a third dimension's layers side by side along y), every link one tile long on a mesh and
/// two on the folded torus.
fn cube(name: &str, dims: &[usize], wrap: bool) -> Result<Topology> {
    if dims.is_empty() || dims.len() > CUBE_DIMS_MAX {
        return Err(invalid("dims", format!("{} dimensions is outside 1..={CUBE_DIMS_MAX}", dims.len())));
    }
    if let Some(k) = dims.iter().find(|&&k| !(2..=64).contains(&k)) {
        return Err(invalid("dims", format!("radix {k} is outside 2..=64")));
    }
    let total: usize = dims.iter().product();
    if total > FILE_ROUTERS_MAX {
        return Err(invalid("dims", format!("{total} routers is above {FILE_ROUTERS_MAX}")));
    }
    let mut t = Topology::new(name, RoutingKind::Cube { dims: dims.to_vec(), wrap, algo: CubeAlgo::Dor });
    let k0 = dims[0];
    let k1 = dims.get(1).copied().unwrap_or(1);
    for r in 0..total {
        let (x, y) = (r % k0, r / k0);
        t.add_router(format!("r{r}"), tile_center(x), tile_center(y), false);
    }
    let len = if wrap { 2.0 * TILE_MM } else { TILE_MM };
    let mut stride = 1;
    for &k in dims {
        for r in 0..total {
            let c = (r / stride) % k;
            if c + 1 < k {
                t.connect(r, r + stride, len);
            } else if wrap && k > 2 {
                t.connect(r, r - c * stride, len);
            }
        }
        stride *= k;
    }
    for r in 0..total {
        t.add_node(r, t.routers[r].x_mm, t.routers[r].y_mm, 0.0);
    }
    t.node_grid = match dims.len() {
        1 => Some((k0, 1)),
        2 => Some((k0, k1)),
        _ => None,
    };
    t.chip_width_mm = Some(k0 as f64 * TILE_MM);
    Ok(t)
}

fn tile_center(i: usize) -> f64 {
    (i as f64 + 0.5) * TILE_MM
}

fn manhattan(ax: f64, ay: f64, bx: f64, by: f64) -> f64 {
    (ax - bx).abs() + (ay - by).abs()
}

fn concentration_edge(tiles: usize, conc: usize) -> Result<usize> {
    let edge = (conc as f64).sqrt().round() as usize;
    if conc == 0 || edge * edge != conc {
        return Err(invalid("concentration", format!("{conc} is not a square number")));
    }
    if !tiles.is_multiple_of(edge) {
        return Err(invalid("concentration", format!("cluster edge {edge} does not divide the {tiles}x{tiles} grid")));
    }
    Ok(edge)
}

/// Adds the tiles of a `tiles x tiles` grid as nodes, each attached to `router_of(x, y)`.
fn add_tiles(t: &mut Topology, tiles: usize, router_of: impl Fn(usize, usize) -> usize) {
    for y in 0..tiles {
        for x in 0..tiles {
            let r = router_of(x, y);
            let (nx, ny) = (tile_center(x), tile_center(y));
            let len = manhattan(nx, ny, t.routers[r].x_mm, t.routers[r].y_mm);
            t.add_node(r, nx, ny, len);
        }
    }
    t.node_grid = Some((tiles, tiles));
    t.cluster_edge_nodes = Some(SUPERSTAR_CLUSTER_EDGE.min(tiles));
    t.chip_width_mm = Some(tiles as f64 * TILE_MM);
}

/// Mesh, torus (folded, every link two tiles long) and concentrated mesh.
fn grid(name: &str, tiles: usize, conc: usize, parallel: usize, wrap: bool) -> Result<Topology> {
    let edge = concentration_edge(tiles, conc)?;
    if parallel == 0 || parallel > 16 {
        return Err(invalid("parallel_links", format!("{parallel} is outside 1..=16")));
    }
    let k = tiles / edge;
    if k < 2 {
        return Err(invalid("concentration", "leaves fewer than 2 routers per row"));
    }
    let mut t = Topology::new(name, RoutingKind::Cube { dims: vec![k, k], wrap, algo: CubeAlgo::Dor });
    let pitch = edge as f64 * TILE_MM;
    for y in 0..k {
        for x in 0..k {
            let (cx, cy) = ((x as f64 + 0.5) * pitch, (y as f64 + 0.5) * pitch);
            t.add_router(format!("r({x},{y})"), cx, cy, false);
        }
    }
    let len = if wrap { 2.0 * pitch } else { pitch };
    for y in 0..k {
        for x in 0..k {
            let id = y * k + x;
            let right = if x + 1 < k {
                Some(id + 1)
            } else if wrap && k > 2 {
                Some(y * k)
            } else {
                None
            };
            let up = if y + 1 < k {
                Some(id + k)
            } else if wrap && k > 2 {
                Some(x)
            } else {
                None
            };
            for nb in [right, up].into_iter().flatten() {
                for _ in 0..parallel {
                    t.connect(id, nb, len);
                }
            }
        }
    }
    add_tiles(&mut t, tiles, |x, y| (y / edge) * k + x / edge);
    Ok(t)
}

/// 2-D flattened butterfly: routers fully connected along rows and columns.
fn flatfly(tiles: usize, conc: usize) -> Result<Topology> {
    let edge = concentration_edge(tiles, conc)?;
    let k = tiles / edge;
    if k < 2 {
        return Err(invalid("concentration", "leaves fewer than 2 routers per row"));
    }
    let mut t = Topology::new("fbfly", RoutingKind::FlatFly { cols: k, rows: k });
    let pitch = edge as f64 * TILE_MM;
    for y in 0..k {
        for x in 0..k {
            t.add_router(format!("r({x},{y})"), (x as f64 + 0.5) * pitch, (y as f64 + 0.5) * pitch, false);
        }
    }
    for y in 0..k {
        for x in 0..k {
            for x2 in x + 1..k {
                t.connect(y * k + x, y * k + x2, (x2 - x) as f64 * pitch);
            }
            for y2 in y + 1..k {
                t.connect(y * k + x, y2 * k + x, (y2 - y) as f64 * pitch);
            }
        }
    }
    add_tiles(&mut t, tiles, |x, y| (y / edge) * k + x / edge);
    Ok(t)
}

/// Places `g` global routers on a circle of a quarter chip width around the chip centre.
fn global_positions(g: usize, chip_mm: f64) -> Vec<(f64, f64)> {
    let c = chip_mm / 2.0;
    if g == 1 {
        return vec![(c, c)];
    }
    let radius = chip_mm / 4.0;
    (0..g)
        .map(|i| {
            let a = std::f64::consts::TAU * (i as f64 + 0.5) / g as f64;
            (c + radius * a.cos(), c + radius * a.sin())
        })
        .collect()
}

/// Super-Star (and Super-StarX when `threshold` is set): 16-tile clusters on local routers,
/// every local router connected to every global router (Abeyratne 2017 §3.3.2.1-2).
fn superstar(name: &str, tiles: usize, globals: usize, threshold: Option<u32>) -> Result<Topology> {
    if globals == 0 || globals > 16 {
        return Err(invalid("global_routers", format!("{globals} is outside 1..=16")));
    }
    let edge = concentration_edge(tiles, SUPERSTAR_CLUSTER_EDGE * SUPERSTAR_CLUSTER_EDGE)?;
    let k = tiles / edge;
    let chip = tiles as f64 * TILE_MM;
    let pitch = edge as f64 * TILE_MM;
    let locals = k * k;
    let gids: Vec<usize> = (locals..locals + globals).collect();
    let routing =
        RoutingKind::SuperStar { locals, cols: k, globals: gids.clone(), neighbour_threshold_flits: threshold };
    let mut t = Topology::new(name, routing);
    for y in 0..k {
        for x in 0..k {
            t.add_router(format!("LR{}", y * k + x), (x as f64 + 0.5) * pitch, (y as f64 + 0.5) * pitch, false);
        }
    }
    for (i, (gx, gy)) in global_positions(globals, chip).into_iter().enumerate() {
        t.add_router(format!("GR{i}"), gx, gy, true);
    }
    for l in 0..locals {
        for &g in &gids {
            let len = manhattan(t.routers[l].x_mm, t.routers[l].y_mm, t.routers[g].x_mm, t.routers[g].y_mm);
            t.connect(l, g, len);
        }
    }
    if threshold.is_some() {
        for y in 0..k {
            for x in 0..k {
                if x + 1 < k {
                    t.connect(y * k + x, y * k + x + 1, pitch);
                }
                if y + 1 < k {
                    t.connect(y * k + x, (y + 1) * k + x, pitch);
                }
            }
        }
    }
    add_tiles(&mut t, tiles, |x, y| (y / edge) * k + x / edge);
    Ok(t)
}

/// Super-Ring: four quadrants, one global router each at the quadrant centre, global routers
/// in a bidirectional ring (Abeyratne 2017 §3.3.2.3).
fn superring(tiles: usize) -> Result<Topology> {
    let edge = concentration_edge(tiles, SUPERSTAR_CLUSTER_EDGE * SUPERSTAR_CLUSTER_EDGE)?;
    let k = tiles / edge;
    if !k.is_multiple_of(2) {
        return Err(invalid("tiles", format!("{tiles} does not split into 4 quadrants of 4x4-tile clusters")));
    }
    let pitch = edge as f64 * TILE_MM;
    let chip = tiles as f64 * TILE_MM;
    let locals = k * k;
    let quadrant = |x: usize, y: usize| (y >= k / 2) as usize * 2 + (x >= k / 2) as usize;
    // Ring order: bottom-left, bottom-right, top-right, top-left.
    let ring_of_quadrant = [0usize, 1, 3, 2];
    let mut local_gr = Vec::with_capacity(locals);
    for y in 0..k {
        for x in 0..k {
            local_gr.push(ring_of_quadrant[quadrant(x, y)]);
        }
    }
    let ring: Vec<usize> = (locals..locals + 4).collect();
    let mut t =
        Topology::new("superring", RoutingKind::SuperRing { locals, ring: ring.clone(), local_gr: local_gr.clone() });
    for y in 0..k {
        for x in 0..k {
            t.add_router(format!("LR{}", y * k + x), (x as f64 + 0.5) * pitch, (y as f64 + 0.5) * pitch, false);
        }
    }
    let (q1, q3) = (chip / 4.0, 3.0 * chip / 4.0);
    for (i, (gx, gy)) in [(q1, q1), (q3, q1), (q3, q3), (q1, q3)].into_iter().enumerate() {
        t.add_router(format!("GR{i}"), gx, gy, true);
    }
    for (l, &gi) in local_gr.iter().enumerate() {
        let g = ring[gi];
        let len = manhattan(t.routers[l].x_mm, t.routers[l].y_mm, t.routers[g].x_mm, t.routers[g].y_mm);
        t.connect(l, g, len);
    }
    for i in 0..4 {
        let (a, b) = (ring[i], ring[(i + 1) % 4]);
        let len = manhattan(t.routers[a].x_mm, t.routers[a].y_mm, t.routers[b].x_mm, t.routers[b].y_mm);
        t.connect(a, b, len);
    }
    add_tiles(&mut t, tiles, |x, y| (y / edge) * k + x / edge);
    Ok(t)
}

/// The ExaNeSt prototype: QFDBs of 4 fully connected MPSoCs (16 Gb/s links), network MPSoCs
/// on a 3-D torus (Ploumidis et al. 2023 §4.1), all switches at 150 MHz (§4.2). Intra-QFDB channels carry the
/// link latency L_l; torus channels carry L_l plus the routing block latency L_ER (§6.1.1).
fn exanest(dims: [usize; 3]) -> Result<Topology> {
    if dims.iter().any(|&d| d == 0 || d > 16) {
        return Err(invalid("exanest_dims", format!("{dims:?}: each size must be in 1..=16")));
    }
    let per_board = 4;
    let mut t = Topology::new("exanest", RoutingKind::Exanest { dims, per_board });
    let qfdbs = dims[0] * dims[1] * dims[2];
    for q in 0..qfdbs {
        let (x, y, z) = (q % dims[0], (q / dims[0]) % dims[1], q / (dims[0] * dims[1]));
        for f in 0..per_board {
            let r = t.add_router(
                format!("Q{q}F{}", f + 1),
                (x * 2 + f % 2) as f64 * 130.0,
                ((y + z * dims[1]) * 2 + f / 2) as f64 * 130.0,
                false,
            );
            t.routers[r].freq_ghz = EXANEST_FREQ_GHZ;
            t.add_node(r, t.routers[r].x_mm, t.routers[r].y_mm, 0.0);
        }
        for a in 0..per_board {
            for b in a + 1..per_board {
                t.connect(q * per_board + a, q * per_board + b, 0.0);
            }
        }
    }
    let index = |c: [usize; 3]| c[0] + dims[0] * (c[1] + dims[1] * c[2]);
    for q in 0..qfdbs {
        let c = [q % dims[0], (q / dims[0]) % dims[1], q / (dims[0] * dims[1])];
        for d in 0..3 {
            let k = dims[d];
            if k < 2 || (k == 2 && c[d] == 1) {
                continue;
            }
            let mut n = c;
            n[d] = (c[d] + 1) % k;
            t.connect(q * per_board, index(n) * per_board, 0.0);
        }
    }
    let torus_ps = (EXANEST_LINK_NS + EXANEST_ROUTER_NS) * 1000.0;
    for ch in &mut t.channels {
        let torus = ch.from / per_board != ch.to / per_board;
        ch.delay_ps = Some(if torus { torus_ps } else { EXANEST_LINK_NS * 1000.0 });
    }
    Ok(t)
}
