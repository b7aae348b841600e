//! SCR's XOR scheme on the compute nodes.
//!
//! A set of n ranks on n different nodes. Each rank's data, zero-padded to the largest size
//! S of the set, is cut into n-1 segments of `seg = ceil(S/(n-1))` bytes; segment k of
//! member i belongs to the parity of member `(i+1+k) mod n`. Parity of member j is the XOR
//! of the n-1 segments that belong to it, so each rank stores `seg` bytes (1/(n-1) of its
//! data) and any one member's data and parity follow from the others.
//!
//! **Protect** is a ring reduce-scatter, pipelined in blocks: in step s (1..n) member i
//! sends to i+1 the running XOR for holder i-s, having added its own segment; after n-1
//! steps each member holds its parity block, which it streams to its parity file. The first
//! step sends straight from the application's data (no copy) unless the block reaches into
//! the padding.
//!
//! **Rebuild** of lost member L: for every holder j != L, L's segment for j is P_j XOR the
//! other survivors' segments for j; L's own parity is the XOR of the survivors' segments for
//! L. Each is an `MPI_Reduce(BXOR)` to L, block by block, into L's data.

use super::ring::{blocks, Segments};
use super::{agree, lost_ranks, write_at, ProtectStats, Rebuilt, Redundancy, Scheme, Target};
use crate::comm::{all_gather_u64, broadcast_bytes, Comm};
use crate::cpu::Stopwatch;
use crate::error::{CkptError, Result};
use crate::failure_groups::form_sets;
use crate::redfile::{self, RedHeader, RedWriter};
use mpi::collective::SystemOperation;
use mpi::point_to_point::send_receive_into;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// The `xor` scheme, built over a communicator (collective).
pub struct Xor {
    set_comm: SimpleCommunicator,
    set: Vec<usize>,
    rank: usize,
    block: usize,
}

impl Xor {
    /// Forms sets of at most `set_size` ranks on distinct nodes and splits the communicator.
    pub fn new(comm: &Comm, set_size: usize, block_bytes: usize) -> Result<Self> {
        let sets = form_sets(comm, set_size, "xor")?;
        let rank = comm.rank();
        let idx = sets.iter().position(|s| s.contains(&rank)).expect("every rank is in a set");
        let key = sets[idx].iter().position(|&r| r == rank).expect("rank in its set") as i32;
        let set_comm = comm.split(Some(idx as u32), key).expect("rank passed a color");
        Ok(Xor { set_comm, set: sets[idx].clone(), rank, block: block_bytes.max(8) })
    }

    /// The ranks of this rank's set.
    pub fn set(&self) -> &[usize] {
        &self.set
    }

    fn me_n(&self) -> (usize, usize) {
        (self.set_comm.rank() as usize, self.set_comm.size() as usize)
    }

    /// The ring reduce-scatter; streams this rank's parity to `out` (write errors are kept,
    /// the ring goes on so no rank waits forever).
    fn ring(&self, data: &[u8], seg: usize, out: &mut Result<RedWriter>) {
        let (me, n) = self.me_n();
        let segs = Segments::new(data, seg);
        let right = self.set_comm.process_at_rank(((me + 1) % n) as i32);
        let left = self.set_comm.process_at_rank(((me + n - 1) % n) as i32);
        let mut send = vec![0u8; self.block.min(seg)];
        let mut recv = vec![0u8; self.block.min(seg)];
        for (o, len) in blocks(seg, self.block) {
            for s in 1..n {
                let j = (me + n - s) % n;
                let k = (j + n - me - 1) % n;
                if s == 1 {
                    let first = segs.get(k, o, len, &mut send);
                    send_receive_into(first, &right, &mut recv[..len], &left);
                } else {
                    std::mem::swap(&mut send, &mut recv);
                    segs.xor_into(k, o, &mut send[..len]);
                    send_receive_into(&send[..len], &right, &mut recv[..len], &left);
                }
            }
            if let Ok(w) = out {
                if let Err(e) = w.write(&recv[..len]) {
                    *out = Err(e);
                }
            }
        }
    }

