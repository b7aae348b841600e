//! Per-tenant arenas (protection domains in memory, not only in bookkeeping): every tenant's
//! allocations live in segments of the pool that hold nothing of any other tenant, each
//! segment mapped and registered with UCX on its own with its own remote key, so a client
//! is handed keys (and, over shared memory, mappings) of its own tenant's memory only.
//!
//! The pool's offsets form one address space, `[0, capacity)`: a file-backed pool's file
//! offsets, or a space of the server's own for a UCX-allocated pool. Segments are carved out
//! of it page-aligned ([`Manager`]'s `space`) when a tenant's arena has no room, and never
//! move: growing an arena adds a segment and leaves the live allocations where they are.
//! The bookkeeping here is pure; the pool maps a segment when the manager asks its
//! [`SegmentMapper`].
//!
//! Alignment waste is the tenant's: an allocation aligned to `align` takes a block of
//! `size + align - ALIGN_MIN` bytes of its arena (the most padding that alignment can need in
//! front of it) and is charged that to its quota, and an arena never holds more than its
//! tenant's quota. A tenant that scatters small, widely aligned allocations spends its own
//! quota; it cannot take pool space another tenant's quota promises.

use super::{refuse, Manager, Refusal};
use crate::allocator::RangeAllocator;
use crate::constants::{ARENA_GROWTH_MAX_BYTES, ARENA_SEGMENTS_MAX, ARENA_SEGMENT_MIN_BYTES, PAGE_BYTES};
use nam_proto::limits::ALIGN_MIN;
use nam_proto::size::format_size;
use nam_proto::Status;
use serde::{Deserialize, Serialize};

/// Maps the segments the manager carves out of the pool's address space.
pub(crate) trait SegmentMapper {
    /// Maps and registers `[base, base + len)` of the pool for `tenant` alone; an error says
    /// why it could not (the manager then gives the range back and refuses the allocation).
    fn map(&self, tenant: &str, base: u64, len: u64) -> Result<(), String>;

    /// Unmaps the segment at `base`, which holds no live allocation.
    fn unmap(&self, base: u64);
}

/// One segment of a tenant's arena, as recorded in the manifest of a file-backed pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRecord {
    /// Owning tenant.
    pub tenant: String,
    /// First byte in the pool's address space (the backing file's offset).
    pub offset: u64,
    /// Length in bytes (a multiple of the page size).
    pub len: u64,
}

/// A tenant's arena: its segments, each with its own range allocator.
#[derive(Debug, Default)]
pub(super) struct Arena {
    segments: Vec<ArenaSegment>,
}

#[derive(Debug)]
struct ArenaSegment {
    base: u64,
    ranges: RangeAllocator,
}

/// Where an allocation went: the block it takes (and is charged for) and its aligned start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement {
    pub(super) block: u64,
    pub(super) offset: u64,
}

/// The block an allocation of `size` aligned to `align` takes: the size plus the most
/// padding the alignment can need in front of a block that starts `ALIGN_MIN`-aligned.
pub(super) fn charge_of(size: u64, align: u64) -> u64 {
    size + (align - ALIGN_MIN.min(align))
}

impl Arena {
    /// Bytes of the pool the arena's segments hold.
    pub(super) fn mapped(&self) -> u64 {
        self.segments.iter().map(|s| s.ranges.capacity()).sum()
    }

    /// The segments as `(base, len)`.
    pub(super) fn segments(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|s| (s.base, s.ranges.capacity()))
    }

    /// Places a block of `charge` bytes whose start, rounded up to `align`, is the
    /// allocation (first fit over the segments, oldest first).
    pub(super) fn place(&mut self, charge: u64, align: u64) -> Option<Placement> {
        self.segments.iter_mut().find_map(|s| {
            let rel = s.ranges.allocate(charge, ALIGN_MIN)?;
            let aligned = rel.next_multiple_of(align);
            Some(Placement { block: s.base + rel, offset: s.base + aligned })
        })
    }

    /// Marks a recorded block as taken (restoring a manifest); false if it is not free in
    /// one segment of this arena.
    pub(super) fn reserve(&mut self, block: u64, charge: u64) -> bool {
        self.segment_of(block).is_some_and(|s| s.ranges.reserve(block - s.base, charge))
    }

    /// Returns a block taken by [`Arena::place`] or [`Arena::reserve`].
    pub(super) fn release(&mut self, block: u64, charge: u64) {
        let s = self.segment_of(block).expect("a live allocation's block lies in its tenant's arena");
        s.ranges.release(block - s.base, charge);
    }

    /// Adds a segment at `[base, base + len)` of the pool's address space.
    pub(super) fn add(&mut self, base: u64, len: u64) {
        self.segments.push(ArenaSegment { base, ranges: RangeAllocator::new(len) });
    }

    /// Removes the segments that hold no allocation; returns them as `(base, len)`.
    pub(super) fn take_empty(&mut self) -> Vec<(u64, u64)> {
        let (empty, kept) =
            std::mem::take(&mut self.segments).into_iter().partition(|s| s.ranges.free_bytes() == s.ranges.capacity());
        self.segments = kept;
        empty.into_iter().map(|s: ArenaSegment| (s.base, s.ranges.capacity())).collect()
    }

    fn segment_of(&mut self, offset: u64) -> Option<&mut ArenaSegment> {
        self.segments.iter_mut().find(|s| offset >= s.base && offset < s.base + s.ranges.capacity())
    }
}

