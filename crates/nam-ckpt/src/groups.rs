//! Group formation for the redundancy schemes: partner pairs and XOR/RS sets.
//!
//! The rule of SCR: ranks that fail together (same node) never share a set, and never hold
//! each other's redundancy. Ranks are laid out column-major by (local index on the node, node),
//! so consecutive ranks of that order sit on different nodes; sets are consecutive runs of it
//! with balanced sizes, repaired by swaps where uneven nodes make a run repeat a node.

use crate::node::NodeMap;

/// Ranks in column-major order: all ranks with local index 0 (by node), then index 1, ...
pub fn column_major(map: &NodeMap) -> Vec<usize> {
    let columns = map.ranks_on.iter().map(Vec::len).max().unwrap_or(0);
    let mut order = Vec::with_capacity(map.ranks());
    for col in 0..columns {
        for node_ranks in &map.ranks_on {
            if let Some(&r) = node_ranks.get(col) {
                order.push(r);
            }
        }
    }
    order
}

/// Sets of at most `max_size` ranks, each of at least 2 ranks on pairwise different nodes,
/// with sizes that differ by at most one. Each set lists ranks ascending; sets are ordered by
/// their lowest rank. Err names the reason when the layout does not allow it (one node, or a
/// node with more ranks than the other nodes can pair).
pub fn form_sets(map: &NodeMap, max_size: usize) -> Result<Vec<Vec<usize>>, String> {
    if map.ranks() < 2 || map.nodes() < 2 {
        return Err(one_node(map));
    }
    if max_size < 2 {
        return Err(format!("set size {max_size} is below the minimum of 2"));
    }
    let width = max_size.min(map.nodes());
    let busiest = map.ranks_on.iter().map(Vec::len).max().unwrap_or(0);
    let count = map.ranks().div_ceil(width).max(busiest);
    let order = column_major(map);
    let mut sets = Vec::with_capacity(count);
    let (base, extra) = (order.len() / count, order.len() % count);
    if base < 2 {
        return Err(format!(
            "{} ranks on {} nodes (up to {busiest} on one node) leave a set with one rank",
            map.ranks(),
            map.nodes()
        ));
    }
    let mut at = 0;
    for i in 0..count {
        let len = base + usize::from(i < extra);
        sets.push(order[at..at + len].to_vec());
        at += len;
    }
    repair(map, &mut sets)?;
    for set in &mut sets {
        set.sort_unstable();
    }
    sets.sort_by_key(|s| s[0]);
    Ok(sets)
}

/// Why a job on one node has no redundancy across nodes, and what to do about it: a run on
/// one host is the common case (a laptop, a CI runner), and its nodes can be emulated.
fn one_node(map: &NodeMap) -> String {
    let node = map.names.first().map_or("?", String::as_str);
    format!(
        "needs ranks on at least 2 nodes; the job has {} node(s): all {} rank(s) share node {node}, and ranks of \
         one node fail together. Run the ranks on several hosts, or emulate nodes on one host with \
         {}=N (rank r on node r mod N) or a distinct {} per rank",
        map.nodes(),
        map.ranks(),
        crate::node::EMULATE_NODES_ENV,
        crate::node::NODE_ID_ENV
    )
}

fn has_duplicate_node(map: &NodeMap, set: &[usize]) -> Option<usize> {
    for (i, &a) in set.iter().enumerate() {
        if set[i + 1..].iter().any(|&b| map.node_of[a] == map.node_of[b]) {
            return Some(i);
        }
    }
    None
}

/// Swaps members between sets until no set repeats a node.
fn repair(map: &NodeMap, sets: &mut [Vec<usize>]) -> Result<(), String> {
    for s in 0..sets.len() {
        while let Some(i) = has_duplicate_node(map, &sets[s]) {
            if !swap_out(map, sets, s, i) {
                let rank = sets[s][i];
                return Err(format!(
                    "rank {rank} on node {} cannot join a set without another rank of its node",
                    map.names[map.node_of[rank]]
                ));
            }
        }
    }
    Ok(())
}

