//! Full checkpoints, the checkpointer's default strategy: every checkpoint stores all protected
//! regions and routed files. The placement policy picks RAM or SSD for all ranks, every rank
//! writes its file, the L2 scheme protects it ([`Redundancy::protect_overlapped`]), every rank
//! commits, older versions retire, and every `flush.every`-th version goes to the L3 flush.
//! Restart is in `restart.rs`, the RAM level's reservation in `reserve.rs`.

use crate::checkpointer::{CheckpointOutcome, Job};
use crate::comm::Comm;
use crate::config::Config;
use crate::error::{CkptError, Result};
use crate::fault::{self, Point};
use crate::flush::{FlushJob, Flusher};
use crate::format::{self, ChunkParity, Footer, WriteOptions};
use crate::level::{Level, LevelKind};
use crate::memory_server::ServerClient;
use crate::policy::{Clc, Placement, PolicyKind};
use crate::redundancy::{self, LocalWrite, ProtectStats, Redundancy, Target};
use crate::wear::Wear;

/// The full-checkpoint strategy's state.
pub(crate) struct Full {
    pub(crate) scheme: Box<dyn Redundancy>,
    pub(crate) clc: Clc,
    pub(crate) ram: Level,
    pub(crate) ssd: Level,
    pub(crate) pfs: Option<Level>,
    pub(crate) flusher: Option<Flusher>,
    /// Checkpoints taken (the flush takes every `flush.every`-th).
    pub(crate) count: u64,
    /// The versions `latest` and `restart` may use (the dataset index, set before each).
    pub(crate) choice: std::cell::RefCell<crate::datasets::Choice>,
    /// The store of a rank's file rebuilt by L2, running after its restart returned
    /// ([`Full::store_rebuilt`]); joined by [`Full::settle`] before anything else touches the
    /// level directories.
    pub(crate) pending_store: std::cell::RefCell<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Full {
    fn drop(&mut self) {
        self.settle();
    }
}

impl Full {
    /// Collective over `comm`: builds the L2 scheme, opens the SSD wear record, sets up the
    /// placement policy (probing the SSD when it needs its cost) and starts the flush.
    pub(crate) fn new(comm: &Comm, config: &Config, client: Option<&ServerClient>) -> Result<Full> {
        // NAM-XOR connects each set to its own server and agrees within the set only.
        let scheme = redundancy::build_with(comm, &config.redundancy_config(), client);
        let scheme = comm.agree(scheme, "setting up the L2 scheme")?;
        let node = comm.nodes().names[comm.nodes().node_of[comm.rank()]].clone();
        let wear_file =
            config.ssd.wear_file.clone().unwrap_or_else(|| config.ssd.dir.join(format!("wear-{node}.json")));
        let wear = Wear::open(comm, config.ssd.dir.clone(), wear_file, config.ssd.rated_pbw, config.ssd.used_pbw);
        let wear = comm.agree(wear, "opening the SSD wear record")?;
        let kind = PolicyKind::parse(&config.policy.kind)?.with_ratio(config.policy.ratio);
        let mut clc = Clc::new(kind, config.policy.bound, config.policy.force_ssd_every, config.ssd.rated_years, wear);
        if clc.wants_ssd_cost() && config.policy.ssd_probe.0 > 0 {
            clc.probe_ssd(comm, &config.ssd.dir, config.policy.ssd_probe.0 as usize, config.ssd.fsync)?;
        }
        let ram = Level { kind: LevelKind::Ram, dir: config.ram.dir.clone(), keep: config.ram.keep };
        let ssd = Level { kind: LevelKind::Ssd, dir: config.ssd.dir.clone(), keep: config.ssd.keep };
        let pfs =
            config.flush.dir.clone().map(|dir| Level { kind: LevelKind::Pfs, dir, keep: config.flush.keep.max(1) });
        // Started whenever there is a PFS level: `flush.every` paces the flushes, and a
        // checkpoint asked for at the PFS level ([`crate::Checkpointer::checkpoint_level`])
        // flushes on its own.
        let flusher = pfs.clone().map(Flusher::start);
        let pending_store = Default::default();
        Ok(Full { scheme, clc, ram, ssd, pfs, flusher, count: 0, choice: Default::default(), pending_store })
    }

