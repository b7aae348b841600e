//! The far arena: page-aligned blocks of one paged far-memory region, first fit with
//! coalescing. Made on first use; while it is being made, or if it could not be, callers
//! get a null pointer and use local memory instead.
//!
//! Blocks come whole from `malloc` and friends, and as anonymous mappings from `mmap`
//! ([`crate::maps`]), which may give back any page-aligned part of them (`munmap` of a part,
//! `mremap` shrinking): [`release_range`]. A mapping must read as zeros; the servers zero
//! what they hand out, so only space the arena handed out before (below its high-water
//! mark) is zeroed when it is handed out again ([`allocate_zeroed`]).

use crate::constants::{FAR_BYTES_DEFAULT, LOCAL_BYTES_DEFAULT, THRESHOLD_DEFAULT};
const PAGE: u64 = crate::constants::PAGE as u64;
use nam_farmem::{FaultMode, PagedRegion, PagerConfig};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

const UNMADE: u8 = 0;
const MAKING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// In a child made with `fork`, whose pager did not follow it ([`crate::maps`]): no new far
/// blocks, no pager calls, far blocks freed there are left alone.
const CHILD: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNMADE);
/// Offset below which the arena has handed space out since the region was made: space above
/// it is as the servers gave it, zeros.
static HIGH: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static BASE: AtomicU64 = AtomicU64::new(0);
static LEN: AtomicU64 = AtomicU64::new(0);
/// The two halves of the region: [`HEAP`] for the blocks of `malloc` and friends, [`MAPS`]
/// for anonymous mappings. Apart, because an allocator's mapping holds the allocator's own
/// blocks: `free` of one of them is the allocator's business, and it is told apart from a
/// far block by its address alone.
static BLOCKS: [Mutex<Blocks>; 2] = [
    Mutex::new(Blocks { free: BTreeMap::new(), used: BTreeMap::new() }),
    Mutex::new(Blocks { free: BTreeMap::new(), used: BTreeMap::new() }),
];
/// Index of the heap half in [`BLOCKS`] and [`HIGH`].
const HEAP: usize = 0;
/// Index of the mappings half.
const MAPS: usize = 1;
/// Offset where the mappings half begins.
static SPLIT: AtomicU64 = AtomicU64::new(0);

fn blocks(half: usize) -> std::sync::MutexGuard<'static, Blocks> {
    BLOCKS[half].lock().unwrap_or_else(|e| e.into_inner())
}

/// Which half the region offset `off` lies in.
fn half_of(off: u64) -> usize {
    if off < SPLIT.load(Ordering::Relaxed) {
        HEAP
    } else {
        MAPS
    }
}
static mut REGION: Option<&'static PagedRegion> = None;

/// Free and used blocks by offset.
struct Blocks {
    free: BTreeMap<u64, u64>,
    used: BTreeMap<u64, u64>,
}

/// The smallest block or mapping placed in far memory (`NAM_FARMEM_THRESHOLD`, default
/// [`THRESHOLD_DEFAULT`]).
pub fn threshold() -> usize {
    static T: AtomicU64 = AtomicU64::new(0);
    let t = T.load(Ordering::Relaxed);
    if t != 0 {
        return t as usize;
    }
    let v = env_bytes("NAM_FARMEM_THRESHOLD").unwrap_or(THRESHOLD_DEFAULT).max(PAGE);
    T.store(v, Ordering::Relaxed);
    v as usize
}

