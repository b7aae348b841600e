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
