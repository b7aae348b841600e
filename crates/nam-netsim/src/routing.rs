//! Routing functions: dimension order, ROMM, Valiant and minimal adaptive on k-ary n-cubes
//! (datelines on wrap-around links), flattened butterfly, Super-Star round-robin global router
//! choice, Super-StarX threshold-adaptive use of neighbour links, Super-Ring, ExaNeSt and
//! shortest-path tables.

use crate::error::{NetsimError, Result};
use crate::topology::{CubeAlgo, DragonflyAlgo, RoutingKind, Topology};
use std::collections::VecDeque;

/// Per-packet routing state, updated at every route computation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteState {
    /// Current dateline class in the current dimension (0 or 1).
    pub class: u8,
    /// Dimension the packet moves in now (`u8::MAX` before the first dimensioned hop).
    pub dim: u8,
    /// Phase of a two-phase routing (0: toward the intermediate router, 1: toward the
    /// destination); single-phase routings stay at 1 once routed.
    pub phase: u8,
    /// Whether the per-packet choices (intermediate router, tie-breaks) were drawn.
    pub chosen: bool,
    /// Intermediate router of a two-phase routing.
    pub inter: u32,
    /// Tie-break bits: bit `phase * n + dim` sends a packet half-way round a ring the
    /// positive way when set.
    pub ties: u32,
}

impl RouteState {
    /// State of a packet that has not moved yet.
    pub fn new() -> Self {
        RouteState { class: 0, dim: u8::MAX, phase: 0, chosen: false, inter: 0, ties: 0 }
    }
}

/// Result of a route computation: the output port and the VC range the packet may use there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// Output port.
    pub port: usize,
    /// First allowed VC.
    pub vc_lo: u8,
    /// One past the last allowed VC.
    pub vc_hi: u8,
}

/// A topology's routing function, with the tables it needs.
#[derive(Debug, Clone)]
pub struct Router {
    table: Option<Vec<u16>>,
    vcs: u8,
    classes: u8,
}

const NO_PORT: u16 = u16::MAX;

impl Router {
    /// Prepares routing for `topo` with `vcs` VCs per port.
    pub fn new(topo: &Topology, vcs: usize) -> Result<Self> {
        let classes = topo.routing.vc_classes();
        if vcs < classes {
            return Err(NetsimError::InvalidParameter {
                field: "vcs".into(),
                reason: format!(
                    "routing `{}` needs at least {classes} VCs (one per VC class: datelines, phases, escape)",
                    topo.routing.name()
                ),
            });
        }
        let table = match topo.routing {
            RoutingKind::Shortest => Some(shortest_table(topo)?),
            _ => None,
        };
        Ok(Router { table, vcs: vcs as u8, classes: classes as u8 })
    }

    /// VCs of class `class` out of `self.classes` equal shares (the last takes the remainder).
    fn vc_range(&self, class: u8) -> (u8, u8) {
        let width = self.vcs / self.classes;
        let lo = class * width;
        let hi = if class + 1 == self.classes { self.vcs } else { lo + width };
        (lo, hi)
    }

    /// Number of equally likely per-packet choices (intermediate routers, tie-breaks) for a
    /// packet from router `src` to router `dst`: the analytic model averages over them.
    pub fn choices(&self, topo: &Topology, src: usize, dst: usize) -> usize {
        match &topo.routing {
            RoutingKind::Cube { dims, wrap, algo } => cube_choices(dims, *wrap, *algo, src, dst),
            RoutingKind::Dor { cols, rows, wrap } => cube_choices(&[*cols, *rows], *wrap, CubeAlgo::Dor, src, dst),
            RoutingKind::FatTree { k, levels } => k.pow(tree_up_levels(*k, *levels, src, dst) as u32),
            // Valiant's intermediate router; UGAL at zero load always routes minimally.
            RoutingKind::Dragonfly { routers, groups, algo: DragonflyAlgo::Valiant, .. } => routers * groups,
            _ => 1,
        }
    }

