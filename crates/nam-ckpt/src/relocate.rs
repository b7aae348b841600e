//! Restart elsewhere: ranks that restart on other nodes, or on spare nodes, get their files
//! back, and what is gone is rebuilt with the redundancy sets it was written with.
//!
//! SCR does this at init (its cache is redistributed and rebuilt before the application asks
//! for a checkpoint). Here:
//!
//! - Node-local directories may name their node: `ram.dir = "/dev/shm/ckpt/{node}"` is
//!   expanded with the rank's node ([`localize`]), so nodes emulated on one host
//!   (`NAM_EMULATE_NODES`) each have their own storage, as real nodes do.
//! - At init ([`relocate`]) every node reports the files it holds of ranks that run elsewhere
//!   now (`<level>/<name>/v<V>/rank-<r>.*`: data, commit marker, redundancy, layout); each
//!   rank asks for its files that its node does not have, the holders send them over MPI,
//!   and once the whole job agrees every copy landed, the old copies are removed (a move).
//! - Every checkpoint records the job's layout beside its files ([`record_job`],
//!   `rank-<r>.layout`: the node and failure group of every rank, and every rank's region
//!   layout). When a restart, or [`crate::Checkpointer::latest`], judges a version that
//!   needs a rebuild and the job runs on another layout than that version was written with,
//!   the L2 scheme is formed over the version's own recorded layout (`scheme_for`), so
//!   XOR, RS, partner and NAM-XOR find the sets that hold their redundancy; ranks whose node
//!   is gone (nothing left to move) are rebuilt from it, and a version no scheme can rebuild
//!   falls back to the file-system level as any restart does. A rebuilt rank's data is cut
//!   into regions by the region layout recorded with the version, not by what the job
//!   protects now. New checkpoints form their sets over the layout the job runs on now.

use crate::checkpointer::Job;
use crate::comm::Comm;
use crate::config::Config;
use crate::error::{CkptError, Result};
use crate::full::Full;
use crate::level::LevelKind;
use crate::node::NodeMap;
use crate::redundancy::Redundancy;
use crate::restart::RestartOutcome;
use mpi::traits::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The placeholder in `ram.dir` and `ssd.dir` that becomes the rank's node name.
pub const NODE_PLACEHOLDER: &str = "{node}";

/// Bytes per MPI message when a file moves (well below MPI's `int` count limit).
const MOVE_CHUNK: usize = 64 << 20;

/// Header value a holder sends in place of a length when it cannot read the file.
const UNREADABLE: u64 = u64::MAX;

/// `dir` with [`NODE_PLACEHOLDER`] replaced by `node`.
pub fn node_dir(dir: &Path, node: &str) -> PathBuf {
    match dir.to_str() {
        Some(s) if s.contains(NODE_PLACEHOLDER) => PathBuf::from(s.replace(NODE_PLACEHOLDER, node)),
        _ => dir.to_path_buf(),
    }
}

/// Expands [`NODE_PLACEHOLDER`] in the node-local directories (`ram.dir`, `ssd.dir`) of
/// `config` with `node`.
pub fn localize(config: &mut Config, node: &str) {
    config.ram.dir = node_dir(&config.ram.dir, node);
    config.ssd.dir = node_dir(&config.ssd.dir, node);
}

/// Refuses `{node}` ([`NODE_PLACEHOLDER`]) in `ram.dir` or `ssd.dir` together with
/// `incremental.mode`: restart on other nodes moves and rebuilds full checkpoint files only.
/// An incremental chain stays in the node-local directory it was written to and has no L2
/// redundancy, so a rank restarted on another node would not find it there (its off-node
/// copy is the `nam` level of `incremental.levels`, which needs no node directory).
pub(crate) fn validate(config: &Config) -> Result<()> {
    if config.incremental.mode()?.is_none() {
        return Ok(());
    }
    let named = [("ram.dir", &config.ram.dir), ("ssd.dir", &config.ssd.dir)]
        .into_iter()
        .filter(|(_, d)| d.to_str().is_some_and(|s| s.contains(NODE_PLACEHOLDER)))
        .map(|(k, _)| k)
        .collect::<Vec<_>>();
    if named.is_empty() {
        return Ok(());
    }
    Err(CkptError::Config(format!(
        "{} name the node ({NODE_PLACEHOLDER}) for restart on other nodes, which covers full checkpoints only: \
         incremental.mode keeps its chain where it was written (use fixed directories, and the nam level for an \
         off-node copy)",
        named.join(" and ")
    )))
}

