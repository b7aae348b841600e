//! Reed-Solomon across a set: survives the loss of any `k` ranks of a set of `n` (on `n`
//! different nodes), storing `k/(n-k)` of the data as parity on every rank.
//!
//! The layout generalises SCR's XOR (which is the case `k = 1`) the way RAID-6 generalises
//! RAID-5: there are `n` stripes; stripe `j` has parity holders `j, j+1, .., j+k-1` and, as
//! data, one segment from each of the other `n-k` members. So each member's zero-padded
//! data is cut into `n-k` segments (member `i` gives its segment `t` to stripe `i+1+t`) and
//! each member holds `k` parity segments. Losing any `k` members loses at most `k` shards
//! of every stripe, which the code (`reed-solomon-erasure`, GF(2^8), systematic) rebuilds.
//!
//! **Protect**: parity is linear, `P_q = sum_p c[q][p] * D_p`, so each contributor scales its
//! segment by its coefficient and an `MPI_Reduce(BXOR)` to the holder adds them up, block by
//! block. **Rebuild**: for every stripe, the surviving shards are gathered to each lost
//! member, which reconstructs its data segment or parity segment.

use super::ring::{blocks, place, Segments};
use super::xor::remove_if_exists;
use super::{agree, lost_ranks, ProtectStats, Rebuilt, Redundancy, Scheme, Target};
use crate::comm::{all_gather_u64, broadcast_bytes, Comm};
use crate::cpu::Stopwatch;
use crate::error::{CkptError, Result};
use crate::failure_groups::form_sets;
use crate::redfile::{self, RedHeader};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use reed_solomon_erasure::galois_8::{self, ReedSolomon as Codec};

/// The `rs` scheme (collective to build).
pub struct ReedSolomon {
    set_comm: SimpleCommunicator,
    set: Vec<usize>,
    rank: usize,
    k: usize,
    block: usize,
    codec: Codec,
    /// `coeff[q][p]`: weight of data shard `p` in parity shard `q`.
    coeff: Vec<Vec<u8>>,
}

impl ReedSolomon {
    /// Forms sets of at most `set_size` ranks on distinct nodes, each with `k` parity.
    pub fn new(comm: &Comm, set_size: usize, k: usize, block_bytes: usize) -> Result<Self> {
        let sets = form_sets(comm, set_size, "rs")?;
        let smallest = sets.iter().map(Vec::len).min().expect("at least one set");
        if k == 0 || k >= smallest {
            return Err(CkptError::layout(
                "rs",
                format!("{k} parity need sets of more than {k} ranks; smallest set has {smallest}"),
            ));
        }
        let rank = comm.rank();
        let idx = sets.iter().position(|s| s.contains(&rank)).expect("every rank is in a set");
        let key = sets[idx].iter().position(|&r| r == rank).expect("rank in its set") as i32;
        let set_comm = comm.split(Some(idx as u32), key).expect("rank passed a color");
        let n = sets[idx].len();
        let codec = Codec::new(n - k, k).map_err(|e| CkptError::Config(format!("rs: {e:?}")))?;
        let coeff = coefficients(&codec, n - k, k);
        Ok(ReedSolomon { set_comm, set: sets[idx].clone(), rank, k, block: block_bytes.max(8), codec, coeff })
    }

    fn me_n(&self) -> (usize, usize) {
        (self.set_comm.rank() as usize, self.set_comm.size() as usize)
    }

    /// This member's role in stripe `j`: `Ok(p)` data shard p, `Err(q)` parity holder q.
    fn role(&self, member: usize, j: usize) -> std::result::Result<usize, usize> {
        let (_, n) = self.me_n();
        let q = (member + n - j) % n;
        if q < self.k {
            Err(q)
        } else {
            Ok(q - self.k)
        }
    }
}

