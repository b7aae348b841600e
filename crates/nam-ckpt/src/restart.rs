//! Restart: find the newest restorable version, fall back level by level, then version by
//! version (Abeyratne 2017 §4.3.4: RAM first, then SSD; here also L2 rebuild and the L3 copy).

use crate::checkpointer::{Job, Region};
use crate::error::{CkptError, Result};
use crate::format::{self, Footer, WriteOptions};
use crate::full::Full;
use crate::level::{Level, LevelKind};
use crate::redundancy::{agreed, Target};
use serde::Serialize;
use std::collections::BTreeSet;

/// What a restart restored (the same on every rank).
#[derive(Debug, Clone, Serialize)]
pub struct RestartOutcome {
    /// Version restored.
    pub version: u64,
    /// Level it came from.
    pub level: LevelKind,
    /// Ranks whose data was rebuilt by the L2 scheme.
    pub rebuilt_ranks: Vec<usize>,
    /// Chunks rebuilt from chunk parity, summed over all ranks.
    pub repaired_chunks: usize,
    /// `(version, level, reason)` of every candidate tried and refused before this one.
    pub fell_back: Vec<(u64, LevelKind, String)>,
}

impl Full {
    pub(crate) fn levels(&self) -> Vec<Level> {
        [Some(self.ram.clone()), Some(self.ssd.clone()), self.pfs.clone()].into_iter().flatten().collect()
    }

    /// Collective: `(version, level)` pairs committed on any rank, newest version first,
    /// RAM before SSD before PFS.
    pub(crate) fn candidates(&self, job: &Job, name: &str) -> Vec<(u64, LevelKind)> {
        let rank = job.comm.rank();
        let mine: Vec<(u64, u64)> = self
            .levels()
            .iter()
            .flat_map(|l| l.committed(name, rank).into_iter().map(move |v| (v, l.kind.code())))
            .collect();
        let json = serde_json::to_vec(&mine).expect("serializes");
        let mut all = BTreeSet::new();
        for bytes in job.comm.all_gather_bytes(&json) {
            let theirs: Vec<(u64, u64)> = serde_json::from_slice(&bytes).expect("our own encoding");
            all.extend(theirs);
        }
        // Forgotten versions, output datasets and all but a chosen current version are not
        // candidates (crate::datasets).
        let choice = self.choice.borrow();
        let mut list: Vec<(u64, LevelKind)> = all
            .into_iter()
            .filter(|&(v, _)| choice.allows(v))
            .filter_map(|(v, k)| LevelKind::from_code(k).map(|k| (v, k)))
            .collect();
        list.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        list
    }

