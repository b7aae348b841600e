//! Allreduce at the memory server: the operations, element types, and the reduction kernel
//! both the server (which reduces) and tests (which check it against a local reduction) use.

/// A reduction operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReduceOp {
    /// Elementwise sum (wrapping for integers, IEEE addition in rank order for floats).
    Sum = 1,
    /// Elementwise minimum.
    Min = 2,
    /// Elementwise maximum.
    Max = 3,
}

/// An element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataType {
    /// `int32_t`.
    I32 = 1,
    /// `int64_t`.
    I64 = 2,
    /// `float`.
    F32 = 3,
    /// `double`.
    F64 = 4,
}

impl ReduceOp {
    /// Every operation.
    pub const ALL: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max];
    /// From its wire code.
    pub fn from_code(code: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|o| *o as u8 == code)
    }
}

impl DataType {
    /// Every type.
    pub const ALL: [DataType; 4] = [DataType::I32, DataType::I64, DataType::F32, DataType::F64];
    /// From its wire code.
    pub fn from_code(code: u8) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| *t as u8 == code)
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::I32 | DataType::F32 => 4,
            DataType::I64 | DataType::F64 => 8,
        }
    }
}

macro_rules! fold {
    ($acc:expr, $src:expr, $t:ty, $op:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (a, s) in $acc.chunks_exact_mut(N).zip($src.chunks_exact(N)) {
            let x = <$t>::from_le_bytes(a.try_into().unwrap());
            let y = <$t>::from_le_bytes(s.try_into().unwrap());
            let r: $t = $op(x, y);
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

/// `acc[i] = op(acc[i], src[i])` over little-endian elements of `dtype`. Both slices have
/// the same length, a multiple of the element size (asserted: callers check their input).
pub fn combine(op: ReduceOp, dtype: DataType, acc: &mut [u8], src: &[u8]) {
    assert!(acc.len() == src.len() && acc.len().is_multiple_of(dtype.size()), "combine of unequal vectors");
    match (dtype, op) {
        (DataType::I32, ReduceOp::Sum) => fold!(acc, src, i32, i32::wrapping_add),
        (DataType::I32, ReduceOp::Min) => fold!(acc, src, i32, std::cmp::min),
        (DataType::I32, ReduceOp::Max) => fold!(acc, src, i32, std::cmp::max),
        (DataType::I64, ReduceOp::Sum) => fold!(acc, src, i64, i64::wrapping_add),
        (DataType::I64, ReduceOp::Min) => fold!(acc, src, i64, std::cmp::min),
        (DataType::I64, ReduceOp::Max) => fold!(acc, src, i64, std::cmp::max),
        (DataType::F32, ReduceOp::Sum) => fold!(acc, src, f32, |x: f32, y: f32| x + y),
        (DataType::F32, ReduceOp::Min) => fold!(acc, src, f32, f32::min),
        (DataType::F32, ReduceOp::Max) => fold!(acc, src, f32, f32::max),
        (DataType::F64, ReduceOp::Sum) => fold!(acc, src, f64, |x: f64, y: f64| x + y),
        (DataType::F64, ReduceOp::Min) => fold!(acc, src, f64, f64::min),
        (DataType::F64, ReduceOp::Max) => fold!(acc, src, f64, f64::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combines_every_op_and_type() {
        let a: Vec<u8> = [3i32, -7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let b: Vec<u8> = [5i32, -9].iter().flat_map(|v| v.to_le_bytes()).collect();
        for (op, want) in [(ReduceOp::Sum, [8, -16]), (ReduceOp::Min, [3, -9]), (ReduceOp::Max, [5, -7])] {
            let mut acc = a.clone();
            combine(op, DataType::I32, &mut acc, &b);
            let got: Vec<i32> = acc.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
            assert_eq!(got, want, "{op:?}");
        }
        let mut acc = 1.5f64.to_le_bytes().to_vec();
        combine(ReduceOp::Sum, DataType::F64, &mut acc, &2.25f64.to_le_bytes());
        assert_eq!(f64::from_le_bytes(acc.try_into().unwrap()), 3.75);
        assert_eq!(DataType::from_code(4), Some(DataType::F64));
        assert_eq!(ReduceOp::from_code(0), None);
    }
}

/// The byte layout of an allreduce group's memory at the server (one allocation):
///
/// ```text
///   0..8     result    u64: (round << 8) | status code of the last finished round; written
///                           by the server, polled by the ranks (round 2^56-1: aborted for good)
///   8..16    arrived   u64: arrivals so far, over all rounds (fetch-and-add by the ranks)
///   16..24   asleep    u64: 1 while the server sleeps; the last rank of a round then wakes
///                           it with a ReduceKick message
///   24..32   claimed   u64: the last round someone took on to reduce (compare-and-swap from
///                           round - 1 to round, by the server or by the round's last rank)
///   32..40   broken   u64: 0, or the first round that fails because a member left between
///                           rounds (the rounds before it finished and keep their results)
///   40..64   reserved
///   64..     descriptors, 32 bytes per rank: round u64, count u64, total u64,
///            op u8, dtype u8, 6 bytes zero
///   then (64-byte aligned) one deposit area of chunk_bytes per rank, then the result area
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLayout {
    /// Ranks in the group.
    pub ranks: u32,
    /// Bytes of each deposit area and of the result area.
    pub chunk_bytes: u64,
}

/// Offset of the result word.
pub const GROUP_RESULT_AT: u64 = 0;
/// Offset of the arrival counter.
pub const GROUP_ARRIVED_AT: u64 = 8;
/// Offset of the server-asleep flag.
pub const GROUP_ASLEEP_AT: u64 = 16;
/// Offset of the claim word: whoever moves it from `round - 1` to `round` reduces `round`.
pub const GROUP_CLAIMED_AT: u64 = 24;
/// Offset of the broken word: a member that leaves while no round is in progress does not
/// overwrite the last round's result (slower ranks may still be reading it) but names the
/// first round that fails here.
pub const GROUP_BROKEN_AT: u64 = 32;
/// Offset of the first rank descriptor.
pub const GROUP_DESCRIPTORS_AT: u64 = 64;
/// Bytes of one rank descriptor.
pub const GROUP_DESCRIPTOR_LEN: u64 = 32;
/// The round number in a result word that means "aborted, now and for every later round".
pub const ROUND_ABORTED: u64 = u64::MAX >> 8;

/// What whoever reduces a round must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Reduce `count` elements and publish success.
    Reduce {
        /// The operation.
        op: ReduceOp,
        /// The element type.
        dtype: DataType,
        /// Elements.
        count: u64,
    },
    /// Publish this status; write no result.
    Fail(crate::Status),
}

/// Whether the descriptors of round `round` agree and fit the group. Peer input: checked
/// field by field, never trusted (by the server, and by a rank that reduces a round itself).
pub fn judge(layout: GroupLayout, round: u64, descriptors: &[Descriptor]) -> Verdict {
    use crate::Status;
    let first = descriptors[0];
    if descriptors.iter().any(|d| *d != first) || first.round != round {
        return Verdict::Fail(Status::ReduceMismatch);
    }
    let (Some(op), Some(dtype)) = (ReduceOp::from_code(first.op), DataType::from_code(first.dtype)) else {
        return Verdict::Fail(Status::InvalidArgument);
    };
    if first.count > layout.chunk_bytes / dtype.size() as u64 || first.count > first.total {
        return Verdict::Fail(Status::TooLarge);
    }
    Verdict::Reduce { op, dtype, count: first.count }
}

/// One rank's description of its deposit for a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Round number (1, 2, ...).
    pub round: u64,
    /// Elements deposited this round.
    pub count: u64,
    /// Elements of the whole vector.
    pub total: u64,
    /// Operation code ([`ReduceOp`]).
    pub op: u8,
    /// Element type code ([`DataType`]).
    pub dtype: u8,
}

impl Descriptor {
    /// The 32 bytes.
    pub fn encode(&self) -> [u8; GROUP_DESCRIPTOR_LEN as usize] {
        let mut b = [0u8; GROUP_DESCRIPTOR_LEN as usize];
        b[0..8].copy_from_slice(&self.round.to_le_bytes());
        b[8..16].copy_from_slice(&self.count.to_le_bytes());
        b[16..24].copy_from_slice(&self.total.to_le_bytes());
        b[24] = self.op;
        b[25] = self.dtype;
        b
    }
    /// From the 32 bytes (codes are not checked here: the server checks them).
    pub fn decode(b: &[u8; GROUP_DESCRIPTOR_LEN as usize]) -> Descriptor {
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        Descriptor { round: word(0), count: word(8), total: word(16), op: b[24], dtype: b[25] }
    }
}

impl GroupLayout {
    /// Offset of `rank`'s descriptor.
    pub fn descriptor_at(self, rank: u32) -> u64 {
        GROUP_DESCRIPTORS_AT + rank as u64 * GROUP_DESCRIPTOR_LEN
    }
    /// Offset of the first deposit area.
    pub fn data_at(self) -> u64 {
        self.descriptor_at(self.ranks).next_multiple_of(64)
    }
    /// Offset of `rank`'s deposit area.
    pub fn deposit_at(self, rank: u32) -> u64 {
        self.data_at() + rank as u64 * self.chunk_bytes
    }
    /// Offset of the result area.
    pub fn result_data_at(self) -> u64 {
        self.deposit_at(self.ranks)
    }
    /// Bytes of the whole group memory.
    pub fn total_len(self) -> u64 {
        self.result_data_at() + self.chunk_bytes
    }
    /// A result word.
    pub fn result_word(round: u64, status: crate::Status) -> u64 {
        round << 8 | status.code() as u64
    }
}
