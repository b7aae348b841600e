//! The cache's storage: a set-associative array of lines whose tags and states live in
//! their own arrays, apart from the data (Mao 2020 §7.1 keeps metadata apart in DRAM), an
//! optional small direct-mapped metadata cache that answers "which slot holds line L"
//! without scanning the set, and random-except-most-recent replacement that prefers clean
//! victims (a clean line leaves for free, a dirty one costs a write-back).

use rand::{Rng, SeedableRng};

/// The line is valid and holds far memory's contents.
pub const VALID: u8 = 1;
/// The line was written and not yet written back.
pub const DIRTY: u8 = 2;
/// The line was prefetched and no demand access touched it yet.
pub const PREFETCHED: u8 = 4;

/// Tags, states and data of every line.
pub struct LineStore {
    line_bytes: usize,
    sets: usize,
    ways: usize,
    /// Line index held by each slot (valid only when `state & VALID`).
    tags: Vec<u64>,
    state: Vec<u8>,
    /// Most recently used way of each set: never the victim.
    mru: Vec<u8>,
    /// Line data; 64-byte blocks so every line (a multiple of 64 B) is 64-byte aligned and
    /// typed views of it (`FarArray` chunks) are aligned for any plain type. Laid out way
    /// by way (`data_offset`): way `w` of every set, then way `w + 1`, so consecutive far
    /// lines that land in the same way of consecutive sets are consecutive in memory, and a
    /// loop streaming through them streams through local memory too (the CPU's prefetchers
    /// follow it); set by set, consecutive lines sat `ways` lines apart.
    data: Vec<Block>,
    /// Bytes of `data` skipped so that the lines start on a page boundary (`PAGE_ALIGN`).
    data_skip: usize,
    /// Direct-mapped (line -> slot + 1) hints; 0 is empty. Checked against `tags`.
    meta_cache: Vec<(u64, u32)>,
    rng: rand::rngs::SmallRng,
}

/// Alignment of the first line: a page. A loop over a cached array and another array
/// (often a server's mapped pool, which starts on a page) runs slower when the two differ in
/// their offset within a page: on the development machine `y[i] += a * x[i]` over 128 MiB
/// took 12.3-13.1 ms with equal offsets and 12.9-13.6 ms with y 64 bytes further (the
/// cache's lines used to start 64 bytes into a page), up to 18 ms at 2 KiB: the CPU
/// mistakes loads of x for loads of the y stores still in flight when their addresses
/// agree in the low 12 bits.
const PAGE_ALIGN: usize = 4096;

/// 64 aligned bytes of line data.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// Where a lookup was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The metadata cache knew the slot.
    MetaHit(usize),
    /// The set's tags were scanned and the line found.
    Found(usize),
    /// The line is not cached.
    Missing,
}