    /// Collective: restores the newest restorable version of `candidates` ([`Full::candidates`],
    /// gathered once by the caller), or exactly `version`, into the protected regions (all,
    /// or only `ids`, every one protected) and routed files ([`crate::Checkpointer::restart`]).
    ///
    /// What survivors wait for when a rank is rebuilt: the L2 rebuild itself (it needs their
    /// data, and writes the lost rank's straight into its regions) and one allreduce after
    /// it, which agrees that the rebuilt rank's data fits the region layout recorded with the
    /// version (a check of sizes). They do not wait for the rebuilt rank to store its file
    /// again: its bytes go to a staging file as the scheme hands them over during the
    /// rebuild, and a thread of its own writes the file from there after the allreduce,
    /// while the survivors already compute.
    pub(crate) fn restart_from(
        &mut self,
        job: &mut Job,
        name: &str,
        candidates: Vec<(u64, LevelKind)>,
        version: Option<u64>,
        ids: Option<&[i32]>,
    ) -> Result<RestartOutcome> {
        self.settle();
        let mut fell_back = Vec::new();
        for (v, kind) in candidates.into_iter().filter(|c| version.is_none_or(|v| v == c.0)) {
            match self.try_candidate(job, name, v, kind, ids) {
                Ok((mut local, rebuilt_ranks)) => {
                    // Whatever can fail is checked before the one allreduce that agrees on it
                    // and sums the repaired chunks; the rebuilt rank's file is stored after it,
                    // from the bytes staged while the rebuild ran.
                    let checked = Self::finish_in_regions(job, &local.footer, &local.rest, ids);
                    let mine = [u64::from(checked.is_err()), local.repaired_chunks as u64];
                    let sums = all_reduce_pair(job, mine, mpi::collective::SystemOperation::sum());
                    agreed(job.comm.raw(), checked, sums[0] == 0, "copying restored data into regions")?;
                    if let (Some(level), Some(staged)) = (&local.rebuilt, local.staged.take()) {
                        self.store_rebuilt(job, level, local.footer.clone(), staged);
                    }
                    let repaired_chunks = sums[1] as usize;
                    return Ok(RestartOutcome { version: v, level: kind, rebuilt_ranks, repaired_chunks, fell_back });
                }
                Err(e @ CkptError::RankCount { .. }) => return Err(e),
                Err(e) => fell_back.push((v, kind, e.to_string())),
            }
        }
        let tried = fell_back.iter().map(|(v, k, e)| format!("v{v}/{}: {e}", k.name())).collect::<Vec<_>>();
        let which = version.map(|v| format!(" for version {v}")).unwrap_or_default();
        Err(CkptError::NoCheckpoint(format!(" of `{name}`{which}; tried: [{}]", tried.join("; "))))
    }