fn env_bytes(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let (digits, mult) = match v.trim_end_matches(['B', 'b', 'i']).char_indices().last() {
        Some((i, 'K' | 'k')) => (&v[..i], 1 << 10),
        Some((i, 'M' | 'm')) => (&v[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    match digits.trim().parse::<u64>() {
        Ok(n) => Some(n * mult),
        Err(_) => {
            eprintln!("nam-farmem-preload: ignoring {name}={v:?}: not a size such as 512MiB");
            None
        }
    }
}

/// The far arena's first and end addresses, once it is made.
pub fn bounds() -> Option<(usize, usize)> {
    let base = BASE.load(Ordering::Acquire);
    (base != 0).then(|| (base as usize, (base + LEN.load(Ordering::Relaxed)) as usize))
}

/// Whether `ptr` points into the far arena's heap half: a block of `malloc` and friends
/// (anonymous mappings, in the other half, hold the program allocator's blocks).
pub fn contains(ptr: *const u8) -> bool {
    let base = BASE.load(Ordering::Acquire);
    let p = ptr as u64;
    base != 0 && p >= base && p < base + SPLIT.load(Ordering::Relaxed)
}

/// Makes the region now if it was not tried yet (see [`crate::maps`] for when a mapping
/// may); returns whether it is ready.
pub(crate) fn make() -> bool {
    // SAFETY: getenv with NUL-terminated names.
    let restarting = unsafe {
        !libc::getenv(c"NAM_SERVERS".as_ptr()).is_null() && libc::getenv(c"UCX_MEM_EVENTS".as_ptr()).is_null()
    };
    if restarting {
        // Another library's constructor allocates before this library's has restarted the
        // program without UCX's memory hooks (`without_ucx_memory_hooks`): no region yet,
        // it would be made for nothing.
        return false;
    }
    match STATE.compare_exchange(UNMADE, MAKING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(state) => return state == READY,
    }
    // Before the first fault: a signal-mode fault must not look symbols up.
    crate::syscalls::resolve();
    exit_on_panic();
    match make_region() {
        Ok(region) => {
            let region: &'static PagedRegion = Box::leak(Box::new(region));
            let len = region.len();
            let split = (len / 2).next_multiple_of(PAGE);
            SPLIT.store(split, Ordering::Relaxed);
            HIGH[MAPS].store(split, Ordering::Relaxed);
            blocks(HEAP).free.insert(0, split);
            blocks(MAPS).free.insert(split, len - split);
            // SAFETY: written once, before READY is published; read only after READY.
            unsafe { REGION = Some(region) };
            LEN.store(len, Ordering::Relaxed);
            BASE.store(region.as_ptr() as u64, Ordering::Release);
            if std::env::var_os("NAM_FARMEM_STATS").is_some() {
                // SAFETY: registers a plain extern "C" function.
                unsafe { libc::atexit(print_stats) };
            }
            crate::maps::watch_forks();
            STATE.store(READY, Ordering::Release);
            announce(region);
            true
        }
        Err(e) => {
            eprintln!("nam-farmem-preload: far memory unavailable, using local memory: {e}");
            STATE.store(FAILED, Ordering::Release);
            false
        }
    }
}

/// Makes a panic in this library's code (a bug) end the process as a far-memory failure
/// does: a C program cannot catch it, and the `abort()` a panic in an `extern "C"` function
/// ends in would run the program's SIGABRT handler, which may touch far memory that can no
/// longer be served (or block on a lock the panicking code held).
fn exit_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        nam_farmem::exit_fatal(&format!("panic in the far-memory library: {info}"));
    }));
}

/// The one line on stderr that says far memory is in use, how much, and what stays local.
fn announce(region: &PagedRegion) {
    let local = env_bytes("NAM_FARMEM_LOCAL_BYTES").unwrap_or(LOCAL_BYTES_DEFAULT);
    eprintln!(
        "nam-farmem-preload: far memory in use: {} MiB of address space, {} MiB local budget; \
         blocks and anonymous mappings of {} KiB and more go to far memory, smaller blocks stay \
         with the program's allocator (its heap is far where it maps it with mmap); \
         NAM_FARMEM_STATS=1 reports what stayed local",
        region.len() >> 20,
        local >> 20,
        threshold() >> 10
    );
}