    /// Computes the next hop at router `r` for a packet to node `dst`.
    ///
    /// `pick` rotates among equivalent choices (global routers, parallel links); `occupancy(port)`
    /// returns the flits buffered downstream of an output port (for Super-StarX's threshold).
    #[inline]
    pub fn route(
        &self,
        topo: &Topology,
        r: usize,
        dst: usize,
        st: &mut RouteState,
        pick: usize,
        occupancy: &dyn Fn(usize) -> u32,
    ) -> Hop {
        let dr = topo.nodes[dst].router;
        if r == dr {
            // At the destination VC classes no longer matter (as in BookSim2): every VC.
            return Hop { port: topo.node_port(dst), vc_lo: 0, vc_hi: self.vcs };
        }
        let cube = match &topo.routing {
            RoutingKind::Cube { dims, wrap, algo } => Some((dims.as_slice(), *wrap, *algo)),
            _ => None,
        };
        if let Some((dims, wrap, algo)) = cube {
            let (next, class) = cube_next(dims, wrap, algo, r, dr, st, pick, &|to| {
                let ports = topo.ports_toward(r, to);
                ports.iter().map(|&p| occupancy(p as usize)).min().unwrap_or(u32::MAX)
            });
            let ports = topo.ports_toward(r, next);
            assert!(!ports.is_empty(), "routing chose a missing link {r} -> {next}");
            let (vc_lo, vc_hi) = self.vc_range(class);
            return Hop { port: ports[pick % ports.len()] as usize, vc_lo, vc_hi };
        }
        if let RoutingKind::Dragonfly { routers, globals, groups, algo } = topo.routing {
            if algo.non_minimal() {
                let toward = |to: usize| {
                    let ports = topo.ports_toward(r, to);
                    assert!(!ports.is_empty(), "routing chose a missing link {r} -> {to}");
                    ports[0] as usize
                };
                let g = DragonflyShape { routers, globals, groups };
                let (next, class) = g.non_minimal_next(algo, r, dr, st, pick, &|to| occupancy(toward(to)));
                let (vc_lo, vc_hi) = self.vc_range(class);
                return Hop { port: toward(next), vc_lo, vc_hi };
            }
        }
        let port = self.route_between(topo, r, dr, st, pick, occupancy);
        let (vc_lo, vc_hi) = if self.classes > 1 { self.vc_range(st.class) } else { (0, self.vcs) };
        Hop { port, vc_lo, vc_hi }
    }

