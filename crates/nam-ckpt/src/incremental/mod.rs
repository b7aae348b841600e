//! Incremental checkpoints in the checkpoint library (`[incremental]` in the configuration):
//! the protected regions are checkpointed by a nam-incr [`Engine`] (write tracking, changed
//! lines only, the copy overlapping the application in the background modes), whose chain of
//! a base and increments every level of `incremental.levels` keeps whole (`tee.rs`).
//!
//! ```text
//! <ram.dir>/<name>/incr-rank-<r>/     RAM level: nam-incr objects of rank r (tmpfs)
//! <ssd.dir>/<name>/incr-rank-<r>/     SSD level: the same, fsync'ed (ssd.fsync)
//! nam-ckpt/<name>/rank-<r>/<object>   memory-server level: persistent allocations
//! ```
//! A checkpoint returns once the engine has closed the interval; in the background modes it
//! is complete later, when its commit is stored, which carries the version (`meta.rs`). So the
//! commits are the truth: a restart lists each rank's complete versions on each level, and
//! takes the newest version every rank can rebuild on one level (every checksum checked),
//! falling back level by level, then version by version. The placement policy, L2 and the L3
//! flush apply to full checkpoints only.

mod config;
mod meta;
mod tee;

pub use config::IncrementalConfig;

use crate::checkpointer::{CheckpointOutcome, Job};
use crate::error::{CkptError, Result};
use crate::fault::Point;
use crate::level::LevelKind;
use crate::memory_server::ServerClient;
use crate::policy::{Decision, Placement};
use crate::redundancy::{agree, ProtectStats};
use crate::restart::RestartOutcome;
use meta::Meta;
use nam_incr::{DirStore, Engine, IncrError, Mode, NamStore, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The incremental strategy of a [`crate::Checkpointer`].
pub(crate) struct Incremental {
    mode: Mode,
    kinds: Vec<LevelKind>,
    open: Option<Open>,
    /// How to reach the memory servers of the `nam` level (read once at init).
    client: Option<ServerClient>,
}

/// One level's store of a chain.
type Level = (LevelKind, Arc<dyn Store>);

/// The chain of one checkpoint name.
struct Open {
    name: String,
    levels: Vec<Level>,
    engine: Option<Engine>,
    /// Region id of each engine region (`None`: unprotected since).
    ids: Vec<Option<i32>>,
    /// The version of each interval this engine took.
    versions: BTreeMap<u32, u64>,
}

/// A complete version on one level of this rank: (version, level, interval).
type Found = (u64, LevelKind, u32);

impl Incremental {
    /// The state for `config`, `None` when the mode is off; `client` reaches the memory
    /// servers of the `nam` level.
    pub(crate) fn new(config: &IncrementalConfig, client: Option<ServerClient>) -> Result<Option<Incremental>> {
        let Some(mode) = config.mode()? else { return Ok(None) };
        Ok(Some(Incremental { mode, kinds: config.level_kinds()?, open: None, client }))
    }
}

/// An engine error as the checkpoint library reports it.
pub(crate) fn ckpt_error(e: IncrError) -> CkptError {
    match e {
        IncrError::Store(nam_incr::StoreError::Corrupt { name, why }) => CkptError::Corrupt(format!("{name}: {why}")),
        IncrError::NoSuchCheckpoint { .. } | IncrError::NothingToRestore { .. } => {
            CkptError::NoCheckpoint(format!(": {e}"))
        }
        other => CkptError::Incremental(other),
    }
}

impl Incremental {
    fn open(&mut self) -> &mut Open {
        self.open.as_mut().expect("opened")
    }

    /// Opens the stores of chain `name` on every level (once; one chain per job).
    fn open_chain(&mut self, job: &Job, name: &str) -> Result<()> {
        if let Some(open) = &self.open {
            if open.name == name {
                return Ok(());
            }
            if open.engine.is_some() {
                return Err(CkptError::State(format!(
                    "incremental checkpoints keep one chain per job: `{}` is in use, not `{name}`",
                    open.name
                )));
            }
        }
        let levels = self.levels(job, name)?;
        let versions = BTreeMap::new();
        self.open = Some(Open { name: name.into(), levels, engine: None, ids: Vec::new(), versions });
        Ok(())
    }

    /// The stores of chain `name`: the open ones, else new ones.
    fn levels(&self, job: &Job, name: &str) -> Result<Vec<Level>> {
        if let Some(open) = self.open.as_ref().filter(|o| o.name == name) {
            return Ok(open.levels.clone());
        }
        let rank = job.comm.rank();
        let mut levels: Vec<Level> = Vec::new();
        for &kind in &self.kinds {
            let incr_error = |e: nam_incr::StoreError| ckpt_error(e.into());
            let store: Arc<dyn Store> = match kind {
                LevelKind::Nam => {
                    let servers = &job.config.incremental.servers;
                    let server = &servers[rank % servers.len()];
                    let addr = server.parse().map_err(|e| {
                        CkptError::Config(format!("incremental.servers: `{server}` is not host:port ({e})"))
                    })?;
                    let client = self.client.as_ref().expect("read at init for the nam level").connect(addr)?;
                    Arc::new(NamStore::new(client, &format!("nam-ckpt/{name}/rank-{rank}")))
                }
                LevelKind::Ram | LevelKind::Ssd | LevelKind::Pfs => {
                    let (dir, sync) = match kind {
                        LevelKind::Ram => (&job.config.ram.dir, false),
                        _ => (&job.config.ssd.dir, job.config.ssd.fsync),
                    };
                    let dir = dir.join(name).join(format!("incr-rank-{rank}"));
                    Arc::new(DirStore::with_sync(dir, sync, kind.name()).map_err(incr_error)?)
                }
            };
            levels.push((kind, store));
        }
        Ok(levels)
    }

    /// Starts the engine (at the first checkpoint) and hands it every protected region.
    fn start_engine(&mut self, job: &mut Job) -> Result<()> {
        if self.open().engine.is_some() {
            return Ok(());
        }
        let mode = self.mode;
        let stores = self.open().levels.iter().map(|(_, s)| s.clone()).collect();
        let tee: Arc<dyn Store> = Arc::new(tee::Tee::new(stores));
        let engine = Engine::new(job.config.incremental.engine_config(mode), tee).map_err(ckpt_error)?;
        if let Some(reason) = engine.tracker_fallback() {
            log::warn!("incremental checkpoints track writes with mprotect: {reason}");
        }
        self.open().engine = Some(engine);
        let regions: Vec<i32> = job.regions.keys().copied().collect();
        for id in regions {
            self.protect(job, id)?;
        }
        Ok(())
    }

    /// Hands region `id` (just protected) to the engine, if it runs. A region sharing a page
    /// with another protected region cannot be tracked apart from it and is stored whole in
    /// every commit instead.
    pub(crate) fn protect(&mut self, job: &mut Job, id: i32) -> Result<()> {
        let region = job.regions[&id];
        let Some(open) = self.open.as_mut() else { return Ok(()) };
        let Some(engine) = &open.engine else { return Ok(()) };
        // SAFETY: `Checkpointer::protect`'s contract: valid until unprotected or dropped.
        match unsafe { engine.protect(region.ptr, region.len) } {
            Ok(index) => {
                open.ids.resize(index, None);
                open.ids.push(Some(id));
                Ok(())
            }
            Err(IncrError::Overlap { .. }) => Ok(()),
            Err(e) => {
                job.regions.remove(&id);
                Err(CkptError::Region { id, reason: e.to_string() })
            }
        }
    }

    /// Stops tracking region `id` (just unprotected).
    pub(crate) fn unprotect(&mut self, id: i32) -> Result<()> {
        let Some(open) = self.open.as_mut() else { return Ok(()) };
        let (Some(engine), Some(index)) = (&open.engine, open.ids.iter().position(|i| *i == Some(id))) else {
            return Ok(());
        };
        open.ids[index] = None;
        engine.unprotect(index).map_err(ckpt_error)
    }

    /// Collective: an incremental checkpoint of version `version` of `name`.
    pub(crate) fn checkpoint(&mut self, job: &mut Job, name: &str, version: u64) -> Result<CheckpointOutcome> {
        let clock = crate::cpu::Stopwatch::start();
        let local = if job.files.is_empty() {
            self.open_chain(job, name).and_then(|_| self.start_engine(job))
        } else {
            Err(CkptError::Config("routed files are not stored by incremental checkpoints (incremental.mode)".into()))
        };
        agree(job.comm.raw(), local, "opening the incremental checkpoint levels")?;
        let tracked: BTreeSet<i32> = self.open().ids.iter().flatten().copied().collect();
        let inline = job
            .regions
            .iter()
            .filter(|(id, _)| !tracked.contains(id))
            // SAFETY: `protect`'s contract keeps every region valid and unaliased during checkpoint.
            .map(|(&id, r)| (id, unsafe { std::slice::from_raw_parts(r.ptr, r.len) }.to_vec()))
            .collect();
        let meta = Meta { version, ranks: job.comm.size(), ids: self.open().ids.clone(), inline };
        self.pin(job);
        let targeted = fault_targets(version, job.comm.rank());
        let engine = self.open().engine.as_ref().expect("started");
        // The fault kills the rank during the copy of `version` alone: the background copies
        // of earlier versions finish first. In early-late mode a copy goes on into later
        // intervals, so on a loaded machine the previous one can still run here, the kill
        // right after this checkpoint would end it too, and the rank would die with two
        // versions uncommitted instead of the one the fault names.
        let settled = !targeted || engine.wait().map_err(|e| log::warn!("before the injected fault: {e}")).is_ok();
        let die = targeted && settled && engine.hold_next_commit();
        let before = engine.stats().bytes_written;
        let started = std::time::Instant::now();
        let local = engine.checkpoint_with(meta.encode()).map_err(ckpt_error);
        let write_seconds = started.elapsed().as_secs_f64();
        let file_bytes = engine.stats().bytes_written - before;
        let interval = agree(job.comm.raw(), local, "taking the incremental checkpoint")?;
        self.open().versions.insert(interval, version);
        if die {
            // The rank ends here, as a crashed rank does, its copy of `version` uncommitted.
            crate::fault::kill();
        }
        let level = self.kinds[0];
        let placement = if level == LevelKind::Ram { Placement::Ram } else { Placement::Ssd };
        let decision = Decision {
            placement,
            lifetime_estimated_years: f64::INFINITY,
            lifetime_expected_years: f64::INFINITY,
            slowdown: 0.0,
            slowdown_after_ssd: 0.0,
            fits_ram: true,
        };
        let seconds = job.comm.max_f64(clock.wall_seconds());
        let protect = ProtectStats::default();
        Ok(CheckpointOutcome {
            version,
            level: Some(level),
            decision,
            file_bytes,
            write_seconds,
            protect,
            seconds,
            flushed: false,
        })
    }

    /// Collective: pins the newest version complete on every rank, so no rank collects it as
    /// garbage before a newer one is complete everywhere (ranks finish their background
    /// copies at different times, and a restart needs one version on all of them).
    fn pin(&mut self, job: &Job) {
        let open = self.open();
        let engine = open.engine.as_ref().expect("started");
        let newest = engine.committed().and_then(|i| open.versions.get(&i)).copied().unwrap_or(0);
        let everywhere = job.comm.min_u64(newest);
        let open = self.open();
        // 0 (some rank has none yet, or the version is of an earlier run): keep everything.
        let pin = open.versions.iter().find(|(_, v)| **v == everywhere && everywhere > 0).map_or(0, |(i, _)| *i);
        open.versions.retain(|i, _| *i >= pin);
        open.engine.as_ref().expect("started").keep_from(pin);
    }

    /// Waits for the background copies (finalize): Err when one failed.
    pub(crate) fn finish(&self) -> Result<()> {
        let engine = self.open.as_ref().and_then(|o| o.engine.as_ref());
        engine.map_or(Ok(()), |e| e.wait().map(|_| ()).map_err(ckpt_error))
    }

    /// Collective: `(version, level)` complete on any rank, newest first, then in level order.
    fn candidates(&self, job: &Job, found: &[Found]) -> Vec<(u64, LevelKind)> {
        let mine: Vec<(u64, u64)> = found.iter().map(|(v, k, _)| (*v, k.code())).collect();
        let json = serde_json::to_vec(&mine).expect("serializes");
        let mut all = BTreeSet::new();
        for bytes in job.comm.all_gather_bytes(&json) {
            let theirs: Vec<(u64, u64)> = serde_json::from_slice(&bytes).expect("our own encoding");
            all.extend(theirs);
        }
        let kinds = &self.kinds;
        let order = |code: u64| kinds.iter().position(|k| k.code() == code).unwrap_or(usize::MAX);
        let mut list: Vec<(u64, u64)> = all.into_iter().collect();
        list.sort_by(|a, b| b.0.cmp(&a.0).then(order(a.1).cmp(&order(b.1))));
        list.into_iter().filter_map(|(v, k)| LevelKind::from_code(k).map(|k| (v, k))).collect()
    }

    /// Collective: the newest version of `name` an incremental restart may start from.
    pub(crate) fn latest(&self, job: &Job, name: &str) -> Option<u64> {
        let levels = agree(job.comm.raw(), self.levels(job, name), "opening the incremental checkpoint levels").ok()?;
        let found = found(&levels);
        self.candidates(job, &found).first().map(|c| c.0)
    }

    /// Collective: restores the newest version (or `version`) every rank can rebuild on one
    /// level into the protected regions (all, or `ids`).
    pub(crate) fn restart(
        &mut self,
        job: &Job,
        name: &str,
        version: Option<u64>,
        ids: Option<&[i32]>,
    ) -> Result<RestartOutcome> {
        let local = self.open_chain(job, name);
        agree(job.comm.raw(), local, "opening the incremental checkpoint levels")?;
        if let Some(engine) = &self.open().engine {
            // Copies in flight finish first; their failure does not stop a restart.
            if let Err(e) = engine.wait() {
                log::warn!("restart after a failed incremental checkpoint: {e}");
            }
        }
        let found = found(&self.open().levels.clone());
        let mut fell_back = Vec::new();
        for (v, kind) in self.candidates(job, &found).into_iter().filter(|c| version.is_none_or(|v| v == c.0)) {
            let local = self.load(job, &found, v, kind);
            let written = local.as_ref().map(|m| m.0.ranks as u64).unwrap_or(0);
            let max_written = job.comm.max_u64(written);
            if max_written != 0 && max_written != job.comm.size() as u64 {
                return Err(CkptError::RankCount { written: max_written as usize, now: job.comm.size() });
            }
            let local = local.and_then(|loaded| Self::check(job, &loaded, ids).map(|_| loaded));
            match agree(job.comm.raw(), local, "rebuilding the incremental checkpoint") {
                Ok(loaded) => {
                    Self::copy(job, &loaded, ids);
                    let rebuilt_ranks = Vec::new();
                    return Ok(RestartOutcome {
                        version: v,
                        level: kind,
                        rebuilt_ranks,
                        repaired_chunks: 0,
                        fell_back,
                    });
                }
                Err(e) => fell_back.push((v, kind, e.to_string())),
            }
        }
        let tried = fell_back.iter().map(|(v, k, e)| format!("v{v}/{}: {e}", k.name())).collect::<Vec<_>>();
        let which = version.map(|v| format!(" for version {v}")).unwrap_or_default();
        Err(CkptError::NoCheckpoint(format!(" of `{name}`{which}; tried: [{}]", tried.join("; "))))
    }

    /// Rebuilds version `version` of this rank from `kind`, checking every checksum.
    fn load(&mut self, job: &Job, found: &[Found], version: u64, kind: LevelKind) -> Result<(Meta, Vec<Vec<u8>>)> {
        let rank = job.comm.rank();
        let Some(&(_, _, interval)) = found.iter().find(|f| f.0 == version && f.1 == kind) else {
            return Err(CkptError::NoCheckpoint(format!(": rank {rank} has no complete copy")));
        };
        let store = self.open().levels.iter().find(|l| l.0 == kind).expect("listed level").1.clone();
        let restored = nam_incr::restore_interval(&*store, interval).map_err(ckpt_error)?;
        let meta = Meta::decode(&format!("checkpoint {interval}"), &restored.meta)?;
        if meta.version != version {
            return Err(CkptError::Corrupt(format!("checkpoint {interval} holds version {}", meta.version)));
        }
        Ok((meta, restored.regions))
    }

    /// Checks that every stored region to restore is protected now, with its size.
    fn check(job: &Job, (meta, regions): &(Meta, Vec<Vec<u8>>), ids: Option<&[i32]>) -> Result<()> {
        let tracked = meta.ids.iter().zip(regions).filter_map(|(id, data)| id.map(|id| (id, data.len())));
        let inline = meta.inline.iter().map(|(id, data)| (*id, data.len()));
        for (id, len) in tracked.chain(inline).filter(|(id, _)| ids.is_none_or(|ids| ids.contains(id))) {
            let region = job.regions.get(&id).ok_or(CkptError::UnknownRegion(id))?;
            if region.len != len {
                return Err(CkptError::SizeMismatch { id, stored: len as u64, protected: region.len as u64 });
            }
        }
        Ok(())
    }

    /// Copies checked data into the regions.
    fn copy(job: &Job, (meta, regions): &(Meta, Vec<Vec<u8>>), ids: Option<&[i32]>) {
        let tracked = meta.ids.iter().zip(regions).filter_map(|(id, data)| id.map(|id| (id, data)));
        let inline = meta.inline.iter().map(|(id, data)| (*id, data));
        for (id, data) in tracked.chain(inline).filter(|(id, _)| ids.is_none_or(|ids| ids.contains(id))) {
            let region = job.regions[&id];
            // SAFETY: `protect`'s contract; the size was checked by `incr_check`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), region.ptr, region.len) };
        }
    }
}

/// This rank's complete versions on every level, in level order.
fn found(levels: &[Level]) -> Vec<Found> {
    let mut found = Vec::new();
    for (kind, store) in levels {
        let listed = match nam_incr::checkpoints(&**store) {
            Ok(l) => l,
            Err(e) => {
                log::warn!("incremental checkpoints on the {} level cannot be listed: {e}", kind.name());
                continue;
            }
        };
        for l in listed {
            if let Ok(meta) = Meta::decode("commit", &l.meta) {
                found.push((meta.version, *kind, l.interval));
            }
        }
    }
    found
}

/// Whether the test-only fault hook ([`crate::fault`]) kills this rank during the background
/// copy of `version`.
fn fault_targets(version: u64, rank: usize) -> bool {
    let hit = crate::fault::armed(Point::DuringCopy, version, rank);
    if hit {
        eprintln!("die-during-copy: rank {rank} dies during the copy of version {version}");
    }
    hit
}
