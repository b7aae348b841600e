//! Predicting which read misses will be written: a per-zone saturating counter.
//!
//! A page fetched for a read is installed write-protected, so that only pages written since
//! they were fetched are written back. In programs that write most pages they read (memcached
//! bumps an item's reference count right after finding it, and relinks its LRU neighbours),
//! that costs a second fault per miss, the write-protect fault, which in thread mode is a
//! full round trip through the handler, as dear as the miss itself. Installing such pages
//! writable (and dirty) trades that fault for a write-back at eviction, one span write, which
//! costs far less over shared memory and is paid only for pages that are evicted.
//!
//! Whether reads are followed by writes depends on the data structure, so the predictor
//! keeps a 2-bit saturating counter per zone of [`ZONE_BYTES`] (1 MiB: memcached's
//! slab pages, or distinct arrays of a loop such as SAXPY's read-only `x` and updated `y`),
//! like a bimodal branch predictor: a write fault on a clean page counts up, a clean page
//! evicted without having been written counts down, and a read miss in a zone whose counter
//! is in the upper half is installed writable. One in [`SAMPLE_EVERY`] such misses is still
//! installed write-protected, so that the counter keeps learning when the zone's use changes.

use crate::constants::{SAMPLE_EVERY, ZONE_BYTES};

const MAX: u8 = 3;
const WRITABLE_FROM: u8 = 2;

/// The per-zone counters of one region.
#[derive(Debug, Clone)]
pub struct WritePredictor {
    counters: Vec<u8>,
    /// Pages per zone.
    zone_pages: u64,
    predicted: u32,
    enabled: bool,
}

impl WritePredictor {
    /// A predictor for a region of `pages` pages; every zone starts predicting read-only.
    pub fn new(pages: u64, page_bytes: u64, enabled: bool) -> WritePredictor {
        let zone_pages = (ZONE_BYTES / page_bytes).max(1);
        let zones = if enabled { pages.div_ceil(zone_pages) as usize } else { 0 };
        WritePredictor { counters: vec![0; zones], zone_pages, predicted: 0, enabled }
    }

    /// A read-installed (clean) page was written.
    pub fn written(&mut self, page: u64) {
        if let Some(c) = self.counters.get_mut((page / self.zone_pages) as usize) {
            *c = (*c + 1).min(MAX);
        }
    }

    /// A clean page left local memory without having been written.
    pub fn unwritten(&mut self, page: u64) {
        if let Some(c) = self.counters.get_mut((page / self.zone_pages) as usize) {
            *c = c.saturating_sub(1);
        }
    }

    /// Whether a read miss of `page` should be installed writable (and dirty).
    pub fn install_writable(&mut self, page: u64) -> bool {
        if !self.enabled || self.counters.get((page / self.zone_pages) as usize).is_none_or(|&c| c < WRITABLE_FROM) {
            return false;
        }
        self.predicted = self.predicted.wrapping_add(1);
        !self.predicted.is_multiple_of(SAMPLE_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of 4 KiB per zone.
    const ZONE_PAGES: u64 = ZONE_BYTES / 4096;

    #[test]
    fn a_zone_written_after_reads_installs_writable_except_samples() {
        let mut p = WritePredictor::new(4 * ZONE_PAGES, 4096, true);
        assert!(!p.install_writable(10), "starts read-only");
        p.written(10);
        assert!(!p.install_writable(11), "one write is not a pattern");
        p.written(12);
        let writable = (0..SAMPLE_EVERY * 4).filter(|i| p.install_writable(20 + *i as u64)).count();
        assert_eq!(writable, (SAMPLE_EVERY as usize - 1) * 4, "all but one in SAMPLE_EVERY");
        // Other zones are unaffected.
        assert!(!p.install_writable(ZONE_PAGES + 1));
        assert!(!p.install_writable(3 * ZONE_PAGES));
    }

    #[test]
    fn clean_evictions_turn_a_zone_back_to_read_only() {
        let mut p = WritePredictor::new(ZONE_PAGES, 4096, true);
        for _ in 0..10 {
            p.written(1);
        }
        assert!(p.install_writable(2) || p.install_writable(3));
        // Saturated at 3: two unwritten evictions bring it below the threshold.
        p.unwritten(4);
        assert!(p.install_writable(5) || p.install_writable(6), "still writable after one");
        p.unwritten(4);
        assert!(!p.install_writable(7), "read-only after two");
    }

    #[test]
    fn disabled_or_out_of_range_never_predicts() {
        let mut p = WritePredictor::new(ZONE_PAGES, 4096, false);
        p.written(0);
        p.written(0);
        assert!(!p.install_writable(0));
        let mut p = WritePredictor::new(ZONE_PAGES, 4096, true);
        p.written(ZONE_PAGES * 9); // beyond the region: ignored
        p.unwritten(ZONE_PAGES * 9);
        assert!(!p.install_writable(ZONE_PAGES * 9));
    }
}
