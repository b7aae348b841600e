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
use super::{agree, agree_patient, lost_ranks, Arrived, ProtectStats, Rebuilt, Redundancy, Scheme, Target};
use super::{piece_at, write_at};
use crate::comm::Comm;
use crate::cpu::Stopwatch;
use crate::error::{CkptError, Result};
use crate::failure_groups::partners;
use crate::redfile::{RedHeader, RedReader, RedWriter};
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
        self.rebuild_streamed(data, None, None, target)
    }

    fn rebuild_into(&mut self, data: Option<&[u8]>, into: &mut [&mut [u8]], target: &Target) -> Result<Rebuilt> {
        self.rebuild_streamed(data, Some(into), None, target)
    }

    fn rebuild_into_with(
        &mut self,
        data: Option<&[u8]>,
        into: &mut [&mut [u8]],
        arrived: &mut Arrived<'_>,
        target: &Target,
    ) -> Result<Rebuilt> {
        self.rebuild_streamed(data, Some(into), Some(arrived), target)
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

/// Opens the copy of rank `of`'s data this rank holds, its header checked; the payload is
/// read (and its CRC32C checked) as it is sent back.
fn open_copy(target: &Target, of: usize) -> Result<RedReader> {
    let path = Partner::copy_file(target, of);
    let reader = RedReader::open(&path)?;
    let h = reader.header();
    if h.name != target.name || h.rank != of || h.scheme != "partner" {
        return Err(CkptError::Corrupt(format!("{}: copy of another checkpoint or rank", path.display())));
    }
    Ok(reader)
}

/// Where an outgoing stream of a rebuild reads its bytes: a partner copy, checked as it is
/// read, or this rank's own data.
enum Origin<'d> {
    Copy(Box<RedReader>),
    Data(&'d [u8]),
}

/// One stream this rank sends during a rebuild.
struct Outgoing<'d> {
    to: usize,
    tag: i32,
    len: usize,
    source: Origin<'d>,
    /// Two block buffers for a copy: one in flight while the next is read.
    bufs: [Vec<u8>; 2],
    failed: Option<CkptError>,
}

/// The copy of a sender's data a lost rank holds again, streamed to its file as it arrives.
struct Incoming {
    from: usize,
    len: usize,
    writer: Result<RedWriter>,
    bufs: [Vec<u8>; 2],
}

/// A lost rank's own data as it comes back from its partner.
struct Own {
    from: usize,
    len: usize,
    /// Received, so that the partner completes, but dropped: a length that does not fit the
    /// places to restore.
    dropped: bool,
}

/// Block `b`'s range `(offset, len)` of a stream of `len` bytes, if it has one.
fn block_range(len: usize, block: usize, b: usize) -> Option<(usize, usize)> {
    let at = b.checked_mul(block)?;
    (at < len).then(|| (at, block.min(len - at)))
}