    fn route_between(
        &self,
        topo: &Topology,
        r: usize,
        dr: usize,
        st: &mut RouteState,
        pick: usize,
        occupancy: &dyn Fn(usize) -> u32,
    ) -> usize {
        let toward = |to: usize| {
            let ports = topo.ports_toward(r, to);
            assert!(!ports.is_empty(), "routing chose a missing link {r} -> {to}");
            ports[pick % ports.len()] as usize
        };
        match &topo.routing {
            RoutingKind::Dor { cols, rows, wrap } => {
                let (next, _) = cube_next(&[*cols, *rows], *wrap, CubeAlgo::Dor, r, dr, st, pick, &|_| 0);
                toward(next)
            }
            RoutingKind::Cube { .. } => unreachable!("cube routing is handled in route"),
            RoutingKind::Dragonfly { routers, globals, groups, .. } => {
                let shape = DragonflyShape { routers: *routers, globals: *globals, groups: *groups };
                let next = shape.minimal_next(r, dr);
                if r / routers == dr / routers {
                    // Class 1 once the packet came through a global link.
                    st.class = u8::from(st.dim == 1);
                } else {
                    st.class = 0;
                    if next / routers != r / routers {
                        st.dim = 1;
                    }
                }
                toward(next)
            }
            RoutingKind::FatTree { k, levels } => {
                let per = k.pow(*levels as u32 - 1);
                let (l, w) = (r / per, r % per);
                if !st.chosen {
                    st.chosen = true;
                    st.ties = (pick % k.pow(tree_up_levels(*k, *levels, r, dr) as u32)) as u32;
                }
                if (l..levels - 1).all(|j| digit(w, j, *k) == digit(dr, j, *k)) {
                    // An ancestor of the destination's leaf: down, fixing digit l - 1.
                    let down = set_digit(w, l - 1, digit(dr, l - 1, *k), *k);
                    toward((l - 1) * per + down)
                } else {
                    let j = (st.ties as usize / k.pow(l as u32)) % k;
                    toward((l + 1) * per + set_digit(w, l, j, *k))
                }
            }
            RoutingKind::FlatFly { cols, .. } => {
                let (x, y, dx) = (r % cols, r / cols, dr % cols);
                if x != dx {
                    toward(y * cols + dx)
                } else {
                    toward(dr)
                }
            }
            RoutingKind::SuperStar { locals, cols, globals, neighbour_threshold_flits } => {
                if r >= *locals {
                    return toward(dr);
                }
                if let Some(th) = neighbour_threshold_flits {
                    let dist = (r % cols).abs_diff(dr % cols) + (r / cols).abs_diff(dr / cols);
                    if dist == 1 {
                        let p = toward(dr);
                        if occupancy(p) <= *th {
                            return p;
                        }
                    }
                }
                toward(globals[pick % globals.len()])
            }
            RoutingKind::SuperRing { locals, ring, local_gr } => {
                if r < *locals {
                    return toward(ring[local_gr[r]]);
                }
                let i = ring.iter().position(|&g| g == r).expect("global router in ring");
                let j = local_gr[dr];
                if i == j {
                    toward(dr)
                } else {
                    toward(ring[step_dim(st, 0, i, j, ring.len(), true, true)])
                }
            }
            RoutingKind::Exanest { dims, per_board } => {
                let (q, dq) = (r / per_board, dr / per_board);
                if q == dq {
                    return toward(dr);
                }
                if !r.is_multiple_of(*per_board) {
                    return toward(q * per_board);
                }
                let c = [q % dims[0], (q / dims[0]) % dims[1], q / (dims[0] * dims[1])];
                let d = [dq % dims[0], (dq / dims[0]) % dims[1], dq / (dims[0] * dims[1])];
                let dim = (0..3).find(|&i| c[i] != d[i]).expect("different QFDBs differ in a dimension");
                let mut n = c;
                n[dim] = step_dim(st, dim as u8, c[dim], d[dim], dims[dim], true, true);
                toward((n[0] + dims[0] * (n[1] + dims[1] * n[2])) * per_board)
            }
            RoutingKind::Shortest => {
                let t = self.table.as_ref().expect("shortest table built");
                t[r * topo.router_count() + dr] as usize
            }
        }
    }
}

/// A balanced dragonfly's size, for its routing steps.
struct DragonflyShape {
    routers: usize,
    globals: usize,
    groups: usize,
}

impl DragonflyShape {
    /// Next router on the minimal way from router `r` to router `t` (`r != t`): inside a group
    /// straight there; otherwise to the router holding the one global link toward `t`'s group,
    /// over it, then to `t`.
    fn minimal_next(&self, r: usize, t: usize) -> usize {
        let (a, n) = (self.routers, self.groups);
        let (g, d) = (r / a, t / a);
        if g == d {
            return t;
        }
        let owner = g * a + (d + n - g - 1) % n / self.globals;
        if r != owner {
            return owner;
        }
        d * a + (g + n - d - 1) % n / self.globals
    }