impl LineStore {
    /// Storage for `sets` sets of `ways` lines of `line_bytes`.
    pub fn new(sets: usize, ways: usize, line_bytes: usize, meta_cache_entries: usize, seed: u64) -> LineStore {
        let slots = sets * ways;
        let mut data = vec![Block([0; 64]); (slots * line_bytes + PAGE_ALIGN) / 64];
        // Blocks are 64-byte aligned, so the distance to the next page is whole blocks.
        let data_skip = (PAGE_ALIGN - data.as_ptr() as usize % PAGE_ALIGN) % PAGE_ALIGN;
        // The budget is committed up front (every page touched now), so the first use of a
        // slot does not pay the kernel's page fault inside the caller's timed work.
        for b in data.iter_mut().step_by(4096 / 64) {
            // SAFETY: a valid, exclusive reference; volatile so the store is not elided.
            unsafe { std::ptr::write_volatile(&mut b.0[0], 0) };
        }
        LineStore {
            line_bytes,
            sets,
            ways,
            tags: vec![0; slots],
            state: vec![0; slots],
            mru: vec![0; sets],
            data,
            data_skip,
            meta_cache: vec![(0, 0); meta_cache_entries],
            rng: rand::rngs::SmallRng::seed_from_u64(seed),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.tags.len()
    }

    /// Finds the slot of `line`.
    #[inline]
    pub fn lookup(&self, line: u64) -> Lookup {
        if !self.meta_cache.is_empty() {
            let (tag, slot1) = self.meta_cache[line as usize & (self.meta_cache.len() - 1)];
            if slot1 != 0 && tag == line {
                let slot = slot1 as usize - 1;
                if self.state[slot] & VALID != 0 && self.tags[slot] == line {
                    return Lookup::MetaHit(slot);
                }
            }
        }
        let first = self.set_of(line) * self.ways;
        for slot in first..first + self.ways {
            if self.tags[slot] == line && self.state[slot] & VALID != 0 {
                return Lookup::Found(slot);
            }
        }
        Lookup::Missing
    }

    /// Marks `slot` the most recently used of its set and remembers it in the metadata cache.
    #[inline]
    pub fn touch(&mut self, slot: usize) {
        self.mru[slot / self.ways] = (slot % self.ways) as u8;
        if !self.meta_cache.is_empty() {
            let line = self.tags[slot];
            let n = self.meta_cache.len();
            self.meta_cache[line as usize & (n - 1)] = (line, slot as u32 + 1);
        }
    }

    /// Chooses a victim slot for `line` among the set's ways: an invalid one if any, else a
    /// random clean way other than the most recently used and other than `exclude`, else
    /// (unless `clean_only`: prefetches and streaming reads never force a write-back) such
    /// a dirty way. Clean first because evicting a dirty line costs a write-back now and
    /// usually a fetch later, while a clean one leaves for free.
    pub fn victim(&mut self, line: u64, exclude: &[usize], clean_only: bool) -> Option<usize> {
        let set = self.set_of(line);
        let first = set * self.ways;
        let free = |s: &LineStore, slot: usize| !exclude.contains(&slot) && s.state[slot] & VALID == 0;
        if let Some(slot) = (first..first + self.ways).find(|&s| free(self, s)) {
            return Some(slot);
        }
        let mru = first + self.mru[set] as usize;
        let start = self.rng.gen_range(0..self.ways);
        let ways = self.ways;
        let candidates = || {
            (0..ways)
                .map(move |k| first + (start + k) % ways)
                .filter(move |&s| (s != mru || ways == 1) && !exclude.contains(&s))
        };
        if let Some(slot) = candidates().find(|&s| self.state[s] & DIRTY == 0) {
            return Some(slot);
        }
        if clean_only {
            return None;
        }
        candidates().next()
    }

    /// The set `line` maps to.
    #[inline]
    pub fn set_of(&self, line: u64) -> usize {
        (line % self.sets as u64) as usize
    }

    /// Tag of `slot`.
    #[inline]
    pub fn tag(&self, slot: usize) -> u64 {
        self.tags[slot]
    }

    /// State bits of `slot`.
    #[inline]
    pub fn state(&self, slot: usize) -> u8 {
        self.state[slot]
    }

    /// Sets the state bits of `slot`.
    #[inline]
    pub fn set_state(&mut self, slot: usize, state: u8) {
        self.state[slot] = state;
    }

    /// Installs `line` in `slot` with `state`.
    pub fn install(&mut self, slot: usize, line: u64, state: u8) {
        self.tags[slot] = line;
        self.state[slot] = state;
    }

    /// Where the data of `slot` (way `slot % ways` of set `slot / ways`) starts in `data`.
    #[inline]
    fn data_offset(&self, slot: usize) -> usize {
        ((slot % self.ways) * self.sets + slot / self.ways) * self.line_bytes
    }

    /// The data of `slot`.
    #[inline]
    pub fn data(&self, slot: usize) -> &[u8] {
        let at = self.data_offset(slot);
        &self.bytes()[at..at + self.line_bytes]
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `Block` is 64 plain bytes; the view covers exactly `data`.
        unsafe {
            std::slice::from_raw_parts(
                self.data.as_ptr().cast::<u8>().add(self.data_skip),
                self.slots() * self.line_bytes,
            )
        }
    }

    /// Raw pointer to the data of `slot`, for handing out disjoint views of several slots
    /// at once (`far/chunks.rs`); valid until `data` is reallocated (never).
    #[inline]
    pub fn data_ptr(&mut self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.slots());
        let at = self.data_offset(slot);
        // SAFETY: in bounds: slot < slots, so at + line_bytes <= slots * line_bytes, the size of data.
        unsafe { self.data.as_mut_ptr().cast::<u8>().add(self.data_skip + at) }
    }

    /// The data of `slot`, writable.
    #[inline]
    pub fn data_mut(&mut self, slot: usize) -> &mut [u8] {
        let n = self.line_bytes;
        // SAFETY: `data_ptr` is in bounds for a whole line; `&mut self` makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(slot), n) }
    }