impl Manager {
    /// Gives `tenant`'s arena a new segment that can hold a block of `charge` bytes: at least
    /// that (in pages), doubling the arena when it can ([`ARENA_SEGMENT_MIN_BYTES`] at
    /// first, by [`ARENA_GROWTH_MAX_BYTES`] at most), never past the tenant's quota or the pool's free space. The mapper maps it
    /// before anything is handed out of it.
    pub(super) fn grow_arena(&mut self, tenant_name: &str, charge: u64) -> Result<(), Refusal> {
        let need = charge.next_multiple_of(PAGE_BYTES);
        let quota = self.tenants[tenant_name].quota_bytes.saturating_add(PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
        if need > quota.saturating_sub(self.tenants[tenant_name].arena.mapped()) {
            // The tenant's own empty segments count against its quota: give them back first.
            self.reclaim_empty_segments_of(tenant_name);
        }
        let tenant = &self.tenants[tenant_name];
        let mapped = tenant.arena.mapped();
        let quota_room = quota.saturating_sub(mapped);
        if need > quota_room {
            return refuse(
                Status::QuotaExceeded,
                format!(
                    "tenant {tenant_name:?}'s arena holds {} of its {} quota, with no free run of {} in it \
                     (its own allocations fragment it; free some)",
                    format_size(mapped),
                    format_size(tenant.quota_bytes),
                    format_size(charge)
                ),
            );
        }
        if tenant.arena.segments.len() >= ARENA_SEGMENTS_MAX {
            return refuse(
                Status::TooMany,
                format!("tenant {tenant_name:?}'s arena has {ARENA_SEGMENTS_MAX} segments, the limit"),
            );
        }
        let want = need.max(mapped.min(ARENA_GROWTH_MAX_BYTES)).max(ARENA_SEGMENT_MIN_BYTES).min(quota_room);
        let fits = self.space.largest_free() / PAGE_BYTES * PAGE_BYTES;
        let len = want.min(fits).max(need);
        let mut taken = self.take_space(len, need);
        if taken.is_none() && self.reclaim_empty_segments() > 0 {
            let fits = self.space.largest_free() / PAGE_BYTES * PAGE_BYTES;
            taken = self.take_space(want.min(fits).max(need), need);
        }
        let Some((base, len)) = taken else {
            return refuse(
                Status::PoolExhausted,
                format!(
                    "no free run of {} in the pool for tenant {tenant_name:?}'s arena ({} of {} free)",
                    format_size(need),
                    format_size(self.space.free_bytes()),
                    format_size(self.space.capacity())
                ),
            );
        };
        if let Some(mapper) = &self.mapper {
            if let Err(message) = mapper.map(tenant_name, base, len) {
                self.space.release(base, len);
                return refuse(
                    Status::PoolExhausted,
                    format!("cannot map a segment for tenant {tenant_name:?}: {message}"),
                );
            }
        }
        self.tenants.get_mut(tenant_name).expect("checked above").arena.add(base, len);
        self.manifest_dirty = true;
        Ok(())
    }

    /// A run of `len` bytes of the pool's space, or else of `need`.
    fn take_space(&mut self, len: u64, need: u64) -> Option<(u64, u64)> {
        match self.space.allocate(len, PAGE_BYTES) {
            Some(base) => Some((base, len)),
            None => self.space.allocate(need, PAGE_BYTES).map(|base| (base, need)),
        }
    }

    /// Unmaps every arena segment that holds no allocation and gives its space back to the
    /// pool; returns how many. Empty segments are kept until the space is needed, so a
    /// tenant that frees and allocates again reuses its segment (and its clients' keys and
    /// mappings) instead of making one per allocation.
    pub(super) fn reclaim_empty_segments(&mut self) -> usize {
        let names: Vec<String> = self.tenants.keys().cloned().collect();
        names.iter().map(|name| self.reclaim_empty_segments_of(name)).sum()
    }

    /// [`Manager::reclaim_empty_segments`] for one tenant's arena.
    fn reclaim_empty_segments_of(&mut self, name: &str) -> usize {
        let empty = self.tenants.get_mut(name).map(|t| t.arena.take_empty()).unwrap_or_default();
        for &(base, len) in &empty {
            if let Some(mapper) = &self.mapper {
                mapper.unmap(base);
            }
            self.space.release(base, len);
            log::debug!("reclaimed tenant {name:?}'s empty {len}-byte segment at {base}");
        }
        self.manifest_dirty |= !empty.is_empty();
        empty.len()
    }

    /// Every arena's segments, for the manifest.
    pub(super) fn segment_records(&self) -> Vec<SegmentRecord> {
        let mut out: Vec<SegmentRecord> = self
            .tenants
            .iter()
            .flat_map(|(name, t)| {
                t.arena.segments().map(|(offset, len)| SegmentRecord { tenant: name.clone(), offset, len })
            })
            .collect();
        out.sort_by_key(|s| s.offset);
        out
    }

    /// Every segment of every arena as `(tenant, base, len)`, for the pool to map at start.
    pub(crate) fn segments(&self) -> Vec<(String, u64, u64)> {
        self.segment_records().into_iter().map(|s| (s.tenant, s.offset, s.len)).collect()
    }
}

/// Segments for a manifest written before per-tenant arenas (allocations but no segments):
/// each tenant's allocations' pages, adjacent ones merged. Two tenants' allocations that
/// share a page then overlap, and the restore refuses the manifest rather than let one
/// tenant's segment hold the other's bytes.
pub(super) fn segments_of_allocations(allocations: &[super::AllocationRecord]) -> Vec<SegmentRecord> {
    let mut by_tenant: std::collections::BTreeMap<&str, Vec<(u64, u64)>> = Default::default();
    for r in allocations {
        let start = r.offset / PAGE_BYTES * PAGE_BYTES;
        // A record that wraps is refused when its allocation is restored.
        if let Some(end) = r.offset.checked_add(r.size).and_then(|e| e.checked_next_multiple_of(PAGE_BYTES)) {
            by_tenant.entry(r.tenant.as_str()).or_default().push((start, end));
        }
    }
    let mut out = Vec::new();
    for (tenant, mut ranges) in by_tenant {
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        out.extend(merged.into_iter().map(|(offset, end)| SegmentRecord {
            tenant: tenant.into(),
            offset,
            len: end - offset,
        }));
    }
    out.sort_by_key(|s| s.offset);
    out
}

#[cfg(test)]
mod tests {
    use super::super::{AllocationRecord, Manifest, TenantConfig};
    use super::*;
    use nam_proto::{Alloc, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED};

