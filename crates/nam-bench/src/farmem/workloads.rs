//! The workloads of `nam-bench farmem`, written once over a byte slice so the same code runs
//! on local memory (the baseline) and on a paged far-memory region: a pointer chase, SAXPY,
//! and friends-of-friends (Mao 2020 Fig. 8.7) on a generated power-law social graph.

use rand::{Rng, SeedableRng};

/// Asks for byte ranges `(offset, len)` of a workload's memory before it reads them
/// (`PagedRegion::fetch_ranges` in a paged region).
pub type Fetch<'f> = dyn FnMut(&[(u64, u64)]) + 'f;

/// A workload over `footprint()` bytes: `init` lays its data out, `run` is what is timed and
/// returns a checksum that must agree between local and far memory.
pub trait Workload {
    /// Bytes of memory it uses.
    fn footprint(&self) -> usize;
    /// Writes its input into `mem`.
    fn init(&self, mem: &mut [u8]);
    /// The timed part.
    fn run(&self, mem: &mut [u8]) -> u64;
    /// Work items done by `run` (steps, elements, queries), for the per-item time.
    fn items(&self) -> u64;
    /// The timed part in a paged region, where the program may ask for byte ranges of `mem`
    /// before it reads them (`fetch`: `PagedRegion::fetch_ranges`). `run` unless the
    /// workload asks.
    fn run_paged(&self, mem: &mut [u8], fetch: &mut Fetch) -> u64 {
        let _ = fetch;
        self.run(mem)
    }
}

fn as_u64(mem: &mut [u8]) -> &mut [u64] {
    // SAFETY: the region and Vec<u64>-backed baselines are 8-byte aligned; any bits are a u64.
    unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast(), mem.len() / 8) }
}
fn as_u32(mem: &mut [u8]) -> &mut [u32] {
    // SAFETY: as above, 4-byte aligned.
    unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast(), mem.len() / 4) }
}
fn as_f32(mem: &mut [u8]) -> &mut [f32] {
    // SAFETY: as above; any bits are an f32.
    unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast(), mem.len() / 4) }
}

/// Follows a random cyclic permutation (Sattolo): every step is a dependent load.
pub struct PointerChase {
    /// Slots of 8 bytes.
    pub slots: usize,
    /// Steps timed.
    pub steps: u64,
}

impl Workload for PointerChase {
    fn footprint(&self) -> usize {
        self.slots * 8
    }
    fn init(&self, mem: &mut [u8]) {
        let next = as_u64(mem);
        for (i, v) in next.iter_mut().enumerate() {
            *v = i as u64;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        for i in (1..self.slots).rev() {
            let j = rng.gen_range(0..i);
            next.swap(i, j);
        }
    }
    fn run(&self, mem: &mut [u8]) -> u64 {
        let next = as_u64(mem);
        let mut p = 0usize;
        for _ in 0..self.steps {
            p = next[p] as usize;
        }
        p as u64
    }
    fn items(&self) -> u64 {
        self.steps
    }
}

/// `y = a * x + y` over two f32 arrays, several passes.
pub struct Saxpy {
    /// Elements per array.
    pub n: usize,
    /// Passes over the arrays.
    pub passes: usize,
}

impl Workload for Saxpy {
    fn footprint(&self) -> usize {
        self.n * 8
    }
    fn init(&self, mem: &mut [u8]) {
        let v = as_f32(mem);
        let (x, y) = v.split_at_mut(self.n);
        for (i, (x, y)) in x.iter_mut().zip(y.iter_mut()).enumerate() {
            *x = (i % 1000) as f32 * 0.001;
            *y = 1.0;
        }
    }
    fn run(&self, mem: &mut [u8]) -> u64 {
        let v = as_f32(mem);
        let (x, y) = v.split_at_mut(self.n);
        for _ in 0..self.passes {
            for (y, x) in y.iter_mut().zip(x.iter()) {
                *y += 0.5 * *x;
            }
        }
        y.iter().step_by(97).map(|v| v.to_bits() as u64).fold(0, |a, b| a.wrapping_mul(31).wrapping_add(b))
    }
    fn items(&self) -> u64 {
        (self.n * self.passes) as u64
    }
}

/// Friends-of-friends (Mao 2020 Fig. 8.7) on an undirected power-law graph in CSR form:
/// `offsets[V + 1]` then `neighbors[2E]`, u32 each.
pub struct FriendsOfFriends {
    /// Users.
    pub vertices: usize,
    /// Friendships.
    pub edges: usize,
    /// Users whose friends-of-friends are computed.
    pub queries: usize,
}

impl FriendsOfFriends {
    /// Chung-Lu graph with Zipf-like weights (a few users have very many friends).
    fn adjacency(&self) -> Vec<Vec<u32>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(87);
        let weights: Vec<f64> = (0..self.vertices).map(|i| 1.0 / ((i + 10) as f64).powf(0.8)).collect();
        let mut cumulative = Vec::with_capacity(self.vertices);
        let mut total = 0.0;
        for w in &weights {
            total += w;
            cumulative.push(total);
        }
        let pick = |rng: &mut rand::rngs::StdRng| {
            let r = rng.gen::<f64>() * total;
            cumulative.partition_point(|&c| c < r).min(self.vertices - 1)
        };
        let mut adj = vec![Vec::new(); self.vertices];
        for _ in 0..self.edges {
            let (a, b) = (pick(&mut rng), rng.gen_range(0..self.vertices));
            if a != b {
                adj[a].push(b as u32);
                adj[b].push(a as u32);
            }
        }
        // User ids are not shuffled: the popular users (low ids) and their neighbour lists
        // sit together at the front of the image, as in a graph stored in id order.
        adj
    }
}