/// The far address space when `NAM_FARMEM_BYTES` is unset: twice the machine's memory
/// (whole GiB), [`FAR_BYTES_DEFAULT`] at least. Each half of the region (blocks, mappings)
/// then takes any request a program could make of local memory: programs size buffers by
/// the machine's memory (GNU sort asked for 2.6 GB at once on a 23 GB machine, more than
/// the 2 GiB half of a 4 GiB region, and its whole buffer stayed local). Address space
/// costs nothing until pages are written: the mapping reserves no memory, the servers
/// allocate chunks on first write, and the pager's per-page tables start as zeros the
/// allocator does not write.
pub fn far_bytes_default() -> u64 {
    // SAFETY: sysconf takes a name and returns a value or -1.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let memory = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
    memory.saturating_mul(2).next_multiple_of(1 << 30).clamp(FAR_BYTES_DEFAULT, nam_farmem::constants::FAR_BYTES_MAX)
}

fn make_region() -> Result<PagedRegion, Box<dyn std::error::Error>> {
    let client = nam_client::Client::from_env()?;
    let bytes = env_bytes("NAM_FARMEM_BYTES").unwrap_or_else(far_bytes_default);
    let local = env_bytes("NAM_FARMEM_LOCAL_BYTES").unwrap_or(LOCAL_BYTES_DEFAULT);
    let mut config = PagerConfig::new(bytes, local);
    if std::env::var("NAM_FARMEM_HUGE_PAGES").is_ok_and(|v| matches!(v.trim(), "1" | "on")) {
        config = config.with_huge_pages();
    }
    let prefetch = env_on("NAM_FARMEM_PREFETCH");
    config.prefetch.enabled = prefetch; // the pager's own window, switched on or off
    config.predict_writes = env_on("NAM_FARMEM_PREDICT_WRITES");
    config.evict_ahead = env_on("NAM_FARMEM_EVICT_AHEAD");
    if let Some(w) = env_watermarks("NAM_FARMEM_WATERMARKS") {
        config.watermarks = w;
    }
    config.throttle.enabled = env_on("NAM_FARMEM_THROTTLE");
    config.fault_mode = match std::env::var("NAM_FARMEM_FAULT_MODE").as_deref().map(str::trim) {
        Ok("signal") => FaultMode::Signal,
        Ok("thread") | Err(_) => FaultMode::Thread,
        Ok(other) => {
            eprintln!("nam-farmem-preload: ignoring NAM_FARMEM_FAULT_MODE={other:?}: not thread or signal");
            FaultMode::Thread
        }
    };
    if let Some(us) = std::env::var("NAM_FARMEM_SPIN_US").ok().and_then(|v| v.trim().parse().ok()) {
        config.spin_us = us;
    }
    hold_cpu_latency();
    Ok(PagedRegion::new(std::sync::Arc::new(client), config)?)
}

/// `NAM_FARMEM_CPU_LATENCY_US`: holds the CPU latency bound for the rest of the process
/// (`nam_farmem::CpuLatencyBound`). A bound the kernel refuses is a tuning that did not
/// happen, not a reason to leave far memory: the library says why and goes on without it.
fn hold_cpu_latency() {
    static BOUND: std::sync::OnceLock<nam_farmem::CpuLatencyBound> = std::sync::OnceLock::new();
    let Ok(text) = std::env::var("NAM_FARMEM_CPU_LATENCY_US") else { return };
    let Ok(us) = text.trim().parse::<u32>() else {
        eprintln!("nam-farmem-preload: ignoring NAM_FARMEM_CPU_LATENCY_US={text:?}: not a number of microseconds");
        return;
    };
    match nam_farmem::CpuLatencyBound::hold(us) {
        Ok(bound) => {
            let _ = BOUND.set(bound);
        }
        Err(e) => eprintln!("nam-farmem-preload: NAM_FARMEM_CPU_LATENCY_US={us} not applied: {e}"),
    }
}

