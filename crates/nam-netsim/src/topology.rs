//! The topology graph: routers with clock frequencies and positions, directed channels with
//! lengths, and the nodes (terminals) attached to routers.

use crate::error::{NetsimError, Result};
use crate::physical;
use serde::Serialize;

/// One router: its clock, place on the chip and role.
#[derive(Debug, Clone, Serialize)]
pub struct RouterSpec {
    /// Human-readable label (`LR3`, `GR0`, `r(4,5)`).
    pub label: String,
    /// Clock frequency in GHz.
    pub freq_ghz: f64,
    /// Position on the chip (mm), used for link lengths and bisection counts.
    pub x_mm: f64,
    /// Position on the chip (mm).
    pub y_mm: f64,
    /// Whether this is a global router of a hierarchical topology.
    pub global: bool,
}

/// One unidirectional channel between two routers.
#[derive(Debug, Clone, Serialize)]
pub struct ChannelSpec {
    /// Upstream router.
    pub from: usize,
    /// Downstream router.
    pub to: usize,
    /// Physical length (mm); the delay is 66 ps/mm unless `delay_ps` overrides it.
    pub length_mm: f64,
    /// Explicit wire delay (ps), for off-chip links such as the ExaNeSt serial links.
    pub delay_ps: Option<f64>,
}

/// One node (network endpoint, e.g. a core tile) and the router it attaches to.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSpec {
    /// The router this node injects into and ejects from.
    pub router: usize,
    /// Position (mm).
    pub x_mm: f64,
    /// Position (mm).
    pub y_mm: f64,
    /// Length of the node-router link in each direction (mm).
    pub link_length_mm: f64,
}

/// Routing algorithm on a k-ary n-cube ([`RoutingKind::Cube`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CubeAlgo {
    /// Dimension order: lowest dimension first, minimal direction (a tie half-way round a
    /// ring is broken per packet, both ways equally often, as BookSim2's `dim_order_torus`).
    Dor,
    /// ROMM (Nesson and Johnsson's randomized minimal routing): dimension order to a random
    /// intermediate router inside the minimal box of source and destination, then dimension
    /// order to the destination; the two phases use separate VC classes.
    Romm,
    /// Valiant's routing: dimension order to a random intermediate router anywhere, then to
    /// the destination; the two phases use separate VC classes.
    Valiant,
    /// Minimal adaptive: every cycle a waiting head asks either (on alternate cycles) for the
    /// dimension-order port on the escape VCs (the last one, or two with dateline classes on a
    /// torus) or for the productive port whose downstream buffers hold the fewest flits on the
    /// other VCs (Duato's escape-channel condition: the escape network is deadlock-free and a
    /// blocked head keeps asking for it).
    MinAdaptive,
}

impl CubeAlgo {
    /// Names accepted by `--routing` on meshes and tori.
    pub const NAMES: [&'static str; 4] = ["dor", "romm", "valiant", "min-adaptive"];

    /// The algorithm of a `--routing` name (BookSim2's names are accepted too).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "dor" | "dor-dateline" | "dim_order" | "dim_order_mesh" | "dim_order_torus" | "dor_mesh" => {
                Some(CubeAlgo::Dor)
            }
            "romm" | "romm_mesh" | "romm_torus" => Some(CubeAlgo::Romm),
            "valiant" | "valiant_mesh" | "valiant_torus" => Some(CubeAlgo::Valiant),
            "min-adaptive" | "min_adapt" | "min_adapt_mesh" | "min_adapt_torus" => Some(CubeAlgo::MinAdaptive),
            _ => None,
        }
    }

    /// Whether packets route in two phases (to an intermediate router, then to the destination).
    pub fn two_phase(self) -> bool {
        matches!(self, CubeAlgo::Romm | CubeAlgo::Valiant)
    }
}

