//! The allreduce engine (the allreduce accelerator of seed 003 §4.7, in software): groups of
//! ranks that deposit vectors in the group's memory, and rounds that complete when every
//! rank arrived. This file is the bookkeeping (who arrived, do they agree, who must hear
//! what) and the reduction kernel over pool memory; the server feeds it requests.

use nam_proto::reduce::{combine, DataType, ReduceOp};
use nam_proto::Status;
use std::collections::HashMap;

/// One rank's arrival in a round: what it deposited and where to send the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival<R> {
    /// Whom to answer (the server's reply address and request id).
    pub reply_to: R,
    /// Round number.
    pub seq: u64,
    /// Elements deposited.
    pub count: u64,
    /// Elements of the whole vector.
    pub total: u64,
    /// Operation.
    pub op: ReduceOp,
    /// Element type.
    pub dtype: DataType,
}

/// A group of ranks sharing one allocation: `ranks` deposit areas of `chunk_bytes`, then the
/// result area.
#[derive(Debug)]
pub struct Group<R> {
    /// Tenant the group belongs to.
    pub tenant: String,
    /// Its name.
    pub name: String,
    /// The allocation's handle.
    pub handle: u64,
    /// The allocation's pool offset.
    pub pool_offset: u64,
    /// Bytes per area.
    pub chunk_bytes: u64,
    /// The client attached as each rank.
    pub members: Vec<Option<u64>>,
    /// Set when an attached member left or died: every later round fails at once.
    pub broken: Option<String>,
    arrivals: Vec<Option<Arrival<R>>>,
}

/// What a completed (or failed) round asks the server to do.
#[derive(Debug, PartialEq)]
pub enum Outcome<R> {
    /// Not every rank has arrived yet.
    Waiting,
    /// Every rank agreed: reduce `count` elements, then answer everyone with success.
    Reduce {
        /// The operation.
        op: ReduceOp,
        /// The element type.
        dtype: DataType,
        /// Elements.
        count: u64,
        /// Everyone to answer.
        reply_to: Vec<R>,
    },
    /// Answer everyone with this error; no result is written.
    Fail {
        /// The status.
        status: Status,
        /// The cause.
        message: String,
        /// Everyone to answer.
        reply_to: Vec<R>,
    },
}

/// Every group on the server, by allocation handle and by (tenant, name).
#[derive(Debug)]
pub struct Reducer<R> {
    groups: HashMap<u64, Group<R>>,
    names: HashMap<(String, String), u64>,
}

impl<R> Default for Reducer<R> {
    fn default() -> Self {
        Reducer { groups: HashMap::new(), names: HashMap::new() }
    }
}

impl<R: Copy> Reducer<R> {
    /// The live group named `name` of `tenant`, if any.
    pub fn by_name(&self, tenant: &str, name: &str) -> Option<&Group<R>> {
        self.names.get(&(tenant.to_string(), name.to_string())).and_then(|h| self.groups.get(h))
    }

    /// Forgets a group (its allocation is gone).
    pub fn remove(&mut self, handle: u64) {
        if let Some(g) = self.groups.remove(&handle) {
            self.names.remove(&(g.tenant, g.name));
        }
    }

    /// Records a new group.
    pub fn insert(&mut self, tenant: &str, name: &str, handle: u64, pool_offset: u64, ranks: u32, chunk_bytes: u64) {
        let group = Group {
            tenant: tenant.into(),
            name: name.into(),
            handle,
            pool_offset,
            chunk_bytes,
            members: vec![None; ranks as usize],
            broken: None,
            arrivals: vec![None; ranks as usize],
        };
        self.names.insert((tenant.into(), name.into()), handle);
        self.groups.insert(handle, group);
    }

    /// The group with allocation `handle`.
    pub fn group_mut(&mut self, handle: u64) -> Option<&mut Group<R>> {
        self.groups.get_mut(&handle)
    }