/// Background reclaim's watermarks as `LOW,HIGH`, percentages of the budget kept free
/// (`nam_farmem::Watermarks`; default 2,5); `None` (with a message) when unset or malformed.
fn env_watermarks(name: &str) -> Option<nam_farmem::Watermarks> {
    let text = std::env::var(name).ok()?;
    let per_mille =
        |s: &str| s.trim().parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p)).map(|p| (p * 10.0) as u32);
    match text.split_once(',').map(|(l, h)| (per_mille(l), per_mille(h))) {
        Some((Some(low_per_mille), Some(high_per_mille))) if low_per_mille < high_per_mille => {
            Some(nam_farmem::Watermarks { low_per_mille, high_per_mille })
        }
        _ => {
            eprintln!(
                "nam-farmem-preload: ignoring {name}={text:?}: not LOW,HIGH percentages of the budget, LOW < HIGH"
            );
            None
        }
    }
}

/// An on/off switch that is on unless set to `off`.
fn env_on(name: &str) -> bool {
    std::env::var(name).map(|v| v.trim() != "off").unwrap_or(true)
}

extern "C" fn print_stats() {
    if let Some(region) = region() {
        let s = region.stats();
        eprintln!("nam-farmem-preload: {}", crate::report::summary());
        eprintln!(
            "nam-farmem-preload: {} bytes allocated in far memory, {} resident pages, misses {}, prefetches {}, evictions {}, write-backs {}, write faults {}, predicted writes {}, prefetches used {}, wasted {}, page size {} bytes, zero fills {}, given up {}",
            allocated_bytes(),
            region.resident_pages(),
            s.misses,
            s.prefetches,
            s.evictions,
            s.writebacks,
            s.write_faults,
            s.predicted_writes,
            s.prefetch_hits,
            s.prefetch_wasted,
            region.page_bytes(),
            s.zero_fills,
            s.given_up
        );
    }
}

/// Marks this process as a child made with `fork` (see [`crate::maps`]): the pager's
/// thread did not follow, so nothing may wait on it.
pub(crate) fn become_child() {
    if STATE.load(Ordering::Acquire) == READY {
        STATE.store(CHILD, Ordering::Release);
    }
}

/// Whether this process is a `fork` child of one whose far memory was in use.
pub fn in_child() -> bool {
    STATE.load(Ordering::Acquire) == CHILD
}

/// Whether the region was never tried.
pub(crate) fn unmade() -> bool {
    STATE.load(Ordering::Acquire) == UNMADE
}

/// Whether the region is made and serving (not in a `fork` child).
pub fn ready() -> bool {
    STATE.load(Ordering::Acquire) == READY
}

/// The paged region, once made.
pub fn region() -> Option<&'static PagedRegion> {
    if STATE.load(Ordering::Acquire) != READY {
        return None;
    }
    // SAFETY: REGION was written before READY was published and never again.
    unsafe { *std::ptr::addr_of!(REGION) }
}

/// Bytes currently allocated from the arena.
pub fn allocated_bytes() -> u64 {
    BLOCKS.iter().map(|b| b.lock().unwrap_or_else(|e| e.into_inner()).used.values().sum::<u64>()).sum()
}

/// A block of at least `size` bytes aligned to `align` (at most a page), or null when the
/// arena is not available or full.
pub fn allocate(size: usize, align: usize) -> *mut u8 {
    if align > PAGE as usize || !make() {
        return std::ptr::null_mut();
    }
    let Some((off, used_before)) = take(HEAP, size) else { return std::ptr::null_mut() };
    if used_before > 0 {
        if let Some(region) = region() {
            // Space freed before (`release`): its resident pages are live again. Out of
            // range cannot be: the block is the arena's.
            let _ = region.reuse_range(off, used_before);
        }
    }
    (BASE.load(Ordering::Relaxed) + off) as *mut u8
}