/// Routing algorithms on a dragonfly (Kim et al. 2008's minimal, Valiant and UGAL).
///
/// The non-minimal ones use four VC classes, one per segment of the longest path (local, global,
/// local to the intermediate router; local, global, local to the destination): the class is
/// twice the phase (0 toward the intermediate router, 1 toward the destination; a packet routed
/// minimally from its source starts in phase 0) plus one after the phase's global hop. Classes
/// only ever grow along a path and, inside one, a local hop leads only to a global hop or out of
/// the class, so the channel dependencies have no cycle. (BookSim2's `ugal_dragonflynew` uses
/// three VCs, which leaves a cycle through the local channels of the intermediate group.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum DragonflyAlgo {
    /// Minimal: local, global, local (BookSim2 `routing_function = min`).
    #[default]
    Minimal,
    /// Valiant: every packet whose destination is in another group goes minimally to a router
    /// drawn uniformly from the whole network, then minimally to its destination (a draw in the
    /// source's own group routes minimally, as BookSim2 does).
    Valiant,
    /// UGAL-L (BookSim2 `routing_function = ugal`): at the source router the packet draws an
    /// intermediate router as Valiant does and goes minimally unless the flits buffered
    /// downstream of the minimal port exceed twice those of the non-minimal port plus
    /// `threshold_flits` (the hop counts weigh the queues, as in BookSim2's
    /// `ugal_dragonflynew`).
    Ugal {
        /// Bias toward the minimal path, in flits (BookSim2 hard-codes 30 for its 256-flit
        /// buffers; see [`crate::constants::UGAL_THRESHOLD_FLITS_DEFAULT`]).
        threshold_flits: u32,
    },
}

impl DragonflyAlgo {
    /// Names accepted by `--routing` on a dragonfly.
    pub const NAMES: [&'static str; 3] = ["dragonfly-min", "valiant", "ugal"];

    /// The algorithm of a `--routing` name (BookSim2's names are accepted too).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "dragonfly-min" | "min_dragonflynew" | "dragonfly-minimal" => Some(DragonflyAlgo::Minimal),
            "valiant" | "dragonfly-valiant" => Some(DragonflyAlgo::Valiant),
            "ugal" | "ugal_dragonflynew" | "dragonfly-ugal" | "ugal-l" => {
                Some(DragonflyAlgo::Ugal { threshold_flits: crate::constants::UGAL_THRESHOLD_FLITS_DEFAULT })
            }
            _ => None,
        }
    }

    /// Whether packets may leave the minimal path.
    pub fn non_minimal(self) -> bool {
        self != DragonflyAlgo::Minimal
    }
}

