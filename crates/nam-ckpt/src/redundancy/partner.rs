//! The partner scheme (SCR `PARTNER`, SIONlib buddy checkpointing): every rank keeps a full
//! copy of its checkpoint on a rank of another node.
//!
//! Partners are SCR's: the rank with the same local index on the next node
//! ([`crate::groups::partners`]). **Protect** streams the data to the partner in blocks
//! with non-blocking sends straight from the application's buffer (no copy), while the copy
//! that this rank holds for its own sender(s) arrives into two alternating buffers: the one
//! that just arrived is written to disk while the next block is in flight. **Rebuild** sends
//! a lost rank's copy back from its partner, then restores the copies the lost rank held.

use super::xor::remove_if_exists;
use super::{agree, lost_ranks, ProtectStats, Rebuilt, Redundancy, Scheme, Target};
use crate::comm::Comm;
use crate::cpu::Stopwatch;
use crate::error::{CkptError, Result};
use crate::failure_groups::partners;
use crate::redfile::{self, RedHeader, RedWriter};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

const TAG_PROTECT: i32 = 0x4e01;
const TAG_RETURN: i32 = 0x4e02;
const TAG_RESTORE: i32 = 0x4e03;

/// The `partner` scheme, built over a communicator (collective).
pub struct Partner {
    comm: SimpleCommunicator,
    partner: Vec<usize>,
    senders: Vec<usize>,
    block: usize,
}

impl Partner {
    /// Chooses partners on other nodes.
    pub fn new(comm: &Comm, block_bytes: usize) -> Result<Self> {
        let partner = partners(comm, "partner")?;
        let me = comm.rank();
        let senders = (0..partner.len()).filter(|&r| partner[r] == me).collect();
        Ok(Partner { comm: comm.raw().duplicate(), partner, senders, block: block_bytes.max(8) })
    }

    /// The rank that holds this rank's copy.
    pub fn partner(&self) -> usize {
        self.partner[self.comm.rank() as usize]
    }

    fn copy_file(target: &Target, of: usize) -> std::path::PathBuf {
        target.file(&format!("partner-{of}"))
    }

    fn header(target: &Target, of: usize, size: u64) -> RedHeader {
        RedHeader {
            scheme: "partner".into(),
            name: target.name.into(),
            rank: of,
            set: vec![of],
            sizes: vec![size],
            segment: 0,
            payload: size,
        }
    }

    /// Streams `data` to the partner while receiving the senders' copies into `writers`.
    fn exchange(&self, data: &[u8], sizes: &[u64], writers: &mut [Result<RedWriter>]) {
        let block = self.block;
        let nblocks = |len: u64| (len as usize).div_ceil(block);
        let rounds = self.senders.iter().map(|&s| nblocks(sizes[s])).chain([nblocks(data.len() as u64)]).max();
        let dest = self.comm.process_at_rank(self.partner() as i32);
        let mut cur: Vec<Vec<u8>> = self.senders.iter().map(|_| vec![0u8; block]).collect();
        let mut prev: Vec<Vec<u8>> = self.senders.iter().map(|_| vec![0u8; block]).collect();
        let len_of = |size: u64, b: usize| block.min((size as usize).saturating_sub(b * block));
        for b in 0..=rounds.unwrap_or(0) {
            mpi::request::scope(|scope| {
                let send = (b * block < data.len()).then(|| {
                    dest.immediate_send_with_tag(scope, &data[b * block..][..len_of(data.len() as u64, b)], TAG_PROTECT)
                });
                let mut recvs = Vec::new();
                for (i, buf) in cur.iter_mut().enumerate() {
                    let len = len_of(sizes[self.senders[i]], b);
                    if len > 0 {
                        let src = self.comm.process_at_rank(self.senders[i] as i32);
                        recvs.push(src.immediate_receive_into_with_tag(scope, &mut buf[..len], TAG_PROTECT));
                    }
                }
                // The previous block goes to disk while this one is in flight.
                for (i, w) in writers.iter_mut().enumerate() {
                    let len = if b == 0 { 0 } else { len_of(sizes[self.senders[i]], b - 1) };
                    if let (true, Ok(writer)) = (len > 0, &mut *w) {
                        if let Err(e) = writer.write(&prev[i][..len]) {
                            *w = Err(e);
                        }
                    }
                }
                for r in recvs {
                    r.wait_without_status();
                }
                if let Some(s) = send {
                    s.wait_without_status();
                }
            });
            std::mem::swap(&mut cur, &mut prev);
        }
    }

    /// Blocking send of `data` (length first) to `to`, in blocks.
    fn send_all(&self, to: usize, data: &[u8], tag: i32) {
        let p = self.comm.process_at_rank(to as i32);
        p.send_with_tag(&(data.len() as u64), tag);
        for chunk in data.chunks(self.block) {
            p.send_with_tag(chunk, tag);
        }
    }