    /// Records `rank`'s arrival. Errors concern the caller alone (answered at once); an
    /// [`Outcome`] concerns the whole round.
    pub fn arrive(
        &mut self,
        client: u64,
        handle: u64,
        rank: u32,
        a: Arrival<R>,
    ) -> Result<Outcome<R>, (Status, String)> {
        let group =
            self.groups.get_mut(&handle).ok_or((Status::UnknownHandle, format!("no allreduce group {handle}")))?;
        let slot = rank as usize;
        if group.members.get(slot).copied().flatten() != Some(client) {
            return Err((Status::InvalidArgument, format!("this client is not attached as rank {rank} of the group")));
        }
        if let Some(why) = &group.broken {
            return Err((Status::ReduceAborted, why.clone()));
        }
        if group.arrivals[slot].is_some() {
            return Err((Status::InvalidArgument, format!("rank {rank} arrived twice in one round")));
        }
        group.arrivals[slot] = Some(a);
        if group.arrivals.iter().any(Option::is_none) {
            return Ok(Outcome::Waiting);
        }
        let arrivals: Vec<Arrival<R>> = group.arrivals.iter_mut().map(|a| a.take().expect("all arrived")).collect();
        let reply_to = arrivals.iter().map(|a| a.reply_to).collect();
        let first = arrivals[0];
        let element_max = group.chunk_bytes / first.dtype.size() as u64;
        let disagreeing = arrivals.iter().enumerate().find(|(_, a)| {
            (a.seq, a.count, a.total, a.op, a.dtype) != (first.seq, first.count, first.total, first.op, first.dtype)
        });
        if let Some((r, a)) = disagreeing {
            let message = format!(
                "ranks disagree: rank 0 gave round {} of a {}-element {:?} vector for {:?}, rank {r} round {} of a {}-element {:?} vector for {:?}",
                first.seq, first.total, first.dtype, first.op, a.seq, a.total, a.dtype, a.op
            );
            return Ok(Outcome::Fail { status: Status::ReduceMismatch, message, reply_to });
        }
        if first.count > element_max {
            let message = format!("{} elements exceed the group's {} bytes per rank", first.count, group.chunk_bytes);
            return Ok(Outcome::Fail { status: Status::TooLarge, message, reply_to });
        }
        Ok(Outcome::Reduce { op: first.op, dtype: first.dtype, count: first.count, reply_to })
    }

    /// `client` left or died: every group it belongs to is broken, and the ranks waiting in
    /// a round of those groups must be told. Returns (reply address, message) pairs.
    pub fn member_gone(&mut self, client: u64) -> Vec<(R, String)> {
        let mut out = Vec::new();
        for group in self.groups.values_mut() {
            let Some(rank) = group.members.iter().position(|m| *m == Some(client)) else { continue };
            group.members[rank] = None;
            let why = format!("rank {rank} of allreduce group {:?} left or died", group.name);
            for waiting in group.arrivals.iter_mut().filter_map(Option::take) {
                out.push((waiting.reply_to, why.clone()));
            }
            group.broken = Some(why);
        }
        out
    }
}

/// Vectors at least this long are reduced by several threads.
pub const PARALLEL_BYTES_MIN: usize = 256 * 1024;

