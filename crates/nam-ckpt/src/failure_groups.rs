//! Failure groups beyond the node: ranks whose nodes share a rack, a power supply or a switch
//! fail together, so no redundancy set may hold two of them (as in SCR, whose redundancy
//! descriptors name the failure group their sets must span).
//!
//! A rank's group is, in order: `NAM_FAILURE_GROUP` in its environment (set per node by the
//! job script), else the group the configuration's `[failure_groups] map` gives its node
//! (`"rack1: node01 node02"`), else its node (a node nobody placed is a group of its own).
//! With no group anywhere, set formation separates nodes, as before. Groups contain whole
//! nodes: ranks of one node in two groups are refused, since a node's ranks fail together.
//!
//! Every scheme forms its sets (XOR, RS, NAM-XOR) or partners through [`form_sets`] and
//! [`partners`], which run the node rules of [`crate::groups`] on the groups instead of the
//! nodes; separating the groups separates the nodes too.

use crate::comm::Comm;
use crate::error::{CkptError, Result};
use crate::node::NodeMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Environment variable naming this process's failure group (e.g. its rack).
pub const FAILURE_GROUP_ENV: &str = "NAM_FAILURE_GROUP";

/// `[failure_groups]` of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailureGroupsConfig {
    /// One entry per group: `"<group>: <node> <node> ..."` (node names as `NAM_NODE_ID`, the
    /// host name or `emu-<i>` give them). Empty: only `NAM_FAILURE_GROUP` places ranks.
    pub map: Vec<String>,
}

impl FailureGroupsConfig {
    /// The node-to-group map of `map`; Err names a malformed entry or a node in two groups.
    pub fn parse(&self) -> Result<BTreeMap<String, String>> {
        let mut of_node = BTreeMap::new();
        for entry in &self.map {
            let bad = |why: &str| CkptError::FailureGroup(format!("failure_groups.map entry `{entry}`: {why}"));
            let (group, nodes) = entry.split_once(':').ok_or_else(|| bad("expected `<group>: <node> <node> ...`"))?;
            let group = group.trim();
            if group.is_empty() || group.contains(char::is_whitespace) {
                return Err(bad("the group name must be one non-empty word"));
            }
            let nodes: Vec<&str> = nodes.split([' ', ',', '\t']).filter(|n| !n.is_empty()).collect();
            if nodes.is_empty() {
                return Err(bad("no nodes listed"));
            }
            for node in nodes {
                if let Some(other) = of_node.insert(node.to_string(), group.to_string()) {
                    if other != group {
                        return Err(bad(&format!("node {node} is in group {other} already")));
                    }
                }
            }
        }
        Ok(of_node)
    }

    /// The group names the map defines.
    fn groups(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.map.iter().filter_map(|e| e.split_once(':')).map(|(g, _)| g.trim().to_string()).collect();
        names.sort();
        names.dedup();
        names
    }
}

/// This process's `NAM_FAILURE_GROUP`, if set and not empty.
pub fn env_group() -> Option<String> {
    std::env::var(FAILURE_GROUP_ENV).ok().filter(|g| !g.is_empty())
}

/// The failure group of every rank, from each rank's `NAM_FAILURE_GROUP` (`env`, by rank) and
/// the configured map; `None` when no rank has a group (nodes are the failure domains).
/// Err, the same on every rank, for a group the map does not define (when it defines any) and
/// for a node whose ranks are in different groups.
pub fn resolve(nodes: &NodeMap, env: &[Option<String>], config: &FailureGroupsConfig) -> Result<Option<Vec<String>>> {
    let of_node = config.parse()?;
    let defined = config.groups();
    if env.iter().all(Option::is_none) && !nodes.names.iter().any(|n| of_node.contains_key(n)) {
        return Ok(None);
    }
    let mut group_of = Vec::with_capacity(nodes.ranks());
    for (rank, from_env) in env.iter().enumerate() {
        let node = &nodes.names[nodes.node_of[rank]];
        let group = match from_env {
            Some(g) if !defined.is_empty() && !defined.contains(g) => {
                return Err(CkptError::FailureGroup(format!(
                    "rank {rank} on node {node} names failure group `{g}` ({FAILURE_GROUP_ENV}), which \
                     failure_groups.map does not define (it defines: {})",
                    defined.join(", ")
                )))
            }
            Some(g) => g.clone(),
            None => of_node.get(node).cloned().unwrap_or_else(|| node.clone()),
        };
        group_of.push(group);
    }
    for (node, ranks) in nodes.names.iter().zip(&nodes.ranks_on) {
        let mut groups: Vec<&str> = ranks.iter().map(|&r| group_of[r].as_str()).collect();
        groups.sort_unstable();
        groups.dedup();
        if groups.len() > 1 {
            return Err(CkptError::FailureGroup(format!(
                "node {node} has ranks in failure groups {}; the ranks of a node fail together and must share one group",
                groups.join(" and ")
            )));
        }
    }
    Ok(Some(group_of))
}