/// Where friends-of-friends reads its graph: local slices, or far memory (`fof_explicit.rs`).
pub trait Graph {
    /// Why reading the graph failed.
    type Error;
    /// Copies the neighbour list of `v` into `out`.
    fn friends(&mut self, v: u32, out: &mut Vec<u32>) -> Result<(), Self::Error>;
    /// Calls `f` with the neighbour lists of every vertex of `vs`, in pieces, in any order.
    fn for_each_friend_list(&mut self, vs: &[u32], f: impl FnMut(&[u32])) -> Result<(), Self::Error>;
}

/// The graph in local (or paged) memory.
pub struct SliceGraph<'a> {
    /// `offsets[V + 1]`.
    pub offsets: &'a [u32],
    /// `neighbors[2E]`.
    pub neighbors: &'a [u32],
}

impl Graph for SliceGraph<'_> {
    type Error = std::convert::Infallible;
    fn friends(&mut self, v: u32, out: &mut Vec<u32>) -> Result<(), Self::Error> {
        let v = v as usize;
        out.clear();
        out.extend_from_slice(&self.neighbors[self.offsets[v] as usize..self.offsets[v + 1] as usize]);
        Ok(())
    }
    fn for_each_friend_list(&mut self, vs: &[u32], mut f: impl FnMut(&[u32])) -> Result<(), Self::Error> {
        for &v in vs {
            let v = v as usize;
            f(&self.neighbors[self.offsets[v] as usize..self.offsets[v + 1] as usize]);
        }
        Ok(())
    }
}

impl FriendsOfFriends {
    /// The graph's initial memory image (`offsets` then `neighbors`, u32 each).
    pub fn image(&self) -> Vec<u8> {
        let mut mem = vec![0u8; self.footprint().next_multiple_of(8)];
        self.init(&mut mem);
        mem
    }

    /// Runs every query over `graph` (Mao 2020 Fig. 8.7) and returns the checksum of the
    /// top-ten suggestions of each: the same code for local memory and far memory.
    pub fn query_all<G: Graph>(&self, graph: &mut G) -> Result<u64, G::Error> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1187);
        let mut is_friend = vec![false; self.vertices];
        let mut mutual: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let mut friends = Vec::new();
        let mut checksum = 0u64;
        for _ in 0..self.queries {
            let user = rng.gen_range(0..self.vertices);
            graph.friends(user as u32, &mut friends)?;
            for &f in &friends {
                is_friend[f as usize] = true;
            }
            mutual.clear();
            graph.for_each_friend_list(&friends, |list| {
                for &fof in list {
                    if fof as usize != user && !is_friend[fof as usize] {
                        *mutual.entry(fof).or_insert(0) += 1;
                    }
                }
            })?;
            let mut ranked: Vec<(u32, u32)> = mutual.iter().map(|(&v, &n)| (n, v)).collect();
            ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (rank, (n, v)) in ranked.iter().take(10).enumerate() {
                checksum =
                    checksum.wrapping_mul(1_000_003).wrapping_add((rank as u64) << 40 | (*n as u64) << 24 | *v as u64);
            }
            for &f in &friends {
                is_friend[f as usize] = false;
            }
        }
        Ok(checksum)
    }
}