/// The job layout a checkpoint was written with: the node and failure group of every rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Node of each rank.
    pub nodes: Vec<String>,
    /// Failure group of each rank (`None`: nodes were the failure domains).
    pub groups: Option<Vec<String>>,
    /// `(region id, bytes)` of each rank's file, in file order (`None` in layouts recorded
    /// before regions were, and in [`Layout::of`]): what a rank rebuilt by L2, whose own
    /// file footer is gone, cuts its data by.
    #[serde(default)]
    pub regions: Option<Vec<Vec<(i32, u64)>>>,
}

impl Layout {
    /// The layout `comm` runs on.
    pub fn of(comm: &Comm) -> Layout {
        let map = comm.nodes();
        let nodes = map.node_of.iter().map(|&n| map.names[n].clone()).collect();
        let groups = match comm.failure_groups() {
            Ok(Some(_)) => Some((0..comm.size()).map(|r| comm.group_of(r)).collect()),
            _ => None,
        };
        Layout { nodes, groups, regions: None }
    }

    /// Whether set formation over `self` and `other` gives the same sets and partners: the
    /// same ranks share a node, and the same ranks share a failure group (names aside).
    pub fn same_sets(&self, other: &Layout) -> bool {
        let shape = |names: &[String]| NodeMap::new(names).node_of;
        let groups = |l: &Layout| l.groups.as_deref().map(shape);
        shape(&self.nodes) == shape(&other.nodes) && groups(self) == groups(other)
    }
}

/// `rank-<r>.layout` in a version directory.
fn layout_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank-{rank}.layout"))
}

/// Not collective: writes the job's layout beside this rank's files of one version (`dir`,
/// created if needed), so a restart on another layout can re-form the sets.
pub fn record(comm: &Comm, dir: &Path) -> Result<()> {
    write_layout(comm, dir, &Layout::of(comm))
}

/// Collective: [`record`] with every rank's region layout (`regions`, this rank's
/// `(id, bytes)` in file order) in the layout, gathered over the job: the checkpoint
/// library's record, so a rank rebuilt by L2 after its node and footer are gone still knows
/// how its data was cut into regions.
pub fn record_job(comm: &Comm, dir: &Path, regions: &[(i32, u64)]) -> Result<()> {
    // A count word first: Open MPI refuses an all-gather of no bytes at all.
    let words = std::iter::once(regions.len() as u64).chain(regions.iter().flat_map(|&(id, len)| [id as u64, len]));
    let mine: Vec<u8> = words.flat_map(u64::to_le_bytes).collect();
    let all = comm.all_gather_bytes(&mine);
    let regions = all
        .iter()
        .map(|b| {
            let words: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect();
            words[1..].chunks_exact(2).map(|p| (p[0] as i32, p[1])).collect()
        })
        .collect();
    write_layout(comm, dir, &Layout { regions: Some(regions), ..Layout::of(comm) })
}

fn write_layout(comm: &Comm, dir: &Path, layout: &Layout) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| CkptError::io("create", dir, e))?;
    let path = layout_file(dir, comm.rank());
    let json = serde_json::to_vec(layout).expect("layout serializes");
    std::fs::write(&path, json).map_err(|e| CkptError::io("write", &path, e))
}

/// One file of one rank in a node-local level.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Item {
    /// Index of the level directory in the list given to [`relocate`].
    level: usize,
    /// Checkpoint name.
    name: String,
    /// Version.
    version: u64,
    /// File name, `rank-<r>.<suffix>`.
    file: String,
    /// The rank it belongs to.
    rank: usize,
    /// Bytes.
    bytes: u64,
}

