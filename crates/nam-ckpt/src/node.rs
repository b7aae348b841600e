//! Node identity: which ranks share a node (and so fail together).
//!
//! The node of a rank is `NAM_NODE_ID` when set (so one machine can emulate several nodes),
//! else the host name. Redundancy schemes never put two ranks of one node in one group.

/// Environment variable that overrides this process's node identity.
pub const NODE_ID_ENV: &str = "NAM_NODE_ID";

/// Environment variable that makes one machine emulate N nodes: rank r of a communicator
/// is placed on node `emu-<r mod N>` (round-robin, as `mpirun --map-by node`); or, given a
/// comma-separated list of node names, on the (r mod len)-th of them ([`emulated_node`]).
pub const EMULATE_NODES_ENV: &str = "NAM_EMULATE_NODES";

/// This process's node identity: `NAM_NODE_ID`, else the host name.
pub fn node_id() -> String {
    match std::env::var(NODE_ID_ENV) {
        Ok(id) if !id.is_empty() => id,
        _ => hostname(),
    }
}

/// The node identity of `rank`: `NAM_NODE_ID` if set, else `emu-<rank mod N>` if
/// `NAM_EMULATE_NODES=N` is set, else the host name.
pub fn node_id_of(rank: usize) -> String {
    if let Ok(id) = std::env::var(NODE_ID_ENV) {
        if !id.is_empty() {
            return id;
        }
    }
    let emulate = std::env::var(EMULATE_NODES_ENV).unwrap_or_default();
    if let Some(name) = emulated_node(&emulate, rank) {
        return name;
    }
    hostname()
}

/// The node of `rank` under `NAM_EMULATE_NODES=<value>`: a count N puts rank r on
/// `emu-<r mod N>`; a comma-separated list of node names puts rank r on the (r mod len)-th,
/// so a restart can run the same ranks on another mapping, or on spare nodes
/// (`emu-1,emu-2,emu-3,emu-4` after `4`). `None` when the value is neither.
pub fn emulated_node(value: &str, rank: usize) -> Option<String> {
    if let Ok(n) = value.parse::<usize>() {
        return (n > 0).then(|| format!("emu-{}", rank % n));
    }
    let names: Vec<&str> = value.split(',').map(str::trim).collect();
    if names.len() < 2 || names.iter().any(|n| n.is_empty()) {
        return None;
    }
    Some(names[rank % names.len()].to_string())
}

/// The host name (`gethostname`), or `localhost` when it cannot be read.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The job layout: the node of every rank, with nodes numbered in order of their lowest rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMap {
    /// Node index of each rank.
    pub node_of: Vec<usize>,
    /// Node names, by node index.
    pub names: Vec<String>,
    /// Ranks on each node, ascending, by node index.
    pub ranks_on: Vec<Vec<usize>>,
}

impl NodeMap {
    /// Builds the map from the node name of each rank.
    pub fn new(name_of_rank: &[String]) -> Self {
        let mut names: Vec<String> = Vec::new();
        let mut node_of = Vec::with_capacity(name_of_rank.len());
        let mut ranks_on: Vec<Vec<usize>> = Vec::new();
        for (rank, name) in name_of_rank.iter().enumerate() {
            let node = match names.iter().position(|n| n == name) {
                Some(i) => i,
                None => {
                    names.push(name.clone());
                    ranks_on.push(Vec::new());
                    names.len() - 1
                }
            };
            node_of.push(node);
            ranks_on[node].push(rank);
        }
        NodeMap { node_of, names, ranks_on }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.node_of.len()
    }

    /// Number of distinct nodes.
    pub fn nodes(&self) -> usize {
        self.names.len()
    }

    /// Position of `rank` among the ranks of its node (0 for the lowest rank on a node).
    pub fn local_index(&self, rank: usize) -> usize {
        let node = self.node_of[rank];
        self.ranks_on[node].iter().position(|&r| r == rank).expect("rank is on its node")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_numbered_by_lowest_rank() {
        let names: Vec<String> = ["b", "a", "b", "c", "a"].iter().map(|s| s.to_string()).collect();
        let map = NodeMap::new(&names);
        assert_eq!(map.node_of, vec![0, 1, 0, 2, 1]);
        assert_eq!(map.ranks_on, vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(map.local_index(4), 1);
        assert_eq!(map.nodes(), 3);
    }

    #[test]
    fn emulated_nodes_are_a_count_or_a_list() {
        assert_eq!(emulated_node("4", 5).as_deref(), Some("emu-1"));
        assert_eq!(emulated_node("emu-1,emu-2, emu-9", 2).as_deref(), Some("emu-9"));
        assert_eq!(emulated_node("0", 1), None);
        assert_eq!(emulated_node("solo", 1), None);
        assert_eq!(emulated_node("a,,b", 1), None);
    }
}