    /// Reads one candidate on every rank, rebuilding lost ranks with L2 on the L1 levels.
    ///
    /// A rank that has its file reads it once, straight into the selected regions, checking
    /// each chunk's CRC32C as it arrives ([`format::Opened::read_into`]): no buffer of the
    /// whole checkpoint, no second pass to check it, no copy into the regions afterwards. When
    /// every rank read its own, one allreduce says so and the scheme is not asked at all (a
    /// rebuild of nothing is a no-op for every scheme; NAM-XOR's would first copy the data
    /// into its group buffer), nor is the layout recorded with the version read.
    fn try_candidate(
        &mut self,
        job: &Job,
        name: &str,
        version: u64,
        kind: LevelKind,
        ids: Option<&[i32]>,
    ) -> Result<(Local, Vec<usize>)> {
        let rank = job.comm.rank();
        let level = self.levels().into_iter().find(|l| l.kind == kind).expect("candidate level exists");
        let local = if level.marker(name, version, rank).exists() {
            format::open(&level.file(name, version, rank)).and_then(|file| Self::read_local(job, &file, ids))
        } else {
            Err(CkptError::NoCheckpoint(format!(": rank {rank} has no commit marker")))
        };
        let ranks = job.comm.size();
        // One allreduce: the rank count the files were written by, and whether every rank
        // read its own.
        let written = local.as_ref().map(|l| l.footer().ranks as u64).unwrap_or(0);
        let max = all_reduce_pair(job, [written, u64::from(local.is_err())], mpi::collective::SystemOperation::max());
        let (max_written, all_read) = (max[0], max[1] == 0);
        if max_written != 0 && max_written != ranks as u64 {
            return Err(CkptError::RankCount { written: max_written as usize, now: ranks });
        }
        if kind == LevelKind::Pfs {
            return match local {
                Ok(l) if all_read => Ok((l, Vec::new())),
                _ => {
                    Err(Self::with_local_causes(job, &local, CkptError::NoCheckpoint(" complete on every rank".into())))
                }
            };
        }
        if all_read {
            return Ok((local.expect("every rank read its file"), Vec::new()));
        }
        // The sets and the region layout this version was written with (the job may run on
        // other nodes now, or protect other regions).
        let recorded = crate::relocate::scheme_for(job, self, name, version)?;
        let dir = level.version_dir(name, version);
        let target_name = format!("rank-{rank}");
        let target = Target { dir: &dir, name: &target_name, fsync: false };
        // The scheme rebuilds from the data as it was protected: the regions and files
        // concatenated in file order, borrowed from the region when it is all of it.
        let joined: Vec<u8>;
        let have = match &local {
            Ok(l) => Some(match l.contiguous() {
                Ok(whole) => whole,
                Err(parts) => {
                    joined = parts.concat();
                    joined.as_slice()
                }
            }),
            Err(_) => None,
        };
        // The scheme agrees within its sets only: every rank learns here whether every set
        // rebuilt, so all go on to the next candidate together, or to the restore together.
        // A rank that lost its file has its data rebuilt straight into its regions, laid out
        // as recorded with the version (what does not go to a region goes to `rest`).
        let mut lost_here =
            local.is_err().then(|| Self::rebuilt(job, level.clone(), name, version, recorded.regions, ids));
        // The lost rank's file is stored again from the bytes as the scheme hands them over,
        // still in the cache, not from a copy of the whole checkpoint after the rebuild.
        let mut staged = match &lost_here {
            Some(Ok(_)) => Some(Staged::create(level.file(name, version, rank).with_extension("rebuilt.tmp"))),
            _ => None,
        };
        let rebuilt = {
            // A rank with no places takes part all the same and fails with the scheme.
            let mut into = match lost_here.as_mut() {
                Some(Ok(l)) => l.pieces(),
                _ => Vec::new(),
            };
            let mut arrived = |at: usize, bytes: &[u8]| {
                if let Some(s) = staged.as_mut() {
                    s.put(at, bytes);
                }
            };
            match recorded.scheme {
                Some(mut over_recorded) => over_recorded.rebuild_into_with(have, &mut into, &mut arrived, &target),
                None => self.scheme.rebuild_into_with(have, &mut into, &mut arrived, &target),
            }
        };
        if let Some(Ok(l)) = lost_here.as_mut() {
            l.staged = staged.take();
        }
        if !crate::patient::all_agree(job.comm.raw(), rebuilt.is_ok()) {
            let failed = job.comm.agreed(rebuilt, false, &format!("the L2 rebuild of version {version}"));
            let error = failed.expect_err("agreed fails on every rank when one failed");
            return Err(Self::with_local_causes(job, &local, error));
        }
        let rebuilt = rebuilt.expect("every rank rebuilt");
        let loaded = match (local, lost_here) {
            (Ok(l), _) => Ok(l),
            (Err(_), Some(Ok(l))) if rebuilt.lost.contains(&rank) => Ok(l),
            (Err(_), Some(Err(e))) => Err(e),
            (Err(e), _) => Err(e),
        };
        let all_loaded = crate::patient::all_agree(job.comm.raw(), loaded.is_ok());
        let loaded = job.comm.agreed(loaded, all_loaded, &format!("reading version {version}"))?;
        // A set-based scheme names the lost ranks of this rank's set: the job's are the union.
        Ok((loaded, Self::all_lost(job, &rebuilt.lost)))
    }

    /// Reads this rank's file (footer checked by [`format::open`]) straight into the
    /// regions it restores: those selected by `ids` that are protected with the stored size.
    /// Everything else (routed files, regions not selected, regions whose size differs, which
    /// the restore then refuses as before) goes to [`Local`]'s `rest`.
    fn read_local(job: &Job, file: &format::Opened, ids: Option<&[i32]>) -> Result<Local> {
        let mut local = Local::new(job, file.footer.clone(), ids, None)?;
        local.repaired_chunks = file.read_into(&mut local.pieces())?;
        Ok(local)
    }

    /// The file's data pieces in order, `(bytes, region)`: the protected region that takes
    /// them directly, or `None` for bytes kept aside (see [`Full::read_local`]).
    fn slots(job: &Job, footer: &Footer, ids: Option<&[i32]>) -> Vec<(usize, Option<Region>)> {
        let regions = footer.regions.iter().map(|&(id, len)| {
            let len = len as usize;
            let selected = ids.is_none_or(|ids| ids.contains(&id));
            (len, job.regions.get(&id).filter(|r| selected && r.len == len).copied())
        });
        regions.chain(footer.files.iter().map(|f| (f.1 as usize, None))).collect()
    }

