//! Helpers shared by the integration tests.

use nam_netsim::*;

/// A small version of the named topology (8x8 tiles, concentration 4 where the full layout's
/// would not fit, 2 global routers, ExaNeSt 3x2x2).
pub fn small(name: &str) -> Topology {
    let p = TopologyParams {
        tiles: 8,
        concentration: match name {
            "cmesh-high" | "fbfly" => Some(4),
            _ => None,
        },
        global_routers: Some(2),
        exanest_dims: [3, 2, 2],
        ..TopologyParams::default()
    };
    build(name, &p).unwrap_or_else(|e| panic!("{name}: {e}"))
}
