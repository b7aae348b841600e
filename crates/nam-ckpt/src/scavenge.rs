//! Scavenge: after a job, copy the node-local checkpoints of one dataset to the file-system
//! level and record them, so a later job restarts from them even when the nodes that held
//! them are gone (as SCR's scavenge does, run by its job scripts after the run).
//!
//! One process per node (`mpirun -np <nodes> --map-by node nam ckpt scavenge ...`, `srun`,
//! `pdsh`) looks in its node's `ram.dir` and `ssd.dir` (with `{node}` expanded), verifies
//! every committed rank file of the version (CRC32C per chunk), and copies it with its commit
//! marker to `<flush.dir>/<name>/v<V>/`, the layout the asynchronous flush writes: a restart
//! offers it as the `pfs` level. Each file lands under a temporary name first, the marker
//! after it, so a scavenge that stops half-way leaves nothing a restart would take for
//! complete; a rank already scavenged (marker and same size there) is left as it is, so two
//! processes on one node, or a second run, do no harm. `scavenged-<node>.json` in the version
//! directory records what the node contributed. It needs no MPI: each process works alone.

use crate::config::Config;
use crate::error::{CkptError, Result};
use crate::level::{Level, LevelKind};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Launcher variables that give a process its rank, in the order they are tried (Open MPI,
/// PMIx, MPICH/PMI, Slurm).
pub const RANK_ENVS: [&str; 4] = ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"];

/// The node this process scavenges: `NAM_NODE_ID`, else the node `NAM_EMULATE_NODES` gives
/// the launcher's rank ([`RANK_ENVS`]), else the host name.
pub fn this_node() -> String {
    if let Ok(id) = std::env::var(crate::node::NODE_ID_ENV) {
        if !id.is_empty() {
            return id;
        }
    }
    let rank = RANK_ENVS.iter().find_map(|v| std::env::var(v).ok()?.parse::<usize>().ok());
    let emulate = std::env::var(crate::node::EMULATE_NODES_ENV).unwrap_or_default();
    match rank.and_then(|r| crate::node::emulated_node(&emulate, r)) {
        Some(node) => node,
        None => crate::node::hostname(),
    }
}

/// What one node's scavenge did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scavenged {
    /// The node.
    pub node: String,
    /// Checkpoint name.
    pub name: String,
    /// Version copied.
    pub version: u64,
    /// Ranks whose file this run copied.
    pub copied: Vec<usize>,
    /// Ranks found already at the file-system level.
    pub already: Vec<usize>,
    /// Bytes copied.
    pub bytes: u64,
    /// The version directory at the file-system level.
    pub target: PathBuf,
}