impl Partner {
    /// The rebuild: every lost rank's copy streams back from its partner while the
    /// survivors whose partner was lost stream their data to it again (for the copy it held),
    /// all in the same rounds of blocks. A copy is read from its file a block at a time, its
    /// CRC32C running as it goes, and the next block is read while the previous one is in
    /// flight; the lost rank receives its data straight into `into` (or a buffer it returns
    /// when `into` is `None`) and writes the copies it holds again block by block, while the
    /// next block arrives. A copy that fails its check fails the rebuild on every rank, after
    /// the streams completed (the received bytes are then never reported as restored).
    fn rebuild_streamed(
        &mut self,
        data: Option<&[u8]>,
        into: Option<&mut [&mut [u8]]>,
        arrived: Option<&mut Arrived<'_>>,
        target: &Target,
    ) -> Result<Rebuilt> {
        let clock = Stopwatch::start();
        let me = self.comm.rank() as usize;
        let lost = lost_ranks(&self.comm, data.is_some());
        if let Some(&l) = lost.iter().find(|&&l| lost.contains(&self.partner[l])) {
            return Err(CkptError::Unrecoverable(format!(
                "rank {l} and its partner {} both lost their data",
                self.partner[l]
            )));
        }
        if lost.is_empty() {
            return Ok(Rebuilt { lost, seconds: clock.wall_seconds(), cpu_seconds: clock.cpu_seconds(), data: None });
        }
        // Holders open the copies they return: their headers are checked before anything moves.
        let held: Result<Vec<(usize, RedReader)>> =
            lost.iter().filter(|&&l| self.partner[l] == me).map(|&l| open_copy(target, l).map(|c| (l, c))).collect();
        let held = agree_patient(&self.comm, held, "reading partner copies")?;
        let block = self.block;
        let mut outgoing: Vec<Outgoing> = held
            .into_iter()
            .map(|(l, copy)| {
                let len = copy.header().payload as usize;
                let bufs = [vec![0u8; block], vec![0u8; block]];
                Outgoing { to: l, tag: TAG_RETURN, len, source: Origin::Copy(Box::new(copy)), bufs, failed: None }
            })
            .collect();
        if let Some(mine) = data.filter(|_| lost.contains(&self.partner[me])) {
            let (to, len) = (self.partner[me], mine.len());
            let bufs = [Vec::new(), Vec::new()];
            outgoing.push(Outgoing { to, tag: TAG_RESTORE, len, source: Origin::Data(mine), bufs, failed: None });
        }
        // Lengths first (one word each, sent before any receive is waited for).
        for o in &outgoing {
            self.comm.process_at_rank(o.to as i32).send_with_tag(&(o.len as u64), o.tag);
        }
        let (mut own, mut incoming) = (None, Vec::new());
        if data.is_none() {
            let from = self.partner[me];
            let (len, _) = self.comm.process_at_rank(from as i32).receive_with_tag::<u64>(TAG_RETURN);
            own = Some(Own { from, len: len as usize, dropped: false });
            for &s in &self.senders {
                let (len, _) = self.comm.process_at_rank(s as i32).receive_with_tag::<u64>(TAG_RESTORE);
                let writer = RedWriter::create(&Self::copy_file(target, s), &Self::header(target, s, len));
                let bufs = [vec![0u8; block], vec![0u8; block]];
                incoming.push(Incoming { from: s, len: len as usize, writer, bufs });
            }
        }
        // The lost rank's own data: into `into` when its size fits, else into a buffer
        // returned in `Rebuilt::data` (`into` is `None`), else received and dropped.
        let own_len = own.as_ref().map_or(0, |o| o.len);
        let returning = into.is_none();
        let mut returned = Vec::new();
        let mut done: Result<()> = Ok(());
        let mut pieces: Vec<&mut [u8]> = match into {
            _ if own.is_none() => Vec::new(),
            Some(pieces) if pieces.iter().map(|p| p.len()).sum::<usize>() == own_len => {
                pieces.iter_mut().map(|p| &mut **p).collect()
            }
            Some(pieces) => {
                let holds = pieces.iter().map(|p| p.len()).sum::<usize>();
                done = Err(CkptError::Corrupt(format!(
                    "rank {me}: its partner returned {own_len} bytes, but the places to restore them hold {holds}"
                )));
                own.as_mut().expect("lost rank").dropped = true;
                Vec::new()
            }
            None => {
                returned = vec![0u8; own_len];
                vec![&mut returned[..]]
            }
        };
        let mut arrived = arrived.filter(|_| own.as_ref().is_some_and(|o| !o.dropped));
        self.stream(&mut outgoing, own.as_ref(), &mut pieces, &mut incoming, &mut arrived);
        drop(pieces);
        // Every copy read to its end passed its CRC32C; every copy written is complete.
        for o in outgoing {
            done = done.and(match (o.failed, o.source) {
                (Some(e), _) => Err(e),
                (None, Origin::Copy(copy)) => copy.finish(),
                (None, Origin::Data(_)) => Ok(()),
            });
        }
        for i in incoming {
            done = done.and(i.writer.and_then(|w| w.finish(target.fsync)));
        }
        agree_patient(&self.comm, done, "returning and restoring partner copies")?;
        let data = (own.is_some() && returning).then_some(returned);
        Ok(Rebuilt { data, lost, seconds: clock.wall_seconds(), cpu_seconds: clock.cpu_seconds() })
    }

