//! The MPI layer: an owned communicator, the job's node layout, and collective helpers.
//!
//! [`Comm`] duplicates the communicator it is given (from Rust, or a C `MPI_Comm`), so the
//! library's messages never match the application's, and learns the node of every rank
//! ([`crate::node`]). Sub-communicators for redundancy sets come from [`Comm::split`].

use crate::error::CkptError;
use crate::node::{node_id_of, NodeMap};
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::*;

/// A duplicated communicator with the node layout of its ranks.
pub struct Comm {
    comm: SimpleCommunicator,
    map: NodeMap,
    /// Each rank's `NAM_FAILURE_GROUP`, gathered with the node names.
    env_groups: Vec<Option<String>>,
    /// The failure groups as a layout whose "nodes" are groups (`Ok(None)`: nodes are the
    /// failure domains), or why the groups given are refused ([`crate::failure_groups`]).
    groups: Result<Option<NodeMap>, String>,
}

impl Comm {
    /// Duplicates `comm` (collective) and gathers every rank's node identity
    /// ([`crate::node::node_id_of`]).
    pub fn new<C: Communicator>(comm: &C) -> Self {
        Self::with_node(comm, &node_id_of(comm.rank() as usize))
    }

    /// As [`Comm::new`], with this rank's node identity given explicitly.
    pub fn with_node<C: Communicator>(comm: &C, node: &str) -> Self {
        Self::from_owned(comm.duplicate(), node)
    }

    /// As [`Comm::with_node`], with this rank's failure group given explicitly too (`None`:
    /// none), in place of `NAM_FAILURE_GROUP`: a restart re-forms the sets of the layout a
    /// checkpoint was written with ([`crate::relocate`]).
    pub fn with_layout<C: Communicator>(comm: &C, node: &str, group: Option<&str>) -> Self {
        Self::from_parts(comm.duplicate(), node, group)
    }

    fn from_owned(comm: SimpleCommunicator, node: &str) -> Self {
        Self::from_parts(comm, node, crate::failure_groups::env_group().as_deref())
    }

    fn from_parts(comm: SimpleCommunicator, node: &str, group: Option<&str>) -> Self {
        // One gather carries both: `node` or `node NUL group` (a name holds no NUL).
        let mine = match group {
            Some(g) => format!("{node}\0{g}"),
            None => node.to_string(),
        };
        let all = all_gather_bytes(&comm, mine.as_bytes());
        let (names, env_groups): (Vec<String>, Vec<Option<String>>) = all
            .iter()
            .map(|b| {
                let text = String::from_utf8_lossy(b).into_owned();
                match text.split_once('\0') {
                    Some((n, g)) => (n.to_string(), Some(g.to_string())),
                    None => (text, None),
                }
            })
            .unzip();
        let map = NodeMap::new(&names);
        let mut comm = Comm { map, comm, env_groups, groups: Ok(None) };
        comm.groups = comm.resolve_groups(&Default::default());
        comm
    }

    fn resolve_groups(&self, config: &crate::failure_groups::FailureGroupsConfig) -> Result<Option<NodeMap>, String> {
        crate::failure_groups::resolve(&self.map, &self.env_groups, config)
            .map(|g| g.map(|g| NodeMap::new(&g)))
            .map_err(|e| e.to_string())
    }

    /// Applies the configuration's `[failure_groups]` (with every rank's `NAM_FAILURE_GROUP`).
    /// Not collective: every rank has the same gathered names, so every rank gets the same
    /// outcome from the same configuration. Err ([`CkptError::FailureGroup`]) names an
    /// unknown group or a node split between groups.
    pub fn apply_failure_groups(
        &mut self,
        config: &crate::failure_groups::FailureGroupsConfig,
    ) -> Result<(), CkptError> {
        self.groups = self.resolve_groups(config);
        self.failure_groups().map(|_| ())
    }

