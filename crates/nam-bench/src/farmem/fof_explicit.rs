//! Friends-of-friends through the explicit API: the CSR graph lives in far memory as two
//! `FarArray<u32>` (offsets, neighbours); each query copies the user's friend list, then
//! fetches the offsets of all friends as one batch of misses and the neighbour lists of a
//! group of friends as another (Mao 2020 §7's many outstanding misses: issue every miss
//! of the frontier, then wait once), and counts mutual friends on slices of the resident
//! lines in place. The query code is `FriendsOfFriends::query_all`, the same that runs on
//! the local baseline's slices, so both compute the same checksum by construction of the
//! data path only.

use super::explicit_paired::{paired, FarRun};
use super::saxpy_explicit::{repeats, rows, Setting};
use super::workloads::{FriendsOfFriends, Graph, Workload};
use super::{Run, Transport, WorkloadKind};
use anyhow::Result;
use nam_client::Client;
use nam_farmem::{FarArray, FarMemory, Stats};
use std::sync::Arc;
use std::time::Instant;

/// The graph in far memory.
struct FarGraph<'a> {
    far: &'a mut FarMemory,
    offsets: FarArray<u32>,
    neighbors: FarArray<u32>,
    /// Bytes of neighbour lists fetched per batch (a fraction of the budget, so a batch
    /// does not evict its own first lines before they are used).
    group_bytes: usize,
    ranges: Vec<(u64, usize)>,
    bounds: Vec<(usize, usize)>,
}

impl Graph for FarGraph<'_> {
    type Error = nam_farmem::Error;
    fn friends(&mut self, v: u32, out: &mut Vec<u32>) -> Result<(), Self::Error> {
        let mut b = [0u32; 2];
        self.offsets.read(self.far, v as usize, &mut b)?;
        out.clear();
        out.resize((b[1] - b[0]) as usize, 0);
        self.neighbors.read(self.far, b[0] as usize, out)
    }

    fn for_each_friend_list(&mut self, vs: &[u32], mut f: impl FnMut(&[u32])) -> Result<(), Self::Error> {
        self.ranges.clear();
        self.ranges.extend(vs.iter().map(|&v| (self.offsets.addr() + v as u64 * 4, 8)));
        self.far.fetch_ranges(&self.ranges)?;
        self.bounds.clear();
        for &v in vs {
            let mut b = [0u32; 2];
            self.offsets.read(self.far, v as usize, &mut b)?;
            self.bounds.push((b[0] as usize, b[1] as usize));
        }
        let mut first = 0;
        while first < self.bounds.len() {
            let (mut last, mut bytes) = (first, 0);
            self.ranges.clear();
            while last < self.bounds.len() && (bytes == 0 || bytes < self.group_bytes) {
                let (a, b) = self.bounds[last];
                self.ranges.push((self.neighbors.addr() + a as u64 * 4, (b - a) * 4));
                bytes += (b - a) * 4;
                last += 1;
            }
            self.far.fetch_ranges(&self.ranges)?;
            for &(a, b) in &self.bounds[first..last] {
                self.neighbors.for_each_chunk(self.far, a..b, |_, list| f(list))?;
            }
            first = last;
        }
        Ok(())
    }
}

/// Counter increments from `before` to `after`.
pub fn delta(before: Stats, after: Stats) -> Stats {
    Stats {
        hits: after.hits - before.hits,
        misses: after.misses - before.misses,
        prefetches: after.prefetches - before.prefetches,
        evictions: after.evictions - before.evictions,
        bypassed: after.bypassed - before.bypassed,
        in_place: after.in_place - before.in_place,
        writebacks: after.writebacks - before.writebacks,
        ..after
    }
}

fn far_once(client: &Arc<Client>, w: &FriendsOfFriends, image: &[u8], s: &Setting) -> Result<FarRun> {
    let mut config = s.config(w.footprint() as u64);
    config.far_bytes += 2 * config.line_bytes; // room to align the neighbour array to a line
    let mut far = FarMemory::new(client.clone(), config)?;
    let offsets = far.alloc_array::<u32>(w.vertices + 1)?;
    let neighbors = far.alloc_array::<u32>((w.footprint() / 4) - (w.vertices + 1))?;
    far.write_bulk(offsets.addr(), &image[..offsets.len() * 4])?;
    far.write_bulk(neighbors.addr(), &image[offsets.len() * 4..w.footprint()])?;
    far.invalidate()?;
    let group_bytes = (far.config().budget_bytes / 8) as usize;
    let before = far.stats();
    let t = Instant::now();
    let mut graph = FarGraph { far: &mut far, offsets, neighbors, group_bytes, ranges: Vec::new(), bounds: Vec::new() };
    let sum = w.query_all(&mut graph)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let after = far.stats();
    far.spans().release()?;
    // The query only reads: nothing is dirty, nothing to write back.
    Ok(FarRun { ms, sum, stats: delta(before, after), flush_ms: None })
}

/// Measures friends-of-friends over the explicit API against the local run, paired.
pub fn measure(
    client: Arc<Client>,
    (transport, servers): (Transport, usize),
    w: &FriendsOfFriends,
    settings: &[Setting],
) -> Result<Vec<Run>> {
    let image = w.image();
    let mut local_mem = image.clone();
    let local = || {
        let t = Instant::now();
        let sum = w.run(&mut local_mem);
        (t.elapsed().as_secs_f64() * 1e3, sum)
    };
    let measured = paired("explicit friends-of-friends", repeats(settings), settings.len(), local, |i| {
        far_once(&client, w, &image, &settings[i])
    })?;
    Ok(rows(WorkloadKind::FofExplicit, (transport, servers), settings, measured, w.queries as f64))
}