/// The code's parity coefficients, read off by encoding unit vectors.
fn coefficients(codec: &Codec, data: usize, parity: usize) -> Vec<Vec<u8>> {
    let mut coeff = vec![vec![0u8; data]; parity];
    for p in 0..data {
        let mut shards: Vec<Vec<u8>> = (0..data + parity).map(|s| vec![u8::from(s == p)]).collect();
        codec.encode(&mut shards).expect("shard counts match the codec");
        for (q, row) in coeff.iter_mut().enumerate() {
            row[p] = shards[data + q][0];
        }
    }
    coeff
}

impl Redundancy for ReedSolomon {
    fn scheme(&self) -> Scheme {
        Scheme::Rs
    }

    fn protect(&mut self, data: &[u8], target: &Target) -> Result<ProtectStats> {
        let clock = Stopwatch::start();
        let (me, n) = self.me_n();
        let sizes = all_gather_u64(&self.set_comm, data.len() as u64);
        let seg = (*sizes.iter().max().expect("set is not empty")).div_ceil((n - self.k) as u64) as usize;
        let segs = Segments::new(data, seg);
        let mut parity = vec![0u8; self.k * seg];
        let (mut scratch, mut scaled) = (vec![0u8; self.block.min(seg)], vec![0u8; self.block.min(seg)]);
        for j in 0..n {
            for q in 0..self.k {
                let holder = self.set_comm.process_at_rank(((j + q) % n) as i32);
                for (o, len) in blocks(seg, self.block) {
                    let contribution: &[u8] = match self.role(me, j) {
                        Ok(p) => {
                            let t = (j + n - me - 1) % n;
                            galois_8::mul_slice(
                                self.coeff[q][p],
                                segs.get(t, o, len, &mut scratch),
                                &mut scaled[..len],
                            );
                            &scaled[..len]
                        }
                        Err(_) => {
                            scratch[..len].fill(0);
                            &scratch[..len]
                        }
                    };
                    if (j + q) % n == me {
                        let out = &mut parity[q * seg + o..q * seg + o + len];
                        holder.reduce_into_root(contribution, out, SystemOperation::bitwise_xor());
                    } else {
                        holder.reduce_into(contribution, SystemOperation::bitwise_xor());
                    }
                }
            }
        }
        let header = RedHeader {
            scheme: "rs".into(),
            name: target.name.into(),
            rank: self.rank,
            set: self.set.clone(),
            sizes,
            segment: seg as u64,
            payload: (self.k * seg) as u64,
        };
        let stored = redfile::write(&target.file("rs"), &header, &parity, target.fsync);
        agree(&self.set_comm, stored, "writing Reed-Solomon parity")?;
        Ok(ProtectStats {
            data_bytes: data.len() as u64,
            sent_bytes: (n * self.k * seg) as u64,
            stored_bytes: (self.k * seg) as u64,
            seconds: clock.wall_seconds(),
            cpu_seconds: clock.cpu_seconds(),
        })
    }