/// Takes a free run of `size` bytes (rounded up to pages) from `half` and returns its offset
/// and how much of it lies below the half's high-water mark (handed out before: not zeros).
fn take(half: usize, size: usize) -> Option<(u64, u64)> {
    let len = (size as u64).div_ceil(PAGE).max(1) * PAGE;
    let mut blocks = blocks(half);
    let (&off, &free_len) = blocks.free.iter().find(|(_, &l)| l >= len)?;
    blocks.free.remove(&off);
    if free_len > len {
        blocks.free.insert(off + len, free_len - len);
    }
    blocks.used.insert(off, len);
    let high = HIGH[half].fetch_max(off + len, Ordering::Relaxed);
    Some((off, high.saturating_sub(off).min(len)))
}

/// A block of `size` bytes (rounded up to pages) that reads as zeros, as a new anonymous
/// mapping does; null when the region is not ready (made by the caller, see
/// [`crate::maps`]) or full.
pub fn allocate_zeroed(size: usize) -> *mut u8 {
    if !ready() {
        return std::ptr::null_mut();
    }
    let Some((off, used_before)) = take(MAPS, size) else { return std::ptr::null_mut() };
    let p = (BASE.load(Ordering::Relaxed) + off) as *mut u8;
    zero(off, used_before);
    p
}

/// Makes the far block at `ptr` (from [`allocate`], of `size` bytes) read as zeros, for
/// `calloc`: its whole pages through the pager, which fetches none of them and drops any
/// resident (`zero`).
pub fn zero_block(ptr: *mut u8, size: usize) {
    let off = ptr as u64 - BASE.load(Ordering::Relaxed);
    zero(off, (size as u64).div_ceil(PAGE).max(1) * PAGE);
}

/// Makes the region's bytes `off..off + len` (whole pages) read as zeros: through the pager,
/// which fetches none of them (`PagedRegion::zero_range`), or by writing zeros where the
/// pager's pages are huge and the range is not whole ones.
fn zero(off: u64, len: u64) {
    if len == 0 {
        return;
    }
    if let Some(region) = region().filter(|r| off.is_multiple_of(r.page_bytes()) && len.is_multiple_of(r.page_bytes()))
    {
        match region.zero_range(off, len) {
            Ok(_) => return,
            Err(e) => nam_farmem::exit_fatal(&format!("zeroing far memory for a new mapping: {e}")),
        }
    }
    // SAFETY: `len` bytes of the arena from `off`, taken by the caller.
    unsafe { std::ptr::write_bytes((BASE.load(Ordering::Relaxed) + off) as *mut u8, 0, len as usize) };
}

/// Tells the pager that the region's bytes `off..off + len` are unmapped, as `munmap` tells
/// the kernel (`PagedRegion::discard_range`): their resident pages leave the local budget at
/// once without a write-back (a mapping made there later must read as zeros, so they could
/// not serve it), and no page of them is fetched again, but installed from zeros when
/// touched: the old contents would be written back and read over the network only to be
/// overwritten. Called with the half's lock held, so that no other thread has the space
/// again before the pager has forgotten it.
fn discard(off: u64, len: u64) {
    if let Some(region) = region() {
        // Out of range cannot be (the block is the arena's); a failed drop leaves the pages
        // resident, to be written back at eviction as before, which loses nothing.
        let _ = region.discard_range(off, len);
    }
}

