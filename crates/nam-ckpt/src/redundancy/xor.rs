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
//! L. All of them flow block by block along a pipelined chain from L+1 to L-1 and on to L,
//! each survivor XORing its share in as the block passes ([`Chain`]), into L's data.

use super::ring::{blocks, Segments};
use super::{
    agree, agree_patient, lost_ranks, piece_at, write_at, Arrived, ProtectStats, Rebuilt, Redundancy, Scheme, Target,
};
use crate::comm::{all_gather_u64, broadcast_bytes, Comm};
use crate::cpu::Stopwatch;
use crate::error::{CkptError, Result};
use crate::failure_groups::form_sets;
use crate::patient::wait;
use crate::redfile::{RedHeader, RedReader, RedWriter};
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
    fn rebuild_to(
        &mut self,
        data: Option<&[u8]>,
        into: Option<&mut [&mut [u8]]>,
        arrived: Option<&mut Arrived<'_>>,
        target: &Target,
    ) -> Result<Rebuilt> {
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
        // Survivors open their parity (header checked) and read it block by block as the
        // chain needs it, its CRC32C running; the check at its end joins the last agreement.
        let parity = if me == l { Ok(None) } else { open_parity(target, &self.set).map(Some) };
        let mut parity = agree_patient(&self.set_comm, parity, "reading XOR parity")?;
        let root = if l == 0 { 1 } else { 0 };
        let header_json =
            parity.as_ref().map(|r| serde_json::to_vec(r.header()).expect("serializes")).unwrap_or_default();
        let header: RedHeader = serde_json::from_slice(&broadcast_bytes(&self.set_comm, root, &header_json))
            .map_err(|e| CkptError::Corrupt(format!("XOR header: {e}")))?;
        let seg = header.segment as usize;
        // Where the lost rank's data goes: `into` when it holds exactly its size (else the
        // blocks are dropped and the rank fails once the chain is done), or a buffer it
        // returns.
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
        let chain = Chain { comm: &self.set_comm, me, n, l, seg, block: self.block };
        let stored = match parity.as_mut() {
            None => {
                // The lost rank's own parity goes to its file as it arrives.
                let h = RedHeader { rank: self.rank, ..header };
                let mut own = fits.and_then(|()| RedWriter::create(&target.file("xor"), &h));
                let mut arrived = arrived.filter(|_| own.is_ok());
                chain.receive(&mut out, &mut own, size, &mut arrived);
                own.and_then(|w| w.finish(target.fsync))
            }
            Some(reader) => {
                let read = chain.survive(&Segments::new(data.unwrap_or(&[]), seg), reader);
                read.and_then(|()| parity.take().expect("survivor").finish())
            }
        };
        drop(out);
        let out = (me == l && returning).then_some(returned);
        agree_patient(&self.set_comm, stored, "the XOR rebuild's parity")?;
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
        self.rebuild_to(data, None, None, target)
    }

    fn rebuild_into(&mut self, data: Option<&[u8]>, into: &mut [&mut [u8]], target: &Target) -> Result<Rebuilt> {
        self.rebuild_to(data, Some(into), None, target)
    }

    fn rebuild_into_with(
        &mut self,
        data: Option<&[u8]>,
        into: &mut [&mut [u8]],
        arrived: &mut Arrived<'_>,
        target: &Target,
    ) -> Result<Rebuilt> {
        self.rebuild_to(data, Some(into), Some(arrived), target)
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

/// The rebuild of lost member `l` as a pipelined chain along the ring: member `l+1` sends its
/// share of each block to `l+2`, which XORs its own share in and passes it on, and so on to
/// `l-1`, which hands the finished block to `l`. A block is the XOR of one share per
/// survivor: for holder `j != l`, survivor `j`'s parity and the others' segments for `j` make
/// `l`'s segment for `j`; for holder `l`, the survivors' segments for `l` make `l`'s parity.
/// Each member receives block `t` while it sends block `t-1` (SCR's chain): the blocks flow
/// through all members at once, each survivor touches its data once, and no member waits
/// for a collective over the whole set per block. A member waiting for its neighbour sleeps
/// ([`crate::patient`]) instead of polling, so that on shared cores the members with work
/// get them.
struct Chain<'c> {
    comm: &'c SimpleCommunicator,
    me: usize,
    n: usize,
    l: usize,
    seg: usize,
    block: usize,
}