/// The routing function of a topology together with the metadata it needs.
#[derive(Debug, Clone, Serialize)]
pub enum RoutingKind {
    /// Dimension-order (X then Y) routing on a 2-D grid of routers (`id = y * cols + x`);
    /// with wrap-around links it uses two VC classes split by a dateline per dimension.
    Dor {
        /// Routers per row.
        cols: usize,
        /// Routers per column.
        rows: usize,
        /// Wrap-around links (torus).
        wrap: bool,
    },
    /// A k-ary n-cube (n = 1..=3, mesh or torus, each dimension its own radix): router
    /// `x0 + k0 * (x1 + k1 * x2)`. On a torus a packet's dateline class in a dimension is
    /// fixed when it turns into that dimension: class 1 when its way there crosses the
    /// wrap-around link, else class 0 (BookSim2's `dim_order_torus` partition).
    Cube {
        /// Radix of each dimension.
        dims: Vec<usize>,
        /// Wrap-around links (torus).
        wrap: bool,
        /// Routing algorithm.
        algo: CubeAlgo,
    },
    /// Dragonfly (Kim et al.'s balanced one): `groups` groups of `routers` fully connected
    /// routers, each with `globals` global links, one link between every two groups (router
    /// `group * routers + i`). Minimal routing: a local hop to the router holding the link to the
    /// destination group, the global hop, a local hop to the destination router; VC class 0
    /// before the global hop, 1 after it. Valiant and UGAL see [`DragonflyAlgo`].
    Dragonfly {
        /// Routers per group.
        routers: usize,
        /// Global links per router.
        globals: usize,
        /// Number of groups.
        groups: usize,
        /// Routing algorithm.
        algo: DragonflyAlgo,
    },
    /// k-ary n-tree (fat tree): `levels` levels of `k^(levels-1)` routers, `k` nodes per leaf
    /// router, router `level * k^(levels-1) + w` going up by replacing digit `level` of `w`.
    /// Up to the nearest common ancestor on up ports drawn per packet, then down (up*/down*
    /// needs no VC classes).
    FatTree {
        /// Arity.
        k: usize,
        /// Levels of routers.
        levels: usize,
    },
    /// 2-D flattened butterfly: one hop along the row, then one along the column.
    FlatFly {
        /// Routers per row.
        cols: usize,
        /// Routers per column.
        rows: usize,
    },
    /// Super-Star / Super-StarX: local routers `0..locals` on a `cols`-wide grid, global routers
    /// after them; the global router is picked round-robin per local router.
    SuperStar {
        /// Number of local routers.
        locals: usize,
        /// Local routers per row of the layout.
        cols: usize,
        /// Ids of the global routers.
        globals: Vec<usize>,
        /// Super-StarX: neighbour links between adjacent local routers, used while the
        /// downstream buffer occupancy on the neighbour link stays at or below this many flits.
        neighbour_threshold_flits: Option<u32>,
    },
    /// Super-Ring: each local router attaches to the global router of its quadrant; global routers
    /// form a bidirectional ring (dateline VC classes).
    SuperRing {
        /// Number of local routers.
        locals: usize,
        /// Global router ids in ring order.
        ring: Vec<usize>,
        /// For each local router, its index in `ring`.
        local_gr: Vec<usize>,
    },
    /// ExaNeSt: QFDBs of `per_board` fully connected MPSoC routers (router `q*per_board` is the
    /// network MPSoC) on a 3-D torus of QFDBs with dimension-order routing and datelines.
    Exanest {
        /// Torus size in QFDBs along X, Y, Z.
        dims: [usize; 3],
        /// MPSoCs per QFDB.
        per_board: usize,
    },
    /// Shortest-path (minimum hop) table routing; deadlock freedom is not guaranteed on cyclic
    /// topologies (the simulator reports a deadlock if one happens).
    Shortest,
}

