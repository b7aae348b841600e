//! Streaming (cache-bypassing) bulk access: the explicit API's answer to streaming work.
//!
//! A program that sweeps through far arrays once per pass gains nothing from caching them
//! (the footprint is larger than the budget, so every line is evicted before its reuse)
//! and pays two copies per byte through the cache (server to line, line to caller). Bulk
//! reads and writes move whole lines straight between the servers and the caller's buffer
//! (one `memcpy` from the server's pool over UCX shared memory), like non-temporal loads
//! and stores: lines the cache holds are served from it (reads) or superseded (writes), so
//! bulk and cached accesses stay coherent; partial lines at the ends go through the cache.

use super::FarMemory;
use crate::cache::Lookup;
use crate::error::Result;

impl FarMemory {
    /// Reads `buf.len()` bytes at `addr` without filling the cache (see the module docs).
    pub fn read_bulk(&mut self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.check(addr, buf.len())?;
        let lb = self.config.line_bytes;
        let (start, end) = (addr.next_multiple_of(lb), (addr + buf.len() as u64) / lb * lb);
        if start >= end {
            return self.read(addr, buf);
        }
        let (head, rest) = buf.split_at_mut((start - addr) as usize);
        let (middle, tail) = rest.split_at_mut((end - start) as usize);
        if !head.is_empty() {
            self.read(addr, head)?;
        }
        if !tail.is_empty() {
            self.read(end, tail)?;
        }
        let mut requests: Vec<(u64, &mut [u8])> = Vec::new();
        let mut rest = middle;
        let mut at = start;
        while !rest.is_empty() {
            // Lines the cache holds (maybe dirty) come from it; runs of the others from the servers.
            let mut n = 0u64;
            while at + n * lb < end && self.store.lookup((at + n * lb) / lb) == Lookup::Missing {
                n += 1;
            }
            let len = (n.max(1) * lb) as usize;
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            if n == 0 {
                let slot = self.cached_slot(at / lb);
                piece.copy_from_slice(self.store.data(slot));
            } else {
                requests.push((at, piece));
            }
            at += len as u64;
        }
        self.span.read_many(&mut requests)
    }

    /// Writes `data` at `addr` straight to the servers (whole lines; partial lines at the
    /// ends go through the cache). Cached copies of the lines are dropped once the servers
    /// have the data; on error the cache is left as it was.
    pub fn write_bulk(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.check(addr, data.len())?;
        let lb = self.config.line_bytes;
        let (start, end) = (addr.next_multiple_of(lb), (addr + data.len() as u64) / lb * lb);
        if start >= end {
            return self.write(addr, data);
        }
        let (head, rest) = data.split_at((start - addr) as usize);
        let (middle, tail) = rest.split_at((end - start) as usize);
        self.span.write(start, middle)?;
        for line in start / lb..end / lb {
            if self.store.lookup(line) != Lookup::Missing {
                let slot = self.cached_slot(line);
                // Even a dirty cached copy is superseded by the data just written.
                self.store.set_state(slot, 0);
            }
        }
        if !head.is_empty() {
            self.write(addr, head)?;
        }
        if !tail.is_empty() {
            self.write(end, tail)?;
        }
        Ok(())
    }

    fn cached_slot(&mut self, line: u64) -> usize {
        match self.store.lookup(line) {
            Lookup::MetaHit(s) | Lookup::Found(s) => s,
            Lookup::Missing => unreachable!("checked by the caller"),
        }
    }
}