impl Item {
    fn path(&self, dirs: &[PathBuf]) -> PathBuf {
        dirs[self.level].join(&self.name).join(format!("v{}", self.version)).join(&self.file)
    }

    /// The same file, whatever its size.
    fn key(&self) -> (usize, &str, u64, &str) {
        (self.level, &self.name, self.version, &self.file)
    }

    /// A peer's item is checked before it names a path or a rank: one path component each,
    /// a file of a rank that exists, a level that exists.
    fn valid(&self, levels: usize, ranks: usize) -> bool {
        let component = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0']);
        self.level < levels
            && self.rank < ranks
            && component(&self.name)
            && component(&self.file)
            && rank_of_file(&self.file) == Some(self.rank)
    }

    /// Markers move last, so a version is never marked committed before its data arrived.
    fn order(&self) -> (usize, &str, u64, bool, &str) {
        (self.level, &self.name, self.version, self.file.ends_with(".done"), &self.file)
    }
}

/// The rank a file belongs to: `rank-<r>.<suffix>`, not a temporary file.
fn rank_of_file(file: &str) -> Option<usize> {
    let rest = file.strip_prefix("rank-")?;
    let (rank, suffix) = rest.split_once('.')?;
    if suffix.is_empty() || suffix.ends_with("tmp") {
        return None;
    }
    rank.parse().ok()
}

/// Every rank file in the version directories of `dirs`.
fn scan(dirs: &[PathBuf]) -> Vec<Item> {
    let mut items = Vec::new();
    let entries = |p: &Path| std::fs::read_dir(p).into_iter().flatten().filter_map(|e| e.ok());
    for (level, dir) in dirs.iter().enumerate() {
        for named in entries(dir).filter(|e| e.path().is_dir()) {
            let Some(name) = named.file_name().to_str().map(String::from) else { continue };
            for v in entries(&named.path()) {
                let Some(version) = v.file_name().to_str().and_then(|n| n.strip_prefix('v')?.parse::<u64>().ok())
                else {
                    continue;
                };
                for f in entries(&v.path()) {
                    let Some(file) = f.file_name().to_str().map(String::from) else { continue };
                    let (Some(rank), Ok(meta)) = (rank_of_file(&file), f.metadata()) else { continue };
                    if meta.is_file() {
                        items.push(Item { level, name: name.clone(), version, file, rank, bytes: meta.len() });
                    }
                }
            }
        }
    }
    items.sort();
    items
}

/// What [`relocate`] moved to this rank.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Relocation {
    /// Files this rank received.
    pub files: usize,
    /// Bytes this rank received.
    pub bytes: u64,
    /// Files moved in the whole job.
    pub job_files: usize,
}