impl RoutingKind {
    /// The routing's name as accepted by `--routing`.
    pub fn name(&self) -> &'static str {
        match self {
            RoutingKind::Dor { wrap: false, .. } => "dor",
            RoutingKind::Dor { wrap: true, .. } => "dor-dateline",
            RoutingKind::Cube { wrap: false, algo: CubeAlgo::Dor, .. } => "dor",
            RoutingKind::Cube { wrap: true, algo: CubeAlgo::Dor, .. } => "dor-dateline",
            RoutingKind::Cube { algo: CubeAlgo::Romm, .. } => "romm",
            RoutingKind::Cube { algo: CubeAlgo::Valiant, .. } => "valiant",
            RoutingKind::Cube { algo: CubeAlgo::MinAdaptive, .. } => "min-adaptive",
            RoutingKind::FlatFly { .. } => "fbfly-dor",
            RoutingKind::Dragonfly { algo: DragonflyAlgo::Minimal, .. } => "dragonfly-min",
            RoutingKind::Dragonfly { algo: DragonflyAlgo::Valiant, .. } => "valiant",
            RoutingKind::Dragonfly { algo: DragonflyAlgo::Ugal { .. }, .. } => "ugal",
            RoutingKind::FatTree { .. } => "fattree-updown",
            RoutingKind::SuperStar { neighbour_threshold_flits: None, .. } => "superstar-rr",
            RoutingKind::SuperStar { .. } => "superstarx-threshold",
            RoutingKind::SuperRing { .. } => "superring-dateline",
            RoutingKind::Exanest { .. } => "exanest-dor",
            RoutingKind::Shortest => "shortest",
        }
    }

    /// Whether the routing uses more than one VC class (datelines, phases) and so needs at
    /// least [`RoutingKind::vc_classes`] VCs.
    pub fn needs_vc_classes(&self) -> bool {
        self.vc_classes() > 1
    }

    /// VC classes the routing splits each port's VCs into: two dateline classes on rings, two
    /// phases for ROMM and Valiant (four classes on a torus), for minimal adaptive one
    /// adaptive class beside the escape class(es), and on a dragonfly two (minimal) or four
    /// (Valiant, UGAL; see [`DragonflyAlgo`]).
    pub fn vc_classes(&self) -> usize {
        match self {
            RoutingKind::Dor { wrap: true, .. }
            | RoutingKind::SuperRing { .. }
            | RoutingKind::Exanest { .. }
            | RoutingKind::Dragonfly { algo: DragonflyAlgo::Minimal, .. } => 2,
            RoutingKind::Dragonfly { .. } => 4,
            RoutingKind::Cube { wrap, algo, .. } => {
                let dateline = if *wrap { 2 } else { 1 };
                match algo {
                    CubeAlgo::Dor => dateline,
                    CubeAlgo::Romm | CubeAlgo::Valiant => 2 * dateline,
                    CubeAlgo::MinAdaptive => dateline + 1,
                }
            }
            _ => 1,
        }
    }

    /// Whether a waiting head is routed again every cycle (adaptive routing).
    pub fn reroutes(&self) -> bool {
        matches!(self, RoutingKind::Cube { algo: CubeAlgo::MinAdaptive, .. })
    }
}

/// A complete network: routers, channels, nodes and routing.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// Name shown in reports.
    pub name: String,
    /// Routers.
    pub routers: Vec<RouterSpec>,
    /// Directed inter-router channels.
    pub channels: Vec<ChannelSpec>,
    /// Nodes; node `i` is terminal `i` of the traffic patterns.
    pub nodes: Vec<NodeSpec>,
    /// Routing function.
    pub routing: RoutingKind,
    /// Node grid (columns, rows) with `node = y * cols + x`, for transpose and clustered traffic.
    pub node_grid: Option<(usize, usize)>,
    /// Edge of a traffic cluster in nodes, for clustered traffic (Abeyratne 2017 §3.5.1).
    pub cluster_edge_nodes: Option<usize>,
    /// Chip width (mm) for bisection counts; `None` uses the span of router positions.
    pub chip_width_mm: Option<f64>,
    #[serde(skip)]
    derived: Derived,
}

#[derive(Debug, Clone, Default)]
struct Derived {
    router_nodes: Vec<Vec<usize>>,
    node_port: Vec<usize>,
    out_channels: Vec<Vec<usize>>,
    in_channels: Vec<Vec<usize>>,
    /// Per router: (neighbour, output ports leading to it), sorted by neighbour (a binary
    /// search on the routing's hot path, cheaper than hashing the pair).
    ports_toward: Vec<Vec<(u32, Vec<u16>)>>,
}

impl Topology {
    /// Starts an empty topology.
    pub fn new(name: impl Into<String>, routing: RoutingKind) -> Self {
        Topology {
            name: name.into(),
            routers: Vec::new(),
            channels: Vec::new(),
            nodes: Vec::new(),
            routing,
            node_grid: None,
            cluster_edge_nodes: None,
            chip_width_mm: None,
            derived: Derived::default(),
        }
    }

    /// Adds a router and returns its id.
    pub fn add_router(&mut self, label: impl Into<String>, x_mm: f64, y_mm: f64, global: bool) -> usize {
        self.routers.push(RouterSpec { label: label.into(), freq_ghz: 0.0, x_mm, y_mm, global });
        self.routers.len() - 1
    }