    /// Collective: writes version `version` of checkpoint `name`, at the level the policy
    /// picks, or at `forced` (the same on every rank): RAM or SSD instead of the policy's
    /// choice, or PFS (the policy's L1 level, then flushed before the call returns).
    pub(crate) fn checkpoint(
        &mut self,
        job: &Job,
        name: &str,
        version: u64,
        forced: Option<LevelKind>,
    ) -> Result<CheckpointOutcome> {
        match forced {
            Some(LevelKind::Nam) => {
                return Err(CkptError::Config(
                    "the memory-server level holds incremental checkpoints only ([incremental] levels)".into(),
                ))
            }
            Some(LevelKind::Pfs) if self.pfs.is_none() => {
                return Err(CkptError::Config("a checkpoint at the PFS level needs flush.dir".into()))
            }
            _ => {}
        }
        self.settle();
        let clock = crate::cpu::Stopwatch::start();
        // The background flush yields memory bandwidth and cores to the checkpoint.
        let _flush_paused = self.flusher.as_ref().map(Flusher::pause);
        let name = name.to_string();
        let file_data = self.read_routed_files(job);
        let bytes = job.regions.values().map(|r| r.len as u64).sum::<u64>()
            + file_data.as_ref().map_or(0, |f| f.iter().map(|(_, d)| d.len() as u64).sum());
        let ram_limit = self.ram_share(job);
        // One allreduce decides the placement and tells whether every rank read its files.
        let (mut decision, all_ready) = self.clc.decide(&job.comm, bytes, ram_limit, file_data.is_ok());
        decision.placement = match (forced, decision.placement) {
            (Some(LevelKind::Ram), _) => Placement::Ram,
            // A PFS checkpoint is never skipped: its L1 copy goes to the SSD when the policy
            // would have skipped it.
            (Some(LevelKind::Ssd), _) | (Some(LevelKind::Pfs), Placement::Skip) => Placement::Ssd,
            (_, placement) => placement,
        };
        let file_data = redundancy::agreed(job.comm.raw(), file_data, all_ready, "reading routed files")?;
        let parts = self.parts(job, &file_data);
        self.count += 1;
        let level = match decision.placement {
            Placement::Skip => {
                return Ok(CheckpointOutcome {
                    version,
                    level: None,
                    decision,
                    file_bytes: 0,
                    write_seconds: 0.0,
                    protect: ProtectStats::default(),
                    seconds: job.comm.max_f64(clock.wall_seconds()),
                    flushed: false,
                })
            }
            Placement::Ram => self.ram.clone(),
            Placement::Ssd => self.ssd.clone(),
        };
        if level.kind == LevelKind::Ram && !decision.fits_ram {
            let local =
                if bytes > ram_limit { Err(CkptError::RamTooSmall { bytes, limit: ram_limit }) } else { Ok(()) };
            redundancy::agree(job.comm.raw(), local, "fitting the RAM level")?;
        }
        // Versions whose flush has finished since the last checkpoint retire now, so the RAM
        // level can reuse their file for this one.
        let pinned = self.flusher.as_ref().map(|f| f.pinned(&name)).unwrap_or_default();
        // Each step that can fail on some ranks only is agreed, so a rank never returns from
        // this collective call while the others go on into the next collective.
        let retained = level.retain(&name, job.comm.rank(), &pinned);
        job.comm.agree(retained, "removing old versions")?;
        // The layout goes beside the files, for a restart on other nodes and for a rank
        // rebuilt by L2 to know its regions (crate::relocate).
        let regions: Vec<(i32, u64)> = job.regions.iter().map(|(&id, r)| (id, r.len as u64)).collect();
        let recorded = crate::relocate::record_job(&job.comm, &level.version_dir(&name, version), &regions);
        job.comm.agree(recorded, "recording the job layout")?;
        let (file_bytes, write_seconds, protect, seconds) =
            self.store(job, &level, &name, version, &parts, &file_data, &clock)?;
        let to_pfs = forced == Some(LevelKind::Pfs);
        let after = self.after_commit(job, &level, &name, version, to_pfs);
        // T_chk of Abeyratne 2017, Eq. 4.3, is this rank's whole call, retention included.
        let after = after
            .and_then(|flushed| self.clc.record(decision.placement, clock.wall_seconds(), file_bytes).map(|_| flushed));
        let flushed = job.comm.agree(after, "retention and the wear record after the commit")?;
        if to_pfs {
            let local =
                self.wait_flush(crate::constants::FLUSH_WAIT_MAX).and_then(|_| match self.flush_errors().first() {
                    Some(e) => Err(CkptError::Flush { path: level.dir.clone(), reason: e.clone() }),
                    None => Ok(()),
                });
            job.comm.agree(local, "flushing the checkpoint to the PFS level")?;
        }
        Ok(CheckpointOutcome {
            version,
            level: Some(if to_pfs { LevelKind::Pfs } else { level.kind }),
            decision,
            file_bytes,
            write_seconds,
            protect,
            seconds,
            flushed,
        })
    }