impl Workload for FriendsOfFriends {
    fn footprint(&self) -> usize {
        (self.vertices + 1 + 2 * self.edges) * 4
    }
    fn init(&self, mem: &mut [u8]) {
        let adj = self.adjacency();
        let words = as_u32(mem);
        let (offsets, neighbors) = words.split_at_mut(self.vertices + 1);
        let mut at = 0usize;
        for (v, list) in adj.iter().enumerate() {
            offsets[v] = at as u32;
            neighbors[at..at + list.len()].copy_from_slice(list);
            at += list.len();
        }
        offsets[self.vertices] = at as u32;
    }
    fn run(&self, mem: &mut [u8]) -> u64 {
        let words = as_u32(mem);
        let (offsets, neighbors) = words.split_at(self.vertices + 1);
        let never = |_: std::convert::Infallible| unreachable!();
        self.query_all(&mut SliceGraph { offsets, neighbors }).unwrap_or_else(never)
    }
    fn items(&self) -> u64 {
        self.queries as u64
    }
}

/// Friends-of-friends that asks for each query's pages before it reads them: the friends'
/// offsets in one request, then their neighbour lists in another (Mao 2020 §7's many
/// outstanding misses, through `PagedRegion::fetch_ranges` instead of the explicit API). A
/// program changed by a few lines; on local memory it runs the plain queries, so its
/// baseline is the unchanged program.
pub struct HintedFriendsOfFriends(pub FriendsOfFriends);

impl Workload for HintedFriendsOfFriends {
    fn footprint(&self) -> usize {
        self.0.footprint()
    }
    fn init(&self, mem: &mut [u8]) {
        self.0.init(mem)
    }
    fn run(&self, mem: &mut [u8]) -> u64 {
        self.0.run(mem)
    }
    fn run_paged(&self, mem: &mut [u8], fetch: &mut Fetch) -> u64 {
        let words = as_u32(mem);
        let (offsets, neighbors) = words.split_at(self.0.vertices + 1);
        let mut graph = HintedGraph { offsets, neighbors, fetch, ranges: Vec::new() };
        let never = |_: std::convert::Infallible| unreachable!();
        self.0.query_all(&mut graph).unwrap_or_else(never)
    }
    fn items(&self) -> u64 {
        self.0.items()
    }
}

/// The graph in a paged region, asking for the pages of what it reads next.
struct HintedGraph<'a, 'f> {
    offsets: &'a [u32],
    neighbors: &'a [u32],
    fetch: &'f mut Fetch<'f>,
    /// The requests' ranges (kept to spare an allocation per query).
    ranges: Vec<(u64, u64)>,
}

impl HintedGraph<'_, '_> {
    /// Asks for `offsets[v]` and `offsets[v + 1]` of every `v` of `vs`, then for their lists.
    fn ask(&mut self, vs: &[u32]) {
        self.ranges.clear();
        self.ranges.extend(vs.iter().map(|&v| (v as u64 * 4, 8)));
        (self.fetch)(&self.ranges);
        let base = self.offsets.len() as u64 * 4;
        self.ranges.clear();
        for &v in vs {
            let (a, b) = (self.offsets[v as usize] as u64, self.offsets[v as usize + 1] as u64);
            self.ranges.push((base + a * 4, (b - a) * 4));
        }
        (self.fetch)(&self.ranges);
    }
}

impl Graph for HintedGraph<'_, '_> {
    type Error = std::convert::Infallible;
    fn friends(&mut self, v: u32, out: &mut Vec<u32>) -> Result<(), Self::Error> {
        self.ask(&[v]);
        SliceGraph { offsets: self.offsets, neighbors: self.neighbors }.friends(v, out)
    }
    fn for_each_friend_list(&mut self, vs: &[u32], f: impl FnMut(&[u32])) -> Result<(), Self::Error> {
        self.ask(vs);
        SliceGraph { offsets: self.offsets, neighbors: self.neighbors }.for_each_friend_list(vs, f)
    }
}