/// Collective: moves to every rank the files of its own (`rank-<r>.*` under the node-local
/// level directories `dirs`, already expanded for this rank's node) that its node does not
/// have and another node does. The lowest rank of each node reports what the node holds of
/// ranks that run elsewhere; the holders send, in one order every rank follows (so blocking
/// sends never wait on each other); once the job agrees every file landed, the holders remove
/// their copies. Err on every rank when one failed; then no copy is removed.
pub fn relocate(comm: &Comm, dirs: &[PathBuf]) -> Result<Relocation> {
    let rank = comm.rank();
    let map = comm.nodes();
    let my_node = map.node_of[rank];
    let found = scan(dirs);
    let reporter = map.ranks_on[my_node][0] == rank;
    let foreign: Vec<&Item> = if reporter {
        found.iter().filter(|i| map.node_of.get(i.rank) != Some(&my_node)).collect()
    } else {
        Vec::new()
    };
    let reports: Vec<Vec<Item>> = comm
        .all_gather_bytes(&serde_json::to_vec(&foreign).expect("items serialize"))
        .iter()
        .map(|b| serde_json::from_slice::<Vec<Item>>(b).unwrap_or_default())
        .map(|items| items.into_iter().filter(|i| i.valid(dirs.len(), comm.size())).collect())
        .collect();
    // What this rank asks for: its files nobody on its node has, from the lowest holder.
    let mut wanted: Vec<(usize, Item)> = Vec::new();
    for (holder, items) in reports.iter().enumerate() {
        for item in items.iter().filter(|i| i.rank == rank) {
            let have = found.iter().any(|f| f.key() == item.key());
            if !have && !wanted.iter().any(|(_, w)| w.key() == item.key()) {
                wanted.push((holder, item.clone()));
            }
        }
    }
    wanted.sort_by(|a, b| a.1.order().cmp(&b.1.order()));
    let asks: Vec<(usize, usize, Item)> = comm
        .all_gather_bytes(&serde_json::to_vec(&wanted).expect("asks serialize"))
        .iter()
        .enumerate()
        .flat_map(|(to, b)| {
            let list: Vec<(usize, Item)> = serde_json::from_slice(b).unwrap_or_default();
            list.into_iter().map(move |(from, item)| (from, to, item))
        })
        .filter(|(from, to, item)| {
            // Only what the holder reported, asked for by its owner.
            *from < reports.len() && item.rank == *to && reports[*from].iter().any(|r| r == item)
        })
        .collect();
    let mut outcome = Relocation { job_files: asks.len(), ..Default::default() };
    let mut local: Result<()> = Ok(());
    let mut sent = Vec::new();
    for (from, to, item) in &asks {
        if *from == rank {
            send(comm, *to, &item.path(dirs));
            sent.push(item.path(dirs));
        } else if *to == rank {
            let received = receive(comm, *from, item, &item.path(dirs));
            match received {
                Ok(()) => {
                    outcome.files += 1;
                    outcome.bytes += item.bytes;
                }
                Err(e) => {
                    if local.is_ok() {
                        local = Err(e);
                    }
                }
            }
        }
    }
    comm.agree(local, "moving checkpoint files to the nodes their ranks run on now")?;
    for path in sent {
        // The new copy is in place on its rank's node: the old one goes (a move, as SCR's).
        let _ = std::fs::remove_file(&path);
    }
    Ok(outcome)
}

/// Sends the file at `path` to `to`: its length, then its bytes in chunks. A file that cannot
/// be read sends [`UNREADABLE`] instead, so the receiver is never left waiting.
fn send(comm: &Comm, to: usize, path: &Path) {
    let peer = comm.raw().process_at_rank(to as i32);
    match std::fs::read(path) {
        Ok(bytes) => {
            peer.send(&(bytes.len() as u64));
            for chunk in bytes.chunks(MOVE_CHUNK) {
                peer.send(chunk);
            }
        }
        Err(_) => peer.send(&UNREADABLE),
    }
}

/// Receives `item` from `from` and stores it at `path` (through a temporary name).
fn receive(comm: &Comm, from: usize, item: &Item, path: &Path) -> Result<()> {
    let peer = comm.raw().process_at_rank(from as i32);
    let (len, _) = peer.receive::<u64>();
    if len == UNREADABLE {
        return Err(CkptError::Unrecoverable(format!("rank {from} could not read {} to send it", item.file)));
    }
    // The holder said how long the file is when it reported it; a different length now is
    // refused before anything is allocated for it (the chunks are still drained).
    let expected = if len == item.bytes { Some(len as usize) } else { None };
    let mut data = Vec::with_capacity(expected.unwrap_or(0));
    let mut left = len;
    while left > 0 {
        let (chunk, _) = peer.receive_vec::<u8>();
        if chunk.is_empty() || chunk.len() as u64 > left {
            return Err(CkptError::Corrupt(format!(
                "{}: rank {from} sent a chunk past the length it announced",
                item.file
            )));
        }
        left -= chunk.len() as u64;
        if expected.is_some() {
            data.extend_from_slice(&chunk);
        }
    }
    if expected.is_none() {
        return Err(CkptError::Corrupt(format!(
            "{}: rank {from} reported {} bytes and sent {len}",
            item.file, item.bytes
        )));
    }
    let dir = path.parent().expect("a version directory");
    std::fs::create_dir_all(dir).map_err(|e| CkptError::io("create", dir, e))?;
    let tmp = path.with_extension("move-tmp");
    std::fs::write(&tmp, &data).map_err(|e| CkptError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| CkptError::io("rename", path, e))
}

