//! Where a region's bytes sit in pages and 64-byte lines. Regions need not be page
//! aligned: page `k` of a region is the k-th VM page its bytes touch, and every page and line
//! is clipped to the region, so restart places bytes by region offset, not by address.

use std::ops::Range;

/// VM page size this engine tracks (x86-64 and most aarch64 kernels).
pub const PAGE_BYTES: usize = 4096;
/// Change-detection granularity inside a page: a cache line.
pub const LINE_BYTES: usize = 64;
/// Lines per page; one bit each in a 64-bit bitmap.
pub const LINES_PER_PAGE: usize = PAGE_BYTES / LINE_BYTES;

/// A region's placement relative to page boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes between the start of the first page and the region's first byte.
    pub lead: usize,
    /// The region's length in bytes.
    pub len: usize,
}

impl Geometry {
    /// The geometry of `[addr, addr + len)`.
    pub fn of(addr: usize, len: usize) -> Geometry {
        Geometry { lead: addr % PAGE_BYTES, len }
    }

    /// Number of VM pages the region touches.
    pub fn pages(&self) -> usize {
        (self.lead + self.len).div_ceil(PAGE_BYTES)
    }

    /// Region byte range covered by page `page`.
    pub fn page_range(&self, page: usize) -> Range<usize> {
        self.clip(page * PAGE_BYTES, PAGE_BYTES)
    }

    /// Region byte range covered by line `line` of page `page` (may be empty at the edges).
    pub fn line_range(&self, page: usize, line: usize) -> Range<usize> {
        self.clip(page * PAGE_BYTES + line * LINE_BYTES, LINE_BYTES)
    }

    /// Bitmap of the lines of `page` that hold region bytes.
    pub fn lines_present(&self, page: usize) -> u64 {
        (0..LINES_PER_PAGE).filter(|&l| !self.line_range(page, l).is_empty()).fold(0, |m, l| m | (1u64 << l))
    }

    fn clip(&self, page_relative: usize, len: usize) -> Range<usize> {
        let start = page_relative.saturating_sub(self.lead).min(self.len);
        let end = (page_relative + len).saturating_sub(self.lead).min(self.len);
        start..end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_region_is_clipped() {
        let g = Geometry { lead: 100, len: 5000 };
        assert_eq!(g.pages(), 2);
        assert_eq!(g.page_range(0), 0..3996);
        assert_eq!(g.page_range(1), 3996..5000);
        assert_eq!(g.line_range(0, 0), 0..0);
        assert_eq!(g.line_range(0, 1), 0..28);
        assert_eq!(g.lines_present(0) & 1, 0);
        let total: usize = (0..g.pages()).map(|p| g.page_range(p).len()).sum();
        assert_eq!(total, 5000);
    }
}
