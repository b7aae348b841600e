//! The allreduce engine (the allreduce accelerator of Ploumidis et al. 2023 §4.7, in software). A group
//! is an allocation laid out as [`GroupLayout`]: ranks put their vectors and a descriptor
//! one-sided, then add one to the group's arrival counter; the server, polling the counters
//! of its groups while it spins (and woken by a `ReduceKick` from the last rank when it
//! sleeps), checks that the descriptors agree, reduces (several threads for long vectors)
//! into the result area and publishes the round's status in the result word the ranks poll.
//! This file is the bookkeeping and the kernel; [`engine`] serves the groups from the
//! server's progress loop.

mod engine;

use crate::constants::{CACHE_LINE_BYTES, REDUCE_PARALLEL_BYTES_MIN as PARALLEL_BYTES_MIN, REDUCE_THREADS_MAX};
pub(crate) use engine::ReduceEngine;
use nam_proto::reduce::{combine, DataType, GroupLayout, ReduceOp, ROUND_ABORTED};
pub(crate) use nam_proto::reduce::{judge, Verdict};
use nam_proto::Status;
use std::collections::HashMap;

/// A group of ranks sharing one allocation.
#[derive(Debug)]
pub(crate) struct Group {
    /// Tenant the group belongs to.
    pub(crate) tenant: String,
    /// Its name.
    pub(crate) name: String,
    /// The allocation's handle.
    pub(crate) handle: u64,
    /// The allocation's pool offset.
    pub(crate) pool_offset: u64,
    /// Its geometry.
    pub(crate) layout: GroupLayout,
    /// The client attached as each rank.
    pub(crate) members: Vec<Option<u64>>,
    /// Rounds finished (successfully or not).
    pub(crate) done: u64,
    /// Set when an attached member left or died: every round fails from then on.
    pub(crate) broken: bool,
}

/// Every group on the server, by allocation handle and by (tenant, name).
#[derive(Debug, Default)]
pub(crate) struct Reducer {
    groups: HashMap<u64, Group>,
    names: HashMap<(String, String), u64>,
}

impl Reducer {
    /// The group named `name` of `tenant`, if any.
    pub(crate) fn by_name(&self, tenant: &str, name: &str) -> Option<&Group> {
        self.names.get(&(tenant.to_string(), name.to_string())).and_then(|h| self.groups.get(h))
    }

    /// Forgets a group (its allocation is gone).
    pub(crate) fn remove(&mut self, handle: u64) {
        if let Some(g) = self.groups.remove(&handle) {
            self.names.remove(&(g.tenant, g.name));
        }
    }

    /// Records a new group.
    pub(crate) fn insert(&mut self, tenant: &str, name: &str, handle: u64, pool_offset: u64, layout: GroupLayout) {
        let group = Group {
            tenant: tenant.into(),
            name: name.into(),
            handle,
            pool_offset,
            layout,
            members: vec![None; layout.ranks as usize],
            done: 0,
            broken: false,
        };
        self.names.insert((tenant.into(), name.into()), handle);
        self.groups.insert(handle, group);
    }

    /// The group with allocation `handle`.
    pub(crate) fn group_mut(&mut self, handle: u64) -> Option<&mut Group> {
        self.groups.get_mut(&handle)
    }

    /// Every group.
    pub(crate) fn groups_mut(&mut self) -> impl Iterator<Item = &mut Group> {
        self.groups.values_mut()
    }

    /// `client` left or died: the groups it belongs to break. Returns their pool offsets,
    /// where the server publishes the abort, and their rank counts.
    pub(crate) fn member_gone(&mut self, client: u64) -> Vec<(u64, u64)> {
        let mut broken = Vec::new();
        for group in self.groups.values_mut() {
            let Some(rank) = group.members.iter().position(|m| *m == Some(client)) else { continue };
            group.members[rank] = None;
            group.broken = true;
            log::info!("rank {rank} of allreduce group {:?} left or died: its rounds fail", group.name);
            broken.push((group.pool_offset, u64::from(group.layout.ranks)));
        }
        broken
    }
}

/// The result word that aborts every round.
pub(crate) fn aborted_word() -> u64 {
    GroupLayout::result_word(ROUND_ABORTED, Status::ReduceAborted)
}