    /// The rebuild: each block reduced to the lost rank goes straight to its place in `into`
    /// (or in a buffer returned in [`Rebuilt::data`] when `into` is `None`).
    fn rebuild_to(&mut self, data: Option<&[u8]>, into: Option<&mut [&mut [u8]]>, target: &Target) -> Result<Rebuilt> {
        let clock = Stopwatch::start();
        let (me, n) = self.me_n();
        let lost = lost_ranks(&self.set_comm, data.is_some());
        let lost_world: Vec<usize> = lost.iter().map(|&i| self.set[i]).collect();
        if lost.len() > 1 {
            return Err(CkptError::Unrecoverable(format!(
                "XOR set {:?} lost ranks {lost_world:?}; XOR rebuilds one rank per set",
                self.set
            )));
        }
        let Some(&l) = lost.first() else {
            return Ok(Rebuilt::default());
        };
        let parity = if me == l { Ok(None) } else { read_parity(target, &self.set).map(Some) };
        let parity = agree(&self.set_comm, parity, "reading XOR parity")?;
        let root = if l == 0 { 1 } else { 0 };
        let header_json = parity.as_ref().map(|(h, _)| serde_json::to_vec(h).expect("serializes")).unwrap_or_default();
        let header: RedHeader = serde_json::from_slice(&broadcast_bytes(&self.set_comm, root, &header_json))
            .map_err(|e| CkptError::Corrupt(format!("XOR header: {e}")))?;
        let seg = header.segment as usize;
        // Where the lost rank's data goes: `into` when it holds exactly its size (else the
        // blocks are dropped and the rank fails once the set's reductions are done), or a
        // buffer it returns.
        let Some(size) = header.sizes.get(l).map(|&s| s as usize) else {
            return Err(CkptError::Corrupt(format!("XOR header of set {:?} has no size for member {l}", self.set)));
        };
        let returning = into.is_none();
        let mut returned = Vec::new();
        let mut fits: Result<()> = Ok(());
        let mut out: Vec<&mut [u8]> = match into {
            _ if me != l => Vec::new(),
            Some(pieces) if pieces.iter().map(|p| p.len()).sum::<usize>() == size => {
                pieces.iter_mut().map(|p| &mut **p).collect()
            }
            Some(pieces) => {
                let holds: usize = pieces.iter().map(|p| p.len()).sum();
                fits = Err(CkptError::Corrupt(format!(
                    "rank {}: the XOR set rebuilt {size} bytes, but the places to restore them hold {holds}",
                    self.rank
                )));
                Vec::new()
            }
            None => {
                returned = vec![0u8; size];
                vec![&mut returned[..]]
            }
        };
        let mut own_parity = vec![0u8; if me == l { seg } else { 0 }];
        let segs = Segments::new(data.unwrap_or(&[]), seg);
        let (mut scratch, mut result) = (vec![0u8; self.block.min(seg)], vec![0u8; self.block.min(seg)]);
        let zeros = vec![0u8; self.block.min(seg)];
        let root_proc = self.set_comm.process_at_rank(l as i32);
        for j in 0..n {
            for (o, len) in blocks(seg, self.block) {
                if me == l {
                    root_proc.reduce_into_root(&zeros[..len], &mut result[..len], SystemOperation::bitwise_xor());
                    if j == l {
                        own_parity[o..o + len].copy_from_slice(&result[..len]);
                    } else {
                        let k = (j + n - l - 1) % n;
                        write_at(&mut out, k * seg + o, &result[..len]);
                    }
                } else if me == j {
                    let p = &parity.as_ref().expect("survivor").1;
                    root_proc.reduce_into(&p[o..o + len], SystemOperation::bitwise_xor());
                } else {
                    let k = (j + n - me - 1) % n;
                    root_proc.reduce_into(segs.get(k, o, len, &mut scratch), SystemOperation::bitwise_xor());
                }
            }
        }
        let stored = if me == l {
            let h = RedHeader { rank: self.rank, ..header };
            fits.and_then(|()| redfile::write(&target.file("xor"), &h, &own_parity, target.fsync))
        } else {
            Ok(())
        };
        drop(out);
        let out = (me == l && returning).then_some(returned);
        agree(&self.set_comm, stored, "storing the rebuilt XOR parity")?;
        Ok(Rebuilt { data: out, lost: lost_world, seconds: clock.wall_seconds(), cpu_seconds: clock.cpu_seconds() })
    }
}

impl Redundancy for Xor {
    fn scheme(&self) -> Scheme {
        Scheme::Xor
    }

    fn protect(&mut self, data: &[u8], target: &Target) -> Result<ProtectStats> {
        let clock = Stopwatch::start();
        let (_, n) = self.me_n();
        let sizes = all_gather_u64(&self.set_comm, data.len() as u64);
        let seg = (*sizes.iter().max().expect("set is not empty")).div_ceil(n as u64 - 1) as usize;
        let header = RedHeader {
            scheme: "xor".into(),
            name: target.name.into(),
            rank: self.rank,
            set: self.set.clone(),
            sizes,
            segment: seg as u64,
            payload: seg as u64,
        };
        let writer = RedWriter::create(&target.file("xor"), &header);
        let mut writer = Ok(agree(&self.set_comm, writer, "creating the XOR parity file")?);
        self.ring(data, seg, &mut writer);
        let done = writer.and_then(|w| w.finish(target.fsync));
        agree(&self.set_comm, done, "writing the XOR parity file")?;
        Ok(ProtectStats {
            data_bytes: data.len() as u64,
            sent_bytes: ((n - 1) * seg) as u64,
            stored_bytes: seg as u64,
            seconds: clock.wall_seconds(),
            cpu_seconds: clock.cpu_seconds(),
        })
    }

    fn rebuild(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt> {
        self.rebuild_to(data, None, target)
    }

    fn rebuild_into(&mut self, data: Option<&[u8]>, into: &mut [&mut [u8]], target: &Target) -> Result<Rebuilt> {
        self.rebuild_to(data, Some(into), target)
    }

    fn discard(&mut self, target: &Target) -> Result<()> {
        remove_if_exists(&target.file("xor"))
    }

    fn missing_redundancy(&self, target: &Target) -> Option<String> {
        super::missing_file(&target.file("xor"))
    }

    fn can_rebuild(&self, lost: &[usize], no_redundancy: &[usize]) -> std::result::Result<(), String> {
        super::set_can_rebuild("XOR", &self.set, 1, lost, no_redundancy)
    }
}

fn read_parity(target: &Target, set: &[usize]) -> Result<(RedHeader, Vec<u8>)> {
    let path = target.file("xor");
    let (h, p) = redfile::read(&path)?;
    if h.name != target.name || h.set != set || h.scheme != "xor" {
        return Err(CkptError::Corrupt(format!("{}: parity of another checkpoint or set", path.display())));
    }
    Ok((h, p))
}

/// Removes a file; a missing file is not an error.
pub(crate) fn remove_if_exists(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CkptError::io("remove", path, e)),
        _ => Ok(()),
    }
}
