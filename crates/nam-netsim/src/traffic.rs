//! Traffic patterns (uniform random with or without the source, clustered, transpose,
//! bit-complement, bit-reverse, shuffle, tornado, neighbour, random permutation, hotspot) and
//! trace replay. The synthetic permutations follow the definitions of Dally and Towles's
//! *Principles and Practices of Interconnection Networks* (Table 9.1), the ones BookSim2 names
//! `bitrev`, `shuffle`, `tornado`, `neighbor` and `randperm`.

use crate::error::{NetsimError, Result};
use crate::topology::Topology;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Names accepted by [`TrafficPattern::from_name`] (`hotspot` takes its nodes from
/// [`TrafficPattern::HotSpot`]; by name it is node 0 only).
pub const TRAFFIC_NAMES: [&str; 11] = [
    "uniform",
    "uniform-noself",
    "clustered",
    "transpose",
    "bitcomp",
    "bitrev",
    "shuffle",
    "tornado",
    "neighbor",
    "randperm",
    "hotspot",
];

/// One packet of a trace: sent at `time_ns` from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceEvent {
    /// Generation time (ns from the start of the run).
    pub time_ns: f64,
    /// Source node.
    pub src: usize,
    /// Destination node.
    pub dst: usize,
}

/// Where packets go.
#[derive(Debug, Clone, PartialEq)]
pub enum TrafficPattern {
    /// Every node equally likely, the source itself included (as BookSim2's `uniform` and
    /// other common simulators draw it): a packet to itself crosses its router once.
    Uniform,
    /// Every other node equally likely (nam-netsim's uniform traffic before it included the
    /// source).
    UniformNoSelf,
    /// Nodes of the same or a 4-adjacent cluster (Abeyratne 2017 §3.5.1), clusters of
    /// `cluster_edge_nodes` x `cluster_edge_nodes` nodes on the node grid.
    Clustered,
    /// Node (x, y) sends to (y, x) on the node grid; diagonal nodes send nothing.
    Transpose,
    /// Node i sends to node N-1-i (bit complement when N is a power of two).
    BitComplement,
    /// Node i sends to the node whose index has i's bits in reverse order (node count a power
    /// of two).
    BitReverse,
    /// Node i sends to i's bits rotated left by one (perfect shuffle; node count a power of
    /// two).
    Shuffle,
    /// Node (x, y) sends to (x + ceil(cols/2) - 1, y + ceil(rows/2) - 1), each coordinate
    /// modulo its side, on the node grid: almost half-way round each ring.
    Tornado,
    /// Node (x, y) sends to (x + 1, y + 1), each coordinate modulo its side, on the node grid.
    Neighbor,
    /// A random permutation of the nodes drawn from `seed` (fixed for the run); a node mapped
    /// onto itself sends to itself.
    RandomPermutation {
        /// Seed of the permutation (BookSim2 `perm_seed`).
        seed: u64,
    },
    /// With probability `fraction` to one of `nodes` (equally likely), else uniform (the
    /// source included); `fraction` 1 is BookSim2's `hotspot`.
    HotSpot {
        /// The hotspot nodes.
        nodes: Vec<usize>,
        /// Share of packets sent to a hotspot.
        fraction: f64,
    },
    /// Replay of a trace (sorted by time); the injection rate is ignored.
    Trace(Vec<TraceEvent>),
}

/// The random permutation of `n` nodes drawn from `seed`: entry i is node i's destination.
pub fn random_permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    p.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    p
}