/// Reduces the `ranks` deposit areas (`chunk_bytes` apart, starting at `deposits`) into
/// `result`.
///
/// # Safety
/// `deposits` must point to `ranks * chunk_bytes` bytes and `result` to `count * size`
/// bytes, disjoint, that no one else writes during the call (the ranks wait for the
/// round's result word), and `count * size <= chunk_bytes`.
pub(crate) unsafe fn reduce_into(
    deposits: *const u8,
    result: *mut u8,
    ranks: usize,
    chunk_bytes: usize,
    op: ReduceOp,
    dtype: DataType,
    count: u64,
) {
    let len = count as usize * dtype.size();
    // SAFETY: per the contract, the areas are disjoint, in bounds and not written by others.
    let deposits: Vec<&[u8]> =
        (0..ranks).map(|r| unsafe { std::slice::from_raw_parts(deposits.add(r * chunk_bytes), len) }).collect();
    let result = unsafe { std::slice::from_raw_parts_mut(result, len) };
    let threads = if len >= PARALLEL_BYTES_MIN {
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(REDUCE_THREADS_MAX)
    } else {
        1
    };
    // Split on a cache-line multiple (a multiple of every element size): no shared lines.
    let piece = len.div_ceil(threads).next_multiple_of(CACHE_LINE_BYTES).max(CACHE_LINE_BYTES);
    std::thread::scope(|scope| {
        for (i, out) in result.chunks_mut(piece).enumerate() {
            let at = i * piece;
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
    use nam_proto::reduce::Descriptor;

    fn descriptor(count: u64, dtype: DataType) -> Descriptor {
        Descriptor { round: 1, count, total: count, op: ReduceOp::Sum as u8, dtype: dtype as u8 }
    }

    #[test]
    fn agreeing_ranks_reduce_and_any_disagreement_fails() {
        let layout = GroupLayout { ranks: 3, chunk_bytes: 64 };
        let same = [descriptor(4, DataType::I32); 3];
        assert_eq!(judge(layout, 1, &same), Verdict::Reduce { op: ReduceOp::Sum, dtype: DataType::I32, count: 4 });
        let mut longer = same;
        longer[2].total = 5;
        assert_eq!(judge(layout, 1, &longer), Verdict::Fail(Status::ReduceMismatch));
        assert_eq!(judge(layout, 2, &same), Verdict::Fail(Status::ReduceMismatch), "wrong round");
        assert_eq!(judge(layout, 1, &[descriptor(17, DataType::I32); 3]), Verdict::Fail(Status::TooLarge));
        let mut bad = [descriptor(4, DataType::I32); 3];
        bad.iter_mut().for_each(|d| d.op = 9);
        assert_eq!(judge(layout, 1, &bad), Verdict::Fail(Status::InvalidArgument));
    }

    #[test]
    fn a_departure_breaks_only_its_groups() {
        let mut r = Reducer::default();
        r.insert("t", "a", 7, 0, GroupLayout { ranks: 2, chunk_bytes: 64 });
        r.insert("t", "b", 8, 4096, GroupLayout { ranks: 2, chunk_bytes: 64 });
        r.group_mut(7).unwrap().members = vec![Some(10), Some(11)];
        r.group_mut(8).unwrap().members = vec![Some(12), Some(13)];
        assert_eq!(r.member_gone(11), vec![(0, 2)]);
        assert!(r.group_mut(7).unwrap().broken && !r.group_mut(8).unwrap().broken);
        assert_eq!(aborted_word() & 0xff, Status::ReduceAborted.code() as u64);
    }

    #[test]
    fn reduces_with_one_or_many_threads() {
        for count in [3usize, PARALLEL_BYTES_MIN / 4 + 5] {
            let chunk = (count * 4).next_multiple_of(64);
            let mut deposits = vec![0u8; 3 * chunk];
            for r in 0..3 {
                for i in 0..count {
                    let v = (i as i32) * (r as i32 + 1);
                    deposits[r * chunk + 4 * i..r * chunk + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            let mut result = vec![0u8; count * 4];
            unsafe {
                reduce_into(
                    deposits.as_ptr(),
                    result.as_mut_ptr(),
                    3,
                    chunk,
                    ReduceOp::Sum,
                    DataType::I32,
                    count as u64,
                )
            };
            for i in 0..count {
                let got = i32::from_le_bytes(result[4 * i..4 * i + 4].try_into().unwrap());
                assert_eq!(got, 6 * i as i32, "element {i} of {count}");
            }
        }
    }
}