    /// Valiant's and UGAL-L's next router and VC class (see [`DragonflyAlgo`]); `r` is not the
    /// destination router `dr`. The choice is made at the source router: the intermediate
    /// router is drawn from `pick`, and UGAL compares `occupancy(next router)` of the two ways.
    fn non_minimal_next(
        &self,
        algo: DragonflyAlgo,
        r: usize,
        dr: usize,
        st: &mut RouteState,
        pick: usize,
        occupancy: &dyn Fn(usize) -> u32,
    ) -> (usize, u8) {
        let a = self.routers;
        if !st.chosen {
            st.chosen = true;
            // `dim` is 1 once the current phase took its global hop.
            st.dim = 0;
            st.phase = 1;
            let inter = pick % (a * self.groups);
            if r / a != dr / a && inter / a != r / a {
                let detour = match algo {
                    DragonflyAlgo::Ugal { threshold_flits } => {
                        let (m, v) = (self.minimal_next(r, dr), self.minimal_next(r, inter));
                        // Hop counts 1 and 2 weigh the two queues, as BookSim2's UGAL-L does.
                        occupancy(m) > 2 * occupancy(v) + threshold_flits
                    }
                    _ => true,
                };
                if detour {
                    st.phase = 0;
                    st.inter = inter as u32;
                }
            }
            // Phase numbering of the classes: a minimal packet uses the first phase's.
            st.class = 0;
        }
        if st.phase == 0 && r == st.inter as usize {
            st.phase = 1;
            st.class = 2;
            st.dim = 0;
        }
        let target = if st.phase == 0 { st.inter as usize } else { dr };
        let next = self.minimal_next(r, target);
        let class = st.class + u8::from(st.dim == 1);
        if next / a != r / a {
            st.dim = 1;
        }
        (next, class)
    }
}

/// One step along dimension `dim` from coordinate `c` toward `d` on a line or ring of size `k`.
/// On turning into the dimension the dateline class is fixed: 1 when the way to `d` crosses
/// the wrap-around link, else 0 (BookSim2's partition; each class's channels then form no
/// cycle because a minimal way covers at most half the ring). Half-way round, the packet goes
/// the positive way when `positive_tie`. Returns the next coordinate.
fn step_dim(st: &mut RouteState, dim: u8, c: usize, d: usize, k: usize, wrap: bool, positive_tie: bool) -> usize {
    if !wrap {
        st.dim = dim;
        st.class = 0;
        return if d > c { c + 1 } else { c - 1 };
    }
    let fwd = (d + k - c) % k;
    let positive = 2 * fwd < k || (2 * fwd == k && positive_tie);
    if st.dim != dim {
        st.dim = dim;
        st.class = u8::from(if positive { d < c } else { d > c });
    }
    if positive {
        (c + 1) % k
    } else {
        (c + k - 1) % k
    }
}

/// Digit `j` of `w` in base `k`.
fn digit(w: usize, j: usize, k: usize) -> usize {
    (w / k.pow(j as u32)) % k
}

/// `w` with digit `j` (base `k`) set to `v`.
fn set_digit(w: usize, j: usize, v: usize, k: usize) -> usize {
    let p = k.pow(j as u32);
    w - digit(w, j, k) * p + v * p
}

/// Levels a fat-tree packet climbs from leaf router `src` to reach an ancestor of leaf router
/// `dst` (0 when they are the same router).
fn tree_up_levels(k: usize, levels: usize, src: usize, dst: usize) -> usize {
    (0..levels).find(|&l| (l..levels - 1).all(|j| digit(src, j, k) == digit(dst, j, k))).unwrap_or(levels - 1)
}

/// Coordinates of router `r` on a cube of radices `dims` (at most 3).
fn coords(dims: &[usize], mut r: usize) -> [usize; 3] {
    let mut c = [0; 3];
    for (i, &k) in dims.iter().enumerate() {
        c[i] = r % k;
        r /= k;
    }
    c
}

fn router_at(dims: &[usize], c: &[usize; 3]) -> usize {
    dims.iter().enumerate().rev().fold(0, |acc, (i, &k)| acc * k + c[i])
}

/// Minimal offset from `a` to `b` on a line or ring of `k`: (hops, positive direction) with a
/// tie half-way round taken the positive way.
fn min_offset(a: usize, b: usize, k: usize, wrap: bool) -> (usize, bool) {
    if !wrap {
        return (a.abs_diff(b), b >= a);
    }
    let fwd = (b + k - a) % k;
    if 2 * fwd <= k {
        (fwd, true)
    } else {
        (k - fwd, false)
    }
}

/// Tie-break bits a packet draws: one per dimension and phase on a torus.
fn tie_bits(dims: &[usize], wrap: bool, algo: CubeAlgo) -> u32 {
    if wrap {
        (dims.len() * if algo.two_phase() { 2 } else { 1 }) as u32
    } else {
        0
    }
}