    /// The rounds of [`Partner::rebuild_streamed`]: in round `b` every stream's block `b` is
    /// in flight (non-blocking sends and receives) while the next block of each copy sent is
    /// read, and the blocks of each copy received are written by a thread of their own.
    fn stream(
        &self,
        outgoing: &mut [Outgoing],
        own: Option<&Own>,
        pieces: &mut [&mut [u8]],
        incoming: &mut [Incoming],
        arrived: &mut Option<&mut Arrived<'_>>,
    ) {
        let block = self.block;
        let longest = outgoing.iter().map(|o| o.len).chain(incoming.iter().map(|i| i.len)).chain(own.map(|o| o.len));
        let rounds = longest.max().unwrap_or(0).div_ceil(block);
        for o in outgoing.iter_mut() {
            o.read(block, 0);
        }
        // Own bytes that straddle two pieces, or that are dropped, arrive here.
        let mut scratch = vec![0u8; if own.is_some() { block } else { 0 }];
        // The copies this rank holds again go to their files in a thread of their own: the
        // lost rank receives two streams and stores both, and where ranks share the cores
        // the other core takes the writes (and their CRC32C) while this thread receives.
        // Each block buffer goes to the writer once filled and comes back once written.
        let (to_writer, jobs) = std::sync::mpsc::channel::<(usize, Vec<u8>, usize)>();
        let (give_back, written) = std::sync::mpsc::channel::<(usize, Vec<u8>)>();
        let mut writers: Vec<Result<RedWriter>> = incoming
            .iter_mut()
            .map(|i| {
                std::mem::replace(
                    &mut i.writer,
                    Err(CkptError::Unrecoverable("the copy is with its writer thread".into())),
                )
            })
            .collect();
        let mut free: Vec<Vec<Vec<u8>>> = incoming.iter_mut().map(|i| std::mem::take(&mut i.bufs).into()).collect();
        std::thread::scope(|threads| {
            let writer = (!incoming.is_empty()).then(|| {
                threads.spawn(move || {
                    for (i, buf, len) in jobs {
                        if let Ok(w) = &mut writers[i] {
                            if let Err(e) = w.write(&buf[..len]) {
                                writers[i] = Err(e);
                            }
                        }
                        // The receiver is gone only once the rounds are over.
                        let _ = give_back.send((i, buf));
                    }
                    writers
                })
            });
            for b in 0..rounds {
                let mut straddles = None;
                let mut landed = None;
                // A buffer for each copy's block b: a free one, else the next the writer
                // gives back.
                let mut cur: Vec<Option<(Vec<u8>, usize)>> = Vec::with_capacity(incoming.len());
                for (k, i) in incoming.iter().enumerate() {
                    cur.push(block_range(i.len, block, b).map(|(_, len)| {
                        while free[k].is_empty() {
                            let (from, buf) = written.recv().expect("the writer gives every buffer back");
                            free[from].push(buf);
                        }
                        (free[k].pop().expect("a free buffer"), len)
                    }));
                }
                mpi::request::scope(|scope| {
                    let mut requests = Vec::new();
                    for o in outgoing.iter_mut() {
                        let Some((at, len)) = block_range(o.len, block, b) else { continue };
                        let dest = self.comm.process_at_rank(o.to as i32);
                        let (first, second) = o.bufs.split_at_mut(1);
                        let (cur, next) =
                            if b % 2 == 0 { (&first[0], &mut second[0]) } else { (&second[0], &mut first[0]) };
                        let bytes: &[u8] = match &o.source {
                            Origin::Data(d) => {
                                let d: &[u8] = d;
                                &d[at..at + len]
                            }
                            Origin::Copy(_) => &cur[..len],
                        };
                        requests.push(dest.immediate_send_with_tag(scope, bytes, o.tag));
                        // While it is in flight: the copy's next block.
                        if let (Some((_, next_len)), Origin::Copy(copy), None) =
                            (block_range(o.len, block, b + 1), &mut o.source, &o.failed)
                        {
                            if let Err(e) = copy.read(&mut next[..next_len]) {
                                o.failed = Some(e);
                            }
                        }
                    }
                    if let Some((own, (at, len))) = own.and_then(|o| block_range(o.len, block, b).map(|r| (o, r))) {
                        let src = self.comm.process_at_rank(own.from as i32);
                        let into: &mut [u8] = match piece_at(pieces, at, len).filter(|_| !own.dropped) {
                            Some((p, off)) => {
                                landed = Some((p, off, at, len));
                                &mut pieces[p][off..off + len]
                            }
                            None => {
                                straddles = Some((at, len));
                                &mut scratch[..len]
                            }
                        };
                        requests.push(src.immediate_receive_into_with_tag(scope, into, TAG_RETURN));
                    }
                    for (i, c) in incoming.iter().zip(cur.iter_mut()) {
                        if let Some((buf, len)) = c {
                            let src = self.comm.process_at_rank(i.from as i32);
                            requests.push(src.immediate_receive_into_with_tag(scope, &mut buf[..*len], TAG_RESTORE));
                        }
                    }
                    // Sleeping while the other ends catch up: where ranks share the cores, the
                    // lost rank, which receives two streams, needs them most.
                    for r in requests {
                        crate::patient::wait(r);
                    }
                });
                for (k, c) in cur.into_iter().enumerate() {
                    if let Some((buf, len)) = c {
                        // The writer ends only when this sender is dropped.
                        let _ = to_writer.send((k, buf, len));
                    }
                }
                if let (Some((at, len)), Some(own)) = (straddles, own) {
                    if !own.dropped {
                        write_at(pieces, at, &scratch[..len]);
                        if let Some(f) = arrived.as_mut() {
                            f(at, &scratch[..len]);
                        }
                    }
                }
                // The block is in place: staged while it is still in the cache.
                if let (Some((p, off, at, len)), Some(f)) = (landed, arrived.as_mut()) {
                    f(at, &pieces[p][off..off + len]);
                }
            }
            drop(to_writer);
            if let Some(writer) = writer {
                let writers = writer.join().expect("the partner copy writer does not panic");
                for (i, w) in incoming.iter_mut().zip(writers) {
                    i.writer = w;
                }
            }
        });
    }
}

impl Outgoing<'_> {
    /// Reads block `b` of a copy into its buffer (nothing for this rank's own data, or past
    /// the end); a failed read is kept, and the stream goes on so that no rank waits forever.
    fn read(&mut self, block: usize, b: usize) {
        if let (Some((_, len)), Origin::Copy(copy), None) =
            (block_range(self.len, block, b), &mut self.source, &self.failed)
        {
            if let Err(e) = copy.read(&mut self.bufs[b % 2][..len]) {
                self.failed = Some(e);
            }
        }
    }
}