    /// The failure groups as a layout whose "nodes" are the groups, or `None` when no group
    /// is set (then the nodes are the failure domains). Err when the groups given are refused.
    pub fn failure_groups(&self) -> Result<Option<&NodeMap>, CkptError> {
        match &self.groups {
            Ok(g) => Ok(g.as_ref()),
            Err(e) => Err(CkptError::FailureGroup(e.strip_prefix("failure groups: ").unwrap_or(e).to_string())),
        }
    }

    /// The failure group of `rank` (its node's name when no groups are set).
    pub fn group_of(&self, rank: usize) -> String {
        match &self.groups {
            Ok(Some(g)) => g.names[g.node_of[rank]].clone(),
            _ => self.map.names[self.map.node_of[rank]].clone(),
        }
    }

    /// Wraps a raw C communicator: duplicates it, so the caller keeps ownership of `raw`.
    ///
    /// # Safety
    /// `raw` must be a valid intra-communicator of an initialized MPI library.
    pub unsafe fn from_raw(raw: mpi::ffi::MPI_Comm) -> Self {
        let mut dup: mpi::ffi::MPI_Comm = std::mem::zeroed();
        mpi::ffi::MPI_Comm_dup(raw, &mut dup);
        // The duplicate is ours: `SimpleCommunicator` frees it on drop.
        let owned = <SimpleCommunicator as mpi::raw::FromRaw>::from_raw(dup);
        let node = node_id_of(owned.rank() as usize);
        Self::from_owned(owned, &node)
    }

    /// The communicator (ranks as in the communicator given at creation).
    pub fn raw(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size() as usize
    }

    /// The node layout of all ranks.
    pub fn nodes(&self) -> &NodeMap {
        &self.map
    }

    /// Collective: a sub-communicator of the ranks that pass the same `color`, ordered by
    /// `key`; `None` for ranks that pass `None`.
    pub fn split(&self, color: Option<u32>, key: i32) -> Option<SimpleCommunicator> {
        let color = match color {
            Some(c) => Color::with_value(c as i32),
            None => Color::undefined(),
        };
        self.comm.split_by_color_with_key(color, key)
    }

    /// Collective: true on every rank when `ok` is true on every rank.
    pub fn all_agree(&self, ok: bool) -> bool {
        all_agree(&self.comm, ok)
    }

    /// Collective: the maximum of `value` over all ranks.
    pub fn max_u64(&self, value: u64) -> u64 {
        let mut out = 0u64;
        self.comm.all_reduce_into(&value, &mut out, SystemOperation::max());
        out
    }

    /// Collective: the minimum of `value` over all ranks.
    pub fn min_u64(&self, value: u64) -> u64 {
        let mut out = 0u64;
        self.comm.all_reduce_into(&value, &mut out, SystemOperation::min());
        out
    }

    /// Collective: the maximum of `value` over all ranks.
    pub fn max_f64(&self, value: f64) -> f64 {
        let mut out = 0f64;
        self.comm.all_reduce_into(&value, &mut out, SystemOperation::max());
        out
    }

    /// Collective: the sum of `value` over all ranks.
    pub fn sum_u64(&self, value: u64) -> u64 {
        let mut out = 0u64;
        self.comm.all_reduce_into(&value, &mut out, SystemOperation::sum());
        out
    }

    /// Collective: the sum of `value` over all ranks.
    pub fn sum_f64(&self, value: f64) -> f64 {
        let mut out = 0f64;
        self.comm.all_reduce_into(&value, &mut out, SystemOperation::sum());
        out
    }

    /// Collective: every rank's `value`, by rank.
    pub fn all_gather_u64(&self, value: u64) -> Vec<u64> {
        all_gather_u64(&self.comm, value)
    }

    /// Collective: every rank's bytes, by rank.
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Vec<Vec<u8>> {
        all_gather_bytes(&self.comm, bytes)
    }

    /// Collective: root's bytes on every rank.
    pub fn broadcast_bytes(&self, root: usize, bytes: &[u8]) -> Vec<u8> {
        broadcast_bytes(&self.comm, root, bytes)
    }

    /// Collective barrier.
    pub fn barrier(&self) {
        self.comm.barrier();
    }