    fn rebuild(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt> {
        let clock = Stopwatch::start();
        let (me, n) = self.me_n();
        let lost = lost_ranks(&self.set_comm, data.is_some());
        let lost_world: Vec<usize> = lost.iter().map(|&i| self.set[i]).collect();
        if lost.len() > self.k {
            return Err(CkptError::Unrecoverable(format!(
                "Reed-Solomon set {:?} lost ranks {lost_world:?}; it rebuilds up to {} per set",
                self.set, self.k
            )));
        }
        if lost.is_empty() {
            return Ok(Rebuilt::default());
        }
        let mine = if lost.contains(&me) { Ok(None) } else { read_parity(target, &self.set).map(Some) };
        let mine = agree(&self.set_comm, mine, "reading Reed-Solomon parity")?;
        let root = (0..n).find(|m| !lost.contains(m)).expect("a survivor");
        let json = mine.as_ref().map(|(h, _)| serde_json::to_vec(h).expect("serializes")).unwrap_or_default();
        let header: RedHeader = serde_json::from_slice(&broadcast_bytes(&self.set_comm, root, &json))
            .map_err(|e| CkptError::Corrupt(format!("Reed-Solomon header: {e}")))?;
        let seg = header.segment as usize;
        let is_lost = lost.contains(&me);
        let mut out = is_lost.then(|| vec![0u8; header.sizes[me] as usize]);
        let mut own_parity = vec![0u8; if is_lost { self.k * seg } else { 0 }];
        let segs = Segments::new(data.unwrap_or(&[]), seg);
        let mut scratch = vec![0u8; self.block.min(seg)];
        let mut gathered = vec![0u8; n * self.block.min(seg)];
        for j in 0..n {
            for (o, len) in blocks(seg, self.block) {
                let shard: &[u8] = match (is_lost, self.role(me, j), &mine) {
                    (true, _, _) => {
                        scratch[..len].fill(0);
                        &scratch[..len]
                    }
                    (false, Ok(_), _) => segs.get((j + n - me - 1) % n, o, len, &mut scratch),
                    (false, Err(q), Some((_, p))) => &p[q * seg + o..q * seg + o + len],
                    (false, Err(_), None) => unreachable!("survivors read their parity"),
                };
                let shard = shard.to_vec();
                for &l in &lost {
                    let root = self.set_comm.process_at_rank(l as i32);
                    if l == me {
                        root.gather_into_root(&shard[..], &mut gathered[..n * len]);
                        self.reconstruct(j, o, len, &lost, &gathered[..n * len], seg, out.as_mut(), &mut own_parity)?;
                    } else {
                        root.gather_into(&shard[..]);
                    }
                }
            }
        }
        let stored = if is_lost {
            let h = RedHeader { rank: self.rank, ..header };
            redfile::write(&target.file("rs"), &h, &own_parity, target.fsync)
        } else {
            Ok(())
        };
        agree(&self.set_comm, stored, "storing rebuilt Reed-Solomon parity")?;
        Ok(Rebuilt { data: out, lost: lost_world, seconds: clock.wall_seconds(), cpu_seconds: clock.cpu_seconds() })
    }

    fn discard(&mut self, target: &Target) -> Result<()> {
        remove_if_exists(&target.file("rs"))
    }

    fn missing_redundancy(&self, target: &Target) -> Option<String> {
        super::missing_file(&target.file("rs"))
    }

    fn can_rebuild(&self, lost: &[usize], no_redundancy: &[usize]) -> std::result::Result<(), String> {
        super::set_can_rebuild("Reed-Solomon", &self.set, self.k, lost, no_redundancy)
    }
}

impl ReedSolomon {
    /// On a lost member: rebuilds stripe `j`'s block from the gathered shards (by member)
    /// and keeps this member's own shard of it.
    #[allow(clippy::too_many_arguments)]
    fn reconstruct(
        &self,
        j: usize,
        o: usize,
        len: usize,
        lost: &[usize],
        gathered: &[u8],
        seg: usize,
        out: Option<&mut Vec<u8>>,
        own_parity: &mut [u8],
    ) -> Result<()> {
        let (me, n) = self.me_n();
        let data_shards = n - self.k;
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
        for member in (0..n).filter(|m| !lost.contains(m)) {
            let index = match self.role(member, j) {
                Ok(p) => p,
                Err(q) => data_shards + q,
            };
            shards[index] = Some(gathered[member * len..(member + 1) * len].to_vec());
        }
        self.codec.reconstruct(&mut shards).map_err(|e| CkptError::Unrecoverable(format!("Reed-Solomon: {e:?}")))?;
        match self.role(me, j) {
            Ok(p) => {
                let t = (j + n - me - 1) % n;
                place(out.expect("lost member"), seg, t, o, shards[p].as_ref().expect("rebuilt"));
            }
            Err(q) => own_parity[q * seg + o..q * seg + o + len]
                .copy_from_slice(shards[data_shards + q].as_ref().expect("rebuilt")),
        }
        Ok(())
    }
}

fn read_parity(target: &Target, set: &[usize]) -> Result<(RedHeader, Vec<u8>)> {
    let path = target.file("rs");
    let (h, p) = redfile::read(&path)?;
    if h.name != target.name || h.set != set || h.scheme != "rs" {
        return Err(CkptError::Corrupt(format!("{}: parity of another checkpoint or set", path.display())));
    }
    Ok((h, p))
}
