//! Segments of a rank's zero-padded data, as the XOR and Reed-Solomon sets cut them.

use super::xor_into;

/// A rank's data seen as consecutive segments of `segment` bytes, zero-padded past its end.
pub(crate) struct Segments<'a> {
    data: &'a [u8],
    segment: usize,
}

impl<'a> Segments<'a> {
    pub(crate) fn new(data: &'a [u8], segment: usize) -> Self {
        Segments { data, segment }
    }

    fn range(&self, k: usize, offset: usize, len: usize) -> (usize, usize) {
        let start = (k * self.segment + offset).min(self.data.len());
        let end = (k * self.segment + offset + len).min(self.data.len());
        (start, end)
    }

    /// Bytes `offset..offset+len` of segment `k`, borrowed when no padding is involved.
    pub(crate) fn borrow(&self, k: usize, offset: usize, len: usize) -> Option<&'a [u8]> {
        let (start, end) = self.range(k, offset, len);
        (end - start == len).then(|| &self.data[start..end])
    }

    /// The same bytes as a slice: borrowed from the data, or copied into `scratch` with the
    /// zero padding.
    pub(crate) fn get<'s>(&self, k: usize, offset: usize, len: usize, scratch: &'s mut [u8]) -> &'s [u8]
    where
        'a: 's,
    {
        if let Some(s) = self.borrow(k, offset, len) {
            return s;
        }
        let (start, end) = self.range(k, offset, len);
        let have = end - start;
        scratch[..have].copy_from_slice(&self.data[start..end]);
        scratch[have..len].fill(0);
        &scratch[..len]
    }

    /// `buf ^= ` those bytes (padding is zero and needs no work).
    pub(crate) fn xor_into(&self, k: usize, offset: usize, buf: &mut [u8]) {
        let (start, end) = self.range(k, offset, buf.len());
        xor_into(&mut buf[..end - start], &self.data[start..end]);
    }
}

/// Copies `src` (a block of segment `k` at `offset`) into `out`, a rank's data of its true
/// size: the part that falls into the padding is dropped.
pub(crate) fn place(out: &mut [u8], segment: usize, k: usize, offset: usize, src: &[u8]) {
    let start = (k * segment + offset).min(out.len());
    let end = (k * segment + offset + src.len()).min(out.len());
    out[start..end].copy_from_slice(&src[..end - start]);
}

/// The block ranges `(offset, len)` that cover `total` bytes in blocks of `block`.
pub(crate) fn blocks(total: usize, block: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..total).step_by(block.max(1)).map(move |o| (o, block.min(total - o)))
}