    /// Writable data of several runs of distinct slots at once, each run's lines one after
    /// the other in memory (as [`LineStore::data_run`] checks; panics otherwise).
    pub fn data_runs_mut(&mut self, runs: &[&[usize]]) -> Vec<&mut [u8]> {
        let mut all: Vec<usize> = runs.iter().flat_map(|r| r.iter().copied()).collect();
        all.sort_unstable();
        assert!(all.windows(2).all(|w| w[0] != w[1]), "slots must be distinct");
        assert!(runs.iter().all(|r| self.data_run(r).is_some()), "each run must be adjacent lines");
        let n = self.line_bytes;
        let starts: Vec<(usize, usize)> = runs.iter().map(|r| (self.data_offset(r[0]), r.len() * n)).collect();
        // SAFETY: `data_skip` leaves `slots * line_bytes` bytes of `data` after it.
        let base = unsafe { self.data.as_mut_ptr().cast::<u8>().add(self.data_skip) };
        // SAFETY: every run is adjacent lines inside `data` (asserted) and no slot is in two
        // runs (asserted), so the slices are disjoint; they borrow `self` mutably.
        starts.iter().map(|&(at, len)| unsafe { std::slice::from_raw_parts_mut(base.add(at), len) }).collect()
    }

    /// The data of `slots` when their lines lie one after the other in memory (each slot's
    /// line right after the previous one's), else `None`.
    pub fn data_run(&self, slots: &[usize]) -> Option<&[u8]> {
        let first = self.data_offset(*slots.first()?);
        let adjacent = slots.iter().enumerate().all(|(k, &s)| self.data_offset(s) == first + k * self.line_bytes);
        adjacent.then(|| &self.bytes()[first..first + slots.len() * self.line_bytes])
    }

    /// Slots whose line is dirty.
    pub fn dirty_slots(&self) -> Vec<usize> {
        (0..self.slots()).filter(|&s| self.state[s] & (VALID | DIRTY) == VALID | DIRTY).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_recent_way_is_never_the_victim() {
        let mut store = LineStore::new(1, 4, 64, 4, 7);
        for (way, line) in [10u64, 11, 12, 13].iter().enumerate() {
            store.install(way, *line, VALID);
        }
        store.touch(2);
        for _ in 0..200 {
            assert_ne!(store.victim(99, &[], false), Some(2));
        }
        assert_eq!(store.lookup(12), Lookup::MetaHit(2));
        assert_eq!(store.lookup(11), Lookup::Found(1));
        assert_eq!(store.lookup(50), Lookup::Missing);
        store.set_state(0, VALID | DIRTY);
        store.set_state(1, VALID | DIRTY);
        store.set_state(3, VALID | DIRTY);
        assert_eq!(store.victim(99, &[], true), None, "only the MRU way is clean");
    }

    #[test]
    fn clean_ways_are_replaced_before_dirty_ones() {
        let mut store = LineStore::new(1, 4, 64, 0, 11);
        for way in 0..4 {
            store.install(way, 20 + way as u64, VALID | DIRTY);
        }
        store.set_state(2, VALID);
        store.touch(0);
        for _ in 0..100 {
            assert_eq!(store.victim(99, &[], false), Some(2), "the only clean way goes first");
        }
        assert_eq!(store.victim(99, &[2], true), None, "no clean way left for a streaming read");
        let v = store.victim(99, &[2], false).unwrap();
        assert!(v == 1 || v == 3, "a dirty way other than the MRU and the excluded one: {v}");
        assert!(store.data_ptr(3).cast::<u128>().is_aligned(), "lines are aligned for typed views");
    }

    #[test]
    fn one_way_of_consecutive_sets_is_contiguous_and_lines_are_disjoint() {
        let (sets, ways, line) = (8, 4, 128);
        let mut store = LineStore::new(sets, ways, line, 0, 3);
        // Way 1 of sets 2 and 3 (slots 9 and 13) are neighbours in memory.
        let (a, b) = (store.data_ptr(2 * ways + 1) as usize, store.data_ptr(3 * ways + 1) as usize);
        assert_eq!(b - a, line);
        let mut starts: Vec<usize> = (0..sets * ways).map(|s| store.data_ptr(s) as usize).collect();
        starts.sort_unstable();
        assert!(starts.windows(2).all(|w| w[1] - w[0] == line), "every slot has its own line");
        for slot in 0..sets * ways {
            store.data_mut(slot).fill(slot as u8);
        }
        for slot in 0..sets * ways {
            assert!(store.data(slot).iter().all(|&b| b == slot as u8), "slot {slot} overlaps another");
        }
        assert_eq!(store.data_run(&[1, 5, 9]).map(|d| d.len()), Some(3 * line), "way 1 of sets 0-2");
        assert!(store.data_run(&[1, 2]).is_none(), "two ways of one set are not neighbours");
        let runs = store.data_runs_mut(&[&[1, 5, 9], &[2]]);
        assert_eq!((runs[0].len(), runs[1].len()), (3 * line, line));
        assert!(runs[0][line..2 * line].iter().all(|&b| b == 5) && runs[1].iter().all(|&b| b == 2));
    }
}