    /// After a candidate was read into the regions: refuses selected regions that are not
    /// protected or whose size differs and writes the routed
    /// files from the bytes kept aside.
    fn finish_in_regions(job: &mut Job, footer: &Footer, rest: &[u8], ids: Option<&[i32]>) -> Result<()> {
        for &(id, len) in &footer.regions {
            if ids.is_none_or(|ids| ids.contains(&id)) {
                let region = job.regions.get(&id).ok_or(CkptError::UnknownRegion(id))?;
                if region.len as u64 != len {
                    return Err(CkptError::SizeMismatch { id, stored: len, protected: region.len as u64 });
                }
            }
        }
        // The files are the last bytes kept aside.
        let mut at = rest.len() - footer.files.iter().map(|f| f.1 as usize).sum::<usize>();
        for (file, len) in &footer.files {
            let path = job.route_file(file)?;
            std::fs::write(&path, &rest[at..at + *len as usize]).map_err(|e| CkptError::io("restore", &path, e))?;
            at += *len as usize;
        }
        Ok(())
    }

    /// Collective: the union, in order, of every rank's `lost` ranks (one allreduce of a
    /// bit per rank, whose ranks sleep while they wait: [`crate::patient`]).
    fn all_lost(job: &Job, lost: &[usize]) -> Vec<usize> {
        let mut mine = vec![0u64; job.comm.size().div_ceil(64)];
        for &r in lost {
            mine[r / 64] |= 1 << (r % 64);
        }
        let all =
            crate::patient::all_reduce_u64s(job.comm.raw(), &mine, mpi::collective::SystemOperation::bitwise_or());
        (0..job.comm.size()).filter(|r| all[r / 64] & (1 << (r % 64)) != 0).collect()
    }

    /// Where L2 rebuilds this rank's lost data, with the footer its lost file had: the region
    /// layout recorded with the version (`recorded`, [`crate::relocate::scheme_for`]), or,
    /// for a version recorded without one, that of the protected regions (as in FTI and SCR,
    /// the application protects its regions before it restarts). The scheme refuses a
    /// layout that does not add up to the rebuilt size ([`crate::redundancy::Redundancy::rebuild_into`]).
    fn rebuilt(
        job: &Job,
        level: Level,
        name: &str,
        version: u64,
        recorded: Option<Vec<(i32, u64)>>,
        ids: Option<&[i32]>,
    ) -> Result<Local> {
        let regions = match recorded {
            Some(regions) => regions,
            None => job.regions.iter().map(|(&id, r)| (id, r.len as u64)).collect(),
        };
        let footer = format::Footer {
            name: name.into(),
            version,
            rank: job.comm.rank(),
            ranks: job.comm.size(),
            regions,
            files: Vec::new(),
            chunk: 0,
            crcs: Vec::new(),
            parity: None,
            parity_code: Default::default(),
            parity_crcs: Vec::new(),
        };
        Local::new(job, footer, ids, Some(level))
    }

