//! The far arena: page-aligned blocks of one paged far-memory region, first fit with
//! coalescing. Made on first use; while it is being made, or if it could not be, callers
//! get a null pointer and use local memory instead.

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

static STATE: AtomicU8 = AtomicU8::new(UNMADE);
static BASE: AtomicU64 = AtomicU64::new(0);
static LEN: AtomicU64 = AtomicU64::new(0);
static BLOCKS: Mutex<Blocks> = Mutex::new(Blocks { free: BTreeMap::new(), used: BTreeMap::new() });
static mut REGION: Option<&'static PagedRegion> = None;

/// Free and used blocks by offset.
struct Blocks {
    free: BTreeMap<u64, u64>,
    used: BTreeMap<u64, u64>,
}

/// The smallest request served from far memory (`NAM_FARMEM_THRESHOLD`, default 1 MiB).
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

/// Whether `ptr` points into the far arena.
pub fn contains(ptr: *const u8) -> bool {
    let base = BASE.load(Ordering::Acquire);
    let p = ptr as u64;
    base != 0 && p >= base && p < base + LEN.load(Ordering::Relaxed)
}

fn make() -> bool {
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
            BLOCKS.lock().unwrap_or_else(|e| e.into_inner()).free.insert(0, len);
            // SAFETY: written once, before READY is published; read only after READY.
            unsafe { REGION = Some(region) };
            LEN.store(len, Ordering::Relaxed);
            BASE.store(region.as_ptr() as u64, Ordering::Release);
            if std::env::var_os("NAM_FARMEM_STATS").is_some() {
                // SAFETY: registers a plain extern "C" function.
                unsafe { libc::atexit(print_stats) };
            }
            STATE.store(READY, Ordering::Release);
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

fn make_region() -> Result<PagedRegion, Box<dyn std::error::Error>> {
    let client = nam_client::Client::from_env()?;
    let bytes = env_bytes("NAM_FARMEM_BYTES").unwrap_or(FAR_BYTES_DEFAULT);
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
        eprintln!(
            "nam-farmem-preload: {} bytes allocated in far memory, {} resident pages, misses {}, prefetches {}, evictions {}, write-backs {}, write faults {}, predicted writes {}, prefetches used {}, wasted {}, page size {} bytes",
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
            region.page_bytes()
        );
    }
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
    BLOCKS.lock().unwrap_or_else(|e| e.into_inner()).used.values().sum()
}

/// A block of at least `size` bytes aligned to `align` (at most a page), or null when the
/// arena is not available or full.
pub fn allocate(size: usize, align: usize) -> *mut u8 {
    if align > PAGE as usize || !make() {
        return std::ptr::null_mut();
    }
    let len = (size as u64).div_ceil(PAGE).max(1) * PAGE;
    let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let Some((&off, &free_len)) = blocks.free.iter().find(|(_, &l)| l >= len) else {
        return std::ptr::null_mut();
    };
    blocks.free.remove(&off);
    if free_len > len {
        blocks.free.insert(off + len, free_len - len);
    }
    blocks.used.insert(off, len);
    (BASE.load(Ordering::Relaxed) + off) as *mut u8
}

/// Usable size of the arena block at `ptr` (0 if it is not one).
pub fn usable_size(ptr: *const u8) -> usize {
    let off = ptr as u64 - BASE.load(Ordering::Relaxed);
    BLOCKS.lock().unwrap_or_else(|e| e.into_inner()).used.get(&off).copied().unwrap_or(0) as usize
}

/// Returns the block at `ptr` to the arena.
pub fn release(ptr: *mut u8) {
    let mut off = ptr as u64 - BASE.load(Ordering::Relaxed);
    let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut len) = blocks.used.remove(&off) else {
        // Not abort(): the program's SIGABRT handler could touch far memory or free again.
        drop(blocks);
        nam_farmem::exit_fatal(&format!("free of {ptr:p}, which is not an allocated far block (freed twice?)"));
    };
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