/// Scavenges version `version` (the newest one committed on this node when `None`) of
/// `name` from the node-local levels of `config` (for node `node`) to `flush.dir`.
///
/// Errors, each before anything is written: [`CkptError::Config`] without `flush.dir`;
/// [`CkptError::NoCheckpoint`] when the node holds no committed file of the dataset (or of
/// that version), naming the directories searched; [`CkptError::Corrupt`] when a rank's file
/// fails its checksums (no file of the version is copied then).
pub fn scavenge(config: &Config, node: &str, name: &str, version: Option<u64>) -> Result<Scavenged> {
    let pfs = config.flush.dir.clone().ok_or_else(|| {
        CkptError::Config("scavenge copies to the file-system level: set flush.dir (NAM_CKPT_FLUSH_DIR)".into())
    })?;
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return Err(CkptError::Config(format!("`{name}` is not a checkpoint name")));
    }
    let mut local = config.clone();
    crate::relocate::localize(&mut local, node);
    let levels = [
        Level { kind: LevelKind::Ram, dir: local.ram.dir.clone(), keep: local.ram.keep },
        Level { kind: LevelKind::Ssd, dir: local.ssd.dir.clone(), keep: local.ssd.keep },
    ];
    let searched = || levels.iter().map(|l| l.dir.join(name).display().to_string()).collect::<Vec<_>>().join(", ");
    // Every (version, rank) committed on this node, with the level holding it (RAM first).
    let mut found: Vec<(u64, usize, &Level)> = Vec::new();
    for level in &levels {
        for (v, rank) in committed(level, name) {
            if !found.iter().any(|&(fv, fr, _)| (fv, fr) == (v, rank)) {
                found.push((v, rank, level));
            }
        }
    }
    if found.is_empty() {
        return Err(CkptError::NoCheckpoint(format!(
            " of `{name}` on node {node}: no committed rank file in {}",
            searched()
        )));
    }
    let version = match version {
        Some(v) => v,
        None => found.iter().map(|f| f.0).max().expect("found is not empty"),
    };
    let mut ranks: Vec<(usize, &Level)> = found.iter().filter(|f| f.0 == version).map(|f| (f.1, f.2)).collect();
    ranks.sort_by_key(|r| r.0);
    if ranks.is_empty() {
        let have: Vec<String> = found.iter().map(|f| format!("v{}", f.0)).collect();
        return Err(CkptError::NoCheckpoint(format!(
            " of `{name}` version {version} on node {node} (it has {}) in {}",
            have.join(", "),
            searched()
        )));
    }
    // Every file is verified before any is copied: a node with a damaged file contributes
    // nothing, and says which.
    for &(rank, level) in &ranks {
        let loaded = crate::format::read(&level.file(name, version, rank))?;
        let f = &loaded.footer;
        if (f.name.as_str(), f.version, f.rank) != (name, version, rank) {
            return Err(CkptError::Corrupt(format!(
                "{}: holds {} v{} of rank {}",
                level.file(name, version, rank).display(),
                f.name,
                f.version,
                f.rank
            )));
        }
    }
    let target = Level { kind: LevelKind::Pfs, dir: pfs, keep: 1 };
    let dir = target.version_dir(name, version);
    std::fs::create_dir_all(&dir).map_err(|e| CkptError::io("create", &dir, e))?;
    let mut out =
        Scavenged { node: node.into(), name: name.into(), version, target: dir.clone(), ..Default::default() };
    for &(rank, level) in &ranks {
        let (from, to) = (level.file(name, version, rank), target.file(name, version, rank));
        let len = std::fs::metadata(&from).map_err(|e| CkptError::io("stat", &from, e))?.len();
        let there = target.marker(name, version, rank).exists() && std::fs::metadata(&to).is_ok_and(|m| m.len() == len);
        if there {
            out.already.push(rank);
            continue;
        }
        copy(&from, &to)?;
        let marker = target.marker(name, version, rank);
        std::fs::write(&marker, b"").map_err(|e| CkptError::io("commit", &marker, e))?;
        out.copied.push(rank);
        out.bytes += len;
    }
    let record = dir.join(format!("scavenged-{}.json", node.replace(['/', '\0'], "_")));
    let tmp = record.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&out).expect("serializes"))
        .and_then(|_| std::fs::rename(&tmp, &record))
        .map_err(|e| CkptError::io("write", &record, e))?;
    Ok(out)
}

/// `(version, rank)` of every commit marker of `name` at `level` whose data file exists.
fn committed(level: &Level, name: &str) -> Vec<(u64, usize)> {
    let entries = |p: &Path| std::fs::read_dir(p).into_iter().flatten().filter_map(|e| e.ok());
    let mut out = Vec::new();
    for v in entries(&level.dir.join(name)) {
        let Some(version) = v.file_name().to_str().and_then(|n| n.strip_prefix('v')?.parse::<u64>().ok()) else {
            continue;
        };
        for f in entries(&v.path()) {
            let rank =
                f.file_name().to_str().and_then(|n| n.strip_prefix("rank-")?.strip_suffix(".done")?.parse().ok());
            if let Some(rank) = rank {
                if level.file(name, version, rank).is_file() {
                    out.push((version, rank));
                }
            }
        }
    }
    out.sort_unstable();
    out
}

/// Copies `from` to `to` through `<to>.scavenge-tmp`, synced, so `to` is complete or absent.
fn copy(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("scavenge-tmp");
    let copied = std::fs::copy(from, &tmp).and_then(|_| std::fs::File::open(&tmp)?.sync_all());
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(CkptError::io("copy", from, e));
    }
    std::fs::rename(&tmp, to).map_err(|e| CkptError::io("rename", to, e))
}