/// Intermediate routers a two-phase routing picks from (1 for single-phase ones).
fn intermediates(dims: &[usize], wrap: bool, algo: CubeAlgo, src: usize, dst: usize) -> usize {
    match algo {
        CubeAlgo::Valiant => dims.iter().product(),
        CubeAlgo::Romm => {
            let (a, b) = (coords(dims, src), coords(dims, dst));
            dims.iter().enumerate().map(|(i, &k)| min_offset(a[i], b[i], k, wrap).0 + 1).product()
        }
        _ => 1,
    }
}

fn cube_choices(dims: &[usize], wrap: bool, algo: CubeAlgo, src: usize, dst: usize) -> usize {
    intermediates(dims, wrap, algo, src, dst) << tie_bits(dims, wrap, algo)
}

/// Draws a packet's choices at its source router from `pick` (uniform over
/// [`cube_choices`] when `pick` is).
fn cube_choose(dims: &[usize], wrap: bool, algo: CubeAlgo, r: usize, dr: usize, st: &mut RouteState, pick: usize) {
    let bits = tie_bits(dims, wrap, algo);
    let c = pick % cube_choices(dims, wrap, algo, r, dr);
    st.ties = (c & ((1usize << bits) - 1)) as u32;
    let idx = c >> bits;
    st.chosen = true;
    st.phase = if algo.two_phase() { 0 } else { 1 };
    st.inter = match algo {
        CubeAlgo::Valiant => idx as u32,
        CubeAlgo::Romm => {
            let (a, b) = (coords(dims, r), coords(dims, dr));
            let mut rest = idx;
            let mut m = [0; 3];
            for (i, &k) in dims.iter().enumerate() {
                let (hops, positive) = min_offset(a[i], b[i], k, wrap);
                let o = rest % (hops + 1);
                rest /= hops + 1;
                m[i] = if positive { (a[i] + o) % k } else { (a[i] + k - o) % k };
            }
            router_at(dims, &m) as u32
        }
        _ => dr as u32,
    };
}

/// Next router and VC class on a cube (`r != dr`). `occupancy(to)` is the flits buffered
/// downstream toward neighbour `to` (minimal adaptive's selection).
#[allow(clippy::too_many_arguments)] // one routing step's inputs; a struct would only rename them
fn cube_next(
    dims: &[usize],
    wrap: bool,
    algo: CubeAlgo,
    r: usize,
    dr: usize,
    st: &mut RouteState,
    pick: usize,
    occupancy: &dyn Fn(usize) -> u32,
) -> (usize, u8) {
    if !st.chosen {
        cube_choose(dims, wrap, algo, r, dr, st, pick);
    }
    if st.phase == 0 && r == st.inter as usize {
        st.phase = 1;
        st.dim = u8::MAX;
    }
    let target = if st.phase == 0 { st.inter as usize } else { dr };
    let (c, t) = (coords(dims, r), coords(dims, target));
    let n = dims.len();
    let dor_dim = (0..n).find(|&i| c[i] != t[i]).expect("router differs from its target");
    let dateline = if wrap { 2 } else { 1 };
    if algo == CubeAlgo::MinAdaptive && pick % 2 == 1 {
        // Adaptive class (after the escape classes): the productive neighbour with the
        // fewest flits buffered downstream, ties to the lowest dimension.
        let mut best: Option<(u32, usize)> = None;
        for i in (0..n).filter(|&i| c[i] != t[i]) {
            let (_, positive) = min_offset(c[i], t[i], dims[i], wrap);
            let mut m = c;
            m[i] = match (positive, wrap) {
                (true, _) => (c[i] + 1) % dims[i],
                (false, true) => (c[i] + dims[i] - 1) % dims[i],
                (false, false) => c[i] - 1,
            };
            let to = router_at(dims, &m);
            let occ = occupancy(to);
            if best.is_none_or(|(o, _)| occ < o) {
                best = Some((occ, to));
            }
        }
        // The escape class's state is recomputed at every hop (it is memoryless).
        st.dim = u8::MAX;
        return (best.expect("a productive dimension").1, dateline as u8);
    }
    if algo == CubeAlgo::MinAdaptive {
        // Escape network: dimension order with the dateline class fixed afresh at each hop.
        st.dim = u8::MAX;
    }
    let i = dor_dim;
    let phase_bits = if algo.two_phase() { st.phase as usize * n } else { 0 };
    let tie = (st.ties >> (phase_bits + i)) & 1 == 1;
    let mut m = c;
    m[i] = step_dim(st, i as u8, c[i], t[i], dims[i], wrap, tie);
    let class = match algo {
        CubeAlgo::Romm | CubeAlgo::Valiant => st.phase * dateline as u8 + st.class,
        _ => st.class,
    };
    (router_at(dims, &m), class)
}

