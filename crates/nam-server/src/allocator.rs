//! First-fit range allocator over the pool's offsets, with alignment and coalescing.

use std::collections::BTreeMap;

/// Hands out disjoint `[offset, offset + size)` ranges of `[0, capacity)`.
///
/// Free ranges are kept in a map from offset to length and merged with their neighbours
/// on release, so fragmentation stays bounded by the allocation pattern, not by history.
#[derive(Debug, Clone)]
pub(crate) struct RangeAllocator {
    capacity: u64,
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
}

impl RangeAllocator {
    /// An allocator whose whole capacity is free.
    pub(crate) fn new(capacity: u64) -> RangeAllocator {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        RangeAllocator { capacity, free, free_bytes: capacity }
    }

    /// Total bytes managed.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes not allocated.
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// The longest free run.
    pub(crate) fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Allocates `size` bytes at an offset that is a multiple of `align` (a power of two).
    /// Returns `None` when no free range fits.
    pub(crate) fn allocate(&mut self, size: u64, align: u64) -> Option<u64> {
        assert!(size > 0 && align.is_power_of_two());
        let (start, len, offset) = self.free.iter().find_map(|(&start, &len)| {
            let offset = start.checked_add(align - 1)? & !(align - 1);
            let end = offset.checked_add(size)?;
            (end <= start + len).then_some((start, len, offset))
        })?;
        self.free.remove(&start);
        if offset > start {
            self.free.insert(start, offset - start);
        }
        let end = offset + size;
        if end < start + len {
            self.free.insert(end, start + len - end);
        }
        self.free_bytes -= size;
        Some(offset)
    }

    /// Marks `[offset, offset + size)` as allocated (used when reloading a manifest).
    /// Returns `false` if any of it is not free.
    pub(crate) fn reserve(&mut self, offset: u64, size: u64) -> bool {
        let Some((&start, &len)) = self.free.range(..=offset).next_back() else {
            return false;
        };
        let Some(end) = offset.checked_add(size) else {
            return false;
        };
        if size == 0 || end > start + len {
            return false;
        }
        self.free.remove(&start);
        if offset > start {
            self.free.insert(start, offset - start);
        }
        if end < start + len {
            self.free.insert(end, start + len - end);
        }
        self.free_bytes -= size;
        true
    }

    /// Returns a range obtained from [`RangeAllocator::allocate`] or `reserve`.
    pub(crate) fn release(&mut self, offset: u64, size: u64) {
        assert!(size > 0 && offset + size <= self.capacity, "release out of range");
        let mut start = offset;
        let mut len = size;
        if let Some((&prev, &prev_len)) = self.free.range(..offset).next_back() {
            assert!(prev + prev_len <= offset, "double release of {offset}");
            if prev + prev_len == offset {
                self.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some((&next, &next_len)) = self.free.range(offset..).next() {
            assert!(offset + size <= next, "double release of {offset}");
            if offset + size == next {
                self.free.remove(&next);
                len += next_len;
            }
        }
        self.free.insert(start, len);
        self.free_bytes += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Model-based check: random allocate/release sequences against a byte map.
    #[test]
    fn random_sequences_match_a_byte_model() {
        for seed in 0..20u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let capacity = 1 << 16;
            let mut alloc = RangeAllocator::new(capacity);
            let mut owner = vec![false; capacity as usize];
            let mut live: Vec<(u64, u64)> = Vec::new();
            for _ in 0..2000 {
                if rng.gen_bool(0.55) {
                    let size = rng.gen_range(1..4096);
                    let align = 1 << rng.gen_range(0..10);
                    if let Some(off) = alloc.allocate(size, align) {
                        assert_eq!(off % align, 0);
                        for b in off..off + size {
                            assert!(!owner[b as usize], "overlap at {b}");
                            owner[b as usize] = true;
                        }
                        live.push((off, size));
                    }
                } else if !live.is_empty() {
                    let (off, size) = live.swap_remove(rng.gen_range(0..live.len()));
                    alloc.release(off, size);
                    for b in off..off + size {
                        owner[b as usize] = false;
                    }
                }
                let used: u64 = live.iter().map(|l| l.1).sum();
                assert_eq!(alloc.free_bytes(), capacity - used);
            }
            for (off, size) in live.drain(..) {
                alloc.release(off, size);
            }
            assert_eq!(alloc.free.len(), 1, "free ranges must coalesce back to one");
        }
    }

    #[test]
    fn reserve_and_exhaustion() {
        let mut a = RangeAllocator::new(1024);
        assert!(a.reserve(256, 256));
        assert!(!a.reserve(300, 10));
        assert_eq!(a.allocate(512, 512), Some(512));
        assert_eq!(a.allocate(256, 1), Some(0));
        assert_eq!(a.allocate(1, 1), None);
    }
}