    /// This rank's share of the RAM level.
    fn ram_share(&self, job: &Job) -> u64 {
        let node = job.comm.nodes().node_of[job.comm.rank()];
        job.config.ram.capacity.0 / job.comm.nodes().ranks_on[node].len() as u64
    }

    fn read_routed_files(&self, job: &Job) -> Result<Vec<(String, Vec<u8>)>> {
        job.files
            .iter()
            .map(|(base, path)| {
                std::fs::read(path).map(|d| (base.clone(), d)).map_err(|e| CkptError::io("read routed file", path, e))
            })
            .collect()
    }

    fn parts<'a>(&self, job: &'a Job, files: &'a [(String, Vec<u8>)]) -> Vec<&'a [u8]> {
        // SAFETY: `protect`'s contract keeps every region valid and unaliased during checkpoint.
        let regions = job.regions.values().map(|r| unsafe { std::slice::from_raw_parts(r.ptr, r.len) });
        regions.chain(files.iter().map(|(_, d)| d.as_slice())).collect()
    }

    /// Writes the file, protects it with L2 and commits (collective). Returns the file's
    /// bytes, the seconds to write it, the L2 statistics and the slowest rank's seconds from
    /// `clock` to its commit (the commit's agreement carries them).
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        job: &Job,
        level: &Level,
        name: &str,
        version: u64,
        parts: &[&[u8]],
        files: &[(String, Vec<u8>)],
        clock: &crate::cpu::Stopwatch,
    ) -> Result<(u64, f64, ProtectStats, f64)> {
        let rank = job.comm.rank();
        let dir = level.version_dir(name, version);
        let footer = Footer {
            name: name.to_string(),
            version,
            rank,
            ranks: job.comm.size(),
            regions: job.regions.iter().map(|(&id, r)| (id, r.len as u64)).collect(),
            files: files.iter().map(|(n, d)| (n.clone(), d.len() as u64)).collect(),
            chunk: 0,
            crcs: Vec::new(),
            parity: None,
            parity_code: Default::default(),
            parity_crcs: Vec::new(),
        };
        let mut opts = self.write_options(job, level.kind);
        if level.kind == LevelKind::Ram {
            opts.recycle = level.spares(name, rank).into_iter().next();
        }
        let joined: Vec<u8>;
        let data: &[u8] = if parts.len() == 1 {
            parts[0]
        } else {
            joined = parts.concat();
            &joined
        };
        // The file goes to the page cache first; `FileWrite::write` fsyncs and names it, when
        // the scheme's store says (before its redundancy, or while the memory server pulls).
        let write_clock = std::time::Instant::now();
        let unsynced = std::fs::create_dir_all(&dir)
            .map_err(|e| CkptError::io("create", &dir, e))
            .and_then(|_| format::write_unsynced(&level.file(name, version, rank), parts, footer, &opts));
        let target_name = format!("rank-{rank}");
        let target = Target { dir: &dir, name: &target_name, fsync: opts.fsync };
        let mut local = FileWrite { comm: &job.comm, unsynced: Some(unsynced), file_bytes: 0, version, rank };
        // The scheme agrees within its sets only (NAM-XOR's and XOR's sets are sub-communicators),
        // so its outcome rides on the commit's allreduce: a set that failed must not leave the
        // others alone in the next collective. (A write the job agreed had failed fails the
        // store on every rank, so all of them meet there too.)
        let protected = self.scheme.protect_overlapped(data, &target, &mut local);
        let file_bytes = local.file_bytes;
        let committed = protected.and_then(|protect| {
            fault::inject(Point::BeforeCommit, version, rank);
            std::fs::write(level.marker(name, version, rank), b"")
                .map_err(|e| CkptError::io("commit", level.marker(name, version, rank), e))
                .map(|_| protect)
        });
        // One allreduce agrees on the protect and the commit and finds the slowest rank's time.
        let local = [if committed.is_ok() { 0.0 } else { 1.0 }, clock.wall_seconds()];
        let mut max = [0f64; 2];
        mpi::traits::CommunicatorCollectives::all_reduce_into(
            job.comm.raw(),
            &local[..],
            &mut max[..],
            mpi::collective::SystemOperation::max(),
        );
        let agreed = job.comm.agreed(committed, max[0] == 0.0, "the checkpoint");
        if agreed.is_err() {
            // Another set may have failed after this rank committed: the version is incomplete,
            // and no marker of it may suggest otherwise to a restart.
            let _ = std::fs::remove_file(level.marker(name, version, rank));
        }
        let protect = agreed?;
        let write_seconds = (write_clock.elapsed().as_secs_f64() - protect.seconds).max(0.0);
        Ok((file_bytes, write_seconds, protect, max[1]))
    }