    /// Not collective: stores data rebuilt by L2 as this rank's file again, with its commit
    /// marker, in a thread of its own from the bytes the scheme staged while it rebuilt
    /// ([`Staged`]): the restart returns without waiting for it, and the next checkpoint,
    /// restart, `latest`, dataset deletion, `wait_flush` or finalize joins it first
    /// ([`Full::settle`]). A failed store is logged, not returned, and leaves no marker, so
    /// the version counts as lost on this rank again and [`crate::Checkpointer::latest`]
    /// judges it by its redundancy as before.
    fn store_rebuilt(&self, job: &Job, level: &Level, footer: Footer, staged: Staged) {
        let (rank, name, version) = (job.comm.rank(), footer.name.clone(), footer.version);
        // Not fsynced: the set's redundancy, which just rebuilt these bytes, still covers
        // them, and a file the node loses again (or tears) fails its footer or CRC32C and is
        // rebuilt the same way.
        let opts = WriteOptions { fsync: false, ..self.write_options(job, level.kind) };
        let (dir, file, marker) =
            (level.version_dir(&name, version), level.file(&name, version, rank), level.marker(&name, version, rank));
        let store = move || {
            // The staged bytes are read back here, off the restart's path, and written with
            // their checksums (and the level's chunk parity) as any checkpoint file is.
            let stored = staged
                .data(footer.data_bytes() as usize)
                .and_then(|data| {
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| CkptError::io("create", &dir, e))
                        .and_then(|_| format::write(&file, &[&data], footer, &opts))
                })
                .and_then(|_| std::fs::write(&marker, b"").map_err(|e| CkptError::io("commit", &marker, e)));
            if let Err(e) = stored {
                log::warn!("rank {rank}: restored {name} v{version}, but storing its rebuilt file again failed: {e}");
            }
        };
        let spawned = std::thread::Builder::new().name("nam-ckpt-store".into()).spawn(store);
        match spawned {
            Ok(handle) => *self.pending_store.borrow_mut() = Some(handle),
            Err(e) => log::warn!(
                "rank {rank}: restored {} v{version}, but no thread to store it again: {e}",
                level.kind.name()
            ),
        }
    }

    /// Collective: `error` extended with why each rank could not read its own file.
    fn with_local_causes(job: &Job, local: &Result<Local>, error: CkptError) -> CkptError {
        let mine = local.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        let causes: Vec<String> = job
            .comm
            .all_gather_bytes(mine.as_bytes())
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(r, m)| format!("rank {r}: {}", String::from_utf8_lossy(m)))
            .collect();
        if causes.is_empty() {
            return error;
        }
        CkptError::Unrecoverable(format!("{} ({error})", causes.join("; ")))
    }
}

/// Collective: two words reduced with `op` in one allreduce (a restart's agreements ride
/// in pairs, so each costs one collective).
///
/// The collective sleeps while it waits ([`crate::patient`]): a rank that finished reading
/// its file early leaves the cores to those still reading, where ranks share them.
fn all_reduce_pair(job: &Job, mine: [u64; 2], op: mpi::collective::SystemOperation) -> [u64; 2] {
    let out = crate::patient::all_reduce_u64s(job.comm.raw(), &mine, op);
    [out[0], out[1]]
}

/// A candidate's data on this rank once it is read, or rebuilt: in the regions it restores,
/// and `rest` (the other bytes in file order: routed files, regions not selected or of
/// another size); `slots` says which piece went where ([`Full::slots`]).
struct Local {
    footer: Footer,
    /// This rank's rebuilt bytes as the scheme handed them over (only on a rank that was
    /// rebuilt), to store its file again from ([`Full::store_rebuilt`]).
    staged: Option<Staged>,
    slots: Vec<(usize, Option<Region>)>,
    rest: Vec<u8>,
    repaired_chunks: usize,
    /// Rebuilt by L2 (this rank had lost its file): stored as its file of this level again
    /// once the job agreed on the restart ([`Full::store_rebuilt`]).
    rebuilt: Option<Level>,
}

impl Local {
    /// The places for `footer`'s data on this rank, nothing in them yet.
    /// Err([`CkptError::Corrupt`]) when the bytes kept aside cannot be allocated (a layout
    /// no rank could have written).
    fn new(job: &Job, footer: Footer, ids: Option<&[i32]>, rebuilt: Option<Level>) -> Result<Local> {
        let slots = Full::slots(job, &footer, ids);
        let aside = slots.iter().filter(|s| s.1.is_none()).try_fold(0usize, |sum, s| sum.checked_add(s.0));
        let mut rest = Vec::new();
        match aside.map(|n| (n, rest.try_reserve_exact(n))) {
            Some((n, Ok(()))) => rest.resize(n, 0),
            _ => {
                let what = format!("rank {}: version {} of `{}`", footer.rank, footer.version, footer.name);
                return Err(CkptError::Corrupt(format!(
                    "{what}: a layout of {:?} does not fit in memory",
                    footer.regions
                )));
            }
        }
        Ok(Local { footer, staged: None, slots, rest, repaired_chunks: 0, rebuilt })
    }