/// Gives the pages `addr..addr + len` (page-aligned, in the arena) back, whichever blocks
/// they belong to: the parts of those blocks outside the range stay allocated. Pages of the
/// range that are not allocated are left as they are (`munmap` of unmapped pages succeeds).
pub fn release_range(addr: usize, len: usize) {
    let base = BASE.load(Ordering::Relaxed);
    let (start, end) = (addr as u64 - base, (addr + len) as u64 - base);
    let split = SPLIT.load(Ordering::Relaxed);
    if start < split && end > split {
        release_range(addr, (split - start) as usize);
        release_range((base + split) as usize, (end - split) as usize);
        return;
    }
    let mut blocks = blocks(half_of(start));
    let first =
        blocks.used.range(..start).next_back().map_or(start, |(&off, &l)| if off + l > start { off } else { start });
    let overlapping: Vec<(u64, u64)> = blocks.used.range(first..end).map(|(&o, &l)| (o, l)).collect();
    for (off, block_len) in overlapping {
        blocks.used.remove(&off);
        let block_end = off + block_len;
        if off < start {
            blocks.used.insert(off, start - off);
        }
        if block_end > end {
            blocks.used.insert(end, block_end - end);
        }
        let (free_start, free_end) = (off.max(start), block_end.min(end));
        free_run(&mut blocks, free_start, free_end - free_start);
        discard(free_start, free_end - free_start);
    }
}

/// Grows the block at `addr` from `old_len` to `new_len` bytes (both page multiples) in
/// place, if the pages after it are free; the new pages read as zeros. For `mremap`.
pub fn grow_in_place(addr: usize, old_len: usize, new_len: usize) -> bool {
    let base = BASE.load(Ordering::Relaxed);
    let (off, old, new) = (addr as u64 - base, old_len as u64, new_len as u64);
    let half = half_of(off);
    let mut blocks = blocks(half);
    if blocks.used.get(&off) != Some(&old) {
        return false;
    }
    let Some(&free_len) = blocks.free.get(&(off + old)) else { return false };
    if free_len < new - old {
        return false;
    }
    blocks.free.remove(&(off + old));
    if free_len > new - old {
        blocks.free.insert(off + new, free_len - (new - old));
    }
    blocks.used.insert(off, new);
    drop(blocks);
    let high = HIGH[half].fetch_max(off + new, Ordering::Relaxed);
    let dirty = high.saturating_sub(off + old).min(new - old);
    zero(off + old, dirty);
    true
}

/// Returns `off..off + len` to the free runs, merged with its free neighbours.
fn free_run(blocks: &mut Blocks, mut off: u64, mut len: u64) {
    if let Some((&next, &next_len)) = blocks.free.range(off + len..).next() {
        if next == off + len {
            blocks.free.remove(&next);
            len += next_len;
        }
    }
    if let Some((&prev, &prev_len)) = blocks.free.range(..off).next_back() {
        if prev + prev_len == off {
            blocks.free.remove(&prev);
            off = prev;
            len += prev_len;
        }
    }
    blocks.free.insert(off, len);
}

/// Usable size of the arena block at `ptr` (0 if it is not one).
pub fn usable_size(ptr: *const u8) -> usize {
    let off = ptr as u64 - BASE.load(Ordering::Relaxed);
    blocks(HEAP).used.get(&off).copied().unwrap_or(0) as usize
}

/// Returns the block at `ptr` to the arena.
pub fn release(ptr: *mut u8) {
    if in_child() {
        return; // the parent's lock may have been held at the fork: the block is left
    }
    let off = ptr as u64 - BASE.load(Ordering::Relaxed);
    let mut blocks = blocks(HEAP);
    let Some(len) = blocks.used.remove(&off) else {
        // Not abort(): the program's SIGABRT handler could touch far memory or free again.
        drop(blocks);
        nam_farmem::exit_fatal(&format!("free of {ptr:p}, which is not an allocated far block (freed twice?)"));
    };
    free_run(&mut blocks, off, len);
    // Before the lock goes: once it does, another thread may take the block and write it,
    // and the pager would then take those writes for dead.
    if let Some(region) = region() {
        // As `MADV_FREE` (`PagedRegion::free_range`): the block's resident pages stay for
        // the next block here (numpy's next array of the same size) and are not written
        // back while the space is free; `allocate` hands the space out again with
        // `reuse_range`. Out of range cannot be: the block is the arena's.
        let _ = region.free_range(off, len);
    }
}