    /// Collective: every rank contributes whether its step (`what`) succeeded, so that no rank
    /// enters the next collective while another has stopped. Where every rank's `local` is
    /// `Ok` it is returned unchanged (one allreduce of one byte). Otherwise every rank returns
    /// an error: a rank that failed keeps its own, and the others get [`CkptError::Peer`]
    /// naming the lowest failed rank, its node and its error (a second collective gathers
    /// the causes, only then).
    pub fn agree<T, E>(&self, local: Result<T, E>, what: &str) -> Result<T, E>
    where
        E: std::fmt::Display + From<CkptError>,
    {
        let all_ok = self.all_agree(local.is_ok());
        self.agreed(local, all_ok, what)
    }

    /// [`Comm::agree`] when whether every rank succeeded (`all_ok`) is already known from
    /// another collective (one that carried the outcome with other values): the causes are
    /// gathered only when a rank failed. Collective when `all_ok` is false.
    pub fn agreed<T, E>(&self, local: Result<T, E>, all_ok: bool, what: &str) -> Result<T, E>
    where
        E: std::fmt::Display + From<CkptError>,
    {
        if all_ok {
            return local;
        }
        let mine = match &local {
            // `{:#}`: an anyhow error prints its whole chain of causes.
            Err(e) => Some(format!("{e:#}")).filter(|m| !m.is_empty()).unwrap_or_else(|| "(no message)".into()),
            Ok(_) => String::new(),
        };
        let causes = self.all_gather_bytes(mine.as_bytes());
        match local {
            Err(e) => Err(e),
            Ok(_) => {
                let Some((rank, cause)) = causes.iter().enumerate().find(|(_, c)| !c.is_empty()) else {
                    // all_ok was false, yet no rank names a cause: the caller's collective
                    // disagreed with this one. Still an error on every rank.
                    return Err(CkptError::State(format!("{what}: ranks disagree on whether it failed")).into());
                };
                let node = self.map.names[self.map.node_of[rank]].clone();
                let cause = String::from_utf8_lossy(cause).into_owned();
                Err(CkptError::Peer { what: what.to_string(), rank, node, cause }.into())
            }
        }
    }
}

/// Collective over `comm`: true on every rank when `ok` is true on every rank.
pub fn all_agree<C: Communicator>(comm: &C, ok: bool) -> bool {
    let mut all = 0u8;
    comm.all_reduce_into(&u8::from(ok), &mut all, SystemOperation::min());
    all == 1
}

/// Collective over `comm`: every rank's `value`, by rank.
pub fn all_gather_u64<C: Communicator>(comm: &C, value: u64) -> Vec<u64> {
    let mut out = vec![0u64; comm.size() as usize];
    comm.all_gather_into(&value, &mut out[..]);
    out
}

/// Collective over `comm`: every rank's bytes (lengths may differ), by rank.
pub fn all_gather_bytes<C: Communicator>(comm: &C, bytes: &[u8]) -> Vec<Vec<u8>> {
    let lens = all_gather_u64(comm, bytes.len() as u64);
    let counts: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
    let displs: Vec<i32> = counts.iter().scan(0, |acc, &c| Some(std::mem::replace(acc, *acc + c))).collect();
    let mut buf = vec![0u8; lens.iter().sum::<u64>() as usize];
    {
        let mut part = PartitionMut::new(&mut buf[..], counts, &displs[..]);
        comm.all_gather_varcount_into(bytes, &mut part);
    }
    let mut out = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &l in &lens {
        out.push(buf[at..at + l as usize].to_vec());
        at += l as usize;
    }
    out
}

/// Collective over `comm`: the bytes of `root` on every rank.
pub fn broadcast_bytes<C: Communicator>(comm: &C, root: usize, bytes: &[u8]) -> Vec<u8> {
    let root_proc = comm.process_at_rank(root as i32);
    let mut len = bytes.len() as u64;
    root_proc.broadcast_into(&mut len);
    let mut buf = if comm.rank() as usize == root { bytes.to_vec() } else { vec![0u8; len as usize] };
    root_proc.broadcast_into(&mut buf[..]);
    buf
}
