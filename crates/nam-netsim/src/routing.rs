//! Routing functions: dimension order (with datelines on wrap-around links), flattened
//! butterfly, Super-Star round-robin global router choice, Super-StarX threshold-adaptive use of
//! neighbour links, Super-Ring, ExaNeSt and shortest-path tables.

use crate::error::{NetsimError, Result};
use crate::topology::{RoutingKind, Topology};
use std::collections::VecDeque;

/// Per-packet routing state, updated at every route computation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteState {
    /// Current VC class (0 before a dateline, 1 after).
    pub class: u8,
    /// Dimension the packet moves in now (`u8::MAX` before the first dimensioned hop).
    pub dim: u8,
}

impl RouteState {
    /// State of a packet that has not moved yet.
    pub fn new() -> Self {
        RouteState { class: 0, dim: u8::MAX }
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
}

const NO_PORT: u16 = u16::MAX;

impl Router {
    /// Prepares routing for `topo` with `vcs` VCs per port.
    pub fn new(topo: &Topology, vcs: usize) -> Result<Self> {
        if topo.routing.needs_vc_classes() && vcs < 2 {
            return Err(NetsimError::InvalidParameter {
                field: "vcs".into(),
                reason: format!("routing `{}` needs at least 2 VCs (dateline classes)", topo.routing.name()),
            });
        }
        let table = match topo.routing {
            RoutingKind::Shortest => Some(shortest_table(topo)?),
            _ => None,
        };
        Ok(Router { table, vcs: vcs as u8 })
    }

    fn vc_range(&self, topo: &Topology, class: u8) -> (u8, u8) {
        if topo.routing.needs_vc_classes() {
            let half = self.vcs / 2;
            if class == 0 {
                (0, half)
            } else {
                (half, self.vcs)
            }
        } else {
            (0, self.vcs)
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
        let port = if r == dr { topo.node_port(dst) } else { self.route_between(topo, r, dr, st, pick, occupancy) };
        let (vc_lo, vc_hi) = self.vc_range(topo, st.class);
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
            RoutingKind::Dor { cols, wrap, .. } => {
                let (x, y, dx, dy) = (r % cols, r / cols, dr % cols, dr / cols);
                let rows = topo.router_count() / cols;
                if x != dx {
                    let nx = step_dim(st, 0, x, dx, *cols, *wrap);
                    toward(y * cols + nx)
                } else {
                    let ny = step_dim(st, 1, y, dy, rows, *wrap);
                    toward(ny * cols + x)
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
                    toward(ring[step_dim(st, 0, i, j, ring.len(), true)])
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
                n[dim] = step_dim(st, dim as u8, c[dim], d[dim], dims[dim], true);
                toward((n[0] + dims[0] * (n[1] + dims[1] * n[2])) * per_board)
            }
            RoutingKind::Shortest => {
                let t = self.table.as_ref().expect("shortest table built");
                t[r * topo.router_count() + dr] as usize
            }
        }
    }
}

/// One step along dimension `dim` from coordinate `c` toward `d` on a line or ring of size `k`,
/// updating the dateline class. Returns the next coordinate.
fn step_dim(st: &mut RouteState, dim: u8, c: usize, d: usize, k: usize, wrap: bool) -> usize {
    if st.dim != dim {
        st.dim = dim;
        st.class = 0;
    }
    if !wrap {
        return if d > c { c + 1 } else { c - 1 };
    }
    let fwd = (d + k - c) % k;
    if fwd <= k / 2 {
        if c == k - 1 {
            st.class = 1;
        }
        (c + 1) % k
    } else {
        if c == 0 {
            st.class = 1;
        }
        (c + k - 1) % k
    }
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
    Err(NetsimError::UnknownRouting {
        name: name.to_string(),
        topology: topo.name.clone(),
        known: format!("{}, shortest", topo.routing.name()),
    })
}