    fn manager(capacity: u64, quota: u64) -> Manager {
        let tenant = |name: &str| TenantConfig { name: name.into(), token: name.into(), quota_bytes: quota };
        let mut m = Manager::new(capacity, &[tenant("a"), tenant("b")]);
        m.authenticate(1, "a", "a").unwrap();
        m.authenticate(2, "b", "b").unwrap();
        m
    }

    fn alloc(size: u64, align: u64) -> Alloc {
        Alloc { size, align, flags: 0, name: String::new() }
    }

    fn segments_of(m: &Manager, tenant: &str) -> Vec<(u64, u64)> {
        m.tenants[tenant].arena.segments().collect()
    }

    #[test]
    fn tenants_never_share_a_segment() {
        let mut m = manager(64 << 20, 32 << 20);
        let (a, b) = (m.allocate(1, &alloc(100, 0)).unwrap(), m.allocate(2, &alloc(100, 0)).unwrap());
        let (sa, sb) = (segments_of(&m, "a"), segments_of(&m, "b"));
        let inside = |s: &[(u64, u64)], o: u64| s.iter().any(|&(base, len)| o >= base && o < base + len);
        assert!(inside(&sa, a.offset) && inside(&sb, b.offset));
        assert!(!inside(&sb, a.offset) && !inside(&sa, b.offset));
        for &(base, len) in &sa {
            assert!(sb.iter().all(|&(b2, l2)| base + len <= b2 || b2 + l2 <= base), "segments overlap");
        }
    }

