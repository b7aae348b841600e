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
    /// data) and one allreduce after it, which agrees that the rebuilt rank's data fits the
    /// region layout recorded with the version (a check of sizes). They do not wait for the
    /// rebuilt rank to copy its data into its regions or to store its file again: it does
    /// both after that allreduce, while the survivors already compute.
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
                Ok((local, rebuilt_ranks)) => {
                    // Whatever can fail is checked before the one allreduce that agrees on it
                    // and sums the repaired chunks; the rebuilt rank's copy and file follow it.
                    let checked = match &local {
                        Local::InRegions { footer, rest, .. } => Self::finish_in_regions(job, footer, rest, ids),
                        Local::Rebuilt { footer, .. } => Self::check_regions(job, footer, ids),
                    };
                    let mine = [u64::from(checked.is_err()), local.repaired_chunks() as u64];
                    let sums = all_reduce_pair(job, mine, mpi::collective::SystemOperation::sum());
                    agreed(job.comm.raw(), checked, sums[0] == 0, "copying restored data into regions")?;
                    if let Local::Rebuilt { footer, data, level } = local {
                        Self::restore_into(job, &footer, &data, ids);
                        self.store_rebuilt(job, &level, footer, data);
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
        let rebuilt = match recorded.scheme {
            Some(mut over_recorded) => over_recorded.rebuild(have, &target),
            None => self.scheme.rebuild(have, &target),
        };
        if !job.comm.all_agree(rebuilt.is_ok()) {
            let failed = job.comm.agreed(rebuilt, false, &format!("the L2 rebuild of version {version}"));
            let error = failed.expect_err("agreed fails on every rank when one failed");
            return Err(Self::with_local_causes(job, &local, error));
        }
        let rebuilt = rebuilt.expect("every rank rebuilt");
        let loaded = match (local, rebuilt.data) {
            (Ok(l), _) => Ok(l),
            (Err(_), Some(data)) => Self::rebuilt(job, level, name, version, recorded.regions, data),
            (Err(e), None) => Err(e),
        };
        let loaded = job.comm.agree(loaded, &format!("reading version {version}"))?;
        // A set-based scheme names the lost ranks of this rank's set: the job's are the union.
        Ok((loaded, Self::all_lost(job, &rebuilt.lost)))
    }

    /// Reads this rank's file (footer checked by [`format::open`]) straight into the
    /// regions it restores: those selected by `ids` that are protected with the stored size.
    /// Everything else (routed files, regions not selected, regions whose size differs, which
    /// the restore then refuses as before) goes to [`Local::InRegions`]'s `rest`.
    fn read_local(job: &Job, file: &format::Opened, ids: Option<&[i32]>) -> Result<Local> {
        let slots = Self::slots(job, &file.footer, ids);
        let mut rest = vec![0u8; slots.iter().filter(|s| s.1.is_none()).map(|s| s.0).sum()];
        let mut tail: &mut [u8] = &mut rest;
        let mut parts: Vec<&mut [u8]> = Vec::with_capacity(slots.len());
        for &(len, region) in &slots {
            match region {
                // SAFETY: `protect`'s contract: the region is valid and not accessed concurrently.
                Some(r) if r.len > 0 => parts.push(unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) }),
                Some(_) => parts.push(&mut []),
                None => {
                    let (head, t) = std::mem::take(&mut tail).split_at_mut(len);
                    tail = t;
                    parts.push(head);
                }
            }
        }
        let repaired_chunks = file.read_into(&mut parts)?;
        Ok(Local::InRegions { footer: file.footer.clone(), slots, rest, repaired_chunks })
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
    /// protected or whose size differs (as [`Full::restore_into`] does) and writes the routed
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

    /// Collective: the union, in order, of every rank's `lost` ranks.
    fn all_lost(job: &Job, lost: &[usize]) -> Vec<usize> {
        // A count word first: Open MPI refuses an all-gather of no bytes at all.
        let words = std::iter::once(lost.len() as u64).chain(lost.iter().map(|&r| r as u64));
        let mine: Vec<u8> = words.flat_map(u64::to_le_bytes).collect();
        let mut all: Vec<usize> = job
            .comm
            .all_gather_bytes(&mine)
            .iter()
            .flat_map(|b| {
                b.chunks_exact(8).skip(1).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize)
            })
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Data rebuilt by L2, with the footer its lost file had: the region layout recorded
    /// with the version (`recorded`, [`crate::relocate::scheme_for`]), or, for a version
    /// recorded without one, that of the protected regions (as in FTI and SCR, the
    /// application protects its regions before it restarts). Either must add up to the
    /// rebuilt size; Err([`CkptError::Corrupt`]) names the layout that does not.
    fn rebuilt(
        job: &Job,
        level: Level,
        name: &str,
        version: u64,
        recorded: Option<Vec<(i32, u64)>>,
        data: Vec<u8>,
    ) -> Result<Local> {
        let rank = job.comm.rank();
        let (regions, which) = match recorded {
            Some(regions) => (regions, format!("the region layout recorded with version {version}")),
            None => (job.regions.iter().map(|(&id, r)| (id, r.len as u64)).collect(), "the protected regions".into()),
        };
        let total: u64 = regions.iter().map(|r| r.1).sum();
        if total != data.len() as u64 {
            return Err(CkptError::Corrupt(format!(
                "rank {rank}: rebuilt {} bytes of version {version}, but {which} ({regions:?}) adds up to {total}",
                data.len()
            )));
        }
        let footer = format::Footer {
            name: name.into(),
            version,
            rank,
            ranks: job.comm.size(),
            regions,
            files: Vec::new(),
            chunk: 0,
            crcs: Vec::new(),
            parity: None,
            parity_code: Default::default(),
            parity_crcs: Vec::new(),
        };
        Ok(Local::Rebuilt { footer, data, level })
    }

    /// Refuses, before the restart's agreement, a rebuilt rank whose selected regions are
    /// not protected ([`CkptError::UnknownRegion`]) or not of the size recorded with the
    /// version ([`CkptError::SizeMismatch`]): the copy after the agreement cannot fail.
    fn check_regions(job: &Job, footer: &Footer, ids: Option<&[i32]>) -> Result<()> {
        for &(id, len) in &footer.regions {
            if ids.is_none_or(|ids| ids.contains(&id)) {
                let region = job.regions.get(&id).ok_or(CkptError::UnknownRegion(id))?;
                if region.len as u64 != len {
                    return Err(CkptError::SizeMismatch { id, stored: len, protected: region.len as u64 });
                }
            }
        }
        Ok(())
    }

    /// Copies rebuilt data into the selected regions ([`Full::check_regions`] passed).
    fn restore_into(job: &Job, footer: &Footer, data: &[u8], ids: Option<&[i32]>) {
        let mut at = 0usize;
        for &(id, len) in &footer.regions {
            let len = len as usize;
            if ids.is_none_or(|ids| ids.contains(&id)) {
                let region = job.regions[&id];
                // SAFETY: `protect`'s contract: the region is valid and not accessed
                // concurrently; check_regions made sure it has `len` bytes.
                unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), region.ptr, len) };
            }
            at += len;
        }
    }

    /// Not collective: stores data rebuilt by L2 as this rank's file again, with its commit
    /// marker, in a thread of its own once the data is in the regions: the restart returns
    /// without waiting for it, and the next checkpoint, restart, `latest`, dataset deletion,
    /// `wait_flush` or finalize joins it first ([`Full::settle`]). A failed store is logged,
    /// not returned, and leaves no marker, so the version counts as lost on this rank again
    /// and [`crate::Checkpointer::latest`] judges it by its redundancy as before.
    fn store_rebuilt(&self, job: &Job, level: &Level, footer: Footer, data: Vec<u8>) {
        let (rank, name, version) = (job.comm.rank(), footer.name.clone(), footer.version);
        // Not fsynced: the set's redundancy, which just rebuilt these bytes, still covers
        // them, and a file the node loses again (or tears) fails its footer or CRC32C and is
        // rebuilt the same way.
        let opts = WriteOptions { fsync: false, ..self.write_options(job, level.kind) };
        let (dir, file, marker) =
            (level.version_dir(&name, version), level.file(&name, version, rank), level.marker(&name, version, rank));
        let store = move || {
            let stored = std::fs::create_dir_all(&dir)
                .map_err(|e| CkptError::io("create", &dir, e))
                .and_then(|_| format::write(&file, &[&data], footer, &opts))
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
fn all_reduce_pair(job: &Job, mine: [u64; 2], op: mpi::collective::SystemOperation) -> [u64; 2] {
    let mut out = [0u64; 2];
    mpi::traits::CommunicatorCollectives::all_reduce_into(job.comm.raw(), &mine[..], &mut out[..], op);
    out
}

/// A candidate's data on this rank once it is read.
enum Local {
    /// Read from this rank's file straight into the regions it restores; `rest` holds the
    /// other bytes in file order (routed files, regions not selected or of another size);
    /// `slots` says which piece went where ([`Full::slots`]).
    InRegions { footer: Footer, slots: Vec<(usize, Option<Region>)>, rest: Vec<u8>, repaired_chunks: usize },
    /// Rebuilt by the L2 scheme: copied into the regions and stored as this rank's file of
    /// `level` again once the job agreed on the restart ([`Full::store_rebuilt`]).
    Rebuilt { footer: Footer, data: Vec<u8>, level: Level },
}

impl Local {
    fn footer(&self) -> &Footer {
        match self {
            Local::InRegions { footer, .. } => footer,
            Local::Rebuilt { footer, .. } => footer,
        }
    }

    fn repaired_chunks(&self) -> usize {
        match self {
            Local::InRegions { repaired_chunks, .. } => *repaired_chunks,
            Local::Rebuilt { .. } => 0,
        }
    }

    /// The data as the scheme protected it: Ok(the one slice) when a single region or
    /// buffer holds it all, else Err(its pieces in file order) for the caller to join.
    fn contiguous(&self) -> std::result::Result<&[u8], Vec<&[u8]>> {
        let (slots, rest) = match self {
            Local::Rebuilt { data, .. } => return Ok(data),
            Local::InRegions { slots, rest, .. } => (slots, rest),
        };
        let mut at = 0;
        let mut pieces = Vec::new();
        for &(len, region) in slots {
            match region {
                // SAFETY: `protect`'s contract; the region was just read and is only read here.
                Some(r) if r.len > 0 => pieces.push(unsafe { std::slice::from_raw_parts(r.ptr as *const u8, r.len) }),
                Some(_) => pieces.push(&[]),
                None => {
                    pieces.push(&rest[at..at + len]);
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