    /// How files of level `kind` are written: the RAM level mapped, with chunk parity; the
    /// others with the SSD's chunk size and fsync setting.
    pub(crate) fn write_options(&self, job: &Job, kind: LevelKind) -> WriteOptions {
        match kind {
            LevelKind::Ram => WriteOptions {
                mapped: true,
                recycle: None,
                chunk: job.config.ram.chunk.0 as usize,
                parity: (job.config.ram.parity_chunks > 0).then_some(ChunkParity {
                    data: job.config.ram.stripe_chunks,
                    parity: job.config.ram.parity_chunks,
                }),
                fsync: false,
            },
            LevelKind::Ssd | LevelKind::Pfs | LevelKind::Nam => WriteOptions {
                mapped: false,
                recycle: None,
                chunk: job.config.ssd.chunk.0 as usize,
                parity: None,
                fsync: job.config.ssd.fsync,
            },
        }
    }

    /// Retention and flush after a commit (every `flush.every`-th version, or this one when
    /// `flush`); true when the version was queued for flush.
    fn after_commit(&mut self, job: &Job, level: &Level, name: &str, version: u64, flush: bool) -> Result<bool> {
        let rank = job.comm.rank();
        let mut flushed = false;
        if let Some(f) = &self.flusher {
            // `is_multiple_of(0)` is false for the count (at least 1): `every = 0` never flushes.
            if flush || self.count.is_multiple_of(job.config.flush.every) {
                f.submit(FlushJob { name: name.into(), version, rank, source: level.file(name, version, rank) });
                flushed = true;
            }
        }
        let pinned = self.flusher.as_ref().map(|f| f.pinned(name)).unwrap_or_default();
        // Retention removes a version's redundancy files with its data.
        for l in [&self.ram, &self.ssd] {
            l.retain(name, rank, &pinned)?;
        }
        Ok(flushed)
    }

    /// Waits (at most `deadline`) for queued flushes, after the store of a rebuilt file
    /// ([`Full::settle`]).
    pub(crate) fn wait_flush(&self, deadline: std::time::Duration) -> Result<()> {
        self.settle();
        match &self.flusher {
            Some(f) => f.wait(deadline),
            None => Ok(()),
        }
    }

    /// Not collective: waits for the store of a file rebuilt by the last restart, if it
    /// still runs ([`Full::store_rebuilt`]).
    pub(crate) fn settle(&self) {
        if let Some(store) = self.pending_store.borrow_mut().take() {
            // The thread logs its own failure; a panic in it is a bug to surface here.
            if let Err(panic) = store.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// Errors of finished L3 flushes since the last call.
    pub(crate) fn flush_errors(&self) -> Vec<String> {
        self.flusher.as_ref().map(|f| f.take_errors()).unwrap_or_default()
    }
}

/// The node-local file of one checkpoint, as the L2 scheme's store writes it.
struct FileWrite<'a> {
    comm: &'a Comm,
    /// The file in the page cache, until [`LocalWrite::write`] fsyncs and names it.
    unsynced: Option<Result<format::Unsynced>>,
    /// Bytes of the finished file.
    file_bytes: u64,
    version: u64,
    rank: usize,
}

impl LocalWrite for FileWrite<'_> {
    fn write(&mut self, _data: &[u8]) -> Result<()> {
        // The file holds `data` already (written to the page cache with its footer).
        let unsynced = self.unsynced.take().expect("the file is finished once");
        self.file_bytes = unsynced?.finish()?;
        Ok(())
    }

    fn agree_written(&mut self, written: Result<()>) -> Result<()> {
        redundancy::agree(self.comm.raw(), written, "writing checkpoint files")
    }

    fn before_protect(&mut self) {
        fault::inject(Point::BeforeProtect, self.version, self.rank);
    }
}