    #[test]
    fn growing_keeps_live_allocations_in_place() {
        let mut m = manager(64 << 20, 32 << 20);
        let first = m.allocate(1, &alloc(512 << 10, 0)).unwrap();
        let big = m.allocate(1, &alloc(3 << 20, 0)).unwrap();
        assert_eq!(m.resolve(1, first.handle).unwrap(), (first.offset, first.size), "the first did not move");
        assert_eq!(segments_of(&m, "a").len(), 2, "the arena grew by a segment");
        assert!(m.resolve(1, big.handle).is_ok());
    }

    #[test]
    fn alignment_padding_is_charged_and_the_arena_stays_within_the_quota() {
        let mut m = manager(256 << 20, 128 << 20);
        let mut ok = 0;
        for _ in 0..256 {
            match m.allocate(1, &alloc(64, 1 << 20)) {
                Ok(g) => {
                    assert_eq!(g.offset % (1 << 20), 0, "aligned within its segment");
                    ok += 1;
                }
                Err(e) => assert_eq!(e.status, Status::QuotaExceeded, "{e}"),
            }
        }
        assert_eq!(ok, 128);
        assert_eq!(m.tenant_usage()[0].used, 128 << 20);
        assert!(m.tenants["a"].arena.mapped() <= 128 << 20);
        let g = m.allocate(2, &alloc(1 << 20, 0)).expect("b's quota is still its own");
        assert_eq!(g.size, 1 << 20);
    }

    #[test]
    fn empty_segments_are_reclaimed_when_the_pool_needs_the_space() {
        let mut m = manager(4 << 20, u64::MAX);
        let small = m.allocate(1, &alloc(64, 0)).unwrap();
        m.free(1, small.handle).unwrap();
        assert_eq!(segments_of(&m, "a").len(), 1, "kept for reuse");
        let whole = m.allocate(2, &alloc(4 << 20, 0)).expect("a's empty segment gives its space back");
        assert_eq!(whole.size, 4 << 20);
        assert!(segments_of(&m, "a").is_empty());
    }

    #[test]
    fn a_tenants_own_empty_segments_make_room_within_its_quota() {
        let mut m = manager(64 << 20, 2 << 20);
        let small = m.allocate(1, &alloc(64, 0)).unwrap();
        m.free(1, small.handle).unwrap();
        let big = m.allocate(1, &alloc(3 << 19, 0)).expect("the empty 1 MiB segment is given back first");
        assert_eq!(big.size, 3 << 19);
        assert!(m.tenants["a"].arena.mapped() <= 2 << 20);
    }

    #[test]
    fn manifests_restore_every_tenants_segments_and_old_ones_get_segments() {
        let mut m = manager(64 << 20, 32 << 20);
        let persistent = |name: &str| Alloc {
            size: 5000,
            align: 4096,
            flags: ALLOC_FLAG_PERSISTENT | ALLOC_FLAG_SHARED,
            name: name.into(),
        };
        let pa = m.allocate(1, &persistent("pa")).unwrap();
        let pb = m.allocate(2, &persistent("pb")).unwrap();
        let manifest = m.manifest();
        assert_eq!(manifest.segments.len(), 2);
        let mut restored = manager(64 << 20, 32 << 20);
        restored.restore(&manifest).unwrap();
        assert_eq!(restored.open(1, "pa").unwrap(), pa);
        assert_eq!(restored.open(2, "pb").unwrap(), pb);
        assert_eq!(restored.segments(), m.segments());
        assert_eq!(restored.tenant_usage(), m.tenant_usage());
        // A manifest written before arenas: allocations only, no blocks, no segments.
        let record = |handle, offset, tenant: &str| AllocationRecord {
            handle,
            offset,
            size: 100,
            flags: ALLOC_FLAG_PERSISTENT | ALLOC_FLAG_SHARED,
            name: Some(format!("n{handle}")),
            tenant: tenant.into(),
            block: 0,
            charged: 0,
        };
        let old = Manifest {
            capacity: 64 << 20,
            next_handle: 9,
            allocations: vec![record(1, 0, "a"), record(2, 8192, "b")],
            segments: Vec::new(),
        };
        let mut migrated = manager(64 << 20, 32 << 20);
        migrated.restore(&old).unwrap();
        assert_eq!(migrated.segments(), vec![("a".into(), 0, 4096), ("b".into(), 8192, 4096)]);
        assert_eq!(migrated.open(2, "n2").unwrap().offset, 8192);
        let shared_page = Manifest { allocations: vec![record(1, 0, "a"), record(2, 128, "b")], ..old };
        assert!(manager(64 << 20, 32 << 20).restore(&shared_page).is_err(), "two tenants in one page");
    }
}