/// Reduces the `ranks` deposit areas into the result area (after the last deposit) of a
/// group whose memory starts at `base`.
///
/// # Safety
/// `base` must point to `(ranks + 1) * chunk_bytes` bytes of pool memory that no one else
/// writes during the call (the ranks wait for the round's answer), and `count * size <=
/// chunk_bytes`.
pub unsafe fn reduce_in_place(
    base: *mut u8,
    ranks: usize,
    chunk_bytes: usize,
    op: ReduceOp,
    dtype: DataType,
    count: u64,
) {
    let len = count as usize * dtype.size();
    // SAFETY: per the contract, the areas are disjoint, in bounds and not written by others.
    let deposits: Vec<&[u8]> =
        (0..ranks).map(|r| unsafe { std::slice::from_raw_parts(base.add(r * chunk_bytes), len) }).collect();
    let result = unsafe { std::slice::from_raw_parts_mut(base.add(ranks * chunk_bytes), len) };
    let threads =
        if len >= PARALLEL_BYTES_MIN { std::thread::available_parallelism().map_or(1, |n| n.get()).min(8) } else { 1 };
    // Split on element boundaries, a cache line multiple, so threads never share a line.
    let piece = len.div_ceil(threads).next_multiple_of(64);
    std::thread::scope(|scope| {
        for (i, out) in result.chunks_mut(piece.max(64)).enumerate() {
            let at = i * piece.max(64);
            let deposits = &deposits;
            let mut work = move || {
                out.copy_from_slice(&deposits[0][at..at + out.len()]);
                for d in &deposits[1..] {
                    combine(op, dtype, out, &d[at..at + out.len()]);
                }
            };
            if threads == 1 {
                work();
            } else {
                scope.spawn(work);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(reply_to: u32, count: u64, dtype: DataType) -> Arrival<u32> {
        Arrival { reply_to, seq: 1, count, total: count, op: ReduceOp::Sum, dtype }
    }

    fn group() -> Reducer<u32> {
        let mut r = Reducer::default();
        r.insert("t", "g", 7, 0, 3, 64);
        r.group_mut(7).unwrap().members = vec![Some(10), Some(11), Some(12)];
        r
    }

    #[test]
    fn a_round_completes_when_every_rank_agrees() {
        let mut r = group();
        assert_eq!(r.arrive(10, 7, 0, arrival(0, 4, DataType::I32)).unwrap(), Outcome::Waiting);
        assert_eq!(r.arrive(11, 7, 1, arrival(1, 4, DataType::I32)).unwrap(), Outcome::Waiting);
        assert!(r.arrive(11, 7, 1, arrival(1, 4, DataType::I32)).is_err(), "twice in one round");
        assert!(r.arrive(10, 7, 2, arrival(2, 4, DataType::I32)).is_err(), "not rank 2");
        let done = r.arrive(12, 7, 2, arrival(2, 4, DataType::I32)).unwrap();
        assert_eq!(
            done,
            Outcome::Reduce { op: ReduceOp::Sum, dtype: DataType::I32, count: 4, reply_to: vec![0, 1, 2] }
        );
    }

    #[test]
    fn disagreement_fails_every_rank_and_a_departure_breaks_the_group() {
        let mut r = group();
        r.arrive(10, 7, 0, arrival(0, 4, DataType::I32)).unwrap();
        r.arrive(11, 7, 1, arrival(1, 5, DataType::I32)).unwrap();
        let Outcome::Fail { status, reply_to, .. } = r.arrive(12, 7, 2, arrival(2, 4, DataType::F32)).unwrap() else {
            panic!("mismatch must fail")
        };
        assert_eq!((status, reply_to), (Status::ReduceMismatch, vec![0, 1, 2]));
        r.arrive(10, 7, 0, arrival(0, 4, DataType::I32)).unwrap();
        let told = r.member_gone(12);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].0, 0);
        assert_eq!(r.arrive(11, 7, 1, arrival(1, 4, DataType::I32)).unwrap_err().0, Status::ReduceAborted);
    }

    #[test]
    fn reduces_in_place_with_one_or_many_threads() {
        for count in [3usize, PARALLEL_BYTES_MIN / 4 + 5] {
            let chunk = (count * 4).next_multiple_of(64);
            let mut memory = vec![0u8; 4 * chunk];
            for r in 0..3 {
                for i in 0..count {
                    let v = (i as i32) * (r as i32 + 1);
                    memory[r * chunk + 4 * i..r * chunk + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            unsafe { reduce_in_place(memory.as_mut_ptr(), 3, chunk, ReduceOp::Sum, DataType::I32, count as u64) };
            for i in 0..count {
                let got = i32::from_le_bytes(memory[3 * chunk + 4 * i..3 * chunk + 4 * i + 4].try_into().unwrap());
                assert_eq!(got, 6 * i as i32, "element {i} of {count}");
            }
        }
    }
}