impl TrafficPattern {
    /// Looks a synthetic pattern up by name.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "uniform" | "uniform-random" => Ok(TrafficPattern::Uniform),
            "uniform-noself" | "uniform_noself" => Ok(TrafficPattern::UniformNoSelf),
            "clustered" => Ok(TrafficPattern::Clustered),
            "transpose" => Ok(TrafficPattern::Transpose),
            "bitcomp" | "bit-complement" => Ok(TrafficPattern::BitComplement),
            "bitrev" | "bit-reverse" => Ok(TrafficPattern::BitReverse),
            "shuffle" => Ok(TrafficPattern::Shuffle),
            "tornado" => Ok(TrafficPattern::Tornado),
            "neighbor" | "neighbour" => Ok(TrafficPattern::Neighbor),
            "randperm" | "random-permutation" => Ok(TrafficPattern::RandomPermutation { seed: 0 }),
            "hotspot" => Ok(TrafficPattern::HotSpot { nodes: vec![0], fraction: 1.0 }),
            _ => Err(NetsimError::UnknownTraffic {
                name: name.to_string(),
                known: format!("{}, or a trace file", TRAFFIC_NAMES.join(", ")),
            }),
        }
    }

    /// Short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            TrafficPattern::Uniform => "uniform",
            TrafficPattern::UniformNoSelf => "uniform-noself",
            TrafficPattern::Clustered => "clustered",
            TrafficPattern::Transpose => "transpose",
            TrafficPattern::BitComplement => "bitcomp",
            TrafficPattern::BitReverse => "bitrev",
            TrafficPattern::Shuffle => "shuffle",
            TrafficPattern::Tornado => "tornado",
            TrafficPattern::Neighbor => "neighbor",
            TrafficPattern::RandomPermutation { .. } => "randperm",
            TrafficPattern::HotSpot { .. } => "hotspot",
            TrafficPattern::Trace(_) => "trace",
        }
    }

    /// Checks that the pattern can run on `topo`.
    pub fn validate(&self, topo: &Topology) -> Result<()> {
        let need_grid = |what: &str| NetsimError::InvalidParameter {
            field: "traffic".into(),
            reason: format!("{what} needs a topology with a square node grid"),
        };
        match self {
            TrafficPattern::Transpose => match topo.node_grid {
                Some((c, r)) if c == r => Ok(()),
                _ => Err(need_grid("transpose")),
            },
            TrafficPattern::Tornado | TrafficPattern::Neighbor => match topo.node_grid {
                Some((c, r)) if c * r == topo.node_count() => Ok(()),
                _ => Err(NetsimError::InvalidParameter {
                    field: "traffic".into(),
                    reason: format!("{} needs a topology with a node grid", self.name()),
                }),
            },
            TrafficPattern::BitReverse | TrafficPattern::Shuffle if !topo.node_count().is_power_of_two() => {
                Err(NetsimError::InvalidParameter {
                    field: "traffic".into(),
                    reason: format!("{} needs a power-of-two node count, not {}", self.name(), topo.node_count()),
                })
            }
            TrafficPattern::HotSpot { nodes, fraction } => {
                let n = topo.node_count();
                if nodes.is_empty() || nodes.iter().any(|&h| h >= n) {
                    return Err(NetsimError::InvalidParameter {
                        field: "hotspot".into(),
                        reason: format!("needs one or more nodes below {n}"),
                    });
                }
                if !(0.0..=1.0).contains(fraction) {
                    return Err(NetsimError::InvalidParameter {
                        field: "hotspot_fraction".into(),
                        reason: format!("{fraction} is outside 0-1"),
                    });
                }
                Ok(())
            }
            TrafficPattern::Clustered => match (topo.node_grid, topo.cluster_edge_nodes) {
                (Some(_), Some(e)) if e > 0 => Ok(()),
                _ => Err(need_grid("clustered")),
            },
            TrafficPattern::Trace(events) => {
                let n = topo.node_count();
                for (i, e) in events.iter().enumerate() {
                    if e.src >= n || e.dst >= n {
                        return Err(NetsimError::InvalidParameter {
                            field: "trace".into(),
                            reason: format!("event {i} names node {} but the topology has {n}", e.src.max(e.dst)),
                        });
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Clusters (as node lists) a clustered-traffic source may send to.
    fn cluster_candidates(topo: &Topology, src: usize) -> Vec<usize> {
        let (cols, rows) = topo.node_grid.expect("validated");
        let e = topo.cluster_edge_nodes.expect("validated");
        let (ccols, crows) = (cols.div_ceil(e), rows.div_ceil(e));
        let (cx, cy) = ((src % cols) / e, (src / cols) / e);
        let mut out = Vec::new();
        for (dx, dy) in [(0i64, 0i64), (1, 0), (-1, 0), (0, 1), (0, -1)] {
            let (nx, ny) = (cx as i64 + dx, cy as i64 + dy);
            if nx < 0 || ny < 0 || nx >= ccols as i64 || ny >= crows as i64 {
                continue;
            }
            for y in ny as usize * e..((ny as usize + 1) * e).min(rows) {
                for x in nx as usize * e..((nx as usize + 1) * e).min(cols) {
                    let n = y * cols + x;
                    if n != src {
                        out.push(n);
                    }
                }
            }
        }
        out
    }

    /// Draws the destination of a new packet from `src` (`None`: this source sends nothing).
    pub fn dest(&self, topo: &Topology, src: usize, rng: &mut impl Rng) -> Option<usize> {
        let n = topo.node_count();
        match self {
            TrafficPattern::Uniform => Some(rng.gen_range(0..n)),
            TrafficPattern::UniformNoSelf => {
                let d = rng.gen_range(0..n - 1);
                Some(if d >= src { d + 1 } else { d })
            }
            TrafficPattern::Clustered => {
                let c = Self::cluster_candidates(topo, src);
                (!c.is_empty()).then(|| c[rng.gen_range(0..c.len())])
            }
            TrafficPattern::HotSpot { nodes, fraction } => {
                if rng.gen::<f64>() < *fraction {
                    Some(nodes[rng.gen_range(0..nodes.len())])
                } else {
                    Some(rng.gen_range(0..n))
                }
            }
            TrafficPattern::RandomPermutation { seed } => Some(random_permutation(n, *seed)[src]),
            _ => self.fixed_dest(topo, src),
        }
    }

    /// Whether every source always sends to the same destination (a permutation-like
    /// pattern), so that a simulation can tabulate [`TrafficPattern::fixed_destinations`].
    pub fn is_fixed(&self) -> bool {
        matches!(
            self,
            TrafficPattern::Transpose
                | TrafficPattern::BitComplement
                | TrafficPattern::BitReverse
                | TrafficPattern::Shuffle
                | TrafficPattern::Tornado
                | TrafficPattern::Neighbor
                | TrafficPattern::RandomPermutation { .. }
        )
    }

    /// Every source's destination for a fixed pattern (`None`: that source sends nothing).
    pub fn fixed_destinations(&self, topo: &Topology) -> Vec<Option<usize>> {
        let n = topo.node_count();
        match self {
            TrafficPattern::RandomPermutation { seed } => random_permutation(n, *seed).into_iter().map(Some).collect(),
            _ => (0..n).map(|s| self.fixed_dest(topo, s)).collect(),
        }
    }

    fn fixed_dest(&self, topo: &Topology, src: usize) -> Option<usize> {
        let n = topo.node_count();
        let d = match self {
            TrafficPattern::Transpose => {
                let (cols, _) = topo.node_grid.expect("validated");
                (src % cols) * cols + src / cols
            }
            TrafficPattern::BitComplement => n - 1 - src,
            TrafficPattern::BitReverse => {
                let bits = n.trailing_zeros();
                if bits == 0 {
                    src
                } else {
                    src.reverse_bits() >> (usize::BITS - bits)
                }
            }
            TrafficPattern::Shuffle => {
                let bits = n.trailing_zeros();
                if bits == 0 {
                    src
                } else {
                    ((src << 1) | (src >> (bits - 1))) & (n - 1)
                }
            }
            TrafficPattern::Tornado | TrafficPattern::Neighbor => {
                let (cols, rows) = topo.node_grid.expect("validated");
                let shift = |k: usize| if matches!(self, TrafficPattern::Tornado) { k.div_ceil(2) - 1 } else { 1 };
                let (x, y) = (src % cols, src / cols);
                // A permutation: a node sending to itself (a side of 1 or 2 under tornado)
                // keeps that destination, as in BookSim2.
                return Some((y + shift(rows)) % rows * cols + (x + shift(cols)) % cols);
            }
            TrafficPattern::RandomPermutation { seed } => return Some(random_permutation(n, *seed)[src]),
            _ => return None,
        };
        (d != src || matches!(self, TrafficPattern::BitReverse | TrafficPattern::Shuffle)).then_some(d)
    }

    /// Destinations of `src` with their probabilities (for the analytic models).
    pub fn distribution(&self, topo: &Topology, src: usize) -> Vec<(usize, f64)> {
        let n = topo.node_count();
        match self {
            TrafficPattern::Uniform => (0..n).map(|d| (d, 1.0 / n as f64)).collect(),
            TrafficPattern::UniformNoSelf => (0..n).filter(|&d| d != src).map(|d| (d, 1.0 / (n - 1) as f64)).collect(),
            TrafficPattern::Clustered => {
                let c = Self::cluster_candidates(topo, src);
                let w = 1.0 / c.len().max(1) as f64;
                c.into_iter().map(|d| (d, w)).collect()
            }
            TrafficPattern::HotSpot { nodes, fraction } => {
                let mut w = vec![(1.0 - fraction) / n as f64; n];
                for &h in nodes {
                    w[h] += fraction / nodes.len() as f64;
                }
                w.into_iter().enumerate().filter(|&(_, p)| p > 0.0).collect()
            }
            TrafficPattern::Trace(_) => Vec::new(),
            _ => self.fixed_dest(topo, src).map(|d| vec![(d, 1.0)]).unwrap_or_default(),
        }
    }
}

/// Parses a trace: one packet per line, `TIME_NS SRC DST`, `#` starts a comment.
pub fn parse_trace(text: &str) -> Result<Vec<TraceEvent>> {
    let mut events = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |field: &str, reason: String| NetsimError::Parse {
            file: "trace file".into(),
            line: i + 1,
            field: field.into(),
            reason,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            return Err(err("line", format!("expected `TIME_NS SRC DST`, got {} fields", f.len())));
        }
        let time_ns: f64 = f[0].parse().map_err(|_| err("time_ns", format!("`{}` is not a number", f[0])))?;
        if time_ns.is_nan() || time_ns < 0.0 || !time_ns.is_finite() {
            return Err(err("time_ns", format!("{time_ns} is not a finite time >= 0")));
        }
        let src: usize = f[1].parse().map_err(|_| err("src", format!("`{}` is not a node number", f[1])))?;
        let dst: usize = f[2].parse().map_err(|_| err("dst", format!("`{}` is not a node number", f[2])))?;
        if src == dst {
            return Err(err("dst", format!("equals the source {src}")));
        }
        events.push(TraceEvent { time_ns, src, dst });
    }
    if events.is_empty() {
        return Err(NetsimError::Parse {
            file: "trace file".into(),
            line: 0,
            field: "events".into(),
            reason: "no packets".into(),
        });
    }
    events.sort_by(|a, b| a.time_ns.total_cmp(&b.time_ns));
    Ok(events)
}