    /// Adds a pair of channels `a -> b` and `b -> a` of the given length.
    pub fn connect(&mut self, a: usize, b: usize, length_mm: f64) {
        for (from, to) in [(a, b), (b, a)] {
            self.channels.push(ChannelSpec { from, to, length_mm, delay_ps: None });
        }
    }

    /// Adds a node at a position attached to `router`.
    pub fn add_node(&mut self, router: usize, x_mm: f64, y_mm: f64, link_length_mm: f64) -> usize {
        self.nodes.push(NodeSpec { router, x_mm, y_mm, link_length_mm });
        self.nodes.len() - 1
    }

    /// Sets every router whose frequency is unset (0) from its own radix with the
    /// frequency-radix model of Abeyratne 2017 §3.4.1, then derives the port maps and checks the graph.
    pub fn finish(self) -> Result<Self> {
        self.finish_clocks(false)
    }

    /// Like [`Topology::finish`], but all local routers share one clock (that of the largest local
    /// radix) and all global routers another, as in Abeyratne 2017's designs where every router of a
    /// class is the same switch (edge routers of a mesh do not run faster).
    pub fn finish_by_class(self) -> Result<Self> {
        self.finish_clocks(true)
    }

    fn finish_clocks(mut self, by_class: bool) -> Result<Self> {
        self.derive()?;
        let class_radix = |global: bool| {
            (0..self.routers.len())
                .filter(|&r| self.routers[r].global == global)
                .map(|r| self.radix(r))
                .max()
                .unwrap_or(0)
        };
        let (local_max, global_max) = (class_radix(false), class_radix(true));
        for r in 0..self.routers.len() {
            if self.routers[r].freq_ghz <= 0.0 {
                let radix = match (by_class, self.routers[r].global) {
                    (false, _) => self.radix(r),
                    (true, false) => local_max,
                    (true, true) => global_max,
                };
                self.routers[r].freq_ghz = physical::router_freq_ghz(radix);
            }
        }
        self.validate()?;
        Ok(self)
    }

    fn bad(&self, reason: impl Into<String>) -> NetsimError {
        NetsimError::InvalidTopology { topology: self.name.clone(), reason: reason.into() }
    }

    fn derive(&mut self) -> Result<()> {
        let n = self.routers.len();
        let mut d = Derived {
            router_nodes: vec![Vec::new(); n],
            node_port: vec![0; self.nodes.len()],
            out_channels: vec![Vec::new(); n],
            in_channels: vec![Vec::new(); n],
            ports_toward: vec![Vec::new(); n],
        };
        for (i, node) in self.nodes.iter().enumerate() {
            if node.router >= n {
                return Err(self.bad(format!("node {i} attaches to missing router {}", node.router)));
            }
            d.node_port[i] = d.router_nodes[node.router].len();
            d.router_nodes[node.router].push(i);
        }
        for (c, ch) in self.channels.iter().enumerate() {
            if ch.from >= n || ch.to >= n {
                return Err(self.bad(format!("channel {c} names a missing router")));
            }
            if ch.from == ch.to {
                return Err(self.bad(format!("channel {c} loops on router {}", ch.from)));
            }
            if ch.length_mm.is_nan() || ch.length_mm < 0.0 || !ch.length_mm.is_finite() {
                return Err(self.bad(format!("channel {c} has length {}", ch.length_mm)));
            }
            let port = d.router_nodes[ch.from].len() + d.out_channels[ch.from].len();
            d.out_channels[ch.from].push(c);
            d.in_channels[ch.to].push(c);
            let list = &mut d.ports_toward[ch.from];
            match list.binary_search_by_key(&(ch.to as u32), |e| e.0) {
                Ok(i) => list[i].1.push(port as u16),
                Err(i) => list.insert(i, (ch.to as u32, vec![port as u16])),
            }
        }
        self.derived = d;
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        if self.nodes.len() < 2 {
            return Err(self.bad("needs at least 2 nodes"));
        }
        for (r, spec) in self.routers.iter().enumerate() {
            if spec.freq_ghz.is_nan() || spec.freq_ghz <= 0.0 || spec.freq_ghz > 100.0 {
                return Err(self.bad(format!("router {r} has frequency {} GHz", spec.freq_ghz)));
            }
            if self.radix(r) == 0 {
                return Err(self.bad(format!("router {r} ({}) has no ports", spec.label)));
            }
        }
        if let Some((c, r)) = self.node_grid {
            if c * r != self.nodes.len() {
                return Err(self.bad("node grid does not match the node count"));
            }
        }
        Ok(())
    }