/// Who is in each group, for error messages: `rack1 = nodes a, b (ranks 0, 2)`.
pub fn describe(nodes: &NodeMap, groups: &NodeMap) -> String {
    groups
        .names
        .iter()
        .zip(&groups.ranks_on)
        .map(|(g, ranks)| {
            let mut in_group: Vec<&str> = Vec::new();
            for &r in ranks {
                let node = nodes.names[nodes.node_of[r]].as_str();
                if !in_group.contains(&node) {
                    in_group.push(node);
                }
            }
            let ranks: Vec<String> = ranks.iter().map(usize::to_string).collect();
            format!("{g} = node(s) {} (rank(s) {})", in_group.join(", "), ranks.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The redundancy sets of `scheme` over `comm`: ranks of one failure group (one node when no
/// groups are set) never share a set ([`crate::groups::form_sets`]). Without groups the error
/// is [`CkptError::Layout`], as before; with groups it is [`CkptError::FailureGroup`] naming
/// every group and its nodes.
pub fn form_sets(comm: &Comm, set_size: usize, scheme: &str) -> Result<Vec<Vec<usize>>> {
    match comm.failure_groups()? {
        None => crate::groups::form_sets(comm.nodes(), set_size).map_err(|r| CkptError::layout(scheme, r)),
        Some(groups) => crate::groups::form_sets(groups, set_size).map_err(|r| refused(comm, groups, scheme, &r)),
    }
}

/// The partner of every rank, in another failure group (another node when no groups are set).
pub fn partners(comm: &Comm, scheme: &str) -> Result<Vec<usize>> {
    match comm.failure_groups()? {
        None => crate::groups::partners(comm.nodes()).map_err(|r| CkptError::layout(scheme, r)),
        Some(groups) => crate::groups::partners(groups).map_err(|r| refused(comm, groups, scheme, &r)),
    }
}

fn refused(comm: &Comm, groups: &NodeMap, scheme: &str, reason: &str) -> CkptError {
    // The node rules speak of nodes; here each "node" is a failure group.
    let why = if groups.nodes() < 2 {
        format!(
            "all {} rank(s) are in failure group {}, and a set needs members in at least 2 groups",
            groups.ranks(),
            groups.names.first().map_or("?", String::as_str)
        )
    } else {
        reason.split(". Run the ranks").next().unwrap_or(reason).replace("node", "failure group")
    };
    CkptError::FailureGroup(format!(
        "scheme {scheme} cannot keep the members of a set in different failure groups: {why}; the groups are: {}",
        describe(comm.nodes(), groups)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> NodeMap {
        NodeMap::new(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn config(map: &[&str]) -> FailureGroupsConfig {
        FailureGroupsConfig { map: map.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn groups_come_from_the_environment_then_the_map_then_the_node() {
        let n = nodes(&["a", "b", "c", "d"]);
        assert_eq!(resolve(&n, &[None, None, None, None], &config(&[])).unwrap(), None);
        let got = resolve(&n, &[None, None, Some("r2".into()), None], &config(&["r1: a b", "r2: d"])).unwrap().unwrap();
        assert_eq!(got, ["r1", "r1", "r2", "r2"].map(String::from));
        let got = resolve(&n, &[None, None, Some("r9".into()), None], &config(&[])).unwrap().unwrap();
        assert_eq!(got, ["a", "b", "r9", "d"].map(String::from));
        let e = resolve(&n, &[None, None, Some("r9".into()), None], &config(&["r1: a b", "r2: c"])).unwrap_err();
        assert!(matches!(&e, CkptError::FailureGroup(m) if m.contains("`r9`") && m.contains("r1, r2")), "{e}");
    }

    #[test]
    fn malformed_maps_and_split_nodes_are_named() {
        for (map, word) in
            [(&["r1 a b"][..], "expected"), (&["r1: a", "r2: a"], "node a is in group r1"), (&["r1:"], "no nodes")]
        {
            let e = config(map).parse().unwrap_err();
            assert!(e.to_string().contains(word), "{e}");
        }
        let n = nodes(&["a", "a"]);
        let e = resolve(&n, &[Some("x".into()), Some("y".into())], &config(&[])).unwrap_err();
        assert!(e.to_string().contains("node a has ranks in failure groups x and y"), "{e}");
    }

    #[test]
    fn sets_over_groups_never_repeat_a_group() {
        let n = nodes(&["a", "b", "c", "d", "a", "b", "c", "d"]);
        let groups = resolve(&n, &vec![None; 8], &config(&["r1: a b", "r2: c d"])).unwrap().unwrap();
        let g = NodeMap::new(&groups);
        let sets = crate::groups::form_sets(&g, 8).unwrap();
        for set in &sets {
            let mut seen: Vec<&str> = set.iter().map(|&r| groups[r].as_str()).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), set.len(), "{sets:?}");
        }
        assert!(describe(&n, &g).contains("r1 = node(s) a, b"), "{}", describe(&n, &g));
    }
}
