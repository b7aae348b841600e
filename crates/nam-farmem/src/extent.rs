//! The extent table: the client's far address space, cut into extents (4 MiB,
//! [`EXTENT_BYTES`], or one interleaving granule per server if that is more), each striped
//! across the servers in interleaving granules (Mao 2020 Fig. 8.2 interleaves pages across
//! memory blades). A far address maps to (extent, server, offset in that server's chunk of
//! the extent); chunks are allocated on a server the first time data is written to them,
//! so never-written far memory costs nothing and reads as zeros.

use crate::constants::EXTENT_BYTES;
use nam_client::Allocation;

/// Where one far address lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Extent index.
    pub extent: usize,
    /// Server index in the client's list.
    pub server: usize,
    /// Byte offset inside that server's chunk of the extent.
    pub offset: u64,
    /// Bytes from this address to the end of its interleaving granule.
    pub granule_left: u64,
}

/// Maps far addresses to (server, allocation, offset); owns the per-server chunks.
#[derive(Debug)]
pub struct ExtentTable {
    far_bytes: u64,
    servers: usize,
    interleave_bytes: u64,
    /// Bytes of one extent: [`EXTENT_BYTES`], or one granule per server if that is more (a
    /// granule never spans two extents, and every server has one in each).
    extent_bytes: u64,
    /// `chunks[extent * servers + server]`: the server's allocation for the extent, once made.
    chunks: Vec<Option<Allocation>>,
}

impl ExtentTable {
    /// A table for `far_bytes` over `servers` servers with `interleave_bytes` granules.
    pub fn new(far_bytes: u64, servers: usize, interleave_bytes: u64) -> ExtentTable {
        assert!(servers > 0 && interleave_bytes.is_power_of_two());
        let extent_bytes = EXTENT_BYTES.max(interleave_bytes.saturating_mul(servers as u64));
        let extents = far_bytes.div_ceil(extent_bytes) as usize;
        ExtentTable { far_bytes, servers, interleave_bytes, extent_bytes, chunks: vec![None; extents * servers] }
    }

    /// Size of the far address space.
    pub fn far_bytes(&self) -> u64 {
        self.far_bytes
    }

    /// Bytes of one extent (the far memory that one chunk per server holds).
    pub fn extent_bytes(&self) -> u64 {
        self.extent_bytes
    }

    /// Number of servers the extents are striped over.
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// Number of extents.
    pub fn extents(&self) -> usize {
        self.chunks.len() / self.servers
    }

    /// The placement of `addr` (which must be below `far_bytes`).
    #[inline]
    pub fn locate(&self, addr: u64) -> Placement {
        debug_assert!(addr < self.far_bytes);
        let extent = (addr / self.extent_bytes) as usize;
        let inner = addr % self.extent_bytes;
        let granule = inner / self.interleave_bytes;
        let within = inner % self.interleave_bytes;
        let n = self.servers as u64;
        Placement {
            extent,
            server: (granule % n) as usize,
            offset: (granule / n) * self.interleave_bytes + within,
            granule_left: self.interleave_bytes - within,
        }
    }

    /// Bytes of the chunk each server holds for `extent`.
    pub fn chunk_bytes(&self, extent: usize) -> u64 {
        let start = extent as u64 * self.extent_bytes;
        let len = (self.far_bytes - start).min(self.extent_bytes);
        let granules = len.div_ceil(self.interleave_bytes);
        granules.div_ceil(self.servers as u64) * self.interleave_bytes
    }

    /// The allocation backing (extent, server), if it was made.
    #[inline]
    pub fn chunk(&self, extent: usize, server: usize) -> Option<&Allocation> {
        self.chunks[extent * self.servers + server].as_ref()
    }

    /// Records the allocation backing (extent, server).
    pub fn set_chunk(&mut self, extent: usize, server: usize, allocation: Allocation) {
        self.chunks[extent * self.servers + server] = Some(allocation);
    }

    /// Every allocation made so far.
    pub fn allocations(&self) -> impl Iterator<Item = &Allocation> {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_interleave_round_robin_and_chunks_cover_the_extent() {
        let t = ExtentTable::new(3 * EXTENT_BYTES / 2, 3, 4096);
        assert_eq!(t.extents(), 2);
        for page in 0..12u64 {
            let p = t.locate(page * 4096 + 7);
            assert_eq!(p.server, (page % 3) as usize);
            assert_eq!(p.offset, (page / 3) * 4096 + 7);
            assert_eq!(p.granule_left, 4096 - 7);
        }
        let last = t.locate(3 * EXTENT_BYTES / 2 - 1);
        assert_eq!(last.extent, 1);
        assert!(last.offset < t.chunk_bytes(1));
        assert!(t.chunk_bytes(0) * 3 >= EXTENT_BYTES);
    }

    #[test]
    fn a_first_write_allocates_a_small_chunk_and_granules_never_span_extents() {
        // Each chunk is allocated (and zeroed by its server) while a first write waits: it
        // must stay small whatever the region's size.
        let t = ExtentTable::new(4 << 30, 2, 4096);
        assert!(t.chunk_bytes(0) <= 2 << 20, "chunk of {} bytes", t.chunk_bytes(0));
        assert_eq!(t.extents(), ((4u64 << 30) / t.extent_bytes()) as usize);
        // Huge granules over three servers: an extent holds one granule per server.
        let h = ExtentTable::new(64 << 20, 3, 2 << 20);
        assert!(h.extent_bytes() >= 3 * (2 << 20));
        for granule in 0..30u64 {
            let p = h.locate(granule * (2 << 20));
            assert_eq!(p.granule_left, 2 << 20, "granule {granule} starts a granule");
            assert!(p.offset + p.granule_left <= h.chunk_bytes(p.extent));
        }
    }
}