/// Collective: the layout recorded with the newest version of `name` that any rank has a
/// record of (exactly `version` when given), or `None`.
fn recorded(job: &Job, full: &Full, name: &str, version: Option<u64>) -> Option<Layout> {
    let rank = job.comm.rank();
    let mine: Option<(u64, Vec<u8>)> = full
        .levels()
        .iter()
        .flat_map(|l| l.committed(name, rank).into_iter().map(move |v| (l, v)))
        .filter(|(_, v)| version.is_none_or(|want| want == *v))
        .filter_map(|(l, v)| std::fs::read(layout_file(&l.version_dir(name, v), rank)).ok().map(|b| (v, b)))
        .max_by_key(|(v, _)| *v);
    let newest = job.comm.max_u64(mine.as_ref().map_or(0, |(v, _)| *v + 1));
    // A leading byte: Open MPI refuses an all-gather of no bytes at all.
    let mut offer = vec![0u8];
    if let Some((v, b)) = &mine {
        if *v + 1 == newest {
            offer.extend_from_slice(b);
        }
    }
    job.comm
        .all_gather_bytes(&offer)
        .iter()
        .filter(|b| b.len() > 1)
        .find_map(|b| serde_json::from_slice::<Layout>(&b[1..]).ok())
        .filter(|l| {
            let n = l.nodes.len();
            n == job.comm.size()
                && l.groups.as_ref().is_none_or(|g| g.len() == n)
                && l.regions.as_ref().is_none_or(|r| r.len() == n)
        })
}

/// What a rebuild of one version needs from the layout recorded with it ([`scheme_for`]).
pub(crate) struct Recorded {
    /// The L2 scheme formed over the recorded layout, when the job runs on another one now
    /// (`None`: the job's current scheme forms the same sets).
    pub(crate) scheme: Option<Box<dyn Redundancy>>,
    /// This rank's `(region id, bytes)` in the version's files, when recorded.
    pub(crate) regions: Option<Vec<(i32, u64)>>,
}

/// Collective: the layout recorded with `version` of `name` (from any rank that still has
/// it), and the L2 scheme formed over it when its sets differ from those of the layout the
/// job runs on now. Called only for a version that needs a rebuild, so a restart with
/// nothing lost reads no layout file and forms no sets.
pub(crate) fn scheme_for(job: &Job, full: &Full, name: &str, version: u64) -> Result<Recorded> {
    let Some(then) = recorded(job, full, name, Some(version)) else {
        return Ok(Recorded { scheme: None, regions: None });
    };
    let regions = then.regions.as_ref().map(|r| r[job.comm.rank()].clone());
    if then.same_sets(&Layout::of(&job.comm)) {
        return Ok(Recorded { scheme: None, regions });
    }
    let rank = job.comm.rank();
    let group = then.groups.as_ref().map(|g| g[rank].as_str());
    let old = Comm::with_layout(job.comm.raw(), &then.nodes[rank], group);
    let scheme = crate::redundancy::build_with(&old, &job.config.redundancy_config(), None);
    let scheme = job.comm.agree(scheme, "forming the L2 sets of the layout the checkpoint was written with")?;
    Ok(Recorded { scheme: Some(scheme), regions })
}