    /// Number of routers.
    pub fn router_count(&self) -> usize {
        self.routers.len()
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Radix of a router: the larger of its input and output port counts.
    pub fn radix(&self, r: usize) -> usize {
        let t = self.derived.router_nodes[r].len();
        t + self.derived.out_channels[r].len().max(self.derived.in_channels[r].len())
    }

    /// Nodes attached to router `r`, in terminal-port order.
    pub fn router_nodes(&self, r: usize) -> &[usize] {
        &self.derived.router_nodes[r]
    }

    /// Terminal port of node `n` at its router.
    pub fn node_port(&self, n: usize) -> usize {
        self.derived.node_port[n]
    }

    /// Outgoing channels of router `r`; output port `router_nodes(r).len() + i` is channel `i`.
    pub fn out_channels(&self, r: usize) -> &[usize] {
        &self.derived.out_channels[r]
    }

    /// Incoming channels of router `r`; input port `router_nodes(r).len() + i` is channel `i`.
    pub fn in_channels(&self, r: usize) -> &[usize] {
        &self.derived.in_channels[r]
    }

    /// Output ports of `from` that lead directly to router `to` (parallel links give several).
    pub fn ports_toward(&self, from: usize, to: usize) -> &[u16] {
        let list = &self.derived.ports_toward[from];
        match list.binary_search_by_key(&(to as u32), |e| e.0) {
            Ok(i) => &list[i].1,
            Err(_) => &[],
        }
    }

    /// Channel behind an output port of router `r` (`None` for a terminal port).
    pub fn port_channel(&self, r: usize, port: usize) -> Option<usize> {
        let t = self.derived.router_nodes[r].len();
        port.checked_sub(t).map(|i| self.derived.out_channels[r][i])
    }

    /// Wire delay of a channel in ps.
    pub fn channel_delay_ps(&self, c: usize) -> f64 {
        let ch = &self.channels[c];
        ch.delay_ps.unwrap_or_else(|| physical::wire_delay_ps(ch.length_mm))
    }

    /// VC depth that suits this topology: 64 flits (4 KB per port with 4 VCs of 128-bit flits,
    /// Ploumidis et al. 2023 §4.2) for ExaNeSt's long serial links, else 5 (Abeyratne 2017 §3.4.1).
    pub fn default_vc_depth_flits(&self) -> usize {
        match self.routing {
            RoutingKind::Exanest { .. } => 64,
            _ => 5,
        }
    }

    /// Highest offered load (packets/ns/node) every node can inject: one flit per cycle of the
    /// slowest router a node attaches to.
    pub fn injection_limit_packets_per_ns(&self, packet_flits: usize) -> f64 {
        let f = self.nodes.iter().map(|n| self.routers[n.router].freq_ghz).fold(f64::MAX, f64::min);
        f / packet_flits.max(1) as f64
    }

    /// Frequency of the routers nodes attach to (the highest), used to express latency in cycles.
    pub fn reference_freq_ghz(&self) -> f64 {
        self.nodes.iter().map(|n| self.routers[n.router].freq_ghz).fold(0.0, f64::max)
    }

    /// Static properties: router counts, radices, link lengths, area, bisection wires.
    pub fn summary(&self) -> TopologySummary {
        summarize(self)
    }
}

/// Static properties of a topology (compare with Abeyratne 2017 Table 3.2 and Table 3.3).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopologySummary {
    /// Topology name.
    pub topology: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Local (non-global) routers.
    pub local_routers: usize,
    /// Global routers.
    pub global_routers: usize,
    /// Largest local router radix.
    pub local_radix: usize,
    /// Largest global router radix (0 when there are none).
    pub global_radix: usize,
    /// Frequency of local routers (GHz, the lowest).
    pub local_freq_ghz: f64,
    /// Frequency of global routers (GHz, the lowest; 0 when none).
    pub global_freq_ghz: f64,
    /// Average length of router-router and node-router links not touching a global router (mm).
    pub avg_local_link_mm: f64,
    /// Average length of links touching a global router (mm; 0 when none).
    pub avg_global_link_mm: f64,
    /// Estimated network area (routers: crossbars and buffers), mm^2.
    pub area_mm2: f64,
    /// Wires crossing the vertical bisection (node links included), 128-bit datapath.
    pub bisection_wires: usize,
}