/// Minimum-hop next-port table, `[router * R + dest_router]`.
fn shortest_table(topo: &Topology) -> Result<Vec<u16>> {
    let n = topo.router_count();
    let mut table = vec![NO_PORT; n * n];
    let mut incoming: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (c, ch) in topo.channels.iter().enumerate() {
        incoming[ch.to].push(c);
    }
    let mut dist = vec![usize::MAX; n];
    for d in 0..n {
        dist.iter_mut().for_each(|x| *x = usize::MAX);
        dist[d] = 0;
        let mut q = VecDeque::from([d]);
        while let Some(v) = q.pop_front() {
            for &c in &incoming[v] {
                let u = topo.channels[c].from;
                if dist[u] == usize::MAX {
                    dist[u] = dist[v] + 1;
                    q.push_back(u);
                }
            }
        }
        for r in 0..n {
            if r == d || dist[r] == usize::MAX {
                continue;
            }
            let base = topo.router_nodes(r).len();
            let best = topo.out_channels(r).iter().position(|&c| dist[topo.channels[c].to] + 1 == dist[r]);
            if let Some(i) = best {
                table[r * n + d] = (base + i) as u16;
            }
        }
    }
    for a in topo.nodes.iter().map(|x| x.router) {
        for b in topo.nodes.iter().map(|x| x.router) {
            if a != b && table[a * n + b] == NO_PORT {
                return Err(NetsimError::InvalidTopology {
                    topology: topo.name.clone(),
                    reason: format!("router {} cannot reach router {}", topo.routers[a].label, topo.routers[b].label),
                });
            }
        }
    }
    Ok(table)
}

/// Switches a topology to another routing by name (`shortest` works everywhere; the native
/// routing's own name keeps it).
pub fn select(topo: &mut Topology, name: &str) -> Result<()> {
    if name == topo.routing.name() {
        return Ok(());
    }
    if name == "shortest" {
        topo.routing = RoutingKind::Shortest;
        return Ok(());
    }
    let cube = match &topo.routing {
        RoutingKind::Cube { dims, wrap, .. } => Some((dims.clone(), *wrap)),
        RoutingKind::Dor { cols, rows, wrap } => Some((vec![*cols, *rows], *wrap)),
        _ => None,
    };
    if let (Some((dims, wrap)), Some(algo)) = (cube.clone(), CubeAlgo::from_name(name)) {
        topo.routing = RoutingKind::Cube { dims, wrap, algo };
        return Ok(());
    }
    if let (RoutingKind::Dragonfly { algo, .. }, Some(a)) = (&mut topo.routing, DragonflyAlgo::from_name(name)) {
        *algo = a;
        return Ok(());
    }
    let known = match (&cube, &topo.routing) {
        (Some(_), _) => format!("{}, shortest", CubeAlgo::NAMES.join(", ")),
        (None, RoutingKind::Dragonfly { .. }) => format!("{}, shortest", DragonflyAlgo::NAMES.join(", ")),
        (None, _) => format!("{}, shortest", topo.routing.name()),
    };
    Err(NetsimError::UnknownRouting { name: name.to_string(), topology: topo.name.clone(), known })
}