/// Collective: [`Full::restart_from`] once every candidate's version directory exists on this
/// rank's node. A rebuild uses the sets of the layout each version was written with
/// ([`scheme_for`], asked by the restart only for a version that needs one).
pub(crate) fn restart(
    full: &mut Full,
    job: &mut Job,
    name: &str,
    version: Option<u64>,
    ids: Option<&[i32]>,
) -> Result<RestartOutcome> {
    // A rank on a spare node, or whose node's storage is gone, has no version directories
    // there: the rebuild writes its data and redundancy into them.
    // Those left empty (versions the restart did not need) go again afterwards.
    let candidates = full.candidates(job, name);
    let mut created = Vec::new();
    for &(v, kind) in &candidates {
        if let Some(level) = full.levels().into_iter().find(|l| l.kind == kind && kind != LevelKind::Pfs) {
            let dir = level.version_dir(name, v);
            if !dir.exists() {
                std::fs::create_dir_all(&dir).map_err(|e| CkptError::io("create", &dir, e))?;
                created.push(dir);
            }
        }
    }
    let outcome = full.restart_from(job, name, candidates, version, ids);
    for dir in created {
        let _ = std::fs::remove_dir(dir);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_placeholders_expand_and_other_dirs_stay() {
        assert_eq!(node_dir(Path::new("/d/{node}/ram"), "emu-2"), PathBuf::from("/d/emu-2/ram"));
        assert_eq!(node_dir(Path::new("/d/ram"), "emu-2"), PathBuf::from("/d/ram"));
    }

    #[test]
    fn rank_files_are_recognized_and_temporaries_are_not() {
        assert_eq!(rank_of_file("rank-12.ckpt"), Some(12));
        assert_eq!(rank_of_file("rank-3.done"), Some(3));
        assert_eq!(rank_of_file("rank-3.xor.tmp"), None);
        assert_eq!(rank_of_file("rank-3.move-tmp"), None);
        assert_eq!(rank_of_file("spare-rank-3.0.ckpt"), None);
    }

    #[test]
    fn hostile_items_are_refused() {
        let ok = Item { level: 0, name: "app".into(), version: 2, file: "rank-1.ckpt".into(), rank: 1, bytes: 9 };
        assert!(ok.valid(2, 4));
        for bad in [
            Item { name: "..".into(), ..ok.clone() },
            Item { file: "rank-1.ckpt/../../x".into(), ..ok.clone() },
            Item { file: "rank-2.ckpt".into(), ..ok.clone() },
            Item { rank: 9, file: "rank-9.ckpt".into(), ..ok.clone() },
            Item { level: 2, ..ok.clone() },
        ] {
            assert!(!bad.valid(2, 4), "{bad:?}");
        }
    }

    #[test]
    fn incremental_mode_refuses_node_named_directories_and_descriptors() {
        let text = "[ram]\ndir = \"/d/{node}/ram\"\n[incremental]\nmode = \"incremental\"\n";
        let e = Config::parse(text, &[]).unwrap_err();
        assert!(matches!(&e, CkptError::Config(m) if m.contains("ram.dir name the node")), "{e}");
        assert!(e.to_string().contains("covers full checkpoints only"), "{e}");
        assert!(Config::parse("[ram]\ndir = \"/d/{node}/ram\"\n", &[]).is_ok());
        assert!(Config::parse("[ram]\ndir = \"/d/ram\"\n[incremental]\nmode = \"incremental\"\n", &[]).is_ok());
        let text = "[descriptors.x]\nscheme = \"xor\"\n[incremental]\nmode = \"incremental\"\n";
        let e = Config::parse(text, &[]).unwrap_err();
        assert!(matches!(&e, CkptError::Config(m) if m.contains("descriptors protect full checkpoints")), "{e}");
    }

    #[test]
    fn layouts_compare_by_shape_not_names() {
        let l = |n: &[&str], g: Option<&[&str]>| Layout {
            nodes: n.iter().map(|s| s.to_string()).collect(),
            groups: g.map(|g| g.iter().map(|s| s.to_string()).collect()),
            regions: None,
        };
        assert!(l(&["a", "b", "a"], None).same_sets(&l(&["x", "y", "x"], None)));
        assert!(!l(&["a", "b", "a"], None).same_sets(&l(&["a", "a", "b"], None)));
        assert!(!l(&["a", "b"], Some(&["r", "s"])).same_sets(&l(&["a", "b"], None)));
    }
}