    /// Blocking receive of what [`Partner::send_all`] sends.
    fn recv_all(&self, from: usize, tag: i32) -> Vec<u8> {
        let p = self.comm.process_at_rank(from as i32);
        let (len, _) = p.receive_with_tag::<u64>(tag);
        let mut out = vec![0u8; len as usize];
        for chunk in out.chunks_mut(self.block) {
            p.receive_into_with_tag(chunk, tag);
        }
        out
    }
}

impl Redundancy for Partner {
    fn scheme(&self) -> Scheme {
        Scheme::Partner
    }

    fn protect(&mut self, data: &[u8], target: &Target) -> Result<ProtectStats> {
        let clock = Stopwatch::start();
        let sizes = crate::comm::all_gather_u64(&self.comm, data.len() as u64);
        let created: Result<Vec<RedWriter>> = self
            .senders
            .iter()
            .map(|&s| RedWriter::create(&Self::copy_file(target, s), &Self::header(target, s, sizes[s])))
            .collect();
        let created = agree(&self.comm, created, "creating partner copy files")?;
        let mut writers: Vec<Result<RedWriter>> = created.into_iter().map(Ok).collect();
        self.exchange(data, &sizes, &mut writers);
        let done: Result<()> = writers.into_iter().try_for_each(|w| w.and_then(|w| w.finish(target.fsync)));
        agree(&self.comm, done, "writing partner copies")?;
        let stored: u64 = self.senders.iter().map(|&s| sizes[s]).sum();
        Ok(ProtectStats {
            data_bytes: data.len() as u64,
            sent_bytes: data.len() as u64,
            stored_bytes: stored,
            seconds: clock.wall_seconds(),
            cpu_seconds: clock.cpu_seconds(),
        })
    }

    fn rebuild(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt> {
        let clock = Stopwatch::start();
        let me = self.comm.rank() as usize;
        let lost = lost_ranks(&self.comm, data.is_some());
        if let Some(&l) = lost.iter().find(|&&l| lost.contains(&self.partner[l])) {
            return Err(CkptError::Unrecoverable(format!(
                "rank {l} and its partner {} both lost their data",
                self.partner[l]
            )));
        }
        // Phase 1: partners return the copies of lost ranks.
        let held: Result<Vec<(usize, Vec<u8>)>> =
            lost.iter().filter(|&&l| self.partner[l] == me).map(|&l| read_copy(target, l).map(|c| (l, c))).collect();
        let held = agree(&self.comm, held, "reading partner copies")?;
        for (l, copy) in &held {
            self.send_all(*l, copy, TAG_RETURN);
        }
        let rebuilt = data.is_none().then(|| self.recv_all(self.partner[me], TAG_RETURN));
        // Phase 2: lost ranks get back the copies they held for their senders.
        let mine = data.or(rebuilt.as_deref()).expect("data present or rebuilt");
        if lost.contains(&self.partner[me]) {
            self.send_all(self.partner[me], mine, TAG_RESTORE);
        }
        let restored: Result<()> = if data.is_none() {
            self.senders.iter().try_for_each(|&s| {
                let copy = self.recv_all(s, TAG_RESTORE);
                redfile::write(
                    &Self::copy_file(target, s),
                    &Self::header(target, s, copy.len() as u64),
                    &copy,
                    target.fsync,
                )
            })
        } else {
            Ok(())
        };
        agree(&self.comm, restored, "restoring partner copies")?;
        Ok(Rebuilt { data: rebuilt, lost, seconds: clock.wall_seconds(), cpu_seconds: clock.cpu_seconds() })
    }

    fn discard(&mut self, target: &Target) -> Result<()> {
        self.senders.iter().try_for_each(|&s| remove_if_exists(&Self::copy_file(target, s)))
    }

    fn missing_redundancy(&self, target: &Target) -> Option<String> {
        let missing: Vec<String> =
            self.senders.iter().filter_map(|&s| super::missing_file(&Self::copy_file(target, s))).collect();
        (!missing.is_empty()).then(|| missing.join(", "))
    }

    fn can_rebuild(&self, lost: &[usize], no_redundancy: &[usize]) -> std::result::Result<(), String> {
        for &l in lost {
            let p = self.partner[l];
            if lost.contains(&p) {
                return Err(format!("rank {l} and its partner {p} both lost their data"));
            }
            if no_redundancy.contains(&p) {
                return Err(format!("rank {l} lost its data and its partner {p} has no copy of it"));
            }
        }
        Ok(())
    }
}

fn read_copy(target: &Target, of: usize) -> Result<Vec<u8>> {
    let path = Partner::copy_file(target, of);
    let (h, payload) = redfile::read(&path)?;
    if h.name != target.name || h.rank != of || h.scheme != "partner" {
        return Err(CkptError::Corrupt(format!("{}: copy of another checkpoint or rank", path.display())));
    }
    Ok(payload)
}