fn summarize(t: &Topology) -> TopologySummary {
    let mut s = TopologySummary {
        topology: t.name.clone(),
        nodes: t.nodes.len(),
        local_routers: 0,
        global_routers: 0,
        local_radix: 0,
        global_radix: 0,
        local_freq_ghz: f64::MAX,
        global_freq_ghz: f64::MAX,
        avg_local_link_mm: 0.0,
        avg_global_link_mm: 0.0,
        area_mm2: 0.0,
        bisection_wires: 0,
    };
    for (r, spec) in t.routers.iter().enumerate() {
        let radix = t.radix(r);
        s.area_mm2 += physical::router_area_mm2(radix);
        if spec.global {
            s.global_routers += 1;
            s.global_radix = s.global_radix.max(radix);
            s.global_freq_ghz = s.global_freq_ghz.min(spec.freq_ghz);
        } else {
            s.local_routers += 1;
            s.local_radix = s.local_radix.max(radix);
            s.local_freq_ghz = s.local_freq_ghz.min(spec.freq_ghz);
        }
    }
    if s.global_routers == 0 {
        s.global_freq_ghz = 0.0;
    }
    let mid = t.chip_width_mm.map(|w| w / 2.0).unwrap_or_else(|| {
        let (lo, hi) = t.routers.iter().fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(r.x_mm), h.max(r.x_mm)));
        (lo + hi) / 2.0
    });
    let crosses = |a: f64, b: f64| (a < mid && b > mid) || (a > mid && b < mid);
    let (mut local_sum, mut local_n, mut global_sum, mut global_n) = (0.0, 0usize, 0.0, 0usize);
    let mut crossing_channels = 0usize;
    for ch in &t.channels {
        let (a, b) = (&t.routers[ch.from], &t.routers[ch.to]);
        if crosses(a.x_mm, b.x_mm) {
            crossing_channels += 1;
        }
        if a.global || b.global {
            global_sum += ch.length_mm;
            global_n += 1;
        } else {
            local_sum += ch.length_mm;
            local_n += 1;
        }
    }
    for node in &t.nodes {
        let r = &t.routers[node.router];
        if crosses(node.x_mm, r.x_mm) {
            crossing_channels += 2;
        }
        local_sum += 2.0 * node.link_length_mm;
        local_n += 2;
    }
    s.avg_local_link_mm = if local_n > 0 { local_sum / local_n as f64 } else { 0.0 };
    s.avg_global_link_mm = if global_n > 0 { global_sum / global_n as f64 } else { 0.0 };
    s.bisection_wires = crossing_channels * physical::FLIT_BITS as usize;
    s
}