fn swap_out(map: &NodeMap, sets: &mut [Vec<usize>], s: usize, i: usize) -> bool {
    let node = |r: usize| map.node_of[r];
    let mover = sets[s][i];
    for t in 0..sets.len() {
        if t == s || sets[t].iter().any(|&r| node(r) == node(mover)) {
            continue;
        }
        for j in 0..sets[t].len() {
            let other = sets[t][j];
            let fits_s = sets[s].iter().enumerate().all(|(k, &r)| k == i || node(r) != node(other));
            if fits_s {
                sets[s][i] = other;
                sets[t][j] = mover;
                return true;
            }
        }
    }
    false
}

/// The partner of every rank: the next rank with the same local index on the next node
/// (SCR's partner), or, where a node has more ranks than the others, the next rank in
/// column-major order on another node. Err when all ranks are on one node.
pub fn partners(map: &NodeMap) -> Result<Vec<usize>, String> {
    if map.nodes() < 2 {
        return Err(one_node(map));
    }
    let order = column_major(map);
    let mut partner = vec![0; map.ranks()];
    for (rank, slot) in partner.iter_mut().enumerate() {
        let col = map.local_index(rank);
        let column: Vec<usize> = map.ranks_on.iter().filter_map(|rs| rs.get(col).copied()).collect();
        *slot = if column.len() >= 2 {
            let at = column.iter().position(|&r| r == rank).expect("rank in its column");
            column[(at + 1) % column.len()]
        } else {
            let at = order.iter().position(|&r| r == rank).expect("rank in order");
            (1..order.len())
                .map(|k| order[(at + k) % order.len()])
                .find(|&r| map.node_of[r] != map.node_of[rank])
                .expect("another node exists")
        };
    }
    Ok(partner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(nodes: &[&str]) -> NodeMap {
        NodeMap::new(&nodes.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn check_sets(m: &NodeMap, sets: &[Vec<usize>], max: usize) {
        let mut all: Vec<usize> = sets.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..m.ranks()).collect::<Vec<_>>());
        let (lo, hi) = (sets.iter().map(Vec::len).min().unwrap(), sets.iter().map(Vec::len).max().unwrap());
        assert!(hi - lo <= 1 && hi <= max && lo >= 2, "{sets:?}");
        for s in sets {
            assert!(has_duplicate_node(m, s).is_none(), "{sets:?}");
        }
    }

    #[test]
    fn sets_span_nodes_and_are_balanced() {
        let m = map(&["a", "a", "b", "b", "c", "c", "d", "d"]);
        check_sets(&m, &form_sets(&m, 4).unwrap(), 4);
        check_sets(&m, &form_sets(&m, 3).unwrap(), 3);
        let uneven = map(&["a", "a", "a", "b", "b", "c", "d"]);
        check_sets(&uneven, &form_sets(&uneven, 8).unwrap(), 8);
        let two = map(&["a", "b", "a", "b", "a", "b"]);
        check_sets(&two, &form_sets(&two, 8).unwrap(), 8);
    }

    #[test]
    fn impossible_layouts_are_refused() {
        assert!(form_sets(&map(&["a", "a", "a"]), 4).unwrap_err().contains("1 node"));
        assert!(form_sets(&map(&["a", "a", "b"]), 4).is_err());
    }

    #[test]
    fn a_one_node_job_is_told_that_its_ranks_share_a_node_and_how_to_emulate_nodes() {
        for why in [form_sets(&map(&["h", "h", "h", "h"]), 8).unwrap_err(), partners(&map(&["h", "h"])).unwrap_err()] {
            assert!(why.contains("share node h") && why.contains("NAM_EMULATE_NODES=N"), "{why}");
            assert!(why.contains("NAM_NODE_ID"), "{why}");
        }
    }

    #[test]
    fn partners_live_on_other_nodes() {
        for layout in [&["a", "a", "b", "b"][..], &["a", "b", "c"], &["a", "a", "a", "b"]] {
            let m = map(layout);
            let p = partners(&m).unwrap();
            for (r, &q) in p.iter().enumerate() {
                assert_ne!(m.node_of[r], m.node_of[q], "{layout:?} {p:?}");
            }
        }
        assert_eq!(partners(&map(&["a", "a", "b", "b"])).unwrap(), vec![2, 3, 0, 1]);
    }
}