impl Chain<'_> {
    /// The blocks in the order they flow: `(holder, offset in its segment, length)`.
    fn blocks(&self) -> Vec<(usize, usize, usize)> {
        (0..self.n).flat_map(|j| blocks(self.seg, self.block).map(move |(o, len)| (j, o, len))).collect()
    }

    /// A survivor's part: its share of each block XORed into what arrives from its left (the
    /// first of the chain sends its share as it is), passed on to its right.
    fn survive(&self, segs: &Segments, parity: &mut RedReader) -> Result<()> {
        let (me, n) = (self.me, self.n);
        let right = self.comm.process_at_rank(((me + 1) % n) as i32);
        let left = self.comm.process_at_rank(((me + n - 1) % n) as i32);
        let order = self.blocks();
        let size = self.block.min(self.seg);
        // This member's share of block (j, o, len): its parity when it holds j, else its
        // segment for j. A failed parity read is kept and the chain goes on (so that no
        // member waits forever); the set fails in the agreement after it.
        let k = |j: usize| (j + n - me - 1) % n;
        let mut read: Result<()> = Ok(());
        let mut own = vec![0u8; size];
        let mut read_parity = |own: &mut [u8]| {
            if read.is_ok() {
                read = parity.read(own);
            }
        };
        if (me + n - self.l) % n == 1 {
            for &(j, o, len) in &order {
                let share = if j == me {
                    read_parity(&mut own[..len]);
                    &own[..len]
                } else {
                    segs.get(k(j), o, len, &mut own)
                };
                mpi::request::scope(|scope| wait(right.immediate_send(scope, share)));
            }
            return read;
        }
        let (mut cur, mut prev) = (vec![0u8; size], vec![0u8; size]);
        let mut sent_len = 0;
        for (t, &(j, o, len)) in order.iter().enumerate() {
            mpi::request::scope(|scope| {
                let send = (t > 0).then(|| right.immediate_send(scope, &prev[..sent_len]));
                // While the block arrives: this member's parity block, when it is its share.
                if j == me {
                    read_parity(&mut own[..len]);
                }
                wait(left.immediate_receive_into(scope, &mut cur[..len]));
                if let Some(send) = send {
                    wait(send);
                }
            });
            if j == me {
                super::xor_into(&mut cur[..len], &own[..len]);
            } else {
                segs.xor_into(k(j), o, &mut cur[..len]);
            }
            std::mem::swap(&mut cur, &mut prev);
            sent_len = len;
        }
        mpi::request::scope(|scope| wait(right.immediate_send(scope, &prev[..sent_len])));
        read
    }

    /// The lost member's part: each finished block straight to its place in `out` (its data
    /// of `size` bytes; padding dropped), each data block handed to `arrived` once it is
    /// there, and its own parity to `own` (a failed write is kept, the chain goes on).
    fn receive(
        &self,
        out: &mut [&mut [u8]],
        own: &mut Result<RedWriter>,
        size: usize,
        arrived: &mut Option<&mut Arrived<'_>>,
    ) {
        let (l, n, seg) = (self.l, self.n, self.seg);
        let left = self.comm.process_at_rank(((l + n - 1) % n) as i32);
        let mut scratch = vec![0u8; self.block.min(seg)];
        for (j, o, len) in self.blocks() {
            if j == l {
                mpi::request::scope(|scope| wait(left.immediate_receive_into(scope, &mut scratch[..len])));
                if let Ok(w) = own {
                    if let Err(e) = w.write(&scratch[..len]) {
                        *own = Err(e);
                    }
                }
                continue;
            }
            let at = ((j + n - l - 1) % n) * seg + o;
            // The data's part of the block (the rest is padding).
            let keep = len.min(size.saturating_sub(at));
            let bytes: &[u8] = match piece_at(out, at, len) {
                Some((p, off)) => {
                    mpi::request::scope(|scope| wait(left.immediate_receive_into(scope, &mut out[p][off..off + len])));
                    &out[p][off..off + keep]
                }
                None => {
                    mpi::request::scope(|scope| wait(left.immediate_receive_into(scope, &mut scratch[..len])));
                    write_at(out, at, &scratch[..len]);
                    &scratch[..keep]
                }
            };
            if let (Some(f), true) = (arrived.as_mut(), keep > 0 && !out.is_empty()) {
                f(at, bytes);
            }
        }
    }
}

/// This rank's parity file for `target`, its header checked (the payload is read, and its
/// CRC32C checked, as the rebuild goes).
fn open_parity(target: &Target, set: &[usize]) -> Result<RedReader> {
    let path = target.file("xor");
    let reader = RedReader::open(&path)?;
    let h = reader.header();
    if h.name != target.name || h.set != set || h.scheme != "xor" {
        return Err(CkptError::Corrupt(format!("{}: parity of another checkpoint or set", path.display())));
    }
    Ok(reader)
}

/// Removes a file; a missing file is not an error.
pub(crate) fn remove_if_exists(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CkptError::io("remove", path, e)),
        _ => Ok(()),
    }
}