    fn footer(&self) -> &Footer {
        &self.footer
    }

    /// The places the data goes to, in file order.
    fn pieces(&mut self) -> Vec<&mut [u8]> {
        let mut tail: &mut [u8] = &mut self.rest;
        let mut parts: Vec<&mut [u8]> = Vec::with_capacity(self.slots.len());
        for &(len, region) in &self.slots {
            match region {
                // SAFETY: `protect`'s contract: the region is valid and not accessed
                // concurrently; `Full::slots` gave it only to a piece of its size.
                Some(r) if r.len > 0 => parts.push(unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) }),
                Some(_) => parts.push(&mut []),
                None => {
                    let (head, t) = std::mem::take(&mut tail).split_at_mut(len);
                    tail = t;
                    parts.push(head);
                }
            }
        }
        parts
    }

    /// The data as the scheme protected it: Ok(the one slice) when a single region or
    /// buffer holds it all, else Err(its pieces in file order) for the caller to join.
    fn contiguous(&self) -> std::result::Result<&[u8], Vec<&[u8]>> {
        let mut at = 0;
        let mut pieces = Vec::new();
        for &(len, region) in &self.slots {
            match region {
                // SAFETY: `protect`'s contract; the region was just read and is only read here.
                Some(r) if r.len > 0 => pieces.push(unsafe { std::slice::from_raw_parts(r.ptr as *const u8, r.len) }),
                Some(_) => pieces.push(&[]),
                None => {
                    pieces.push(&self.rest[at..at + len]);
                    at += len;
                }
            }
        }
        match pieces.as_slice() {
            [one] => Ok(one),
            _ => Err(pieces),
        }
    }
}

/// A rebuilt rank's data on its way back to its file: the scheme hands each stretch over as
/// it lands ([`crate::redundancy::Redundancy::rebuild_into_with`]), and it goes to this
/// staging file beside the checkpoint file at once (a copy into the page cache while the
/// bytes are in the cache, during the rebuild), so that the restart does not copy the whole
/// checkpoint once the rebuild is over. The first failed write is kept and fails the store;
/// the staging file goes when this is dropped.
struct Staged {
    path: std::path::PathBuf,
    file: Result<std::fs::File>,
}

impl Staged {
    /// Creates the staging file, and its directory: a node that lost its storage may have
    /// lost the version's directory too.
    fn create(path: std::path::PathBuf) -> Staged {
        let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
        let file = std::fs::create_dir_all(&dir)
            .map_err(|e| CkptError::io("create", &dir, e))
            .and_then(|_| std::fs::File::create(&path).map_err(|e| CkptError::io("create", &path, e)));
        Staged { path, file }
    }

    /// Writes `bytes` at data offset `at`.
    fn put(&mut self, at: usize, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        if let Ok(file) = &self.file {
            if let Err(e) = file.write_all_at(bytes, at as u64) {
                self.file = Err(CkptError::io("write", &self.path, e));
            }
        }
    }

    /// The staged data, which must be `len` bytes.
    fn data(&self, len: usize) -> Result<Vec<u8>> {
        if let Err(e) = &self.file {
            return Err(CkptError::Corrupt(format!("staging the rebuilt data failed: {e}")));
        }
        let data = std::fs::read(&self.path).map_err(|e| CkptError::io("read", &self.path, e))?;
        if data.len() != len {
            return Err(CkptError::Corrupt(format!(
                "{}: {} bytes staged, but the rebuilt data has {len}",
                self.path.display(),
                data.len()
            )));
        }
        Ok(data)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
